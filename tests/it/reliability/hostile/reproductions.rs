//! The reproductions of issue 18: a delete-user above its hop limit, a cleanup cursor
//! index beyond its detail id, a `run_id` that cannot form a key, payload values
//! outside the spec (malformed, naming the field and never the value), and the start
//! line's cursor rebuilt from validated fields.

use super::*;
use crate::assert::assert_fields;

#[tokio::test]
async fn a_delete_user_received_above_its_hop_limit_is_logged_acknowledged_and_sends_nothing() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.users(&[U::ghost(5), U::human(20)]).await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 20")
        .await;
    fx.ghost_migration(20, None).await;
    let mut r = db.runner(t(NOW));
    let body = envelope(
        "delete-user.run",
        u64::MAX,
        "r1",
        json!({"user_id": 20, "initiator_user_id": null, "reason": null}),
    );
    let (run, log) = hk_run(&mut r, Function::DeleteUser, &body.to_string()).await;
    assert_eq!(run.outcome, "success", "{}", log.dump());
    assert_fields(
        &log.one("continuation not sent: hop limit reached"),
        json!({"level": "error", "hop": u64::MAX, "max_hops": 1000}),
    );
    assert_eq!(log.done()["status"], "hop_limit_reached");
    assert!(run.sent.is_empty());
    // Nothing was done either: the user and the migration row are as they were.
    assert!(db.exists("users WHERE id = 20").await);
    assert!(db.exists("ghost_user_migrations WHERE user_id = 20").await);
    // One above the limit is the same case; at the limit the work is done.
    let body = envelope(
        "delete-user.run",
        1001,
        "r1",
        json!({"user_id": 20, "initiator_user_id": null, "reason": null}),
    );
    let (run, log) = hk_run(&mut r, Function::DeleteUser, &body.to_string()).await;
    assert_eq!(run.outcome, "success");
    log.one("continuation not sent: hop limit reached");
    assert!(db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn a_placeholder_cleanup_cursor_index_beyond_its_detail_id_is_malformed() {
    let db = TestDb::new().await;
    let mut r = db.runner(t(NOW));
    for (index, detail_id) in [(4_294_967_295u64, 5i64), (8, 7), (4_294_967_296, i64::MAX)] {
        let body = envelope(
            "placeholder-user-cleanup.run",
            1,
            "r1",
            json!({"cursor": {"detail_id": detail_id, "index": index}}),
        );
        let (run, log) = hk_run(&mut r, Function::PlaceholderUserCleanup, &body.to_string()).await;
        assert_malformed(&run, &log, "cursor.index", SECRET);
    }
    for (index, group_id) in [(u64::MAX, 5i64), (6, 5)] {
        let body = envelope(
            "adjourned-group-deletion.run",
            1,
            "r1",
            json!({"cursor": {"group_id": group_id, "index": index}}),
        );
        let (run, log) = hk_run(&mut r, Function::AdjournedGroupDeletion, &body.to_string()).await;
        assert_malformed(&run, &log, "cursor.index", SECRET);
    }
}

#[tokio::test]
async fn a_run_id_that_cannot_form_a_key_is_malformed_where_it_enters_and_sends_nothing() {
    let db = TestDb::new().await;
    // A schedule exists, so a valid message would send `prune-deletions.run`.
    let mut r = db.runner(t(NOW));
    for run_id in ["run id/é", "r\u{0}1", "SECRET-hunter2/x", &"r".repeat(129)] {
        let body = envelope("schedule-prune-deletions.run", 0, run_id, json!({}));
        let (run, log) = hk_run(&mut r, Function::SchedulePruneDeletions, &body.to_string()).await;
        assert_malformed(&run, &log, "run_id", SECRET);
    }
    let ok = envelope("schedule-prune-deletions.run", 0, "A-z0.9:_", json!({}));
    let (run, _) = hk_run(&mut r, Function::SchedulePruneDeletions, &ok.to_string()).await;
    assert_eq!(run.outcome, "success");
}

#[tokio::test]
async fn payload_values_outside_the_spec_are_malformed_naming_the_field_not_the_value() {
    let db = TestDb::new().await;
    let mut r = db.runner(t(NOW));
    let hook = |body: Value| json!({"hook_id": 1, "event_key": "pat-expiring:x", "body": body});
    let human = |days: Value, names: Value| {
        json!({"template": "access_token_about_to_expire", "recipient_user_id": 10,
               "days_to_expire": days, "token_names": names})
    };
    let destroy = |date: &str| json!({"group_id": 1, "user_id": 1, "marked_for_deletion_on": date});
    let many: Vec<String> = (0..5000).map(|i| format!("t{i}")).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("deliver-notification.webhook", hook(json!(SECRET)), "body"),
        ("deliver-notification.webhook", hook(json!(4)), "body"),
        ("deliver-notification.webhook", hook(Value::Null), "body"),
        (
            "deliver-notification.webhook",
            hook(json!([SECRET])),
            "body",
        ),
        (
            "deliver-notification.email",
            human(json!(4_000_000_000u64), json!(["a"])),
            "days_to_expire",
        ),
        (
            "deliver-notification.email",
            human(json!(8), json!(["a"])),
            "days_to_expire",
        ),
        (
            "deliver-notification.email",
            human(json!(7), json!(many)),
            "token_names",
        ),
        (
            "deliver-notification.email",
            human(json!(7), json!([SECRET, 3])),
            "token_names",
        ),
        (
            "deliver-notification.email",
            json!({"template": SECRET, "recipient_user_id": 10}),
            "template",
        ),
        (
            "group-destroy.run",
            destroy("2025-3-1"),
            "marked_for_deletion_on",
        ),
        (
            "group-destroy.run",
            destroy("+2025-03-01"),
            "marked_for_deletion_on",
        ),
        (
            "group-destroy.run",
            destroy(" 2025-01-01"),
            "marked_for_deletion_on",
        ),
        (
            "group-destroy.run",
            destroy("-5000-01-01"),
            "marked_for_deletion_on",
        ),
        (
            "group-destroy.run",
            destroy("2025-02-30"),
            "marked_for_deletion_on",
        ),
        (
            "remove-expired-members.run",
            json!({"cursor": {"expires_at": "20250301", "id": 1}}),
            "cursor.expires_at",
        ),
        ("delete-user.run", json!({"user_id": SECRET}), "user_id"),
        ("delete-user.run", json!({"user_id": 0}), "user_id"),
        (
            "delete-user.run",
            json!({"user_id": 1, "reason": [SECRET]}),
            "reason",
        ),
        (
            "delete-placeholder-user.run",
            json!({"placeholder_user_id": 1, "attempt": 4_000_000_000u64}),
            "attempt",
        ),
    ];
    for (kind, payload, field) in cases {
        let f = Function::receiver_of(kind).unwrap();
        let body = envelope(kind, 0, "r1", payload).to_string();
        let (run, log) = hk_run(&mut r, f, &body).await;
        assert_malformed(&run, &log, field, SECRET);
        assert!(!log.dump().contains("4000000000"), "{kind}: {}", log.dump());
    }
    // Duplicate keys, wherever they are, and an offset `issued_at`.
    let dup = format!(
        r#"{{"version":1,"type":"delete-user.run","message_key":"delete-user:1","run_id":"r1",
            "hop":0,"issued_at":"{NOW}","payload":{{"user_id":1,"user_id":2}}}}"#
    );
    let (run, log) = hk_run(&mut r, Function::DeleteUser, &dup).await;
    assert_eq!(run.outcome, "permanent");
    assert!(log.one("malformed message")["error"]
        .as_str()
        .unwrap()
        .contains("duplicate key"));
    let mut v = envelope("delete-user.run", 0, "r1", json!({"user_id": 1}));
    v["issued_at"] = json!("2025-03-10T05:10:00+05:00");
    let (run, log) = hk_run(&mut r, Function::DeleteUser, &v.to_string()).await;
    assert_malformed(&run, &log, "issued_at", SECRET);
}

#[tokio::test]
async fn the_start_line_logs_only_a_validated_cursor_rebuilt_from_its_fields() {
    let db = TestDb::new().await;
    let mut r = db.runner(t(NOW));
    // A cursor carrying extra (secret, large) fields: only its own fields are logged.
    let payload = json!({"cursor": {"expires_at": "2025-03-01", "id": 7,
                                    "note": SECRET, "pad": "x".repeat(100_000)}});
    let body = envelope("remove-expired-members.run", 1, "r1", payload).to_string();
    let (run, log) = hk_run(&mut r, Function::RemoveExpiredMembers, &body).await;
    assert_eq!(run.outcome, "success", "{}", log.dump());
    let start = log.one("start");
    assert_eq!(
        start["cursor"],
        json!({"expires_at": "2025-03-01", "id": 7})
    );
    assert!(!log.dump().contains(SECRET));
    assert!(log.dump().len() < 10_000);
}
