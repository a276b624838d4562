//! Metrics at every log level (issue 45): the alarms read the EMF lines, so an
//! operator who sets `ApplicationLogLevel` to WARN or ERROR must not silence them.
//! The Lambda glue runs the same batch (a record that removes a member, and a
//! malformed one) under the subscriber `telemetry::init` installs, once with
//! `AWS_LAMBDA_LOG_LEVEL=INFO` and once with `WARN`/`ERROR`: the filter drops the info
//! lines, yet every metric line is there, each stamped with a `level` Lambda's JSON
//! log-level filter keeps (it treats a missing or unknown level as INFO).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use aws_lambda_events::event::sqs::SqsEvent;
use engine::local_queue::LocalQueue;
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;
use shared::clock::FixedClock;
use shared::config::Config;
use shared::db::Session;
use shared::handlers::Dispatch;
use shared::lambda::{handle_event_checked, Deps, SchemaGate};
use shared::telemetry::{subscriber, Sink};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// Lambda's application log levels, lowest first.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "fatal"];

/// Whether Lambda's filter at `configured` keeps `line` (missing or unknown = INFO).
fn lambda_keeps(line: &Value, configured: &str) -> bool {
    let rank = |l: &str| LEVELS.iter().position(|x| x.eq_ignore_ascii_case(l));
    let level = line["level"].as_str().and_then(rank).unwrap_or(2);
    level >= rank(configured).unwrap()
}

fn event() -> SqsEvent {
    let p = format!(
        "{}/../events/remove-expired-members.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut ev: SqsEvent = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let mut malformed = ev.records[0].clone();
    malformed.message_id = Some("malformed-1".into());
    malformed.body = Some("{not json".into());
    ev.records.push(malformed);
    ev
}

/// Every line of one invocation under `AWS_LAMBDA_LOG_LEVEL=level`, on a fresh database.
async fn run_at(level: &str) -> Vec<Value> {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let env: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", db.url.clone()),
        ("TRANSPORT", "local".into()),
    ]);
    let function = Function::RemoveExpiredMembers;
    let deps = Deps {
        function,
        session: Session::new(db.connector(), function.name()),
        config: Config::from_lookup(|k| env.get(k).cloned()).unwrap(),
        queue: Arc::new(LocalQueue::new(t(NOW))),
        clock: Arc::new(FixedClock(t(NOW))),
        notifier: None,
        storage: None,
    };
    let lines = Arc::new(Mutex::new(Vec::new()));
    let _g = tracing::subscriber::set_default(subscriber(
        Sink::Buffer(lines.clone()),
        Some(level),
        None,
    ));
    let r = handle_event_checked(
        &Dispatch,
        &deps,
        &SchemaGate::new(),
        LambdaEvent::new(event(), Context::default()),
    )
    .await
    .expect("served");
    assert_eq!(r.batch_item_failures.len(), 1, "the malformed record fails");
    assert!(
        !db.exists("members WHERE id = 10").await,
        "the member was removed"
    );
    let out = lines.lock().unwrap().clone();
    out
}

/// The metric lines, each as (its metric names, their values), in order.
fn metrics(lines: &[Value]) -> Vec<Vec<(String, Value)>> {
    lines
        .iter()
        .filter(|l| l.get("_aws").is_some())
        .map(|l| {
            l["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let name = m["Name"].as_str().unwrap().to_string();
                    let value = l[&name].clone();
                    (name, value)
                })
                .filter(|(n, _)| n != "duration_s")
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn every_metric_line_is_written_and_kept_at_warn_and_error() {
    let info = run_at("INFO").await;
    let want = metrics(&info);
    assert!(
        want.len() >= 2,
        "one metric line per record at least: {info:?}"
    );
    assert!(info.iter().any(|l| l["message"] == "done"), "{info:?}");
    for level in ["WARN", "ERROR"] {
        let got = run_at(level).await;
        assert!(
            !got.iter()
                .any(|l| l["message"] == "done" || l["message"] == "start"),
            "the {level} filter drops the info lines: {got:?}"
        );
        assert_eq!(metrics(&got), want, "every metric line at {level}");
        for l in got.iter().filter(|l| l.get("_aws").is_some()) {
            assert!(lambda_keeps(l, level), "Lambda at {level} would drop {l}");
            assert_eq!(l["level"], level.to_ascii_lowercase());
        }
    }
    for l in info.iter().filter(|l| l.get("_aws").is_some()) {
        assert_eq!(l["level"], "info", "{l}");
    }
}
