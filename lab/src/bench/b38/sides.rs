//! The sides of the B38 comparison on one data set: ours (the function through the
//! local runner), the set-based floor, the chunked floor and the GitLab-pattern
//! baseline.
//!
//! Owns: the floor (one DELETE of every expired row with its notification settings,
//! then one set-based authorization refresh of every affected pair), the baseline (one
//! round trip per statement, per member), and [`Side`], what each of them did. All
//! sides of a comparison run on clones of one data set in the same run, and must leave
//! the same rows (their checksums are compared and reported by the caller).

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use tokio_postgres::Client;

use crate::bench::data;
use crate::bench::Options;
use engine::local::Runner;
use shared::batches::remove_expired_members::MemberCursor;
use shared::batches::remove_expired_members::{read_page, ExpiredMembersDone};
use shared::config::Settings;
use shared::db::Connector;
use shared::error::{Error, Result};
use shared::function::Function;
use shared::gitlab::authz;
use shared::locks;

const F: Function = Function::RemoveExpiredMembers;

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
    /// Its longest transaction, BEGIN → COMMIT (the baseline: one member's; ours: one
    /// group's, from the handler's typed results).
    pub longest_tx: Option<Duration>,
    /// Ours: the most member rows one grouped transaction locked.
    pub rows_locked: Option<u64>,
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
    group_size: usize,
) -> Result<Side> {
    let before = data::expired_count(check, opts.today()).await?;
    let settings = Settings {
        member_group_size: group_size,
        ..Settings::default()
    };
    let mut runner = Runner::new(connector, settings, opts.now).with_kept_sessions();
    let (mut longest, mut rows_locked) = (Duration::ZERO, 0u64);
    let cron = runner.cron_message(F);
    runner
        .queue()
        .push(shared::queue::OutMessage::new(F, 0, cron));
    let start = Instant::now();
    let mut sample = None;
    let mut runs = 0u64;
    while let Some(p) = runner.queue().pop() {
        let body = p.message.envelope.to_body();
        let (run, outcome) = runner
            .invoke(p.message.receiver, &body, p.receive_count)
            .await?;
        if !outcome.is_success() {
            return Err(Error::Invariant("b38: a run failed".into()));
        }
        if let Some(done) = run
            .report
            .as_ref()
            .and_then(|r| r.get::<ExpiredMembersDone>())
        {
            longest = longest.max(done.longest_group.0);
            rows_locked = rows_locked.max(done.longest_group.1);
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
        longest_tx: Some(longest),
        rows_locked: Some(rows_locked),
    })
}

/// The floor: one set-based DELETE of the same rows (with their notification
/// settings) and one set-based refresh of every affected (user, project) pair, in one
/// transaction, as plain joins (`floor_sql::JOIN_FORM`: the fastest plan for one
/// statement over everything). No locks, no paging, no per-member rule.
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
    tx.query_one(super::floor_sql::JOIN_FORM, &[]).await?;
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
        rows_locked: None,
    })
}

/// The chunked floor: the floor's set-based statements in transactions of
/// `group_size` members, in `(expires_at, id)` order until none is left — the fastest
/// any design can be under ours's bound on a transaction's size.
pub async fn chunked_floor(c: &mut Client, today: NaiveDate, group_size: usize) -> Result<Side> {
    let before = data::expired_count(c, today).await?;
    let start = Instant::now();
    // Each chunk starts after the last key of the one before (a keyset, as ours pages),
    // so no chunk walks the index entries of the rows already deleted.
    let take = c
        .prepare(
            "WITH chunk AS (
               SELECT id FROM members
               WHERE expires_at IS NOT NULL AND expires_at <= $1::date
                 AND (expires_at, id) > ($3::date, $4::bigint)
               ORDER BY expires_at, id LIMIT $2::bigint
             ),
             del AS (
               DELETE FROM members m USING chunk WHERE m.id = chunk.id
               RETURNING m.id::bigint AS id, m.expires_at, m.user_id::bigint AS user_id,
                         m.source_type, m.source_id::bigint AS source_id
             ),
             ns AS (
               DELETE FROM notification_settings n USING del
               WHERE n.user_id = del.user_id AND n.source_type = del.source_type
                 AND n.source_id = del.source_id
             )
             SELECT id, expires_at, user_id, source_type, source_id FROM del",
        )
        .await?;
    // The refresh ours runs, with the chunk's removed memberships as bound arrays.
    let refresh = c.prepare(authz::sql::REFRESH_REMOVED).await?;
    let (mut longest, mut chunks) = (Duration::ZERO, 0u64);
    let mut key = (NaiveDate::from_ymd_opt(1, 1, 1).expect("a date"), 0i64);
    loop {
        let began = Instant::now();
        let tx = c.transaction().await?;
        // Generic plans, as ours runs its group statements.
        tx.batch_execute("SET LOCAL plan_cache_mode = force_generic_plan")
            .await?;
        let rows = tx
            .query(&take, &[&today, &(group_size as i64), &key.0, &key.1])
            .await?;
        let (mut pu, mut pp, mut gu, mut gg, mut users) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for r in &rows {
            key = key.max((r.get::<_, NaiveDate>(1), r.get::<_, i64>(0)));
            let Some(u) = r.get::<_, Option<i64>>(2) else {
                continue;
            };
            match r.get::<_, &str>(3) {
                "Project" => (pu.push(u), pp.push(r.get::<_, i64>(4))),
                "Namespace" => (gu.push(u), gg.push(r.get::<_, i64>(4))),
                _ => ((), ()),
            };
            users.push(u);
        }
        users.sort_unstable();
        users.dedup();
        if !users.is_empty() {
            tx.query_one(&refresh, &[&pu, &pp, &gu, &gg, &users])
                .await?;
        }
        tx.commit().await?;
        if rows.is_empty() {
            break;
        }
        chunks += 1;
        longest = longest.max(began.elapsed());
    }
    let time = start.elapsed();
    let after = data::expired_count(c, today).await?;
    Ok(Side {
        time,
        removed: before - after,
        checksum: data::checksum(c).await?,
        invocations: chunks,
        sample: None,
        longest_tx: Some(longest),
        rows_locked: None,
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
        rows_locked: None,
    })
}
