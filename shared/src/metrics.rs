//! CloudWatch embedded-metric-format (EMF) lines (behaviour §8) and the catalogue of
//! every metric the functions emit.
//!
//! Owns: the metric names, units and the functions that emit each ([`CATALOGUE`]), the
//! namespace and the dimension set (`Service`, `function`), and the EMF line itself
//! ([`emit`]), and the per-record line every record produces whatever happens
//! ([`emit_record_metrics`], [`OutcomeKind`]). The line goes through the log pipeline, so it lands on stdout in Lambda
//! and is visible to `telemetry::capture` in tests. The SAM template's alarms and
//! dashboard read these metrics; a test checks they name only what the code emits.

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
            Emitters::Only(fs) => fs.contains(&f),
        }
    }
}

const fn count(name: &'static str, emitters: Emitters, help: &'static str) -> Metric {
    Metric {
        name,
        unit: Unit::Count,
        emitters,
        help,
    }
}

const fn seconds(name: &'static str, emitters: Emitters, help: &'static str) -> Metric {
    Metric {
        name,
        unit: Unit::Seconds,
        emitters,
        help,
    }
}

use Function as F;

// Every record, whatever happens (one EMF line per record).
/// 1 per record handled.
pub const RECORDS: Metric = count("records", Emitters::All, "records handled");
/// 1 when the record is reported as a batch-item failure (retryable, malformed,
/// panic, deadline), else 0: the "failed records" alarm sums it.
pub const RECORDS_FAILED: Metric = count(
    "records_failed",
    Emitters::All,
    "records reported as failed (redelivered, then DLQ)",
);
/// Seconds from the record's arrival in the handler to its outcome.
pub const DURATION_S: Metric = seconds("duration_s", Emitters::All, "time to handle one record");
/// 1 per record whose work was done (`status` completed / continued / done).
pub const OUTCOME_DONE: Metric = count("outcome_done", Emitters::All, "records: work done");
/// 1 per stale record (the database no longer wants the work).
pub const OUTCOME_STALE: Metric = count("outcome_stale", Emitters::All, "records: stale");
/// 1 per skipped record (locked elsewhere, disabled, hop limit).
pub const OUTCOME_SKIPPED: Metric = count("outcome_skipped", Emitters::All, "records: skipped");
/// 1 per record that failed and will be retried (an error the handler returned).
pub const OUTCOME_RETRYABLE: Metric = count(
    "outcome_retryable",
    Emitters::All,
    "records: failed, retried",
);
/// 1 per malformed record (goes to the DLQ after the receives).
pub const OUTCOME_PERMANENT: Metric =
    count("outcome_permanent", Emitters::All, "records: malformed");
/// 1 per record whose handler panicked.
pub const OUTCOME_PANIC: Metric = count("outcome_panic", Emitters::All, "records: panicked");
/// 1 per record stopped by the invocation's deadline before it finished.
pub const OUTCOME_DEADLINE: Metric = count(
    "outcome_deadline",
    Emitters::All,
    "records: stopped at the deadline",
);
/// 1 on the first invocation of each cron run (the cron message, hop 0): the
/// missed-run heartbeat alarm fires when none arrives within the cron period.
pub const RUN_STARTED: Metric = count("run_started", Emitters::Cron, "cron runs started");

// B38.
const B38: Emitters = Emitters::Only(&[F::RemoveExpiredMembers]);
/// Members removed by B38.
pub const PROCESSED: Metric = count(
    "processed",
    Emitters::Only(&[F::RemoveExpiredMembers, F::PlaceholderUserCleanup]),
    "items processed",
);
/// Items skipped by the batch's rules.
pub const SKIPPED: Metric = count(
    "skipped",
    Emitters::Only(&[F::RemoveExpiredMembers, F::PlaceholderUserCleanup]),
    "items skipped",
);
/// The functions whose runs count item failures (a `Done` with a per-item failure
/// counter: B38's `failed_rows`, B43's `failed_schedules`, B51's `failed_groups`,
/// B70's `failed_count`, B28's user and bot failures): each emits [`FAILED`] and
/// [`ITEMS`] on every record it completes, and the template's alarms watch both.
pub const ITEM_FAILURE_EMITTERS: Emitters = Emitters::Only(&[
    F::RemoveExpiredMembers,
    F::PruneDeletions,
    F::AdjournedGroupDeletion,
    F::PlaceholderUserCleanup,
    F::PatExpiring,
]);
/// Items that failed inside a run (the run goes on): the sum of the `Done`'s
/// per-item failure counters. `hk run` exits 3 when a completed run counts any.
pub const FAILED: Metric = count("failed", ITEM_FAILURE_EMITTERS, "items failed inside a run");
/// Items a run attempted, done, skipped or failed: the denominator of [`FAILED`]
/// (every item of a period failed when `failed` reaches `items`).
pub const ITEMS: Metric = count(
    "items",
    ITEM_FAILURE_EMITTERS,
    "items attempted inside a run (done, skipped or failed)",
);
/// Rows updated by B38.
pub const UPDATED_ROWS: Metric = count("updated_rows", B38, "B38 rows updated");
/// Rows skipped by B38.
pub const SKIPPED_ROWS: Metric = count("skipped_rows", B38, "B38 rows skipped");
/// Rows failed by B38.
pub const FAILED_ROWS: Metric = count("failed_rows", B38, "B38 rows failed");

// B43.
const B43_SCHEDULE: Emitters = Emitters::Only(&[F::SchedulePruneDeletions]);
const B43_PRUNE: Emitters = Emitters::Only(&[F::PruneDeletions]);
/// Age of the oldest `members_deletion_schedules` row.
pub const OLDEST_SCHEDULE_AGE_S: Metric = seconds(
    "oldest_schedule_age_s",
    B43_SCHEDULE,
    "age of the oldest deletion schedule",
);
/// `members_deletion_schedules` rows left.
pub const REMAINING_SCHEDULES: Metric = count(
    "remaining_schedules",
    B43_SCHEDULE,
    "deletion schedules left",
);
/// Schedules worked off by one prune-deletions run.
pub const SCHEDULES_PROCESSED: Metric = count(
    "schedules_processed",
    B43_PRUNE,
    "deletion schedules worked off",
);
/// Schedule batches that failed.
pub const FAILED_SCHEDULES: Metric = count(
    "failed_schedules",
    B43_PRUNE,
    "deletion schedule batches failed",
);
/// Memberships destroyed.
pub const DESTROYED_COUNT_TOTAL: Metric =
    count("destroyed_count_total", B43_PRUNE, "memberships destroyed");

// B51.
const B51_CRON: Emitters = Emitters::Only(&[F::AdjournedGroupDeletion]);
const B51_WORKER: Emitters = Emitters::Only(&[F::GroupDestroy]);
/// Groups whose grace period ended.
pub const GROUPS_DUE: Metric = count("groups_due", B51_CRON, "groups due for deletion");
/// Group-destroy messages sent.
pub const DESTROY_ENQUEUED: Metric =
    count("destroy_enqueued", B51_CRON, "group deletions enqueued");
/// Groups restored instead of deleted.
pub const RESTORED: Metric = count("restored", B51_CRON, "groups restored");
/// Groups skipped.
pub const SKIPPED_GROUPS: Metric = count("skipped_groups", B51_CRON, "groups skipped");
/// Groups deleted.
pub const GROUPS_DELETED: Metric = count("groups_deleted", B51_WORKER, "groups deleted");
/// Projects deleted.
pub const PROJECTS_DELETED: Metric = count("projects_deleted", B51_WORKER, "projects deleted");
/// Group deletions blocked (an owner, a lock, a condition that needs a person).
pub const GROUPS_BLOCKED: Metric = count("groups_blocked", B51_WORKER, "group deletions blocked");
/// Rows under a group that only GitLab's services can delete (container images, Debian
/// uploads, registry cache files), counted when they block its deletion.
pub const BLOCKING_ROWS: Metric = count(
    "blocking_rows",
    B51_WORKER,
    "rows blocking a group deletion until an operator acts",
);

// B70.
/// Placeholder users whose final (15th) deletion attempt was enqueued.
pub const MAX_ATTEMPTS_REACHED: Metric = count(
    "max_attempts_reached",
    Emitters::Only(&[F::PlaceholderUserCleanup]),
    "placeholder users at their final deletion attempt",
);

// B28.
const B28_CRON: Emitters = Emitters::Only(&[F::PatExpiring]);
const DELIVERY: Emitters = Emitters::Only(&[F::DeliverNotification]);
/// User tokens marked notified.
pub const USER_TOKENS_MARKED: Metric =
    count("user_tokens_marked", B28_CRON, "user tokens notified");
/// Bot tokens marked notified.
pub const BOT_TOKENS_MARKED: Metric = count("bot_tokens_marked", B28_CRON, "bot tokens notified");
/// Mails accepted by the mail server.
pub const MAILS_SENT: Metric = count("mails_sent", DELIVERY, "mails accepted by the server");
/// Mails that failed temporarily (4xx, connection): retried.
pub const MAILS_FAILED_TEMPORARY: Metric =
    count("mails_failed_temporary", DELIVERY, "mails failed, retried");
/// Mails rejected for good (5xx).
pub const MAILS_FAILED_PERMANENT: Metric = count(
    "mails_failed_permanent",
    DELIVERY,
    "mails rejected for good",
);
/// Web hooks answered with 2xx/3xx.
pub const WEBHOOKS_SENT: Metric = count("webhooks_sent", DELIVERY, "web hooks delivered");
/// Web hooks refused by the SSRF guard or an invalid URL.
pub const WEBHOOKS_REFUSED: Metric = count(
    "webhooks_refused",
    DELIVERY,
    "web hooks refused (SSRF guard)",
);
/// Web hooks that failed temporarily (no answer, 5xx, 408, 429). Not retried: a web
/// hook failure is recorded on the hook and the record succeeds (behaviour §b28.10.3).
pub const WEBHOOKS_FAILED_TEMPORARY: Metric = count(
    "webhooks_failed_temporary",
    DELIVERY,
    "web hooks failed temporarily (not retried)",
);
/// Web hooks that failed for good (4xx).
pub const WEBHOOKS_FAILED_PERMANENT: Metric = count(
    "webhooks_failed_permanent",
    DELIVERY,
    "web hooks failed for good",
);

// Cold start.
/// 1 when the cold-start schema check refused the catalogue (behaviour §c9.8).
pub const SCHEMA_INCOMPATIBLE: Metric = count(
    "schema_incompatible",
    Emitters::All,
    "cold starts refused: the database schema does not match",
);

/// Every metric the functions emit.
pub const CATALOGUE: &[Metric] = &[
    RECORDS,
    RECORDS_FAILED,
    DURATION_S,
    OUTCOME_DONE,
    OUTCOME_STALE,
    OUTCOME_SKIPPED,
    OUTCOME_RETRYABLE,
    OUTCOME_PERMANENT,
    OUTCOME_PANIC,
    OUTCOME_DEADLINE,
    RUN_STARTED,
    PROCESSED,
    SKIPPED,
    FAILED,
    ITEMS,
    UPDATED_ROWS,
    SKIPPED_ROWS,
    FAILED_ROWS,
    OLDEST_SCHEDULE_AGE_S,
    REMAINING_SCHEDULES,
    SCHEDULES_PROCESSED,
    FAILED_SCHEDULES,
    DESTROYED_COUNT_TOTAL,
    GROUPS_DUE,
    DESTROY_ENQUEUED,
    RESTORED,
    SKIPPED_GROUPS,
    GROUPS_DELETED,
    PROJECTS_DELETED,
    GROUPS_BLOCKED,
    BLOCKING_ROWS,
    MAX_ATTEMPTS_REACHED,
    USER_TOKENS_MARKED,
    BOT_TOKENS_MARKED,
    MAILS_SENT,
    MAILS_FAILED_TEMPORARY,
    MAILS_FAILED_PERMANENT,
    WEBHOOKS_SENT,
    WEBHOOKS_REFUSED,
    WEBHOOKS_FAILED_TEMPORARY,
    WEBHOOKS_FAILED_PERMANENT,
    SCHEMA_INCOMPATIBLE,
];

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
    tracing::info!(_flatten = %line, "metrics");
}

/// How one record ended, for its EMF line: exactly one `outcome_*` counter is 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// Work done (any `done` status but stale and skipped).
    Done,
    /// Stale: the database no longer wants the work.
    Stale,
    /// Skipped: locked elsewhere, disabled, hop limit.
    Skipped,
    /// Failed, retried.
    Retryable,
    /// Malformed (including a body that does not parse).
    Permanent,
    /// The handler panicked.
    Panic,
    /// Not started or stopped at the invocation's deadline.
    Deadline,
}

impl OutcomeKind {
    /// Every outcome with its counter.
    pub const ALL: [(OutcomeKind, Metric); 7] = [
        (OutcomeKind::Done, OUTCOME_DONE),
        (OutcomeKind::Stale, OUTCOME_STALE),
        (OutcomeKind::Skipped, OUTCOME_SKIPPED),
        (OutcomeKind::Retryable, OUTCOME_RETRYABLE),
        (OutcomeKind::Permanent, OUTCOME_PERMANENT),
        (OutcomeKind::Panic, OUTCOME_PANIC),
        (OutcomeKind::Deadline, OUTCOME_DEADLINE),
    ];
}

/// One record's EMF line (behaviour §8): `records` = 1, `records_failed` (1 when the
/// record is reported as a batch-item failure), `duration_s`, one `outcome_*` = 1,
/// `run_started` for a cron function (1 on its cron message, hop 0), and the report's
/// own metrics ([`crate::runtime::Done::metrics`]). Every way a record ends calls it exactly once.
pub fn emit_record_metrics(
    function: Function,
    outcome: OutcomeKind,
    failed: bool,
    duration_s: f64,
    run_started: Option<bool>,
    report_metrics: Vec<(Metric, f64)>,
) {
    let flag = |b: bool| if b { 1.0 } else { 0.0 };
    let mut m = vec![
        (RECORDS, 1.0),
        (RECORDS_FAILED, flag(failed)),
        (DURATION_S, duration_s),
    ];
    m.extend(
        OutcomeKind::ALL
            .iter()
            .map(|(k, c)| (*c, flag(*k == outcome))),
    );
    if function.cron().is_some() {
        m.push((RUN_STARTED, flag(run_started.unwrap_or(false))));
    }
    m.extend(report_metrics);
    emit(function, &m);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_units_follow_the_suffix() {
        let mut seen = std::collections::BTreeSet::new();
        for m in CATALOGUE {
            assert!(seen.insert(m.name), "{} is listed twice", m.name);
            assert_eq!(
                m.unit == Unit::Seconds,
                m.name.ends_with("_s"),
                "{}: a Seconds metric ends in _s and only those",
                m.name
            );
        }
    }
}
