//! A counting TCP relay between one bench side and PostgreSQL: how many statements the
//! side sends and how many round trips it waits for, measured on the wire, so the B38
//! benches report statements and round trips per member without a server extension
//! (`pg_stat_statements` needs a preload the throwaway clusters do not have).
//!
//! Owns: the relay (a listener on 127.0.0.1, one task pair per session) and its
//! counters. A **statement** is an Execute or a simple Query message from the client;
//! a **round trip** is a client write that follows bytes from the server (pipelined
//! statements written together are one round trip; connection setup counts too). The
//! relay parses the client's stream only: a session that switches to TLS (the bench
//! clusters run without it) would make the stream unreadable, and is reported as an
//! error instead of a wrong count by [`Wire::counts`]; [`Wire::round_trips`] needs no
//! parsing and counts TLS sessions too. [`Wire::delayed`] holds each round trip's
//! first bytes for a fixed time before relaying them: a network of that latency (the
//! cold-start bench's 1 ms VPC, issue 52).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::BenchDbs;
use shared::db::Connector;
use shared::error::{Error, Result};

/// What the relay counted, over every session it carried.
#[derive(Debug, Default)]
struct Counters {
    statements: AtomicU64,
    round_trips: AtomicU64,
    /// Nanoseconds the delayed relay really held round trips, summed.
    held_ns: AtomicU64,
    unreadable: AtomicBool,
    /// When things happened on the wire, for a cold start's timeline.
    timeline: std::sync::Mutex<Timeline>,
}

/// When the relay saw a session's steps (the first session it carried): its
/// connection accepted, the first bytes of each round trip (before any hold), the
/// server's last bytes.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    /// The first connection accepted.
    pub accepted: Option<std::time::Instant>,
    /// The start of each round trip, in order.
    pub trips: Vec<std::time::Instant>,
    /// The server's first bytes after each round trip's start, in order.
    pub replies: Vec<std::time::Instant>,
    /// The server's last bytes before each round trip's start (none before the first).
    pub ends: Vec<Option<std::time::Instant>>,
    /// The last bytes relayed from the server.
    pub last_reply: Option<std::time::Instant>,
}

/// The counts at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Execute and simple Query messages sent by the clients.
    pub statements: u64,
    /// Client writes that followed a server reply.
    pub round_trips: u64,
}

/// A running relay; stops when dropped.
pub struct Wire {
    port: u16,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Wire {
    /// Listen on a free port of 127.0.0.1 and relay every session to `host:port`.
    pub async fn start(host: &str, port: u16) -> Result<Wire> {
        Wire::delayed(host, port, std::time::Duration::ZERO).await
    }

    /// [`Wire::start`], each round trip held `delay` before it is relayed.
    pub async fn delayed(host: &str, port: u16, delay: std::time::Duration) -> Result<Wire> {
        let io = |e: std::io::Error| Error::Invariant(format!("wire: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.map_err(io)?;
        let local = listener.local_addr().map_err(io)?.port();
        let counters = Arc::new(Counters::default());
        let target = format!("{host}:{port}");
        let c = counters.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                {
                    let mut t = c.timeline.lock().unwrap_or_else(|p| p.into_inner());
                    t.accepted.get_or_insert_with(std::time::Instant::now);
                }
                let (c, target) = (c.clone(), target.clone());
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(&target).await {
                        relay(client, server, c, delay).await;
                    }
                });
            }
        });
        Ok(Wire {
            port: local,
            counters,
            task,
        })
    }

    /// A connector to the bench database `tag` through this relay; with `handler`, the
    /// function's session settings, otherwise the bulk ones.
    pub fn connector(&self, dbs: &BenchDbs, tag: &str, handler: bool) -> Result<Connector> {
        let (_, server_port) = dbs.server();
        let url =
            dbs.url(tag)
                .replacen(&format!(":{server_port}/"), &format!(":{}/", self.port), 1);
        let pg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| Error::Config(format!("relay URL: {e}")))?;
        super::connector_for(pg, handler)
    }

    /// The relay's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `url` (a `postgres://` URL naming `host:port` of the relay's target) through the
    /// relay instead.
    pub fn url(&self, url: &str, target_port: u16) -> String {
        url.replacen(&format!(":{target_port}/"), &format!(":{}/", self.port), 1)
    }

    /// The round trips counted so far, TLS sessions included.
    pub fn round_trips(&self) -> u64 {
        self.counters.round_trips.load(Ordering::SeqCst)
    }

    /// The mean time a round trip was really held ([`Wire::delayed`]), zero if none.
    pub fn mean_hold(&self) -> std::time::Duration {
        let n = self.counters.round_trips.load(Ordering::SeqCst);
        let ns = self.counters.held_ns.load(Ordering::SeqCst);
        std::time::Duration::from_nanos(ns.checked_div(n).unwrap_or(0))
    }

    /// When the relay saw each step so far ([`Timeline`]).
    pub fn timeline(&self) -> Timeline {
        self.counters
            .timeline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What was counted so far; an error if a session could not be read.
    pub fn counts(&self) -> Result<Counts> {
        if self.counters.unreadable.load(Ordering::SeqCst) {
            return Err(Error::Invariant(
                "wire: a session's stream could not be parsed (TLS?): no count".into(),
            ));
        }
        Ok(Counts {
            statements: self.counters.statements.load(Ordering::SeqCst),
            round_trips: self.counters.round_trips.load(Ordering::SeqCst),
        })
    }
}

/// Hold a round trip `delay`, returning how long it was really held. tokio's timer
/// ticks in whole milliseconds and rounds a deadline up, so its 1 ms sleep lasts 1–2 ms
/// and would overstate the network; a thread's sleep overshoots by tens of
/// microseconds, and the caller reports what was held.
async fn hold(delay: std::time::Duration) -> std::time::Duration {
    let start = std::time::Instant::now();
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(delay)).await;
    start.elapsed()
}

/// Copy both ways until either side closes, counting the client's messages.
async fn relay(
    client: TcpStream,
    server: TcpStream,
    counters: Arc<Counters>,
    delay: std::time::Duration,
) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    // True when the last bytes seen came from the server: the next client write is a
    // new round trip. The session starts with one (the startup message).
    let server_spoke = Arc::new(AtomicBool::new(true));
    let spoke = server_spoke.clone();
    let up_counters = counters.clone();
    let up = async move {
        let mut parser = Parser::default();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if spoke.swap(false, Ordering::SeqCst) {
                up_counters.round_trips.fetch_add(1, Ordering::SeqCst);
                {
                    let mut t = up_counters
                        .timeline
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    t.trips.push(std::time::Instant::now());
                    let end = t.last_reply;
                    t.ends.push(end);
                }
                if !delay.is_zero() {
                    let held = hold(delay).await;
                    up_counters
                        .held_ns
                        .fetch_add(held.as_nanos() as u64, Ordering::SeqCst);
                }
            }
            match parser.feed(&buf[..n]) {
                Some(k) => {
                    up_counters.statements.fetch_add(k, Ordering::SeqCst);
                }
                None => up_counters.unreadable.store(true, Ordering::SeqCst),
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = std::time::Instant::now();
            let first = !server_spoke.swap(true, Ordering::SeqCst);
            {
                let mut t = counters.timeline.lock().unwrap_or_else(|p| p.into_inner());
                if first {
                    t.replies.push(now);
                }
                t.last_reply = Some(now);
            }
            if cw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// The client's side of the protocol: untyped startup messages (SSL and GSS requests
/// first, then the startup packet), then typed messages (a type byte and a length that
/// counts itself).
#[derive(Debug, Default)]
struct Parser {
    pending: Vec<u8>,
    started: bool,
    broken: bool,
}

/// The protocol codes of the requests that precede the startup packet.
const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;

impl Parser {
    /// Take bytes; the statements completed in them, or `None` once the stream is
    /// unreadable.
    fn feed(&mut self, bytes: &[u8]) -> Option<u64> {
        if self.broken {
            return None;
        }
        self.pending.extend_from_slice(bytes);
        let mut at = 0usize;
        let mut statements = 0u64;
        loop {
            let rest = &self.pending[at..];
            if !self.started {
                if rest.len() < 8 {
                    break;
                }
                let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                if !(8..=10_000).contains(&len) {
                    self.broken = true;
                    return None;
                }
                if rest.len() < len {
                    break;
                }
                let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                if code != SSL_REQUEST && code != GSSENC_REQUEST {
                    self.started = true;
                }
                at += len;
            } else {
                if rest.len() < 5 {
                    break;
                }
                let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
                if !(4..=1 << 30).contains(&len) {
                    self.broken = true;
                    return None;
                }
                if rest.len() < 1 + len {
                    break;
                }
                if matches!(rest[0], b'E' | b'Q') {
                    statements += 1;
                }
                at += 1 + len;
            }
        }
        self.pending.drain(..at);
        Some(statements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![kind];
        m.extend_from_slice(&(body.len() as u32 + 4).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn counts_execute_and_query_across_split_reads() {
        let mut p = Parser::default();
        let mut stream = Vec::new();
        stream.extend_from_slice(&8u32.to_be_bytes());
        stream.extend_from_slice(&SSL_REQUEST.to_be_bytes());
        let startup = [0u8, 3, 0, 0, b'u', b's', b'e', b'r', 0, b'x', 0, 0];
        stream.extend_from_slice(&(startup.len() as u32 + 4).to_be_bytes());
        stream.extend_from_slice(&startup);
        stream.extend(msg(b'P', b"\0SELECT 1\0\0\0"));
        stream.extend(msg(b'B', b"\0\0\0\0\0\0\0\0"));
        stream.extend(msg(b'E', b"\0\0\0\0\0"));
        stream.extend(msg(b'S', b""));
        stream.extend(msg(b'Q', b"BEGIN\0"));
        // Fed one byte at a time: message boundaries never line up with reads.
        let total: u64 = stream.iter().map(|b| p.feed(&[*b]).unwrap()).sum();
        assert_eq!(total, 2);
        assert!(p.pending.is_empty());
    }

    #[test]
    fn an_unreadable_stream_is_reported_not_counted() {
        let mut p = Parser::default();
        assert_eq!(p.feed(&[0, 0, 0, 2, 1, 2, 3, 4]), None);
        assert_eq!(p.feed(&msg(b'Q', b"x\0")), None);
    }

    /// The delayed relay holds every round trip at least its delay and reports what it
    /// held: an echo server behind it, three request/reply exchanges.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_delayed_relay_holds_each_round_trip_and_reports_the_hold() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = echo.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = echo.accept().await.unwrap();
            let mut b = [0u8; 16];
            while let Ok(n) = s.read(&mut b).await {
                if n == 0 || s.write_all(&b[..n]).await.is_err() {
                    break;
                }
            }
        });
        let delay = std::time::Duration::from_millis(3);
        let wire = Wire::delayed("127.0.0.1", port, delay).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", wire.port()))
            .await
            .unwrap();
        let started = std::time::Instant::now();
        for _ in 0..3 {
            c.write_all(b"ping").await.unwrap();
            let mut b = [0u8; 4];
            c.read_exact(&mut b).await.unwrap();
        }
        assert!(started.elapsed() >= delay * 3);
        assert_eq!(wire.round_trips(), 3);
        assert!(wire.mean_hold() >= delay, "{:?}", wire.mean_hold());
        assert_eq!(
            Wire::start("127.0.0.1", port).await.unwrap().mean_hold(),
            std::time::Duration::ZERO
        );
    }
}
