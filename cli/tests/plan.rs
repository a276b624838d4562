//! `hk run --dry-run --until-idle` cannot exhaust the server's lock table (behaviour
//! §11, issue 34): on a cluster of its own with a small `max_locks_per_transaction`,
//! a run whose plan in one transaction would run out of shared memory is planned in
//! slices with the totals of the real run, and one that cannot be sliced stops
//! before half the table with a clear message; both leave the database and the server
//! as they were. Also: the plan reports the sequences it advanced.

use std::process::{Command, Output};

use integration_tests::fixtures::{M, U};
use integration_tests::{Fx, TestDb};
use serde_json::Value;
use shared::db::Connector;

const NOW: &str = "2026-03-01T00:10:00Z";

fn hk(url: &str, args: &[&str]) -> Output {
    hk_env(url, args, &[])
}

fn hk_env(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    // These databases are not hk's throwaway ones: a run that deletes needs --yes.
    let yes: &[&str] = if args.first() == Some(&"run") {
        &["--yes"]
    } else {
        &[]
    };
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(args)
        .args(yes)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("hk runs");
    eprintln!(
        "hk {args:?} -> {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.starts_with('{') || l.starts_with("{\"plan\""))
            .collect::<Vec<_>>()
            .join("\n"),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// A throwaway cluster with a small lock table: its documented size is
/// `max_locks_per_transaction` 16 × `max_connections` 30 = 480 (a plan may hold 240
/// and slices at 60); with fewer background processes than the defaults, the real
/// table is not much larger, so several hundred advisory locks exhaust it. One B38
/// page's statements alone lock about 160 tables and indexes (the removal's, the
/// authorization refresh's and the side effects' with EE's rows), so the table must
/// hold a page of about 22 users with room to spare.
struct SmallCluster(engine::pg::Cluster);

impl SmallCluster {
    fn start() -> SmallCluster {
        let c = engine::pg::Cluster {
            base: std::env::temp_dir().join(format!("hk-locks-{}", uuid::Uuid::new_v4().simple())),
            port: engine::pg::free_port().unwrap(),
        };
        c.up_with(&[
            "max_locks_per_transaction=16",
            "max_connections=30",
            "autovacuum_max_workers=1",
            "max_worker_processes=0",
            "max_wal_senders=0",
            "shared_buffers=32MB",
        ])
        .expect("the small cluster starts");
        SmallCluster(c)
    }

    /// A new migrated database `name`; its URL.
    async fn database(&self, name: &str) -> String {
        let admin = Connector::from_url(&self.0.url())
            .unwrap()
            .connect("t")
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = format!("postgres://postgres@127.0.0.1:{}/{name}", self.0.port);
        assert!(hk(&url, &["migrate"]).status.success());
        url
    }
}

impl Drop for SmallCluster {
    fn drop(&mut self) {
        let _ = self.0.down();
        let _ = std::fs::remove_dir_all(&self.0.base);
    }
}

/// `users` users, each with an expired membership in each of `projects` projects of
/// one group (ids consecutive per user, so a page of 1000 holds 1000 / `projects`
/// users), and their authorizations.
async fn expired(url: &str, users: i64, projects: i64) -> tokio_postgres::Client {
    let c = Connector::from_url(url)
        .unwrap()
        .connect("t")
        .await
        .unwrap();
    c.batch_execute(&format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, created_at, updated_at, organization_id)
           VALUES (100, 'g', 'g', 'Group', ARRAY[100]::bigint[], '2024-01-01', '2024-01-01', 1);
         INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
           VALUES (100, 'Namespace', 'g', 'g', 100, '2024-01-01', '2024-01-01');
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
           SELECT 1000 + p, 'p' || p, 'p' || p, 'Project', 100, ARRAY[100, 1000 + p]::bigint[],
                  '2024-01-01', '2024-01-01', 1 FROM generate_series(1, {projects}) p;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id,
                               created_at, updated_at)
           SELECT p, 'p' || p, 'p' || p, 100, 1000 + p, 1, '2024-01-01', '2024-01-01'
           FROM generate_series(1, {projects}) p;
         INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT u, 'u' || u, 'U' || u, 'u' || u || '@example.com', 'active', false, 0,
                  '2024-01-01', '2024-01-01', 100000, 1 FROM generate_series(1, {users}) u;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at,
                              created_at, updated_at, notification_level, member_namespace_id)
           SELECT (u - 1) * {projects} + p, 30, p, 'Project', 'ProjectMember', u, '2026-02-28',
                  '2024-01-01', '2024-01-01'
          , 3, (SELECT project_namespace_id FROM projects WHERE id = p) FROM generate_series(1, {users}) u, generate_series(1, {projects}) p;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT u, p, 30, true FROM generate_series(1, {users}) u, generate_series(1, {projects}) p;"
    ))
    .await
    .unwrap();
    c
}

async fn count(c: &tokio_postgres::Client, table: &str) -> i64 {
    c.query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// The last line of a `--json` plan: `{"plan": …}`.
fn plan(o: &Output) -> Value {
    let text = String::from_utf8_lossy(&o.stdout);
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    last["plan"].clone()
}

fn deleted(plan: &Value, table: &str) -> i64 {
    plan["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == table)
        .map(|t| t["deleted"].as_i64().unwrap())
        .unwrap_or(0)
}

#[tokio::test]
async fn a_plan_never_holds_half_the_servers_lock_table() {
    let cluster = SmallCluster::start();
    let args = [
        "run",
        "remove-expired-members",
        "--now",
        NOW,
        "--dry-run",
        "--until-idle",
        "--json",
    ];

    // 500 users × 45 memberships: 23 pages of about 22 users. In one transaction the
    // plan takes an advisory lock per user, about 550 locks in all, besides the locks
    // of every table a removal writes (the side effects' tables among them): more
    // than this server's whole table. Sliced, it never holds half of its documented
    // size.
    let url = cluster.database("sliced").await;
    let c = expired(&url, 500, 45).await;
    let o = hk(&url, &args);
    assert_eq!(o.status.code(), Some(0));
    let p = plan(&o);
    assert_eq!(p["stopped"], Value::Null);
    assert!(p["slices"].as_i64().unwrap() > 1, "{p}");
    let server = &p["locks"]["server"];
    assert_eq!(
        server["capacity"], 480,
        "the settings as the server reports them"
    );
    assert!(p["locks"]["most_held"].as_i64().unwrap() < server["stop_at"].as_i64().unwrap());
    assert_eq!(
        count(&c, "members").await,
        22_500,
        "the plan changed nothing"
    );
    // The server is fine: a new session to another database connects.
    let other = Connector::from_url(&cluster.0.url())
        .unwrap()
        .connect("t")
        .await;
    assert!(other.is_ok(), "a new connection failed after the plan");
    // The run does what the plan said.
    let o = hk(
        &url,
        &[
            "run",
            "remove-expired-members",
            "--now",
            NOW,
            "--until-idle",
        ],
    );
    assert!(o.status.success());
    assert_eq!(deleted(&p, "members"), 22_500 - count(&c, "members").await);
    assert_eq!(
        deleted(&p, "project_authorizations"),
        22_500 - count(&c, "project_authorizations").await
    );
    assert_eq!(count(&c, "members").await, 0);

    // 160 users on one page: the first delivery alone holds more than half the table,
    // and a page of B38 cannot be cut: the plan stops there and says so.
    let url = cluster.database("too_big").await;
    let c = expired(&url, 160, 1).await;
    let o = hk(&url, &args);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the plan stopped before the end of the run"),
        "{err}"
    );
    assert!(err.contains("max_locks_per_transaction 16"), "{err}");
    let p = plan(&o);
    assert!(p["stopped"].as_str().unwrap().contains("240 of"), "{p}");
    assert_eq!(count(&c, "members").await, 160);
    let o = hk(
        &url,
        &[
            "run",
            "remove-expired-members",
            "--now",
            NOW,
            "--dry-run",
            "--until-idle",
        ],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("INCOMPLETE: the plan stopped"));
    let other = Connector::from_url(&cluster.0.url())
        .unwrap()
        .connect("t")
        .await;
    assert!(other.is_ok());
}

/// A bot whose membership expired: its `delete-user` child inserts the ghost user
/// migration row (and the ghost user, whose sequence the demo data does not touch).
async fn bot() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::bot(20)]).await;
    fx.members(&[
        M::gm(1, 100, 10, 50),
        M::pm(3, 200, 20, 40).expires("2026-03-01"),
    ])
    .await;
    fx.pas(&[(20, 200, 40), (10, 200, 50)]).await;
    fx.contribution("notes", 1, 200, 20).await;
    db
}

#[tokio::test]
async fn a_plan_reports_the_sequences_it_could_not_roll_back() {
    let db = bot().await;
    let args = [
        "run",
        "remove-expired-members",
        "--now",
        NOW,
        "--dry-run",
        "--until-idle",
    ];
    let o = hk(&db.url, &args);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("removed users (1): 20"), "{out}");
    assert!(out.contains("sequences advanced while it ran"), "{out}");
    assert!(out.contains("public.ghost_user_migrations_id_seq"), "{out}");
    let mut json = args.to_vec();
    json.push("--json");
    let p = plan(&hk(&db.url, &json));
    let moved = p["sequences_advanced"].as_array().unwrap();
    assert!(
        moved
            .iter()
            .any(|s| s["sequence"] == "public.ghost_user_migrations_id_seq"),
        "{p}"
    );
    assert_eq!(p["slices"], 1, "a small run is one transaction");
    // Nothing else changed: no row, no lock left behind.
    assert!(db.exists("users WHERE id = 20").await);
    assert!(!db.exists("ghost_user_migrations").await);
    // `--outbox` would keep a dry run's messages: refused, saying why.
    let dir = std::env::temp_dir().join(format!("hk-outbox-{}", uuid::Uuid::new_v4().simple()));
    let o = hk(
        &db.url,
        &[
            "run",
            "remove-expired-members",
            "--dry-run",
            "--outbox",
            dir.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--outbox cannot be used with --dry-run"),
        "{err}"
    );
    assert!(!dir.exists(), "no outbox was written");
}

#[tokio::test]
async fn a_failed_delivery_is_rolled_back_alone_and_the_plan_still_prints() {
    let db = bot().await;
    // Another session holds `members`: B38's page read times out on its lock, an
    // error outside any of the handler's own transactions.
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE members IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let o = hk_env(
        &db.url,
        &[
            "run",
            "remove-expired-members",
            "--now",
            NOW,
            "--dry-run",
            "--until-idle",
        ],
        &[("DB_LOCK_TIMEOUT_MS", "50")],
    );
    tx.rollback().await.unwrap();
    assert_eq!(o.status.code(), Some(1), "a retryable failure is left");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Plan (what the run would change)"), "{out}");
    assert!(out.contains("dead-lettered messages: 1"), "{out}");
    assert!(!out.contains("current transaction is aborted"), "{out}");
    assert_eq!(
        out.matches("lock timeout").count(),
        5,
        "five receives, each its own: {out}"
    );
}
