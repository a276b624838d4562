//! The payload of `delete-user` (phase 2 of a user's removal): [`DeleteUserRun`] and
//! its validating decoder; `gitlab::user_removal`'s `UserDeletion` intent becomes it.

use serde::Serialize;

use crate::function::Function;
use crate::messages::{validated_deserialize, Addressed, Checked, Fields, Payload, TEXT_MAX_CHARS};

/// `delete-user.run` payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeleteUserRun {
    /// The user to delete.
    pub user_id: i64,
    /// Who started the removal, if anyone.
    pub initiator_user_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}

impl Payload for DeleteUserRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(DeleteUserRun {
            user_id: f.id("user_id")?,
            initiator_user_id: f.opt_id("initiator_user_id")?,
            reason: f.opt_text("reason", TEXT_MAX_CHARS)?,
        })
    }
}

impl Addressed for DeleteUserRun {
    const RECEIVER: Function = Function::DeleteUser;
}

validated_deserialize!(DeleteUserRun);
