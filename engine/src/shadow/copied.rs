//! What a `--read-only` copy plans before reading a row ([`CopyPlan`]: the tables and
//! columns, the estimate, the sequences) and what it copied ([`Copied`]: per table,
//! the snapshot's time, the sequences' positions set once the snapshot ended, the
//! `read_only` object of a plan).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio_postgres::Client;

use super::{Source, APPROXIMATIONS};

/// What to copy: per table, the columns (the rest of the model's table stays at its
/// default or NULL). `None` in `ReadOnlySnapshot::prepare`: every column of every
/// table of the model.
pub type Selection = BTreeMap<String, BTreeSet<String>>;

/// One table to copy, as `ReadOnlySnapshot::prepare` planned it.
#[derive(Debug, Clone)]
pub struct TablePlan {
    /// The table (schema `public`).
    pub table: String,
    /// The columns copied, in the model's order.
    pub columns: Vec<String>,
    /// Columns of the model the live table does not have (left at their default).
    pub defaulted: Vec<String>,
    /// Columns of the model left out of the copy (no statement uses them).
    pub left_out: Vec<String>,
    /// The live table's estimated rows (`pg_class.reltuples`, 0 when never analysed).
    pub est_rows: u64,
    /// The live table's heap size in bytes (`relpages` × block size): what its
    /// sequential scan reads, whatever the columns.
    pub est_bytes: u64,
}

/// The copy planned in the snapshot before any row is read: the tables and their
/// estimates, and each local sequence with the live one it follows.
#[derive(Debug, Clone)]
pub struct CopyPlan {
    /// The tables, in copy order.
    pub tables: Vec<TablePlan>,
    /// `(local sequence, live sequence)`.
    pub sequences: Vec<(String, String)>,
}

impl CopyPlan {
    /// Estimated rows in all.
    pub fn est_rows(&self) -> u64 {
        self.tables
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.est_rows))
    }

    /// Estimated bytes in all.
    pub fn est_bytes(&self) -> u64 {
        self.tables
            .iter()
            .fold(0u64, |a, t| a.saturating_add(t.est_bytes))
    }
}

/// One table of the copy.
#[derive(Debug, Clone)]
pub struct TableCopy {
    /// The table (schema `public`).
    pub table: String,
    /// Rows copied.
    pub rows: u64,
    /// Columns copied.
    pub columns: Vec<String>,
    /// Columns of the model the live table does not have (left at their default).
    pub defaulted: Vec<String>,
    /// Columns of the model left out (no statement uses them).
    pub left_out: Vec<String>,
}

/// What was copied.
#[derive(Debug, Clone)]
pub struct Copied {
    /// The live database.
    pub source: Source,
    /// Per table, in copy order.
    pub tables: Vec<TableCopy>,
    /// Sequences and the live position to set: `(sequence, last_value, is_called)`.
    pub sequences: Vec<(String, i64, bool)>,
    /// When the snapshot was taken (hk's clock, read once the snapshot existed).
    pub snapshot_at: DateTime<Utc>,
    /// How long the snapshot transaction was open when the last row was read.
    pub elapsed: Duration,
    /// The estimate printed before the copy: `(rows, bytes)`.
    pub estimate: (u64, u64),
}

impl Copied {
    /// Rows copied in all.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// Rows per second of the copy.
    pub fn rows_per_s(&self) -> f64 {
        self.rows() as f64 / self.elapsed.as_secs_f64().max(1e-3)
    }

    /// The names of the copied tables.
    pub fn table_names(&self) -> BTreeSet<String> {
        self.tables.iter().map(|t| t.table.clone()).collect()
    }

    /// After the live snapshot ended: set each sequence to its live position, turn
    /// the copy's triggers and foreign keys back on and `ANALYZE` (all local work,
    /// none of it with the live snapshot open).
    pub async fn finish(&self, local: &Client) -> Result<()> {
        local
            .batch_execute("RESET session_replication_role")
            .await?;
        for (seq, value, called) in &self.sequences {
            local
                .execute(
                    "SELECT setval($1::text::regclass, $2, $3)",
                    &[seq, value, called],
                )
                .await?;
        }
        local.batch_execute("ANALYZE").await?;
        Ok(())
    }

    /// The `read_only` object of a `--json` plan (in its `plan` object).
    pub fn to_json(&self, blockers: &[String]) -> Value {
        json!({
            "gitlab": self.source.release,
            "newest_migration": self.source.newest_migration,
            "deletion_model": self.source.deletion.as_str(),
            "model": self.source.model.as_str(),
            "snapshot_at": shared::clock::rfc3339(self.snapshot_at),
            "estimated_rows": self.estimate.0,
            "estimated_bytes": self.estimate.1,
            "tables": self.tables.len(),
            "rows_copied": self.rows(),
            "seconds": self.elapsed.as_secs_f64(),
            "rows_per_s": self.rows_per_s().round(),
            "copied": self.tables.iter().map(|t| json!({
                "table": t.table, "rows": t.rows, "columns": t.columns,
            })).collect::<Vec<_>>(),
            "defaulted_columns": self.tables.iter()
                .flat_map(|t| t.defaulted.iter().map(move |c| format!("{}.{c}", t.table)))
                .collect::<Vec<_>>(),
            "sequences": self.sequences.len(),
            "live_blockers": blockers,
            "approximations": APPROXIMATIONS,
        })
    }
}
