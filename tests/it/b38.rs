//! B38 remove-expired-members: every acceptance scenario of
//! behaviour §B38.11, plus replay and duplicate delivery.

use hk::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::queue::OutMessage;
use shared::telemetry::{capture, Captured};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";
const F: Function = Function::RemoveExpiredMembers;

/// The common fixture of behaviour §B38.11: G100 "acme"; G101 < G100; P200 in G101 (project
/// namespace 300); U10, U11, U12 (human, active); U20 (bot, active); M1: GM G100 U11 50.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11), U::human(12), U::bot(20)])
        .await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db
}

/// One invocation of the cron message at NOW; returns the runner and the log.
async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    (r, log)
}

#[tokio::test]
async fn a_membership_expiring_today_is_removed_and_tomorrows_is_kept() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-10"),
        M::pm(11, 200, 12, 30).expires("2025-03-11"),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (12, 200, 30)]).await;
    fx.notification(10, "Project", 200).await;
    let (r, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 10").await);
    assert!(db.exists("members WHERE id = 11").await);
    assert_eq!(db.pas().await, vec![(12, 200, 30)]);
    assert_eq!(db.count("notification_settings").await, 0);
    let done = log.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["updated_rows"], 1);
    assert_eq!(done["skipped_rows"], 0);
    assert_eq!(done["failed_rows"], 0);
    assert!(done["next_cursor"].is_null());
    assert!(r.runs[0].sent.is_empty());
    // One EMF line per invocation, for the alarms.
    let emf = log.one("metrics");
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "GitLabHousekeeping"
    );
    assert_eq!(
        emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"],
        json!([["Service", "function"]])
    );
    assert_eq!(emf["Service"], "local");
    assert_eq!(
        (emf["records"].as_f64(), emf["outcome_done"].as_f64()),
        (Some(1.0), Some(1.0))
    );
    assert_eq!(emf["run_started"], 1.0);
    assert_eq!(emf["function"], "remove-expired-members");
    assert_eq!(emf["processed"], 1.0);
    assert_eq!(emf["failed"], 0.0);
    assert_eq!(emf["items"], 1.0);
    assert!(emf["duration_s"].is_f64());
    let names: Vec<_> = emf["_aws"]["CloudWatchMetrics"][0]["Metrics"]
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
            json!("processed"),
            json!("skipped"),
            json!("failed"),
            json!("items"),
            json!("updated_rows"),
            json!("skipped_rows"),
            json!("failed_rows")
        ]
    );
}

#[tokio::test]
async fn inherited_access_survives_when_a_project_membership_expires() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::gm(12, 100, 10, 20),
        M::pm(13, 200, 10, 40).expires("2025-03-01"),
    ])
    .await;
    fx.pas(&[(10, 200, 40)]).await;
    cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 13").await);
    assert_eq!(db.pas().await, vec![(10, 200, 20)]);
    assert!(
        db.scalar::<bool>("SELECT bool_and(is_unique) FROM project_authorizations")
            .await
    );
}

#[tokio::test]
async fn an_expired_invite_is_deleted_and_counted_without_an_error() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(14, 200, 0, 30)
            .invite("x@example.org", "tok")
            .expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 14").await);
    assert_eq!(log.done()["updated_rows"], 1);
    assert!(
        log.lines().iter().all(|l| l["level"] != "error"),
        "{}",
        log.dump()
    );
}

#[tokio::test]
async fn an_expired_access_request_is_deleted_and_counted() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(15, 101, 12, 30)
            .requested("2025-03-01T10:00:00Z")
            .expires("2025-03-05")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 15").await);
    assert_eq!(log.done()["updated_rows"], 1);
}

#[tokio::test]
async fn the_last_owner_of_a_top_level_group_is_kept_and_selected_again_the_next_day() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    let w = log.one("Expired Member ID=1 not removed - last owner of group");
    assert_eq!(w["level"], "warn");
    assert_eq!(w["group_id"], 100);
    assert_eq!(w["member_id"], 1);
    assert_eq!(w["user_id"], 11);
    let done = log.done();
    assert_eq!(done["updated_rows"], 0);
    assert_eq!(done["skipped_rows"], 1);
    // The next day's run selects M1 again.
    let (log2, _g) = capture();
    let mut r = db.runner(t("2025-03-11T00:10:00Z"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    log2.one("Expired Member ID=1 not removed - last owner of group");
}

#[tokio::test]
async fn a_project_bot_owner_does_not_count_as_another_owner() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    Fx(&db).members(&[M::gm(17, 100, 20, 50)]).await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    log.one("Expired Member ID=1 not removed - last owner of group");
}

#[tokio::test]
async fn a_subgroup_owner_with_an_inherited_owner_is_removed() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::gm(16, 101, 12, 50).expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 16").await);
    assert_eq!(log.done()["updated_rows"], 1);
}

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
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 20")
            .await,
        "blocked"
    );
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
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!(m.receiver, Function::DeleteUser);
    assert_eq!(m.delay_s, 30);
    assert_eq!(m.envelope.message_key, "delete-user:20");
    assert_eq!(m.envelope.kind, "delete-user.run");
    assert_eq!(
        m.envelope.payload,
        json!({"user_id": 20, "initiator_user_id": null, "reason": "Membership expired"})
    );
    assert_eq!(log.done()["updated_rows"], 1);
    let p1 = log.one("User scheduled for removal");
    assert_eq!(p1["user_id"], 20);
    assert_eq!(p1["reason"], "Membership expired");
    assert_eq!(p1["tokens_revoked"], 1);
}

/// 1,001 expired project members with ids 1001..2001, all expiring 2025-03-01.
async fn thousand_and_one(db: &TestDb) {
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0 FROM generate_series(1001, 2001) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at)
           SELECT g, 30, 200, 'Project', 'ProjectMember', g, '2025-03-01' FROM generate_series(1001, 2001) g;",
    )
    .await;
}

#[tokio::test]
async fn pages_of_a_thousand_continue_with_the_cursor_of_the_last_row() {
    let db = fixture().await;
    thousand_and_one(&db).await;
    let (log, _g0) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(F);
    r.invoke(F, &cron.to_body(), 1).await.unwrap();
    assert_eq!(
        db.ids("members WHERE id BETWEEN 1001 AND 2001").await,
        vec![1001]
    );
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(done["updated_rows"], 1000);
    assert_eq!(
        done["next_cursor"],
        json!({"expires_at": "2025-03-01", "id": 1002})
    );
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let c = &sent[0].message;
    assert_eq!((c.receiver, c.delay_s, c.envelope.hop), (F, 10, 1));
    assert_eq!(
        c.envelope.payload,
        json!({"cursor": {"expires_at": "2025-03-01", "id": 1002}})
    );
    assert_eq!(c.envelope.run_id, cron.run_id);
    assert_eq!(
        c.envelope.message_key,
        format!("remove-expired-members:{}:1", cron.run_id)
    );
    // Invocation 2, given that message.
    let (log2, _g) = capture();
    let mut r2 = db.runner(t("2025-03-10T00:10:10Z"));
    r2.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    assert!(!db.exists("members WHERE id = 1001").await);
    let done = log2.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["updated_rows"], 1);
    assert!(r2.runs[0].sent.is_empty());
    // A replayed hop-1 continuation after the run finished changes nothing.
    let (log3, _g3) = capture();
    let before = db.count("members").await;
    let mut r3 = db.runner(t("2025-03-10T00:20:00Z"));
    r3.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    let done = log3.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["updated_rows"], 0);
    assert!(r3.runs[0].sent.is_empty());
    assert_eq!(db.count("members").await, before);
}

#[tokio::test]
async fn a_membership_extended_after_the_page_read_is_skipped() {
    let db = fixture().await;
    let fx = Fx(&db);
    // M30 (expiring today) comes first in page order; deleting it commits an extension
    // of M19 in the same way another session would, between the page read and M19's
    // own transaction.
    fx.members(&[
        M::pm(19, 200, 10, 30).expires("2025-03-09"),
        M::pm(30, 200, 12, 30).expires("2025-03-10"),
    ])
    .await;
    db.exec(
        "CREATE FUNCTION extend_m19() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN UPDATE members SET expires_at = '2025-04-01' WHERE id = 19; RETURN OLD; END $$;
         CREATE TRIGGER extend_m19 AFTER DELETE ON members FOR EACH ROW WHEN (OLD.id = 30)
           EXECUTE FUNCTION extend_m19();",
    )
    .await;
    let (_, log) = cron_once(&db).await;
    assert!(
        db.exists("members WHERE id = 19 AND expires_at = '2025-04-01'")
            .await
    );
    let l = log.one("Expired Member ID=19 skipped - no longer expired");
    assert_eq!(l["member_id"], 19);
    assert_eq!(l["level"], "info");
    let done = log.done();
    assert_eq!(
        (done["updated_rows"].as_i64(), done["skipped_rows"].as_i64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn an_error_on_one_member_is_logged_and_the_others_are_removed() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(20, 200, 10, 30).expires("2025-03-09"),
            M::pm(21, 200, 12, 30).expires("2025-03-09"),
        ])
        .await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 20) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let e = log.one("Expired Member ID=20 cannot be removed - boom");
    assert_eq!(e["level"], "error");
    assert_eq!(e["member_id"], 20);
    assert_eq!(e["error"], "boom");
    assert_eq!(e["error_class"], "db");
    assert!(db.exists("members WHERE id = 20").await);
    assert!(!db.exists("members WHERE id = 21").await);
    let done = log.done();
    assert_eq!(
        (done["updated_rows"].as_i64(), done["failed_rows"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_run_finding_the_overlap_lock_held_changes_nothing() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:remove-expired-members");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 10").await);
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert_eq!(r.runs[0].outcome, "success");
    // The lock was never ours: after the holder lets go, the next run works.
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    cron_once(&db).await;
    assert!(!db.exists("members WHERE id = 10").await);
}

#[tokio::test]
async fn members_not_expiring_are_never_selected() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(40, 200, 10, 30),
            M::pm(41, 200, 12, 30).expires("2025-03-11"),
        ])
        .await;
    let (_, log) = cron_once(&db).await;
    assert_eq!(db.ids("members").await, vec![1, 40, 41]);
    assert_eq!(log.done()["updated_rows"], 0);
}

#[tokio::test]
async fn a_message_without_message_key_is_malformed_and_changes_nothing() {
    let db = fixture().await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = json!({"version":1,"type":"remove-expired-members.run","run_id":"r","hop":0,
        "issued_at":NOW,"payload":{}})
    .to_string();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
    let m = log.one("malformed message");
    assert_eq!(m["level"], "error");
    assert!(m["error"].as_str().unwrap().contains("message_key"));
    assert!(m["sqs_message_id"].is_string());
    assert!(db.exists("members WHERE id = 10").await);
    assert_eq!(r.exit_code(true), 2);
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
    let deleted = log.one("User deleted");
    assert_eq!(deleted["user_id"], 20);
    assert_eq!(deleted["issues_reassigned"], 1);
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
async fn the_deadline_guard_stops_after_the_first_member_and_continues_at_once() {
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(50, 200, 10, 30).expires("2025-03-09"),
            M::pm(51, 200, 12, 30).expires("2025-03-08"),
        ])
        .await;
    let settings = shared::config::Settings {
        deadline_margin: std::time::Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    // Progress rule: the first member is processed even though the guard has fired.
    assert!(!db.exists("members WHERE id = 50").await);
    assert!(db.exists("members WHERE id = 51").await);
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(
        done["next_cursor"],
        json!({"expires_at": "2025-03-09", "id": 50})
    );
    let c: &OutMessage = &r.runs[0].sent[0].message;
    assert_eq!((c.delay_s, c.envelope.hop), (0, 1));
    // Until idle, every member goes, one per invocation.
    r.drain().await.unwrap();
    assert!(!db.exists("members WHERE id = 51").await);
}

#[tokio::test]
async fn a_run_past_the_hop_limit_logs_and_sends_nothing() {
    let db = fixture().await;
    thousand_and_one(&db).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let mut env = r.cron_message(F);
    env.hop = 10_000;
    env.message_key = "remove-expired-members:r:10000".into();
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(l["level"], "error");
    assert_eq!(l["max_hops"], 10_000);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
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
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 20")
            .await,
        "active"
    );
    assert!(!db.exists("ghost_user_migrations").await);
    assert!(!db.exists("members WHERE id = 10").await);
    let e = log.one("Expired Member ID=18 cannot be removed - transport: injected send failure for delete-user:20");
    assert_eq!(e["error_class"], "transport");
    let done = log.done();
    assert_eq!(
        (done["updated_rows"].as_i64(), done["failed_rows"].as_i64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn dates_compare_in_utc_from_midnight() {
    // 2025-03-10T23:59:59Z is still the 10th: a membership expiring the 11th stays.
    let db = fixture().await;
    Fx(&db)
        .members(&[
            M::pm(60, 200, 10, 30).expires("2025-03-10"),
            M::pm(61, 200, 12, 30).expires("2025-03-11"),
        ])
        .await;
    let mut r = db.runner(t("2025-03-10T23:59:59Z"));
    let body = r.cron_message(F).to_body();
    r.invoke(F, &body, 1).await.unwrap();
    assert_eq!(db.ids("members WHERE id >= 60").await, vec![61]);
}

#[tokio::test]
async fn a_blocked_sole_owners_expired_row_is_kept_and_not_counted_as_updated() {
    let db = fixture().await;
    // U11 (blocked) holds G100's only owner row; with another member in the same group,
    // the page runs as a group, and the owner row must take the per-member path.
    db.exec(
        "UPDATE users SET state = 'blocked' WHERE id = 11;
         UPDATE members SET expires_at = '2025-03-09' WHERE id = 1",
    )
    .await;
    Fx(&db)
        .members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let (_, log) = cron_once(&db).await;
    assert!(db.exists("members WHERE id = 1").await);
    assert!(!db.exists("members WHERE id = 10").await);
    let w = log.one("Expired Member ID=1 not removed - last owner of group");
    assert_eq!(w["user_id"], 11);
    // updated_rows counts removed rows only (docs/gitlab-differences.md).
    let done = log.done();
    assert_eq!(
        (done["updated_rows"].as_i64(), done["skipped_rows"].as_i64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn a_deactivated_owner_whose_only_co_owner_is_deactivated_too_keeps_both_rows() {
    let db = fixture().await;
    db.exec(
        "UPDATE users SET state = 'deactivated' WHERE id IN (11, 12);
         UPDATE members SET expires_at = '2025-03-09' WHERE id = 1",
    )
    .await;
    Fx(&db)
        .members(&[M::gm(16, 100, 12, 50).expires("2025-03-08")])
        .await;
    let (_, log) = cron_once(&db).await;
    // Neither counts, so each is protected: no removal leaves G100 without an owner row.
    assert_eq!(db.ids("members WHERE id IN (1, 16)").await, vec![1, 16]);
    assert_eq!(log.done()["skipped_rows"], 2);
}

#[tokio::test]
async fn an_active_owner_whose_only_co_owner_is_deactivated_is_kept_as_the_last_owner() {
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-09' WHERE id = 1")
        .await;
    Fx(&db)
        .users(&[U::human(13).state(Some("deactivated"))])
        .await;
    Fx(&db).members(&[M::gm(16, 100, 13, 50)]).await;
    let (_, log) = cron_once(&db).await;
    // The deactivated row is not counted: M1 is the last counted owner.
    assert!(db.exists("members WHERE id = 1").await);
    log.one("Expired Member ID=1 not removed - last owner of group");
}

#[tokio::test]
async fn the_deadline_guard_stops_inside_a_group_and_resumes_at_the_first_member_left() {
    // Page order: M31 (plain, 2025-03-09), M1 (owner candidate, kept), M30 (plain).
    // The group's set-based statement deletes M31 and M30; the guard then fires before
    // M1's per-member step, so the group commits and the continuation resumes at M1.
    let db = fixture().await;
    db.exec("UPDATE members SET expires_at = '2025-03-08' WHERE id = 1")
        .await;
    Fx(&db)
        .members(&[
            M::pm(31, 200, 10, 30).expires("2025-03-09"),
            M::pm(30, 200, 12, 30).expires("2025-03-07"),
        ])
        .await;
    // The guard is reached 3 s into the invocation. The group waits for G100's
    // group-owner lock (held here) until then: a wait the test ends only once the
    // deadline has certainly passed.
    let margin = Function::RemoveExpiredMembers.timeout() - std::time::Duration::from_secs(3);
    let settings = shared::config::Settings {
        deadline_margin: margin,
        ..Default::default()
    };
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&shared::locks::lock_key("group-owners:100")],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let body = r.cron_message(F).to_body();
    let release = async {
        db.blocked_on_lock("remove-expired-members").await;
        // The invocation started before it waited: 3 s from now its guard has fired.
        tokio::time::sleep(std::time::Duration::from_secs(3)).await;
        tx.commit().await.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(F, &body, 1), release);
    res.unwrap();
    assert_eq!(db.ids("members WHERE id IN (1, 30, 31)").await, vec![1]);
    assert!(log
        .with_message("Expired Member ID=1 not removed - last owner of group")
        .is_empty());
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(done["updated_rows"], 2);
    assert_eq!(
        done["next_cursor"],
        json!({"expires_at": "2025-03-09", "id": 31})
    );
    let c: &OutMessage = &r.runs[0].sent[0].message;
    assert_eq!((c.delay_s, c.envelope.hop), (0, 1));
}

/// Many memberships on one date: the page after a cursor inside that date is read by
/// the primary key (`PAGE_SAME_DATE`) and is exactly the keyset page (`PAGE_AFTER`);
/// when the window no longer holds a whole page, the keyset read takes over, and every
/// page of the run keeps the order `expires_at DESC, id DESC`.
#[tokio::test]
async fn pages_within_one_crowded_date_are_the_keyset_pages() {
    use shared::batches::remove_expired_members::{read_page, sql, BATCH_SIZE};
    use shared::messages::MemberCursor;
    let db = fixture().await;
    // 2,600 members expired on 2025-03-01 (ids 1000..3599), 5 on 2025-02-01 and one
    // live member between them in id order.
    db.exec(
        "INSERT INTO members (id, access_level, source_id, source_type, type, expires_at)
           SELECT i, 30, 200, 'Project', 'ProjectMember',
                  CASE WHEN i = 2000 THEN NULL WHEN i < 1005 THEN date '2025-02-01'
                       ELSE date '2025-03-01' END
           FROM generate_series(1000, 3599) i",
    )
    .await;
    let c = db.session().await;
    let today = chrono::NaiveDate::from_ymd_opt(2025, 3, 10).unwrap();
    let keyset = |cur: Option<MemberCursor>| {
        let c = &c;
        async move {
            let limit = (BATCH_SIZE + 1) as i64;
            let rows = match cur {
                None => c.query(sql::PAGE, &[&today, &limit]).await.unwrap(),
                Some(k) => c
                    .query(sql::PAGE_AFTER, &[&today, &k.expires_at, &k.id, &limit])
                    .await
                    .unwrap(),
            };
            rows.iter()
                .map(|r| (r.get::<_, chrono::NaiveDate>(0), r.get::<_, i64>(1)))
                .collect::<Vec<_>>()
        }
    };
    let mut cursor: Option<MemberCursor> = None;
    let mut all = Vec::new();
    loop {
        let (page, has_next) = read_page(&c, today, cursor).await.unwrap();
        let mut expected = keyset(cursor).await;
        assert_eq!(has_next, expected.len() > BATCH_SIZE);
        expected.truncate(BATCH_SIZE);
        assert_eq!(page, expected);
        all.extend(page.iter().copied());
        match (has_next, page.last()) {
            (true, Some(&(expires_at, id))) => cursor = Some(MemberCursor { expires_at, id }),
            _ => break,
        }
    }
    assert_eq!(all.len(), 2599);
    assert!(all.windows(2).all(|w| w[0] > w[1]));
    // The second page comes whole from the primary-key window.
    let (d, id) = all[BATCH_SIZE - 1];
    let window = shared::batches::remove_expired_members::SAME_DATE_WINDOW as i64;
    let limit = (BATCH_SIZE + 1) as i64;
    let same = c
        .query(sql::PAGE_SAME_DATE, &[&d, &id, &window, &limit, &today])
        .await
        .unwrap();
    assert_eq!(same.len(), BATCH_SIZE + 1);
    assert_eq!(same[0].get::<_, i64>(1), all[BATCH_SIZE].1);
}

/// A page runs in groups of the configured size, whatever it is (the bench's knob), and
/// the typed result records the longest group and the rows it locked.
#[tokio::test]
async fn a_page_runs_in_groups_of_the_configured_size() {
    use shared::batches::remove_expired_members::ExpiredMembersDone;
    let db = fixture().await;
    db.exec(
        "INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at)
           SELECT i, 30, 200, 'Project', 'ProjectMember', 10, date '2025-03-01'
           FROM generate_series(1000, 1009) i",
    )
    .await;
    let settings = shared::config::Settings {
        member_group_size: 4,
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let body = r.cron_message(F).to_body();
    let (run, _) = r.invoke(F, &body, 1).await.unwrap();
    let done = run.report.as_ref().unwrap();
    let (longest, locked) = done.get::<ExpiredMembersDone>().unwrap().longest_group;
    assert_eq!(log.done()["updated_rows"], 10);
    assert_eq!(db.count("members WHERE id >= 1000").await, 0);
    assert_eq!(locked, 4);
    assert!(longest > std::time::Duration::ZERO);
}
