//! `hk run <function> --dry-run --until-idle --read-only`: the plan of a run made from
//! a read-only copy of the live database, safe on a primary (issues 36 and 47,
//! docs/shadow.md).
//!
//! Owns: recognising the live database's GitLab release and the model that fits it
//! ([`recognise`]: `schema_migrations` as `hk check` reads it, and the deletion-state
//! probe; anything else is refused), the one read-only snapshot transaction
//! ([`ReadOnlySnapshot`]: `REPEATABLE READ READ ONLY`, nothing but `SELECT` and
//! `COPY … TO STDOUT`, so only `AccessShareLock`s and no transaction id, a bounded
//! `statement_timeout`, the time it was taken), the copy's plan checked before any row
//! is read ([`CopyPlan`]: the tables and columns to copy — by default only what the
//! catalogue's statements use, [`selection`] — each present and readable on the live
//! side, every sequence readable, the estimate from `pg_class`), the copy into a
//! database built with that model ([`Copied`]; the sequences' positions and `ANALYZE`
//! set after the live snapshot ended, [`Copied::finish`]), the check of
//! group-destroy's blocking rows in tables the copy does not hold ([`live_blockers`])
//! and what the copied plan can only approximate ([`APPROXIMATIONS`]). The copy's
//! private cluster and its life are [`cluster`]'s.
//!
//! The plan itself is [`crate::local::Runner::plan_until_idle`], unchanged, run on the
//! copy: the handlers write there (then roll back), never on the live database.

/// The copy's private cluster: access, environment, watchdog, sweep.
pub mod cluster;
/// What a copy plans and what it copied.
mod copied;
/// The GRANTs a `--read-only` copy's role needs.
pub mod grants;
/// What the live side is asked besides the copy: blocking rows, the copy's locks.
mod live;
/// The tables and columns the catalogue's statements use.
pub mod selection;

pub use copied::{Copied, CopyPlan, Selection, TableCopy, TablePlan};
pub use live::{live_blockers, locks_beyond_reads};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use chrono::{DateTime, Utc};
use futures::{pin_mut, SinkExt, TryStreamExt};
use shared::gitlab::deletion_model::{self, DeletionModel};
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::migrate::GitlabVersion;
use checks::database::{release_of, PAST_NEWEST};
use checks::sql::{HAS_SCHEMA_MIGRATIONS, NEWEST_MIGRATION};

/// What the copied plan cannot decide exactly as the real run would, and how it
/// approximates it (printed with every read-only plan, and in docs/shadow.md).
pub const APPROXIMATIONS: [&str; 4] = [
    "sequences: the copy's sequences start where the live ones stood at the snapshot; ids the \
     plan hands out are the ones the real run would get only if nothing else inserts meanwhile",
    "group-destroy's blocking rows: the copy holds the model's tables only; rows in other \
     tables that reference a removed group or project are looked up on the live database \
     afterwards (read only) and listed under `live_blockers`",
    "lock table and table statistics: the plan's lock figures and per-table counts \
     (pg_stat_xact_user_tables) are the copy's server's; the counts are the run's own writes, \
     so they match, but the lock table size is not the live server's",
    "one snapshot: the copy is the live data at one instant; what changes on the live \
     database after it (users editing memberships before GitLab's cron runs) is not in the \
     plan (`hk parity` reports it as changed meanwhile)",
];

/// A `REPEATABLE READ READ ONLY` transaction on `c`: every read sees one snapshot, and
/// the server refuses any write.
pub async fn read_only_transaction(
    c: &mut Client,
) -> std::result::Result<Transaction<'_>, tokio_postgres::Error> {
    c.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
}

/// The live database as [`recognise`] found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// GitLab's release from its newest `schema_migrations` version (`18.9` stands
    /// for 18.9 to 18.11).
    pub release: String,
    /// The newest migration version.
    pub newest_migration: String,
    /// The deletion-state model the database has.
    pub deletion: DeletionModel,
    /// The model the copy is built with.
    pub model: GitlabVersion,
}

/// The model of `release` with deletion model `deletion`, if the pair is one GitLab
/// has: 18.2 and 18.3 record deletion in schedules only (model 18.2), 18.4 to 18.9 in
/// state columns (model 18.8), 18.10 on also in `deletion_scheduled_at` (model 18.11;
/// no marker of 18.10 is known, so 18.9's stands for it), and 19.0 to 19.5 the same way
/// (model 19.5: the copy leaves a column 19.5 added and the live release lacks at its
/// default).
pub fn model_for(release: &str, deletion: DeletionModel) -> Option<GitlabVersion> {
    let (major, minor) = release.split_once('.')?;
    let minor: u32 = minor.parse().ok()?;
    match (major, minor, deletion) {
        ("18", 2..=3, DeletionModel::Schedules) => Some(GitlabVersion::V18_2),
        ("18", 4..=9, DeletionModel::StateColumns) => Some(GitlabVersion::V18_8),
        ("18", 9, DeletionModel::ScheduledAt) => Some(GitlabVersion::V18_11),
        ("19", 0..=5, DeletionModel::ScheduledAt) => Some(GitlabVersion::V19_5),
        _ => None,
    }
}

/// Recognise the live database: its release and deletion model, and the model to copy
/// it into. Anything outside the supported range (18.2 to 19.5), or a release whose
/// columns do not match GitLab's history, is refused: a copy into a model that does
/// not fit would plan other decisions than the real run makes.
pub async fn recognise<C: GenericClient>(c: &C) -> Result<Source> {
    let table: bool = c.query_one(HAS_SCHEMA_MIGRATIONS, &[]).await?.get(0);
    if !table {
        bail!(
            "the live database's schema model is not recognised: no schema_migrations table \
             (not a GitLab database?); --read-only copies GitLab 18.2 to 19.5 only"
        );
    }
    let newest: Option<String> = c
        .query_opt(NEWEST_MIGRATION, &[])
        .await
        .context("reading schema_migrations (GRANT SELECT ON schema_migrations, as `hk grants` prints it)")?
        .map(|r| r.get(0));
    let Some(newest) = newest else {
        bail!("the live database's schema model is not recognised: schema_migrations is empty");
    };
    let deletion = deletion_model::probe(c).await?;
    let release = release_of(&newest).filter(|_| newest.as_str() < PAST_NEWEST);
    let model = release.and_then(|r| model_for(r, deletion));
    match (release, model) {
        (Some(r), Some(model)) => Ok(Source {
            release: r.to_string(),
            newest_migration: newest,
            deletion,
            model,
        }),
        _ => bail!(
            "the live database's schema model is not recognised: newest migration {newest} \
             (GitLab {}) with the {deletion} deletion model; --read-only copies GitLab 18.2 to \
             19.5 only, into the model of 18.2, 18.8, 18.11 or 19.5 (plan on a restored snapshot \
             instead: docs/shadow.md)",
            release_of(&newest).unwrap_or("before 18.0")
        ),
    }
}

/// A quoted identifier.
fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The one transaction on the live database: `REPEATABLE READ READ ONLY`, so every
/// table is read at the same instant, nothing can be written and no transaction id is
/// assigned; it takes `AccessShareLock`s only (held until it ends, so it ends as soon
/// as the last row is read: [`ReadOnlySnapshot::end`]).
pub struct ReadOnlySnapshot<'a> {
    tx: Transaction<'a>,
    /// What [`recognise`] found, in the snapshot.
    pub source: Source,
    /// The live session's backend pid.
    pub pid: i32,
    /// When the snapshot was taken: hk's clock read after the transaction's first
    /// statement (which takes the snapshot), so no row of the copy is younger.
    pub taken_at: DateTime<Utc>,
    started: Instant,
}

impl<'a> ReadOnlySnapshot<'a> {
    /// Begin the snapshot on `live` and recognise the database (refused when its model
    /// is not recognised). The session's `statement_timeout` and `lock_timeout` stay
    /// (one table is one statement: a table too large to copy within it is refused
    /// rather than holding the snapshot open longer; the copy never queues long behind
    /// a lock another session waits for, such as a migration's).
    pub async fn begin(live: &'a mut Client) -> Result<ReadOnlySnapshot<'a>> {
        let started = Instant::now();
        let tx = read_only_transaction(live).await?;
        // Bounded, not off: one table is one statement, and a copy that long is one
        // to make from a replica or a clone instead (docs/shadow.md).
        tx.batch_execute("SET LOCAL statement_timeout = '15min'")
            .await?;
        let pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        let taken_at = Utc::now();
        let source = recognise(&tx).await?;
        Ok(ReadOnlySnapshot {
            tx,
            source,
            pid,
            taken_at,
            started,
        })
    }

    /// The live transaction (reads only: it is `READ ONLY`).
    pub fn transaction(&self) -> &Transaction<'a> {
        &self.tx
    }

    /// Plan the copy into `local` (a database migrated with `self.source.model`)
    /// before any row is read: per table of `only` (every table of the model when
    /// `None`) the columns both sides have, the estimates from `pg_class`, the live
    /// sequences. Refused, listing every problem at once: a table of the model the live
    /// database lacks (it would be copied empty and the plan decide nothing there), a
    /// table or column the role may not `SELECT`, a sequence it may not `SELECT`.
    pub async fn prepare(&self, local: &Client, only: Option<&Selection>) -> Result<CopyPlan> {
        let model = columns(
            local,
            "SELECT c.relname::text, a.attname::text, a.attnotnull AND NOT a.atthasdef AND a.attidentity = ''
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_attribute a ON a.attrelid = c.oid
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
              ORDER BY c.relname, a.attnum",
        )
        .await?;
        // pg_catalog, not information_schema: a table the role may not read is still
        // seen (and refused by name) rather than taken for missing.
        let live = columns(
            &self.tx,
            "SELECT c.relname::text, a.attname::text,
                    has_column_privilege(c.oid, a.attnum, 'SELECT')
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               JOIN pg_attribute a ON a.attrelid = c.oid
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'f')
                AND a.attnum > 0 AND NOT a.attisdropped
              ORDER BY c.relname, a.attnum",
        )
        .await?;
        let mut problems = Vec::new();
        let mut tables = Vec::new();
        for (table, cols) in &model {
            let wanted = match only {
                Some(sel) => match sel.get(table) {
                    Some(w) => Some(w),
                    None => continue,
                },
                None => None,
            };
            let Some(live_cols) = live.get(table) else {
                problems.push(format!(
                    "table {table} is not on the live database (the copy would hold it empty)"
                ));
                continue;
            };
            let have: BTreeMap<&str, bool> =
                live_cols.iter().map(|(c, ok)| (c.as_str(), *ok)).collect();
            let (mut copy, mut defaulted, mut left_out) = (Vec::new(), Vec::new(), Vec::new());
            for (c, required) in cols {
                let want = wanted.is_none_or(|w| w.contains(c));
                match (have.get(c.as_str()), want) {
                    (Some(_), false) => left_out.push(c.clone()),
                    (Some(true), true) => copy.push(c.clone()),
                    (Some(false), true) => problems.push(format!(
                        "no SELECT on {table}.{c} (GRANT SELECT ON {table} TO <role>)"
                    )),
                    (None, _) if *required => problems.push(format!(
                        "the live table {table} has no column {c}, which the GitLab {} model \
                         requires (NOT NULL, no default): this schema does not fit the model",
                        self.source.model
                    )),
                    (None, _) => defaulted.push(c.clone()),
                }
            }
            let est = self
                .tx
                .query_one(
                    // A partitioned table's figures are its partitions' (its own
                    // are -1).
                    "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint,
                            coalesce(sum(greatest(c.relpages, 0)), 0)::bigint
                              * current_setting('block_size')::bigint
                       FROM pg_class c
                      WHERE (c.oid = $1::text::regclass AND c.relkind = 'r')
                         OR c.oid IN (SELECT relid FROM pg_partition_tree($1::text::regclass)
                                       WHERE isleaf)",
                    &[&format!("public.{}", ident(table))],
                )
                .await?;
            let (rows, bytes): (i64, i64) = (est.get(0), est.get(1));
            tables.push(TablePlan {
                table: table.clone(),
                columns: copy,
                defaulted,
                left_out,
                est_rows: rows as u64,
                est_bytes: bytes as u64,
            });
        }
        let copied: BTreeSet<&str> = tables.iter().map(|t| t.table.as_str()).collect();
        let mut sequences = Vec::new();
        for (seq, table, column) in owned_sequences(local).await? {
            if !copied.contains(table.as_str()) {
                continue;
            }
            let r = self
                .tx
                .query_one(
                    "SELECT s::text, has_sequence_privilege(s, 'SELECT')
                       FROM (SELECT pg_get_serial_sequence($1, $2)::regclass AS s) x
                      WHERE s IS NOT NULL",
                    &[&format!("public.{}", ident(&table)), &column],
                )
                .await;
            let Ok(r) = r else { continue };
            let (live_seq, ok): (String, bool) = (r.get(0), r.get(1));
            if !ok {
                problems.push(format!(
                    "no SELECT on sequence {live_seq} (GRANT SELECT ON SEQUENCE {live_seq} TO \
                     <role>: the copy reads its position)"
                ));
            }
            sequences.push((seq, live_seq));
        }
        if !problems.is_empty() {
            bail!(
                "the copy cannot start (nothing was read): {}",
                problems.join("; ")
            );
        }
        Ok(CopyPlan { tables, sequences })
    }

    /// Copy the planned tables into `local` (whose rows are replaced): the planned
    /// columns, with `COPY (SELECT …) TO STDOUT` from the snapshot and `COPY … FROM
    /// STDIN` locally (triggers and foreign keys off, the data being consistent
    /// already; columns left out lose their `NOT NULL` on the copy), then the live
    /// sequences' positions (set by [`Copied::finish`] once the snapshot ended).
    /// `progress` hears each table's rows so far and its estimate.
    pub async fn copy(
        &self,
        local: &Client,
        plan: &CopyPlan,
        mut progress: impl FnMut(&str, u64, u64),
    ) -> Result<Copied> {
        let all = columns(
            local,
            "SELECT c.relname::text, '', false FROM pg_class c
               JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition",
        )
        .await?;
        let names: Vec<String> = all.keys().map(|t| ident(t)).collect();
        local
            .batch_execute(&format!(
                "SET session_replication_role = replica; TRUNCATE {} CASCADE",
                names.join(", ")
            ))
            .await?;
        let mut tables = Vec::new();
        for t in &plan.tables {
            // A CHECK over a column left out would refuse its NULL: the live rows
            // satisfied it already.
            if !t.left_out.is_empty() {
                for r in local
                    .query(
                        "SELECT k.conname::text FROM pg_constraint k
                          WHERE k.conrelid = $1::text::regclass AND k.contype = 'c'
                            AND EXISTS (SELECT 1 FROM pg_attribute a
                                         WHERE a.attrelid = k.conrelid
                                           AND a.attnum = ANY(k.conkey)
                                           AND a.attname = ANY($2))",
                        &[&format!("public.{}", ident(&t.table)), &t.left_out],
                    )
                    .await?
                {
                    let name: String = r.get(0);
                    local
                        .batch_execute(&format!(
                            "ALTER TABLE public.{} DROP CONSTRAINT {}",
                            ident(&t.table),
                            ident(&name)
                        ))
                        .await?;
                }
            }
            for c in &t.left_out {
                local
                    .batch_execute(&format!(
                        "ALTER TABLE public.{} ALTER COLUMN {} DROP NOT NULL",
                        ident(&t.table),
                        ident(c)
                    ))
                    .await?;
            }
            let list = t
                .columns
                .iter()
                .map(|c| ident(c))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = copy_table(&self.tx, local, &t.table, &list, |n| {
                progress(&t.table, n, t.est_rows)
            })
            .await?;
            tables.push(TableCopy {
                table: t.table.clone(),
                rows,
                columns: t.columns.clone(),
                defaulted: t.defaulted.clone(),
                left_out: t.left_out.clone(),
            });
        }
        let mut sequences = Vec::new();
        for (seq, live) in &plan.sequences {
            let row = self
                .tx
                .query_one(&format!("SELECT last_value, is_called FROM {live}"), &[])
                .await?;
            sequences.push((seq.clone(), row.get(0), row.get(1)));
        }
        Ok(Copied {
            source: self.source.clone(),
            tables,
            sequences,
            snapshot_at: self.taken_at,
            elapsed: self.started.elapsed(),
            estimate: (plan.est_rows(), plan.est_bytes()),
        })
    }

    /// [`ReadOnlySnapshot::prepare`] of every table and column, then
    /// [`ReadOnlySnapshot::copy`].
    pub async fn copy_into(&self, local: &Client) -> Result<Copied> {
        let plan = self.prepare(local, None).await?;
        self.copy(local, &plan, |_, _, _| {}).await
    }

    /// End the snapshot (a read-only transaction: nothing to keep).
    pub async fn end(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}

/// Every sequence of `public` that a column owns: `(sequence, table, column)`.
async fn owned_sequences(local: &Client) -> Result<Vec<(String, String, String)>> {
    Ok(local
        .query(
            "SELECT s.oid::regclass::text, t.relname::text, a.attname::text
               FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace
               JOIN pg_depend d ON d.objid = s.oid AND d.classid = 'pg_class'::regclass
                AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')
               JOIN pg_class t ON t.oid = d.refobjid
               JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid
              WHERE s.relkind = 'S' AND n.nspname = 'public' ORDER BY 1",
            &[],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// `table → [(column, flag)]` from a query of those three columns.
async fn columns<C: GenericClient>(
    c: &C,
    sql: &str,
) -> Result<BTreeMap<String, Vec<(String, bool)>>> {
    let mut out: BTreeMap<String, Vec<(String, bool)>> = BTreeMap::new();
    for r in c.query(sql, &[]).await? {
        out.entry(r.get(0)).or_default().push((r.get(1), r.get(2)));
    }
    Ok(out)
}

/// Stream `table`'s columns `list` from the snapshot into the local table; `rows`
/// hears the rows streamed so far (COPY's text format ends each row with a newline,
/// the data's own newlines being escaped).
async fn copy_table(
    tx: &Transaction<'_>,
    local: &Client,
    table: &str,
    list: &str,
    mut rows: impl FnMut(u64),
) -> Result<u64> {
    let t = ident(table);
    let out = tx
        .copy_out(&format!("COPY (SELECT {list} FROM public.{t}) TO STDOUT"))
        .await
        .with_context(|| format!("copying {table} from the live database"))?;
    let sink = local
        .copy_in::<_, bytes::Bytes>(&format!("COPY public.{t} ({list}) FROM STDIN"))
        .await?;
    pin_mut!(out, sink);
    let mut seen = 0u64;
    while let Some(chunk) = out.try_next().await? {
        seen += chunk.iter().filter(|b| **b == b'\n').count() as u64;
        rows(seen);
        sink.feed(chunk).await?;
    }
    sink.as_mut()
        .finish()
        .await
        .with_context(|| format!("loading {table} into the copy"))
}
