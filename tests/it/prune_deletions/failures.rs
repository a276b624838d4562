//! Failures in prune-deletions (behaviour §B43.9, scenario 14): an error rolls back the
//! whole schedule batch and the record is retried after the other schedules; a
//! schedule deleted meanwhile is stale and a vanished membership is skipped.

use super::*;
use crate::assert::assert_fields;

// Scenario 14, first part.
#[tokio::test]
async fn an_error_rolls_back_the_whole_schedule_batch_and_the_record_is_retried() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 12) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![10, 11, 12, 13, 14],
        "M10–M13 all remain"
    );
    assert_eq!(db.pas().await.iter().filter(|p| p.0 == 10).count(), 3);
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    assert_fields(
        &log.one(FAILED),
        json!({
            "level": "error",
            "schedule_id": 1,
            "user_id": 10,
            "namespace_id": 100,
            "error": "boom",
            "error_class": "db"
        }),
    );
    assert!(log.with_message(PROCESSED).is_empty());
    assert_fields(
        &log.done(),
        json!({"status": "stopped", "schedules_processed": 0}),
    );
    assert_eq!(log.one("metrics")["failed_schedules"], 1.0);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "retryable");
    assert_eq!(r.exit_code(true), 1);
    // The lock was released: the next message gets it.
    let key = shared::locks::lock_key("function:prune-deletions");
    assert!(
        db.scalar::<bool>(&format!("SELECT pg_try_advisory_lock({key})"))
            .await
    );
}

// Scenario 14, second part.
#[tokio::test]
async fn after_an_error_the_other_schedules_are_still_processed_before_the_retry() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 12) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = prune_once_with(&db, zero_budget()).await;
    assert_eq!(log.with_message(FAILED).len(), 1, "S1 is not tried again");
    assert_eq!(db.count("members WHERE user_id = 10").await, 5);
    assert!(!db.exists("members WHERE id = 2").await);
    assert_eq!(db.ids("members_deletion_schedules").await, vec![1]);
    assert_fields(
        &log.one(PROCESSED),
        json!({"schedule_id": 6, "outcome": "completed"}),
    );
    assert_fields(
        &log.done(),
        json!({"status": "stopped", "schedules_processed": 1, "destroyed_count_total": 1}),
    );
    assert!(r.runs[0].sent.is_empty(), "no continuation after an error");
    assert_eq!(r.runs[0].outcome, "retryable");
}

#[tokio::test]
async fn a_schedule_deleted_meanwhile_is_stale_and_a_vanished_membership_is_skipped() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    // Deleting M10 deletes M12 and S6, as concurrent sessions would have.
    db.exec(
        "CREATE FUNCTION meanwhile() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN DELETE FROM members WHERE id = 12; DELETE FROM members_deletion_schedules WHERE id = 6;
               RETURN OLD; END $$;
         CREATE TRIGGER meanwhile AFTER DELETE ON members FOR EACH ROW WHEN (OLD.id = 10)
           EXECUTE FUNCTION meanwhile();",
    )
    .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 3, "M12 was gone: not counted");
    assert_eq!(p["outcome"], "completed");
    assert_fields(&log.one(STALE), json!({"level": "info", "schedule_id": 6}));
    assert!(db.exists("members WHERE id = 2").await);
    assert_fields(
        &log.done(),
        json!({"status": "completed", "schedules_processed": 1}),
    );
    assert!(r.runs[0].sent.is_empty());
}
