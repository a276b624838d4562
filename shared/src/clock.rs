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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_time_has_no_fraction_and_a_z() {
        let t = DateTime::parse_from_rfc3339("2025-03-10T00:10:04.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(key_time(t), "2025-03-10T00:10:04Z");
        assert_eq!(rfc3339(t), "2025-03-10T00:10:04.123456Z");
        assert_eq!(today(t).to_string(), "2025-03-10");
    }

    #[test]
    fn system_clock_is_truncated_to_microseconds() {
        let n = SystemClock.now();
        assert_eq!(n.timestamp_subsec_nanos() % 1000, 0);
    }
}
