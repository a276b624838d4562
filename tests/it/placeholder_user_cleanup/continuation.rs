//! How placeholder-user-cleanup walks many details: 1,500 children sent ten per call,
//! the deadline guard continuing after each detail with the run-wide index, a
//! continuation past the hop limit, and a dry run that changes nothing.

use super::*;
use crate::assert::{assert_fields, assert_message};
use shared::handlers::Dispatch;

/// A transport that records the size of every `send` call.
struct Recording {
    inner: LocalQueue,
    sizes: Mutex<Vec<usize>>,
}

#[async_trait]
impl Queue for Recording {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        self.sizes.lock().unwrap().push(messages.len());
        self.inner.send(messages).await
    }
}

#[tokio::test]
async fn fifteen_hundred_placeholders_get_fifteen_hundred_children_sent_ten_per_call() {
    let db = TestDb::new().await;
    bulk(&db, 1500).await;
    let q = Recording {
        inner: LocalQueue::new(t(NOW)),
        sizes: Mutex::new(Vec::new()),
    };
    let settings = Settings::default();
    let inv = Invocation::new(F, t(NOW), &q, &settings);
    let body = Envelope::cron(F, "run-1500", t(NOW)).to_body();
    let mut client = db.connector().connect(F.name()).await.unwrap();
    let (log, _g) = capture();
    let outcome = process_record(
        &Dispatch::new(),
        &inv,
        &mut client,
        &body,
        &RecordMeta::default(),
    )
    .await;
    assert!(outcome.is_success());
    let sent = q.inner.sent();
    assert_eq!(sent.len(), 1500);
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.message.delay_s, i as u32);
        assert_eq!(s.message.envelope.run_id, "run-1500");
        let key = &s.message.envelope.message_key;
        assert_eq!(*key, format!("delete-placeholder-user:{}:1", 10001 + i));
        if i > 900 {
            assert_eq!(s.schedule_name, Some(schedule_name(key)), "index {i}");
        } else {
            assert!(s.schedule_name.is_none(), "index {i}");
        }
    }
    assert_eq!(
        sent.iter().filter(|s| s.schedule_name.is_some()).count(),
        599
    );
    // 15 groups of 100, each sent in ten calls of ten.
    assert_eq!(q.inner.send_calls(), 150);
    assert_eq!(*q.sizes.lock().unwrap(), vec![10; 150]);
    assert_eq!(log.done()["enqueued_count"], 1500);
    assert_cron_done(&log, 1500, 0, 0, 0);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        1500
    );
}

#[tokio::test]
async fn the_deadline_guard_continues_after_each_detail_carrying_the_index() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51), U::placeholder(52)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let cron = r.cron_message(F);
    r.invoke(F, &cron.to_body(), 1).await.unwrap();
    // Progress rule: the first detail is processed although the guard has fired.
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await.0, 0);
    assert_fields(
        &log.done(),
        json!({"status": "limit_reached", "enqueued_count": 1}),
    );
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].message.receiver, CHILD);
    assert_message(
        &sent[1].message,
        json!({
            "receiver": F.name(),
            "delay_s": 0,
            "hop": 1,
            "payload": {"cursor": {"detail_id": 1, "index": 1}},
            "run_id": cron.run_id,
            "message_key": format!("placeholder-user-cleanup:{}:1", cron.run_id)
        }),
    );
    // Until idle: one detail per invocation, the children 0, 1 and 2 s after the run.
    r.drain().await.unwrap();
    let cron_runs: Vec<_> = r.runs.iter().filter(|x| x.function == F).collect();
    // The guard only fires before a detail: the third invocation finds the next page
    // empty and completes.
    assert_eq!(cron_runs.len(), 3, "one invocation per detail");
    assert_eq!(
        cron_runs[1].report.as_ref().unwrap().to_json()["status"],
        "limit_reached"
    );
    assert_eq!(
        cron_runs[2].report.as_ref().unwrap().to_json()["status"],
        "completed"
    );
    assert_eq!(
        cron_runs[1].sent.last().unwrap().message.envelope.payload,
        json!({"cursor": {"detail_id": 2, "index": 2}})
    );
    let mut child_delays: Vec<(String, u32)> = r
        .runs
        .iter()
        .flat_map(|x| children(&x.sent))
        .map(|s| (s.message.envelope.message_key.clone(), s.message.delay_s))
        .collect();
    child_delays.sort();
    assert_eq!(
        child_delays,
        vec![
            ("delete-placeholder-user:50:1".to_string(), 0),
            ("delete-placeholder-user:51:1".to_string(), 1),
            ("delete-placeholder-user:52:1".to_string(), 2)
        ]
    );
    assert!(log.with_message("skipped: already running").is_empty());
    assert_eq!(r.exit_code(false), 0);
}

#[tokio::test]
async fn a_continuation_past_the_hop_limit_logs_and_sends_only_the_child() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51)])
        .await;
    pd(&db, 11, 50, None, 0, None).await;
    pd(&db, 12, 51, None, 0, None).await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let mut env = r.cron_message(F);
    env.hop = 1000;
    env.message_key = "placeholder-user-cleanup:r:1000".into();
    // Seven children were sent for details up to id 10 (an index is at most the id).
    env.payload = json!({"cursor": {"detail_id": 10, "index": 7}});
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    assert_fields(
        &log.one("continuation not sent: hop limit reached"),
        json!({"level": "error", "max_hops": 1000}),
    );
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message.receiver, CHILD);
    // The index came in through the cursor.
    assert_eq!(sent[0].message.delay_s, 7);
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_dry_run_reports_the_children_and_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(54)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 5, 54, None, 14, None).await;
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    let run = r.dry_run(F, &body).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert_fields(
        &run.report.unwrap().to_json(),
        json!({"enqueued_count": 2, "max_attempts_reached_count": 1}),
    );
    assert_eq!(run.sent.len(), 2);
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    assert_eq!(detail(&db, 5).await, untouched(14, None));
    assert_eq!(r.queue().pending_len(), 0);
    // Nothing is left locked: a real run follows.
    cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
}
