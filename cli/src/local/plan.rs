//! `hk run --dry-run --until-idle`: the plan of a whole run.
//!
//! Owns: [`Runner::plan_until_idle`], which delivers the first message and every
//! continuation and child it leads to (virtual time, the same 30 s / 5 receives as
//! the runner) on ONE session inside ONE transaction that is rolled back at the end,
//! with a recording queue and the notifier's dry-run form (no email, no web hook);
//! and [`Plan`], what the run would have changed: per table the rows inserted,
//! updated and deleted (PostgreSQL's `pg_stat_xact_user_tables`, so cascades count
//! too), and the ids of the users, groups and projects that would be removed. The
//! transaction holds every row lock it takes until it ends: on a primary the plan
//! blocks the rows it touches for as long as it runs.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use tokio_postgres::GenericClient;

use super::{exit_code_of, process_record, run_of, Runner, MAX_RECEIVES, VISIBILITY_S};
use crate::local_queue::LocalQueue;
use shared::error::Result;
use shared::function::Function;
use shared::messages::Envelope;
use shared::notify::Notifier;
use shared::queue::OutMessage;
use shared::runtime::{Deadline, Invocation, RecordMeta};

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
            }
        })
    }
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

impl Runner {
    /// The whole run of `body` on `function` (continuations and children included) in
    /// one transaction that is rolled back: every handler run is recorded in
    /// [`Runner::runs`], nothing is delivered, sent or kept.
    pub async fn plan_until_idle(&mut self, function: Function, body: &str) -> Result<Plan> {
        let Ok(env) = serde_json::from_str::<Envelope>(body) else {
            // Unparseable: one rolled-back invocation, which fails as malformed.
            self.dry_run(function, body).await?;
            return Ok(Plan {
                exit_code: self.exit_code(true),
                ..Plan::default()
            });
        };
        let recorder = LocalQueue::new(self.queue.now());
        let mut client = self.connector.connect(function.name()).await?;
        let mut tx = client.transaction().await?;
        let before = ids(&tx).await?;
        let dry_notifier = self.notifier.as_deref().map(Notifier::dry_run);
        recorder.push(OutMessage::new(function, 0, env));
        let first = self.runs.len();
        while let Some(p) = recorder.pop() {
            let body = p.message.envelope.to_body();
            let f = p.message.receiver;
            let now = recorder.now();
            let inv = Invocation {
                function: f,
                now,
                queue: &recorder,
                settings: &self.settings,
                deadline: Deadline::in_(f.timeout(), self.settings.deadline_margin),
                notifier: dry_notifier.as_ref(),
            };
            let meta = RecordMeta {
                sqs_message_id: Some(format!("dry-run-{}", self.runs.len() + 1)),
                receive_count: p.receive_count,
                aws_request_id: None,
            };
            let sent_before = recorder.sent().len();
            let outcome = process_record(&inv, &mut tx, &body, &meta).await;
            let sent = recorder.sent()[sent_before..].to_vec();
            let env = serde_json::from_str::<Value>(&body).ok();
            self.runs.push(run_of(f, now, env.as_ref(), &outcome, sent));
            if !outcome.is_success() {
                recorder.nack(p, VISIBILITY_S, MAX_RECEIVES);
            }
        }
        let tables = table_changes(&tx).await?;
        let after = ids(&tx).await?;
        tx.rollback().await?;
        // Session locks taken inside the transaction outlive the rollback.
        client
            .batch_execute("SELECT pg_advisory_unlock_all()")
            .await?;
        let removed = |i: usize| -> Vec<i64> { before[i].difference(&after[i]).copied().collect() };
        let dead: Vec<String> = recorder
            .dead()
            .iter()
            .map(|p| p.message.envelope.message_key.clone())
            .collect();
        Ok(Plan {
            tables,
            removed_users: removed(0),
            removed_groups: removed(1),
            removed_projects: removed(2),
            dead_letters: dead.len(),
            exit_code: exit_code_of(&self.runs[first..], &dead, false),
        })
    }
}
