//! `hk` at 3 a.m. against real PostgreSQL: `hk run` as quiet as `hk demo` unless
//! `--verbose`; a connection error says its cause once; `hk db up` takes a free port
//! when 54329 is taken, starts over a server that was killed, and `hk db down` removes
//! the cluster it made; `hk demo` refuses
//! a server older than PostgreSQL 16 in one line.

use std::net::TcpListener;
use std::process::{Command, Output};

use integration_tests::TestDb;
use serde_json::Value;

mod common;
use common::text;

fn hk(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

/// The JSON log lines on stderr, by level.
fn log_levels(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| v["level"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn run_shows_warnings_only_unless_verbose() {
    let db = TestDb::new().await;
    let args = [
        "run",
        "remove-expired-members",
        "--dry-run",
        "--now",
        "2026-03-01T00:10:00Z",
    ];
    let o = hk(&args, &[("DATABASE_URL", &db.url)]);
    assert!(o.status.success());
    let levels = log_levels(&o);
    assert!(
        levels.iter().all(|l| l == "warn" || l == "error"),
        "hk run printed log lines below warn without --verbose: {levels:?}"
    );
    assert!(!o.stdout.is_empty(), "the run table is printed");
    let o = hk(
        &[args.as_slice(), &["--verbose"]].concat(),
        &[("DATABASE_URL", &db.url)],
    );
    assert!(o.status.success());
    assert!(
        log_levels(&o).iter().any(|l| l == "info"),
        "--verbose shows the functions' info lines"
    );
}

#[test]
fn a_connection_error_says_its_cause_once() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    for args in [
        vec!["migrate"],
        vec!["run", "remove-expired-members", "--dry-run"],
    ] {
        let o = hk(&args, &[("DATABASE_URL", &url)]);
        assert_eq!(o.status.code(), Some(1), "unreachable: retryable");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert_eq!(
            err.matches("error connecting to server").count(),
            1,
            "the cause once: {err}"
        );
        assert!(err.contains("Connection refused"), "{err}");
    }
}

#[test]
fn db_up_takes_a_free_port_when_54329_is_taken_and_down_removes_the_cluster() {
    // Hold 54329 (if something else holds it, it is taken all the same).
    let _held = TcpListener::bind(("127.0.0.1", engine::pg::DEFAULT_PORT));
    assert!(!engine::pg::port_is_free(engine::pg::DEFAULT_PORT));
    let base = std::env::temp_dir().join(format!("hk-night-{}", uuid::Uuid::new_v4().simple()));
    let env = [("HK_PG_BASE", base.to_str().unwrap())];
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(["db", "up", "--json"])
        .env_remove("HK_PG_PORT")
        .env("HK_PG_BASE", &base);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    let up: Value = serde_json::from_slice(&o.stdout).unwrap();
    let port = up["port"].as_u64().unwrap() as u16;
    assert_ne!(port, engine::pg::DEFAULT_PORT);
    assert!(err.contains("port 54329 is taken"), "{err}");
    let url = up["database_url"].as_str().unwrap();
    assert!(url.contains(&format!(":{port}/")), "{url}");
    // The cluster answers on the URL it printed.
    let o = hk(&["migrate", "--json"], &[("DATABASE_URL", url)]);
    assert!(o.status.success());
    assert!(base.join("data/PG_VERSION").exists());

    let o = hk(&["db", "down"], &env);
    assert!(o.status.success());
    assert!(!base.exists(), "hk db down removes {}", base.display());
    assert!(engine::pg::port_is_free(port), "the server is stopped");
    // A second `down` has nothing to do.
    assert!(hk(&["db", "down"], &env).status.success());
}

/// A cluster whose server was killed (or whose machine restarted) leaves its
/// `postmaster.pid`: `hk db up` starts a new one there and `hk db down` removes it.
#[test]
fn db_up_and_down_after_the_server_was_killed() {
    let base = std::env::temp_dir().join(format!("hk-night-{}", uuid::Uuid::new_v4().simple()));
    let port = engine::pg::free_port().unwrap().to_string();
    let env = [
        ("HK_PG_BASE", base.to_str().unwrap()),
        ("HK_PG_PORT", &port),
    ];
    let kill_server = || {
        let pid_file = std::fs::read_to_string(base.join("data/postmaster.pid")).unwrap();
        let pid = pid_file.lines().next().unwrap().trim().to_string();
        assert!(Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success());
        // The server is gone once its process is, or is a zombie nobody reaped yet.
        let status = format!("/proc/{pid}/status");
        let alive = || std::fs::read_to_string(&status).is_ok_and(|s| !s.contains("State:\tZ"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while alive() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(!alive(), "the killed server {pid} is gone");
        assert!(
            base.join("data/postmaster.pid").exists(),
            "the stale pid file stays"
        );
    };
    assert!(hk(&["db", "up", "--json"], &env).status.success());
    kill_server();
    let o = hk(&["db", "up", "--json"], &env);
    assert!(o.status.success(), "hk db up over a stale postmaster.pid");
    let up: Value = serde_json::from_slice(&o.stdout).unwrap();
    let url = up["database_url"].as_str().unwrap();
    assert!(hk(&["migrate", "--json"], &[("DATABASE_URL", url)])
        .status
        .success());
    kill_server();
    assert!(
        hk(&["db", "down"], &env).status.success(),
        "hk db down over a stale pid"
    );
    assert!(!base.exists(), "hk db down removes {}", base.display());
}

#[test]
fn db_down_leaves_a_directory_that_is_not_a_cluster_alone() {
    let base = std::env::temp_dir().join(format!("hk-night-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(base.join("data")).unwrap();
    std::fs::write(base.join("data/notes.txt"), "mine").unwrap();
    let o = hk(&["db", "down"], &[("HK_PG_BASE", base.to_str().unwrap())]);
    assert!(o.status.success());
    assert!(base.join("data/notes.txt").exists());
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn demo_refuses_a_server_older_than_16_in_one_line() {
    // Server binaries that say they are Debian 12's PostgreSQL 15.
    let bin = std::env::temp_dir().join(format!("hk-pg15-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&bin).unwrap();
    let initdb = bin.join("initdb");
    std::fs::write(
        &initdb,
        "#!/bin/sh\necho 'initdb (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)'\n",
    )
    .unwrap();
    let mut p = std::fs::metadata(&initdb).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(&initdb, p).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(["demo", "--now", "2026-03-01T00:10:00Z"])
        .env_remove("DATABASE_URL")
        .env_remove("PG_BIN")
        .env("HK_PG_BIN", &bin);
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("PostgreSQL 15") && lines[0].contains("bash scripts/pg-versions.sh 16"),
        "{err}"
    );
    assert!(o.stdout.is_empty(), "no demo ran");
    std::fs::remove_dir_all(&bin).unwrap();
}
