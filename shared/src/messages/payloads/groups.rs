//! Payloads of adjourned-group-deletion and group-destroy (B51).
//!
//! Owns: [`AdjournedGroupDeletionRun`] with its keyset [`GroupCursor`], and
//! [`GroupDestroyRun`], and their validating decoders.

use chrono::NaiveDate;
use serde::Serialize;

use super::fields::{index_within, Checked, Fields, Payload};

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

/// `group-destroy.run` payload (behaviour §B51.4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupDestroyRun {
    /// The group to destroy.
    pub group_id: i64,
    /// The user who scheduled the deletion.
    pub user_id: i64,
    /// The schedule's `marked_for_deletion_on` when the message was sent.
    pub marked_for_deletion_on: NaiveDate,
}

impl Payload for GroupCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let group_id = f.int("group_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::MAX)? as u64;
        index_within(f, index, group_id)?;
        Ok(GroupCursor { group_id, index })
    }
}

impl Payload for GroupDestroyRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(GroupDestroyRun {
            group_id: f.id("group_id")?,
            user_id: f.id("user_id")?,
            marked_for_deletion_on: f.date("marked_for_deletion_on")?,
        })
    }
}
