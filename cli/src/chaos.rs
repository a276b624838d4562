//! Chaos and fault injection for local runs (`hk run … --until-idle --chaos …`, tests).
//!
//! Owns: the chaos specification ([`ChaosSpec`]: seed, duplicate rate, reordering,
//! crash rate), the seeded random source that decides every perturbation
//! ([`Chaos`], ChaCha8, so a seed replays the same run), the named crash points
//! ([`CrashPoint`]), the per-delivery [`CrashGate`] that fires at one of them, the
//! wire tap ([`TappedStream`]) that sees the PostgreSQL frontend protocol of a
//! handler's session and fires the gate before a transaction starts, before a COMMIT
//! is sent, after a COMMIT completed or at a statement, and the gated transport
//! ([`GatedQueue`]) that fires it after an enqueue and duplicates sent messages.
//!
//! A crash is real: once the gate fires, the tap refuses every further byte (the
//! socket closes, so PostgreSQL rolls back the open transaction and releases the
//! session's advisory locks, as when a Lambda environment dies), the gated queue
//! never returns, and the local runner drops the handler future at once and does not
//! acknowledge the message, which comes back after the visibility timeout.
//!
//! Nothing here is used unless a chaos specification or a fault plan is armed on a
//! [`crate::local::Runner`]: Lambda mode and plain `hk run` never name this module's
//! types, and handlers contain no fault hooks of their own.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;

use crate::local::MAX_RECEIVES;
use crate::local_queue::LocalQueue;
use shared::function::Function;
use shared::queue::{OutMessage, Queue, QueueError};

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

    fn index(self) -> usize {
        CrashPoint::ALL
            .iter()
            .position(|p| *p == self)
            .expect("listed")
    }

    /// The largest ordinal a random plan picks for this point near the start of a
    /// handler: statements are counted in tens, transactions and sends in a few.
    fn max_nth(self) -> u32 {
        match self {
            CrashPoint::Statement => 12,
            CrashPoint::BeforeAck => 1,
            _ => 4,
        }
    }

    /// The largest ordinal of a deep plan (a page of 1000 members is 1000
    /// transactions and some 8000 statements).
    fn max_deep_nth(self) -> u32 {
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

/// What `--chaos` asks for: `seed=N,duplicate=0.3,reorder,crash=0.1`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChaosSpec {
    /// Seed of the random source; the same seed on the same data replays the run.
    pub seed: u64,
    /// Probability that a sent message is delivered a second time.
    pub duplicate: f64,
    /// Reordering window in seconds: a delivery is drawn among the messages due within
    /// this window of the earliest one (never before its own due time). `None`: FIFO.
    pub reorder: Option<u32>,
    /// Probability that a delivery is aborted at a random crash point.
    pub crash: f64,
}

/// The reordering window of a bare `reorder` flag.
pub const DEFAULT_REORDER_WINDOW_S: u32 = 60;

impl Default for ChaosSpec {
    fn default() -> Self {
        ChaosSpec {
            seed: 0,
            duplicate: 0.0,
            reorder: None,
            crash: 0.0,
        }
    }
}

impl FromStr for ChaosSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut spec = ChaosSpec::default();
        let prob = |k: &str, v: &str| -> Result<f64, String> {
            let p: f64 = v
                .parse()
                .map_err(|_| format!("`{k}` needs a probability, got `{v}`"))?;
            if (0.0..=1.0).contains(&p) {
                Ok(p)
            } else {
                Err(format!("`{k}` must lie between 0 and 1, got {p}"))
            }
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (part, None),
            };
            match (k, v) {
                ("seed", Some(v)) => {
                    spec.seed = v
                        .parse()
                        .map_err(|_| format!("`seed` needs an unsigned integer, got `{v}`"))?
                }
                ("duplicate", Some(v)) => spec.duplicate = prob(k, v)?,
                ("crash", Some(v)) => spec.crash = prob(k, v)?,
                ("reorder", None) => spec.reorder = Some(DEFAULT_REORDER_WINDOW_S),
                ("reorder", Some(v)) => {
                    spec.reorder = Some(v.parse().map_err(|_| {
                        format!("`reorder` takes a window in seconds, got `{v}`")
                    })?)
                }
                _ => {
                    return Err(format!(
                        "unknown chaos setting `{part}` (known: seed=N, duplicate=P, reorder[=S], crash=P)"
                    ))
                }
            }
        }
        Ok(spec)
    }
}

impl fmt::Display for ChaosSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seed={},duplicate={}", self.seed, self.duplicate)?;
        if let Some(w) = self.reorder {
            write!(f, ",reorder={w}")?;
        }
        write!(f, ",crash={}", self.crash)
    }
}

/// What chaos did during a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChaosStats {
    /// Messages delivered to a handler (every receive counts).
    pub deliveries: u64,
    /// Extra copies of sent messages put on the queue.
    pub duplicated: u64,
    /// Deliveries that were not the queue's FIFO head.
    pub reordered: u64,
    /// Handlers aborted, by crash point.
    pub crashes: BTreeMap<CrashPoint, u64>,
}

impl ChaosStats {
    /// Every crash, whatever its point.
    pub fn crashes_total(&self) -> u64 {
        self.crashes.values().sum()
    }

    /// The statistics as one JSON object.
    pub fn to_json(&self) -> serde_json::Value {
        let by_point: serde_json::Map<String, serde_json::Value> = self
            .crashes
            .iter()
            .map(|(p, n)| (p.name().to_string(), (*n).into()))
            .collect();
        serde_json::json!({
            "deliveries": self.deliveries,
            "duplicated": self.duplicated,
            "reordered": self.reordered,
            "crashes": self.crashes_total(),
            "crashes_by_point": by_point,
        })
    }
}

impl fmt::Display for ChaosStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deliveries={} duplicated={} reordered={} crashes={}",
            self.deliveries,
            self.duplicated,
            self.reordered,
            self.crashes_total()
        )?;
        for (p, n) in &self.crashes {
            write!(f, " {p}={n}")?;
        }
        Ok(())
    }
}

/// The seeded random source of one chaos run and what it did.
pub struct Chaos {
    spec: ChaosSpec,
    rng: Mutex<ChaCha8Rng>,
    stats: Mutex<ChaosStats>,
}

impl fmt::Debug for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chaos").field("spec", &self.spec).finish()
    }
}

impl Chaos {
    /// A chaos source for `spec`.
    pub fn new(spec: ChaosSpec) -> Chaos {
        Chaos {
            rng: Mutex::new(ChaCha8Rng::seed_from_u64(spec.seed)),
            spec,
            stats: Mutex::new(ChaosStats::default()),
        }
    }

    /// The specification.
    pub fn spec(&self) -> &ChaosSpec {
        &self.spec
    }

    /// What happened so far.
    pub fn stats(&self) -> ChaosStats {
        self.stats.lock().unwrap().clone()
    }

    /// Where to abort the next delivery, if at all. The last receive the queue allows
    /// is spared: chaos models crashes that a redelivery survives, and a message that
    /// crashed `maxReceiveCount` times would be dead-lettered, by design.
    pub fn plan_delivery(&self, receive_count: u32) -> Option<(CrashPoint, u32)> {
        let mut rng = self.rng.lock().unwrap();
        self.stats.lock().unwrap().deliveries += 1;
        if receive_count >= MAX_RECEIVES || !rng.gen_bool(self.spec.crash) {
            return None;
        }
        let point = CrashPoint::ALL[rng.gen_range(0..CrashPoint::ALL.len())];
        let nth = if rng.gen_bool(0.5) {
            // Near the start. Statements: uniform. Transactions and sends: the first
            // pass half the time, the second a quarter, … (short handlers pass them
            // only once or twice).
            match point {
                CrashPoint::Statement => rng.gen_range(1..=point.max_nth()),
                _ => {
                    let mut n = 1;
                    while n < point.max_nth() && rng.gen_bool(0.5) {
                        n += 1;
                    }
                    n
                }
            }
        } else {
            // Anywhere: log-uniform up to deep inside a long page (a handler that
            // ends earlier is simply not aborted).
            let max = f64::from(point.max_deep_nth());
            (rng.gen_range(0.0..=max.ln()).exp().floor() as u32).clamp(1, point.max_deep_nth())
        };
        Some((point, nth))
    }

    /// Whether a sent message gets a duplicate, and the copy's extra delay.
    pub fn duplicate_delay(&self) -> Option<u32> {
        let mut rng = self.rng.lock().unwrap();
        if !rng.gen_bool(self.spec.duplicate) {
            return None;
        }
        self.stats.lock().unwrap().duplicated += 1;
        let window = self.spec.reorder.unwrap_or(30);
        Some(rng.gen_range(0..=window))
    }

    /// Choose one of `n` deliverable messages (index 0 is the FIFO head).
    pub fn pick(&self, n: usize) -> usize {
        let i = self.rng.lock().unwrap().gen_range(0..n.max(1));
        if i > 0 {
            self.stats.lock().unwrap().reordered += 1;
        }
        i
    }

    /// Record a crash that happened.
    pub fn record_crash(&self, point: CrashPoint) {
        *self.stats.lock().unwrap().crashes.entry(point).or_default() += 1;
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

/// Incremental reader of the PostgreSQL frontend protocol: finds the start of each
/// message the client writes and classifies it (behaviour §7: handlers use
/// `START TRANSACTION`/`COMMIT` of tokio-postgres, statements are `Bind` or simple
/// queries).
#[derive(Debug)]
struct Scanner {
    /// The next message is the untyped startup message.
    startup: bool,
    header: Vec<u8>,
    /// Body bytes still to come of the current message.
    remaining: usize,
    kind: u8,
    prefix: Vec<u8>,
    decided: bool,
}

const PREFIX: usize = 24;

impl Scanner {
    fn new() -> Scanner {
        Scanner {
            startup: true,
            header: Vec::with_capacity(5),
            remaining: 0,
            kind: 0,
            prefix: Vec::new(),
            decided: true,
        }
    }

    /// Scan newly presented bytes; true when the gate fired on one of them.
    fn scan(&mut self, mut bytes: &[u8], gate: &CrashGate) -> bool {
        while !bytes.is_empty() {
            if self.remaining == 0 && self.decided {
                // In a header.
                let need = if self.startup { 4 } else { 5 };
                let take = (need - self.header.len()).min(bytes.len());
                self.header.extend_from_slice(&bytes[..take]);
                bytes = &bytes[take..];
                if self.header.len() < need {
                    return false;
                }
                let len_bytes: [u8; 4] = self.header[need - 4..need].try_into().expect("4 bytes");
                self.kind = if self.startup { 0 } else { self.header[0] };
                self.startup = false;
                self.remaining = (u32::from_be_bytes(len_bytes) as usize).saturating_sub(4);
                self.header.clear();
                self.prefix.clear();
                self.decided = false;
                if (self.kind != b'Q' || self.remaining == 0) && self.decide(gate) {
                    return true;
                }
                continue;
            }
            let take = self.remaining.min(bytes.len());
            if !self.decided && self.prefix.len() < PREFIX {
                let room = PREFIX - self.prefix.len();
                self.prefix.extend_from_slice(&bytes[..take.min(room)]);
            }
            bytes = &bytes[take..];
            self.remaining -= take;
            if !self.decided
                && (self.remaining == 0 || self.prefix.len() >= PREFIX)
                && self.decide(gate)
            {
                return true;
            }
        }
        false
    }

    fn decide(&mut self, gate: &CrashGate) -> bool {
        self.decided = true;
        if matches!(self.kind, 0 | b'X') {
            return false;
        }
        if gate.next_action() {
            return true;
        }
        match self.kind {
            b'Q' => {
                let text = String::from_utf8_lossy(&self.prefix).to_ascii_uppercase();
                let text = text.trim_start();
                if text.starts_with("START TRANSACTION") || text.starts_with("BEGIN") {
                    gate.hit(CrashPoint::BeforeBegin)
                } else if text.starts_with("COMMIT") {
                    if gate.hit(CrashPoint::BeforeCommit) {
                        return true;
                    }
                    gate.commit_sent();
                    false
                } else if text.starts_with("ROLLBACK") {
                    false
                } else {
                    gate.hit(CrashPoint::Statement)
                }
            }
            b'B' => gate.hit(CrashPoint::Statement),
            _ => false,
        }
    }
}

fn aborted(gate: &CrashGate) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!(
            "chaos: handler aborted at {}",
            gate.fired()
                .map(CrashPoint::name)
                .unwrap_or("a crash point")
        ),
    )
}

/// A database socket with a tap: every frontend message the handler's session writes
/// passes the [`CrashGate`] first. After the gate fires, reads and writes fail, so the
/// connection closes without sending anything more.
pub struct TappedStream<S> {
    inner: S,
    gate: Arc<CrashGate>,
    scanner: Scanner,
    /// Bytes written to the socket so far.
    written: u64,
    /// Bytes scanned so far (presented to `poll_write`; at least `written`).
    scanned: u64,
}

impl<S> fmt::Debug for TappedStream<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TappedStream")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl<S> TappedStream<S> {
    /// Tap `inner` with `gate`.
    pub fn new(inner: S, gate: Arc<CrashGate>) -> TappedStream<S> {
        TappedStream {
            inner,
            gate,
            scanner: Scanner::new(),
            written: 0,
            scanned: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TappedStream<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.gate.fired().is_some() {
            return Poll::Ready(Err(aborted(&this.gate)));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TappedStream<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.gate.fired().is_some() {
            return Poll::Ready(Err(aborted(&this.gate)));
        }
        // `buf` starts at offset `written`; only bytes not seen before are scanned, so a
        // partial write never counts a message twice.
        let seen = (this.scanned - this.written) as usize;
        if buf.len() > seen {
            if this.scanner.scan(&buf[seen..], &this.gate) {
                return Poll::Ready(Err(aborted(&this.gate)));
            }
            this.scanned = this.written + buf.len() as u64;
        }
        match Pin::new(&mut this.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => {
                this.written += n as u64;
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.gate.fired().is_some() {
            return Poll::Ready(Err(aborted(&this.gate)));
        }
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

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
    fn a_spec_parses_and_prints_back() {
        let s: ChaosSpec = "seed=7,duplicate=0.3,reorder,crash=0.1".parse().unwrap();
        assert_eq!(
            s,
            ChaosSpec {
                seed: 7,
                duplicate: 0.3,
                reorder: Some(60),
                crash: 0.1
            }
        );
        assert_eq!(s.to_string().parse::<ChaosSpec>().unwrap(), s);
        assert!("crash=2".parse::<ChaosSpec>().is_err());
        assert!("wobble".parse::<ChaosSpec>().is_err());
        assert_eq!("reorder=5".parse::<ChaosSpec>().unwrap().reorder, Some(5));
    }

    #[test]
    fn the_same_seed_makes_the_same_decisions() {
        let spec: ChaosSpec = "seed=42,duplicate=0.5,reorder,crash=0.5".parse().unwrap();
        let run = || {
            let c = Chaos::new(spec.clone());
            (0..50)
                .map(|i| (c.plan_delivery(1), c.duplicate_delay(), c.pick(i % 4 + 1)))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
        let c = Chaos::new(spec);
        assert!((0..50).all(|_| c.plan_delivery(MAX_RECEIVES).is_none()));
    }

    fn q(text: &str) -> Vec<u8> {
        let mut v = vec![b'Q'];
        v.extend_from_slice(&((text.len() + 5) as u32).to_be_bytes());
        v.extend_from_slice(text.as_bytes());
        v.push(0);
        v
    }

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![kind];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn startup() -> Vec<u8> {
        let body = b"\x00\x03\x00\x00user\x00postgres\x00\x00";
        let mut v = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    /// A session: startup, a statement, a transaction with two statements, a
    /// statement after it, then terminate.
    fn session() -> Vec<u8> {
        [
            startup(),
            msg(b'P', b"\x00SELECT 1\x00\x00\x00"),
            msg(b'B', b"\x00\x00\x00\x00\x00\x00\x00\x00"),
            msg(b'E', b"\x00\x00\x00\x00\x00"),
            msg(b'S', b""),
            q("START TRANSACTION"),
            msg(b'B', b"\x00\x00"),
            q("SELECT pg_advisory_unlock_all()"),
            q("COMMIT"),
            msg(b'B', b"\x00\x00"),
            msg(b'X', b""),
        ]
        .concat()
    }

    fn fires_at(target: (CrashPoint, u32), chunk: usize) -> Option<usize> {
        let gate = CrashGate::new(Some(target));
        gate.arm();
        let mut s = Scanner::new();
        let bytes = session();
        for (i, c) in bytes.chunks(chunk).enumerate() {
            if s.scan(c, &gate) {
                return Some(i * chunk);
            }
        }
        None
    }

    #[test]
    fn the_scanner_finds_each_point_whatever_the_write_sizes() {
        for chunk in [1, 3, 7, 1000] {
            assert!(fires_at((CrashPoint::BeforeBegin, 1), chunk).is_some());
            assert!(fires_at((CrashPoint::BeforeBegin, 2), chunk).is_none());
            assert!(fires_at((CrashPoint::BeforeCommit, 1), chunk).is_some());
            assert!(fires_at((CrashPoint::AfterCommit, 1), chunk).is_some());
            assert!(fires_at((CrashPoint::Statement, 4), chunk).is_some());
            assert!(fires_at((CrashPoint::Statement, 5), chunk).is_none());
        }
        // Order: begin before commit before after-commit.
        let b = fires_at((CrashPoint::BeforeBegin, 1), 1).unwrap();
        let c = fires_at((CrashPoint::BeforeCommit, 1), 1).unwrap();
        let a = fires_at((CrashPoint::AfterCommit, 1), 1).unwrap();
        assert!(b < c && c < a, "{b} {c} {a}");
    }

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
