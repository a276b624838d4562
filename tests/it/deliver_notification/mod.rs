//! deliver-notification (B28's child) against real local servers: an SMTP sink speaking
//! STARTTLS (and implicit TLS) with a throwaway certificate, and an HTTP(S) receiver
//! on 127.0.0.1. Scenarios 14 and 15 of behaviour §B28.12, the email outcomes,
//! target safety, the whole run delivered twice, and a full-run search of every log
//! line for the fixture's secrets. By concern:
//!
//! * `email`: the email as sent over SMTP, its outcomes, the file and log transports.
//! * `webhook`: the web hook as posted, back-off, target safety, redirects, timeouts,
//!   certificates, stale hooks.
//! * `rules`: rendering, `Message-ID`s, target and back-off rules, hook URL keys.
//! * `ssrf`: every spelling of a refused target on the real client and resolver.
//! * `whole_run`: pat-expiring and every delivery twice; the sample events through the
//!   Lambda glue.
//!
//! Here: how a delivery test is wired (the notifier), one delivery, and a hook's state.
//! The fixture and the batch come from `crate::pat_expiring`.

use std::sync::Arc;
use std::time::Duration;

use engine::local::Runner;
use engine::local_queue::SentRecord;
use integration_tests::logs::{capture, Captured};
use integration_tests::sinks::certs::TestCa;
use integration_tests::sinks::http::HttpReceiver;
use integration_tests::sinks::net::TestNetwork;
use integration_tests::sinks::smtp::{SinkTls, SmtpSink};
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::messages::Envelope;
use shared::notify::webhook::WebhookClient;
use shared::notify::Notifier;
use shared::runtime::RecordOutcome;

use crate::pat_expiring::{
    cron_once, emails, fixture, hook, notify_config, scenario7, t20_body, tok, webhooks, On, D, F,
    NOW, TEST_KEY,
};

mod email;
mod rules;
mod ssrf;
mod webhook;
mod whole_run;

const SMTP_USER: &str = "mailer";

const SMTP_PASSWORD: &str = "smtp-pa55word";

/// How a delivery test is wired.
struct Wiring {
    smtp: Option<(u16, &'static str)>,
    /// GitLab's `allow_local_requests_from_web_hooks_and_services`, set in the
    /// database by [`notifier`] (the receivers listen on 127.0.0.1).
    allow_local: bool,
    timeout_s: u64,
    network: Arc<TestNetwork>,
    extra: Vec<(&'static str, String)>,
}

impl Default for Wiring {
    fn default() -> Self {
        Wiring {
            smtp: None,
            allow_local: false,
            timeout_s: 5,
            network: Arc::new(TestNetwork::new()),
            extra: Vec::new(),
        }
    }
}

/// A notifier for delivery tests: SMTP to the sink (trusting the test CA through
/// `SMTP_CA_BUNDLE`), web hooks through the test network with the test CA trusted;
/// GitLab's local-requests setting in `db` as the wiring says.
async fn notifier(db: &TestDb, w: &Wiring) -> Arc<Notifier> {
    Fx(db).local_web_hooks(w.allow_local).await;
    let mut extra: Vec<(&str, String)> = vec![("WEBHOOK_TIMEOUT_S", w.timeout_s.to_string())];
    if let Some((port, tls)) = w.smtp {
        extra.extend([
            ("EMAIL_TRANSPORT", "smtp".to_string()),
            ("SMTP_HOST", "127.0.0.1".to_string()),
            ("SMTP_PORT", port.to_string()),
            ("SMTP_TLS", tls.to_string()),
            ("SMTP_USERNAME", SMTP_USER.to_string()),
            ("SMTP_PASSWORD", SMTP_PASSWORD.to_string()),
        ]);
        if tls != "none" {
            extra.push((
                "SMTP_CA_BUNDLE",
                TestCa::get().write_bundle().to_string_lossy().into_owned(),
            ));
        }
    }
    extra.extend(w.extra.iter().cloned());
    let cfg = notify_config(&extra);
    let mut n = Notifier::full(&cfg, None).await.unwrap();
    let d = &mut n.delivery;
    d.webhooks = WebhookClient::new(
        Duration::from_secs(w.timeout_s),
        cfg.webhook_local_network,
        &[TestCa::get().native()],
    )
    .unwrap()
    .with_network(w.network.clone());
    Arc::new(n)
}

/// Deliver one message through deliver-notification; returns the outcome and the log.
async fn deliver(db: &TestDb, n: &Arc<Notifier>, env: &Envelope) -> (RecordOutcome, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(n.clone());
    let (_, outcome) = r.invoke(D, &env.to_body(), 1).await.unwrap();
    (outcome, log)
}

async fn hook_state(db: &TestDb, id: i64) -> (i16, Option<chrono::DateTime<chrono::Utc>>) {
    let r = db
        .client
        .query_one(
            "SELECT recent_failures, disabled_until FROM web_hooks WHERE id = $1",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}
