//! What GitLab writes beside a pruned membership (docs/gitlab-differences.md D3): the
//! project's `events` row with action `left`, the highest role, and with
//! `AUDIT_EVENTS=on` a `member_destroyed` event authored by the scheduling user;
//! nothing again when the message is delivered twice.

use super::*;

// Scenario 2's memberships, pruned by U11 with audit events on, then replayed.
#[tokio::test]
async fn a_pruned_membership_writes_left_and_an_audit_event_by_the_scheduling_user() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    db.exec("UPDATE users SET name = 'Ann Owner' WHERE id = 11")
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let settings = Settings {
        audit_events: true,
        ..Default::default()
    };
    prune_once_with(&db, settings.clone()).await;
    prune_once_with(&db, settings).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    // Two project memberships left (P200, P201): one `left` (9) row each.
    assert_eq!(db.count("events").await, 2);
    assert_eq!(
        db.count("events WHERE action = 9 AND author_id = 10 AND target_type = 'Project'")
            .await,
        2
    );
    // G500's membership (30) is what is left.
    assert_eq!(
        db.scalar::<Option<i32>>(
            "SELECT highest_access_level FROM user_highest_roles WHERE user_id = 10"
        )
        .await,
        Some(30)
    );
    // Four removals: two project events, two group events, each once.
    assert_eq!(db.count("project_audit_events").await, 2);
    assert_eq!(db.count("group_audit_events").await, 2);
    let details = "---\n:remove: user_access\n:as: 'Default role: Reporter'\n:member_id: 13\n\
                   :event_name: member_destroyed\n:author_name: Ann Owner\n:author_class: User\n\
                   :target_id: 10\n:target_type: User\n:target_details: User 10\n\
                   :custom_message: Membership destroyed\n:ip_address:\n:entity_path: acme/p201\n";
    assert!(
        db.exists(&format!(
            "project_audit_events WHERE project_id = 201 AND author_id = 11
               AND author_name = 'Ann Owner' AND details = $d${details}$d$"
        ))
        .await
    );
    let legacy = db
        .exists("pg_class WHERE relname = 'audit_events' AND relnamespace = 'public'::regnamespace")
        .await;
    if legacy {
        assert_eq!(
            db.count(
                "audit_events a WHERE a.id IN (SELECT id FROM project_audit_events
                                               UNION ALL SELECT id FROM group_audit_events)"
            )
            .await,
            4
        );
    }
}
