//! Failures in placeholder-user-cleanup (behaviour §B70.9, s13–s14, and grouping,
//! behaviour §7.2): a run finding the overlap lock held changes nothing; a failed send
//! rolls back its whole group and only it; a failing detail rolls back to its
//! savepoint, a transient error restarts it; a redelivered or repeated run never counts
//! an attempt twice.

use super::*;
use crate::assert::{assert_fields, assert_skipped_already_running};

#[tokio::test]
async fn s13_a_run_finding_the_overlap_lock_held_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:placeholder-user-cleanup");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    assert_skipped_already_running(&log, &r.runs[0]);
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    // Once the holder lets go, the next run claims PD1.
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
}

#[tokio::test]
async fn s14_a_failed_send_rolls_back_the_whole_group_and_the_record_is_retryable() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(57)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 7, 57, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-placeholder-user:50:1");
    let body = r.cron_message(F).to_body();
    let (run, outcome) = r.invoke(F, &body, 1).await.unwrap();
    // Under grouping (behaviour §7.2 (b)) PD1's whole group rolls back: PD7 as well.
    assert_eq!(run.outcome, "retryable");
    assert!(matches!(
        outcome,
        RecordOutcome::Retryable { ref error_class, .. } if error_class == "transport"
    ));
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    assert_eq!(detail(&db, 7).await, untouched(0, None));
    assert!(run.sent.is_empty());
    assert!(
        log.with_message(FAILED_DETAIL).is_empty(),
        "not step E: {}",
        log.dump()
    );
    let failed = log.one("record failed");
    assert_eq!(failed["error_class"], "transport");
    assert_eq!(log.done()["status"], "failed");
    // The lock was released: the redelivered message claims both details.
    r.queue().clear_failures();
    let (log2, _g2) = capture();
    let (run, _) = r.invoke(F, &body, 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 7).await.0, 1);
    let delays: Vec<u32> = run.sent.iter().map(|s| s.message.delay_s).collect();
    assert_eq!(delays, vec![0, 1]);
    assert_cron_done(&log2, 2, 0, 0, 0);
}

#[tokio::test]
async fn a_send_failure_in_a_later_group_keeps_the_groups_committed_before_it() {
    let db = TestDb::new().await;
    bulk(&db, 150).await;
    let mut r = db.runner(t(NOW));
    // Detail 120 is in the second group (101..150), in its second call of ten.
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-placeholder-user:10120:1");
    let body = r.cron_message(F).to_body();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(run.outcome, "retryable");
    assert_eq!(
        db.ids("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        (1..=100).collect::<Vec<i64>>()
    );
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 0 AND last_deletion_attempt_at IS NULL")
            .await,
        50
    );
    // Ten calls for group 1; group 2's first call went out before its second failed.
    assert_eq!(r.queue().send_calls(), 12);
    assert_eq!(run.sent.len(), 110);
    // The redelivery claims the other 50; its children repeat the keys of the ten that
    // went out without a commit (the child's checks make duplicates harmless).
    r.queue().clear_failures();
    let (log, _g) = capture();
    let (run, _) = r.invoke(F, &body, 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert_cron_done(&log, 50, 0, 0, 0);
    let keys: Vec<String> = run
        .sent
        .iter()
        .map(|s| s.message.envelope.message_key.clone())
        .collect();
    let expected: Vec<String> = (101..=150)
        .map(|id| format!("delete-placeholder-user:{}:1", 10000 + id))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        150
    );
}

#[tokio::test]
async fn a_failing_detail_rolls_back_to_its_savepoint_and_the_group_goes_on() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51), U::placeholder(52)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE UPDATE ON import_placeholder_user_details
           FOR EACH ROW WHEN (OLD.id = 2) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert_fields(
        &log.one(FAILED_DETAIL),
        json!({
            "level": "error",
            "detail_id": 2,
            "placeholder_user_id": 51,
            "error": "boom",
            "error_class": "db"
        }),
    );
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await, untouched(0, None));
    assert_eq!(detail(&db, 3).await.0, 1);
    // The failed detail does not advance `i`: PD3's child follows PD1's by one second.
    let sent: Vec<(String, u32)> = r.runs[0]
        .sent
        .iter()
        .map(|s| (s.message.envelope.message_key.clone(), s.message.delay_s))
        .collect();
    assert_eq!(
        sent,
        vec![
            ("delete-placeholder-user:50:1".to_string(), 0),
            ("delete-placeholder-user:52:1".to_string(), 1)
        ]
    );
    assert_cron_done(&log, 2, 0, 0, 1);
}

#[tokio::test]
async fn a_transient_error_restarts_the_detail_from_its_savepoint() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    // The first claim of PD2 fails with a serialization failure; the sequence is not
    // transactional, so the retry succeeds.
    db.exec(
        "CREATE SEQUENCE flaky_seq;
         CREATE FUNCTION flaky() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('flaky_seq') = 1 THEN
             RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER flaky BEFORE UPDATE ON import_placeholder_user_details
           FOR EACH ROW WHEN (OLD.id = 2) EXECUTE FUNCTION flaky();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await.0, 1);
    assert_eq!(r.runs[0].sent.len(), 2);
    assert!(log.with_message(FAILED_DETAIL).is_empty());
    assert_eq!(
        log.with_message("transient database error, retrying").len(),
        1
    );
    assert_cron_done(&log, 2, 0, 0, 0);
}

#[tokio::test]
async fn a_redelivered_or_repeated_run_never_counts_an_attempt_twice() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    // The same cron message again, and a later cron tick within two days.
    r.invoke(F, &body, 2).await.unwrap();
    let mut later = db.runner(t("2025-03-12T00:00:00Z"));
    let tick = later.cron_message(F).to_body();
    later.invoke(F, &tick, 1).await.unwrap();
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    assert_eq!(r.runs[0].sent.len(), 1);
    assert!(r.runs[1].sent.is_empty());
    assert!(later.runs[0].sent.is_empty());
    let dones = log.with_message("done");
    assert_eq!(dones[1]["enqueued_count"], 0);
    assert_eq!(dones[1]["stale_count"], 0);
}
