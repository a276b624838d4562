//! The payload of `placeholder-user-cleanup` (B70): [`PlaceholderUserCleanupRun`] with
//! its keyset [`DetailCursor`], and their validating decoders.

use serde::Serialize;

use crate::messages::{cursor_run, index_within, validated_deserialize, Checked, Fields, Payload};

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

impl Payload for DetailCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let detail_id = f.int("detail_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::from(u32::MAX))? as u32;
        index_within(f, u64::from(index), detail_id)?;
        Ok(DetailCursor { detail_id, index })
    }
}

cursor_run!(PlaceholderUserCleanupRun(DetailCursor));

validated_deserialize!(PlaceholderUserCleanupRun, DetailCursor);
