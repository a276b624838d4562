//! What GitLab writes beside a pruned membership (docs/gitlab-differences.md D3): the
//! project's `events` row with action `left`, the highest role, and with
//! `AUDIT_EVENTS=on` a `member_destroyed` event authored by the scheduling user, EE's
//! protected-branch rows of the user (SAML identities kept); nothing again when the
//! message is delivered twice.

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

// Scenario 2's memberships pruned: U10's protected-branch access on the projects of the
// hierarchy goes (the project left and the group left), the one outside stays, and the
// SAML identity stays (a prune passes `skip_saml_identity`).
#[tokio::test]
async fn a_prune_takes_the_users_protected_branch_access_and_keeps_its_saml_identity() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    db.exec(
        "INSERT INTO saml_providers (id, group_id, enabled, certificate_fingerprint, sso_url)
         VALUES (1, 100, true, 'f1', 'https://idp.example.com/1');
         INSERT INTO identities (id, extern_uid, provider, user_id, saml_provider_id)
         VALUES (1, 'a', 'group_saml', 10, 1);
         INSERT INTO protected_branches (id, project_id, name, created_at, updated_at)
         VALUES (1, 200, 'main', '2024-01-01', '2024-01-01'),
                (2, 600, 'main', '2024-01-01', '2024-01-01');
         INSERT INTO protected_branch_merge_access_levels
           (id, protected_branch_id, user_id, created_at, updated_at)
         VALUES (1, 1, 10, '2024-01-01', '2024-01-01'), (2, 2, 10, '2024-01-01', '2024-01-01'),
                (3, 1, 12, '2024-01-01', '2024-01-01');
         INSERT INTO protected_branch_push_access_levels
           (id, protected_branch_id, user_id, created_at, updated_at)
         VALUES (1, 1, 10, '2024-01-01', '2024-01-01');",
    )
    .await;
    prune_once(&db).await;
    prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_eq!(
        db.ids("protected_branch_merge_access_levels").await,
        vec![2, 3]
    );
    assert!(!db.exists("protected_branch_push_access_levels").await);
    assert_eq!(db.ids("identities").await, vec![1]);
}
