//! Email delivery (behaviour §B28.12, scenario 14): over STARTTLS or implicit TLS (or,
//! only with `SMTP_TLS=none`, a plain relay; never a silent downgrade) with
//! the spec's headers, body and Message-ID, whatever the display name; a bot's email
//! links the resource token settings; a 5xx rejection is final, 4xx and TLS failures
//! are retried; a recipient blocked since the claim is skipped; the file and log
//! transports; a dry run sends nothing.

use super::*;
use crate::assert::assert_fields;

fn owned(sent: &[SentRecord], kind: &str) -> Vec<Envelope> {
    sent.iter()
        .map(|s| s.message.envelope.clone())
        .filter(|e| e.kind == kind)
        .collect()
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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            ..Wiring::default()
        },
    )
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
    assert_fields(
        &log.one("Email delivered"),
        json!({"user_id": 10, "template": "access_token_about_to_expire"}),
    );
    assert_eq!(log.done()["status"], "completed");
}

#[tokio::test]
async fn a_display_name_with_line_breaks_controls_a_thousand_characters_or_non_ascii_is_delivered()
{
    let db = fixture().await;
    let env = human_email(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            ..Wiring::default()
        },
    )
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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "implicit")),
            ..Wiring::default()
        },
    )
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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            ..Wiring::default()
        },
    )
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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            ..Wiring::default()
        },
    )
    .await;
    sink.reject("u10@", 550);
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success(), "a 5xx is not retried");
    assert_fields(
        &log.one("Email rejected"),
        json!({"user_id": 10, "smtp_code": 550, "level": "error"}),
    );
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
    let n2 = notifier(
        &db,
        &Wiring {
            smtp: Some((sink2.port, "starttls")),
            ..Wiring::default()
        },
    )
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
    let untrusted = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            extra: vec![("SMTP_CA_BUNDLE", {
                let other = TestCa::new();
                other.write_bundle().to_string_lossy().into_owned()
            })],
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, _) = deliver(&db, &untrusted, &env).await;
    assert!(
        matches!(outcome, RecordOutcome::Retryable { ref error_class, .. } if error_class == "smtp")
    );
    // Nothing listening: retryable.
    drop(sink2);
    let closed = notifier(
        &db,
        &Wiring {
            smtp: Some((1, "starttls")),
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, _) = deliver(&db, &closed, &env).await;
    assert!(!outcome.is_success());
}

#[tokio::test]
async fn a_plain_relay_is_used_only_with_smtp_tls_none_and_never_as_a_downgrade() {
    let db = fixture().await;
    let env = human_email(&db).await;
    let relay = SmtpSink::start(SinkTls::Plain).await;
    // SMTP_TLS=none: delivered without TLS, the credentials in plain text as GitLab
    // would send them, and a warning at start saying so.
    let (start, g) = capture();
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((relay.port, "none")),
            ..Wiring::default()
        },
    )
    .await;
    drop(g);
    assert_fields(
        &start.one("SMTP_TLS=none with credentials: the SMTP password is sent in plain text"),
        json!({"level": "warn", "variable": "SMTP_TLS"}),
    );
    assert!(!start.dump().contains(SMTP_PASSWORD));
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success(), "{outcome:?}");
    log.one("Email delivered");
    let got = relay.received();
    assert_eq!(got.len(), 1);
    assert!(!got[0].tls, "no TLS with SMTP_TLS=none");
    assert_eq!(
        got[0].auth,
        Some((SMTP_USER.to_string(), SMTP_PASSWORD.to_string()))
    );
    assert!(got[0].text().contains("expire in 7 days or less"));
    // STARTTLS configured (the default) and the relay offers none: refused with a
    // clear, retryable error; it connected, and nothing went out in plain text.
    for (tls, says) in [
        ("starttls", "offers no STARTTLS"),
        ("implicit", "TLS failure"),
    ] {
        let strict = notifier(
            &db,
            &Wiring {
                smtp: Some((relay.port, tls)),
                ..Wiring::default()
            },
        )
        .await;
        let before = relay.connections();
        let (outcome, log) = deliver(&db, &strict, &env).await;
        match outcome {
            RecordOutcome::Retryable {
                error_class, error, ..
            } => {
                assert_eq!(error_class, "smtp", "{tls}");
                assert!(error.contains(says), "{tls}: {error}");
            }
            other => panic!("{tls}: expected a retryable failure, got {other:?}"),
        }
        assert!(log.dump().find("Email delivered").is_none());
        assert_eq!(relay.connections(), before + 1, "{tls}: it did connect");
        assert_eq!(relay.received().len(), 1, "{tls}: nothing sent without TLS");
    }
}

#[tokio::test]
async fn an_email_to_a_recipient_blocked_since_the_claim_is_skipped() {
    let db = fixture().await;
    let env = human_email(&db).await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 10")
        .await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_fields(
        &log.one("Notification skipped: recipient cannot receive notifications"),
        json!({"user_id": 10, "template": "access_token_about_to_expire"}),
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
    let n = notifier(
        &db,
        &Wiring {
            extra: vec![
                ("EMAIL_TRANSPORT", "file".into()),
                ("EMAIL_FILE_DIR", dir.to_string_lossy().into_owned()),
            ],
            ..Wiring::default()
        },
    )
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
    let n = notifier(&db, &Wiring::default()).await; // EMAIL_TRANSPORT=log
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_fields(
        &log.one("Email (log transport)"),
        json!({
            "subject": "Your personal access tokens will expire in 7 days or less",
            "user_id": 10
        }),
    );
    assert!(!log.dump().contains("u10@example.com"));
}

#[tokio::test]
async fn a_dry_run_sends_no_email_and_makes_no_request() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", Some("s3cr3t")).await;
    let (r, _) = cron_once(&db).await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let net = Arc::new(TestNetwork::new());
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            network: net.clone(),
            ..Wiring::default()
        },
    )
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
