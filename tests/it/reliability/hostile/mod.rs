//! Hostile input through the path `hk run <function> --message` takes (the local
//! `Runner` → `process_record`):
//!
//! * `reproductions`: each reproduction of issue 18 (counters from the message,
//!   `run_id`s that cannot form a key, payload values outside their ranges, payload
//!   errors that quoted the body).
//! * `payload_validation`: a property test of every message type's payload validation
//!   (valid payloads round-trip; each out-of-range field is a permanent failure naming
//!   the field, never the value).
//! * `handler_fuzz`: a fuzz of the handlers with arbitrary payloads on the demo data: no
//!   panic, only JSON lines, and no secret-looking payload string in any log line.
//!
//! Bounded for CI: `HK_FUZZ_CASES` (default 5000 payload-validation cases, a tenth of
//! that handler runs).
//!
//! Here: the envelope, one `hk run`, the malformed check, and the secret-looking
//! strings both property tests plant.

use std::sync::Arc;
use std::time::Duration;

use engine::local::Runner;
use integration_tests::fixtures::U;
use integration_tests::logs::{capture, Captured};
use integration_tests::sinks::net::TestNetwork;
use integration_tests::{t, Fx, TestDb};
use proptest::prelude::*;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{json, Value};
use shared::batches::adjourned_group_deletion::{AdjournedGroupDeletionRun, GroupCursor};
use shared::batches::placeholder_user_cleanup::{DetailCursor, PlaceholderUserCleanupRun};
use shared::batches::remove_expired_members::{MemberCursor, RemoveExpiredMembersRun};
use shared::messages::{Envelope, FromMessage, Payload};
use shared::notify::webhook::WebhookClient;
use shared::notify::{Notifier, NotifyConfig};
use shared::runtime::RecordOutcome;
use shared::workers::delete_placeholder_user::DeletePlaceholderUserRun;
use shared::workers::delete_user::DeleteUserRun;
use shared::workers::deliver_notification::{EmailNotification, ResourceType, WebhookNotification};
use shared::workers::group_destroy::GroupDestroyRun;
use shared::Function;

mod handler_fuzz;
mod payload_validation;
mod reproductions;

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
async fn hk_run(r: &mut Runner, f: Function, body: &str) -> (engine::local::Run, Captured) {
    let (log, _g) = capture();
    let (run, _) = r.invoke(f, body, 1).await.unwrap();
    (run, log)
}

/// A permanent failure naming `field`, nothing sent, no `start` line, and no
/// `secret` anywhere in the log.
fn assert_malformed(run: &engine::local::Run, log: &Captured, field: &str, secret: &str) {
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

fn secret() -> BoxedStrategy<Value> {
    "[a-z]{0,6}"
        .prop_map(|s| Value::from(format!("{SECRET}{s}")))
        .boxed()
}

fn set_path(v: &mut Value, path: &str, x: Value) {
    match path.split_once('.') {
        Some((a, b)) => set_path(&mut v[a], b, x),
        None => v[path] = x,
    }
}
