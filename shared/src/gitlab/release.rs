//! Which GitLab release a database was migrated by, and whether the bundle is tested
//! on it (docs/gitlab-source-notes.md §A.1; behaviour §S4).
//!
//! Owns: the marker versions of each release ([`MARKERS`]), the tested range
//! ([`OLDEST`] to [`NEWEST`]), [`classify`] of a newest `schema_migrations` version,
//! and [`read`], the one query of it. Every function's cold start ([`crate::lambda`])
//! and `hk check` refuse a release outside the range; a newer one is accepted only up
//! to the migration version an operator names (`GITLAB_SCHEMA_ACCEPTED`, after
//! reading that release's notes), so the next GitLab upgrade is refused again.

use tokio_postgres::GenericClient;

pub mod sql;

/// The first migration version known for each release (docs/gitlab-source-notes.md
/// §A.1): a newest version at or above it means at least that release.
pub const MARKERS: &[(&str, &str)] = &[
    ("20250502102329", "18.0"),
    ("20250526065102", "18.1"),
    ("20250709143510", "18.2"),
    ("20250722084637", "18.3"),
    ("20250813085941", "18.4"),
    ("20250915232121", "18.5"),
    ("20251014132633", "18.6"),
    ("20251119195901", "18.7"),
    ("20251231013427", "18.8"),
    ("20260117231951", "18.9"),
    ("20260330104732", "19.0"),
    ("20260604190000", "19.1"),
    ("20260617120000", "19.2"),
    ("20260727141402", "19.3"),
    ("20260818153000", "19.4"),
    ("20260916223000", "19.5"),
];

/// The oldest supported release.
pub const OLDEST: &str = "18.2";
/// The newest supported (and tested) release.
pub const NEWEST: &str = "19.5";
/// The first migration version past the tested range. No 19.6 marker is known, so
/// this is the day after 19.5's release (2026-10-15): a migration's version is the time
/// it was written, and a release ships none written after it (docs/gitlab-source-notes.md
/// §A.1). Replace it with 19.6's first marker when one is known.
pub const PAST_NEWEST: &str = "20261016000000";

/// The marker of a listed release.
pub fn marker(release: &str) -> &'static str {
    MARKERS
        .iter()
        .find(|(_, r)| *r == release)
        .expect("a listed release")
        .0
}

/// The newest release whose marker is at or below `newest` (a 14-digit migration
/// version); `None` below 18.0's.
pub fn release_of(newest: &str) -> Option<&'static str> {
    MARKERS
        .iter()
        .rev()
        .find(|(v, _)| newest.len() == v.len() && newest >= *v)
        .map(|(_, r)| *r)
}

/// `18.2 to 19.5`.
pub fn range() -> String {
    format!("{OLDEST} to {NEWEST}")
}

/// How a database's newest migration relates to the tested range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// In range: the release (`18.9` stands for 18.9 to 18.11, whose markers are not
    /// known).
    Tested(&'static str),
    /// Past the range ([`PAST_NEWEST`] or later); `accepted` when at or below the
    /// version an operator accepted.
    Newer {
        /// Whether [`classify`]'s `accepted` version covers it.
        accepted: bool,
    },
    /// Below the oldest supported release (`None`: below 18.0).
    Older(Option<&'static str>),
}

/// Classify the newest migration `version`; `accepted` is the newest migration version
/// an operator checked past the range (`GITLAB_SCHEMA_ACCEPTED`).
pub fn classify(version: &str, accepted: Option<&str>) -> Fit {
    let old = marker(OLDEST);
    match release_of(version) {
        Some(_) if version.len() == PAST_NEWEST.len() && version >= PAST_NEWEST => Fit::Newer {
            accepted: accepted.is_some_and(|a| a.len() == version.len() && version <= a),
        },
        Some(r) if version >= old => Fit::Tested(r),
        found => Fit::Older(found),
    }
}

impl Fit {
    /// The one line a refusal says: the release found, the newest migration and the
    /// tested range, and what to do. `None` when the release runs.
    pub fn refusal(&self, version: &str) -> Option<String> {
        let range = range();
        match self {
            Fit::Tested(_) | Fit::Newer { accepted: true, .. } => None,
            Fit::Newer { .. } => Some(format!(
                "GitLab newer than {NEWEST} (newest migration {version}) is past the \
                 tested range {range}: refused. Read that release's notes for the tables \
                 this bundle touches, then set GITLAB_SCHEMA_ACCEPTED={version} \
                 (parameter GitlabSchemaAccepted), or upgrade the bundle"
            )),
            Fit::Older(found) => Some(format!(
                "GitLab {} (newest migration {version}) is older than the tested range \
                 {range}: refused. Upgrade GitLab to {OLDEST} or later",
                found.map_or("before 18.0".to_string(), |r| r.to_string())
            )),
        }
    }
}

/// Check `GITLAB_SCHEMA_ACCEPTED`: a 14-digit migration version.
pub fn valid_accepted(v: &str) -> bool {
    v.len() == 14 && v.bytes().all(|b| b.is_ascii_digit())
}

/// What the database says of its release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// The newest migration version.
    Version(String),
    /// `schema_migrations` holds no migration version.
    Empty,
    /// There is no `schema_migrations` (not a GitLab database).
    NoTable,
    /// The role may not read `schema_migrations` (42501).
    NotPermitted,
}

/// Read the newest migration version (unprepared: one round trip, pipelined with the
/// schema probes at cold start). An error that is not one of [`Read`]'s cases
/// (the connection broke) is returned as such.
pub async fn read<C: GenericClient>(c: &C) -> Result<Read, tokio_postgres::Error> {
    use tokio_postgres::error::SqlState;
    match c.query_typed_opt(sql::NEWEST_MIGRATION, &[]).await {
        Ok(Some(row)) => Ok(Read::Version(row.get(0))),
        Ok(None) => Ok(Read::Empty),
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => Ok(Read::NoTable),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Ok(Read::NotPermitted),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_and_past_it() {
        assert_eq!(classify("20250709143510", None), Fit::Tested("18.2"));
        assert_eq!(classify("20260301000000", None), Fit::Tested("18.9"));
        assert_eq!(classify("20260916223000", None), Fit::Tested("19.5"));
        assert_eq!(classify("20261015235959", None), Fit::Tested("19.5"));
        assert_eq!(classify("20250601000000", None), Fit::Older(Some("18.1")));
        assert_eq!(classify("20240101000000", None), Fit::Older(None));
        let newer = PAST_NEWEST;
        assert_eq!(classify(newer, None), Fit::Newer { accepted: false });
        assert_eq!(classify(newer, Some(newer)), Fit::Newer { accepted: true });
        // An accepted version covers that schema and older ones, never a later upgrade.
        assert_eq!(
            classify("20261101000000", Some(newer)),
            Fit::Newer { accepted: false }
        );
        let refusal = classify(newer, None).refusal(newer).unwrap();
        assert!(
            refusal.contains(&format!("GITLAB_SCHEMA_ACCEPTED={newer}")),
            "{refusal}"
        );
        assert!(refusal.contains("GitLab newer than 19.5"), "{refusal}");
        assert!(
            valid_accepted(newer) && !valid_accepted("19.0") && !valid_accepted("2026040100000x")
        );
    }
}
