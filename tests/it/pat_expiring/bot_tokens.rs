//! pat-expiring for resource access tokens (bots, behaviour §B28.12): a project bot
//! fires its subscribed project hook and mails the maintainers and owners, a group bot
//! the hooks of its group and ancestors and the direct owners; the thirty-day interval
//! has no web hook; a bot without a membership is counted and left unmarked; a bot whose
//! messages cannot be sent is rolled back; a bot's tokens across pages are claimed at
//! once.

use super::*;
use crate::assert::assert_fields;

#[tokio::test]
async fn a_project_bot_fires_its_subscribed_project_hook_and_mails_maintainers_and_owners() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", Some("s3cr3t")).await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    let hooks = webhooks(sent);
    assert_eq!(hooks.len(), 1);
    let h = hooks[0];
    assert_eq!(
        h.message_key,
        "pat-expiring:seven_days:bot:20:token:20:hook:1"
    );
    assert_eq!(
        h.payload,
        json!({"hook_id": 1, "event_key": "pat-expiring:seven_days:bot:20:token:20", "body": t20_body()})
    );
    let mails = emails(sent);
    let to: Vec<i64> = mails
        .iter()
        .map(|e| e.payload["recipient_user_id"].as_i64().unwrap())
        .collect();
    assert_eq!(to, vec![11, 12]);
    assert_eq!(
        mails[0].message_key,
        "pat-expiring:seven_days:bot:20:recipient:11:2025-03-10"
    );
    assert_eq!(
        mails[0].payload,
        json!({"template": "bot_resource_access_token_about_to_expire", "recipient_user_id": 11,
               "days_to_expire": 7, "bot_user_id": 20, "token_name": "T20",
               "resource_type": "project", "resource_id": 200,
               "resource_full_path": "acme/web/site", "resource_name": "site"})
    );
    assert_eq!(marks(&db, 20).await, (true, false, false, true));
    let owners = log.with_message("Notifying resource access token owner about expiring tokens");
    assert_eq!(owners.len(), 2);
    assert_eq!(
        (
            owners[0]["user_id"].as_i64(),
            owners[0]["bot_user_id"].as_i64()
        ),
        (Some(11), Some(20))
    );
    assert_eq!(owners[0]["interval"], "seven_days");
    assert_eq!(
        log.done()["total_notification_delivered_for_resource_access_tokens"],
        1
    );
    // Nothing secret travels: the message holds no URL and no token.
    for s in sent {
        let body = s.message.envelope.to_body();
        assert!(!body.contains("hooks.example.com") && !body.contains("s3cr3t"));
        assert!(!body.contains("@example.com"));
    }
    // The recipients are exactly the active, notifiable users with project_access >= 40.
    let c = db.session().await;
    let mut expected = Vec::new();
    for u in [10, 11, 12, 13, 14, 15] {
        let level = shared::gitlab::permissions::project_access(&c, u, 200)
            .await
            .unwrap();
        let actor = shared::gitlab::permissions::load_actor(&c, u)
            .await
            .unwrap()
            .unwrap();
        if level >= 40 && actor.active {
            expected.push(u);
        }
    }
    assert_eq!(expected, to);
}

#[tokio::test]
async fn a_group_bot_fires_the_hooks_of_its_group_and_ancestors_and_mails_direct_owners() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(24, 101, 21, 30), M::gm(25, 101, 15, 50)])
        .await;
    tok(&db, 21, 21, "2025-03-15", "T21").await;
    hook(
        &db,
        11,
        On::Group(100),
        true,
        "https://hooks.example.com/g1",
        None,
    )
    .await;
    hook(
        &db,
        12,
        On::Group(101),
        true,
        "https://hooks.example.com/g2",
        None,
    )
    .await;
    hook(
        &db,
        13,
        On::Group(500),
        true,
        "https://hooks.example.com/g3",
        None,
    )
    .await;
    hook(
        &db,
        14,
        On::Project(200),
        true,
        "https://hooks.example.com/p",
        None,
    )
    .await;
    let (r, _log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    let hooks = webhooks(sent);
    let ids: Vec<i64> = hooks
        .iter()
        .map(|e| e.payload["hook_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![11, 12]);
    assert_eq!(
        hooks[0].payload["body"]["group"],
        json!({"group_name": "web", "group_path": "web", "group_id": 101, "full_path": "acme/web"})
    );
    assert!(hooks[0].payload["body"].get("project").is_none());
    assert_eq!(hooks[0].payload["body"]["object_attributes"]["id"], 21);
    let mails = emails(sent);
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].payload["recipient_user_id"], 15);
    assert_eq!(mails[0].payload["resource_type"], "group");
    assert_eq!(mails[0].payload["resource_full_path"], "acme/web");
    assert_eq!(mails[0].payload["resource_name"], "web");
    assert_eq!(marks(&db, 21).await, (true, false, false, true));
}

#[tokio::test]
async fn a_bot_in_the_thirty_day_interval_gets_emails_and_no_webhook() {
    let db = fixture().await;
    Fx(&db).members(&[M::pm(20, 200, 20, 40)]).await;
    tok(&db, 22, 20, "2025-04-01", "T22").await;
    hook(
        &db,
        1,
        On::Project(200),
        true,
        "https://hooks.example.com/x",
        None,
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    assert!(webhooks(sent).is_empty());
    let mails = emails(sent);
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].payload["recipient_user_id"], 11);
    assert_eq!(mails[0].payload["days_to_expire"], 30);
    assert_eq!(
        mails[0].message_key,
        "pat-expiring:thirty_days:bot:20:recipient:11:2025-03-10"
    );
    assert_eq!(marks(&db, 22).await, (false, true, false, false));
    assert_eq!(
        log.done()["total_notification_delivered_for_resource_access_tokens"],
        1
    );
}

#[tokio::test]
async fn a_bot_without_a_membership_is_counted_and_left_unmarked() {
    let db = fixture().await;
    tok(&db, 23, 22, "2025-03-15", "T23").await;
    // An access request and a group membership without access do not count either.
    Fx(&db)
        .members(&[
            M::pm(30, 200, 22, 40).requested("2025-03-01T00:00:00Z"),
            M::gm(31, 101, 22, 5),
        ])
        .await;
    let before = row_text(&db, 23).await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(row_text(&db, 23).await, before);
    assert_fields(
        &done_totals(&log),
        json!({"no_membership": 1, "bots": 0, "status": "completed"}),
    );
    assert!(log.lines().iter().all(|l| l["level"] != "error"));
}

#[tokio::test]
async fn a_bot_whose_messages_cannot_be_sent_is_rolled_back_and_others_go_on() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(log_notifier().await);
    r.queue()
        .fail_when(|m| m.envelope.message_key.contains(":bot:20:"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(marks(&db, 20).await, (false, false, false, false));
    assert_eq!(marks(&db, 1).await, (true, false, false, true));
    assert_eq!(emails(&r.runs[0].sent).len(), 1);
    assert_fields(
        &log.one("Failed to send notification about expiring resource access tokens"),
        json!({
            "user_id": 20,
            "interval": "seven_days",
            "level": "error",
            "error_class": "transport"
        }),
    );
    assert_fields(
        &done_totals(&log),
        json!({"bot_failures": 1, "bots": 0, "user_tokens": 1}),
    );
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_bots_tokens_across_pages_are_claimed_at_once() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(20, 200, 20, 40),
            M::pm(21, 200, 12, 40),
            M::pm(22, 200, 13, 40),
            M::pm(23, 200, 14, 30),
        ])
        .await;
    db.exec(
        "INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, 20, 'bot-' || g, '2025-03-16', '2024-01-01', '2024-01-01', 1 FROM generate_series(101, 250) g;",
    )
    .await;
    hook(
        &db,
        1,
        On::Project(200),
        true,
        "https://hooks.example.com/x",
        None,
    )
    .await;
    hook(
        &db,
        2,
        On::Project(200),
        false,
        "https://hooks.example.com/x",
        None,
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    let hooks = webhooks(sent);
    assert_eq!(hooks.len(), 1);
    assert_eq!(hooks[0].payload["hook_id"], 1);
    assert_eq!(hooks[0].payload["body"]["object_attributes"]["id"], 101);
    assert_eq!(
        hooks[0].message_key,
        "pat-expiring:seven_days:bot:20:token:101:hook:1"
    );
    let to: Vec<i64> = emails(sent)
        .iter()
        .map(|e| e.payload["recipient_user_id"].as_i64().unwrap())
        .collect();
    assert_eq!(to, vec![11, 12]);
    assert_eq!(
        log.with_message("Notifying resource access token owner about expiring tokens")
            .len(),
        2
    );
    assert_eq!(
        db.count("personal_access_tokens WHERE user_id = 20 AND seven_days_notification_sent_at IS NOT NULL")
            .await,
        150
    );
    assert_eq!(
        log.done()["total_notification_delivered_for_resource_access_tokens"],
        150
    );
}
