//! Typed, versioned queue messages (behaviour §9.1–§9.4): the re-exports that keep
//! `shared::messages::*` one flat API over `envelope` (the [`Envelope`], its fields'
//! validation, continuations), `message` ([`FromMessage`]), `payloads` (each type's one
//! validating decoder, [`Payload::from_payload`]) and `keys`.
//!
//! Validation is strict and happens once, on receipt, before any handler runs; an error
//! names the field and the rule, never the value. The sample events in `events/` and the
//! SQS fixtures in `tests/fixtures/sqs/` pin the wire format. No secret goes in a message.

mod envelope;
mod keys;
mod message;
mod payloads;
mod strict;

pub use envelope::{Envelope, Malformed, VERSION};
pub use keys::{
    bot_email_key, delete_placeholder_user_key, delete_user_key, group_destroy_key,
    prune_deletions_key, storage_cleanup_key, user_email_key, webhook_event_key, webhook_key,
};
pub use message::{unknown_type, Addressed, FromMessage, Notification};
pub use payloads::{
    bound_rule, id_hash, project_disk_path, snippet_disk_path, AdjournedGroupDeletionRun, Bucket,
    DeletePlaceholderUserRun, DeleteUserRun, DetailCursor, EmailNotification, Fields, GroupCursor,
    GroupDestroyRun, MemberCursor, PatExpiringRun, Payload, PayloadError,
    PlaceholderUserCleanupRun, PruneDeletionsRun, RemoveExpiredMembersRun, ResourceType,
    SchedulePruneDeletionsRun, StorageCleanupRun, StorageItem, StorageKind, WebhookNotification,
    ANCESTORS_MAX, ATTEMPT_MAX, DAYS_TO_EXPIRE, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS,
    TEXT_MAX_CHARS, TOKEN_NAMES_MAX,
};
