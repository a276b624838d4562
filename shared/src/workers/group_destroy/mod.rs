//! B51 `group-destroy` (behaviour §B51.4, §D14–§D16).
//!
//! Owns: the per-group try-lock, the re-verification of every precondition at
//! execution time (permission lost means restore), and the depth-first destruction in
//! chunks of one transaction each, re-sent under its budget (same key, `hop + 1`).
//! Key rule: it never deletes what has left the group. Every chunk first takes the
//! root's schedule row `FOR SHARE` (a restore deletes it), then the row a transfer must
//! also take, and re-checks that it still lies under the group. Rows only GitLab's
//! services can delete (`gitlab::blockers`) end the message as `blocked` with nothing
//! deleted, and so does a pass that deletes nothing (docs/gitlab-differences.md). It
//! touches no storage (behaviour §D15). `chunks` holds the chunk steps, `sql` their
//! statements, `report` the typed `done` results.

use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::function::Function;
use crate::gitlab::blockers::{self, Key};
use crate::gitlab::deletion_model::{self, DeletionModel};
use crate::gitlab::group_deletion::{self, Expected, Restore};
use crate::gitlab::{hierarchy, permissions, storage};
use crate::job::{Job, Next, Overlap, Step};
use crate::messages::Envelope;
use crate::retry_transient;
use crate::runtime::{Budget, Invocation, Report};

mod chunks;
pub mod payload;
mod report;
pub(crate) mod sql;

use chunks::{Chunk, Contribution, Recheck};
pub use chunks::{CONTRIBUTION_BATCH, REMOVAL_REASON};
pub use payload::GroupDestroyRun;
pub use report::{Deleted, GroupDestroyDone, GroupDestroyLocked, Outcome};

/// How long a group whose projects wait for the registry waits before the next pass.
pub const REGISTRY_WAIT_S: u32 = 60;

/// The try-lock key of one group (behaviour §7.3).
pub fn lock_key_string(group_id: i64) -> String {
    format!("group-destroy:{group_id}")
}

/// What the re-verification of behaviour §B51.4.1 decided.
enum Verified {
    /// Every precondition holds: destroy.
    Proceed,
    /// The message ends here, as `outcome` (stale, inactive user, or restored).
    Stop(Outcome),
}

async fn restore<C>(
    client: &mut C,
    model: DeletionModel,
    group_id: i64,
    now: chrono::DateTime<chrono::Utc>,
    expected: Expected,
) -> Result<Restore>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let r = group_deletion::restore_group(&tx, model, group_id, now, expected).await?;
    tx.commit().await?;
    Ok(r)
}

/// behaviour §B51.4.1 steps 2–8 (`exists`: whether the group exists, read with the
/// model).
async fn verify<C>(
    inv: &Invocation<'_>,
    client: &mut C,
    model: DeletionModel,
    exists: bool,
    p: &GroupDestroyRun,
) -> Result<Verified>
where
    C: GenericClient + Send + Sync,
{
    let (g, u) = (p.group_id, p.user_id);
    if !exists {
        tracing::info!(group_id = g, "Group destroy skipped: group not found");
        return Ok(Verified::Stop(Outcome::GroupNotFound));
    }
    let Some(schedule) = group_deletion::schedule_of(&*client, model, g).await? else {
        tracing::info!(
            group_id = g,
            "Group destroy skipped: group no longer scheduled for deletion"
        );
        return Ok(Verified::Stop(Outcome::NotScheduled));
    };
    if schedule.user_id != u {
        tracing::info!(
            group_id = g,
            user_id = u,
            scheduled_by = schedule.user_id,
            "Group destroy skipped: scheduling user changed"
        );
        return Ok(Verified::Stop(Outcome::UserChanged));
    }
    let period = group_deletion::deletion_adjourned_period(&*client).await?;
    let cutoff = group_deletion::cutoff(inv.today(), period);
    if schedule.marked_for_deletion_on > cutoff {
        tracing::info!(
            group_id = g,
            marked_for_deletion_on = %schedule.marked_for_deletion_on,
            cutoff = %cutoff,
            "Group destroy skipped: deletion not yet due"
        );
        return Ok(Verified::Stop(Outcome::NotDue));
    }
    let Some(user) = permissions::load_actor(&*client, u).await? else {
        tracing::warn!(
            group_id = g,
            user_id = u,
            "Group destroy skipped: user not found"
        );
        return Ok(Verified::Stop(Outcome::UserNotFound));
    };
    if !user.active {
        let state: Option<String> = client.query_one(sql::USER_STATE, &[&u]).await?.get(0);
        tracing::error!(
            group_id = g,
            user_id = u,
            user_state = state.as_deref(),
            "Group destroy failed: user is not active"
        );
        return Ok(Verified::Stop(Outcome::UserNotActive));
    }
    if permissions::remove_group(&*client, &user, g).await? {
        return Ok(Verified::Proceed);
    }
    let expected = Expected { user_id: u, cutoff };
    Ok(Verified::Stop(
        match retry_transient!(restore(client, model, g, inv.now, expected).await)? {
            Restore::Restored { full_path } => {
                tracing::warn!(
                    group_id = g,
                    user_id = u,
                    full_path = full_path.as_str(),
                    "Group destroy unauthorized: group restored"
                );
                Outcome::Restored
            }
            Restore::NotScheduled => {
                tracing::info!(
                    group_id = g,
                    "Group destroy skipped: group no longer scheduled for deletion"
                );
                Outcome::NotScheduled
            }
            Restore::Changed(s) if s.user_id != u => {
                tracing::info!(
                    group_id = g,
                    user_id = u,
                    scheduled_by = s.user_id,
                    "Group destroy skipped: scheduling user changed"
                );
                Outcome::UserChanged
            }
            Restore::Changed(_) => {
                tracing::info!(group_id = g, "Group destroy skipped: deletion not yet due");
                Outcome::NotDue
            }
        },
    ))
}

/// behaviour §B51.4.2: the subtree, deepest first, chunk by chunk, under the budget,
/// listed at the start of each pass. A pass that leaves the root in place is followed
/// by another; a pass that changed nothing ends the message as blocked.
async fn destroy<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    p: &GroupDestroyRun,
    model: DeletionModel,
    budget: Budget,
) -> Result<(Outcome, Deleted)>
where
    C: GenericClient + Send + Sync,
{
    let period = group_deletion::deletion_adjourned_period(&*client).await?;
    let recheck = Recheck {
        cutoff: group_deletion::cutoff(inv.today(), period),
        model,
    };
    let mut n = Deleted::default();
    // Before the first destructive chunk of every invocation: rows only GitLab's
    // services can delete end the message as blocked, with nothing deleted.
    let keys = blockers::keys(&*client).await?;
    let tree = blockers::tree(&*client, p.group_id).await?;
    let found = blockers::scan(&*client, &keys, &tree).await?;
    let modes = inv.settings.storage;
    let found = without_registry_rows(found, &modes);
    if let Some(rows) = blocked_by_service(p, &found, None) {
        n.blocking_rows = rows;
        return Ok((Outcome::Blocked, n));
    }
    // Storage the configured modes neither remove nor leave: blocked, nothing deleted.
    let held = storage::tree_counts(&*client, &tree.projects, &tree.namespaces).await?;
    let lines = storage::blocking(&modes, &held);
    if !lines.is_empty() {
        tracing::error!(
            group_id = p.group_id,
            blocking = lines.join("; ").as_str(),
            "Group destroy blocked: the group's projects hold storage this deployment does not remove; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run"
        );
        n.blocking_rows = u64::try_from(
            held.repositories + held.remote_files + held.local_files + held.other_uploads,
        )
        .unwrap_or(0);
        return Ok((Outcome::Blocked, n));
    }
    // A chunk that deleted rows is one unit of progress; only after one may we stop.
    let mut progressed = false;
    let stop = |progressed: bool| progressed && (budget.exhausted() || inv.deadline.reached());
    loop {
        let mut pass_progress = false;
        let mut waiting = false;
        let mut blockers: Vec<String> = Vec::new();
        let groups = hierarchy::descendant_groups_deepest_first(&*client, p.group_id).await?;
        if groups.is_empty() {
            return Ok((Outcome::Destroyed, n));
        }
        for g in groups {
            'project: for project in chunks::projects_in(&*client, g).await? {
                for table in Contribution::ALL {
                    loop {
                        if stop(progressed) {
                            return Ok((Outcome::Continuing, n));
                        }
                        match retry_transient!(
                            chunks::contributions_chunk(client, p, recheck, table, project).await
                        )? {
                            Chunk::Deleted(k) => {
                                n.contributions += k;
                                progressed = true;
                                pass_progress = true;
                            }
                            // This table is finished for the project: not a unit.
                            Chunk::Nothing | Chunk::NotEmpty(_) | Chunk::Waiting => break,
                            Chunk::Left => {
                                left_project(p, project);
                                continue 'project;
                            }
                            Chunk::Unscheduled => return Ok(unscheduled(p, n)),
                        }
                    }
                }
                if stop(progressed) {
                    return Ok((Outcome::Continuing, n));
                }
                let chunk = retry_transient!(
                    chunks::project_chunk(inv, env, client, p, recheck, project, &keys).await
                );
                let (chunk, storage_sent) = match chunk {
                    Ok(c) => c,
                    Err(e) => return raced(client, p, &keys, e, n).await,
                };
                n.storage_sent += storage_sent.sent;
                n.storage_left += storage_sent.left;
                match chunk {
                    Chunk::Deleted(_) => {
                        n.projects += 1;
                        progressed = true;
                        pass_progress = true;
                    }
                    Chunk::Left => left_project(p, project),
                    Chunk::Unscheduled => return Ok(unscheduled(p, n)),
                    Chunk::Waiting => waiting = true,
                    Chunk::NotEmpty(what) => blockers.extend(
                        what.into_iter()
                            .map(|w| format!("{w} in project {project}")),
                    ),
                    Chunk::Nothing => {}
                }
            }
            if stop(progressed) {
                return Ok((Outcome::Continuing, n));
            }
            let chunk =
                retry_transient!(chunks::group_chunk(inv, env, client, p, recheck, g, &keys).await);
            let chunk = match chunk {
                Ok(c) => c,
                Err(e) => return raced(client, p, &keys, e, n).await,
            };
            match chunk {
                Chunk::Deleted(_) => {
                    n.groups += 1;
                    progressed = true;
                    pass_progress = true;
                    if g == p.group_id {
                        return Ok((Outcome::Destroyed, n));
                    }
                }
                Chunk::Left => {
                    tracing::warn!(
                        group_id = p.group_id,
                        namespace_id = g,
                        "Group destroy skipped: subgroup no longer belongs to the group"
                    );
                }
                Chunk::Unscheduled => return Ok(unscheduled(p, n)),
                Chunk::NotEmpty(what) => {
                    blockers.extend(what.into_iter().map(|w| format!("{w} in group {g}")))
                }
                Chunk::Nothing | Chunk::Waiting => {}
            }
        }
        if waiting && !pass_progress {
            // Nothing else to do until the registry is done: come back later.
            return Ok((Outcome::WaitingForRegistry, n));
        }
        if !pass_progress {
            tracing::error!(
                group_id = p.group_id,
                blocking = ?blockers,
                "Group destroy blocked: rows below the group cannot be deleted; an operator must move or delete them, then the next cron run destroys the group"
            );
            return Ok((Outcome::Blocked, n));
        }
    }
}

/// When `found` holds rows that need an outside service: the error line naming them
/// and the operator action, and how many rows block.
fn blocked_by_service(
    p: &GroupDestroyRun,
    found: &[blockers::Found],
    violated: Option<&Key>,
) -> Option<u64> {
    let blocking = blockers::needing_service(found);
    if blocking.is_empty() && violated.is_none() {
        return None;
    }
    let rows: i64 = blocking.iter().map(|f| f.rows()).sum();
    let lines: Vec<String> = blocking.iter().map(|f| f.describe()).collect();
    match violated {
        None => tracing::error!(
            group_id = p.group_id,
            blocking_rows = rows,
            blocking = lines.join("; ").as_str(),
            "Group destroy blocked: rows that only GitLab's services can delete refer to the group; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run"
        ),
        Some(k) => tracing::error!(
            group_id = p.group_id,
            blocking_rows = rows,
            constraint = k.constraint.as_str(),
            table = k.table.as_str(),
            blocking = lines.join("; ").as_str(),
            "Group destroy blocked: rows that only GitLab's services can delete appeared during the deletion; the chunk was rolled back. Do what each entry says, then the group deletion resumes at the next cron run"
        ),
    }
    Some(u64::try_from(rows).unwrap_or(0))
}

/// With the registry `on`, container repositories are storage-cleanup's to remove,
/// not blocking rows.
fn without_registry_rows(
    found: Vec<blockers::Found>,
    modes: &crate::config::storage::StorageModes,
) -> Vec<blockers::Found> {
    if modes.registry != crate::config::storage::Mode::On {
        return found;
    }
    found
        .into_iter()
        .filter(|f| !(f.key.table == "container_repositories" && f.key.column == "project_id"))
        .collect()
}

/// A chunk failed with `e`: a violated blocking key ends the message as blocked.
async fn raced<C>(
    client: &mut C,
    p: &GroupDestroyRun,
    keys: &[Key],
    e: Error,
    mut n: Deleted,
) -> Result<(Outcome, Deleted)>
where
    C: GenericClient + Send + Sync,
{
    let Some(k) = blockers::violated(&e, keys) else {
        return Err(e);
    };
    let tree = blockers::tree(&*client, p.group_id).await?;
    let found = blockers::scan(&*client, keys, &tree).await?;
    n.blocking_rows = blocked_by_service(p, &found, Some(k)).unwrap_or(0);
    Ok((Outcome::Blocked, n))
}

/// Log a project that left the group since the listing.
fn left_project(p: &GroupDestroyRun, project: i64) {
    tracing::warn!(
        group_id = p.group_id,
        project_id = project,
        "Group destroy skipped: project no longer belongs to the group"
    );
}

/// The schedule went away (a restore) or changed while the destroy ran.
fn unscheduled(p: &GroupDestroyRun, n: Deleted) -> (Outcome, Deleted) {
    tracing::info!(
        group_id = p.group_id,
        projects_deleted = n.projects,
        groups_deleted = n.groups,
        "Group destroy stopped: group no longer scheduled for deletion"
    );
    (Outcome::Unscheduled, n)
}

/// Verify, then destroy: how the message ends and what this invocation deleted.
async fn work<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    p: &GroupDestroyRun,
    budget: Budget,
) -> Result<(Outcome, Deleted)>
where
    C: GenericClient + Send + Sync,
{
    // The model and the group's row in one flight, one round trip (issue 52).
    let (model, exists) = futures::join!(
        deletion_model::probe(&*client),
        group_deletion::group_exists(&*client, p.group_id)
    );
    let (model, exists) = (model?, exists?);
    match verify(inv, client, model, exists, p).await? {
        Verified::Stop(outcome) => Ok((outcome, Deleted::default())),
        Verified::Proceed => destroy(inv, env, client, p, model, budget).await,
    }
}

/// The `group-destroy` job, re-sent while the destruction goes on.
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupDestroy;

impl Job for GroupDestroy {
    const FUNCTION: Function = Function::GroupDestroy;
    const BUSY: &'static str = "Group destroy skipped: already in progress";
    type Payload = GroupDestroyRun;
    type Outcome = GroupDestroyDone;
    type Deps = ();

    fn overlap(p: &GroupDestroyRun) -> Overlap {
        Overlap::Key(lock_key_string(p.group_id))
    }

    fn busy(p: &GroupDestroyRun) -> Report {
        Report::new(GroupDestroyLocked::new(p.group_id))
    }

    fn continuing(done: &GroupDestroyDone, hop: u64) {
        tracing::info!(
            group_id = done.group_id,
            hop,
            projects_deleted = done.deleted.projects,
            groups_deleted = done.deleted.groups,
            "Group destroy continuing"
        );
    }

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        p: GroupDestroyRun,
    ) -> Result<Step<GroupDestroyDone, GroupDestroyRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let budget = Budget::start(inv.settings.group_destroy_budget);
        let (outcome, n) = match work(inv, env, client, &p, budget).await {
            Ok(o) => o,
            Err(e) => {
                tracing::error!(
                    group_id = p.group_id,
                    error = %e,
                    error_class = e.class(),
                    "Group destroy failed"
                );
                return Err(e);
            }
        };
        if let Some((decision, rule)) = outcome.decision() {
            inv.decide("namespaces", p.group_id, decision, rule);
        }
        let done = GroupDestroyDone::new(&p, outcome, n);
        Ok(match outcome {
            Outcome::Continuing => Step::Continue {
                outcome: done,
                next: Next::Resend,
                delay_s: 0,
            },
            Outcome::WaitingForRegistry => Step::Continue {
                outcome: done,
                next: Next::Resend,
                delay_s: REGISTRY_WAIT_S,
            },
            Outcome::UserNotActive => Step::Retry {
                outcome: done,
                error: Error::Retryable("user is not active".into()),
            },
            Outcome::Destroyed => {
                tracing::info!(
                    group_id = p.group_id,
                    user_id = p.user_id,
                    projects_deleted = n.projects,
                    groups_deleted = n.groups,
                    hop = env.hop,
                    "Group destroyed"
                );
                Step::Done(done)
            }
            _ => Step::Done(done),
        })
    }
}
