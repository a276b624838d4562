//! `hk run <function> --dry-run --until-idle --read-only`: the plan of a run made from
//! a read-only copy of the live database, safe on a primary (issue 36, docs/shadow.md).
//!
//! Owns: recognising the live database's GitLab release and the model that fits it
//! ([`recognise`]: `schema_migrations` as `hk check` reads it, and the deletion-state
//! probe; anything else is refused), the one read-only snapshot transaction
//! ([`ReadOnlySnapshot`]: `REPEATABLE READ READ ONLY`, nothing but `SELECT` and
//! `COPY … TO STDOUT`, so only `AccessShareLock`s and no transaction id), the copy of
//! every table of the model into a database built with that model ([`Copied`]: the
//! columns both sides have, the sequences' positions), the check of group-destroy's
//! blocking rows in tables the copy does not hold ([`live_blockers`]) and what the
//! copied plan can only approximate ([`APPROXIMATIONS`]).
//!
//! The plan itself is [`crate::local::Runner::plan_until_idle`], unchanged, run on the
//! copy: the handlers write there (then roll back), never on the live database.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use futures::{pin_mut, SinkExt, TryStreamExt};
use serde_json::{json, Value};
use shared::gitlab::blockers::{self, Handling};
use shared::gitlab::deletion_model::{self, DeletionModel};
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::check::database::{release_of, PAST_NEWEST};
use crate::check::sql::{HAS_SCHEMA_MIGRATIONS, NEWEST_MIGRATION};
use crate::migrate::GitlabVersion;

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

/// One table of the copy.
#[derive(Debug, Clone)]
pub struct TableCopy {
    /// The table (schema `public`).
    pub table: String,
    /// Rows copied.
    pub rows: u64,
    /// Columns of the model the live table does not have (left at their default).
    pub defaulted: Vec<String>,
}

/// What was copied.
#[derive(Debug, Clone)]
pub struct Copied {
    /// The live database.
    pub source: Source,
    /// Per table, in copy order.
    pub tables: Vec<TableCopy>,
    /// Tables of the model the live database does not have (empty in the copy).
    pub missing: Vec<String>,
    /// Sequences set to the live position: `(sequence, last_value)`.
    pub sequences: Vec<(String, i64)>,
    /// How long the snapshot transaction was open.
    pub elapsed: Duration,
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

    /// The `read_only` object of a `--json` plan (in its `plan` object).
    pub fn to_json(&self, blockers: &[String]) -> Value {
        json!({
            "gitlab": self.source.release,
            "newest_migration": self.source.newest_migration,
            "deletion_model": self.source.deletion.as_str(),
            "model": self.source.model.as_str(),
            "tables": self.tables.len(),
            "rows_copied": self.rows(),
            "seconds": self.elapsed.as_secs_f64(),
            "rows_per_s": self.rows_per_s().round(),
            "defaulted_columns": self.tables.iter()
                .flat_map(|t| t.defaulted.iter().map(move |c| format!("{}.{c}", t.table)))
                .collect::<Vec<_>>(),
            "missing_tables": self.missing,
            "sequences": self.sequences.len(),
            "live_blockers": blockers,
            "approximations": APPROXIMATIONS,
        })
    }
}

/// A quoted identifier.
fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The one transaction on the live database: `REPEATABLE READ READ ONLY`, so every
/// table is read at the same instant, nothing can be written and no transaction id is
/// assigned; it takes `AccessShareLock`s only (held until it ends).
pub struct ReadOnlySnapshot<'a> {
    tx: Transaction<'a>,
    /// What [`recognise`] found, in the snapshot.
    pub source: Source,
    /// The live session's backend pid.
    pub pid: i32,
    started: Instant,
}

impl<'a> ReadOnlySnapshot<'a> {
    /// Begin the snapshot on `live` and recognise the database (refused when its model
    /// is not recognised). `statement_timeout` is lifted for this transaction only (a
    /// copy of a large table is one statement); `lock_timeout` stays the session's, so
    /// the copy never queues long behind a lock another session waits for.
    pub async fn begin(live: &'a mut Client) -> Result<ReadOnlySnapshot<'a>> {
        let started = Instant::now();
        let tx = read_only_transaction(live).await?;
        tx.batch_execute("SET LOCAL statement_timeout = 0").await?;
        let pid: i32 = tx.query_one("SELECT pg_backend_pid()", &[]).await?.get(0);
        let source = recognise(&tx).await?;
        Ok(ReadOnlySnapshot {
            tx,
            source,
            pid,
            started,
        })
    }

    /// The live transaction (reads only: it is `READ ONLY`).
    pub fn transaction(&self) -> &Transaction<'a> {
        &self.tx
    }

    /// Copy every table of the model into `local` (a database migrated with
    /// `self.source.model`, whose rows are replaced): the columns both sides have,
    /// with `COPY (SELECT …) TO STDOUT` from the snapshot and `COPY … FROM STDIN`
    /// locally (triggers and foreign keys off, the data being consistent already),
    /// then the sequences' positions and `ANALYZE`.
    pub async fn copy_into(&self, local: &Client) -> Result<Copied> {
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
        let live = columns(
            &self.tx,
            "SELECT table_name::text, column_name::text, false FROM information_schema.columns
              WHERE table_schema = 'public' ORDER BY table_name, ordinal_position",
        )
        .await?;
        let names: Vec<String> = model.keys().map(|t| ident(t)).collect();
        local
            .batch_execute(&format!(
                "SET session_replication_role = replica; TRUNCATE {} CASCADE",
                names.join(", ")
            ))
            .await?;
        let (mut tables, mut missing) = (Vec::new(), Vec::new());
        for (table, cols) in &model {
            let Some(live_cols) = live.get(table) else {
                missing.push(table.clone());
                continue;
            };
            let have: BTreeSet<&str> = live_cols.iter().map(|(c, _)| c.as_str()).collect();
            let (both, defaulted): (Vec<_>, Vec<_>) =
                cols.iter().partition(|(c, _)| have.contains(c.as_str()));
            if let Some((c, _)) = defaulted.iter().find(|(_, required)| *required) {
                bail!(
                    "the live table {table} has no column {c}, which the GitLab {} model \
                     requires (NOT NULL, no default): this schema does not fit the model",
                    self.source.model
                );
            }
            let list = both
                .iter()
                .map(|(c, _)| ident(c))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = copy_table(&self.tx, local, table, &list).await?;
            tables.push(TableCopy {
                table: table.clone(),
                rows,
                defaulted: defaulted.into_iter().map(|(c, _)| c.clone()).collect(),
            });
        }
        local
            .batch_execute("RESET session_replication_role")
            .await?;
        let sequences = self.sequences(local).await?;
        local.batch_execute("ANALYZE").await?;
        Ok(Copied {
            source: self.source.clone(),
            tables,
            missing,
            sequences,
            elapsed: self.started.elapsed(),
        })
    }

    /// Set every sequence of the model that a column owns to the position of the live
    /// sequence that column owns.
    async fn sequences(&self, local: &Client) -> Result<Vec<(String, i64)>> {
        let owned = local
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
            .await?;
        let mut out = Vec::new();
        for r in owned {
            let (seq, table, column): (String, String, String) = (r.get(0), r.get(1), r.get(2));
            let live: Option<String> = self
                .tx
                .query_one(
                    "SELECT pg_get_serial_sequence($1, $2)",
                    &[&format!("public.{}", ident(&table)), &column],
                )
                .await?
                .get(0);
            let Some(live) = live else { continue };
            let row = self
                .tx
                .query_one(&format!("SELECT last_value, is_called FROM {live}"), &[])
                .await?;
            let (value, called): (i64, bool) = (row.get(0), row.get(1));
            local
                .execute(
                    "SELECT setval($1::text::regclass, $2, $3)",
                    &[&seq, &value, &called],
                )
                .await?;
            out.push((seq, value));
        }
        Ok(out)
    }

    /// End the snapshot (a read-only transaction: nothing to keep).
    pub async fn end(self) -> Result<()> {
        Ok(self.tx.commit().await?)
    }
}

/// `table → [(column, required)]` from a query of those three columns.
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

/// Stream `table`'s columns `list` from the snapshot into the local table.
async fn copy_table(tx: &Transaction<'_>, local: &Client, table: &str, list: &str) -> Result<u64> {
    let t = ident(table);
    let out = tx
        .copy_out(&format!("COPY (SELECT {list} FROM public.{t}) TO STDOUT"))
        .await
        .with_context(|| format!("copying {table} from the live database"))?;
    let sink = local
        .copy_in::<_, bytes::Bytes>(&format!("COPY public.{t} ({list}) FROM STDIN"))
        .await?;
    pin_mut!(out, sink);
    while let Some(chunk) = out.try_next().await? {
        sink.feed(chunk).await?;
    }
    sink.as_mut()
        .finish()
        .await
        .with_context(|| format!("loading {table} into the copy"))
}

/// Rows on the live database that reference a group the plan removes (its tree: the
/// group, its subgroups, their projects) through a blocking foreign key of a table
/// the copy does not hold: the copied plan cannot see them. One line per key: those
/// only GitLab's services delete mean the real run ends `blocked` for that group.
/// Read in a read-only transaction of its own (catalog and `SELECT count(*)`).
pub async fn live_blockers(
    live: &mut Client,
    groups: &[i64],
    copied: &BTreeSet<String>,
) -> Result<Vec<String>> {
    if groups.is_empty() {
        return Ok(Vec::new());
    }
    let tx = read_only_transaction(live).await?;
    let keys: Vec<_> = blockers::keys(&tx)
        .await?
        .into_iter()
        .filter(|k| !copied.contains(&k.table))
        .collect();
    let mut out = Vec::new();
    for g in groups {
        let tree = blockers::tree(&tx, *g).await?;
        for f in blockers::scan(&tx, &keys, &tree).await? {
            let what = match f.key.handling {
                Handling::NeedsService { .. } => "the real run ends blocked",
                _ => "the real run deletes them too",
            };
            out.push(format!(
                "group {g}: {} row(s) in {}: {what}",
                f.rows(),
                f.key.name()
            ));
        }
    }
    tx.commit().await?;
    Ok(out)
}

/// The live session's locks other than `AccessShareLock` on a relation and its own
/// `virtualxid`, as `locktype mode` lines (empty when the copy only read), read from
/// another session `observer` while the snapshot of backend `pid` is open.
pub async fn locks_beyond_reads(observer: &Client, pid: i32) -> Result<Vec<String>> {
    Ok(observer
        .query(
            "SELECT locktype || ' ' || mode || coalesce(' ' || relation::regclass::text, '')
               FROM pg_locks WHERE pid = $1 AND granted
                AND NOT (locktype = 'relation' AND mode = 'AccessShareLock')
                AND NOT (locktype = 'virtualxid' AND mode = 'ExclusiveLock')
              ORDER BY 1",
            &[&pid],
        )
        .await
        .map_err(|e| anyhow!(e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}
