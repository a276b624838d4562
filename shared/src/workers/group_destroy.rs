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

/// Chunk "contributions t of p": at most `CONTRIBUTION_BATCH` rows, lowest ids first.
async fn delete_contributions<C: GenericClient>(
    c: &C,
    (table, column): (&str, &str),
    project_id: i64,
) -> Result<u64> {
    Ok(c.execute(
        &format!(
            "DELETE FROM {table} WHERE id IN
               (SELECT id FROM {table} WHERE {column} = $1::bigint ORDER BY id LIMIT $2)"
        ),
        &[&project_id, &CONTRIBUTION_BATCH],
    )
    .await?)
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

/// Chunk "project p" (§4.3). Returns whether the project was deleted.
async fn project_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    user_id: i64,
    p: i64,
) -> Result<bool>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let Some(row) = tx
        .query_opt(
            "SELECT project_namespace_id::bigint FROM projects WHERE id = $1::bigint FOR UPDATE",
            &[&p],
        )
        .await?
    else {
        tx.commit().await?;
        return Ok(false);
    };
    let project_namespace: Option<i64> = row.get(0);
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
    Ok(true)
}

/// Chunk "group g" (§4.4). Returns whether the group was deleted.
async fn group_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    user_id: i64,
    g: i64,
) -> Result<bool>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    if tx
        .query_opt(
            "SELECT id FROM namespaces WHERE id = $1::bigint AND type = 'Group' FOR UPDATE",
            &[&g],
        )
        .await?
        .is_none()
    {
        tx.commit().await?;
        return Ok(false);
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
    Ok(true)
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

/// §4.2: the subtree, deepest first, chunk by chunk, under the budget.
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
    let mut n = Counts::default();
    // A chunk that deleted rows is one unit of progress; only after one may we stop.
    let mut progressed = false;
    let stop = |progressed: bool| progressed && (budget.exhausted() || inv.deadline.reached());
    for g in hierarchy::descendant_groups_deepest_first(&*client, p.group_id).await? {
        for project in projects_in(&*client, g).await? {
            for table in CONTRIBUTIONS {
                loop {
                    if stop(progressed) {
                        return Ok(Outcome::Continue(n));
                    }
                    let deleted =
                        retry_transient!(delete_contributions(&*client, table, project).await)?;
                    if deleted == 0 {
                        break; // this table is finished for the project: not a unit
                    }
                    n.contributions += deleted;
                    progressed = true;
                }
            }
            if stop(progressed) {
                return Ok(Outcome::Continue(n));
            }
            if retry_transient!(project_chunk(inv, env, client, p.user_id, project).await)? {
                n.projects += 1;
                progressed = true;
            }
        }
        if stop(progressed) {
            return Ok(Outcome::Continue(n));
        }
        if retry_transient!(group_chunk(inv, env, client, p.user_id, g).await)? {
            n.groups += 1;
            progressed = true;
        }
    }
    Ok(Outcome::Destroyed(n))
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
        return Ok(Report::new(
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
        Outcome::Stale(why) => Report::new("stale", counts_json(&p, why, Counts::default())),
        Outcome::Inactive => {
            let mut r = Report::new(
                "failed",
                counts_json(&p, "user_not_active", Counts::default()),
            );
            r.retry = Some(Error::Retryable("user is not active".into()));
            r
        }
        Outcome::Restored => {
            Report::new("restored", counts_json(&p, "restored", Counts::default()))
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
            Report::new("limit_reached", counts_json(&p, "continuing", n))
                .metric("projects_deleted", n.projects as f64)
                .metric("groups_deleted", n.groups as f64)
        }
        Outcome::Destroyed(n) => {
            tracing::info!(
                group_id = p.group_id,
                user_id = p.user_id,
                projects_deleted = n.projects,
                groups_deleted = n.groups,
                hop = env.hop,
                "Group destroyed"
            );
            Report::new("completed", counts_json(&p, "destroyed", n))
                .metric("projects_deleted", n.projects as f64)
                .metric("groups_deleted", n.groups as f64)
        }
    })
}
