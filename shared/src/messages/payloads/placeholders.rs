//! Payloads of placeholder-user-cleanup and delete-placeholder-user (B70).
//!
//! Owns: [`PlaceholderUserCleanupRun`] with its keyset [`DetailCursor`],
//! [`DeletePlaceholderUserRun`], the attempt bound [`ATTEMPT_MAX`], and their
//! validating decoders.

use serde::Serialize;

use super::fields::{index_within, Checked, Fields, Payload};

/// `placeholder-user-cleanup.run` payload (behaviour §B70.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PlaceholderUserCleanupRun {
    /// Where the run goes on; absent for the first message of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<DetailCursor>,
}

/// Keyset cursor of B70: the last visited detail and the run-wide child index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DetailCursor {
    /// The id of the last `import_placeholder_user_details` row visited.
    pub detail_id: i64,
    /// How many children the run has sent so far (the next child's delay in seconds).
    pub index: u32,
}

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

impl Payload for DetailCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let detail_id = f.int("detail_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::from(u32::MAX))? as u32;
        index_within(f, u64::from(index), detail_id)?;
        Ok(DetailCursor { detail_id, index })
    }
}

impl Payload for DeletePlaceholderUserRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(DeletePlaceholderUserRun {
            placeholder_user_id: f.id("placeholder_user_id")?,
            attempt: f.int("attempt", 1, ATTEMPT_MAX)?,
        })
    }
}
