//! Who may receive a notification (behaviour §2.1, §D26).
//!
//! Owns: `can_receive_notifications(u)`, the one eligibility rule `pat-expiring` and
//! `deliver-notification` apply: a SQL predicate over an alias `u` of `users`, a macro
//! so their statements embed it with `concat!` and stay fixed texts.

/// `can_receive_notifications(u)` over an alias `u` of `users`: an active human or
/// service account. Expands to a string literal, for `concat!`.
macro_rules! can_receive_notifications {
    () => {
        "(u.state IS NOT DISTINCT FROM 'active' AND u.user_type IN (0, 4))"
    };
}
pub(crate) use can_receive_notifications;

/// The same predicate as a constant, for tests and documentation.
pub const CAN_RECEIVE_NOTIFICATIONS: &str = can_receive_notifications!();
