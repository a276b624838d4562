//! The lock order across functions (ARCHITECTURE.md, invariants): a B38 group, a B43
//! schedule batch and a phase 1 over the same users, released together from a held
//! group-owner lock, never deadlock.

use engine::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, wait, Fx, TestDb};
use shared::config::Settings;
use shared::gitlab::user_removal::{schedule_removal, PhaseOne, RemovalRequest};
use shared::locks::lock_key;
use shared::messages::{prune_deletions_key, Envelope};
use shared::workers::prune_deletions::PruneDeletionsRun;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
const REPETITIONS: usize = 50;

/// Lock timeout of the three participants. They wait behind the test's lock until all
/// three have reached it, which on a loaded machine can outlast the product's 5 s; a
/// deadlock is still detected by PostgreSQL after `deadlock_timeout` (1 s), whatever
/// the lock timeout.
fn participant_lock_timeout_ms() -> u64 {
    u64::try_from(wait::LOCK_WAIT.as_millis()).expect("fits")
}

/// The rows of one repetition: G100 with P200; U10 a counted owner that stays; U11 with
/// an expired owner row and an expired project row (B38) and a schedule by admin U1
/// (B43); U12 with an owner row and an expired project row (phase 1 and B38); bot U20
/// with an expired project row (B38's nested phase 1).
async fn reset(db: &TestDb) {
    db.exec(
        "DELETE FROM members; DELETE FROM members_deletion_schedules;
         DELETE FROM ghost_user_migrations; DELETE FROM project_authorizations;
         UPDATE users SET state = 'active';
         INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
         VALUES (1, 100, 11, 1, '2025-03-09', '2025-03-09');",
    )
    .await;
    Fx(db)
        .members(&[
            M::gm(1, 100, 10, 50),
            M::gm(2, 100, 11, 50).expires("2025-03-09"),
            M::pm(3, 200, 11, 30).expires("2025-03-09"),
            M::gm(4, 100, 12, 50),
            M::pm(5, 200, 12, 30).expires("2025-03-09"),
            M::pm(6, 200, 20, 40).expires("2025-03-09"),
        ])
        .await;
    Fx(db)
        .pas(&[(10, 200, 50), (11, 200, 50), (12, 200, 50), (20, 200, 40)])
        .await;
}

/// A local runner for one participant.
fn participant(db: &TestDb) -> Runner {
    Runner::new(
        db.connector()
            .with_lock_timeout_ms(participant_lock_timeout_ms()),
        Settings::default(),
        t(NOW),
    )
}

/// How many sessions of this database named in `apps` wait for a lock.
async fn waiting(db: &TestDb, apps: &[&str]) -> i64 {
    let apps: Vec<String> = apps.iter().map(|a| a.to_string()).collect();
    db.client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = ANY($1)
               AND wait_event_type = 'Lock'",
            &[&apps],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn concurrent_b38_b43_and_phase_one_over_shared_users_never_deadlock() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[
        U::human(1).admin(),
        U::human(10),
        U::human(11),
        U::human(12),
        U::bot(20),
    ])
    .await;
    let (log, _g) = capture();
    let mut holder = db.session().await;
    let mut p1 = db.session().await;
    p1.batch_execute(&format!(
        "SET application_name = 'phase-one'; SET lock_timeout = {}",
        participant_lock_timeout_ms()
    ))
    .await
    .unwrap();
    for rep in 0..REPETITIONS {
        reset(&db).await;
        // Everything starts behind G100's group-owner lock, held here.
        let hold = holder.transaction().await.unwrap();
        hold.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&shared::locks::lock_key("group-owners:100")],
        )
        .await
        .unwrap();
        let mut b38 = participant(&db);
        let b38_body = b38.cron_message(Function::RemoveExpiredMembers).to_body();
        let mut b43 = participant(&db);
        let run_id = format!("rep-{rep}");
        let b43_body = Envelope::new(
            "prune-deletions.run",
            prune_deletions_key(&run_id),
            &run_id,
            t(NOW),
            PruneDeletionsRun {},
        )
        .to_body();
        let phase_one = async {
            let tx = p1.transaction().await.unwrap();
            let mut intents = Vec::new();
            let req = RemovalRequest {
                user_id: 12,
                initiator: None,
                reason: "test",
                extra_affected: &[],
                bot_resource: None,
                reason_for_deletion: None,
            };
            let r = schedule_removal(
                &tx,
                &crate::common_rules::phase_one_invocation(t(NOW)),
                &req,
                &mut intents,
            )
            .await;
            tx.commit().await.unwrap();
            r
        };
        let release = async {
            wait::until(
                "B38, B43 and phase 1 all to wait behind the held group-owner lock",
                wait::LOCK_WAIT,
                || async {
                    let n = waiting(
                        &db,
                        &["remove-expired-members", "prune-deletions", "phase-one"],
                    )
                    .await;
                    (n == 3).then_some(())
                },
            )
            .await;
            hold.commit().await.unwrap();
        };
        let (a, b, c, ()) = tokio::join!(
            b38.invoke(Function::RemoveExpiredMembers, &b38_body, 1),
            b43.invoke(Function::PruneDeletions, &b43_body, 1),
            phase_one,
            release
        );
        assert_eq!(a.unwrap().0.outcome, "success", "rep {rep}");
        assert_eq!(b.unwrap().0.outcome, "success", "rep {rep}");
        assert!(
            matches!(c.unwrap(), PhaseOne::Scheduled { .. }),
            "rep {rep}"
        );
        assert_eq!(db.ids("members").await, vec![1], "rep {rep}");
    }
    let deadlocks: Vec<_> = log
        .lines()
        .into_iter()
        .filter(|l| l.to_string().contains("deadlock"))
        .collect();
    assert!(deadlocks.is_empty(), "{deadlocks:?}");
    let retries = log.with_message("transient database error, retrying");
    assert!(retries.is_empty(), "{retries:?}");
    assert!(log
        .with_message("Expired Member ID=2 cannot be removed - deadlock detected")
        .is_empty());
    assert!(log
        .with_message("Scheduled member deletion failed")
        .is_empty());
}

#[test]
fn lock_key_is_the_big_endian_prefix_of_the_hash() {
    // The first 8 bytes of sha256("gitlab-housekeeping:function:remove-expired-members"),
    // big-endian: what a lock of the running bundle is seen as in `pg_locks`.
    assert_eq!(
        lock_key("function:remove-expired-members"),
        3_406_099_047_915_055_823
    );
    assert_ne!(lock_key("a"), lock_key("b"));
}
