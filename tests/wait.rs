//! Bounded waits of the test harness, and their limits, in one place.
//!
//! A test sometimes has to wait for something that happens in its own time: another
//! session to block on a lock, a server to listen, a configuration reload to take
//! effect, a backend to exit, a delayed SQS message to become visible. Every such wait
//! polls through [`until`] (or [`until_blocking`]) with one of the named limits below,
//! and on expiry panics saying what it waited for and for how long.
//!
//! The limits only bound a hang: no test relies on one to pass, and none measures
//! time. They are generous because CI runs on a loaded 2-core machine, where a debug
//! build of a handler, a moto server or `cargo lambda watch` can be many times slower
//! than on a quiet one. A race a test wants to see is forced by holding a lock and
//! waiting here until the other side is blocked on it, never by sleeping a guessed
//! length.

use std::future::Future;
use std::time::{Duration, Instant};

/// `lock_timeout` and `statement_timeout` of the harness's own sessions (creating,
/// migrating, filling, cloning and renaming databases; fixtures and assertions).
///
/// They must not inherit the product's settings (`DB_LOCK_TIMEOUT_MS` = 5 s,
/// `DB_STATEMENT_TIMEOUT_MS` = 30 s): while one test process builds a template
/// database (the demo data set takes tens of seconds on a busy 2-core machine), every
/// other test process that needs it waits on the same advisory lock. Ten minutes is
/// far above the slowest template build and still ends a real deadlock with an error
/// instead of a hang.
pub const HARNESS_SESSION_TIMEOUT: Duration = Duration::from_secs(600);

/// A handler's session reaching the lock another session of the test holds: the
/// handler has to connect, run its first statements and reach the locked row.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);

/// A dropped client's backend to exit (the server handles the Terminate message
/// asynchronously), so that its database can be renamed or dropped.
pub const SESSION_END: Duration = Duration::from_secs(60);

/// `pg_reload_conf()` to reach new connections (the postmaster re-reads its files
/// after a signal, asynchronously).
pub const SERVER_RELOAD: Duration = Duration::from_secs(60);

/// A server the test started to accept connections: `cargo lambda watch` (a Python
/// launcher and a Rust binary), a throwaway PostgreSQL cluster.
pub const SERVER_LISTEN: Duration = Duration::from_secs(300);

/// `hk local pump --until-idle` in the end-to-end test: its first delivery to each
/// function waits for `cargo lambda watch` to compile that function (a debug build
/// of the function crate and its dependencies), which takes minutes on a loaded
/// 2-core machine. The pump exits non-zero naming what is left when it expires.
pub const PUMP_UNTIL_IDLE: Duration = Duration::from_secs(900);

/// A message sent to moto to be received (moto applies `DelaySeconds` in wall time).
pub const SQS_DELIVERY: Duration = Duration::from_secs(60);

/// First pause between two probes; it doubles up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(10);
/// Longest pause between two probes.
const MAX_PAUSE: Duration = Duration::from_millis(250);

/// Poll `probe` until it returns `Some`, at most `limit`; panic naming `what` then.
pub async fn until<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        if started.elapsed() >= limit {
            panic!("gave up after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

/// [`until`] for synchronous probes (tests that are not async).
pub fn until_blocking<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(v) = probe() {
            return v;
        }
        if started.elapsed() >= limit {
            panic!("gave up after {limit:?} waiting for {what}");
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn until_returns_the_first_value_the_probe_gives() {
        let mut n = 0;
        let got = until("the third probe", Duration::from_secs(60), || {
            n += 1;
            let v = (n == 3).then_some(n);
            async move { v }
        })
        .await;
        assert_eq!(got, 3);
    }

    #[test]
    #[should_panic(expected = "gave up after 50ms waiting for a thing that never happens")]
    fn until_blocking_names_what_it_waited_for_on_expiry() {
        until_blocking(
            "a thing that never happens",
            Duration::from_millis(50),
            || None::<()>,
        );
    }
}
