//! What a `--read-only` copy holds (issue 47, docs/shadow.md): only the tables the
//! functions' statements use and, of each, only the columns they use.
//!
//! Owns: [`derive`], which asks the copy's own (still empty) database — built with
//! the live database's model — for PostgreSQL's parse trees of every catalogue
//! statement of that model, the way `hk check` derives privileges
//! (`check::catalogue::pass`, `check::privileges::derive`: relations, the columns each
//! statement reads, inserts or updates, the tables the triggers they fire use, the
//! blocking keys group-destroy follows), and widens that to what the plan on the copy
//! needs besides: each table's primary key (and, where a statement inserts, its
//! unique indexes' columns: conflicts), the foreign keys between copied tables and the tables an `ON DELETE
//! CASCADE` or `SET NULL` reaches from a table a statement deletes from (so the plan's
//! per-table counts are the real run's), and the columns `hk parity` records per
//! decision (`local::decisions::TABLES`), and `schema_migrations` (the plan reports the
//! release). A relation whose columns no statement names
//! (a whole-row read, a trigger's use) is copied whole. Only the catalogue and parse
//! trees are read: the copy derives it on its own database, `hk grants --read-only`
//! on the live one.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use shared::db::Connector;

use super::Selection;
use checks::tree::{DELETE, INSERT, SYSTEM_COLUMN};

/// The tables and columns to copy, derived on the copy's database at `local`.
pub async fn derive(local: &Connector) -> Result<Selection> {
    let a = local.connect("hk-copy-selection").await?;
    let (trees, mut notices) = checks::catalogue::tree_session(local).await?;
    let pass = checks::catalogue::pass(&trees, &mut notices, &a).await?;
    drop(trees);
    if pass.without_tree > 0 || pass.checks.iter().any(|c| !c.ok) {
        bail!(
            "the statements' columns cannot be derived on the copy's model ({} without a \
             parse tree): copy everything with --copy-all",
            pass.without_tree
        );
    }
    let derived = checks::privileges::derive(&a, &pass.needs).await?;
    // relid → columns (attnums), or None: the whole relation.
    let mut by_rel: BTreeMap<u32, Option<BTreeSet<i16>>> = BTreeMap::new();
    let mut deleted_from = BTreeSet::new();
    let inserted: BTreeSet<u32> = derived
        .tables
        .keys()
        .filter(|(_, bit)| *bit == INSERT)
        .map(|(r, _)| *r)
        .collect();
    let mut named: BTreeMap<u32, bool> = BTreeMap::new();
    for ((relid, bit), need) in &derived.tables {
        let e = by_rel
            .entry(*relid)
            .or_insert_with(|| Some(BTreeSet::new()));
        if *bit == DELETE {
            deleted_from.insert(*relid);
            continue;
        }
        let cols: BTreeSet<i16> = need
            .columns
            .iter()
            .copied()
            .filter(|c| *c != SYSTEM_COLUMN)
            .collect();
        if cols.contains(&0) || (need.any && cols.is_empty()) {
            *e = None;
        } else if let Some(set) = e {
            set.extend(cols.iter().copied());
        }
        *named.entry(*relid).or_default() |= !cols.is_empty();
    }
    // A table only deleted from (no column named anywhere): whole.
    for r in &deleted_from {
        if !named.get(r).copied().unwrap_or(false) {
            by_rel.insert(*r, None);
        }
    }
    // What a cascade reaches from a table deleted from, transitively: the
    // referencing table with its key's columns.
    let mut todo: Vec<u32> = deleted_from.iter().copied().collect();
    let mut seen: BTreeSet<u32> = todo.iter().copied().collect();
    while let Some(r) = todo.pop() {
        for row in a
            .query(
                "SELECT conrelid, conkey FROM pg_constraint
                  WHERE contype = 'f' AND confrelid = $1 AND confdeltype IN ('c', 'n', 'd')",
                &[&r],
            )
            .await?
        {
            let (child, key): (u32, Vec<i16>) = (row.get(0), row.get(1));
            if let Some(set) = by_rel.entry(child).or_insert_with(|| Some(BTreeSet::new())) {
                set.extend(key);
            }
            if seen.insert(child) {
                todo.push(child);
            }
        }
    }
    let mut out = Selection::new();
    for (relid, cols) in by_rel {
        let Some(r) = a
            .query_opt(
                "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = $1 AND n.nspname = 'public' AND c.relkind IN ('r', 'p')",
                &[&relid],
            )
            .await?
        else {
            continue;
        };
        let table: String = r.get(0);
        // The whole relation, or the named columns with its keys: primary key, every
        // foreign key (both ends of a key between copied tables are then present),
        // and where a statement inserts, its unique indexes (conflicts).
        let sql = match cols {
            None => "SELECT attname::text FROM pg_attribute
                      WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND $2::bool IS NOT NULL"
                .to_string(),
            Some(set) => format!(
                "SELECT a.attname::text FROM pg_attribute a
                  WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
                    AND (a.attnum = ANY('{{{}}}'::int2[])
                      OR EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = $1
                                  AND (i.indisprimary OR (i.indisunique AND $2))
                                  AND a.attnum = ANY(i.indkey))
                      OR EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = $1
                                  AND k.contype = 'f' AND a.attnum = ANY(k.conkey)))",
                set.iter().map(i16::to_string).collect::<Vec<_>>().join(",")
            ),
        };
        let mut names: BTreeSet<String> = a
            .query(&sql, &[&relid, &inserted.contains(&relid)])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        // What hk parity records of a decision's row, read on the copy.
        if let Some(rule) = crate::local::decisions::table_rule(&table) {
            names.extend(
                ["id", "updated_at"]
                    .iter()
                    .chain(rule.identity)
                    .chain(rule.watched)
                    .chain(rule.read)
                    .map(|c| c.to_string()),
            );
        }
        out.insert(table, names);
    }
    // The plan reports GitLab's release from it, as `hk check` reads it.
    out.insert(
        "schema_migrations".to_string(),
        BTreeSet::from(["version".to_string()]),
    );
    Ok(out)
}
