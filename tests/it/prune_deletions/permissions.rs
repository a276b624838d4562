//! The permission rules of prune-deletions (behaviour §B43.9, scenarios 4–9): a denial
//! drops the schedule and keeps what it denies; the last owner is kept; bot
//! memberships are never removed; admins need no membership; an inactive or demoted
//! scheduler removes nothing.

use super::*;
use crate::assert::{assert_authorizations_of, assert_fields, assert_user_state};

// Scenario 4.
#[tokio::test]
async fn a_maintainer_may_not_remove_a_group_membership_so_the_schedule_is_dropped() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 2, 100, 10, 12).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![10, 12]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({
            "level": "warn",
            "schedule_id": 2,
            "user_id": 10,
            "namespace_id": 100,
            "scheduled_by_id": 12,
            "member_id": 10,
            "reason": "not_authorized"
        }),
    );
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 0, "outcome": "denied"}),
    );
    // A denial is not a failure: the record succeeds and nothing is left to do.
    assert_eq!(log.done()["status"], "completed");
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
}

// Scenario 5.
#[tokio::test]
async fn removals_before_a_denial_stay_and_the_denied_membership_remains() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(30, 200, 10, 30), M::gm(31, 101, 10, 30)])
        .await;
    Fx(&db).pas(&[(10, 200, 30)]).await;
    schedule(&db, 2, 100, 10, 12).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![31]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 31, "reason": "not_authorized"}),
    );
    let p = log.one(PROCESSED);
    assert_fields(&p, json!({"destroyed_count": 1, "outcome": "denied"}));
    // The refresh of the batch leaves what M31 still grants.
    assert_authorizations_of(&db, 10, &[(10, 200, 30)]).await;
}

// Scenario 6.
#[tokio::test]
async fn a_bot_group_membership_is_never_removed_even_by_an_admin() {
    let db = fixture().await;
    Fx(&db).members(&[M::gm(32, 101, 20, 30)]).await;
    schedule(&db, 3, 100, 20, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 32").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 32, "reason": "project_bot_group_member", "scheduled_by_id": 1}),
    );
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
    assert_user_state(&db, 20, "active").await;
}

#[tokio::test]
async fn an_admins_schedule_cannot_remove_a_bots_project_membership() {
    let db = fixture().await;
    Fx(&db).members(&[M::pm(33, 200, 20, 40)]).await;
    schedule(&db, 3, 100, 20, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 33").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 33, "reason": "project_bot_project_member"}),
    );
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
}

// Scenario 7.
#[tokio::test]
async fn the_last_owner_is_kept_and_the_schedule_dropped() {
    let db = fixture().await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    Fx(&db).members(&[M::gm(40, 100, 10, 50)]).await;
    schedule(&db, 4, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 40").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 40, "reason": "last_owner"}),
    );
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 0, "outcome": "denied"}),
    );
}

#[tokio::test]
async fn a_blocked_sole_owners_removal_is_denied_as_the_last_owner() {
    let db = fixture().await;
    // G100's only owner row is U10's, and U10 is blocked: it counts for nobody, but it
    // is the last owner row the group has.
    db.exec("DELETE FROM members WHERE id = 1; UPDATE users SET state = 'blocked' WHERE id = 10")
        .await;
    Fx(&db).members(&[M::gm(40, 100, 10, 50)]).await;
    schedule(&db, 4, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 40").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 40, "reason": "last_owner"}),
    );
}

// Scenario 8.
#[tokio::test]
async fn an_admin_who_is_not_a_member_removes_everything() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 5, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 2, "outcome": "completed"}),
    );
}

// Scenario 9.
#[tokio::test]
async fn an_inactive_scheduler_removes_nothing_and_the_schedule_is_dropped() {
    let db = fixture().await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 11")
        .await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![10, 12]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 10, "reason": "actor_inactive"}),
    );
    assert_fields(
        &log.one(PROCESSED),
        json!({"destroyed_count": 0, "outcome": "denied"}),
    );
}

#[tokio::test]
async fn a_scheduler_who_lost_owner_rights_has_the_schedule_dropped() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    // U11 was demoted from owner to developer after scheduling.
    db.exec("UPDATE members SET access_level = 30 WHERE id = 1")
        .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![10, 11, 12, 13, 14]
    );
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 10, "reason": "not_authorized"}),
    );
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_project_owner_membership_needs_project_owner_rights() {
    let db = fixture().await;
    // U12 (maintainer of G100) may remove a maintainer, not an owner, of P200.
    Fx(&db)
        .members(&[M::pm(33, 200, 10, 40), M::pm(34, 201, 10, 50)])
        .await;
    schedule(&db, 2, 100, 10, 12).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![34]);
    assert_fields(
        &log.one(DENIED),
        json!({"member_id": 34, "reason": "owner_required"}),
    );
    assert_eq!(log.one(PROCESSED)["destroyed_count"], 1);
}
