//! pat-expiring for users' personal access tokens (behaviour §B28.12): one email per
//! user naming the tokens by expiry (the first hundred of them), each token in exactly
//! one interval and marked; excluded tokens never change; a blocked user's tokens are
//! marked without an email; users paged inclusively on one date, emails sent in calls
//! of ten; a user whose email cannot be sent stays unmarked.

use super::*;
use crate::assert::assert_fields;
use shared::gitlab::notifications::CAN_RECEIVE_NOTIFICATIONS;
use shared::gitlab::user_type;

#[tokio::test]
async fn a_human_gets_one_seven_day_email_naming_tokens_by_expiry_and_both_are_marked() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 10, "2025-03-12", "deploy").await;
    let (r, log) = cron_once(&db).await;
    let cron_run_id = r.runs[0].message_key.clone().unwrap();
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    let m = mails[0];
    assert_eq!(m.message_key, "pat-expiring:seven_days:user:10:2025-03-10");
    assert_eq!(
        m.payload,
        json!({"template": "access_token_about_to_expire", "recipient_user_id": 10,
               "days_to_expire": 7, "token_names": ["deploy", "ci"]})
    );
    assert_eq!(m.hop, 0);
    assert!(cron_run_id.starts_with("pat-expiring:cron:2025-03-10T01:00:00Z"));
    assert_eq!(r.runs[0].sent[0].message.receiver, D);
    assert_eq!(r.runs[0].sent[0].message.delay_s, 0);
    for id in [1, 2] {
        assert_eq!(marks(&db, id).await, (true, false, false, true), "T{id}");
    }
    // updated_at is not changed, as in GitLab.
    assert_eq!(
        db.count("personal_access_tokens WHERE updated_at = '2024-01-01'")
            .await,
        2
    );
    assert_fields(
        &log.one("Notifying User about expiring tokens"),
        json!({"user_id": 10, "token_count": 2, "interval": "seven_days"}),
    );
    assert_eq!(
        done_totals(&log),
        json!({"status": "completed", "bots": 0, "no_membership": 0, "bot_failures": 0,
               "user_tokens": 2, "user_emails": 1, "suppressed": 0, "user_failures": 0})
    );
}

#[tokio::test]
async fn interval_boundaries_put_each_token_in_exactly_one_interval() {
    let db = fixture().await;
    // Days -1, 7, 8, 30, 31, 60, 61 from today.
    for (id, exp) in [
        (1, "2025-03-09"),
        (2, "2025-03-17"),
        (3, "2025-03-18"),
        (4, "2025-04-09"),
        (5, "2025-04-10"),
        (6, "2025-05-09"),
        (7, "2025-05-10"),
    ] {
        tok(&db, id, 12, exp, &format!("d{id}")).await;
    }
    let before1 = row_text(&db, 1).await;
    let before7 = row_text(&db, 7).await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    let got: Vec<(String, Value)> = mails
        .iter()
        .map(|e| (e.message_key.clone(), e.payload.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "pat-expiring:seven_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 7, "token_names": ["d2"]})
            ),
            (
                "pat-expiring:thirty_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 30, "token_names": ["d3", "d4"]})
            ),
            (
                "pat-expiring:sixty_days:user:12:2025-03-10".into(),
                json!({"template": "access_token_about_to_expire", "recipient_user_id": 12,
                       "days_to_expire": 60, "token_names": ["d5", "d6"]})
            ),
        ]
    );
    assert_eq!(marks(&db, 2).await, (true, false, false, true));
    // The thirty- and sixty-day notices leave the legacy flag alone.
    assert_eq!(marks(&db, 3).await, (false, true, false, false));
    assert_eq!(marks(&db, 4).await, (false, true, false, false));
    assert_eq!(marks(&db, 5).await, (false, false, true, false));
    assert_eq!(marks(&db, 6).await, (false, false, true, false));
    assert_eq!(row_text(&db, 1).await, before1);
    assert_eq!(row_text(&db, 7).await, before7);
    assert_eq!(log.done()["total_user_tokens_marked"], 5);
}

#[tokio::test]
async fn excluded_tokens_never_change_and_get_no_email() {
    let db = fixture().await;
    tok(&db, 1, 12, "2025-04-01", "legacy-flag").await;
    tok(&db, 2, 12, "2025-03-15", "revoked").await;
    tok(&db, 3, 12, "2025-03-15", "revoked-null").await;
    tok(&db, 4, 12, "2025-03-15", "impersonation").await;
    tok(&db, 5, 12, "2025-04-01", "thirty-sent").await;
    tok(&db, 6, 12, "2025-03-15", "legacy-seven").await;
    db.exec(
        "UPDATE personal_access_tokens SET expire_notification_delivered = true WHERE id IN (1, 6);
         UPDATE personal_access_tokens SET revoked = true WHERE id = 2;
         UPDATE personal_access_tokens SET revoked = NULL WHERE id = 3;
         UPDATE personal_access_tokens SET impersonation = true WHERE id = 4;
         UPDATE personal_access_tokens SET thirty_days_notification_sent_at = '2025-03-01T01:00:00Z' WHERE id = 5;",
    )
    .await;
    let mut before = Vec::new();
    for id in 1..=6 {
        before.push(row_text(&db, id).await);
    }
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    for id in 1..=6 {
        assert_eq!(row_text(&db, id).await, before[id as usize - 1], "T{id}");
    }
    assert_eq!(done_totals(&log)["user_tokens"], 0);
    assert_eq!(done_totals(&log)["status"], "completed");
}

#[tokio::test]
async fn a_blocked_users_tokens_are_marked_without_an_email() {
    let db = fixture().await;
    tok(&db, 3, 13, "2025-03-15", "T3").await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    assert_fields(
        &log.one("Expiring token notification suppressed: user cannot receive notifications"),
        json!({"user_id": 13, "interval": "seven_days", "level": "info"}),
    );
    assert!(log
        .with_message("Notifying User about expiring tokens")
        .is_empty());
    assert_fields(
        &done_totals(&log),
        json!({"user_tokens": 1, "suppressed": 1, "user_emails": 0}),
    );
}

#[tokio::test]
async fn one_hundred_fifty_users_with_tokens_on_one_date_are_paged_inclusively() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(1000, 1149) g;
         INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, g, 'bulk', '2025-03-14', '2024-01-01', '2024-01-01', 1 FROM generate_series(1000, 1149) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 150);
    let mut users: Vec<i64> = mails
        .iter()
        .map(|e| e.payload["recipient_user_id"].as_i64().unwrap())
        .collect();
    users.sort();
    users.dedup();
    assert_eq!(users, (1000..1150).collect::<Vec<i64>>());
    assert_eq!(
        db.count(&format!(
            "personal_access_tokens WHERE seven_days_notification_sent_at = '{NOW}' AND expire_notification_delivered"
        ))
        .await,
        150
    );
    assert_eq!(log.done()["total_user_tokens_marked"], 150);
    assert_eq!(
        log.with_message("Notifying User about expiring tokens")
            .len(),
        150
    );
}

#[tokio::test]
async fn one_email_carries_the_first_hundred_names_of_a_hundred_twenty_tokens() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, 14, 'tok-' || lpad(g::text, 3, '0'), '2025-03-16', '2024-01-01', '2024-01-01', 1
           FROM generate_series(1, 120) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let mails = emails(&r.runs[0].sent);
    assert_eq!(mails.len(), 1);
    let names: Vec<String> = mails[0].payload["token_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        names,
        (1..=100).map(|i| format!("tok-{i:03}")).collect::<Vec<_>>()
    );
    assert_eq!(
        db.count("personal_access_tokens WHERE user_id = 14 AND seven_days_notification_sent_at IS NOT NULL")
            .await,
        120
    );
    assert_eq!(
        log.one("Notifying User about expiring tokens")["token_count"],
        120
    );
    assert_eq!(log.done()["total_user_tokens_marked"], 120);
}

#[tokio::test]
async fn a_page_of_users_sends_its_emails_in_calls_of_ten() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'p' || g, 'p' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(1000, 1024) g;
         INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT g, 't' || g, '2025-03-14', '2025-01-01', '2025-01-01', 1 FROM generate_series(1000, 1024) g;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(log.done()["total_user_emails_enqueued"], 25);
    assert_eq!(emails(&r.runs[0].sent).len(), 25);
    assert_eq!(r.queue().send_calls(), 3);
    assert_eq!(
        log.with_message("Notifying User about expiring tokens")
            .len(),
        25
    );
}

#[tokio::test]
async fn a_human_whose_email_cannot_be_sent_stays_unmarked_and_is_excluded_for_the_run() {
    let db = fixture().await;
    tok(&db, 1, 10, "2025-03-17", "ci").await;
    tok(&db, 2, 10, "2025-03-25", "later").await;
    tok(&db, 3, 12, "2025-03-17", "other").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(log_notifier().await);
    r.queue()
        .fail_when(|m| m.envelope.message_key.contains(":user:10:"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(marks(&db, 1).await, (false, false, false, false));
    assert_eq!(marks(&db, 2).await, (false, false, false, false));
    assert_eq!(marks(&db, 3).await, (true, false, false, true));
    let errs =
        log.with_message("Failed to send notification about expiring personal access tokens");
    // Once per interval in which U10 has tokens, never twice in one interval.
    let intervals: Vec<&str> = errs
        .iter()
        .map(|l| l["interval"].as_str().unwrap())
        .collect();
    assert_eq!(intervals, vec!["seven_days", "thirty_days"]);
    assert!(errs
        .iter()
        .all(|l| l["user_id"] == 10 && l["error_class"] == "transport"));
    assert_eq!(log.done()["total_user_failures"], 2);
    // The next run (transport healthy) notifies U10: nothing was lost.
    r.queue().clear_failures();
    let (log2, _g2) = capture();
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(marks(&db, 1).await, (true, false, false, true));
    assert_eq!(log2.done()["total_user_emails_enqueued"], 2);
}

#[test]
fn only_active_humans_and_service_accounts_receive_notifications() {
    // Human (0) and service account (4); never bots, ghosts or placeholders.
    assert!(CAN_RECEIVE_NOTIFICATIONS.contains("u.user_type IN (0, 4)"));
    assert_eq!(user_type::HUMAN, 0);
    assert!(CAN_RECEIVE_NOTIFICATIONS.contains("'active'"));
}

#[test]
fn interval_bounds_are_inclusive_and_adjacent() {
    use chrono::NaiveDate;
    use shared::batches::pat_expiring::Interval;
    let today: NaiveDate = "2025-03-10".parse().unwrap();
    let d = |s: &str| s.parse::<NaiveDate>().unwrap();
    assert_eq!(
        Interval::SevenDays.bounds(today),
        (d("2025-03-10"), d("2025-03-17"))
    );
    assert_eq!(
        Interval::ThirtyDays.bounds(today),
        (d("2025-03-18"), d("2025-04-09"))
    );
    assert_eq!(
        Interval::SixtyDays.bounds(today),
        (d("2025-04-10"), d("2025-05-09"))
    );
    let days: Vec<u32> = Interval::ALL.iter().map(|i| i.days_to_expire()).collect();
    assert_eq!(days, vec![7, 30, 60]);
}
