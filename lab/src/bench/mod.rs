//! `hk bench`: benchmarks that compare two ways of doing the same work on the same data
//! in the same run (issue 8).
//!
//! Owns: the scales, the bench databases (created on the cluster of `DATABASE_URL`,
//! filled with set-based SQL, cloned so that both sides of a comparison start from the
//! same bytes, dropped at the end), every bench's measurement and its SQL, and the
//! report: one [`Row`] per figure, rendered as a Markdown table and written, with the
//! exact command, into `docs/benchmarks.md`. Machines are shared and noisy, so a row
//! states a **ratio** of two measurements taken side by side (interleaved where
//! repetition is cheap), or a count, never a lone absolute time as a verdict; the
//! footprint rows are the exception the issue asks for (sizes, RSS, start time), each
//! next to a reference measured in the same run. Nothing here asserts a time: tests
//! run the benches at a tiny scale and check that the figures are sane.
//!
//! It is never linked into a function's work: only `hk` calls it.

pub mod b28;
pub mod b38;
pub mod cold_start;
pub mod data;
pub mod footprint;
pub mod keyset;
pub mod queue_calls;
mod report;
mod tls_db;
pub mod wire;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;
use tokio_postgres::Client;

use shared::config::{DatabaseConfig, DatabaseSource};
use shared::db::Connector;
use shared::error::{Error, Result};

pub use report::{render_markdown, write_doc};

/// The benches `hk bench` knows, in the order `all` runs them.
pub const BENCHES: &[&str] = &[
    "b38",
    "b38-baseline",
    "b38-groups",
    "b38-one-date",
    "b38-linear",
    "b28",
    "keyset",
    "queue-calls",
    "footprint",
];

/// How big the data sets are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Scale {
    /// `small`, `full` or the number given.
    pub label: String,
    /// Expired memberships of the B38 data set.
    pub b38_members: u64,
    /// Members of the smaller keyset table (all expired, spread over 1,000 days).
    pub keyset_small: u64,
    /// Members of the larger keyset table: the same expired rows plus members that do
    /// not expire (or expire later).
    pub keyset_large: u64,
    /// Messages enqueued by each producer of the queue-calls bench.
    pub queue_messages: u64,
    /// Members of the page the footprint bench hands to the function binary.
    pub footprint_page: u64,
    /// Pages the baseline covers (all when `None`); ours is timed on the same pages.
    pub baseline_pages: Option<u64>,
    /// Personal access tokens of the B28 data set.
    pub b28_tokens: u64,
    /// Users of the B28 data set (2 % of them bots).
    pub b28_users: u64,
    /// Cold starts per function whose median the footprint bench reports: 10 for
    /// `small` and `full`, 3 for a number (the suite's tiny runs).
    pub cold_starts: usize,
}

impl Scale {
    /// Parse `small`, `full` or a number of expired memberships.
    pub fn parse(s: &str) -> Result<Scale> {
        match s {
            "full" => Ok(Scale {
                label: "full".into(),
                b38_members: 1_000_000,
                keyset_small: 100_000,
                keyset_large: 10_000_000,
                queue_messages: 1000,
                footprint_page: 1000,
                baseline_pages: Some(20),
                b28_tokens: 1_000_000,
                b28_users: 300_000,
                cold_starts: 10,
            }),
            "small" => Ok(Scale {
                label: "small".into(),
                b38_members: 5_000,
                keyset_small: 10_000,
                keyset_large: 100_000,
                // moto's SendMessageBatch slows down as a queue fills (≈ 10 ms per call
                // at first, ≈ 0.5 s at 1,000 messages): the small run counts 200 and
                // reports per 1,000; `full` counts 1,000.
                queue_messages: 200,
                footprint_page: 1000,
                baseline_pages: None,
                b28_tokens: 10_000,
                b28_users: 3_000,
                cold_starts: 10,
            }),
            n => {
                let n: u64 = n.parse().ok().filter(|n| *n >= 10).ok_or_else(|| {
                    Error::Config(format!(
                        "--scale `{n}`: expected small, full or a number ≥ 10"
                    ))
                })?;
                Ok(Scale {
                    label: n.to_string(),
                    b38_members: n,
                    keyset_small: n,
                    keyset_large: n * 10,
                    queue_messages: n.min(1000),
                    footprint_page: n.min(1000),
                    baseline_pages: None,
                    b28_tokens: n,
                    b28_users: (n * 3 / 10).max(30),
                    cold_starts: 3,
                })
            }
        }
    }
}

/// A target a figure is held to.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Target {
    /// `≤` or `≥`.
    pub op: &'static str,
    /// The bound.
    pub value: f64,
}

impl Target {
    /// At most `v`.
    pub fn le(v: f64) -> Target {
        Target {
            op: "≤", value: v
        }
    }

    /// At least `v`.
    pub fn ge(v: f64) -> Target {
        Target {
            op: "≥", value: v
        }
    }

    /// Whether `x` meets the target.
    pub fn met(&self, x: f64) -> bool {
        if self.op == "≤" {
            x <= self.value
        } else {
            x >= self.value
        }
    }
}

/// One figure of a bench.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// The bench name (`b38`, `keyset`, …).
    pub bench: String,
    /// What is compared, or measured.
    pub compares: String,
    /// The measurements behind the figure.
    pub measured: String,
    /// The figure.
    pub value: f64,
    /// Its unit (`×`, `calls/1000`, `MB`, `ms`).
    pub unit: String,
    /// The target, if the issue sets one.
    pub target: Option<Target>,
    /// Whether the target is met (None without a target).
    pub met: Option<bool>,
}

impl Row {
    /// A row; `met` follows from the target.
    pub fn new(
        bench: &str,
        compares: impl Into<String>,
        measured: impl Into<String>,
        value: f64,
        unit: &str,
        target: Option<Target>,
    ) -> Row {
        Row {
            bench: bench.to_string(),
            compares: compares.into(),
            measured: measured.into(),
            value,
            unit: unit.to_string(),
            target,
            met: target.map(|t| t.met(value)),
        }
    }
}

/// What every bench needs besides its scale.
#[derive(Debug, Clone)]
pub struct Options {
    /// The maintenance URL of the cluster the bench databases are created on.
    pub database_url: String,
    /// A moto server for the queue-calls bench (`MOTO_ENDPOINT`); skipped without.
    pub moto_endpoint: Option<String>,
    /// Where the function binaries are (`target/release`).
    pub bin_dir: PathBuf,
    /// The injected clock of the runs; the data sets are dated relative to it.
    pub now: DateTime<Utc>,
    /// Keep the bench databases (for inspection) instead of dropping them.
    pub keep: bool,
    /// `b28` sends its messages to moto's SQS (`moto_endpoint`) instead of the
    /// in-process queue. moto's SendMessageBatch slows from ≈ 10 ms to ≈ 0.5 s per call
    /// as a queue fills, so this is for data sets of a few thousand tokens only.
    pub b28_on_moto: bool,
}

impl Options {
    /// `today` of the runs.
    pub fn today(&self) -> NaiveDate {
        self.now.date_naive()
    }
}

/// One line on where and how a run happens: time, CPUs, PostgreSQL, the scale.
pub async fn context(scale: &Scale, opts: &Options) -> Result<String> {
    let dbs = BenchDbs::new(&opts.database_url).await?;
    let version: String = dbs
        .admin
        .query_one("SELECT current_setting('server_version')", &[])
        .await?
        .get(0);
    let settings: String = dbs
        .admin
        .query_one(
            "SELECT string_agg(name || '=' || current_setting(name), ', ' ORDER BY name)
             FROM pg_settings WHERE name IN ('shared_buffers', 'work_mem', 'synchronous_commit', 'fsync')",
            &[],
        )
        .await?
        .get(0);
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    Ok(format!(
        "Run {} UTC on {cpus} CPUs (shared), PostgreSQL {version} ({settings}); scale {}: \
         b38 {} expired members, b28 {} tokens over {} users, keyset {} / {} members, \
         queue-calls {} messages, footprint page {} members.",
        Utc::now().format("%Y-%m-%d %H:%M"),
        scale.label,
        scale.b38_members,
        scale.b28_tokens,
        scale.b28_users,
        scale.keyset_small,
        scale.keyset_large,
        scale.queue_messages,
        scale.footprint_page
    ))
}

/// Run one bench (or `all`) and return its rows.
pub async fn run(name: &str, scale: &Scale, opts: &Options) -> Result<Vec<Row>> {
    // One name, `all`, or several joined by commas (run on the same data sets).
    let names: Vec<&str> = if name == "all" {
        BENCHES.to_vec()
    } else {
        let names: Vec<&str> = name.split(',').map(str::trim).collect();
        if let Some(bad) = names.iter().find(|n| !BENCHES.contains(n)) {
            return Err(Error::Config(format!(
                "unknown bench `{bad}` (known: all, {})",
                BENCHES.join(", ")
            )));
        }
        names
    };
    let mut dbs = BenchDbs::new(&opts.database_url).await?;
    dbs.keep = opts.keep;
    let result = run_all(&names, scale, opts, &mut dbs).await;
    dbs.drop_all().await;
    result
}

async fn run_all(
    names: &[&str],
    scale: &Scale,
    opts: &Options,
    dbs: &mut BenchDbs,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let b38 = names.contains(&"b38");
    let baseline = names.contains(&"b38-baseline");
    let groups = names.contains(&"b38-groups");
    let one_date = names.contains(&"b38-one-date");
    let linear = names.contains(&"b38-linear");
    if b38 || baseline || groups || one_date || linear {
        // b38-groups and b38-linear compare with the floor: they run the b38
        // comparison too.
        let extra = (groups, one_date, linear);
        let with_floor = b38 || groups || linear;
        rows.extend(b38::run(scale, opts, dbs, with_floor, baseline, extra).await?);
    }
    if names.contains(&"b28") {
        rows.extend(b28::run(scale, opts, dbs).await?);
    }
    if names.contains(&"keyset") {
        rows.extend(keyset::keyset(scale, opts, dbs).await?);
    }
    if names.contains(&"queue-calls") {
        rows.extend(queue_calls::run(scale, opts, dbs).await?);
    }
    if names.contains(&"footprint") {
        rows.extend(footprint::run(scale, opts, dbs).await?);
    }
    Ok(rows)
}

/// The bench databases of one run: created from the migrated schema, cloned, dropped.
pub struct BenchDbs {
    base: tokio_postgres::Config,
    admin: Client,
    prefix: String,
    created: Vec<String>,
    file_copy: bool,
    keep: bool,
}

/// A connector without TLS requirement: with `handler`, the function's session settings
/// (the ones `hk run` uses); otherwise for bulk SQL, without a statement timeout.
fn connector_for(pg: tokio_postgres::Config, handler: bool) -> Result<Connector> {
    Connector::new(
        pg,
        &DatabaseConfig {
            source: DatabaseSource::Url(String::new()),
            ca_bundle: None,
            statement_timeout_ms: if handler { 30_000 } else { 0 },
            lock_timeout_ms: 5_000,
            require_tls: false,
        },
    )
}

impl BenchDbs {
    async fn new(url: &str) -> Result<BenchDbs> {
        let base: tokio_postgres::Config = url
            .parse()
            .map_err(|e| Error::Config(format!("invalid DATABASE_URL: {e}")))?;
        let admin = connector_for(base.clone(), false)?
            .connect("hk-bench")
            .await?;
        let version: i32 = admin
            .query_one("SELECT current_setting('server_version_num')::int4", &[])
            .await?
            .get(0);
        Ok(BenchDbs {
            base,
            admin,
            prefix: format!("hkbench_{}", std::process::id()),
            created: Vec::new(),
            file_copy: version >= 150_000,
            keep: false,
        })
    }

    /// The name of a bench database.
    fn name(&self, tag: &str) -> String {
        format!("{}_{tag}", self.prefix)
    }

    /// A connector to a bench database (no statement timeout).
    pub fn connector(&self, tag: &str) -> Result<Connector> {
        let mut pg = self.base.clone();
        pg.dbname(self.name(tag));
        connector_for(pg, false)
    }

    /// A connector with the function's session settings (the ones `hk run` uses).
    pub fn handler_connector(&self, tag: &str) -> Result<Connector> {
        let mut pg = self.base.clone();
        pg.dbname(self.name(tag));
        connector_for(pg, true)
    }

    /// The server's host and port.
    pub fn server(&self) -> (String, u16) {
        let host = match self.base.get_hosts().first() {
            Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
            _ => "127.0.0.1".into(),
        };
        (host, self.base.get_ports().first().copied().unwrap_or(5432))
    }

    /// The connection URL of a bench database (for a function binary's environment).
    pub fn url(&self, tag: &str) -> String {
        let (host, port) = self.server();
        let user = self.base.get_user().unwrap_or("postgres");
        let auth = match self.base.get_password() {
            Some(p) => format!("{user}:{}", String::from_utf8_lossy(p)),
            None => user.to_string(),
        };
        format!("postgres://{auth}@{host}:{port}/{}", self.name(tag))
    }

    /// Create an empty database with the migrated schema; returns a bulk client.
    pub async fn create(&mut self, tag: &str) -> Result<Client> {
        let name = self.name(tag);
        self.admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        self.admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await?;
        self.settings(&name).await?;
        self.created.push(name);
        let mut c = self.connector(tag)?.connect("hk-bench").await?;
        engine::migrate::run(&mut c).await?;
        // For `prewarm` (a contrib module; without it, prewarm reads the tables instead).
        let _ = c
            .batch_execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
            .await;
        Ok(c)
    }

    /// Clone `src` (no session may be connected to it) into a new database `dst`.
    pub async fn clone_db(&mut self, src: &str, dst: &str) -> Result<()> {
        let (s, d) = (self.name(src), self.name(dst));
        let strategy = if self.file_copy {
            " STRATEGY = FILE_COPY"
        } else {
            ""
        };
        self.admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {d} WITH (FORCE)"))
            .await?;
        self.admin
            .batch_execute(&format!("CREATE DATABASE {d} TEMPLATE {s}{strategy}"))
            .await?;
        self.settings(&d).await?;
        self.created.push(d);
        Ok(())
    }

    /// Session defaults of a bench database (not copied by a clone): no JIT, whose
    /// compile time (seconds for a large refresh) would measure LLVM, not the work; and
    /// `random_page_cost = 1.1`, the usual setting for SSD-backed or cached data (the
    /// data sets fit in memory), so the planner prices index probes as they cost.
    async fn settings(&self, name: &str) -> Result<()> {
        self.admin
            .batch_execute(&format!(
                "ALTER DATABASE {name} SET jit = off; ALTER DATABASE {name} SET random_page_cost = 1.1"
            ))
            .await?;
        Ok(())
    }

    /// Drop one bench database now (frees its disk for the next data set).
    pub async fn drop_db(&mut self, tag: &str) -> Result<()> {
        if self.keep {
            return Ok(());
        }
        let name = self.name(tag);
        self.admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await?;
        self.created.retain(|n| n != &name);
        Ok(())
    }

    async fn drop_all(&mut self) {
        if self.keep {
            return;
        }
        for name in std::mem::take(&mut self.created) {
            if let Err(e) = self
                .admin
                .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                .await
            {
                tracing::warn!(database = name.as_str(), error = %e, "bench database not dropped");
            }
        }
    }
}

/// Load every table and index of `public` into PostgreSQL's buffers, so that both
/// sides of a comparison start hot (`pg_prewarm`; without it, a scan of each table).
pub(crate) async fn prewarm(c: &Client) -> Result<()> {
    let has: bool = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_prewarm')",
            &[],
        )
        .await?
        .get(0);
    if has {
        c.batch_execute(
            "SELECT pg_prewarm(c.oid) FROM pg_class c
             WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'i')",
        )
        .await?;
    } else {
        c.batch_execute(
            "SELECT count(*) FROM members; SELECT count(*) FROM users;
             SELECT count(*) FROM project_authorizations; SELECT count(*) FROM notification_settings;
             SELECT count(*) FROM namespaces; SELECT count(*) FROM projects",
        )
        .await?;
    }
    Ok(())
}

/// Time an async block.
pub(crate) async fn timed<T, F: std::future::Future<Output = Result<T>>>(
    f: F,
) -> Result<(T, Duration)> {
    let start = Instant::now();
    let v = f.await?;
    Ok((v, start.elapsed()))
}

/// The median of some durations.
pub(crate) fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    if v.is_empty() {
        Duration::ZERO
    } else {
        v[v.len() / 2]
    }
}

/// Seconds, for the report.
pub(crate) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.1} s")
    } else if s >= 0.1 {
        format!("{s:.2} s")
    } else {
        format!("{:.2} ms", s * 1000.0)
    }
}

/// A ratio of two durations.
pub(crate) fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_parse_and_targets_compare() {
        assert_eq!(Scale::parse("full").unwrap().b38_members, 1_000_000);
        assert_eq!(Scale::parse("small").unwrap().label, "small");
        let n = Scale::parse("300").unwrap();
        assert_eq!(
            (n.b38_members, n.keyset_large, n.queue_messages),
            (300, 3000, 300)
        );
        assert!(Scale::parse("3").is_err());
        assert!(Scale::parse("huge").is_err());
        assert!(Target::le(1.5).met(1.5) && !Target::le(1.5).met(1.6));
        assert!(Target::ge(10.0).met(12.0) && !Target::ge(10.0).met(9.0));
        let mut d = vec![
            Duration::from_millis(3),
            Duration::from_millis(1),
            Duration::from_millis(2),
        ];
        assert_eq!(median(&mut d), Duration::from_millis(2));
        assert!((ratio(Duration::from_secs(3), Duration::from_secs(2)) - 1.5).abs() < 1e-9);
    }
}
