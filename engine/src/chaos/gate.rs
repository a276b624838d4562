//! The named crash points ([`CrashPoint`]), the per-delivery [`CrashGate`] that
//! fires at one of them, and the deterministic [`PlannedCrash`] of tests.
//! Once a gate fires it stays fired.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use shared::function::Function;

/// Where a handler can be aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CrashPoint {
    /// Before `START TRANSACTION` reaches the database.
    BeforeBegin,
    /// Inside a transaction, before its `COMMIT` is sent: the transaction rolls back
    /// (after any message it sent: send-then-commit).
    BeforeCommit,
    /// After a `COMMIT` completed, before the handler's next action (a statement, a
    /// send, or the end of the handler).
    AfterCommit,
    /// Before the n-th statement of the invocation (inside or outside a transaction).
    Statement,
    /// Right after the transport accepted a send.
    AfterEnqueue,
    /// After the handler finished, before the message is acknowledged.
    BeforeAck,
}

impl CrashPoint {
    /// Every crash point.
    pub const ALL: [CrashPoint; 6] = [
        CrashPoint::BeforeBegin,
        CrashPoint::BeforeCommit,
        CrashPoint::AfterCommit,
        CrashPoint::Statement,
        CrashPoint::AfterEnqueue,
        CrashPoint::BeforeAck,
    ];

    /// The point's name in logs and summaries.
    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::BeforeBegin => "before-begin",
            CrashPoint::BeforeCommit => "before-commit",
            CrashPoint::AfterCommit => "after-commit",
            CrashPoint::Statement => "statement",
            CrashPoint::AfterEnqueue => "after-enqueue",
            CrashPoint::BeforeAck => "before-ack",
        }
    }

    pub(super) fn index(self) -> usize {
        CrashPoint::ALL
            .iter()
            .position(|p| *p == self)
            .expect("listed")
    }

    /// The largest ordinal a random plan picks for this point near the start of a
    /// handler: statements are counted in tens, transactions and sends in a few.
    pub(super) fn max_nth(self) -> u32 {
        match self {
            CrashPoint::Statement => 12,
            CrashPoint::BeforeAck => 1,
            _ => 4,
        }
    }

    /// The largest ordinal of a deep plan (a page of 1000 members is 1000
    /// transactions and some 8000 statements).
    pub(super) fn max_deep_nth(self) -> u32 {
        match self {
            CrashPoint::Statement => 8000,
            CrashPoint::BeforeAck => 1,
            CrashPoint::AfterEnqueue => 100,
            _ => 1000,
        }
    }
}

impl fmt::Display for CrashPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The crash switch of one delivery: counts the crash points the handler passes and
/// fires at the planned one. Once fired it stays fired.
pub struct CrashGate {
    target: Option<(CrashPoint, u32)>,
    armed: AtomicBool,
    /// A COMMIT went out: the next action (statement, send or ack) passes
    /// [`CrashPoint::AfterCommit`] first.
    committed: AtomicBool,
    counts: Mutex<[u32; 6]>,
    fired: watch::Sender<Option<CrashPoint>>,
}

impl fmt::Debug for CrashGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CrashGate")
            .field("target", &self.target)
            .field("fired", &self.fired())
            .finish()
    }
}

impl CrashGate {
    /// A gate that fires at the `nth` pass of `point` (never, for `None`). It counts
    /// nothing until [`CrashGate::arm`] is called (session setup is not the handler's).
    pub fn new(target: Option<(CrashPoint, u32)>) -> Arc<CrashGate> {
        Arc::new(CrashGate {
            target,
            armed: AtomicBool::new(false),
            committed: AtomicBool::new(false),
            counts: Mutex::new([0; 6]),
            fired: watch::channel(None).0,
        })
    }

    /// Start counting.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// The handler passes `point`. True when the handler must stop here: the gate
    /// fires now, or has fired before.
    pub fn hit(&self, point: CrashPoint) -> bool {
        if self.fired().is_some() {
            return true;
        }
        if !self.armed.load(Ordering::SeqCst) {
            return false;
        }
        let n = {
            let mut c = self.counts.lock().unwrap();
            c[point.index()] += 1;
            c[point.index()]
        };
        if self.target == Some((point, n)) {
            self.fired.send_replace(Some(point));
            return true;
        }
        false
    }

    /// A COMMIT was sent (and the handler waits for it to complete before it does
    /// anything else).
    pub fn commit_sent(&self) {
        if self.armed.load(Ordering::SeqCst) {
            self.committed.store(true, Ordering::SeqCst);
        }
    }

    /// The handler is about to act (a statement, a send, the ack): if a COMMIT
    /// completed since its last action, it passes [`CrashPoint::AfterCommit`] here.
    /// True when the handler must stop.
    pub fn next_action(&self) -> bool {
        if self.committed.swap(false, Ordering::SeqCst) {
            return self.hit(CrashPoint::AfterCommit);
        }
        self.fired().is_some()
    }

    /// The point where the gate fired, if it did.
    pub fn fired(&self) -> Option<CrashPoint> {
        *self.fired.borrow()
    }

    /// Wait until the gate fires.
    pub async fn wait(&self) -> CrashPoint {
        let mut rx = self.fired.subscribe();
        let p = *rx
            .wait_for(Option::is_some)
            .await
            .expect("the sender lives as long as the gate");
        p.expect("waited for Some")
    }
}

/// A crash planned for the next delivery to a function (deterministic fault
/// injection for tests; consumed when it is used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedCrash {
    /// The function whose next delivery crashes (any function for `None`).
    pub function: Option<Function>,
    /// Where.
    pub point: CrashPoint,
    /// At which pass of the point (1 = the first).
    pub nth: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unarmed_gate_counts_nothing_and_a_fired_gate_stays_fired() {
        let gate = CrashGate::new(Some((CrashPoint::Statement, 1)));
        assert!(!gate.hit(CrashPoint::Statement));
        gate.arm();
        assert!(gate.hit(CrashPoint::Statement));
        assert_eq!(gate.fired(), Some(CrashPoint::Statement));
        assert!(gate.hit(CrashPoint::BeforeBegin));
    }
}
