//! Schema migrations for LOCAL AND TEST databases only (behaviour §S).
//!
//! Owns: the embedded SQL of `cli/migrations/` (refinery) that creates GitLab's
//! table subset. The runtime code never issues DDL, and `hk migrate` must never be
//! pointed at a real GitLab database. refinery's history table lives in the separate
//! schema `hk_meta`, so `public` holds only GitLab's tables (behaviour §S1.1).

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
