//! The shared budget of prune-deletions (behaviour §B43.9, scenarios 11 and 12): one
//! schedule batch at least, a batch stopped mid-schedule when the budget runs out, ten
//! schedules per invocation, and the continuation that carries on at once (not past
//! the hop limit).

use super::*;
use crate::assert::{assert_authorizations_of, assert_fields, assert_hop_limit_reached};

// Scenario 11.
#[tokio::test]
async fn a_zero_budget_processes_one_schedule_batch_and_continues_at_once() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    // A wrong row for U12: a refresh of U12 would correct it.
    Fx(&db).pas(&[(12, 201, 10)]).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), zero_budget());
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    // S1's batch in full, as in scenario 2.
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert!(!db.exists("members_deletion_schedules WHERE id = 1").await);
    // S6 untouched: no log, no refresh, M2 stays.
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["schedule_id"], 1);
    assert_eq!(lines[0]["destroyed_count"], 4);
    assert!(log.lines().iter().all(|l| l["schedule_id"] != 6));
    assert!(db.exists("members WHERE id = 2").await);
    assert!(db.exists("members_deletion_schedules WHERE id = 6").await);
    assert!(db.pas().await.contains(&(12, 201, 10)));
    assert_fields(
        &log.done(),
        json!({"status": "more_work", "schedules_processed": 1}),
    );
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // The continuation processes S6: M2 and S6 go, nothing more is sent.
    log.clear();
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].hop, Some(1));
    assert!(!db.exists("members WHERE id = 2").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(!db.pas().await.iter().any(|p| p.0 == 12));
    assert_fields(
        &log.one(PROCESSED),
        json!({"schedule_id": 6, "destroyed_count": 1, "outcome": "completed"}),
    );
    assert_eq!(log.done()["status"], "completed");
    assert!(r.runs[1].sent.is_empty());
}

#[tokio::test]
async fn a_budget_exhausted_mid_schedule_stops_the_batch_and_the_next_message_continues() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    Fx(&db)
        .members(&[M::pm(50, 200, 12, 30), M::pm(51, 201, 12, 30)])
        .await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    // Deleting M2, S6's first membership, outlasts the 2 s budget.
    db.exec(
        "CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN PERFORM pg_sleep(2.2); RETURN OLD; END $$;
         CREATE TRIGGER slow BEFORE DELETE ON members FOR EACH ROW WHEN (OLD.id = 2)
           EXECUTE FUNCTION slow();",
    )
    .await;
    let settings = Settings {
        prune_deletions_budget: Duration::from_secs(2),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    // S1 complete; S6 stopped after M2 and kept, with M50 and M51 in place.
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_eq!(db.ids("members WHERE user_id = 12").await, vec![50, 51]);
    assert_eq!(db.ids("members_deletion_schedules").await, vec![6]);
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 2);
    assert_eq!(
        (
            &lines[1]["schedule_id"],
            &lines[1]["destroyed_count"],
            &lines[1]["outcome"]
        ),
        (&json!(6), &json!(1), &json!("partial"))
    );
    // The batch's refresh ran: U12 keeps only what M50 and M51 grant.
    assert_authorizations_of(&db, 12, &[(12, 200, 30), (12, 201, 30)]).await;
    assert_fields(
        &log.done(),
        json!({"status": "more_work", "schedules_processed": 2, "destroyed_count_total": 5}),
    );
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    // The next message continues S6 where it stopped.
    log.clear();
    r.drain().await.unwrap();
    assert!(!db.exists("members WHERE user_id = 12").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert_fields(
        &log.one(PROCESSED),
        json!({"schedule_id": 6, "destroyed_count": 2, "outcome": "completed"}),
    );
}

// Scenario 12.
#[tokio::test]
async fn twelve_schedules_take_two_invocations() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'u' || g, 'u' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(1001, 1012) g;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, notification_level, member_namespace_id)
           SELECT g, 30, 200, 'Project', 'ProjectMember', g, 3, (SELECT project_namespace_id FROM projects WHERE id = 200) FROM generate_series(1001, 1012) g;
         INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
           SELECT g - 1000, 100, g, 11, '2025-03-09', '2025-03-09' FROM generate_series(1001, 1012) g;",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(F, &message("run-1").to_body(), 1).await.unwrap();
    let first: Vec<Value> = log
        .with_message(PROCESSED)
        .iter()
        .map(|l| l["schedule_id"].clone())
        .collect();
    assert_eq!(first, (1..=10).map(|i| json!(i)).collect::<Vec<_>>());
    assert_eq!(db.ids("members_deletion_schedules").await, vec![11, 12]);
    assert_eq!(log.done()["schedules_processed"], 10);
    assert_continuation(&r.runs[0].sent, "run-1", 1);
    log.clear();
    r.drain().await.unwrap();
    let second: Vec<Value> = log
        .with_message(PROCESSED)
        .iter()
        .map(|l| l["schedule_id"].clone())
        .collect();
    assert_eq!(second, vec![json!(11), json!(12)]);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(!db.exists("members WHERE id > 1000").await);
    assert!(r.runs[1].sent.is_empty());
}

#[tokio::test]
async fn a_continuation_past_the_hop_limit_is_not_sent() {
    let db = fixture().await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 100, 10, 11).await;
    schedule(&db, 6, 100, 12, 1).await;
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), zero_budget());
    let mut env = message("run-1");
    env.hop = 10_000;
    env.message_key = "prune-deletions:run-1:10000".into();
    r.invoke(F, &env.to_body(), 1).await.unwrap();
    assert_hop_limit_reached(&log, &r.runs[0], 10_000);
}
