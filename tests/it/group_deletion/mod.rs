//! adjourned-group-deletion and group-destroy (B51): every acceptance scenario of
//! behaviour §B51.9, plus stale and replayed messages, interrupted destroys, locks, the
//! deadline continuation and a large tree destroyed until idle. By concern:
//!
//! * `adjourned_group_deletion`: the cron (behaviour §B51.3): which groups are due, their
//!   staggered destroy messages, the deadline guard, failures and the overlap lock.
//! * `restore`: groups restored with their routes, by the cron or by group-destroy, and
//!   the races a restore must not lose.
//! * `group_destroy`: the destroy (behaviour §B51.4): depth first, in chunks, resent,
//!   interrupted, locked or blocked.
//! * `stale_messages`: destroy messages that no longer apply change nothing.
//! * `concurrent_changes`: a subgroup or project moved out, or the group restored, while
//!   a destroy runs.
//! * `blockers`: rows only GitLab's services can delete block a group whole; rows GitLab
//!   deletes in the database go with their parent.
//! * `audit`: the project and group audit events of a destroy (`AUDIT_EVENTS=on`).
//! * `orphan_checks`: per table, the rows that would be orphans after `at_scale`'s destroy.
//! * `at_scale`: 60 due groups through SQS and the Scheduler; a large tree until idle.
//! * `storage`: the project's repositories, images and files removed through
//!   `storage-cleanup` (issue 37), or the group blocked when a kind is off.
//! * `state_model`: groups scheduled as GitLab 18.10+ schedules them (and restored as
//!   18.8 and 18.10+ restore them); a group scheduled both ways handled once.
//!
//! Here: the fixture of behaviour §B51.9, one cron or destroy invocation, routes and
//! names, and the snapshot that proves nothing changed.

use std::time::Duration;

use engine::local::{Run, Runner};
use integration_tests::fixtures::{M, U};
use integration_tests::logs::{capture, Captured};
use integration_tests::{d, t, wait, Fx, TestDb};
use serde_json::json;
use shared::config::Settings;
use shared::messages::{group_destroy_key, Envelope};
use shared::queue::schedule_name;
use shared::workers::group_destroy::GroupDestroyRun;
use shared::Function;

mod adjourned_group_deletion;
mod at_scale;
mod audit;
mod blockers;
mod concurrent_changes;
mod group_destroy;
mod orphan_checks;
mod restore;
mod stale_messages;
mod state_model;
mod storage;

const NOW: &str = "2025-03-10T02:00:00Z";

const CRON: Function = Function::AdjournedGroupDeletion;

const GD: Function = Function::GroupDestroy;

pub(crate) async fn schedule(db: &TestDb, group: i64, user: i64, marked: &str) {
    db.exec(&format!(
        "INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES ({group}, {user}, '{marked}')"
    ))
    .await;
}

async fn period(db: &TestDb, id: i64, days: i32) {
    db.exec(&format!(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES ({id}, {days}, '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// The fixture of behaviour §B51.9: G100 "acme-deletion_scheduled-100"; G101 "web" < G100; P200
/// "site" in G101 (project namespace 300); P201 in G100 (301); U11(human, active);
/// M1: GM G100 U11 50; SCH(100, 11, 2025-03-03); period 7.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.project(201, 100).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    period(&db, 1, 7).await;
    schedule(&db, 100, 11, "2025-03-03").await;
    db
}

/// One invocation of the cron message at `now`.
async fn cron_at(db: &TestDb, now: &str) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(now));
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    (r, log)
}

async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    cron_at(db, NOW).await
}

pub(crate) fn destroy_body(group: i64, user: i64, marked: &str) -> String {
    Envelope::new(
        "group-destroy.run",
        group_destroy_key(group, d(marked), user),
        "run-1",
        t(NOW),
        GroupDestroyRun {
            group_id: group,
            user_id: user,
            marked_for_deletion_on: d(marked),
        },
    )
    .to_body()
}

/// One `group-destroy.run {group, 11, '2025-03-03'}` at NOW with `settings`.
async fn destroy_with(db: &TestDb, group: i64, settings: Settings) -> (Runner, Captured, Run) {
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let (run, _) = r
        .invoke(GD, &destroy_body(group, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    (r, log, run)
}

async fn destroy_once(db: &TestDb) -> (Runner, Captured, Run) {
    destroy_with(db, 100, Settings::default()).await
}

/// Deliver the next pending message of the runner's queue.
async fn deliver_next(r: &mut Runner) -> Run {
    let p = r.queue().pop().expect("a pending message");
    let (run, _) = r
        .invoke(
            p.message.receiver,
            &p.message.envelope.to_body(),
            p.receive_count,
        )
        .await
        .unwrap();
    run
}

/// `(path, name)` of a route.
async fn route(db: &TestDb, source_type: &str, id: i64) -> (String, String) {
    let r = db
        .client
        .query_one(
            "SELECT path, name FROM routes WHERE source_type = $1 AND source_id = $2",
            &[&source_type, &id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Each `(source_type, source_id, path, name)` is a route as it stands.
async fn assert_routes(db: &TestDb, expected: &[(&str, i64, &str, &str)]) {
    for &(source_type, id, path, name) in expected {
        assert_eq!(
            route(db, source_type, id).await,
            (path.to_string(), name.to_string()),
            "the route of {source_type} {id}"
        );
    }
}

async fn name_and_path(db: &TestDb, id: i64) -> (String, String) {
    let r = db
        .client
        .query_one("SELECT name, path FROM namespaces WHERE id = $1", &[&id])
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Row counts of the tables a destroy changes: proof that nothing changed.
async fn snapshot(db: &TestDb) -> Vec<i64> {
    let mut v = Vec::new();
    for t in [
        "namespaces",
        "projects",
        "routes",
        "members",
        "group_deletion_schedules",
        "users",
    ] {
        v.push(db.count(t).await);
    }
    v.push(
        db.count("routes WHERE path LIKE 'acme-deletion_scheduled-100%'")
            .await,
    );
    v
}

/// Wait until a session of this test's database named `app` waits for a lock.
async fn until_waiting(db: &TestDb, app: &str) {
    db.blocked_on_lock(app).await;
}
