//! The in-process queue with virtual time (behaviour §11), used by `hk` and tests.
//!
//! Owns: the pending-message heap ordered by (due time, send sequence), the virtual
//! clock, receive counts, the real time before which a failed message is not
//! redelivered (`hk`'s bounded real back-off, behaviour §11), the local dead-letter
//! list and fault injection for sends. It delivers nothing by itself:
//! `local::Runner` pops messages and runs handlers.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};

use shared::queue::{schedule_name, OutMessage, Queue, QueueError};

/// A message waiting in the local queue.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The message as sent.
    pub message: OutMessage,
    /// Virtual time at which it becomes deliverable.
    pub due: DateTime<Utc>,
    /// Send order, the tie-breaker for equal due times.
    pub seq: u64,
    /// How many times it was received so far.
    pub receive_count: u32,
    /// Real time before which it is not redelivered (a failed delivery's back-off).
    pub not_before: Option<Instant>,
}

/// A record of one send, for `--outbox` and reports.
#[derive(Debug, Clone)]
pub struct SentRecord {
    /// The message.
    pub message: OutMessage,
    /// Virtual time of sending.
    pub sent_at: DateTime<Utc>,
    /// The one-time schedule name, for delays over 900 s.
    pub schedule_name: Option<String>,
}

type FailFn = dyn Fn(&OutMessage) -> bool + Send + Sync;

#[derive(Default)]
struct State {
    vnow: Option<DateTime<Utc>>,
    seq: u64,
    pending: BTreeMap<(DateTime<Utc>, u64), Pending>,
    sent: Vec<SentRecord>,
    dead: Vec<Pending>,
    send_calls: u64,
}

/// The in-process queue. Cloning shares the queue.
#[derive(Clone, Default)]
pub struct LocalQueue {
    state: Arc<Mutex<State>>,
    fail: Arc<Mutex<Option<Arc<FailFn>>>>,
}

impl std::fmt::Debug for LocalQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalQueue").finish_non_exhaustive()
    }
}

impl LocalQueue {
    /// An empty queue whose virtual clock starts at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        let q = LocalQueue::default();
        q.state.lock().unwrap().vnow = Some(start);
        q
    }

    /// The current virtual time.
    pub fn now(&self) -> DateTime<Utc> {
        self.state.lock().unwrap().vnow.unwrap_or_else(Utc::now)
    }

    /// Make sends of messages matching `pred` fail (fault injection for tests).
    pub fn fail_when(&self, pred: impl Fn(&OutMessage) -> bool + Send + Sync + 'static) {
        *self.fail.lock().unwrap() = Some(Arc::new(pred));
    }

    /// Stop failing sends.
    pub fn clear_failures(&self) {
        *self.fail.lock().unwrap() = None;
    }

    /// Put a message in the queue as if sent now with its delay.
    pub fn push(&self, message: OutMessage) {
        let mut s = self.state.lock().unwrap();
        let now = s.vnow.unwrap_or_else(Utc::now);
        let due = now + Duration::seconds(i64::from(message.delay_s));
        s.seq += 1;
        let seq = s.seq;
        let schedule = message
            .needs_schedule()
            .then(|| schedule_name(&message.envelope.message_key));
        s.sent.push(SentRecord {
            message: message.clone(),
            sent_at: now,
            schedule_name: schedule,
        });
        s.pending.insert(
            (due, seq),
            Pending {
                message,
                due,
                seq,
                receive_count: 0,
                not_before: None,
            },
        );
    }

    /// Take the next message: the earliest due, then the earliest sent. The virtual
    /// clock jumps forward to its due time if it lies in the future.
    pub fn pop(&self) -> Option<Pending> {
        let mut s = self.state.lock().unwrap();
        let key = *s.pending.keys().next()?;
        let mut p = s.pending.remove(&key)?;
        if s.vnow.is_none_or(|v| p.due > v) {
            s.vnow = Some(p.due);
        }
        p.receive_count += 1;
        Some(p)
    }

    /// Put a second copy of a sent message on the queue, due `extra_delay_s` after the
    /// original would be, without recording a send (chaos: SQS delivers at least once).
    pub fn push_copy(&self, message: OutMessage, extra_delay_s: u32) {
        let mut s = self.state.lock().unwrap();
        let now = s.vnow.unwrap_or_else(Utc::now);
        let due = now + Duration::seconds(i64::from(message.delay_s) + i64::from(extra_delay_s));
        s.seq += 1;
        let seq = s.seq;
        s.pending.insert(
            (due, seq),
            Pending {
                message,
                due,
                seq,
                receive_count: 0,
                not_before: None,
            },
        );
    }

    /// Take a message out of order (chaos: a standard queue does not keep order): one
    /// of the messages due within `window_s` of the earliest due time (or already
    /// due), chosen by `pick` from their count (index 0 is the FIFO head). The virtual
    /// clock never goes back, and no message is delivered before its due time.
    pub fn pop_within(&self, window_s: i64, pick: impl FnOnce(usize) -> usize) -> Option<Pending> {
        let mut s = self.state.lock().unwrap();
        let first = s.pending.keys().next()?.0;
        let vnow = s.vnow.unwrap_or(first);
        let limit = vnow.max(first) + Duration::seconds(window_s);
        let keys: Vec<(DateTime<Utc>, u64)> = s
            .pending
            .keys()
            .take_while(|(due, _)| *due <= limit)
            .copied()
            .collect();
        let key = keys[pick(keys.len()).min(keys.len() - 1)];
        let mut p = s.pending.remove(&key)?;
        if s.vnow.is_none_or(|v| p.due > v) {
            s.vnow = Some(p.due);
        }
        p.receive_count += 1;
        Some(p)
    }

    /// Return a failed message: due again after `visibility_s`, or dead-lettered
    /// once it has been received `max_receives` times. Returns true if dead-lettered.
    pub fn nack(&self, p: Pending, visibility_s: i64, max_receives: u32) -> bool {
        self.nack_after(p, visibility_s, max_receives, None)
    }

    /// [`LocalQueue::nack`], and the message is not redelivered before the real time
    /// `not_before` either (`hk`'s bounded real back-off, behaviour §11).
    pub fn nack_after(
        &self,
        mut p: Pending,
        visibility_s: i64,
        max_receives: u32,
        not_before: Option<Instant>,
    ) -> bool {
        let mut s = self.state.lock().unwrap();
        if p.receive_count >= max_receives {
            s.dead.push(p);
            return true;
        }
        let now = s.vnow.unwrap_or_else(Utc::now);
        p.due = now + Duration::seconds(visibility_s);
        p.not_before = not_before;
        s.seq += 1;
        p.seq = s.seq;
        s.pending.insert((p.due, p.seq), p);
        false
    }

    /// Put a message taken with [`LocalQueue::pop`] back, undelivered: its receive
    /// is not counted, and it is due at once (the clock never goes back).
    pub fn put_back(&self, mut p: Pending) {
        let mut s = self.state.lock().unwrap();
        p.receive_count = p.receive_count.saturating_sub(1);
        s.seq += 1;
        p.seq = s.seq;
        s.pending.insert((p.due, p.seq), p);
    }

    /// Take every message still waiting, in delivery order (handed on when a run
    /// stops before it is idle).
    pub fn take_pending(&self) -> Vec<Pending> {
        let mut s = self.state.lock().unwrap();
        std::mem::take(&mut s.pending).into_values().collect()
    }

    /// Messages still waiting.
    pub fn pending_len(&self) -> usize {
        self.state.lock().unwrap().pending.len()
    }

    /// Every message sent so far, in send order.
    pub fn sent(&self) -> Vec<SentRecord> {
        self.state.lock().unwrap().sent.clone()
    }

    /// How many messages were sent so far, without copying them: a delivery's
    /// starting index for [`LocalQueue::sent_since`].
    pub fn sent_count(&self) -> usize {
        self.state.lock().unwrap().sent.len()
    }

    /// The messages sent from index `from` on, in send order: one delivery's, copied
    /// alone (copying the whole history per delivery made long runs quadratic).
    pub fn sent_since(&self, from: usize) -> Vec<SentRecord> {
        let state = self.state.lock().unwrap();
        state
            .sent
            .get(from..)
            .map(<[_]>::to_vec)
            .unwrap_or_default()
    }

    /// Remove and return the records of messages sent so far.
    pub fn take_sent(&self) -> Vec<SentRecord> {
        std::mem::take(&mut self.state.lock().unwrap().sent)
    }

    /// The dead-letter list.
    pub fn dead(&self) -> Vec<Pending> {
        self.state.lock().unwrap().dead.clone()
    }

    /// How many times `send` was called (each call is one transport round trip).
    pub fn send_calls(&self) -> u64 {
        self.state.lock().unwrap().send_calls
    }
}

#[async_trait]
impl Queue for LocalQueue {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        if messages.is_empty() {
            return Ok(());
        }
        self.state.lock().unwrap().send_calls += 1;
        let fail = self.fail.lock().unwrap().clone();
        if let Some(f) = fail {
            if let Some(m) = messages.iter().find(|m| f(m)) {
                return Err(QueueError(format!(
                    "injected send failure for {}",
                    m.envelope.message_key
                )));
            }
        }
        for m in messages {
            self.push(m.clone());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::function::Function;
    use shared::messages::Envelope;

    fn msg(key: &str, delay: u32) -> OutMessage {
        let t = "2025-03-10T00:00:00Z".parse().unwrap();
        OutMessage::new(
            Function::DeleteUser,
            delay,
            Envelope::new("delete-user.run", key.into(), "r", t, serde_json::json!({})),
        )
    }

    #[tokio::test]
    async fn delivery_is_fifo_by_due_time_then_send_order_and_time_jumps() {
        let start: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let q = LocalQueue::new(start);
        q.send(&[msg("a", 30), msg("b", 0), msg("c", 30), msg("d", 1200)])
            .await
            .unwrap();
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|p| (p.message.envelope.message_key, p.due))
            .collect();
        assert_eq!(order[0].0, "b");
        assert_eq!(order[1].0, "a");
        assert_eq!(order[2].0, "c");
        assert_eq!(order[3].0, "d");
        assert_eq!(q.now(), start + Duration::seconds(1200));
        let sent = q.sent();
        assert!(sent[3].schedule_name.as_deref().unwrap().starts_with("hk-"));
        assert!(sent[0].schedule_name.is_none());
    }

    #[tokio::test]
    async fn a_delivery_reads_its_own_sends_by_index() {
        let q = LocalQueue::new("2025-03-10T00:00:00Z".parse().unwrap());
        q.send(&[msg("a", 0), msg("b", 0)]).await.unwrap();
        let before = q.sent_count();
        assert_eq!(before, 2);
        q.send(&[msg("c", 0)]).await.unwrap();
        let keys: Vec<_> = q
            .sent_since(before)
            .into_iter()
            .map(|s| s.message.envelope.message_key)
            .collect();
        assert_eq!(keys, ["c"]);
        assert!(q.sent_since(3).is_empty() && q.sent_since(9).is_empty());
    }

    #[tokio::test]
    async fn failed_messages_come_back_after_visibility_then_dead_letter() {
        let start: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let q = LocalQueue::new(start);
        q.send(&[msg("a", 0)]).await.unwrap();
        for i in 1..=5 {
            let p = q.pop().unwrap();
            assert_eq!(p.receive_count, i);
            let dead = q.nack(p, 30, 5);
            assert_eq!(dead, i == 5);
        }
        assert!(q.pop().is_none());
        assert_eq!(q.dead().len(), 1);
        assert_eq!(q.now(), start + Duration::seconds(120));
    }

    #[tokio::test]
    async fn out_of_order_pops_stay_within_the_window_and_copies_are_not_sends() {
        let start: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let q = LocalQueue::new(start);
        q.send(&[msg("a", 0), msg("b", 10), msg("c", 100)])
            .await
            .unwrap();
        q.push_copy(msg("a", 0), 5);
        assert_eq!(q.sent().len(), 3, "a copy is not a send");
        // Window 20 s: a, b and the copy of a are candidates, c is not.
        let p = q.pop_within(20, |n| {
            assert_eq!(n, 3);
            2
        });
        assert_eq!(p.unwrap().message.envelope.message_key, "b");
        assert_eq!(q.now(), start + Duration::seconds(10));
        let keys: Vec<String> = std::iter::from_fn(|| q.pop_within(0, |_| 0))
            .map(|p| p.message.envelope.message_key)
            .collect();
        assert_eq!(keys, vec!["a", "a", "c"]);
        assert_eq!(q.now(), start + Duration::seconds(100));
    }

    #[tokio::test]
    async fn a_message_put_back_or_delayed_in_real_time_keeps_its_place_and_count() {
        let start: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let q = LocalQueue::new(start);
        q.send(&[msg("a", 0), msg("b", 10)]).await.unwrap();
        let a = q.pop().unwrap();
        q.put_back(a);
        let a = q.pop().unwrap();
        assert_eq!(
            (a.message.envelope.message_key.as_str(), a.receive_count),
            ("a", 1)
        );
        let later = Instant::now() + std::time::Duration::from_secs(5);
        assert!(!q.nack_after(a, 30, 5, Some(later)));
        let left = q.take_pending();
        let keys: Vec<&str> = left
            .iter()
            .map(|p| p.message.envelope.message_key.as_str())
            .collect();
        assert_eq!(keys, vec!["b", "a"]);
        assert_eq!(left[1].not_before, Some(later));
        assert_eq!(left[0].not_before, None);
        assert_eq!(q.pending_len(), 0);
    }

    #[tokio::test]
    async fn injected_failures_send_nothing() {
        let q = LocalQueue::new(Utc::now());
        q.fail_when(|m| m.envelope.message_key == "b");
        assert!(q.send(&[msg("a", 0), msg("b", 0)]).await.is_err());
        assert_eq!(q.pending_len(), 0);
        q.clear_failures();
        q.send(&[msg("a", 0)]).await.unwrap();
        assert_eq!(q.pending_len(), 1);
    }
}
