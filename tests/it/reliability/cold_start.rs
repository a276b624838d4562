//! The cold-start schema check (issue 15): a function started against a schema that
//! lacks a column of the statement catalogue logs one clear line, emits
//! `schema_incompatible`, fails the invocation as a whole (no per-record failure, so
//! nothing walks to the DLQ one by one) and processes nothing; once the schema is
//! fixed, the next invocation of the same environment processes the batch. Only the
//! statements the function can run are checked (issue 52). How a failed PREPARE is
//! classed and the object its error names.

use integration_tests::environment;
use std::sync::Arc;

use shared::preflight::{object_of, Problem};

use aws_lambda_events::event::sqs::SqsEvent;
use engine::local_queue::LocalQueue;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use shared::db::Session;
use shared::handlers::Dispatch;
use shared::lambda::{handle_event_checked, Environment, InvokeError, SchemaGate};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

fn event() -> SqsEvent {
    let p = format!(
        "{}/../events/remove-expired-members.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn deps(db: &TestDb, queue: Arc<LocalQueue>) -> Environment {
    environment(Function::RemoveExpiredMembers, &db.url, t(NOW))
        .queue(queue)
        .build()
}

/// One expired membership, on a schema without `members.requested_at`: a column this
/// function's statements use (its member lock and delete).
async fn expired_member_without_requested_at() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    db.exec("ALTER TABLE members DROP COLUMN requested_at")
        .await;
    db
}

/// The column back: the same environment's next invocation is served and processes
/// the expired membership.
async fn fixed_then_processed(db: &TestDb, deps: &Environment, gate: &SchemaGate) {
    db.exec("ALTER TABLE members ADD COLUMN requested_at timestamp without time zone")
        .await;
    let resp = handle_event_checked(
        &Dispatch::new(),
        deps,
        gate,
        LambdaEvent::new(event(), Context::default()),
    )
    .await
    .expect("a compatible schema is served");
    assert!(resp.batch_item_failures.is_empty());
    assert!(
        !db.exists("members WHERE id = 10").await,
        "processed once fixed"
    );
}

#[tokio::test]
async fn an_incompatible_schema_is_refused_with_one_line_and_nothing_is_processed() {
    let db = expired_member_without_requested_at().await;
    let q = Arc::new(LocalQueue::new(t(NOW)));
    let deps = deps(&db, q.clone());
    let gate = SchemaGate::new();
    let (log, _g) = capture();
    let r = handle_event_checked(
        &Dispatch::new(),
        &deps,
        &gate,
        LambdaEvent::new(event(), Context::default()),
    )
    .await;
    let err = r.expect_err("the invocation fails as a whole");
    assert!(
        matches!(&err, InvokeError::SchemaIncompatible(s)
            if s.contains("batches::remove_expired_members::LOCK_AND_DELETE_PLAIN")
                && s.contains("requested_at")),
        "{err}"
    );
    let lines = log.with_message(
        "schema incompatible: catalogue statements do not prepare on this database; \
         processing nothing, the messages stay on the queue (run `hk check`)",
    );
    assert_eq!(lines.len(), 1, "{}", log.dump());
    assert_eq!(lines[0]["level"], "error", "{}", log.dump());
    assert!(
        lines[0]["statements"]
            .as_str()
            .unwrap()
            .contains("requested_at"),
        "{}",
        log.dump()
    );
    assert!(
        log.dump().contains("\"schema_incompatible\""),
        "{}",
        log.dump()
    );
    assert!(
        db.exists("members WHERE id = 10").await,
        "nothing processed"
    );
    assert_eq!(q.pending_len(), 0, "nothing sent");

    // Fixed: the same environment processes the next invocation.
    fixed_then_processed(&db, &deps, &gate).await;
}

/// A function checks the statements it can run, not the whole catalogue (issue 52): a
/// column only another function's statements use (B28's) does not stop it.
#[tokio::test]
async fn a_column_only_another_function_uses_does_not_stop_this_one() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    db.exec("ALTER TABLE personal_access_tokens DROP COLUMN sixty_days_notification_sent_at")
        .await;
    let q = Arc::new(LocalQueue::new(t(NOW)));
    let resp = handle_event_checked(
        &Dispatch::new(),
        &deps(&db, q),
        &SchemaGate::new(),
        LambdaEvent::new(event(), Context::default()),
    )
    .await
    .expect("remove-expired-members runs no B28 statement");
    assert!(resp.batch_item_failures.is_empty());
    assert!(!db.exists("members WHERE id = 10").await, "processed");
    let client = db.session().await;
    let p = shared::preflight::prepare_function(&client, Function::PatExpiring)
        .await
        .unwrap();
    assert!(
        p.failed
            .iter()
            .any(|f| f.module == "batches::pat_expiring" && f.name == "HUMAN_PAGE_SIXTY_DAYS"),
        "pat-expiring's own check still finds it: {:?}",
        p.failed
    );
}

/// A lock another session holds on a table of the catalogue (ACCESS EXCLUSIVE in an
/// open transaction: a migration) is a busy database, not an incompatible schema: no
/// `schema_incompatible`, no failed invocation; every record is a retryable item
/// failure, untouched; once the lock is released the same environment processes them.
#[tokio::test]
async fn a_lock_held_elsewhere_is_busy_and_the_records_are_retried() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let other = db.session().await;
    other
        .batch_execute("BEGIN; LOCK TABLE members IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let q = Arc::new(LocalQueue::new(t(NOW)));
    let mut deps = deps(&db, q.clone());
    deps.session = Arc::new(Session::new(
        db.connector().with_lock_timeout_ms(200),
        deps.function.name(),
    ));
    let gate = SchemaGate::new();
    let (log, _g) = capture();
    let ev = event();
    let ids: Vec<String> = ev
        .records
        .iter()
        .filter_map(|r| r.message_id.clone())
        .collect();
    assert!(!ids.is_empty());
    let resp = handle_event_checked(
        &Dispatch::new(),
        &deps,
        &gate,
        LambdaEvent::new(ev, Context::default()),
    )
    .await
    .expect("busy is not a failed invocation");
    let failed: Vec<String> = resp
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(failed, ids, "every record retried");
    assert!(
        !log.dump().contains("schema_incompatible") && !log.dump().contains("schema incompatible"),
        "{}",
        log.dump()
    );
    let lines = log.with_message(
        "database busy: a catalogue statement waited too long for a lock held by \
         another session; the records are retried, the schema check runs again",
    );
    assert_eq!(lines.len(), 1, "{}", log.dump());
    assert_eq!(lines[0]["level"], "warn", "{}", log.dump());
    other.batch_execute("ROLLBACK").await.unwrap();
    assert!(
        db.exists("members WHERE id = 10").await,
        "nothing processed"
    );

    let resp = handle_event_checked(
        &Dispatch::new(),
        &deps,
        &gate,
        LambdaEvent::new(event(), Context::default()),
    )
    .await
    .expect("served once the lock is released");
    assert!(resp.batch_item_failures.is_empty());
    assert!(
        !db.exists("members WHERE id = 10").await,
        "processed once released"
    );
}

#[test]
fn a_lock_or_statement_timeout_is_busy_and_permission_denied_a_grant() {
    assert_eq!(Problem::of_sqlstate("55P03"), Problem::Busy);
    assert_eq!(Problem::of_sqlstate("57014"), Problem::Busy);
    assert_eq!(Problem::of_sqlstate("42501"), Problem::Permission);
    assert_eq!(Problem::of_sqlstate("42703"), Problem::Schema);
    assert_eq!(Problem::of_sqlstate("42P01"), Problem::Schema);
}

#[test]
fn the_object_is_read_from_the_servers_message() {
    assert_eq!(
        object_of("column m.expires_at does not exist"),
        "column m.expires_at"
    );
    assert_eq!(
        object_of("relation \"members\" does not exist"),
        "relation \"members\""
    );
    assert_eq!(
        object_of("column \"state\" is of type integer but expression is of type text"),
        "column \"state\""
    );
    assert_eq!(
        object_of("column \"x\" of relation \"users\" does not exist"),
        "column \"x\" of relation \"users\""
    );
    assert_eq!(
        object_of("operator does not exist: text = bigint"),
        "operator does not exist: text = bigint"
    );
}

/// The check an on-demand init starts early (issue 52) keeps the gate's semantics: on an
/// incompatible schema the first invocation, which awaits it, fails as a whole and
/// processes nothing, with one line; the next invocation checks again and, the schema
/// fixed, processes the batch.
#[tokio::test]
async fn a_check_started_during_init_refuses_the_first_invocation_on_a_bad_schema() {
    let db = expired_member_without_requested_at().await;
    let q = Arc::new(LocalQueue::new(t(NOW)));
    let deps = deps(&db, q.clone());
    let gate = SchemaGate::new();
    let (log, _g) = capture();
    gate.start(deps.session.clone(), deps.function, None);
    let r = handle_event_checked(
        &Dispatch::new(),
        &deps,
        &gate,
        LambdaEvent::new(event(), Context::default()),
    )
    .await;
    let err = r.expect_err("the invocation fails as a whole");
    assert!(
        matches!(&err, InvokeError::SchemaIncompatible(s) if s.contains("requested_at")),
        "{err}"
    );
    assert_eq!(
        log.with_message(
            "schema incompatible: catalogue statements do not prepare on this database; \
             processing nothing, the messages stay on the queue (run `hk check`)",
        )
        .len(),
        1,
        "{}",
        log.dump()
    );
    assert!(
        db.exists("members WHERE id = 10").await,
        "nothing processed"
    );
    assert_eq!(q.pending_len(), 0, "nothing sent");

    fixed_then_processed(&db, &deps, &gate).await;
}
