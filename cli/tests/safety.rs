//! `hk` pointed at a database it did not create: no demo defaults for the notifying
//! functions (a missing variable is refused by name, exit 2), the operators'
//! acceptance contract still runs every function, and `--dry-run --until-idle`
//! plans a whole run and leaves the database byte-for-byte unchanged.

use std::process::{Command, Output};

use integration_tests::fixtures::{M, U};
use integration_tests::{Fx, TestDb};
use serde_json::Value;
use shared::db::Connector;

mod common;
use common::text;

/// Every variable `hk` could otherwise take from its demo defaults.
const NOTICE_VARS: [&str; 6] = [
    "EMAIL_TRANSPORT",
    "EMAIL_FILE_DIR",
    "GITLAB_BASE_URL",
    "GITLAB_DB_KEY_BASE",
    "GITLAB_DB_KEY_BASE_SECRET_ARN",
    "MAIL_FROM",
];

fn hk(url: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hk"));
    c.args(args)
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "warn");
    // These databases are not hk's throwaway ones: a run that deletes needs --yes.
    if args.first() == Some(&"run") {
        c.arg("--yes");
    }
    for k in NOTICE_VARS {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

/// A database made the way an operator would: plain `CREATE DATABASE` in the test
/// cluster + `hk migrate`, so it carries no throwaway marker; dropped on drop.
struct PlainDb {
    name: String,
    url: String,
}

impl PlainDb {
    async fn new() -> PlainDb {
        let base = integration_tests::db::base_url();
        let name = format!("plain_{}", uuid::Uuid::new_v4().simple());
        let admin = Connector::from_url(&base)
            .unwrap()
            .connect("t")
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let url = match base.rsplit_once('/') {
            Some((head, tail)) => match tail.split_once('?') {
                Some((_, q)) => format!("{head}/{name}?{q}"),
                None => format!("{head}/{name}"),
            },
            None => panic!("DATABASE_URL {base} has no database"),
        };
        let o = hk(&url, &["migrate"], &[]);
        assert!(o.status.success());
        PlainDb { name, url }
    }
}

impl Drop for PlainDb {
    fn drop(&mut self) {
        let _ = integration_tests::db::drop_database_blocking(
            &integration_tests::db::base_url(),
            &self.name,
        );
    }
}

const NOW: &str = "2026-03-01T00:10:00Z";

#[tokio::test]
async fn notices_need_explicit_settings_on_a_database_hk_did_not_create() {
    let db = PlainDb::new().await;
    // No mail settings: refused by name, before anything is marked as notified.
    let o = hk(&db.url, &["run", "pat-expiring", "--now", NOW], &[]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    for v in [
        "EMAIL_TRANSPORT",
        "GITLAB_BASE_URL",
        "GITLAB_DB_KEY_BASE",
        "MAIL_FROM",
    ] {
        assert!(err.contains(v), "{v} not named: {err}");
    }
    // A loopback address does not make it throwaway, but a dry run sends nothing.
    assert!(db.url.contains("127.0.0.1") || db.url.contains("localhost"));
    let o = hk(
        &db.url,
        &["run", "pat-expiring", "--now", NOW, "--dry-run"],
        &[],
    );
    assert!(o.status.success());
    // One variable set, the others still named.
    let o = hk(
        &db.url,
        &["run", "deliver-notification", "--message", "{}"],
        &[("EMAIL_TRANSPORT", "log")],
    );
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("EMAIL_TRANSPORT") && err.contains("MAIL_FROM"),
        "{err}"
    );
    // Functions that send no notice need none of them.
    let o = hk(
        &db.url,
        &["run", "remove-expired-members", "--now", NOW],
        &[],
    );
    assert!(o.status.success());
}

#[tokio::test]
async fn the_acceptance_contract_runs_every_function_on_a_plain_database() {
    let db = PlainDb::new().await;
    let mail = std::env::temp_dir().join(format!("hk-safety-mail-{}", db.name));
    let state = std::env::temp_dir().join(format!("hk-safety-state-{}", db.name));
    let env = [
        ("TRANSPORT", "local"),
        ("EMAIL_TRANSPORT", "file"),
        ("EMAIL_FILE_DIR", mail.to_str().unwrap()),
        ("HK_STATE_DIR", state.to_str().unwrap()),
        ("GITLAB_BASE_URL", "https://gitlab.example.test"),
        ("GITLAB_DB_KEY_BASE", "00112233445566778899aabbccddeeff"),
        ("MAIL_FROM", "gitlab@example.test"),
    ];
    for f in [
        "remove-expired-members",
        "schedule-prune-deletions",
        "adjourned-group-deletion",
        "placeholder-user-cleanup",
        "pat-expiring",
    ] {
        let o = hk(&db.url, &["run", f, "--now", NOW, "--until-idle"], &env);
        assert!(o.status.success(), "{f}");
    }
    let children = [
        (
            "delete-user",
            r#"{"version":1,"type":"delete-user.run","message_key":"delete-user:1","run_id":"r","hop":0,"issued_at":"2026-03-01T00:10:00Z","payload":{"user_id":1}}"#,
        ),
        ("deliver-notification", r#"{}"#),
    ];
    for (f, body) in children {
        let o = hk(
            &db.url,
            &["run", f, "--now", NOW, "--until-idle", "--message", body],
            &env,
        );
        // The variables were accepted: whatever the message's fate, no usage error.
        assert!(
            !String::from_utf8_lossy(&o.stderr).contains("hk uses none of its demo defaults"),
            "{f}"
        );
    }
    let _ = std::fs::remove_dir_all(mail);
    let _ = std::fs::remove_dir_all(state);
}

#[tokio::test]
async fn the_log_mailer_is_refused_on_a_database_hk_did_not_create() {
    let db = PlainDb::new().await;
    let c = Connector::from_url(&db.url)
        .unwrap()
        .connect("t")
        .await
        .unwrap();
    c.batch_execute(
        "INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id)
           VALUES (10, 'u10', 'U', 'u10@example.com', 'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1);
         INSERT INTO personal_access_tokens (id, user_id, name, revoked, expires_at, organization_id, created_at, updated_at)
           VALUES (1, 10, 'laptop', false, '2026-03-05', 1, '2024-01-01', '2024-01-01');",
    )
    .await
    .unwrap();
    let env = [
        ("EMAIL_TRANSPORT", "log"),
        ("GITLAB_BASE_URL", "https://gitlab.example.test"),
        ("GITLAB_DB_KEY_BASE", "00112233445566778899aabbccddeeff"),
        ("MAIL_FROM", "gitlab@example.test"),
    ];
    for args in [
        &["run", "pat-expiring", "--now", NOW, "--until-idle"][..],
        &["run", "pat-expiring", "--now", NOW],
    ] {
        let o = hk(&db.url, args, &env);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("EMAIL_TRANSPORT=log"), "{err}");
        assert!(!err.contains("Email delivered"), "{err}");
    }
    let claimed: i64 = c
        .query_one(
            "SELECT count(*) FROM personal_access_tokens WHERE seven_days_notification_sent_at IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(claimed, 0, "no token was claimed");
    // A dry run sends nothing: the log mailer is harmless there.
    let o = hk(
        &db.url,
        &["run", "pat-expiring", "--now", NOW, "--dry-run"],
        &env,
    );
    assert!(o.status.success());
    // The `file` mailer hands the notice on: the token is claimed and its mail written.
    let mail = std::env::temp_dir().join(format!("hk-safety-mail-{}", db.name));
    let state = std::env::temp_dir().join(format!("hk-safety-state-{}", db.name));
    let mut file_env = env.to_vec();
    file_env[0] = ("EMAIL_TRANSPORT", "file");
    file_env.push(("EMAIL_FILE_DIR", mail.to_str().unwrap()));
    file_env.push(("HK_STATE_DIR", state.to_str().unwrap()));
    let o = hk(&db.url, &["run", "pat-expiring", "--now", NOW], &file_env);
    assert!(o.status.success());
    assert_eq!(std::fs::read_dir(&mail).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(mail);
    let _ = std::fs::remove_dir_all(state);
}

/// Expired members (one of them a bot, deleted by its delete-user child) on
/// 2026-03-01.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(12), U::bot(20), U::ghost(5)])
        .await;
    fx.members(&[
        M::pm(2, 200, 10, 30).expires("2026-02-28"),
        M::pm(3, 200, 20, 40).expires("2026-03-01"),
        M::pm(6, 200, 12, 30).expires("2026-03-02"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (20, 200, 40), (12, 200, 30)]).await;
    fx.pat(1, 20, None).await;
    fx.contribution("notes", 1, 200, 20).await;
    db
}

#[tokio::test]
async fn dry_run_until_idle_plans_the_whole_run_and_changes_nothing() {
    let db = fixture().await;
    let before = db.snapshot().await;
    let args = [
        "run",
        "remove-expired-members",
        "--now",
        NOW,
        "--dry-run",
        "--until-idle",
    ];
    let o = hk(&db.url, &args, &[]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    // The child ran inside the plan: the bot would be deleted.
    assert!(out.contains("delete-user"), "{out}");
    assert!(out.contains("removed users (1): 20"), "{out}");
    assert!(out.contains("removed groups (0)"), "{out}");
    assert!(out.contains("removed projects (0)"), "{out}");
    let members = out
        .lines()
        .find(|l| l.starts_with("members "))
        .unwrap_or_else(|| panic!("no members line: {out}"));
    let cols: Vec<&str> = members.split_whitespace().collect();
    assert_eq!(cols[3], "2", "two expired members deleted: {members}");
    assert_eq!(db.snapshot().await, before, "the plan changed the database");

    let mut json_args = args.to_vec();
    json_args.push("--json");
    let o = hk(&db.url, &json_args, &[]);
    assert!(o.status.success());
    let last: Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["plan"]["removed_users"], serde_json::json!([20]));
    assert!(last["plan"]["tables"]
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["table"] == "users" && t["deleted"] == 1));
    assert_eq!(db.snapshot().await, before, "the plan changed the database");

    // No lock is left behind: the real run does what the plan said.
    let o = hk(
        &db.url,
        &[
            "run",
            "remove-expired-members",
            "--now",
            NOW,
            "--until-idle",
        ],
        &[],
    );
    assert!(o.status.success());
    assert!(!db.exists("users WHERE id = 20").await);
    assert_eq!(db.ids("members").await, vec![6]);
}
