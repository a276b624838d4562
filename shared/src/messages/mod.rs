//! Typed, versioned queue messages (behaviour §9.1–§9.4).
//!
//! Owns: the module overview and the re-exports that keep `shared::messages::*` one flat
//! API. The parts live in submodules:
//! * `envelope`: the [`Envelope`] every message travels in, its parsing and the
//!   validation of its fields (malformed = permanent failure), hops, continuations.
//! * `message`: [`FromMessage`], how a handler's payload is decoded once.
//! * `payloads`: the payload types of each message type and their validating decoders.
//! * `keys`: message keys, the `run_id` rule and the key alphabet.
//!
//! Validation is strict and happens once, on receipt, before any handler runs: a body
//! with a duplicate object key anywhere is malformed; `run_id` must be 1–128
//! characters of the key set `[A-Za-z0-9:._-]` (keys are built from it); `issued_at`
//! must be RFC 3339 in UTC (`Z`); and the payload must satisfy its type's
//! [`Payload::from_payload`], the one place where each field's type and range is
//! checked (ids ≥ 1, dates exactly `YYYY-MM-DD`, `days_to_expire` ∈ {7, 30, 60}, at
//! most 100 `token_names`, a web-hook `body` that is an object, bounded strings, a
//! cursor `index` within the ids visited, cursor ids ≥ 0). Serde's `Deserialize` of every payload type
//! goes through the same function. An error names the field and the rule, never the
//! value.
//! Changing these types is a compatibility change: the sample events in `events/` and
//! the SQS fixtures in `tests/fixtures/sqs/` pin the wire format. No secret ever goes
//! in a message.

mod envelope;
mod keys;
mod message;
mod payloads;
mod strict;

pub use envelope::{Envelope, Malformed, VERSION};
pub use keys::{
    bot_email_key, delete_placeholder_user_key, delete_user_key, group_destroy_key,
    prune_deletions_key, user_email_key, webhook_event_key, webhook_key,
};
pub use message::{unknown_type, FromMessage, Notification};
pub use payloads::{
    AdjournedGroupDeletionRun, DeletePlaceholderUserRun, DeleteUserRun, DetailCursor,
    EmailNotification, Fields, GroupCursor, GroupDestroyRun, MemberCursor, PatExpiringRun, Payload,
    PayloadError, PlaceholderUserCleanupRun, PruneDeletionsRun, RemoveExpiredMembersRun,
    ResourceType, SchedulePruneDeletionsRun, WebhookNotification, ANCESTORS_MAX, ATTEMPT_MAX,
    DAYS_TO_EXPIRE, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS, TEXT_MAX_CHARS, TOKEN_NAMES_MAX,
};
