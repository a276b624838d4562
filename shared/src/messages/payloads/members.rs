//! Payloads of remove-expired-members (B38), delete-user and prune-deletions (B43).
//!
//! Owns: [`RemoveExpiredMembersRun`] with its keyset [`MemberCursor`],
//! [`DeleteUserRun`], [`SchedulePruneDeletionsRun`] and [`PruneDeletionsRun`], and
//! their validating decoders.

use chrono::NaiveDate;
use serde::Serialize;

use super::fields::{Checked, Fields, Payload, TEXT_MAX_CHARS};

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

/// `schedule-prune-deletions.run` payload: `{}` (unknown fields are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulePruneDeletionsRun {}

/// `prune-deletions.run` payload: `{}` (unknown fields are ignored). The work list is
/// `members_deletion_schedules` itself, so no cursor travels.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PruneDeletionsRun {}

impl Payload for MemberCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(MemberCursor {
            expires_at: f.date("expires_at")?,
            id: f.int("id", 0, i64::MAX)?,
        })
    }
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

impl Payload for SchedulePruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(SchedulePruneDeletionsRun {})
    }
}

impl Payload for PruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(PruneDeletionsRun {})
    }
}
