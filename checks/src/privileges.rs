//! `hk check`'s privileges check: the connected role holds every grant the catalogue
//! statements need.
//!
//! Owns: turning the server's account of each statement ([`super::tree::PermInfo`]:
//! relation, privileges, columns) into the grants to test, testing them the way the
//! executor does (the table privilege, else every column named, else any column when
//! none is named; DELETE only on the table), plus USAGE on each sequence a column
//! default the INSERT leaves out draws from (`nextval`; identity columns need none),
//! (for a trigger's INSERT, every sequence its table's defaults draw from), what
//! group-destroy's statements over the blocking foreign keys need (built from the
//! catalog when it runs: `shared::gitlab::blockers`), and one
//! line per table or sequence naming the missing privileges, the GRANT that adds them
//! and the statements that need them. Deletes that `ON DELETE CASCADE`
//! carries out need no grant (the key's triggers run as the table owner), so they are
//! not asked. A trigger function that is not `SECURITY DEFINER` runs as the role: the
//! tables its static SQL uses ([`super::triggers`]) are needed by the statements that
//! fire it (GitLab's loose-foreign-key trigger on `users` inserts into
//! `loose_foreign_keys_deleted_records`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use tokio_postgres::Client;

use shared::gitlab::blockers::Handling;

use super::tree::{PermInfo, DELETE, INSERT, PRIVILEGES, SELECT, UPDATE};
use super::triggers::{uses, TG_DELETE, TG_INSERT, TG_UPDATE};
use super::{sql, Check};

/// One privilege on one relation, with what needs it.
#[derive(Default)]
pub struct Need {
    /// Columns named (0: the whole row; empty: any one column).
    pub columns: BTreeSet<i16>,
    /// Whether a statement names no column (needs any one).
    pub any: bool,
    /// The statements (`module::NAME`, or with ` (trigger t)`) that need it.
    pub statements: BTreeSet<String>,
}

/// A table's missing privileges, each with the statements that need it.
type Missing<'a> = Vec<(&'static str, &'a BTreeSet<String>)>;

/// `a, b, c` and `… (n in all)` past three.
fn some(items: &BTreeSet<String>) -> String {
    let first: Vec<&str> = items.iter().take(3).map(String::as_str).collect();
    if items.len() > 3 {
        format!("{}, … ({} in all)", first.join(", "), items.len())
    } else {
        first.join(", ")
    }
}

/// What the catalogue statements need, derived from their parse trees: per relation
/// and privilege, and per sequence a column default draws from.
#[derive(Default)]
pub struct Derived {
    /// `(relation oid, privilege bit)` → the columns and statements that need it.
    pub tables: BTreeMap<(u32, u32), Need>,
    /// Sequence (as a GRANT names it) → whether the connected role may use it, and the
    /// statements whose inserts draw from it.
    pub sequences: BTreeMap<String, (bool, BTreeSet<String>)>,
}

/// Turn `needs` (per statement, from the catalogue pass) into [`Derived`]: the
/// relations and privileges of the parse trees, the tables the non-`SECURITY DEFINER`
/// triggers they fire use, and the sequences their inserts draw from. `hk check` tests
/// them ([`check`]); `hk grants` prints them ([`super::grants`]).
pub async fn derive(c: &Client, needs: &[(String, Vec<PermInfo>)]) -> Result<Derived> {
    let mut table_needs: BTreeMap<(u32, u32), Need> = BTreeMap::new();
    let mut seq_needs: BTreeMap<String, (bool, BTreeSet<String>)> = BTreeMap::new();
    // (relation, trigger event) → the statements that fire it.
    let mut fires: BTreeMap<(u32, i32), BTreeSet<String>> = BTreeMap::new();
    for (stmt, infos) in needs {
        for p in infos {
            // An UPDATE bit with no column set is a row lock (`FOR UPDATE`): no trigger.
            for (bit, event) in [
                (INSERT, TG_INSERT),
                (DELETE, TG_DELETE),
                (UPDATE, TG_UPDATE),
            ] {
                if p.required & bit != 0 && (bit != UPDATE || !p.updated.is_empty()) {
                    fires
                        .entry((p.relid, event))
                        .or_default()
                        .insert(stmt.clone());
                }
            }
            for (bit, _) in PRIVILEGES {
                if p.required & bit == 0 {
                    continue;
                }
                let n = table_needs.entry((p.relid, bit)).or_default();
                let cols = p.columns(bit);
                if cols.is_empty() || bit == DELETE {
                    n.any = true;
                }
                n.columns.extend(cols.iter().copied());
                n.statements.insert(stmt.clone());
            }
            if p.required & INSERT != 0 {
                let supplied: Vec<i16> = p.inserted.iter().copied().collect();
                for r in c.query(sql::SEQUENCES, &[&p.relid, &supplied]).await? {
                    let e = seq_needs.entry(r.get(0)).or_default();
                    e.0 = r.get(1);
                    e.1.insert(stmt.clone());
                }
            }
        }
    }
    for ((relid, event), stmts) in &fires {
        for r in c.query(sql::TRIGGERS, &[relid, event]).await? {
            let (trigger, body): (String, String) = (r.get(0), r.get(1));
            for (name, bit) in uses(&body) {
                let Some(oid) = c
                    .query_opt(sql::RELATION_OID, &[&name])
                    .await?
                    .map(|r| r.get::<_, u32>(0))
                else {
                    continue;
                };
                let by: Vec<String> = stmts
                    .iter()
                    .map(|s| format!("{s} (trigger {trigger})"))
                    .collect();
                let n = table_needs.entry((oid, bit)).or_default();
                n.any = true;
                n.statements.extend(by.iter().cloned());
                // Which columns a trigger's INSERT supplies is not read: every sequence
                // a default of its table draws from.
                if bit == INSERT {
                    let none: Vec<i16> = Vec::new();
                    for r in c.query(sql::SEQUENCES, &[&oid, &none]).await? {
                        let e = seq_needs.entry(r.get(0)).or_default();
                        e.0 = r.get(1);
                        e.1.extend(by.iter().cloned());
                    }
                }
            }
        }
    }
    // group-destroy's statements over the rows of the blocking foreign keys are built
    // from the catalog when it runs (`shared::gitlab::blockers`), not listed in the
    // catalogue: each reads its key's column, and deletes the rows GitLab deletes
    // before the parent.
    // (A role that may not use the tables' schema cannot name `namespaces`: the
    // catalogue lines say so already, and there is nothing to derive.)
    let keys = shared::gitlab::blockers::keys(c).await.unwrap_or_default();
    for k in keys {
        let Some(r) = c.query_opt(sql::COLUMN_OF, &[&k.table, &k.column]).await? else {
            continue;
        };
        let (oid, attnum): (u32, i16) = (r.get(0), r.get(1));
        let label = format!("gitlab::blockers over {}", k.name());
        let n = table_needs.entry((oid, SELECT)).or_default();
        n.columns.insert(attnum);
        n.statements.insert(label.clone());
        if k.handling == Handling::DeletedFirst {
            let n = table_needs.entry((oid, DELETE)).or_default();
            n.any = true;
            n.statements.insert(label);
        }
    }
    Ok(Derived {
        tables: table_needs,
        sequences: seq_needs,
    })
}

/// The privileges lines for `needs` (per statement, from the catalogue pass).
/// `without_tree`/`busy`: statements whose needs could not be derived.
pub async fn check(
    c: &Client,
    needs: &[(String, Vec<PermInfo>)],
    without_tree: usize,
    busy: usize,
) -> Result<Vec<Check>> {
    let role: String = c.query_one(sql::ROLE, &[]).await?.get(0);
    let Derived {
        tables: table_needs,
        sequences: seq_needs,
    } = derive(c, needs).await?;
    // Table → (its name, missing privilege → statements).
    let mut missing: BTreeMap<u32, (String, Missing)> = BTreeMap::new();
    let mut granted = 0;
    for ((relid, bit), n) in &table_needs {
        let name = PRIVILEGES.iter().find(|(b, _)| b == bit).expect("known").1;
        let columns: Vec<i16> = n.columns.iter().copied().collect();
        let r = c
            .query_one(sql::PRIVILEGE, &[relid, &name, &columns, &n.any])
            .await?;
        if r.get::<_, bool>(1) {
            granted += 1;
        } else {
            let e = missing
                .entry(*relid)
                .or_insert_with(|| (r.get(0), Vec::new()));
            e.1.push((name, &n.statements));
        }
    }
    let mut out = Vec::new();
    for (table, privs) in missing.values() {
        let list: Vec<&str> = privs.iter().map(|(p, _)| *p).collect();
        let needed: Vec<String> = privs
            .iter()
            .map(|(p, s)| format!("{p} by {} statement(s): {}", s.len(), some(s)))
            .collect();
        out.push(Check::fail(
            format!("privileges on {table}"),
            format!("role {role} lacks {}", list.join(", ")),
            format!(
                "GRANT {} ON {table} TO {role} (needed by {})",
                list.join(", "),
                needed.join("; ")
            ),
        ));
    }
    let mut sequences = 0;
    for (seq, (ok, stmts)) in &seq_needs {
        if *ok {
            sequences += 1;
            continue;
        }
        out.push(Check::fail(
            format!("privileges on {seq}"),
            format!("role {role} lacks USAGE on the sequence a column default draws from"),
            format!(
                "GRANT USAGE ON SEQUENCE {seq} TO {role} (needed by {} statement(s): {})",
                stmts.len(),
                some(stmts)
            ),
        ));
    }
    if without_tree > 0 {
        out.push(Check::fail(
            "privileges",
            format!("the server sent no parse tree for {without_tree} statement(s): their grants are not derived"),
            "the session must accept `SET client_min_messages = log` and `SET debug_print_rewritten = on` (a pooler or proxy that drops server LOG messages hides them)",
        ));
    }
    if out.is_empty() {
        let tables: BTreeSet<u32> = table_needs.keys().map(|(r, _)| *r).collect();
        let mut detail = format!(
            "role {role} holds the {granted} privileges the {} derived statements need on {} tables, and USAGE on {sequences} sequence(s)",
            needs.len(),
            tables.len()
        );
        if busy > 0 {
            detail.push_str(&format!(
                " ({busy} statement(s) not derived: database busy)"
            ));
        }
        out.push(Check::pass("privileges", detail));
    }
    Ok(out)
}
