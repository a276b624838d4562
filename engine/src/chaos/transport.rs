//! The gated transport: [`GatedQueue`], the local queue behind a crash gate, which
//! fires it after an enqueue and duplicates sent messages under chaos.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Chaos, CrashGate, CrashPoint};
use crate::local_queue::LocalQueue;
use shared::queue::{OutMessage, Queue, QueueError};

/// The transport a handler sees under chaos: the local queue behind a crash gate.
/// After the gate fires a send never returns (the handler is being dropped); a send
/// that went through may be followed by a crash ([`CrashPoint::AfterEnqueue`]) and by
/// duplicates of its messages.
pub struct GatedQueue {
    inner: LocalQueue,
    gate: Arc<CrashGate>,
    chaos: Option<Arc<Chaos>>,
}

impl GatedQueue {
    /// Gate `inner` (a shared handle of the runner's queue).
    pub fn new(inner: LocalQueue, gate: Arc<CrashGate>, chaos: Option<Arc<Chaos>>) -> Self {
        GatedQueue { inner, gate, chaos }
    }
}

#[async_trait]
impl Queue for GatedQueue {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        if messages.is_empty() {
            return Ok(());
        }
        if self.gate.next_action() {
            std::future::pending::<()>().await;
        }
        self.inner.send(messages).await?;
        if let Some(chaos) = &self.chaos {
            for m in messages {
                if let Some(extra) = chaos.duplicate_delay() {
                    self.inner.push_copy(m.clone(), extra);
                }
            }
        }
        if self.gate.hit(CrashPoint::AfterEnqueue) {
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}
