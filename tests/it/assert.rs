//! The assertions the tests share, each written once: the fields of a log line (or of
//! any JSON object), the fields of a sent message, and the outcomes many functions have
//! in common (a run skipped because its lock is held, a continuation refused at the hop
//! limit, the EMF metric names of a cron record), and the rows many tests read (a
//! user's state, a user's project authorizations), and a snapshot without the ids a
//! sequence hands out in write order. A failure names the field and shows
//! the whole value.

use engine::local::Run;
use engine::local_queue::SentRecord;
use integration_tests::logs::Captured;
use integration_tests::TestDb;
use serde_json::Value;
use shared::queue::OutMessage;

/// Each field of `expected` (a JSON object) has that value in `got`; fields `expected`
/// does not name are not checked. Numbers compare as `assert_eq!` with a literal does:
/// a whole number as a whole number, a fraction as a float (`1.0` also matches `1`);
/// strings, `null`, booleans, arrays and objects compare exactly (a missing field is
/// `null`).
#[track_caller]
pub fn assert_fields(got: &Value, expected: Value) {
    let Value::Object(fields) = expected else {
        panic!("assert_fields takes an object of expected fields, not {expected}");
    };
    for (key, want) in &fields {
        let have = &got[key.as_str()];
        assert!(
            same(have, want),
            "field `{key}`: expected {want}, got {have}\nin {got}"
        );
    }
}

fn same(have: &Value, want: &Value) -> bool {
    match want {
        Value::Number(n) if n.is_f64() => have.as_f64() == n.as_f64(),
        Value::Number(n) if n.is_u64() => have.as_u64() == n.as_u64(),
        Value::Number(n) => have.as_i64() == n.as_i64(),
        _ => have == want,
    }
}

/// A sent message as one JSON object: its envelope (`type`, `message_key`, `run_id`,
/// `hop`, `payload`, …) with the `receiver` (the function's name) and the `delay_s`.
pub fn message_fields(m: &OutMessage) -> Value {
    let mut v = serde_json::to_value(&m.envelope).expect("an envelope is JSON");
    v["receiver"] = m.receiver.name().into();
    v["delay_s"] = m.delay_s.into();
    v
}

/// The fields of a sent message, as [`assert_fields`] checks them (see
/// [`message_fields`] for the names).
#[track_caller]
pub fn assert_message(m: &OutMessage, expected: Value) {
    assert_fields(&message_fields(m), expected);
}

/// Exactly one message was sent, with these fields (see [`message_fields`]); returns it.
#[track_caller]
pub fn assert_sent_one(sent: &[SentRecord], expected: Value) -> &OutMessage {
    assert_eq!(sent.len(), 1, "one message sent: {sent:?}");
    assert_message(&sent[0].message, expected);
    &sent[0].message
}

/// A run that found its overlap or single-flight lock held: it logged `skipped: already
/// running` once, its `done` line says `skipped`, the record succeeded and nothing was
/// sent.
#[track_caller]
pub fn assert_skipped_already_running(log: &Captured, run: &Run) {
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert_eq!(run.outcome, "success");
    assert!(run.sent.is_empty(), "a skipped run sent {:?}", run.sent);
}

/// A run whose continuation would pass the hop limit: one `continuation not sent: hop
/// limit reached` line naming `max_hops`, the record succeeded, nothing was sent.
#[track_caller]
pub fn assert_hop_limit_reached(log: &Captured, run: &Run, max_hops: u64) {
    assert_eq!(
        log.one("continuation not sent: hop limit reached")["max_hops"],
        max_hops
    );
    assert_eq!(run.outcome, "success");
    assert!(
        run.sent.is_empty(),
        "sent past the hop limit: {:?}",
        run.sent
    );
}

/// The metrics the EMF line of a cron function's record declares, in order, before the
/// function's own: every record's, then `run_started`.
pub const CRON_RECORD_METRICS: [&str; 11] = [
    "records",
    "records_failed",
    "duration_s",
    "outcome_done",
    "outcome_stale",
    "outcome_skipped",
    "outcome_retryable",
    "outcome_permanent",
    "outcome_panic",
    "outcome_deadline",
    "run_started",
];

/// The metric names the EMF line of a cron function's record declares:
/// [`CRON_RECORD_METRICS`], then `own`, in order.
#[track_caller]
pub fn assert_cron_metric_names(emf: &Value, own: &[&str]) {
    let names: Vec<&str> = emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .expect("an EMF line declares its metrics")
        .iter()
        .map(|m| m["Name"].as_str().expect("a metric has a name"))
        .collect();
    let expected: Vec<&str> = CRON_RECORD_METRICS.iter().chain(own).copied().collect();
    assert_eq!(names, expected);
}

/// `users.state` of `user`.
pub async fn assert_user_state(db: &TestDb, user: i64, state: &str) {
    let got: String = db
        .scalar(&format!("SELECT state FROM users WHERE id = {user}"))
        .await;
    assert_eq!(got, state, "the state of user {user}");
}

/// The `project_authorizations` rows of `user`, as `(user, project, access level)` in
/// order.
pub async fn assert_authorizations_of(db: &TestDb, user: i64, expected: &[(i64, i64, i32)]) {
    let got: Vec<_> = db.pas().await.into_iter().filter(|p| p.0 == user).collect();
    assert_eq!(got, expected, "the project authorizations of user {user}");
}

/// `snapshot` with the `id` of each row of `tables` left out: ids a sequence hands out
/// in the order rows are written (the `events` of removals), which a grouped page and
/// one transaction per member write in different orders.
pub(crate) fn without_ids(
    mut snapshot: std::collections::BTreeMap<String, String>,
    tables: &[&str],
) -> std::collections::BTreeMap<String, String> {
    for t in tables {
        let Some(text) = snapshot.get_mut(*t) else {
            continue;
        };
        let mut rows: Vec<String> = serde_json::from_str::<Vec<serde_json::Value>>(text)
            .unwrap()
            .into_iter()
            .map(|mut r| {
                r.as_object_mut().unwrap().remove("id");
                r.to_string()
            })
            .collect();
        rows.sort();
        *text = rows.join("\n");
    }
    snapshot
}
