//! The payload of `adjourned-group-deletion` (B51): [`AdjournedGroupDeletionRun`] with
//! its keyset [`GroupCursor`], and their validating decoders.

use serde::Serialize;

use crate::messages::{cursor_run, index_within, validated_deserialize, Checked, Fields, Payload};

/// `adjourned-group-deletion.run` payload (behaviour §B51.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdjournedGroupDeletionRun {
    /// Where the run goes on; absent for the cron message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<GroupCursor>,
}

/// Keyset cursor of B51: the last group visited and the run-wide index of the next.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupCursor {
    /// The id of the last group visited.
    pub group_id: i64,
    /// The run-wide 0-based index of the next group (its delay is `index × 20` s).
    pub index: u64,
}

impl Payload for GroupCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let group_id = f.int("group_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::MAX)? as u64;
        index_within(f, index, group_id)?;
        Ok(GroupCursor { group_id, index })
    }
}

cursor_run!(AdjournedGroupDeletionRun(GroupCursor));

validated_deserialize!(AdjournedGroupDeletionRun, GroupCursor);
