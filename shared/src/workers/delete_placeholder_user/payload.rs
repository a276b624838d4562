//! The payload of `delete-placeholder-user` (B70): [`DeletePlaceholderUserRun`], the
//! attempt bound [`ATTEMPT_MAX`], and its validating decoder.

use serde::Serialize;

use crate::function::Function;
use crate::messages::{validated_deserialize, Addressed, Checked, Fields, Payload};

/// `delete-placeholder-user.run` payload (behaviour §B70.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeletePlaceholderUserRun {
    /// The placeholder user to delete.
    pub placeholder_user_id: i64,
    /// The detail's `deletion_attempts` after the claim (informational: logs and key).
    pub attempt: i64,
}

/// `MAX_ATTEMPTS` of b70: an `attempt` is a claimed count, 1 to 15.
pub const ATTEMPT_MAX: i64 = 15;

impl Payload for DeletePlaceholderUserRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(DeletePlaceholderUserRun {
            placeholder_user_id: f.id("placeholder_user_id")?,
            attempt: f.int("attempt", 1, ATTEMPT_MAX)?,
        })
    }
}

impl Addressed for DeletePlaceholderUserRun {
    const RECEIVER: Function = Function::DeletePlaceholderUser;
}

validated_deserialize!(DeletePlaceholderUserRun);
