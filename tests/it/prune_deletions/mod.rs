//! schedule-prune-deletions and prune-deletions (B43): every acceptance scenario of
//! behaviour §B43.9 (1–14), plus single flight under two concurrent workers, the shared
//! budget running out mid-schedule, stale schedules and memberships, the hop limit, the
//! Lambda events, and a 2,000-membership hierarchy drained until idle. By concern:
//!
//! * `schedule_prune_deletions`: the cron that enqueues one run (scenario 1), and the
//!   Lambda events of both functions.
//! * `removal`: what a schedule removes across its root hierarchy (scenarios 2, 3, 10).
//! * `permissions`: what the scheduling user may remove: denials, the last owner, bots,
//!   admins (scenarios 4–9).
//! * `budget`: the shared budget, continuations and the hop limit (scenarios 11, 12).
//! * `single_flight`: one worker at a time (scenario 13).
//! * `failures`: errors roll back a schedule's batch; stale schedules and memberships
//!   (scenario 14).
//! * `at_scale`: 2,000 memberships until idle; GitLab's `int4` ids.
//! * `side_effects`: the events rows, highest role and audit events of a prune.
//!
//! Here: the fixture of behaviour §B43.9, schedules, one invocation and the check of a
//! continuation.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::assert::assert_sent_one;
use engine::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::{capture, Captured};
use integration_tests::{t, Fx, TestDb};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::messages::{prune_deletions_key, Envelope};
use shared::workers::prune_deletions::PruneDeletionsRun;
use shared::Function;

mod at_scale;
mod budget;
mod failures;
mod permissions;
mod removal;
mod schedule_prune_deletions;
mod side_effects;
mod single_flight;

const NOW: &str = "2025-03-10T00:10:00Z";

const SCHED: Function = Function::SchedulePruneDeletions;

const F: Function = Function::PruneDeletions;

const PROCESSED: &str = "Processed scheduled member deletion";

const DENIED: &str = "Scheduled member deletion cancelled: access denied";

const FAILED: &str = "Scheduled member deletion failed";

const STALE: &str = "Scheduled member deletion skipped: schedule no longer exists";

/// The fixture of behaviour §B43.9: G100 "acme"; G101 < G100; P200 in G101; P201 in G100; G500
/// "other"; P600 in G500. U1(human, active, admin); U10, U11, U12 (human, active);
/// U20 (bot, active). M1: GM G100 U11 50; M2: GM G100 U12 40.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.project(201, 100).await;
    fx.group(500, "other", None).await;
    fx.project(600, 500).await;
    fx.users(&[
        U::human(1).admin(),
        U::human(10),
        U::human(11),
        U::human(12),
        U::bot(20),
    ])
    .await;
    fx.members(&[M::gm(1, 100, 11, 50), M::gm(2, 100, 12, 40)])
        .await;
    db
}

/// `S<id>(namespace, user, scheduled_by)`, created a day before NOW.
async fn schedule(db: &TestDb, id: i64, namespace: i64, user: i64, by: i64) {
    db.exec(&format!(
        "INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
         VALUES ({id}, {namespace}, {user}, {by}, '2025-03-09T00:10:00Z', '2025-03-09T00:10:00Z')"
    ))
    .await;
}

/// U10's memberships and authorizations of scenario 2: M10–M14 and three PA rows.
async fn scenario_2_memberships(db: &TestDb) {
    let fx = Fx(db);
    fx.members(&[
        M::gm(10, 100, 10, 30),
        M::gm(11, 101, 10, 40),
        M::pm(12, 200, 10, 30),
        M::pm(13, 201, 10, 20),
        M::gm(14, 500, 10, 30),
    ])
    .await;
    fx.pas(&[(10, 200, 40), (10, 201, 30), (10, 600, 30)]).await;
}

/// A `prune-deletions.run` as the scheduler of run `run_id` sends it (hop 0).
fn message(run_id: &str) -> Envelope {
    Envelope::new(
        "prune-deletions.run",
        prune_deletions_key(run_id),
        run_id,
        t(NOW),
        PruneDeletionsRun {},
    )
}

/// One invocation of `prune-deletions` at NOW with `settings`.
async fn prune_once_with(db: &TestDb, settings: Settings) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    (r, log)
}

async fn prune_once(db: &TestDb) -> (Runner, Captured) {
    prune_once_with(db, Settings::default()).await
}

fn zero_budget() -> Settings {
    Settings {
        prune_deletions_budget: Duration::ZERO,
        ..Default::default()
    }
}

/// The one continuation a run sent: delay 0, same run, `hop + 1`, key by hop.
fn assert_continuation(sent: &[engine::local_queue::SentRecord], run_id: &str, hop: u64) {
    assert_sent_one(
        sent,
        json!({
            "receiver": F.name(),
            "delay_s": 0,
            "type": "prune-deletions.run",
            "hop": hop,
            "run_id": run_id,
            "message_key": format!("prune-deletions:{run_id}:{hop}"),
            "payload": {}
        }),
    );
}
