//! B51 `adjourned-group-deletion` (behaviour §B51.3).
//!
//! Owns: the daily selection of groups whose adjourned-deletion period is over
//! (inclusive cutoff, keyset pages of 100 by id, behaviour §D13), the per-group choice
//! between a `group-destroy.run` message delayed by `index × 20` s and a restore when
//! the scheduling user may no longer remove the group (behaviour §D14), and the
//! deadline continuation. It deletes nothing itself: `workers::group_destroy`
//! re-verifies everything before it does.

use chrono::NaiveDate;
use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::deletion_model::{self, DeletionModel};
use crate::gitlab::group_deletion::{self, Expected, Restore, Schedule};
use crate::gitlab::permissions;
use crate::job::{Job, Step};
use crate::messages::{group_destroy_key, Envelope};
use crate::metrics::{self, Metric};
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Done, Invocation};
use crate::workers::group_destroy::payload::GroupDestroyRun;

pub mod payload;

pub use payload::{AdjournedGroupDeletionRun, GroupCursor};

/// Groups per keyset page.
pub const BATCH_SIZE: i64 = 100;
/// The delay step between group destructions, in seconds.
pub const INTERVAL_S: u64 = 20;

const FUNCTION: Function = Function::AdjournedGroupDeletion;

/// The delay of the destroy message of the group with run-wide index `index`.
pub fn delay_for(index: u64) -> u32 {
    u32::try_from(index.saturating_mul(INTERVAL_S)).unwrap_or(u32::MAX)
}

/// The `group-destroy.run` message for a due group (behaviour §B51.3.2 step 3): hop 0, key
/// `group-destroy:<group_id>:<date>:<user_id>`, the run's id.
pub fn destroy_message(
    s: &Schedule,
    index: u64,
    run_id: &str,
    now: chrono::DateTime<chrono::Utc>,
) -> OutMessage {
    OutMessage::to(
        group_destroy_key(s.group_id, s.marked_for_deletion_on, s.user_id),
        run_id,
        now,
        &GroupDestroyRun {
            group_id: s.group_id,
            user_id: s.user_id,
            marked_for_deletion_on: s.marked_for_deletion_on,
        },
    )
    .after(delay_for(index))
}

/// Every group due on `today`, by id, read with the run's own statements (its
/// cutoff, model and keyset pages): `hk parity` checks that a plan decided each.
pub async fn due_groups<C: GenericClient>(c: &C, today: NaiveDate) -> Result<Vec<i64>> {
    let cutoff = group_deletion::cutoff(today, group_deletion::deletion_adjourned_period(c).await?);
    let model = deletion_model::probe(c).await?;
    let (mut out, mut after) = (Vec::new(), None);
    loop {
        let page = group_deletion::due_page(c, model, cutoff, after, BATCH_SIZE).await?;
        out.extend(page.iter().map(|s| s.group_id));
        match page.last() {
            Some(s) if page.len() as i64 == BATCH_SIZE => after = Some(s.group_id),
            _ => return Ok(out),
        }
    }
}

/// How one due group ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum GroupOutcome {
    Enqueued { delay_s: u32 },
    Restored { full_path: String },
    UserMissing,
    NoLongerDue,
}

async fn restore<C>(inv: &Invocation<'_>, client: &mut C, s: &Schedule, due: Due) -> Result<Restore>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let expected = Expected {
        user_id: s.user_id,
        cutoff: due.cutoff,
    };
    let r = group_deletion::restore_group(&tx, due.model, s.group_id, inv.now, expected).await?;
    tx.commit().await?;
    Ok(r)
}

/// Steps 2–4 of behaviour §B51.3.2 for one group.
async fn process_group<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    s: &Schedule,
    index: u64,
    due: Due,
) -> Result<GroupOutcome>
where
    C: GenericClient + Send + Sync,
{
    let Some(user) = permissions::load_actor(&*client, s.user_id).await? else {
        return Ok(GroupOutcome::UserMissing);
    };
    if permissions::remove_group(&*client, &user, s.group_id).await? {
        let m = destroy_message(s, index, &env.run_id, inv.now);
        let delay_s = m.delay_s;
        inv.queue.send(std::slice::from_ref(&m)).await?;
        return Ok(GroupOutcome::Enqueued { delay_s });
    }
    match retry_transient!(restore(inv, client, s, due).await)? {
        Restore::Restored { full_path } => Ok(GroupOutcome::Restored { full_path }),
        Restore::NotScheduled | Restore::Changed(_) => Ok(GroupOutcome::NoLongerDue),
    }
}

/// What makes a group due: the cutoff and the database's deletion-state model.
#[derive(Debug, Clone, Copy)]
struct Due {
    cutoff: NaiveDate,
    model: DeletionModel,
}

#[derive(Default)]
struct RunResult {
    due: u64,
    enqueued: u64,
    restored: u64,
    skipped: u64,
    failed: u64,
    next: Option<GroupCursor>,
}

/// The `done` result of one invocation (`limit_reached`: `next_cursor` continues).
#[derive(Debug, Clone, Serialize)]
pub struct AdjournedGroupDeletionDone {
    /// Due groups visited.
    pub groups_due: u64,
    /// `group-destroy.run` messages sent.
    pub destroy_enqueued: u64,
    /// Groups restored because the scheduling user may no longer remove them.
    pub restored: u64,
    /// Groups skipped (user missing, schedule changed).
    pub skipped_groups: u64,
    /// Groups whose processing failed.
    pub failed_groups: u64,
    /// The cutoff evaluated.
    pub cutoff: NaiveDate,
    /// Where the continuation resumes; `null` when the run completed.
    pub next_cursor: Option<GroupCursor>,
}

impl Done for AdjournedGroupDeletionDone {
    fn metrics(&self) -> Vec<(Metric, f64)> {
        vec![
            (metrics::GROUPS_DUE, self.groups_due as f64),
            (metrics::DESTROY_ENQUEUED, self.destroy_enqueued as f64),
            (metrics::RESTORED, self.restored as f64),
            (metrics::SKIPPED_GROUPS, self.skipped_groups as f64),
            (metrics::FAILED, self.failed_groups as f64),
            (metrics::ITEMS, self.groups_due as f64),
        ]
    }
}

async fn run<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    cursor: Option<GroupCursor>,
    due: Due,
) -> Result<RunResult>
where
    C: GenericClient + Send + Sync,
{
    let mut r = RunResult::default();
    let mut index = cursor.map_or(0, |c| c.index);
    let mut after = cursor.map(|c| c.group_id);
    loop {
        let page =
            group_deletion::due_page(&*client, due.model, due.cutoff, after, BATCH_SIZE).await?;
        for s in &page {
            // Step 1: the deadline guard, never before the first group (progress rule).
            if r.due > 0 && inv.deadline.reached() {
                r.next = after.map(|group_id| GroupCursor { group_id, index });
                return Ok(r);
            }
            r.due += 1;
            let outcome = process_group(inv, env, client, s, index, due).await;
            let (decision, rule) = match &outcome {
                Ok(GroupOutcome::Enqueued { .. }) => ("destroy_enqueued", "due"),
                Ok(GroupOutcome::Restored { .. }) => ("restored", "permission_lost"),
                Ok(GroupOutcome::UserMissing) => ("kept", "user_missing"),
                Ok(GroupOutcome::NoLongerDue) => ("kept", "schedule_changed"),
                Err(_) => ("failed", "error"),
            };
            inv.decide("namespaces", s.group_id, decision, rule);
            match outcome {
                Ok(GroupOutcome::Enqueued { delay_s }) => {
                    r.enqueued += 1;
                    tracing::info!(
                        group_id = s.group_id,
                        user_id = s.user_id,
                        delay_s,
                        "Group deletion scheduled"
                    );
                }
                Ok(GroupOutcome::Restored { full_path }) => {
                    r.restored += 1;
                    tracing::info!(
                        group_id = s.group_id,
                        user_id = s.user_id,
                        full_path = full_path.as_str(),
                        "Group restored: scheduling user cannot remove group"
                    );
                }
                Ok(GroupOutcome::UserMissing) => {
                    r.skipped += 1;
                    tracing::warn!(
                        group_id = s.group_id,
                        user_id = s.user_id,
                        "Adjourned group deletion skipped: scheduling user not found"
                    );
                }
                Ok(GroupOutcome::NoLongerDue) => {
                    r.skipped += 1;
                    tracing::info!(
                        group_id = s.group_id,
                        user_id = s.user_id,
                        "Adjourned group deletion skipped: schedule changed"
                    );
                }
                Err(e) if e.is_connection_lost() => return Err(e),
                Err(e) => {
                    r.failed += 1;
                    tracing::error!(
                        group_id = s.group_id,
                        error = %e,
                        error_class = e.class(),
                        "Adjourned group deletion failed for group"
                    );
                }
            }
            after = Some(s.group_id);
            // `index` comes from the message: checked (it is at most the last id).
            index = index.checked_add(1).ok_or_else(|| {
                crate::error::Error::Malformed(
                    "invalid payload: field `cursor.index` leaves no room for another group".into(),
                )
            })?;
        }
        if (page.len() as i64) < BATCH_SIZE {
            return Ok(r);
        }
    }
}

/// The `adjourned-group-deletion` job: one run at a time, continued with its cursor.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdjournedGroupDeletion;

impl Job for AdjournedGroupDeletion {
    const FUNCTION: Function = FUNCTION;
    type Payload = AdjournedGroupDeletionRun;
    type Outcome = AdjournedGroupDeletionDone;
    type Deps = ();

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        payload: AdjournedGroupDeletionRun,
    ) -> Result<Step<AdjournedGroupDeletionDone, AdjournedGroupDeletionRun>>
    where
        C: GenericClient + Send + Sync,
    {
        // The period, the not-finite warning and the model are independent reads: one
        // flight, one round trip (issue 52).
        let first = payload.cursor.is_none();
        let (period, warned, model) = futures::join!(
            group_deletion::deletion_adjourned_period(&*client),
            async {
                match first {
                    true => group_deletion::warn_not_finite(&*client).await,
                    false => Ok(()),
                }
            },
            deletion_model::probe(&*client),
        );
        let (period, (), model) = (period?, warned?, model?);
        let cutoff = group_deletion::cutoff(inv.today(), period);
        let r = run(inv, env, client, payload.cursor, Due { cutoff, model }).await?;
        let done = AdjournedGroupDeletionDone {
            groups_due: r.due,
            destroy_enqueued: r.enqueued,
            restored: r.restored,
            skipped_groups: r.skipped,
            failed_groups: r.failed,
            cutoff,
            next_cursor: r.next,
        };
        let next = r
            .next
            .map(|c| AdjournedGroupDeletionRun { cursor: Some(c) });
        Ok(Step::then(done, next, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn delays_step_by_twenty_seconds_and_pass_sqs_limit_after_index_45() {
        assert_eq!(delay_for(0), 0);
        assert_eq!(delay_for(2), 40);
        assert_eq!(delay_for(45), 900);
        assert_eq!(delay_for(46), 920);
        assert_eq!(delay_for(u64::MAX), u32::MAX);
    }

    #[test]
    fn destroy_messages_carry_the_schedule_and_a_stable_key() {
        let s = Schedule {
            group_id: 100,
            user_id: 11,
            marked_for_deletion_on: "2025-03-03".parse().unwrap(),
        };
        let now = "2025-03-10T02:00:00Z".parse().unwrap();
        let m = destroy_message(&s, 46, "run-1", now);
        assert_eq!(m.receiver, Function::GroupDestroy);
        assert_eq!(m.delay_s, 920);
        assert!(m.needs_schedule());
        assert_eq!(m.envelope.message_key, "group-destroy:100:2025-03-03:11");
        assert_eq!((m.envelope.hop, m.envelope.run_id.as_str()), (0, "run-1"));
        assert_eq!(
            m.envelope.payload,
            json!({"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"})
        );
    }
}
