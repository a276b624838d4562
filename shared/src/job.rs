//! The job protocol: what a function's handler is, and the one driver that runs it
//! (behaviour §9.8, §9.10).
//!
//! Owns: [`Job`] (a function's payload, outcome and dependency types, its overlap key
//! and its one `run`), [`FromConfig`] (how a job's dependencies are built once at cold
//! start), [`Ready`] (a job with its dependencies: what a binary serves), [`Step`] (how
//! a run ends), [`Overlap`], and [`drive`], the only code that
//! takes and releases an overlap lock, builds a continuation or re-send, checks the
//! hop limit before sending one, and turns a step into the typed [`Report`]. Two rules
//! hold by construction here: the overlap lock is released before any continuation
//! is sent, on error paths too, and a cron function has exactly one overlap guard.

use std::future::Future;

use tokio_postgres::GenericClient;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::function::Function;
use crate::locks;
use crate::messages::{Envelope, FromMessage};
use crate::queue::OutMessage;
use crate::runtime::{beyond_hop_limit, Done, Handler, Invocation, RecordOutcome, Report, Skipped};

/// Which overlap lock (a session-level advisory try-lock) guards a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Overlap {
    /// None: every message runs.
    None,
    /// One run of the function at a time (behaviour §9.10): `function:<name>`.
    Function,
    /// One run per key derived from the payload (e.g. `group-destroy:<group_id>`).
    Key(String),
}

/// What the next message of a run that goes on carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Next<P> {
    /// A continuation: same run, `hop + 1`, key `<function>:<run_id>:<hop+1>`, this
    /// payload (its cursor).
    Payload(P),
    /// A re-send: the same key and payload, `hop + 1`.
    Resend,
}

/// How one run of a job ended.
#[derive(Debug)]
pub enum Step<O, P> {
    /// The work of the message ended here.
    Done(O),
    /// The run goes on: [`drive`] sends `next` after `delay_s` seconds.
    Continue {
        /// What this invocation did.
        outcome: O,
        /// The next message.
        next: Next<P>,
        /// Its delay.
        delay_s: u32,
    },
    /// The work failed in a way a later attempt may not: [`drive`] re-sends the
    /// message after the next delay of the function's back-off schedule (its row's
    /// `backoff_s`, one per hop); past the schedule the record is retried as
    /// [`Step::Retry`] and reaches the DLQ.
    Backoff {
        /// What this invocation did.
        outcome: O,
        /// Why it failed.
        error: Error,
    },
    /// The record must be retried although the run produced a result.
    Retry {
        /// What this invocation did.
        outcome: O,
        /// Why it is retried.
        error: Error,
    },
}

impl<O, P> Step<O, P> {
    /// `Done`, or `Continue` with the payload `next` after `delay_s` when there is one.
    pub fn then(outcome: O, next: Option<P>, delay_s: u32) -> Step<O, P> {
        match next {
            None => Step::Done(outcome),
            Some(p) => Step::Continue {
                outcome,
                next: Next::Payload(p),
                delay_s,
            },
        }
    }
}

/// A function's handler: its payload, its outcome, its overlap key and its work.
pub trait Job: Default + Send + Sync + 'static {
    /// The function it serves.
    const FUNCTION: Function;
    /// The log line when the overlap lock is held elsewhere.
    const BUSY: &'static str = "skipped: already running";
    /// The payload it receives (and continues with).
    type Payload: FromMessage;
    /// Its `done` result.
    type Outcome: Done;
    /// What it needs besides the database and the queue (B28's instance or delivery
    /// means, `storage-cleanup`'s clients; `()` for most), built once at cold start
    /// ([`FromConfig::build`]) and passed to every [`Job::run`].
    type Deps: FromConfig;

    /// The lock that keeps two runs apart: by default the function's own for a cron
    /// function (one overlap guard per cron, behaviour §9.10), none for a child.
    fn overlap(payload: &Self::Payload) -> Overlap {
        let _ = payload;
        match Self::FUNCTION.cron() {
            Some(_) => Overlap::Function,
            None => Overlap::None,
        }
    }

    /// The result when the overlap lock is held elsewhere.
    fn busy(payload: &Self::Payload) -> Report {
        let _ = payload;
        Report::new(Skipped)
    }

    /// Called once the continuation or re-send of `outcome` was sent as hop `hop`.
    fn continuing(outcome: &Self::Outcome, hop: u64) {
        let _ = (outcome, hop);
    }

    /// The work of one message, under the overlap lock.
    fn run<C>(
        inv: &Invocation<'_>,
        deps: &Self::Deps,
        client: &mut C,
        env: &Envelope,
        payload: Self::Payload,
    ) -> impl Future<Output = Result<Step<Self::Outcome, Self::Payload>>> + Send
    where
        C: GenericClient + Send + Sync;
}

/// Run job `J` on one decoded payload: take its overlap lock, run it, release the lock,
/// send the continuation or re-send (unless the hop limit forbids it), and report.
pub async fn drive<J, C>(
    inv: &Invocation<'_>,
    deps: &J::Deps,
    client: &mut C,
    env: &Envelope,
    payload: J::Payload,
) -> Result<RecordOutcome>
where
    J: Job,
    C: GenericClient + Send + Sync,
{
    // The receiver was checked once, on decoding (`Envelope::decode_as`): the message
    // type is one `inv.function` accepts, and its payload is `J`'s.
    debug_assert_eq!(inv.function, J::FUNCTION);
    let lock = match J::overlap(&payload) {
        Overlap::None => None,
        Overlap::Function => Some(locks::function_key(J::FUNCTION.name())),
        Overlap::Key(k) => Some(k),
    };
    if let Some(lock) = &lock {
        if !locks::try_session_lock(&*client, lock).await? {
            tracing::info!("{}", J::BUSY);
            return Ok(J::busy(&payload).into());
        }
    }
    let result = J::run(inv, deps, client, env, payload).await;
    // Released before any continuation is sent, on error paths too (behaviour §9.10).
    let unlocked = match &lock {
        Some(lock) => locks::session_unlock(&*client, lock).await,
        None => Ok(()),
    };
    let step = match result? {
        Step::Backoff { outcome, error } => {
            let hop = usize::try_from(env.hop).unwrap_or(usize::MAX);
            match J::FUNCTION.backoff_s().get(hop) {
                Some(&delay_s) => Step::Continue {
                    outcome,
                    next: Next::Resend,
                    delay_s,
                },
                None => Step::Retry { outcome, error },
            }
        }
        step => step,
    };
    unlocked?;
    Ok(match step {
        Step::Done(outcome) => Report::new(outcome).into(),
        Step::Retry { outcome, error } | Step::Backoff { outcome, error } => {
            RecordOutcome::retry(Report::new(outcome), &error)
        }
        Step::Continue {
            outcome,
            next,
            delay_s,
        } => {
            let envelope = match next {
                Next::Payload(p) => env.continuation(J::FUNCTION, inv.now, p.payload_value()),
                Next::Resend => env.resend(inv.now),
            };
            let hop = envelope.hop;
            if send_continuation(inv, OutMessage::new(J::FUNCTION, delay_s, envelope)).await? {
                J::continuing(&outcome, hop);
            }
            let status = outcome.continued_status();
            Report::with_status(outcome, status).into()
        }
    })
}

/// What a job needs, built once per execution environment from the configuration
/// (secrets behind ARNs read through `aws`). A function binary builds its own job's
/// only, so it links no other job's clients.
pub trait FromConfig: Sized + Send + Sync + 'static {
    /// Build it at cold start; a misconfiguration is an error naming the variable.
    fn build(
        cfg: &Config,
        aws: &aws_config::SdkConfig,
    ) -> impl Future<Output = Result<Self>> + Send;

    /// What `hk` has without any configuration of its own: nothing needed is ready,
    /// anything else is given by `hk` ([`crate::handlers::Dispatch::with`]).
    fn unconfigured() -> Option<Self> {
        None
    }
}

/// Most jobs need nothing besides the database and the queue.
impl FromConfig for () {
    async fn build(_: &Config, _: &aws_config::SdkConfig) -> Result<()> {
        Ok(())
    }

    fn unconfigured() -> Option<()> {
        Some(())
    }
}

/// A job with its dependencies: the handler a function binary serves.
pub struct Ready<J: Job> {
    deps: J::Deps,
}

impl<J: Job> Ready<J> {
    /// Job `J` with `deps`.
    pub fn new(deps: J::Deps) -> Ready<J> {
        Ready { deps }
    }
}

impl<J: Job> Handler for Ready<J> {
    type Message = J::Payload;

    fn handle<C>(
        &self,
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
        message: J::Payload,
    ) -> impl Future<Output = Result<RecordOutcome>> + Send
    where
        C: GenericClient + Send + Sync,
    {
        drive::<J, C>(inv, &self.deps, client, env, message)
    }
}

/// Send a continuation or re-send unless the hop limit forbids it (behaviour §9.8);
/// whether it was sent. A send failure is an error (the record is retryable).
async fn send_continuation(inv: &Invocation<'_>, next: OutMessage) -> Result<bool> {
    let hop = next.envelope.hop;
    if beyond_hop_limit(inv.function, hop, hop.saturating_sub(1)) {
        return Ok(false);
    }
    inv.queue.send(std::slice::from_ref(&next)).await?;
    Ok(true)
}
