//! Message keys (behaviour §9.3) and the key alphabet.
//!
//! Owns: the rule for a `message_key` (1–256 characters of `[A-Za-z0-9:._-]`), the
//! narrower rule for a `run_id` (1–128 characters of the same set, because keys are
//! built from it), and the functions that build each message type's stable
//! idempotency key (`storage-cleanup`'s, which hashes its item, is
//! `workers::storage_cleanup`'s).

use chrono::NaiveDate;

/// A `message_key` (and a web-hook `event_key`): 1–256 characters of `[A-Za-z0-9:._-]`.
pub(crate) fn valid_key(k: &str) -> bool {
    (1..=256).contains(&k.len())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

/// `run_id` (behaviour §9.1), narrowed to what the keys built from it can carry.
pub(crate) fn valid_run_id(r: &str) -> bool {
    (1..=128).contains(&r.len())
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

/// The key of `delete-user.run` (behaviour §9.3).
pub fn delete_user_key(user_id: i64) -> String {
    format!("delete-user:{user_id}")
}

/// The key of the `prune-deletions.run` that the scheduler sends (behaviour §9.3):
/// `prune-deletions:<run_id>:0`.
pub fn prune_deletions_key(run_id: &str) -> String {
    format!("prune-deletions:{run_id}:0")
}

/// The key of `group-destroy.run` (behaviour §9.3): `group-destroy:<group_id>:<date>:<user_id>`.
pub fn group_destroy_key(group_id: i64, marked_for_deletion_on: NaiveDate, user_id: i64) -> String {
    format!("group-destroy:{group_id}:{marked_for_deletion_on}:{user_id}")
}

/// The key of `delete-placeholder-user.run` (behaviour §9.3).
pub fn delete_placeholder_user_key(placeholder_user_id: i64, attempt: i64) -> String {
    format!("delete-placeholder-user:{placeholder_user_id}:{attempt}")
}

/// Key of a human's email (behaviour §B28.10.2): `pat-expiring:<iv>:user:<user_id>:<today>`.
pub fn user_email_key(interval: &str, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:user:{user_id}:{today}")
}

/// Key of a bot email (behaviour §B28.10.2):
/// `pat-expiring:<iv>:bot:<bot_user_id>:recipient:<user_id>:<today>`.
pub fn bot_email_key(interval: &str, bot_user_id: i64, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:bot:{bot_user_id}:recipient:{user_id}:{today}")
}

/// Event key of a bot's web hooks (behaviour §B28.10.3):
/// `pat-expiring:seven_days:bot:<bot_user_id>:token:<token_id>`.
pub fn webhook_event_key(bot_user_id: i64, token_id: i64) -> String {
    format!("pat-expiring:seven_days:bot:{bot_user_id}:token:{token_id}")
}

/// Key of one web-hook message: the event key plus `:hook:<hook_id>`.
pub fn webhook_key(event_key: &str, hook_id: i64) -> String {
    format!("{event_key}:hook:{hook_id}")
}
