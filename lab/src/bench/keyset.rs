//! The keyset benches: one B38 page at a large table ÷ at a small one (`keyset`), and
//! the pathological page where every expiry shares one date (`keyset-one-date`).
//!
//! Owns: the page timings at a cursor deep in each table and the plan check
//! (`EXPLAIN` of the page read: which index, whether the whole set is sorted).

use std::time::Duration;

use chrono::NaiveDate;
use serde_json::Value;
use tokio_postgres::Client;

use super::data;
use super::{median, ratio, secs, timed, BenchDbs, Options, Row, Scale, Target};
use shared::batches::remove_expired_members::MemberCursor;
use shared::batches::remove_expired_members::{read_page, PAGE_AFTER_SQL};
use shared::error::Result;

/// The page-order row at `offset` among the expired rows: the cursor of the timed page.
async fn cursor_at(c: &Client, today: NaiveDate, offset: i64) -> Result<MemberCursor> {
    let r = c
        .query_one(
            "SELECT expires_at, id::bigint FROM members
             WHERE expires_at IS NOT NULL AND expires_at <= $1::date
             ORDER BY expires_at DESC, id DESC OFFSET $2 LIMIT 1",
            &[&today, &offset],
        )
        .await?;
    Ok(MemberCursor {
        expires_at: r.get(0),
        id: r.get(1),
    })
}

/// What `EXPLAIN (ANALYZE)` says about a page: the node types from the top, the index
/// used, and the rows the index scan returned.
#[derive(Debug, Clone)]
pub struct PagePlan {
    /// Node types, outermost first.
    pub nodes: Vec<String>,
    /// The index of the scan.
    pub index: Option<String>,
    /// Rows read from the index for one page.
    pub index_rows: f64,
}

impl PagePlan {
    /// An index scan on `index_members_on_expires_at` and no sort of the whole set (an
    /// incremental sort only sorts the rows that share one date).
    pub fn is_keyset(&self) -> bool {
        self.index.as_deref() == Some("index_members_on_expires_at")
            && !self.nodes.iter().any(|n| n == "Sort" || n == "Seq Scan")
    }

    fn describe(&self) -> String {
        format!(
            "{} on {} ({:.0} index rows per page)",
            self.nodes.join(" → "),
            self.index.as_deref().unwrap_or("no index"),
            self.index_rows
        )
    }
}

fn walk(node: &Value, plan: &mut PagePlan) {
    if let Some(t) = node["Node Type"].as_str() {
        plan.nodes.push(t.to_string());
    }
    if let Some(i) = node["Index Name"].as_str() {
        plan.index = Some(i.to_string());
        plan.index_rows += node["Actual Rows"].as_f64().unwrap_or(0.0);
    }
    if let Some(children) = node["Plans"].as_array() {
        for ch in children {
            walk(ch, plan);
        }
    }
}

/// EXPLAIN ANALYZE of the page after `cur`, exactly as B38 reads it.
pub async fn explain_page(c: &Client, today: NaiveDate, cur: MemberCursor) -> Result<PagePlan> {
    let limit = 1001i64;
    let row = c
        .query_one(
            &format!("EXPLAIN (ANALYZE, FORMAT JSON) {PAGE_AFTER_SQL}"),
            &[&today, &cur.expires_at, &cur.id, &limit],
        )
        .await?;
    let v: Value = row.get(0);
    let mut plan = PagePlan {
        nodes: Vec::new(),
        index: None,
        index_rows: 0.0,
    };
    walk(&v[0]["Plan"], &mut plan);
    Ok(plan)
}

/// `keyset`: one B38 page (the read of behaviour §B38.4, 1,001 rows from a cursor in the middle of
/// the expired rows) on a table of `keyset_large` members ÷ on one of `keyset_small`,
/// with the same expired rows (spread over 1,000 days) in both; plus, without a
/// target, the same page when every expired row shares one date.
pub async fn keyset(scale: &Scale, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    let today = opts.today();
    let e = scale.keyset_small;
    for (tag, total, spread) in [
        ("ks_small", e, true),
        ("ks_large", scale.keyset_large, true),
        ("ks_onedate", e, false),
    ] {
        let c = dbs.create(tag).await?;
        data::keyset(&c, today, e, total, spread).await?;
    }
    let small = dbs
        .handler_connector("ks_small")?
        .connect("hk-bench")
        .await?;
    let large = dbs
        .handler_connector("ks_large")?
        .connect("hk-bench")
        .await?;
    let one = dbs
        .handler_connector("ks_onedate")?
        .connect("hk-bench")
        .await?;
    let offset = (e / 2) as i64;
    let cursors = [
        cursor_at(&small, today, offset).await?,
        cursor_at(&large, today, offset).await?,
        cursor_at(&one, today, offset).await?,
    ];
    let clients = [&small, &large, &one];
    let mut times: [Vec<Duration>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    // Warm up, then interleave: small, large, one date, small, …
    for round in 0..45 {
        for (k, c) in clients.iter().enumerate() {
            let (_, t) = timed(read_page(*c, today, Some(cursors[k]))).await?;
            if round >= 5 {
                times[k].push(t);
            }
        }
    }
    let [mut ts, mut tl, mut to] = times;
    let (ms, ml, mo) = (median(&mut ts), median(&mut tl), median(&mut to));
    let plan_large = explain_page(&large, today, cursors[1]).await?;
    let plan_one = explain_page(&one, today, cursors[2]).await?;
    let mut rows = vec![Row::new(
        "keyset",
        format!(
            "one B38 page at {} members ÷ at {} members ({} expired over 1,000 days in both)",
            scale.keyset_large, scale.keyset_small, e
        ),
        format!(
            "median of 40 interleaved reads: {} vs {}; plan at {}: {}{}",
            secs(ml),
            secs(ms),
            scale.keyset_large,
            plan_large.describe(),
            if plan_large.is_keyset() {
                ""
            } else {
                " — NOT a keyset plan"
            }
        ),
        ratio(ml, ms),
        "×",
        Some(Target::le(1.3)),
    )];
    rows.push(Row::new(
        "keyset-one-date",
        format!(
            "pathological: one B38 page when all {e} expired rows share one date ÷ spread over 1,000 days"
        ),
        format!(
            "median {} vs {}; plan: {}",
            secs(mo),
            secs(ms),
            plan_one.describe()
        ),
        ratio(mo, ms),
        "×",
        None,
    ));
    drop((small, large, one));
    for tag in ["ks_small", "ks_large", "ks_onedate"] {
        dbs.drop_db(tag).await?;
    }
    Ok(rows)
}
