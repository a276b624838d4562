//! The last-owner rule in remove-expired-members: the expired row of a group's last
//! counted owner is kept (and selected again the next day); bots, blocked and
//! deactivated users do not count as other owners.

use super::*;
use crate::assert::assert_fields;

#[tokio::test]
async fn the_last_owner_of_a_top_level_group_is_kept_and_selected_again_the_next_day() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    assert_fields(
        &log.one("Expired Member ID=1 not removed - last owner of group"),
        json!({"level": "warn", "group_id": 100, "member_id": 1, "user_id": 11}),
    );
    assert_fields(&log.done(), json!({"updated_rows": 0, "skipped_rows": 1}));
    // The next day's run selects M1 again.
    let (log2, _g) = capture();
    let mut r = db.runner(t("2025-03-11T00:10:00Z"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    log2.one("Expired Member ID=1 not removed - last owner of group");
}

#[tokio::test]
async fn a_project_bot_owner_does_not_count_as_another_owner() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    Fx(&db).members(&[M::gm(17, 100, 20, 50)]).await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    log.one("Expired Member ID=1 not removed - last owner of group");
}

#[tokio::test]
async fn a_subgroup_owner_with_an_inherited_owner_is_removed() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(16, 101, 12, 50).expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 16").await);
    assert_eq!(log.done()["updated_rows"], 1);
}

#[tokio::test]
async fn a_blocked_sole_owners_expired_row_is_kept_and_not_counted_as_updated() {
    let db = fixture().await;
    // U11 (blocked) holds G100's only owner row; with another member in the same group,
    // the page runs as a group, and the owner row must take the per-member path.
    db.exec(
        "UPDATE users SET state = 'blocked' WHERE id = 11;
         UPDATE members SET expires_at = '2025-03-09' WHERE id = 1",
    )
    .await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    assert!(!db.exists("members WHERE id = 10").await);
    let w = log.one("Expired Member ID=1 not removed - last owner of group");
    assert_eq!(w["user_id"], 11);
    // updated_rows counts removed rows only (docs/gitlab-differences.md).
    assert_fields(&log.done(), json!({"updated_rows": 1, "skipped_rows": 1}));
}

#[tokio::test]
async fn a_deactivated_owner_whose_only_co_owner_is_deactivated_too_keeps_both_rows() {
    let db = fixture().await;
    db.exec(
        "UPDATE users SET state = 'deactivated' WHERE id IN (11, 12);
         UPDATE members SET expires_at = '2025-03-09' WHERE id = 1",
    )
    .await;
    Fx(&db)
        .members(&[M::gm(16, 100, 12, 50).expires("2025-03-08")])
        .await;
    let (_, log) = cron_once(&db).await;
    // Neither counts, so each is protected: no removal leaves G100 without an owner row.
    assert_eq!(db.ids("members WHERE id IN (1, 16)").await, vec![1, 16]);
    assert_eq!(log.done()["skipped_rows"], 2);
}

#[tokio::test]
async fn an_active_owner_whose_only_co_owner_is_deactivated_is_kept_as_the_last_owner() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    Fx(&db)
        .users(&[U::human(13).state(Some("deactivated"))])
        .await;
    Fx(&db).members(&[M::gm(16, 100, 13, 50)]).await;
    let (_, log) = cron_once(&db).await;
    // The deactivated row is not counted: M1 is the last counted owner.
    assert!(db.exists("members WHERE id = 1").await);
    log.one("Expired Member ID=1 not removed - last owner of group");
}
