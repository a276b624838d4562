//! What one invocation of a function did, as its `done` line, its metrics and `hk`
//! report it (behaviour §8, §9.6).
//!
//! Owns: [`Status`] (the `done` line's `status`), [`Done`] (a job's typed result, its
//! fields and metrics), [`Report`] (any job's result with its status) and the two
//! results the runtime itself reports ([`Skipped`], [`HopLimitReached`]). How the
//! record carrying it ended is `outcome`'s `RecordOutcome`.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::metrics::Metric;

/// The `status` of a `done` line: how one invocation of a function ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// The work of the message is finished.
    Completed,
    /// The run goes on in a continuation or re-send (behaviour §9.8).
    LimitReached,
    /// `prune-deletions`: more schedules wait, a continuation was sent.
    MoreWork,
    /// Another invocation holds the overlap lock (behaviour §9.10).
    Skipped,
    /// Received above the function's hop limit: no work (behaviour §9.8).
    HopLimitReached,
    /// The database no longer wants the work.
    Stale,
    /// The work is refused by a rule (the ghost user, a sole owner).
    Refused,
    /// Rows that need an operator keep the work from going on.
    Blocked,
    /// `group-destroy`: the group was restored instead.
    Restored,
    /// `prune-deletions`: some schedules failed; the record is retried.
    Stopped,
    /// The work failed in a way the record is retried for.
    Failed,
}

impl Status {
    /// The status as the `done` line writes it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Completed => "completed",
            Status::LimitReached => "limit_reached",
            Status::MoreWork => "more_work",
            Status::Skipped => "skipped",
            Status::HopLimitReached => "hop_limit_reached",
            Status::Stale => "stale",
            Status::Refused => "refused",
            Status::Blocked => "blocked",
            Status::Restored => "restored",
            Status::Stopped => "stopped",
            Status::Failed => "failed",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A handler's typed `done` result: its serialized fields are the `done` line's, its
/// metrics are declared with it.
pub trait Done: Serialize + std::fmt::Debug + Send + Sync + 'static {
    /// The `status` of `done` when the work of the message ended here.
    fn status(&self) -> Status {
        Status::Completed
    }
    /// The `status` when the run goes on in a continuation or re-send.
    fn continued_status(&self) -> Status {
        Status::LimitReached
    }
    /// Metrics for this invocation's EMF line, besides the per-record ones.
    fn metrics(&self) -> Vec<(Metric, f64)> {
        Vec::new()
    }
    /// What GitLab's worker logs with `log_extra_metadata_on_done` for `status`: the
    /// `done` line carries each as `extra.<worker>.<key>`.
    fn gitlab_extras(&self, status: Status) -> Vec<(String, Value)> {
        let _ = status;
        Vec::new()
    }
}

/// Object-safe view of a [`Done`] (a report holds any function's result).
trait AnyDone: std::fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn std::any::Any;
    fn fields(&self) -> Map<String, Value>;
    fn metrics(&self) -> Vec<(Metric, f64)>;
    fn gitlab_extras(&self, status: Status) -> Vec<(String, Value)>;
}

impl<T: Done> AnyDone for T {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
    fn fields(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        }
    }
    fn metrics(&self) -> Vec<(Metric, f64)> {
        Done::metrics(self)
    }
    fn gitlab_extras(&self, status: Status) -> Vec<(String, Value)> {
        Done::gitlab_extras(self, status)
    }
}

/// The `skipped: already running` result (behaviour §9.10): no fields.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Skipped;

impl Done for Skipped {
    fn status(&self) -> Status {
        Status::Skipped
    }
}

/// The hop-limit case on receipt (behaviour §9.8): no work, no fields.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HopLimitReached;

impl Done for HopLimitReached {
    fn status(&self) -> Status {
        Status::HopLimitReached
    }
}

/// What one invocation did: its typed [`Done`] result and the status it ended with.
#[derive(Debug, Clone)]
pub struct Report {
    done: std::sync::Arc<dyn AnyDone>,
    status: Status,
}

impl Report {
    /// A report of a result whose work ended here.
    pub fn new<T: Done>(done: T) -> Report {
        let status = done.status();
        Report::with_status(done, status)
    }

    /// A report of `done` that ended with `status`.
    pub fn with_status<T: Done>(done: T, status: Status) -> Report {
        Report {
            done: std::sync::Arc::new(done),
            status,
        }
    }

    /// The `status` field of `done`.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The typed result, when it is a `T`.
    pub fn get<T: Done>(&self) -> Option<&T> {
        self.done.as_any().downcast_ref::<T>()
    }

    /// Metrics for the invocation's EMF line (besides the per-record ones).
    pub fn metrics(&self) -> Vec<(Metric, f64)> {
        self.done.metrics()
    }

    /// The `done` line's fields: [`Report::to_json`] plus GitLab's
    /// `extra.<worker>.<key>` fields for `class`.
    pub fn done_fields(&self, class: &str) -> Value {
        let mut v = self.to_json();
        let prefix = crate::telemetry::gitlab_extra_prefix(class);
        if let Value::Object(m) = &mut v {
            for (k, x) in self.done.gitlab_extras(self.status) {
                m.insert(format!("{prefix}{k}"), x);
            }
        }
        v
    }

    /// The items this invocation processed, by name, that `hk`'s summary adds up: the
    /// integer fields of the `done` line that are not identifiers (`…_id`).
    pub fn counts(&self) -> Vec<(String, u64)> {
        self.done
            .fields()
            .into_iter()
            .filter(|(k, _)| !k.ends_with("_id"))
            .filter_map(|(k, v)| v.as_u64().map(|n| (k, n)))
            .collect()
    }

    /// The report as one JSON object (status first): the `done` line's fields.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), Value::from(self.status.name()));
        m.extend(self.done.fields());
        Value::Object(m)
    }
}
