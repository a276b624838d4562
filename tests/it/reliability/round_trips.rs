//! The cold-start schema check in a handful of round trips (issue 52): once the
//! session is up, every function's check (GitLab's release, the deletion-state model
//! and column probes, then every statement the function can run) takes at most three
//! round trips on the wire, counted by a relay between the function and PostgreSQL
//! (`hk::bench::wire`), so it cannot creep back to one PREPARE per statement.

use std::collections::HashMap;
use std::sync::Arc;

use hk::bench::wire::Wire;
use hk::local_queue::LocalQueue;
use integration_tests::{t, TestDb};
use shared::clock::FixedClock;
use shared::config::Config;
use shared::db::{Connector, Session};
use shared::lambda::{Deps, Gate, SchemaGate};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// The port of a `postgres://…@host:port/db` URL.
fn port_of(url: &str) -> u16 {
    let authority = url.rsplit('@').next().unwrap().split('/').next().unwrap();
    authority.rsplit(':').next().unwrap().parse().unwrap()
}

fn deps(url: &str, function: Function) -> Deps {
    let env: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", url.to_string()),
        ("TRANSPORT", "local".into()),
    ]);
    Deps {
        function,
        session: Session::new(Connector::from_url(url).unwrap(), function.name()),
        config: Config::from_lookup(|k| env.get(k).cloned()).unwrap(),
        queue: Arc::new(LocalQueue::new(t(NOW))),
        clock: Arc::new(FixedClock(t(NOW))),
        notifier: None,
        storage: None,
    }
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

/// Round trips of connecting a session through `wire`.
async fn connect_round_trips(wire: &Wire, url: &str) -> u64 {
    let session = Session::new(
        Connector::from_url(&wire.url(url, port_of(url))).unwrap(),
        "connect",
    );
    let before = wire.counts().unwrap().round_trips;
    drop(session.client().await.unwrap());
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
