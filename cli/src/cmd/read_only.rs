//! `hk run <function> --dry-run --until-idle --read-only` (part of `hk run`): the plan
//! made on a copy of the live database in a private throwaway cluster, never on
//! DATABASE_URL itself (docs/shadow.md). Stale copies of earlier runs are swept; the
//! copy's plan (tables, privileges, the estimate against `--max-copy`) is settled
//! before the one read-only snapshot transaction copies the rows ([`engine::shadow`]),
//! with a bar on a terminal (counts on stderr with `--json`); the snapshot ends as
//! soon as the rows are read; the unchanged plan runs on the copy; the cluster is
//! removed afterwards, whatever the outcome (Ctrl-C, SIGTERM and SIGHUP included;
//! its watchdog removes it if `hk` is killed: [`engine::shadow::cluster`]).

use super::run::{message_body, notifier_for, print_plan, refuse_dry_outbox, RunArgs};
use super::ui;
use super::*;
use engine::local::Runner;
use engine::shadow::cluster::{self, PrivateCluster};
use engine::shadow::{self, Copied, ReadOnlySnapshot};

/// `hk run`'s options of the copy (with `--read-only`).
#[derive(clap::Args)]
pub(crate) struct CopyArgs {
    /// With --read-only: refuse a copy whose live tables to scan are larger than this
    /// (`10GB`, `512MB`; pg_class's estimate, printed before the copy).
    #[arg(long, requires = "read_only", default_value = DEFAULT_MAX_COPY)]
    pub(crate) max_copy: String,
    /// With --read-only: copy past --max-copy.
    #[arg(long, requires = "read_only")]
    pub(crate) confirm_copy: bool,
    /// With --read-only: copy every column of every table of the model, not only
    /// what the catalogue's statements use.
    #[arg(long, requires = "read_only")]
    pub(crate) copy_all: bool,
}

/// Write `lines` to `path` as a file only its owner may read (mode 0600): written
/// to a new file beside it, then renamed over `path`, so no reader ever sees it with
/// wider permissions.
pub(crate) fn write_private(path: &std::path::Path, lines: &[String]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}", &id[..8]));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    for l in lines {
        writeln!(f, "{l}")?;
    }
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// `--out FILE` of a plan: its JSON lines (what `--json` prints) written with
/// [`write_private`]; the text form on stdout unless `json`.
pub(crate) fn write_plan(
    out: &std::path::Path,
    runs: &[engine::local::Run],
    plan: &engine::local::Plan,
    json: bool,
) -> Result<()> {
    let mut lines: Vec<String> = runs.iter().map(|r| r.to_json().to_string()).collect();
    lines.push(plan.to_json().to_string());
    write_private(out, &lines)?;
    if !json {
        print_plan(runs, plan, false);
        println!("plan written to {} (mode 0600)", out.display());
    }
    Ok(())
}

/// `--max-copy`'s default: past this many bytes of live tables to scan, the copy is
/// refused unless confirmed (`--confirm-copy`).
pub(crate) const DEFAULT_MAX_COPY: &str = "10GB";

/// `10GB`, `512MB`, `2TB`, `1000` (bytes): a size in bytes.
pub(crate) fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().to_ascii_uppercase();
    let (num, unit) = t.split_at(t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len()));
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a size (e.g. 10GB, 512MB)"))?;
    let k = match unit.trim() {
        "" | "B" => 1u64,
        "KB" | "K" => 1 << 10,
        "MB" | "M" => 1 << 20,
        "GB" | "G" => 1 << 30,
        "TB" | "T" => 1 << 40,
        u => return Err(format!("unknown unit `{u}` in `{s}` (B, KB, MB, GB, TB)")),
    };
    Ok((n * k as f64) as u64)
}

/// Bytes as `1.2 GB`.
fn human(b: u64) -> String {
    let units = ["B", "KB", "MB", "GB", "TB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i < units.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1} {}", units[i])
}

/// Recognise the live database (refused when its model is not recognised, or when
/// `now` is before the snapshot), start the copy's private cluster, plan the copy
/// (privileges and tables checked, the estimate printed and held against
/// `max_copy`), and copy the live database into it in one read-only snapshot on a
/// session of `live`, ended as soon as the last row is read; then the local
/// sequences and `ANALYZE`. The cluster (removed when dropped), the copy's URL and
/// what was copied.
pub(crate) async fn copy_live(
    live: &Connector,
    a: &RunArgs,
    now: Option<DateTime<Utc>>,
) -> Result<(PrivateCluster, String, Copied)> {
    let mut session = live.connect("hk-read-only-plan").await?;
    // The model first, in a snapshot of its own: the copy's snapshot stays open only
    // while rows are copied (an open snapshot holds back VACUUM on the live server).
    let probe = ReadOnlySnapshot::begin(&mut session).await?;
    let model = probe.source.model;
    if let Some(now) = now.filter(|n| *n < probe.taken_at) {
        bail!(
            "--now {} is before the copy's snapshot ({}): the plan would decide on data \
             from its future; give the time GitLab's cron runs, after the copy",
            shared::clock::rfc3339(now),
            shared::clock::rfc3339(probe.taken_at)
        );
    }
    probe.end().await?;
    let bin = engine::pg::pg_bin()?;
    let parent = std::env::temp_dir();
    for gone in cluster::sweep(&parent, &bin) {
        eprintln!(
            "hk: removed a copy's cluster left by an earlier run: {}",
            gone.display()
        );
    }
    let exe = std::env::current_exe().context("cannot find hk's own executable")?;
    let cluster = PrivateCluster::start(&parent, &bin, &exe)
        .context("starting the private cluster of the copy (HK_PG_BIN)")?;
    let admin = Connector::from_url(&cluster.url("postgres"))?
        .connect("hk")
        .await?;
    admin.batch_execute("CREATE DATABASE hk_copy").await?;
    drop(admin);
    let url = cluster.url("hk_copy");
    migrate_for(&url, model).await?;
    mark_throwaway(&url, "hk run --read-only").await?;
    // The copy's own session: a large table's load is one statement, and this is
    // the throwaway side (the live side's timeout is the snapshot's).
    let local = Connector::from_url(&url)?
        .with_statement_timeout_ms(0)
        .connect("hk")
        .await?;
    let only = if a.copy.copy_all {
        None
    } else {
        Some(engine::shadow::selection::derive(&Connector::from_url(&url)?).await?)
    };
    let snapshot = ReadOnlySnapshot::begin(&mut session).await?;
    if snapshot.source.model != model {
        bail!(
            "GitLab's schema changed while the copy was prepared (model {model}, now {}): \
             run the plan again",
            snapshot.source.model
        );
    }
    let plan = snapshot.prepare(&local, only.as_ref()).await?;
    let (rows, bytes) = (plan.est_rows(), plan.est_bytes());
    let limit = parse_size(&a.copy.max_copy).map_err(anyhow::Error::msg)?;
    let line = format!(
        "read-only copy: {} tables, about {rows} rows in {} of live tables to scan",
        plan.tables.len(),
        human(bytes)
    );
    if a.json {
        eprintln!(
            "{}",
            serde_json::json!({"copy_estimate": {"tables": plan.tables.len(), "rows": rows, "bytes": bytes}})
        );
    } else {
        println!("{line}");
    }
    if bytes > limit && !a.copy.confirm_copy {
        bail!(
            "the copy would scan {} (about {rows} rows), more than --max-copy {}: nothing was \
             copied; confirm with --confirm-copy, or plan on a replica or a clone \
             (docs/shadow.md)",
            human(bytes),
            a.copy.max_copy
        );
    }
    let pb = ui::copy_progress(a.json, rows);
    // Rows of the tables already copied, and the table being copied.
    let (mut before, mut current, mut last) = (0u64, String::new(), 0u64);
    let copied = snapshot
        .copy(&local, &plan, |table, n, _| {
            if table != current {
                before += last;
                current = table.to_string();
                pb.set_message(current.clone());
            }
            last = n;
            pb.set_position(before + n);
        })
        .await;
    pb.finish_and_clear();
    let copied = copied?;
    // The snapshot ends as soon as the rows are read; the sequences and ANALYZE are
    // local work, after it.
    snapshot.end().await?;
    if a.json {
        for t in &copied.tables {
            eprintln!(
                "{}",
                serde_json::json!({"copy_progress": {"table": t.table, "rows": t.rows}})
            );
        }
    }
    copied.finish(&local).await?;
    Ok((cluster, url, copied))
}

/// `hk run … --dry-run --until-idle --read-only`: the read-only plan of the function
/// from its message (a cron message when none is given). Interrupted (Ctrl-C,
/// SIGTERM, SIGHUP: a dropped SSH session), it stops and the copy's cluster is
/// removed all the same; killed outright, its watchdog removes it
/// (engine::shadow::cluster).
pub(crate) async fn cmd_read_only(a: RunArgs) -> Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    refuse_dry_outbox(&a)?;
    let now = a.now.as_deref().map(|s| parse_now(Some(s))).transpose()?;
    let config = local_config()?;
    let body = message_body(&a)?;
    let a = &a;
    let config = &config;
    let why = tokio::select! {
        r = plan_on_copy(a, now, config, body) => return r,
        _ = tokio::signal::ctrl_c() => "Ctrl-C",
        _ = term.recv() => "SIGTERM",
        _ = hup.recv() => "SIGHUP",
    };
    bail!("interrupted ({why}): nothing was written on DATABASE_URL; the copy is removed")
}

async fn plan_on_copy(
    a: &RunArgs,
    now: Option<DateTime<Utc>>,
    config: &Config,
    body: Option<String>,
) -> Result<ExitCode> {
    let function = a.function;
    let live = connector(config).await?;
    let release = |r: &str| {
        if r == "18.9" {
            "18.9 or later".to_string()
        } else {
            r.to_string()
        }
    };
    let (_cluster, url, copied) = copy_live(&live, a, now).await?;
    // Without --now the plan's clock is the snapshot's.
    let now = now.unwrap_or(copied.snapshot_at);
    let text = !a.json;
    if text {
        println!(
            "read-only copy: GitLab {} ({} deletion model, newest migration {}) copied into \
             the {} model: {} tables, {} rows in {:.1} s ({:.0} rows/s), snapshot taken at \
             {}; nothing was written on DATABASE_URL",
            release(&copied.source.release),
            copied.source.deletion,
            copied.source.newest_migration,
            copied.source.model,
            copied.tables.len(),
            copied.rows(),
            copied.elapsed.as_secs_f64(),
            copied.rows_per_s(),
            shared::clock::rfc3339(copied.snapshot_at)
        );
    }
    let mut runner = Runner::new(Connector::from_url(&url)?, config.settings.clone(), now);
    if matches!(
        function,
        Function::PatExpiring | Function::DeliverNotification
    ) {
        runner = runner.with_notifier(notifier_for(function, true).await?);
    }
    let body = body.unwrap_or_else(|| runner.cron_message(function).to_body());
    let plan = runner.plan_until_idle(function, &body).await?;
    let mut session = live.connect("hk-read-only-plan").await?;
    let blockers =
        shadow::live_blockers(&mut session, &plan.removed_groups, &copied.table_names()).await?;
    // The plain plan's lines, with the copy's figures inside the plan object, so a
    // reader of plans (`hk parity`) reads both alike.
    let mut lines: Vec<String> = runner
        .runs
        .iter()
        .map(|r| r.to_json().to_string())
        .collect();
    let mut v = plan.to_json();
    v["plan"]["read_only"] = copied.to_json(&blockers);
    lines.push(v.to_string());
    if let Some(out) = &a.out {
        write_private(out, &lines)?;
    } else if a.json {
        for l in &lines {
            println!("{l}");
        }
    }
    if text {
        print_plan(&runner.runs, &plan, false);
        println!("\nread-only plan: what the copy cannot decide as the real run would");
        for line in shadow::APPROXIMATIONS {
            println!("  * {line}");
        }
        for t in copied.tables.iter().filter(|t| !t.defaulted.is_empty()) {
            println!(
                "  * {}: columns not on the live database, left at their default: {}",
                t.table,
                t.defaulted.join(", ")
            );
        }
        for b in &blockers {
            println!("  * live blocker: {b}");
        }
        if let Some(out) = &a.out {
            println!("plan written to {} (mode 0600)", out.display());
        }
    }
    if let Some(why) = &plan.stopped {
        bail!("{why}");
    }
    Ok(exit::run_code(&runner.runs, plan.exit_code))
}
