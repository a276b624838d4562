//! How remove-expired-members walks its work: pages of a thousand continued with the
//! cursor of the last row (and keyset pages within one crowded date), a page run in
//! groups of the size in force, the deadline guard (after the first member, or inside a
//! group) and the hop limit.

use super::*;
use crate::assert::{assert_fields, assert_hop_limit_reached, assert_sent_one};

/// 1,001 expired project members with ids 1001..2001, all expiring 2025-03-01.
async fn thousand_and_one(db: &TestDb) {
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'bulk' || g, 'bulk' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(1001, 2001) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, notification_level, member_namespace_id)
           SELECT g, 30, 200, 'Project', 'ProjectMember', g, '2025-03-01', 3, (SELECT project_namespace_id FROM projects WHERE id = 200) FROM generate_series(1001, 2001) g;",
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
    assert_fields(
        &log.done(),
        json!({
            "status": "limit_reached",
            "updated_rows": 1000,
            "next_cursor": {"expires_at": "2025-03-01", "id": 1002}
        }),
    );
    let c = assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": F.name(),
            "delay_s": 10,
            "hop": 1,
            "payload": {"cursor": {"expires_at": "2025-03-01", "id": 1002}},
            "run_id": cron.run_id,
            "message_key": format!("remove-expired-members:{}:1", cron.run_id)
        }),
    );
    // Invocation 2, given that message.
    let (log2, _g) = capture();
    let mut r2 = db.runner(t("2025-03-10T00:10:10Z"));
    r2.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    assert!(!db.exists("members WHERE id = 1001").await);
    assert_fields(
        &log2.done(),
        json!({"status": "completed", "updated_rows": 1}),
    );
    assert!(r2.runs[0].sent.is_empty());
    // A replayed hop-1 continuation after the run finished changes nothing.
    let (log3, _g3) = capture();
    let before = db.count("members").await;
    let mut r3 = db.runner(t("2025-03-10T00:20:00Z"));
    r3.invoke(F, &c.envelope.to_body(), 1).await.unwrap();
    assert_fields(
        &log3.done(),
        json!({"status": "completed", "updated_rows": 0}),
    );
    assert!(r3.runs[0].sent.is_empty());
    assert_eq!(db.count("members").await, before);
}

/// Many memberships on one date: the page after a cursor inside that date is read by
/// the primary key (`PAGE_SAME_DATE`) and is exactly the keyset page (`PAGE_AFTER`);
/// when the window no longer holds a whole page, the keyset read takes over, and every
/// page of the run keeps the order `expires_at DESC, id DESC`.
#[tokio::test]
async fn pages_within_one_crowded_date_are_the_keyset_pages() {
    use shared::batches::remove_expired_members::MemberCursor;
    use shared::batches::remove_expired_members::{read_page, sql, BATCH_SIZE};
    let db = fixture().await;
    // 2,600 members expired on 2025-03-01 (ids 1000..3599), 5 on 2025-02-01 and one
    // live member between them in id order.
    db.exec(
        "INSERT INTO members (id, access_level, source_id, source_type, type, expires_at, notification_level, member_namespace_id)
           SELECT i, 30, 200, 'Project', 'ProjectMember',
                  CASE WHEN i = 2000 THEN NULL WHEN i < 1005 THEN date '2025-02-01'
                       ELSE date '2025-03-01' END
          , 3, (SELECT project_namespace_id FROM projects WHERE id = 200) FROM generate_series(1000, 3599) i",
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
        "INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, notification_level, member_namespace_id)
           SELECT i, 30, 200, 'Project', 'ProjectMember', 10, date '2025-03-01'
          , 3, (SELECT project_namespace_id FROM projects WHERE id = 200) FROM generate_series(1000, 1009) i",
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
    assert_fields(
        &log.done(),
        json!({"status": "limit_reached", "next_cursor": {"expires_at": "2025-03-09", "id": 50}}),
    );
    let c: &OutMessage = &r.runs[0].sent[0].message;
    assert_eq!((c.delay_s, c.envelope.hop), (0, 1));
    // Until idle, every member goes, one per invocation.
    r.drain().await.unwrap();
    assert!(!db.exists("members WHERE id = 51").await);
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
    assert_fields(
        &log.done(),
        json!({
            "status": "limit_reached",
            "updated_rows": 2,
            "next_cursor": {"expires_at": "2025-03-09", "id": 31}
        }),
    );
    let c: &OutMessage = &r.runs[0].sent[0].message;
    assert_eq!((c.delay_s, c.envelope.hop), (0, 1));
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
    assert_hop_limit_reached(&log, &r.runs[0], 10_000);
    assert_eq!(
        log.one("continuation not sent: hop limit reached")["level"],
        "error"
    );
}
