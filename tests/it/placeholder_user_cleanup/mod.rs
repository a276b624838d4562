//! B70 placeholder-user-cleanup and delete-placeholder-user: every acceptance scenario
//! of behaviour §B70.9 (tests `s01_…` to `s14_…`), plus grouping
//! (behaviour §7.2), transient retries, the deadline guard, the hop limit, dry run,
//! replays, the Lambda glue and a run until idle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::handle_event;
use async_trait::async_trait;
use chrono::{DateTime, Utc};
use hk::local::process_record;
use hk::local::Runner;
use hk::local_queue::{LocalQueue, SentRecord};
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use shared::clock::FixedClock;
use shared::config::{Config, Settings};
use shared::db::Session;
use shared::lambda::Deps;
use shared::messages::{DeletePlaceholderUserRun, Envelope};
use shared::queue::{schedule_name, OutMessage, Queue, QueueError};
use shared::runtime::{Deadline, Invocation, RecordMeta, RecordOutcome};
use shared::telemetry::{capture, Captured};
use shared::Function;

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
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT 10000 + g, 'ph' || g, 'ph' || g || '@example.com', 'active', 15
           FROM generate_series(1, {n}) g;
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

#[test]
fn the_catalogue_runs_the_cleanup_daily_at_midnight_and_routes_both_types() {
    assert_eq!(F.name(), "placeholder-user-cleanup");
    assert_eq!(F.cron(), Some("cron(0 0 * * ? *)"));
    assert_eq!(F.max_hops(), 1000);
    assert_eq!(F.sends_to(), &[F, CHILD]);
    assert_eq!(CHILD.cron(), None);
    assert_eq!(CHILD.sends_to(), &[Function::DeleteUser]);
    assert_eq!(
        Function::receiver_of("delete-placeholder-user.run"),
        Some(CHILD)
    );
    assert_eq!(
        Function::receiver_of("placeholder-user-cleanup.run"),
        Some(F)
    );
}

#[tokio::test]
async fn s01_a_first_attempt_is_counted_and_its_child_is_sent_at_once() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!((m.receiver, m.delay_s), (CHILD, 0));
    assert_eq!(m.envelope.kind, "delete-placeholder-user.run");
    assert_eq!(m.envelope.message_key, "delete-placeholder-user:50:1");
    assert_eq!(
        m.envelope.payload,
        json!({"placeholder_user_id": 50, "attempt": 1})
    );
    assert_eq!(m.envelope.hop, 0);
    let start = log.one("start");
    assert_eq!(m.envelope.run_id, start["run_id"].as_str().unwrap());
    assert!(sent[0].schedule_name.is_none());
    assert_cron_done(&log, 1, 0, 0, 0);
    assert_eq!(r.runs[0].outcome, "success");
    assert_eq!(r.queue().send_calls(), 1);
}

#[tokio::test]
async fn s02_a_detail_whose_namespace_still_exists_is_not_selected() {
    let db = TestDb::new().await;
    Fx(&db).group(100, "imported", None).await;
    Fx(&db).users(&[U::placeholder(51)]).await;
    pd(&db, 2, 51, Some(100), 0, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 2).await, untouched(0, None));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 0, 0);
}

#[tokio::test]
async fn s03_an_attempt_exactly_two_days_ago_is_not_yet_eligible_and_one_second_more_is() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(52), U::placeholder(53)])
        .await;
    pd(&db, 3, 52, None, 2, Some("2025-03-08T00:00:00Z")).await;
    pd(&db, 4, 53, None, 2, Some("2025-03-07T23:59:59Z")).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(
        detail(&db, 3).await,
        untouched(2, Some("2025-03-08T00:00:00Z"))
    );
    assert_eq!(detail(&db, 4).await, (3, Some(t(NOW)), t(NOW)));
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:53:3"
    );
    assert_eq!(
        sent[0].message.envelope.payload,
        json!({"placeholder_user_id": 53, "attempt": 3})
    );
    assert_cron_done(&log, 1, 0, 0, 0);
    // One microsecond later PD3 is due too.
    let (r2, _) = cron_at(&db, "2025-03-10T00:00:00.000001Z").await;
    assert_eq!(detail(&db, 3).await.0, 3);
    assert_eq!(
        r2.runs[0].sent[0].message.envelope.message_key,
        "delete-placeholder-user:52:3"
    );
}

#[tokio::test]
async fn s04_the_fifteenth_attempt_logs_the_final_attempt_warning_and_still_sends() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(54)]).await;
    pd(&db, 5, 54, None, 14, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 5).await, (15, Some(t(NOW)), t(NOW)));
    let w = log.one(FINAL_ATTEMPT);
    assert_eq!(w["level"], "warn");
    assert_eq!(w["placeholder_user_id"], 54);
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:54:15"
    );
    assert_cron_done(&log, 1, 1, 0, 0);
    // A 14th attempt is no final attempt.
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(54)]).await;
    pd(&db, 5, 54, None, 13, None).await;
    let (_, log) = cron_once(&db).await;
    assert!(log.with_message(FINAL_ATTEMPT).is_empty());
    assert_cron_done(&log, 1, 0, 0, 0);
}

#[tokio::test]
async fn s05_an_exhausted_detail_is_never_selected() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(55)]).await;
    pd(&db, 6, 55, None, 15, None).await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 6).await, untouched(15, None));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 0, 0);
}

#[tokio::test]
async fn s06_children_are_delayed_one_second_apart_and_past_900_s_use_schedules() {
    let db = TestDb::new().await;
    bulk(&db, 1001).await;
    let (r, log) = cron_once(&db).await;
    let sent = children(&r.runs[0].sent);
    assert_eq!(sent.len(), 1001);
    for (i, s) in sent.iter().enumerate() {
        let id = i as i64 + 1;
        assert_eq!(s.message.delay_s, i as u32);
        let key = format!("delete-placeholder-user:{}:1", 10000 + id);
        assert_eq!(s.message.envelope.message_key, key);
        if i <= 900 {
            assert!(s.schedule_name.is_none(), "index {i} goes through SQS");
        } else {
            assert_eq!(s.schedule_name, Some(schedule_name(&key)), "index {i}");
        }
    }
    assert_cron_done(&log, 1001, 0, 0, 0);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        1001
    );
    // Ten groups of 100 (ten calls each), then one group of one.
    assert_eq!(r.queue().send_calls(), 101);
}

#[tokio::test]
async fn s07_a_detail_claimed_by_another_session_before_the_claim_is_stale() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    // Another run claims PD1 but has not committed when our page is read.
    let other = db.session().await;
    other
        .batch_execute(
            "BEGIN;
             UPDATE import_placeholder_user_details
             SET deletion_attempts = deletion_attempts + 1,
                 last_deletion_attempt_at = '2025-03-10T00:00:00Z', updated_at = '2025-03-10T00:00:00Z'
             WHERE id = 1",
        )
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    let run = r.invoke(F, &body, 1);
    // Commit the other claim once our own claim waits for PD1's row lock.
    let commit_when_blocked = async {
        db.blocked_on_lock("placeholder-user-cleanup").await;
        other.batch_execute("COMMIT").await.unwrap();
    };
    let (result, ()) = tokio::join!(run, commit_when_blocked);
    result.unwrap();
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    assert!(r.runs[0].sent.is_empty());
    assert_cron_done(&log, 0, 0, 1, 0);
    let l = log.one("Placeholder user detail skipped: no longer eligible");
    assert_eq!(l["level"], "debug");
    assert_eq!(l["detail_id"], 1);
}

#[tokio::test]
async fn s08_a_child_for_a_missing_user_succeeds_silently() {
    let db = TestDb::new().await;
    let (r, log) = child_once(&db, 999).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_found");
    assert_eq!(db.count("users").await, 0);
}

#[tokio::test]
async fn s09_a_child_for_a_human_succeeds_silently_and_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db).group(100, "acme", None).await;
    Fx(&db).users(&[U::human(56)]).await;
    Fx(&db).members(&[M::gm(70, 100, 56, 30)]).await;
    let (r, log) = child_once(&db, 56).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_placeholder");
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 56")
            .await,
        "active"
    );
    assert!(db.exists("members WHERE id = 70").await);
    assert!(!db.exists("ghost_user_migrations").await);
}

#[tokio::test]
async fn s10_a_child_for_a_still_referenced_placeholder_warns_and_keeps_it() {
    for table in ["notes", "issues", "merge_requests"] {
        let db = TestDb::new().await;
        let fx = Fx(&db);
        fx.group(100, "acme", None).await;
        fx.project(200, 100).await;
        fx.users(&[U::placeholder(50)]).await;
        pd(&db, 1, 50, None, 1, Some(NOW)).await;
        fx.contribution(table, 1, 200, 50).await;
        let (r, log) = child_once(&db, 50).await;
        let w = log.one(REFERENCED);
        assert_eq!(w["level"], "warn", "{table}");
        assert_eq!(w["placeholder_user_id"], 50);
        assert_eq!(log.done()["outcome"], "referenced");
        assert_eq!(r.runs[0].outcome, "success");
        assert!(r.runs[0].sent.is_empty());
        assert_eq!(
            db.scalar::<String>("SELECT state FROM users WHERE id = 50")
                .await,
            "active",
            "{table}"
        );
        assert_eq!(detail(&db, 1).await, untouched(1, Some(NOW)));
        assert!(!db.exists("ghost_user_migrations").await);
        assert!(log.with_message("User scheduled for removal").is_empty());
    }
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

#[tokio::test]
async fn s11_a_deletable_placeholder_is_scheduled_for_removal_and_delete_user_finishes() {
    let db = deletable().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(CHILD, &child_body(50, 1), 1).await.unwrap();
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 50")
            .await,
        "blocked"
    );
    assert!(!db.exists("members WHERE id = 60").await);
    assert!(db.pas().await.is_empty());
    let row = db
        .client
        .query_one(
            "SELECT initiator_user_id, hard_delete FROM ghost_user_migrations WHERE user_id = 50",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), Some(50));
    assert!(!row.get::<_, bool>(1));
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!((m.receiver, m.delay_s), (Function::DeleteUser, 30));
    assert_eq!(m.envelope.message_key, "delete-user:50");
    assert_eq!(m.envelope.run_id, "run-1");
    assert_eq!(
        m.envelope.payload,
        json!({"user_id": 50, "initiator_user_id": 50, "reason": "Placeholder user cleanup"})
    );
    let l = log.one("Placeholder user deletion scheduled");
    assert_eq!(l["level"], "info");
    assert_eq!(l["placeholder_user_id"], 50);
    let p1 = log.one("User scheduled for removal");
    assert_eq!(p1["initiator_user_id"], 50);
    assert_eq!(p1["reason"], "Placeholder user cleanup");
    let done = log.done();
    assert_eq!(done["outcome"], "scheduled");
    assert_eq!(done["status"], "completed");
    // The detail stays until phase 2.
    assert!(
        db.exists("import_placeholder_user_details WHERE id = 1")
            .await
    );
    // When the delete-user message runs (30 s later), U50 and PD1 are gone.
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].function, Function::DeleteUser);
    assert_eq!(r.runs[1].now, t("2025-03-10T00:00:30Z"));
    assert!(!db.exists("users WHERE id = 50").await);
    assert!(!db.exists("import_placeholder_user_details").await);
    assert!(
        db.exists("import_source_users WHERE id = 1 AND placeholder_user_id IS NULL")
            .await
    );
    let deleted = log.one("User deleted");
    assert_eq!(deleted["initiator_user_id"], 50);
    assert_eq!(deleted["reason"], "Placeholder user cleanup");
    assert_eq!(r.exit_code(false), 0);
}

#[tokio::test]
async fn s12_a_child_replayed_after_the_deletion_is_a_silent_no_op() {
    let db = deletable().await;
    let mut r = db.runner(t(NOW));
    r.run_until_idle(CHILD, &child_body(50, 1)).await.unwrap();
    assert!(!db.exists("users WHERE id = 50").await);
    let users = db.count("users").await;
    let (log, _g) = capture();
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert!(run.sent.is_empty());
    assert_silent(&log);
    assert_eq!(log.done()["outcome"], "not_found");
    assert_eq!(db.count("users").await, users);
}

#[tokio::test]
async fn s13_a_run_finding_the_overlap_lock_held_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:placeholder-user-cleanup");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    // Once the holder lets go, the next run claims PD1.
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
}

#[tokio::test]
async fn s14_a_failed_send_rolls_back_the_whole_group_and_the_record_is_retryable() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(57)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 7, 57, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-placeholder-user:50:1");
    let body = r.cron_message(F).to_body();
    let (run, outcome) = r.invoke(F, &body, 1).await.unwrap();
    // Under grouping (behaviour §7.2 (b)) PD1's whole group rolls back: PD7 as well.
    assert_eq!(run.outcome, "retryable");
    assert!(matches!(
        outcome,
        RecordOutcome::Retryable { ref error_class, .. } if error_class == "transport"
    ));
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    assert_eq!(detail(&db, 7).await, untouched(0, None));
    assert!(run.sent.is_empty());
    assert!(
        log.with_message(FAILED_DETAIL).is_empty(),
        "not step E: {}",
        log.dump()
    );
    let failed = log.one("record failed");
    assert_eq!(failed["error_class"], "transport");
    assert_eq!(log.done()["status"], "failed");
    // The lock was released: the redelivered message claims both details.
    r.queue().clear_failures();
    let (log2, _g2) = capture();
    let (run, _) = r.invoke(F, &body, 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 7).await.0, 1);
    let delays: Vec<u32> = run.sent.iter().map(|s| s.message.delay_s).collect();
    assert_eq!(delays, vec![0, 1]);
    assert_cron_done(&log2, 2, 0, 0, 0);
}

#[tokio::test]
async fn a_send_failure_in_a_later_group_keeps_the_groups_committed_before_it() {
    let db = TestDb::new().await;
    bulk(&db, 150).await;
    let mut r = db.runner(t(NOW));
    // Detail 120 is in the second group (101..150), in its second call of ten.
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-placeholder-user:10120:1");
    let body = r.cron_message(F).to_body();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(run.outcome, "retryable");
    assert_eq!(
        db.ids("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        (1..=100).collect::<Vec<i64>>()
    );
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 0 AND last_deletion_attempt_at IS NULL")
            .await,
        50
    );
    // Ten calls for group 1; group 2's first call went out before its second failed.
    assert_eq!(r.queue().send_calls(), 12);
    assert_eq!(run.sent.len(), 110);
    // The redelivery claims the other 50; its children repeat the keys of the ten that
    // went out without a commit (the child's checks make duplicates harmless).
    r.queue().clear_failures();
    let (log, _g) = capture();
    let (run, _) = r.invoke(F, &body, 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert_cron_done(&log, 50, 0, 0, 0);
    let keys: Vec<String> = run
        .sent
        .iter()
        .map(|s| s.message.envelope.message_key.clone())
        .collect();
    let expected: Vec<String> = (101..=150)
        .map(|id| format!("delete-placeholder-user:{}:1", 10000 + id))
        .collect();
    assert_eq!(keys, expected);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        150
    );
}

#[tokio::test]
async fn a_failing_detail_rolls_back_to_its_savepoint_and_the_group_goes_on() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51), U::placeholder(52)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE UPDATE ON import_placeholder_user_details
           FOR EACH ROW WHEN (OLD.id = 2) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(r.runs[0].outcome, "success");
    let e = log.one(FAILED_DETAIL);
    assert_eq!(e["level"], "error");
    assert_eq!(e["detail_id"], 2);
    assert_eq!(e["placeholder_user_id"], 51);
    assert_eq!(e["error"], "boom");
    assert_eq!(e["error_class"], "db");
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await, untouched(0, None));
    assert_eq!(detail(&db, 3).await.0, 1);
    // The failed detail does not advance `i`: PD3's child follows PD1's by one second.
    let sent: Vec<(String, u32)> = r.runs[0]
        .sent
        .iter()
        .map(|s| (s.message.envelope.message_key.clone(), s.message.delay_s))
        .collect();
    assert_eq!(
        sent,
        vec![
            ("delete-placeholder-user:50:1".to_string(), 0),
            ("delete-placeholder-user:52:1".to_string(), 1)
        ]
    );
    assert_cron_done(&log, 2, 0, 0, 1);
}

#[tokio::test]
async fn a_transient_error_restarts_the_detail_from_its_savepoint() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    // The first claim of PD2 fails with a serialization failure; the sequence is not
    // transactional, so the retry succeeds.
    db.exec(
        "CREATE SEQUENCE flaky_seq;
         CREATE FUNCTION flaky() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('flaky_seq') = 1 THEN
             RAISE EXCEPTION 'could not serialize' USING ERRCODE = '40001';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER flaky BEFORE UPDATE ON import_placeholder_user_details
           FOR EACH ROW WHEN (OLD.id = 2) EXECUTE FUNCTION flaky();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await.0, 1);
    assert_eq!(r.runs[0].sent.len(), 2);
    assert!(log.with_message(FAILED_DETAIL).is_empty());
    assert_eq!(
        log.with_message("transient database error, retrying").len(),
        1
    );
    assert_cron_done(&log, 2, 0, 0, 0);
}

#[tokio::test]
async fn a_redelivered_or_repeated_run_never_counts_an_attempt_twice() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::placeholder(50)]).await;
    pd(&db, 1, 50, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    // The same cron message again, and a later cron tick within two days.
    r.invoke(F, &body, 2).await.unwrap();
    let mut later = db.runner(t("2025-03-12T00:00:00Z"));
    let tick = later.cron_message(F).to_body();
    later.invoke(F, &tick, 1).await.unwrap();
    assert_eq!(detail(&db, 1).await, (1, Some(t(NOW)), t(NOW)));
    assert_eq!(r.runs[0].sent.len(), 1);
    assert!(r.runs[1].sent.is_empty());
    assert!(later.runs[0].sent.is_empty());
    let dones = log.with_message("done");
    assert_eq!(dones[1]["enqueued_count"], 0);
    assert_eq!(dones[1]["stale_count"], 0);
}

/// A transport that records the size of every `send` call.
struct Recording {
    inner: LocalQueue,
    sizes: Mutex<Vec<usize>>,
}

#[async_trait]
impl Queue for Recording {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        self.sizes.lock().unwrap().push(messages.len());
        self.inner.send(messages).await
    }
}

#[tokio::test]
async fn fifteen_hundred_placeholders_get_fifteen_hundred_children_sent_ten_per_call() {
    let db = TestDb::new().await;
    bulk(&db, 1500).await;
    let q = Recording {
        inner: LocalQueue::new(t(NOW)),
        sizes: Mutex::new(Vec::new()),
    };
    let settings = Settings::default();
    let inv = Invocation {
        notifier: None,
        function: F,
        now: t(NOW),
        queue: &q,
        settings: &settings,
        deadline: Deadline::in_(F.timeout(), settings.deadline_margin),
    };
    let body = Envelope::cron(F, "run-1500", t(NOW)).to_body();
    let mut client = db.connector().connect(F.name()).await.unwrap();
    let (log, _g) = capture();
    let outcome = process_record(&inv, &mut client, &body, &RecordMeta::default()).await;
    assert!(outcome.is_success());
    let sent = q.inner.sent();
    assert_eq!(sent.len(), 1500);
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.message.delay_s, i as u32);
        assert_eq!(s.message.envelope.run_id, "run-1500");
        let key = &s.message.envelope.message_key;
        assert_eq!(*key, format!("delete-placeholder-user:{}:1", 10001 + i));
        if i > 900 {
            assert_eq!(s.schedule_name, Some(schedule_name(key)), "index {i}");
        } else {
            assert!(s.schedule_name.is_none(), "index {i}");
        }
    }
    assert_eq!(
        sent.iter().filter(|s| s.schedule_name.is_some()).count(),
        599
    );
    // 15 groups of 100, each sent in ten calls of ten.
    assert_eq!(q.inner.send_calls(), 150);
    assert_eq!(*q.sizes.lock().unwrap(), vec![10; 150]);
    assert_eq!(log.done()["enqueued_count"], 1500);
    assert_cron_done(&log, 1500, 0, 0, 0);
    assert_eq!(
        db.count("import_placeholder_user_details WHERE deletion_attempts = 1")
            .await,
        1500
    );
}

#[tokio::test]
async fn the_deadline_guard_continues_after_each_detail_carrying_the_index() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51), U::placeholder(52)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let cron = r.cron_message(F);
    r.invoke(F, &cron.to_body(), 1).await.unwrap();
    // Progress rule: the first detail is processed although the guard has fired.
    assert_eq!(detail(&db, 1).await.0, 1);
    assert_eq!(detail(&db, 2).await.0, 0);
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(done["enqueued_count"], 1);
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].message.receiver, CHILD);
    let c = &sent[1].message;
    assert_eq!((c.receiver, c.delay_s, c.envelope.hop), (F, 0, 1));
    assert_eq!(
        c.envelope.payload,
        json!({"cursor": {"detail_id": 1, "index": 1}})
    );
    assert_eq!(c.envelope.run_id, cron.run_id);
    assert_eq!(
        c.envelope.message_key,
        format!("placeholder-user-cleanup:{}:1", cron.run_id)
    );
    // Until idle: one detail per invocation, the children 0, 1 and 2 s after the run.
    r.drain().await.unwrap();
    let cron_runs: Vec<_> = r.runs.iter().filter(|x| x.function == F).collect();
    // The guard only fires before a detail: the third invocation finds the next page
    // empty and completes.
    assert_eq!(cron_runs.len(), 3, "one invocation per detail");
    assert_eq!(
        cron_runs[1].report.as_ref().unwrap().to_json()["status"],
        "limit_reached"
    );
    assert_eq!(
        cron_runs[2].report.as_ref().unwrap().to_json()["status"],
        "completed"
    );
    assert_eq!(
        cron_runs[1].sent.last().unwrap().message.envelope.payload,
        json!({"cursor": {"detail_id": 2, "index": 2}})
    );
    let mut child_delays: Vec<(String, u32)> = r
        .runs
        .iter()
        .flat_map(|x| children(&x.sent))
        .map(|s| (s.message.envelope.message_key.clone(), s.message.delay_s))
        .collect();
    child_delays.sort();
    assert_eq!(
        child_delays,
        vec![
            ("delete-placeholder-user:50:1".to_string(), 0),
            ("delete-placeholder-user:51:1".to_string(), 1),
            ("delete-placeholder-user:52:1".to_string(), 2)
        ]
    );
    assert!(log.with_message("skipped: already running").is_empty());
    assert_eq!(r.exit_code(false), 0);
}

#[tokio::test]
async fn a_continuation_past_the_hop_limit_logs_and_sends_only_the_child() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(51)])
        .await;
    pd(&db, 11, 50, None, 0, None).await;
    pd(&db, 12, 51, None, 0, None).await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let mut env = r.cron_message(F);
    env.hop = 1000;
    env.message_key = "placeholder-user-cleanup:r:1000".into();
    // Seven children were sent for details up to id 10 (an index is at most the id).
    env.payload = json!({"cursor": {"detail_id": 10, "index": 7}});
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(l["level"], "error");
    assert_eq!(l["max_hops"], 1000);
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].message.receiver, CHILD);
    // The index came in through the cursor.
    assert_eq!(sent[0].message.delay_s, 7);
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_dry_run_reports_the_children_and_changes_nothing() {
    let db = TestDb::new().await;
    Fx(&db)
        .users(&[U::placeholder(50), U::placeholder(54)])
        .await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 5, 54, None, 14, None).await;
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    let run = r.dry_run(F, &body).await.unwrap();
    assert_eq!(run.outcome, "success");
    let report = run.report.unwrap().to_json();
    assert_eq!(report["enqueued_count"], 2);
    assert_eq!(report["max_attempts_reached_count"], 1);
    assert_eq!(run.sent.len(), 2);
    assert_eq!(detail(&db, 1).await, untouched(0, None));
    assert_eq!(detail(&db, 5).await, untouched(14, None));
    assert_eq!(r.queue().pending_len(), 0);
    // Nothing is left locked: a real run follows.
    cron_once(&db).await;
    assert_eq!(detail(&db, 1).await.0, 1);
}

#[tokio::test]
async fn a_placeholder_that_is_a_sole_owner_is_refused_by_phase_one() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.users(&[U::placeholder(50)]).await;
    fx.members(&[M::gm(61, 100, 50, 50)]).await;
    pd(&db, 1, 50, None, 1, Some(NOW)).await;
    let (r, log) = child_once(&db, 50).await;
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    log.one("User removal refused: sole owner of group");
    let done = log.done();
    assert_eq!(done["outcome"], "refused");
    assert_eq!(done["status"], "refused");
    assert!(log
        .with_message("Placeholder user deletion scheduled")
        .is_empty());
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 50")
            .await,
        "active"
    );
    assert!(db.exists("members WHERE id = 61").await);
    assert!(!db.exists("ghost_user_migrations").await);
}

#[tokio::test]
async fn a_failed_delete_user_send_rolls_back_phase_one_and_the_child_is_retryable() {
    let db = deletable().await;
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-user:50");
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 1).await.unwrap();
    assert_eq!(run.outcome, "retryable");
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 50")
            .await,
        "active"
    );
    assert!(db.exists("members WHERE id = 60").await);
    assert!(!db.exists("ghost_user_migrations").await);
    // The redelivery works once the transport is back.
    r.queue().clear_failures();
    let (run, _) = r.invoke(CHILD, &child_body(50, 1), 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    assert!(db.exists("ghost_user_migrations WHERE user_id = 50").await);
}

#[tokio::test]
async fn malformed_payloads_are_permanent_failures() {
    let db = TestDb::new().await;
    let mut r = db.runner(t(NOW));
    let mut child = Envelope::parse(&child_body(50, 1), CHILD).unwrap();
    child.payload = json!({"placeholder_user_id": 50});
    let (run, _) = r.invoke(CHILD, &child.to_body(), 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
    let mut cron = r.cron_message(F);
    cron.payload = json!({"cursor": {"detail_id": 1, "index": -1}});
    let (run, _) = r.invoke(F, &cron.to_body(), 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
}

#[tokio::test]
async fn until_idle_the_deletable_placeholder_goes_and_the_referenced_one_stays() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[
        U::ghost(5),
        U::placeholder(50),
        U::placeholder(51),
        U::human(52),
    ])
    .await;
    fx.contribution("notes", 1, 200, 51).await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert!(!db.exists("users WHERE id = 50").await);
    assert_eq!(db.ids("import_placeholder_user_details").await, vec![2, 3]);
    assert_eq!(detail(&db, 2).await.0, 1);
    assert_eq!(detail(&db, 3).await.0, 1);
    assert!(db.exists("users WHERE id = 51 AND state = 'active'").await);
    assert!(db.exists("users WHERE id = 52 AND state = 'active'").await);
    let order: Vec<(Function, DateTime<Utc>)> =
        r.runs.iter().map(|x| (x.function, x.now)).collect();
    assert_eq!(
        order,
        vec![
            (F, t(NOW)),
            (CHILD, t(NOW)),
            (CHILD, t("2025-03-10T00:00:01Z")),
            (CHILD, t("2025-03-10T00:00:02Z")),
            (Function::DeleteUser, t("2025-03-10T00:00:30Z")),
        ]
    );
    let outcomes: Vec<Value> = log
        .with_message("done")
        .iter()
        .filter(|d| d["function"] == "delete-placeholder-user")
        .map(|d| d["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![
            json!("scheduled"),
            json!("referenced"),
            json!("not_placeholder")
        ]
    );
    assert_eq!(r.exit_code(false), 0);
}

fn event(path: &str) -> aws_lambda_events::event::sqs::SqsEvent {
    let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap()
}

fn deps(db: &TestDb, function: Function, queue: Arc<dyn Queue>) -> Deps {
    let env: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", db.url.clone()),
        ("TRANSPORT", "local".into()),
    ]);
    Deps {
        notifier: None,
        function,
        session: Session::new(db.connector(), function.name()),
        config: Config::from_lookup(|k| env.get(k).cloned()).unwrap(),
        queue,
        clock: Arc::new(FixedClock(t(NOW))),
    }
}

#[tokio::test]
async fn the_sample_events_run_through_the_lambda_glue() {
    let db = deletable().await;
    let q = LocalQueue::new(t(NOW));
    let resp = handle_event(
        &deps(&db, F, Arc::new(q.clone())),
        LambdaEvent::new(
            event("events/placeholder-user-cleanup.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(detail(&db, 1).await.0, 1);
    let sent = q.take_sent();
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:50:1"
    );
    assert_eq!(
        sent[0].message.envelope.run_id,
        "5b1d7a4e-2f0c-4d8e-9a61-0c3e8f2b7d70"
    );
    let resp = handle_event(
        &deps(&db, CHILD, Arc::new(q.clone())),
        LambdaEvent::new(
            event("events/delete-placeholder-user.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert!(db.exists("users WHERE id = 50 AND state = 'blocked'").await);
    assert_eq!(q.sent()[0].message.envelope.message_key, "delete-user:50");
}

#[tokio::test]
async fn the_demo_data_deletes_the_two_deletable_placeholders_and_keeps_the_rest() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let mut c = db.connector().connect("tests").await.unwrap();
    hk::demo::seed(&mut c, integration_tests::d("2026-03-01"))
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t("2026-03-01T00:00:00Z"));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    let done = &log.with_message("done")[0];
    assert_eq!(done["enqueued_count"], 4);
    assert_eq!(done["max_attempts_reached_count"], 1);
    assert_eq!(
        log.one(FINAL_ATTEMPT)["placeholder_user_id"],
        5003,
        "{}",
        log.dump()
    );
    assert_eq!(log.one(REFERENCED)["placeholder_user_id"], 5002);
    assert_eq!(
        db.ids("users WHERE id BETWEEN 5000 AND 5999").await,
        vec![5002, 5004, 5005, 5006, 5007]
    );
    assert!(!db.exists("members WHERE user_id = 5001").await);
    assert!(
        db.exists("import_source_users WHERE id = 5001 AND placeholder_user_id IS NULL")
            .await
    );
    assert_eq!(
        db.ids("import_placeholder_user_details").await,
        vec![5002, 5004, 5005, 5006, 5007]
    );
}
