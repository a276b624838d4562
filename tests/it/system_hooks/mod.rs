//! System hooks of removals (docs/gitlab-differences.md, "System hooks"), end to end on
//! the local runner with a real HTTP receiver: each removal claims one
//! `deliver-notification.webhook` message per `SystemHook` row in its own transaction,
//! and deliver-notification posts GitLab's body and headers after it commits. By
//! concern:
//!
//! * `members`: an expired project and group membership (body and headers compared
//!   with GitLab's builders field by field and in key order), the dry run.
//! * `destroyed`: a destroyed group with a subgroup and a project, a deleted
//!   placeholder user and an expired project bot.
//! * `delivery`: silent mode and GitLab's no-auto-disabling rule, a failing endpoint
//!   retried without undoing the removal, duplicates and a rolled-back removal.
//! * `group_hooks`: EE's group hooks with `GROUP_HOOKS=on` (member, subgroup and
//!   project hooks, their receivers and bodies, the license off, the dry run).
//!
//! Here: the hook rows, the notifier, a run until idle, and the expected body in
//! GitLab's key order.

use std::sync::Arc;

use engine::local::Runner;
use integration_tests::logs::{capture, Captured};
use integration_tests::sinks::http::{HttpReceiver, Request};
use integration_tests::{t, Fx, TestDb};
use serde_json::{json, Value};
use shared::notify::Notifier;
use shared::Function;

use crate::pat_expiring::{notify_config, TEST_KEY};

mod delivery;
mod destroyed;
mod group_hooks;
mod members;

/// `SystemHook` row `id` posting to `url`, with `token` when given.
async fn system_hook(db: &TestDb, id: i64, url: &str, token: Option<&str>) {
    let (eu, eiv) = shared::notify::crypto::encrypt(url, TEST_KEY);
    let (et, etiv) = match token {
        Some(tk) => {
            let (a, b) = shared::notify::crypto::encrypt(tk, TEST_KEY);
            (format!("'{a}'"), format!("'{b}'"))
        }
        None => ("NULL".into(), "NULL".into()),
    };
    db.exec(&format!(
        "INSERT INTO web_hooks (id, type, encrypted_url, encrypted_url_iv, encrypted_token,
                                encrypted_token_iv, created_at, updated_at)
         VALUES ({id}, 'SystemHook', '{eu}', '{eiv}', {et}, {etiv}, '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// A notifier posting to the receivers on 127.0.0.1 (GitLab's local-requests
/// setting on).
async fn notifier(db: &TestDb) -> Arc<Notifier> {
    Fx(db).local_web_hooks(true).await;
    Arc::new(Notifier::full(&notify_config(&[]), None).await.unwrap())
}

/// `function`'s cron message (or `body`) delivered until idle at `now`, every child
/// and delivery included; returns the runner and the log.
async fn until_idle(
    db: &TestDb,
    now: &str,
    function: Function,
    body: Option<String>,
) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(now)).with_notifier(notifier(db).await);
    let body = body.unwrap_or_else(|| r.cron_message(function).to_body());
    r.run_until_idle(function, &body).await.unwrap();
    (r, log)
}

/// The JSON text of `fields` in their order, as GitLab's `to_json` writes a Hash.
fn ordered(fields: &[(&str, Value)]) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{}", json!(k), v))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// The request's body against GitLab's builder output `fields`: field by field, then
/// byte for byte (so the key order too).
fn assert_body(q: &Request, fields: &[(&str, Value)]) {
    assert_fields(q, fields);
    assert_eq!(String::from_utf8(q.body.clone()).unwrap(), ordered(fields));
}

/// The request's body against `fields`, field by field (any order).
fn assert_fields(q: &Request, fields: &[(&str, Value)]) {
    let got = q.json();
    for (k, v) in fields {
        assert_eq!(&got[*k], v, "field {k}");
    }
    assert_eq!(
        got.as_object().unwrap().len(),
        fields.len(),
        "no other field"
    );
}

/// The requests whose body has `event_name`.
fn with_event(reqs: &[Request], event_name: &str) -> Vec<Request> {
    reqs.iter()
        .filter(|q| q.json()["event_name"] == event_name)
        .cloned()
        .collect()
}
