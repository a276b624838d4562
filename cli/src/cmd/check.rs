//! `hk check`: the read-only preflight against the target database, connected as
//! the functions connect (the same configuration variables, TLS rules and Secrets
//! Manager read). The checks are in `hk::check`; this file parses the arguments,
//! prints one line per check (or `--json`) and sets the exit code.

use std::process::ExitCode;

use anyhow::Result;
use serde_json::json;
use tokio_postgres::config::Host;

use shared::config::Config;
use shared::db::Connector;

use super::parse_now;

/// `hk check`'s arguments.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// Print one JSON document instead of lines.
    #[arg(long)]
    json: bool,
    /// The time the work-waiting counts are taken at (RFC 3339; default: now).
    #[arg(long)]
    now: Option<String>,
}

fn is_loopback(pg: &tokio_postgres::Config) -> bool {
    pg.get_hosts().iter().all(|h| match h {
        Host::Tcp(name) => {
            name == "localhost"
                || name
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        Host::Unix(_) => true,
    })
}

/// Run every check; exit 0 only when every required one passes, 1 when the only
/// failures are a busy database (a lock held elsewhere: retry), 2 otherwise (the
/// database must change first).
pub(crate) async fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let now = parse_now(a.now.as_deref())?;
    // `hk check` emits no metric: the Lambda-only SERVICE_NAME is not required here.
    let config = Config::from_lookup(|k| {
        std::env::var(k).ok().or_else(|| {
            (k == shared::metrics::SERVICE_ENV).then(|| shared::metrics::LOCAL_SERVICE.into())
        })
    })?;
    let env = |k: &str| std::env::var(k).ok();
    let aws = shared::aws::from_env(env);
    let pg = shared::aws::database_config(&config.database.source, Some(&aws)).await?;
    let loopback = is_loopback(&pg);
    let connector = Connector::new(pg, &config.database)?;
    let checks = hk::check::run(&connector, loopback, now).await?;
    let ok = hk::check::all_required_pass(&checks);
    let failed = checks.iter().filter(|c| !c.ok && c.required).count();
    let busy = hk::check::only_busy(&checks);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({ "ok": ok, "now": now, "checks": checks }))?
        );
    } else {
        for c in &checks {
            println!("{}", c.line());
        }
        if ok {
            println!(
                "hk check: all {} required checks pass",
                checks.iter().filter(|c| c.required).count()
            );
        } else if busy {
            println!("hk check: {failed} required check(s) failed: the database is busy, retry");
        } else {
            println!("hk check: {failed} required check(s) failed");
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else if busy {
        ExitCode::from(super::exit::RETRYABLE)
    } else {
        ExitCode::from(super::exit::PERMANENT)
    })
}
