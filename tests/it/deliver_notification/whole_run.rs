//! pat-expiring and deliver-notification together: the whole run twice with every
//! message delivered twice yields one notice each under one key (and no secret of the
//! fixture in any log line); the sample events of both functions through the Lambda
//! glue.

use super::*;

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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            allow_local: true,
            network: net.clone(),
            ..Wiring::default()
        },
    )
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
    use crate::handle_event_with;
    use lambda_runtime::{Context, LambdaEvent};
    use shared::handlers::{self, Dispatch};
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    scenario7(&db, &rx.url("/hook"), None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    let queue = engine::local_queue::LocalQueue::new(t(NOW));
    let deps = |function| {
        integration_tests::environment(function, &db.url, t(NOW))
            .queue(Arc::new(queue.clone()))
            .build()
    };
    // What pat-expiring's cold start builds: the instance alone.
    let cfg = notify_config(&[]);
    let batch = Dispatch::new()
        .with::<handlers::PatExpiring>(shared::notify::Instance::from_config(&cfg).unwrap());
    // Lambda's remaining time: five minutes (a zero deadline would stop after one unit).
    let mut ctx = Context::default();
    ctx.deadline = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 300_000) as u64;
    let (log, _g) = capture();
    let resp = handle_event_with(
        &batch,
        &deps(F),
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
    let n = notifier(
        &db,
        &Wiring {
            smtp: Some((sink.port, "starttls")),
            allow_local: true,
            ..Wiring::default()
        },
    )
    .await;
    let resp = handle_event_with(
        &Dispatch::new().with::<handlers::DeliverNotification>(n),
        &deps(D),
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
    let resp = handle_event_with(
        &Dispatch::new(),
        &deps(D),
        LambdaEvent::new(
            event("events/deliver-notification.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert_eq!(resp.batch_item_failures.len(), 2);
}
