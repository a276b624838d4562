//! `hk run <function> --dry-run --until-idle --read-only` (part of `hk run`): the plan
//! made on a copy of the live database in a throwaway local cluster, never on
//! DATABASE_URL itself (docs/shadow.md). One read-only snapshot transaction copies
//! the model's tables ([`hk::shadow`]); the unchanged plan runs on the copy; the
//! cluster is removed afterwards, whatever the outcome.

use super::run::{message_body, notifier_for, print_plan, refuse_dry_outbox, RunArgs};
use super::*;
use hk::local::Runner;
use hk::shadow::{self, Copied, ReadOnlySnapshot};

/// The throwaway cluster of the copy: stopped and removed when dropped.
pub(crate) struct CopyCluster(hk::pg::Cluster);

impl Drop for CopyCluster {
    fn drop(&mut self) {
        if let Err(e) = self.0.down() {
            eprintln!(
                "hk: the copy's cluster at {} was not removed: {e:#}",
                self.0.base.display()
            );
        }
    }
}

/// Start the copy's cluster (HK_PG_BIN, a free port, under the temp dir) and create
/// its database; its URL.
async fn start_copy() -> Result<(CopyCluster, String)> {
    let c = hk::pg::Cluster {
        base: std::env::temp_dir().join({
            // Short: the server's socket path (under it) must fit in 107 bytes.
            let id = uuid::Uuid::new_v4().simple().to_string();
            format!("hk-ro-{}", &id[..12])
        }),
        port: hk::pg::free_port()?,
    };
    c.up()
        .context("starting the throwaway cluster of the copy (HK_PG_BIN)")?;
    let c = CopyCluster(c);
    let admin = Connector::from_url(&c.0.url())?.connect("hk").await?;
    admin.batch_execute("CREATE DATABASE hk_copy").await?;
    let url = format!("postgres://postgres@127.0.0.1:{}/hk_copy", c.0.port);
    Ok((c, url))
}

/// Recognise the live database (refused when its model is not recognised), start the
/// copy's cluster, and copy the live database into it in one read-only snapshot on a
/// session of `live`; the cluster (removed when dropped), the copy's URL and what was
/// copied.
pub(crate) async fn copy_live(live: &Connector) -> Result<(CopyCluster, String, Copied)> {
    let mut session = live.connect("hk-read-only-plan").await?;
    // The model first, in a snapshot of its own: the copy's snapshot stays open only
    // while rows are copied (an open snapshot holds back VACUUM on the live server).
    let probe = ReadOnlySnapshot::begin(&mut session).await?;
    let model = probe.source.model;
    probe.end().await?;
    let (cluster, url) = start_copy().await?;
    migrate_for(&url, model).await?;
    mark_throwaway(&url, "hk run --read-only").await?;
    let snapshot = ReadOnlySnapshot::begin(&mut session).await?;
    if snapshot.source.model != model {
        bail!(
            "GitLab's schema changed while the copy was prepared (model {model}, now {}): \
             run the plan again",
            snapshot.source.model
        );
    }
    let local = Connector::from_url(&url)?.connect("hk").await?;
    let copied = snapshot.copy_into(&local).await?;
    snapshot.end().await?;
    Ok((cluster, url, copied))
}

/// `hk run … --dry-run --until-idle --read-only`: the read-only plan of the function
/// from its message (a cron message when none is given). Interrupted (Ctrl-C), it stops
/// and the copy's cluster is removed all the same.
pub(crate) async fn cmd_read_only(a: RunArgs) -> Result<ExitCode> {
    refuse_dry_outbox(&a)?;
    let now = parse_now(a.now.as_deref())?;
    let config = local_config()?;
    let body = message_body(&a)?;
    let a = &a;
    let config = &config;
    tokio::select! {
        r = plan_on_copy(a, now, config, body) => r,
        _ = tokio::signal::ctrl_c() => bail!(
            "interrupted (Ctrl-C): nothing was written on DATABASE_URL; the copy is removed"
        ),
    }
}

async fn plan_on_copy(
    a: &RunArgs,
    now: DateTime<Utc>,
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
    let (_cluster, url, copied) = copy_live(&live).await?;
    if !a.json {
        println!(
            "read-only copy: GitLab {} ({} deletion model, newest migration {}) copied into \
             the {} model: {} tables, {} rows in {:.1} s ({:.0} rows/s); nothing was written \
             on DATABASE_URL",
            release(&copied.source.release),
            copied.source.deletion,
            copied.source.newest_migration,
            copied.source.model,
            copied.tables.len(),
            copied.rows(),
            copied.elapsed.as_secs_f64(),
            copied.rows_per_s()
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
    if a.json {
        // The plain plan's lines, with the copy's figures inside the plan object, so a
        // reader of plans (`hk parity`) reads both alike.
        for r in &runner.runs {
            println!("{}", r.to_json());
        }
        let mut v = plan.to_json();
        v["plan"]["read_only"] = copied.to_json(&blockers);
        println!("{v}");
    } else {
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
        if !copied.missing.is_empty() {
            println!(
                "  * tables not on the live database (empty in the copy): {}",
                copied.missing.join(", ")
            );
        }
        for b in &blockers {
            println!("  * live blocker: {b}");
        }
    }
    if let Some(why) = &plan.stopped {
        bail!("{why}");
    }
    Ok(exit::run_code(&runner.runs, plan.exit_code))
}
