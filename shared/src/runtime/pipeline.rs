//! The per-record pipeline, the same code in Lambda and in `hk run` (behaviour §6,
//! §7.1, §9.6, §9.8).
//!
//! Owns: [`deliver`], one record's delivery (not started past the deadline, its
//! database session checked out, processed, the session reset its outcome asks
//! for), the [`RecordSession`] it checks out of (Lambda's kept [`Session`]; `hk`'s
//! runner also brings a session of one record), [`process_record_with`] (decode once,
//! the record's span, its `start` line, the hop-limit case on receipt, the handler
//! under `catch_unwind`) and [`RecordMeta`]. Every way a record ends is a
//! [`RecordOutcome`], finished (its lines and its EMF line) exactly once.

use std::future::Future;
use std::ops::DerefMut;
use std::panic::AssertUnwindSafe;
use std::time::Instant;

use futures::FutureExt;
use serde_json::Value;
use tokio_postgres::GenericClient;
use tracing::{field::Empty, Instrument};

use super::outcome::{Ending, RecordOutcome};
use super::report::{HopLimitReached, Report};
use super::{beyond_hop_limit, Handler, Invocation};
use crate::clock::rfc3339;
use crate::db::{Checkout, Session};
use crate::error::Result;
use crate::messages::{Envelope, FromMessage};

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

/// Where a delivery's database session comes from: Lambda's [`Session`], kept across
/// records and warm invocations; `hk`'s runner also brings a session of one record
/// (fresh, or tapped by chaos), which it drops afterwards.
pub trait RecordSession: Send {
    /// The client a record runs on.
    type Client: GenericClient + Send + Sync;
    /// A checked-out client.
    type Checkout<'s>: DerefMut<Target = Self::Client> + Send
    where
        Self: 's;

    /// Check a live client out; an error ends the record as
    /// [`RecordOutcome::DatabaseUnavailable`].
    fn checkout(&mut self) -> impl Future<Output = Result<Self::Checkout<'_>>> + Send;

    /// After a record whose outcome asks for it ([`RecordOutcome::session_reset`]):
    /// roll back and release every session lock, or drop the session when `discard`.
    fn reset(&mut self, discard: bool) -> impl Future<Output = ()> + Send;
}

impl RecordSession for &Session {
    type Client = tokio_postgres::Client;
    type Checkout<'s>
        = Checkout<'s>
    where
        Self: 's;

    async fn checkout(&mut self) -> Result<Checkout<'_>> {
        Session::client(self).await
    }

    async fn reset(&mut self, discard: bool) {
        Session::reset(self, discard).await
    }
}

/// Deliver one record to `handler`, as Lambda's glue and `hk`'s runner both do: a
/// record after the invocation's first (`first`: none started before it) left at the
/// deadline is not started (back to the queue rather than cut off with the whole
/// batch by Lambda's timeout; the first always is: the progress rule, behaviour
/// §9.8); a session that cannot be checked out fails the record, retryable;
/// otherwise [`process_record_with`]; then the session is reset when the outcome asks
/// for it (behaviour §7.1). What it returns decides the record's batch-item failure
/// ([`RecordOutcome::is_item_failure`]).
pub async fn deliver<H, S>(
    handler: &H,
    inv: &Invocation<'_>,
    mut session: S,
    body: &str,
    meta: &RecordMeta,
    first: bool,
) -> RecordOutcome
where
    H: Handler,
    S: RecordSession,
{
    let function = inv.function;
    if !first && inv.deadline.reached() {
        let outcome = RecordOutcome::Deadline;
        outcome.finish(&Ending::undecoded(function, meta, 0.0));
        return outcome;
    }
    let started = Instant::now();
    let outcome = match session.checkout().await {
        Ok(mut client) => process_record_with(handler, inv, &mut *client, body, meta).await,
        Err(e) => {
            let outcome = RecordOutcome::DatabaseUnavailable {
                error_class: e.class().into(),
                error: e.to_string(),
            };
            let elapsed = started.elapsed().as_secs_f64();
            outcome.finish(&Ending::undecoded(function, meta, elapsed));
            outcome
        }
    };
    if let Some(discard) = outcome.session_reset() {
        session.reset(discard).await;
    }
    outcome
}

/// Process one record end to end on `client`, with `handler` serving the parsed
/// message: its span (`function`, `class`, `run_id`, `message_key`, `hop`), its
/// `start` line, the hop-limit case on receipt, the handler under `catch_unwind`,
/// and its end ([`RecordOutcome`]: its lines, then its EMF line).
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
                let outcome = RecordOutcome::Permanent { error: m.error };
                let end = Ending {
                    message_key: m.message_key.as_deref(),
                    ..Ending::undecoded(function, meta, started.elapsed().as_secs_f64())
                };
                outcome.finish(&end);
                return outcome;
            }
        };
        let class = function.gitlab_class_for(&env.kind);
        let span = tracing::Span::current();
        span.record("class", class);
        span.record("run_id", env.run_id.as_str());
        span.record("message_key", env.message_key.as_str());
        span.record("hop", env.hop);
        // Validated on decoding and rebuilt from its type: bounded.
        let cursor = message.cursor().unwrap_or(Value::Null);
        tracing::info!(
            now = %rfc3339(inv.now),
            message_type = env.kind.as_str(),
            job_status = "start",
            _flatten = %serde_json::json!({ "cursor": cursor }),
            "start"
        );
        let outcome = if beyond_hop_limit(function, env.hop, env.hop) {
            // Received above the limit (no sender of this bundle sends one): the
            // hop-limit case of behaviour §9.8, before any work, so nothing is sent.
            RecordOutcome::Success(Report::new(HopLimitReached))
        } else {
            match AssertUnwindSafe(handler.handle(inv, client, &env, message))
                .catch_unwind()
                .await
            {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(e)) => RecordOutcome::failed(e),
                Err(panic) => RecordOutcome::Panic {
                    error: crate::telemetry::panic_message(&*panic),
                },
            }
        };
        outcome.finish(&Ending {
            function,
            class,
            meta,
            message_key: Some(&env.message_key),
            hop: Some(env.hop),
            duration_s: started.elapsed().as_secs_f64(),
        });
        outcome
    }
    .instrument(span)
    .await
}
