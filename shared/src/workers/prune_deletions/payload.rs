//! The payload of `prune-deletions` (B43): [`PruneDeletionsRun`].

use serde::Serialize;

use crate::function::Function;
use crate::messages::{validated_deserialize, Addressed, Checked, Fields, Payload};

/// `prune-deletions.run` payload: `{}` (unknown fields are ignored). The work list is
/// `members_deletion_schedules` itself, so no cursor travels.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PruneDeletionsRun {}

impl Payload for PruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(PruneDeletionsRun {})
    }
}

impl Addressed for PruneDeletionsRun {
    const RECEIVER: Function = Function::PruneDeletions;
}

validated_deserialize!(PruneDeletionsRun);
