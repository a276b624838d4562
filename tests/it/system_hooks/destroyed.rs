//! Destroyed groups, projects and users: `group_destroy` for a group and its subgroup,
//! `project_destroy` for its project (`GroupBuilder`, `ProjectBuilder` with the
//! deprecated owner) and `user_remove_from_group` for the members destroyed with each
//! group, `user_destroy` for a deleted placeholder user and for an expired project bot
//! (`UserBuilder`), after a hook for each membership phase 1 removes.

use super::*;
use crate::group_deletion::{destroy_body, schedule};
use integration_tests::fixtures::{M, U};

#[tokio::test]
async fn a_destroyed_group_with_a_subgroup_and_a_project_sends_three_hooks() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.users(&[U::human(11), U::human(12)]).await;
    db.exec("UPDATE users SET public_email = 'twelve@example.org' WHERE id = 12")
        .await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::gm(2, 101, 12, 50),
        M::gm(3, 101, 11, 30),
    ])
    .await;
    schedule(&db, 100, 11, "2025-03-03").await;
    db.exec(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 7, '2024-01-01', '2024-01-01')",
    )
    .await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    let body = destroy_body(100, 11, "2025-03-03");
    until_idle(
        &db,
        "2025-03-10T02:00:00Z",
        Function::GroupDestroy,
        Some(body),
    )
    .await;
    assert!(!db.exists("namespaces WHERE id IN (100, 101)").await);
    let reqs = rx.requests();
    let groups = with_event(&reqs, "group_destroy");
    let projects = with_event(&reqs, "project_destroy");
    assert_eq!((groups.len(), projects.len()), (2, 1));
    // Each group's members are destroyed with it: one hook each.
    let members: Vec<Value> = with_event(&reqs, "user_remove_from_group")
        .iter()
        .map(|q| json!([q.json()["group_id"], q.json()["user_id"]]))
        .collect();
    assert_eq!(
        members,
        vec![json!([101, 12]), json!([101, 11]), json!([100, 11])]
    );
    // GroupBuilder#build(:destroy): timestamps, event, group data; depth first.
    assert_body(
        &groups[0],
        &[
            ("created_at", json!("2024-01-01T00:00:00Z")),
            ("updated_at", json!("2024-01-01T00:00:00Z")),
            ("event_name", json!("group_destroy")),
            ("name", json!("web")),
            ("path", json!("web")),
            ("full_path", json!("acme-deletion_scheduled-100/web")),
            ("group_id", json!(101)),
        ],
    );
    assert_eq!(groups[1].json()["group_id"], 100);
    assert_eq!(groups[1].json()["full_path"], "acme-deletion_scheduled-100");
    // ProjectBuilder#build(:destroy, include_deprecated_owner: true): the group's own
    // owner rows, the group as deprecated owner (no email).
    let fields = [
        ("event_name", json!("project_destroy")),
        ("created_at", json!("2024-01-01T00:00:00Z")),
        ("updated_at", json!("2024-01-01T00:00:00Z")),
        ("name", json!("site")),
        ("path", json!("site")),
        (
            "path_with_namespace",
            json!("acme-deletion_scheduled-100/web/site"),
        ),
        ("project_id", json!(200)),
        ("project_namespace_id", json!(101)),
        (
            "owners",
            json!([{"name": "User 12", "email": "twelve@example.org"}]),
        ),
        ("project_visibility", json!("private")),
        ("owner_name", json!("web")),
        ("owner_email", json!("")),
    ];
    assert_fields(&projects[0], &fields);
    // In order, `owners` entries too (`owner_data`: name, then email).
    let owners = r#"[{"name":"User 12","email":"twelve@example.org"}]"#;
    let expected = ordered(&fields).replace(&fields[8].1.to_string(), owners);
    assert_eq!(
        String::from_utf8(projects[0].body.clone()).unwrap(),
        expected
    );
    // The project's hook went before its group's.
    let order: Vec<Value> = reqs
        .iter()
        .map(|q| q.json()["event_name"].clone())
        .collect();
    assert_eq!(order[0], "project_destroy");
}

#[tokio::test]
async fn a_deleted_placeholder_user_sends_user_destroy() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.users(&[U::ghost(5), U::placeholder(50)]).await;
    db.exec(
        "INSERT INTO import_placeholder_user_details
           (id, placeholder_user_id, deletion_attempts, organization_id, created_at, updated_at)
         VALUES (1, 50, 0, 1, '2024-01-01', '2024-01-01');
         UPDATE users SET updated_at = '2024-02-03T04:05:06' WHERE id = 50",
    )
    .await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    until_idle(
        &db,
        "2025-03-10T00:00:00Z",
        Function::PlaceholderUserCleanup,
        None,
    )
    .await;
    assert!(!db.exists("users WHERE id = 50").await);
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 1);
    // UserBuilder#build(:destroy): the real email, not the webhook email.
    assert_body(
        &reqs[0],
        &[
            ("created_at", json!("2024-01-01T00:00:00Z")),
            // Phase 1 blocked the user at the run's time, as `user.block` does before
            // GitLab's `user.destroy` builds the body.
            ("updated_at", json!("2025-03-10T00:00:00Z")),
            ("event_name", json!("user_destroy")),
            ("name", json!("User 50")),
            ("email", json!("u50@example.com")),
            ("user_id", json!(50)),
            ("username", json!("u50")),
        ],
    );
    assert_eq!(
        reqs[0].header("idempotency-key"),
        Some("system-hook:user_destroy:50:hook:1")
    );
}

#[tokio::test]
async fn an_expired_project_bot_sends_its_membership_and_user_destroy() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.project(201, 100).await;
    fx.users(&[U::ghost(5), U::human(11), U::bot(20)]).await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::pm(2, 200, 20, 40).expires("2025-03-01"),
        M::pm(3, 201, 20, 30),
    ])
    .await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    until_idle(
        &db,
        "2025-03-10T00:10:00Z",
        Function::RemoveExpiredMembers,
        None,
    )
    .await;
    assert!(!db.exists("users WHERE id = 20").await);
    let events: Vec<Value> = rx
        .requests()
        .iter()
        .map(|q| json!([q.json()["event_name"], q.header("idempotency-key")]))
        .collect();
    assert_eq!(
        events,
        vec![
            json!([
                "user_remove_from_team",
                "system-hook:user_remove_from_team:2:hook:1"
            ]),
            // Phase 1 removes the bot's other memberships, each with its hook.
            json!([
                "user_remove_from_team",
                "system-hook:user_remove_from_team:3:hook:1"
            ]),
            json!(["user_destroy", "system-hook:user_destroy:20:hook:1"]),
        ]
    );
}
