//! How one record ended (behaviour §8, §9.6), and the one place each consequence of
//! it is decided.
//!
//! Owns: [`RecordOutcome`], the single answer to "how did this record end?" in Lambda
//! and in `hk` (acknowledged with a report, retried, malformed, panicked, not started
//! at the deadline, database unavailable or busy), and its mappings, each written
//! once: to the SQS batch response and the session reset
//! ([`RecordOutcome::is_item_failure`], [`RecordOutcome::session_reset`]), to the
//! record's log lines (its `done` line or failure lines) and to its EMF line with
//! exactly one `outcome_*` counter ([`RecordOutcome::finish`]), and to the word `hk`
//! reports it with ([`RecordOutcome::label`]).

use tracing::{error, info, warn};

use super::pipeline::RecordMeta;
use super::report::{Report, Status};
use crate::error::Error;
use crate::function::Function;
use crate::metrics::{self, Metric};

/// How a record ended (behaviour §9.6): what a handler returns (`Success`, or
/// `Retryable` with its report, through `job::drive`) and what the pipeline and the
/// delivery around it make of everything else.
#[derive(Debug, Clone)]
pub enum RecordOutcome {
    /// Acknowledged with the handler's report: work done, stale, skipped or the hop
    /// limit reached (the report's [`Status`] says which).
    Success(Report),
    /// Reported as a batch-item failure; redelivered after the visibility timeout.
    Retryable {
        /// `error_class` of the failure.
        error_class: String,
        /// The error text.
        error: String,
        /// Whether the database session must be dropped (connection lost).
        discard_session: bool,
        /// The report, when the handler produced one (it still asks for a retry).
        report: Option<Report>,
    },
    /// Malformed: reported every time until it reaches the DLQ.
    Permanent {
        /// Why it is malformed.
        error: String,
    },
    /// The handler panicked: retried, on a new session.
    Panic {
        /// The panic's message.
        error: String,
    },
    /// Not started: the invocation's deadline was reached first (back to the queue
    /// rather than cut off by Lambda's timeout).
    Deadline,
    /// No database session could be checked out for it: retried, on a new session.
    DatabaseUnavailable {
        /// `error_class` of the failure.
        error_class: String,
        /// The error text.
        error: String,
    },
    /// The cold-start schema check found a lock held elsewhere: returned untouched,
    /// to be retried (the check logged it once for the invocation).
    DatabaseBusy {
        /// What the check waited for.
        error: String,
    },
}

impl From<Report> for RecordOutcome {
    fn from(report: Report) -> RecordOutcome {
        RecordOutcome::Success(report)
    }
}

/// What is known of a record when it ends, besides its outcome: what its lines and
/// its EMF line say.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ending<'a> {
    /// The function.
    pub function: Function,
    /// The GitLab class of its message type (of the function, before decoding).
    pub class: &'static str,
    /// The delivery's facts.
    pub meta: &'a RecordMeta,
    /// The message key, when the body named one.
    pub message_key: Option<&'a str>,
    /// The hop of its decoded envelope; `None` when the envelope did not decode or
    /// the record was not processed.
    pub hop: Option<u64>,
    /// Seconds spent on it.
    pub duration_s: f64,
}

impl Ending<'_> {
    /// A record that ended before its envelope was decoded.
    pub fn undecoded(function: Function, meta: &RecordMeta, duration_s: f64) -> Ending<'_> {
        Ending {
            function,
            class: function.gitlab_class(),
            meta,
            message_key: None,
            hop: None,
            duration_s,
        }
    }
}

impl RecordOutcome {
    /// Work that ended with `report` but must still be retried for `error` (a run
    /// whose items failed, or a re-send past its back-off schedule).
    pub fn retry(report: Report, error: &Error) -> RecordOutcome {
        RecordOutcome::Retryable {
            error_class: error.class().to_string(),
            error: error.to_string(),
            discard_session: false,
            report: Some(report),
        }
    }

    /// A handler's error: malformed input is permanent, anything else retried (on a
    /// new session when the connection was lost).
    pub fn failed(error: Error) -> RecordOutcome {
        match error {
            Error::Malformed(error) => RecordOutcome::Permanent { error },
            e => RecordOutcome::Retryable {
                error_class: e.class().to_string(),
                error: e.to_string(),
                discard_session: e.is_connection_lost(),
                report: None,
            },
        }
    }

    /// Whether the record is acknowledged.
    pub fn is_success(&self) -> bool {
        matches!(self, RecordOutcome::Success(_))
    }

    /// Whether the record is reported as a batch-item failure (SQS redelivers it,
    /// then moves it to the DLQ): every outcome but an acknowledged one.
    pub fn is_item_failure(&self) -> bool {
        !self.is_success()
    }

    /// The session reset the record asks for (behaviour §7.1, §9.10): `None` to keep
    /// the session as it is, `Some(discard)` to roll back and release every session
    /// lock, dropping the connection when `discard` (or when that fails).
    pub fn session_reset(&self) -> Option<bool> {
        match self {
            RecordOutcome::Retryable {
                discard_session, ..
            } => Some(*discard_session),
            RecordOutcome::Panic { .. } | RecordOutcome::DatabaseUnavailable { .. } => Some(true),
            RecordOutcome::Success(_)
            | RecordOutcome::Permanent { .. }
            | RecordOutcome::Deadline
            | RecordOutcome::DatabaseBusy { .. } => None,
        }
    }

    /// How `hk` reports it (its run summary, `--json`, its exit code): `success`,
    /// `retryable` (redelivered) or `permanent` (to the DLQ).
    pub fn label(&self) -> &'static str {
        match self {
            RecordOutcome::Success(_) => "success",
            RecordOutcome::Permanent { .. } => "permanent",
            RecordOutcome::Retryable { .. }
            | RecordOutcome::Panic { .. }
            | RecordOutcome::Deadline
            | RecordOutcome::DatabaseUnavailable { .. }
            | RecordOutcome::DatabaseBusy { .. } => "retryable",
        }
    }

    /// The handler's report, when it produced one.
    pub fn report(&self) -> Option<&Report> {
        match self {
            RecordOutcome::Success(r) => Some(r),
            RecordOutcome::Retryable { report, .. } => report.as_ref(),
            _ => None,
        }
    }

    /// The `error_class` of a failure (`None` when acknowledged).
    pub fn error_class(&self) -> Option<&str> {
        match self {
            RecordOutcome::Success(_) => None,
            RecordOutcome::Retryable { error_class, .. }
            | RecordOutcome::DatabaseUnavailable { error_class, .. } => Some(error_class),
            RecordOutcome::Permanent { .. } => Some("malformed"),
            RecordOutcome::Panic { .. } => Some("panic"),
            RecordOutcome::Deadline => Some("deadline"),
            RecordOutcome::DatabaseBusy { .. } => Some("db_busy"),
        }
    }

    /// The error text of a failure (`None` when acknowledged).
    pub fn error(&self) -> Option<&str> {
        match self {
            RecordOutcome::Success(_) => None,
            RecordOutcome::Retryable { error, .. }
            | RecordOutcome::Permanent { error }
            | RecordOutcome::Panic { error }
            | RecordOutcome::DatabaseUnavailable { error, .. }
            | RecordOutcome::DatabaseBusy { error } => Some(error),
            RecordOutcome::Deadline => Some("record not started: deadline reached"),
        }
    }

    /// The record's `outcome_*` counter.
    fn counter(&self) -> Metric {
        match self {
            RecordOutcome::Success(r) => match r.status() {
                Status::Stale => metrics::OUTCOME_STALE,
                Status::Skipped | Status::HopLimitReached => metrics::OUTCOME_SKIPPED,
                _ => metrics::OUTCOME_DONE,
            },
            RecordOutcome::Retryable { .. }
            | RecordOutcome::DatabaseUnavailable { .. }
            | RecordOutcome::DatabaseBusy { .. } => metrics::OUTCOME_RETRYABLE,
            RecordOutcome::Permanent { .. } => metrics::OUTCOME_PERMANENT,
            RecordOutcome::Panic { .. } => metrics::OUTCOME_PANIC,
            RecordOutcome::Deadline => metrics::OUTCOME_DEADLINE,
        }
    }

    /// The record's EMF metrics ([`metrics::record_metrics`]): its counter, whether it
    /// is an item failure, and its report's own metrics.
    fn metrics(&self, end: &Ending<'_>) -> Vec<(Metric, f64)> {
        metrics::record_metrics(
            end.function,
            self.counter(),
            self.is_item_failure(),
            end.duration_s,
            end.hop.map(|h| h == 0),
            self.report().map(Report::metrics).unwrap_or_default(),
        )
    }

    /// Everything a record's end writes: its log lines, then its one EMF line. Called
    /// exactly once per record, inside the record's span once its envelope is known
    /// (the pipeline), outside it before (the delivery, the schema check).
    pub(crate) fn finish(&self, end: &Ending<'_>) {
        self.log(end);
        metrics::emit(end.function, &self.metrics(end));
    }

    /// The record's log lines (behaviour §8, docs/logs.md): its `done` line and
    /// failure lines, in the order they are written.
    fn log(&self, end: &Ending<'_>) {
        let (meta, duration_s) = (end.meta, end.duration_s);
        let done = |report: &Report, job_status: &str| {
            info!(_flatten = %report.done_fields(end.class), duration_s, job_status, "done");
        };
        let failed = |error: &str, error_class: &str| {
            error!(
                error,
                error_class,
                receive_count = meta.receive_count,
                job_status = "fail",
                "record failed"
            );
        };
        match self {
            RecordOutcome::Success(report) => done(report, "done"),
            RecordOutcome::Retryable {
                error_class,
                error,
                report: Some(report),
                ..
            } => {
                done(report, "fail");
                failed(error, error_class);
            }
            RecordOutcome::Retryable {
                error_class,
                error,
                report: None,
                ..
            } => {
                failed(error, error_class);
                info!(status = "failed", duration_s, job_status = "fail", "done");
            }
            RecordOutcome::Permanent { error } => {
                error!(
                    sqs_message_id = meta.sqs_message_id.as_deref().unwrap_or(""),
                    receive_count = meta.receive_count,
                    error = error.as_str(),
                    error_class = "malformed",
                    message_key = end.message_key,
                    job_status = "fail",
                    "malformed message"
                );
                if end.hop.is_some() {
                    info!(
                        status = "malformed",
                        duration_s,
                        job_status = "fail",
                        "done"
                    );
                }
            }
            RecordOutcome::Panic { error } => error!(
                error = error.as_str(),
                error_class = "panic",
                receive_count = meta.receive_count,
                job_status = "fail",
                "record failed: handler panicked"
            ),
            RecordOutcome::Deadline => warn!(
                function = end.function.name(),
                class = end.class,
                sqs_message_id = meta.sqs_message_id.as_deref().unwrap_or(""),
                job_status = "fail",
                error_class = "deadline",
                "record not started: deadline reached"
            ),
            RecordOutcome::DatabaseUnavailable { error_class, error } => error!(
                function = end.function.name(),
                sqs_message_id = meta.sqs_message_id.as_deref().unwrap_or(""),
                receive_count = meta.receive_count,
                error = error.as_str(),
                error_class = error_class.as_str(),
                class = end.class,
                job_status = "fail",
                "database unavailable"
            ),
            // The schema check logged it once for the whole invocation.
            RecordOutcome::DatabaseBusy { .. } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Done, HopLimitReached, Skipped};

    /// A job's result that ended with `status`.
    #[derive(Debug, serde::Serialize)]
    struct Outcome {
        #[serde(skip)]
        status: Status,
    }

    impl Done for Outcome {
        fn status(&self) -> Status {
            self.status
        }
    }

    fn report(status: Status) -> Report {
        Report::new(Outcome { status })
    }

    /// One of every way a record ends, with the counter and batch decision it must
    /// have. The match is exhaustive: a new variant does not compile until it is here.
    fn every_outcome() -> Vec<(RecordOutcome, &'static str, bool)> {
        let retryable = |report| RecordOutcome::Retryable {
            error_class: "db".into(),
            error: "e".into(),
            discard_session: false,
            report,
        };
        let all = vec![
            RecordOutcome::Success(report(Status::Completed)),
            RecordOutcome::Success(report(Status::LimitReached)),
            RecordOutcome::Success(report(Status::MoreWork)),
            RecordOutcome::Success(report(Status::Refused)),
            RecordOutcome::Success(report(Status::Blocked)),
            RecordOutcome::Success(report(Status::Restored)),
            RecordOutcome::Success(report(Status::Stale)),
            RecordOutcome::Success(Report::new(Skipped)),
            RecordOutcome::Success(Report::new(HopLimitReached)),
            retryable(None),
            retryable(Some(report(Status::Stopped))),
            retryable(Some(report(Status::Failed))),
            RecordOutcome::failed(Error::Malformed("m".into())),
            RecordOutcome::Panic { error: "p".into() },
            RecordOutcome::Deadline,
            RecordOutcome::DatabaseUnavailable {
                error_class: "db".into(),
                error: "e".into(),
            },
            RecordOutcome::DatabaseBusy { error: "b".into() },
        ];
        all.into_iter()
            .map(|o| {
                let (counter, item_failure) = match &o {
                    RecordOutcome::Success(r) => match r.status() {
                        Status::Stale => ("outcome_stale", false),
                        Status::Skipped | Status::HopLimitReached => ("outcome_skipped", false),
                        _ => ("outcome_done", false),
                    },
                    RecordOutcome::Retryable { .. } => ("outcome_retryable", true),
                    RecordOutcome::Permanent { .. } => ("outcome_permanent", true),
                    RecordOutcome::Panic { .. } => ("outcome_panic", true),
                    RecordOutcome::Deadline => ("outcome_deadline", true),
                    RecordOutcome::DatabaseUnavailable { .. } => ("outcome_retryable", true),
                    RecordOutcome::DatabaseBusy { .. } => ("outcome_retryable", true),
                };
                (o, counter, item_failure)
            })
            .collect()
    }

    #[test]
    fn every_outcome_maps_to_exactly_one_outcome_counter_and_its_batch_item_decision() {
        let meta = RecordMeta::default();
        for f in [Function::RemoveExpiredMembers, Function::DeleteUser] {
            for (o, counter, item_failure) in every_outcome() {
                let end = Ending {
                    hop: Some(0),
                    ..Ending::undecoded(f, &meta, 0.5)
                };
                let m = o.metrics(&end);
                let ones: Vec<&str> = m
                    .iter()
                    .filter(|(m, v)| m.name.starts_with("outcome_") && *v == 1.0)
                    .map(|(m, _)| m.name)
                    .collect();
                assert_eq!(ones, [counter], "{o:?}");
                let outcomes = m
                    .iter()
                    .filter(|(m, _)| metrics::OUTCOMES.contains(m))
                    .count();
                assert_eq!(outcomes, metrics::OUTCOMES.len(), "every counter, {o:?}");
                let value = |name: &str| m.iter().find(|(m, _)| m.name == name).map(|p| p.1);
                assert_eq!(o.is_item_failure(), item_failure, "{o:?}");
                assert_eq!(o.is_success(), !item_failure, "{o:?}");
                let failed = if item_failure { 1.0 } else { 0.0 };
                assert_eq!(value("records_failed"), Some(failed), "{o:?}");
                assert_eq!(value("records"), Some(1.0), "{o:?}");
                assert_eq!(value("duration_s"), Some(0.5), "{o:?}");
                let run_started = f.cron().is_some().then_some(1.0);
                assert_eq!(value("run_started"), run_started, "{o:?}");
                // What `hk` reports agrees with the batch decision.
                assert_eq!(o.label() == "success", !item_failure, "{o:?}");
                assert_eq!(o.error_class().is_none(), !item_failure, "{o:?}");
                assert_eq!(o.error().is_none(), !item_failure, "{o:?}");
            }
        }
    }

    #[test]
    fn a_failure_asks_for_the_session_reset_its_cause_needs() {
        for (o, _, _) in every_outcome() {
            let want = match &o {
                RecordOutcome::Retryable { .. } => Some(false),
                RecordOutcome::Panic { .. } | RecordOutcome::DatabaseUnavailable { .. } => {
                    Some(true)
                }
                _ => None,
            };
            assert_eq!(o.session_reset(), want, "{o:?}");
        }
        let failed = RecordOutcome::failed(Error::Retryable("blocked".into()));
        assert_eq!(failed.session_reset(), Some(false), "{failed:?}");
        assert_eq!(failed.label(), "retryable");
        assert_eq!(failed.error_class(), Some("retryable"));
        let malformed = RecordOutcome::failed(Error::Malformed("bad".into()));
        assert_eq!(malformed.label(), "permanent");
        assert_eq!(malformed.error_class(), Some("malformed"));
    }

    #[test]
    fn a_retried_report_keeps_its_report_and_its_metrics() {
        let o = RecordOutcome::retry(report(Status::Stopped), &Error::Retryable("x".into()));
        assert_eq!(o.report().map(Report::status), Some(Status::Stopped));
        assert_eq!(o.session_reset(), Some(false));
        assert_eq!(o.label(), "retryable");
    }
}
