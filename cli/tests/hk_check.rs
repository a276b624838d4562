//! The `hk-check` Lambda function's handler (issue 35), run in process against real
//! PostgreSQL with a function's configuration (`TRANSPORT=sqs`, `SERVICE_NAME`, the
//! database by `DATABASE_URL` here instead of the secret): its report is `hk check
//! --json`'s, check for check; it logs one line per check and a summary; a connection
//! it cannot open is a failed report, not an error; and over TLS to a server whose
//! certificate the CA bundle verifies (a throwaway cluster switched to `ssl = on`), its
//! `TLS` line says TLS is in use.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use chrono::{DateTime, Utc};
use integration_tests::sinks::certs::TestCa;
use integration_tests::{wait, TestDb};
use serde_json::{json, Value};
use shared::db::Connector;

const NOW: &str = "2026-03-01T00:00:00Z";
/// GitLab 18.8's marker version (docs/gitlab-source-notes.md §A.1).
const GITLAB_18_8: &str = "20251231013427";

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(NOW)
        .unwrap()
        .with_timezone(&Utc)
}

/// A function's environment: Globals of infra/template.yaml, the database by URL.
fn function_env(url: &str) -> HashMap<&'static str, String> {
    HashMap::from([
        ("TRANSPORT", "sqs".to_string()),
        ("SERVICE_NAME", "hk-check-test".to_string()),
        ("DATABASE_URL", url.to_string()),
        ("DB_LOCK_TIMEOUT_MS", "300".to_string()),
    ])
}

async fn invoke(env: &HashMap<&'static str, String>, event: Value) -> Value {
    let report = hk::check::function::handle_with(|k| env.get(k).cloned(), &event, now()).await;
    serde_json::to_value(report).unwrap()
}

async fn gitlab_marker(c: &tokio_postgres::Client) {
    c.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version character varying PRIMARY KEY);
         DELETE FROM schema_migrations; INSERT INTO schema_migrations VALUES ('{GITLAB_18_8}');"
    ))
    .await
    .unwrap();
}

/// `(name, ok, required, detail)` of each check; the session line's detail names
/// backend pids, which differ from run to run.
fn lines(report: &Value) -> Vec<(String, bool, bool, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = c["name"].as_str().unwrap().to_string();
            let detail = if name.starts_with("session") {
                String::new()
            } else {
                c["detail"].as_str().unwrap().to_string()
            };
            (
                name,
                c["ok"].as_bool().unwrap(),
                c["required"].as_bool().unwrap(),
                detail,
            )
        })
        .collect()
}

#[tokio::test(flavor = "current_thread")]
async fn the_functions_report_is_hk_checks_and_is_logged() {
    let db = TestDb::new().await;
    gitlab_marker(&db.client).await;
    // One check made to fail, so the comparison covers a failure and its fix too.
    db.exec("DROP TRIGGER users_loose_fk_trigger ON users")
        .await;
    let (logs, guard) = integration_tests::logs::capture();
    let report = invoke(&function_env(&db.url), json!({ "now": NOW })).await;
    drop(guard);
    assert_eq!(report["status"], "fail", "{report:#}");
    assert_eq!(report["exit_code"], 2);
    assert_eq!(report["now"], "2026-03-01T00:00:00Z");

    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(["check", "--json", "--now", NOW])
        .env("DATABASE_URL", &db.url)
        .env("DB_LOCK_TIMEOUT_MS", "300")
        .env("RUST_LOG", "warn")
        .env_remove("TRANSPORT")
        .env_remove("DATABASE_SECRET_ARN")
        .env_remove("DATABASE_CA_BUNDLE")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let cli: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(lines(&report), lines(&cli));
    assert_eq!(report["exit_code"], cli["exit_code"]);
    let n = report["checks"].as_array().unwrap().len();
    assert!(n > 10, "{n} checks");
    // One log line per check, with its result, then the summary.
    let logged = logs.with_message("check");
    assert_eq!(logged.len(), n, "{}", logs.dump());
    assert!(logged
        .iter()
        .any(|l| l["check"] == "privileges" && l["ok"] == true && l["level"] == "info"));
    let failed = logged
        .iter()
        .find(|l| l["check"] == "loose foreign keys of users")
        .unwrap_or_else(|| panic!("{}", logs.dump()));
    assert_eq!(failed["level"], "warn");
    assert!(failed["fix"]
        .as_str()
        .unwrap()
        .contains("loose_foreign_keys_deleted_records"));
    let done = logs.one("hk-check done");
    assert_eq!(done["exit_code"], 2);
    assert_eq!(done["summary"], "hk check: 1 required check(s) failed");
}

#[tokio::test(flavor = "current_thread")]
async fn a_failure_is_a_report_with_the_exit_status() {
    // Nothing listens there: the report says so, status 2.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let (logs, guard) = integration_tests::logs::capture();
    let report = invoke(&function_env(&url), json!({})).await;
    drop(guard);
    assert_eq!(report["status"], "fail");
    assert_eq!(report["exit_code"], 2);
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(checks.len(), 1, "{report:#}");
    assert_eq!(checks[0]["name"], "connection");
    assert!(checks[0]["fix"]
        .as_str()
        .unwrap()
        .contains("security group"));
    let line = logs.one("check");
    assert_eq!(line["level"], "warn", "{line}");
    // A configuration the functions refuse is a report too.
    let mut env = function_env(&url);
    env.remove("DATABASE_URL");
    let report = invoke(&env, json!({})).await;
    assert_eq!(report["exit_code"], 2);
    assert!(report["checks"][0]["detail"]
        .as_str()
        .unwrap()
        .contains("DATABASE_SECRET_ARN"));
    // So is an event it cannot read.
    let report = invoke(&function_env(&url), json!({ "now": "yesterday" })).await;
    assert_eq!(report["checks"][0]["name"], "event");
    assert_eq!(report["exit_code"], 2);
}

/// A throwaway cluster (`hk db up`), stopped and removed when dropped.
struct Cluster {
    base: PathBuf,
    port: u16,
}

impl Cluster {
    fn hk(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_hk"))
            .args(args)
            .env("HK_PG_BASE", &self.base)
            .env("HK_PG_PORT", self.port.to_string())
            .env("DATABASE_URL", self.plain())
            .output()
            .unwrap()
    }

    fn plain(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.hk(&["db", "down"]);
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn over_tls_the_report_says_tls_is_in_use() {
    let cluster = Cluster {
        base: std::env::temp_dir().join(format!("hk-check-tls-{}", uuid::Uuid::new_v4().simple())),
        port: std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port(),
    };
    let o = cluster.hk(&["db", "up"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = cluster.hk(&["migrate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A certificate for a name the process cannot resolve, reached through hostaddr:
    // not loopback by name, so the functions' rule requires TLS and verifies it.
    let ca = TestCa::get();
    let leaf = ca.issue(&["db.test.example"], &[]);
    let data = cluster.base.join("data");
    std::fs::write(data.join("server.crt"), &leaf.cert_pem).unwrap();
    std::fs::write(data.join("server.key"), &leaf.key_pem).unwrap();
    std::fs::set_permissions(
        data.join("server.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    // The server's files belong to the server's user (`postgres` when run as root).
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&data).unwrap());
    for f in ["server.crt", "server.key"] {
        std::os::unix::fs::chown(data.join(f), Some(owner), None).unwrap();
    }
    let admin = Connector::from_url(&cluster.plain())
        .unwrap()
        .connect("tls-setup")
        .await
        .unwrap();
    gitlab_marker(&admin).await;
    for stmt in [
        "ALTER SYSTEM SET ssl_cert_file = 'server.crt'",
        "ALTER SYSTEM SET ssl_key_file = 'server.key'",
        "ALTER SYSTEM SET ssl = on",
        "SELECT pg_reload_conf()",
    ] {
        admin.batch_execute(stmt).await.unwrap();
    }
    let mut env = function_env(&format!(
        "host=db.test.example hostaddr=127.0.0.1 port={} user=postgres dbname=postgres",
        cluster.port
    ));
    env.insert(
        "DATABASE_CA_BUNDLE",
        ca.write_bundle().display().to_string(),
    );
    // The reload is asynchronous: until it is done, the connection check fails.
    let report = wait::until(
        "the server to accept TLS after ssl = on",
        wait::SERVER_RELOAD,
        || async {
            let r = invoke(&env, json!({ "now": NOW })).await;
            (r["checks"][0]["name"] != "connection").then_some(r)
        },
    )
    .await;
    let tls = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "TLS")
        .unwrap_or_else(|| panic!("no TLS line: {report:#}"))
        .clone();
    assert_eq!(tls["ok"], true, "{tls}");
    assert_eq!(tls["required"], true, "{tls}");
    let detail = tls["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("TLSv1.") && detail.contains("host name verified"),
        "{detail}"
    );
    assert_eq!(report["exit_code"], 0, "{report:#}");
    drop(admin);
}

/// The `side effects` line says which rows a removal writes, and whether
/// `AUDIT_EVENTS` agrees with the audit events the database holds (advisory); a
/// malformed value is refused by name.
#[tokio::test(flavor = "current_thread")]
async fn the_side_effects_line_compares_audit_events_with_the_database() {
    let db = TestDb::new().await;
    gitlab_marker(&db.client).await;
    let side_effects = |report: &Value| -> (bool, bool, String) {
        let c = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "side effects")
            .unwrap_or_else(|| panic!("{report:#}"))
            .clone();
        (
            c["ok"].as_bool().unwrap(),
            c["required"].as_bool().unwrap(),
            c["detail"].as_str().unwrap().to_string(),
        )
    };
    let mut env = function_env(&db.url);
    let (ok, _, detail) = side_effects(&invoke(&env, json!({ "now": NOW })).await);
    assert!(ok, "{detail}");
    assert!(
        detail.contains("todos")
            && detail.contains("audit events: off (AUDIT_EVENTS), as the database shows"),
        "{detail}"
    );
    // The instance writes audit events, but the stack says off: advisory.
    db.exec(
        "INSERT INTO project_audit_events (id, created_at, project_id, author_id, event_name)
         VALUES (1, '2026-02-01', 1, 1, 'project_created')",
    )
    .await;
    let (ok, required, detail) = side_effects(&invoke(&env, json!({ "now": NOW })).await);
    assert!(!ok && !required, "{detail}");
    assert!(detail.contains("holds audit events"), "{detail}");
    env.insert("AUDIT_EVENTS", "on".into());
    let (ok, _, detail) = side_effects(&invoke(&env, json!({ "now": NOW })).await);
    assert!(ok, "{detail}");
    assert!(detail.contains("audit events: on"), "{detail}");
    env.insert("AUDIT_EVENTS", "yes".into());
    let report = invoke(&env, json!({ "now": NOW })).await;
    assert!(
        report
            .to_string()
            .contains("AUDIT_EVENTS must be `on` or `off`"),
        "{report:#}"
    );
}

/// The `group hooks` line says whether `GROUP_HOOKS` sends EE's group hooks and how
/// many `GroupHook` rows have the events a removal sends; rows while it is off are
/// advisory.
#[tokio::test(flavor = "current_thread")]
async fn the_group_hooks_line_compares_group_hooks_with_the_database() {
    let db = TestDb::new().await;
    gitlab_marker(&db.client).await;
    let line = |report: &Value| -> (bool, bool, String) {
        let c = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "group hooks")
            .unwrap_or_else(|| panic!("{report:#}"))
            .clone();
        (
            c["ok"].as_bool().unwrap(),
            c["required"].as_bool().unwrap(),
            c["detail"].as_str().unwrap().to_string(),
        )
    };
    let mut env = function_env(&db.url);
    let (ok, _, detail) = line(&invoke(&env, json!({ "now": NOW })).await);
    assert!(
        ok && detail.contains("off (GROUP_HOOKS), and no GroupHook"),
        "{detail}"
    );
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, organization_id)
         VALUES (5, 'g', 'g', 'Group', ARRAY[5], 1);
         INSERT INTO web_hooks (id, type, group_id, member_events) VALUES (1, 'GroupHook', 5, true),
                (2, 'GroupHook', 5, false)",
    )
    .await;
    let (ok, required, detail) = line(&invoke(&env, json!({ "now": NOW })).await);
    assert!(!ok && !required, "{detail}");
    assert!(detail.contains("but 1 GroupHook row(s)"), "{detail}");
    env.insert("GROUP_HOOKS", "on".into());
    let (ok, _, detail) = line(&invoke(&env, json!({ "now": NOW })).await);
    assert!(
        ok && detail.contains("on (GROUP_HOOKS)") && detail.contains("to 1 GroupHook"),
        "{detail}"
    );
    env.insert("GROUP_HOOKS", "maybe".into());
    let report = invoke(&env, json!({ "now": NOW })).await;
    assert!(
        report
            .to_string()
            .contains("GROUP_HOOKS must be `on` or `off`"),
        "{report:#}"
    );
}
