//! The copy's private cluster (`hk run --read-only`, issue 47, docs/shadow.md): a
//! throwaway PostgreSQL that holds a copy of production rows, so nobody else on the
//! machine may reach it and it must not outlive `hk`.
//!
//! Owns: `PrivateCluster` — its folder `hk-ro-<id>` under the temp dir made mode
//! 0700; `initdb --auth=scram-sha-256` with a random password (never on a command
//! line: a 0600 file removed once initdb read it); the server listening on no TCP
//! address (`listen_addresses=''`), only on a Unix socket inside that folder (mode
//! 0700); `initdb` and `pg_ctl` (so the server) started with a cleared environment
//! (no `DATABASE_URL`, AWS keys or `GITLAB_DB_KEY_BASE` for `COPY … FROM PROGRAM` to
//! read). Its life is tied to `hk`'s in three layers:
//!
//! 1. `hk` removes it when the plan ends, fails or is interrupted (Ctrl-C, SIGTERM,
//!    SIGHUP: `cmd/read_only.rs` handles the three alike) — `PrivateCluster`'s drop;
//! 2. a **watchdog**, `hk db watch-copy` started by `PrivateCluster::start` in a
//!    process group of its own, reads a pipe whose only writer is `hk`; when `hk`
//!    dies in any way (SIGKILL, an OOM kill) the kernel closes that pipe, and the
//!    watchdog stops the server and removes the folder (`watch`). It ignores
//!    SIGINT, SIGTERM and SIGHUP, so a dropped terminal that kills `hk` does not kill
//!    it before it has cleaned up;
//! 3. `hk` and its watchdog each hold a shared `flock` on the folder's `lock` file
//!    while they live; `sweep`, at the start of every `--read-only` run, removes
//!    each `hk-ro-*` folder whose lock it can take exclusively (both gone: a machine
//!    that crashed, or both processes killed at once).

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::pg::{is_root, pg_cmd, run};

/// The folder name prefix of a copy's cluster under the temp dir.
pub const PREFIX: &str = "hk-ro-";

/// The port that names the server's socket file (`.s.PGSQL.5432`); nothing listens
/// on TCP.
const SOCKET_PORT: u16 = 5432;

/// The lock file every living owner (`hk`, its watchdog) holds shared.
const LOCK: &str = "lock";

/// A command of the server's binaries with a cleared environment: only `PATH` and
/// the locale, so the server inherits none of `hk`'s variables.
fn clean(bin: &Path, args: &[&str]) -> Command {
    let mut c = pg_cmd(bin, args);
    c.env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("LC_ALL", "C.UTF-8");
    c
}

/// The copy's cluster, running. Dropped, it stops the server and removes its folder,
/// then lets its watchdog go.
pub struct PrivateCluster {
    base: PathBuf,
    bin: PathBuf,
    password: String,
    _lock: File,
    watchdog: Option<Child>,
}

impl PrivateCluster {
    /// Make a fresh private cluster under `parent` with the server binaries in `bin`,
    /// watched by `watchdog` (the `hk` executable: `hk db watch-copy` is run) and
    /// start it. A failure on the way removes what was made.
    pub fn start(parent: &Path, bin: &Path, watchdog: &Path) -> Result<PrivateCluster> {
        let id = uuid::Uuid::new_v4().simple().to_string();
        // Short: the socket path under it must fit in 107 bytes.
        let base = parent.join(format!("{PREFIX}{}", &id[..12]));
        DirBuilder::new()
            .mode(0o700)
            .create(&base)
            .with_context(|| format!("cannot create {}", base.display()))?;
        let lock = File::create(base.join(LOCK))?;
        lock.lock_shared()?;
        let mut c = PrivateCluster {
            base,
            bin: bin.to_path_buf(),
            password: random_password()?,
            _lock: lock,
            watchdog: None,
        };
        c.watchdog = Some(spawn_watchdog(watchdog, &c.base, bin)?);
        c.init_and_start()?;
        Ok(c)
    }

    fn init_and_start(&self) -> Result<()> {
        let sock = self.base.join("sock");
        DirBuilder::new().mode(0o700).create(&sock)?;
        let pwfile = self.base.join("pw");
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&pwfile)?
            .write_all(self.password.as_bytes())?;
        if is_root() {
            let mut c = Command::new("chown");
            c.args(["-R", "postgres"]).arg(&self.base);
            run(c, "chown")?;
        }
        let data = self.base.join("data").to_string_lossy().to_string();
        let pw = format!("--pwfile={}", pwfile.display());
        let init = run(
            clean(
                &self.bin.join("initdb"),
                &[
                    "-D",
                    &data,
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    &pw,
                    "--no-sync",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ],
            ),
            "initdb of the copy's cluster",
        );
        std::fs::remove_file(&pwfile)?;
        init?;
        let opts = format!(
            "-k {} -p {SOCKET_PORT} -c listen_addresses='' -c unix_socket_permissions=0700 \
             -c password_encryption=scram-sha-256 -c fsync=off -c synchronous_commit=off \
             -c full_page_writes=off -c max_connections=200 -c shared_buffers=256MB \
             -c maintenance_work_mem=256MB",
            sock.display()
        );
        let log = self.base.join("server.log").to_string_lossy().to_string();
        run(
            clean(
                &self.bin.join("pg_ctl"),
                &[
                    "-D", &data, "-l", &log, "-w", "-t", "120", "-o", &opts, "start",
                ],
            ),
            "pg_ctl start of the copy's cluster",
        )
        .with_context(|| format!("see {log}"))
    }

    /// The cluster's folder.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The URL of database `db` as the `postgres` role with the password, over the
    /// Unix socket.
    pub fn url(&self, db: &str) -> String {
        let sock = self.base.join("sock").to_string_lossy().replace('/', "%2F");
        format!(
            "postgres://postgres:{}@{sock}:{SOCKET_PORT}/{db}?sslmode=disable",
            self.password
        )
    }
}

impl Drop for PrivateCluster {
    fn drop(&mut self) {
        if let Err(e) = remove(&self.base, &self.bin) {
            eprintln!(
                "hk: the copy's cluster at {} was not removed: {e:#}",
                self.base.display()
            );
        }
        // Closing the pipe lets the watchdog end (nothing left for it to do).
        if let Some(mut w) = self.watchdog.take() {
            drop(w.stdin.take());
            let _ = w.wait();
        }
    }
}

/// 32 random bytes from the operating system, as hex.
fn random_password() -> Result<String> {
    let mut b = [0u8; 32];
    File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Start `hk db watch-copy` for `base`: its stdin is a pipe only this process
/// writes to; its own process group, so a terminal's Ctrl-C or hang-up reaches `hk`
/// and not it; a cleared environment.
fn spawn_watchdog(exe: &Path, base: &Path, bin: &Path) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    Command::new(exe)
        .args(["db", "watch-copy", "--bin"])
        .arg(bin)
        .arg(base)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .process_group(0)
        .spawn()
        .context("cannot start the copy's watchdog (hk db watch-copy)")
}

/// The watchdog's work (`hk db watch-copy`): hold the folder's lock shared, wait
/// until stdin ends (the `hk` that started it closed it or died), then stop the
/// server and remove `base`. Call it with SIGINT, SIGTERM and SIGHUP handled.
pub fn watch(base: &Path, bin: &Path) -> Result<()> {
    let lock = File::open(base.join(LOCK))
        .with_context(|| format!("{} holds no lock file", base.display()))?;
    lock.lock_shared()?;
    let mut sink = Vec::new();
    // Ends at EOF (or an error, which also means the writer is gone).
    let _ = std::io::stdin().read_to_end(&mut sink);
    remove(base, bin)
}

/// Stop the server of the cluster at `base` (immediate: its data is thrown away) and
/// remove the folder. A `postmaster.pid` naming a process that is not a PostgreSQL
/// server (gone, or its pid reused after a restart) is not signalled.
pub fn remove(base: &Path, bin: &Path) -> Result<()> {
    if !base.exists() {
        return Ok(());
    }
    if let Some(pid) = postmaster_pid(base) {
        if is_postgres(pid) {
            let data = base.join("data").to_string_lossy().to_string();
            let _ = clean(
                &bin.join("pg_ctl"),
                &["-D", &data, "-m", "immediate", "-w", "stop"],
            )
            .output();
            if is_postgres(pid) {
                bail!("the copy's server (pid {pid}) did not stop");
            }
        }
    }
    match std::fs::remove_dir_all(base) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(e).with_context(|| format!("cannot remove {}", base.display()))
        }
        _ => Ok(()),
    }
}

/// The postmaster's pid from `base/data/postmaster.pid`.
pub fn postmaster_pid(base: &Path) -> Option<u32> {
    std::fs::read_to_string(base.join("data/postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Whether `pid` is a living (not zombie) PostgreSQL server process.
pub fn is_postgres(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // `pid (comm) state …`: comm may hold spaces, so read around the last ')'.
    let Some((head, tail)) = stat.rsplit_once(')') else {
        return false;
    };
    head.contains("(postgres") && !tail.trim_start().starts_with(['Z', 'X'])
}

/// Remove every `hk-ro-*` folder under `parent` that no living `hk` or watchdog
/// holds (its lock can be taken exclusively): copies of earlier runs left by a
/// crash. The removed folders.
pub fn sweep(parent: &Path, bin: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(parent) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let base = e.path();
        if !name.starts_with(PREFIX) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let stale = match File::open(base.join(LOCK)) {
            // Held: a living run owns it. Taken: we hold it while removing.
            Ok(lock) => lock.try_lock().is_ok(),
            // No lock file: made by an hk before issue 47 once initdb ran, or
            // being made right now (its lock comes before its data).
            Err(_) => base.join("data/PG_VERSION").exists(),
        };
        if stale && remove(&base, bin).is_ok() {
            removed.push(base);
        }
    }
    removed
}
