//! pat-expiring (B28): every acceptance scenario of behaviour §B28.12 that concerns the
//! batch (1–13, 16), plus interval boundaries, the deadline guard, the hop limit, the
//! overlap lock and repeated runs. Delivery is in `crate::deliver_notification`, which
//! shares this fixture. By concern:
//!
//! * `human_tokens`: one email per user and interval, naming the tokens; which tokens
//!   are marked, excluded or paged.
//! * `bot_tokens`: resource access tokens: web hooks and emails to the bot's project or
//!   group owners and maintainers.
//! * `continuation`: the budget, the deadline guard and the hop limit.
//! * `concurrency`: tokens claimed or locked by other sessions, overlapping and
//!   repeated runs.
//!
//! Here: the fixture, tokens, hooks, the notifier configuration, one cron invocation,
//! the messages a run sent, token marks and the done line's totals.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use engine::local::Runner;
use engine::local_queue::SentRecord;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::{capture, Captured};
use integration_tests::{t, Fx, TestDb};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::messages::Envelope;
use shared::notify::{Notifier, NotifyConfig};
use shared::Function;

mod bot_tokens;
mod concurrency;
mod continuation;
mod human_tokens;

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
