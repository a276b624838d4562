//! B28 pat-expiring: every acceptance scenario of behaviour §B28.12 that concerns
//! the batch (1–13, 16), plus interval boundaries, the deadline guard, the hop limit,
//! the overlap lock and repeated runs. Delivery is in `deliver_notification.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hk::local::Runner;
use hk::local_queue::SentRecord;
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::messages::Envelope;
use shared::notify::{Notifier, NotifyConfig};
use shared::telemetry::{capture, Captured};
use shared::Function;

pub const NOW: &str = "2025-03-10T01:00:00Z";
pub const F: Function = Function::PatExpiring;
pub const D: Function = Function::DeliverNotification;
/// The `db_key_base` of the test fixtures (a 128-hex-character secret, like GitLab's).
pub const TEST_KEY: &str = "5e0f3c2a9b8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a";

/// The configuration of a B28 test: the spec's instance, the test key, plus `extra`.
pub fn notify_config(extra: &[(&str, String)]) -> NotifyConfig {
    let mut m: HashMap<String, String> = HashMap::from([
        (
            "GITLAB_BASE_URL".into(),
            "https://gitlab.example.com".into(),
        ),
        ("GITLAB_VERSION".into(), "18.0.1".into()),
        ("GITLAB_DB_KEY_BASE".into(), TEST_KEY.into()),
        (
            "MAIL_FROM".into(),
            "GitLab <gitlab@gitlab.example.com>".into(),
        ),
        ("EMAIL_TRANSPORT".into(), "log".into()),
    ]);
    for (k, v) in extra {
        m.insert(k.to_string(), v.clone());
    }
    NotifyConfig::from_lookup(&|k: &str| m.get(k).cloned()).unwrap()
}

/// A notifier that logs emails (enough for the batch, which only sends messages).
pub async fn log_notifier() -> Arc<Notifier> {
    Arc::new(Notifier::full(&notify_config(&[]), None).await.unwrap())
}

/// The fixture of behaviour §B28.12: G100 "acme" > G101 "web"; P200 "site" in G101 (route
/// acme/web/site); G500 "other"; U10, U11, U12, U14, U15 (human, active); U13 (human,
/// blocked); U20, U21, U22 (bot, active); M1: GM G100 U11 50.
pub async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.group(500, "other", None).await;
    fx.users(&[
        U::human(10),
        U::human(11),
        U::human(12),
        U::human(14),
        U::human(15),
        U::human(13).blocked(),
        U::bot(20),
        U::bot(21),
        U::bot(22),
    ])
    .await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db
}

/// `T<id>: PAT U<user> exp <date> name <name>`.
pub async fn tok(db: &TestDb, id: i64, user: i64, exp: &str, name: &str) {
    db.exec(&format!(
        "INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
         VALUES ({id}, {user}, '{name}', '{exp}', '2024-01-01', '2024-01-01', 1)"
    ))
    .await;
}

/// Where a hook hangs.
#[derive(Clone, Copy)]
pub enum On {
    /// A ProjectHook of this project.
    Project(i64),
    /// A GroupHook of this group.
    Group(i64),
}

/// A hook whose URL and token are encrypted with [`TEST_KEY`] as GitLab stores them.
pub async fn hook(db: &TestDb, id: i64, on: On, subscribed: bool, url: &str, token: Option<&str>) {
    let (eu, eiv) = shared::notify::crypto::encrypt(url, TEST_KEY);
    let (et, etiv) = match token {
        Some(tk) => {
            let (a, b) = shared::notify::crypto::encrypt(tk, TEST_KEY);
            (format!("'{a}'"), format!("'{b}'"))
        }
        None => ("NULL".into(), "NULL".into()),
    };
    let (kind, p, g) = match on {
        On::Project(p) => ("ProjectHook", p.to_string(), "NULL".to_string()),
        On::Group(g) => ("GroupHook", "NULL".to_string(), g.to_string()),
    };
    db.exec(&format!(
        "INSERT INTO web_hooks (id, project_id, group_id, type, encrypted_url, encrypted_url_iv,
                                encrypted_token, encrypted_token_iv, resource_access_token_events,
                                created_at, updated_at)
         VALUES ({id}, {p}, {g}, '{kind}', '{eu}', '{eiv}', {et}, {etiv}, {subscribed},
                 '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// Scenario 7's fixture: M20–M23, T20 (created 2025-01-02T09:00:00Z), H1 (subscribed)
/// and H2 (not), on `url`.
pub async fn scenario7(db: &TestDb, url: &str, token: Option<&str>) {
    Fx(db)
        .members(&[
            M::pm(20, 200, 20, 40),
            M::pm(21, 200, 12, 40),
            M::pm(22, 200, 13, 40),
            M::pm(23, 200, 14, 30),
        ])
        .await;
    tok(db, 20, 20, "2025-03-16", "T20").await;
    db.exec("UPDATE personal_access_tokens SET created_at = '2025-01-02T09:00:00' WHERE id = 20")
        .await;
    hook(db, 1, On::Project(200), true, url, token).await;
    hook(db, 2, On::Project(200), false, url, token).await;
}

/// One pat-expiring invocation of the cron message at NOW.
pub async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    cron_once_with(db, Settings::default()).await
}

async fn cron_once_with(db: &TestDb, settings: Settings) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db
        .runner_with(t(NOW), settings)
        .with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    (r, log)
}

/// The envelopes a run sent, by type.
pub fn sent_of<'a>(sent: &'a [SentRecord], kind: &str) -> Vec<&'a Envelope> {
    sent.iter()
        .map(|s| &s.message.envelope)
        .filter(|e| e.kind == kind)
        .collect()
}

pub fn emails(sent: &[SentRecord]) -> Vec<&Envelope> {
    sent_of(sent, "deliver-notification.email")
}

pub fn webhooks(sent: &[SentRecord]) -> Vec<&Envelope> {
    sent_of(sent, "deliver-notification.webhook")
}

/// `(seven, thirty, sixty, legacy)` marks of a token: whether each `*_sent_at` is
/// `now`, and `expire_notification_delivered`.
async fn marks(db: &TestDb, id: i64) -> (bool, bool, bool, bool) {
    let r = db
        .client
        .query_one(
            "SELECT seven_days_notification_sent_at IS NOT DISTINCT FROM $2::timestamptz,
                    thirty_days_notification_sent_at IS NOT DISTINCT FROM $2::timestamptz,
                    sixty_days_notification_sent_at IS NOT DISTINCT FROM $2::timestamptz,
                    expire_notification_delivered
             FROM personal_access_tokens WHERE id = $1",
            &[&id, &t(NOW)],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2), r.get(3))
}

/// A token's row as text, to prove it did not change.
async fn row_text(db: &TestDb, id: i64) -> String {
    db.scalar(&format!(
        "SELECT t::text FROM personal_access_tokens t WHERE id = {id}"
    ))
    .await
}

fn done_totals(log: &Captured) -> Value {
    let d = log.done();
    json!({
        "status": d["status"],
        "bots": d["total_notification_delivered_for_resource_access_tokens"],
        "no_membership": d["total_resource_bot_without_membership"],
        "bot_failures": d["total_failed_notifications_for_resource_bots"],
        "user_tokens": d["total_user_tokens_marked"],
        "user_emails": d["total_user_emails_enqueued"],
        "suppressed": d["total_user_emails_suppressed"],
        "user_failures": d["total_user_failures"],
    })
}

#[tokio::test]
async fn a_human_gets_one_seven_day_email_naming_tokens_by_expiry_and_both_are_marked() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 10, "2025-03-12", "deploy").await;
    let (r, log) = cron_once(&db).await;
    let cron_run_id = r.runs[0].message_key.clone().unwrap();
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    let m = mails[0];
    assert_eq!(m.message_key, "pat-expiring:seven_days:user:10:2025-03-10");
    assert_eq!(
        m.payload,
        json!({"template": "access_token_about_to_expire", "recipient_user_id": 10,
               "days_to_expire": 7, "token_names": ["deploy", "ci"]})
    );
    assert_eq!(m.hop, 0);
    assert!(cron_run_id.starts_with("pat-expiring:cron:2025-03-10T01:00:00Z"));
    assert_eq!(r.runs[0].sent[0].message.receiver, D);
    assert_eq!(r.runs[0].sent[0].message.delay_s, 0);
    for id in [1, 2] {
        assert_eq!(marks(&db, id).await, (true, false, false, true), "T{id}");
    }
    // updated_at is not changed, as in GitLab.
    assert_eq!(
        db.count("personal_access_tokens WHERE updated_at = '2024-01-01'")
            .await,
        2
    );
    let l = log.one("Notifying User about expiring tokens");
    assert_eq!(
        (l["user_id"].as_i64(), l["token_count"].as_i64()),
        (Some(10), Some(2))
    );
    assert_eq!(l["interval"], "seven_days");
    assert_eq!(
        done_totals(&log),
        json!({"status": "completed", "bots": 0, "no_membership": 0, "bot_failures": 0,
               "user_tokens": 2, "user_emails": 1, "suppressed": 0, "user_failures": 0})
    );
}

#[tokio::test]
async fn interval_boundaries_put_each_token_in_exactly_one_interval() {
    let db = fixture().await;
    // Days -1, 7, 8, 30, 31, 60, 61 from today.
    for (id, exp) in [
        (1, "2025-03-09"),
        (2, "2025-03-17"),
        (3, "2025-03-18"),
        (4, "2025-04-09"),
        (5, "2025-04-10"),
        (6, "2025-05-09"),
        (7, "2025-05-10"),
    ] {
        tok(&db, id, 12, exp, &format!("d{id}")).await;
    }
    let before1 = row_text(&db, 1).await;
    let before7 = row_text(&db, 7).await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    let got: Vec<(String, Value)> = mails
        .iter()
        .map(|e| (e.message_key.clone(), e.payload.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "pat-expiring:seven_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 7, "token_names": ["d2"]})
            ),
            (
                "pat-expiring:thirty_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 30, "token_names": ["d3", "d4"]})
            ),
            (
                "pat-expiring:sixty_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 60, "token_names": ["d5", "d6"]})
            ),
        ]
    );
    assert_eq!(marks(&db, 2).await, (true, false, false, true));
    // The thirty- and sixty-day notices leave the legacy flag alone.
    assert_eq!(marks(&db, 3).await, (false, true, false, false));
    assert_eq!(marks(&db, 4).await, (false, true, false, false));
    assert_eq!(marks(&db, 5).await, (false, false, true, false));
    assert_eq!(marks(&db, 6).await, (false, false, true, false));
    assert_eq!(row_text(&db, 1).await, before1);
    assert_eq!(row_text(&db, 7).await, before7);
    assert_eq!(log.done()["total_user_tokens_marked"], 5);
}

#[tokio::test]
async fn excluded_tokens_never_change_and_get_no_email() {
    let db = fixture().await;
    tok(&db, 1, 12, "2025-04-01", "legacy-flag").await;
    tok(&db, 2, 12, "2025-03-15", "revoked").await;
    tok(&db, 3, 12, "2025-03-15", "revoked-null").await;
    tok(&db, 4, 12, "2025-03-15", "impersonation").await;
    tok(&db, 5, 12, "2025-04-01", "thirty-sent").await;
    tok(&db, 6, 12, "2025-03-15", "legacy-seven").await;
    db.exec(
        "UPDATE personal_access_tokens SET expire_notification_delivered = true WHERE id IN (1, 6);
         UPDATE personal_access_tokens SET revoked = true WHERE id = 2;
         UPDATE personal_access_tokens SET revoked = NULL WHERE id = 3;
         UPDATE personal_access_tokens SET impersonation = true WHERE id = 4;
         UPDATE personal_access_tokens SET thirty_days_notification_sent_at = '2025-03-01T01:00:00Z' WHERE id = 5;",
    )
    .await;
    let mut before = Vec::new();
    for id in 1..=6 {
        before.push(row_text(&db, id).await);
    }
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    for id in 1..=6 {
        assert_eq!(row_text(&db, id).await, before[id as usize - 1], "T{id}");
    }
    assert_eq!(done_totals(&log)["user_tokens"], 0);
    assert_eq!(done_totals(&log)["status"], "completed");
}

#[tokio::test]
async fn a_blocked_users_tokens_are_marked_without_an_email() {
    let db = fixture().await;
    tok(&db, 3, 13, "2025-03-15", "T3").await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    let l = log.one("Expiring token notification suppressed: user cannot receive notifications");
    assert_eq!(
        (l["user_id"].as_i64(), l["interval"].as_str()),
        (Some(13), Some("seven_days"))
    );
    assert_eq!(l["level"], "info");
    assert!(log
        .with_message("Notifying User about expiring tokens")
        .is_empty());
    let d = done_totals(&log);
    assert_eq!(
        (d["user_tokens"].as_i64(), d["suppressed"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(d["user_emails"], 0);
}

#[tokio::test]
async fn one_hundred_fifty_users_with_tokens_on_one_date_are_paged_inclusively() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0 FROM generate_series(1000, 1149) g;
         INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, g, 'bulk', '2025-03-14', '2024-01-01', '2024-01-01', 1 FROM generate_series(1000, 1149) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 150);
    let mut users: Vec<i64> = mails
        .iter()
        .map(|e| e.payload["recipient_user_id"].as_i64().unwrap())
        .collect();
    users.sort();
    users.dedup();
    assert_eq!(users, (1000..1150).collect::<Vec<i64>>());
    assert_eq!(
        db.count(&format!(
            "personal_access_tokens WHERE seven_days_notification_sent_at = '{NOW}' AND expire_notification_delivered"
        ))
        .await,
        150
    );
    assert_eq!(log.done()["total_user_tokens_marked"], 150);
    assert_eq!(
        log.with_message("Notifying User about expiring tokens")
            .len(),
        150
    );
}

#[tokio::test]
async fn one_email_carries_the_first_hundred_names_of_a_hundred_twenty_tokens() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, 14, 'tok-' || lpad(g::text, 3, '0'), '2025-03-16', '2024-01-01', '2024-01-01', 1
           FROM generate_series(1, 120) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    let names: Vec<String> = mails[0].payload["token_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        (1..=100).map(|i| format!("tok-{i:03}")).collect::<Vec<_>>()
    );
    assert_eq!(
        db.count("personal_access_tokens WHERE user_id = 14 AND seven_days_notification_sent_at IS NOT NULL")
            .await,
        120
    );
    assert_eq!(
        log.one("Notifying User about expiring tokens")["token_count"],
        120
    );
    assert_eq!(log.done()["total_user_tokens_marked"], 120);
}

/// The project hook body of behaviour §B28.10.3 for T20.
pub fn t20_body() -> Value {
    json!({
      "object_kind": "access_token",
      "project": {
        "id": 200, "name": "site", "description": null,
        "web_url": "https://gitlab.example.com/acme/web/site", "avatar_url": null,
        "git_ssh_url": "git@gitlab.example.com:acme/web/site.git",
        "git_http_url": "https://gitlab.example.com/acme/web/site.git",
        "namespace": "web", "visibility_level": 0,
        "path_with_namespace": "acme/web/site", "default_branch": null,
        "ci_config_path": null,
        "homepage": "https://gitlab.example.com/acme/web/site",
        "url": "git@gitlab.example.com:acme/web/site.git",
        "ssh_url": "git@gitlab.example.com:acme/web/site.git",
        "http_url": "https://gitlab.example.com/acme/web/site.git"
      },
      "object_attributes": {
        "user_id": 20, "created_at": "2025-01-02 09:00:00 UTC", "id": 20,
        "name": "T20", "expires_at": "2025-03-16", "last_used_at": null
      },
      "event_name": "expiring_access_token"
    })
}

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
    let d = done_totals(&log);
    assert_eq!(d["no_membership"], 1);
    assert_eq!(d["bots"], 0);
    assert_eq!(d["status"], "completed");
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
    let e = log.one("Failed to send notification about expiring resource access tokens");
    assert_eq!(e["user_id"], 20);
    assert_eq!(e["interval"], "seven_days");
    assert_eq!(e["level"], "error");
    assert_eq!(e["error_class"], "transport");
    let d = done_totals(&log);
    assert_eq!(
        (d["bot_failures"].as_i64(), d["bots"].as_i64()),
        (Some(1), Some(0))
    );
    assert_eq!(d["user_tokens"], 1);
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_human_whose_email_cannot_be_sent_stays_unmarked_and_is_excluded_for_the_run() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 10, "2025-03-25", "later").await;
    tok(&db, 3, 12, "2025-03-17", "other").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(log_notifier().await);
    r.queue()
        .fail_when(|m| m.envelope.message_key.contains(":user:10:"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(marks(&db, 1).await, (false, false, false, false));
    assert_eq!(marks(&db, 2).await, (false, false, false, false));
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    let errs =
        log.with_message("Failed to send notification about expiring personal access tokens");
    // Once per interval in which U10 has tokens, never twice in one interval.
    let intervals: Vec<&str> = errs
        .iter()
        .map(|l| l["interval"].as_str().unwrap())
        .collect();
    assert_eq!(intervals, vec!["seven_days", "thirty_days"]);
    assert!(errs
        .iter()
        .all(|l| l["user_id"] == 10 && l["error_class"] == "transport"));
    assert_eq!(log.done()["total_user_failures"], 2);
    // The next run (transport healthy) notifies U10: nothing was lost.
    r.queue().clear_failures();
    let (log2, _g2) = capture();
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(marks(&db, 1).await, (true, false, false, true));
    assert_eq!(log2.done()["total_user_emails_enqueued"], 2);
}

#[tokio::test]
async fn a_token_claimed_by_another_session_after_the_page_read_is_not_named() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "ci").await;
    tok(&db, 2, 10, "2025-03-17", "deploy").await;
    // Another session claims T1 but has not committed when the page is read; U10's
    // claim waits for its row lock and then re-checks T1.
    let other = db.session().await;
    other.batch_execute("BEGIN").await.unwrap();
    other
        .execute(
            "UPDATE personal_access_tokens SET seven_days_notification_sent_at = '2025-03-10T00:59:00Z'
             WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    // The claim waited for the other session's row lock: commit only then.
    let commit_when_blocked = async {
        db.blocked_on_lock("pat-expiring").await;
        other.batch_execute("COMMIT").await.unwrap();
    };
    let (run, ()) = tokio::join!(r.invoke(F, &body, 1), commit_when_blocked);
    run.unwrap();
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].payload["token_names"], json!(["deploy"]));
    assert_eq!(
        db.scalar::<chrono::DateTime<chrono::Utc>>(
            "SELECT seven_days_notification_sent_at FROM personal_access_tokens WHERE id = 1"
        )
        .await,
        t("2025-03-10T00:59:00Z")
    );
    assert_eq!(marks(&db, 2).await, (true, false, false, true));
    assert_eq!(log.done()["total_user_tokens_marked"], 1);
}

/// 250 human tokens due in seven days, of users 1000..1249.
async fn two_hundred_fifty(db: &TestDb) {
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0 FROM generate_series(1000, 1249) g;
         INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, g, 'bulk', DATE '2025-03-10' + (g % 8), '2024-01-01', '2024-01-01', 1
           FROM generate_series(1000, 1249) g;",
    )
    .await;
}

fn zero_budget() -> Settings {
    Settings {
        pat_expiring_budget: Duration::ZERO,
        ..Settings::default()
    }
}

#[tokio::test]
async fn an_exhausted_budget_stops_after_a_page_and_the_continuation_resumes_without_duplicates() {
    let db = fixture().await;
    two_hundred_fifty(&db).await;
    let (r, log) = cron_once_with(&db, zero_budget()).await;
    let cron_key = r.runs[0].message_key.clone().unwrap();
    assert!(cron_key.starts_with("pat-expiring:cron:"));
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(done["total_user_tokens_marked"], 100);
    assert_eq!(
        db.count("personal_access_tokens WHERE seven_days_notification_sent_at IS NOT NULL")
            .await,
        100
    );
    let sent = &r.runs[0].sent;
    let cont: Vec<_> = sent.iter().filter(|s| s.message.receiver == F).collect();
    assert_eq!(cont.len(), 1);
    let c = &cont[0].message;
    assert_eq!((c.delay_s, c.envelope.hop), (120, 1));
    assert_eq!(c.envelope.kind, "pat-expiring.run");
    assert_eq!(c.envelope.payload, json!({}));
    let run_id = c.envelope.run_id.clone();
    assert_eq!(c.envelope.message_key, format!("pat-expiring:{run_id}:1"));
    // Invocation 2, given that message: the next page.
    let (log2, _g) = capture();
    let mut r2 = db
        .runner_with(t("2025-03-10T01:02:00Z"), zero_budget())
        .with_notifier(log_notifier().await);
    r2.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    assert_eq!(log2.done()["status"], "limit_reached");
    assert_eq!(log2.done()["total_user_tokens_marked"], 100);
    let next = r2.runs[0]
        .sent
        .iter()
        .find(|s| s.message.receiver == F)
        .unwrap();
    assert_eq!(
        next.message.envelope.message_key,
        format!("pat-expiring:{run_id}:2")
    );
    // Until idle: every token marked once, every user emailed once, and the run ends.
    let mut r3 = db
        .runner_with(t("2025-03-10T01:04:00Z"), zero_budget())
        .with_notifier(log_notifier().await);
    r3.run_until_idle(F, &next.message.envelope.to_body())
        .await
        .unwrap();
    assert_eq!(
        db.count("personal_access_tokens WHERE seven_days_notification_sent_at IS NULL")
            .await,
        0
    );
    let mut keys: Vec<String> = [&r.runs, &r2.runs, &r3.runs]
        .iter()
        .flat_map(|runs| runs.iter())
        .flat_map(|run| run.sent.iter())
        .filter(|s| s.message.receiver == D)
        .map(|s| s.message.envelope.message_key.clone())
        .collect();
    assert_eq!(keys.len(), 250);
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 250);
    let last = r3.runs.iter().rfind(|x| x.function == F).unwrap();
    assert_eq!(
        last.report.as_ref().unwrap().to_json()["status"],
        "completed"
    );
}

#[tokio::test]
async fn an_exhausted_budget_with_nothing_to_mark_completes_without_a_continuation() {
    let db = fixture().await;
    tok(&db, 23, 22, "2025-03-15", "T23").await;
    let (r, log) = cron_once_with(&db, zero_budget()).await;
    assert_eq!(log.done()["status"], "completed");
    assert_eq!(log.done()["total_resource_bot_without_membership"], 1);
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn the_deadline_guard_stops_after_one_unit_and_continues() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    tok(&db, 2, 12, "2025-03-13", "b").await;
    // A margin larger than the function's timeout: the guard fires at once, but only
    // after the first user whose claim marked tokens.
    let settings = Settings {
        deadline_margin: Duration::from_secs(10_000),
        ..Settings::default()
    };
    let (r, log) = cron_once_with(&db, settings).await;
    assert_eq!(log.done()["status"], "limit_reached");
    assert_eq!(log.done()["total_user_tokens_marked"], 1);
    assert!(marks(&db, 1).await.0);
    assert!(!marks(&db, 2).await.0);
    let c = r.runs[0]
        .sent
        .iter()
        .find(|s| s.message.receiver == F)
        .unwrap();
    assert_eq!((c.message.delay_s, c.message.envelope.hop), (120, 1));
}

#[tokio::test]
async fn the_hop_limit_ends_the_run_without_a_continuation() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    tok(&db, 2, 12, "2025-03-13", "b").await;
    let (log, _g) = capture();
    let mut r = db
        .runner_with(t(NOW), zero_budget())
        .with_notifier(log_notifier().await);
    let mut env = r.cron_message(F);
    env.hop = 100;
    env.message_key = format!("pat-expiring:{}:100", env.run_id);
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(
        (l["hop"].as_i64(), l["max_hops"].as_i64()),
        (Some(100), Some(100))
    );
    assert!(r.runs[0].sent.iter().all(|s| s.message.receiver == D));
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn an_overlapping_run_is_skipped() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    let holder = db.session().await;
    holder
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&shared::locks::lock_key("function:pat-expiring")],
        )
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert!(r.runs[0].sent.is_empty());
    assert!(!marks(&db, 1).await.0);
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

#[tokio::test]
async fn a_second_run_the_same_day_sends_nothing_and_a_lost_commit_repeats_the_same_keys() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 12, "2025-04-20", "sixty").await;
    let (r1, _) = cron_once(&db).await;
    let keys = |r: &Runner| -> Vec<String> {
        let mut k: Vec<String> = r.runs[0]
            .sent
            .iter()
            .map(|s| s.message.envelope.message_key.clone())
            .collect();
        k.sort();
        k
    };
    let first = keys(&r1);
    assert_eq!(first.len(), 5, "{first:?}");
    let (r2, log2) = cron_once(&db).await;
    assert!(r2.runs[0].sent.is_empty());
    assert_eq!(log2.done()["total_user_tokens_marked"], 0);
    // A COMMIT that failed after the send leaves the tokens unmarked: the next run
    // generates the same notices under the same keys (behaviour §B28.11).
    db.exec(
        "UPDATE personal_access_tokens SET seven_days_notification_sent_at = NULL,
           sixty_days_notification_sent_at = NULL, expire_notification_delivered = false",
    )
    .await;
    let (r3, _) = cron_once(&db).await;
    assert_eq!(keys(&r3), first);
}

#[tokio::test]
async fn a_user_whose_tokens_are_locked_elsewhere_fails_alone_and_the_page_goes_on() {
    // The page is claimed in one transaction: the lock makes its set-based claim fail,
    // then each user runs in a savepoint of its own, so only U12 fails.
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 12, "2025-03-16", "other").await;
    tok(&db, 3, 14, "2025-03-15", "third").await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM personal_access_tokens WHERE id = 2 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let connector = shared::db::Connector::from_url(&db.url)
        .unwrap()
        .with_lock_timeout_ms(150);
    let mut r =
        Runner::new(connector, Settings::default(), t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(marks(&db, 1).await, (true, false, false, true));
    assert_eq!(marks(&db, 2).await, (false, false, false, false));
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    let mut keys: Vec<&str> = emails(&r.runs[0].sent)
        .iter()
        .map(|e| e.message_key.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "pat-expiring:seven_days:user:10:2025-03-10",
            "pat-expiring:seven_days:user:14:2025-03-10"
        ]
    );
    let e = log.one("Failed to send notification about expiring personal access tokens");
    assert_eq!(
        (e["user_id"].as_i64(), e["error_class"].as_str()),
        (Some(12), Some("db"))
    );
    let d = done_totals(&log);
    assert_eq!(
        (
            d["user_tokens"].as_i64(),
            d["user_emails"].as_i64(),
            d["user_failures"].as_i64()
        ),
        (Some(2), Some(2), Some(1))
    );
    assert_eq!(d["status"], "completed");
    // One send call for the page's two emails.
    assert_eq!(r.queue().send_calls(), 1);
}

#[tokio::test]
async fn a_page_of_users_sends_its_emails_in_calls_of_ten() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT g, 'p' || g, 'p' || g || '@example.com', 'active', 0 FROM generate_series(1000, 1024) g;
         INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, 't' || g, '2025-03-14', '2025-01-01', '2025-01-01', 1 FROM generate_series(1000, 1024) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(log.done()["total_user_emails_enqueued"], 25);
    assert_eq!(emails(&r.runs[0].sent).len(), 25);
    assert_eq!(r.queue().send_calls(), 3);
    assert_eq!(
        log.with_message("Notifying User about expiring tokens")
            .len(),
        25
    );
}

#[tokio::test]
async fn a_bot_whose_token_is_locked_elsewhere_fails_alone_and_the_other_bot_is_notified() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    Fx(&db)
        .members(&[M::gm(24, 101, 21, 30), M::gm(25, 101, 15, 50)])
        .await;
    tok(&db, 21, 21, "2025-03-15", "T21").await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM personal_access_tokens WHERE id = 20 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let connector = shared::db::Connector::from_url(&db.url)
        .unwrap()
        .with_lock_timeout_ms(150);
    let mut r =
        Runner::new(connector, Settings::default(), t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(marks(&db, 20).await, (false, false, false, false));
    assert_eq!(marks(&db, 21).await, (true, false, false, true));
    let keys: Vec<&str> = r.runs[0]
        .sent
        .iter()
        .map(|s| s.message.envelope.message_key.as_str())
        .collect();
    assert!(keys.iter().all(|k| k.contains(":bot:21:")), "{keys:?}");
    assert_eq!(
        emails(&r.runs[0].sent)[0].message_key,
        "pat-expiring:seven_days:bot:21:recipient:15:2025-03-10"
    );
    let e = log.one("Failed to send notification about expiring resource access tokens");
    assert_eq!(
        (e["user_id"].as_i64(), e["error_class"].as_str()),
        (Some(20), Some("db"))
    );
    let d = done_totals(&log);
    assert_eq!(
        (d["bots"].as_i64(), d["bot_failures"].as_i64()),
        (Some(1), Some(1))
    );
}
