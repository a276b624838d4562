//! `hk check`'s pass over the statement catalogue.
//!
//! Owns: PREPARE of every catalogue statement with [`shared::preflight::prepare_one`]
//! (the cold-start gate's code) on a session that asks the server for each
//! statement's rewritten parse tree (`debug_print_rewritten` at `client_min_messages =
//! log`; parse-only, no statement runs; the server writes those LOG messages to its
//! own log as well, about 2 MB per run on GitLab's schema), and the lines it yields: a
//! schema the statement does not fit, a grant parse analysis checks (USAGE on a
//! schema), or a busy database (a lock held by another session, once per table:
//! `database busy: lock held on <table> (retry)`; later statements naming a table
//! found locked are not prepared, so a held lock costs one `lock_timeout`, not one per
//! statement).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio_postgres::error::DbError;
use tokio_postgres::Client;

use shared::preflight::Problem;

use super::tree::{perm_infos, PermInfo};
use super::{sql, Check};

/// What the pass found.
pub struct Pass {
    /// The catalogue lines.
    pub checks: Vec<Check>,
    /// Per statement (`module::NAME`) that prepared: what it needs, per relation.
    pub needs: Vec<(String, Vec<PermInfo>)>,
    /// Statements that prepared but whose tree did not arrive.
    pub without_tree: usize,
    /// Statements not derived because the database was busy.
    pub busy: usize,
    /// Whether the role may not use the schema of the tables (USAGE): the checks that
    /// read the catalog by the role's current schema would all report it missing.
    pub schema_hidden: bool,
}

/// The identifiers (lower case) a statement's text names.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// Open the tree session: its notices arrive on the returned channel.
pub async fn tree_session(
    connector: &shared::db::Connector,
) -> Result<(Client, UnboundedReceiver<DbError>)> {
    let (c, rx) = connector
        .connect_with_notices("hk-check")
        .await
        .context("cannot open the parse-tree session")?;
    c.batch_execute(sql::PARSE_TREES)
        .await
        .context("cannot ask the server for parse trees (debug_print_rewritten)")?;
    Ok((c, rx))
}

/// PREPARE every catalogue statement on `trees` (a [`tree_session`]); `a` reads the
/// lock table when a statement times out on a lock.
pub async fn pass(
    trees: &Client,
    notices: &mut UnboundedReceiver<DbError>,
    a: &Client,
) -> Result<Pass> {
    // Only the statements declared for the database's deletion-state model and the
    // columns it has.
    let model = shared::gitlab::deletion_model::probe(trees).await?;
    let all = shared::preflight::declared(trees, model).await?;
    let total = all.len();
    let mut schema = Vec::new();
    let mut grants = Vec::new();
    // Locked table → the statements that wait for it.
    let mut busy: BTreeMap<String, Vec<String>> = BTreeMap::new();
    // (schema, role) → the statements naming a table in it the role may not use.
    let mut hidden_in: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut needs = Vec::new();
    let mut without_tree = 0;
    for s in all {
        let id = format!("{}::{}", s.module, s.name);
        let named = words(s.text);
        if let Some(t) = busy.keys().find(|t| named.contains(*t)).cloned() {
            busy.entry(t).or_default().push(id);
            continue;
        }
        while notices.try_recv().is_ok() {}
        match shared::preflight::prepare_one(trees, &s).await? {
            None => {
                let mut infos = Vec::new();
                let mut got = false;
                while let Ok(n) = notices.try_recv() {
                    if n.message().starts_with("rewritten parse tree") {
                        got = true;
                        infos.extend(perm_infos(n.detail().unwrap_or("")));
                    }
                }
                if got {
                    needs.push((id, infos));
                } else {
                    without_tree += 1;
                }
            }
            Some(f) => match f.problem {
                Problem::Busy => {
                    let locked: Vec<String> = a
                        .query(sql::LOCKED_TABLES, &[])
                        .await?
                        .iter()
                        .map(|r| r.get::<_, String>(0))
                        .filter(|t| named.contains(&t.to_ascii_lowercase()))
                        .collect();
                    let table = locked
                        .first()
                        .map(|t| t.to_ascii_lowercase())
                        .unwrap_or_else(|| format!("an object of {id} ({})", f.message));
                    busy.entry(table).or_default().push(id);
                }
                Problem::Permission => grants.push(Check::fail(
                    format!("catalogue {id}"),
                    format!("{} ({})", f.object, f.message),
                    "a missing grant, not a missing migration: GRANT USAGE ON SCHEMA <schema> TO <role> for the schema named, and see the privileges lines",
                )),
                // A table in a schema the role may not use is not on its search path:
                // the server says it does not exist.
                Problem::Schema if f.message.starts_with("relation \"") => {
                    let table = f.message.split('"').nth(1).unwrap_or("");
                    let hidden = a.query(sql::HIDDEN_SCHEMAS, &[&table]).await?;
                    if let Some(r) = hidden.first() {
                        hidden_in
                            .entry((r.get(0), r.get(1)))
                            .or_default()
                            .push(id);
                    } else {
                        schema.push(Check::fail(
                            format!("catalogue {id}"),
                            format!("{} ({})", f.object, f.message),
                            "the database lacks what this statement uses: compare its schema with GitLab 18's for that object (a missing migration?)",
                        ));
                    }
                }
                Problem::Schema => schema.push(Check::fail(
                    format!("catalogue {id}"),
                    format!("{} ({})", f.object, f.message),
                    "the database lacks what this statement uses: compare its schema with GitLab 18's for that object (a missing migration?)",
                )),
            },
        }
    }
    let schema_hidden = !hidden_in.is_empty();
    for ((schema_name, role), stmts) in hidden_in {
        grants.push(Check::fail(
            "catalogue",
            format!(
                "{} statement(s) name tables of schema {schema_name}, which role {role} may not use (the server says they do not exist), e.g. {}",
                stmts.len(),
                stmts.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
            ),
            format!("a missing grant, not a missing migration: GRANT USAGE ON SCHEMA {schema_name} TO {role}"),
        ));
    }
    let busy_count = busy.values().map(Vec::len).sum();
    let mut checks = vec![Check::pass(
        "deletion model",
        format!("{model}: {}", model.describe()),
    )];
    if schema.is_empty() && grants.is_empty() && busy.is_empty() {
        checks.push(Check::pass(
            "catalogue",
            format!("all {total} statements of the {model} model prepare"),
        ));
    }
    checks.extend(schema);
    checks.extend(grants);
    for (table, stmts) in busy {
        checks.push(
            Check::fail(
                "catalogue",
                format!(
                    "database busy: lock held on {table} (retry); {} statement(s) not checked, e.g. {}",
                    stmts.len(),
                    stmts[0]
                ),
                "another session holds a lock on it (a migration, a VACUUM FULL, a long transaction: see pg_locks); run `hk check` again when it is released",
            )
            .busy(),
        );
    }
    Ok(Pass {
        checks,
        needs,
        without_tree,
        busy: busy_count,
        schema_hidden,
    })
}
