//! The payload of `pat-expiring` (B28): [`PatExpiringRun`].

use serde::Serialize;

use crate::messages::{validated_deserialize, Checked, Fields, Payload};

/// `pat-expiring.run` payload: empty; every invocation starts again at `seven_days`
/// (behaviour §B28.4), because claimed tokens no longer match.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PatExpiringRun {}

impl Payload for PatExpiringRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(PatExpiringRun {})
    }
}

validated_deserialize!(PatExpiringRun);
