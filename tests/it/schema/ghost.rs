//! The ghost user and user deletion on GitLab's model: with no ghost, a project bot's
//! removal creates exactly one, as GitLab creates it (every constraint met: personal
//! namespace, route, organization membership, details), under a lock two creators
//! share; the deleted user's access rows go in its transaction and its loose-FK record
//! is written for GitLab's cleanup of the rest.

use integration_tests::fixtures::{M, U};
use integration_tests::wait;
use integration_tests::{t, Fx, TestDb};
use shared::messages::Envelope;
use shared::workers::delete_user::DeleteUserRun;
use shared::Function;

const NOW: &str = "2025-03-10T00:11:00Z";

/// U20 (bot, blocked) pending deletion, with issue I1, a membership and an
/// authorization that reappeared since phase 1, a global notification setting; no
/// ghost user.
async fn bot_pending_deletion() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::bot(20).blocked()]).await;
    fx.ghost_migration(20, None).await;
    fx.contribution("issues", 1, 200, 20).await;
    fx.members(&[M::pm(1, 200, 20, 40)]).await;
    fx.pas(&[(20, 200, 40)]).await;
    db.exec(
        "INSERT INTO notification_settings (user_id, level, created_at, updated_at)
         VALUES (20, 3, '2024-01-01', '2024-01-01')",
    )
    .await;
    db
}

async fn delete_user(db: &TestDb, user: i64) {
    let body = Envelope::new(
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
    .to_body();
    let mut r = db.runner(t(NOW));
    r.invoke(Function::DeleteUser, &body, 1).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
}

#[tokio::test]
async fn a_bot_removal_creates_one_ghost_as_gitlab_does_and_reassigns_its_issues() {
    let db = bot_pending_deletion().await;
    db.exec("INSERT INTO application_settings (default_projects_limit) VALUES (42)")
        .await;
    assert!(!db.exists("users WHERE user_type = 5").await);
    delete_user(&db, 20).await;
    assert_eq!(db.count("users WHERE user_type = 5").await, 1);
    let ghost: i64 = db.scalar("SELECT id FROM users WHERE user_type = 5").await;
    let row = db
        .client
        .query_one(
            "SELECT username, email, name, state, projects_limit, organization_id FROM users WHERE id = $1",
            &[&ghost],
        )
        .await
        .unwrap();
    let (username, email, name, state): (String, String, String, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (
            username.as_str(),
            email.as_str(),
            name.as_str(),
            state.as_str()
        ),
        ("ghost", "ghost@example.com", "Ghost", "active")
    );
    assert_eq!(row.get::<_, i32>(4), 42, "projects_limit from the settings");
    assert_eq!(row.get::<_, i64>(5), 1, "the first organization");
    let bio: String = db
        .scalar(&format!(
            "SELECT bio FROM user_details WHERE user_id = {ghost}"
        ))
        .await;
    assert!(bio.starts_with("This is a \"Ghost User\""), "{bio}");
    assert!(
        db.exists(&format!(
            "organization_users WHERE user_id = {ghost} AND organization_id = 1"
        ))
        .await
    );
    // The personal namespace (GitLab's trigger filled namespace_details) and its route.
    let ns: i64 = db
        .scalar(&format!(
            "SELECT id FROM namespaces WHERE type = 'User' AND owner_id = {ghost}
               AND path = 'ghost' AND organization_id = 1 AND traversal_ids = ARRAY[id]"
        ))
        .await;
    assert!(
        db.exists(&format!("namespace_details WHERE namespace_id = {ns}"))
            .await
    );
    assert!(
        db.exists(&format!(
            "routes WHERE source_type = 'Namespace' AND source_id = {ns}
               AND namespace_id = {ns} AND path = 'ghost'"
        ))
        .await
    );
    // The bot's issue is the ghost's now.
    assert_eq!(
        db.count(&format!("issues WHERE author_id = {ghost}")).await,
        1
    );
    assert!(!db.exists("users WHERE id = 20").await);
}

#[tokio::test]
async fn the_deleted_users_access_goes_at_once_and_its_loose_fk_record_is_written() {
    let db = bot_pending_deletion().await;
    delete_user(&db, 20).await;
    assert!(!db.exists("users WHERE id = 20").await);
    // Removed by the deletion itself, as GitLab's destroy service removes them.
    assert!(!db.exists("members WHERE user_id = 20").await);
    assert!(!db.exists("project_authorizations WHERE user_id = 20").await);
    assert!(
        !db.exists("project_authorizations_for_migration WHERE user_id = 20")
            .await
    );
    // GitLab's trigger recorded the delete, in the same transaction as the user's
    // delete: GitLab's loose-FK worker removes the rest (the global notification setting).
    assert!(
        db.exists(
            "loose_foreign_keys_deleted_records
             WHERE fully_qualified_table_name = 'public.users' AND primary_key_value = 20"
        )
        .await
    );
    assert!(db.exists("notification_settings WHERE user_id = 20").await);
}

#[tokio::test]
async fn the_ghost_name_and_email_are_unique_each_on_their_own() {
    let db = bot_pending_deletion().await;
    let fx = Fx(&db);
    // A group takes the path `Ghost` (case-insensitively); a user takes the email.
    fx.group(150, "Ghost", None).await;
    fx.users(&[U::human(30)]).await;
    db.exec("UPDATE users SET email = 'GHOST@example.com' WHERE id = 30")
        .await;
    delete_user(&db, 20).await;
    let row = db
        .client
        .query_one("SELECT username, email FROM users WHERE user_type = 5", &[])
        .await
        .unwrap();
    assert_eq!(
        (row.get::<_, String>(0), row.get::<_, String>(1)),
        ("ghost1".to_string(), "ghost1@example.com".to_string())
    );
    assert!(db.exists("routes WHERE path = 'ghost1'").await);
}

#[tokio::test]
async fn two_concurrent_creations_make_one_ghost() {
    let db = TestDb::new().await;
    // A third session holds the ghost-user lock until both creators wait for it.
    let mut holder = db.session().await;
    let hold = holder.transaction().await.unwrap();
    shared::locks::xact_locks(&hold, &["ghost-user".to_string()])
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mut c = db.session().await;
        tasks.push(tokio::spawn(async move {
            let tx = c.transaction().await.unwrap();
            shared::gitlab::user_removal::ensure_ghost_user(tx, t(NOW))
                .await
                .unwrap()
        }));
    }
    wait::until(
        "both ghost creators to wait for the lock",
        wait::LOCK_WAIT,
        || async {
            let n: i64 = db
                .scalar(
                    "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name = 'other-session'
                   AND wait_event_type = 'Lock'",
                )
                .await;
            (n == 2).then_some(())
        },
    )
    .await;
    hold.commit().await.unwrap();
    let mut ids = Vec::new();
    for task in tasks {
        ids.push(task.await.unwrap());
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(db.count("users WHERE user_type = 5").await, 1);
    assert_eq!(db.count("namespaces WHERE type = 'User'").await, 1);
}
