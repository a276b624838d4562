//! placeholder-user-cleanup and delete-placeholder-user (B70): every acceptance
//! scenario of behaviour §B70.9 (tests `s01_…` to `s14_…`), plus grouping
//! (behaviour §7.2), transient retries, the deadline guard, the hop limit, dry run,
//! replays, the Lambda glue and a run until idle. By concern:
//!
//! * `selection`: which details the cron counts an attempt for and sends a child for
//!   (s01–s07), and the catalogue entry.
//! * `delete_placeholder_user`: the child (s08–s12), phase 1 of the removal it starts,
//!   malformed payloads.
//! * `failures`: the overlap lock, failed sends, savepoints and transient errors, and
//!   attempts never counted twice (s13, s14).
//! * `continuation`: sends of ten, the deadline guard, the hop limit, dry run.
//! * `end_to_end`: until idle, the sample events through the Lambda glue, the demo data.
//!
//! Here: detail rows, one cron or child invocation, and the checks of a silent run and
//! of the cron's done line.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::handle_event;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use engine::local::process_record;
use engine::local::Runner;
use engine::local_queue::{LocalQueue, SentRecord};
use integration_tests::fixtures::{M, U};
use integration_tests::logs::{capture, Captured};
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::lambda::Environment;
use shared::messages::Envelope;
use shared::queue::{schedule_name, OutMessage, Queue, QueueError};
use shared::runtime::{Invocation, RecordMeta, RecordOutcome};
use shared::workers::delete_placeholder_user::DeletePlaceholderUserRun;
use shared::Function;

mod continuation;
mod delete_placeholder_user;
mod end_to_end;
mod failures;
mod selection;

const NOW: &str = "2025-03-10T00:00:00Z";

const F: Function = Function::PlaceholderUserCleanup;

const CHILD: Function = Function::DeletePlaceholderUser;

const FINAL_ATTEMPT: &str = "Maximum deletion attempts (15) reached for deletion of placeholder user. Making final deletion attempt.";

const REFERENCED: &str =
    "Unable to delete placeholder user because it is still referenced in other tables";

const FAILED_DETAIL: &str = "Placeholder user cleanup failed for detail";

/// `PD<n>(id, user, ns, attempts, last)`: an `import_placeholder_user_details` row,
/// created and last updated on 2024-01-01.
async fn pd(db: &TestDb, id: i64, user: i64, ns: Option<i64>, attempts: i32, last: Option<&str>) {
    db.exec(&format!(
        "INSERT INTO import_placeholder_user_details
           (id, placeholder_user_id, namespace_id, deletion_attempts, organization_id,
            last_deletion_attempt_at, created_at, updated_at)
         VALUES ({id}, {user}, {ns}, {attempts}, 1, {last}, '2024-01-01T00:00:00Z', '2024-01-01T00:00:00Z')",
        ns = ns.map_or("NULL".into(), |n| n.to_string()),
        last = last.map_or("NULL".into(), |l| format!("'{l}'")),
    ))
    .await;
}

/// `(deletion_attempts, last_deletion_attempt_at, updated_at)` of a detail.
async fn detail(db: &TestDb, id: i64) -> (i32, Option<DateTime<Utc>>, DateTime<Utc>) {
    let r = db
        .client
        .query_one(
            "SELECT deletion_attempts, last_deletion_attempt_at, updated_at
             FROM import_placeholder_user_details WHERE id = $1::bigint",
            &[&id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1), r.get(2))
}

/// The state of a detail that nothing has touched since the fixture.
fn untouched(attempts: i32, last: Option<&str>) -> (i32, Option<DateTime<Utc>>, DateTime<Utc>) {
    (attempts, last.map(t), t("2024-01-01T00:00:00Z"))
}

/// `n` eligible details with ids 1..=n, each for its own placeholder 10000 + id.
async fn bulk(db: &TestDb, n: i64) {
    db.exec(&format!(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT 10000 + g, 'ph' || g, 'ph' || g || '@example.com', 'active', 15
          , 100000, 1 FROM generate_series(1, {n}) g;
         INSERT INTO import_placeholder_user_details
           (id, placeholder_user_id, organization_id, created_at, updated_at)
           SELECT g, 10000 + g, 1, '2024-01-01', '2024-01-01' FROM generate_series(1, {n}) g;"
    ))
    .await;
}

/// One invocation of a fresh cron message at `now`.
async fn cron_at(db: &TestDb, now: &str) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(now));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    (r, log)
}

async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    cron_at(db, NOW).await
}

/// A `delete-placeholder-user.run` body.
fn child_body(user: i64, attempt: i64) -> String {
    Envelope::new(
        CHILD.run_type(),
        format!("delete-placeholder-user:{user}:{attempt}"),
        "run-1",
        t(NOW),
        DeletePlaceholderUserRun {
            placeholder_user_id: user,
            attempt,
        },
    )
    .to_body()
}

/// One invocation of the child at NOW.
async fn child_once(db: &TestDb, user: i64) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(CHILD, &child_body(user, 1), 1).await.unwrap();
    (r, log)
}

/// Scenario 11's fixture: G100 "acme", P200 in G100 (project namespace 300), U50
/// (placeholder) without references, `M60: GM G100 U50 30`, PA(U50,P200,30), PD1, and
/// an `import_source_users` row for U50.
async fn deletable() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::placeholder(50)]).await;
    fx.members(&[M::gm(60, 100, 50, 30)]).await;
    fx.pas(&[(50, 200, 30)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    db.exec(
        "INSERT INTO import_source_users
           (id, placeholder_user_id, namespace_id, source_user_identifier, source_hostname,
            import_type, created_at, updated_at)
         VALUES (1, 50, 100, '7', 'https://gitlab.example.org', 'gitlab_migration',
                 '2024-01-01', '2024-01-01')",
    )
    .await;
    db
}

/// "Silent": no line at info or above besides `start`, `done` and the metrics line.
fn assert_silent(log: &Captured) {
    let loud: Vec<Value> = log
        .lines()
        .into_iter()
        .filter(|l| l["level"] != "debug" && l["level"] != "trace")
        .filter(|l| !["start", "done", "metrics"].contains(&l["message"].as_str().unwrap_or("")))
        .collect();
    assert!(loud.is_empty(), "not silent:\n{}", log.dump());
}

fn children(sent: &[SentRecord]) -> Vec<&SentRecord> {
    sent.iter()
        .filter(|s| s.message.receiver == CHILD)
        .collect()
}

fn assert_cron_done(log: &Captured, enqueued: i64, max: i64, stale: i64, failed: i64) {
    let done = log.done();
    assert_eq!(done["status"], "completed", "{}", log.dump());
    assert_eq!(
        (
            done["enqueued_count"].as_i64(),
            done["max_attempts_reached_count"].as_i64(),
            done["stale_count"].as_i64(),
            done["failed_count"].as_i64(),
        ),
        (Some(enqueued), Some(max), Some(stale), Some(failed)),
        "{}",
        log.dump()
    );
}
