//! Log capture for tests: every line the crates under test log on this thread, as
//! the JSON objects `shared::telemetry` writes, for assertions on exact lines.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use shared::telemetry::{JsonLayer, Sink};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Registry;

/// Captured log lines of one test.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<Value>>>);

impl Captured {
    /// Every line so far.
    pub fn lines(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }

    /// Lines whose `message` equals `message`.
    pub fn with_message(&self, message: &str) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["message"] == message)
            .collect()
    }

    /// The one line with `message`; panics with the full log when there is not exactly one.
    pub fn one(&self, message: &str) -> Value {
        let found = self.with_message(message);
        assert_eq!(
            found.len(),
            1,
            "expected exactly one `{message}` line, log was:\n{}",
            self.dump()
        );
        found.into_iter().next().unwrap()
    }

    /// The last `done` line.
    pub fn done(&self) -> Value {
        self.with_message("done")
            .pop()
            .unwrap_or_else(|| panic!("no `done` line; log was:\n{}", self.dump()))
    }

    /// Forget every line so far.
    pub fn clear(&self) {
        self.0.lock().unwrap().clear();
    }

    /// The log as text, for assertion messages.
    pub fn dump(&self) -> String {
        self.lines()
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Capture every log line of `shared`, `hk` and `checks` emitted on this thread (debug and up) until
/// the guard drops. Tests run handlers on a current-thread runtime, so everything a
/// handler logs is captured.
pub fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let c = Captured::default();
    // The functions' own filter construction: the metric lines pass it at every level.
    let targets: Targets =
        shared::telemetry::targets("warn,shared=debug,hk=debug,checks=debug", true);
    let subscriber = Registry::default()
        .with(targets)
        .with(JsonLayer::new(Sink::Buffer(c.0.clone())));
    let guard = tracing::subscriber::set_default(subscriber);
    (c, guard)
}
