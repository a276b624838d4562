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
];

/// The oldest supported release.
pub const OLDEST: &str = "18.2";
/// The newest supported (and tested) release.
pub const NEWEST: &str = "18.11";
/// The first release past the tested range: its marker is where "newer than tested"
/// starts (no marker of 18.10 or 18.11 is known, so 18.9's up to 19.0's is in range).
pub const PAST_NEWEST: &str = "19.0";

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

/// `18.2 to 18.11`.
pub fn range() -> String {
    format!("{OLDEST} to {NEWEST}")
}

/// How a database's newest migration relates to the tested range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// In range: the release (`18.9` stands for 18.9 to 18.11, whose markers are not
    /// known).
    Tested(&'static str),
    /// Past the range; `accepted` when at or below the version an operator accepted.
    Newer {
        /// The newest release whose marker it reaches.
        release: &'static str,
        /// Whether [`classify`]'s `accepted` version covers it.
        accepted: bool,
    },
    /// Below the oldest supported release (`None`: below 18.0).
    Older(Option<&'static str>),
}

/// Classify the newest migration `version`; `accepted` is the newest migration version
/// an operator checked past the range (`GITLAB_SCHEMA_ACCEPTED`).
pub fn classify(version: &str, accepted: Option<&str>) -> Fit {
    let (old, next) = (marker(OLDEST), marker(PAST_NEWEST));
    match release_of(version) {
        Some(r) if version >= old && version < next => Fit::Tested(r),
        Some(release) if version >= old => Fit::Newer {
            release,
            accepted: accepted.is_some_and(|a| a.len() == version.len() && version <= a),
        },
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
            Fit::Newer { release, .. } => Some(format!(
                "GitLab {release} or later (newest migration {version}) is newer than the \
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

/// Read the newest migration version. An error that is not one of [`Read`]'s cases
/// (the connection broke) is returned as such.
pub async fn read<C: GenericClient>(c: &C) -> Result<Read, tokio_postgres::Error> {
    use tokio_postgres::error::SqlState;
    match c.query_opt(sql::NEWEST_MIGRATION, &[]).await {
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
        assert_eq!(classify("20250601000000", None), Fit::Older(Some("18.1")));
        assert_eq!(classify("20240101000000", None), Fit::Older(None));
        let newer = "20260401000000";
        assert_eq!(
            classify(newer, None),
            Fit::Newer {
                release: "19.0",
                accepted: false
            }
        );
        assert_eq!(
            classify(newer, Some(newer)),
            Fit::Newer {
                release: "19.0",
                accepted: true
            }
        );
        // An accepted version covers that schema and older ones, never a later upgrade.
        assert_eq!(
            classify("20260501000000", Some(newer)),
            Fit::Newer {
                release: "19.0",
                accepted: false
            }
        );
        assert!(classify(newer, None)
            .refusal(newer)
            .unwrap()
            .contains("GITLAB_SCHEMA_ACCEPTED=20260401000000"));
        assert!(
            valid_accepted(newer) && !valid_accepted("19.0") && !valid_accepted("2026040100000x")
        );
    }
}
