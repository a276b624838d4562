//! The queue port (behaviour §9.5).
//!
//! Owns: [`Queue`], the one interface handlers send through (adapters:
//! [`sqs::SqsQueue`], and `engine::local_queue::LocalQueue` for `hk` and tests), the
//! [`OutMessage`] they send, and the naming rule for long-delay schedules.

pub mod sqs;

use async_trait::async_trait;
use sha2::{Digest, Sha256};

use crate::function::Function;
use chrono::{DateTime, Utc};

use crate::messages::{Addressed, Envelope};

/// SQS's largest `DelaySeconds`; longer delays go through one-time schedules.
pub const MAX_SQS_DELAY_S: u32 = 900;

/// Largest number of entries in one `SendMessageBatch`.
pub const SQS_BATCH: usize = 10;

/// A message handed to the transport.
#[derive(Debug, Clone, PartialEq)]
pub struct OutMessage {
    /// The function whose queue receives it.
    pub receiver: Function,
    /// Delay before it becomes visible, in seconds.
    pub delay_s: u32,
    /// The message.
    pub envelope: Envelope,
}

impl OutMessage {
    /// A message for `receiver` after `delay_s` seconds.
    pub fn new(receiver: Function, delay_s: u32, envelope: Envelope) -> Self {
        OutMessage {
            receiver,
            delay_s,
            envelope,
        }
    }

    /// The message of `payload` to its receiver: receiver, message type and delay
    /// from the receiver's row in the function table ([`Addressed`]); `key` and
    /// `run_id` are the sender's.
    pub fn to<P: Addressed>(
        key: String,
        run_id: &str,
        now: DateTime<Utc>,
        payload: &P,
    ) -> OutMessage {
        let receiver = P::RECEIVER;
        let envelope = Envelope::new(payload.kind(), key, run_id, now, payload);
        OutMessage::new(receiver, receiver.delay_s(), envelope)
    }

    /// The same message made visible `delay_s` seconds after sending instead (a
    /// sender staggering its messages).
    pub fn after(mut self, delay_s: u32) -> OutMessage {
        self.delay_s = delay_s;
        self
    }

    /// Whether this message needs a one-time schedule rather than an SQS delay.
    pub fn needs_schedule(&self) -> bool {
        self.delay_s > MAX_SQS_DELAY_S
    }
}

pub use crate::error::QueueError;

/// The transport.
#[async_trait]
pub trait Queue: Send + Sync {
    /// Hand every message to the transport, or fail. Batches (≤ 10 per
    /// `SendMessageBatch`) and schedules are the adapter's business.
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError>;
}

/// Send an outbox in calls of at most [`SQS_BATCH`] messages, stopping at the first
/// failed call (send-then-commit: the caller rolls back on an error). The one place
/// that knows the adapter's batch size; handlers hand over their whole outbox.
pub async fn send_outbox(queue: &dyn Queue, outbox: &[OutMessage]) -> Result<(), QueueError> {
    for part in outbox.chunks(SQS_BATCH) {
        queue.send(part).await?;
    }
    Ok(())
}

/// The name (and client token) of the one-time schedule for a message key:
/// `hk-` + the first 40 hex characters of SHA-256(key) (behaviour §9.5).
pub fn schedule_name(message_key: &str) -> String {
    format!("hk-{}", &schedule_token(message_key))
}

/// The 40-hex-character hash used as the schedule's client token.
pub fn schedule_token(message_key: &str) -> String {
    let digest = Sha256::digest(message_key.as_bytes());
    hex::encode(digest)[..40].to_string()
}
