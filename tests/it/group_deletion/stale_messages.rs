//! Destroy messages that no longer apply change nothing: the group is gone or was
//! restored (even a day later), the schedule was deleted, marked again or handed to
//! another user, the period grew, or the scheduling user is gone.

use super::*;

#[tokio::test]
async fn a_message_for_a_missing_group_is_stale() {
    let db = fixture().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let (run, _) = r
        .invoke(GD, &destroy_body(999, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: group not found")["level"],
        "info"
    );
    assert_eq!(log.done()["status"], "stale");
}

#[tokio::test]
async fn a_group_restored_after_its_message_was_sent_is_not_deleted_even_a_day_later() {
    let db = fixture().await;
    // The cron sends the destroy message, then the owner restores the group in GitLab.
    let (mut r, _) = cron_once(&db).await;
    assert_eq!(r.runs[0].sent.len(), 1);
    let body = r.runs[0].sent[0].message.envelope.to_body();
    db.exec(
        "DELETE FROM group_deletion_schedules WHERE group_id = 100;
         UPDATE namespaces SET name = 'acme', path = 'acme' WHERE id = 100;",
    )
    .await;
    let before = snapshot(&db).await;
    let (log, _g) = capture();
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: group no longer scheduled for deletion")["level"],
        "info"
    );
    assert_eq!(snapshot(&db).await, before);
    // Replayed a day later: still stale.
    let (log, _g) = capture();
    let mut later = db.runner(t("2025-03-11T02:00:00Z"));
    later.invoke(GD, &body, 1).await.unwrap();
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(snapshot(&db).await, before);
    // Marked again the next day by the same user: the old message is not yet due.
    schedule(&db, 100, 11, "2025-03-11").await;
    let (log, _g) = capture();
    later.invoke(GD, &body, 2).await.unwrap();
    log.one("Group destroy skipped: deletion not yet due");
    assert!(db.exists("namespaces WHERE id = 100").await);
    assert_eq!(db.count("projects").await, 2);
}

#[tokio::test]
async fn a_deleted_schedule_makes_the_message_stale() {
    let db = fixture().await;
    db.exec("DELETE FROM group_deletion_schedules").await;
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_group_marked_again_is_not_yet_due_at_destroy_time() {
    let db = fixture().await;
    db.exec("UPDATE group_deletion_schedules SET marked_for_deletion_on = '2025-03-09'")
        .await;
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: deletion not yet due")["level"],
        "info"
    );
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_longer_current_period_makes_the_message_not_yet_due() {
    let db = fixture().await;
    period(&db, 2, 30).await;
    let before = snapshot(&db).await;
    let (_, log, _) = destroy_once(&db).await;
    log.one("Group destroy skipped: deletion not yet due");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_schedule_by_another_user_makes_the_message_stale() {
    let db = fixture().await;
    Fx(&db).users(&[U::human(12)]).await;
    db.exec("UPDATE group_deletion_schedules SET user_id = 12")
        .await;
    let before = snapshot(&db).await;
    let (_, log, _) = destroy_once(&db).await;
    log.one("Group destroy skipped: scheduling user changed");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_user_deleted_with_its_schedule_makes_the_message_stale() {
    let db = fixture().await;
    db.exec("DELETE FROM users WHERE id = 11").await;
    assert!(!db.exists("group_deletion_schedules").await, "FK cascade");
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_missing_user_with_a_kept_schedule_is_stale_with_a_warning() {
    let db = fixture().await;
    db.exec(
        "SET session_replication_role = replica; DELETE FROM users WHERE id = 11;
         SET session_replication_role = origin;",
    )
    .await;
    assert!(db.exists("group_deletion_schedules").await);
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    let w = log.one("Group destroy skipped: user not found");
    assert_eq!(w["level"], "warn");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(snapshot(&db).await, before);
}
