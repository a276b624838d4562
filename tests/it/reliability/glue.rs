//! The Lambda glue (`shared::lambda::handle_event`) on real SQS event JSON: partial
//! batch failures, malformed records, per-record panics, records left at the deadline,
//! receive counts.

use integration_tests::environment;
use std::sync::Arc;

use crate::assert::{assert_fields, assert_user_state};
use crate::handle_event;
use async_trait::async_trait;
use aws_lambda_events::event::sqs::SqsEvent;
use engine::local_queue::LocalQueue;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::json;
use shared::lambda::Environment;
use shared::queue::{OutMessage, Queue, QueueError};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

fn event(path: &str) -> SqsEvent {
    let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap()
}

fn deps(db: &TestDb, function: Function, queue: Arc<dyn Queue>) -> Environment {
    environment(function, &db.url, t(NOW)).queue(queue).build()
}

async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::bot(20)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    db
}

fn failures(r: &aws_lambda_events::event::sqs::SqsBatchResponse) -> Vec<String> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

#[tokio::test]
async fn a_cron_tick_event_runs_the_batch_and_reports_no_failure() {
    let db = fixture().await;
    let q = LocalQueue::new(t(NOW));
    let deps = deps(&db, Function::RemoveExpiredMembers, Arc::new(q.clone()));
    let (log, _g) = capture();
    let resp = handle_event(
        &deps,
        LambdaEvent::new(
            event("events/remove-expired-members.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(failures(&resp).is_empty());
    assert!(!db.exists("members WHERE id = 10").await);
    let start = log.one("start");
    assert_fields(
        &start,
        json!({
            "function": "remove-expired-members",
            "message_key": "remove-expired-members:cron:2025-03-10T00:10:00Z",
            "run_id": "8f0c2c1e-5a4e-4c53-9a3d-6f1d2b7e9c10",
            "hop": 0,
            "now": "2025-03-10T00:10:00.000000Z",
            "message_type": "remove-expired-members.run",
            "cursor": null
        }),
    );
    let done = log.done();
    assert!(done["duration_s"].is_f64());
    assert_eq!(done["message_key"], start["message_key"]);
    // The response serializes to Lambda's partial-batch shape.
    assert_eq!(
        serde_json::to_value(&resp).unwrap(),
        serde_json::json!({"batchItemFailures": []})
    );
}

#[tokio::test]
async fn malformed_records_fail_alone_and_the_rest_of_the_batch_proceeds() {
    let db = fixture().await;
    let deps = deps(
        &db,
        Function::RemoveExpiredMembers,
        Arc::new(LocalQueue::new(t(NOW))),
    );
    let (log, _g) = capture();
    let resp = handle_event(
        &deps,
        LambdaEvent::new(
            event("tests/fixtures/sqs/mixed-batch.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(
        failures(&resp),
        vec![
            "11111111-0000-4000-8000-000000000002",
            "11111111-0000-4000-8000-000000000003",
            "11111111-0000-4000-8000-000000000004"
        ]
    );
    assert!(
        !db.exists("members WHERE id = 10").await,
        "the good record was processed"
    );
    let bad = log.with_message("malformed message");
    assert_eq!(bad.len(), 3, "{}", log.dump());
    assert_eq!(
        bad[0]["sqs_message_id"],
        "11111111-0000-4000-8000-000000000002"
    );
    assert_eq!(bad[0]["receive_count"], 3);
    assert!(bad[0]["error"].as_str().unwrap().contains("message_key"));
    assert!(bad[1]["error"].as_str().unwrap().contains("not valid JSON"));
    assert!(bad[2]["error"]
        .as_str()
        .unwrap()
        .contains("not accepted by remove-expired-members"));
    assert_eq!(bad[2]["message_key"], "delete-user:20");
    assert!(!log.dump().contains("hunter2"), "bodies are never logged");
}

#[tokio::test]
async fn a_record_without_message_id_fails_the_whole_invocation() {
    let db = fixture().await;
    let deps = deps(
        &db,
        Function::RemoveExpiredMembers,
        Arc::new(LocalQueue::new(t(NOW))),
    );
    let mut ev = event("events/remove-expired-members.json");
    ev.records[0].message_id = None;
    let r = handle_event(&deps, LambdaEvent::new(ev, Context::default())).await;
    assert!(r.is_err());
    assert!(db.exists("members WHERE id = 10").await);
}

/// A transport that panics when asked to send one particular message.
struct PanickingQueue {
    inner: LocalQueue,
    key: &'static str,
}

#[async_trait]
impl Queue for PanickingQueue {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        if messages.iter().any(|m| m.envelope.message_key == self.key) {
            panic!("transport exploded");
        }
        self.inner.send(messages).await
    }
}

#[tokio::test]
async fn a_panic_fails_only_its_record_and_releases_the_session_lock() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[M::pm(18, 200, 20, 40).expires("2025-03-09")])
        .await;
    fx.users(&[U::bot(21).blocked()]).await;
    fx.ghost_migration(21, None).await;
    fx.users(&[U::ghost(5)]).await;
    let q = PanickingQueue {
        inner: LocalQueue::new(t(NOW)),
        key: "delete-user:20",
    };
    let deps = deps(&db, Function::RemoveExpiredMembers, Arc::new(q));
    // Record 1: the cron tick; the bot's delete-user send panics mid-transaction.
    let mut ev = event("events/remove-expired-members.json");
    // Record 2: the same cron message again, delivered in the same batch.
    let mut second = ev.records[0].clone();
    second.message_id = Some("second".into());
    ev.records.push(second);
    // Record 3: a continuation whose page starts after the bot's membership: it never
    // meets the panic and must succeed on the same (reset) session.
    let mut third = ev.records[0].clone();
    third.message_id = Some("third".into());
    third.body = Some(
        serde_json::json!({"version":1,"type":"remove-expired-members.run",
            "message_key":"remove-expired-members:8f0c2c1e:1","run_id":"8f0c2c1e","hop":1,
            "issued_at":NOW,"payload":{"cursor":{"expires_at":"2025-03-09","id":18}}})
        .to_string(),
    );
    ev.records.push(third);
    let (log, _g) = capture();
    let resp = handle_event(&deps, LambdaEvent::new(ev, Context::default()))
        .await
        .unwrap();
    // The first record panicked; the reset released its overlap lock, so the second
    // record ran (it panics again on the same bot, which is also just its own failure)
    // and the third succeeded.
    assert_eq!(
        failures(&resp),
        vec!["0b9e4e1e-6d8f-4c3e-9f0e-1a2b3c4d5e01", "second"]
    );
    assert!(
        !db.exists("members WHERE id = 10").await,
        "the third record removed the human's expired membership"
    );
    let panics = log.with_message("record failed: handler panicked");
    assert_eq!(panics.len(), 2, "{}", log.dump());
    assert_eq!(panics[0]["error"], "transport exploded");
    assert!(log.with_message("skipped: already running").is_empty());
    // The bot's transaction was rolled back with the dropped session.
    assert!(db.exists("members WHERE id = 18").await);
    assert_user_state(&db, 20, "active").await;
    // And no session lock is left behind.
    let key = shared::locks::lock_key("function:remove-expired-members");
    assert!(
        db.scalar::<bool>(&format!("SELECT pg_try_advisory_lock({key})"))
            .await
    );
}

/// A deadline margin past the function's timeout: Lambda's deadline is reached from
/// the start. The invocation's first record still runs (the progress rule, behaviour
/// §9.8); the next is not started, reported as a batch-item failure with its line and
/// its `outcome_deadline` metric.
#[tokio::test]
async fn a_record_after_the_first_left_at_the_deadline_is_not_started() {
    let db = fixture().await;
    let deps = environment(Function::RemoveExpiredMembers, &db.url, t(NOW))
        .queue(Arc::new(LocalQueue::new(t(NOW))))
        .var("DEADLINE_MARGIN_S", "100000")
        .build();
    let mut ev = event("events/remove-expired-members.json");
    let mut second = ev.records[0].clone();
    second.message_id = Some("second".into());
    ev.records.push(second);
    let (log, _g) = capture();
    let resp = handle_event(&deps, LambdaEvent::new(ev, Context::default()))
        .await
        .unwrap();
    assert_eq!(failures(&resp), vec!["second"], "{}", log.dump());
    assert!(
        !db.exists("members WHERE id = 10").await,
        "the first record ran"
    );
    assert_eq!(log.with_message("start").len(), 1, "{}", log.dump());
    assert_fields(
        &log.one("record not started: deadline reached"),
        json!({
            "function": "remove-expired-members",
            "class": "RemoveExpiredMembersWorker",
            "sqs_message_id": "second",
            "error_class": "deadline",
            "job_status": "fail",
            "level": "warn",
        }),
    );
    let emf: Vec<_> = log
        .lines()
        .into_iter()
        .filter(|l| l.get("_aws").is_some())
        .collect();
    assert_eq!(emf.len(), 2, "one EMF line per record: {}", log.dump());
    assert_fields(
        &emf[1],
        json!({
            "records": 1.0, "records_failed": 1.0, "duration_s": 0.0,
            "outcome_deadline": 1.0, "outcome_retryable": 0.0, "outcome_done": 0.0,
            "run_started": 0.0,
        }),
    );
}

#[tokio::test]
async fn a_typical_delete_user_event_is_processed() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::ghost(5)]).await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 20")
        .await;
    fx.ghost_migration(20, None).await;
    let deps = deps(&db, Function::DeleteUser, Arc::new(LocalQueue::new(t(NOW))));
    let resp = handle_event(
        &deps,
        LambdaEvent::new(event("events/delete-user.json"), Context::default()),
    )
    .await
    .unwrap();
    assert!(failures(&resp).is_empty());
    assert!(!db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn a_session_terminated_mid_record_fails_that_record_and_the_next_one_reconnects() {
    let db = fixture().await;
    let deps = deps(
        &db,
        Function::RemoveExpiredMembers,
        Arc::new(LocalQueue::new(t(NOW))),
    );
    let mut ev = event("events/remove-expired-members.json");
    let mut second = ev.records[0].clone();
    second.message_id = Some("second".into());
    ev.records.push(second);
    // Another session holds member 10, so record 1 waits inside its transaction.
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM members WHERE id = 10 FOR UPDATE")
        .await
        .unwrap();
    let (log, _g) = capture();
    let cut = async {
        let pid = db.blocked_on_lock("remove-expired-members").await;
        db.client
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap();
        tx.rollback().await.unwrap();
    };
    let (resp, ()) = tokio::join!(
        handle_event(&deps, LambdaEvent::new(ev, Context::default())),
        cut
    );
    let resp = resp.unwrap();
    assert_eq!(
        failures(&resp),
        vec!["0b9e4e1e-6d8f-4c3e-9f0e-1a2b3c4d5e01"]
    );
    let failed = log.one("record failed");
    assert_eq!(failed["error_class"], "db");
    // Record 2 ran on a new session and did the work.
    assert!(!db.exists("members WHERE id = 10").await);
    assert_eq!(log.done()["updated_rows"], 1);
}

const JSON_CHILD: &str = "HK_TEST_JSON_PANIC_CHILD";

/// Run as a child process (below): a function's whole output, its logs installed as a
/// Lambda installs them, while a record's handler panics.
async fn panicking_function_writes_its_output() {
    shared::telemetry::init(shared::telemetry::Sink::Stderr);
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::bot(21).blocked()]).await;
    fx.ghost_migration(21, None).await;
    let q = PanickingQueue {
        inner: LocalQueue::new(t(NOW)),
        key: "delete-user:20",
    };
    fx.members(&[M::pm(18, 200, 20, 40).expires("2025-03-09")])
        .await;
    let deps = deps(&db, Function::RemoveExpiredMembers, Arc::new(q));
    let ev = event("events/remove-expired-members.json");
    let resp = handle_event(&deps, LambdaEvent::new(ev, Context::default()))
        .await
        .unwrap();
    assert_eq!(failures(&resp).len(), 1);
}

#[tokio::test]
async fn a_panic_in_a_function_is_written_as_a_json_line_like_every_other_line() {
    if std::env::var_os(JSON_CHILD).is_some() {
        return panicking_function_writes_its_output().await;
    }
    // The test's own path in this binary (`module_path!` starts with the crate, `it`).
    let module = module_path!().split_once("::").unwrap().1;
    let name =
        format!("{module}::a_panic_in_a_function_is_written_as_a_json_line_like_every_other_line");
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &name, "--nocapture", "--test-threads", "1"])
        .env(JSON_CHILD, "1")
        .env("RUST_LOG", "info")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}");
    assert!(
        stdout.contains("1 passed"),
        "the child ran no test: {stdout}"
    );
    // The function's stream (stderr here; stdout under Lambda) is all JSON objects.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .filter(serde_json::Value::is_object)
                .unwrap_or_else(|| panic!("not a JSON line: {l:?}\nall:\n{stderr}"))
        })
        .collect();
    let panic = lines
        .iter()
        .find(|l| l["message"] == "panic")
        .unwrap_or_else(|| panic!("no `panic` line:\n{stderr}"));
    assert_fields(
        panic,
        json!({
            "error": "transport exploded",
            "error_class": "panic",
            "level": "error",
            "function": "remove-expired-members"
        }),
    );
    assert!(panic["location"].as_str().unwrap().contains("glue.rs"));
    assert!(lines
        .iter()
        .any(|l| l["message"] == "record failed: handler panicked"));
}
