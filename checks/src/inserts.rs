//! `hk check`'s insert-columns check: every INSERT of the catalogue supplies each
//! column that must not be null and has no default.
//!
//! Owns: reading `INSERT INTO table (columns…)` from the catalogue's text
//! ([`catalogue_inserts`]) and the check against the catalog ([`insert_columns`]):
//! `NOT NULL` columns and columns not null by a `CHECK (col IS NOT NULL)` constraint
//! (validated or not: GitLab's usual way to add one), neither identity nor generated.

use anyhow::Result;
use tokio_postgres::Client;

use super::{sql, Check};

/// The `(table, columns)` of every `INSERT INTO table (columns…)` of the catalogue.
pub fn catalogue_inserts() -> Vec<(String, Vec<String>, String)> {
    let mut out = Vec::new();
    for s in shared::catalogue::all() {
        let text = s.text;
        let mut rest = text;
        while let Some(i) = rest.find("INSERT INTO ") {
            let after = &rest[i + "INSERT INTO ".len()..];
            let table: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let tail = after[table.len()..].trim_start();
            if let (Some(body), false) = (tail.strip_prefix('('), table.is_empty()) {
                if let Some(end) = body.find(')') {
                    let cols = body[..end]
                        .split(',')
                        .map(|c| c.trim().to_string())
                        .collect();
                    out.push((table.clone(), cols, format!("{}::{}", s.module, s.name)));
                }
            }
            rest = after;
        }
    }
    out
}

/// One line per INSERT of the catalogue: what it leaves out that must not be null.
pub async fn insert_columns(c: &Client) -> Result<Vec<Check>> {
    let mut out = Vec::new();
    for (table, supplied, stmt) in catalogue_inserts() {
        let rows = c.query(sql::REQUIRED_COLUMNS, &[&table]).await?;
        let missing: Vec<String> = rows
            .iter()
            .filter(|r| !supplied.contains(&r.get::<_, String>(0)))
            .map(|r| {
                let (col, check): (String, String) = (r.get(0), r.get(1));
                if check.is_empty() {
                    format!("{table}.{col}")
                } else {
                    format!("{table}.{col} (NOT NULL by CHECK constraint {check})")
                }
            })
            .collect();
        let name = format!("insert into {table} ({stmt})");
        out.push(if missing.is_empty() {
            Check::pass(name, "every NOT NULL column without a default is supplied")
        } else {
            Check::fail(
                name,
                format!("NOT NULL without default and not supplied: {}", missing.join(", ")),
                "these inserts would fail: the schema differs from GitLab 18's (a column added without a default?)",
            )
        });
    }
    Ok(out)
}
