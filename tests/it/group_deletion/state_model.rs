//! B51 on each deletion-state model (docs/gitlab-source-notes.md §B): a group scheduled
//! as GitLab 18.10+ schedules it (`namespace_details.deletion_scheduled_at`, state 2, the
//! user in `state_metadata`, no `group_deletion_schedules` row) is due from the cutoff's
//! midnight UTC, destroyed, re-checked and restored as GitLab leaves it; a group
//! scheduled both ways is handled once; on 18.8 a restore puts the state back too, and
//! from 19.1 it records the state change for GitLab's propagation. These
//! build their own database of the release they need, whatever `HK_TEST_GITLAB` says
//! (the 18.2 model is the suite's own when it runs with `HK_TEST_GITLAB=18.2`).

use engine::migrate::GitlabVersion;
use shared::gitlab::deletion_model::{DeletionModel, Models};

use super::*;
use crate::assert::{assert_fields, assert_sent_one};

/// An empty database with `version`'s model, marked throwaway like the harness template.
async fn db_on(version: GitlabVersion) -> TestDb {
    let mut db = TestDb::empty().await;
    engine::migrate::run_for(&mut db.client, version)
        .await
        .unwrap();
    engine::migrate::mark_throwaway(&db.client, "test harness")
        .await
        .unwrap();
    db
}

/// The §B51.9 tree (G100 < G101, P200 in G101, P201 in G100, U11 owner of G100, period
/// 7) on `version`, without any schedule.
async fn tree(version: GitlabVersion) -> TestDb {
    let db = db_on(version).await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.project(201, 100).await;
    fx.users(&[U::human(11), U::human(12)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    period(&db, 1, 7).await;
    db
}

/// Schedule G100 as GitLab 18.10+ does: state 2, `deletion_scheduled_at`, the user and
/// the preserved prior state in `state_metadata`.
async fn schedule_newer_way(db: &TestDb, at: &str, user: i64, prior: &str) {
    db.exec(&format!(
        "UPDATE namespaces SET state = 2 WHERE id = 100;
         UPDATE namespace_details SET deletion_scheduled_at = '{at}',
                state_metadata = jsonb_build_object(
                  'deletion_scheduled_by_user_id', {user},
                  'preserved_states', jsonb_build_object('schedule_deletion', '{prior}'),
                  'last_updated_at', '{at}', 'last_changed_by_user_id', {user},
                  'transfer_attempt_count', 2)
          WHERE namespace_id = 100"
    ))
    .await;
}

async fn state_of(db: &TestDb, id: i64) -> (Option<i16>, serde_json::Value) {
    let r = db
        .client
        .query_one(
            "SELECT n.state, d.state_metadata FROM namespaces n
             JOIN namespace_details d ON d.namespace_id = n.id WHERE n.id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

#[tokio::test]
async fn a_group_scheduled_only_by_deletion_scheduled_at_is_destroyed_after_its_period() {
    let db = tree(GitlabVersion::V18_11).await;
    schedule_newer_way(&db, "2025-03-03T09:00:00Z", 11, "ancestor_inherited").await;
    assert!(!db.exists("group_deletion_schedules").await);
    // Cutoff 2025-03-03 is compared as its midnight UTC: 09:00 that day is not yet due.
    let (r, log) = cron_at(&db, NOW).await;
    assert!(r.runs[0].sent.is_empty());
    assert_fields(
        &log.done(),
        json!({"groups_due": 0, "cutoff": "2025-03-03"}),
    );
    // A day later it is; the message carries the UTC date of deletion_scheduled_at.
    let later = "2025-03-11T02:00:00Z";
    let (log, _g) = capture();
    let mut r = db.runner(t(later));
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": GD.name(),
            "message_key": "group-destroy:100:2025-03-03:11",
            "payload": {"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"}
        }),
    );
    // group-destroy re-checks the schedule on the details row before every chunk.
    r.drain().await.unwrap();
    assert_eq!(r.exit_code(false), 0, "{}", log.dump());
    assert!(
        !db.exists("namespaces WHERE id IN (100, 101, 300, 301)")
            .await
    );
    assert!(!db.exists("projects").await);
    assert!(
        !db.exists("namespace_details WHERE namespace_id = 100")
            .await
    );
    log.one("Group destroyed");
}

#[tokio::test]
async fn a_group_scheduled_the_newer_way_is_restored_as_gitlab_restores_it() {
    let cases = [("archived", 1), ("ancestor_inherited", 0)];
    for (version, (prior, state)) in [GitlabVersion::V18_11, GitlabVersion::V19_5]
        .into_iter()
        .flat_map(|v| cases.map(|c| (v, c)))
    {
        let db = tree(version).await;
        // The admin bot of the group's organization records the restore.
        db.exec(
            "INSERT INTO users (id, username, name, email, state, admin, user_type, projects_limit, organization_id)
             VALUES (90, 'admin-bot', 'GitLab Admin Bot', 'admin-bot@example.com', 'active', false, 11, 0, 1)",
        )
        .await;
        schedule_newer_way(&db, "2025-03-01T09:00:00Z", 11, prior).await;
        db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
            .await;
        let (r, log) = cron_once(&db).await;
        assert!(r.runs[0].sent.is_empty());
        assert_fields(&log.done(), json!({"groups_due": 1, "restored": 1}));
        assert_eq!(
            name_and_path(&db, 100).await,
            ("acme".into(), "acme".into())
        );
        assert_eq!(route(&db, "Namespace", 101).await.0, "acme/web");
        let (s, meta) = state_of(&db, 100).await;
        assert_eq!(s, Some(state), "{prior}");
        assert_eq!(
            meta,
            json!({
                "preserved_states": {},
                "last_updated_at": "2025-03-10T02:00:00.000Z",
                "last_changed_by_user_id": 90,
                "transfer_attempt_count": 2
            }),
            "{prior}"
        );
        assert!(
            db.exists(
                "namespace_details WHERE namespace_id = 100 AND deletion_scheduled_at IS NULL"
            )
            .await
        );
        // From 19.1 the state change's outbox record, pending, from which GitLab carries
        // the restored state to the descendants the deletion swept up (notes §A.3).
        if version == GitlabVersion::V19_5 {
            let rows = db
                .client
                .query("SELECT source_state, target_state, status FROM namespace_state_propagations WHERE namespace_id = 100", &[])
                .await
                .unwrap();
            let got: Vec<(i16, i16, i16)> = rows
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2)))
                .collect();
            assert_eq!(got, vec![(2, state, 0)], "{prior}");
        }
    }
}

#[tokio::test]
async fn a_group_scheduled_both_ways_is_handled_once() {
    let db = tree(GitlabVersion::V18_11).await;
    schedule_newer_way(&db, "2025-03-02T09:00:00Z", 11, "ancestor_inherited").await;
    schedule(&db, 100, 11, "2025-03-02").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    assert_sent_one(
        &r.runs[0].sent,
        json!({"payload": {"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-02"}}),
    );
    assert_fields(&log.done(), json!({"groups_due": 1, "destroy_enqueued": 1}));
    r.drain().await.unwrap();
    assert!(!db.exists("namespaces WHERE id = 100").await);
    assert!(!db.exists("group_deletion_schedules").await);
    log.one("Group destroyed");
}

#[tokio::test]
async fn a_destroy_message_stops_when_the_details_schedule_changed_user() {
    let db = tree(GitlabVersion::V18_11).await;
    // Re-scheduled by U12 since the message (for U11) was sent; the old row says U11.
    schedule_newer_way(&db, "2025-03-02T09:00:00Z", 12, "ancestor_inherited").await;
    schedule(&db, 100, 11, "2025-03-02").await;
    let before = db.snapshot().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let (run, _) = r
        .invoke(GD, &destroy_body(100, 11, "2025-03-02"), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(db.snapshot().await, before);
    assert_fields(
        &log.one("Group destroy skipped: scheduling user changed"),
        json!({"group_id": 100, "user_id": 11, "scheduled_by": 12}),
    );
}

#[tokio::test]
async fn on_18_8_a_restore_also_puts_the_state_back() {
    let db = tree(GitlabVersion::V18_8).await;
    // 18.8 writes the schedule row and, with the state, the time inside state_metadata.
    schedule(&db, 100, 11, "2025-03-01").await;
    db.exec(
        "UPDATE namespaces SET state = 2 WHERE id = 100;
         UPDATE namespace_details SET state_metadata = jsonb_build_object(
                  'deletion_scheduled_at', '2025-03-01T00:00:00Z',
                  'deletion_scheduled_by_user_id', 11,
                  'preserved_states', jsonb_build_object('schedule_deletion', 'ancestor_inherited'))
          WHERE namespace_id = 100",
    )
    .await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    let (_, log) = cron_once(&db).await;
    assert_fields(&log.done(), json!({"groups_due": 1, "restored": 1}));
    assert!(!db.exists("group_deletion_schedules").await);
    let (s, meta) = state_of(&db, 100).await;
    assert_eq!(s, Some(0));
    assert_eq!(
        meta,
        json!({
            "preserved_states": {},
            "last_updated_at": "2025-03-10T02:00:00.000Z",
            "last_changed_by_user_id": null
        })
    );
}

#[test]
fn the_sets_hold_the_models_they_name() {
    for m in DeletionModel::ALL {
        assert!(Models::ANY.contains(m));
        assert_eq!(Models::STATE.contains(m), m.has_state());
        assert_eq!(Models::SCHEDULED_AT.contains(m), m.has_scheduled_at());
    }
}
