//! Property test: every message type's payload validation. Valid payloads of each type
//! round-trip; setting any one field to a value its rule refuses makes the message a
//! permanent failure naming that field and never quoting the value.

use super::*;
use shared::messages::{FULL_PATH_MAX_CHARS, NAME_MAX_CHARS};

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
        (
            any::<bool>(),
            arb_id(),
            arb_text(FULL_PATH_MAX_CHARS),
            arb_text(NAME_MAX_CHARS),
        ),
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
                system_hook: None,
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
    T: Payload + Serialize + DeserializeOwned + PartialEq + Clone + std::fmt::Debug,
{
    let value = serde_json::to_value(v).unwrap();
    let body = envelope(kind, 0, "r1", value.clone()).to_string();
    let (env, message) = Envelope::decode(&body, Function::receiver_of(kind).unwrap())
        .map_err(|e| TestCaseError::fail(format!("{kind}: {}", e.error)))?;
    prop_assert_eq!(message.payload_value(), value);
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
                ("resource_full_path", Rule::Text(FULL_PATH_MAX_CHARS)),
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
