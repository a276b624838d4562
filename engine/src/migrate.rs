//! Schema migrations for LOCAL AND TEST databases only (behaviour §S).
//!
//! Owns: the embedded SQL of `engine/migrations/` (refinery) that creates the model of
//! GitLab's tables the bundle touches, per supported GitLab release ([`GitlabVersion`]:
//! V1 is GitLab 18.2's model, V2 the changes up to 18.8, V3 those up to 18.11, V4 those
//! up to 19.5), and the fingerprint of that
//! SQL the test harness names its template after ([`fingerprint`]). The runtime code never issues DDL, and `hk migrate` must never be
//! pointed at a real GitLab database. refinery's history table lives in the separate
//! schema `hk_meta`, so `public` holds only GitLab's tables (behaviour §S1.1).
//!
//! Also owns the throwaway marker: the table `hk_meta.throwaway`, created only in
//! databases `hk` created itself (`hk db up`, `hk demo`'s own cluster, the test
//! harness's template). `hk run` uses its embedded demo defaults (file mailer, demo
//! key base, placeholder instance) only against a marked database. A table, not a
//! database comment, because `CREATE DATABASE … TEMPLATE` copies tables (the test
//! harness clones every test database from a marked template) but not comments; and
//! `hk migrate` never creates it, so a plain `CREATE DATABASE` + `hk migrate` stays
//! unmarked, whatever its address (loopback included: SSH tunnels).

use shared::error::{Error, Result};

mod embedded {
    refinery::embed_migrations!("migrations");
}

/// Where refinery records applied migrations.
pub const HISTORY_TABLE: &str = "hk_meta.refinery_schema_history";

/// A supported GitLab release the model can be built for: the oldest, the newest and
/// the releases between where the modelled tables changed shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GitlabVersion {
    /// GitLab 18.2 (migration V1 only).
    V18_2,
    /// GitLab 18.8 (V1 and V2).
    V18_8,
    /// GitLab 18.11 (V1 to V3).
    V18_11,
    /// GitLab 19.5 (V1 to V4), the default.
    #[default]
    V19_5,
}

impl GitlabVersion {
    /// Every supported release, oldest first.
    pub const ALL: [GitlabVersion; 4] = [
        GitlabVersion::V18_2,
        GitlabVersion::V18_8,
        GitlabVersion::V18_11,
        GitlabVersion::V19_5,
    ];

    /// `18.2`, `18.8`, `18.11` or `19.5`.
    pub fn as_str(self) -> &'static str {
        match self {
            GitlabVersion::V18_2 => "18.2",
            GitlabVersion::V18_8 => "18.8",
            GitlabVersion::V18_11 => "18.11",
            GitlabVersion::V19_5 => "19.5",
        }
    }

    /// The last migration of this release's model.
    pub fn target(self) -> i32 {
        match self {
            GitlabVersion::V18_2 => 1,
            GitlabVersion::V18_8 => 2,
            GitlabVersion::V18_11 => 3,
            GitlabVersion::V19_5 => 4,
        }
    }
}

impl std::str::FromStr for GitlabVersion {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        GitlabVersion::ALL
            .into_iter()
            .find(|v| v.as_str() == s.trim())
            .ok_or_else(|| {
                format!("unsupported GitLab version {s:?}: expected 18.2, 18.8, 18.11 or 19.5")
            })
    }
}

impl std::fmt::Display for GitlabVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hex fingerprint of the embedded migrations up to `version`'s target (their names
/// and SQL) and of the version: it changes whenever either does, so a database built
/// from an older model is never taken for the current one.
pub fn fingerprint(version: GitlabVersion) -> String {
    use std::hash::{Hash, Hasher};
    // FNV-1a, 64 bits: stable across runs and Rust releases (unlike `DefaultHasher`).
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 ^= u64::from(*b);
                self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    version.as_str().hash(&mut h);
    for m in embedded::migrations::runner().get_migrations() {
        if m.version() <= version.target() {
            m.name().hash(&mut h);
            m.sql().unwrap_or_default().hash(&mut h);
        }
    }
    format!("{:016x}", h.finish())
}

/// Apply every pending migration of the newest model; returns the versions applied now.
pub async fn run(client: &mut tokio_postgres::Client) -> Result<Vec<i32>> {
    run_for(client, GitlabVersion::default()).await
}

/// Apply the pending migrations of `version`'s model (none past its target); returns
/// the versions applied now.
pub async fn run_for(
    client: &mut tokio_postgres::Client,
    version: GitlabVersion,
) -> Result<Vec<i32>> {
    client
        .batch_execute("CREATE SCHEMA IF NOT EXISTS hk_meta")
        .await?;
    let mut runner =
        embedded::migrations::runner().set_target(refinery::Target::Version(version.target()));
    let report = runner
        .set_migration_table_name(HISTORY_TABLE)
        .run_async(client)
        .await
        .map_err(|e| Error::Invariant(format!("migration failed: {e}")))?;
    Ok(report
        .applied_migrations()
        .iter()
        .map(|m| m.version())
        .collect())
}

/// The marker table of databases `hk` created.
pub const THROWAWAY_TABLE: &str = "hk_meta.throwaway";

/// Mark the connected database as created by `hk` (`by`: which command), so `hk run`
/// may use its demo defaults there. Only for databases `hk` has just created.
pub async fn mark_throwaway(client: &tokio_postgres::Client, by: &str) -> Result<()> {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA IF NOT EXISTS hk_meta; \
             CREATE TABLE IF NOT EXISTS {THROWAWAY_TABLE} (created_by text NOT NULL, created_at timestamptz NOT NULL)"
        ))
        .await?;
    client
        .execute(
            &format!("INSERT INTO {THROWAWAY_TABLE} (created_by, created_at) VALUES ($1, $2)"),
            &[&by, &chrono::Utc::now()],
        )
        .await?;
    Ok(())
}

/// Whether the connected database carries the throwaway marker.
pub async fn is_throwaway(client: &tokio_postgres::Client) -> Result<bool> {
    let row = client
        .query_one(
            &format!("SELECT to_regclass('{THROWAWAY_TABLE}') IS NOT NULL"),
            &[],
        )
        .await?;
    Ok(row.get(0))
}
