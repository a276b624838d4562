//! `hk run --dry-run --until-idle`: the plan of a whole run.
//!
//! Owns: [`Runner::plan_until_idle`], which delivers the first message and every
//! continuation and child it leads to (virtual time, the same 30 s / 5 receives as
//! the runner) on ONE session, in transactions that are rolled back, with a
//! recording queue and the notifier's dry-run form (no email, no web hook); and
//! [`Plan`], what the run would have changed: per table the rows inserted, updated
//! and deleted (PostgreSQL's `pg_stat_xact_user_tables`, so cascades count too), the
//! ids of the users, groups and projects that would be removed, and the sequences
//! that moved (a rolled-back INSERT still uses up its id, `budget`).
//!
//! **What one plan holds is bounded** (behaviour §11). A transaction keeps every lock
//! it takes until it ends: the advisory locks of every user and group a run touches
//! and the transaction id of every subtransaction that wrote; a whole run in one
//! transaction once exhausted a server's lock table (`out of shared memory` for every
//! new connection). So the plan reads the server's lock table size first
//! ([`LockBudget`]), counts the locks its transaction holds after every delivery,
//! and, once they reach an eighth of the table, ends the transaction (a *slice*) at
//! the first point where all that is left is a continuation of the planned function
//! that carries a cursor (B38, B51, B70: it reads from its cursor, not from what
//! earlier pages changed): the slice's figures are added up, it is rolled back, and
//! the continuation goes on in a new transaction. A later slice does not see what an
//! earlier one changed; the plan says how many slices it used. When the locks reach
//! half the table before a slice can end, the plan stops there with a message saying
//! so and what it planned until then. Each delivery runs in a savepoint of its own,
//! so a failed one is rolled back alone (as a failed invocation would be) instead of
//! aborting the whole plan.
//!
//! The plan also records every decision the handlers made (`decisions`: each
//! candidate row, what was decided and by which rule, with the row's identity and
//! the state the plan left it in), its clock and the GitLab release it ran on: what
//! `hk parity` compares with the database after GitLab's own cron ran
//! (docs/parity.md).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tokio_postgres::{GenericClient, Transaction};

use super::budget::{self, LockBudget, SequenceAdvance};
use super::decisions::{self, PlannedDecision, Recorder};
use super::{exit_code_of, process_record, run_of, Runner, MAX_RECEIVES, VISIBILITY_S};
use crate::local_queue::{LocalQueue, Pending};
use shared::error::Result;
use shared::function::Function;
use shared::handlers::Dispatch;
use shared::messages::{Envelope, FromMessage};
use shared::queue::OutMessage;
use shared::runtime::{Invocation, RecordMeta};

/// What one table would see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableChange {
    /// The table (schema `public`).
    pub table: String,
    /// Rows inserted.
    pub inserted: i64,
    /// Rows updated.
    pub updated: i64,
    /// Rows deleted (cascades included).
    pub deleted: i64,
}

/// What a whole run would change (nothing was kept).
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Tables with at least one change, by name. Counts include the attempts of runs
    /// that failed and were rolled back to their savepoint.
    pub tables: Vec<TableChange>,
    /// Ids of users that would be removed.
    pub removed_users: Vec<i64>,
    /// Ids of groups (namespaces of type `Group`) that would be removed.
    pub removed_groups: Vec<i64>,
    /// Ids of projects that would be removed.
    pub removed_projects: Vec<i64>,
    /// Messages that would end in the dead-letter queue.
    pub dead_letters: usize,
    /// The exit code the real run would have (behaviour §11).
    pub exit_code: i32,
    /// Rolled-back transactions the plan used (1 unless it had to slice).
    pub slices: usize,
    /// The server's lock table, read before the plan started.
    pub locks: LockBudget,
    /// The most locks the plan's transaction held at once.
    pub most_locks: i64,
    /// Sequences that moved while the plan ran.
    pub sequences: Vec<SequenceAdvance>,
    /// Why the plan stopped before the end of the run, if it did.
    pub stopped: Option<String>,
    /// The function planned.
    pub function: Option<Function>,
    /// The plan's clock: the `now` of its first invocation.
    pub now: Option<DateTime<Utc>>,
    /// The GitLab release the database says it is, and its deletion-state model.
    pub gitlab: Value,
    /// Every decision the handlers made, in order (one per function, table and id).
    pub decisions: Vec<PlannedDecision>,
    /// The storage `storage-cleanup` would remove, by kind (issue 37).
    pub storage: StoragePlan,
    /// The rows the cron function's selection took at the start
    /// ([`decisions::selection`]), when known.
    pub selection: Option<Value>,
    /// The authorizations the plan's membership removals leave gone
    /// ([`decisions::implied`]).
    pub implied: Vec<Value>,
    /// The rows the plan's membership removals write beside them
    /// ([`super::side_rows::written`]: events, highest roles, todos, 2FA, audit events, EE
    /// protected-branch, protected-environment and identity rows).
    pub side_rows: Vec<Value>,
}

/// The storage items a plan's `storage-cleanup` messages name, by kind: how many
/// (each message key once) and the first [`StoragePlan::SHOWN`] paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoragePlan {
    /// By kind (`gitaly`, `registry`, `objects`): count and first paths.
    pub kinds: BTreeMap<&'static str, (u64, Vec<String>)>,
    seen: BTreeSet<String>,
}

impl StoragePlan {
    /// Paths shown per kind.
    pub const SHOWN: usize = 5;

    /// Count the item of a `storage-cleanup` message (once per message key).
    fn add(&mut self, env: &Envelope) {
        if !self.seen.insert(env.message_key.clone()) {
            return;
        }
        let Ok(run) = serde_json::from_value::<shared::workers::storage_cleanup::StorageCleanupRun>(
            env.payload.clone(),
        ) else {
            return;
        };
        let e = self.kinds.entry(run.item.kind().as_str()).or_default();
        e.0 += 1;
        if e.1.len() < Self::SHOWN {
            e.1.push(run.item.path());
        }
    }

    /// `{"gitaly": {"count": n, "first": [...]}, …}`.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.kinds
                .iter()
                .map(|(k, (n, first))| (k.to_string(), json!({"count": n, "first": first})))
                .collect(),
        )
    }
}

impl Plan {
    /// The plan as one JSON object (`--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "plan": {
                "tables": self.tables.iter().map(|t| json!({
                    "table": t.table,
                    "inserted": t.inserted,
                    "updated": t.updated,
                    "deleted": t.deleted,
                })).collect::<Vec<_>>(),
                "removed_users": self.removed_users,
                "removed_groups": self.removed_groups,
                "removed_projects": self.removed_projects,
                "dead_letters": self.dead_letters,
                "slices": self.slices,
                "locks": {"most_held": self.most_locks, "server": self.locks.to_json()},
                "sequences_advanced": self.sequences.iter().map(SequenceAdvance::to_json).collect::<Vec<_>>(),
                "stopped": self.stopped,
                "function": self.function.map(|f| f.name()),
                "now": self.now.map(shared::clock::rfc3339),
                "gitlab": self.gitlab,
                "decisions": self.decisions.iter().map(PlannedDecision::to_json).collect::<Vec<_>>(),
                "storage": self.storage.to_json(),
                "selection": self.selection,
                "implied": self.implied,
                "side_rows": self.side_rows,
            }
        })
    }
}

/// The GitLab release the database's newest migration names, and its deletion-state
/// model (`null` where not known).
async fn gitlab<C: GenericClient>(c: &C) -> Result<Value> {
    use checks::{database::release_of, sql};
    let table: bool = c.query_one(sql::HAS_SCHEMA_MIGRATIONS, &[]).await?.get(0);
    let newest: Option<String> = match table {
        true => c
            .query_opt(sql::NEWEST_MIGRATION, &[])
            .await
            .ok()
            .flatten()
            .map(|r| r.get(0)),
        false => None,
    };
    let model = shared::gitlab::deletion_model::probe(c).await?;
    Ok(json!({
        "schema_version": newest,
        "release": newest.as_deref().and_then(release_of),
        "deletion_model": model.as_str(),
    }))
}

/// Ids of the removable kinds: users, groups, projects.
async fn ids<C: GenericClient>(c: &C) -> Result<[BTreeSet<i64>; 3]> {
    let mut out: [BTreeSet<i64>; 3] = Default::default();
    let sql = [
        "SELECT id::bigint FROM users",
        "SELECT id::bigint FROM namespaces WHERE type = 'Group'",
        "SELECT id::bigint FROM projects",
    ];
    for (set, q) in out.iter_mut().zip(sql) {
        *set = c.query(q, &[]).await?.iter().map(|r| r.get(0)).collect();
    }
    Ok(out)
}

async fn table_changes<C: GenericClient>(c: &C) -> Result<Vec<TableChange>> {
    Ok(c.query(
        "SELECT relname::text, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables \
         WHERE schemaname = 'public' AND n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname",
        &[],
    )
    .await?
    .iter()
    .map(|r| TableChange {
        table: r.get(0),
        inserted: r.get(1),
        updated: r.get(2),
        deleted: r.get(3),
    })
    .collect())
}

/// The figures of the slices so far.
#[derive(Default)]
struct Totals {
    tables: BTreeMap<String, (i64, i64, i64)>,
    removed: [BTreeSet<i64>; 3],
}

impl Totals {
    /// Add a slice: its table figures (`tables` minus `tables_before`, both read in
    /// its transaction: a session's `pg_stat_xact_*` figures also hold what earlier
    /// transactions did until the server flushes them) and what it removed.
    fn add(
        &mut self,
        tables_before: Vec<TableChange>,
        tables: Vec<TableChange>,
        before: &[BTreeSet<i64>; 3],
        after: &[BTreeSet<i64>; 3],
    ) {
        for t in tables {
            let b = tables_before.iter().find(|b| b.table == t.table);
            let b = b
                .map(|b| (b.inserted, b.updated, b.deleted))
                .unwrap_or_default();
            let e = self.tables.entry(t.table).or_default();
            *e = (
                e.0 + t.inserted - b.0,
                e.1 + t.updated - b.1,
                e.2 + t.deleted - b.2,
            );
        }
        for i in 0..3 {
            self.removed[i].extend(before[i].difference(&after[i]));
        }
    }
}

/// Whether `p` is a continuation of `function` that carries a cursor: where a slice
/// may end.
fn keyset_continuation(p: &Pending, function: Function) -> bool {
    p.message.receiver == function
        && Envelope::decode(&p.message.envelope.to_body(), function)
            .is_ok_and(|(_, m)| m.cursor().is_some())
}

impl Runner {
    /// The whole run of `body` on `function` (continuations and children included) in
    /// transactions that are rolled back (one, unless the run needs more locks than
    /// a slice may hold): every handler run is recorded in [`Runner::runs`], nothing
    /// is delivered, sent or kept.
    pub async fn plan_until_idle(&mut self, function: Function, body: &str) -> Result<Plan> {
        let Ok(env) = serde_json::from_str::<Envelope>(body) else {
            // Unparseable: one rolled-back invocation, which fails as malformed.
            self.dry_run(function, body).await?;
            return Ok(Plan {
                exit_code: self.exit_code(true),
                slices: 1,
                ..Plan::default()
            });
        };
        let recorder = LocalQueue::new(self.queue.now());
        let start = recorder.now();
        let mut client = self.connector.connect(function.name()).await?;
        let gitlab = gitlab(&client).await?;
        let decider = Recorder::default();
        let mut planned: Vec<PlannedDecision> = Vec::new();
        let locks = LockBudget::read(&client).await?;
        let sequences_before = budget::sequences(&client).await?;
        // Not a reason to stop the plan (a lock held on the table, say): recorded,
        // and `hk parity` then refuses to call the plan complete.
        let selection = decisions::selection(&client, function, start)
            .await
            .unwrap_or_else(|e| Some(json!({"function": function.name(), "error": e.to_string()})));
        // A second session sees the database without the slice (the authorizations
        // before it).
        let outside = self.connector.connect("hk-plan-outside").await?;
        let mut implied = Vec::new();
        let mut side_rows = Vec::new();
        let dispatch = self.dry_dispatch();
        recorder.push(OutMessage::new(function, 0, env));
        let first = self.runs.len();
        let mut totals = Totals::default();
        let (mut slices, mut most_locks, mut stopped) = (0, 0, None);
        let mut storage = StoragePlan::default();
        loop {
            slices += 1;
            let mut tx = client.transaction().await?;
            let tables_before = table_changes(&tx).await?;
            let before = ids(&tx).await?;
            let (mut held, mut closing) = (Vec::new(), false);
            while let Some(p) = recorder.pop() {
                if closing && keyset_continuation(&p, function) {
                    held.push(p);
                    continue;
                }
                if p.message.receiver == Function::StorageCleanup {
                    storage.add(&p.message.envelope);
                }
                self.plan_delivery(&mut tx, &recorder, p, &dispatch, &decider)
                    .await?;
                let n = budget::held(&tx).await?;
                most_locks = most_locks.max(n);
                if n >= locks.stop_at() {
                    stopped = Some(locks.stop_message(n, function));
                    break;
                }
                closing |= n >= locks.slice_at();
            }
            let tables = table_changes(&tx).await?;
            totals.add(tables_before, tables, &before, &ids(&tx).await?);
            let made = decider.take();
            implied.extend(decisions::implied(&tx, &outside, &made).await?);
            side_rows.extend(super::side_rows::written(&tx, &outside, &made).await?);
            let mut slice = decisions::after_slice(&tx, made).await?;
            tx.rollback().await?;
            decisions::before(&client, &mut slice).await?;
            planned.extend(slice);
            // Session locks taken inside the transaction outlive the rollback.
            client
                .batch_execute("SELECT pg_advisory_unlock_all()")
                .await?;
            if stopped.is_some() || held.is_empty() {
                break;
            }
            for p in held {
                recorder.put_back(p);
            }
        }
        let sequences = budget::advanced(&sequences_before, &budget::sequences(&client).await?);
        self.sequences = sequences.clone();
        let dead: Vec<String> = recorder
            .dead()
            .iter()
            .map(|p| p.message.envelope.message_key.clone())
            .collect();
        let [users, groups, projects] = totals.removed.map(|s| s.into_iter().collect());
        Ok(Plan {
            tables: totals
                .tables
                .into_iter()
                .filter(|(_, (i, u, d))| i + u + d > 0)
                .map(|(table, (inserted, updated, deleted))| TableChange {
                    table,
                    inserted,
                    updated,
                    deleted,
                })
                .collect(),
            removed_users: users,
            removed_groups: groups,
            removed_projects: projects,
            dead_letters: dead.len(),
            exit_code: exit_code_of(&self.runs[first..], &dead, false),
            slices,
            locks,
            most_locks,
            sequences,
            stopped,
            function: Some(function),
            now: Some(start),
            gitlab,
            decisions: decisions::last_of_each(planned),
            storage,
            selection,
            implied,
            side_rows,
        })
    }

    /// Deliver `p` inside the plan's transaction, in a savepoint of its own: a failed
    /// delivery is rolled back alone, as a failed invocation would be.
    async fn plan_delivery(
        &mut self,
        tx: &mut Transaction<'_>,
        recorder: &LocalQueue,
        p: Pending,
        dispatch: &Dispatch,
        decisions: &Recorder,
    ) -> Result<()> {
        let body = p.message.envelope.to_body();
        let f = p.message.receiver;
        let now = recorder.now();
        let inv = Invocation::new(f, now, recorder, &self.settings).with_decisions(decisions);
        let meta = RecordMeta {
            sqs_message_id: Some(format!("dry-run-{}", self.runs.len() + 1)),
            receive_count: p.receive_count,
            aws_request_id: None,
        };
        let sent_before = recorder.sent_count();
        tx.batch_execute("SAVEPOINT hk_plan_delivery").await?;
        let outcome = process_record(dispatch, &inv, tx, &body, &meta).await;
        if tx
            .batch_execute("RELEASE SAVEPOINT hk_plan_delivery")
            .await
            .is_err()
        {
            tx.batch_execute(
                "ROLLBACK TO SAVEPOINT hk_plan_delivery; RELEASE SAVEPOINT hk_plan_delivery",
            )
            .await?;
        }
        let sent = recorder.sent_since(sent_before);
        let env = serde_json::from_str::<Value>(&body).ok();
        let run = run_of(f, now, env.as_ref(), &outcome, sent);
        self.record(&run);
        if !outcome.is_success() {
            recorder.nack(p, VISIBILITY_S, MAX_RECEIVES);
        }
        Ok(())
    }

    /// The sequences the last dry run or plan saw move.
    pub fn sequences_advanced(&self) -> &[SequenceAdvance] {
        &self.sequences
    }
}
