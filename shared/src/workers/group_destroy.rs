//! B51 `group-destroy` (b51-adjourned-group-deletion.md §4, ⚑ D14–D16).
//!
//! Owns: the per-group try-lock, the re-verification of every precondition at
//! execution time (group, schedule, same user, still due under the current period,
//! user exists and is active, still allowed `remove_group`; permission lost means
//! restore), and the depth-first destruction in chunks, each chunk one transaction:
//! a project's issues, merge requests and notes in statements of 1000 rows, then the
//! project with its memberships, bots (phase 1 of user removal), notification
//! settings, authorizations, hooks, routes and project namespace; then each group,
//! deepest first. Under its budget it re-sends the same message (same key, `hop + 1`).
//! Idempotent: rows already gone are simply not found again. It touches no storage
//! (⚑ D15).
//!
//! It never deletes what has left the group: every chunk, contributions included, runs
//! in its own transaction that first takes the root's schedule row `FOR SHARE` (a
//! restore deletes it: the invocation stops as soon as it is gone or no longer the
//! message's) and then the row a transfer must also take — the project row and its
//! namespace row, or the subgroup's row — and re-checks that it still lies under the
//! group; a project or subgroup that moved away is skipped with a warning. Orphan
//! project namespaces (type 'Project' without a `projects` row) directly below a group
//! are deleted with it, with their routes. Anything else still below a group after a
//! pass (moved in after the listing) gets another pass; a pass that deletes nothing
//! ends the message as `blocked` with an error line naming the rows, never a retry
//! loop (docs/gitlab-differences.md).

use chrono::NaiveDate;
use serde_json::json;
use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::function::Function;
use crate::gitlab::group_deletion::{self, Expected, Restore};
use crate::gitlab::user_removal::{self, RemovalRequest};
use crate::gitlab::{hierarchy, permissions};
use crate::locks;
use crate::messages::{Envelope, GroupDestroyRun};
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Budget, Invocation, Report};

/// Rows per statement when a project's contributions are deleted.
pub const CONTRIBUTION_BATCH: i64 = 1000;
/// The reason passed to phase 1 for the bots of a destroyed group or project.
pub const REMOVAL_REASON: &str = "Group deleted";

/// The contribution tables and their project column, in deletion order.
const CONTRIBUTIONS: [(&str, &str); 3] = [
    ("issues", "project_id"),
    ("merge_requests", "target_project_id"),
    ("notes", "project_id"),
];

/// The try-lock key of one group (common.md §7.3).
pub fn lock_key_string(group_id: i64) -> String {
    format!("group-destroy:{group_id}")
}

/// Chunks that deleted rows during this invocation.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    projects: u64,
    groups: u64,
    contributions: u64,
}

/// How the work under the try-lock ended.
enum Outcome {
    /// A precondition no longer holds (§4.1 steps 2–6); `outcome` names it.
    Stale(&'static str),
    /// The user is not active: a retryable failure (§4.1 step 7).
    Inactive,
    /// Permission lost: the group was restored (§4.1 step 8).
    Restored,
    /// The budget or the deadline ran out: re-send.
    Continue(Counts),
    /// The group itself is gone.
    Destroyed(Counts),
    /// The schedule is gone or changed mid-destroy: stop, nothing more is deleted.
    Unscheduled(Counts),
    /// A pass deleted nothing and the group is still there: ends without a retry.
    Blocked(Counts),
}

/// The projects directly in namespace `g`, ascending.
async fn projects_in<C: GenericClient>(c: &C, g: i64) -> Result<Vec<i64>> {
    let rows = c
        .query(
            "SELECT id::bigint FROM projects WHERE namespace_id = $1::bigint ORDER BY id",
            &[&g],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// What a chunk found under its locks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Chunk {
    /// It deleted rows (contributions: how many; project or group: 1).
    Deleted(u64),
    /// Nothing left to delete (already gone, or the table is finished for the project).
    Nothing,
    /// The project or subgroup no longer belongs to the group being destroyed: skipped.
    Left,
    /// The group's schedule is gone or no longer the message's: stop the invocation.
    Unscheduled,
    /// The group still holds namespaces or projects this pass did not delete.
    NotEmpty(Vec<String>),
}

/// What every chunk re-checks first (one transaction, under locks that a transfer or a
/// restore also takes): the root's schedule row `FOR SHARE`, still the message's user and
/// still due under the cutoff evaluated at verification. A restore deletes the row: it
/// waits for the running chunk, and once it has committed no further chunk starts. (A
/// restore still waiting when a chunk commits can lose the freed row lock to the next
/// chunk, since PostgreSQL does not queue row locks across a commit; it then commits at
/// a later chunk boundary.)
async fn still_scheduled<C: GenericClient>(
    c: &C,
    p: &GroupDestroyRun,
    cutoff: NaiveDate,
) -> Result<bool> {
    let row = c
        .query_opt(
            "SELECT user_id::bigint, marked_for_deletion_on FROM group_deletion_schedules
             WHERE group_id = $1::bigint FOR SHARE",
            &[&p.group_id],
        )
        .await?;
    Ok(row.is_some_and(|r| r.get::<_, i64>(0) == p.user_id && r.get::<_, NaiveDate>(1) <= cutoff))
}

/// Lock project `project` (`FOR UPDATE`) and its namespace row (`FOR SHARE`: a transfer
/// of the project, or of any group above it, updates one of the two rows, since moving
/// a group rewrites the `traversal_ids` of everything below it), then tell whether it
/// still lies under `root`. `None`: the project is gone.
async fn lock_project<C: GenericClient>(
    c: &C,
    root: i64,
    project: i64,
) -> Result<Option<(bool, Option<i64>)>> {
    let Some(row) = c
        .query_opt(
            "SELECT namespace_id::bigint, project_namespace_id::bigint FROM projects
             WHERE id = $1::bigint FOR UPDATE",
            &[&project],
        )
        .await?
    else {
        return Ok(None);
    };
    let ns: i64 = row.get(0);
    let under: bool = c
        .query_opt(
            "SELECT $2::bigint = ANY(traversal_ids::bigint[]) FROM namespaces
             WHERE id = $1::bigint FOR SHARE",
            &[&ns, &root],
        )
        .await?
        .is_some_and(|r| r.get(0));
    Ok(Some((under, row.get(1))))
}

/// Chunk "contributions t of p": at most `CONTRIBUTION_BATCH` rows, lowest ids first,
/// in one transaction, only while p is locked and still under the group, and the group
/// is still scheduled.
async fn contributions_chunk<C>(
    client: &mut C,
    p: &GroupDestroyRun,
    cutoff: NaiveDate,
    (table, column): (&str, &str),
    project: i64,
) -> Result<Chunk>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, p, cutoff).await? {
        tx.commit().await?;
        return Ok(Chunk::Unscheduled);
    }
    let chunk = match lock_project(&tx, p.group_id, project).await? {
        None => Chunk::Nothing,
        Some((false, _)) => Chunk::Left,
        Some((true, _)) => {
            let n = tx
                .execute(
                    &format!(
                        "DELETE FROM {table} WHERE id IN
                           (SELECT id FROM {table} WHERE {column} = $1::bigint ORDER BY id LIMIT $2)"
                    ),
                    &[&project, &CONTRIBUTION_BATCH],
                )
                .await?;
            if n == 0 {
                Chunk::Nothing
            } else {
                Chunk::Deleted(n)
            }
        }
    };
    tx.commit().await?;
    Ok(chunk)
}

/// Phase 1 for every project bot with a membership of the source, ascending ids
/// (§4.3 row 2, §4.4 row 2). The `delete-user` messages go into `outbox`.
async fn remove_bots<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    env: &Envelope,
    initiator: i64,
    source_type: &str,
    source_id: i64,
    outbox: &mut Vec<OutMessage>,
) -> Result<()> {
    let bots: Vec<i64> = c
        .query(
            "SELECT DISTINCT m.user_id::bigint FROM members m JOIN users u ON u.id = m.user_id
             WHERE m.source_type = $1 AND m.source_id = $2::bigint AND u.user_type = 6
             ORDER BY 1",
            &[&source_type, &source_id],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    for bot in bots {
        let req = RemovalRequest {
            user_id: bot,
            initiator: Some(initiator),
            reason: REMOVAL_REASON,
            extra_affected: &[],
        };
        user_removal::schedule_removal(c, inv.now, &env.run_id, &req, outbox).await?;
    }
    Ok(())
}

/// Memberships (invites and requests included) and notification settings of a source.
async fn delete_source_rows<C: GenericClient>(
    c: &C,
    source_type: &str,
    source_id: i64,
) -> Result<()> {
    c.execute(
        "DELETE FROM members WHERE source_type = $1 AND source_id = $2::bigint",
        &[&source_type, &source_id],
    )
    .await?;
    c.execute(
        "DELETE FROM notification_settings WHERE source_type = $1 AND source_id = $2::bigint",
        &[&source_type, &source_id],
    )
    .await?;
    Ok(())
}

/// Chunk "project p" (§4.3), after the same re-checks as a contributions chunk.
async fn project_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    msg: &GroupDestroyRun,
    cutoff: NaiveDate,
    p: i64,
) -> Result<Chunk>
where
    C: GenericClient + Send + Sync,
{
    let user_id = msg.user_id;
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, msg, cutoff).await? {
        tx.commit().await?;
        return Ok(Chunk::Unscheduled);
    }
    let project_namespace = match lock_project(&tx, msg.group_id, p).await? {
        None => {
            tx.commit().await?;
            return Ok(Chunk::Nothing);
        }
        Some((false, _)) => {
            tx.commit().await?;
            return Ok(Chunk::Left);
        }
        Some((true, pns)) => pns,
    };
    let mut outbox = Vec::new();
    remove_bots(&tx, inv, env, user_id, "Project", p, &mut outbox).await?;
    delete_source_rows(&tx, "Project", p).await?;
    tx.execute(
        "DELETE FROM project_authorizations WHERE project_id = $1::bigint",
        &[&p],
    )
    .await?;
    tx.execute("DELETE FROM web_hooks WHERE project_id = $1::bigint", &[&p])
        .await?;
    tx.execute(
        "DELETE FROM routes WHERE (source_type = 'Project' AND source_id = $1::bigint)
            OR (source_type = 'Namespace' AND source_id = $2::bigint)",
        &[&p, &project_namespace],
    )
    .await?;
    tx.execute("DELETE FROM projects WHERE id = $1::bigint", &[&p])
        .await?;
    if let Some(ns) = project_namespace {
        tx.execute(
            "DELETE FROM namespaces WHERE id = $1::bigint AND type = 'Project'",
            &[&ns],
        )
        .await?;
    }
    // Send-then-commit (common.md §9.5).
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(Chunk::Deleted(1))
}

/// Orphan project namespaces directly below `$1`: type 'Project', no `projects` row
/// refers to them, and nothing below them. GitLab never leaves one behind on purpose,
/// but one blocks the group's deletion (`namespaces.parent_id` restricts), so the
/// subtree takes it along with its route.
const ORPHANS: &str = "namespaces o
     WHERE o.parent_id = $1::bigint AND o.type = 'Project'
       AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.project_namespace_id = o.id)
       AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.namespace_id = o.id)
       AND NOT EXISTS (SELECT 1 FROM namespaces c WHERE c.parent_id = o.id)";

/// Chunk "group g" (§4.4): g locked and still under the group being destroyed (the
/// root itself always is), its orphan project namespaces deleted with it, and nothing
/// else left below it (what a transfer brought in after the listing waits for the next
/// pass).
async fn group_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    msg: &GroupDestroyRun,
    cutoff: NaiveDate,
    g: i64,
) -> Result<Chunk>
where
    C: GenericClient + Send + Sync,
{
    let user_id = msg.user_id;
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, msg, cutoff).await? {
        tx.commit().await?;
        return Ok(Chunk::Unscheduled);
    }
    let Some(row) = tx
        .query_opt(
            "SELECT $2::bigint = ANY(traversal_ids::bigint[]) FROM namespaces
             WHERE id = $1::bigint AND type = 'Group' FOR UPDATE",
            &[&g, &msg.group_id],
        )
        .await?
    else {
        tx.commit().await?;
        return Ok(Chunk::Nothing);
    };
    if !row.get::<_, bool>(0) {
        tx.commit().await?;
        return Ok(Chunk::Left);
    }
    let orphans = tx
        .query(
            &format!("SELECT o.id::bigint FROM {ORPHANS} ORDER BY o.id FOR UPDATE OF o"),
            &[&g],
        )
        .await?;
    let orphans: Vec<i64> = orphans.iter().map(|r| r.get(0)).collect();
    if !orphans.is_empty() {
        tx.execute(
            "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id = ANY($1::bigint[])",
            &[&orphans],
        )
        .await?;
        tx.execute(
            "DELETE FROM namespaces WHERE id = ANY($1::bigint[])",
            &[&orphans],
        )
        .await?;
        for o in &orphans {
            tracing::info!(
                group_id = msg.group_id,
                namespace_id = *o,
                parent_id = g,
                "Group destroy removed an orphan project namespace"
            );
        }
    }
    let left: Vec<String> = tx
        .query(
            "SELECT 'namespace ' || id || ' (' || COALESCE(type, 'NULL') || ')' FROM namespaces
             WHERE parent_id = $1::bigint
             UNION ALL
             SELECT 'project ' || id FROM projects WHERE namespace_id = $1::bigint
             ORDER BY 1",
            &[&g],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !left.is_empty() {
        tx.commit().await?;
        return Ok(Chunk::NotEmpty(left));
    }
    let mut outbox = Vec::new();
    remove_bots(&tx, inv, env, user_id, "Namespace", g, &mut outbox).await?;
    delete_source_rows(&tx, "Namespace", g).await?;
    tx.execute("DELETE FROM web_hooks WHERE group_id = $1::bigint", &[&g])
        .await?;
    tx.execute(
        "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id = $1::bigint",
        &[&g],
    )
    .await?;
    tx.execute(
        "DELETE FROM group_deletion_schedules WHERE group_id = $1::bigint",
        &[&g],
    )
    .await?;
    // FK effects: members_deletion_schedules and import_source_users cascade;
    // placeholder details and member_namespace_id become NULL (schema.md §4).
    tx.execute("DELETE FROM namespaces WHERE id = $1::bigint", &[&g])
        .await?;
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(Chunk::Deleted(1))
}

async fn restore<C>(
    client: &mut C,
    group_id: i64,
    now: chrono::DateTime<chrono::Utc>,
    expected: Expected,
) -> Result<Restore>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let r = group_deletion::restore_group(&tx, group_id, now, expected).await?;
    tx.commit().await?;
    Ok(r)
}

/// §4.1 steps 2–8: `Ok(None)` means go ahead and destroy.
async fn verify<C>(
    inv: &Invocation<'_>,
    client: &mut C,
    p: &GroupDestroyRun,
) -> Result<Option<Outcome>>
where
    C: GenericClient + Send + Sync,
{
    let (g, u) = (p.group_id, p.user_id);
    if !group_deletion::group_exists(&*client, g).await? {
        tracing::info!(group_id = g, "Group destroy skipped: group not found");
        return Ok(Some(Outcome::Stale("group_not_found")));
    }
    let Some(schedule) = group_deletion::schedule_of(&*client, g).await? else {
        tracing::info!(
            group_id = g,
            "Group destroy skipped: group no longer scheduled for deletion"
        );
        return Ok(Some(Outcome::Stale("not_scheduled")));
    };
    if schedule.user_id != u {
        tracing::info!(
            group_id = g,
            user_id = u,
            scheduled_by = schedule.user_id,
            "Group destroy skipped: scheduling user changed"
        );
        return Ok(Some(Outcome::Stale("user_changed")));
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
        return Ok(Some(Outcome::Stale("not_due")));
    }
    let Some(user) = permissions::load_actor(&*client, u).await? else {
        tracing::warn!(
            group_id = g,
            user_id = u,
            "Group destroy skipped: user not found"
        );
        return Ok(Some(Outcome::Stale("user_not_found")));
    };
    if !user.active {
        let state: Option<String> = client
            .query_one("SELECT state FROM users WHERE id = $1::bigint", &[&u])
            .await?
            .get(0);
        tracing::error!(
            group_id = g,
            user_id = u,
            user_state = state.as_deref(),
            "Group destroy failed: user is not active"
        );
        return Ok(Some(Outcome::Inactive));
    }
    if permissions::remove_group(&*client, &user, g).await? {
        return Ok(None);
    }
    let expected = Expected { user_id: u, cutoff };
    match retry_transient!(restore(client, g, inv.now, expected).await)? {
        Restore::Restored { full_path } => {
            tracing::warn!(
                group_id = g,
                user_id = u,
                full_path = full_path.as_str(),
                "Group destroy unauthorized: group restored"
            );
            Ok(Some(Outcome::Restored))
        }
        Restore::NotScheduled => {
            tracing::info!(
                group_id = g,
                "Group destroy skipped: group no longer scheduled for deletion"
            );
            Ok(Some(Outcome::Stale("not_scheduled")))
        }
        Restore::Changed(s) if s.user_id != u => {
            tracing::info!(
                group_id = g,
                user_id = u,
                scheduled_by = s.user_id,
                "Group destroy skipped: scheduling user changed"
            );
            Ok(Some(Outcome::Stale("user_changed")))
        }
        Restore::Changed(_) => {
            tracing::info!(group_id = g, "Group destroy skipped: deletion not yet due");
            Ok(Some(Outcome::Stale("not_due")))
        }
    }
}

/// §4.2: the subtree, deepest first, chunk by chunk, under the budget. The subtree is
/// listed at the start of a pass; every chunk then re-checks under its locks that the
/// group is still scheduled as the message says (otherwise the invocation stops) and
/// that its project or subgroup still lies under the group (otherwise it is skipped with
/// a log line). A pass that leaves the root in place (something was moved in after the
/// listing) is followed by another; a pass that changed nothing ends the message as
/// blocked, with a line naming what blocks the deletion.
async fn destroy<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    p: &GroupDestroyRun,
    budget: Budget,
) -> Result<Outcome>
where
    C: GenericClient + Send + Sync,
{
    let period = group_deletion::deletion_adjourned_period(&*client).await?;
    let cutoff = group_deletion::cutoff(inv.today(), period);
    let mut n = Counts::default();
    // A chunk that deleted rows is one unit of progress; only after one may we stop.
    let mut progressed = false;
    let stop = |progressed: bool| progressed && (budget.exhausted() || inv.deadline.reached());
    loop {
        let mut pass_progress = false;
        let mut blockers: Vec<String> = Vec::new();
        let groups = hierarchy::descendant_groups_deepest_first(&*client, p.group_id).await?;
        if groups.is_empty() {
            return Ok(Outcome::Destroyed(n));
        }
        for g in groups {
            'project: for project in projects_in(&*client, g).await? {
                for table in CONTRIBUTIONS {
                    loop {
                        if stop(progressed) {
                            return Ok(Outcome::Continue(n));
                        }
                        match retry_transient!(
                            contributions_chunk(client, p, cutoff, table, project).await
                        )? {
                            Chunk::Deleted(k) => {
                                n.contributions += k;
                                progressed = true;
                                pass_progress = true;
                            }
                            // This table is finished for the project: not a unit.
                            Chunk::Nothing | Chunk::NotEmpty(_) => break,
                            Chunk::Left => {
                                left_project(p, project);
                                continue 'project;
                            }
                            Chunk::Unscheduled => return Ok(unscheduled(p, n)),
                        }
                    }
                }
                if stop(progressed) {
                    return Ok(Outcome::Continue(n));
                }
                match retry_transient!(project_chunk(inv, env, client, p, cutoff, project).await)? {
                    Chunk::Deleted(_) => {
                        n.projects += 1;
                        progressed = true;
                        pass_progress = true;
                    }
                    Chunk::Left => left_project(p, project),
                    Chunk::Unscheduled => return Ok(unscheduled(p, n)),
                    Chunk::Nothing | Chunk::NotEmpty(_) => {}
                }
            }
            if stop(progressed) {
                return Ok(Outcome::Continue(n));
            }
            match retry_transient!(group_chunk(inv, env, client, p, cutoff, g).await)? {
                Chunk::Deleted(_) => {
                    n.groups += 1;
                    progressed = true;
                    pass_progress = true;
                    if g == p.group_id {
                        return Ok(Outcome::Destroyed(n));
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
                Chunk::Nothing => {}
            }
        }
        if !pass_progress {
            tracing::error!(
                group_id = p.group_id,
                blocking = ?blockers,
                "Group destroy blocked: rows below the group cannot be deleted; an operator must move or delete them, then the next cron run destroys the group"
            );
            return Ok(Outcome::Blocked(n));
        }
    }
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
fn unscheduled(p: &GroupDestroyRun, n: Counts) -> Outcome {
    tracing::info!(
        group_id = p.group_id,
        projects_deleted = n.projects,
        groups_deleted = n.groups,
        "Group destroy stopped: group no longer scheduled for deletion"
    );
    Outcome::Unscheduled(n)
}

async fn work<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    p: &GroupDestroyRun,
    budget: Budget,
) -> Result<Outcome>
where
    C: GenericClient + Send + Sync,
{
    if let Some(outcome) = verify(inv, client, p).await? {
        return Ok(outcome);
    }
    destroy(inv, env, client, p, budget).await
}

fn counts_json(p: &GroupDestroyRun, outcome: &str, n: Counts) -> serde_json::Value {
    json!({
        "group_id": p.group_id,
        "user_id": p.user_id,
        "outcome": outcome,
        "projects_deleted": n.projects,
        "groups_deleted": n.groups,
        "contributions_deleted": n.contributions,
    })
}

/// Handle one `group-destroy.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let p: GroupDestroyRun = env.payload()?;
    let budget = Budget::start(inv.settings.group_destroy_budget);
    let lock = lock_key_string(p.group_id);
    if !locks::try_session_lock(&*client, &lock).await? {
        tracing::info!(
            group_id = p.group_id,
            "Group destroy skipped: already in progress"
        );
        return Ok(Report::untyped(
            "skipped",
            json!({ "group_id": p.group_id, "outcome": "locked" }),
        ));
    }
    let result = work(inv, env, client, &p, budget).await;
    // Released before any re-send, on error paths too.
    let unlocked = locks::session_unlock(&*client, &lock).await;
    let outcome = match result {
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
    unlocked?;
    Ok(match outcome {
        Outcome::Stale(why) => Report::untyped("stale", counts_json(&p, why, Counts::default())),
        Outcome::Inactive => {
            let mut r = Report::untyped(
                "failed",
                counts_json(&p, "user_not_active", Counts::default()),
            );
            r.retry = Some(Error::Retryable("user is not active".into()));
            r
        }
        Outcome::Restored => {
            Report::untyped("restored", counts_json(&p, "restored", Counts::default()))
        }
        Outcome::Continue(n) => {
            let sent = inv
                .continue_with(OutMessage::new(
                    Function::GroupDestroy,
                    0,
                    env.resend(inv.now),
                ))
                .await?;
            if sent {
                tracing::info!(
                    group_id = p.group_id,
                    hop = env.hop.saturating_add(1),
                    projects_deleted = n.projects,
                    groups_deleted = n.groups,
                    "Group destroy continuing"
                );
            }
            Report::untyped("limit_reached", counts_json(&p, "continuing", n))
                .metric("projects_deleted", n.projects as f64)
                .metric("groups_deleted", n.groups as f64)
        }
        Outcome::Unscheduled(n) => Report::untyped("stale", counts_json(&p, "not_scheduled", n))
            .metric("projects_deleted", n.projects as f64)
            .metric("groups_deleted", n.groups as f64),
        Outcome::Blocked(n) => Report::untyped("blocked", counts_json(&p, "blocked", n))
            .metric("projects_deleted", n.projects as f64)
            .metric("groups_deleted", n.groups as f64),
        Outcome::Destroyed(n) => {
            tracing::info!(
                group_id = p.group_id,
                user_id = p.user_id,
                projects_deleted = n.projects,
                groups_deleted = n.groups,
                hop = env.hop,
                "Group destroyed"
            );
            Report::untyped("completed", counts_json(&p, "destroyed", n))
                .metric("projects_deleted", n.projects as f64)
                .metric("groups_deleted", n.groups as f64)
        }
    })
}
