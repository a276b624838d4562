//! B43 schedule-prune-deletions and prune-deletions: every acceptance scenario of
//! behaviour §B43.9 (1–14), plus single flight under two concurrent workers,
//! the shared budget running out mid-schedule, stale schedules and memberships, the
//! hop limit, the Lambda events, and a 2,000-membership hierarchy drained until idle.

use std::collections::BTreeMap;
use std::time::Duration;

use hk::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use serde_json::{json, Value};
use shared::config::Settings;
use shared::messages::{prune_deletions_key, Envelope, PruneDeletionsRun};
use shared::queue::OutMessage;
use shared::telemetry::{capture, Captured};
use shared::Function;

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
fn assert_continuation(sent: &[hk::local_queue::SentRecord], run_id: &str, hop: u64) {
    assert_eq!(sent.len(), 1, "one continuation: {sent:?}");
    let m: &OutMessage = &sent[0].message;
    assert_eq!(m.receiver, F);
    assert_eq!(m.delay_s, 0);
    assert_eq!(m.envelope.kind, "prune-deletions.run");
    assert_eq!(m.envelope.hop, hop);
    assert_eq!(m.envelope.run_id, run_id);
    assert_eq!(
        m.envelope.message_key,
        format!("prune-deletions:{run_id}:{hop}")
    );
    assert_eq!(m.envelope.payload, json!({}));
}

// Scenario 1.
#[tokio::test]
async fn the_scheduler_enqueues_one_run_only_when_a_schedule_exists() {
    let db = fixture().await;
    // No schedule: nothing is sent.
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    assert_eq!(
        cron.message_key,
        "schedule-prune-deletions:cron:2025-03-10T00:10:00Z"
    );
    r.invoke(SCHED, &cron.to_body(), 1).await.unwrap();
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
    let done = log.done();
    assert_eq!(done["enqueued"], false);
    assert_eq!(done["status"], "completed");
    let emf = log.one("metrics");
    assert_eq!(emf["function"], "schedule-prune-deletions");
    assert_eq!(emf["remaining_schedules"], 0.0);
    assert_eq!(emf["oldest_schedule_age_s"], 0.0);
    // One schedule: one prune-deletions.run with delay 0 and hop 0.
    schedule(&db, 1, 100, 10, 11).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    r.invoke(SCHED, &cron.to_body(), 1).await.unwrap();
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!((m.receiver, m.delay_s, m.envelope.hop), (F, 0, 0));
    assert_eq!(m.envelope.kind, "prune-deletions.run");
    assert_eq!(m.envelope.run_id, cron.run_id);
    assert_eq!(
        m.envelope.message_key,
        format!("prune-deletions:{}:0", cron.run_id)
    );
    assert_eq!(m.envelope.payload, json!({}));
    assert_eq!(log.done()["enqueued"], true);
    let emf = log.one("metrics");
    assert_eq!(emf["remaining_schedules"], 1.0);
    assert_eq!(emf["oldest_schedule_age_s"], 86_400.0);
    let names: Vec<Value> = emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["Name"].clone())
        .collect();
    assert_eq!(
        names,
        vec![
            json!("records"),
            json!("records_failed"),
            json!("duration_s"),
            json!("outcome_done"),
            json!("outcome_stale"),
            json!("outcome_skipped"),
            json!("outcome_retryable"),
            json!("outcome_permanent"),
            json!("outcome_panic"),
            json!("outcome_deadline"),
            json!("run_started"),
            json!("remaining_schedules"),
            json!("oldest_schedule_age_s")
        ]
    );
    // The scheduler never touches memberships or schedules itself.
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
}

#[tokio::test]
async fn the_scheduler_finding_its_lock_held_is_skipped_and_a_failed_send_is_retried() {
    let db = fixture().await;
    schedule(&db, 1, 100, 10, 11).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:schedule-prune-deletions");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(SCHED).to_body();
    r.invoke(SCHED, &body, 1).await.unwrap();
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    // A send failure is a retryable failure, and the lock is released anyway.
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.receiver == Function::PruneDeletions);
    let body = r.cron_message(SCHED).to_body();
    r.invoke(SCHED, &body, 1).await.unwrap();
    assert_eq!(r.runs[0].outcome, "retryable");
    assert!(
        db.scalar::<bool>(&format!("SELECT pg_try_advisory_lock({key})"))
            .await
    );
}

// Scenario 2, plus a replay after the schedule is gone (behaviour §B43.8).
#[tokio::test]
async fn an_owner_removes_every_membership_of_the_hierarchy_and_the_schedule() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    Fx(&db).notification(10, "Namespace", 101).await;
    Fx(&db).notification(10, "Namespace", 500).await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![14],
        "M10–M13 deleted, M14 kept"
    );
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 10)
            .collect::<Vec<_>>(),
        vec![(10, 600, 30)]
    );
    assert_eq!(
        db.count("notification_settings").await,
        1,
        "only G500's setting stays"
    );
    assert!(
        db.exists("notification_settings WHERE source_id = 500")
            .await
    );
    assert!(!db.exists("members_deletion_schedules").await);
    let p = log.one(PROCESSED);
    assert_eq!(p["level"], "info");
    assert_eq!(p["schedule_id"], 1);
    assert_eq!(p["user_id"], 10);
    assert_eq!(p["namespace_id"], 100);
    assert_eq!(p["scheduled_by_id"], 11);
    assert_eq!(p["destroyed_count"], 4);
    assert_eq!(p["outcome"], "completed");
    assert!(p["destroy_duration_s"].is_f64());
    assert!(log.with_message(DENIED).is_empty());
    let done = log.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["schedules_processed"], 1);
    assert_eq!(done["destroyed_count_total"], 4);
    assert_eq!(log.one("metrics")["failed_schedules"], 0.0);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
    // The user is never blocked by B43.
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 10")
            .await,
        "active"
    );
    // A replay after every schedule is gone: completed, no message.
    let (r, log) = prune_once(&db).await;
    let done = log.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["schedules_processed"], 0);
    assert!(log.with_message(PROCESSED).is_empty());
    assert!(r.runs[0].sent.is_empty());
}

// Scenario 3.
#[tokio::test]
async fn more_than_a_hundred_memberships_continue_in_a_second_invocation() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
           SELECT g + 100, 'p' || g, 'p' || g, 'Project', 101, ARRAY[100, 101, g + 100], '2024-01-01', '2024-01-01'
           FROM generate_series(1000, 1149) g;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT g, 'p' || g, 'p' || g, 101, g + 100, 1, '2024-01-01', '2024-01-01' FROM generate_series(1000, 1149) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id)
           SELECT 5000 + g - 1000, 30, g, 'Project', 'ProjectMember', 10 FROM generate_series(1000, 1149) g;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT 10, g, 30, true FROM generate_series(1000, 1149) g;",
    )
    .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        (5100..5150).collect::<Vec<i64>>(),
        "the 100 lowest member ids went"
    );
    assert_eq!(
        db.count("project_authorizations WHERE user_id = 10").await,
        50
    );
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 100);
    assert_eq!(p["outcome"], "partial");
    assert_eq!(log.done()["status"], "more_work");
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // Invocation 2, given that message.
    let next = r.runs[0].sent[0].message.envelope.to_body();
    let (log2, _g) = capture();
    let mut r2 = db.runner(t(NOW));
    r2.invoke(F, &next, 1).await.unwrap();
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(!db.exists("project_authorizations WHERE user_id = 10").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let p = log2.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 50);
    assert_eq!(p["outcome"], "completed");
    assert_eq!(log2.done()["status"], "completed");
    assert!(r2.runs[0].sent.is_empty());
}

// Scenario 4.
#[tokio::test]
async fn a_maintainer_may_not_remove_a_group_membership_so_the_schedule_is_dropped() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 2, 100, 10, 12).await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![10, 12]);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["level"], "warn");
    assert_eq!(w["schedule_id"], 2);
    assert_eq!(w["user_id"], 10);
    assert_eq!(w["namespace_id"], 100);
    assert_eq!(w["scheduled_by_id"], 12);
    assert_eq!(w["member_id"], 10);
    assert_eq!(w["reason"], "not_authorized");
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 0);
    assert_eq!(p["outcome"], "denied");
    // A denial is not a failure: the record succeeds and nothing is left to do.
    assert_eq!(log.done()["status"], "completed");
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
}

// Scenario 5.
#[tokio::test]
async fn removals_before_a_denial_stay_and_the_denied_membership_remains() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(30, 200, 10, 30), M::gm(31, 101, 10, 30)])
        .await;
    Fx(&db).pas(&[(10, 200, 30)]).await;
    schedule(&db, 2, 100, 10, 12).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![31]);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 31);
    assert_eq!(w["reason"], "not_authorized");
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 1);
    assert_eq!(p["outcome"], "denied");
    // The refresh of the batch leaves what M31 still grants.
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 10)
            .collect::<Vec<_>>(),
        vec![(10, 200, 30)]
    );
}

// Scenario 6.
#[tokio::test]
async fn a_bot_group_membership_is_never_removed_even_by_an_admin() {
    let db = fixture().await;
    Fx(&db).members(&[M::gm(32, 101, 20, 30)]).await;
    schedule(&db, 3, 100, 20, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 32").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 32);
    assert_eq!(w["reason"], "project_bot_group_member");
    assert_eq!(w["scheduled_by_id"], 1);
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 20")
            .await,
        "active"
    );
}

// Scenario 7.
#[tokio::test]
async fn the_last_owner_is_kept_and_the_schedule_dropped() {
    let db = fixture().await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    Fx(&db).members(&[M::gm(40, 100, 10, 50)]).await;
    schedule(&db, 4, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 40").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 40);
    assert_eq!(w["reason"], "last_owner");
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 0);
    assert_eq!(p["outcome"], "denied");
}

// Scenario 8.
#[tokio::test]
async fn an_admin_who_is_not_a_member_removes_everything() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 5, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 2);
    assert_eq!(p["outcome"], "completed");
}

// Scenario 9.
#[tokio::test]
async fn an_inactive_scheduler_removes_nothing_and_the_schedule_is_dropped() {
    let db = fixture().await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 11")
        .await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(12, 200, 10, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![10, 12]);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 10);
    assert_eq!(w["reason"], "actor_inactive");
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 0);
    assert_eq!(p["outcome"], "denied");
}

#[tokio::test]
async fn a_scheduler_who_lost_owner_rights_has_the_schedule_dropped() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    // U11 was demoted from owner to developer after scheduling.
    db.exec("UPDATE members SET access_level = 30 WHERE id = 1")
        .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![10, 11, 12, 13, 14]
    );
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 10);
    assert_eq!(w["reason"], "not_authorized");
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_project_owner_membership_needs_project_owner_rights() {
    let db = fixture().await;
    // U12 (maintainer of G100) may remove a maintainer, not an owner, of P200.
    Fx(&db)
        .members(&[M::pm(33, 200, 10, 40), M::pm(34, 201, 10, 50)])
        .await;
    schedule(&db, 2, 100, 10, 12).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![34]);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 34);
    assert_eq!(w["reason"], "owner_required");
    assert_eq!(log.one(PROCESSED)["destroyed_count"], 1);
}

// Scenario 10.
#[tokio::test]
async fn a_schedule_with_nothing_left_is_deleted_after_one_refresh() {
    let db = fixture().await;
    // Stale authorization rows: the refresh over projects_under(100) removes the
    // hierarchy's and leaves P600's.
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 201, 20), (10, 600, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (r, log) = prune_once(&db).await;
    assert!(!db.exists("members_deletion_schedules").await);
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 10)
            .collect::<Vec<_>>(),
        vec![(10, 600, 30)]
    );
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 0);
    assert_eq!(p["outcome"], "completed");
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_schedule_on_a_subgroup_covers_its_whole_root_hierarchy() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 101, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    let p = log.one(PROCESSED);
    assert_eq!(p["namespace_id"], 101);
    assert_eq!(p["destroyed_count"], 4);
}

#[tokio::test]
async fn access_requests_and_awaiting_memberships_are_removed_too() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::gm(10, 101, 10, 30).requested("2025-03-01T00:00:00Z"),
            M::pm(12, 200, 10, 5).state(1),
            M::pm(13, 200, 0, 30).invite("x@example.org", "tok"),
        ])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    let (_, log) = prune_once(&db).await;
    assert!(!db.exists("members WHERE user_id = 10").await);
    assert!(
        db.exists("members WHERE id = 13").await,
        "invites never match"
    );
    assert_eq!(log.one(PROCESSED)["destroyed_count"], 2);
}

// Scenario 11.
#[tokio::test]
async fn a_zero_budget_processes_one_schedule_batch_and_continues_at_once() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    // A wrong row for U12: a refresh of U12 would correct it.
    Fx(&db).pas(&[(12, 201, 10)]).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), zero_budget());
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    // S1's batch in full, as in scenario 2.
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert!(!db.exists("members_deletion_schedules WHERE id = 1").await);
    // S6 untouched: no log, no refresh, M2 stays.
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["schedule_id"], 1);
    assert_eq!(lines[0]["destroyed_count"], 4);
    assert!(log.lines().iter().all(|l| l["schedule_id"] != 6));
    assert!(db.exists("members WHERE id = 2").await);
    assert!(db.exists("members_deletion_schedules WHERE id = 6").await);
    assert!(db.pas().await.contains(&(12, 201, 10)));
    let done = log.done();
    assert_eq!(done["status"], "more_work");
    assert_eq!(done["schedules_processed"], 1);
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // The continuation processes S6: M2 and S6 go, nothing more is sent.
    log.clear();
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].hop, Some(1));
    assert!(!db.exists("members WHERE id = 2").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(!db.pas().await.iter().any(|p| p.0 == 12));
    let p = log.one(PROCESSED);
    assert_eq!(p["schedule_id"], 6);
    assert_eq!(p["destroyed_count"], 1);
    assert_eq!(p["outcome"], "completed");
    assert_eq!(log.done()["status"], "completed");
    assert!(r.runs[1].sent.is_empty());
}

#[tokio::test]
async fn a_budget_exhausted_mid_schedule_stops_the_batch_and_the_next_message_continues() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    Fx(&db)
        .members(&[M::pm(50, 200, 12, 30), M::pm(51, 201, 12, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    // Deleting M2, S6's first membership, outlasts the 2 s budget.
    db.exec(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(2.2); RETURN OLD; END $$;
         CREATE TRIGGER slow BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 2)
           EXECUTE FUNCTION slow();",
    )
    .await;
    let settings = Settings {
        prune_deletions_budget: Duration::from_secs(2),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    // S1 complete; S6 stopped after M2 and kept, with M50 and M51 in place.
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_eq!(db.ids("members WHERE user_id = 12").await, vec![50, 51]);
    assert_eq!(db.ids("members_deletion_schedules").await, vec![6]);
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (
            &lines[1]["schedule_id"],
            &lines[1]["destroyed_count"],
            &lines[1]["outcome"]
        ),
        (&json!(6), &json!(1), &json!("partial"))
    );
    // The batch's refresh ran: U12 keeps only what M50 and M51 grant.
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 12)
            .collect::<Vec<_>>(),
        vec![(12, 200, 30), (12, 201, 30)]
    );
    let done = log.done();
    assert_eq!(done["status"], "more_work");
    assert_eq!(done["schedules_processed"], 2);
    assert_eq!(done["destroyed_count_total"], 5);
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // The next message continues S6 where it stopped.
    log.clear();
    r.drain().await.unwrap();
    assert!(!db.exists("members WHERE user_id = 12").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let p = log.one(PROCESSED);
    assert_eq!(
        (p["schedule_id"].as_i64(), p["destroyed_count"].as_i64()),
        (Some(6), Some(2))
    );
    assert_eq!(p["outcome"], "completed");
}

// Scenario 12.
#[tokio::test]
async fn twelve_schedules_take_two_invocations() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT g, 'u' || g, 'u' || g || '@example.com', 'active', 0 FROM generate_series(1001, 1012) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id)
           SELECT g, 30, 200, 'Project', 'ProjectMember', g FROM generate_series(1001, 1012) g;
         INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
           SELECT g - 1000, 100, g, 11, '2025-03-09', '2025-03-09' FROM generate_series(1001, 1012) g;",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    let first: Vec<Value> = log
        .with_message(PROCESSED)
        .iter()
        .map(|l| l["schedule_id"].clone())
        .collect();
    assert_eq!(first, (1..=10).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(db.ids("members_deletion_schedules").await, vec![11, 12]);
    assert_eq!(log.done()["schedules_processed"], 10);
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    log.clear();
    r.drain().await.unwrap();
    let second: Vec<Value> = log
        .with_message(PROCESSED)
        .iter()
        .map(|l| l["schedule_id"].clone())
        .collect();
    assert_eq!(second, vec![json!(11), json!(12)]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(!db.exists("members WHERE id > 1000").await);
    assert!(r.runs[1].sent.is_empty());
}

// Scenario 13.
#[tokio::test]
async fn a_message_finding_the_single_flight_lock_held_changes_nothing() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:prune-deletions");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = prune_once(&db).await;
    let s = log.one("skipped: already running");
    assert_eq!(s["level"], "info");
    assert_eq!(log.done()["status"], "skipped");
    assert_eq!(r.runs[0].outcome, "success");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(db.count("members WHERE user_id = 10").await, 5);
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    prune_once(&db).await;
    assert!(!db.exists("members_deletion_schedules").await);
}

#[tokio::test]
async fn a_worker_started_while_another_works_skips_and_only_one_works() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    // The first deletion waits until the test releases it, so the worker holding the
    // single-flight lock is still busy, whatever the machine's speed, when the other
    // one tries it.
    db.exec(
        "CREATE TABLE release (x int);
         CREATE FUNCTION held() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           WHILE NOT EXISTS (SELECT 1 FROM release) LOOP PERFORM pg_sleep(0.01); END LOOP;
           RETURN OLD;
         END $$;
         CREATE TRIGGER held BEFORE DELETE ON members FOR EACH ROW EXECUTE FUNCTION held();",
    )
    .await;
    let (log, _g) = capture();
    let mut a = db.runner(t(NOW));
    let mut b = db.runner(t(NOW));
    let (body_a, body_b) = (message("run-a").to_body(), message("run-b").to_body());
    let second_while_first_works = async {
        db.session_waiting("prune-deletions", "Timeout").await;
        let rb = b.invoke(F, &body_b, 1).await;
        db.exec("INSERT INTO release VALUES (1)").await;
        rb
    };
    let (ra, rb) = tokio::join!(a.invoke(F, &body_a, 1), second_while_first_works);
    let (ra, rb) = (ra.unwrap().0, rb.unwrap().0);
    assert_eq!((ra.outcome, rb.outcome), ("success", "success"));
    let skipped = log.one("skipped: already running");
    let mut statuses: Vec<String> = log
        .with_message("done")
        .iter()
        .map(|d| d["status"].as_str().unwrap().to_string())
        .collect();
    statuses.sort();
    assert_eq!(statuses, vec!["completed", "skipped"]);
    let worked = log.one(PROCESSED);
    assert_ne!(worked["message_key"], skipped["message_key"]);
    assert_eq!(worked["destroyed_count"], 4);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(ra.sent.is_empty() && rb.sent.is_empty());
}

// Scenario 14, first part.
#[tokio::test]
async fn an_error_rolls_back_the_whole_schedule_batch_and_the_record_is_retried() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 12) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(
        db.ids("members WHERE user_id = 10").await,
        vec![10, 11, 12, 13, 14],
        "M10–M13 all remain"
    );
    assert_eq!(db.pas().await.iter().filter(|p| p.0 == 10).count(), 3);
    assert!(db.exists("members_deletion_schedules WHERE id = 1").await);
    let e = log.one(FAILED);
    assert_eq!(e["level"], "error");
    assert_eq!(e["schedule_id"], 1);
    assert_eq!(e["user_id"], 10);
    assert_eq!(e["namespace_id"], 100);
    assert_eq!(e["error"], "boom");
    assert_eq!(e["error_class"], "db");
    assert!(log.with_message(PROCESSED).is_empty());
    let done = log.done();
    assert_eq!(done["status"], "stopped");
    assert_eq!(done["schedules_processed"], 0);
    assert_eq!(log.one("metrics")["failed_schedules"], 1.0);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "retryable");
    assert_eq!(r.exit_code(true), 1);
    // The lock was released: the next message gets it.
    let key = shared::locks::lock_key("function:prune-deletions");
    assert!(
        db.scalar::<bool>(&format!("SELECT pg_try_advisory_lock({key})"))
            .await
    );
}

// Scenario 14, second part.
#[tokio::test]
async fn after_an_error_the_other_schedules_are_still_processed_before_the_retry() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 12) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = prune_once_with(&db, zero_budget()).await;
    assert_eq!(log.with_message(FAILED).len(), 1, "S1 is not tried again");
    assert_eq!(db.count("members WHERE user_id = 10").await, 5);
    assert!(!db.exists("members WHERE id = 2").await);
    assert_eq!(db.ids("members_deletion_schedules").await, vec![1]);
    let p = log.one(PROCESSED);
    assert_eq!(p["schedule_id"], 6);
    assert_eq!(p["outcome"], "completed");
    let done = log.done();
    assert_eq!(done["status"], "stopped");
    assert_eq!(done["schedules_processed"], 1);
    assert_eq!(done["destroyed_count_total"], 1);
    assert!(r.runs[0].sent.is_empty(), "no continuation after an error");
    assert_eq!(r.runs[0].outcome, "retryable");
}

#[tokio::test]
async fn a_schedule_deleted_meanwhile_is_stale_and_a_vanished_membership_is_skipped() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    // Deleting M10 deletes M12 and S6, as concurrent sessions would have.
    db.exec(
        "CREATE FUNCTION meanwhile() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN DELETE FROM members WHERE id = 12; DELETE FROM members_deletion_schedules WHERE id = 6;
               RETURN OLD; END $$;
         CREATE TRIGGER meanwhile AFTER DELETE ON members FOR EACH ROW WHEN (OLD.id = 10)
           EXECUTE FUNCTION meanwhile();",
    )
    .await;
    let (r, log) = prune_once(&db).await;
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    let p = log.one(PROCESSED);
    assert_eq!(p["destroyed_count"], 3, "M12 was gone: not counted");
    assert_eq!(p["outcome"], "completed");
    let s = log.one(STALE);
    assert_eq!(s["level"], "info");
    assert_eq!(s["schedule_id"], 6);
    assert!(db.exists("members WHERE id = 2").await);
    let done = log.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["schedules_processed"], 1);
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_continuation_past_the_hop_limit_is_not_sent() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), zero_budget());
    let mut env = message("run-1");
    env.hop = 10_000;
    env.message_key = "prune-deletions:run-1:10000".into();
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(l["max_hops"], 10_000);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn the_lambda_events_of_both_functions_are_processed() {
    use crate::handle_event;
    use aws_lambda_events::event::sqs::SqsEvent;
    use hk::local_queue::LocalQueue;
    use lambda_runtime::{Context, LambdaEvent};
    use shared::clock::FixedClock;
    use shared::config::Config;
    use shared::db::Session;
    use shared::lambda::Deps;
    use std::sync::Arc;

    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    let event = |name: &str| -> SqsEvent {
        let p = format!("{}/../events/{name}.json", env!("CARGO_MANIFEST_DIR"));
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    };
    let queue = LocalQueue::new(t(NOW));
    let deps = |function: Function| Deps {
        notifier: None,
        function,
        session: Session::new(db.connector(), function.name()),
        config: Config::from_lookup(|k| match k {
            "DATABASE_URL" => Some(db.url.clone()),
            "TRANSPORT" => Some("local".into()),
            _ => None,
        })
        .unwrap(),
        queue: Arc::new(queue.clone()),
        clock: Arc::new(FixedClock(t(NOW))),
    };
    let resp = handle_event(
        &deps(SCHED),
        LambdaEvent::new(event("schedule-prune-deletions"), Context::default()),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    let sent = queue.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "prune-deletions:3b7d2f4a-0c1e-4d5f-8a9b-2c3d4e5f6a71:0"
    );
    // The ready prune-deletions event is exactly that message.
    let ev = event("prune-deletions");
    let body: Envelope = serde_json::from_str(ev.records[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(body.message_key, sent[0].message.envelope.message_key);
    let resp = handle_event(&deps(F), LambdaEvent::new(ev, Context::default()))
        .await
        .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert!(!db.exists("members_deletion_schedules").await);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
}

/// Three levels: G100 > G101 and G102..G111 > G1000..G1189 (202 groups), with 1,798
/// projects in the third level. U10 has a membership in every one of these groups and
/// projects: 202 + 1,798 = 2,000.
async fn big_hierarchy(db: &TestDb) {
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
           SELECT g, 'l2-' || g, 'l2-' || g, 'Group', 100, ARRAY[100, g], '2024-01-01', '2024-01-01'
           FROM generate_series(102, 111) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
           SELECT 1000 + i, 'l3-' || i, 'l3-' || i, 'Group', 102 + i % 10, ARRAY[100, 102 + i % 10, 1000 + i],
                  '2024-01-01', '2024-01-01'
           FROM generate_series(0, 189) i;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
           SELECT 20000 + j, 'p' || j, 'p' || j, 'Project', 1000 + j % 190,
                  ARRAY[100, 102 + (j % 190) % 10, 1000 + j % 190, 20000 + j], '2024-01-01', '2024-01-01'
           FROM generate_series(0, 1797) j;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT 10000 + j, 'p' || j, 'p' || j, 1000 + j % 190, 20000 + j, 1, '2024-01-01', '2024-01-01'
           FROM generate_series(0, 1797) j;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id)
           SELECT 100000 + n.id, 30, n.id, 'Namespace', 'GroupMember', 10
           FROM namespaces n WHERE n.type = 'Group' AND 100 = ANY(n.traversal_ids);
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id)
           SELECT 200000 + p.id, 20, p.id, 'Project', 'ProjectMember', 10 FROM projects p WHERE p.id >= 10000;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT 10, p.id, 30, true FROM projects p WHERE p.namespace_id <> 500;",
    )
    .await;
}

#[tokio::test]
async fn a_hierarchy_with_two_thousand_memberships_drains_until_idle() {
    let db = fixture().await;
    big_hierarchy(&db).await;
    Fx(&db).members(&[M::gm(14, 500, 10, 30)]).await;
    Fx(&db).pas(&[(10, 600, 30)]).await;
    assert_eq!(db.count("members WHERE user_id = 10").await, 2001);
    schedule(&db, 1, 100, 10, 11).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    r.run_until_idle(SCHED, &cron.to_body()).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    // The schedule is gone, every membership of the hierarchy too; G500's stays.
    assert!(!db.exists("members_deletion_schedules").await);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 10)
            .collect::<Vec<_>>(),
        vec![(10, 600, 30)]
    );
    // One cron run, then twenty prune-deletions invocations of 100, hops 0..19.
    assert_eq!(r.runs.len(), 21);
    assert_eq!(r.runs[0].function, SCHED);
    for (i, run) in r.runs[1..].iter().enumerate() {
        assert_eq!(run.function, F);
        assert_eq!(run.hop, Some(i as u64));
        assert_eq!(
            run.message_key.as_deref(),
            Some(format!("prune-deletions:{}:{i}", cron.run_id).as_str())
        );
        assert_eq!(run.outcome, "success");
        let report = run.report.as_ref().unwrap().to_json();
        assert_eq!(report["destroyed_count_total"], 100);
        if i < 19 {
            assert_eq!(report["status"], "more_work");
            assert_continuation(&run.sent, &cron.run_id, i as u64 + 1);
        } else {
            assert_eq!(report["status"], "completed");
            assert!(run.sent.is_empty());
        }
    }
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 20);
    let destroyed: i64 = lines
        .iter()
        .map(|l| l["destroyed_count"].as_i64().unwrap())
        .sum();
    assert_eq!(destroyed, 2000);
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for l in &lines {
        *outcomes
            .entry(l["outcome"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(
        outcomes,
        BTreeMap::from([("completed".to_string(), 1), ("partial".to_string(), 19)])
    );
    assert!(log.with_message(DENIED).is_empty());
    assert!(log.with_message(FAILED).is_empty());
}

#[tokio::test]
async fn prune_deletions_works_with_int4_ids_and_integer_traversal_ids() {
    let db = TestDb::new().await;
    db.exec(
        "ALTER TABLE members ALTER COLUMN id TYPE integer, ALTER COLUMN source_id TYPE integer,
                             ALTER COLUMN user_id TYPE integer;
         ALTER TABLE namespaces ALTER COLUMN traversal_ids DROP DEFAULT;
         ALTER TABLE namespaces ALTER COLUMN traversal_ids TYPE integer[];
         ALTER TABLE namespaces ALTER COLUMN traversal_ids SET DEFAULT '{}';
         ALTER TABLE project_authorizations ALTER COLUMN project_id TYPE integer;
         ALTER TABLE members_deletion_schedules ALTER COLUMN id TYPE integer,
           ALTER COLUMN namespace_id TYPE integer, ALTER COLUMN user_id TYPE integer,
           ALTER COLUMN scheduled_by_id TYPE integer;",
    )
    .await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.project(201, 100).await;
    fx.group(500, "other", None).await;
    fx.project(600, 500).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 101, 10, 11).await;
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(SCHED).to_body();
    r.run_until_idle(SCHED, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    assert_eq!(r.runs.len(), 2);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_eq!(
        db.pas()
            .await
            .into_iter()
            .filter(|p| p.0 == 10)
            .collect::<Vec<_>>(),
        vec![(10, 600, 30)]
    );
    assert!(!db.exists("members_deletion_schedules").await);
}

#[tokio::test]
async fn an_admins_schedule_cannot_remove_a_bots_project_membership() {
    let db = fixture().await;
    Fx(&db).members(&[M::pm(33, 200, 20, 40)]).await;
    schedule(&db, 3, 100, 20, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 33").await);
    assert!(!db.exists("members_deletion_schedules").await);
    let w = log.one(DENIED);
    assert_eq!(w["member_id"], 33);
    assert_eq!(w["reason"], "project_bot_project_member");
    assert_eq!(log.one(PROCESSED)["outcome"], "denied");
}

#[tokio::test]
async fn a_blocked_sole_owners_removal_is_denied_as_the_last_owner() {
    let db = fixture().await;
    // G100's only owner row is U10's, and U10 is blocked: it counts for nobody, but it
    // is the last owner row the group has.
    db.exec("DELETE FROM members WHERE id = 1; UPDATE users SET state = 'blocked' WHERE id = 10")
        .await;
    Fx(&db).members(&[M::gm(40, 100, 10, 50)]).await;
    schedule(&db, 4, 100, 10, 1).await;
    let (_, log) = prune_once(&db).await;
    assert!(db.exists("members WHERE id = 40").await);
    let w = log.one(DENIED);
    assert_eq!(
        (w["member_id"].as_i64(), w["reason"].as_str()),
        (Some(40), Some("last_owner"))
    );
}
