//! The payload of `group-destroy` (B51): [`GroupDestroyRun`] and its validating decoder.

use chrono::NaiveDate;
use serde::Serialize;

use crate::function::Function;
use crate::messages::{validated_deserialize, Addressed, Checked, Fields, Payload};

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

impl Payload for GroupDestroyRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(GroupDestroyRun {
            group_id: f.id("group_id")?,
            user_id: f.id("user_id")?,
            marked_for_deletion_on: f.date("marked_for_deletion_on")?,
        })
    }
}

impl Addressed for GroupDestroyRun {
    const RECEIVER: Function = Function::GroupDestroy;
}

validated_deserialize!(GroupDestroyRun);
