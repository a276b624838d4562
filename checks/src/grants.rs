//! `hk grants`: the GRANT statements a database role needs to run the functions.
//!
//! Owns: turning what `hk check`'s privileges check derives ([`super::privileges::derive`]:
//! PostgreSQL's own parse trees of every catalogue statement of the database's
//! deletion-state model, the tables the triggers they fire use, the sequences their
//! inserts draw from) into a GRANT script for a role name: `CONNECT` on the database,
//! `USAGE` on each schema, per table the privileges (SELECT, INSERT, UPDATE, DELETE;
//! never TRUNCATE, REFERENCES or TRIGGER, which no statement needs), `USAGE` on each
//! sequence. There is no second list of tables: what the check tests is what this
//! prints, plus `SELECT` on `schema_migrations`, which `hk check` (not a function)
//! reads for GitLab's schema version. Table-level by default; with `columns`, SELECT, INSERT and UPDATE are
//! granted on exactly the columns the statements name where they name some (DELETE,
//! a statement that names no column, such as a row lock or a trigger's use, and one
//! that reads a system column such as `ctid` stay table-level), which the check
//! accepts as the executor does.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Context, Result};

use shared::db::Connector;

use super::privileges::derive;
use super::tree::{DELETE, PRIVILEGES, SYSTEM_COLUMN};
use super::{catalogue, sql};

/// Privileges of one GRANT by their place in GRANT order (SELECT, INSERT, UPDATE,
/// DELETE), each as written (`UPDATE` or `UPDATE (a, b)`).
type Privileges = BTreeMap<usize, String>;

/// The script's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grants {
    /// The role, quoted.
    pub role: String,
    /// The deletion-state model line of the catalogue pass (which statements).
    pub model: String,
    /// How many statements the grants were derived from.
    pub statements: usize,
    /// The GRANT statements, each ending in `;`, in order: database, schemas, tables
    /// (by name), sequences.
    pub grants: Vec<String>,
}

impl Grants {
    /// The script: a comment saying what it is, then one GRANT per line.
    pub fn script(&self) -> String {
        let mut out = format!(
            "-- The grants role {} needs to run the housekeeping functions on this database:\n\
             -- derived by PostgreSQL from the parse trees of the {} catalogue statements of\n\
             -- the deletion model in use, as `hk check` derives them. No TRUNCATE, no DDL.\n\
             -- Deletion model: {}\n\
             -- Run as the tables' owner (gitlab) or a superuser; re-run `hk grants` after\n\
             -- each GitLab upgrade (a new table or sequence needs its grant).\n",
            self.role, self.statements, self.model
        );
        for g in &self.grants {
            out.push_str(g);
            out.push('\n');
        }
        out
    }
}

/// The grants `role` needs, derived on the database `connector` reaches (connected
/// as a role that may read the catalogue's tables: the owner, typically). Fails when a
/// statement does not prepare there or its needs cannot be derived: `hk check` says
/// why.
pub async fn grants(connector: &Connector, role: &str, columns: bool) -> Result<Grants> {
    let a = connector
        .connect("hk-grants")
        .await
        .context("cannot connect")?;
    a.simple_query(sql::READ_ONLY).await?;
    let (trees, mut notices) = catalogue::tree_session(connector).await?;
    let pass = catalogue::pass(&trees, &mut notices, &a).await?;
    drop(trees);
    let failed: Vec<String> = pass
        .checks
        .iter()
        .filter(|c| !c.ok)
        .map(|c| c.line())
        .collect();
    if !failed.is_empty() || pass.without_tree > 0 {
        bail!(
            "the grants cannot be derived: {}{}; `hk check` tells more",
            failed.join("; "),
            if pass.without_tree > 0 {
                format!("; no parse tree for {} statement(s)", pass.without_tree)
            } else {
                String::new()
            }
        );
    }
    let model = pass
        .checks
        .first()
        .map(|c| c.detail.clone())
        .unwrap_or_default();
    let derived = derive(&a, &pass.needs).await?;
    let t = a.query_one(sql::GRANT_TARGET, &[&role]).await?;
    let (database, role): (String, String) = (t.get(0), t.get(1));
    let mut schemas = BTreeSet::new();
    // Table (as a GRANT names it) → its table-level privileges and column-level grants.
    let mut tables: BTreeMap<String, (Privileges, Privileges)> = BTreeMap::new();
    for ((relid, bit), need) in &derived.tables {
        let r = a.query_one(sql::RELATION_NAMES, &[relid]).await?;
        let (table, schema): (String, String) = (r.get(0), r.get(1));
        schemas.insert(schema);
        let place = PRIVILEGES
            .iter()
            .position(|(b, _)| b == bit)
            .expect("known");
        let name = PRIVILEGES[place].1;
        let e = tables.entry(table).or_default();
        let column_level = columns
            && *bit != DELETE
            && !need.columns.is_empty()
            && !need.columns.contains(&0)
            && !need.columns.contains(&SYSTEM_COLUMN);
        if column_level {
            let cols: Vec<i16> = need.columns.iter().copied().collect();
            let list: String = a
                .query_one(sql::COLUMN_NAMES, &[relid, &cols])
                .await?
                .get(0);
            e.1.insert(place, format!("{name} ({list})"));
        } else {
            e.0.insert(place, name.to_string());
        }
    }
    let mut sequences = Vec::new();
    for seq in derived.sequences.keys() {
        if let Some(r) = a.query_opt(sql::SEQUENCE_SCHEMA, &[seq]).await? {
            schemas.insert(r.get(0));
        }
        sequences.push(format!("GRANT USAGE ON SEQUENCE {seq} TO {role};"));
    }
    let mut out = vec![format!("GRANT CONNECT ON DATABASE {database} TO {role};")];
    out.extend(
        schemas
            .iter()
            .map(|s| format!("GRANT USAGE ON SCHEMA {s} TO {role};")),
    );
    for (table, (whole, cols)) in &tables {
        for privileges in [whole, cols] {
            if !privileges.is_empty() {
                let list: Vec<&str> = privileges.values().map(String::as_str).collect();
                out.push(format!("GRANT {} ON {table} TO {role};", list.join(", ")));
            }
        }
    }
    out.extend(sequences);
    Ok(Grants {
        role,
        model,
        statements: pass.needs.len(),
        grants: out,
    })
}
