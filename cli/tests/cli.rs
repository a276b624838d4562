//! The `hk` contract (behaviour §11): exact spellings, exit codes, `--until-idle`,
//! `--dry-run`, `--json`, `--outbox`, against a real database.

use std::process::{Command, Output};

use integration_tests::fixtures::{M, U};
use integration_tests::{Fx, TestDb};
use serde_json::Value;

fn hk(db: &TestDb, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("hk runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Expired members, a bot, an invite and an access request on 2026-03-01.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[
        U::human(10),
        U::human(11),
        U::human(12),
        U::bot(20),
        U::ghost(5),
    ])
    .await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::pm(2, 200, 10, 30).expires("2026-02-28"),
        M::pm(3, 200, 20, 40).expires("2026-03-01"),
        M::pm(4, 200, 0, 30)
            .invite("x@example.org", "tok")
            .expires("2026-02-01"),
        M::gm(5, 101, 12, 30)
            .requested("2026-01-01T00:00:00Z")
            .expires("2026-02-15"),
        M::pm(6, 200, 12, 30).expires("2026-03-02"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (20, 200, 40), (12, 200, 30)]).await;
    fx.pat(1, 20, None).await;
    fx.contribution("notes", 1, 200, 20).await;
    db
}

#[tokio::test]
async fn run_until_idle_leaves_the_state_the_spec_describes() {
    let db = fixture().await;
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
        ],
    );
    assert!(
        o.status.success(),
        "{}\n{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(db.ids("members").await, vec![1, 6]);
    assert_eq!(db.pas().await, vec![(12, 200, 30)]);
    assert!(
        !db.exists("users WHERE id = 20").await,
        "the delete-user child ran"
    );
    assert_eq!(
        db.scalar::<i64>("SELECT author_id FROM notes WHERE id = 1")
            .await,
        5
    );
    let out = stdout(&o);
    assert!(out.contains("Summary"), "{out}");
    assert!(out.contains("delete-user"), "{out}");
}

#[tokio::test]
async fn json_prints_one_object_per_function_run() {
    let db = fixture().await;
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
            "--json",
        ],
    );
    assert!(o.status.success());
    let runs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(runs.len(), 2);
    assert_eq!(runs[0]["function"], "remove-expired-members");
    assert_eq!(runs[0]["report"]["status"], "completed");
    assert_eq!(runs[0]["report"]["updated_rows"], 4);
    assert_eq!(runs[0]["sent"][0]["receiver"], "delete-user");
    assert_eq!(runs[0]["sent"][0]["delay_seconds"], 30);
    assert_eq!(runs[1]["function"], "delete-user");
    assert_eq!(runs[1]["now"], "2026-03-01T00:10:30.000000Z");
    assert_eq!(runs[1]["report"]["outcome"], "deleted");
}

#[tokio::test]
async fn dry_run_reports_what_would_change_and_changes_nothing() {
    let db = fixture().await;
    let before = db.count("members").await;
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--dry-run",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(run["report"]["updated_rows"], 4);
    assert_eq!(run["sent"][0]["receiver"], "delete-user");
    assert_eq!(db.count("members").await, before);
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 20")
            .await,
        "active"
    );
    assert!(!db.exists("ghost_user_migrations").await);
    // The dry run left no session lock behind: a real run works right after.
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
        ],
    );
    assert!(o.status.success());
    assert_eq!(db.ids("members").await, vec![1, 6]);
    // A single run without --until-idle reports the child it sent and delivers it
    // (behaviour §11: a local run never drops what it sends).
    assert!(
        stdout(&o).contains("-> delete-user delay=30s key=delete-user:20"),
        "{}",
        stdout(&o)
    );
    assert!(
        !db.exists("users WHERE id = 20").await,
        "the delete-user child ran"
    );
}

#[tokio::test]
async fn the_outbox_records_every_sent_message() {
    let db = fixture().await;
    let dir = std::env::temp_dir().join(format!("hk-outbox-{}", uuid::Uuid::new_v4().simple()));
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
            "--outbox",
            dir.to_str().unwrap(),
        ],
    );
    assert!(o.status.success());
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(v["receiver"], "delete-user");
    assert_eq!(v["delay_seconds"], 30);
    assert_eq!(v["body"]["message_key"], "delete-user:20");
    assert_eq!(v["body"]["type"], "delete-user.run");
    // The record replays through --message-file, and is a no-op by now.
    let o = hk(
        &db,
        &[
            "run",
            "delete-user",
            "--message-file",
            files[0].to_str().unwrap(),
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let run: Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(run["report"]["status"], "stale");
    // A record for another function is refused with a clear message.
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--message-file",
            files[0].to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("for delete-user"));
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn exit_codes_say_success_retryable_or_permanent() {
    let db = fixture().await;
    // Permanent: malformed.
    let o = hk(&db, &["run", "delete-user", "--message", "{\"version\":1}"]);
    assert_eq!(o.status.code(), Some(2));
    // Retryable: the user row is held by another session past the lock timeout.
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 20")
        .await;
    Fx(&db).ghost_migration(20, None).await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT 1 FROM users WHERE id = 20 FOR UPDATE", &[])
        .await
        .unwrap();
    let body = r#"{"version":1,"type":"delete-user.run","message_key":"delete-user:20","run_id":"r","hop":0,"issued_at":"2026-03-01T00:00:00Z","payload":{"user_id":20,"initiator_user_id":null,"reason":null}}"#;
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(["run", "delete-user", "--message", body])
        .env("DATABASE_URL", &db.url)
        .env("DB_LOCK_TIMEOUT_MS", "50")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    tx.rollback().await.unwrap();
    // Success once the lock is gone.
    let o = hk(&db, &["run", "delete-user", "--message", body]);
    assert_eq!(o.status.code(), Some(0));
    assert!(!db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn a_child_function_needs_a_message_and_unknown_functions_are_named() {
    let db = fixture().await;
    let o = hk(&db, &["run", "delete-user"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a cron function"));
    let o = hk(&db, &["run", "no-such-function"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("known: remove-expired-members"));
}

#[tokio::test]
async fn migrate_is_idempotent_and_seeding_needs_an_empty_database() {
    let db = fixture().await;
    let o = hk(&db, &["migrate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("migrations applied: []"));
    let o = hk(&db, &["seed", "demo"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("empty database"));
}

#[tokio::test]
async fn the_demo_data_runs_to_completion_with_every_batch() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let o = hk(&db, &["seed", "demo", "--now", "2026-03-01T00:10:00Z"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
            "--json",
        ],
    );
    assert!(o.status.success());
    let runs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let updated: i64 = runs
        .iter()
        .filter_map(|r| r["report"]["updated_rows"].as_i64())
        .sum();
    assert_eq!(updated, 1195);
    // dave stays: the last owner of widgets.
    assert!(db.exists("members WHERE id = 5").await);
    assert!(
        !db.exists("users WHERE id = 10").await,
        "the expired deploy bot was deleted"
    );
}

#[tokio::test]
async fn run_schedule_prune_deletions_until_idle_drains_every_demo_schedule() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let o = hk(&db, &["seed", "demo", "--now", "2026-03-01T00:10:00Z"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(db.count("members_deletion_schedules").await, 16);
    let o = hk(
        &db,
        &[
            "run",
            "schedule-prune-deletions",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
            "--json",
        ],
    );
    assert!(o.status.success(), "{}", stdout(&o));
    let runs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let functions: Vec<&str> = runs
        .iter()
        .map(|r| r["function"].as_str().unwrap())
        .collect();
    assert_eq!(
        functions,
        vec![
            "schedule-prune-deletions",
            "prune-deletions",
            "prune-deletions"
        ]
    );
    assert_eq!(runs[0]["report"]["enqueued"], true);
    assert_eq!(runs[1]["report"]["status"], "more_work");
    assert_eq!(runs[2]["report"]["status"], "completed");
    let destroyed: i64 = runs
        .iter()
        .filter_map(|r| r["report"]["destroyed_count_total"].as_i64())
        .sum();
    assert_eq!(destroyed, 150);
    assert!(!db.exists("members_deletion_schedules").await);
    // Denied: tina's group membership and the CI bot's stay; sam's initech one too.
    assert_eq!(
        db.ids("members WHERE id BETWEEN 30000 AND 39999").await,
        vec![30001, 30002, 30003, 30015, 30021]
    );
}

#[tokio::test]
async fn pat_expiring_on_the_demo_data_writes_eml_files_and_refuses_local_hooks() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let o = hk(&db, &["seed", "demo", "--now", "2026-03-01T01:00:00Z"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // As `hk demo` does: B38 first (it removes the expired deploy bot), then B28.
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
        ],
    );
    assert!(o.status.success());
    let dir = std::env::temp_dir().join(format!("hk-cli-mail-{}", db.name));
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args([
            "run",
            "pat-expiring",
            "--now",
            "2026-03-01T01:00:00Z",
            "--until-idle",
            "--json",
        ])
        .env("DATABASE_URL", &db.url)
        .env("EMAIL_FILE_DIR", &dir)
        .env("RUST_LOG", "warn")
        .output()
        .expect("hk runs");
    assert!(
        o.status.success(),
        "{}\n{}",
        stdout(&o),
        String::from_utf8_lossy(&o.stderr)
    );
    let runs: Vec<Value> = stdout(&o)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let batch = &runs[0]["report"];
    assert_eq!(batch["status"], "completed");
    assert_eq!(batch["total_user_tokens_marked"], 3);
    assert_eq!(batch["total_user_emails_suppressed"], 1);
    assert_eq!(batch["total_resource_bot_without_membership"], 1);
    assert_eq!(
        batch["total_notification_delivered_for_resource_access_tokens"],
        2
    );
    // erin (7 and 30 days), grace and heidi for the project bot, heidi for the group bot.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 5, "{files:?}");
    assert!(files.iter().all(|f| f.ends_with("@gitlab.example.com.eml")));
    // The demo hook points at a loopback address: refused and recorded, no traffic.
    assert_eq!(
        db.scalar::<i16>("SELECT recent_failures FROM web_hooks WHERE id = 6001")
            .await,
        1
    );
    assert!(
        db.exists(
            "personal_access_tokens WHERE id = 6007 AND seven_days_notification_sent_at IS NULL"
        )
        .await,
        "the orphan bot's token stays unmarked"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn demo_verbose_prints_the_functions_json_log_lines() {
    let db = TestDb::new().await;
    let mail = std::env::temp_dir().join(format!("hk-demo-mail-{}", db.name));
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(["demo", "--verbose", "--now", "2026-03-01T00:10:00Z"])
        .env("DATABASE_URL", &db.url)
        .env("EMAIL_FILE_DIR", &mail)
        .env_remove("RUST_LOG")
        .output()
        .expect("hk runs");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{err}");
    let done = err
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "info" && v["message"] == "done")
        .count();
    assert!(
        done >= 10,
        "one info `done` line per function run at least:\n{err}"
    );
    let _ = std::fs::remove_dir_all(&mail);
}

#[tokio::test]
async fn demo_runs_every_cron_batch_to_completion_and_prints_the_summary() {
    let db = TestDb::new().await;
    let mail = std::env::temp_dir().join(format!("hk-demo-mail-{}", db.name));
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(["demo", "--now", "2026-03-01T00:10:00Z"])
        .env("DATABASE_URL", &db.url)
        .env("EMAIL_FILE_DIR", &mail)
        .env_remove("RUST_LOG")
        .output()
        .expect("hk runs");
    let out = stdout(&o);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{out}\n{err}");
    // A person running the demo sees its table, not the functions' info lines.
    for l in err.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(l) {
            assert!(
                matches!(v["level"].as_str(), Some("warn" | "error")),
                "hk demo printed a log line below warn without --verbose: {l}"
            );
        }
    }
    for f in [
        "remove-expired-members",
        "delete-user",
        "schedule-prune-deletions",
        "prune-deletions",
        "adjourned-group-deletion",
        "group-destroy",
        "placeholder-user-cleanup",
        "delete-placeholder-user",
        "pat-expiring",
        "deliver-notification",
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(f)),
            "no summary row for {f}:\n{out}"
        );
    }
    // No run was left failing: the retryable/permanent columns are all zero.
    for l in out.lines().filter(|l| l.contains("status:")) {
        let cols: Vec<&str> = l.split_whitespace().collect();
        assert_eq!((cols[3], cols[4]), ("0", "0"), "{l}");
    }
    // The before/after table covers what the batches change.
    for t in [
        "members_deletion_schedules",
        "group_deletion_schedules",
        "import_placeholder_user_details",
        "namespaces",
    ] {
        let row = out
            .lines()
            .find(|l| l.starts_with(t))
            .unwrap_or_else(|| panic!("no row for {t}:\n{out}"));
        let n: Vec<i64> = row
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap())
            .collect();
        assert!(n[1] < n[0], "{t} did not shrink: {row}");
    }
    let _ = std::fs::remove_dir_all(mail);
}

#[tokio::test]
async fn run_until_idle_under_chaos_ends_in_the_clean_state_and_reports_what_it_did() {
    use integration_tests::state::{canonical, first_difference, Baseline};
    let args = |extra: &[&str]| -> Vec<String> {
        [
            "run",
            "remove-expired-members",
            "--now",
            "2026-03-01T00:10:00Z",
            "--until-idle",
            "--json",
        ]
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
    };
    let run = |db: &TestDb, a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        hk(db, &a)
    };
    let clean = fixture().await;
    let base = Baseline::capture(&clean).await;
    assert!(run(&clean, args(&[])).status.success());
    let want = canonical(&clean, &base).await;
    // Seeds whose runs crash at least once (the crash decisions are reproducible).
    let mut crashes = 0;
    for seed in 1..=4 {
        let db = fixture().await;
        let spec = format!("seed={seed},duplicate=0.5,reorder=20,crash=0.6");
        let o = run(&db, args(&["--chaos", &spec]));
        assert!(
            o.status.success(),
            "{}\n{}",
            stdout(&o),
            String::from_utf8_lossy(&o.stderr)
        );
        let last: Value = serde_json::from_str(stdout(&o).lines().last().unwrap()).unwrap();
        assert_eq!(last["chaos"], spec.as_str());
        assert!(last["stats"]["deliveries"].as_u64().unwrap() >= 2);
        crashes += last["stats"]["crashes"].as_u64().unwrap();
        let got = canonical(&db, &base).await;
        if let Some(d) = first_difference(&want, &got) {
            panic!("seed {seed}: {d}");
        }
    }
    assert!(crashes > 0, "no seed crashed a handler");
    // A bad specification, or chaos without --until-idle, is refused.
    let db = fixture().await;
    let o = run(&db, args(&["--chaos", "crash=2"]));
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("between 0 and 1"));
    let o = hk(&db, &["run", "remove-expired-members", "--chaos", "seed=1"]);
    assert_eq!(o.status.code(), Some(2));
}
