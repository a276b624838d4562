//! The demo data set of `hk seed demo` and `hk demo`.
//!
//! Owns: `demo/demo.sql` (fixed ids, dates relative to the run's `today`) and the
//! derived `project_authorizations`, computed with the same `refresh` the batches use
//! so the seed starts consistent. Local databases only.

use chrono::NaiveDate;

use crate::error::{Error, Result};
use crate::gitlab::authz;

/// The demo SQL files, applied in order; each batch adds its own file (fixed id
/// ranges per file, see the file headers). Public so tests can tell when a cached
/// copy of the seeded data is stale.
pub const DEMO_SQL: &[&str] = &[
    include_str!("../demo/demo.sql"),
    include_str!("../demo/b43.sql"),
    include_str!("../demo/b51.sql"),
    include_str!("../demo/b70.sql"),
];

/// Seed the demo data into an empty, migrated database.
pub async fn seed(client: &mut tokio_postgres::Client, today: NaiveDate) -> Result<()> {
    let users: i64 = client
        .query_one("SELECT count(*) FROM users", &[])
        .await?
        .get(0);
    if users > 0 {
        return Err(Error::Config(
            "the demo data needs an empty database (users is not empty)".into(),
        ));
    }
    let tx = client.transaction().await?;
    for sql in DEMO_SQL {
        tx.batch_execute(&sql.replace(":today", &today.to_string()))
            .await?;
    }
    let projects: Vec<i64> = tx
        .query("SELECT id::bigint FROM projects", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let users: Vec<i64> = tx
        .query(
            "SELECT DISTINCT user_id::bigint FROM members WHERE user_id IS NOT NULL",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for u in users {
        authz::refresh(&tx, u, &projects).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Row counts of the tables the batches change, in a fixed order (demo summary).
pub async fn table_counts(client: &tokio_postgres::Client) -> Result<Vec<(String, i64)>> {
    const TABLES: [&str; 9] = [
        "users",
        "members",
        "project_authorizations",
        "notification_settings",
        "personal_access_tokens",
        "ghost_user_migrations",
        "issues",
        "merge_requests",
        "notes",
    ];
    let mut out = Vec::new();
    for t in TABLES {
        let n: i64 = client
            .query_one(&format!("SELECT count(*) FROM {t}"), &[])
            .await?
            .get(0);
        out.push((t.to_string(), n));
    }
    Ok(out)
}
