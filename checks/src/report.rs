//! The report of one run of the checks, as `hk check --json` prints it and the
//! `hk-check` function returns it.
//!
//! Owns: [`Report`] (every check, whether all required ones pass, and the exit-style
//! status: 0 pass, 1 only a busy database failed (retry), 2 the database must change)
//! and its one-line summary.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{all_required_pass, only_busy, Check};

/// Exit status: every required check passed.
pub const PASS: u8 = 0;
/// Exit status: the only failures are a busy database (a lock held elsewhere): retry.
pub const BUSY: u8 = 1;
/// Exit status: the database (or the connection path, or the role) must change.
pub const FAIL: u8 = 2;

/// One run's result.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Whether every required check passed.
    pub ok: bool,
    /// `pass`, `busy` or `fail`.
    pub status: &'static str,
    /// [`PASS`], [`BUSY`] or [`FAIL`], as `hk check` exits.
    pub exit_code: u8,
    /// The time the work-waiting counts were taken at.
    pub now: DateTime<Utc>,
    /// Every check, in output order.
    pub checks: Vec<Check>,
}

impl Report {
    /// The report of `checks`.
    pub fn new(now: DateTime<Utc>, checks: Vec<Check>) -> Report {
        let ok = all_required_pass(&checks);
        let (status, exit_code) = if ok {
            ("pass", PASS)
        } else if only_busy(&checks) {
            ("busy", BUSY)
        } else {
            ("fail", FAIL)
        };
        Report {
            ok,
            status,
            exit_code,
            now,
            checks,
        }
    }

    /// The last line of `hk check`'s output.
    pub fn summary(&self) -> String {
        let failed = self.checks.iter().filter(|c| !c.ok && c.required).count();
        match self.exit_code {
            PASS => format!(
                "hk check: all {} required checks pass",
                self.checks.iter().filter(|c| c.required).count()
            ),
            BUSY => {
                format!("hk check: {failed} required check(s) failed: the database is busy, retry")
            }
            _ => format!("hk check: {failed} required check(s) failed"),
        }
    }
}
