//! Chaos equivalence: every batch, run until idle on the rich demo data set (without
//! its ghost user, so phase 2 creates one; its web hooks pointed at public names that
//! reach a real receiver), ends in the same database state under duplicated,
//! reordered and crashed deliveries as in a clean run, and B28 delivers the same set
//! of notices (by email `Message-ID` and web-hook `Idempotency-Key`), every repeat
//! with the same key and content (a system hook's too). Nothing is lost (no dead letter, no row left that
//! the clean run removed, no notice missing) and nothing is done twice (no count,
//! attempt or row that differs).
//!
//! CI runs a few seeds; `HK_CHAOS_SEEDS=<n>` (and `HK_CHAOS_FIRST_SEED`) run more,
//! `HK_CHAOS_RATES` (default `duplicate=0.3,reorder,crash=0.25`) changes the rates.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use engine::chaos::{ChaosSpec, ChaosStats, CrashPoint};
use integration_tests::fixtures::{M, U};
use integration_tests::notice::{publish_demo_hooks, repeats_are_identical, Notices};
use integration_tests::state::{canonical, demo_without_ghost, first_difference, Baseline};
use integration_tests::{t, Fx, TestDb};
use shared::config::Settings;
use shared::messages::Envelope;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// Each batch's cron function; its run until idle includes every child it starts.
const BATCHES: [Function; 5] = [
    Function::RemoveExpiredMembers,
    Function::SchedulePruneDeletions,
    Function::AdjournedGroupDeletion,
    Function::PlaceholderUserCleanup,
    Function::PatExpiring,
];

/// Budgets of 0: one unit of progress per invocation, so every chain has many hops
/// (more deliveries to disturb).
fn settings() -> Settings {
    Settings {
        delete_user_budget: Duration::ZERO,
        prune_deletions_budget: Duration::ZERO,
        group_destroy_budget: Duration::ZERO,
        pat_expiring_budget: Duration::ZERO,
        ..Settings::default()
    }
}

/// The demo data set without its ghost user (phase 2 creates one), its hooks on
/// public names.
async fn data() -> TestDb {
    let db = demo_without_ghost(t(NOW)).await;
    publish_demo_hooks(&db).await;
    // A system hook on a routed public name: every removal's system hooks are notices
    // too (docs/gitlab-differences.md, "System hooks").
    let (v, iv) = shared::notify::crypto::encrypt_with_iv(
        "http://hooks-acme.example.net/hooks/system",
        lab::demo::DEMO_DB_KEY_BASE,
        [99; 12],
    );
    db.client
        .execute(
            "INSERT INTO web_hooks (id, type, encrypted_url, encrypted_url_iv, created_at, updated_at)
             VALUES (6100, 'SystemHook', $1, $2, '2024-01-01', '2024-01-01')",
            &[&v, &iv],
        )
        .await
        .unwrap();
    db
}

/// A small B38 data set: a human and a project bot whose memberships expired; the
/// bot wrote an issue and a note, so its `delete-user` (budget 0) re-sends itself.
async fn small() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::human(11), U::bot(20)]).await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::pm(2, 200, 10, 30).expires("2025-03-09"),
        M::pm(3, 200, 20, 40).expires("2025-03-08"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (20, 200, 40), (11, 200, 50)]).await;
    fx.pat(1, 20, None).await;
    fx.contribution("issues", 1, 200, 20).await;
    fx.contribution("notes", 1, 200, 20).await;
    db
}

type State = BTreeMap<String, Vec<String>>;

/// What one pass over every batch left behind.
struct Outcome {
    /// The canonical state after each batch.
    states: Vec<(Function, State)>,
    /// Keys of dead-lettered messages, per batch.
    dead: Vec<BTreeSet<String>>,
    /// Chaos statistics, summed over the batches.
    stats: ChaosStats,
    /// Emails that arrived, by `Message-ID`.
    emails: BTreeMap<String, Vec<String>>,
    /// Web hooks that arrived, by `Idempotency-Key`.
    hooks: BTreeMap<String, Vec<String>>,
}

async fn run_all(spec: Option<&ChaosSpec>) -> Outcome {
    let db = data().await;
    let base = Baseline::capture(&db).await;
    let notices = Notices::start().await;
    let mut out = Outcome {
        states: Vec::new(),
        dead: Vec::new(),
        stats: ChaosStats::default(),
        emails: BTreeMap::new(),
        hooks: BTreeMap::new(),
    };
    for (i, f) in BATCHES.iter().enumerate() {
        let mut r = db
            .runner_with(t(NOW), settings())
            .with_notifier(notices.notifier.clone());
        if spec.is_none() {
            // The clean run keeps one session per function, as a warm Lambda does
            // (chaos runs tap a fresh session per delivery to cut it): a new session
            // per delivery cost 5–9 ms each in a debug build, and B38's clean run alone
            // delivers about 1,400 messages.
            r = r.with_kept_sessions();
        }
        if let Some(s) = spec {
            // A different but reproducible stream per batch.
            r = r.with_chaos(ChaosSpec {
                seed: s.seed.wrapping_mul(31).wrapping_add(i as u64),
                ..s.clone()
            });
        }
        let body = Envelope::cron(*f, "chaos-equivalence", t(NOW)).to_body();
        r.run_until_idle(*f, &body).await.expect("run until idle");
        out.dead.push(
            r.dead_letters()
                .into_iter()
                .map(|m| m.envelope.message_key)
                .collect(),
        );
        if let Some(s) = r.chaos_stats() {
            out.stats.deliveries += s.deliveries;
            out.stats.duplicated += s.duplicated;
            out.stats.reordered += s.reordered;
            for (p, n) in s.crashes {
                *out.stats.crashes.entry(p).or_default() += n;
            }
        }
        out.states.push((*f, canonical(&db, &base).await));
    }
    out.emails = notices.emails();
    out.hooks = notices.webhooks();
    out
}

/// A notice as compared with the clean run's: a `user_destroy` body's `updated_at` is
/// when phase 1 blocked the user, a virtual time that reordering moves, so it is left
/// out (repeats within a run are still compared whole).
fn comparable(key: &str, notice: &str) -> String {
    const FIELD: &str = "\"updated_at\":\"";
    match (
        key.starts_with("system-hook:user_destroy:"),
        notice.find(FIELD),
    ) {
        (true, Some(i)) => {
            let start = i + FIELD.len();
            let end = start + notice[start..].find('"').unwrap_or(0);
            format!("{}*{}", &notice[..start], &notice[end..])
        }
        _ => notice.to_string(),
    }
}

fn seeds() -> Vec<u64> {
    let n: u64 = std::env::var("HK_CHAOS_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let first: u64 = std::env::var("HK_CHAOS_FIRST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    (first..first + n).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_batch_reaches_the_clean_end_state_under_duplicates_reordering_and_crashes() {
    let clean = run_all(None).await;
    assert!(
        clean.dead.iter().all(BTreeSet::is_empty),
        "the clean run dead-lettered {:?}",
        clean.dead
    );
    // The clean run really did work in every batch (the equivalence is not vacuous).
    // The clean run delivered each notice once, and there are notices of both kinds.
    assert!(!clean.emails.is_empty() && !clean.hooks.is_empty());
    assert!(
        clean.hooks.keys().any(|k| k.starts_with("system-hook:")),
        "no system hook in the clean run"
    );
    assert!(clean
        .emails
        .values()
        .chain(clean.hooks.values())
        .all(|c| c.len() == 1));
    let mut total = ChaosStats::default();
    let mut repeats = 0;
    for seed in seeds() {
        let rates = std::env::var("HK_CHAOS_RATES")
            .unwrap_or_else(|_| "duplicate=0.3,reorder,crash=0.25".into());
        let spec: ChaosSpec = format!("seed={seed},{rates}").parse().unwrap();
        let run = run_all(Some(&spec)).await;
        for ((f, want), (_, got)) in clean.states.iter().zip(run.states.iter()) {
            if let Some(diff) = first_difference(want, got) {
                panic!("{spec}: after {f} the state differs from the clean run: {diff}");
            }
        }
        assert_eq!(run.dead, clean.dead, "{spec}: dead letters differ");
        // The same notices: none missing, none extra; a repeat has the same key and
        // content (the receivers' deduplication handles it).
        assert_eq!(
            run.emails.keys().collect::<Vec<_>>(),
            clean.emails.keys().collect::<Vec<_>>(),
            "{spec}: emails"
        );
        assert_eq!(
            run.hooks.keys().collect::<Vec<_>>(),
            clean.hooks.keys().collect::<Vec<_>>(),
            "{spec}: web hooks"
        );
        for (k, copies) in run.emails.iter().chain(run.hooks.iter()) {
            let want = clean.emails.get(k).or_else(|| clean.hooks.get(k)).unwrap();
            assert_eq!(
                comparable(k, &copies[0]),
                comparable(k, &want[0]),
                "{spec}: {k} differs from the clean run"
            );
        }
        repeats += repeats_are_identical(&run.emails) + repeats_are_identical(&run.hooks);
        eprintln!("chaos {spec}: {}", run.stats);
        total.deliveries += run.stats.deliveries;
        total.duplicated += run.stats.duplicated;
        total.reordered += run.stats.reordered;
        for (p, n) in run.stats.crashes {
            *total.crashes.entry(p).or_default() += n;
        }
    }
    eprintln!(
        "chaos total over {} seed(s): {total}; notices: {} emails and {} web hooks per run, {repeats} repeated deliveries (same key, same content)",
        seeds().len(),
        clean.emails.len(),
        clean.hooks.len()
    );
    assert!(total.duplicated > 0, "no message was duplicated: {total}");
    assert!(total.crashes_total() > 0, "no crash was injected: {total}");
    assert!(total.reordered > 0, "no delivery was reordered: {total}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_point_is_redelivered_and_the_end_state_is_the_clean_one() {
    // One batch with a child (B38 + delete-user), a crash planned at every point.
    let f = Function::RemoveExpiredMembers;
    let clean = {
        let db = small().await;
        let base = Baseline::capture(&db).await;
        let mut r = db.runner_with(t(NOW), settings());
        r.run_until_idle(f, &Envelope::cron(f, "c", t(NOW)).to_body())
            .await
            .unwrap();
        canonical(&db, &base).await
    };
    for point in CrashPoint::ALL {
        let db = small().await;
        let base = Baseline::capture(&db).await;
        let (log, _g) = integration_tests::logs::capture();
        let mut r = db.runner_with(t(NOW), settings());
        // The cron run, then its delete-user child, each crash at the point once.
        r.plan_crash(Some(f), point, 1);
        r.plan_crash(Some(Function::DeleteUser), point, 1);
        r.run_until_idle(f, &Envelope::cron(f, "c", t(NOW)).to_body())
            .await
            .unwrap();
        let aborted = log.with_message("chaos: handler aborted");
        assert_eq!(aborted.len(), 2, "{point}: {}", log.dump());
        assert!(aborted.iter().all(|l| l["point"] == point.name()));
        let crashed: Vec<&engine::local::Run> = r
            .runs
            .iter()
            .filter(|r| r.error.as_deref() == Some(&format!("chaos: handler aborted at {point}")))
            .collect();
        assert_eq!(crashed.len(), 2, "{point}");
        assert!(r.dead_letters().is_empty(), "{point}");
        let got = canonical(&db, &base).await;
        if let Some(diff) = first_difference(&clean, &got) {
            panic!("crash {point}: {diff}");
        }
        // Each crashed message came back after the 30 s visibility timeout.
        let key = crashed[0].message_key.clone();
        let again = r
            .runs
            .iter()
            .rev()
            .find(|x| x.message_key == key && x.error.is_none())
            .expect("redelivered");
        assert!(again.now >= crashed[0].now + chrono::Duration::seconds(30));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_notice_is_delivered_when_b28_crashes_at_each_point() {
    let f = Function::PatExpiring;
    let run = |planned: Option<CrashPoint>| async move {
        let db = data().await;
        let base = Baseline::capture(&db).await;
        let notices = Notices::start().await;
        let mut r = db
            .runner_with(t(NOW), settings())
            .with_notifier(notices.notifier.clone());
        if let Some(point) = planned {
            // The cron, and two deliveries (an email and, later, a web hook).
            r.plan_crash(Some(f), point, 1);
            r.plan_crash(Some(Function::DeliverNotification), point, 1);
            r.plan_crash(Some(Function::DeliverNotification), point, 1);
        }
        r.run_until_idle(f, &Envelope::cron(f, "c", t(NOW)).to_body())
            .await
            .unwrap();
        assert!(r.dead_letters().is_empty());
        let crashes = r
            .runs
            .iter()
            .filter(|x| x.error.as_deref().is_some_and(|e| e.starts_with("chaos:")))
            .count();
        (
            canonical(&db, &base).await,
            notices.emails(),
            notices.webhooks(),
            crashes,
        )
    };
    let (state, emails, hooks, _) = run(None).await;
    for point in CrashPoint::ALL {
        let (s, e, h, crashes) = run(Some(point)).await;
        // deliver-notification sends nothing, so only the cron can crash after an
        // enqueue; every other point is reached by the cron and the deliveries.
        let least = if point == CrashPoint::AfterEnqueue {
            1
        } else {
            2
        };
        assert!(crashes >= least, "{point}: {crashes} crashes");
        if let Some(d) = first_difference(&state, &s) {
            panic!("{point}: {d}");
        }
        assert_eq!(
            e.keys().collect::<Vec<_>>(),
            emails.keys().collect::<Vec<_>>(),
            "{point}"
        );
        assert_eq!(
            h.keys().collect::<Vec<_>>(),
            hooks.keys().collect::<Vec<_>>(),
            "{point}"
        );
        repeats_are_identical(&e);
        repeats_are_identical(&h);
    }
}
