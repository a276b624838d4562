//! delete-user (phase 2 of user removal): the acceptance scenarios of behaviour §5.4,
//! plus commit-before-delivery (behaviour §9.5) and the hop limit.

use std::time::Duration;

use crate::assert::{assert_fields, assert_message};
use engine::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::config::Settings;
use shared::messages::Envelope;
use shared::workers::delete_user::DeleteUserRun;
use shared::Function;

const NOW: &str = "2025-03-10T00:11:00Z";
const F: Function = Function::DeleteUser;

/// U20(bot, blocked) with a migration row; I1, R1, N1, N2 by U20; T1 (revoked);
/// NS900 (User, owner 20) with its route; U5 (ghost); P200 in G100.
async fn fixture(with_ghost: bool) -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::bot(20).blocked()]).await;
    if with_ghost {
        fx.users(&[U::ghost(5)]).await;
    }
    fx.ghost_migration(20, None).await;
    fx.contribution("issues", 1, 200, 20).await;
    fx.contribution("merge_requests", 1, 200, 20).await;
    fx.contribution("notes", 1, 200, 20).await;
    fx.contribution("notes", 2, 200, 20).await;
    fx.pat(1, 20, None).await;
    db.exec("UPDATE personal_access_tokens SET revoked = true")
        .await;
    fx.personal_namespace(900, 20).await;
    db
}

fn message(user: i64) -> String {
    Envelope::new(
        "delete-user.run",
        format!("delete-user:{user}"),
        "run-1",
        t(NOW),
        DeleteUserRun {
            user_id: user,
            initiator_user_id: None,
            reason: Some("Membership expired".into()),
        },
    )
    .to_body()
}

#[tokio::test]
async fn the_user_is_deleted_and_its_contributions_go_to_the_ghost() {
    let db = fixture(true).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(F, &message(20), 1).await.unwrap();
    for table in ["issues", "merge_requests", "notes"] {
        assert_eq!(
            db.count(&format!("{table} WHERE author_id = 5")).await,
            db.count(table).await,
            "{table}"
        );
    }
    assert!(!db.exists("users WHERE id = 20").await);
    assert!(!db.exists("personal_access_tokens").await);
    assert!(!db.exists("namespaces WHERE id = 900").await);
    assert!(
        !db.exists("routes WHERE source_type = 'Namespace' AND source_id = 900")
            .await
    );
    assert!(!db.exists("ghost_user_migrations").await);
    assert_fields(
        &log.one("User deleted"),
        json!({
            "issues_reassigned": 1,
            "merge_requests_reassigned": 1,
            "notes_reassigned": 2,
            "ghost_user_id": 5,
            "user_id": 20,
            "reason": "Membership expired"
        }),
    );
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn a_missing_ghost_user_is_created_with_namespace_and_route() {
    let db = fixture(false).await;
    let (log, _g) = capture();
    db.runner(t(NOW)).invoke(F, &message(20), 1).await.unwrap();
    let ghost: i64 = db
        .scalar("SELECT id FROM users WHERE username = 'ghost' AND user_type = 5")
        .await;
    assert_eq!(
        db.scalar::<String>(&format!("SELECT name FROM users WHERE id = {ghost}"))
            .await,
        "Ghost"
    );
    assert_eq!(
        db.count(&format!("issues WHERE author_id = {ghost}")).await,
        1
    );
    let ns: i64 = db
        .scalar(&format!("SELECT id FROM namespaces WHERE type = 'User' AND owner_id = {ghost} AND path = 'ghost'"))
        .await;
    assert!(
        db.exists(&format!(
            "routes WHERE source_type = 'Namespace' AND source_id = {ns} AND path = 'ghost'"
        ))
        .await
    );
    assert_eq!(log.one("Ghost user created")["user_id"], ghost);
}

#[tokio::test]
async fn the_ghost_takes_the_next_free_name_when_ghost_is_taken() {
    let db = fixture(false).await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id) VALUES (30, 'Ghost', 'someone@example.com', 'active', 0, 100000, 1)",
    )
    .await;
    db.runner(t(NOW)).invoke(F, &message(20), 1).await.unwrap();
    assert!(
        db.exists("users WHERE username = 'ghost1' AND user_type = 5")
            .await
    );
}

#[tokio::test]
async fn a_replay_after_success_changes_nothing() {
    let db = fixture(true).await;
    let mut r = db.runner(t(NOW));
    r.invoke(F, &message(20), 1).await.unwrap();
    let (log, _g) = capture();
    let before = db.count("issues WHERE author_id = 5").await;
    let (run, _) = r.invoke(F, &message(20), 2).await.unwrap();
    assert_eq!(run.outcome, "success");
    log.one("delete-user skipped: user not found");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(db.count("issues WHERE author_id = 5").await, before);
}

#[tokio::test]
async fn a_cancelled_removal_changes_nothing() {
    let db = fixture(true).await;
    db.exec("DELETE FROM ghost_user_migrations").await;
    let (log, _g) = capture();
    db.runner(t(NOW)).invoke(F, &message(20), 1).await.unwrap();
    log.one("delete-user skipped: no pending ghost user migration");
    assert!(db.exists("users WHERE id = 20").await);
    assert_eq!(db.count("issues WHERE author_id = 20").await, 1);
}

#[tokio::test]
async fn a_user_who_became_sole_owner_is_not_deleted() {
    let db = fixture(true).await;
    db.exec("UPDATE users SET user_type = 0, state = 'active' WHERE id = 20")
        .await;
    Fx(&db).members(&[M::gm(9, 100, 20, 50)]).await;
    let (log, _g) = capture();
    db.runner(t(NOW)).invoke(F, &message(20), 1).await.unwrap();
    let w = log.one("User deletion refused: sole owner of group");
    assert_eq!(w["level"], "warn");
    assert!(db.exists("users WHERE id = 20").await);
    assert!(db.exists("ghost_user_migrations WHERE user_id = 20").await);
    assert_eq!(db.count("issues WHERE author_id = 20").await, 1);
}

#[tokio::test]
async fn a_user_who_owns_personal_projects_is_not_deleted() {
    let db = fixture(true).await;
    Fx(&db).project_path(901, 900, "mine").await;
    let (log, _g) = capture();
    db.runner(t(NOW)).invoke(F, &message(20), 1).await.unwrap();
    log.one("User deletion refused: user owns personal projects");
    assert!(db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn the_ghost_user_itself_is_never_deleted() {
    let db = fixture(true).await;
    Fx(&db).ghost_migration(5, None).await;
    let (log, _g) = capture();
    db.runner(t(NOW)).invoke(F, &message(5), 1).await.unwrap();
    assert_eq!(
        log.one("delete-user refused: ghost user cannot be deleted")["level"],
        "error"
    );
    assert!(db.exists("users WHERE id = 5").await);
}

#[tokio::test]
async fn with_no_budget_each_invocation_reassigns_one_batch_and_resends() {
    let db = fixture(true).await;
    db.exec(
        "INSERT INTO issues (id, project_id, author_id, namespace_id, work_item_type_id) SELECT g, 200, 20, (SELECT project_namespace_id FROM projects WHERE id = 200), 1 FROM generate_series(2, 2500) g",
    )
    .await;
    let settings = Settings {
        delete_user_budget: Duration::ZERO,
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r: Runner = db.runner_with(t(NOW), settings);
    r.invoke(F, &message(20), 1).await.unwrap();
    assert_eq!(db.count("issues WHERE author_id = 5").await, 1000);
    assert!(db.exists("users WHERE id = 20").await);
    assert_message(
        &r.runs[0].sent[0].message,
        json!({
            "hop": 1,
            "delay_s": 0,
            "message_key": "delete-user:20",
            "payload": {"user_id": 20, "initiator_user_id": null, "reason": "Membership expired"}
        }),
    );
    log.one("delete-user continuing");
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 6, "six invocations in all");
    let hops: Vec<_> = r.runs.iter().map(|x| x.hop.unwrap()).collect();
    assert_eq!(hops, vec![0, 1, 2, 3, 4, 5]);
    let reassigned: Vec<_> = r
        .runs
        .iter()
        .map(|x| {
            let rep = x.report.as_ref().unwrap().to_json();
            (
                rep["issues_reassigned"].as_u64(),
                rep["merge_requests_reassigned"].as_u64(),
                rep["notes_reassigned"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        reassigned,
        vec![
            (Some(1000), Some(0), Some(0)),
            (Some(1000), Some(0), Some(0)),
            (Some(500), Some(0), Some(0)),
            (Some(0), Some(1), Some(0)),
            (Some(0), Some(0), Some(2)),
            (Some(0), Some(0), Some(0)),
        ]
    );
    assert!(!db.exists("users WHERE id = 20").await);
    assert!(r.runs[5].sent.is_empty());
    assert_eq!(log.with_message("User deleted").len(), 1);
}

#[tokio::test]
async fn delete_user_waits_for_the_phase_one_commit_before_looking_for_the_migration() {
    let db = fixture(true).await;
    db.exec("DELETE FROM ghost_user_migrations").await;
    // Another session is in the middle of phase 1: it holds the user row and has
    // inserted the migration row, but not committed yet.
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT id FROM users WHERE id = 20 FOR UPDATE", &[])
        .await
        .unwrap();
    tx.execute(
        "INSERT INTO ghost_user_migrations (user_id, hard_delete, consume_after, created_at, updated_at)
         VALUES (20, false, '2025-03-10', '2025-03-10', '2025-03-10')",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let commit_later = async {
        db.blocked_on_lock("delete-user").await;
        tx.commit().await.unwrap();
    };
    let body = message(20);
    let (res, ()) = tokio::join!(r.invoke(F, &body, 1), commit_later);
    res.unwrap();
    // Had it not waited, it would have seen no migration row and skipped.
    log.one("User deleted");
    assert!(!db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn a_phase_one_that_holds_the_user_too_long_is_a_retryable_failure() {
    let db = fixture(true).await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT id FROM users WHERE id = 20 FOR UPDATE", &[])
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = Runner::new(
        db.connector().with_lock_timeout_ms(50),
        Settings::default(),
        t(NOW),
    );
    let (run, _) = r.invoke(F, &message(20), 1).await.unwrap();
    assert_eq!(run.outcome, "retryable");
    assert_fields(
        &log.one("record failed"),
        json!({"error_class": "db", "receive_count": 1}),
    );
    tx.rollback().await.unwrap();
    assert!(db.exists("users WHERE id = 20").await);
    assert_eq!(r.exit_code(true), 1);
}
