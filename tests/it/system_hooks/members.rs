//! Expired memberships: one `user_remove_from_team` and one `user_remove_from_group`
//! per removed row, with GitLab's headers and the bodies of
//! `Gitlab::HookData::ProjectMemberBuilder` / `GroupMemberBuilder` (CE); the dry run
//! lists the hooks it would send.

use super::*;
use integration_tests::fixtures::{M, U};

const NOW: &str = "2025-03-10T00:10:00Z";
const F: Function = Function::RemoveExpiredMembers;

/// G100 "acme", P200 "p200" in G100 (internal); U10 (no public email), U11 (public
/// email); PM1: P200 U10 30 expired; GM2: G100 U11 20 expired; GM3: G100 U12 50.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::human(11), U::human(12)]).await;
    db.exec(
        "UPDATE users SET public_email = 'eleven@example.org' WHERE id = 11;
         UPDATE projects SET visibility_level = 10 WHERE id = 200",
    )
    .await;
    fx.members(&[
        M::pm(1, 200, 10, 30).expires("2025-03-01"),
        M::gm(2, 100, 11, 20).expires("2025-03-02"),
        M::gm(3, 100, 12, 50),
    ])
    .await;
    db.exec("UPDATE members SET updated_at = '2024-06-01T12:30:45' WHERE id = 1")
        .await;
    db
}

#[tokio::test]
async fn an_expired_project_membership_sends_one_user_remove_from_team() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), Some("s3cr3t")).await;
    let (r, _log) = until_idle(&db, NOW, F, None).await;
    assert!(!db.exists("members WHERE id IN (1, 2)").await);
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 2, "one hook per removed membership");
    let team = with_event(&reqs, "user_remove_from_team");
    assert_eq!(team.len(), 1);
    let q = &team[0];
    // ProjectMemberBuilder#build(:destroy): timestamps, project_member_data, event.
    assert_body(
        q,
        &[
            ("created_at", json!("2024-01-01T00:00:00Z")),
            ("updated_at", json!("2024-06-01T12:30:45Z")),
            ("project_name", json!("p200")),
            ("project_path", json!("p200")),
            ("project_path_with_namespace", json!("acme/p200")),
            ("project_id", json!(200)),
            ("user_username", json!("u10")),
            ("user_name", json!("User 10")),
            ("user_email", json!("[REDACTED]")),
            ("user_id", json!(10)),
            ("access_level", json!("Developer")),
            ("project_visibility", json!("internal")),
            ("event_name", json!("user_remove_from_team")),
        ],
    );
    // WebHookService#build_headers for a SystemHook.
    let key = "system-hook:user_remove_from_team:1:hook:1";
    let uuid = |k: &str| uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, k.as_bytes()).to_string();
    assert_eq!(q.header("content-type"), Some("application/json"));
    assert_eq!(q.header("user-agent"), Some("GitLab/18.0.1"));
    assert_eq!(q.header("x-gitlab-event"), Some("System Hook"));
    assert_eq!(q.header("x-gitlab-token"), Some("s3cr3t"));
    assert_eq!(
        q.header("x-gitlab-instance"),
        Some("https://gitlab.example.com")
    );
    assert_eq!(q.header("idempotency-key"), Some(key));
    assert_eq!(q.header("x-gitlab-webhook-uuid"), Some(uuid(key).as_str()));
    assert_eq!(
        q.header("x-gitlab-event-uuid"),
        Some(uuid("system-hook:user_remove_from_team:1").as_str())
    );
    // CE GroupMemberBuilder#build(:destroy): the public email, expires_at a date.
    let group = with_event(&reqs, "user_remove_from_group");
    assert_eq!(group.len(), 1);
    assert_body(
        &group[0],
        &[
            ("created_at", json!("2024-01-01T00:00:00Z")),
            ("updated_at", json!("2024-01-01T00:00:00Z")),
            ("group_name", json!("acme")),
            ("group_path", json!("acme")),
            ("group_id", json!(100)),
            ("user_username", json!("u11")),
            ("user_name", json!("User 11")),
            ("user_email", json!("eleven@example.org")),
            ("user_id", json!(11)),
            ("group_access", json!("Reporter")),
            ("expires_at", json!("2025-03-02")),
            ("event_name", json!("user_remove_from_group")),
        ],
    );
    // Claimed by the removal's run, delivered by deliver-notification.
    let claimed: Vec<&str> = r.runs[0]
        .sent
        .iter()
        .filter(|s| s.message.receiver == Function::DeliverNotification)
        .map(|s| s.message.envelope.message_key.as_str())
        .collect();
    assert_eq!(
        claimed,
        vec![key, "system-hook:user_remove_from_group:2:hook:1"]
    );
}

#[tokio::test]
async fn every_system_hook_gets_its_own_message_and_invites_and_requests_none() {
    let db = fixture().await;
    let (a, b) = (HttpReceiver::start().await, HttpReceiver::start().await);
    system_hook(&db, 1, &a.url("/a"), None).await;
    system_hook(&db, 2, &b.url("/b"), None).await;
    // A project hook receives no system hook.
    db.exec("INSERT INTO web_hooks (id, project_id, type) VALUES (3, 200, 'ProjectHook')")
        .await;
    Fx(&db)
        .members(&[
            M::pm(4, 200, 12, 30)
                .expires("2025-03-01")
                .requested("2025-01-01"),
            M::gm(5, 100, 12, 30)
                .expires("2025-03-01")
                .invite("x@example.com", "tok"),
        ])
        .await;
    db.exec("UPDATE members SET user_id = NULL WHERE id = 5")
        .await;
    until_idle(&db, NOW, F, None).await;
    for rx in [&a, &b] {
        let reqs = rx.requests();
        let keys: Vec<&str> = reqs
            .iter()
            .filter_map(|q| q.header("idempotency-key"))
            .collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(reqs.iter().all(|q| q.header("x-gitlab-token").is_none()));
    }
    assert!(a.requests()[0]
        .header("idempotency-key")
        .unwrap()
        .ends_with(":hook:1"));
    assert!(b.requests()[0]
        .header("idempotency-key")
        .unwrap()
        .ends_with(":hook:2"));
}

#[tokio::test]
async fn the_dry_run_lists_the_hooks_it_would_send_and_sends_none() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    system_hook(&db, 1, &rx.url("/sys"), None).await;
    let mut r = db.runner(t(NOW)).with_notifier(notifier(&db).await);
    let body = r.cron_message(F).to_body();
    let run = r.dry_run(F, &body).await.unwrap();
    let listed: Vec<(String, Value)> = run
        .sent
        .iter()
        .filter(|s| s.message.envelope.kind == "deliver-notification.webhook")
        .map(|s| {
            let p = &s.message.envelope.payload;
            (
                s.message.envelope.message_key.clone(),
                p["system_hook"].clone(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (
                "system-hook:user_remove_from_team:1:hook:1".to_string(),
                json!({"table": "members", "id": 1})
            ),
            (
                "system-hook:user_remove_from_group:2:hook:1".to_string(),
                json!({"table": "members", "id": 2})
            ),
        ]
    );
    assert!(rx.requests().is_empty());
    assert!(db.exists("members WHERE id = 1").await, "rolled back");
}
