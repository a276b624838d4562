//! The handler contract shared by Lambda and `hk` (behaviour §6, §8, §9.6, §9.8).
//!
//! Owns: [`Invocation`], [`Handler`] and [`process_record_with`], the one per-record
//! pipeline (parse, span, `start` line, the hop-limit case on receipt, the handler
//! under `catch_unwind`, `done` line, outcome); its submodule `report` owns how an
//! invocation ended. It names no Lambda type: the Lambda glue and the local runner
//! both call it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::FutureExt;
use serde_json::Value;
use tokio_postgres::GenericClient;
use tracing::{field::Empty, Instrument};

use crate::clock::rfc3339;
use crate::config::Settings;
use crate::error::{Error, Result};
use crate::function::Function;
use crate::messages::{Envelope, FromMessage};
use crate::metrics::{emit_record_metrics, OutcomeKind};
use crate::queue::Queue;

mod report;
pub use report::{Done, Ended, HopLimitReached, Report, Skipped, Status};

/// The monotonic deadline of one invocation (behaviour §6).
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
    /// Where `hk`'s plan records each decision; `None` in Lambda.
    pub decisions: Option<&'a dyn Decisions>,
}

impl<'a> Invocation<'a> {
    /// An invocation of `function` at `now`, sending through `queue`, with the whole
    /// `timeout` of the function before its deadline unless [`Invocation::with_deadline`]
    /// says otherwise; no decisions recorded.
    pub fn new(
        function: Function,
        now: DateTime<Utc>,
        queue: &'a dyn Queue,
        settings: &'a Settings,
    ) -> Invocation<'a> {
        Invocation {
            function,
            now,
            queue,
            settings,
            deadline: Deadline::in_(function.timeout(), settings.deadline_margin),
            decisions: None,
        }
    }

    /// The same invocation with Lambda's (or `hk`'s) deadline `remaining` from now.
    pub fn with_deadline(mut self, remaining: Duration) -> Invocation<'a> {
        self.deadline = Deadline::in_(remaining, self.settings.deadline_margin);
        self
    }

    /// The same invocation recording each decision in `decisions` (`hk`'s plan).
    pub fn with_decisions(mut self, decisions: &'a dyn Decisions) -> Invocation<'a> {
        self.decisions = Some(decisions);
        self
    }
}

/// One candidate row a handler examined and what it decided, with the rule that
/// decided it: the same names as its log line and `done` counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The function that decided.
    pub function: Function,
    /// The row's table and primary key.
    pub table: &'static str,
    /// The row's `id`.
    pub id: i64,
    /// `removed`, `kept`, `notified`, `destroyed`, …
    pub decision: &'static str,
    /// The rule that decided it (`last_owner`, `no_longer_expired`, `seven_days`, …).
    pub rule: &'static str,
}

/// What records decisions (`hk run --dry-run --until-idle`, docs/parity.md).
pub trait Decisions: Send + Sync {
    /// Record one decision.
    fn record(&self, decision: Decision);
}

impl Invocation<'_> {
    /// Record that this invocation decided `decision` by `rule` for row `id` of `table`.
    pub fn decide(&self, table: &'static str, id: i64, decision: &'static str, rule: &'static str) {
        if let Some(d) = self.decisions {
            let function = self.function;
            d.record(Decision {
                function,
                table,
                id,
                decision,
                rule,
            });
        }
    }

    /// `today`: the UTC date of `now`.
    pub fn today(&self) -> chrono::NaiveDate {
        self.now.date_naive()
    }
}

/// What serves a function's decoded messages: one function's job with its dependencies
/// ([`crate::job::Ready`]), or all of them ([`crate::handlers::Dispatch`]).
pub trait Handler: Sync {
    /// The payload it serves, decoded once on receipt.
    type Message: FromMessage;

    /// Handle one decoded, validated message of `inv.function`.
    fn handle<C>(
        &self,
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
        message: Self::Message,
    ) -> impl Future<Output = Result<Ended>> + Send
    where
        C: GenericClient + Send + Sync;
}

/// The one hop-limit rule (behaviour §9.8): a message of hop `hop` is beyond
/// `function`'s `MAX_HOPS`; then it is logged once, with the hop the run is at (`at`).
/// `job::drive` asks it before sending a continuation or re-send, the pipeline on
/// receipt (a message no sender of this bundle sends).
pub(crate) fn beyond_hop_limit(function: Function, hop: u64, at: u64) -> bool {
    let max_hops = u64::from(function.max_hops());
    if hop <= max_hops {
        return false;
    }
    tracing::error!(
        hop = at,
        max_hops,
        "continuation not sent: hop limit reached"
    );
    true
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

/// Process one record end to end, with `handler` serving the parsed message.
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
        let (env, message) = match Envelope::decode_as::<H::Message>(body, function) {
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
        // Validated on decoding and rebuilt from its type: bounded.
        let cursor = message.cursor().unwrap_or(Value::Null);
        tracing::info!(
            now = %rfc3339(inv.now),
            message_type = env.kind.as_str(),
            job_status = "start",
            _flatten = %serde_json::json!({ "cursor": cursor }),
            "start"
        );
        if beyond_hop_limit(function, env.hop, env.hop) {
            // Received above the limit (no sender of this bundle sends one): the
            // hop-limit case of behaviour §9.8, before any work, so nothing is sent.
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
        let result = AssertUnwindSafe(handler.handle(inv, client, &env, message))
            .catch_unwind()
            .await;
        let duration_s = started.elapsed().as_secs_f64();
        let emit = |kind, failed, report: Option<&Report>| {
            let extra = report.map(Report::metrics).unwrap_or_default();
            emit_record_metrics(function, kind, failed, duration_s, run_started, extra)
        };
        match result {
            Ok(Ok(Ended { report, retry })) => {
                let job_status = if retry.is_some() { "fail" } else { "done" };
                tracing::info!(_flatten = %report.done_fields(class), duration_s, job_status, "done");
                match retry {
                    None => {
                        emit(report.status().outcome(), false, Some(&report));
                        RecordOutcome::Success(report)
                    }
                    Some(e) => {
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
