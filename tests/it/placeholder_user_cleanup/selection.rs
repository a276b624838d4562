//! What placeholder-user-cleanup selects (behaviour §B70.9, s01–s07): a detail whose
//! namespace is gone and whose last attempt is more than two days old gets an attempt
//! counted and a child, one second apart (past 900 s as schedules); the fifteenth
//! attempt warns, an exhausted one is never selected, one claimed by another session
//! is stale. And the function catalogue's entry for both functions.

use super::*;
use crate::assert::{assert_fields, assert_sent_one};

#[test]
fn the_catalogue_runs_the_cleanup_daily_at_midnight_and_routes_both_types() {
    assert_eq!(F.name(), "placeholder-user-cleanup");
    assert_eq!(F.cron(), Some("cron(0 0 * * ? *)"));
    assert_eq!(F.max_hops(), 1000);
    assert_eq!(F.sends_to(), &[F, CHILD]);
    assert_eq!(CHILD.cron(), None);
    // Phase 1's system hooks go to deliver-notification (docs/gitlab-differences.md).
    assert_eq!(
        CHILD.sends_to(),
        &[Function::DeleteUser, Function::DeliverNotification]
    );
    assert_eq!(
        Function::receiver_of("delete-placeholder-user.run"),
        Some(CHILD)
    );
    assert_eq!(
        Function::receiver_of("placeholder-user-cleanup.run"),
        Some(F)
    );
}

#[tokio::test]
async fn s01_a_first_attempt_is_counted_and_its_child_is_sent_at_once() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    let sent = &r.runs[0].sent;
    let m = assert_sent_one(
        sent,
        json!({
            "receiver": CHILD.name(),
            "delay_s": 0,
            "type": "delete-placeholder-user.run",
            "message_key": "delete-placeholder-user:50:1",
            "payload": {"placeholder_user_id": 50, "attempt": 1},
            "hop": 0
        }),
    );
    let start = log.one("start");
    assert_eq!(m.envelope.run_id, start["run_id"].as_str().unwrap());
    assert!(sent[0].schedule_name.is_none());
    assert_cron_done(&log, 1, 0, 0, 0);
    assert_eq!(r.runs[0].outcome, "success");
    assert_eq!(r.queue().send_calls(), 1);
}

#[tokio::test]
async fn s02_a_detail_whose_namespace_still_exists_is_not_selected() {
    let db = TestDb::new().await;
    Fx(&db).group(100, "imported", None).await;
    Fx(&db).users(&[U::placeholder(51)]).await;
    pd(&db, 2, 51, Some(100), 0, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 2).await, untouched(0, None));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 0, 0);
}

#[tokio::test]
async fn s03_an_attempt_exactly_two_days_ago_is_not_yet_eligible_and_one_second_more_is() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(52), U::placeholder(53)])
        .await;
    pd(&db, 3, 52, None, 2, Some("2025-03-08T00:00:00Z")).await;
    pd(&db, 4, 53, None, 2, Some("2025-03-07T23:59:59Z")).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(
        detail(&db, 3).await,
        untouched(2, Some("2025-03-08T00:00:00Z"))
    );
    assert_eq!(detail(&db, 4).await, (3, Some(t(NOW)), t(NOW)));
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:53:3"
    );
    assert_eq!(
        sent[0].message.envelope.payload,
        json!({"placeholder_user_id": 53, "attempt": 3})
    );
    assert_cron_done(&log, 1, 0, 0, 0);
    // One microsecond later PD3 is due too.
    let (r2, _) = cron_at(&db, "2025-03-10T00:00:00.000001Z").await;
    assert_eq!(detail(&db, 3).await.0, 3);
    assert_eq!(
        r2.runs[0].sent[0].message.envelope.message_key,
        "delete-placeholder-user:52:3"
    );
}

#[tokio::test]
async fn s04_the_fifteenth_attempt_logs_the_final_attempt_warning_and_still_sends() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(54)]).await;
    pd(&db, 5, 54, None, 14, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 5).await, (15, Some(t(NOW)), t(NOW)));
    assert_fields(
        &log.one(FINAL_ATTEMPT),
        json!({"level": "warn", "placeholder_user_id": 54}),
    );
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:54:15"
    );
    assert_cron_done(&log, 1, 1, 0, 0);
    // A 14th attempt is no final attempt.
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(54)]).await;
    pd(&db, 5, 54, None, 13, None).await;
    let (_, log) = cron_once(&db).await;
    assert!(log.with_message(FINAL_ATTEMPT).is_empty());
    assert_cron_done(&log, 1, 0, 0, 0);
}

#[tokio::test]
async fn s05_an_exhausted_detail_is_never_selected() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(55)]).await;
    pd(&db, 6, 55, None, 15, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 6).await, untouched(15, None));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 0, 0);
}

#[tokio::test]
async fn s06_children_are_delayed_one_second_apart_and_past_900_s_use_schedules() {
    let db = TestDb::new().await;
    bulk(&db, 1001).await;
    let (r, log) = cron_once(&db).await;
    let sent = children(&r.runs[0].sent);
    assert_eq!(sent.len(), 1001);
    for (i, s) in sent.iter().enumerate() {
        let id = i as i64 + 1;
        assert_eq!(s.message.delay_s, i as u32);
        let key = format!("delete-placeholder-user:{}:1", 10000 + id);
        assert_eq!(s.message.envelope.message_key, key);
        if i <= 900 {
            assert!(s.schedule_name.is_none(), "index {i} goes through SQS");
        } else {
            assert_eq!(s.schedule_name, Some(schedule_name(&key)), "index {i}");
        }
    }
    assert_cron_done(&log, 1001, 0, 0, 0);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        1001
    );
    // Ten groups of 100 (ten calls each), then one group of one.
    assert_eq!(r.queue().send_calls(), 101);
}

#[tokio::test]
async fn s07_a_detail_claimed_by_another_session_before_the_claim_is_stale() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    // Another run claims PD1 but has not committed when our page is read.
    let other = db.session().await;
    other
        .batch_execute(
            "BEGIN;
             UPDATE import_placeholder_user_details
             SET deletion_attempts = deletion_attempts + 1,
                 last_deletion_attempt_at = '2025-03-10T00:00:00Z', updated_at = '2025-03-10T00:00:00Z'
             WHERE id = 1",
        )
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    let run = r.invoke(F, &body, 1);
    // Commit the other claim once our own claim waits for PD1's row lock.
    let commit_when_blocked = async {
        db.blocked_on_lock("placeholder-user-cleanup").await;
        other.batch_execute("COMMIT").await.unwrap();
    };
    let (result, ()) = tokio::join!(run, commit_when_blocked);
    result.unwrap();
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 1, 0);
    assert_fields(
        &log.one("Placeholder user detail skipped: no longer eligible"),
        json!({"level": "debug", "detail_id": 1}),
    );
}
