//! Payload types and their validating decoders (behaviour §9.2).
//!
//! Owns: the `Deserialize` of every payload type, which goes through its one validating
//! decoder, and the decoder of a run whose one field is its cursor. The rules are in
//! [`fields`]; the types in [`members`] (B38, B43), [`groups`] (B51), [`placeholders`]
//! (B70), [`pat_expiring`] (B28) and [`storage`] (`storage-cleanup`).

use serde::{Deserialize, Deserializer};

use super::strict::Strict;
use fields::Checked;

mod fields;
mod groups;
mod members;
mod pat_expiring;
mod placeholders;
mod storage;

pub use fields::{
    Fields, Payload, PayloadError, ANCESTORS_MAX, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS,
    TEXT_MAX_CHARS,
};
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
pub use storage::{
    bound_rule, id_hash, project_disk_path, snippet_disk_path, Bucket, StorageCleanupRun,
    StorageItem, StorageKind,
};

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

/// [`Payload`] of a run whose one field is its optional keyset `cursor`.
macro_rules! cursor_run {
    ($($run:ident($cursor:ident)),* $(,)?) => {$(
        impl Payload for $run {
            fn from_payload(f: &Fields<'_>) -> Checked<Self> {
                let cursor = f.opt_object("cursor")?.map(|c| $cursor::from_payload(&c));
                Ok($run { cursor: cursor.transpose()? })
            }

            fn cursor(&self) -> Option<serde_json::Value> {
                self.cursor.and_then(|c| serde_json::to_value(c).ok())
            }
        }
    )*};
}

cursor_run!(
    RemoveExpiredMembersRun(MemberCursor),
    AdjournedGroupDeletionRun(GroupCursor),
    PlaceholderUserCleanupRun(DetailCursor),
);

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
    StorageCleanupRun,
);
