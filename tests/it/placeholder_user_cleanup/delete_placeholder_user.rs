//! delete-placeholder-user, the child of B70 (behaviour §B70.9, s08–s12): silent for a
//! missing user or a human, a warning for a placeholder still referenced, phase 1 of
//! user removal for a deletable one (refused for a sole owner, rolled back when the
//! delete-user send fails), a silent no-op when replayed; malformed payloads are
//! permanent failures; with audit events on, the deletion's audit events.

use super::*;
use crate::assert::{assert_fields, assert_sent_one, assert_user_state};

#[tokio::test]
async fn s08_a_child_for_a_missing_user_succeeds_silently() {
    let db = TestDb::new().await;
    let (r, log) = child_once(&db, 999).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_found");
    assert_eq!(db.count("users").await, 0);
}

#[tokio::test]
async fn s09_a_child_for_a_human_succeeds_silently_and_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db).group(100, "acme", None).await;
    Fx(&db).users(&[U::human(56)]).await;
    Fx(&db).members(&[M::gm(70, 100, 56, 30)]).await;
    let (r, log) = child_once(&db, 56).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_placeholder");
    assert_user_state(&db, 56, "active").await;
    assert!(db.exists("members WHERE id = 70").await);
    assert!(!db.exists("ghost_user_migrations").await);
}

#[tokio::test]
async fn s10_a_child_for_a_still_referenced_placeholder_warns_and_keeps_it() {
    for table in ["notes", "issues", "merge_requests"] {
        let db = TestDb::new().await;
        let fx = Fx(&db);
        fx.group(100, "acme", None).await;
        fx.project(200, 100).await;
        fx.users(&[U::placeholder(50)]).await;
        pd(&db, 1, 50, None, 1, Some(NOW)).await;
        fx.contribution(table, 1, 200, 50).await;
        let (r, log) = child_once(&db, 50).await;
        let w = log.one(REFERENCED);
        assert_eq!(w["level"], "warn", "{table}");
        assert_eq!(w["placeholder_user_id"], 50);
        assert_eq!(log.done()["outcome"], "referenced");
        assert_eq!(r.runs[0].outcome, "success");
        assert!(r.runs[0].sent.is_empty());
        assert_eq!(
            db.scalar::<String>("SELECT state FROM users WHERE id = 50")
                .await,
            "active",
            "{table}"
        );
        assert_eq!(detail(&db, 1).await, untouched(1, Some(NOW)));
        assert!(!db.exists("ghost_user_migrations").await);
        assert!(log.with_message("User scheduled for removal").is_empty());
    }
}

#[tokio::test]
async fn s11_a_deletable_placeholder_is_scheduled_for_removal_and_delete_user_finishes() {
    let db = deletable().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(CHILD, &child_body(50, 1), 1).await.unwrap();
    assert_user_state(&db, 50, "blocked").await;
    assert!(!db.exists("members WHERE id = 60").await);
    assert!(db.pas().await.is_empty());
    let row = db
        .client
        .query_one(
            "SELECT initiator_user_id, hard_delete FROM ghost_user_migrations WHERE user_id = 50",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), Some(50));
    assert!(!row.get::<_, bool>(1));
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": Function::DeleteUser.name(),
            "delay_s": 30,
            "message_key": "delete-user:50",
            "run_id": "run-1",
            "payload": {"user_id": 50, "initiator_user_id": 50, "reason": "Placeholder user cleanup"}
        }),
    );
    assert_fields(
        &log.one("Placeholder user deletion scheduled"),
        json!({"level": "info", "placeholder_user_id": 50}),
    );
    assert_fields(
        &log.one("User scheduled for removal"),
        json!({"initiator_user_id": 50, "reason": "Placeholder user cleanup"}),
    );
    assert_fields(
        &log.done(),
        json!({"outcome": "scheduled", "status": "completed"}),
    );
    // The detail stays until phase 2.
    assert!(
        db.exists("import_placeholder_user_details WHERE id = 1")
            .await
    );
    // When the delete-user message runs (30 s later), U50 and PD1 are gone.
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].function, Function::DeleteUser);
    assert_eq!(r.runs[1].now, t("2025-03-10T00:00:30Z"));
    assert!(!db.exists("users WHERE id = 50").await);
    assert!(!db.exists("import_placeholder_user_details").await);
    assert!(
        db.exists("import_source_users WHERE id = 1 AND placeholder_user_id IS NULL")
            .await
    );
    assert_fields(
        &log.one("User deleted"),
        json!({"initiator_user_id": 50, "reason": "Placeholder user cleanup"}),
    );
    assert_eq!(r.exit_code(false), 0);
}

#[tokio::test]
async fn s12_a_child_replayed_after_the_deletion_is_a_silent_no_op() {
    let db = deletable().await;
    let mut r = db.runner(t(NOW));
    r.run_until_idle(CHILD, &child_body(50, 1)).await.unwrap();
    assert!(!db.exists("users WHERE id = 50").await);
    let users = db.count("users").await;
    let (log, _g) = capture();
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert!(run.sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_found");
    assert_eq!(db.count("users").await, users);
}

#[tokio::test]
async fn a_placeholder_that_is_a_sole_owner_is_refused_by_phase_one() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.users(&[U::placeholder(50)]).await;
    fx.members(&[M::gm(61, 100, 50, 50)]).await;
    pd(&db, 1, 50, None, 1, Some(NOW)).await;
    let (r, log) = child_once(&db, 50).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    log.one("User removal refused: sole owner of group");
    assert_fields(
        &log.done(),
        json!({"outcome": "refused", "status": "refused"}),
    );
    assert!(log
        .with_message("Placeholder user deletion scheduled")
        .is_empty());
    assert_user_state(&db, 50, "active").await;
    assert!(db.exists("members WHERE id = 61").await);
    assert!(!db.exists("ghost_user_migrations").await);
}

#[tokio::test]
async fn a_failed_delete_user_send_rolls_back_phase_one_and_the_child_is_retryable() {
    let db = deletable().await;
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-user:50");
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 1).await.unwrap();
    assert_eq!(run.outcome, "retryable");
    assert_user_state(&db, 50, "active").await;
    assert!(db.exists("members WHERE id = 60").await);
    assert!(!db.exists("ghost_user_migrations").await);
    // The redelivery works once the transport is back.
    r.queue().clear_failures();
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert!(db.exists("ghost_user_migrations WHERE user_id = 50").await);
}

#[tokio::test]
async fn malformed_payloads_are_permanent_failures() {
    let db = TestDb::new().await;
    let mut r = db.runner(t(NOW));
    let mut child = Envelope::parse(&child_body(50, 1), CHILD).unwrap();
    child.payload = json!({"placeholder_user_id": 50});
    let (run, _) = r.invoke(CHILD, &child.to_body(), 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
    let mut cron = r.cron_message(F);
    cron.payload = json!({"cursor": {"detail_id": 1, "index": -1}});
    let (run, _) = r.invoke(F, &cron.to_body(), 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
}

/// With `AUDIT_EVENTS=on` (docs/gitlab-differences.md D3): phase 1 writes
/// `user_destroyed` by the placeholder itself, scoped to it; phase 2 the ghost
/// migration's event in the release's form; a replayed child writes neither again.
#[tokio::test]
async fn with_audit_events_on_a_placeholders_deletion_is_audited_in_both_phases_once() {
    let db = deletable().await;
    let settings = Settings {
        audit_events: true,
        ..Settings::default()
    };
    let mut r = db.runner_with(t(NOW), settings);
    r.invoke(CHILD, &child_body(50, 1), 1).await.unwrap();
    let details = "---\n:event_name: user_destroyed\n:author_name: User 50\n:author_class: User\n\
                   :target_id: 50\n:target_type: User\n:target_details: u50\n\
                   :custom_message: User u50 scheduled for deletion\n:ip_address:\n\
                   :entity_path: u50\n";
    assert!(
        db.exists(&format!(
            "user_audit_events WHERE user_id = 50 AND author_id = 50 AND target_id = 50
               AND event_name = 'user_destroyed' AND author_name = 'User 50'
               AND entity_path = 'u50' AND target_details = 'u50' AND target_type = 'User'
               AND created_at = '{NOW}' AND details = $d${details}$d$"
        ))
        .await
    );
    r.drain().await.unwrap();
    assert!(!db.exists("users WHERE id = 50").await);
    let (event, details) =
        if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V18_2 {
            (
                "IS NULL",
                "---\n:remove: user\n:author_name: User 50\n:target_id: 50\n:target_type: User\n\
             :target_details: u50\n:ip_address:\n:entity_path: u50\n",
            )
        } else {
            (
                "= 'user_records_migrated_to_ghost'",
                "---\n:action: migrate_to_ghost\n:author_name: User 50\n:target_id: 50\n\
             :target_type: User\n:event_name: user_records_migrated_to_ghost\n\
             :author_class: User\n:target_details: u50\n\
             :custom_message: User records migrated to ghost user\n:ip_address:\n\
             :entity_path: u50\n",
            )
        };
    assert!(
        db.exists(&format!(
            "user_audit_events WHERE user_id = 50 AND author_id = 50 AND event_name {event}
               AND created_at = '2025-03-10T00:00:30Z' AND details = $d${details}$d$"
        ))
        .await
    );
    let legacy = db
        .exists("pg_class WHERE relname = 'audit_events' AND relnamespace = 'public'::regnamespace")
        .await;
    if legacy {
        assert_eq!(
            db.count(
                "audit_events a JOIN user_audit_events u ON u.id = a.id
                 WHERE a.entity_type = 'User' AND a.entity_id = 50 AND a.details = u.details"
            )
            .await,
            2
        );
    }
    r.invoke(CHILD, &child_body(50, 1), 2).await.unwrap();
    let dup = r.runs[0].sent[0].message.clone();
    r.invoke(Function::DeleteUser, &dup.envelope.to_body(), 2)
        .await
        .unwrap();
    assert_eq!(db.count("user_audit_events").await, 2);
}
