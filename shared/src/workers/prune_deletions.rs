//! B43 `prune-deletions`: the single-flight worker that carries out
//! `members_deletion_schedules` (behaviour §B43.4–§B43.8, §D11, §D12).
//!
//! Owns: single flight through the overlap lock `function:prune-deletions`, the page of
//! 10 schedules by id under one shared monotonic budget, the schedule batch (one
//! transaction: up to 100 of the user's memberships in the schedule's hierarchy, each
//! removal authorized as `scheduled_by` through `can_remove_member`, one authorization
//! refresh, the removals' side effects (`gitlab::side_effects`), the schedule deleted
//! when complete or denied) and the continuation while
//! schedules remain and nothing failed. It never blocks or deletes a user.

use std::time::Instant;

use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::function::Function;
use crate::gitlab::membership::{self, Member, Refresh};
use crate::gitlab::permissions::{self, Denial};
use crate::gitlab::side_effects::{self, Cause};
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::{authz, hierarchy, Intent};
use crate::job::{self, Job, Overlap};
use crate::locks;
use crate::messages::Envelope;
use crate::metrics::{self, Metric};
use crate::retry_transient;
use crate::runtime::{Budget, Done, Invocation, Report, Status};

pub mod payload;
pub mod sql;

pub use payload::PruneDeletionsRun;

/// Schedules loaded per invocation (`SCHEDULE_BATCH_SIZE`).
pub const SCHEDULE_BATCH_SIZE: i64 = 10;
/// Memberships per schedule per invocation (`MEMBER_BATCH_SIZE`).
pub const MEMBER_BATCH_SIZE: i64 = 100;

const FUNCTION: Function = Function::PruneDeletions;
/// The table of the schedules it decides on.
const SCHEDULES: &str = "members_deletion_schedules";

/// A `members_deletion_schedules` row.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    id: i64,
    namespace_id: i64,
    user_id: i64,
    scheduled_by_id: i64,
}

/// How a schedule batch that committed ended (the `outcome` log field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Nothing is left: the schedule was deleted.
    Completed,
    /// The budget stopped the batch, or memberships remain after 100 deletions.
    Partial,
    /// A removal was denied: the schedule was deleted.
    Denied,
}

impl Outcome {
    fn code(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Partial => "partial",
            Outcome::Denied => "denied",
        }
    }
}

/// A committed schedule batch: a unit of progress (behaviour §B43.4.1).
#[derive(Debug, Clone, Copy)]
struct Batch {
    destroyed: u64,
    outcome: Outcome,
    /// The denied membership and why.
    denial: Option<(i64, Denial)>,
}

/// What step a found.
enum Step {
    /// The schedule no longer exists (not a unit).
    Stale,
    /// The batch committed.
    Committed(Batch),
}

/// The budget or the deadline guard says stop (the caller applies the progress rule).
fn out_of_time(inv: &Invocation<'_>, budget: &Budget) -> bool {
    budget.exhausted() || inv.deadline.reached()
}

/// `root(n)`: the first id of `traversal_ids` (the namespace itself when empty).
async fn root_of<C: GenericClient>(c: &C, namespace_id: i64) -> Result<i64> {
    let row = c.query_opt(sql::ROOT_OF, &[&namespace_id]).await?;
    row.map(|r| r.get(0)).ok_or_else(|| {
        Error::Invariant(format!(
            "namespace {namespace_id} of a deletion schedule does not exist"
        ))
    })
}

/// behaviour §B43.4.2: one schedule batch in one transaction. `progress_before` tells whether this
/// invocation has already completed a unit, so the budget may stop the batch.
async fn process_schedule<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    schedule_id: i64,
    budget: &Budget,
    progress_before: bool,
) -> Result<Step>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    // a. Lock the schedule row; a schedule deleted meanwhile is stale.
    let Some(row) = tx.query_opt(sql::LOCK_SCHEDULE, &[&schedule_id]).await? else {
        tx.commit().await?;
        return Ok(Step::Stale);
    };
    let s = Schedule {
        id: row.get(0),
        namespace_id: row.get(1),
        user_id: row.get(2),
        scheduled_by_id: row.get(3),
    };
    // b. The actor; the FKs cascade the schedule away with either user.
    let actor = permissions::load_actor(&tx, s.scheduled_by_id)
        .await?
        .ok_or_else(|| {
            Error::Invariant(format!(
                "scheduled_by user {} of schedule {} does not exist",
                s.scheduled_by_id, s.id
            ))
        })?;
    let root = root_of(&tx, s.namespace_id).await?;
    let groups = hierarchy::descendant_groups(&tx, root).await?;
    let projects = hierarchy::projects_under(&tx, root).await?;
    // c. The batch, by id (behaviour §D11), its rows and then its owner candidates'
    // group-owner locks taken up front (ARCHITECTURE.md, lock order). Each row is
    // re-read in turn below.
    let batch = tx
        .query(
            sql::BATCH,
            &[&s.user_id, &groups, &projects, &MEMBER_BATCH_SIZE],
        )
        .await?;
    let ids: Vec<i64> = batch.iter().map(|r| r.get(0)).collect();
    let scopes: Vec<i64> = tx
        .query(sql::OWNER_SCOPES, &[&ids])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    locks::group_owner_locks(&tx, &scopes).await?;
    let mut destroyed = 0u64;
    let mut outbox = Vec::new();
    let mut left = Vec::new();
    let mut denial: Option<(i64, Denial)> = None;
    let mut attempted = 0usize;
    for row in &batch {
        // (1) The budget, never before this invocation's first unit (progress rule).
        if progress_before && out_of_time(inv, budget) {
            break;
        }
        attempted += 1;
        let id: i64 = row.get(0);
        // (2) Lock it; a membership deleted meanwhile is skipped and not counted.
        let Some(locked) = tx.query_opt(sql::LOCK_MEMBER, &[&id, &s.user_id]).await? else {
            continue;
        };
        let m = Member::from_row(&locked);
        // (3)–(4) Authorized as scheduled_by; the first denial ends the batch.
        if let Some(d) = permissions::can_remove_member(&tx, &actor, &m).await? {
            inv.decide("members", m.id, "kept", d.code());
            denial = Some((m.id, d));
            break;
        }
        // (5) Remove, refresh deferred to step d; its system hooks claimed.
        let hooks = system_hooks::prepare(&tx, inv, Subject::Members(&[m.id])).await?;
        // (5) Remove, refresh deferred to step d.
        left.extend(side_effects::left_of(&tx, inv, &m).await?);
        membership::remove_membership(&tx, &m, Refresh::Deferred).await?;
        outbox.extend(Intent::messages(hooks.claim(inv), run_id, inv.now));
        inv.decide("members", m.id, "removed", "scheduled");
        destroyed += 1;
    }
    // d. One refresh per batch, unless the budget stopped it before its first member.
    if attempted > 0 || batch.is_empty() {
        let reached = authz::reached_from(&tx, &groups).await?;
        authz::refresh(&tx, s.user_id, &reached).await?;
    }
    // What GitLab writes beside each removal, after the refresh.
    let cause = Cause::Pruned {
        by: s.scheduled_by_id,
    };
    side_effects::after_removal(&tx, inv, cause, &left).await?;
    // e–f. Delete the schedule when it is denied or complete.
    let outcome = if denial.is_some() {
        Outcome::Denied
    } else {
        let left: bool = tx
            .query_one(sql::ANY_LEFT, &[&s.user_id, &groups, &projects])
            .await?
            .get(0);
        if left {
            Outcome::Partial
        } else {
            Outcome::Completed
        }
    };
    if outcome != Outcome::Partial {
        tx.execute(sql::DELETE_SCHEDULE, &[&s.id]).await?;
    }
    // Send-then-commit (the system hooks' messages).
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(Step::Committed(Batch {
        destroyed,
        outcome,
        denial,
    }))
}

/// What the schedule loop did.
#[derive(Debug, Default)]
struct Totals {
    /// Schedule batches that committed (units of progress).
    processed: u64,
    /// Memberships removed.
    destroyed: u64,
    /// Schedule batches that ended in behaviour §B43.4.2 E.
    failed: u64,
}

/// behaviour §B43.4.1 steps 2–3: the page of schedules under the shared budget.
async fn run<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    budget: &Budget,
) -> Result<Totals>
where
    C: GenericClient + Send + Sync,
{
    // Parsed, bound and run in one round trip (issue 52), as ANY_SCHEDULE.
    let rows = client
        .query_typed(sql::SCHEDULES, &[(&SCHEDULE_BATCH_SIZE, Type::INT8)])
        .await?;
    let mut t = Totals::default();
    for row in &rows {
        let s = Schedule {
            id: row.get(0),
            namespace_id: row.get(1),
            user_id: row.get(2),
            scheduled_by_id: row.get(3),
        };
        // Later schedules are not touched at all once the budget is spent.
        if t.processed > 0 && out_of_time(inv, budget) {
            break;
        }
        let started = Instant::now();
        let progress_before = t.processed > 0;
        match retry_transient!(
            process_schedule(inv, run_id, client, s.id, budget, progress_before).await
        ) {
            Ok(Step::Stale) => {
                tracing::info!(
                    schedule_id = s.id,
                    "Scheduled member deletion skipped: schedule no longer exists"
                );
            }
            Ok(Step::Committed(b)) => {
                let kept = b.outcome == Outcome::Partial;
                let decision = if kept { "kept" } else { "removed" };
                inv.decide(SCHEDULES, s.id, decision, b.outcome.code());
                t.processed += 1;
                t.destroyed += b.destroyed;
                if let Some((member_id, reason)) = b.denial {
                    tracing::warn!(
                        schedule_id = s.id,
                        user_id = s.user_id,
                        namespace_id = s.namespace_id,
                        scheduled_by_id = s.scheduled_by_id,
                        member_id,
                        reason = reason.code(),
                        "Scheduled member deletion cancelled: access denied"
                    );
                }
                tracing::info!(
                    schedule_id = s.id,
                    user_id = s.user_id,
                    namespace_id = s.namespace_id,
                    scheduled_by_id = s.scheduled_by_id,
                    destroyed_count = b.destroyed,
                    destroy_duration_s = started.elapsed().as_secs_f64(),
                    outcome = b.outcome.code(),
                    "Processed scheduled member deletion"
                );
            }
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(e) => {
                // Rolled back; left out for the rest of this invocation.
                inv.decide(SCHEDULES, s.id, "failed", "error");
                t.failed += 1;
                tracing::error!(
                    schedule_id = s.id,
                    user_id = s.user_id,
                    namespace_id = s.namespace_id,
                    error = %e,
                    error_class = e.class(),
                    "Scheduled member deletion failed"
                );
            }
        }
    }
    Ok(t)
}

/// The `done` result of one invocation.
#[derive(Debug, Clone, Serialize)]
pub struct PruneDone {
    /// How it ended (`skipped`, `stopped` or `completed`; `more_work` when continued).
    #[serde(skip)]
    pub status: Status,
    /// Schedule batches that committed.
    pub schedules_processed: u64,
    /// Memberships removed.
    pub destroyed_count_total: u64,
    /// Schedule batches that failed (a metric, not a field).
    #[serde(skip)]
    pub failed_schedules: u64,
}

impl PruneDone {
    fn new(status: Status, t: &Totals) -> PruneDone {
        PruneDone {
            status,
            schedules_processed: t.processed,
            destroyed_count_total: t.destroyed,
            failed_schedules: t.failed,
        }
    }
}

impl Done for PruneDone {
    fn status(&self) -> Status {
        self.status
    }
    fn continued_status(&self) -> Status {
        Status::MoreWork
    }
    fn metrics(&self) -> Vec<(Metric, f64)> {
        vec![
            (metrics::FAILED_SCHEDULES, self.failed_schedules as f64),
            (metrics::FAILED, self.failed_schedules as f64),
            (
                metrics::ITEMS,
                (self.schedules_processed + self.failed_schedules) as f64,
            ),
            (
                metrics::SCHEDULES_PROCESSED,
                self.schedules_processed as f64,
            ),
            (
                metrics::DESTROYED_COUNT_TOTAL,
                self.destroyed_count_total as f64,
            ),
        ]
    }
}

/// The `prune-deletions` job: single flight, continued while schedules remain.
#[derive(Debug, Clone, Copy, Default)]
pub struct PruneDeletions;

impl Job for PruneDeletions {
    const FUNCTION: Function = FUNCTION;
    type Payload = PruneDeletionsRun;
    type Outcome = PruneDone;
    type Deps = ();

    fn overlap(_: &PruneDeletionsRun) -> Overlap {
        Overlap::Function
    }

    fn busy(_: &PruneDeletionsRun) -> Report {
        Report::new(PruneDone::new(Status::Skipped, &Totals::default()))
    }

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        _: PruneDeletionsRun,
    ) -> Result<job::Step<PruneDone, PruneDeletionsRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let budget = Budget::start(inv.settings.prune_deletions_budget);
        let totals = run(inv, &env.run_id, client, &budget).await?;
        if totals.failed > 0 {
            // Redelivery, or the next cron, starts again from the database state.
            return Ok(job::Step::Retry {
                outcome: PruneDone::new(Status::Stopped, &totals),
                error: Error::Retryable(format!(
                    "{} scheduled member deletion(s) failed",
                    totals.failed
                )),
            });
        }
        let more: bool = client.query_typed_one(sql::ANY_SCHEDULE, &[]).await?.get(0);
        let done = PruneDone::new(Status::Completed, &totals);
        Ok(job::Step::then(
            done,
            more.then_some(PruneDeletionsRun {}),
            0,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skipped_carries_zero_counters_and_the_failed_metric() {
        let r = Report::new(PruneDone::new(Status::Skipped, &Totals::default()));
        assert_eq!(
            r.to_json(),
            json!({"status": "skipped", "schedules_processed": 0, "destroyed_count_total": 0})
        );
        assert_eq!(
            crate::metrics::named(&r.metrics()),
            vec![
                ("failed_schedules", 0.0),
                ("failed", 0.0),
                ("items", 0.0),
                ("schedules_processed", 0.0),
                ("destroyed_count_total", 0.0)
            ]
        );
    }

    #[test]
    fn failed_schedule_batches_are_failed_items() {
        let t = Totals {
            processed: 3,
            failed: 2,
            ..Totals::default()
        };
        let r = Report::new(PruneDone::new(Status::Stopped, &t));
        let m = crate::metrics::named(&r.metrics());
        assert!(m.contains(&("failed", 2.0)), "{m:?}");
        assert!(m.contains(&("items", 5.0)), "{m:?}");
    }
}
