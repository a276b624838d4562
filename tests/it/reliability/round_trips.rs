//! The cold-start schema check in a handful of round trips (issue 52): once the
//! session is up, every function's check (GitLab's release, the deletion-state model
//! and column probes, then every statement the function can run) takes at most three
//! round trips on the wire, counted by a relay between the function and PostgreSQL
//! (`lab::bench::wire`), so it cannot creep back to one PREPARE per statement.

use integration_tests::environment;

use aws_lambda_events::event::sqs::SqsEvent;
use integration_tests::{t, TestDb};
use lab::bench::wire::Wire;
use lambda_runtime::{Context, LambdaEvent};
use shared::db::{Connector, Session};
use shared::handlers::Dispatch;
use shared::lambda::{handle_event_checked, Environment, Gate, SchemaGate};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// The port of a `postgres://…@host:port/db` URL.
fn port_of(url: &str) -> u16 {
    let authority = url.rsplit('@').next().unwrap().split('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

fn deps(url: &str, function: Function) -> Environment {
    environment(function, url, t(NOW)).build()
}

/// Round trips of a cold start's check, for one function: a fresh session through
/// `wire` connects inside the check (as at cold start), less the round trips of
/// connecting alone (`connect`). The count is read as soon as the check returns: what
/// it waited for. (The statements it prepared are then closed without waiting: those
/// messages go out with the next request.)
async fn check_round_trips(wire: &Wire, url: &str, function: Function, connect: u64) -> u64 {
    let deps = deps(&wire.url(url, port_of(url)), function);
    let before = wire.counts().unwrap().round_trips;
    let gate = SchemaGate::new();
    assert_eq!(gate.check(&deps).await.unwrap(), Gate::Open, "{function}");
    wire.counts().unwrap().round_trips - before - connect
}

/// Round trips of connecting a session through `wire`, without its settings (which a
/// cold start sends with its first statements).
async fn connect_round_trips(wire: &Wire, url: &str) -> u64 {
    let session = Session::new(
        Connector::from_url(&wire.url(url, port_of(url))).unwrap(),
        "connect",
    );
    let before = wire.counts().unwrap().round_trips;
    let (client, settle) = session.client_unsettled().await.unwrap();
    assert!(settle.is_some(), "a new session comes without its settings");
    drop((client, settle));
    wire.counts().unwrap().round_trips - before
}

#[tokio::test]
async fn every_functions_schema_check_takes_at_most_three_round_trips() {
    let db = TestDb::new().await;
    // A relay per session: a closed session's last message (Terminate) is written
    // after it is dropped, and must not count for the next.
    let wire = Wire::start("127.0.0.1", port_of(&db.url)).await.unwrap();
    let connect = connect_round_trips(&wire, &db.url).await;
    assert!(connect >= 1);
    let mut counts = Vec::new();
    for f in Function::ALL {
        let wire = Wire::start("127.0.0.1", port_of(&db.url)).await.unwrap();
        counts.push((
            f.name(),
            check_round_trips(&wire, &db.url, *f, connect).await,
        ));
    }
    assert!(
        counts.iter().all(|(_, n)| *n <= 3),
        "round trips of the schema check per function: {counts:?}"
    );
}

/// A statement that fails aborts the rest of its flight; they are sent again, so a
/// failure later in the list is still found (every failure is listed), and the passing
/// database costs nothing more.
#[tokio::test]
async fn failures_after_the_first_are_still_found() {
    let db = TestDb::new().await;
    // A column and a table statements of remove-expired-members use, far apart in its
    // list (its own page; user removal's).
    db.exec("ALTER TABLE members DROP COLUMN expires_at").await;
    db.exec("ALTER TABLE notification_settings RENAME TO notification_settings_x")
        .await;
    let client = db.connector().connect("t").await.unwrap();
    let (model, has) = shared::preflight::probe_all(&client).await.unwrap();
    let statements = shared::catalogue::for_function(Function::RemoveExpiredMembers, model, &has);
    let failed = shared::preflight::prepare_all(&client, &statements)
        .await
        .unwrap();
    let one_by_one: Vec<_> = {
        let mut v = Vec::new();
        for s in &statements {
            if let Some(f) = shared::preflight::prepare_one(&client, s).await.unwrap() {
                v.push(f);
            }
        }
        v
    };
    assert!(failed.len() >= 2, "{failed:?}");
    assert_eq!(
        failed, one_by_one,
        "the same failures as one PREPARE at a time"
    );
}

/// The whole cold start of `function` once its session is up, counted on the wire: the
/// schema check (with the session settings in its first flight) and the first record
/// (the bench's message: a cron's own, or a child's about rows that do not exist).
///
/// With `early`, the check is started as an on-demand init starts it
/// ([`SchemaGate::start`]) before the invocation, which then awaits it: the same round
/// trips (no second check, no ping of the session it opened).
async fn cold_start_round_trips(
    wire: &Wire,
    url: &str,
    function: Function,
    connect: u64,
    early: bool,
) -> u64 {
    let deps = deps(&wire.url(url, port_of(url)), function);
    let body = lab::bench::cold_start::first_message(function, t(NOW)).unwrap();
    let event: SqsEvent = serde_json::from_value(serde_json::json!({"Records": [{
        "messageId": "m-1", "body": body,
        "attributes": {"ApproximateReceiveCount": "1"}, "messageAttributes": {},
        "eventSource": "aws:sqs"}]}))
    .unwrap();
    let before = wire.counts().unwrap().round_trips;
    let gate = SchemaGate::new();
    if early {
        gate.start(deps.session.clone(), function, None);
    }
    let resp = handle_event_checked(
        &Dispatch::new(),
        &deps,
        &gate,
        LambdaEvent::new(event, Context::default()),
    )
    .await
    .unwrap();
    assert!(resp.batch_item_failures.is_empty(), "{function}: {resp:?}");
    wire.counts().unwrap().round_trips - before - connect
}

/// A cold start's round trips after the session is up, per function, as measured when
/// pinned (issue 52): the schema check's two (the session settings in the flight of
/// its probes) and the record's, with no ping (the session was connected in this
/// invocation) and the cron's overlap lock taken and released in one round trip each.
/// A ping per checkout or a settings round trip of their own adds one and fails this.
/// (storage-cleanup, pat-expiring and deliver-notification need the storage clients or
/// the notifier the bench builds; the bench counts them.)
///
/// Since 2026-11-29 (issue 52) no record statement of these starts is sent by text (a
/// statement sent by text is two round trips: parse, then run), and the independent
/// reads at a record's start share a flight (adjourned-group-deletion's period, warning
/// count and model; group-destroy's model and group row): pinned before → now
/// remove-expired-members 8 → 6, delete-user 6 → 5, schedule-prune-deletions 6 → 5,
/// prune-deletions 8 → 6, adjourned-group-deletion 11 → 6, group-destroy 7 → 5,
/// placeholder-user-cleanup 6 → 5, delete-placeholder-user 6 → 5.
const PINNED: &[(Function, u64)] = &[
    (Function::RemoveExpiredMembers, 6),
    (Function::DeleteUser, 5),
    (Function::SchedulePruneDeletions, 5),
    (Function::PruneDeletions, 6),
    (Function::AdjournedGroupDeletion, 6),
    (Function::GroupDestroy, 5),
    (Function::PlaceholderUserCleanup, 5),
    (Function::DeletePlaceholderUser, 5),
];

#[tokio::test]
async fn a_cold_start_takes_no_more_round_trips_than_pinned() {
    let db = TestDb::new().await;
    let wire = Wire::start("127.0.0.1", port_of(&db.url)).await.unwrap();
    let connect = connect_round_trips(&wire, &db.url).await;
    let mut over = Vec::new();
    for (f, pinned) in PINNED {
        for early in [false, true] {
            let wire = Wire::start("127.0.0.1", port_of(&db.url)).await.unwrap();
            let n = cold_start_round_trips(&wire, &db.url, *f, connect, early).await;
            if n > *pinned {
                over.push((f.name(), early, n, *pinned));
            }
        }
    }
    assert!(
        over.is_empty(),
        "cold start round trips after the session is up (function, check started early, counted, pinned): {over:?}"
    );
}

/// The kept session is pinged by the first checkout of an invocation only, and not at
/// all when it was connected in this invocation (issue 52); a backend that ended while
/// the environment was frozen is still found and replaced at the next invocation.
#[tokio::test]
async fn the_kept_session_is_pinged_once_per_invocation_and_not_after_connecting() {
    let db = TestDb::new().await;
    let wire = Wire::start("127.0.0.1", port_of(&db.url)).await.unwrap();
    let session = Session::new(
        Connector::from_url(&wire.url(&db.url, port_of(&db.url))).unwrap(),
        "ping",
    );
    let statements = || wire.counts().unwrap().statements;
    session.invocation_started();
    drop(session.client().await.unwrap());
    let connected = statements();
    assert_eq!(connected, 1, "connecting sends the session settings only");
    drop(session.client().await.unwrap());
    assert_eq!(statements(), connected, "no ping right after connecting");
    session.invocation_started();
    drop(session.client().await.unwrap());
    assert_eq!(
        statements(),
        connected + 1,
        "one ping at the next invocation"
    );
    drop(session.client().await.unwrap());
    drop(session.client().await.unwrap());
    assert_eq!(statements(), connected + 1, "no ping again inside it");

    // The backend ends between invocations (a thawed environment's dead session).
    let pid: i32 = session
        .client()
        .await
        .unwrap()
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    db.client
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .await
        .unwrap();
    session.invocation_started();
    let client = session.client().await.unwrap();
    let now: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(now, pid, "a new session replaced the ended one");
}
