//! Handler fuzz on the demo data: every handler fed plausible payloads with arbitrary
//! fields set to arbitrary (some secret-looking) values never panics, writes only JSON
//! lines and never logs a secret.

use super::*;

/// A payload for `kind`: a plausible valid one (demo ids), with arbitrary fields set
/// to arbitrary values, some of them secret-looking strings.
fn arb_payload(kind: &'static str) -> BoxedStrategy<Value> {
    let base = match kind {
        "remove-expired-members.run" => json!({"cursor": {"expires_at": "2025-03-01", "id": 1}}),
        "adjourned-group-deletion.run" => json!({"cursor": {"group_id": 1, "index": 0}}),
        "placeholder-user-cleanup.run" => json!({"cursor": {"detail_id": 1, "index": 1}}),
        "group-destroy.run" => {
            json!({"group_id": 4100, "user_id": 1, "marked_for_deletion_on": "2025-03-01"})
        }
        "delete-placeholder-user.run" => json!({"placeholder_user_id": 7001, "attempt": 1}),
        "delete-user.run" => json!({"user_id": 20, "initiator_user_id": null, "reason": null}),
        "deliver-notification.email" => json!({"template": "access_token_about_to_expire",
            "recipient_user_id": 6010, "days_to_expire": 7, "token_names": ["a"],
            "bot_user_id": 6020, "token_name": "t", "resource_type": "project",
            "resource_id": 6200, "resource_full_path": "acme/site", "resource_name": "site"}),
        "deliver-notification.webhook" => {
            json!({"hook_id": 6001, "event_key": "pat-expiring:seven_days:bot:1:token:1",
                   "body": {"object_kind": "access_token"}})
        }
        _ => json!({}),
    };
    let keys: Vec<String> = base
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .chain(["cursor.index", "cursor.id", "template", "x"].map(String::from))
        .collect();
    let value = prop_oneof![
        secret(),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (0i64..10_000).prop_map(Value::from),
        prop::sample::select(vec![7u64, 30, 60, 4_000_000_000]).prop_map(Value::from),
        prop::sample::select(vec![
            "2025-03-01",
            "2025-3-1",
            "bot_resource_access_token_about_to_expire",
            "group",
            "Eve\r\nBcc: x",
            "\u{0}"
        ])
        .prop_map(Value::from),
        Just(Value::Null),
        prop::collection::vec(secret(), 0..3).prop_map(Value::Array),
        prop::collection::btree_map("[a-z_]{1,6}", secret(), 0..3)
            .prop_map(|m| Value::Object(m.into_iter().collect())),
    ];
    (
        Just(base),
        prop::collection::vec((prop::sample::select(keys), value), 0..4),
    )
        .prop_map(|(mut p, edits)| {
            for (k, v) in edits {
                if k.contains('.') && !p["cursor"].is_object() {
                    p["cursor"] = json!({});
                }
                set_path(&mut p, &k, v);
            }
            p
        })
        .boxed()
}

const KINDS: [&str; 11] = [
    "remove-expired-members.run",
    "schedule-prune-deletions.run",
    "prune-deletions.run",
    "adjourned-group-deletion.run",
    "group-destroy.run",
    "placeholder-user-cleanup.run",
    "delete-placeholder-user.run",
    "delete-user.run",
    "pat-expiring.run",
    "deliver-notification.email",
    "deliver-notification.webhook",
];

#[test]
fn handlers_fed_arbitrary_payloads_on_the_demo_data_never_panic_and_never_log_a_secret() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mail_dir = std::env::temp_dir().join(format!("hk-hostile-{}", std::process::id()));
    let (db, r) = rt.block_on(async {
        let mut db = TestDb::new().await;
        lab::demo::seed(&mut db.client, t(NOW).date_naive())
            .await
            .unwrap();
        let dir = mail_dir.to_string_lossy().into_owned();
        let cfg = NotifyConfig::from_lookup(&|k: &str| match k {
            "EMAIL_FILE_DIR" => Some(dir.clone()),
            other => lab::demo::hk_default(other),
        })
        .unwrap();
        let mut n = Notifier::full(&cfg, None).await.unwrap();
        // Web hooks resolve nothing: no request leaves the test.
        n.delivery.webhooks = WebhookClient::new(
            Duration::from_secs(2),
            shared::notify::LocalNetwork::Deny,
            &[],
        )
        .unwrap()
        .with_network(Arc::new(TestNetwork::new()));
        let r = db.runner(t(NOW)).with_notifier(Arc::new(n));
        (db, std::cell::RefCell::new(Some(r)))
    });
    let strategy =
        (0..KINDS.len()).prop_flat_map(|k| (Just(KINDS[k]), arb_payload(KINDS[k]), 0u64..3));
    let mut runner = TestRunner::new(PtConfig {
        cases: (cases() / 10).max(100),
        failure_persistence: None,
        ..PtConfig::default()
    });
    let (log, _g) = capture();
    let outcomes = std::cell::RefCell::new(std::collections::BTreeMap::<String, u64>::new());
    runner
        .run(&strategy, |(kind, payload, hop)| {
            log.clear();
            let f = Function::receiver_of(kind).unwrap();
            let body = envelope(kind, hop, "fuzz", payload).to_string();
            // The runner is moved out for the case and put back (the closure is `Fn`).
            let mut runner = r.borrow_mut().take().unwrap();
            let result = rt.block_on(runner.invoke(f, &body, 1));
            *r.borrow_mut() = Some(runner);
            let (run, outcome) = result.map_err(|e| TestCaseError::fail(format!("{kind}: {e}")))?;
            *outcomes
                .borrow_mut()
                .entry(format!("{kind} {}", run.outcome))
                .or_default() += 1;
            prop_assert!(
                log.with_message("record failed: handler panicked")
                    .is_empty()
                    && log.with_message("panic").is_empty(),
                "{}: {}",
                kind,
                log.dump()
            );
            if let RecordOutcome::Permanent { error } = &outcome {
                prop_assert!(
                    error.contains('`'),
                    "{kind}: the error names no field: {error}"
                );
            }
            for line in log.lines() {
                prop_assert!(line.is_object());
                let text = line.to_string();
                prop_assert!(serde_json::from_str::<Value>(&text).is_ok());
                prop_assert!(!text.contains(SECRET), "{kind}: a secret in {text}");
            }
            Ok(())
        })
        .unwrap();
    drop(db);
    let _ = std::fs::remove_dir_all(&mail_dir);
    let outcomes = outcomes.into_inner();
    eprintln!("handler fuzz: {outcomes:?}");
    // The generator reaches the handlers, not only the validator.
    assert!(
        outcomes.keys().filter(|k| k.ends_with(" success")).count() >= 8,
        "{outcomes:?}"
    );
}
