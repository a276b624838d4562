//! The tests' one way to build what a function binary builds at cold start
//! (`shared::lambda::Environment`: its session, configuration, queue and clock), in
//! place of a struct literal per test file: [`environment`] and [`App`].
//!
//! A job's own dependencies are not here: the tests give them to
//! `shared::handlers::Dispatch::with`, as `hk` does.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use engine::local_queue::LocalQueue;
use shared::clock::FixedClock;
use shared::config::Config;
use shared::db::Connector;
use shared::lambda::Environment;
use shared::queue::Queue;
use shared::Function;

/// What [`environment`] builds, with the choices a test may change before
/// [`App::build`].
pub struct App {
    function: Function,
    url: String,
    now: DateTime<Utc>,
    vars: Vec<(&'static str, String)>,
    connector: Option<Connector>,
    queue: Option<Arc<dyn Queue>>,
}

/// `function`'s environment on the database at `url` at the fixed instant `now`:
/// `TRANSPORT=local` with every other variable at its default, a fresh local queue
/// whose clock starts at `now`. Change it with [`App`]'s methods, then [`App::build`].
pub fn environment(function: Function, url: &str, now: DateTime<Utc>) -> App {
    App {
        function,
        url: url.to_string(),
        now,
        vars: Vec::new(),
        connector: None,
        queue: None,
    }
}

impl App {
    /// Set one more configuration variable (`GITLAB_SCHEMA_ACCEPTED`, …).
    pub fn var(mut self, name: &'static str, value: impl Into<String>) -> App {
        self.vars.push((name, value.into()));
        self
    }

    /// Connect through `connector` (a secret source, a proxy) instead of the URL.
    pub fn connector(mut self, connector: Connector) -> App {
        self.connector = Some(connector);
        self
    }

    /// Send through `queue` instead of a fresh local queue.
    pub fn queue(mut self, queue: Arc<dyn Queue>) -> App {
        self.queue = Some(queue);
        self
    }

    /// The environment.
    pub fn build(self) -> Environment {
        let (url, vars) = (self.url.as_str(), &self.vars);
        let config = Config::from_lookup(|k| match k {
            "DATABASE_URL" => Some(url.to_string()),
            "TRANSPORT" => Some("local".into()),
            _ => vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()),
        })
        .unwrap_or_else(|e| panic!("test configuration: {e}"));
        let connector = match self.connector {
            Some(c) => c,
            None => Connector::new(
                url.parse()
                    .unwrap_or_else(|e| panic!("bad database URL {url}: {e}")),
                &config.database,
            )
            .unwrap_or_else(|e| panic!("connector: {e}")),
        };
        let queue = self
            .queue
            .unwrap_or_else(|| Arc::new(LocalQueue::new(self.now)));
        Environment::new(self.function, config, connector, queue)
            .with_clock(Arc::new(FixedClock(self.now)))
    }
}
