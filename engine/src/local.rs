//! Local mode: the driver behind `hk run` (behaviour §11).
//!
//! Owns: delivering messages from the in-process [`LocalQueue`] through the same
//! per-record pipeline Lambda uses ([`deliver`]), one fresh database session per
//! handler run (`OneRecord`; or, with [`Runner::with_kept_sessions`], one session
//! per function kept across runs as a warm Lambda keeps it), virtual time
//! (`now` = `--now` + virtual time elapsed), the 30 s virtual visibility timeout and 5 receives before the local dead-letter list, the
//! `--outbox` files, and `--dry-run` (one invocation inside a transaction that is
//! rolled back, nothing delivered; with `--until-idle` the whole run, in `plan`).
//! Tests drive batches "until idle" through it. What a run does not deliver (dead
//! letters, the continuation of a single invocation, what is left when it stops) is
//! handed on to files by [`handoff`], which also holds the single-invocation mode and
//! the real back-off of `hk`'s runs (behaviour §11: a local run never drops what it
//! sends).
//!
//! With `--chaos` (or a planned crash in tests) every delivery runs behind a
//! [`crate::chaos::CrashGate`] (in `gated`): its session is tapped, its transport
//! gated, and when the gate fires the handler future is dropped mid-flight and the
//! message is not acknowledged; the runner waits until PostgreSQL has ended the dead
//! session (as the visibility timeout would in AWS) and redelivers per the same 30 s /
//! 5 receives.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::chaos::{Chaos, ChaosSpec, ChaosStats, PlannedCrash};
use crate::local_queue::{LocalQueue, SentRecord};
use shared::config::Settings;
use shared::db::{Connector, Session};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::handlers::{self, Dispatch};
use shared::messages::Envelope;
use shared::notify::Notifier;
use shared::queue::OutMessage;
use shared::runtime::{deliver, process_record_with, Invocation, RecordMeta, RecordOutcome};
use tokio_postgres::GenericClient;

mod budget;
pub mod decisions;
mod exit;
mod gated;
pub mod handoff;
mod plan;
mod run;
pub mod side_rows;
pub use budget::{LockBudget, SequenceAdvance};
use exit::{exit_code_of, items_failed_code};
pub use exit::{worse_exit_code, EXIT_ITEMS_FAILED};
pub use handoff::{state_dir, Backoff, DeadLetter, HandedOn, Handoff, Undelivered};
pub use plan::{Plan, TableChange};
use run::{run_of, OneRecord};
pub use run::{sent_json, Run};

/// Virtual visibility timeout of a failed message.
pub const VISIBILITY_S: i64 = 30;
/// Receives before a message is dead-lettered.
pub const MAX_RECEIVES: u32 = 5;

/// Process one record end to end with every function's handler
/// ([`Dispatch`], chosen by `inv.function`, with the dependencies it was given): the
/// runner, the benches and the tests. A function binary instead runs its own handler
/// through `shared::lambda`.
pub async fn process_record<C>(
    dispatch: &Dispatch,
    inv: &Invocation<'_>,
    client: &mut C,
    body: &str,
    meta: &RecordMeta,
) -> RecordOutcome
where
    C: GenericClient + Send + Sync,
{
    process_record_with(dispatch, inv, client, body, meta).await
}

/// Called with every run as it ends ([`Runner::with_observer`]).
type Observer = Box<dyn FnMut(&Run) + Send>;

/// The in-process driver.
pub struct Runner {
    connector: Connector,
    settings: Settings,
    queue: LocalQueue,
    outbox: Option<PathBuf>,
    outbox_seq: u64,
    chaos: Option<Arc<Chaos>>,
    planned: VecDeque<PlannedCrash>,
    /// What [`Runner::with_notifier`] gave (its dry copy serves the dry runs).
    notifier: Option<Arc<Notifier>>,
    /// Every function's job with the dependencies the runner was given.
    dispatch: Dispatch,
    observer: Option<Observer>,
    /// With [`Runner::with_kept_sessions`]: each function's session, kept across runs.
    kept: Option<Vec<(Function, Session)>>,
    /// Where dead letters and undelivered messages are written ([`handoff`]).
    handoff: Option<Handoff>,
    /// The real back-off of a failed delivery ([`handoff`]).
    backoff: Option<Backoff>,
    /// What was handed on so far.
    handed_on: HandedOn,
    /// The message being delivered (handed on if the run stops during it).
    in_flight: Option<crate::local_queue::Pending>,
    /// Indexes in `runs` of the single invocations of [`Runner::run_one`].
    invoked: Vec<usize>,
    /// Sequences the last dry run or plan advanced ([`plan`]).
    sequences: Vec<SequenceAdvance>,
    /// Every run so far, in order.
    pub runs: Vec<Run>,
}

impl Runner {
    /// A runner whose virtual clock starts at `now`.
    pub fn new(connector: Connector, settings: Settings, now: DateTime<Utc>) -> Runner {
        Runner {
            connector,
            settings,
            queue: LocalQueue::new(now),
            outbox: None,
            outbox_seq: 0,
            chaos: None,
            planned: VecDeque::new(),
            notifier: None,
            dispatch: Dispatch::new(),
            observer: None,
            kept: None,
            handoff: None,
            backoff: None,
            handed_on: HandedOn::default(),
            in_flight: None,
            invoked: Vec::new(),
            sequences: Vec::new(),
            runs: Vec::new(),
        }
    }

    /// Keep one database session per function across runs, as a warm Lambda
    /// container does (`shared::db::Session`: pinged before each run, reset after a
    /// retryable failure, dropped when that reset fails or asks for it), instead of a
    /// fresh session per run. The bench measures ours this way: a continuation
    /// arrives seconds after its page, well within a container's warm life. Chaos and
    /// planned crashes keep their fresh, tapped sessions.
    pub fn with_kept_sessions(mut self) -> Runner {
        self.kept = Some(Vec::new());
        self
    }

    /// Call `f` with every run as it ends (`hk`'s progress line on a terminal).
    pub fn with_observer(mut self, f: impl FnMut(&Run) + Send + 'static) -> Runner {
        self.observer = Some(Box::new(f));
        self
    }

    fn record(&mut self, run: &Run) {
        if let Some(f) = self.observer.as_mut() {
            f(run);
        }
        self.runs.push(run.clone());
    }

    /// Arm chaos (`--chaos`): duplicates, reordering and crashes drawn from the seed.
    pub fn with_chaos(mut self, spec: ChaosSpec) -> Runner {
        self.chaos = Some(Arc::new(Chaos::new(spec)));
        self
    }

    /// What chaos did so far (`None` when it is not armed).
    pub fn chaos_stats(&self) -> Option<ChaosStats> {
        self.chaos.as_ref().map(|c| c.stats())
    }

    /// Fault injection: abort a delivery to `function` (any function for `None`) at
    /// the `nth` pass of `point`. Planned crashes are used in order; each one applies
    /// to the matching deliveries until one of them reaches the point and crashes
    /// there, and takes precedence over random chaos.
    pub fn plan_crash(
        &mut self,
        function: Option<Function>,
        point: crate::chaos::CrashPoint,
        nth: u32,
    ) {
        self.planned.push_back(PlannedCrash {
            function,
            point,
            nth,
        });
    }

    fn tapped(&self) -> bool {
        self.chaos.is_some() || !self.planned.is_empty()
    }

    /// Give the B28 functions their instance and delivery means.
    pub fn with_notifier(mut self, notifier: Arc<Notifier>) -> Runner {
        self.dispatch = self
            .dispatch
            .with::<handlers::PatExpiring>(notifier.instance.clone())
            .with::<handlers::DeliverNotification>(notifier.clone());
        self.notifier = Some(notifier);
        self
    }

    /// Give `storage-cleanup` its clients (Gitaly, registry, object storage).
    pub fn with_storage(mut self, storage: Arc<shared::storage::Storage>) -> Runner {
        self.dispatch = self.dispatch.with::<handlers::StorageCleanup>(storage);
        self
    }

    /// The dispatch of a dry run or plan: no email and no web-hook request (behaviour
    /// §11), no storage removed (storage-cleanup re-checks and reports).
    fn dry_dispatch(&self) -> Dispatch {
        let dry = self
            .dispatch
            .clone()
            .with::<handlers::StorageCleanup>(shared::storage::Storage::dry_run());
        match &self.notifier {
            Some(n) => dry.with::<handlers::DeliverNotification>(n.dry_run()),
            None => dry,
        }
    }

    /// Also write every sent message to `dir` (`--outbox`).
    pub fn with_outbox(mut self, dir: PathBuf) -> Result<Runner> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::Config(format!("cannot create outbox `{}`: {e}", dir.display())))?;
        self.outbox = Some(dir);
        Ok(self)
    }

    /// The queue (tests inject send failures and inspect sent messages through it).
    pub fn queue(&self) -> &LocalQueue {
        &self.queue
    }

    /// The virtual clock.
    pub fn now(&self) -> DateTime<Utc> {
        self.queue.now()
    }

    /// The cron message of a cron function at the current virtual time (behaviour §11): hop 0,
    /// a new UUID v4 run id, key `<function>:cron:<now>`.
    pub fn cron_message(&self, function: Function) -> Envelope {
        Envelope::cron(function, &uuid::Uuid::new_v4().to_string(), self.now())
    }

    fn write_outbox(&mut self, sent: &[SentRecord]) -> Result<()> {
        let Some(dir) = &self.outbox else {
            return Ok(());
        };
        for s in sent {
            self.outbox_seq += 1;
            let path = dir.join(format!(
                "{:06}-{}.json",
                self.outbox_seq,
                s.message.receiver.name()
            ));
            let text = serde_json::to_string_pretty(&sent_json(s)).expect("json");
            std::fs::write(&path, text)
                .map_err(|e| Error::Config(format!("cannot write `{}`: {e}", path.display())))?;
        }
        Ok(())
    }

    /// Run `function` once on `body` at the current virtual time, with a fresh session.
    pub async fn invoke(
        &mut self,
        function: Function,
        body: &str,
        receive_count: u32,
    ) -> Result<(Run, RecordOutcome)> {
        if self.tapped() {
            return self.invoke_gated(function, body, receive_count).await;
        }
        let now = self.queue.now();
        let kept = match self.kept.as_mut() {
            None => None,
            Some(sessions) => {
                if !sessions.iter().any(|(f, _)| *f == function) {
                    let session = Session::new(self.connector.clone(), function.name());
                    sessions.push((function, session));
                }
                sessions
                    .iter()
                    .find(|(f, _)| *f == function)
                    .map(|(_, s)| s)
            }
        };
        let inv = Invocation::new(function, now, &self.queue, &self.settings);
        let meta = RecordMeta {
            sqs_message_id: Some(format!("local-{}", self.runs.len() + 1)),
            receive_count,
            aws_request_id: None,
        };
        let before = self.queue.sent_count();
        // Each record is an invocation here, its first.
        let outcome = match kept {
            None => {
                let session = OneRecord::new(&self.connector, function);
                deliver(&self.dispatch, &inv, session, body, &meta, true).await
            }
            Some(session) => {
                // A new invocation: its kept session is pinged.
                session.invocation_started();
                deliver(&self.dispatch, &inv, session, body, &meta, true).await
            }
        };
        self.finish_run(function, now, body, before, outcome)
    }

    /// The end of every delivery: the messages it sent (from queue index `before`)
    /// go to the outbox, and its run is recorded and returned with its outcome.
    fn finish_run(
        &mut self,
        function: Function,
        now: DateTime<Utc>,
        body: &str,
        before: usize,
        outcome: RecordOutcome,
    ) -> Result<(Run, RecordOutcome)> {
        let sent: Vec<SentRecord> = self.queue.sent_since(before);
        self.write_outbox(&sent)?;
        let env = serde_json::from_str::<Value>(body).ok();
        let run = run_of(function, now, env.as_ref(), &outcome, sent);
        self.record(&run);
        Ok((run, outcome))
    }

    /// Put `body` on `function`'s queue and deliver every message, continuation and
    /// child until none is left (`--until-idle`).
    pub async fn run_until_idle(&mut self, function: Function, body: &str) -> Result<()> {
        let env: Envelope = serde_json::from_str(body).unwrap_or_else(|_| Envelope {
            version: 0,
            kind: String::new(),
            message_key: String::new(),
            run_id: String::new(),
            hop: 0,
            issued_at: String::new(),
            payload: Value::Null,
        });
        if env.version == 0 {
            // Unparseable: deliver it once as is, so it fails as malformed.
            let (_, outcome) = self.invoke(function, body, 1).await?;
            let _ = outcome;
            return Ok(());
        }
        self.queue.push(OutMessage::new(function, 0, env));
        self.drain().await
    }

    /// The next delivery: FIFO, or drawn within the reordering window under chaos.
    fn next_pending(&self) -> Option<crate::local_queue::Pending> {
        match &self.chaos {
            Some(c) => match c.spec().reorder {
                Some(w) => self.queue.pop_within(i64::from(w), |n| c.pick(n)),
                None => self.queue.pop(),
            },
            None => self.queue.pop(),
        }
    }

    /// Deliver queued messages until none is left.
    pub async fn drain(&mut self) -> Result<()> {
        self.drain_except(None).await
    }

    /// Deliver queued messages until none is left, except those for `hold`, which
    /// are handed on undelivered ([`Runner::run_one`]). A failed message comes back
    /// after 30 virtual seconds (and its real back-off, [`Runner::with_backoff`]);
    /// after 5 receives it is a dead letter, handed on with its reason.
    async fn drain_except(&mut self, hold: Option<Function>) -> Result<()> {
        while let Some(p) = self.next_pending() {
            if let Some(f) = hold.filter(|f| *f == p.message.receiver) {
                let why = format!(
                    "the continuation of {f}, which a run without --until-idle does not deliver"
                );
                self.undelivered(vec![p.message], &why)?;
                continue;
            }
            // In flight from here: handed on if the run stops while it waits.
            self.in_flight = Some(p.clone());
            self.until_due(&p).await;
            let body = p.message.envelope.to_body();
            let (run, outcome) = self
                .invoke(p.message.receiver, &body, p.receive_count)
                .await?;
            self.in_flight = None;
            if !outcome.is_success() {
                let not_before = self.not_before(&outcome, p.receive_count);
                if self
                    .queue
                    .nack_after(p.clone(), VISIBILITY_S, MAX_RECEIVES, not_before)
                {
                    self.dead_letter(p, &run, &outcome)?;
                }
            }
        }
        Ok(())
    }

    /// One invocation inside a transaction that is rolled back (`--dry-run`): the
    /// function's own transactions become savepoints; nothing is delivered.
    pub async fn dry_run(&mut self, function: Function, body: &str) -> Result<Run> {
        let now = self.queue.now();
        let recorder = LocalQueue::new(now);
        let mut client = self.connector.connect(function.name()).await?;
        let sequences_before = budget::sequences(&client).await?;
        let mut tx = client.transaction().await?;
        let dispatch = self.dry_dispatch();
        let inv = Invocation::new(function, now, &recorder, &self.settings);
        let meta = RecordMeta {
            sqs_message_id: Some("dry-run".into()),
            receive_count: 1,
            aws_request_id: None,
        };
        let outcome = process_record(&dispatch, &inv, &mut tx, body, &meta).await;
        tx.rollback().await?;
        // Session locks taken inside the transaction outlive the rollback.
        client
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .await?;
        self.sequences = budget::advanced(&sequences_before, &budget::sequences(&client).await?);
        let env = serde_json::from_str::<Value>(body).ok();
        let run = run_of(function, now, env.as_ref(), &outcome, recorder.sent());
        self.record(&run);
        Ok(run)
    }

    /// Dead-lettered messages: `(message, last error)`.
    pub fn dead_letters(&self) -> Vec<OutMessage> {
        self.queue.dead().into_iter().map(|p| p.message).collect()
    }

    /// The worst outcome of every run so far as an exit code (2 permanent, 1
    /// retryable, 3 items failed inside a run, 0): for replays of many independent
    /// messages.
    pub fn worst_exit_code(&self) -> i32 {
        if self.runs.iter().any(|r| r.outcome == "permanent") {
            2
        } else if self.runs.iter().any(|r| r.outcome == "retryable") {
            1
        } else {
            items_failed_code(&self.runs)
        }
    }

    /// The exit code of behaviour §11: 2 if a permanent failure is left, 1 if a retryable one
    /// is, else 3 if a run that succeeded counted failed items, else 0. A failure is
    /// "left" when its message was dead-lettered, or when a single invocation
    /// ([`Runner::run_one`]; else the last run) failed.
    pub fn exit_code(&self, single: bool) -> i32 {
        let dead: Vec<String> = self
            .queue
            .dead()
            .iter()
            .map(|p| p.message.envelope.message_key.clone())
            .collect();
        let left = exit_code_of(&self.runs, &dead, false);
        if !single {
            return left;
        }
        let tops: Vec<Run> = if self.invoked.is_empty() {
            self.runs.last().cloned().into_iter().collect()
        } else {
            self.invoked.iter().map(|&i| self.runs[i].clone()).collect()
        };
        worse_exit_code(left, exit_code_of(&tops, &[], true))
    }
}
