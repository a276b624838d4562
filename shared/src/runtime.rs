//! The handler contract shared by Lambda and `hk` (behaviour §6, §8, §9.6, §9.8).
//!
//! Owns: [`Invocation`] (with its [`Deadline`], [`Budget`] and [`Decisions`]),
//! [`Handler`] and the one hop-limit rule. Its submodules: `pipeline`, the one
//! per-record pipeline ([`deliver`], [`process_record_with`]); `outcome`, how a record
//! ended ([`RecordOutcome`]) and what that decides; `report`, a job's typed result
//! ([`Report`], [`Done`], [`Status`]). It names no Lambda type: the Lambda glue and the
//! local runner both call it.

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use crate::config::Settings;
use crate::error::Result;
use crate::function::Function;
use crate::messages::{Envelope, FromMessage};
use crate::queue::Queue;

mod outcome;
mod pipeline;
mod report;
pub(crate) use outcome::Ending;
pub use outcome::RecordOutcome;
pub use pipeline::{deliver, process_record_with, RecordMeta, RecordSession};
pub use report::{Done, HopLimitReached, Report, Skipped, Status};

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

    /// Handle one decoded, validated message of `inv.function`: acknowledged with its
    /// report ([`RecordOutcome::Success`]), or its report with the error it is still
    /// retried for ([`RecordOutcome::retry`]); an error is the record's failure.
    fn handle<C>(
        &self,
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
        message: Self::Message,
    ) -> impl Future<Output = Result<RecordOutcome>> + Send
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
