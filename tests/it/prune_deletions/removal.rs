//! What prune-deletions removes for a schedule (behaviour §B43.9, scenarios 2, 3 and
//! 10): every membership of the user in the root hierarchy, access requests and
//! awaiting ones included, with their authorizations and notification settings, a
//! hundred per invocation; then the schedule.

use super::*;
use crate::assert::{assert_authorizations_of, assert_fields, assert_user_state};

// Scenario 2, plus a replay after the schedule is gone (behaviour §B43.8).
#[tokio::test]
async fn an_owner_removes_every_membership_of_the_hierarchy_and_the_schedule() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    Fx(&db).notification(10, "Namespace", 101).await;
    Fx(&db).notification(10, "Namespace", 500).await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![14],
        "M10–M13 deleted, M14 kept"
    );
    assert_authorizations_of(&db, 10, &[(10, 600, 30)]).await;
    assert_eq!(
        db.count("notification_settings").await,
        1,
        "only G500's setting stays"
    );
    assert!(
        db.exists("notification_settings WHERE source_id = 500")
            .await
    );
    assert!(!db.exists("members_deletion_schedules").await);
    let p = log.one(PROCESSED);
    assert_fields(
        &p,
        json!({
            "level": "info",
            "schedule_id": 1,
            "user_id": 10,
            "namespace_id": 100,
            "scheduled_by_id": 11,
            "destroyed_count": 4,
            "outcome": "completed"
        }),
    );
    assert!(p["destroy_duration_s"].is_f64());
    assert!(log.with_message(DENIED).is_empty());
    assert_fields(
        &log.done(),
        json!({"status": "completed", "schedules_processed": 1, "destroyed_count_total": 4}),
    );
    assert_eq!(log.one("metrics")["failed_schedules"], 0.0);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
    // The user is never blocked by B43.
    assert_user_state(&db, 10, "active").await;
    // A replay after every schedule is gone: completed, no message.
    let (r, log) = prune_once(&db).await;
    assert_fields(
        &log.done(),
        json!({"status": "completed", "schedules_processed": 0}),
    );
    assert!(log.with_message(PROCESSED).is_empty());
    assert!(r.runs[0].sent.is_empty());
}

// Scenario 3.
#[tokio::test]
async fn more_than_a_hundred_memberships_continue_in_a_second_invocation() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
           SELECT g + 100, 'p' || g, 'p' || g, 'Project', 101, ARRAY[100, 101, g + 100], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(1000, 1149) g;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT g, 'p' || g, 'p' || g, 101, g + 100, 1, '2024-01-01', '2024-01-01' FROM generate_series(1000, 1149) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, notification_level, member_namespace_id)
           SELECT 5000 + g - 1000, 30, g, 'Project', 'ProjectMember', 10, 3, (SELECT project_namespace_id FROM projects WHERE id = g) FROM generate_series(1000, 1149) g;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT 10, g, 30, true FROM generate_series(1000, 1149) g;",
    )
    .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        (5100..5150).collect::<Vec<i64>>(),
        "the 100 lowest member ids went"
    );
    assert_eq!(
        db.count("project_authorizations WHERE user_id = 10").await,
        50
    );
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 100, "outcome": "partial"}),
    );
    assert_eq!(log.done()["status"], "more_work");
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // Invocation 2, given that message.
    let next = r.runs[0].sent[0].message.envelope.to_body();
    let (log2, _g) = capture();
    let mut r2 = db.runner(t(NOW));
    r2.invoke(F, &next, 1).await.unwrap();
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(!db.exists("project_authorizations WHERE user_id = 10").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log2.one(PROCESSED),
        json!({"destroyed_count": 50, "outcome": "completed"}),
    );
    assert_eq!(log2.done()["status"], "completed");
    assert!(r2.runs[0].sent.is_empty());
}

// Scenario 10.
#[tokio::test]
async fn a_schedule_with_nothing_left_is_deleted_after_one_refresh() {
    let db = fixture().await;
    // Stale authorization rows: the refresh over projects_under(100) removes the
    // hierarchy's and leaves P600's.
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 201, 20), (10, 600, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert!(!db.exists("members_deletion_schedules").await);
    assert_authorizations_of(&db, 10, &[(10, 600, 30)]).await;
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 0, "outcome": "completed"}),
    );
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_schedule_on_a_subgroup_covers_its_whole_root_hierarchy() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 101, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_fields(
        &log.one(PROCESSED),
        json!({"namespace_id": 101, "destroyed_count": 4}),
    );
}

#[tokio::test]
async fn access_requests_and_awaiting_memberships_are_removed_too() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::gm(10, 101, 10, 30).requested("2025-03-01T00:00:00Z"),
            M::pm(12, 200, 10, 5).state(1),
            M::pm(13, 200, 0, 30).invite("x@example.org", "tok"),
        ])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(
        db.exists("members WHERE id = 13").await,
        "invites never match"
    );
    assert_eq!(log.one(PROCESSED)["destroyed_count"], 2);
}
