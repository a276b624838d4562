//! What GitLab writes beside an expired membership's removal (docs/gitlab-differences.md
//! D3): the project's `events` row, the user's highest role, the todos
//! `TodosDestroyer::EntityLeaveWorker` removes (project, internal-note and group todos),
//! the 2FA requirement, and with
//! `AUDIT_EVENTS=on` the `member_destroyed` audit events (legacy and scoped, same id);
//! each written once however often the message is delivered.

use super::*;

/// P201 (public) beside the fixture's private P200; issues 900 (P200), 901 and 902
/// (P201, 902 confidential); U10's todos on each.
async fn todos_fixture(db: &TestDb) {
    Fx(db).project(201, 101).await;
    db.exec(
        "UPDATE projects SET visibility_level = 20 WHERE id = 201;
         INSERT INTO issues (id, title, author_id, project_id, namespace_id, work_item_type_id, confidential)
         VALUES (900, 'a', 11, 200, 300, 1, false), (901, 'b', 11, 201, 301, 1, false),
                (902, 'c', 11, 201, 301, 1, true);
         INSERT INTO todos (id, user_id, project_id, target_id, target_type, author_id, action, state)
         VALUES (1, 10, 200, 900, 'Issue', 11, 1, 'pending'), (2, 10, 201, 901, 'Issue', 11, 1, 'pending'),
                (3, 10, 201, 902, 'Issue', 11, 1, 'pending'), (4, 12, 201, 902, 'Issue', 11, 1, 'pending');",
    )
    .await;
}

async fn legacy_audit_table(db: &TestDb) -> bool {
    db.exists("pg_class WHERE relname = 'audit_events' AND relnamespace = 'public'::regnamespace")
        .await
}

#[tokio::test]
async fn an_expired_project_membership_writes_its_event_role_and_todos_once() {
    let db = fixture().await;
    todos_fixture(&db).await;
    let fx = Fx(&db);
    // Two expired memberships: the page runs as one group (set-based deletion).
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-09"),
        M::pm(11, 201, 10, 20),
        M::pm(12, 201, 12, 10).expires("2025-03-09"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (10, 201, 20), (12, 201, 10)]).await;
    db.exec(
        "INSERT INTO user_highest_roles (user_id, highest_access_level, updated_at)
         VALUES (10, 30, '2024-01-01'), (12, 10, '2024-01-01')",
    )
    .await;
    cron(&db, audit(false), 2).await;
    assert_eq!(db.count("members WHERE id IN (10, 12)").await, 0);
    // One events row per removed project membership, action expired (11), author the
    // removed user, target the project; none again on the replay.
    assert_eq!(db.count("events").await, 2);
    assert!(
        db.exists(
            "events WHERE project_id = 200 AND author_id = 10 AND action = 11
               AND target_id = 200 AND target_type = 'Project'
               AND created_at = '2025-03-10T00:10:00Z'"
        )
        .await
    );
    assert!(
        db.exists("events WHERE project_id = 201 AND author_id = 12 AND action = 11")
            .await
    );
    // The highest role is what the memberships left give; none left: NULL.
    assert_eq!(
        db.scalar::<Option<i32>>(
            "SELECT highest_access_level FROM user_highest_roles WHERE user_id = 10"
        )
        .await,
        Some(20)
    );
    assert_eq!(
        db.scalar::<Option<i32>>(
            "SELECT highest_access_level FROM user_highest_roles WHERE user_id = 12"
        )
        .await,
        None
    );
    // The todo on the private project goes; the ones on the public project stay (U10
    // still a reporter there), and U12 (a guest) loses the confidential issue's.
    assert_eq!(db.ids("todos").await, vec![2, 3]);
    // Audit events off: none.
    assert_eq!(db.count("project_audit_events").await, 0);
    if legacy_audit_table(&db).await {
        assert_eq!(db.count("audit_events").await, 0);
    }
}

#[tokio::test]
async fn with_audit_events_on_each_removal_writes_legacy_and_scoped_rows_with_one_id() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    fx.pas(&[(10, 200, 30)]).await;
    cron(&db, audit(true), 2).await;
    assert!(!db.exists("members WHERE id = 10").await);
    let details = "---\n:remove: user_access\n:as: 'Default role: Developer'\n:member_id: 10\n\
                   :system_event: true\n:reason: access expired on 2025-03-09\n\
                   :event_name: member_destroyed\n:author_name: (System)\n\
                   :author_class: Gitlab::Audit::UnauthenticatedAuthor\n:target_id: 10\n\
                   :target_type: User\n:target_details: User 10\n\
                   :custom_message: Membership expired on 2025-03-09\n:ip_address:\n\
                   :entity_path: acme/web/p200\n";
    assert_eq!(db.count("project_audit_events").await, 1);
    let scoped = format!(
        "project_audit_events WHERE project_id = 200 AND author_id = -1 AND target_id = 10
           AND event_name = 'member_destroyed' AND author_name = '(System)'
           AND entity_path = 'acme/web/p200' AND target_details = 'User 10'
           AND target_type = 'User' AND created_at = '2025-03-10T00:10:00Z'
           AND details = $d${details}$d$"
    );
    assert!(db.exists(&scoped).await, "scoped row as GitLab writes it");
    if legacy_audit_table(&db).await {
        assert_eq!(db.count("audit_events").await, 1);
        let legacy = "audit_events a JOIN project_audit_events p ON p.id = a.id
             WHERE a.entity_type = 'Project' AND a.entity_id = 200 AND a.author_id = -1
               AND a.target_id = 10 AND a.author_name = '(System)'
               AND a.created_at = '2025-03-10 00:10:00' AND a.details = p.details";
        assert!(
            db.exists(legacy).await,
            "legacy row with the scoped row's id"
        );
    }
    assert_eq!(db.count("events WHERE action = 11").await, 1);
}

#[tokio::test]
async fn leaving_a_group_that_required_2fa_lifts_the_requirement_and_audits_the_group() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(102, "strict", None).await;
    db.exec(
        "UPDATE namespaces SET require_two_factor_authentication = true, two_factor_grace_period = 24
           WHERE id = 101;
         UPDATE namespaces SET require_two_factor_authentication = true, two_factor_grace_period = 12
           WHERE id = 102;
         UPDATE users SET require_two_factor_authentication_from_group = true, two_factor_grace_period = 12
           WHERE id IN (10, 12);",
    )
    .await;
    // U10 leaves G102 and keeps G101 (24 h); U12 leaves G102, its only group.
    fx.members(&[
        M::gm(10, 102, 10, 30).expires("2025-03-09"),
        M::gm(11, 101, 10, 30),
        M::gm(12, 102, 12, 30).expires("2025-03-09"),
    ])
    .await;
    cron(&db, audit(true), 1).await;
    let two_factor = |u: i64| {
        format!(
            "SELECT require_two_factor_authentication_from_group::text || '/' || two_factor_grace_period
             FROM users WHERE id = {u}"
        )
    };
    assert_eq!(db.scalar::<String>(&two_factor(10)).await, "true/24");
    assert_eq!(db.scalar::<String>(&two_factor(12)).await, "false/48");
    // A group left: no events row; the scoped copy in group_audit_events.
    assert_eq!(db.count("events").await, 0);
    assert_eq!(
        db.count("group_audit_events WHERE group_id = 102 AND entity_path = 'strict'")
            .await,
        2
    );
    if legacy_audit_table(&db).await {
        assert_eq!(
            db.count(
                "audit_events a JOIN group_audit_events g ON g.id = a.id
                 WHERE a.entity_type = 'Group' AND a.entity_id = 102"
            )
            .await,
            2
        );
    }
}

/// `TodosDestroyer::PrivateFeaturesWorker`: leaving the public P201 whose issues are
/// private (`project_features` level 10) removes the left user's todos on its issues,
/// not the ones on its enabled merge requests, nor another user's or a still-member's
/// todo on the same issue; the plan lists the removal in its side rows.
#[tokio::test]
async fn leaving_a_public_project_removes_the_todos_on_its_private_features_only() {
    let db = fixture().await;
    todos_fixture(&db).await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(10, 201, 10, 30).expires("2025-03-09"),
        M::pm(11, 201, 12, 20),
    ])
    .await;
    fx.pas(&[(10, 201, 30), (12, 201, 20)]).await;
    db.exec(
        "INSERT INTO project_features (project_id, issues_access_level, merge_requests_access_level,
                                       created_at, updated_at)
         VALUES (201, 10, 20, '2024-01-01', '2024-01-01');
         INSERT INTO todos (id, user_id, project_id, target_id, target_type, author_id, action, state)
         VALUES (20, 10, 201, 901, 'Issue', 11, 1, 'pending'),
                (21, 10, 201, 950, 'MergeRequest', 11, 1, 'pending'),
                (22, 12, 201, 901, 'Issue', 11, 1, 'pending'),
                (23, 11, 201, 901, 'Issue', 12, 1, 'pending');",
    )
    .await;
    let mut r = db.runner_with(t(NOW), audit(false));
    let body = r.cron_message(F).to_body();
    let plan = r.plan_until_idle(F, &body).await.unwrap();
    let planned: Vec<i64> = plan
        .side_rows
        .iter()
        .filter(|r| r["table"] == "todos" && r["change"] == "deleted")
        .map(|r| r["row"]["id"].as_i64().unwrap())
        .collect();
    assert!(planned.contains(&20) && planned.contains(&2), "{planned:?}");
    assert!(!planned.contains(&21), "{planned:?}");
    assert!(db.exists("todos WHERE id = 20").await, "rolled back");
    cron(&db, audit(false), 2).await;
    assert!(!db.exists("members WHERE id = 10").await);
    // U10's todos on P201's issues go (2 on issue 901 of the fixture, 3 on the
    // confidential 902, 20); the merge request's stays, as do U12's and U11's.
    assert_eq!(db.ids("todos").await, vec![1, 4, 21, 22, 23]);
}

/// `remove_group_todos`: leaving the private G101 below planner removes the user's
/// todos on the private groups of its subtree the user no longer sees (G101, G103),
/// and keeps those on a subgroup the user still belongs to (G105), on one shared with
/// the user's group (G106 with G107), on a public one (G108) and another user's.
#[tokio::test]
async fn leaving_a_private_group_removes_the_todos_on_its_unseen_private_groups() {
    let db = fixture().await;
    let fx = Fx(&db);
    for (id, path) in [(103, "priv"), (105, "kept"), (106, "shared"), (108, "open")] {
        fx.group(id, path, Some(101)).await;
    }
    fx.group(107, "team", None).await;
    fx.members(&[
        M::gm(10, 101, 10, 10).expires("2025-03-09"),
        M::gm(11, 105, 10, 10),
        M::gm(12, 107, 10, 10),
    ])
    .await;
    db.exec(
        "UPDATE namespaces SET visibility_level = 0 WHERE id IN (101, 103, 105, 106, 107);
         INSERT INTO group_group_links (shared_group_id, shared_with_group_id, group_access, created_at, updated_at)
         VALUES (106, 107, 10, '2024-01-01', '2024-01-01');
         INSERT INTO todos (id, user_id, group_id, target_id, target_type, author_id, action, state)
         VALUES (30, 10, 101, 1, 'Epic', 11, 1, 'pending'), (31, 10, 103, 1, 'Epic', 11, 1, 'pending'),
                (32, 10, 105, 1, 'Epic', 11, 1, 'pending'), (33, 10, 106, 1, 'Epic', 11, 1, 'pending'),
                (34, 10, 108, 1, 'Epic', 11, 1, 'pending'), (35, 12, 101, 1, 'Epic', 11, 1, 'pending');",
    )
    .await;
    cron(&db, audit(false), 2).await;
    assert!(!db.exists("members WHERE id = 10").await);
    assert_eq!(db.ids("todos").await, vec![32, 33, 34, 35]);
}

/// `Todo.for_internal_notes` on the projects the user no longer plans in: leaving the
/// public P201 while still a guest through G100 removes the todo on an internal note
/// and keeps the one on a public note of the same issue.
#[tokio::test]
async fn leaving_a_project_below_planner_removes_the_todos_on_its_internal_notes() {
    let db = fixture().await;
    todos_fixture(&db).await;
    let fx = Fx(&db);
    fx.members(&[
        M::gm(10, 100, 10, 10),
        M::pm(11, 201, 10, 30).expires("2025-03-09"),
    ])
    .await;
    db.exec(
        "INSERT INTO notes (id, noteable_type, noteable_id, project_id, author_id, internal)
         VALUES (921, 'Issue', 901, 201, 11, true), (922, 'Issue', 901, 201, 11, false);
         DELETE FROM todos;
         INSERT INTO todos (id, user_id, project_id, target_id, target_type, author_id, action, state, note_id)
         VALUES (40, 10, 201, 901, 'Issue', 11, 1, 'pending', 921),
                (41, 10, 201, 901, 'Issue', 11, 1, 'pending', 922),
                (42, 12, 201, 901, 'Issue', 11, 1, 'pending', 921);",
    )
    .await;
    cron(&db, audit(false), 2).await;
    assert!(!db.exists("members WHERE id = 11").await);
    assert_eq!(
        db.scalar::<i32>("SELECT access_level FROM project_authorizations WHERE user_id = 10 AND project_id = 201")
            .await,
        10
    );
    assert_eq!(db.ids("todos").await, vec![41, 42]);
}

/// `hk run --dry-run --until-idle`: the plan lists the rows written beside each
/// removal (events, highest role, todos, audit events, EE's protected-branch access)
/// and keeps none of them.
#[tokio::test]
async fn a_dry_run_lists_the_rows_written_beside_the_removals_and_keeps_none() {
    let db = fixture().await;
    todos_fixture(&db).await;
    let fx = Fx(&db);
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    fx.pas(&[(10, 200, 30)]).await;
    db.exec(
        "INSERT INTO protected_branches (id, project_id, name, created_at, updated_at)
         VALUES (1, 200, 'main', '2024-01-01', '2024-01-01');
         INSERT INTO protected_branch_merge_access_levels
           (id, protected_branch_id, user_id, created_at, updated_at)
         VALUES (1, 1, 10, '2024-01-01', '2024-01-01');",
    )
    .await;
    let mut r = db.runner_with(t(NOW), audit(true));
    let body = r.cron_message(F).to_body();
    let plan = r.plan_until_idle(F, &body).await.unwrap();
    assert!(
        db.exists("protected_branch_merge_access_levels").await,
        "rolled back"
    );
    assert_eq!(db.count("events").await, 0, "rolled back");
    assert_eq!(db.count("todos").await, 4, "rolled back");
    assert_eq!(db.count("project_audit_events").await, 0, "rolled back");
    let side: Vec<(String, String)> = plan
        .side_rows
        .iter()
        .map(|r| {
            (
                r["table"].as_str().unwrap().to_string(),
                r["change"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for want in [
        ("events", "inserted"),
        ("user_highest_roles", "inserted"),
        ("todos", "deleted"),
        ("project_audit_events", "inserted"),
        ("protected_branch_merge_access_levels", "deleted"),
    ] {
        assert!(
            side.contains(&(want.0.to_string(), want.1.to_string())),
            "{want:?} in {side:?}"
        );
    }
    let event = plan
        .side_rows
        .iter()
        .find(|r| r["table"] == "events")
        .unwrap();
    assert_eq!(event["row"]["project_id"], 200);
    assert_eq!(event["row"]["action"], 11);
    let todo = plan
        .side_rows
        .iter()
        .find(|r| r["table"] == "todos")
        .unwrap();
    assert_eq!(todo["row"]["id"], 1);
    assert_eq!(
        plan.to_json()["plan"]["side_rows"]
            .as_array()
            .unwrap()
            .len(),
        side.len()
    );
}
