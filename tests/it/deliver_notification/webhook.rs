//! Web-hook delivery (behaviour §B28.12, scenario 15): posted with GitLab's headers to
//! the pinned public address; a disabled hook is skipped, a failing endpoint backs the
//! hook off; local, metadata and badly-schemed targets are refused; redirects are not
//! followed; a slow endpoint times out; certificates are verified unless the hook says
//! not to; stale hooks are skipped and undecryptable secrets retried.

use super::*;
use crate::assert::assert_fields;

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
    let n = notifier(
        &db,
        &Wiring {
            network: net.clone(),
            ..Wiring::default()
        },
    )
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
    assert_fields(&l, json!({"hook_id": 1, "status": 200}));
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
    let n = notifier(
        &db,
        &Wiring {
            allow_local: true,
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert!(rx.requests().is_empty());
    assert_fields(
        &log.one("Webhook skipped: hook disabled"),
        json!({
            "hook_id": 1,
            "recent_failures": 5,
            "disabled_until": "2025-03-10T02:00:00.000000Z"
        }),
    );
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
    let n = notifier(
        &db,
        &Wiring {
            allow_local: true,
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success(), "HTTP failures are not retried");
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(
        hook_state(&db, 1).await,
        (4, Some(t(NOW) + chrono::Duration::seconds(60)))
    );
    assert_fields(
        &log.one("Webhook delivery failed"),
        json!({"hook_id": 1, "status": 500, "level": "warn"}),
    );
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
    let n = notifier(
        &db,
        &Wiring {
            network: net.clone(),
            ..Wiring::default()
        },
    )
    .await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert!(rx.requests().is_empty());
    assert!(net.connects().is_empty());
    assert_fields(
        &log.one("Webhook target refused"),
        json!({"hook_id": 1, "reason": "local_network", "level": "warn"}),
    );
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
    let allowed = notifier(
        &db,
        &Wiring {
            allow_local: true,
            network: net.clone(),
            extra: vec![("WEBHOOK_LOG_HOST", "true".into())],
            ..Wiring::default()
        },
    )
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
async fn gitlabs_local_requests_setting_decides_per_delivery_and_the_environment_only_narrows_it() {
    let db = fixture().await;
    let rx = HttpReceiver::start().await;
    let env = h1_message(&db, &rx.url("/x")).await;
    // GitLab's default (false): the local receiver is refused, never reached.
    let n = notifier(&db, &Wiring::default()).await;
    let (outcome, log) = deliver(&db, &n, &env).await;
    assert!(outcome.is_success());
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    assert!(rx.requests().is_empty());
    // An administrator allows local requests in GitLab: the same notifier (no cold
    // start) delivers at the next delivery, since the setting is read with the hook.
    Fx(&db).local_web_hooks(true).await;
    let (_, log) = deliver(&db, &n, &env).await;
    log.one("Webhook delivered");
    assert_eq!(rx.requests().len(), 1);
    assert_eq!(hook_state(&db, 1).await, (0, None));
    // GitLab denies every request but its allow list: nothing is requested.
    db.exec("UPDATE application_settings SET deny_all_requests_except_allowed = true")
        .await;
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(
        log.one("Webhook target refused")["reason"],
        "not_on_allow_list"
    );
    assert_eq!(rx.requests().len(), 1);
    db.exec("UPDATE application_settings SET deny_all_requests_except_allowed = false")
        .await;
    // The newest settings row is GitLab's current one: a newer row saying false wins.
    db.exec(
        "INSERT INTO application_settings (allow_local_requests_from_web_hooks_and_services)
         VALUES (false)",
    )
    .await;
    let (_, log) = deliver(&db, &n, &env).await;
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    assert_eq!(rx.requests().len(), 1);
    // WEBHOOK_ALLOW_LOCAL_NETWORK=false narrows it: refused although GitLab allows.
    let narrowed = notifier(
        &db,
        &Wiring {
            allow_local: true,
            extra: vec![("WEBHOOK_ALLOW_LOCAL_NETWORK", "false".into())],
            ..Wiring::default()
        },
    )
    .await;
    let (_, log) = deliver(&db, &narrowed, &env).await;
    assert_eq!(log.one("Webhook target refused")["reason"], "local_network");
    assert_eq!(rx.requests().len(), 1, "the environment narrowed nothing");
    assert_eq!(hook_state(&db, 1).await, (3, None));
    // `true` no longer widens: the configuration is refused at start, naming it.
    let e = shared::notify::NotifyConfig::from_lookup(&|k: &str| {
        (k == "WEBHOOK_ALLOW_LOCAL_NETWORK").then(|| "true".to_string())
    })
    .unwrap_err()
    .to_string();
    assert!(e.contains("WEBHOOK_ALLOW_LOCAL_NETWORK=true"), "{e}");
}

#[tokio::test]
async fn metadata_literals_and_bad_schemes_are_refused() {
    let db = fixture().await;
    let env = h1_message(&db, "http://169.254.169.254/latest/meta-data/").await;
    let n = notifier(&db, &Wiring::default()).await;
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
    let n = notifier(
        &db,
        &Wiring {
            allow_local: true,
            ..Wiring::default()
        },
    )
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
    let n = notifier(
        &db,
        &Wiring {
            allow_local: true,
            timeout_s: 1,
            ..Wiring::default()
        },
    )
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
    let n = notifier(
        &db,
        &Wiring {
            network: net.clone(),
            ..Wiring::default()
        },
    )
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
    let n = notifier(&db, &Wiring::default()).await;
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
    assert_fields(
        &log.one("Webhook secret decryption failed"),
        json!({"hook_id": 1, "level": "error"}),
    );
    assert_eq!(hook_state(&db, 1).await, (0, None));
}
