//! adjourned-group-deletion, the cron of B51 (behaviour §B51.3): a group is due exactly
//! the period after it was marked (the period from the highest settings row); its
//! destroy message is sent at once and the next ones 20 s apart, past 900 s as one-time
//! schedules; a missing scheduling user is skipped, a failing restore or send is logged
//! per group; the deadline guard continues with the cursor and the run-wide index; a
//! run finding its overlap lock held does nothing.

use super::*;
use crate::assert::{
    assert_fields, assert_message, assert_sent_one, assert_skipped_already_running,
};
use chrono::NaiveDate;
use shared::gitlab::group_deletion::{cutoff, EARLIEST_CUTOFF};

#[tokio::test]
async fn a_group_marked_exactly_period_days_ago_is_due_and_its_destroy_is_sent_at_once() {
    let db = fixture().await;
    let (r, log) = cron_once(&db).await;
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": GD.name(),
            "delay_s": 0,
            "hop": 0,
            "type": "group-destroy.run",
            "message_key": "group-destroy:100:2025-03-03:11",
            "payload": {"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"}
        }),
    );
    assert_fields(
        &log.one("Group deletion scheduled"),
        json!({"level": "info", "group_id": 100, "user_id": 11, "delay_s": 0}),
    );
    assert_fields(
        &log.done(),
        json!({
            "status": "completed",
            "groups_due": 1,
            "destroy_enqueued": 1,
            "restored": 0,
            "skipped_groups": 0,
            "failed_groups": 0,
            "cutoff": "2025-03-03"
        }),
    );
    // The cron itself deletes nothing.
    assert!(db.exists("namespaces WHERE id = 100").await);
}

#[tokio::test]
async fn a_group_marked_one_day_after_the_cutoff_is_not_selected() {
    let db = fixture().await;
    db.exec("UPDATE group_deletion_schedules SET marked_for_deletion_on = '2025-03-04'")
        .await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    assert_fields(&log.done(), json!({"groups_due": 0, "status": "completed"}));
}

#[tokio::test]
async fn the_period_comes_from_the_highest_settings_row() {
    let db = fixture().await;
    period(&db, 2, 30).await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    assert_fields(
        &log.done(),
        json!({"cutoff": "2025-02-08", "groups_due": 0}),
    );
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
}

#[tokio::test]
async fn destroy_messages_are_staggered_by_twenty_seconds_in_id_order() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(700, "zeta", None).await;
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50), M::gm(3, 700, 11, 50)])
        .await;
    schedule(&db, 700, 11, "2025-03-03").await;
    schedule(&db, 400, 11, "2025-03-03").await;
    let (r, log) = cron_once(&db).await;
    let got: Vec<(u32, String)> = r.runs[0]
        .sent
        .iter()
        .map(|s| (s.message.delay_s, s.message.envelope.message_key.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "group-destroy:100:2025-03-03:11".to_string()),
            (20, "group-destroy:400:2025-03-03:11".to_string()),
            (40, "group-destroy:700:2025-03-03:11".to_string()),
        ]
    );
    assert_eq!(log.done()["destroy_enqueued"], 3);
}

/// `n` top-level due groups with ids `first..first+n`, scheduled by `user`.
async fn due_groups(db: &TestDb, first: i64, n: i64, user: i64) {
    let last = first + n - 1;
    db.exec(&format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, created_at, updated_at, organization_id)
           SELECT g, 'g' || g || '-deletion_scheduled-' || g, 'g' || g || '-deletion_scheduled-' || g,
                  'Group', ARRAY[g]::bigint[], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series({first}, {last}) g;
         INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
           SELECT id, 'Namespace', path, name, id, '2024-01-01', '2024-01-01'
           FROM namespaces WHERE id BETWEEN {first} AND {last};
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
           SELECT g, {user}, '2025-03-01' FROM generate_series({first}, {last}) g;"
    ))
    .await;
}

#[tokio::test]
async fn delays_over_900_seconds_become_one_time_schedules_due_at_now_plus_the_delay() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::human(11).admin()]).await;
    period(&db, 1, 7).await;
    due_groups(&db, 1000, 50, 11).await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 50);
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.message.delay_s, 20 * i as u32);
        let key = format!("group-destroy:{}:2025-03-01:11", 1000 + i);
        assert_eq!(s.message.envelope.message_key, key);
        if i <= 45 {
            assert_eq!(s.schedule_name, None, "index {i} goes to SQS");
        } else {
            assert_eq!(
                s.schedule_name.as_deref(),
                Some(schedule_name(&key).as_str())
            );
        }
    }
    assert_eq!(sent[45].message.delay_s, 900);
    assert_eq!(sent[46].message.delay_s, 920);
    let name = sent[46].schedule_name.clone().unwrap();
    assert!(name.starts_with("hk-") && name.len() == 43);
    // In local mode the schedule is due at now + 920 s.
    let pending: Vec<_> = std::iter::from_fn(|| r.queue().pop()).collect();
    assert_eq!(pending[46].due, t("2025-03-10T02:15:20Z"));
    assert_eq!(pending[45].due, t("2025-03-10T02:15:00Z"));
    assert_eq!(log.done()["destroy_enqueued"], 50);
}

#[tokio::test]
async fn a_missing_scheduling_user_is_skipped_with_a_warning() {
    let db = fixture().await;
    Fx(&db).group(400, "beta", None).await;
    Fx(&db).members(&[M::gm(2, 400, 11, 50)]).await;
    Fx(&db).users(&[U::human(12)]).await;
    schedule(&db, 400, 12, "2025-03-03").await;
    // Only a database without the FK keeps a schedule whose user is gone.
    db.exec(
        "SET session_replication_role = replica; DELETE FROM users WHERE id = 12;
         SET session_replication_role = origin;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_fields(
        &log.one("Adjourned group deletion skipped: scheduling user not found"),
        json!({"level": "warn", "group_id": 400, "user_id": 12}),
    );
    // G100 still gets its destroy at index 0; the skipped group used index 1.
    assert_eq!(r.runs[0].sent.len(), 1);
    assert_fields(&log.done(), json!({"groups_due": 2, "skipped_groups": 1}));
}

#[tokio::test]
async fn a_failing_restore_is_logged_and_the_next_group_is_still_handled() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50)]).await;
    schedule(&db, 400, 11, "2025-03-03").await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE UPDATE ON namespaces FOR EACH ROW WHEN (OLD.id = 100) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_fields(
        &log.one("Adjourned group deletion failed for group"),
        json!({"level": "error", "group_id": 100, "error": "boom", "error_class": "db"}),
    );
    // The restore rolled back as a whole.
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
    assert_eq!(
        route(&db, "Namespace", 101).await.0,
        "acme-deletion_scheduled-100/web"
    );
    // G400 is index 1: its destroy is delayed 20 s.
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (
            sent[0].message.delay_s,
            sent[0].message.envelope.message_key.as_str()
        ),
        (20, "group-destroy:400:2025-03-03:11")
    );
    assert_fields(
        &log.done(),
        json!({"failed_groups": 1, "destroy_enqueued": 1}),
    );
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_failed_send_is_logged_per_group_and_the_run_goes_on() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50)]).await;
    schedule(&db, 400, 11, "2025-03-03").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "group-destroy:100:2025-03-03:11");
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    let e = log.one("Adjourned group deletion failed for group");
    assert_eq!(e["error_class"], "transport");
    assert_eq!(r.runs[0].sent.len(), 1);
    assert_eq!(r.runs[0].sent[0].message.delay_s, 20);
    assert_eq!(log.done()["failed_groups"], 1);
}

#[tokio::test]
async fn the_deadline_guard_continues_with_the_cursor_and_the_run_wide_index() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.group(700, "zeta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50), M::gm(3, 700, 11, 50)])
        .await;
    schedule(&db, 400, 11, "2025-03-03").await;
    schedule(&db, 700, 11, "2025-03-03").await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let cron = r.cron_message(CRON);
    r.invoke(CRON, &cron.to_body(), 1).await.unwrap();
    // Progress rule: the first group is handled even though the guard fires.
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "group-destroy:100:2025-03-03:11"
    );
    let c = &sent[1].message;
    assert_message(
        c,
        json!({
            "receiver": CRON.name(),
            "delay_s": 0,
            "hop": 1,
            "payload": {"cursor": {"group_id": 100, "index": 1}},
            "message_key": format!("adjourned-group-deletion:{}:1", cron.run_id)
        }),
    );
    assert_fields(
        &log.done(),
        json!({"status": "limit_reached", "next_cursor": {"group_id": 100, "index": 1}}),
    );
    // Invocation 2 carries the index on: G400 gets 20 s.
    let body = c.envelope.to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    let sent = &r.runs[1].sent;
    assert_eq!(
        (
            sent[0].message.delay_s,
            sent[0].message.envelope.message_key.as_str()
        ),
        (20, "group-destroy:400:2025-03-03:11")
    );
    assert_eq!(sent[0].message.envelope.run_id, cron.run_id);
    assert_eq!(
        sent[1].message.envelope.payload,
        json!({"cursor": {"group_id": 400, "index": 2}})
    );
}

#[tokio::test]
async fn a_cron_run_finding_its_overlap_lock_held_does_nothing() {
    let db = fixture().await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:adjourned-group-deletion");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    assert_skipped_already_running(&log, &r.runs[0]);
}

#[test]
fn the_cutoff_is_today_minus_the_period() {
    let today: NaiveDate = "2025-03-10".parse().unwrap();
    assert_eq!(cutoff(today, 7).to_string(), "2025-03-03");
    assert_eq!(cutoff(today, 30).to_string(), "2025-02-08");
    assert_eq!(cutoff(today, i32::MAX), EARLIEST_CUTOFF);
    assert_eq!(cutoff(today, 800_000), EARLIEST_CUTOFF);
    assert_eq!(cutoff(today, 0), cutoff(today, 1));
    assert_eq!(cutoff(today, i32::MIN), cutoff(today, 1));
}
