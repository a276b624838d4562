//! Bad stored values are data, not crashes: values GitLab's columns accept but no form
//! writes (dates at `-infinity`, a deletion period past the calendar) end as a logged
//! skip or a clamp, never a panic, and never stop the rest of the batch.

use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use shared::telemetry::capture;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// G100 "acme" with P200 in G101; humans U10, U11, U12; U11 owns G100.
async fn members_fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11), U::human(12)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db
}

/// `members.expires_at = '-infinity'` is a legal date: the membership is expired (as
/// GitLab's `expires_at <= today` says) and removed with the others, without a panic.
#[tokio::test]
async fn a_membership_expiring_at_minus_infinity_is_removed_with_the_others() {
    let db = members_fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-01"),
        M::pm(11, 200, 12, 30).expires("2025-03-02"),
    ])
    .await;
    db.exec(
        "INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at)
             VALUES (12, 30, 200, 'Project', 'ProjectMember', 11, '-infinity')",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(Function::RemoveExpiredMembers).to_body();
    r.run_until_idle(Function::RemoveExpiredMembers, &cron)
        .await
        .unwrap();
    assert!(
        r.runs.iter().all(|run| run.outcome == "success"),
        "{:?}",
        r.runs
    );
    assert_eq!(db.count("members WHERE id IN (10, 11, 12)").await, 0);
    assert_eq!(db.count("members WHERE id = 1").await, 1);
    assert_eq!(log.done()["updated_rows"], 3);
    log.one("Expired Member ID=12 expires at -infinity");
}

/// `deletion_adjourned_period = 2147483647` reaches past the calendar: no group is due,
/// the run completes with a warning, and nothing is deleted.
#[tokio::test]
async fn a_deletion_period_past_the_calendar_makes_no_group_due() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db.exec(
        "INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES (100, 11, '2025-03-03');
         INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 2147483647, '2024-01-01', '2024-01-01')",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t("2025-03-10T02:00:00Z"));
    let cron = r.cron_message(Function::AdjournedGroupDeletion).to_body();
    r.run_until_idle(Function::AdjournedGroupDeletion, &cron)
        .await
        .unwrap();
    assert_eq!(r.runs.len(), 1, "one run, no destroy message: {:?}", r.runs);
    assert_eq!(r.runs[0].outcome, "success");
    assert_eq!(log.done()["groups_due"], 0);
    assert_eq!(log.done()["cutoff"], "0001-01-01");
    assert!(db.exists("namespaces WHERE id = 100").await);
    let warn = log.one("deletion_adjourned_period is outside GitLab's 1..=90 days: a period below 1 counts as 1 day, one past the calendar makes no group due");
    assert_eq!(warn["deletion_adjourned_period"], 2147483647);
}
