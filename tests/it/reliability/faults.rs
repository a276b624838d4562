//! Fault injection at named points, and hostile or stale input, on the rich demo
//! data set: a queue send that fails after a claim, a database session terminated
//! mid-page, a Scheduler call failing for a long delay, overlapping cron runs, and
//! replayed or forged messages. In every case nothing is lost and nothing is done
//! twice: the end state is the one a clean run reaches.

use shared::handlers::Dispatch;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::assert::assert_fields;
use engine::local::process_record;
use integration_tests::aws::proxy::FaultProxy;
use integration_tests::aws::{config_for, create_queue, moto_config, moto_endpoint};
use integration_tests::fixtures::U;
use integration_tests::logs::capture;
use integration_tests::notice::{publish_demo_hooks, repeats_are_identical, Notices};
use integration_tests::state::{canonical, demo_without_ghost, first_difference, Baseline};
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::clock::FixedClock;
use shared::config::Settings;
use shared::config::{QueueTarget, SchedulerTarget};
use shared::messages::Envelope;
use shared::queue::schedule_name;
use shared::queue::sqs::SqsQueue;
use shared::runtime::{Invocation, RecordMeta};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
/// The next cron tick of the day (the batches' own cadence is daily; a second tick
/// the same day is what a retried cron or an operator's rerun looks like).
const LATER: &str = "2025-03-10T00:20:00Z";

const CRONS: [Function; 5] = [
    Function::RemoveExpiredMembers,
    Function::SchedulePruneDeletions,
    Function::AdjournedGroupDeletion,
    Function::PlaceholderUserCleanup,
    Function::PatExpiring,
];

/// The demo data set without its ghost user, its hooks on public names.
async fn data() -> TestDb {
    let db = demo_without_ghost(t(NOW)).await;
    publish_demo_hooks(&db).await;
    db
}

type Delivered = (Vec<String>, Vec<String>);

fn delivered(n: &Notices) -> Delivered {
    (
        n.emails().into_keys().collect(),
        n.webhooks().into_keys().collect(),
    )
}

fn cron(f: Function, at: &str, run: &str) -> String {
    Envelope::cron(f, run, t(at)).to_body()
}

/// Run `f`'s cron until idle at NOW (with `fail_once` making the first send to every
/// receiver fail), then a second tick at LATER; returns the canonical state, every
/// dead-lettered key and the notices delivered.
async fn two_ticks(
    f: Function,
    fail_once: bool,
) -> (
    std::collections::BTreeMap<String, Vec<String>>,
    Vec<String>,
    Delivered,
) {
    let db = data().await;
    let base = Baseline::capture(&db).await;
    let notices = Notices::start().await;
    let mut dead = Vec::new();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(notices.notifier.clone());
    if fail_once {
        let seen: Arc<Mutex<HashSet<Function>>> = Arc::default();
        r.queue()
            .fail_when(move |m| seen.lock().unwrap().insert(m.receiver));
    }
    r.run_until_idle(f, &cron(f, NOW, "tick-1")).await.unwrap();
    if fail_once {
        assert!(
            r.runs.iter().any(|x| x.outcome == "retryable")
                || r.runs.iter().any(|x| {
                    x.report.as_ref().is_some_and(|rep| {
                        [
                            "failed_rows",
                            "failed_groups",
                            "failed_count",
                            "total_user_failures",
                            "total_failed_notifications_for_resource_bots",
                        ]
                        .iter()
                        .any(|k| rep.to_json()[*k].as_i64().unwrap_or(0) > 0)
                    })
                })
                // B28 groups a page's subjects: a failed group send rolls the page back
                // and its subjects run again one transaction each.
                || log.lines().iter().any(|l| {
                    l["message"]
                        .as_str()
                        .is_some_and(|m| m.ends_with("group could not be sent; its users run one by one")
                            || m.ends_with("group could not be sent; its bots run one by one"))
                }),
            "{f}: the injected send failure had no effect"
        );
    }
    dead.extend(r.dead_letters().into_iter().map(|m| m.envelope.message_key));
    let mut r = db.runner(t(LATER)).with_notifier(notices.notifier.clone());
    r.run_until_idle(f, &cron(f, LATER, "tick-2"))
        .await
        .unwrap();
    dead.extend(r.dead_letters().into_iter().map(|m| m.envelope.message_key));
    (canonical(&db, &base).await, dead, delivered(&notices))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_failing_after_a_claim_rolls_it_back_and_the_work_is_retried_not_lost() {
    for f in CRONS {
        let (clean, clean_dead, clean_notices) = two_ticks(f, false).await;
        let (got, dead, notices) = two_ticks(f, true).await;
        assert!(clean_dead.is_empty() && dead.is_empty(), "{f}: {dead:?}");
        if let Some(d) = first_difference(&clean, &got) {
            panic!("{f}: a failed send lost or doubled work: {d}");
        }
        assert_eq!(notices, clean_notices, "{f}: notices delivered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_terminated_mid_page_fails_the_item_as_retryable_and_the_redelivery_completes() {
    // (cron, the worker to cut off, a row it locks in the middle of its work)
    let cases = [
        (
            Function::RemoveExpiredMembers,
            Function::RemoveExpiredMembers,
            "SELECT 1 FROM members WHERE id = 10500 FOR UPDATE",
        ),
        (
            Function::SchedulePruneDeletions,
            Function::PruneDeletions,
            "SELECT 1 FROM members WHERE id = (SELECT id FROM members WHERE user_id = 3006 ORDER BY id OFFSET 50 LIMIT 1) FOR UPDATE",
        ),
        (
            Function::AdjournedGroupDeletion,
            Function::GroupDestroy,
            "SELECT 1 FROM projects WHERE id = 4201 FOR UPDATE",
        ),
    ];
    for (f, worker, lock) in cases {
        let want = {
            let db = demo_without_ghost(t(NOW)).await;
            let base = Baseline::capture(&db).await;
            db.runner(t(NOW))
                .run_until_idle(f, &cron(f, NOW, "clean"))
                .await
                .unwrap();
            canonical(&db, &base).await
        };
        let db = demo_without_ghost(t(NOW)).await;
        let base = Baseline::capture(&db).await;
        let mut holder = db.session().await;
        let tx = holder.transaction().await.unwrap();
        tx.batch_execute(lock).await.unwrap();
        let (log, _g) = capture();
        let mut r = db.runner(t(NOW));
        let body = cron(f, NOW, "cut");
        let cut = async {
            let pid = db.blocked_on_lock(worker.name()).await;
            let killed: bool = db
                .client
                .query_one("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap()
                .get(0);
            assert!(killed);
            tx.rollback().await.unwrap();
        };
        let (ran, ()) = tokio::join!(r.run_until_idle(f, &body), cut);
        ran.unwrap();
        let failed: Vec<&engine::local::Run> = r
            .runs
            .iter()
            .filter(|x| x.function == worker && x.outcome == "retryable")
            .collect();
        assert_eq!(failed.len(), 1, "{worker}: {}", log.dump());
        let line = log
            .with_message("record failed")
            .into_iter()
            .find(|l| l["function"] == worker.name())
            .unwrap_or_else(|| panic!("{worker}: no `record failed` line"));
        assert_eq!(line["error_class"], "db");
        // The same message came back after the visibility timeout and completed.
        let key = failed[0].message_key.clone();
        let again = r
            .runs
            .iter()
            .rev()
            .find(|x| x.message_key == key && x.outcome == "success")
            .unwrap_or_else(|| panic!("{worker}: not redelivered"));
        assert!(again.now >= failed[0].now + chrono::Duration::seconds(30));
        assert!(r.dead_letters().is_empty());
        if let Some(d) = first_difference(&want, &canonical(&db, &base).await) {
            panic!("{worker}: {d}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_call_failing_for_a_long_delay_loses_no_group_destroy_message() {
    // 48 due groups: indexes 46 and 47 are delayed over 900 s, so they need schedules.
    const N: i64 = 48;
    let db = TestDb::new().await;
    Fx(&db).users(&[U::human(11).admin()]).await;
    db.exec(&format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, created_at, updated_at, organization_id)
           SELECT g, 'g' || g, 'g' || g, 'Group', ARRAY[g]::bigint[], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(1000, {last}) g;
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
           SELECT g, 11, '2025-02-01' FROM generate_series(1000, {last}) g;",
        last = 1000 + N - 1
    ))
    .await;
    let moto = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&moto);
    let scheduler = aws_sdk_scheduler::Client::new(&moto);
    let (url, arn) = create_queue(&sqs, "group-destroy").await;
    let (_, dlq_arn) = create_queue(&sqs, "group-destroy-dlq").await;
    let (own_url, own_arn) = create_queue(&sqs, "adjourned-group-deletion").await;
    let group = format!("hk-{}", uuid::Uuid::new_v4().simple());
    scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .unwrap();
    // Scheduler calls go through a proxy that answers CreateSchedule with HTTP 500.
    // One attempt per call: the SDK's own retries would only delay the same outcome.
    let proxy = FaultProxy::start(&moto_endpoint()).await;
    let via_proxy = config_for(&proxy.endpoint).await;
    let scheduler_via_proxy = aws_sdk_scheduler::Client::from_conf(
        aws_sdk_scheduler::config::Builder::from(&via_proxy)
            .retry_config(
                aws_sdk_scheduler::config::retry::RetryConfig::standard().with_max_attempts(1),
            )
            .build(),
    );
    let queue = SqsQueue::new(
        aws_sdk_sqs::Client::new(&via_proxy),
        scheduler_via_proxy,
        HashMap::from([
            (
                Function::GroupDestroy,
                QueueTarget {
                    url: url.clone(),
                    arn: Some(arn),
                    dlq_arn: Some(dlq_arn),
                },
            ),
            (
                Function::AdjournedGroupDeletion,
                QueueTarget {
                    url: own_url,
                    arn: Some(own_arn),
                    dlq_arn: None,
                },
            ),
        ]),
        Some(SchedulerTarget {
            group_name: group.clone(),
            role_arn: "arn:aws:iam::123456789012:role/hk-scheduler".into(),
        }),
        Arc::new(FixedClock(t(NOW))),
    );
    let f = Function::AdjournedGroupDeletion;
    let settings = Settings::default();
    let inv = Invocation::new(f, t(NOW), &queue, &settings);
    proxy.fail_calls("POST /schedules/", 2);
    let (log, _g) = capture();
    let mut client = db.connector().connect(f.name()).await.unwrap();
    let outcome = process_record(
        &Dispatch::new(),
        &inv,
        &mut client,
        &cron(f, NOW, "s1"),
        &RecordMeta::default(),
    )
    .await;
    // The failed schedule is that group's error (behaviour §B51.3.2 E): logged, nothing claimed.
    assert!(outcome.is_success(), "{outcome:?}");
    let failed = log.with_message("Adjourned group deletion failed for group");
    assert_eq!(failed.len(), 2, "{}", log.dump());
    assert!(failed.iter().all(|l| l["error_class"] == "transport"));
    assert_eq!(log.done()["failed_groups"], 2);
    assert_eq!(
        db.count("group_deletion_schedules").await,
        N,
        "a group whose message failed is still scheduled"
    );
    // The Scheduler recovers; the next tick sends what is missing. Everything already
    // sent is a duplicate with the same key (the Scheduler answers ConflictException).
    let outcome = process_record(
        &Dispatch::new(),
        &inv,
        &mut client,
        &cron(f, NOW, "s2"),
        &RecordMeta::default(),
    )
    .await;
    assert!(outcome.is_success(), "{outcome:?}");
    let key = |i: i64| format!("group-destroy:{}:2025-02-01:11", 1000 + i);
    let mut sent: BTreeSet<String> = BTreeSet::new();
    for req in proxy.request_bodies("SendMessageBatch") {
        for e in req["Entries"].as_array().unwrap() {
            let env: Envelope = serde_json::from_str(e["MessageBody"].as_str().unwrap()).unwrap();
            sent.insert(env.message_key);
        }
    }
    for i in 46..N {
        let got = scheduler
            .get_schedule()
            .name(schedule_name(&key(i)))
            .group_name(&group)
            .send()
            .await
            .unwrap_or_else(|e| panic!("the schedule of group {} is missing: {e}", 1000 + i));
        let env: Envelope = serde_json::from_str(got.target().unwrap().input().unwrap()).unwrap();
        sent.insert(env.message_key);
    }
    let want: BTreeSet<String> = (0..N).map(key).collect();
    assert_eq!(sent, want, "every due group has its message");
    assert_eq!(
        proxy.calls("POST /schedules/"),
        4,
        "2 failed, then 2 created"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_runs_of_each_cron_batch_let_one_proceed_and_skip_the_other() {
    for f in CRONS.iter().copied().chain([Function::PruneDeletions]) {
        let db = demo_without_ghost(t(NOW)).await;
        // Run A takes its overlap lock, then waits on a table this session holds.
        let mut holder = db.session().await;
        let tx = holder.transaction().await.unwrap();
        tx.batch_execute(
            "LOCK TABLE members, members_deletion_schedules, group_deletion_schedules,
                        application_settings, import_placeholder_user_details,
                        personal_access_tokens
             IN ACCESS EXCLUSIVE MODE",
        )
        .await
        .unwrap();
        let (log, _g) = capture();
        let body_a = Envelope::cron(f, "run-a", t(NOW)).to_body();
        let body_b = Envelope::cron(f, "run-b", t(NOW)).to_body();
        let notices = Notices::start().await;
        let mut a = db.runner(t(NOW)).with_notifier(notices.notifier.clone());
        let mut b = db.runner(t(NOW)).with_notifier(notices.notifier.clone());
        let second = async {
            db.blocked_on_lock(f.name()).await;
            let (run_b, _) = b.invoke(f, &body_b, 1).await.unwrap();
            tx.rollback().await.unwrap();
            run_b
        };
        let (first, run_b) = tokio::join!(a.invoke(f, &body_a, 1), second);
        let (run_a, outcome_a) = first.unwrap();
        assert_eq!(run_b.outcome, "success", "{f}");
        assert_eq!(
            run_b.report.as_ref().unwrap().to_json()["status"],
            "skipped",
            "{f}"
        );
        assert!(run_b.sent.is_empty(), "{f}");
        assert!(outcome_a.is_success(), "{f}: {outcome_a:?}");
        // Run A did its work.
        let rep = run_a.report.clone().unwrap().to_json();
        assert_ne!(rep["status"], "skipped", "{f}");
        let (field, did) = match f {
            Function::RemoveExpiredMembers => {
                ("updated_rows", rep["updated_rows"].as_i64() > Some(0))
            }
            Function::SchedulePruneDeletions => ("enqueued", rep["enqueued"] == true),
            Function::AdjournedGroupDeletion => {
                ("groups_due", rep["groups_due"].as_i64() > Some(0))
            }
            Function::PlaceholderUserCleanup => {
                ("enqueued_count", rep["enqueued_count"].as_i64() > Some(0))
            }
            Function::PatExpiring => (
                "total_user_tokens_marked",
                rep["total_user_tokens_marked"].as_i64() > Some(0),
            ),
            _ => (
                "destroyed_count_total",
                rep["destroyed_count_total"].as_i64() > Some(0),
            ),
        };
        assert!(did, "{f}: {field} in {rep}");
        assert_fields(
            &log.one("skipped: already running"),
            json!({"run_id": "run-b", "function": f.name()}),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_clean_run_replayed_and_forged_messages_change_nothing() {
    let db = data().await;
    let notices = Notices::start().await;
    let mut sent = Vec::new();
    for f in CRONS {
        let mut r = db.runner(t(NOW)).with_notifier(notices.notifier.clone());
        r.run_until_idle(f, &cron(f, NOW, "clean")).await.unwrap();
        assert!(r.dead_letters().is_empty());
        sent.extend(r.queue().sent().into_iter().map(|s| s.message));
    }
    let before = db.snapshot().await;
    // Every message of the clean runs again (a day's worth of replays), and forged
    // messages for groups not due, users who are not placeholders or not being
    // removed, and expired-member pages past everything expired.
    let humans = db.ids("users WHERE user_type = 0 AND id < 10").await;
    let bots = db.ids("users WHERE user_type = 6").await;
    let ghost: i64 = db
        .scalar("SELECT id::bigint FROM users WHERE user_type = 5")
        .await;
    let mut forged: Vec<(Function, serde_json::Value)> = vec![
        // newco (G4120) was marked 2 days ago: not due. acme (G100) is not scheduled.
        (
            Function::GroupDestroy,
            json!({"group_id": 4120, "user_id": 4001, "marked_for_deletion_on": "2025-03-08"}),
        ),
        (
            Function::GroupDestroy,
            json!({"group_id": 4120, "user_id": 4001, "marked_for_deletion_on": "2025-03-01"}),
        ),
        (
            Function::GroupDestroy,
            json!({"group_id": 100, "user_id": 2, "marked_for_deletion_on": "2025-03-01"}),
        ),
        (
            Function::GroupDestroy,
            json!({"group_id": 4120, "user_id": 1, "marked_for_deletion_on": "2025-03-08"}),
        ),
        (
            Function::GroupDestroy,
            json!({"group_id": 99999, "user_id": 1, "marked_for_deletion_on": "2025-03-01"}),
        ),
        (
            Function::RemoveExpiredMembers,
            json!({"cursor": {"expires_at": "2999-01-01", "id": 1}}),
        ),
        (
            Function::RemoveExpiredMembers,
            json!({"cursor": {"expires_at": "1970-01-01", "id": 1}}),
        ),
        (Function::PruneDeletions, json!({})),
        (
            Function::PlaceholderUserCleanup,
            json!({"cursor": {"detail_id": 0, "index": 0}}),
        ),
    ];
    // Not placeholders (humans, bots, the ghost, an imported user now human, nobody),
    // and a placeholder that is still referenced.
    for u in humans
        .iter()
        .chain(&bots)
        .chain([&ghost, &5007, &99999, &5002])
    {
        forged.push((
            Function::DeletePlaceholderUser,
            json!({"placeholder_user_id": u, "attempt": 1}),
        ));
        forged.push((
            Function::DeleteUser,
            json!({"user_id": u, "initiator_user_id": null, "reason": "forged"}),
        ));
    }
    let first = delivered(&notices);
    let mut r = db.runner(t(LATER)).with_notifier(notices.notifier.clone());
    let (log, _g) = capture();
    for m in &sent {
        r.invoke(m.receiver, &m.envelope.to_body(), 1)
            .await
            .unwrap();
    }
    for (i, (f, payload)) in forged.iter().enumerate() {
        let env = Envelope::new(
            f.run_type(),
            format!("{}:forged:{i}", f.name()),
            "forged",
            t(LATER),
            payload,
        );
        r.invoke(*f, &env.to_body(), 1).await.unwrap();
    }
    assert!(
        r.runs.iter().all(|x| x.outcome == "success"),
        "{}",
        log.dump()
    );
    let after = db.snapshot().await;
    for (table, rows) in &before {
        assert_eq!(&after[table], rows, "{table} changed");
    }
    assert_eq!(
        log.with_message("delete-user skipped: no pending ghost user migration")
            .len(),
        humans.len() + bots.len() + 3,
        "{}",
        log.dump()
    );
    // Replayed deliveries repeat notices under the same keys: nothing new, nothing
    // different.
    assert_eq!(delivered(&notices), first);
    repeats_are_identical(&notices.emails());
    repeats_are_identical(&notices.webhooks());
    assert!(
        sent.len() > 10,
        "the clean run sent {} messages",
        sent.len()
    );
}
