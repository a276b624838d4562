//! The B38 benches: `b38` (ours ÷ the set-based floor) and `b38-baseline` (a
//! GitLab-pattern baseline ÷ ours); the keyset page benches are in `keyset`.
//!
//! Owns: the floor (one DELETE of every expired row with its notification settings,
//! then one set-based authorization refresh of every affected pair), the baseline (one
//! round trip per statement, per member). All
//! sides of a comparison run on clones of one data set in the same run, and must leave
//! the same rows (their checksums are compared and reported).

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use tokio_postgres::Client;

use super::b38_scale;
use super::data::{self, B38Sizes};
use super::{prewarm, ratio, secs, BenchDbs, Options, Row, Scale, Target};
use crate::local::Runner;
use shared::batches::remove_expired_members::read_page;
use shared::config::Settings;
use shared::db::Connector;
use shared::error::{Error, Result};
use shared::function::Function;
use shared::gitlab::authz;
use shared::locks;
use shared::messages::MemberCursor;

const F: Function = Function::RemoveExpiredMembers;

/// Lambda memory of the template (`infra/template.yaml`, parameter `MemorySize`).
pub const TEMPLATE_MEMORY_MB: f64 = 256.0;

/// What one side of the B38 comparison did.
#[derive(Debug, Clone)]
pub struct Side {
    /// Wall time.
    pub time: Duration,
    /// Members removed.
    pub removed: i64,
    /// The checksum of the rows afterwards.
    pub checksum: String,
    /// Handler runs (ours) or pages (baseline); 1 for the floor.
    pub invocations: u64,
    /// Ours: the time at which the first `sample_pages` pages were done.
    pub sample: Option<Duration>,
    /// The baseline: its longest transaction (one member's), BEGIN → COMMIT.
    pub longest_tx: Option<Duration>,
}

/// Ours: `remove-expired-members` until idle through the local runner (virtual
/// continuation delays, the session kept across handler runs as a warm Lambda keeps
/// it): the cron message, then every
/// message it causes, one `Runner::invoke` each, in the runner's delivery order (what
/// `Runner::drain` does), noting when the first `sample_pages` runs were done. With
/// `stop_at_sample`, it stops there (only the baseline's sample is compared).
pub async fn ours(
    connector: Connector,
    check: &Client,
    opts: &Options,
    sample_pages: Option<u64>,
    stop_at_sample: bool,
) -> Result<Side> {
    let before = data::expired_count(check, opts.today()).await?;
    let mut runner = Runner::new(connector, Settings::default(), opts.now).with_kept_sessions();
    let cron = runner.cron_message(F);
    runner
        .queue()
        .push(shared::queue::OutMessage::new(F, 0, cron));
    let start = Instant::now();
    let mut sample = None;
    let mut runs = 0u64;
    while let Some(p) = runner.queue().pop() {
        let body = p.message.envelope.to_body();
        let (_, outcome) = runner
            .invoke(p.message.receiver, &body, p.receive_count)
            .await?;
        if !outcome.is_success() {
            return Err(Error::Invariant("b38: a run failed".into()));
        }
        runs += 1;
        if Some(runs) == sample_pages {
            sample = Some(start.elapsed());
            if stop_at_sample {
                break;
            }
        }
    }
    let time = start.elapsed();
    let after = data::expired_count(check, opts.today()).await?;
    Ok(Side {
        time,
        removed: before - after,
        checksum: data::checksum(check).await?,
        invocations: runs,
        sample,
        longest_tx: None,
    })
}

/// The floor: one set-based DELETE of the same rows (with their notification
/// settings) and one set-based refresh of every affected (user, project) pair, in one
/// transaction. No locks, no paging, no per-member rule.
pub async fn floor(c: &mut Client, today: NaiveDate) -> Result<Side> {
    let before = data::expired_count(c, today).await?;
    let start = Instant::now();
    let tx = c.transaction().await?;
    tx.batch_execute(
        "CREATE TEMP TABLE floor_removed (u bigint, st text, sid bigint) ON COMMIT DROP",
    )
    .await?;
    tx.execute(
        "WITH del AS (
           DELETE FROM members m WHERE m.expires_at IS NOT NULL AND m.expires_at <= $1::date
           RETURNING m.user_id::bigint AS user_id, m.source_type, m.source_id::bigint AS source_id
         ),
         ns AS (
           DELETE FROM notification_settings n USING del
           WHERE n.user_id = del.user_id AND n.source_type = del.source_type
             AND n.source_id = del.source_id
         )
         INSERT INTO floor_removed SELECT user_id, source_type, source_id FROM del
         WHERE user_id IS NOT NULL",
        &[&today],
    )
    .await?;
    tx.batch_execute("ANALYZE floor_removed").await?;
    tx.query_one(&floor_refresh_sql(), &[]).await?;
    tx.commit().await?;
    let time = start.elapsed();
    let after = data::expired_count(c, today).await?;
    Ok(Side {
        time,
        removed: before - after,
        checksum: data::checksum(c).await?,
        invocations: 1,
        sample: None,
        longest_tx: None,
    })
}

/// The GitLab-pattern baseline: the same keyset pages, then per member one round trip
/// per statement: load the member, load its user, load its source, BEGIN, delete the
/// member, delete its notification setting, refresh that user's authorizations (the
/// user's lock, then the refresh of `affected(m)`), COMMIT. Statements are prepared
/// once, so each costs exactly one round trip. With `max_pages`, it stops after that
/// many pages (the full-scale sample).
pub async fn baseline(c: &mut Client, today: NaiveDate, max_pages: Option<u64>) -> Result<Side> {
    let before = data::expired_count(c, today).await?;
    let start = Instant::now();
    let load_member = c
        .prepare(
            "SELECT id::bigint, user_id::bigint, source_type, source_id::bigint FROM members
             WHERE id = $1::bigint",
        )
        .await?;
    let load_user = c
        .prepare("SELECT id::bigint, state, user_type FROM users WHERE id = $1::bigint")
        .await?;
    let load_project = c
        .prepare("SELECT id::bigint, namespace_id::bigint FROM projects WHERE id = $1::bigint")
        .await?;
    let load_group = c
        .prepare("SELECT id::bigint, traversal_ids::bigint[] FROM namespaces WHERE id = $1::bigint")
        .await?;
    let delete = c
        .prepare("DELETE FROM members WHERE id = $1::bigint")
        .await?;
    let delete_ns = c
        .prepare(
            "DELETE FROM notification_settings
             WHERE user_id = $1::bigint AND source_type = $2 AND source_id = $3::bigint",
        )
        .await?;
    let lock = c.prepare("SELECT pg_advisory_xact_lock($1)").await?;
    let refresh = c.prepare(authz::sql::REFRESH_REMOVED).await?;
    let mut cursor: Option<MemberCursor> = None;
    let mut pages = 0u64;
    let mut longest = Duration::ZERO;
    loop {
        let (page, has_next) = read_page(&*c, today, cursor).await?;
        pages += 1;
        for &(_, id) in &page {
            let Some(m) = c.query_opt(&load_member, &[&id]).await? else {
                continue;
            };
            let user_id: Option<i64> = m.get(1);
            let source_type: String = m.get(2);
            let source_id: i64 = m.get(3);
            if let Some(u) = user_id {
                c.query_opt(&load_user, &[&u]).await?;
            }
            if source_type == "Project" {
                c.query_opt(&load_project, &[&source_id]).await?;
            } else {
                c.query_opt(&load_group, &[&source_id]).await?;
            }
            let began = Instant::now();
            let tx = c.transaction().await?;
            tx.execute(&delete, &[&id]).await?;
            if let Some(u) = user_id {
                tx.execute(&delete_ns, &[&u, &source_type, &source_id])
                    .await?;
                let key = locks::lock_key(&format!("project-authorizations:{u}"));
                tx.query_one(&lock, &[&key]).await?;
                let (pu, pp, gu, gg) = if source_type == "Project" {
                    (vec![u], vec![source_id], vec![], vec![])
                } else {
                    (vec![], vec![], vec![u], vec![source_id])
                };
                tx.query_one(&refresh, &[&pu, &pp, &gu, &gg, &vec![u]])
                    .await?;
            }
            tx.commit().await?;
            longest = longest.max(began.elapsed());
        }
        match (has_next, page.last()) {
            (true, Some(&(expires_at, id))) if Some(pages) != max_pages => {
                cursor = Some(MemberCursor { expires_at, id })
            }
            _ => break,
        }
    }
    let time = start.elapsed();
    let after = data::expired_count(c, today).await?;
    Ok(Side {
        time,
        removed: before - after,
        checksum: data::checksum(c).await?,
        invocations: pages,
        sample: None,
        longest_tx: Some(longest),
    })
}

fn per_member(side: &Side) -> String {
    let us = side.time.as_secs_f64() * 1e6 / (side.removed.max(1) as f64);
    format!("{us:.1} µs/member")
}

/// `b38` and/or `b38-baseline` on one data set of `scale.b38_members` expired rows.
pub async fn run(
    scale: &Scale,
    opts: &Options,
    dbs: &mut BenchDbs,
    with_floor: bool,
    with_baseline: bool,
    extra: (bool, bool, bool),
) -> Result<Vec<Row>> {
    let (with_groups, with_one_date, with_linear) = extra;
    let today = opts.today();
    let sizes = B38Sizes::for_expired(scale.b38_members);
    {
        let src = dbs.create("b38_src").await?;
        data::b38(&src, today, sizes).await?;
    }
    // One clone at a time (disk is shared): each side gets a fresh copy of the source.
    let mut rows = Vec::new();
    // Each side runs alone: the floor's database is dropped before ours starts, so
    // neither its buffers nor the autovacuum its mass delete triggers compete with ours.
    let floor_side = if with_floor {
        dbs.clone_db("b38_src", "b38_floor").await?;
        let mut c = dbs.connector("b38_floor")?.connect("hk-bench").await?;
        prewarm(&c).await?;
        let s0 = b38_scale::snapshot(&c).await?;
        let side = floor(&mut c, today).await?;
        let imp = b38_scale::since(&c, &s0).await?;
        drop(c);
        dbs.drop_db("b38_floor").await?;
        Some((side, imp))
    } else {
        None
    };
    dbs.clone_db("b38_src", "b38_ours").await?;
    let check = dbs.connector("b38_ours")?.connect("hk-bench").await?;
    prewarm(&check).await?;
    // Without the floor, ours only needs to cover the baseline's sample pages.
    let sample_only = !with_floor
        && !with_groups
        && !with_one_date
        && !with_linear
        && scale.baseline_pages.is_some();
    shared::batches::remove_expired_members::reset_group_stats();
    let s0 = b38_scale::snapshot(&check).await?;
    let ours_side = ours(
        dbs.handler_connector("b38_ours")?,
        &check,
        opts,
        scale.baseline_pages,
        sample_only,
    )
    .await?;
    let mut ours_imp = b38_scale::since(&check, &s0).await?;
    let (longest, locked) = shared::batches::remove_expired_members::group_stats();
    (ours_imp.longest, ours_imp.rows_locked) = (Some(longest), Some(locked));
    drop(check);
    if !sample_only && ours_side.removed != sizes.expired as i64 {
        return Err(Error::Invariant(format!(
            "b38: ours removed {} of {} members",
            ours_side.removed, sizes.expired
        )));
    }
    let size = format!(
        "{} expired members ({} users, {} groups, {} projects, {} live members)",
        sizes.expired,
        sizes.users,
        3 * sizes.top_groups,
        6 * sizes.top_groups,
        sizes.live + sizes.top_groups
    );
    if let Some((fl, fl_imp)) = &floor_side {
        rows.push(b38_scale::impact_row(
            "ours",
            &ours_side,
            &ours_imp,
            &format!("≤ {} (one group)", ours_imp.rows_locked.unwrap_or(0)),
        ));
        rows.push(b38_scale::impact_row(
            "floor",
            fl,
            fl_imp,
            &format!("{} (every expired row, one transaction)", fl.removed),
        ));
        let same = if fl.checksum == ours_side.checksum {
            "same rows afterwards"
        } else {
            "ROWS DIFFER"
        };
        rows.push(Row::new(
            "b38",
            format!("ours ÷ floor, {size}"),
            format!(
                "ours {} ({}, {} handler runs); floor {} ({}); {same}",
                secs(ours_side.time),
                per_member(&ours_side),
                ours_side.invocations,
                secs(fl.time),
                per_member(fl),
            ),
            ratio(ours_side.time, fl.time),
            "×",
            Some(Target::le(1.5)),
        ));
        if fl.checksum != ours_side.checksum {
            return Err(Error::Invariant(format!(
                "b38: ours and the floor left different rows: {} vs {}",
                ours_side.checksum, fl.checksum
            )));
        }
    }
    // The cost line: Lambda GB-seconds per 1,000,000 memberships at the template memory.
    if !sample_only {
        let gbs = ours_side.time.as_secs_f64() / (ours_side.removed.max(1) as f64)
            * 1e6
            * TEMPLATE_MEMORY_MB
            / 1024.0;
        rows.push(Row::new(
            "b38-cost",
            "Lambda GB-seconds per 1,000,000 memberships removed, at MemorySize 256 MB",
            format!(
                "from ours: {} for {} members; ≈ ${:.4} at arm64's list price ($0.0000133334 per GB-s), plus {:.0} requests",
                secs(ours_side.time),
                ours_side.removed,
                gbs * 0.000_013_333_4,
                ours_side.invocations as f64 * 1e6 / ours_side.removed.max(1) as f64
            ),
            gbs,
            "GB-s",
            None,
        ));
    }
    dbs.drop_db("b38_ours").await?;
    if with_baseline {
        dbs.clone_db("b38_src", "b38_base").await?;
        let mut c = dbs.connector("b38_base")?.connect("hk-bench").await?;
        prewarm(&c).await?;
        let s0 = b38_scale::snapshot(&c).await?;
        let base = baseline(&mut c, today, scale.baseline_pages).await?;
        let mut base_imp = b38_scale::since(&c, &s0).await?;
        base_imp.longest = base.longest_tx;
        rows.push(b38_scale::impact_row(
            "GitLab-pattern baseline",
            &base,
            &base_imp,
            "1 (one member per transaction)",
        ));
        // At full scale the baseline covers the first pages only (it needs a round trip
        // per statement per member): it is compared with ours on those same pages.
        let (ours_time, scope) = match (scale.baseline_pages, ours_side.sample) {
            (Some(n), Some(t)) => (t, format!("first {n} pages ({} members)", base.removed)),
            _ => (ours_side.time, "every page".to_string()),
        };
        let same = match scale.baseline_pages {
            None if base.checksum == ours_side.checksum => "; same rows afterwards",
            None => "; ROWS DIFFER",
            Some(_) => "",
        };
        let ours_rate = ours_time.as_secs_f64() * 1e6 / base.removed.max(1) as f64;
        rows.push(Row::new(
            "b38-baseline",
            format!("GitLab-pattern baseline ÷ ours, {size}; {scope}"),
            format!(
                "baseline {} ({}); ours {} ({ours_rate:.1} µs/member){same}",
                secs(base.time),
                per_member(&base),
                secs(ours_time),
            ),
            ratio(base.time, ours_time),
            "×",
            Some(Target::ge(10.0)),
        ));
        if scale.baseline_pages.is_none() && base.checksum != ours_side.checksum {
            return Err(Error::Invariant(format!(
                "b38: the baseline and ours left different rows: {} vs {}",
                base.checksum, ours_side.checksum
            )));
        }
        drop(c);
        dbs.drop_db("b38_base").await?;
    }
    if with_floor || with_baseline {
        rows.extend(b38_scale::trips(scale, opts, dbs).await?);
    }
    if with_linear {
        let Some((fl, _)) = &floor_side else {
            return Err(Error::Config("b38-linear needs b38 (the floor)".into()));
        };
        rows.extend(b38_scale::linear(scale, opts, dbs, &ours_side, fl).await?);
    }
    if with_groups || with_one_date {
        let fl = floor_side.as_ref().map(|(s, _)| s);
        let default = (ours_side, ours_imp);
        rows.extend(
            b38_scale::run(scale, opts, dbs, fl, &default, with_groups, with_one_date).await?,
        );
    }
    dbs.drop_db("b38_src").await?;
    Ok(rows)
}

/// The functions' set-based refresh ([`authz::sql::REFRESH_REMOVED`]) reading the
/// removed memberships from the floor's temporary table instead of bound arrays.
fn floor_refresh_sql() -> String {
    authz::sql::REFRESH_REMOVED
        .replace(
            authz::sql::REMOVED_PROJECTS_PARAM,
            "(SELECT u, sid AS p FROM floor_removed WHERE st = 'Project') x",
        )
        .replace(
            authz::sql::REMOVED_GROUPS_PARAM,
            "(SELECT u, sid AS g FROM floor_removed WHERE st = 'Namespace') x",
        )
        .replace(
            authz::sql::REMOVED_USERS_PARAM,
            "m.user_id IN (SELECT u FROM floor_removed)",
        )
}
