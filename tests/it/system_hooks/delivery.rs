//! How system hooks are delivered: none in silent mode; GitLab never auto-disables a
//! system hook (its failure state is neither read nor written); a failing endpoint is
//! retried under the same `Idempotency-Key` until the DLQ takes it, and the removal
//! stays; a duplicate removal message sends nothing more; a message whose removal
//! was rolled back sends nothing.

use super::*;
use integration_tests::fixtures::{M, U};
use shared::messages::Envelope;

const NOW: &str = "2025-03-10T00:10:00Z";
const F: Function = Function::RemoveExpiredMembers;

/// G100 "acme" owned by U11, P200 in G100; PM1: P200 U10 30 expired.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    fx.members(&[
        M::gm(2, 100, 11, 50),
        M::pm(1, 200, 10, 30).expires("2025-03-01"),
    ])
    .await;
    db
}

async fn hook_state(db: &TestDb) -> (i16, bool) {
    let r = db
        .client
        .query_one(
            "SELECT recent_failures, disabled_until IS NULL FROM web_hooks WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

#[tokio::test]
async fn silent_mode_sends_nothing_and_a_failing_state_does_not_disable_a_system_hook() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    // What would disable a project hook for good: GitLab ignores it for system hooks.
    db.exec("UPDATE web_hooks SET recent_failures = 40, disabled_until = '2025-03-11T00:00:00Z'")
        .await;
    Fx(&db).local_web_hooks(true).await;
    db.exec("UPDATE application_settings SET silent_mode_enabled = true")
        .await;
    let (r, _) = until_idle(&db, NOW, F, None).await;
    assert!(
        !db.exists("members WHERE id = 1").await,
        "removed all the same"
    );
    assert!(rx.requests().is_empty());
    assert!(r
        .runs
        .iter()
        .all(|run| run.function != Function::DeliverNotification));
    // Silent mode off: sent, and the hook's failure state left as it was.
    db.exec(
        "UPDATE application_settings SET silent_mode_enabled = false;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id,
                              expires_at, state, notification_level, member_namespace_id,
                              created_at, updated_at)
         VALUES (3, 30, 200, 'Project', 'ProjectMember', 10, '2025-03-01', 0, 3, 300,
                 '2024-01-01', '2024-01-01')",
    )
    .await;
    until_idle(&db, NOW, F, None).await;
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(hook_state(&db).await, (40, false));
}

#[tokio::test]
async fn a_failing_endpoint_is_retried_with_the_same_key_and_the_removal_stays() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    rx.respond(503);
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    let (r, log) = until_idle(&db, NOW, F, None).await;
    assert!(!db.exists("members WHERE id = 1").await);
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 5, "every receive until the DLQ");
    assert!(
        reqs.iter()
            .all(|q| q.header("idempotency-key")
                == Some("system-hook:user_remove_from_team:1:hook:1"))
    );
    assert_eq!(r.dead_letters().len(), 1);
    assert_eq!(log.with_message("Webhook delivery failed").len(), 5);
    assert_eq!(
        hook_state(&db).await,
        (0, true),
        "no back-off for a system hook"
    );
    // The endpoint back: the dead letter replayed is delivered under the same key.
    rx.respond(200);
    let dead = r.dead_letters()[0].envelope.to_body();
    until_idle(&db, NOW, Function::DeliverNotification, Some(dead)).await;
    assert_eq!(rx.requests().len(), 6);
}

#[tokio::test]
async fn a_duplicate_removal_message_sends_no_second_hook() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    let mut r = db.runner(t(NOW)).with_notifier(notifier(&db).await);
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    r.run_until_idle(F, &body).await.unwrap();
    assert_eq!(rx.requests().len(), 1);
    // A replayed delivery is at least once: the same Idempotency-Key again.
    let hook = r
        .runs
        .iter()
        .flat_map(|run| run.sent.iter())
        .find(|s| s.message.receiver == Function::DeliverNotification)
        .unwrap()
        .message
        .envelope
        .to_body();
    r.run_until_idle(Function::DeliverNotification, &hook)
        .await
        .unwrap();
    let keys: Vec<Option<String>> = rx
        .requests()
        .iter()
        .map(|q| q.header("idempotency-key").map(String::from))
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1]);
}

#[tokio::test]
async fn a_hook_whose_removal_did_not_commit_sends_nothing() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    let mut r = db.runner(t(NOW)).with_notifier(notifier(&db).await);
    let body = r.cron_message(F).to_body();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    let hook: &Envelope = &run
        .sent
        .iter()
        .find(|s| s.message.receiver == Function::DeliverNotification)
        .unwrap()
        .message
        .envelope;
    // As if the removal had rolled back after sending: the row is there.
    Fx(&db)
        .members(&[M::pm(1, 200, 10, 30).expires("2025-03-01")])
        .await;
    let (log, _g) = capture();
    let (_, outcome) = r
        .invoke(Function::DeliverNotification, &hook.to_body(), 1)
        .await
        .unwrap();
    assert!(outcome.is_success());
    assert!(rx.requests().is_empty());
    log.one("System hook skipped: the row it reports is still there");
}
