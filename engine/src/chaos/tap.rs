//! The wire tap: [`TappedStream`] sees the PostgreSQL frontend protocol of a
//! handler's session and fires the [`CrashGate`] before a transaction starts, before
//! a COMMIT is sent, after a COMMIT completed or at a statement. After the gate
//! fires it refuses every further byte, so the socket closes and PostgreSQL rolls
//! back the open transaction and releases the session's advisory locks.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::{CrashGate, CrashPoint};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
