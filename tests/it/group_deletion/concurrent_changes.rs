//! Changes another session commits while group-destroy waits for a row: a subgroup or a
//! project transferred out survives with its issues; a restore stops the destroy before
//! its next chunk.

use super::*;
use crate::assert::assert_fields;

/// G100 (scheduled by U11, its owner) with subgroups G101 "one" and G102 "two", P201 in
/// G101 and P202 in G102 with three issues each, and G900 "elsewhere" outside it.
async fn transfer_fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "one", Some(100)).await;
    fx.group(102, "two", Some(100)).await;
    fx.group(900, "elsewhere", None).await;
    fx.project(201, 101).await;
    fx.project(202, 102).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    period(&db, 1, 7).await;
    schedule(&db, 100, 11, "2025-03-03").await;
    for i in 0..3 {
        fx.contribution("issues", 1000 + i, 201, 11).await;
        fx.contribution("issues", 2000 + i, 202, 11).await;
    }
    db
}

/// Run `group-destroy` for G100 while another session holds P202's row; once the
/// destroy waits for it (G101 and P201 are gone by then), `change` runs in the holding
/// transaction, which then commits.
async fn destroy_with_change_while_p202_is_held(db: &TestDb, change: &str) -> (Captured, Run) {
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM projects WHERE id = 202 FOR UPDATE")
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = destroy_body(100, 11, "2025-03-03");
    let mover = async {
        until_waiting(db, "group-destroy").await;
        assert!(
            !db.exists("projects WHERE id = 201").await,
            "G101 went first"
        );
        tx.batch_execute(change).await.unwrap();
        tx.commit().await.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(GD, &body, 1), mover);
    (log, res.unwrap().0)
}

#[tokio::test]
async fn a_subgroup_transferred_out_mid_destroy_survives_with_its_project_and_issues() {
    let db = transfer_fixture().await;
    let (log, run) = destroy_with_change_while_p202_is_held(
        &db,
        "UPDATE namespaces SET parent_id = 900, traversal_ids = ARRAY[900, 102] WHERE id = 102;
         UPDATE namespaces SET traversal_ids = ARRAY[900, 102, 302] WHERE id = 302;
         UPDATE routes SET path = 'elsewhere/two' || substr(path, char_length('acme-deletion_scheduled-100/two') + 1)
          WHERE path LIKE 'acme-deletion_scheduled-100/two%';",
    )
    .await;
    assert_eq!(run.outcome, "success");
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 101, 301)").await,
        Vec::<i64>::new()
    );
    assert_eq!(
        db.ids("namespaces WHERE id IN (102, 302)").await,
        vec![102, 302]
    );
    assert!(db.exists("projects WHERE id = 202").await);
    assert_eq!(db.ids("issues").await, vec![2000, 2001, 2002]);
    assert_eq!(route(&db, "Project", 202).await.0, "elsewhere/two/p202");
    assert_fields(
        &log.one("Group destroy skipped: project no longer belongs to the group"),
        json!({"group_id": 100, "project_id": 202}),
    );
    let w = log.one("Group destroy skipped: subgroup no longer belongs to the group");
    assert_eq!(w["namespace_id"], 102);
    assert_fields(
        &log.done(),
        json!({
            "outcome": "destroyed",
            "contributions_deleted": 3,
            "projects_deleted": 1,
            "groups_deleted": 2
        }),
    );
}

#[tokio::test]
async fn a_project_transferred_out_mid_destroy_survives_with_its_issues() {
    let db = transfer_fixture().await;
    let (log, _) = destroy_with_change_while_p202_is_held(
        &db,
        "UPDATE projects SET namespace_id = 900 WHERE id = 202;
         UPDATE namespaces SET parent_id = 900, traversal_ids = ARRAY[900, 302] WHERE id = 302;
         UPDATE routes SET path = 'elsewhere/p202' WHERE source_type = 'Project' AND source_id = 202;",
    )
    .await;
    assert!(
        db.exists("projects WHERE id = 202 AND namespace_id = 900")
            .await
    );
    assert_eq!(db.ids("issues").await, vec![2000, 2001, 2002]);
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 101, 102)").await,
        Vec::<i64>::new()
    );
    log.one("Group destroy skipped: project no longer belongs to the group");
    assert_fields(
        &log.done(),
        json!({"projects_deleted": 1, "groups_deleted": 3}),
    );
}

#[tokio::test]
async fn a_restore_mid_destroy_stops_it_before_the_next_chunk() {
    let db = transfer_fixture().await;
    // P202 gets 1002 issues: its first chunk deletes 1000, the other two must survive.
    db.exec(
        "INSERT INTO issues (id, project_id, author_id, created_at, updated_at, namespace_id, work_item_type_id)
         SELECT 3000 + i, 202, 11, '2024-01-01', '2024-01-01', (SELECT project_namespace_id FROM projects WHERE id = 202), 1 FROM generate_series(0, 998) i",
    )
    .await;
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM projects WHERE id = 202 FOR UPDATE")
        .await
        .unwrap();
    let restorer = db.session().await;
    restorer
        .batch_execute(&format!(
            "SET application_name = 'restorer'; SET lock_timeout = {}",
            wait::LOCK_WAIT.as_millis()
        ))
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = destroy_body(100, 11, "2025-03-03");
    let restore = async {
        // P202's first chunk holds the schedule row FOR SHARE and waits for P202.
        until_waiting(&db, "group-destroy").await;
        // The restore deletes the schedule between that chunk and the next. A row lock
        // freed by a COMMIT is not handed to its waiter first (the next chunk could take
        // it again), so the restore queues on the table lock instead, which PostgreSQL
        // grants in order: it commits before the next chunk can read the schedule.
        let restore = restorer.batch_execute(
            "BEGIN;
             LOCK TABLE group_deletion_schedules IN EXCLUSIVE MODE;
             DELETE FROM group_deletion_schedules WHERE group_id = 100;
             COMMIT",
        );
        let release = async {
            until_waiting(&db, "restorer").await;
            tx.commit().await.unwrap();
        };
        let (restored, ()) = tokio::join!(restore, release);
        restored.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(GD, &body, 1), restore);
    res.unwrap();
    assert!(
        !db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
    assert_eq!(db.count("issues WHERE project_id = 202").await, 2);
    assert!(db.exists("projects WHERE id = 202").await);
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 102)").await,
        vec![100, 102]
    );
    let l = log.one("Group destroy stopped: group no longer scheduled for deletion");
    assert_eq!(l["groups_deleted"], 1);
    assert_fields(
        &log.done(),
        json!({"status": "stale", "outcome": "not_scheduled"}),
    );
}
