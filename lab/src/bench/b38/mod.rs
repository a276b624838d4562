//! The B38 benches: `b38` (ours ÷ the set-based floor) and `b38-baseline` (a
//! GitLab-pattern baseline ÷ ours), with the scale and database-impact rows of
//! [`scale`]; the keyset page benches are in `keyset`.
//!
//! Owns: one run over one data set ([`run`]): building it, running each side alone on
//! a fresh clone of it ([`sides`]), comparing their checksums, and the rows: the
//! ratios, the per-member figures and the Lambda cost line. [`sides`] knows nothing
//! of the rows; [`scale`] builds on [`sides`] for the extra runs.

use crate::bench::data::{self, B38Sizes};
use crate::bench::{prewarm, ratio, secs, BenchDbs, Options, Row, Scale, Target};
use shared::error::{Error, Result};

mod floor_sql;
pub mod scale;
pub mod sides;

use sides::{baseline, chunked_floor, floor, ours, Side};

/// Lambda memory of the template (`infra/template.yaml`, parameter `MemorySize`).
pub const TEMPLATE_MEMORY_MB: f64 = 256.0;

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
        let s0 = scale::snapshot(&c).await?;
        let side = floor(&mut c, today).await?;
        let imp = scale::since(&c, &s0).await?;
        drop(c);
        dbs.drop_db("b38_floor").await?;
        Some((side, imp))
    } else {
        None
    };
    // The chunked floor: the floor's statements in transactions of GROUP_SIZE members.
    let chunked_side = if with_floor {
        dbs.clone_db("b38_src", "b38_chunked").await?;
        let mut c = dbs.connector("b38_chunked")?.connect("hk-bench").await?;
        prewarm(&c).await?;
        let side = chunked_floor(
            &mut c,
            today,
            shared::batches::remove_expired_members::GROUP_SIZE,
        )
        .await?;
        drop(c);
        dbs.drop_db("b38_chunked").await?;
        Some(side)
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
    let s0 = scale::snapshot(&check).await?;
    let ours_side = ours(
        dbs.handler_connector("b38_ours")?,
        &check,
        opts,
        scale.baseline_pages,
        sample_only,
        shared::batches::remove_expired_members::GROUP_SIZE,
    )
    .await?;
    let mut ours_imp = scale::since(&check, &s0).await?;
    (ours_imp.longest, ours_imp.rows_locked) = (ours_side.longest_tx, ours_side.rows_locked);
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
        rows.push(scale::impact_row(
            "ours",
            &ours_side,
            &ours_imp,
            &format!("≤ {} (one group)", ours_imp.rows_locked.unwrap_or(0)),
        ));
        rows.push(scale::impact_row(
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
            Some(Target::le(3.0)),
        ));
        if let Some(ch) = &chunked_side {
            let same = if ch.checksum == ours_side.checksum {
                "same rows afterwards"
            } else {
                "ROWS DIFFER"
            };
            rows.push(Row::new(
                "b38",
                format!(
                    "ours ÷ chunked floor ({} members per transaction), {size}",
                    shared::batches::remove_expired_members::GROUP_SIZE
                ),
                format!(
                    "ours {} ({}); chunked floor {} ({}, {} transactions, longest {:.1} ms); {same}",
                    secs(ours_side.time),
                    per_member(&ours_side),
                    secs(ch.time),
                    per_member(ch),
                    ch.invocations,
                    ch.longest_tx.unwrap_or_default().as_secs_f64() * 1e3,
                ),
                ratio(ours_side.time, ch.time),
                "×",
                Some(Target::le(1.5)),
            ));
            if ch.checksum != ours_side.checksum {
                return Err(Error::Invariant(format!(
                    "b38: ours and the chunked floor left different rows: {} vs {}",
                    ours_side.checksum, ch.checksum
                )));
            }
        }
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
        let s0 = scale::snapshot(&c).await?;
        let base = baseline(&mut c, today, scale.baseline_pages).await?;
        let mut base_imp = scale::since(&c, &s0).await?;
        base_imp.longest = base.longest_tx;
        rows.push(scale::impact_row(
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
        rows.extend(scale::trips(scale, opts, dbs).await?);
    }
    if with_linear {
        let Some((fl, _)) = &floor_side else {
            return Err(Error::Config("b38-linear needs b38 (the floor)".into()));
        };
        rows.extend(scale::linear(scale, opts, dbs, &ours_side, fl).await?);
    }
    if with_groups || with_one_date {
        let fl = floor_side.as_ref().map(|(s, _)| s);
        let default = (ours_side, ours_imp);
        rows.extend(scale::run(scale, opts, dbs, fl, &default, with_groups, with_one_date).await?);
    }
    dbs.drop_db("b38_src").await?;
    Ok(rows)
}
