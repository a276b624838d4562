//! Single flight (behaviour §B43.9, scenario 13): a prune-deletions message finding
//! the lock held changes nothing, and of two concurrent workers only one works.

use super::*;
use crate::assert::assert_skipped_already_running;

// Scenario 13.
#[tokio::test]
async fn a_message_finding_the_single_flight_lock_held_changes_nothing() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:prune-deletions");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = prune_once(&db).await;
    assert_skipped_already_running(&log, &r.runs[0]);
    assert_eq!(log.one("skipped: already running")["level"], "info");
    assert_eq!(db.count("members WHERE user_id = 10").await, 5);
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    prune_once(&db).await;
    assert!(!db.exists("members_deletion_schedules").await);
}

#[tokio::test]
async fn a_worker_started_while_another_works_skips_and_only_one_works() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    // The first deletion waits until the test releases it, so the worker holding the
    // single-flight lock is still busy, whatever the machine's speed, when the other
    // one tries it.
    db.exec(
        "CREATE TABLE release (x int);
         CREATE FUNCTION held() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           WHILE NOT EXISTS (SELECT 1 FROM release) LOOP PERFORM pg_sleep(0.01); END LOOP;
           RETURN OLD;
         END $$;
         CREATE TRIGGER held BEFORE DELETE ON members FOR EACH ROW EXECUTE FUNCTION held();",
    )
    .await;
    let (log, _g) = capture();
    let mut a = db.runner(t(NOW));
    let mut b = db.runner(t(NOW));
    let (body_a, body_b) = (message("run-a").to_body(), message("run-b").to_body());
    let second_while_first_works = async {
        db.session_waiting("prune-deletions", "Timeout").await;
        let rb = b.invoke(F, &body_b, 1).await;
        db.exec("INSERT INTO release VALUES (1)").await;
        rb
    };
    let (ra, rb) = tokio::join!(a.invoke(F, &body_a, 1), second_while_first_works);
    let (ra, rb) = (ra.unwrap().0, rb.unwrap().0);
    assert_eq!((ra.outcome, rb.outcome), ("success", "success"));
    let skipped = log.one("skipped: already running");
    let mut statuses: Vec<String> = log
        .with_message("done")
        .iter()
        .map(|d| d["status"].as_str().unwrap().to_string())
        .collect();
    statuses.sort();
    assert_eq!(statuses, vec!["completed", "skipped"]);
    let worked = log.one(PROCESSED);
    assert_ne!(worked["message_key"], skipped["message_key"]);
    assert_eq!(worked["destroyed_count"], 4);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(ra.sent.is_empty() && rb.sent.is_empty());
}
