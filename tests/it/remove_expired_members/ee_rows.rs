//! EE's rows of a user that an expired membership's removal deletes
//! (docs/gitlab-differences.md D3): the protected-branch and protected-environment
//! access of a project left, the protected-branch access on the projects under a group
//! left that the user no longer reaches, the user's identities of the group's own SAML
//! provider; and with `AUDIT_EVENTS=on` the `user_destroyed` event of an expired bot
//! and the event of its deletion. Other users', other sources' and surviving
//! memberships' rows stay; a replay writes and deletes nothing more.

use super::*;

/// Protected branch `B<id>` of project `project`, with merge access levels
/// `(id, user)` and push access levels `(id, user)`.
async fn branch(db: &TestDb, id: i64, project: i64, merge: &[(i64, i64)], push: &[(i64, i64)]) {
    db.exec(&format!(
        "INSERT INTO protected_branches (id, project_id, name, created_at, updated_at)
         VALUES ({id}, {project}, 'main', '2024-01-01', '2024-01-01')"
    ))
    .await;
    for (table, rows) in [
        ("protected_branch_merge_access_levels", merge),
        ("protected_branch_push_access_levels", push),
    ] {
        for (a, u) in rows {
            db.exec(&format!(
                "INSERT INTO {table} (id, protected_branch_id, user_id, access_level, created_at, updated_at)
                 VALUES ({a}, {id}, {u}, NULL, '2024-01-01', '2024-01-01')"
            ))
            .await;
        }
    }
}

/// Protected environment `E<id>` of project `project`, with deploy access levels and
/// approval rules `(id, user)`.
async fn environment(
    db: &TestDb,
    id: i64,
    project: i64,
    deploy: &[(i64, i64)],
    approvals: &[(i64, i64)],
) {
    db.exec(&format!(
        "INSERT INTO protected_environments (id, project_id, name, created_at, updated_at)
         VALUES ({id}, {project}, 'production-{id}', '2024-01-01', '2024-01-01')"
    ))
    .await;
    for (a, u) in deploy {
        db.exec(&format!(
            "INSERT INTO protected_environment_deploy_access_levels
               (id, protected_environment_id, user_id, created_at, updated_at)
             VALUES ({a}, {id}, {u}, '2024-01-01', '2024-01-01')"
        ))
        .await;
    }
    for (a, u) in approvals {
        db.exec(&format!(
            "INSERT INTO protected_environment_approval_rules
               (id, protected_environment_id, user_id, created_at, updated_at)
             VALUES ({a}, {id}, {u}, '2024-01-01', '2024-01-01')"
        ))
        .await;
    }
}

#[tokio::test]
async fn an_expired_project_membership_takes_the_users_protected_access_on_that_project_once() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.project(201, 100).await;
    // U10 and U11 leave P200 (U11 stays an owner of G100 above it); U12's membership
    // of P200 was extended; U10 keeps P201.
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-09"),
        M::pm(12, 200, 12, 30).expires("2025-04-01"),
        M::pm(13, 201, 10, 30),
        M::pm(14, 200, 11, 30).expires("2025-03-09"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (10, 201, 30), (12, 200, 30), (11, 200, 50)])
        .await;
    branch(&db, 1, 200, &[(1, 10), (2, 12), (4, 11)], &[(1, 10)]).await;
    branch(&db, 2, 201, &[(3, 10)], &[(2, 10)]).await;
    // E1 keeps U12 as an approver; on E2 U10 is the only one.
    environment(&db, 1, 200, &[(1, 10), (2, 12)], &[(1, 10), (2, 12)]).await;
    environment(&db, 2, 200, &[], &[(3, 10)]).await;
    cron(&db, audit(false), 2).await;
    assert_eq!(
        db.ids("members WHERE id IN (10, 12, 13, 14)").await,
        vec![12, 13]
    );
    // U10's on P200 go; U12's (extended), U10's on P201 and U11's (still a member of
    // the project's group) stay.
    assert_eq!(
        db.ids("protected_branch_merge_access_levels").await,
        vec![2, 3, 4]
    );
    assert_eq!(db.ids("protected_branch_push_access_levels").await, vec![2]);
    assert_eq!(
        db.ids("protected_environment_deploy_access_levels").await,
        vec![2]
    );
    // An environment keeps its last approval rule.
    assert_eq!(
        db.ids("protected_environment_approval_rules").await,
        vec![2, 3]
    );
}

#[tokio::test]
async fn an_expired_group_membership_takes_its_saml_identities_and_unreached_branch_access() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.project(201, 100).await;
    fx.project(202, 101).await;
    fx.group(102, "other", None).await;
    // U10 leaves G101 and keeps P202; U12's membership of G101 stays.
    fx.members(&[
        M::gm(10, 101, 10, 30).expires("2025-03-09"),
        M::gm(12, 101, 12, 30),
        M::pm(13, 202, 10, 30),
        M::pm(15, 201, 10, 30),
    ])
    .await;
    fx.pas(&[
        (10, 200, 30),
        (10, 202, 30),
        (10, 201, 30),
        (12, 200, 30),
        (12, 202, 30),
    ])
    .await;
    db.exec(
        "INSERT INTO saml_providers (id, group_id, enabled, certificate_fingerprint, sso_url)
         VALUES (1, 101, true, 'f1', 'https://idp.example.com/1'),
                (2, 102, true, 'f2', 'https://idp.example.com/2');
         INSERT INTO identities (id, extern_uid, provider, user_id, saml_provider_id)
         VALUES (1, 'a', 'group_saml', 10, 1), (2, 'b', 'group_saml', 12, 1),
                (3, 'c', 'group_saml', 10, 2), (4, 'd', 'github', 10, NULL);",
    )
    .await;
    // U10's access under G101: on P200 (no longer reached) and P202 (still a member);
    // on P201 outside G101. U12's on P200.
    branch(&db, 1, 200, &[(1, 10), (4, 12)], &[(1, 10)]).await;
    branch(&db, 2, 201, &[(3, 10)], &[]).await;
    branch(&db, 3, 202, &[(2, 10)], &[(2, 10)]).await;
    cron(&db, audit(false), 2).await;
    assert!(!db.exists("members WHERE id = 10").await);
    assert!(
        !db.exists("project_authorizations WHERE user_id = 10 AND project_id = 200")
            .await
    );
    // The identity of G101's own provider goes; U12's, another group's provider's and a
    // non-SAML identity stay.
    assert_eq!(db.ids("identities").await, vec![2, 3, 4]);
    assert_eq!(
        db.ids("protected_branch_merge_access_levels").await,
        vec![2, 3, 4]
    );
    assert_eq!(db.ids("protected_branch_push_access_levels").await, vec![2]);
}

#[tokio::test]
async fn an_expired_bot_is_audited_as_scheduled_for_deletion_and_as_deleted_once() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::ghost(5)]).await;
    fx.members(&[M::pm(18, 200, 20, 40).expires("2025-03-09")])
        .await;
    fx.pas(&[(20, 200, 40)]).await;
    branch(&db, 1, 200, &[(1, 20)], &[]).await;
    let mut r = db.runner_with(t(NOW), audit(true));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert!(!db.exists("users WHERE id = 20").await);
    assert!(!db.exists("protected_branch_merge_access_levels").await);
    let legacy = db
        .exists("pg_class WHERE relname = 'audit_events' AND relnamespace = 'public'::regnamespace")
        .await;
    // Users::DestroyService's event, scoped to the bot's project, by the system.
    let details = "---\n:event_name: user_destroyed\n:author_name: (System)\n\
                   :author_class: Gitlab::Audit::UnauthenticatedAuthor\n:target_id: 20\n\
                   :target_type: User\n:target_details: u20\n\
                   :custom_message: 'User u20 scheduled for deletion. Reason: Membership expired'\n\
                   :ip_address:\n:entity_path: acme/web/p200\n";
    let scoped = format!(
        "project_audit_events WHERE project_id = 200 AND author_id = -1 AND target_id = 20
           AND event_name = 'user_destroyed' AND author_name = '(System)'
           AND entity_path = 'acme/web/p200' AND target_details = 'u20' AND target_type = 'User'
           AND created_at = '2025-03-10T00:10:00Z' AND details = $d${details}$d$"
    );
    assert!(
        db.exists(&scoped).await,
        "user_destroyed as GitLab writes it"
    );
    // With the membership's own member_destroyed.
    assert_eq!(db.count("project_audit_events").await, 2);
    // The ghost migration's event: before 18.4 AuditEventService's, by an
    // unauthenticated author (the migration has no initiator); from 18.4 on GitLab
    // writes none without an initiator.
    let pre_18_4 = integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V18_2;
    if pre_18_4 {
        let details = "---\n:remove: user\n:author_name: An unauthenticated user\n\
                       :target_id: 20\n:target_type: User\n:target_details: u20\n\
                       :ip_address:\n:entity_path: u20\n";
        assert!(
            db.exists(&format!(
                "user_audit_events WHERE user_id = 20 AND author_id = -1 AND event_name IS NULL
                   AND author_name = 'An unauthenticated user' AND target_details = 'u20'
                   AND created_at = '2025-03-10T00:10:30Z' AND details = $d${details}$d$"
            ))
            .await
        );
    }
    assert_eq!(db.count("user_audit_events").await, i64::from(pre_18_4));
    if legacy {
        assert_eq!(
            db.count(
                "audit_events a WHERE a.id IN (SELECT id FROM project_audit_events
                   UNION ALL SELECT id FROM user_audit_events)"
            )
            .await,
            2 + i64::from(pre_18_4)
        );
        assert!(
            db.exists(
                "audit_events a JOIN project_audit_events p ON p.id = a.id
                 WHERE p.event_name = 'user_destroyed' AND a.entity_type = 'Project'
                   AND a.entity_id = 200 AND a.details = p.details"
            )
            .await
        );
    }
    // Replays of both messages write nothing more.
    let before = db.count("project_audit_events").await + db.count("user_audit_events").await;
    r.invoke(F, &body, 2).await.unwrap();
    let dup = r.runs[0].sent[0].message.clone();
    r.invoke(Function::DeleteUser, &dup.envelope.to_body(), 2)
        .await
        .unwrap();
    let after = db.count("project_audit_events").await + db.count("user_audit_events").await;
    assert_eq!(after, before);
}
