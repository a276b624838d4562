//! Deploy-free end to end: the function binaries served by `cargo lambda watch` on
//! 127.0.0.1 against a throwaway database and moto, driven by `hk local pump`, with
//! recovery through `hk replay`. Needs `cargo-lambda` (scripts/test.sh installs it
//! into .venv) and `MOTO_ENDPOINT`.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use integration_tests::aws::{moto_config, moto_endpoint};
use integration_tests::fixtures::{M, U};
use integration_tests::{wait, Fx, TestDb};
use serde_json::Value;

mod common;
use common::text;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn hk(db: &TestDb, args: &[&str]) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_hk"))
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .output()
        .expect("hk runs");
    eprintln!("hk {args:?}:\n{}", text(&o));
    o
}

fn cargo_lambda() -> PathBuf {
    let venv = workspace().join(".venv/bin/cargo-lambda");
    if venv.exists() {
        return venv;
    }
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("cargo-lambda"))
            .find(|c| c.exists())
    });
    found.unwrap_or_else(|| {
        panic!("cargo-lambda is not installed: run the tests through scripts/test.sh")
    })
}

struct Watch(Child);

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The variables cargo sets for a test process (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`,
/// `CARGO_BIN_EXE_*`, ...), which the test's own environment has and the build that
/// compiled it did not. They are not passed on to `cargo lambda watch`'s cargo: build
/// scripts that read them (ring's reads `CARGO_MANIFEST_DIR` and `CARGO_PKG_*`) record
/// their values, so a build run with them reran those scripts and recompiled ring, rustls
/// and every crate of the workspace under them in the shared target directory, and the
/// next build of the suite's own environment compiled them all back (80 s of CI's
/// PostgreSQL 17 pass; issue 52, docs/benchmarks.md "CI time").
fn set_by_cargo_for_tests(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

fn start_watch(env_file: &std::path::Path, port: u16) -> Watch {
    let log = std::fs::File::create(env_file.with_extension("watch.log")).unwrap();
    let mut cmd = Command::new(cargo_lambda());
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_for_tests) {
            cmd.env_remove(name);
        }
    }
    let child = cmd
        .args([
            "lambda",
            "watch",
            "--invoke-address",
            "127.0.0.1",
            "--invoke-port",
            &port.to_string(),
        ])
        .arg("--env-file")
        .arg(env_file)
        .current_dir(workspace())
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("cargo lambda watch starts");
    wait::until_blocking(
        &format!(
            "cargo lambda watch to listen on 127.0.0.1:{port} (its log: {})",
            env_file.with_extension("watch.log").display()
        ),
        wait::SERVER_LISTEN,
        || TcpStream::connect(("127.0.0.1", port)).ok(),
    );
    Watch(child)
}

async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[
        U::human(10),
        U::human(11),
        U::bot(20).blocked(),
        U::bot(21),
        U::bot(22).blocked(),
        U::bot(23).blocked(),
        U::ghost(5),
    ])
    .await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::pm(2, 200, 10, 30).expires("2025-03-09"),
        M::pm(3, 200, 21, 40).expires("2025-03-09"),
    ])
    .await;
    for u in [20, 22, 23] {
        fx.ghost_migration(u, None).await;
    }
    fx.contribution("issues", 1, 200, 20).await;
    db
}

fn delete_user_body(user: i64) -> String {
    format!(
        r#"{{"version":1,"type":"delete-user.run","message_key":"delete-user:{user}","run_id":"r","hop":0,"issued_at":"2025-03-10T00:10:00Z","payload":{{"user_id":{user},"initiator_user_id":null,"reason":"Membership expired"}}}}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_under_cargo_lambda_watch_run_pump_and_replay_end_to_end() {
    let db = fixture().await;
    let prefix = format!("e2e{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let dir = std::env::temp_dir().join(&prefix);
    std::fs::create_dir_all(&dir).unwrap();
    let env_file = dir.join("lambda.env");
    let endpoint = moto_endpoint();
    let o = hk(
        &db,
        &[
            "local",
            "setup",
            "--endpoint",
            &endpoint,
            "--prefix",
            &prefix,
            "--visibility-s",
            "10",
            "--env-file",
            env_file.to_str().unwrap(),
        ],
    );
    assert!(o.status.success());
    let env = std::fs::read_to_string(&env_file).unwrap();
    assert!(env.contains(&format!("DATABASE_URL={}", db.url)), "{env}");
    let port = free_port();
    let _watch = start_watch(&env_file, port);
    let invoke = format!("http://127.0.0.1:{port}");

    // 1. Recovery: a delete-user message that ended in the DLQ is replayed and pumped.
    let moto = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&moto);
    let dlq = sqs
        .get_queue_url()
        .queue_name(format!("{prefix}-delete-user-dlq"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    sqs.send_message()
        .queue_url(&dlq)
        .message_body(delete_user_body(20))
        .send()
        .await
        .unwrap();
    let o = hk(
        &db,
        &[
            "replay",
            "dlq",
            "delete-user",
            "--endpoint",
            &endpoint,
            "--prefix",
            &prefix,
            "--dry-run",
        ],
    );
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("would move 1 message(s)"));
    assert!(db.exists("users WHERE id = 20").await);
    let o = hk(
        &db,
        &[
            "replay",
            "dlq",
            "delete-user",
            "--endpoint",
            &endpoint,
            "--prefix",
            &prefix,
            "--yes",
        ],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("moved 1 message(s)"));
    assert!(String::from_utf8_lossy(&o.stdout).contains("delete-user.run: 1"));
    // A JSON-lines file replayed to the queue.
    let lines = dir.join("replay.jsonl");
    std::fs::write(&lines, delete_user_body(22) + "\n").unwrap();
    let o = hk(
        &db,
        &[
            "replay",
            "file",
            lines.to_str().unwrap(),
            "--queue",
            "--to",
            "delete-user",
            "--endpoint",
            &endpoint,
            "--prefix",
            &prefix,
        ],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("sent 1 message(s)"));
    // A one-time schedule that is due (moto stores schedules but never fires them).
    let scheduler = aws_sdk_scheduler::Client::new(&moto);
    let du_url = sqs
        .get_queue_url()
        .queue_name(format!("{prefix}-delete-user"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let queue_arn = sqs
        .get_queue_attributes()
        .queue_url(du_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
        .clone();
    scheduler
        .create_schedule()
        .name("hk-due-delete-user-23")
        .group_name(&prefix)
        .schedule_expression("at(2025-03-10T00:30:00)")
        .flexible_time_window(
            aws_sdk_scheduler::types::FlexibleTimeWindow::builder()
                .mode(aws_sdk_scheduler::types::FlexibleTimeWindowMode::Off)
                .build()
                .unwrap(),
        )
        .target(
            aws_sdk_scheduler::types::Target::builder()
                .arn(queue_arn)
                .role_arn("arn:aws:iam::123456789012:role/hk-local-scheduler")
                .input(delete_user_body(23))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let o = hk(
        &db,
        &[
            "local",
            "pump",
            "--endpoint",
            &endpoint,
            "--prefix",
            &prefix,
            "--invoke",
            &invoke,
            "--until-idle",
            "--max-seconds",
            &wait::PUMP_UNTIL_IDLE.as_secs().to_string(),
        ],
    );
    assert!(o.status.success(), "pump failed");
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.contains("fired schedule hk-due-delete-user-23"),
        "{out}"
    );
    assert!(out.contains("schedules fired 1"), "{out}");
    let left = scheduler
        .list_schedules()
        .group_name(&prefix)
        .send()
        .await
        .unwrap();
    assert!(
        left.schedules().is_empty(),
        "a fired one-time schedule is deleted"
    );
    for u in [20, 22, 23] {
        assert!(
            !db.exists(&format!("users WHERE id = {u}")).await,
            "delete-user for U{u} ran under cargo lambda watch"
        );
    }
    assert_eq!(
        db.scalar::<i64>("SELECT author_id FROM issues WHERE id = 1")
            .await,
        5
    );

    // 2. The cron tick event, invoked directly, runs remove-expired-members, which
    //    sends its delete-user child to the moto queue with a 30 s delay.
    let event: Value = serde_json::from_str(
        &std::fs::read_to_string(workspace().join("events/remove-expired-members.json")).unwrap(),
    )
    .unwrap();
    let resp: Value = reqwest::Client::new()
        .post(format!(
            "{invoke}/2015-03-31/functions/remove-expired-members/invocations"
        ))
        .json(&event)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(resp, serde_json::json!({"batchItemFailures": []}));
    assert_eq!(db.ids("members").await, vec![1]);
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 21")
            .await,
        "blocked"
    );
    let q = sqs
        .get_queue_url()
        .queue_name(format!("{prefix}-delete-user"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&q)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    assert_eq!(
        attrs[&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed],
        "1"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn replaying_a_whole_run_after_success_changes_nothing() {
    let db = fixture().await;
    let dir = std::env::temp_dir().join(format!("hk-replay-{}", uuid::Uuid::new_v4().simple()));
    let o = hk(
        &db,
        &[
            "run",
            "remove-expired-members",
            "--now",
            "2025-03-10T00:10:00Z",
            "--until-idle",
            "--outbox",
            dir.to_str().unwrap(),
        ],
    );
    assert!(o.status.success());
    assert!(!db.exists("users WHERE id = 21").await);
    let after = db.snapshot().await;
    // The whole run: its cron message plus everything it sent.
    let cron = r#"{"receiver":"remove-expired-members","delay_seconds":0,"body":{"version":1,"type":"remove-expired-members.run","message_key":"remove-expired-members:cron:2025-03-10T00:10:00Z","run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z","payload":{}}}"#;
    std::fs::write(dir.join("000000-cron.json"), cron).unwrap();
    let o = hk(
        &db,
        &[
            "replay",
            "file",
            dir.to_str().unwrap(),
            "--now",
            "2025-03-10T06:00:00Z",
            "--json",
        ],
    );
    assert!(o.status.success());
    let runs: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(runs.len(), 2, "the cron message and the delete-user child");
    assert_eq!(runs[0]["report"]["updated_rows"], 0);
    assert_eq!(runs[1]["report"]["status"], "stale");
    assert_eq!(
        db.snapshot().await,
        after,
        "a replay after success changes nothing"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_local_replay_runs_an_outbox_record_on_its_receiver_whatever_to_says() {
    let db = fixture().await;
    let file = std::env::temp_dir().join(format!("hk-replay-to-{}.jsonl", db.name));
    // A recorded child of another run, and a bare cron body for `--to`.
    let child = format!(
        r#"{{"receiver":"delete-user","delay_seconds":0,"body":{}}}"#,
        delete_user_body(20)
    );
    let cron = r#"{"version":1,"type":"remove-expired-members.run","message_key":"remove-expired-members:cron:2025-03-10T00:10:00Z","run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z","payload":{}}"#;
    std::fs::write(&file, format!("{child}\n{cron}\n")).unwrap();
    let o = hk(
        &db,
        &[
            "replay",
            "file",
            file.to_str().unwrap(),
            "--to",
            "remove-expired-members",
            "--now",
            "2025-03-10T00:10:00Z",
            "--json",
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    let runs: Vec<(String, String)> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|r| {
            (
                r["function"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // Each record runs on its receiver; what a run sends to another function is
    // delivered too (behaviour §11): the cron run's `delete-user` child follows it.
    assert_eq!(
        runs,
        [
            ("delete-user".to_string(), "success".to_string()),
            ("remove-expired-members".to_string(), "success".to_string()),
            ("delete-user".to_string(), "success".to_string())
        ]
    );
    assert!(!db.exists("users WHERE id = 20").await, "delete-user ran");
    let _ = std::fs::remove_file(file);
}
