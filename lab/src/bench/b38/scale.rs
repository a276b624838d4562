//! The B38 benches of scale and database impact: `b38-groups` (ours ÷ the floor and the
//! longest transaction at group sizes 100, 250, 500 and 1,000), `b38-one-date` (a whole run
//! when every expired membership shares one date ÷ the spread run) and the
//! `b38-impact` rows (WAL bytes per 1,000 members, transactions per member, longest
//! transaction and rows locked at once, for ours, the floor and the baseline) and the
//! `b38-trips` rows (statements and round trips per member, counted on the wire), and
//! `b38-linear` (the time per member at the run's size ÷ at a tenth of it, both in the
//! same run).
//!
//! Owns: the server-side readings of a side (the WAL position and the database's
//! committed and rolled-back transactions before and after it: the bench reads the
//! server's counters, production SQL never does), and the extra runs of ours on clones
//! of `b38_src` (or on a one-date or a tenth-size data set built next to it).

use std::time::Duration;

use tokio_postgres::Client;

use super::sides::{baseline, floor, ours, Side};
use crate::bench::data::{self, B38Sizes};
use crate::bench::wire::{Counts, Wire};
use crate::bench::{prewarm, ratio, secs, BenchDbs, Options, Row, Scale, Target};
use shared::batches::remove_expired_members as rem;
use shared::error::{Error, Result};

/// The group sizes `b38-groups` compares.
pub const GROUP_SIZES: [usize; 4] = [100, 250, 500, 1000];

/// The server's WAL position and transaction count at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    lsn: String,
    xacts: i64,
}

/// What one side cost the database.
#[derive(Debug, Clone, Default)]
pub struct Impact {
    /// WAL bytes written while it ran (the whole cluster: autovacuum included).
    pub wal_bytes: f64,
    /// Transactions committed or rolled back in its database.
    pub xacts: i64,
    /// The longest transaction (ours: a group, BEGIN → COMMIT acknowledged).
    pub longest: Option<Duration>,
    /// Member rows one transaction held locked at once.
    pub rows_locked: Option<u64>,
}

const SNAPSHOT_SQL: &str = "SELECT pg_current_wal_insert_lsn()::text,
       (SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database
        WHERE datname = current_database())";

/// Read the WAL insert position (the write position lags behind it when commits do not
/// wait for the flush, as on `hk db up` clusters) and the transaction count (stats
/// flushed first).
pub async fn snapshot(c: &Client) -> Result<Snapshot> {
    c.batch_execute("SELECT pg_stat_force_next_flush(); SELECT pg_stat_clear_snapshot()")
        .await?;
    let r = c.query_one(SNAPSHOT_SQL, &[]).await?;
    Ok(Snapshot {
        lsn: r.get(0),
        xacts: r.get(1),
    })
}

/// What happened since `s`.
pub async fn since(c: &Client, s: &Snapshot) -> Result<Impact> {
    let now = snapshot(c).await?;
    let r = c
        .query_one(
            "SELECT pg_wal_lsn_diff($1::text::pg_lsn, $2::text::pg_lsn)::float8",
            &[&now.lsn, &s.lsn],
        )
        .await?;
    Ok(Impact {
        wal_bytes: r.get(0),
        xacts: now.xacts - s.xacts,
        longest: None,
        rows_locked: None,
    })
}

/// Ours on a clone of `src` with `group_size` members per transaction, with its impact.
async fn ours_on(
    dbs: &mut BenchDbs,
    opts: &Options,
    src: &str,
    tag: &str,
    group_size: usize,
) -> Result<(Side, Impact)> {
    dbs.clone_db(src, tag).await?;
    let check = dbs.connector(tag)?.connect("hk-bench").await?;
    prewarm(&check).await?;
    let s0 = snapshot(&check).await?;
    let side = ours(
        dbs.handler_connector(tag)?,
        &check,
        opts,
        None,
        false,
        group_size,
    )
    .await?;
    let mut imp = since(&check, &s0).await?;
    imp.longest = side.longest_tx;
    imp.rows_locked = side.rows_locked;
    drop(check);
    dbs.drop_db(tag).await?;
    Ok((side, imp))
}

fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.1} ms", d.as_secs_f64() * 1e3))
        .unwrap_or_else(|| "–".into())
}

/// One `b38-impact` row for a side.
pub fn impact_row(name: &str, side: &Side, imp: &Impact, locked: &str) -> Row {
    let n = side.removed.max(1) as f64;
    let wal = imp.wal_bytes / n * 1000.0;
    Row::new(
        "b38-impact",
        format!("{name}: WAL bytes per 1,000 members removed"),
        format!(
            "{:.0} MB of WAL for {} members; {:.4} transactions per member ({} in all); \
             longest transaction {}; rows locked at once: {locked}",
            imp.wal_bytes / 1e6,
            side.removed,
            imp.xacts as f64 / n,
            imp.xacts,
            match imp.longest {
                Some(_) => ms(imp.longest),
                None => secs(side.time),
            },
        ),
        wal,
        "B",
        None,
    )
}

/// `b38-groups` and `b38-one-date`, after `b38` ran ours (`ours_default`, at
/// [`rem::GROUP_SIZE`]) and the floor on `b38_src`.
pub async fn run(
    scale: &Scale,
    opts: &Options,
    dbs: &mut BenchDbs,
    floor: Option<&Side>,
    ours_default: &(Side, Impact),
    groups: bool,
    one_date: bool,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if groups {
        let Some(fl) = floor else {
            return Err(Error::Config("b38-groups needs b38 (the floor)".into()));
        };
        for size in GROUP_SIZES {
            let (side, imp) = if size == rem::GROUP_SIZE {
                ours_default.clone()
            } else {
                ours_on(dbs, opts, "b38_src", "b38_group", size).await?
            };
            let longest = imp.longest.unwrap_or_default();
            let default = if size == rem::GROUP_SIZE {
                " (the default, GROUP_SIZE)"
            } else {
                ""
            };
            rows.push(Row::new(
                "b38-groups",
                format!("ours ÷ floor at {size} members per transaction{default}"),
                format!(
                    "ours {} ({:.1} µs/member); floor {}; longest transaction {} \
                     (target < 250 ms: {}); at most {} member rows locked at once; \
                     {:.3} transactions per member",
                    secs(side.time),
                    side.time.as_secs_f64() * 1e6 / side.removed.max(1) as f64,
                    secs(fl.time),
                    ms(imp.longest),
                    if longest < Duration::from_millis(250) {
                        "met"
                    } else {
                        "NOT met"
                    },
                    imp.rows_locked.unwrap_or(0),
                    imp.xacts as f64 / side.removed.max(1) as f64,
                ),
                ratio(side.time, fl.time),
                "×",
                Some(Target::le(3.0)),
            ));
        }
    }
    if one_date {
        let sizes = B38Sizes::for_expired(scale.b38_members);
        {
            let src = dbs.create("b38_one_src").await?;
            data::b38_dated(&src, opts.today(), sizes, false).await?;
        }
        let (side, imp) = ours_on(dbs, opts, "b38_one_src", "b38_one", rem::GROUP_SIZE).await?;
        dbs.drop_db("b38_one_src").await?;
        let spread = &ours_default.0;
        if side.removed != spread.removed {
            return Err(Error::Invariant(format!(
                "b38-one-date: removed {} members, the spread run {}",
                side.removed, spread.removed
            )));
        }
        rows.push(Row::new(
            "b38-one-date",
            format!(
                "a whole run when all {} expired members share one date ÷ spread over 1,000 days",
                sizes.expired
            ),
            format!(
                "one date {} ({:.1} µs/member, {} handler runs, longest transaction {}); spread {} ({:.1} µs/member)",
                secs(side.time),
                side.time.as_secs_f64() * 1e6 / side.removed.max(1) as f64,
                side.invocations,
                ms(imp.longest),
                secs(spread.time),
                spread.time.as_secs_f64() * 1e6 / spread.removed.max(1) as f64,
            ),
            ratio(side.time, spread.time),
            "×",
            Some(Target::le(1.5)),
        ));
    }
    Ok(rows)
}

/// How many times `b38-linear` runs each side at the smaller size.
pub const LINEAR_RUNS: usize = 3;

/// The median of some figures (the middle one of an odd count).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Microseconds per member removed.
fn us_per_member(side: &Side) -> f64 {
    side.time.as_secs_f64() * 1e6 / side.removed.max(1) as f64
}

/// `b38-linear`, after `b38` ran ours and the floor on `b38_src`: a data set of a
/// tenth of the expired members (same shape) is built in the same run, and each side
/// runs [`LINEAR_RUNS`] times on fresh clones of it. The row divides the time per
/// member at the run's size by the median at the tenth: one run of a tenth of the
/// size lasts seconds, and whether an autovacuum or the machine's neighbours fall
/// inside it moves a single figure by a quarter.
pub async fn linear(
    scale: &Scale,
    opts: &Options,
    dbs: &mut BenchDbs,
    ours_full: &Side,
    floor_full: &Side,
) -> Result<Vec<Row>> {
    let sizes = B38Sizes::for_expired((scale.b38_members / 10).max(10));
    {
        let src = dbs.create("b38_tenth_src").await?;
        data::b38(&src, opts.today(), sizes).await?;
    }
    let (mut ours_small, mut floor_small) = (Vec::new(), Vec::new());
    for _ in 0..LINEAR_RUNS {
        let (side, _) = ours_on(dbs, opts, "b38_tenth_src", "b38_tenth", rem::GROUP_SIZE).await?;
        ours_small.push(us_per_member(&side));
        dbs.clone_db("b38_tenth_src", "b38_tenth").await?;
        let mut c = dbs.connector("b38_tenth")?.connect("hk-bench").await?;
        prewarm(&c).await?;
        let side = floor(&mut c, opts.today()).await?;
        drop(c);
        dbs.drop_db("b38_tenth").await?;
        floor_small.push(us_per_member(&side));
    }
    dbs.drop_db("b38_tenth_src").await?;
    let mut rows = Vec::new();
    for (name, full, small, target) in [
        ("ours", ours_full, ours_small, Some(Target::le(1.3))),
        ("floor", floor_full, floor_small, None),
    ] {
        let runs: Vec<String> = small.iter().map(|v| format!("{v:.1}")).collect();
        let mut small = small;
        let mid = median(&mut small);
        let at_full = us_per_member(full);
        rows.push(Row::new(
            "b38-linear",
            format!(
                "{name}: µs per member at {} ÷ at {} expired members, same run",
                full.removed, sizes.expired
            ),
            format!(
                "{at_full:.1} µs/member at {}; {} µs/member in {LINEAR_RUNS} runs at {} (median {mid:.1})",
                full.removed,
                runs.join(", "),
                sizes.expired
            ),
            at_full / mid,
            "×",
            target,
        ));
    }
    Ok(rows)
}

/// One `b38-trips` row.
fn trips_row(name: &str, what: &str, removed: i64, counts: Counts) -> Row {
    let n = removed.max(1) as f64;
    Row::new(
        "b38-trips",
        format!("{name}: round trips per member"),
        format!(
            "{:.3} statements and {:.3} round trips per member ({} statements, {} round \
             trips for {removed} members; {what})",
            counts.statements as f64 / n,
            counts.round_trips as f64 / n,
            counts.statements,
            counts.round_trips,
        ),
        counts.round_trips as f64 / n,
        "per member",
        None,
    )
}

/// `b38-trips`: statements and round trips per member, counted by a relay on the wire
/// ([`Wire`]) on fresh clones of `b38_src`, apart from the timed runs (the relay adds a
/// hop to every round trip). Ours and the baseline cover the baseline's pages (20 when
/// the scale sets none), the floor the whole set. Sessions opened, the
/// session setup and the bench's own readings on the side's session (the floor's and
/// the baseline's counts before and after, their checksum) are included.
pub async fn trips(scale: &Scale, opts: &Options, dbs: &mut BenchDbs) -> Result<Vec<Row>> {
    // The baseline's pages, or 20: a round trip per statement per member is slow, and
    // the count per member does not depend on how many pages are counted.
    let pages = scale.baseline_pages.unwrap_or(20);
    let scope = format!("at most the first {pages} pages");
    let readings = "3 of the statements are the bench's readings";
    let mut rows = Vec::new();
    let wire = fresh_clone(dbs).await?;
    let check = dbs.connector(TRIPS)?.connect("hk-bench").await?;
    let handler = wire.connector(dbs, TRIPS, true)?;
    let side = ours(handler, &check, opts, Some(pages), true, rem::GROUP_SIZE).await?;
    drop(check);
    let what = format!("{scope}, {} handler runs", side.invocations);
    rows.push(trips_row("ours", &what, side.removed, wire.counts()?));

    let wire = fresh_clone(dbs).await?;
    let mut c = wire
        .connector(dbs, TRIPS, false)?
        .connect("hk-bench")
        .await?;
    let side = floor(&mut c, opts.today()).await?;
    drop(c);
    let what = format!("every member, one transaction; {readings}");
    rows.push(trips_row("floor", &what, side.removed, wire.counts()?));

    let wire = fresh_clone(dbs).await?;
    let mut c = wire
        .connector(dbs, TRIPS, false)?
        .connect("hk-bench")
        .await?;
    let side = baseline(&mut c, opts.today(), Some(pages)).await?;
    drop(c);
    let what = format!("{scope}; {readings}");
    let name = "GitLab-pattern baseline";
    rows.push(trips_row(name, &what, side.removed, wire.counts()?));
    dbs.drop_db(TRIPS).await?;
    Ok(rows)
}

/// The database the counted sides run on.
const TRIPS: &str = "b38_trips";

/// A fresh clone of `b38_src` as [`TRIPS`] (replacing the last side's), and a relay to
/// count what the next side sends it.
async fn fresh_clone(dbs: &mut BenchDbs) -> Result<Wire> {
    dbs.clone_db("b38_src", TRIPS).await?;
    let (host, port) = dbs.server();
    Wire::start(&host, port).await
}
