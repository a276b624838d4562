//! Hostile input, property-tested: the message parser (`Envelope::parse`) and the
//! Lambda glue (`lambda::handle_event` → `runtime::process_record`) on arbitrary
//! bytes, arbitrary JSON and near-valid envelopes with fields mutated. Nothing
//! panics; every body the parser rejects ends as a batch-item failure with one
//! `malformed message` line naming its record, and neither the error nor any log
//! line ever quotes the body.
//!
//! Bounded for CI: `HK_FUZZ_CASES` (default 5000 cases of each parser property, a
//! fifth of that in events of up to five records through the glue).

use integration_tests::environment;
use std::collections::HashMap;

use crate::handle_event_with;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use integration_tests::logs::capture;
use integration_tests::{t, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestRunner};
use serde_json::{json, Value};
use shared::handlers::{self, Dispatch};
use shared::lambda::Environment;
use shared::messages::Envelope;
use shared::notify::{Notifier, NotifyConfig};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
/// Planted in every generated body: it must never reach an error or a log line.
const MARKER: &str = "Zq7-secret-marker";

fn cases() -> u32 {
    std::env::var("HK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000)
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_function() -> impl Strategy<Value = Function> {
    (0..Function::ALL.len()).prop_map(|i| Function::ALL[i])
}

/// A valid message for `f`, with a plausible payload.
fn valid(f: Function) -> Value {
    let payload = match f {
        Function::DeleteUser => json!({"user_id": 999, "initiator_user_id": null, "reason": null}),
        Function::GroupDestroy => {
            json!({"group_id": 999, "user_id": 999, "marked_for_deletion_on": "2025-03-01"})
        }
        Function::DeletePlaceholderUser => json!({"placeholder_user_id": 999, "attempt": 1}),
        _ => json!({}),
    };
    json!({"version": 1, "type": f.run_type(), "message_key": format!("{}:fuzz:1", f.name()),
           "run_id": "fuzz", "hop": 0, "issued_at": NOW, "payload": payload})
}

const FIELDS: [&str; 7] = [
    "version",
    "type",
    "message_key",
    "run_id",
    "hop",
    "issued_at",
    "payload",
];

/// One mutation of an envelope.
#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, Value),
    Remove(usize),
    SetPayloadField(String, Value),
    Special(usize, usize),
}

fn arb_mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0..FIELDS.len(), arb_json()).prop_map(|(i, v)| Mutation::Set(i, v)),
        (0..FIELDS.len()).prop_map(Mutation::Remove),
        (
            prop_oneof![
                Just("cursor".to_string()),
                Just("user_id".to_string()),
                Just("group_id".to_string()),
                Just("marked_for_deletion_on".to_string()),
                Just("placeholder_user_id".to_string()),
                ".{0,6}"
            ],
            arb_json()
        )
            .prop_map(|(k, v)| Mutation::SetPayloadField(k, v)),
        (0..FIELDS.len(), 0..SPECIALS.len()).prop_map(|(i, s)| Mutation::Special(i, s)),
    ]
}

/// Values at the edges of each rule of behaviour §9.1.
const SPECIALS: [&str; 12] = [
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "1e300",
    "1.0",
    "\"\"",
    "\"a b\"",
    "\"delete-user.run\"",
    "\"2025-13-40T00:00:00Z\"",
    "[]",
    "{\"cursor\":{\"expires_at\":\"2025-03-01\",\"id\":-5}}",
    "\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"",
];

fn apply(mut v: Value, muts: &[Mutation]) -> Value {
    for m in muts {
        let o = v.as_object_mut().expect("an envelope is an object");
        match m {
            Mutation::Set(i, x) => {
                o.insert(FIELDS[*i].into(), x.clone());
            }
            Mutation::Remove(i) => {
                o.remove(FIELDS[*i]);
            }
            Mutation::SetPayloadField(k, x) => {
                if let Some(Value::Object(p)) = o.get_mut("payload") {
                    p.insert(k.clone(), x.clone());
                }
            }
            Mutation::Special(i, s) => {
                // Numbers beyond i64/u64 do not survive `Value`; splice them as text.
                let text = SPECIALS[*s];
                match serde_json::from_str::<Value>(text) {
                    Ok(x) => {
                        o.insert(FIELDS[*i].into(), x);
                    }
                    Err(_) => {
                        o.insert(FIELDS[*i].into(), Value::from(text));
                    }
                }
            }
        }
    }
    v
}

/// How the text of a body is damaged after serialization.
#[derive(Debug, Clone)]
enum Damage {
    None,
    Truncate(usize),
    Append(String),
    /// Replace the whole body by arbitrary text.
    Raw(String),
    /// Arbitrary bytes, decoded lossily (SQS bodies are UTF-8 text).
    Bytes(Vec<u8>),
}

fn arb_damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        6 => Just(Damage::None),
        1 => (0usize..400).prop_map(Damage::Truncate),
        1 => ".{0,8}".prop_map(Damage::Append),
        1 => ".{0,64}".prop_map(Damage::Raw),
        1 => prop::collection::vec(any::<u8>(), 0..128).prop_map(Damage::Bytes),
    ]
}

fn body_of(v: &Value, d: &Damage) -> String {
    let text = v.to_string();
    match d {
        Damage::None => text,
        Damage::Truncate(n) => {
            let mut n = (*n).min(text.len());
            while !text.is_char_boundary(n) {
                n -= 1;
            }
            text[..n].to_string()
        }
        Damage::Append(s) => format!("{text}{s}"),
        Damage::Raw(s) => format!("{s}{MARKER}"),
        Damage::Bytes(b) => format!("{}{MARKER}", String::from_utf8_lossy(b)),
    }
}

/// A generated body for `receiver`: mostly made for it, sometimes for another
/// function; mutated, damaged, or left intact.
fn arb_body_for(receiver: Function) -> impl Strategy<Value = String> {
    (
        prop_oneof![3 => Just(receiver), 1 => arb_function()],
        prop_oneof![
            2 => Just(Vec::new()),
            3 => prop::collection::vec(arb_mutation(), 1..4),
        ],
        arb_damage(),
        any::<bool>(),
    )
        .prop_map(|(sender, muts, damage, plant)| {
            let mut v = valid(sender);
            if plant {
                v["payload"]["note"] = Value::from(MARKER);
            }
            body_of(&apply(v, &muts), &damage)
        })
}

/// A receiver and a body for it.
fn arb_body() -> impl Strategy<Value = (Function, String)> {
    arb_function().prop_flat_map(|f| (Just(f), arb_body_for(f)))
}

fn check_parse(receiver: Function, body: &str) -> Result<(), TestCaseError> {
    match Envelope::parse(body, receiver) {
        Ok(e) => {
            prop_assert_eq!(e.version, 1);
            prop_assert!(receiver.accepts().contains(&e.kind.as_str()));
            prop_assert!((1..=256).contains(&e.message_key.len()));
            prop_assert!(e
                .message_key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b":._-".contains(&b)));
            prop_assert!((1..=128).contains(&e.run_id.chars().count()));
            prop_assert!(chrono::DateTime::parse_from_rfc3339(&e.issued_at).is_ok());
            prop_assert!(e.payload.is_object());
            // What parses re-serializes to a body that parses to the same envelope
            // (payload floats aside: serde_json's default float text is not exact).
            let again = Envelope::parse(&e.to_body(), receiver);
            prop_assert!(again.is_ok());
            let again = again.unwrap();
            prop_assert_eq!(
                (
                    &again.kind,
                    &again.message_key,
                    &again.run_id,
                    again.hop,
                    &again.issued_at
                ),
                (&e.kind, &e.message_key, &e.run_id, e.hop, &e.issued_at)
            );
        }
        Err(m) => {
            prop_assert!(!m.error.is_empty());
            prop_assert!(!m.error.contains(MARKER), "the error quotes the body");
            if let Some(k) = &m.message_key {
                prop_assert!(body.contains(k.as_str()));
            }
        }
    }
    Ok(())
}

#[test]
fn the_parser_never_panics_and_rejects_with_a_reason_that_never_quotes_the_body() {
    let mut runner = TestRunner::new(PtConfig {
        cases: cases(),
        failure_persistence: None,
        ..PtConfig::default()
    });
    runner
        .run(&arb_body(), |(receiver, body)| check_parse(receiver, &body))
        .unwrap();
    // Arbitrary JSON documents and arbitrary text, too.
    runner
        .run(&(arb_function(), arb_json()), |(f, v)| {
            check_parse(f, &v.to_string())
        })
        .unwrap();
    runner
        .run(&(arb_function(), ".{0,200}"), |(f, s)| check_parse(f, &s))
        .unwrap();
    eprintln!("parser fuzz: 3 x {} cases", cases());
}

fn record(i: usize, body: String, receive_count: &str) -> SqsMessage {
    let mut m = SqsMessage::default();
    m.message_id = Some(format!("fuzz-{i}"));
    m.body = Some(body);
    m.attributes = HashMap::from([(
        "ApproximateReceiveCount".to_string(),
        receive_count.to_string(),
    )]);
    m
}

fn deps(db: &TestDb, function: Function) -> Environment {
    environment(function, &db.url, t(NOW)).build()
}

/// Every job, B28's with what `hk` gives them (the log email transport here).
async fn dispatch() -> Dispatch {
    let notify = NotifyConfig::from_lookup(&|k: &str| match k {
        "EMAIL_TRANSPORT" => Some("log".into()),
        other => lab::demo::hk_default(other),
    })
    .unwrap();
    let notifier = Notifier::full(&notify, None).await.unwrap();
    Dispatch::new()
        .with::<handlers::PatExpiring>(notifier.instance.clone())
        .with::<handlers::DeliverNotification>(notifier)
}

#[test]
fn the_lambda_glue_fails_exactly_the_malformed_records_and_logs_each_one() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // An empty schema: whatever a well-formed record asks for is a harmless no-op.
    let db = rt.block_on(TestDb::new());
    let dispatch = rt.block_on(dispatch());
    let all: HashMap<Function, Environment> = rt.block_on(async {
        let mut m = HashMap::new();
        for f in Function::ALL {
            m.insert(*f, deps(&db, *f));
        }
        m
    });
    let events = arb_function().prop_flat_map(|f| {
        (
            Just(f),
            prop::collection::vec(
                (
                    arb_body_for(f),
                    prop_oneof![Just("1".to_string()), Just("5".to_string()), ".{0,4}"],
                ),
                1..6,
            ),
        )
    });
    let runner_cases = (cases() / 5).max(50);
    let mut runner = TestRunner::new(PtConfig {
        cases: runner_cases,
        failure_persistence: None,
        ..PtConfig::default()
    });
    let (log, _g) = capture();
    let malformed_seen = std::cell::Cell::new(0u64);
    let records_seen = std::cell::Cell::new(0u64);
    runner
        .run(&events, |(receiver, recs)| {
            log.clear();
            let mut event = SqsEvent::default();
            event.records = recs
                .iter()
                .enumerate()
                .map(|(i, (body, rc))| record(i, body.clone(), rc))
                .collect();
            let resp = rt
                .block_on(handle_event_with(
                    &dispatch,
                    &all[&receiver],
                    LambdaEvent::new(event, Context::default()),
                ))
                .map_err(|e| TestCaseError::fail(format!("the whole batch failed: {e}")))?;
            let failed: Vec<String> = resp
                .batch_item_failures
                .iter()
                .map(|f| f.item_identifier.clone())
                .collect();
            let malformed = log.with_message("malformed message");
            for (i, (body, _)) in recs.iter().enumerate() {
                records_seen.set(records_seen.get() + 1);
                let id = format!("fuzz-{i}");
                let logged = malformed
                    .iter()
                    .filter(|l| l["sqs_message_id"] == id.as_str())
                    .count();
                if Envelope::parse(body, receiver).is_err() {
                    malformed_seen.set(malformed_seen.get() + 1);
                    prop_assert!(failed.contains(&id), "{id} malformed but not failed");
                    prop_assert_eq!(logged, 1, "{} needs one `malformed message` line", id);
                }
                // Any failure here is a malformed payload: a clear line, never silent.
                if failed.contains(&id) {
                    prop_assert_eq!(
                        logged,
                        1,
                        "{} failed without a `malformed message` line",
                        id
                    );
                }
            }
            prop_assert!(log
                .with_message("record failed: handler panicked")
                .is_empty());
            prop_assert!(!log.dump().contains(MARKER), "a log line quotes a body");
            Ok(())
        })
        .unwrap();
    eprintln!(
        "glue fuzz: {} events, {} records, {} malformed",
        runner_cases,
        records_seen.get(),
        malformed_seen.get()
    );
    assert!(
        malformed_seen.get() > 0,
        "the generator produced no malformed record"
    );
    assert!(
        records_seen.get() > malformed_seen.get(),
        "the generator produced no well-formed record"
    );
}
