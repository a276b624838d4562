//! Support for the integration tests: a fresh database per test, fixture builders in
//! the spec's notation, a driver for handlers, log capture, and moto clients.
//!
//! The test script (`scripts/test.sh`) exports `DATABASE_URL` (a throwaway cluster)
//! and `MOTO_ENDPOINT` (a moto server on 127.0.0.1). Without them the tests fail with
//! a message saying so: they are never skipped.

pub mod app;
pub mod aws;
pub mod db;
pub mod fixtures;
pub mod logs;
pub mod notice;
pub mod sinks;
pub mod state;
pub mod wait;

pub use app::environment;
pub use db::TestDb;
pub use fixtures::Fx;

/// Parse an RFC 3339 instant (test shorthand).
pub fn t(s: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(s)
        .unwrap_or_else(|e| panic!("bad time {s}: {e}"))
        .with_timezone(&chrono::Utc)
}

/// Parse a date (test shorthand).
pub fn d(s: &str) -> chrono::NaiveDate {
    s.parse().unwrap_or_else(|e| panic!("bad date {s}: {e}"))
}
