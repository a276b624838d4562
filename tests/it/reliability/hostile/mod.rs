//! Hostile input through the path `hk run <function> --message` takes (the local
//! `Runner` → `process_record`): each reproduction of issue 18 (counters from the
//! message, `run_id`s that cannot form a key, payload values outside their ranges,
//! payload errors that quoted the body), a property test of every message type's
//! payload validation (valid payloads round-trip; each out-of-range field is a
//! permanent failure naming the field, never the value), and a fuzz of the handlers
//! with arbitrary payloads on the demo data: no panic, only JSON lines, and no
//! secret-looking payload string in any log line.
//!
//! Bounded for CI: `HK_FUZZ_CASES` (default 5000 payload-validation cases, a tenth of
//! that handler runs).

use std::sync::Arc;
use std::time::Duration;

use hk::local::Runner;
use integration_tests::fixtures::U;
use integration_tests::sinks::net::TestNetwork;
use integration_tests::{t, Fx, TestDb};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use shared::messages::{
    AdjournedGroupDeletionRun, DeletePlaceholderUserRun, DeleteUserRun, DetailCursor,
    EmailNotification, Envelope, GroupCursor, GroupDestroyRun, MemberCursor, Message, Payload,
    PlaceholderUserCleanupRun, RemoveExpiredMembersRun, ResourceType, WebhookNotification,
};
use shared::notify::webhook::WebhookClient;
use shared::notify::{Notifier, NotifyConfig};
use shared::runtime::RecordOutcome;
use shared::telemetry::{capture, Captured};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
/// Planted in secret-looking payload strings: never in a log line.
const SECRET: &str = "SECRET-hunter2";

fn cases() -> u32 {
    std::env::var("HK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

fn envelope(kind: &str, hop: u64, run_id: &str, payload: Value) -> Value {
    let f = Function::receiver_of(kind).unwrap();
    json!({"version": 1, "type": kind, "message_key": format!("{}:hostile:{hop}", f.name()),
           "run_id": run_id, "hop": hop, "issued_at": NOW, "payload": payload})
}

/// Invoke `body` as `hk run <function> --message` does; the outcome and the log.
async fn hk_run(r: &mut Runner, f: Function, body: &str) -> (hk::local::Run, Captured) {
    let (log, _g) = capture();
    let (run, _) = r.invoke(f, body, 1).await.unwrap();
    (run, log)
}

/// A permanent failure naming `field`, nothing sent, no `start` line, and no
/// `secret` anywhere in the log.
fn assert_malformed(run: &hk::local::Run, log: &Captured, field: &str, secret: &str) {
    assert_eq!(run.outcome, "permanent", "{field}: {}", log.dump());
    let l = log.one("malformed message");
    let error = l["error"].as_str().unwrap();
    assert!(error.contains(&format!("`{field}`")), "{field}: {error}");
    assert!(
        run.sent.is_empty(),
        "{field}: a malformed message sent something"
    );
    assert!(
        log.with_message("start").is_empty(),
        "{field}: {}",
        log.dump()
    );
    assert!(
        !secret.is_empty() && !log.dump().contains(secret),
        "{field}: {}",
        log.dump()
    );
}

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
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(l["level"], "error");
    assert_eq!(l["hop"], json!(u64::MAX));
    assert_eq!(l["max_hops"], 1000);
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

// ---------------------------------------------------------------------------------
// Property test: every message type's payload validation.

fn arb_id() -> BoxedStrategy<i64> {
    prop_oneof![1..1000i64, 1..=i64::MAX].boxed()
}

fn arb_date() -> BoxedStrategy<chrono::NaiveDate> {
    (1i32..=9999, 1u32..=12, 1u32..=28)
        .prop_map(|(y, m, d)| chrono::NaiveDate::from_ymd_opt(y, m, d).unwrap())
        .boxed()
}

fn arb_text(max: usize) -> BoxedStrategy<String> {
    prop_oneof![
        ".{0,20}".boxed(),
        prop::collection::vec(any::<char>(), max..=max)
            .prop_map(|c| c.into_iter().collect::<String>())
            .boxed(),
    ]
    .boxed()
}

fn arb_days() -> BoxedStrategy<u32> {
    prop::sample::select(vec![7u32, 30, 60]).boxed()
}

fn arb_object() -> BoxedStrategy<Value> {
    prop::collection::btree_map(
        "[a-z_]{1,8}",
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::from)
        ],
        0..5,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
    .boxed()
}

/// A valid payload of each message type, as its typed value (for the round trip).
#[derive(Debug, Clone)]
enum Valid {
    Rem(RemoveExpiredMembersRun),
    Adj(AdjournedGroupDeletionRun),
    Destroy(GroupDestroyRun),
    Cleanup(PlaceholderUserCleanupRun),
    Dpu(DeletePlaceholderUserRun),
    Du(DeleteUserRun),
    Email(EmailNotification),
    Hook(WebhookNotification),
    Empty(&'static str),
}

fn arb_valid() -> BoxedStrategy<(&'static str, Valid)> {
    let rem = prop::option::of((arb_date(), 0..=i64::MAX))
        .prop_map(|c| {
            Valid::Rem(RemoveExpiredMembersRun {
                cursor: c.map(|(expires_at, id)| MemberCursor { expires_at, id }),
            })
        })
        .prop_map(|v| ("remove-expired-members.run", v));
    let adj = prop::option::of((0..=i64::MAX).prop_flat_map(|g| (Just(g), 0..=g as u64)))
        .prop_map(|c| {
            Valid::Adj(AdjournedGroupDeletionRun {
                cursor: c.map(|(group_id, index)| GroupCursor { group_id, index }),
            })
        })
        .prop_map(|v| ("adjourned-group-deletion.run", v));
    let destroy = (arb_id(), arb_id(), arb_date()).prop_map(|(g, u, d)| {
        (
            "group-destroy.run",
            Valid::Destroy(GroupDestroyRun {
                group_id: g,
                user_id: u,
                marked_for_deletion_on: d,
            }),
        )
    });
    let cleanup = prop::option::of(
        (0..=i64::MAX).prop_flat_map(|d| (Just(d), 0..=(d.min(i64::from(u32::MAX)) as u32))),
    )
    .prop_map(|c| {
        (
            "placeholder-user-cleanup.run",
            Valid::Cleanup(PlaceholderUserCleanupRun {
                cursor: c.map(|(detail_id, index)| DetailCursor { detail_id, index }),
            }),
        )
    });
    let dpu = (arb_id(), 1..=15i64).prop_map(|(p, a)| {
        (
            "delete-placeholder-user.run",
            Valid::Dpu(DeletePlaceholderUserRun {
                placeholder_user_id: p,
                attempt: a,
            }),
        )
    });
    let du = (
        arb_id(),
        prop::option::of(arb_id()),
        prop::option::of(arb_text(1024)),
    )
        .prop_map(|(u, i, r)| {
            (
                "delete-user.run",
                Valid::Du(DeleteUserRun {
                    user_id: u,
                    initiator_user_id: i,
                    reason: r,
                }),
            )
        });
    let human = (
        arb_id(),
        arb_days(),
        prop::collection::vec(arb_text(255), 0..=100),
    )
        .prop_map(|(u, d, n)| {
            (
                "deliver-notification.email",
                Valid::Email(EmailNotification::AccessTokenAboutToExpire {
                    recipient_user_id: u,
                    days_to_expire: d,
                    token_names: n,
                }),
            )
        });
    let bot = (
        (arb_id(), arb_days(), arb_id(), arb_text(255)),
        (any::<bool>(), arb_id(), arb_text(1024), arb_text(255)),
    )
        .prop_map(|((u, d, b, tn), (g, rid, path, name))| {
            (
                "deliver-notification.email",
                Valid::Email(EmailNotification::BotResourceAccessTokenAboutToExpire {
                    recipient_user_id: u,
                    days_to_expire: d,
                    bot_user_id: b,
                    token_name: tn,
                    resource_type: if g {
                        ResourceType::Group
                    } else {
                        ResourceType::Project
                    },
                    resource_id: rid,
                    resource_full_path: path,
                    resource_name: name,
                }),
            )
        });
    let hook = (arb_id(), "[A-Za-z0-9:._-]{1,200}", arb_object()).prop_map(|(h, k, b)| {
        (
            "deliver-notification.webhook",
            Valid::Hook(WebhookNotification {
                hook_id: h,
                event_key: k,
                body: b,
            }),
        )
    });
    let empty = prop::sample::select(vec![
        "schedule-prune-deletions.run",
        "prune-deletions.run",
        "pat-expiring.run",
    ])
    .prop_map(|k| (k, Valid::Empty(k)));
    prop_oneof![rem, adj, destroy, cleanup, dpu, du, human, bot, hook, empty].boxed()
}

fn round_trip<T>(kind: &str, v: &T) -> std::result::Result<(), TestCaseError>
where
    T: Payload + Serialize + DeserializeOwned + PartialEq + Clone + Into<Message> + std::fmt::Debug,
{
    let body = envelope(kind, 0, "r1", serde_json::to_value(v).unwrap()).to_string();
    let (env, message) = Envelope::decode(&body, Function::receiver_of(kind).unwrap())
        .map_err(|e| TestCaseError::fail(format!("{kind}: {}", e.error)))?;
    prop_assert_eq!(message, v.clone().into());
    prop_assert_eq!(
        &serde_json::from_str::<T>(&env.payload.to_string()).unwrap(),
        v
    );
    Ok(())
}

impl Valid {
    fn value(&self) -> Value {
        match self {
            Valid::Rem(p) => serde_json::to_value(p),
            Valid::Adj(p) => serde_json::to_value(p),
            Valid::Destroy(p) => serde_json::to_value(p),
            Valid::Cleanup(p) => serde_json::to_value(p),
            Valid::Dpu(p) => serde_json::to_value(p),
            Valid::Du(p) => serde_json::to_value(p),
            Valid::Email(p) => serde_json::to_value(p),
            Valid::Hook(p) => serde_json::to_value(p),
            Valid::Empty(_) => Ok(json!({})),
        }
        .unwrap()
    }

    fn round_trip(&self, kind: &str) -> std::result::Result<(), TestCaseError> {
        match self {
            Valid::Rem(p) => round_trip(kind, p),
            Valid::Adj(p) => round_trip(kind, p),
            Valid::Destroy(p) => round_trip(kind, p),
            Valid::Cleanup(p) => round_trip(kind, p),
            Valid::Dpu(p) => round_trip(kind, p),
            Valid::Du(p) => round_trip(kind, p),
            Valid::Email(p) => round_trip(kind, p),
            Valid::Hook(p) => round_trip(kind, p),
            Valid::Empty(k) => {
                let body = envelope(k, 0, "r1", json!({"ignored": 1})).to_string();
                Envelope::parse(&body, Function::receiver_of(k).unwrap())
                    .map(|_| ())
                    .map_err(|e| TestCaseError::fail(e.error))
            }
        }
    }

    /// The fields of this payload with their rule, as (path, rule).
    fn fields(&self) -> Vec<(&'static str, Rule)> {
        match self {
            Valid::Rem(p) if p.cursor.is_some() => {
                vec![
                    ("cursor.expires_at", Rule::Date),
                    ("cursor.id", Rule::CursorId),
                ]
            }
            Valid::Adj(p) if p.cursor.is_some() => vec![
                ("cursor.group_id", Rule::CursorId),
                ("cursor.index", Rule::Index("group_id")),
            ],
            Valid::Cleanup(p) if p.cursor.is_some() => vec![
                ("cursor.detail_id", Rule::CursorId),
                ("cursor.index", Rule::Index("detail_id")),
            ],
            Valid::Rem(_) | Valid::Adj(_) | Valid::Cleanup(_) => vec![("cursor", Rule::Object)],
            Valid::Destroy(_) => vec![
                ("group_id", Rule::Id),
                ("user_id", Rule::Id),
                ("marked_for_deletion_on", Rule::Date),
            ],
            Valid::Dpu(_) => vec![
                ("placeholder_user_id", Rule::Id),
                ("attempt", Rule::Attempt),
            ],
            Valid::Du(_) => vec![
                ("user_id", Rule::Id),
                ("initiator_user_id", Rule::OptId),
                ("reason", Rule::OptText(1024)),
            ],
            Valid::Email(EmailNotification::AccessTokenAboutToExpire { .. }) => vec![
                ("template", Rule::Template),
                ("recipient_user_id", Rule::Id),
                ("days_to_expire", Rule::Days),
                ("token_names", Rule::TokenNames),
            ],
            Valid::Email(EmailNotification::BotResourceAccessTokenAboutToExpire { .. }) => vec![
                ("template", Rule::Template),
                ("recipient_user_id", Rule::Id),
                ("days_to_expire", Rule::Days),
                ("bot_user_id", Rule::Id),
                ("token_name", Rule::Text(255)),
                ("resource_type", Rule::ResourceType),
                ("resource_id", Rule::Id),
                ("resource_full_path", Rule::Text(1024)),
                ("resource_name", Rule::Text(255)),
            ],
            Valid::Hook(_) => vec![
                ("hook_id", Rule::Id),
                ("event_key", Rule::EventKey),
                ("body", Rule::Object),
            ],
            Valid::Empty(_) => vec![],
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Rule {
    Id,
    OptId,
    CursorId,
    Index(&'static str),
    Date,
    Days,
    Attempt,
    Text(usize),
    OptText(usize),
    TokenNames,
    Template,
    ResourceType,
    EventKey,
    Object,
}

fn secret() -> BoxedStrategy<Value> {
    "[a-z]{0,6}"
        .prop_map(|s| Value::from(format!("{SECRET}{s}")))
        .boxed()
}

/// Values that break `rule` (and `null` for required fields).
fn arb_bad(rule: Rule) -> BoxedStrategy<Value> {
    let wrong_type = prop_oneof![
        secret(),
        Just(json!(1.5)),
        Just(json!(true)),
        Just(json!([])),
        Just(json!({})),
    ];
    let big = prop_oneof![
        (i64::MIN..=0).prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(1e300)),
    ];
    match rule {
        Rule::Id => prop_oneof![wrong_type, big, Just(Value::Null)].boxed(),
        Rule::OptId => prop_oneof![wrong_type, (i64::MIN..=0).prop_map(Value::from)].boxed(),
        Rule::CursorId => prop_oneof![
            wrong_type,
            (i64::MIN..0).prop_map(Value::from),
            Just(json!(u64::MAX)),
            Just(Value::Null)
        ]
        .boxed(),
        Rule::Index(_) => prop_oneof![
            wrong_type,
            (i64::MIN..0).prop_map(Value::from),
            Just(Value::Null)
        ]
        .boxed(),
        Rule::Date => prop_oneof![
            wrong_type,
            Just(Value::Null),
            prop::sample::select(vec![
                "2025-3-1",
                "+2025-03-01",
                " 2025-01-01",
                "2025-01-01 ",
                "-5000-01-01",
                "2025-02-30",
                "2025-13-01",
                "20250301",
                "2025/03/01",
                "",
            ])
            .prop_map(Value::from),
        ]
        .boxed(),
        Rule::Days => prop_oneof![
            wrong_type,
            Just(Value::Null),
            any::<u64>()
                .prop_filter("not 7, 30, 60", |d| ![7, 30, 60].contains(d))
                .prop_map(Value::from),
            (i64::MIN..0).prop_map(Value::from),
        ]
        .boxed(),
        Rule::Attempt => prop_oneof![
            wrong_type,
            Just(Value::Null),
            (i64::MIN..=0).prop_map(Value::from),
            (16..=i64::MAX).prop_map(Value::from),
        ]
        .boxed(),
        Rule::Text(max) => prop_oneof![
            prop_oneof![Just(json!(1)), Just(json!([])), Just(Value::Null)],
            Just(Value::from(format!("{SECRET}{}", "x".repeat(max)))),
        ]
        .boxed(),
        Rule::OptText(max) => prop_oneof![
            Just(json!(1)),
            Just(json!([])),
            Just(Value::from(format!("{SECRET}{}", "x".repeat(max)))),
        ]
        .boxed(),
        Rule::TokenNames => prop_oneof![
            secret(),
            Just(json!(1)),
            Just(json!({})),
            Just(Value::Null),
            (101usize..300).prop_map(|n| json!(vec![SECRET; n])),
            secret().prop_map(|s| json!(["ok", s, 3])),
            Just(json!([format!("{SECRET}{}", "x".repeat(255))])),
        ]
        .boxed(),
        Rule::Template | Rule::ResourceType => prop_oneof![wrong_type, Just(Value::Null)].boxed(),
        Rule::EventKey => prop_oneof![
            Just(json!(1)),
            Just(json!([])),
            Just(Value::Null),
            Just(json!("")),
            Just(json!(format!("{SECRET} x"))),
            Just(json!("k".repeat(257))),
        ]
        .boxed(),
        Rule::Object => prop_oneof![
            secret(),
            Just(json!(1)),
            Just(json!([SECRET])),
            Just(json!(true))
        ]
        .boxed(),
    }
}

fn set_path(v: &mut Value, path: &str, x: Value) {
    match path.split_once('.') {
        Some((a, b)) => set_path(&mut v[a], b, x),
        None => v[path] = x,
    }
}

#[test]
fn every_message_types_valid_payloads_round_trip_and_each_out_of_range_field_is_a_named_permanent_failure(
) {
    let mut runner = TestRunner::new(PtConfig {
        cases: cases(),
        failure_persistence: None,
        ..PtConfig::default()
    });
    let strategy = arb_valid().prop_flat_map(|(kind, valid)| {
        let fields = valid.fields();
        let n = fields.len().max(1);
        (Just(kind), Just(valid), 0..n).prop_flat_map(move |(kind, valid, i)| {
            let rule = fields.get(i).map(|f| f.1).unwrap_or(Rule::Object);
            (
                Just(kind),
                Just(valid),
                Just(i),
                arb_bad(rule),
                any::<u32>(),
            )
        })
    });
    runner
        .run(&strategy, |(kind, valid, i, bad, extra)| {
            valid.round_trip(kind)?;
            let fields = valid.fields();
            let Some((path, rule)) = fields.get(i).copied() else {
                return Ok(());
            };
            let mut payload = valid.value();
            let bad = match rule {
                // An index above its cursor's id (ids are ≥ 0, indexes count rows).
                Rule::Index(id) if bad.is_null() => {
                    let id = payload["cursor"][id].as_i64().unwrap();
                    match id.checked_add(1 + i64::from(extra % 1000)) {
                        Some(i) => json!(i),
                        None => json!(u64::MAX),
                    }
                }
                _ => bad,
            };
            set_path(&mut payload, path, bad);
            let body = envelope(kind, 0, "r1", payload).to_string();
            let err = match Envelope::parse(&body, Function::receiver_of(kind).unwrap()) {
                Ok(_) => {
                    return Err(TestCaseError::fail(format!(
                        "{kind}: bad `{path}` accepted"
                    )))
                }
                Err(e) => e.error,
            };
            prop_assert!(
                err.contains(&format!("`{path}`")),
                "{}: `{}` not named in {}",
                kind,
                path,
                err
            );
            prop_assert!(!err.contains(SECRET), "{err}");
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------------
// Handler fuzz on the demo data.

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
        hk::demo::seed(&mut db.client, t(NOW).date_naive())
            .await
            .unwrap();
        let dir = mail_dir.to_string_lossy().into_owned();
        let cfg = NotifyConfig::from_lookup(&|k: &str| match k {
            "EMAIL_FILE_DIR" => Some(dir.clone()),
            other => hk::demo::hk_default(other),
        })
        .unwrap();
        let mut n = Notifier::full(&cfg, None).await.unwrap();
        // Web hooks resolve nothing: no request leaves the test.
        n.delivery.as_mut().unwrap().webhooks =
            WebhookClient::new(Duration::from_secs(2), false, &[])
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
