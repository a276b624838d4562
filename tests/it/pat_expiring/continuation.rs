//! How pat-expiring continues: an exhausted budget stops after a page and the
//! continuation resumes without duplicates (or completes when nothing is left to
//! mark); the deadline guard stops after one unit; the hop limit ends the run.

use super::*;
use crate::assert::{assert_fields, assert_message};

/// 250 human tokens due in seven days, of users 1000..1249.
async fn two_hundred_fifty(db: &TestDb) {
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(1000, 1249) g;
         INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, g, 'bulk', DATE '2025-03-10' + (g % 8), '2024-01-01', '2024-01-01', 1
           FROM generate_series(1000, 1249) g;",
    )
    .await;
}

fn zero_budget() -> Settings {
    Settings {
        pat_expiring_budget: Duration::ZERO,
        ..Settings::default()
    }
}

#[tokio::test]
async fn an_exhausted_budget_stops_after_a_page_and_the_continuation_resumes_without_duplicates() {
    let db = fixture().await;
    two_hundred_fifty(&db).await;
    let (r, log) = cron_once_with(&db, zero_budget()).await;
    let cron_key = r.runs[0].message_key.clone().unwrap();
    assert!(cron_key.starts_with("pat-expiring:cron:"));
    assert_fields(
        &log.done(),
        json!({"status": "limit_reached", "total_user_tokens_marked": 100}),
    );
    assert_eq!(
        db.count("personal_access_tokens WHERE seven_days_notification_sent_at IS NOT NULL")
            .await,
        100
    );
    let sent = &r.runs[0].sent;
    let cont: Vec<_> = sent.iter().filter(|s| s.message.receiver == F).collect();
    assert_eq!(cont.len(), 1);
    let c = &cont[0].message;
    assert_message(
        c,
        json!({"delay_s": 120, "hop": 1, "type": "pat-expiring.run", "payload": {}}),
    );
    let run_id = c.envelope.run_id.clone();
    assert_eq!(c.envelope.message_key, format!("pat-expiring:{run_id}:1"));
    // Invocation 2, given that message: the next page.
    let (log2, _g) = capture();
    let mut r2 = db
        .runner_with(t("2025-03-10T01:02:00Z"), zero_budget())
        .with_notifier(log_notifier().await);
    r2.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    assert_eq!(log2.done()["status"], "limit_reached");
    assert_eq!(log2.done()["total_user_tokens_marked"], 100);
    let next = r2.runs[0]
        .sent
        .iter()
        .find(|s| s.message.receiver == F)
        .unwrap();
    assert_eq!(
        next.message.envelope.message_key,
        format!("pat-expiring:{run_id}:2")
    );
    // Until idle: every token marked once, every user emailed once, and the run ends.
    let mut r3 = db
        .runner_with(t("2025-03-10T01:04:00Z"), zero_budget())
        .with_notifier(log_notifier().await);
    r3.run_until_idle(F, &next.message.envelope.to_body())
        .await
        .unwrap();
    assert_eq!(
        db.count("personal_access_tokens WHERE seven_days_notification_sent_at IS NULL")
            .await,
        0
    );
    let mut keys: Vec<String> = [&r.runs, &r2.runs, &r3.runs]
        .iter()
        .flat_map(|runs| runs.iter())
        .flat_map(|run| run.sent.iter())
        .filter(|s| s.message.receiver == D)
        .map(|s| s.message.envelope.message_key.clone())
        .collect();
    assert_eq!(keys.len(), 250);
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 250);
    let last = r3.runs.iter().rfind(|x| x.function == F).unwrap();
    assert_eq!(
        last.report.as_ref().unwrap().to_json()["status"],
        "completed"
    );
}

#[tokio::test]
async fn an_exhausted_budget_with_nothing_to_mark_completes_without_a_continuation() {
    let db = fixture().await;
    tok(&db, 23, 22, "2025-03-15", "T23").await;
    let (r, log) = cron_once_with(&db, zero_budget()).await;
    assert_eq!(log.done()["status"], "completed");
    assert_eq!(log.done()["total_resource_bot_without_membership"], 1);
    assert!(r.runs[0].sent.is_empty());
}

#[tokio::test]
async fn the_deadline_guard_stops_after_one_unit_and_continues() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    tok(&db, 2, 12, "2025-03-13", "b").await;
    // A margin larger than the function's timeout: the guard fires at once, but only
    // after the first user whose claim marked tokens.
    let settings = Settings {
        deadline_margin: Duration::from_secs(10_000),
        ..Settings::default()
    };
    let (r, log) = cron_once_with(&db, settings).await;
    assert_eq!(log.done()["status"], "limit_reached");
    assert_eq!(log.done()["total_user_tokens_marked"], 1);
    assert!(marks(&db, 1).await.0);
    assert!(!marks(&db, 2).await.0);
    let c = r.runs[0]
        .sent
        .iter()
        .find(|s| s.message.receiver == F)
        .unwrap();
    assert_eq!((c.message.delay_s, c.message.envelope.hop), (120, 1));
}

#[tokio::test]
async fn the_hop_limit_ends_the_run_without_a_continuation() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-12", "a").await;
    tok(&db, 2, 12, "2025-03-13", "b").await;
    let (log, _g) = capture();
    let mut r = db
        .runner_with(t(NOW), zero_budget())
        .with_notifier(log_notifier().await);
    let mut env = r.cron_message(F);
    env.hop = 100;
    env.message_key = format!("pat-expiring:{}:100", env.run_id);
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    assert_fields(
        &log.one("continuation not sent: hop limit reached"),
        json!({"hop": 100, "max_hops": 100}),
    );
    assert!(r.runs[0].sent.iter().all(|s| s.message.receiver == D));
    assert_eq!(r.runs[0].outcome, "success");
}
