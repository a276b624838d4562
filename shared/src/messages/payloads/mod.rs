//! Payload types and their validating decoders (behaviour §9.2).
//!
//! Owns: the dispatch from a message type to its payload type ([`payload_cursor`]),
//! and the `Deserialize` of every payload type, which goes through its one validating
//! decoder. The decoding rules are in [`fields`]; the types of each function's
//! messages are in [`members`] (B38, B43), [`groups`] (B51), [`placeholders`] (B70)
//! and [`pat_expiring`] (B28).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::strict::Strict;

mod fields;
mod groups;
mod members;
mod pat_expiring;
mod placeholders;

pub use fields::{Fields, Payload, PayloadError, NAME_MAX_CHARS, TEXT_MAX_CHARS};
pub use groups::{AdjournedGroupDeletionRun, GroupCursor, GroupDestroyRun};
pub use members::{
    DeleteUserRun, MemberCursor, PruneDeletionsRun, RemoveExpiredMembersRun,
    SchedulePruneDeletionsRun,
};
pub use pat_expiring::{
    EmailNotification, PatExpiringRun, ResourceType, WebhookNotification, DAYS_TO_EXPIRE,
    TOKEN_NAMES_MAX,
};
pub use placeholders::{
    DeletePlaceholderUserRun, DetailCursor, PlaceholderUserCleanupRun, ATTEMPT_MAX,
};

use fields::Checked;

/// `Deserialize` through the validating decoder, so no path decodes a payload unchecked.
macro_rules! validated_deserialize {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let Strict(v) = Strict::deserialize(d)?;
                <$t as Payload>::from_value(&v).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

/// Validate `payload` for message type `kind` (already known to be accepted); returns
/// the cursor, re-serialized from its validated type, when the type has one.
pub fn payload_cursor(kind: &str, payload: &Value) -> Checked<Option<Value>> {
    fn cursor<C: Serialize>(c: Option<C>) -> Option<Value> {
        c.and_then(|c| serde_json::to_value(c).ok())
    }
    Ok(match kind {
        "remove-expired-members.run" => {
            cursor(RemoveExpiredMembersRun::from_value(payload)?.cursor)
        }
        "adjourned-group-deletion.run" => {
            cursor(AdjournedGroupDeletionRun::from_value(payload)?.cursor)
        }
        "placeholder-user-cleanup.run" => {
            cursor(PlaceholderUserCleanupRun::from_value(payload)?.cursor)
        }
        "schedule-prune-deletions.run" => {
            SchedulePruneDeletionsRun::from_value(payload)?;
            None
        }
        "prune-deletions.run" => {
            PruneDeletionsRun::from_value(payload)?;
            None
        }
        "group-destroy.run" => {
            GroupDestroyRun::from_value(payload)?;
            None
        }
        "delete-placeholder-user.run" => {
            DeletePlaceholderUserRun::from_value(payload)?;
            None
        }
        "delete-user.run" => {
            DeleteUserRun::from_value(payload)?;
            None
        }
        "pat-expiring.run" => {
            PatExpiringRun::from_value(payload)?;
            None
        }
        "deliver-notification.email" => {
            EmailNotification::from_value(payload)?;
            None
        }
        "deliver-notification.webhook" => {
            WebhookNotification::from_value(payload)?;
            None
        }
        _ => {
            return Err(PayloadError {
                field: "type".into(),
                rule: "must be a known message type".into(),
            })
        }
    })
}

pub(super) fn validate_payload(kind: &str, payload: &Value) -> Checked<()> {
    payload_cursor(kind, payload).map(|_| ())
}

validated_deserialize!(
    RemoveExpiredMembersRun,
    MemberCursor,
    DeleteUserRun,
    SchedulePruneDeletionsRun,
    PruneDeletionsRun,
    AdjournedGroupDeletionRun,
    GroupCursor,
    GroupDestroyRun,
    PlaceholderUserCleanupRun,
    DetailCursor,
    DeletePlaceholderUserRun,
    PatExpiringRun,
    EmailNotification,
    WebhookNotification,
);
