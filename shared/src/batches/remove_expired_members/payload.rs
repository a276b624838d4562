//! The payload of `remove-expired-members` (B38): [`RemoveExpiredMembersRun`] with its
//! keyset [`MemberCursor`], and their validating decoders.

use chrono::NaiveDate;
use serde::Serialize;

use crate::messages::{cursor_run, validated_deserialize, Checked, Fields, Payload};

/// `remove-expired-members.run` payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemoveExpiredMembersRun {
    /// Where the run goes on; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<MemberCursor>,
}

/// Keyset cursor of B38: the last row read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemberCursor {
    /// The row's `expires_at`.
    pub expires_at: NaiveDate,
    /// The row's id.
    pub id: i64,
}

impl Payload for MemberCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(MemberCursor {
            expires_at: f.date("expires_at")?,
            id: f.int("id", 0, i64::MAX)?,
        })
    }
}

cursor_run!(RemoveExpiredMembersRun(MemberCursor));

validated_deserialize!(RemoveExpiredMembersRun, MemberCursor);
