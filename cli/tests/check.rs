//! `hk check` (issue 15) against real databases: the migrated schema passes; a dropped
//! column, a changed type and a changed `ON DELETE` each fail naming the object; a real
//! PgBouncer (Debian's `pgbouncer`, started here on 127.0.0.1 as the `postgres` user)
//! fails the session check in transaction pooling and passes it in session pooling. A
//! session opens without a named prepared statement, which such a pool could lose.

use std::io;
use std::net::TcpStream;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use integration_tests::{wait, TestDb};
use serde_json::Value;
use shared::db::Connector;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

mod common;
use common::{hk_on, text as out};

const NOW: &str = "2026-03-01T00:00:00Z";

fn hk_check(url: &str, json: bool) -> Output {
    let mut c = hk_on(url);
    c.args(["check", "--now", NOW]);
    if json {
        c.arg("--json");
    }
    c.output().expect("hk runs")
}

/// The failed lines of a text run.
fn failures(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('✗'))
        .map(str::to_string)
        .collect()
}

/// A test database with GitLab 18.8's marker in `schema_migrations` (created when the
/// model has none), so the schema version check passes.
async fn gitlab_db() -> TestDb {
    let db = TestDb::new().await;
    db.exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version character varying PRIMARY KEY);
         INSERT INTO schema_migrations VALUES ('20251231013427') ON CONFLICT DO NOTHING",
    )
    .await;
    db
}

/// A GitLab release past the tested range fails `hk check` (exit 2), as the functions
/// refuse it at cold start, unless accepted up to its newest migration with
/// `--accept-schema` or `GITLAB_SCHEMA_ACCEPTED`; a later migration fails again.
#[tokio::test]
async fn a_release_past_the_tested_range_fails_unless_accepted() {
    use shared::gitlab::release;
    let db = gitlab_db().await;
    let newer = release::PAST_NEWEST;
    db.exec(&format!("INSERT INTO schema_migrations VALUES ('{newer}')"))
        .await;
    let o = hk_check(&db.url, false);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(2), "{text}");
    let f = failures(&o);
    assert!(
        f.len() == 1 && f[0].starts_with("✗ GitLab schema:") && f[0].contains("newer than tested"),
        "{text}"
    );
    assert!(
        text.contains(&format!("GITLAB_SCHEMA_ACCEPTED={newer}")),
        "{text}"
    );
    let accepted = |c: &mut std::process::Command| {
        let o = c.output().expect("hk runs");
        let text = out(&o);
        assert!(
            text.contains("accepted by GITLAB_SCHEMA_ACCEPTED"),
            "{text}"
        );
        o
    };
    let mut c = hk_on(&db.url);
    c.args(["check", "--now", NOW, "--accept-schema", newer]);
    let by_flag = accepted(&mut c);
    let mut c = hk_on(&db.url);
    c.args(["check", "--now", NOW])
        .env("GITLAB_SCHEMA_ACCEPTED", newer);
    let by_env = accepted(&mut c);
    if server_version_num(&db).await >= 160_005 {
        assert_eq!(by_flag.status.code(), Some(0), "{}", out(&by_flag));
        assert_eq!(by_env.status.code(), Some(0), "{}", out(&by_env));
    }
    let later = (newer.parse::<u64>().unwrap() + 1).to_string();
    db.exec(&format!("INSERT INTO schema_migrations VALUES ('{later}')"))
        .await;
    let o = c.output().expect("hk runs");
    assert_eq!(
        o.status.code(),
        Some(2),
        "a later upgrade fails again: {}",
        out(&o)
    );
}

async fn server_version_num(db: &TestDb) -> i32 {
    db.scalar::<String>("SELECT current_setting('server_version_num')")
        .await
        .parse()
        .unwrap()
}

#[tokio::test]
async fn the_migrated_schema_passes_every_check() {
    let db = gitlab_db().await;
    let o = hk_check(&db.url, false);
    let text = out(&o);
    if server_version_num(&db).await < 160_005 {
        // A cluster older than GitLab 18's minimum fails exactly the version line.
        assert_eq!(o.status.code(), Some(2), "{text}");
        let f = failures(&o);
        assert!(
            f.len() == 1 && f[0].starts_with("✗ server version"),
            "{text}"
        );
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(failures(&o).is_empty(), "{text}");
    for line in [
        "✓ server version: PostgreSQL 1",
        "✓ writable:",
        "✓ catalogue: all ",
        "✓ privileges: role ",
        "✓ on conflict:",
        "✓ deletion model: ",
        "✓ foreign keys:",
        "✓ ghost user:",
        "✓ instance: application_settings.uuid is ",
        "✓ system hooks: on (user_remove_from_team/group, group_destroy, project_destroy, user_destroy, through deliver-notification): 0 SystemHook row(s) receive them",
        "✓ session (advisory locks):",
        "✓ waiting remove-expired-members:",
        "✓ waiting pat-expiring:",
    ] {
        assert!(text.contains(line), "missing `{line}`:\n{text}");
    }
    // The release line (the model's markers, or the 18.8 marker `gitlab_db` adds); on
    // 19.5's model, the release by name.
    let release = match integration_tests::db::gitlab_version() {
        engine::migrate::GitlabVersion::V19_5 => "✓ GitLab schema: GitLab 19.5 found (newest migration 20260916223000; supported 18.2 to 19.5)",
        _ => "✓ GitLab schema: GitLab 18.",
    };
    assert!(text.contains(release), "missing `{release}`:\n{text}");
    // The model line names what this release writes (HK_TEST_GITLAB's model).
    let model = match integration_tests::db::gitlab_version() {
        engine::migrate::GitlabVersion::V18_2 => "schedules",
        engine::migrate::GitlabVersion::V18_8 => "state-columns",
        engine::migrate::GitlabVersion::V18_11 | engine::migrate::GitlabVersion::V19_5 => {
            "scheduled-at"
        }
    };
    let line = format!("✓ deletion model: {model}: ");
    assert_eq!(text.matches(&line).count(), 1, "missing `{line}`:\n{text}");
    // --json: the same checks, machine-readable, and nothing changed.
    let before = db.snapshot().await;
    let j: Value = serde_json::from_slice(&hk_check(&db.url, true).stdout).expect("JSON");
    assert_eq!(j["ok"], true, "{j}");
    assert!(j["checks"].as_array().unwrap().len() > 10, "{j}");
    assert_eq!(db.snapshot().await, before, "hk check changes nothing");
}

/// Storage removal's instance binding (docs/storage-cleanup.md): `GITLAB_INSTANCE_UUID`
/// naming another instance fails the `instance` line; naming this one passes it.
#[tokio::test]
async fn gitlab_instance_uuid_must_name_this_databases_instance() {
    let db = gitlab_db().await;
    db.exec(
        "INSERT INTO application_settings (id, created_at, updated_at, uuid)
         VALUES (1, '2024-01-01', '2024-01-01', 'aaaaaaaa-0000-4000-8000-000000000001')",
    )
    .await;
    let run = |uuid: &str| {
        hk_on(&db.url)
            .args(["check", "--now", NOW])
            .env("GITLAB_INSTANCE_UUID", uuid)
            .output()
            .expect("hk runs")
    };
    let o = run("bbbbbbbb-0000-4000-8000-000000000002");
    let f = failures(&o);
    assert!(
        f.iter()
            .any(|l| l.starts_with("✗ instance: GITLAB_INSTANCE_UUID is bbbbbbbb")),
        "{}",
        out(&o)
    );
    let o = run("aaaaaaaa-0000-4000-8000-000000000001");
    assert!(
        out(&o).contains("✓ instance: application_settings.uuid is GITLAB_INSTANCE_UUID"),
        "{}",
        out(&o)
    );
}

#[tokio::test]
async fn the_work_waiting_is_counted_at_the_given_time() {
    let db = TestDb::new().await;
    let fx = integration_tests::Fx(&db);
    fx.group(100, "acme", None).await;
    fx.users(&[integration_tests::fixtures::U::human(10)]).await;
    fx.members(&[integration_tests::fixtures::M::gm(10, 100, 10, 30).expires("2026-02-27")])
        .await;
    let j: Value = serde_json::from_slice(&hk_check(&db.url, true).stdout).expect("JSON");
    let waiting = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "waiting remove-expired-members")
        .cloned()
        .expect("the B38 count");
    assert_eq!(waiting["detail"], "1 memberships expired", "{j}");
}

/// A deletion period past the calendar (a value the column accepts) is a count of no
/// due group, not a panic of `hk check`.
#[tokio::test]
async fn a_deletion_period_past_the_calendar_counts_no_due_group() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 2147483647, '2024-01-01', '2024-01-01')",
    )
    .await;
    let o = hk_check(&db.url, true);
    let j: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", out(&o)));
    let waiting = j["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "waiting adjourned-group-deletion")
        .cloned()
        .expect("the B51 count");
    assert_eq!(
        waiting["detail"], "0 groups due (marked on or before 0001-01-01)",
        "{j}"
    );
}

async fn assert_fails_naming(db: &TestDb, ddl: &str, names: &[&str]) {
    db.exec(ddl).await;
    let o = hk_check(&db.url, false);
    let text = out(&o);
    assert_eq!(o.status.code(), Some(2), "{ddl}:\n{text}");
    let f = failures(&o);
    assert!(!f.is_empty(), "{ddl}:\n{text}");
    for n in names {
        assert!(
            f.iter().any(|l| l.contains(n)),
            "{ddl}: no ✗ line names `{n}`:\n{text}"
        );
    }
    assert!(text.contains("required check(s) failed"), "{ddl}:\n{text}");
}

#[tokio::test]
async fn a_dropped_column_fails_naming_the_column_and_the_statements() {
    let db = TestDb::new().await;
    assert_fails_naming(
        &db,
        "ALTER TABLE members DROP COLUMN expires_at",
        &[
            "catalogue batches::remove_expired_members::PAGE:",
            "expires_at does not exist",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_changed_type_fails_naming_the_column() {
    let db = TestDb::new().await;
    assert_fails_naming(
        &db,
        "ALTER TABLE ghost_user_migrations ALTER COLUMN hard_delete DROP DEFAULT, \
         ALTER COLUMN hard_delete TYPE int4 USING hard_delete::int4",
        &[
            "catalogue gitlab::user_removal::INSERT_MIGRATION:",
            "column \"hard_delete\"",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_changed_on_delete_fails_naming_the_foreign_key() {
    let db = TestDb::new().await;
    assert_fails_naming(
        &db,
        "ALTER TABLE personal_access_tokens DROP CONSTRAINT fk_personal_access_tokens_user_id,
           ADD CONSTRAINT fk_personal_access_tokens_user_id FOREIGN KEY (user_id)
             REFERENCES users (id) ON DELETE NO ACTION",
        &[
            "foreign key personal_access_tokens.user_id → users",
            "ON DELETE NO ACTION, expected CASCADE",
        ],
    )
    .await;
}

/// members.user_id and the other loose foreign keys of users have no FK in GitLab:
/// the check wants GitLab's statement trigger that records deleted users.
#[tokio::test]
async fn a_missing_loose_fk_trigger_on_users_fails() {
    let db = TestDb::new().await;
    assert_fails_naming(
        &db,
        "DROP TRIGGER users_loose_fk_trigger ON users",
        &[
            "loose foreign keys of users",
            "users_loose_fk_trigger is missing",
        ],
    )
    .await;
}

#[tokio::test]
async fn a_missing_insert_default_fails_naming_the_column() {
    let db = TestDb::new().await;
    assert_fails_naming(
        &db,
        "ALTER TABLE users ADD COLUMN required_thing text NOT NULL DEFAULT 'x';
         ALTER TABLE users ALTER COLUMN required_thing DROP DEFAULT",
        &["insert into users", "users.required_thing"],
    )
    .await;
}

/// A PgBouncer on 127.0.0.1 in front of the test cluster, run as `postgres` when we
/// are root (it refuses root), killed on drop.
struct PgBouncer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl PgBouncer {
    fn start(upstream_url: &str, pool_mode: &str) -> PgBouncer {
        let (host, port) = host_port(upstream_url);
        let dir = std::env::temp_dir().join(format!("hk-pgbouncer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let listen = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={port}\n\n[pgbouncer]\n\
                 listen_addr = 127.0.0.1\nlisten_port = {listen}\nunix_socket_dir =\n\
                 auth_type = trust\nauth_file = {users}\npool_mode = {pool_mode}\n\
                 default_pool_size = 10\nmax_client_conn = 50\n\
                 ignore_startup_parameters = extra_float_digits,options\n\
                 logfile = {log}\n",
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let root = std::fs::metadata("/proc/self")
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
            .unwrap_or(false);
        let ini = dir.join("pgbouncer.ini");
        let mut cmd = if root {
            Command::new("chown")
                .args(["-R", "postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=postgres",
                "--regid=postgres",
                "--init-groups",
                "pgbouncer",
            ])
            .arg(&ini);
            c
        } else {
            let mut c = Command::new("pgbouncer");
            c.arg(&ini);
            c
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer starts (scripts/system-packages.sh installs it)");
        let mut b = PgBouncer {
            child,
            port: listen,
            dir,
        };
        wait::until_blocking("pgbouncer listens", wait::SERVER_LISTEN, || {
            if let Ok(Some(status)) = b.child.try_wait() {
                panic!(
                    "pgbouncer exited ({status}):\n{}",
                    std::fs::read_to_string(b.dir.join("pgbouncer.log")).unwrap_or_default()
                );
            }
            TcpStream::connect(("127.0.0.1", b.port)).ok()
        });
        b
    }

    /// `url` with its host and port replaced by this PgBouncer's.
    fn url(&self, url: &str) -> String {
        let (host, port) = host_port(url);
        url.replacen(
            &format!("@{host}:{port}/"),
            &format!("@127.0.0.1:{}/", self.port),
            1,
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The host and port of a `postgres://user@host:port/db` URL.
fn host_port(url: &str) -> (String, u16) {
    let after = url.split_once('@').expect("URL has user@").1;
    let hp = after.split_once('/').expect("URL has /db").0;
    let (h, p) = hp.rsplit_once(':').expect("URL has a port");
    (h.to_string(), p.parse().expect("numeric port"))
}

fn session_line(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.contains("session (advisory locks)"))
        .unwrap_or_else(|| panic!("no session line:\n{}", out(o)))
        .to_string()
}

#[tokio::test]
async fn pgbouncer_transaction_pooling_fails_the_session_check() {
    let db = TestDb::new().await;
    let bouncer = PgBouncer::start(&db.url, "transaction");
    let o = hk_check(&bouncer.url(&db.url), false);
    let line = session_line(&o);
    assert!(line.starts_with('✗'), "{}", out(&o));
    assert!(line.contains("transaction"), "{line}");
    assert!(
        line.contains("pool_mode = session"),
        "says what to do: {line}"
    );
    assert_eq!(o.status.code(), Some(2), "{}", out(&o));
}

#[tokio::test]
async fn pgbouncer_session_pooling_passes_the_session_check() {
    let db = gitlab_db().await;
    let bouncer = PgBouncer::start(&db.url, "session");
    let o = hk_check(&bouncer.url(&db.url), false);
    let line = session_line(&o);
    assert!(line.starts_with('✓'), "{}", out(&o));
    if server_version_num(&db).await >= 160_005 {
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    }
}

/// A stream that keeps a copy of every byte the client writes.
struct Recorded {
    inner: tokio::net::TcpStream,
    sent: Arc<Mutex<Vec<u8>>>,
}

impl AsyncRead for Recorded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recorded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let n = std::task::ready!(Pin::new(&mut self.inner).poll_write(cx, buf))?;
        self.sent.lock().unwrap().extend_from_slice(&buf[..n]);
        Poll::Ready(Ok(n))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The frontend messages after the startup packet: (type, body).
fn frontend_messages(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let len = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
    let mut rest = &bytes[len(bytes)..];
    let mut out = Vec::new();
    while rest.len() >= 5 {
        let n = len(&rest[1..]);
        out.push((rest[0], rest[5..1 + n].to_vec()));
        rest = &rest[1 + n..];
    }
    out
}

/// Through a pool per transaction (PgBouncer `pool_mode = transaction`), a statement
/// prepared in one exchange may be run on another backend in the next, where it does
/// not exist: opening a session would then fail at random, before `hk check` could say
/// why. The session settings therefore go in one unnamed statement, parsed and run in
/// one exchange.
#[tokio::test]
async fn a_session_opens_without_a_named_prepared_statement() {
    let db = TestDb::new().await;
    let connector = Connector::from_url(&db.url).expect("connector");
    let sent = Arc::new(Mutex::new(Vec::new()));
    let recorded = sent.clone();
    let client = connector
        .connect_through("hk-test", move |inner| Recorded {
            inner,
            sent: recorded,
        })
        .await
        .expect("session opens");
    let timeout: String = client
        .query_one("SELECT current_setting('statement_timeout')", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(timeout, "0", "the session settings were applied");
    let bytes = sent.lock().unwrap().clone();
    let messages = frontend_messages(&bytes);
    let parses: Vec<&Vec<u8>> = messages
        .iter()
        .filter(|(t, _)| *t == b'P')
        .map(|(_, body)| body)
        .collect();
    assert!(
        parses.len() >= 2,
        "the settings and the query above: {messages:?}"
    );
    // The settings: the first Parse, unnamed (its name is the empty string).
    assert_eq!(
        parses[0][0],
        0,
        "named: {:?}",
        String::from_utf8_lossy(parses[0])
    );
    let text = String::from_utf8_lossy(&parses[0][1..]);
    assert!(text.contains("statement_timeout"), "{text}");
}
