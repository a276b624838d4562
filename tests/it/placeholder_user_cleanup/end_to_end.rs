//! placeholder-user-cleanup end to end: a run until idle (the deletable placeholder
//! goes through delete-placeholder-user and delete-user, the referenced one stays), the
//! sample events through the Lambda glue, and the demo data.

use super::*;
use crate::assert::assert_fields;
use integration_tests::environment;

#[tokio::test]
async fn until_idle_the_deletable_placeholder_goes_and_the_referenced_one_stays() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[
        U::ghost(5),
        U::placeholder(50),
        U::placeholder(51),
        U::human(52),
    ])
    .await;
    fx.contribution("notes", 1, 200, 51).await;
    pd(&db, 1, 50, None, 0, None).await;
    pd(&db, 2, 51, None, 0, None).await;
    pd(&db, 3, 52, None, 0, None).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert!(!db.exists("users WHERE id = 50").await);
    assert_eq!(db.ids("import_placeholder_user_details").await, vec![2, 3]);
    assert_eq!(detail(&db, 2).await.0, 1);
    assert_eq!(detail(&db, 3).await.0, 1);
    assert!(db.exists("users WHERE id = 51 AND state = 'active'").await);
    assert!(db.exists("users WHERE id = 52 AND state = 'active'").await);
    let order: Vec<(Function, DateTime<Utc>)> =
        r.runs.iter().map(|x| (x.function, x.now)).collect();
    assert_eq!(
        order,
        vec![
            (F, t(NOW)),
            (CHILD, t(NOW)),
            (CHILD, t("2025-03-10T00:00:01Z")),
            (CHILD, t("2025-03-10T00:00:02Z")),
            (Function::DeleteUser, t("2025-03-10T00:00:30Z")),
        ]
    );
    let outcomes: Vec<Value> = log
        .with_message("done")
        .iter()
        .filter(|d| d["function"] == "delete-placeholder-user")
        .map(|d| d["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        vec![
            json!("scheduled"),
            json!("referenced"),
            json!("not_placeholder")
        ]
    );
    assert_eq!(r.exit_code(false), 0);
}

fn event(path: &str) -> aws_lambda_events::event::sqs::SqsEvent {
    let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap()
}

fn deps(db: &TestDb, function: Function, queue: Arc<dyn Queue>) -> Environment {
    environment(function, &db.url, t(NOW)).queue(queue).build()
}

#[tokio::test]
async fn the_sample_events_run_through_the_lambda_glue() {
    let db = deletable().await;
    let q = LocalQueue::new(t(NOW));
    let resp = handle_event(
        &deps(&db, F, Arc::new(q.clone())),
        LambdaEvent::new(
            event("events/placeholder-user-cleanup.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert_eq!(detail(&db, 1).await.0, 1);
    let sent = q.take_sent();
    assert_eq!(
        sent[0].message.envelope.message_key,
        "delete-placeholder-user:50:1"
    );
    assert_eq!(
        sent[0].message.envelope.run_id,
        "5b1d7a4e-2f0c-4d8e-9a61-0c3e8f2b7d70"
    );
    let resp = handle_event(
        &deps(&db, CHILD, Arc::new(q.clone())),
        LambdaEvent::new(
            event("events/delete-placeholder-user.json"),
            Context::default(),
        ),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty());
    assert!(db.exists("users WHERE id = 50 AND state = 'blocked'").await);
    assert_eq!(q.sent()[0].message.envelope.message_key, "delete-user:50");
}

#[tokio::test]
async fn the_demo_data_deletes_the_two_deletable_placeholders_and_keeps_the_rest() {
    let db = TestDb::new().await;
    db.exec("TRUNCATE users CASCADE").await;
    let mut c = db.connector().connect("tests").await.unwrap();
    lab::demo::seed(&mut c, integration_tests::d("2026-03-01"))
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t("2026-03-01T00:00:00Z"));
    let body = r.cron_message(F).to_body();
    r.run_until_idle(F, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    assert_fields(
        &log.with_message("done")[0],
        json!({"enqueued_count": 4, "max_attempts_reached_count": 1}),
    );
    assert_eq!(
        log.one(FINAL_ATTEMPT)["placeholder_user_id"],
        5003,
        "{}",
        log.dump()
    );
    assert_eq!(log.one(REFERENCED)["placeholder_user_id"], 5002);
    assert_eq!(
        db.ids("users WHERE id BETWEEN 5000 AND 5999").await,
        vec![5002, 5004, 5005, 5006, 5007]
    );
    assert!(!db.exists("members WHERE user_id = 5001").await);
    assert!(
        db.exists("import_source_users WHERE id = 5001 AND placeholder_user_id IS NULL")
            .await
    );
    assert_eq!(
        db.ids("import_placeholder_user_details").await,
        vec![5002, 5004, 5005, 5006, 5007]
    );
}
