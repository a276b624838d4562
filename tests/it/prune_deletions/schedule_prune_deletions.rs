//! schedule-prune-deletions, the cron of B43: one `prune-deletions.run` only when a
//! schedule exists (scenario 1 of behaviour §B43.9), skipped when its lock is held,
//! retried when the send fails; and the ready Lambda events of both functions.

use super::*;
use crate::assert::{
    assert_cron_metric_names, assert_fields, assert_sent_one, assert_skipped_already_running,
};

// Scenario 1.
#[tokio::test]
async fn the_scheduler_enqueues_one_run_only_when_a_schedule_exists() {
    let db = fixture().await;
    // No schedule: nothing is sent.
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    assert_eq!(
        cron.message_key,
        "schedule-prune-deletions:cron:2025-03-10T00:10:00Z"
    );
    r.invoke(SCHED, &cron.to_body(), 1).await.unwrap();
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
    assert_fields(
        &log.done(),
        json!({"enqueued": false, "status": "completed"}),
    );
    assert_fields(
        &log.one("metrics"),
        json!({
            "function": "schedule-prune-deletions",
            "remaining_schedules": 0.0,
            "oldest_schedule_age_s": 0.0
        }),
    );
    // One schedule: one prune-deletions.run with delay 0 and hop 0.
    schedule(&db, 1, 100, 10, 11).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    r.invoke(SCHED, &cron.to_body(), 1).await.unwrap();
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": F.name(),
            "delay_s": 0,
            "hop": 0,
            "type": "prune-deletions.run",
            "run_id": cron.run_id,
            "message_key": format!("prune-deletions:{}:0", cron.run_id),
            "payload": {}
        }),
    );
    assert_eq!(log.done()["enqueued"], true);
    let emf = log.one("metrics");
    assert_fields(
        &emf,
        json!({"remaining_schedules": 1.0, "oldest_schedule_age_s": 86_400.0}),
    );
    assert_cron_metric_names(&emf, &["remaining_schedules", "oldest_schedule_age_s"]);
    // The scheduler never touches memberships or schedules itself.
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
}

#[tokio::test]
async fn the_scheduler_finding_its_lock_held_is_skipped_and_a_failed_send_is_retried() {
    let db = fixture().await;
    schedule(&db, 1, 100, 10, 11).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:schedule-prune-deletions");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(SCHED).to_body();
    r.invoke(SCHED, &body, 1).await.unwrap();
    assert_skipped_already_running(&log, &r.runs[0]);
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    // A send failure is a retryable failure, and the lock is released anyway.
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.receiver == Function::PruneDeletions);
    let body = r.cron_message(SCHED).to_body();
    r.invoke(SCHED, &body, 1).await.unwrap();
    assert_eq!(r.runs[0].outcome, "retryable");
    assert!(
        db.scalar::<bool>(&format!("SELECT pg_try_advisory_lock({key})"))
            .await
    );
}

#[tokio::test]
async fn the_lambda_events_of_both_functions_are_processed() {
    use crate::handle_event;
    use aws_lambda_events::event::sqs::SqsEvent;
    use engine::local_queue::LocalQueue;
    use lambda_runtime::{Context, LambdaEvent};

    use shared::lambda::Environment;
    use std::sync::Arc;

    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    let event = |name: &str| -> SqsEvent {
        let p = format!("{}/../events/{name}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    };
    let queue = LocalQueue::new(t(NOW));
    let deps = |function: Function| -> Environment {
        integration_tests::environment(function, &db.url, t(NOW))
            .queue(Arc::new(queue.clone()))
            .build()
    };
    let resp = handle_event(
        &deps(SCHED),
        LambdaEvent::new(event("schedule-prune-deletions"), Context::default()),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    let sent = queue.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "prune-deletions:3b7d2f4a-0c1e-4d5f-8a9b-2c3d4e5f6a71:0"
    );
    // The ready prune-deletions event is exactly that message.
    let ev = event("prune-deletions");
    let body: Envelope = serde_json::from_str(ev.records[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(body.message_key, sent[0].message.envelope.message_key);
    let resp = handle_event(&deps(F), LambdaEvent::new(ev, Context::default()))
        .await
        .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert!(!db.exists("members_deletion_schedules").await);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
}
