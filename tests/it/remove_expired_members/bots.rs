//! Expired project bots in remove-expired-members: blocked, tokens revoked, a ghost
//! migration and a delete-user message in the same transaction; delete-user deletes the
//! bot; a failed send rolls back that member only.

use super::*;
use crate::assert::{assert_fields, assert_sent_one, assert_user_state};

#[tokio::test]
async fn an_expired_project_bot_is_blocked_revoked_and_queued_for_deletion() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[M::pm(18, 200, 20, 40).expires("2025-03-09")])
        .await;
    fx.pat(1, 20, None).await;
    fx.pas(&[(20, 200, 40)]).await;
    let (r, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 18").await);
    assert!(db.pas().await.is_empty());
    assert_user_state(&db, 20, "blocked").await;
    assert!(
        db.scalar::<bool>("SELECT revoked FROM personal_access_tokens WHERE id = 1")
            .await
    );
    let row = db
        .client
        .query_one(
            "SELECT initiator_user_id, hard_delete, consume_after FROM ghost_user_migrations WHERE user_id = 20",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, Option<i64>>(0), None);
    assert!(!row.get::<_, bool>(1));
    assert_eq!(row.get::<_, chrono::DateTime<chrono::Utc>>(2), t(NOW));
    // From GitLab 19.1 the row carries the user's type: GitLab's workers pick rows by it.
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V19_5 {
        let typed: Option<i16> = db
            .scalar("SELECT user_type FROM ghost_user_migrations WHERE user_id = 20")
            .await;
        let user: Option<i16> = db.scalar("SELECT user_type FROM users WHERE id = 20").await;
        assert_eq!((typed, typed.is_some()), (user, true));
    }
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": Function::DeleteUser.name(),
            "delay_s": 30,
            "message_key": "delete-user:20",
            "type": "delete-user.run",
            "payload": {"user_id": 20, "initiator_user_id": null, "reason": "Membership expired"}
        }),
    );
    assert_eq!(log.done()["updated_rows"], 1);
    assert_fields(
        &log.one("User scheduled for removal"),
        json!({"user_id": 20, "reason": "Membership expired", "tokens_revoked": 1}),
    );
}

#[tokio::test]
async fn until_idle_a_bot_is_deleted_by_its_delete_user_child() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::ghost(5)]).await;
    fx.members(&[
        M::pm(18, 200, 20, 40).expires("2025-03-09"),
        M::gm(19, 101, 20, 30),
    ])
    .await;
    fx.pat(1, 20, None).await;
    fx.contribution("issues", 1, 200, 20).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert!(!db.exists("users WHERE id = 20").await);
    assert_eq!(
        db.scalar::<i64>("SELECT author_id FROM issues WHERE id = 1")
            .await,
        5
    );
    assert!(!db.exists("members WHERE user_id = 20").await);
    assert_fields(
        &log.one("User deleted"),
        json!({"user_id": 20, "issues_reassigned": 1}),
    );
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].function, Function::DeleteUser);
    // The child ran 30 virtual seconds later.
    assert_eq!(r.runs[1].now, t("2025-03-10T00:10:30Z"));
    assert_eq!(r.exit_code(false), 0);
    // A duplicated delete-user message afterwards is a no-op.
    let dup = r.runs[0].sent[0].message.clone();
    let (log2, _g2) = capture();
    r.invoke(Function::DeleteUser, &dup.envelope.to_body(), 2)
        .await
        .unwrap();
    log2.one("delete-user skipped: user not found");
    assert_eq!(log2.done()["status"], "stale");
}

#[tokio::test]
async fn a_failed_delete_user_send_rolls_back_that_member_only() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(18, 200, 20, 40).expires("2025-03-09"),
        M::pm(10, 200, 10, 30).expires("2025-03-08"),
    ])
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "delete-user:20");
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    // The bot's member and state are untouched: the send failed before COMMIT.
    assert!(db.exists("members WHERE id = 18").await);
    assert_user_state(&db, 20, "active").await;
    assert!(!db.exists("ghost_user_migrations").await);
    assert!(!db.exists("members WHERE id = 10").await);
    let e = log.one("Expired Member ID=18 cannot be removed - transport: injected send failure for delete-user:20");
    assert_eq!(e["error_class"], "transport");
    assert_fields(&log.done(), json!({"updated_rows": 1, "failed_rows": 1}));
}
