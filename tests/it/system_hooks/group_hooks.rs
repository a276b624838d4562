//! EE group hooks with `GROUP_HOOKS=on` (docs/gitlab-differences.md, "System hooks"):
//! an expired group membership sends one `Member Hook` to the `GroupHook` rows with
//! member events on its group and the group's ancestors (never to a hook without the
//! flag, a disabled hook or another group's), with GitLab's headers and
//! `GroupMemberBuilder`'s EE body; a destroyed subgroup tree sends `Subgroup Hook`s
//! to the parents' hooks and a `Project Hook` for its project; off, none; a replay
//! sends nothing twice.

use super::*;
use crate::group_deletion::{destroy_body, schedule};
use integration_tests::fixtures::{M, U};
use shared::config::Settings;

const NOW: &str = "2025-03-10T00:10:00Z";

/// `GroupHook` row `id` on group `group` posting to `url`, with the event flags
/// `flags` set (`member_events, project_events`, …), `token` when given, and the
/// auto-disabling state `state` (`recent_failures, disabled_until` SQL values).
async fn group_hook(
    db: &TestDb,
    id: i64,
    group: i64,
    url: &str,
    flags: &[&str],
    token: Option<&str>,
    state: &str,
) {
    let (eu, eiv) = shared::notify::crypto::encrypt(url, TEST_KEY);
    let (et, etiv) = match token {
        Some(tk) => {
            let (a, b) = shared::notify::crypto::encrypt(tk, TEST_KEY);
            (format!("'{a}'"), format!("'{b}'"))
        }
        None => ("NULL".into(), "NULL".into()),
    };
    let set = |f: &str| flags.contains(&f).to_string();
    db.exec(&format!(
        "INSERT INTO web_hooks (id, type, group_id, encrypted_url, encrypted_url_iv, encrypted_token,
                                encrypted_token_iv, member_events, subgroup_events, project_events,
                                recent_failures, disabled_until, created_at, updated_at)
         VALUES ({id}, 'GroupHook', {group}, '{eu}', '{eiv}', {et}, {etiv}, {}, {}, {}, {state},
                 '2024-01-01', '2024-01-01')",
        set("member_events"),
        set("subgroup_events"),
        set("project_events"),
    ))
    .await;
}

fn settings(on: bool) -> Settings {
    Settings {
        group_hooks: on,
        ..Settings::default()
    }
}

/// `function`'s message `body` (or its cron message) until idle at `now` with group
/// hooks `on`.
async fn run(db: &TestDb, now: &str, function: Function, body: Option<String>, on: bool) -> Runner {
    let mut r = db
        .runner_with(t(now), settings(on))
        .with_notifier(notifier(db).await);
    let body = body.unwrap_or_else(|| r.cron_message(function).to_body());
    r.run_until_idle(function, &body).await.unwrap();
    r
}

/// G100 "acme" > G101 "web"; G102 "other"; P200 in G101; U10, U11 (public email);
/// PM1: P200 U10 expired; GM2: G101 U11 20 expired; GM3: G100 U10 50. Hooks: H1 on
/// G101 (member events, token), H2 on G100 (member events), H3 on G101 (subgroup
/// events only), H4 on G100 (member events, disabled for good), H5 on G101 (member
/// events, disabled until after NOW), H6 on G102 (member events).
async fn member_fixture(rx: &HttpReceiver) -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.group(102, "other", None).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    db.exec("UPDATE users SET public_email = 'eleven@example.org' WHERE id = 11")
        .await;
    fx.members(&[
        M::pm(1, 200, 10, 30).expires("2025-03-01"),
        M::gm(2, 101, 11, 20).expires("2025-03-02"),
        M::gm(3, 100, 10, 50),
    ])
    .await;
    let m = ["member_events"];
    group_hook(&db, 1, 101, &rx.url("/h1"), &m, Some("g-t0k"), "0, NULL").await;
    group_hook(&db, 2, 100, &rx.url("/h2"), &m, None, "0, NULL").await;
    group_hook(
        &db,
        3,
        101,
        &rx.url("/h3"),
        &["subgroup_events"],
        None,
        "0, NULL",
    )
    .await;
    group_hook(&db, 4, 100, &rx.url("/h4"), &m, None, "4, NULL").await;
    group_hook(
        &db,
        5,
        101,
        &rx.url("/h5"),
        &m,
        None,
        "4, '2025-03-10T01:00:00Z'",
    )
    .await;
    group_hook(&db, 6, 102, &rx.url("/h6"), &m, None, "0, NULL").await;
    db
}

fn paths(reqs: &[Request]) -> Vec<String> {
    let mut p: Vec<String> = reqs.iter().map(|q| q.path.clone()).collect();
    p.sort();
    p
}

#[tokio::test]
async fn an_expired_group_membership_sends_one_member_hook_to_its_group_and_ancestors() {
    let rx = HttpReceiver::start().await;
    let db = member_fixture(&rx).await;
    let sys = HttpReceiver::start().await;
    system_hook(&db, 9, &sys.url("/sys"), None).await;
    let f = Function::RemoveExpiredMembers;
    run(&db, NOW, f, None, true).await;
    assert!(!db.exists("members WHERE id IN (1, 2)").await);
    // The project membership sends none (EE's hook is a group member's only).
    let reqs = rx.requests();
    assert_eq!(paths(&reqs), vec!["/h1", "/h2"]);
    for q in &reqs {
        // GitLab's EE GroupMemberBuilder#build(:destroy): CE's fields and group_plan.
        assert_body(
            q,
            &[
                ("created_at", json!("2024-01-01T00:00:00Z")),
                ("updated_at", json!("2024-01-01T00:00:00Z")),
                ("group_name", json!("web")),
                ("group_path", json!("web")),
                ("group_id", json!(101)),
                ("user_username", json!("u11")),
                ("user_name", json!("User 11")),
                ("user_email", json!("eleven@example.org")),
                ("user_id", json!(11)),
                ("group_access", json!("Reporter")),
                ("expires_at", json!("2025-03-02")),
                ("group_plan", Value::Null),
                ("event_name", json!("user_remove_from_group")),
            ],
        );
        assert_eq!(q.header("x-gitlab-event"), Some("Member Hook"));
        assert_eq!(q.header("content-type"), Some("application/json"));
    }
    let h1 = reqs.iter().find(|q| q.path == "/h1").unwrap();
    let key = "group-hook:member_hooks:2:hook:1";
    let uuid = |k: &str| uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, k.as_bytes()).to_string();
    assert_eq!(h1.header("x-gitlab-token"), Some("g-t0k"));
    assert_eq!(h1.header("idempotency-key"), Some(key));
    assert_eq!(h1.header("x-gitlab-webhook-uuid"), Some(uuid(key).as_str()));
    assert_eq!(
        h1.header("x-gitlab-event-uuid"),
        Some(uuid("group-hook:member_hooks:2").as_str())
    );
    let h2 = reqs.iter().find(|q| q.path == "/h2").unwrap();
    assert_eq!(h2.header("x-gitlab-token"), None);
    // The system hook of an EE instance carries the same body (EE's group_plan).
    let sys = with_event(&sys.requests(), "user_remove_from_group");
    assert_eq!(sys.len(), 1);
    assert_eq!(sys[0].body, h2.body);
    assert_eq!(sys[0].header("x-gitlab-event"), Some("System Hook"));
    // Success keeps the hooks' auto-disabling state clean; the disabled ones untouched.
    assert_eq!(
        db.scalar::<i64>("SELECT count(*)::int8 FROM web_hooks WHERE recent_failures > 0")
            .await,
        2
    );
    // A replay finds the memberships gone: nothing claimed, nothing sent again.
    run(&db, "2025-03-10T00:20:00Z", f, None, true).await;
    assert_eq!(rx.requests().len(), 2);
}

#[tokio::test]
async fn without_the_group_webhooks_license_no_group_hook_is_sent() {
    let rx = HttpReceiver::start().await;
    let db = member_fixture(&rx).await;
    let sys = HttpReceiver::start().await;
    system_hook(&db, 9, &sys.url("/sys"), None).await;
    run(&db, NOW, Function::RemoveExpiredMembers, None, false).await;
    assert!(!db.exists("members WHERE id IN (1, 2)").await);
    assert!(rx.requests().is_empty());
    // The system hooks still go, with CE's body (no EE group_plan).
    let group = with_event(&sys.requests(), "user_remove_from_group");
    assert_eq!(group.len(), 1);
    assert!(group[0].json().get("group_plan").is_none());
}

#[tokio::test]
async fn the_dry_run_lists_the_group_hooks_as_decisions_and_sends_none() {
    let rx = HttpReceiver::start().await;
    let db = member_fixture(&rx).await;
    let f = Function::RemoveExpiredMembers;
    let mut r = db
        .runner_with(t(NOW), settings(true))
        .with_notifier(notifier(&db).await);
    let body = r.cron_message(f).to_body();
    let plan = r.plan_until_idle(f, &body).await.unwrap();
    let hooks: Vec<(i64, &str, &str)> = plan
        .decisions
        .iter()
        .filter(|d| d.decision.table == "web_hooks" && d.decision.decision == "group_hook")
        .map(|d| (d.decision.id, d.decision.decision, d.decision.rule))
        .collect();
    assert_eq!(
        hooks,
        vec![
            (1, "group_hook", "user_remove_from_group"),
            (2, "group_hook", "user_remove_from_group")
        ]
    );
    assert!(rx.requests().is_empty());
    assert!(db.exists("members WHERE id = 2").await, "rolled back");
}

#[tokio::test]
async fn a_destroyed_subgroup_tree_sends_subgroup_project_and_member_hooks() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web-deletion_scheduled-101", Some(100)).await;
    fx.group(102, "api", Some(101)).await;
    fx.project_path(200, 102, "site").await;
    fx.users(&[U::human(11), U::human(12)]).await;
    db.exec("UPDATE users SET public_email = 'twelve@example.org' WHERE id = 12")
        .await;
    fx.members(&[M::gm(1, 100, 11, 50), M::gm(2, 102, 12, 30)])
        .await;
    schedule(&db, 101, 11, "2025-03-03").await;
    db.exec(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 7, '2024-01-01', '2024-01-01')",
    )
    .await;
    let rx = HttpReceiver::start().await;
    let all = ["member_events", "subgroup_events", "project_events"];
    group_hook(&db, 1, 100, &rx.url("/h1"), &all, None, "0, NULL").await;
    group_hook(
        &db,
        2,
        100,
        &rx.url("/h2"),
        &["member_events"],
        None,
        "0, NULL",
    )
    .await;
    group_hook(&db, 3, 100, &rx.url("/h3"), &[], None, "0, NULL").await;
    let body = destroy_body(101, 11, "2025-03-03");
    run(
        &db,
        "2025-03-10T02:00:00Z",
        Function::GroupDestroy,
        Some(body.clone()),
        true,
    )
    .await;
    assert!(!db.exists("namespaces WHERE id IN (101, 102)").await);
    let reqs = rx.requests();
    let event = |q: &Request| {
        (
            q.path.clone(),
            q.json()["event_name"].as_str().unwrap().to_string(),
        )
    };
    let mut got: Vec<(String, String)> = reqs.iter().map(event).collect();
    got.sort();
    assert_eq!(
        got,
        [
            ("/h1", "project_destroy"),
            ("/h1", "subgroup_destroy"),
            ("/h1", "subgroup_destroy"),
            ("/h1", "user_remove_from_group"),
            ("/h2", "user_remove_from_group"),
        ]
        .map(|(p, e)| (p.to_string(), e.to_string()))
    );
    let header = |e: &str| {
        with_event(&reqs, e)
            .iter()
            .map(|q| q.header("x-gitlab-event").unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(header("project_destroy"), ["Project Hook"]);
    assert_eq!(
        header("subgroup_destroy"),
        ["Subgroup Hook", "Subgroup Hook"]
    );
    assert_eq!(
        header("user_remove_from_group"),
        ["Member Hook", "Member Hook"]
    );
    // SubgroupBuilder#build(:destroy): GroupBuilder's fields, then the parent's.
    let sub = with_event(&reqs, "subgroup_destroy");
    let api = sub.iter().find(|q| q.json()["group_id"] == 102).unwrap();
    assert_body(
        api,
        &[
            ("created_at", json!("2024-01-01T00:00:00Z")),
            ("updated_at", json!("2024-01-01T00:00:00Z")),
            ("event_name", json!("subgroup_destroy")),
            ("name", json!("api")),
            ("path", json!("api")),
            ("full_path", json!("acme/web-deletion_scheduled-101/api")),
            ("group_id", json!(102)),
            ("parent_group_id", json!(101)),
            ("parent_name", json!("web-deletion_scheduled-101")),
            ("parent_path", json!("web-deletion_scheduled-101")),
            ("parent_full_path", json!("acme/web-deletion_scheduled-101")),
        ],
    );
    let web = sub.iter().find(|q| q.json()["group_id"] == 101).unwrap();
    assert_eq!(web.json()["parent_full_path"], "acme");
    // ProjectBuilder#build(:destroy) without the deprecated owner.
    assert_body(
        &with_event(&reqs, "project_destroy")[0],
        &[
            ("event_name", json!("project_destroy")),
            ("created_at", json!("2024-01-01T00:00:00Z")),
            ("updated_at", json!("2024-01-01T00:00:00Z")),
            ("name", json!("site")),
            ("path", json!("site")),
            (
                "path_with_namespace",
                json!("acme/web-deletion_scheduled-101/api/site"),
            ),
            ("project_id", json!(200)),
            ("project_namespace_id", json!(102)),
            ("owners", json!([])),
            ("project_visibility", json!("private")),
        ],
    );
    // The member destroyed with G102 (U12, public email), to G100's member hooks.
    let member = with_event(&reqs, "user_remove_from_group");
    assert!(member
        .iter()
        .all(|q| q.json()["group_id"] == 102 && q.json()["user_id"] == 12));
    // The same message again: the tree is gone, nothing is sent twice.
    run(
        &db,
        "2025-03-10T02:30:00Z",
        Function::GroupDestroy,
        Some(body),
        true,
    )
    .await;
    assert_eq!(rx.requests().len(), 5);
}

#[tokio::test]
async fn a_message_naming_another_trigger_is_refused_naming_the_field() {
    let db = TestDb::new().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(notifier(&db).await);
    let body = json!({"version": 1, "type": "deliver-notification.webhook",
        "message_key": "group-hook:push_hooks:1:hook:1", "run_id": "r1", "hop": 0,
        "issued_at": NOW, "payload": {"hook_id": 1, "event_key": "group-hook:push_hooks:1",
        "body": "{}", "system_hook": {"table": "members", "id": 1, "group_hook": "push_hooks"}}});
    let (run, _) = r
        .invoke(Function::DeliverNotification, &body.to_string(), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "permanent", "{}", log.dump());
    let error = log.one("malformed message")["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("`system_hook.group_hook`"), "{error}");
}

#[tokio::test]
async fn a_failing_group_hook_is_retried_until_gitlabs_auto_disabling_stops_it() {
    let rx = HttpReceiver::start().await;
    let db = member_fixture(&rx).await;
    db.exec("DELETE FROM web_hooks WHERE id <> 1").await;
    rx.respond(500);
    let r = run(&db, NOW, Function::RemoveExpiredMembers, None, true).await;
    // The removal stands; each attempt carries the same key and counts a failure on
    // the hook (GitLab's backoff!), until the hook is disabled and the next attempt
    // sends nothing.
    assert!(!db.exists("members WHERE id = 2").await);
    let reqs = rx.requests();
    assert!(reqs
        .iter()
        .all(|q| q.header("idempotency-key") == Some("group-hook:member_hooks:2:hook:1")));
    let (failures, disabled): (i16, bool) = {
        let row = db
            .client
            .query_one(
                "SELECT recent_failures, disabled_until IS NOT NULL FROM web_hooks WHERE id = 1",
                &[],
            )
            .await
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((reqs.len(), failures, disabled), (4, 4, true));
    assert!(r.dead_letters().is_empty());
}
