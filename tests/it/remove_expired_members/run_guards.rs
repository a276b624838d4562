//! What keeps a remove-expired-members run safe: an error on one member is logged and
//! the others are removed; a run finding the overlap lock held changes nothing; a
//! message without `message_key` is malformed.

use super::*;
use crate::assert::{assert_fields, assert_skipped_already_running};

#[tokio::test]
async fn an_error_on_one_member_is_logged_and_the_others_are_removed() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(20, 200, 10, 30).expires("2025-03-09"),
            M::pm(21, 200, 12, 30).expires("2025-03-09"),
        ])
        .await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 20) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_fields(
        &log.one("Expired Member ID=20 cannot be removed - boom"),
        json!({"level": "error", "member_id": 20, "error": "boom", "error_class": "db"}),
    );
    assert!(db.exists("members WHERE id = 20").await);
    assert!(!db.exists("members WHERE id = 21").await);
    assert_fields(&log.done(), json!({"updated_rows": 1, "failed_rows": 1}));
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_run_finding_the_overlap_lock_held_changes_nothing() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:remove-expired-members");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 10").await);
    assert_skipped_already_running(&log, &r.runs[0]);
    // The lock was never ours: after the holder lets go, the next run works.
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 10").await);
}

#[tokio::test]
async fn a_message_without_message_key_is_malformed_and_changes_nothing() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = json!({"version":1,"type":"remove-expired-members.run","run_id":"r","hop":0,
        "issued_at":NOW,"payload":{}})
    .to_string();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
    let m = log.one("malformed message");
    assert_eq!(m["level"], "error");
    assert!(m["error"].as_str().unwrap().contains("message_key"));
    assert!(m["sqs_message_id"].is_string());
    assert!(db.exists("members WHERE id = 10").await);
    assert_eq!(r.exit_code(true), 2);
}
