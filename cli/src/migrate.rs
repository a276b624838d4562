//! Schema migrations for LOCAL AND TEST databases only (behaviour §S).
//!
//! Owns: the embedded SQL of `cli/migrations/` (refinery) that creates GitLab's
//! table subset. The runtime code never issues DDL, and `hk migrate` must never be
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

/// Apply every pending migration; returns the versions applied now.
pub async fn run(client: &mut tokio_postgres::Client) -> Result<Vec<i32>> {
    client
        .batch_execute("CREATE SCHEMA IF NOT EXISTS hk_meta")
        .await?;
    let report = embedded::migrations::runner()
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
