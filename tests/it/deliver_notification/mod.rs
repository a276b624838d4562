//! B28 deliver-notification against real local servers: an SMTP sink speaking
//! STARTTLS (and implicit TLS) with a throwaway certificate, and an HTTP(S) receiver
//! on 127.0.0.1. Scenarios 14 and 15 of behaviour §B28.12, the email outcomes,
//! target safety, the whole run delivered twice, and a full-run search of every log
//! line for the fixture's secrets.

use std::sync::Arc;
use std::time::Duration;

use hk::local::Runner;
use hk::local_queue::SentRecord;
use integration_tests::sinks::certs::TestCa;
use integration_tests::sinks::http::HttpReceiver;
use integration_tests::sinks::net::TestNetwork;
use integration_tests::sinks::smtp::{SinkTls, SmtpSink};
use integration_tests::{t, Fx, TestDb};
use shared::messages::Envelope;
use shared::notify::webhook::WebhookClient;
use shared::notify::Notifier;
use shared::runtime::RecordOutcome;
use shared::telemetry::{capture, Captured};

use crate::pat_expiring::{
    cron_once, emails, fixture, hook, notify_config, scenario7, t20_body, tok, webhooks, On, D, F,
    NOW, TEST_KEY,
};

mod ssrf;

const SMTP_USER: &str = "mailer";
const SMTP_PASSWORD: &str = "smtp-pa55word";

/// How a delivery test is wired.
struct Wiring {
    smtp: Option<(u16, &'static str)>,
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
/// `SMTP_CA_BUNDLE`), web hooks through the test network with the test CA trusted.
async fn notifier(w: &Wiring) -> Arc<Notifier> {
    let mut extra: Vec<(&str, String)> = vec![
        ("WEBHOOK_TIMEOUT_S", w.timeout_s.to_string()),
        ("WEBHOOK_ALLOW_LOCAL_NETWORK", w.allow_local.to_string()),
    ];
    if let Some((port, tls)) = w.smtp {
        extra.extend([
            ("EMAIL_TRANSPORT", "smtp".to_string()),
            ("SMTP_HOST", "127.0.0.1".to_string()),
            ("SMTP_PORT", port.to_string()),
            ("SMTP_TLS", tls.to_string()),
            ("SMTP_USERNAME", SMTP_USER.to_string()),
            ("SMTP_PASSWORD", SMTP_PASSWORD.to_string()),
            (
                "SMTP_CA_BUNDLE",
                TestCa::get().write_bundle().to_string_lossy().into_owned(),
            ),
        ]);
    }
    extra.extend(w.extra.iter().cloned());
    let cfg = notify_config(&extra);
    let mut n = Notifier::full(&cfg, None).await.unwrap();
    let d = n.delivery.as_mut().unwrap();
    d.webhooks = WebhookClient::new(
        Duration::from_secs(w.timeout_s),
        w.allow_local,
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

fn owned(sent: &[SentRecord], kind: &str) -> Vec<Envelope> {
    sent.iter()
        .map(|s| s.message.envelope.clone())
        .filter(|e| e.kind == kind)
        .collect()
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

/// Scenario 1's email message (U10: 'deploy', 'ci').
async fn human_email(db: &TestDb) -> Envelope {
    tok(db, 1, 10, "2025-03-17", "ci").await;
    tok(db, 2, 10, "2025-03-12", "deploy").await;
    let (r, _) = cron_once(db).await;
    emails(&r.runs[0].sent)[0].clone()
}

#[tokio::test]
async fn an_email_goes_over_starttls_with_the_spec_headers_body_and_message_id() {
    let db = fixture().await;
    db.exec("UPDATE users SET name = 'Ada Lovelace', notification_email = 'ada.alerts@example.com' WHERE id = 10")
        .await;
    let env = human_email(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let got = sink.received();
    assert_eq!(got.len(), 1);
    let m = &got[0];
    assert!(m.tls, "the message went over TLS");
    assert_eq!(
        m.auth,
        Some((SMTP_USER.to_string(), SMTP_PASSWORD.to_string()))
    );
    assert_eq!(m.mail_from, "gitlab@gitlab.example.com");
    assert_eq!(m.rcpt_to, vec!["ada.alerts@example.com".to_string()]);
    assert_eq!(
        m.header("Subject").unwrap(),
        "Your personal access tokens will expire in 7 days or less"
    );
    let expected_id =
        shared::notify::mail::message_id("pat-expiring:seven_days:user:10:2025-03-10", &n.instance);
    assert_eq!(m.header("Message-ID").unwrap(), format!("<{expected_id}>"));
    assert!(m.header("Date").is_some());
    assert!(m
        .header("From")
        .unwrap()
        .contains("gitlab@gitlab.example.com"));
    assert!(m.header("To").unwrap().contains("ada.alerts@example.com"));
    let body = m.text().replace("\r\n", "\n");
    assert!(body.contains("Hi Ada Lovelace!"), "{body}");
    assert!(body.contains("expire in 7 days or less"));
    assert!(body.contains("- deploy\n- ci\n"));
    assert!(body.contains("https://gitlab.example.com/-/user_settings/personal_access_tokens"));
    let l = log.one("Email delivered");
    assert_eq!(
        (l["user_id"].as_i64(), l["template"].as_str()),
        (Some(10), Some("access_token_about_to_expire"))
    );
    assert_eq!(log.done()["status"], "completed");
}

#[tokio::test]
async fn a_display_name_with_line_breaks_controls_a_thousand_characters_or_non_ascii_is_delivered()
{
    let db = fixture().await;
    let env = human_email(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    let long_ascii = "Eve ".repeat(300);
    let long_word = "é".repeat(1200);
    let names: Vec<(String, String)> = vec![
        ("Eve\nSubject: x".into(), "Eve Subject: x".into()),
        (
            "Eve\rBcc: mallory@example.com".into(),
            "Eve Bcc: mallory@example.com".into(),
        ),
        ("Eve\r\n\r\nbody".into(), "Eve body".into()),
        (
            "\tEve\u{7f}\u{85}\u{2028}Adams\u{1b}[31m".into(),
            "Eve Adams [31m".into(),
        ),
        ("Ève Zoë 山田 😀".into(), "Ève Zoë 山田 😀".into()),
        // Cut to 255 characters (GitLab's limit), so even one long word fits a line.
        (long_ascii.clone(), "Eve ".repeat(64).trim_end().to_string()),
        (long_word.clone(), "é".repeat(255)),
    ];
    for (i, (name, greeted)) in names.iter().enumerate() {
        db.client
            .execute("UPDATE users SET name = $1 WHERE id = 10", &[name])
            .await
            .unwrap();
        let (outcome, log) = deliver(&db, &n, &env).await;
        assert!(
            outcome.is_success(),
            "{name:?}: {outcome:?}\n{}",
            log.dump()
        );
        log.one("Email delivered");
        let got = sink.received();
        assert_eq!(got.len(), i + 1, "{name:?}");
        let m = &got[i];
        let head = m.data.split("\r\n\r\n").next().unwrap();
        for line in head.split("\r\n") {
            assert!(line.len() <= 998, "{name:?}: header line of {}", line.len());
            assert!(!line.starts_with("Bcc"), "{name:?}: injected {line}");
        }
        assert_eq!(
            m.header("Subject").unwrap(),
            "Your personal access tokens will expire in 7 days or less"
        );
        assert_eq!(m.rcpt_to.len(), 1, "{name:?}");
        let body = m.text().replace("\r\n", "\n");
        assert!(
            body.starts_with(&format!("Hi {greeted}!\n")),
            "{name:?}: {body}"
        );
    }
}

#[tokio::test]
async fn implicit_tls_delivers_to_the_plain_address_when_no_notification_email_is_set() {
    let db = fixture().await;
    db.exec("UPDATE users SET name = NULL, notification_email = '' WHERE id = 10")
        .await;
    let env = human_email(&db).await;
    let sink = SmtpSink::start(SinkTls::Implicit).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "implicit")),
        ..Wiring::default()
    })
    .await;
    let (outcome, _) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let got = sink.received();
    assert_eq!(got.len(), 1);
    assert!(got[0].tls);
    assert_eq!(got[0].rcpt_to, vec!["u10@example.com".to_string()]);
    // No display name: the greeting uses the username.
    assert!(got[0].text().contains("Hi u10!"));
}

#[tokio::test]
async fn a_bot_email_links_the_resource_token_settings() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    let (r, _) = cron_once(&db).await;
    let env = emails(&r.runs[0].sent)[1].clone();
    assert_eq!(env.payload["recipient_user_id"], 12);
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    let (outcome, _) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let m = &sink.received()[0];
    assert_eq!(
        m.header("Subject").unwrap(),
        "Your resource access tokens will expire in 7 days or less"
    );
    let body = m.text().replace("\r\n", "\n");
    assert!(body.contains(
        "The access token 'T20' of the project 'acme/web/site' expires in 7 days or less."
    ));
    assert!(body.contains("https://gitlab.example.com/acme/web/site/-/settings/access_tokens"));
    assert_eq!(m.rcpt_to, vec!["u12@example.com".to_string()]);
}

#[tokio::test]
async fn a_5xx_rejection_is_logged_and_final_while_4xx_and_tls_failures_are_retried() {
    let db = fixture().await;
    let env = human_email(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    sink.reject("u10@", 550);
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success(), "a 5xx is not retried");
    let l = log.one("Email rejected");
    assert_eq!(
        (l["user_id"].as_i64(), l["smtp_code"].as_i64()),
        (Some(10), Some(550))
    );
    assert_eq!(l["level"], "error");
    assert!(sink.received().is_empty());
    // An address no message can carry is final too, without a code.
    db.exec("UPDATE users SET notification_email = 'not an address' WHERE id = 10")
        .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let l = log.one("Email rejected");
    assert!(l.get("smtp_code").is_none() && !log.dump().contains("not an address"));
    db.exec("UPDATE users SET notification_email = NULL WHERE id = 10")
        .await;
    // 4xx: retryable, and the log carries the code, never the server's text.
    let sink2 = SmtpSink::start(SinkTls::StartTls).await;
    sink2.reject("u10@", 451);
    let n2 = notifier(&Wiring {
        smtp: Some((sink2.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n2, &env).await;
    match outcome {
        RecordOutcome::Retryable {
            error_class, error, ..
        } => {
            assert_eq!(error_class, "smtp");
            assert!(error.contains("451") && !error.contains("u10@"), "{error}");
        }
        other => panic!("expected a retryable failure, got {other:?}"),
    }
    assert!(log.dump().find("u10@example.com").is_none());
    // A server whose certificate is not trusted: a TLS failure, retryable.
    let untrusted = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        extra: vec![("SMTP_CA_BUNDLE", {
            let other = TestCa::new();
            other.write_bundle().to_string_lossy().into_owned()
        })],
        ..Wiring::default()
    })
    .await;
    let (outcome, _) = deliver(&db, &untrusted, &env).await;
    assert!(
        matches!(outcome, RecordOutcome::Retryable { ref error_class, .. } if error_class == "smtp")
    );
    // Nothing listening: retryable.
    drop(sink2);
    let closed = notifier(&Wiring {
        smtp: Some((1, "starttls")),
        ..Wiring::default()
    })
    .await;
    let (outcome, _) = deliver(&db, &closed, &env).await;
    assert!(!outcome.is_success());
}

#[tokio::test]
async fn an_email_to_a_recipient_blocked_since_the_claim_is_skipped() {
    let db = fixture().await;
    let env = human_email(&db).await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 10")
        .await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let l = log.one("Notification skipped: recipient cannot receive notifications");
    assert_eq!(
        (l["user_id"].as_i64(), l["template"].as_str()),
        (Some(10), Some("access_token_about_to_expire"))
    );
    assert_eq!(sink.connections(), 0);
    // A deleted recipient, and one without any address, are skipped the same way.
    db.exec(
        "UPDATE users SET state = 'active', email = '', notification_email = NULL WHERE id = 10",
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    log.one("Notification skipped: recipient cannot receive notifications");
    db.exec("DELETE FROM users WHERE id = 10").await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    log.one("Notification skipped: recipient cannot receive notifications");
    assert_eq!(sink.connections(), 0);
}

#[tokio::test]
async fn the_file_transport_writes_one_eml_per_message_id_and_the_log_transport_only_logs() {
    let db = fixture().await;
    let env = human_email(&db).await;
    let dir = std::env::temp_dir().join(format!("hk-eml-{}", uuid::Uuid::new_v4().simple()));
    let n = notifier(&Wiring {
        extra: vec![
            ("EMAIL_TRANSPORT", "file".into()),
            ("EMAIL_FILE_DIR", dir.to_string_lossy().into_owned()),
        ],
        ..Wiring::default()
    })
    .await;
    for _ in 0..2 {
        let (outcome, _) = deliver(&db, &n, &env).await;
        assert!(outcome.is_success());
    }
    let id = shared::notify::mail::message_id(&env.message_key, &n.instance);
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files, vec![format!("{id}.eml")]);
    let text = std::fs::read_to_string(dir.join(format!("{id}.eml"))).unwrap();
    assert!(text.contains(&format!("Message-ID: <{id}>")));
    assert!(text.contains("u10@example.com"));
    std::fs::remove_dir_all(&dir).unwrap();
    let n = notifier(&Wiring::default()).await; // EMAIL_TRANSPORT=log
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let l = log.one("Email (log transport)");
    assert_eq!(
        l["subject"],
        "Your personal access tokens will expire in 7 days or less"
    );
    assert_eq!(l["user_id"], 10);
    assert!(!log.dump().contains("u10@example.com"));
}

#[tokio::test]
async fn a_dry_run_sends_no_email_and_makes_no_request() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", Some("s3cr3t")).await;
    let (r, _) = cron_once(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let net = Arc::new(TestNetwork::new());
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        network: net.clone(),
        ..Wiring::default()
    })
    .await;
    let mut runner = db.runner(t(NOW)).with_notifier(n);
    for env in owned(&r.runs[0].sent, "deliver-notification.email")
        .into_iter()
        .chain(owned(&r.runs[0].sent, "deliver-notification.webhook"))
    {
        let run = runner.dry_run(D, &env.to_body()).await.unwrap();
        assert_eq!(run.report.unwrap().to_json()["outcome"], "dry_run");
    }
    assert_eq!(sink.connections(), 0);
    assert!(net.connects().is_empty());
    assert_eq!(hook_state(&db, 1).await, (0, None));
}

/// Scenario 7 with H1 at `url` and token `s3cr3t`; returns the webhook message.
async fn h1_message(db: &TestDb, url: &str) -> Envelope {
    scenario7(db, url, Some("s3cr3t")).await;
    let (r, _) = cron_once(db).await;
    webhooks(&r.runs[0].sent)[0].clone()
}

#[tokio::test]
async fn a_webhook_is_posted_with_gitlabs_headers_to_the_pinned_public_address() {
    let db = fixture().await;
    let env = h1_message(&db, "https://hooks.example.com/x").await;
    db.exec("UPDATE web_hooks SET recent_failures = 2 WHERE id = 1")
        .await;
    let leaf = TestCa::get().issue(&["hooks.example.com"], &[]);
    let rx = HttpReceiver::start_tls(&leaf).await;
    let net = Arc::new(TestNetwork::new());
    net.name("hooks.example.com", &["203.0.113.10"])
        .route("203.0.113.10:443", rx.addr);
    let n = notifier(&Wiring {
        network: net.clone(),
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 1);
    let q = &reqs[0];
    assert_eq!((q.method.as_str(), q.path.as_str()), ("POST", "/x"));
    let key = "pat-expiring:seven_days:bot:20:token:20:hook:1";
    let uuid = |k: &str| uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, k.as_bytes()).to_string();
    let mut names: Vec<&str> = q.headers.iter().map(|(k, _)| k.as_str()).collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "content-length",
            "content-type",
            "host",
            "idempotency-key",
            "user-agent",
            "x-gitlab-event",
            "x-gitlab-event-uuid",
            "x-gitlab-instance",
            "x-gitlab-token",
            "x-gitlab-webhook-uuid",
        ]
    );
    assert_eq!(q.header("host"), Some("hooks.example.com"));
    assert_eq!(q.header("content-type"), Some("application/json"));
    assert_eq!(q.header("user-agent"), Some("GitLab/18.0.1"));
    assert_eq!(
        q.header("x-gitlab-event"),
        Some("Resource Access Token Hook")
    );
    assert_eq!(
        q.header("x-gitlab-instance"),
        Some("https://gitlab.example.com")
    );
    assert_eq!(q.header("x-gitlab-token"), Some("s3cr3t"));
    assert_eq!(q.header("idempotency-key"), Some(key));
    assert_eq!(q.header("x-gitlab-webhook-uuid"), Some(uuid(key).as_str()));
    assert_eq!(
        q.header("x-gitlab-event-uuid"),
        Some(uuid("pat-expiring:seven_days:bot:20:token:20").as_str())
    );
    assert_eq!(q.json(), t20_body());
    assert_eq!(q.json(), env.payload["body"]);
    // Pinned: the connection went to the checked public address only.
    assert_eq!(net.connects(), vec!["203.0.113.10:443".parse().unwrap()]);
    assert_eq!(hook_state(&db, 1).await, (0, None));
    let l = log.one("Webhook delivered");
    assert_eq!(
        (l["hook_id"].as_i64(), l["status"].as_i64()),
        (Some(1), Some(200))
    );
    assert!(l["duration_ms"].is_u64());
    assert!(l.get("host").is_none(), "WEBHOOK_LOG_HOST is off");
}

#[tokio::test]
async fn a_disabled_hook_is_skipped_without_a_request() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    let env = h1_message(&db, &rx.url("/x")).await;
    db.exec("UPDATE web_hooks SET recent_failures = 5, disabled_until = '2025-03-10T02:00:00Z' WHERE id = 1")
        .await;
    let n = notifier(&Wiring {
        allow_local: true,
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert!(rx.requests().is_empty());
    let l = log.one("Webhook skipped: hook disabled");
    assert_eq!(
        (l["hook_id"].as_i64(), l["recent_failures"].as_i64()),
        (Some(1), Some(5))
    );
    assert_eq!(l["disabled_until"], "2025-03-10T02:00:00.000000Z");
    // Permanently disabled (more than 3 failures and no end): skipped as well.
    db.exec("UPDATE web_hooks SET recent_failures = 4, disabled_until = NULL WHERE id = 1")
        .await;
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook skipped: hook disabled");
    assert!(rx.requests().is_empty());
    assert_eq!(hook_state(&db, 1).await, (4, None));
}

#[tokio::test]
async fn a_failing_endpoint_backs_the_hook_off_and_is_not_retried() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    rx.respond(500);
    let env = h1_message(&db, &rx.url("/x")).await;
    db.exec("UPDATE web_hooks SET recent_failures = 3 WHERE id = 1")
        .await;
    let n = notifier(&Wiring {
        allow_local: true,
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success(), "HTTP failures are not retried");
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(
        hook_state(&db, 1).await,
        (4, Some(t(NOW) + chrono::Duration::seconds(60)))
    );
    let l = log.one("Webhook delivery failed");
    assert_eq!(
        (l["hook_id"].as_i64(), l["status"].as_i64()),
        (Some(1), Some(500))
    );
    assert_eq!(l["level"], "warn");
    // The hook is now disabled for a minute: the next delivery makes no request.
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook skipped: hook disabled");
    assert_eq!(rx.requests().len(), 1);
}

#[tokio::test]
async fn local_targets_are_refused_unless_allowed_and_the_failure_is_recorded() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    let env = h1_message(
        &db,
        &format!("http://internal.example.com:{}/x", rx.addr.port()),
    )
    .await;
    let net = Arc::new(TestNetwork::new());
    net.name("internal.example.com", &["127.0.0.1"]);
    let n = notifier(&Wiring {
        network: net.clone(),
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert!(rx.requests().is_empty());
    assert!(net.connects().is_empty());
    let l = log.one("Webhook target refused");
    assert_eq!(
        (l["hook_id"].as_i64(), l["reason"].as_str()),
        (Some(1), Some("local_network"))
    );
    assert_eq!(l["level"], "warn");
    assert_eq!(hook_state(&db, 1).await, (1, None));
    // An IPv4-mapped IPv6 address is checked as its IPv4 address.
    net.name("internal.example.com", &["::ffff:127.0.0.1"]);
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    // One public and one private address: refused as a whole.
    net.name("internal.example.com", &["203.0.113.7", "10.0.0.7"]);
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    assert_eq!(hook_state(&db, 1).await, (3, None));
    // Explicitly allowed (test configuration): delivered to the real local receiver.
    net.name("internal.example.com", &["127.0.0.1"]);
    let allowed = notifier(&Wiring {
        allow_local: true,
        network: net.clone(),
        extra: vec![("WEBHOOK_LOG_HOST", "true".into())],
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &allowed, &env).await;
    assert!(outcome.is_success());
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(
        rx.requests()[0].header("host").unwrap(),
        format!("internal.example.com:{}", rx.addr.port())
    );
    assert_eq!(log.one("Webhook delivered")["host"], "internal.example.com");
    assert_eq!(hook_state(&db, 1).await, (0, None));
}

#[tokio::test]
async fn metadata_literals_and_bad_schemes_are_refused() {
    let db = fixture().await;
    let env = h1_message(&db, "http://169.254.169.254/latest/meta-data/").await;
    let n = notifier(&Wiring::default()).await;
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    db.exec("DELETE FROM web_hooks").await;
    hook(
        &db,
        1,
        On::Project(200),
        true,
        "ftp://hooks.example.com/x",
        None,
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_eq!(log.one("Webhook target refused")["reason"], "invalid_url");
    assert_eq!(hook_state(&db, 1).await, (1, None));
}

#[tokio::test]
async fn redirects_are_not_followed_and_count_as_success() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    rx.respond(302);
    let env = h1_message(&db, &rx.url("/x")).await;
    db.exec("UPDATE web_hooks SET recent_failures = 1 WHERE id = 1")
        .await;
    let n = notifier(&Wiring {
        allow_local: true,
        ..Wiring::default()
    })
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_eq!(rx.requests().len(), 1, "the Location was not followed");
    assert_eq!(log.one("Webhook delivered")["status"], 302);
    assert_eq!(hook_state(&db, 1).await, (0, None));
}

#[tokio::test]
async fn a_slow_endpoint_times_out_and_counts_as_a_failure() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    // The endpoint answers only after a minute; the client gives up after one second.
    let answer_after = Duration::from_secs(60);
    rx.delay(answer_after);
    let env = h1_message(&db, &rx.url("/x")).await;
    let n = notifier(&Wiring {
        allow_local: true,
        timeout_s: 1,
        ..Wiring::default()
    })
    .await;
    let started = std::time::Instant::now();
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(
        started.elapsed() < answer_after,
        "the delivery waited for the answer instead of timing out"
    );
    assert!(outcome.is_success());
    assert_eq!(log.one("Webhook delivery failed")["error_class"], "timeout");
    assert_eq!(hook_state(&db, 1).await, (1, None));
}

#[tokio::test]
async fn certificates_are_verified_unless_the_hook_disables_verification() {
    let db = fixture().await;
    let env = h1_message(&db, "https://hooks.example.com/x").await;
    let stranger = TestCa::new().issue(&["hooks.example.com"], &[]);
    let rx = HttpReceiver::start_tls(&stranger).await;
    let net = Arc::new(TestNetwork::new());
    net.name("hooks.example.com", &["203.0.113.10"])
        .route("203.0.113.10:443", rx.addr);
    let n = notifier(&Wiring {
        network: net.clone(),
        ..Wiring::default()
    })
    .await;
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(log.one("Webhook delivery failed")["error_class"], "tls");
    assert!(rx.requests().is_empty());
    assert_eq!(hook_state(&db, 1).await.0, 1);
    db.exec("UPDATE web_hooks SET enable_ssl_verification = false WHERE id = 1")
        .await;
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook delivered");
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(hook_state(&db, 1).await, (0, None));
}

#[tokio::test]
async fn stale_hooks_are_skipped_and_undecryptable_secrets_are_retried() {
    let db = fixture().await;
    let env = h1_message(&db, "https://hooks.example.com/x").await;
    let n = notifier(&Wiring::default()).await;
    db.exec("UPDATE web_hooks SET resource_access_token_events = false WHERE id = 1")
        .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_eq!(
        log.one("Webhook skipped: hook no longer subscribed")["hook_id"],
        1
    );
    assert_eq!(log.done()["status"], "stale");
    db.exec("UPDATE web_hooks SET resource_access_token_events = true, type = 'ServiceHook' WHERE id = 1")
        .await;
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook skipped: hook no longer subscribed");
    db.exec("DELETE FROM web_hooks WHERE id = 1").await;
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook skipped: hook no longer subscribed");
    // Encrypted with another db_key_base: an error, retryable, nothing recorded.
    let (u, iv) = shared::notify::crypto::encrypt("https://hooks.example.com/x", &"f".repeat(128));
    db.exec(&format!(
        "INSERT INTO web_hooks (id, project_id, type, encrypted_url, encrypted_url_iv, resource_access_token_events)
         VALUES (1, 200, 'ProjectHook', '{u}', '{iv}', true)"
    ))
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    match outcome {
        RecordOutcome::Retryable { error_class, .. } => assert_eq!(error_class, "decrypt"),
        other => panic!("expected retryable, got {other:?}"),
    }
    let l = log.one("Webhook secret decryption failed");
    assert_eq!(
        (l["hook_id"].as_i64(), l["level"].as_str()),
        (Some(1), Some("error"))
    );
    assert_eq!(hook_state(&db, 1).await, (0, None));
}

/// The whole run executed twice, with every message delivered twice: one notice per
/// user per interval and one web hook per bot, each under one stable key, and every
/// repeat carrying the same Message-ID or Idempotency-Key. Also the full-run log
/// search for every secret of the fixture.
#[tokio::test]
async fn the_whole_run_twice_with_every_message_delivered_twice_yields_one_notice_each() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    let hook_url = format!(
        "http://hooks.internal.example.com:{}/x?secret=q-s3cr3t",
        rx.addr.port()
    );
    scenario7(&db, &hook_url, Some("s3cr3t-token")).await;
    Fx(&db)
        .members(&[
            integration_tests::fixtures::M::gm(24, 101, 21, 30),
            integration_tests::fixtures::M::gm(25, 101, 15, 50),
        ])
        .await;
    tok(&db, 21, 21, "2025-04-15", "T21").await;
    hook(&db, 3, On::Group(100), true, &hook_url, None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 10, "2025-03-25", "later").await;
    tok(&db, 3, 13, "2025-03-15", "blocked").await;
    tok(&db, 4, 22, "2025-03-15", "orphan").await;
    db.exec("UPDATE users SET notification_email = 'u10.alerts@example.com' WHERE id = 10")
        .await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let net = Arc::new(TestNetwork::new());
    net.name("hooks.internal.example.com", &["127.0.0.1"]);
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        allow_local: true,
        network: net.clone(),
        ..Wiring::default()
    })
    .await;
    let (log, _g) = capture();
    // Run 1 until idle: pat-expiring and every delivery.
    let mut r = Runner::new(db.connector(), Default::default(), t(NOW)).with_notifier(n.clone());
    let cron = r.cron_message(F).to_body();
    r.run_until_idle(F, &cron).await.unwrap();
    // Run 2, the same day: nothing left to claim.
    let cron = r.cron_message(F).to_body();
    r.run_until_idle(F, &cron).await.unwrap();
    let deliveries: Vec<Envelope> = r
        .runs
        .iter()
        .flat_map(|run| run.sent.iter())
        .filter(|s| s.message.receiver == D)
        .map(|s| s.message.envelope.clone())
        .collect();
    // Every message delivered a second time (duplicate SQS delivery).
    for env in &deliveries {
        let (_, outcome) = r.invoke(D, &env.to_body(), 2).await.unwrap();
        assert!(outcome.is_success());
    }
    assert!(r.runs.iter().all(|x| x.outcome == "success"));
    let mut keys: Vec<&str> = deliveries.iter().map(|e| e.message_key.as_str()).collect();
    keys.sort();
    // U10 seven and thirty; U11, U12 and U15 (owner of G101 through M25) for bot 20,
    // and H1 only (HG3 is a group hook; the resource is P200); U15 for bot 21 (day 36:
    // sixty); nothing for U13 (blocked) or U22 (no membership).
    assert_eq!(
        keys,
        vec![
            "pat-expiring:seven_days:bot:20:recipient:11:2025-03-10",
            "pat-expiring:seven_days:bot:20:recipient:12:2025-03-10",
            "pat-expiring:seven_days:bot:20:recipient:15:2025-03-10",
            "pat-expiring:seven_days:bot:20:token:20:hook:1",
            "pat-expiring:seven_days:user:10:2025-03-10",
            "pat-expiring:sixty_days:bot:21:recipient:15:2025-03-10",
            "pat-expiring:thirty_days:user:10:2025-03-10",
        ]
    );
    // What actually arrived: each notice twice, under one Message-ID each.
    let mails = sink.received();
    assert_eq!(mails.len(), 12);
    let mut ids: Vec<String> = mails
        .iter()
        .map(|m| m.header("Message-ID").unwrap())
        .collect();
    ids.sort();
    let mut distinct = ids.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 6);
    for id in &distinct {
        assert_eq!(ids.iter().filter(|x| *x == id).count(), 2, "{id}");
    }
    let expected: Vec<String> = keys
        .iter()
        .filter(|k| !k.contains(":hook:"))
        .map(|k| format!("<{}>", shared::notify::mail::message_id(k, &n.instance)))
        .collect();
    let mut expected = expected;
    expected.sort();
    assert_eq!(distinct, expected);
    let reqs = rx.requests();
    assert_eq!(reqs.len(), 2);
    assert!(reqs
        .iter()
        .all(|q| q.header("idempotency-key")
            == Some("pat-expiring:seven_days:bot:20:token:20:hook:1")));
    assert_eq!(
        reqs[0].header("x-gitlab-webhook-uuid"),
        reqs[1].header("x-gitlab-webhook-uuid")
    );
    assert_eq!(reqs[0].body, reqs[1].body);
    // The group hook HG3 on G100 is not fired for a project bot.
    assert!(reqs.iter().all(|q| q.path == "/x?secret=q-s3cr3t"));
    // Secrets never reach a log line or a message.
    let secrets = [
        "u10.alerts@example.com",
        "u10@example.com",
        "u11@example.com",
        "u12@example.com",
        "u15@example.com",
        "@example.com",
        "hooks.internal.example.com",
        "q-s3cr3t",
        "s3cr3t-token",
        SMTP_PASSWORD,
        TEST_KEY,
        &TEST_KEY[..32],
        "user_settings/personal_access_tokens",
        "-/settings/access_tokens",
        "Hi User",
    ];
    let text = log.dump();
    assert!(text.contains("Email delivered") && text.contains("Webhook delivered"));
    for s in secrets {
        assert!(!text.contains(s), "`{s}` appears in the log");
        for env in &deliveries {
            assert!(!env.to_body().contains(s), "`{s}` appears in a message");
        }
    }
}

fn event(path: &str) -> aws_lambda_events::event::sqs::SqsEvent {
    let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap()
}

/// The sample events of both functions, through the Lambda glue with the notifier that
/// cold start builds for each.
#[tokio::test]
async fn the_sample_events_of_both_functions_run_through_the_lambda_glue() {
    use crate::handle_event;
    use lambda_runtime::{Context, LambdaEvent};
    use shared::lambda::Deps;
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    scenario7(&db, &rx.url("/hook"), None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let queue = hk::local_queue::LocalQueue::new(t(NOW));
    let config = shared::config::Config::from_lookup(|k| match k {
        "DATABASE_URL" => Some(db.url.clone()),
        "TRANSPORT" => Some("local".into()),
        _ => None,
    })
    .unwrap();
    let deps = |function, notifier| Deps {
        function,
        session: shared::db::Session::new(db.connector(), shared::Function::name(function)),
        config: config.clone(),
        queue: Arc::new(queue.clone()),
        clock: Arc::new(shared::clock::FixedClock(t(NOW))),
        notifier,
    };
    let cfg = notify_config(&[]);
    let batch = Notifier::for_function(F, &cfg, None).await.unwrap();
    assert!(batch.as_ref().unwrap().delivery.is_none());
    // Lambda's remaining time: five minutes (a zero deadline would stop after one unit).
    let mut ctx = Context::default();
    ctx.deadline = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 300_000) as u64;
    let (log, _g) = capture();
    let resp = handle_event(
        &deps(F, batch),
        LambdaEvent::new(event("events/pat-expiring.json"), ctx),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(log.done()["status"], "completed");
    assert_eq!(log.done()["total_user_tokens_marked"], 1);
    let keys: Vec<String> = queue
        .sent()
        .iter()
        .map(|s| s.message.envelope.message_key.clone())
        .collect();
    assert_eq!(keys.len(), 4, "{keys:?}\n{}", log.dump());
    let n = notifier(&Wiring {
        smtp: Some((sink.port, "starttls")),
        allow_local: true,
        ..Wiring::default()
    })
    .await;
    let resp = handle_event(
        &deps(D, Some((*n).clone())),
        LambdaEvent::new(
            event("events/deliver-notification.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(sink.received().len(), 1);
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(rx.requests()[0].json(), t20_body());
    // Without a notifier the B28 functions fail their records, retryably.
    let resp = handle_event(
        &deps(D, None),
        LambdaEvent::new(
            event("events/deliver-notification.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(resp.batch_item_failures.len(), 2);
}
