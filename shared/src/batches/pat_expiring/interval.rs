//! The three notification intervals of B28 (behaviour §B28.2).
//!
//! Owns: [`Interval`]: the processing order, names (logs and message keys), the
//! inclusive day ranges and their dates for `today` (computed here and bound, never
//! read from the database clock), `days_to_expire` of the emails, and which
//! statements of [`super::sql`] carry the interval's scope and claim.

use chrono::NaiveDate;

use super::sql::{self, IntervalStatements};

/// A notification interval (behaviour §B28.2), processed in [`Interval::ALL`] order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    /// 0..7 days.
    SevenDays,
    /// 8..30 days.
    ThirtyDays,
    /// 31..60 days.
    SixtyDays,
}

impl Interval {
    /// The processing order.
    pub const ALL: [Interval; 3] = [
        Interval::SevenDays,
        Interval::ThirtyDays,
        Interval::SixtyDays,
    ];

    /// `seven_days`, `thirty_days` or `sixty_days` (logs and keys).
    pub fn name(self) -> &'static str {
        match self {
            Interval::SevenDays => "seven_days",
            Interval::ThirtyDays => "thirty_days",
            Interval::SixtyDays => "sixty_days",
        }
    }

    /// The inclusive range of days until expiry.
    pub fn range(self) -> (u64, u64) {
        match self {
            Interval::SevenDays => (0, 7),
            Interval::ThirtyDays => (8, 30),
            Interval::SixtyDays => (31, 60),
        }
    }

    /// `days_to_expire` of the emails: the top of the range.
    pub fn days_to_expire(self) -> u32 {
        self.range().1 as u32
    }

    /// The first and last expiry dates of the interval for `today`.
    pub fn bounds(self, today: NaiveDate) -> (NaiveDate, NaiveDate) {
        let (lo, hi) = self.range();
        (today + chrono::Days::new(lo), today + chrono::Days::new(hi))
    }

    /// The interval's statements: its scope (`$1` = `:min`, `$2` = the last date)
    /// and its claim's SET list (`$3` = `:now`; seven days also sets the legacy flag).
    pub(super) fn statements(self) -> &'static IntervalStatements {
        match self {
            Interval::SevenDays => &sql::SEVEN_DAYS,
            Interval::ThirtyDays => &sql::THIRTY_DAYS,
            Interval::SixtyDays => &sql::SIXTY_DAYS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_has_its_own_scope_and_claim_statements() {
        assert!(Interval::SevenDays
            .statements()
            .claim_user
            .contains("expire_notification_delivered = true"));
        assert!(!Interval::SixtyDays
            .statements()
            .claim_users
            .contains("expire_notification_delivered = true"));
        assert!(Interval::ThirtyDays
            .statements()
            .human_page
            .contains("t.expire_notification_delivered = false"));
        for iv in Interval::ALL {
            assert!(iv.statements().claim_bot.contains(iv.name()));
        }
    }
}
