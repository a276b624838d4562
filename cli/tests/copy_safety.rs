//! The `--read-only` copy is safe on a production GitLab (issue 47, docs/shadow.md):
//! its cluster refuses a connection without the password and has no TCP listener,
//! its server's environment holds none of `hk`'s secrets; SIGTERM or SIGKILL of `hk`
//! during the copy leaves no server and no data, and a copy left by an earlier run
//! is swept; the plan file `--out` writes is the owner's only; the copy holds only
//! the catalogue statements' columns; the size estimate is printed and a copy past
//! `--max-copy` refused; a missing sequence grant, an unreadable or missing table
//! fails before the first row is copied.
//!
//! `hk` is caught mid-copy deterministically: its live session goes through a proxy
//! that holds the first `COPY (SELECT` it sends, and says so.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use engine::shadow::cluster::{is_postgres, postmaster_pid, PREFIX};
use integration_tests::TestDb;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

mod common;
use common::{demo_on, hk_on, tomorrow};

/// Secrets in `hk`'s environment the copy's server must not see.
const SECRETS: [(&str, &str); 3] = [
    ("AWS_SECRET_ACCESS_KEY", "secret-access-key-47"),
    ("GITLAB_DB_KEY_BASE", "gitlab-db-key-base-47"),
    ("AWS_ACCESS_KEY_ID", "AKIA47TEST"),
];

/// A TCP proxy to the test database that forwards everything until a client sends
/// `COPY (SELECT`, then holds that message (and all after it) for good; `caught`
/// turns true then.
struct Gate {
    url: String,
    caught: watch::Receiver<bool>,
}

async fn gate(db: &TestDb) -> Gate {
    let cfg: tokio_postgres::Config = db.url.parse().unwrap();
    let host = match &cfg.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(h) => h.clone(),
        other => panic!("a TCP test database, not {other:?}"),
    };
    let port = cfg.get_ports()[0];
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let local = listener.local_addr().unwrap().port();
    let (tx, caught) = watch::channel(false);
    tokio::spawn(async move {
        loop {
            let (client, _) = listener.accept().await.unwrap();
            let server = TcpStream::connect((host.as_str(), port)).await.unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                tokio::spawn(async move { tokio::io::copy(&mut sr, &mut cw).await });
                let mut buf = vec![0u8; 65536];
                loop {
                    let n = match cr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if buf[..n].windows(12).any(|w| w == b"COPY (SELECT") {
                        tx.send_replace(true);
                        // Hold it: the client waits for an answer that never comes.
                        std::future::pending::<()>().await;
                    }
                    if sw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Gate {
        url: format!(
            "postgres://{}@127.0.0.1:{local}/{}",
            cfg.get_user().unwrap(),
            cfg.get_dbname().unwrap()
        ),
        caught,
    }
}

/// A fresh temp dir for one `hk` (its `TMPDIR`: where the copy's cluster goes).
fn tmp_dir() -> PathBuf {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let d = std::env::temp_dir().join(format!("hk-t{}", &id[..8]));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The copy clusters' folders under `tmp`.
fn copies(tmp: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(PREFIX))
        .collect()
}

/// `hk run remove-expired-members --read-only` on `url`, with the secrets in its
/// environment, started (not awaited).
fn start_hk(url: &str, tmp: &Path) -> Child {
    let mut c = hk_on(url);
    c.args([
        "run",
        "remove-expired-members",
        "--now",
        &tomorrow(),
        "--dry-run",
        "--until-idle",
        "--read-only",
        "--json",
    ])
    .env("TMPDIR", tmp)
    .env("RUST_LOG", "error")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    for (k, v) in SECRETS {
        c.env(k, v);
    }
    c.spawn().expect("hk starts")
}

/// Until `hk` sends its first `COPY (SELECT` (its cluster is up, the copy begun).
async fn until_copying(g: &mut Gate) {
    tokio::time::timeout(Duration::from_secs(300), g.caught.wait_for(|c| *c))
        .await
        .expect("hk reaches the copy")
        .unwrap();
}

/// The copy's cluster while `hk` copies: private, and its server's environment clean.
/// Its folder and postmaster pid.
async fn check_private(tmp: &Path) -> (PathBuf, u32) {
    let found = copies(tmp);
    assert_eq!(found.len(), 1, "{found:?}");
    let base = found[0].clone();
    let mode = std::fs::metadata(&base).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the folder is its owner's only");
    let pid = postmaster_pid(&base).expect("the server runs");
    assert!(is_postgres(pid));
    // No TCP listener: postmaster.pid's listen-address line is empty.
    let pidfile = std::fs::read_to_string(base.join("data/postmaster.pid")).unwrap();
    assert_eq!(pidfile.lines().nth(5), Some(""), "{pidfile}");
    // The server's environment holds none of hk's.
    let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let env = String::from_utf8_lossy(&env);
    for (k, v) in SECRETS {
        assert!(!env.contains(k) && !env.contains(v), "{k} in {env:?}");
    }
    assert!(!env.contains("DATABASE_URL") && !env.contains("postgres://"));
    // Without the password (or with a wrong one), refused.
    for password in [None, Some("wrong")] {
        let mut cfg = tokio_postgres::Config::new();
        cfg.host_path(base.join("sock"))
            .port(5432)
            .user("postgres")
            .dbname("hk_copy");
        if let Some(p) = password {
            cfg.password(p);
        }
        let e = cfg
            .connect(tokio_postgres::NoTls)
            .await
            .err()
            .expect("refused");
        // Without one the client has none to give when the server asks for it; a
        // wrong one the server refuses.
        let e = format!("{e:?}");
        assert!(e.contains("password"), "{e}");
    }
    (base, pid)
}

/// Until `path` is gone (the watchdog removes it after `hk` died).
async fn until_gone(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while path.exists() {
        assert!(Instant::now() < deadline, "{} still there", path.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigterm_during_the_copy_leaves_no_server_and_no_data() {
    let db = demo_on(&tomorrow()).await;
    let mut g = gate(&db).await;
    let tmp = tmp_dir();
    let hk = start_hk(&g.url, &tmp);
    until_copying(&mut g).await;
    let (base, pid) = check_private(&tmp).await;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &hk.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = tokio::task::spawn_blocking(move || hk.wait_with_output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0));
    assert!(err.contains("interrupted (SIGTERM)"), "{err}");
    // hk itself removed it before exiting.
    assert!(!base.exists(), "{} left", base.display());
    assert!(!is_postgres(pid), "the server still runs");
    std::fs::remove_dir(&tmp).unwrap();
}

#[tokio::test]
async fn sigkill_during_the_copy_leaves_no_server_and_no_data() {
    let db = demo_on(&tomorrow()).await;
    let mut g = gate(&db).await;
    let tmp = tmp_dir();
    let mut hk = start_hk(&g.url, &tmp);
    until_copying(&mut g).await;
    let (base, pid) = check_private(&tmp).await;
    hk.kill().unwrap();
    hk.wait().unwrap();
    // The watchdog saw hk's pipe close: it stops the server, then removes the folder.
    until_gone(&base).await;
    assert!(!is_postgres(pid), "the server still runs");
    std::fs::remove_dir(&tmp).unwrap();
}

/// `hk run remove-expired-members --read-only` on `url` with `extra` arguments, to
/// its end: (exit code, stderr).
fn hk_read_only(url: &str, tmp: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let now = tomorrow();
    let o = hk_on(url)
        .args([
            "run",
            "remove-expired-members",
            "--now",
            &now,
            "--dry-run",
            "--until-idle",
            "--read-only",
        ])
        .args(extra)
        .env("TMPDIR", tmp)
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    eprintln!("hk {extra:?} -> {:?}\n{err}", o.status.code());
    (o.status.code(), err)
}

#[tokio::test]
async fn a_stale_copy_is_swept_and_the_plan_file_is_the_owners_only() {
    let db = demo_on(&tomorrow()).await;
    db.exec("ANALYZE").await;
    let tmp = tmp_dir();
    // Left by an earlier run killed with its watchdog: nobody holds its lock.
    let stale = tmp.join(format!("{PREFIX}stale0000000"));
    std::fs::create_dir_all(stale.join("data")).unwrap();
    std::fs::write(stale.join("lock"), "").unwrap();
    std::fs::write(stale.join("data/PG_VERSION"), "16\n").unwrap();
    // Another run's, alive: its lock is held.
    let alive = tmp.join(format!("{PREFIX}alive0000000"));
    std::fs::create_dir_all(&alive).unwrap();
    let held = std::fs::File::create(alive.join("lock")).unwrap();
    held.lock_shared().unwrap();
    let plan = tmp.join("plan.json");
    let (code, err) = hk_read_only(&db.url, &tmp, &["--json", "--out", plan.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(!stale.exists(), "the stale copy is swept");
    assert!(
        err.contains("removed a copy's cluster left by an earlier run"),
        "{err}"
    );
    assert!(alive.exists(), "a living run's copy is left alone");
    // The estimate before the copy, from the analysed live tables.
    let estimate = err
        .lines()
        .find_map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()?
                .get("copy_estimate")
                .cloned()
        })
        .expect("an estimate line");
    assert!(estimate["rows"].as_u64().unwrap() > 1000, "{estimate}");
    assert!(estimate["bytes"].as_u64().unwrap() > 0, "{estimate}");
    let mode = std::fs::metadata(&plan).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the plan is its owner's only");
    let text = std::fs::read_to_string(&plan).unwrap();
    let p = hk::parity::PlanFile::parse(&text).unwrap();
    assert!(!p.decisions.is_empty());
    assert!(text.contains("\"snapshot_at\""));
    drop(held);
    std::fs::remove_dir_all(&tmp).unwrap();
}

#[tokio::test]
async fn a_copy_past_max_copy_is_refused_before_any_row() {
    let db = demo_on(&tomorrow()).await;
    db.exec("ANALYZE").await;
    let tmp = tmp_dir();
    let (code, err) = hk_read_only(&db.url, &tmp, &["--max-copy", "64KB"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("more than --max-copy 64KB: nothing was copied")
            && err.contains("--confirm-copy"),
        "{err}"
    );
    assert!(copies(&tmp).is_empty(), "the cluster is removed");
    let (code, err) = hk_read_only(&db.url, &tmp, &["--max-copy", "64KB", "--confirm-copy"]);
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_dir_all(&tmp).unwrap();
}

/// A database of `model` for a copy, with the catalogue columns' selection.
async fn target_and_selection(
    model: engine::migrate::GitlabVersion,
) -> (TestDb, engine::shadow::Selection) {
    let mut local = TestDb::empty().await;
    engine::migrate::run_for(&mut local.client, model)
        .await
        .unwrap();
    let selection = engine::shadow::selection::derive(&local.connector())
        .await
        .unwrap();
    (local, selection)
}

#[tokio::test]
async fn the_copy_holds_only_the_catalogue_statements_columns() {
    let db = demo_on(&tomorrow()).await;
    db.exec(
        "UPDATE users SET encrypted_password = 'bcrypt-hash-47';
         UPDATE personal_access_tokens SET token_digest = 'digest-47-' || id",
    )
    .await;
    let mut live = db.connector().connect("t").await.unwrap();
    let model = integration_tests::db::gitlab_version();
    let (local, selection) = target_and_selection(model).await;
    for (table, column) in [
        ("users", "encrypted_password"),
        ("personal_access_tokens", "token_digest"),
    ] {
        assert!(
            !selection[table].contains(column),
            "{table}.{column} is used by no statement: {:?}",
            selection[table]
        );
    }
    assert!(selection["members"].contains("expires_at"));
    let s = engine::shadow::ReadOnlySnapshot::begin(&mut live)
        .await
        .unwrap();
    let plan = s.prepare(&local.client, Some(&selection)).await.unwrap();
    let copied = s.copy(&local.client, &plan, |_, _, _| {}).await.unwrap();
    s.end().await.unwrap();
    copied.finish(&local.client).await.unwrap();
    // Fewer columns than the model's (every table of this model is used by some
    // statement or a cascade), and the columns outside are not in the copy.
    let model_columns: i64 = local
        .scalar(
            "SELECT count(*) FROM information_schema.columns c
               JOIN pg_tables t ON t.tablename = c.table_name AND t.schemaname = c.table_schema
              WHERE c.table_schema = 'public'",
        )
        .await;
    let copied_columns: usize = copied.tables.iter().map(|t| t.columns.len()).sum();
    assert!(
        (copied_columns as i64) < model_columns * 3 / 4,
        "{copied_columns} of {model_columns} columns"
    );
    let users = copied.tables.iter().find(|t| t.table == "users").unwrap();
    assert!(users.left_out.contains(&"encrypted_password".to_string()));
    assert!(users.rows > 0);
    let leaked: i64 = local
        .scalar(
            "SELECT (SELECT count(*) FROM users WHERE encrypted_password = 'bcrypt-hash-47')
                  + (SELECT count(*) FROM personal_access_tokens WHERE token_digest LIKE 'digest-47%')",
        )
        .await;
    assert_eq!(leaked, 0, "a column outside the catalogue's was copied");
    let kept: i64 = local
        .scalar("SELECT count(*) FROM members WHERE expires_at IS NOT NULL")
        .await;
    assert!(kept > 0);
}

#[tokio::test]
async fn a_missing_grant_or_table_fails_before_the_first_row() {
    let db = demo_on(&tomorrow()).await;
    let role = format!("ro_{}", &db.name[2..14]);
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"
    ))
    .await;
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let model = integration_tests::db::gitlab_version();
    let (local, selection) = target_and_selection(model).await;
    // Each problem, then its fix; every refusal comes from the plan of the copy,
    // before any row is read, and the copy stays empty.
    let cases = [
        (
            "no SELECT on sequence members_id_seq",
            format!("GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO {role}; REVOKE SELECT ON members FROM {role}"),
        ),
        ("no SELECT on members.", format!("GRANT SELECT ON members TO {role}; DROP TABLE notification_settings")),
        ("table notification_settings is not on the live database", String::new()),
    ];
    for (want, fix) in cases {
        let mut live = shared::db::Connector::from_url(&url)
            .unwrap()
            .connect("t")
            .await
            .unwrap();
        let s = engine::shadow::ReadOnlySnapshot::begin(&mut live)
            .await
            .unwrap();
        let e = s
            .prepare(&local.client, Some(&selection))
            .await
            .expect_err("refused");
        let e = format!("{e:#}");
        assert!(
            e.contains("nothing was read") && e.contains(want),
            "{want}: {e}"
        );
        s.end().await.unwrap();
        let rows: i64 = local.scalar("SELECT count(*) FROM members").await;
        assert_eq!(rows, 0);
        if !fix.is_empty() {
            db.exec(&fix).await;
        }
    }
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

#[tokio::test]
async fn the_read_only_grants_are_enough_for_the_copy_and_no_more() {
    let db = demo_on(&tomorrow()).await;
    let role = format!("rg_{}", &db.name[2..14]);
    db.exec(&format!(
        "CREATE ROLE {role} LOGIN;
         REVOKE ALL ON DATABASE {d} FROM PUBLIC; REVOKE ALL ON SCHEMA public FROM PUBLIC;",
        d = db.name
    ))
    .await;
    let o = hk_on(&db.url)
        .args(["grants", "--role", &role, "--read-only"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let script = String::from_utf8_lossy(&o.stdout).to_string();
    for l in script.lines().filter(|l| !l.starts_with("--")) {
        assert!(
            l.starts_with("GRANT ") && l.ends_with(&format!(" TO {role};")),
            "{l}"
        );
        for write in [
            "INSERT",
            "UPDATE",
            "DELETE",
            "TRUNCATE",
            "USAGE ON SEQUENCE",
        ] {
            assert!(!l.contains(write), "{l}");
        }
    }
    assert!(
        script.contains("GRANT SELECT ON SEQUENCE public.members_id_seq"),
        "{script}"
    );
    db.exec(&script).await;
    // The copy and its plan, as that role.
    let url = db.url.replacen("postgres@", &format!("{role}@"), 1);
    let tmp = tmp_dir();
    let (code, err) = hk_read_only(&url, &tmp, &[]);
    assert_eq!(code, Some(0), "{err}");
    // And no more: a column no statement reads stays unreadable.
    let c = shared::db::Connector::from_url(&url)
        .unwrap()
        .connect("t")
        .await
        .unwrap();
    let e = c
        .query("SELECT encrypted_password FROM users LIMIT 1", &[])
        .await
        .expect_err("a password hash is not the copy's");
    assert!(format!("{e:?}").contains("permission denied"), "{e:?}");
    drop(c);
    std::fs::remove_dir_all(&tmp).ok();
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}
