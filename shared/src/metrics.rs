//! CloudWatch embedded-metric-format (EMF) lines (behaviour §8) and the catalogue of
//! every metric the functions emit.
//!
//! Owns: the metric names, units and emitters ([`CATALOGUE`]), the namespace and the
//! dimension set (`Service`, `function`), the EMF line ([`emit`], written through the
//! log pipeline) and the layout of the one line every record produces whatever
//! happens (`record_metrics`, its [`OUTCOMES`] counters; which counter a record
//! counts in is its `runtime::RecordOutcome`'s). The template's alarms and dashboard
//! read these metrics; a test checks they name only what the code emits.

use serde_json::{json, Map, Value};

use crate::function::Function;

/// The CloudWatch namespace of every metric.
pub const NAMESPACE: &str = "GitLabHousekeeping";

/// The dimension naming the deployment (the stack, or the template's `ServiceName`),
/// so two stacks in one account never mix their metrics.
pub const SERVICE_DIMENSION: &str = "Service";

/// The dimension naming the function (`remove-expired-members`, …).
pub const FUNCTION_DIMENSION: &str = "function";

/// The environment variable holding the `Service` dimension's value.
pub const SERVICE_ENV: &str = "SERVICE_NAME";

/// A metric's CloudWatch unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A count of things.
    Count,
    /// A duration or an age, in seconds.
    Seconds,
}

impl Unit {
    /// The unit's CloudWatch name.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Count => "Count",
            Unit::Seconds => "Seconds",
        }
    }
}

/// Which functions emit a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emitters {
    /// Every function, on every record.
    All,
    /// The five cron functions.
    Cron,
    /// The functions whose runs count item failures (a `Done` with a per-item failure
    /// counter: B38's `failed_rows`, B43's `failed_schedules`, B51's `failed_groups`,
    /// B70's `failed_count`, B28's user and bot failures), as their rows in the
    /// function table declare (`item_failures`, [`Function::counts_item_failures`]):
    /// each emits [`FAILED`] and [`ITEMS`] on every record it completes, and the
    /// template's alarms watch both.
    ItemFailures,
    /// Only these functions.
    Only(&'static [Function]),
}

/// One metric of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    /// The metric name.
    pub name: &'static str,
    /// Its unit.
    pub unit: Unit,
    /// Which functions emit it.
    pub emitters: Emitters,
    /// What it counts or measures (for the docs and the dashboard).
    pub help: &'static str,
}

impl Metric {
    /// Whether `f` emits this metric.
    pub fn emitted_by(&self, f: Function) -> bool {
        match self.emitters {
            Emitters::All => true,
            Emitters::Cron => f.cron().is_some(),
            Emitters::ItemFailures => f.counts_item_failures(),
            Emitters::Only(fs) => fs.contains(&f),
        }
    }
}

use Function as F;

const ITEM_FAILURES: Emitters = Emitters::ItemFailures;
const ALL: Emitters = Emitters::All;
const B38: Emitters = Emitters::Only(&[F::RemoveExpiredMembers]);
const B38_B70: Emitters = Emitters::Only(&[F::RemoveExpiredMembers, F::PlaceholderUserCleanup]);
const B43_SCHEDULE: Emitters = Emitters::Only(&[F::SchedulePruneDeletions]);
const B43_PRUNE: Emitters = Emitters::Only(&[F::PruneDeletions]);
const B51_CRON: Emitters = Emitters::Only(&[F::AdjournedGroupDeletion]);
const B51_WORKER: Emitters = Emitters::Only(&[F::GroupDestroy]);
const B70: Emitters = Emitters::Only(&[F::PlaceholderUserCleanup]);
const B28_CRON: Emitters = Emitters::Only(&[F::PatExpiring]);
const DELIVERY: Emitters = Emitters::Only(&[F::DeliverNotification]);
const STORAGE: Emitters = Emitters::Only(&[F::StorageCleanup]);

/// Declares each metric as a `pub const` documented by its help text, and [`CATALOGUE`].
macro_rules! metrics {
    ($($(#[$doc:meta])* $id:ident = $unit:ident($name:literal, $emitters:expr, $help:literal);)*) => {
        $(
            #[doc = concat!("`", $name, "`: ", $help, ".")]
            $(#[$doc])*
            pub const $id: Metric = Metric {
                name: $name,
                unit: Unit::$unit,
                emitters: $emitters,
                help: $help,
            };
        )*

        /// Every metric the functions emit.
        pub const CATALOGUE: &[Metric] = &[$($id),*];
    };
}

metrics! {
    // Every record, whatever happens (one EMF line per record).
    RECORDS = Count("records", ALL, "records handled");
    /// 1 when the record is reported as a batch-item failure (retryable, malformed,
    /// panic, deadline), else 0: the "failed records" alarm sums it.
    RECORDS_FAILED = Count("records_failed", ALL,
        "records reported as failed (redelivered, then DLQ)");
    DURATION_S = Seconds("duration_s", ALL, "time to handle one record");
    OUTCOME_DONE = Count("outcome_done", ALL, "records: work done");
    OUTCOME_STALE = Count("outcome_stale", ALL, "records: stale");
    OUTCOME_SKIPPED = Count("outcome_skipped", ALL, "records: skipped");
    OUTCOME_RETRYABLE = Count("outcome_retryable", ALL, "records: failed, retried");
    OUTCOME_PERMANENT = Count("outcome_permanent", ALL, "records: malformed");
    OUTCOME_PANIC = Count("outcome_panic", ALL, "records: panicked");
    OUTCOME_DEADLINE = Count("outcome_deadline", ALL, "records: stopped at the deadline");
    /// 1 on the first invocation of each cron run (the cron message, hop 0): the
    /// missed-run heartbeat alarm fires when none arrives within the cron period.
    RUN_STARTED = Count("run_started", Emitters::Cron, "cron runs started");
    // B38 and B70.
    PROCESSED = Count("processed", B38_B70, "items processed");
    SKIPPED = Count("skipped", B38_B70, "items skipped");
    /// The sum of the `Done`'s per-item failure counters (the run goes on). `hk run`
    /// exits 3 when a completed run counts any.
    FAILED = Count("failed", ITEM_FAILURES, "items failed inside a run");
    /// The denominator of [`FAILED`]: every item of a period failed when `failed`
    /// reaches `items`.
    ITEMS = Count("items", ITEM_FAILURES,
        "items attempted inside a run (done, skipped or failed)");
    UPDATED_ROWS = Count("updated_rows", B38, "B38 rows updated");
    SKIPPED_ROWS = Count("skipped_rows", B38, "B38 rows skipped");
    FAILED_ROWS = Count("failed_rows", B38, "B38 rows failed");
    // B43.
    OLDEST_SCHEDULE_AGE_S = Seconds("oldest_schedule_age_s", B43_SCHEDULE,
        "age of the oldest deletion schedule");
    REMAINING_SCHEDULES = Count("remaining_schedules", B43_SCHEDULE, "deletion schedules left");
    SCHEDULES_PROCESSED = Count("schedules_processed", B43_PRUNE, "deletion schedules worked off");
    FAILED_SCHEDULES = Count("failed_schedules", B43_PRUNE, "deletion schedule batches failed");
    DESTROYED_COUNT_TOTAL = Count("destroyed_count_total", B43_PRUNE, "memberships destroyed");
    // B51.
    GROUPS_DUE = Count("groups_due", B51_CRON, "groups due for deletion");
    DESTROY_ENQUEUED = Count("destroy_enqueued", B51_CRON, "group deletions enqueued");
    RESTORED = Count("restored", B51_CRON, "groups restored");
    SKIPPED_GROUPS = Count("skipped_groups", B51_CRON, "groups skipped");
    GROUPS_DELETED = Count("groups_deleted", B51_WORKER, "groups deleted");
    PROJECTS_DELETED = Count("projects_deleted", B51_WORKER, "projects deleted");
    /// An owner, a lock, or a condition that needs a person.
    GROUPS_BLOCKED = Count("groups_blocked", B51_WORKER, "group deletions blocked");
    /// Rows only GitLab's services can delete (container images, Debian uploads,
    /// registry cache files), counted when they block a group's deletion.
    BLOCKING_ROWS = Count("blocking_rows", B51_WORKER,
        "rows blocking a group deletion until an operator acts");
    /// Storage items of destroyed projects handed to `storage-cleanup`.
    STORAGE_ITEMS_SENT = Count("storage_items_sent", B51_WORKER,
        "storage items sent to storage-cleanup");
    /// Storage items left in place (`STORAGE_*=leave`, or files on local disk).
    STORAGE_ITEMS_LEFT = Count("storage_items_left", B51_WORKER,
        "storage items of destroyed projects left in place");
    // storage-cleanup: one item per record, by kind and result.
    GITALY_REMOVED = Count("gitaly_removed", STORAGE, "Git repositories removed through Gitaly");
    GITALY_ALREADY_GONE = Count("gitaly_already_gone", STORAGE, "Git repositories already gone");
    /// A failed attempt; the record is retried, then reaches the DLQ.
    GITALY_FAILED = Count("gitaly_failed", STORAGE, "Git repository removals failed");
    REGISTRY_REMOVED = Count("registry_removed", STORAGE,
        "container repositories removed from the registry");
    REGISTRY_ALREADY_GONE = Count("registry_already_gone", STORAGE,
        "container repositories already gone");
    /// A failed attempt; the record is retried, then reaches the DLQ.
    REGISTRY_FAILED = Count("registry_failed", STORAGE, "container repository removals failed");
    OBJECTS_REMOVED = Count("objects_removed", STORAGE, "objects removed from object storage");
    OBJECTS_ALREADY_GONE = Count("objects_already_gone", STORAGE, "objects already gone");
    /// A failed attempt; the record is retried, then reaches the DLQ.
    OBJECTS_FAILED = Count("objects_failed", STORAGE, "object removals failed");
    // B70.
    MAX_ATTEMPTS_REACHED = Count("max_attempts_reached", B70,
        "placeholder users at their final deletion attempt");
    // B28.
    USER_TOKENS_MARKED = Count("user_tokens_marked", B28_CRON, "user tokens notified");
    BOT_TOKENS_MARKED = Count("bot_tokens_marked", B28_CRON, "bot tokens notified");
    MAILS_SENT = Count("mails_sent", DELIVERY, "mails accepted by the server");
    /// 4xx or a connection failure.
    MAILS_FAILED_TEMPORARY = Count("mails_failed_temporary", DELIVERY, "mails failed, retried");
    /// 5xx.
    MAILS_FAILED_PERMANENT = Count("mails_failed_permanent", DELIVERY, "mails rejected for good");
    /// Answered with 2xx/3xx.
    WEBHOOKS_SENT = Count("webhooks_sent", DELIVERY, "web hooks delivered");
    /// Refused by the SSRF guard, or an invalid URL.
    WEBHOOKS_REFUSED = Count("webhooks_refused", DELIVERY, "web hooks refused (SSRF guard)");
    /// No answer, 5xx, 408, 429: recorded on the hook, and the record succeeds
    /// (behaviour §b28.10.3).
    WEBHOOKS_FAILED_TEMPORARY = Count("webhooks_failed_temporary", DELIVERY,
        "web hooks failed temporarily (not retried)");
    /// 4xx.
    WEBHOOKS_FAILED_PERMANENT = Count("webhooks_failed_permanent", DELIVERY,
        "web hooks failed for good");
    // Cold start.
    /// The cold-start schema check refused the catalogue (behaviour §c9.8).
    SCHEMA_INCOMPATIBLE = Count("schema_incompatible", ALL,
        "cold starts refused: the database schema does not match");
}

/// `(name, value)` pairs of a metric list (tests and summaries).
pub fn named(metrics: &[(Metric, f64)]) -> Vec<(&'static str, f64)> {
    metrics.iter().map(|(m, v)| (m.name, *v)).collect()
}

/// The catalogue entry named `name`.
pub fn by_name(name: &str) -> Option<&'static Metric> {
    CATALOGUE.iter().find(|m| m.name == name)
}

static SERVICE: std::sync::RwLock<Option<String>> = std::sync::RwLock::new(None);

/// The `Service` value used when none was set ([`set_service`]): `hk` and tests.
pub const LOCAL_SERVICE: &str = "local";

/// Set the `Service` dimension's value for this process: called once at cold start
/// with `Config::service` (read from [`SERVICE_ENV`]).
pub fn set_service(name: &str) {
    *SERVICE.write().unwrap_or_else(|p| p.into_inner()) = Some(name.to_string());
}

/// The `Service` dimension's value ([`LOCAL_SERVICE`] until [`set_service`]).
pub fn service() -> String {
    SERVICE
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_else(|| LOCAL_SERVICE.to_string())
}

/// Print one EMF line for `function` with the given metrics (units from the
/// catalogue), under the dimension set `[Service, function]`.
pub fn emit(function: Function, metrics: &[(Metric, f64)]) {
    let ts = chrono::Utc::now().timestamp_millis();
    let defs: Vec<Value> = metrics
        .iter()
        .map(|(m, _)| json!({ "Name": m.name, "Unit": m.unit.as_str() }))
        .collect();
    let mut line = Map::new();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": ts,
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": [[SERVICE_DIMENSION, FUNCTION_DIMENSION]],
                "Metrics": defs,
            }]
        }),
    );
    line.insert(SERVICE_DIMENSION.into(), Value::from(service()));
    line.insert(FUNCTION_DIMENSION.into(), Value::from(function.name()));
    for (m, v) in metrics {
        line.insert(m.name.to_string(), json!(v));
    }
    let line = Value::Object(line);
    // Outside the log level filter (telemetry::targets enables this target at every
    // level), stamped with a level Lambda's own filter keeps: the alarms read these.
    tracing::info!(target: crate::telemetry::METRICS_TARGET, _flatten = %line, "metrics");
}

/// The `outcome_*` counters of a record's EMF line, in the line's order: exactly one
/// is 1, the one its [`crate::runtime::RecordOutcome`] maps to.
pub const OUTCOMES: [Metric; 7] = [
    OUTCOME_DONE,
    OUTCOME_STALE,
    OUTCOME_SKIPPED,
    OUTCOME_RETRYABLE,
    OUTCOME_PERMANENT,
    OUTCOME_PANIC,
    OUTCOME_DEADLINE,
];

/// One record's EMF metrics (behaviour §8): `records` = 1, `records_failed` (1 when
/// the record is reported as a batch-item failure), `duration_s`, every `outcome_*`
/// counter ([`OUTCOMES`]) with `outcome` = 1, `run_started` for a cron function (1 on
/// its cron message, hop 0), and the report's own metrics
/// ([`crate::runtime::Done::metrics`]). `RecordOutcome::finish` emits them, once per
/// record whatever happens.
pub(crate) fn record_metrics(
    function: Function,
    outcome: Metric,
    failed: bool,
    duration_s: f64,
    run_started: Option<bool>,
    report_metrics: Vec<(Metric, f64)>,
) -> Vec<(Metric, f64)> {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut m = vec![
        (RECORDS, 1.0),
        (RECORDS_FAILED, flag(failed)),
        (DURATION_S, duration_s),
    ];
    m.extend(OUTCOMES.iter().map(|c| (*c, flag(*c == outcome))));
    if function.cron().is_some() {
        m.push((RUN_STARTED, flag(run_started.unwrap_or(false))));
    }
    m.extend(report_metrics);
    m
}
