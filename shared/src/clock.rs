//! The injected clock (behaviour §6).
//!
//! Owns: [`Clock`], the source of `now` for an invocation, and the transport's wall
//! clock for schedule times. SQL never reads the database clock: every handler reads
//! `now` once from here and binds it. Budgets and deadlines do not use this clock;
//! they use the monotonic [`std::time::Instant`] (see `runtime`).

use chrono::{DateTime, NaiveDate, SubsecRound, Utc};

/// A source of UTC instants.
pub trait Clock: Send + Sync {
    /// The current instant, truncated to microseconds (PostgreSQL's precision).
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock: Lambda mode's only clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now().trunc_subsecs(6)
    }
}

/// A fixed instant: `hk run --now`, and tests.
#[derive(Debug, Clone, Copy)]
pub struct FixedClock(pub DateTime<Utc>);

impl Clock for FixedClock {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// The UTC calendar date of an instant (`today`).
pub fn today(now: DateTime<Utc>) -> NaiveDate {
    now.date_naive()
}

/// Format an instant as used inside message keys: `YYYY-MM-DDTHH:MM:SSZ` (behaviour §9.3).
pub fn key_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Format an instant as RFC 3339 with microseconds and `Z`.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
