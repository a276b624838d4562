//! The handler contract shared by Lambda and `hk` (behaviour §6, §8, §9.6, §9.8).
//!
//! Owns: [`Invocation`] (the injected `now`, the queue, the settings, the monotonic
//! deadline and budgets), [`Report`] (what a handler says it did), [`Handler`] (what
//! serves parsed messages; the implementations are in [`crate::handlers`]) and
//! [`process_record_with`], the one per-record pipeline:
//! parse and validate (envelope and payload), span with the standard fields, `start`
//! line (with the validated cursor only), the hop-limit case for a message received
//! above its function's `MAX_HOPS` (logged, acknowledged, no work, nothing sent),
//! handler under `catch_unwind`, `done` line, outcome. It names no Lambda type: the Lambda glue and
//! the local runner both call it.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use serde::Serialize;
use serde_json::{Map, Value};
use tokio_postgres::GenericClient;
use tracing::{field::Empty, Instrument};

use crate::clock::rfc3339;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::function::Function;
use crate::messages::Envelope;
use crate::metrics::{emit_record_metrics, Metric, OutcomeKind};
use crate::queue::{OutMessage, Queue};

/// The monotonic deadline of one invocation: Lambda's remaining time, or in `hk` the
/// function's timeout measured from the handler's start (behaviour §6).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    end: Instant,
    margin: Duration,
}

impl Deadline {
    /// A deadline `remaining` from now, guarded by `margin`.
    pub fn in_(remaining: Duration, margin: Duration) -> Deadline {
        Deadline {
            end: Instant::now() + remaining,
            margin,
        }
    }

    /// True when less than the margin is left: stop starting new items (behaviour §9.8).
    pub fn reached(&self) -> bool {
        Instant::now() + self.margin >= self.end
    }
}

/// A monotonic time budget (never the injected `now`).
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    start: Instant,
    limit: Duration,
}

impl Budget {
    /// Start a budget of `limit` now.
    pub fn start(limit: Duration) -> Budget {
        Budget {
            start: Instant::now(),
            limit,
        }
    }

    /// True once the budget is used up. A budget of 0 is always exhausted.
    pub fn exhausted(&self) -> bool {
        self.start.elapsed() >= self.limit
    }
}

/// Everything one handler run needs besides the database session.
pub struct Invocation<'a> {
    /// The function being run.
    pub function: Function,
    /// The injected clock value, read once at the start (behaviour §6).
    pub now: DateTime<Utc>,
    /// The transport.
    pub queue: &'a dyn Queue,
    /// Budgets and margins.
    pub settings: &'a Settings,
    /// The deadline guard.
    pub deadline: Deadline,
    /// B28's instance facts and delivery means (`pat-expiring`,
    /// `deliver-notification`); `None` for the other functions.
    pub notifier: Option<&'a crate::notify::Notifier>,
}

impl Invocation<'_> {
    /// `today`: the UTC date of `now`.
    pub fn today(&self) -> chrono::NaiveDate {
        self.now.date_naive()
    }

    /// Send a continuation or re-send unless the hop limit forbids it (behaviour §9.8). Returns
    /// whether it was sent. A send failure is an error (the record is retryable).
    pub async fn continue_with(&self, next: OutMessage) -> Result<bool> {
        let max_hops = u64::from(self.function.max_hops());
        if next.envelope.hop > max_hops {
            tracing::error!(
                hop = next.envelope.hop.saturating_sub(1),
                max_hops,
                "continuation not sent: hop limit reached"
            );
            return Ok(false);
        }
        self.queue.send(std::slice::from_ref(&next)).await?;
        Ok(true)
    }
}

/// A handler's typed `done` result: one `#[derive(Serialize)]` struct per function
/// (or per outcome shape), whose fields are the `done` line's result fields and whose
/// metrics and counters are declared with it. The runner and `hk` read these methods,
/// never the JSON.
pub trait Done: Serialize + std::fmt::Debug + Send + Sync + 'static {
    /// The `status` field of `done`.
    fn status(&self) -> &'static str;
    /// Metrics for this invocation's EMF line (besides the per-record ones of
    /// [`emit_record_metrics`]), from the catalogue ([`crate::metrics`]).
    fn metrics(&self) -> Vec<(Metric, f64)> {
        Vec::new()
    }
    /// The keys GitLab's worker logs with `log_extra_metadata_on_done`, with their
    /// values: the `done` line carries each as `extra.<worker>.<key>`.
    fn gitlab_extras(&self) -> Vec<(&'static str, Value)> {
        Vec::new()
    }
    /// The items this invocation processed, by name, that `hk`'s summary adds up.
    fn counts(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Object-safe view of a [`Done`] (the report holds any function's result).
trait AnyDone: std::fmt::Debug + Send + Sync {
    fn status(&self) -> &'static str;
    fn fields(&self) -> Map<String, Value>;
    fn metrics(&self) -> Vec<(Metric, f64)>;
    fn gitlab_extras(&self) -> Vec<(&'static str, Value)>;
    fn counts(&self) -> Vec<(&'static str, u64)>;
    fn as_any(&self) -> &dyn Any;
}

impl<T: Done> AnyDone for T {
    fn status(&self) -> &'static str {
        Done::status(self)
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
    fn gitlab_extras(&self) -> Vec<(&'static str, Value)> {
        Done::gitlab_extras(self)
    }
    fn counts(&self) -> Vec<(&'static str, u64)> {
        Done::counts(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The `skipped: already running` result (behaviour §9.10): no fields.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Skipped;

impl Done for Skipped {
    fn status(&self) -> &'static str {
        "skipped"
    }
}

/// The hop-limit case on receipt (behaviour §9.8): no work, no fields.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct HopLimitReached;

impl Done for HopLimitReached {
    fn status(&self) -> &'static str {
        "hop_limit_reached"
    }
}

/// A typed [`Done`] result behind a shared pointer: what the local runner keeps of
/// each run and `hk` reads (status, counters, typed access), cheap to clone.
#[derive(Debug, Clone)]
pub struct DoneReport(std::sync::Arc<dyn AnyDone>);

impl DoneReport {
    /// The `status` field of `done`.
    pub fn status(&self) -> &'static str {
        self.0.status()
    }

    /// The typed result, when it is a `T`.
    pub fn get<T: Done>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref::<T>()
    }

    /// Metrics for the invocation's EMF line (besides the per-record ones).
    pub fn metrics(&self) -> Vec<(Metric, f64)> {
        self.0.metrics()
    }

    /// The counters `hk`'s summary adds up.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        self.0.counts()
    }

    /// The result as one JSON object (status first): the `done` line's fields.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), Value::from(self.status()));
        m.extend(self.0.fields());
        Value::Object(m)
    }
}

/// What a handler did: its typed [`Done`] result, and whether the record must
/// still be retried.
#[derive(Debug)]
pub struct Report {
    done: std::sync::Arc<dyn AnyDone>,
    /// Set when the work ended in a way the batch file calls retryable while still
    /// producing a report (the record is then reported as a failure).
    pub retry: Option<Error>,
}

impl Report {
    /// A report of a typed result.
    pub fn new<T: Done>(done: T) -> Report {
        Report {
            done: std::sync::Arc::new(done),
            retry: None,
        }
    }

    /// The same report, to be retried because of `e`.
    pub fn retrying(mut self, e: Error) -> Report {
        self.retry = Some(e);
        self
    }

    /// The `skipped: already running` report (behaviour §9.10).
    pub fn skipped() -> Report {
        tracing::info!("skipped: already running");
        Report::new(Skipped)
    }

    /// The `status` field of `done`.
    pub fn status(&self) -> &'static str {
        self.done.status()
    }

    /// The typed result, when it is a `T`.
    pub fn get<T: Done>(&self) -> Option<&T> {
        self.done.as_any().downcast_ref::<T>()
    }

    /// Metrics for the invocation's EMF line (besides the per-record ones).
    pub fn metrics(&self) -> Vec<(Metric, f64)> {
        self.done.metrics()
    }

    /// GitLab's `log_extra_metadata_on_done` keys and values of this result.
    pub fn gitlab_extras(&self) -> Vec<(&'static str, Value)> {
        self.done.gitlab_extras()
    }

    /// The `done` line's fields: [`Report::to_json`] plus GitLab's
    /// `extra.<worker>.<key>` fields for `class`.
    pub fn done_fields(&self, class: &str) -> Value {
        let mut v = self.to_json();
        let prefix = crate::telemetry::gitlab_extra_prefix(class);
        if let Value::Object(m) = &mut v {
            for (k, x) in self.gitlab_extras() {
                m.insert(format!("{prefix}{k}"), x);
            }
        }
        v
    }

    /// The counters `hk`'s summary adds up.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        self.done.counts()
    }

    /// The report as one JSON object (status first): the `done` line's fields.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("status".into(), Value::from(self.status()));
        m.extend(self.done.fields());
        Value::Object(m)
    }

    /// The typed result alone, shareable (what `hk`'s runner keeps).
    pub fn done(&self) -> DoneReport {
        DoneReport(self.done.clone())
    }
}

/// What serves a function's parsed messages: one function's handler
/// ([`crate::handlers`], what a function binary links) or all of them
/// ([`crate::handlers::Dispatch`]).
pub trait Handler: Sync {
    /// Handle one parsed, validated message of `inv.function`.
    fn handle<C>(
        &self,
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
    ) -> impl Future<Output = Result<Report>> + Send
    where
        C: GenericClient + Send + Sync;
}

/// Facts about a delivered record that the handler does not see.
#[derive(Debug, Clone, Default)]
pub struct RecordMeta {
    /// SQS `messageId` (the batch item identifier).
    pub sqs_message_id: Option<String>,
    /// `ApproximateReceiveCount`.
    pub receive_count: u32,
    /// Lambda's request id, when under Lambda.
    pub aws_request_id: Option<String>,
}

/// How a record ended (behaviour §9.6).
#[derive(Debug)]
pub enum RecordOutcome {
    /// Work done, stale, skipped or hop limit reached: acknowledged.
    Success(Report),
    /// Reported as a batch-item failure; redelivered after the visibility timeout.
    Retryable {
        /// `error_class` of the failure.
        error_class: String,
        /// The error text.
        error: String,
        /// Whether the database session must be dropped (connection lost, panic).
        discard_session: bool,
        /// The report, when the handler produced one.
        report: Option<Report>,
    },
    /// Malformed: reported every time until it reaches the DLQ.
    Permanent {
        /// Why it is malformed.
        error: String,
    },
}

impl RecordOutcome {
    /// Whether the record is acknowledged.
    pub fn is_success(&self) -> bool {
        matches!(self, RecordOutcome::Success(_))
    }
}

fn log_malformed(meta: &RecordMeta, error: &str, key: Option<&str>) {
    tracing::error!(
        sqs_message_id = meta.sqs_message_id.as_deref().unwrap_or(""),
        receive_count = meta.receive_count,
        error,
        error_class = "malformed",
        message_key = key,
        job_status = "fail",
        "malformed message"
    );
}

/// Process one record end to end: the single pipeline behind every function, with
/// `handler` serving the parsed message.
pub async fn process_record_with<H, C>(
    handler: &H,
    inv: &Invocation<'_>,
    client: &mut C,
    body: &str,
    meta: &RecordMeta,
) -> RecordOutcome
where
    H: Handler,
    C: GenericClient + Send + Sync,
{
    let span = tracing::info_span!(
        "record",
        function = inv.function.name(),
        class = inv.function.gitlab_class(),
        run_id = Empty,
        message_key = Empty,
        hop = Empty,
        aws_request_id = meta.aws_request_id.as_deref(),
    );
    async move {
        let started = Instant::now();
        let function = inv.function;
        let env = match Envelope::parse(body, function) {
            Ok(e) => e,
            Err(m) => {
                log_malformed(meta, &m.error, m.message_key.as_deref());
                let d = started.elapsed().as_secs_f64();
                emit_record_metrics(function, OutcomeKind::Permanent, true, d, None, Vec::new());
                return RecordOutcome::Permanent { error: m.error };
            }
        };
        let class = function.gitlab_class_for(&env.kind);
        let span = tracing::Span::current();
        span.record("class", class);
        span.record("run_id", env.run_id.as_str());
        span.record("message_key", env.message_key.as_str());
        span.record("hop", env.hop);
        let run_started = Some(env.hop == 0);
        // Validated by `Envelope::parse` and rebuilt from its type: bounded.
        let cursor = env.validated_cursor().unwrap_or(Value::Null);
        tracing::info!(
            now = %rfc3339(inv.now),
            message_type = env.kind.as_str(),
            job_status = "start",
            _flatten = %serde_json::json!({ "cursor": cursor }),
            "start"
        );
        let max_hops = u64::from(function.max_hops());
        if env.hop > max_hops {
            // Received above the limit (no sender of this bundle sends one): the
            // hop-limit case of behaviour §9.8, before any work, so nothing is sent.
            tracing::error!(
                hop = env.hop,
                max_hops,
                "continuation not sent: hop limit reached"
            );
            let report = Report::new(HopLimitReached);
            let duration_s = started.elapsed().as_secs_f64();
            tracing::info!(_flatten = %report.done_fields(class), duration_s, job_status = "done", "done");
            emit_record_metrics(
                function,
                OutcomeKind::Skipped,
                false,
                duration_s,
                run_started,
                report.metrics(),
            );
            return RecordOutcome::Success(report);
        }
        let result = AssertUnwindSafe(handler.handle(inv, client, &env))
            .catch_unwind()
            .await;
        let duration_s = started.elapsed().as_secs_f64();
        let emit = |kind, failed, report: Option<&Report>| {
            let extra = report.map(Report::metrics).unwrap_or_default();
            emit_record_metrics(function, kind, failed, duration_s, run_started, extra)
        };
        match result {
            Ok(Ok(report)) => {
                let job_status = if report.retry.is_some() { "fail" } else { "done" };
                tracing::info!(_flatten = %report.done_fields(class), duration_s, job_status, "done");
                match report.retry {
                    None => {
                        emit(OutcomeKind::of_status(report.status()), false, Some(&report));
                        RecordOutcome::Success(report)
                    }
                    Some(ref e) => {
                        let (error_class, error) = (e.class().to_string(), e.to_string());
                        tracing::error!(
                            error = error.as_str(),
                            error_class = error_class.as_str(),
                            receive_count = meta.receive_count,
                            job_status = "fail",
                            "record failed"
                        );
                        emit(OutcomeKind::Retryable, true, Some(&report));
                        RecordOutcome::Retryable {
                            error_class,
                            error,
                            discard_session: false,
                            report: Some(report),
                        }
                    }
                }
            }
            Ok(Err(Error::Malformed(e))) => {
                log_malformed(meta, &e, Some(&env.message_key));
                tracing::info!(status = "malformed", duration_s, job_status = "fail", "done");
                emit(OutcomeKind::Permanent, true, None);
                RecordOutcome::Permanent { error: e }
            }
            Ok(Err(e)) => {
                tracing::error!(
                    error = %e,
                    error_class = e.class(),
                    receive_count = meta.receive_count,
                    job_status = "fail",
                    "record failed"
                );
                tracing::info!(status = "failed", duration_s, job_status = "fail", "done");
                emit(OutcomeKind::Retryable, true, None);
                RecordOutcome::Retryable {
                    error_class: e.class().to_string(),
                    error: e.to_string(),
                    discard_session: e.is_connection_lost(),
                    report: None,
                }
            }
            Err(panic) => {
                let msg = crate::telemetry::panic_message(&*panic);
                tracing::error!(
                    error = msg.as_str(),
                    error_class = "panic",
                    receive_count = meta.receive_count,
                    job_status = "fail",
                    "record failed: handler panicked"
                );
                emit(OutcomeKind::Panic, true, None);
                RecordOutcome::Retryable {
                    error_class: "panic".into(),
                    error: msg,
                    discard_session: true,
                    report: None,
                }
            }
        }
    }
    .instrument(span)
    .await
}
