//! The message formats on their own: the envelope's rules (behaviour §9.1, §9.4),
//! continuations and re-sends, every payload's decoding and wire shape, the keys, the
//! function names, and the clock's renderings of a key time.

use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{json, Value};
use shared::batches::remove_expired_members::RemoveExpiredMembersRun;
use shared::clock::{key_time, rfc3339, today, Clock, SystemClock};
use shared::handlers::Message;
use shared::messages::{
    bot_email_key, delete_user_key, user_email_key, webhook_event_key, webhook_key, Envelope,
    FromMessage,
};
use shared::workers::delete_user::DeleteUserRun;
use shared::workers::deliver_notification::{EmailNotification, Notification};
use shared::workers::prune_deletions::PruneDeletionsRun;
use shared::Function;

fn body(v: Value) -> String {
    v.to_string()
}

fn good() -> Value {
    serde_json::json!({"version":1,"type":"remove-expired-members.run",
        "message_key":"remove-expired-members:cron:2025-03-10T00:10:00Z",
        "run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z","payload":{}})
}

#[test]
fn a_valid_cron_message_parses() {
    let e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
    assert_eq!(e.hop, 0);
    let p: RemoveExpiredMembersRun = e.payload().unwrap();
    assert_eq!(p.cursor, None);
}

#[test]
fn every_envelope_rule_is_enforced() {
    let cases: Vec<(&str, Value)> = vec![
        ("version", serde_json::json!(2)),
        ("type", serde_json::json!("delete-user.run")),
        ("message_key", serde_json::json!("has space")),
        ("message_key", serde_json::json!("")),
        ("run_id", serde_json::json!("")),
        ("hop", serde_json::json!(-1)),
        ("hop", serde_json::json!(1.5)),
        ("issued_at", serde_json::json!("yesterday")),
        ("payload", serde_json::json!([])),
    ];
    for (field, value) in cases {
        let mut v = good();
        v[field] = value;
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert!(err.error.contains(field), "{field}: {}", err.error);
    }
    for field in [
        "version",
        "type",
        "message_key",
        "run_id",
        "hop",
        "issued_at",
        "payload",
    ] {
        let mut v = good();
        v.as_object_mut().unwrap().remove(field);
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert!(err.error.contains(field), "{field}: {}", err.error);
    }
}

#[test]
fn malformed_keeps_a_readable_key_and_never_the_body() {
    let mut v = good();
    v["version"] = serde_json::json!(7);
    v["payload"] = serde_json::json!({"secret":"hunter2"});
    let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
    assert_eq!(
        err.message_key.as_deref(),
        Some("remove-expired-members:cron:2025-03-10T00:10:00Z")
    );
    assert!(!err.error.contains("hunter2"));
    let err = Envelope::parse("{not json", Function::DeleteUser).unwrap_err();
    assert!(err.error.contains("not valid JSON"));
}

#[test]
fn continuation_and_resend_follow_the_key_rules() {
    let e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
    let now = Utc::now();
    let c = e.continuation(
        Function::RemoveExpiredMembers,
        now,
        RemoveExpiredMembersRun::default(),
    );
    assert_eq!(c.hop, 1);
    assert_eq!(c.message_key, "remove-expired-members:r1:1");
    let d = Envelope::new(
        "delete-user.run",
        delete_user_key(20),
        "r1",
        now,
        DeleteUserRun {
            user_id: 20,
            initiator_user_id: None,
            reason: None,
        },
    );
    let r = d.resend(now);
    assert_eq!((r.hop, r.message_key.as_str()), (1, "delete-user:20"));
}

#[test]
fn ill_typed_payload_is_malformed_on_receipt_naming_the_field_not_the_value() {
    let mut v = good();
    v["payload"] = serde_json::json!({"cursor": {"expires_at": "SECRET-hunter2", "id": 1}});
    let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
    assert_eq!(
        err.error,
        "invalid payload: field `cursor.expires_at` must be a date written YYYY-MM-DD"
    );
    let mut v = good();
    v["type"] = serde_json::json!("delete-user.run");
    v["payload"] = serde_json::json!({"user_id": "SECRET-hunter2"});
    let err = Envelope::parse(&body(v), Function::DeleteUser).unwrap_err();
    assert!(err.error.contains("`user_id`"), "{}", err.error);
    assert!(!err.error.contains("hunter2"), "{}", err.error);
}

#[test]
fn duplicate_keys_run_ids_keys_cannot_carry_and_offset_times_are_malformed() {
    let dup = r#"{"version":1,"type":"remove-expired-members.run","message_key":"k:1",
        "run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z",
        "payload":{"cursor":{"expires_at":"2025-03-01","id":1,"id":2}}}"#;
    let err = Envelope::parse(dup, Function::RemoveExpiredMembers).unwrap_err();
    assert!(err.error.contains("duplicate key"), "{}", err.error);
    let dup_top = r#"{"version":1,"version":1,"type":"remove-expired-members.run"}"#;
    assert!(Envelope::parse(dup_top, Function::RemoveExpiredMembers)
        .unwrap_err()
        .error
        .contains("duplicate key"));
    for run_id in ["run id/é", "r\u{0}", "a:b c", &"r".repeat(129)] {
        let mut v = good();
        v["run_id"] = Value::from(run_id);
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert!(err.error.contains("`run_id`"), "{run_id}: {}", err.error);
    }
    for at in ["2025-03-10T05:10:00+05:00", "2025-03-10T00:10:00+00:00"] {
        let mut v = good();
        v["issued_at"] = Value::from(at);
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert!(err.error.contains("`issued_at`"), "{at}: {}", err.error);
    }
}

#[test]
fn continuations_of_the_top_hop_saturate_above_every_limit() {
    let mut e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
    e.hop = u64::MAX;
    let c = e.continuation(
        Function::RemoveExpiredMembers,
        Utc::now(),
        serde_json::json!({}),
    );
    assert_eq!(c.hop, u64::MAX);
    assert_eq!(e.resend(Utc::now()).hop, u64::MAX);
}

#[test]
fn a_payload_decodes_through_its_own_rules_and_round_trips() {
    let p = DeleteUserRun::decode("delete-user.run", &json!({"user_id": 3})).unwrap();
    assert_eq!(p.user_id, 3);
    assert_eq!(
        DeleteUserRun::decode("delete-user.run", &p.payload_value()).unwrap(),
        p
    );
    let err = DeleteUserRun::decode("delete-user.run", &json!({})).unwrap_err();
    assert_eq!(err.field, "user_id");
    let run = PruneDeletionsRun::decode("prune-deletions.run", &json!({})).unwrap();
    assert!(FromMessage::cursor(&run).is_none());
    let err = Notification::decode("nope.run", &json!({})).unwrap_err();
    assert_eq!(err.field, "type");
}

#[test]
fn every_kind_decodes_to_its_receiver_and_round_trips() {
    let samples = [
        ("remove-expired-members.run", json!({})),
        ("delete-user.run", json!({"user_id": 3})),
        ("schedule-prune-deletions.run", json!({})),
        ("prune-deletions.run", json!({})),
        ("adjourned-group-deletion.run", json!({})),
        (
            "group-destroy.run",
            json!({"group_id": 1, "user_id": 2, "marked_for_deletion_on": "2025-03-01"}),
        ),
        ("placeholder-user-cleanup.run", json!({})),
        (
            "delete-placeholder-user.run",
            json!({"placeholder_user_id": 5, "attempt": 1}),
        ),
        ("pat-expiring.run", json!({})),
    ];
    for (kind, payload) in samples {
        let m = Message::decode(kind, &payload).unwrap();
        assert_eq!(Message::decode(kind, &m.payload_value()).unwrap(), m);
    }
    assert!(matches!(
        Message::decode("delete-user.run", &json!({"user_id": 3})).unwrap(),
        Message::DeleteUser(p) if p.user_id == 3
    ));
    let err = Message::decode("nope.run", &json!({})).unwrap_err();
    assert_eq!(err.field, "type");
}

#[test]
fn b28_payloads_and_keys_have_the_wire_shape_of_the_spec() {
    let today: NaiveDate = "2025-03-10".parse().unwrap();
    assert_eq!(
        user_email_key("seven_days", 10, today),
        "pat-expiring:seven_days:user:10:2025-03-10"
    );
    assert_eq!(
        bot_email_key("thirty_days", 20, 11, today),
        "pat-expiring:thirty_days:bot:20:recipient:11:2025-03-10"
    );
    let ev = webhook_event_key(20, 7);
    assert_eq!(ev, "pat-expiring:seven_days:bot:20:token:7");
    assert_eq!(webhook_key(&ev, 3), format!("{ev}:hook:3"));
    let human = EmailNotification::AccessTokenAboutToExpire {
        recipient_user_id: 10,
        days_to_expire: 7,
        token_names: vec!["deploy".into(), "ci".into()],
    };
    assert_eq!(
        serde_json::to_value(&human).unwrap(),
        serde_json::json!({"template":"access_token_about_to_expire","recipient_user_id":10,
            "days_to_expire":7,"token_names":["deploy","ci"]})
    );
    let bot: EmailNotification = serde_json::from_value(serde_json::json!({
        "template":"bot_resource_access_token_about_to_expire","recipient_user_id":11,
        "days_to_expire":30,"bot_user_id":20,"token_name":"T20","resource_type":"group",
        "resource_id":101,"resource_full_path":"acme/web","resource_name":"web"}))
    .unwrap();
    assert_eq!(bot.template(), "bot_resource_access_token_about_to_expire");
    assert_eq!(bot.recipient_user_id(), 11);
    assert_eq!(human.template(), "access_token_about_to_expire");
    // A bot email without its bot fields, or an unknown template, is malformed.
    assert!(
        serde_json::from_value::<EmailNotification>(serde_json::json!({
        "template":"bot_resource_access_token_about_to_expire","recipient_user_id":11,
        "days_to_expire":30}))
        .is_err()
    );
    assert!(
        serde_json::from_value::<EmailNotification>(serde_json::json!({
        "template":"welcome","recipient_user_id":11}))
        .is_err()
    );
}

#[test]
fn key_time_has_no_fraction_and_a_z() {
    let t = DateTime::parse_from_rfc3339("2025-03-10T00:10:04.123456Z")
        .unwrap()
        .with_timezone(&Utc);
    assert_eq!(key_time(t), "2025-03-10T00:10:04Z");
    assert_eq!(rfc3339(t), "2025-03-10T00:10:04.123456Z");
    assert_eq!(today(t).to_string(), "2025-03-10");
}

#[test]
fn system_clock_is_truncated_to_microseconds() {
    let n = SystemClock.now();
    assert_eq!(n.timestamp_subsec_nanos() % 1000, 0);
}

#[test]
fn names_round_trip_and_types_route_to_one_receiver() {
    for f in Function::ALL {
        assert_eq!(Function::from_name(f.name()), Some(*f));
        for t in f.accepts() {
            assert_eq!(Function::receiver_of(t), Some(*f));
        }
    }
    assert_eq!(Function::DeleteUser.env_suffix(), "DELETE_USER");
}
