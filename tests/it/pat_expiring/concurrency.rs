//! pat-expiring alongside other sessions and runs: a token claimed by another session
//! after the page read is not named; a user's or a bot's tokens locked elsewhere fail
//! alone and the page goes on; an overlapping run is skipped; a second run the same day
//! sends nothing, and a lost commit repeats the same keys.

use super::*;
use crate::assert::{assert_fields, assert_skipped_already_running};

#[tokio::test]
async fn a_token_claimed_by_another_session_after_the_page_read_is_not_named() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "ci").await;
    tok(&db, 2, 10, "2025-03-17", "deploy").await;
    // Another session claims T1 but has not committed when the page is read; U10's
    // claim waits for its row lock and then re-checks T1.
    let other = db.session().await;
    other.batch_execute("BEGIN").await.unwrap();
    other
        .execute(
            "UPDATE personal_access_tokens SET seven_days_notification_sent_at = '2025-03-10T00:59:00Z'
             WHERE id = 1",
            &[],
        )
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    // The claim waited for the other session's row lock: commit only then.
    let commit_when_blocked = async {
        db.blocked_on_lock("pat-expiring").await;
        other.batch_execute("COMMIT").await.unwrap();
    };
    let (run, ()) = tokio::join!(r.invoke(F, &body, 1), commit_when_blocked);
    run.unwrap();
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    assert_eq!(mails[0].payload["token_names"], json!(["deploy"]));
    assert_eq!(
        db.scalar::<chrono::DateTime<chrono::Utc>>(
            "SELECT seven_days_notification_sent_at FROM personal_access_tokens WHERE id = 1"
        )
        .await,
        t("2025-03-10T00:59:00Z")
    );
    assert_eq!(marks(&db, 2).await, (true, false, false, true));
    assert_eq!(log.done()["total_user_tokens_marked"], 1);
}

#[tokio::test]
async fn a_user_whose_tokens_are_locked_elsewhere_fails_alone_and_the_page_goes_on() {
    // The page is claimed in one transaction: the lock makes its set-based claim fail,
    // then each user runs in a savepoint of its own, so only U12 fails.
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 12, "2025-03-16", "other").await;
    tok(&db, 3, 14, "2025-03-15", "third").await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM personal_access_tokens WHERE id = 2 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let connector = shared::db::Connector::from_url(&db.url)
        .unwrap()
        .with_lock_timeout_ms(150);
    let mut r =
        Runner::new(connector, Settings::default(), t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(marks(&db, 1).await, (true, false, false, true));
    assert_eq!(marks(&db, 2).await, (false, false, false, false));
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    let mut keys: Vec<&str> = emails(&r.runs[0].sent)
        .iter()
        .map(|e| e.message_key.as_str())
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        vec![
            "pat-expiring:seven_days:user:10:2025-03-10",
            "pat-expiring:seven_days:user:14:2025-03-10"
        ]
    );
    assert_fields(
        &log.one("Failed to send notification about expiring personal access tokens"),
        json!({"user_id": 12, "error_class": "db"}),
    );
    assert_fields(
        &done_totals(&log),
        json!({"user_tokens": 2, "user_emails": 2, "user_failures": 1, "status": "completed"}),
    );
    // One send call for the page's two emails.
    assert_eq!(r.queue().send_calls(), 1);
}

#[tokio::test]
async fn a_bot_whose_token_is_locked_elsewhere_fails_alone_and_the_other_bot_is_notified() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    Fx(&db)
        .members(&[M::gm(24, 101, 21, 30), M::gm(25, 101, 15, 50)])
        .await;
    tok(&db, 21, 21, "2025-03-15", "T21").await;
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "SELECT 1 FROM personal_access_tokens WHERE id = 20 FOR UPDATE",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let connector = shared::db::Connector::from_url(&db.url)
        .unwrap()
        .with_lock_timeout_ms(150);
    let mut r =
        Runner::new(connector, Settings::default(), t(NOW)).with_notifier(log_notifier().await);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(marks(&db, 20).await, (false, false, false, false));
    assert_eq!(marks(&db, 21).await, (true, false, false, true));
    let keys: Vec<&str> = r.runs[0]
        .sent
        .iter()
        .map(|s| s.message.envelope.message_key.as_str())
        .collect();
    assert!(keys.iter().all(|k| k.contains(":bot:21:")), "{keys:?}");
    assert_eq!(
        emails(&r.runs[0].sent)[0].message_key,
        "pat-expiring:seven_days:bot:21:recipient:15:2025-03-10"
    );
    assert_fields(
        &log.one("Failed to send notification about expiring resource access tokens"),
        json!({"user_id": 20, "error_class": "db"}),
    );
    assert_fields(&done_totals(&log), json!({"bots": 1, "bot_failures": 1}));
}

#[tokio::test]
async fn an_overlapping_run_is_skipped() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    let holder = db.session().await;
    holder
        .execute(
            "SELECT pg_advisory_lock($1)",
            &[&shared::locks::lock_key("function:pat-expiring")],
        )
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    assert_skipped_already_running(&log, &r.runs[0]);
    assert!(!marks(&db, 1).await.0);
}

#[tokio::test]
async fn a_second_run_the_same_day_sends_nothing_and_a_lost_commit_repeats_the_same_keys() {
    let db = fixture().await;
    scenario7(&db, "https://hooks.example.com/x", None).await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 12, "2025-04-20", "sixty").await;
    let (r1, _) = cron_once(&db).await;
    let keys = |r: &Runner| -> Vec<String> {
        let mut k: Vec<String> = r.runs[0]
            .sent
            .iter()
            .map(|s| s.message.envelope.message_key.clone())
            .collect();
        k.sort();
        k
    };
    let first = keys(&r1);
    assert_eq!(first.len(), 5, "{first:?}");
    let (r2, log2) = cron_once(&db).await;
    assert!(r2.runs[0].sent.is_empty());
    assert_eq!(log2.done()["total_user_tokens_marked"], 0);
    // A COMMIT that failed after the send leaves the tokens unmarked: the next run
    // generates the same notices under the same keys (behaviour §B28.11).
    db.exec(
        "UPDATE personal_access_tokens SET seven_days_notification_sent_at = NULL,
           sixty_days_notification_sent_at = NULL, expire_notification_delivered = false",
    )
    .await;
    let (r3, _) = cron_once(&db).await;
    assert_eq!(keys(&r3), first);
}
