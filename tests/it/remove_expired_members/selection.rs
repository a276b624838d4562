//! Which memberships remove-expired-members removes (behaviour §B38.11): expired today
//! or before (dates in UTC), invites and access requests included; a membership
//! extended after the page was read is skipped; what a removal takes with it
//! (authorizations, notification settings) and the EMF line of the run.

use super::*;
use crate::assert::{assert_cron_metric_names, assert_fields};

#[tokio::test]
async fn a_membership_expiring_today_is_removed_and_tomorrows_is_kept() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-10"),
        M::pm(11, 200, 12, 30).expires("2025-03-11"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (12, 200, 30)]).await;
    fx.notification(10, "Project", 200).await;
    let (r, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 10").await);
    assert!(db.exists("members WHERE id = 11").await);
    assert_eq!(db.pas().await, vec![(12, 200, 30)]);
    assert_eq!(db.count("notification_settings").await, 0);
    assert_fields(
        &log.done(),
        json!({
            "status": "completed",
            "updated_rows": 1,
            "skipped_rows": 0,
            "failed_rows": 0,
            "next_cursor": null
        }),
    );
    assert!(r.runs[0].sent.is_empty());
    // One EMF line per invocation, for the alarms.
    let emf = log.one("metrics");
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "GitLabHousekeeping"
    );
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["Service", "function"]])
    );
    assert_fields(
        &emf,
        json!({
            "Service": "local",
            "records": 1.0,
            "outcome_done": 1.0,
            "run_started": 1.0,
            "function": "remove-expired-members",
            "processed": 1.0,
            "failed": 0.0,
            "items": 1.0
        }),
    );
    assert!(emf["duration_s"].is_f64());
    assert_cron_metric_names(
        &emf,
        &[
            "processed",
            "skipped",
            "failed",
            "items",
            "updated_rows",
            "skipped_rows",
            "failed_rows",
        ],
    );
}

#[tokio::test]
async fn inherited_access_survives_when_a_project_membership_expires() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::gm(12, 100, 10, 20),
        M::pm(13, 200, 10, 40).expires("2025-03-01"),
    ])
    .await;
    fx.pas(&[(10, 200, 40)]).await;
    cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 13").await);
    assert_eq!(db.pas().await, vec![(10, 200, 20)]);
    assert!(
        db.scalar::<bool>("SELECT bool_and(is_unique) FROM project_authorizations")
            .await
    );
}

#[tokio::test]
async fn an_expired_invite_is_deleted_and_counted_without_an_error() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(14, 200, 0, 30)
            .invite("x@example.org", "tok")
            .expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 14").await);
    assert_eq!(log.done()["updated_rows"], 1);
    assert!(
        log.lines().iter().all(|l| l["level"] != "error"),
        "{}",
        log.dump()
    );
}

#[tokio::test]
async fn an_expired_access_request_is_deleted_and_counted() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(15, 101, 12, 30)
            .requested("2025-03-01T10:00:00Z")
            .expires("2025-03-05")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 15").await);
    assert_eq!(log.done()["updated_rows"], 1);
}

#[tokio::test]
async fn members_not_expiring_are_never_selected() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(40, 200, 10, 30),
            M::pm(41, 200, 12, 30).expires("2025-03-11"),
        ])
        .await;
    let (_, log) = cron_once(&db).await;
    assert_eq!(db.ids("members").await, vec![1, 40, 41]);
    assert_eq!(log.done()["updated_rows"], 0);
}

#[tokio::test]
async fn dates_compare_in_utc_from_midnight() {
    // 2025-03-10T23:59:59Z is still the 10th: a membership expiring the 11th stays.
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(60, 200, 10, 30).expires("2025-03-10"),
            M::pm(61, 200, 12, 30).expires("2025-03-11"),
        ])
        .await;
    let mut r = db.runner(t("2025-03-10T23:59:59Z"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(db.ids("members WHERE id >= 60").await, vec![61]);
}

#[tokio::test]
async fn a_membership_extended_after_the_page_read_is_skipped() {
    let db = fixture().await;
    let fx = Fx(&db);
    // M30 (expiring today) comes first in page order; deleting it commits an extension
    // of M19 in the same way another session would, between the page read and M19's
    // own transaction.
    fx.members(&[
        M::pm(19, 200, 10, 30).expires("2025-03-09"),
        M::pm(30, 200, 12, 30).expires("2025-03-10"),
    ])
    .await;
    db.exec(
        "CREATE FUNCTION extend_m19() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN UPDATE members SET expires_at = '2025-04-01' WHERE id = 19; RETURN OLD; END $$;
         CREATE TRIGGER extend_m19 AFTER DELETE ON members FOR EACH ROW WHEN (OLD.id = 30)
           EXECUTE FUNCTION extend_m19();",
    )
    .await;
    let (_, log) = cron_once(&db).await;
    assert!(
        db.exists("members WHERE id = 19 AND expires_at = '2025-04-01'")
            .await
    );
    assert_fields(
        &log.one("Expired Member ID=19 skipped - no longer expired"),
        json!({"member_id": 19, "level": "info"}),
    );
    assert_fields(&log.done(), json!({"updated_rows": 1, "skipped_rows": 1}));
}
