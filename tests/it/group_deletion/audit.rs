//! group-destroy's audit events with `AUDIT_EVENTS=on` (docs/gitlab-differences.md
//! D3): one `project_destroyed` per project, scoped to its parent group, and one
//! `group_destroyed` for the scheduled group (none for its subgroups), authored by
//! the deleting user; legacy and scoped rows share the id; none with the setting off,
//! and none again on a replay.

use super::*;

fn audit(on: bool) -> Settings {
    Settings {
        audit_events: on,
        ..Settings::default()
    }
}

#[tokio::test]
async fn a_destroyed_group_writes_its_project_and_group_audit_events_once() {
    let db = fixture().await;
    db.exec("UPDATE users SET name = 'Ann Owner' WHERE id = 11")
        .await;
    let (_, _, run) = destroy_with(&db, 100, audit(true)).await;
    assert_eq!(run.outcome, "success");
    destroy_with(&db, 100, audit(true)).await;
    assert!(!db.exists("namespaces WHERE id = 100").await);
    // P200 in G101 and P201 in G100; G100 itself; nothing for the subgroup G101.
    assert_eq!(db.count("group_audit_events").await, 3);
    assert_eq!(
        db.count(
            "group_audit_events WHERE event_name = 'project_destroyed' AND author_id = 11
               AND target_type = 'Project' AND author_name = 'Ann Owner'"
        )
        .await,
        2
    );
    let site = "---\n:remove: project\n:event_name: project_destroyed\n:author_name: Ann Owner\n\
                :author_class: User\n:target_id: 200\n:target_type: Project\n\
                :target_details: acme-deletion_scheduled-100/web/site\n\
                :custom_message: Project destroyed\n:ip_address:\n\
                :entity_path: acme-deletion_scheduled-100/web\n";
    assert!(
        db.exists(&format!(
            "group_audit_events WHERE group_id = 101 AND target_id = 200
               AND details = $d${site}$d$"
        ))
        .await
    );
    assert!(
        db.exists(
            "group_audit_events WHERE group_id = 100 AND target_id = 100
               AND event_name = 'group_destroyed' AND target_type = 'Group'
               AND target_details = 'acme-deletion_scheduled-100'
               AND details LIKE '%:custom_message: Group destroyed%'"
        )
        .await
    );
    let legacy = db
        .exists("pg_class WHERE relname = 'audit_events' AND relnamespace = 'public'::regnamespace")
        .await;
    if legacy {
        assert_eq!(
            db.count(
                "audit_events a JOIN group_audit_events g ON g.id = a.id AND g.details = a.details
                 WHERE a.entity_type = 'Group'"
            )
            .await,
            3
        );
    }
}

#[tokio::test]
async fn with_audit_events_off_a_destroyed_group_writes_none() {
    let db = fixture().await;
    let (_, _, run) = destroy_with(&db, 100, audit(false)).await;
    assert_eq!(run.outcome, "success");
    assert!(!db.exists("namespaces WHERE id = 100").await);
    assert_eq!(db.count("group_audit_events").await, 0);
    assert_eq!(db.count("project_audit_events").await, 0);
}
