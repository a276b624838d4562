//! `hk db up|down`, `hk migrate` and `hk seed`: the throwaway cluster, the model of
//! GitLab's tables (per supported GitLab release) and the demo data set.

use super::*;

#[derive(Subcommand)]
pub(crate) enum DbAction {
    /// initdb + start; prints DATABASE_URL. On HK_PG_PORT, else 54329, else (when
    /// 54329 is taken and HK_PG_PORT is not set) a free port.
    Up {
        /// Print `{"database_url", "base", "port"}` instead of `DATABASE_URL=…`.
        #[arg(long)]
        json: bool,
    },
    /// Stop the cluster and remove its directory (HK_PG_BASE, else <tmp>/hk-pg).
    Down,
    /// The watchdog of a `--read-only` copy's cluster (started by `hk run
    /// --read-only`, not by hand): when its stdin ends, the server is stopped and
    /// BASE removed (engine::shadow::cluster).
    #[command(hide = true)]
    WatchCopy {
        /// The server binaries.
        #[arg(long)]
        bin: PathBuf,
        /// The cluster's folder.
        base: PathBuf,
    },
}

pub(crate) async fn cmd_db(action: DbAction) -> Result<ExitCode> {
    if let DbAction::WatchCopy { bin, base } = action {
        return watch_copy(bin, base).await;
    }
    let mut c = engine::pg::Cluster::default_location();
    match action {
        DbAction::Up { json } => {
            c.stop_previous()?;
            if std::env::var_os("HK_PG_PORT").is_none() && !engine::pg::port_is_free(c.port) {
                let taken = c.port;
                c.port = engine::pg::free_port()?;
                eprintln!(
                    "hk: port {taken} is taken; the cluster listens on {}",
                    c.port
                );
            }
            c.up()?;
            mark_throwaway(&c.url(), "hk db up").await?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "database_url": c.url(),
                        "base": c.base.display().to_string(),
                        "port": c.port,
                    })
                );
            } else {
                println!("DATABASE_URL={}", c.url());
            }
        }
        DbAction::Down => {
            c.down()?;
            println!("stopped; removed {}", c.base.display());
        }
        DbAction::WatchCopy { .. } => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// `hk db watch-copy`: SIGINT, SIGTERM and SIGHUP are caught (and ignored: only the
/// end of stdin, i.e. the end of the `hk` that started it, ends the watch), then
/// the cluster is removed.
async fn watch_copy(bin: PathBuf, base: PathBuf) -> Result<ExitCode> {
    use tokio::signal::unix::{signal, SignalKind};
    let _held = [
        signal(SignalKind::interrupt())?,
        signal(SignalKind::terminate())?,
        signal(SignalKind::hangup())?,
    ];
    tokio::task::spawn_blocking(move || engine::shadow::cluster::watch(&base, &bin)).await??;
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cmd_migrate(
    json: bool,
    gitlab: engine::migrate::GitlabVersion,
) -> Result<ExitCode> {
    let applied = migrate_for(&database_url()?, gitlab).await?;
    if json {
        println!("{}", serde_json::json!({ "applied": applied }));
    } else {
        println!("migrations applied: {applied:?}");
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cmd_seed(set: &str, now: Option<&str>, json: bool) -> Result<ExitCode> {
    if set != "demo" {
        bail!("unknown data set `{set}` (known: demo)");
    }
    let now = parse_now(now)?;
    let mut c = Connector::from_url(&database_url()?)?.connect("hk").await?;
    lab::demo::seed(&mut c, now.date_naive()).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({"set": set, "relative_to": now.date_naive().to_string()})
        );
    } else {
        println!("demo data loaded (dates relative to {})", now.date_naive());
    }
    Ok(ExitCode::SUCCESS)
}
