//! The payload of `schedule-prune-deletions` (B43): [`SchedulePruneDeletionsRun`].

use serde::Serialize;

use crate::messages::{validated_deserialize, Checked, Fields, Payload};

/// `schedule-prune-deletions.run` payload: `{}` (unknown fields are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulePruneDeletionsRun {}

impl Payload for SchedulePruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(SchedulePruneDeletionsRun {})
    }
}

validated_deserialize!(SchedulePruneDeletionsRun);
