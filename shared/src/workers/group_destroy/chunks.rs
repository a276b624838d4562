//! The chunk steps of `group-destroy` (behaviour §B51.4.2–§B51.4.4).
//!
//! Owns: each chunk, one transaction that first re-checks under the locks a restore or
//! a transfer also takes that the group is still scheduled and the slice still lies
//! under it, then deletes the slice (contributions of one table, one project, or one
//! group; with `AUDIT_EVENTS=on` its `project_destroyed` / `group_destroyed` audit
//! event) and sends the removed bots' `delete-user` messages before COMMIT. Order and
//! budgets are the parent module's.

use chrono::NaiveDate;
use tokio_postgres::GenericClient;

use super::payload::GroupDestroyRun;
use super::sql;
use crate::config::storage::Mode;
use crate::error::Result;
use crate::gitlab::authz;
use crate::gitlab::blockers::{self, Key, Parent};
use crate::gitlab::deletion_model::DeletionModel;
use crate::gitlab::group_deletion;
use crate::gitlab::side_effects::audit::{self, Destroyed};
use crate::gitlab::storage;
use crate::gitlab::storage::StorageItem;
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::user_removal::{self, RemovalRequest};
use crate::gitlab::Intent;
use crate::messages::Envelope;
use crate::queue::OutMessage;
use crate::runtime::Invocation;
use crate::workers::storage_cleanup::payload::{storage_cleanup_key, StorageCleanupRun};

/// Rows per statement when a project's contributions are deleted.
pub const CONTRIBUTION_BATCH: i64 = 1000;
/// The reason passed to phase 1 for the bots of a destroyed group or project.
pub const REMOVAL_REASON: &str = "Group deleted";

/// A contribution table, each with its own chunk statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Contribution {
    Issues,
    MergeRequests,
    Notes,
}

impl Contribution {
    /// The contribution tables, in deletion order.
    pub(super) const ALL: [Contribution; 3] = [
        Contribution::Issues,
        Contribution::MergeRequests,
        Contribution::Notes,
    ];

    /// The statement deleting one chunk of this table for a project.
    fn statement(self) -> &'static str {
        match self {
            Contribution::Issues => sql::DELETE_ISSUES_CHUNK,
            Contribution::MergeRequests => sql::DELETE_MERGE_REQUESTS_CHUNK,
            Contribution::Notes => sql::DELETE_NOTES_CHUNK,
        }
    }
}

/// What locking a project found.
enum ProjectLock {
    /// The project is gone.
    Gone,
    /// It no longer lies under the group being destroyed.
    Left,
    /// Locked and still under the group.
    Under {
        /// Its project namespace, if any.
        project_namespace: Option<i64>,
    },
}

/// The projects directly in namespace `g`, ascending.
pub(super) async fn projects_in<C: GenericClient>(c: &C, g: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::PROJECTS_IN, &[&g]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// What a chunk found under its locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Chunk {
    /// It deleted rows (contributions: how many; project or group: 1).
    Deleted(u64),
    /// Nothing left to delete (already gone, or the table is finished for the project).
    Nothing,
    /// The project or subgroup no longer belongs to the group being destroyed: skipped.
    Left,
    /// The group's schedule is gone or no longer the message's: stop the invocation.
    Unscheduled,
    /// The group still holds namespaces or projects this pass did not delete (or a
    /// project holds storage its kind's mode does not let go).
    NotEmpty(Vec<String>),
    /// The project waits for its container repositories to leave the registry
    /// (`storage-cleanup` deletes their rows).
    Waiting,
}

/// What a project's chunk handed to `storage-cleanup` or left in place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StorageSent {
    /// Items sent.
    pub sent: u64,
    /// Items left in place.
    pub left: u64,
}

/// How long a container repository's deletion may be under way before its
/// `storage-cleanup` message is sent again (a DLQ'd or lost attempt).
pub const REGISTRY_RESEND_S: i64 = 3600;

/// The `storage-cleanup.remove` message of `item` of project `project`.
fn cleanup_message(
    inv: &Invocation<'_>,
    env: &Envelope,
    msg: &GroupDestroyRun,
    project: i64,
    item: StorageItem,
) -> OutMessage {
    OutMessage::to(
        storage_cleanup_key(project, &item),
        &env.run_id,
        inv.now,
        &StorageCleanupRun {
            group_id: msg.group_id,
            project_id: project,
            item,
        },
    )
}

/// What every chunk re-checks first: the root's schedule row `FOR SHARE`, still the
/// message's user and still due under the cutoff evaluated at verification, so once a
/// restore (which deletes the row) has committed no further chunk starts. On
/// [`DeletionModel::ScheduledAt`] the root's `namespace_details` row is taken
/// `FOR SHARE` first (a restore's order) and its schedule is the one to match.
async fn still_scheduled<C: GenericClient>(
    c: &C,
    p: &GroupDestroyRun,
    recheck: Recheck,
) -> Result<bool> {
    let schedule = group_deletion::locked_schedule(
        c,
        recheck.model,
        p.group_id,
        group_deletion::sql::scheduled_at::SHARE_DETAILS_SCHEDULE,
        group_deletion::sql::SHARE_SCHEDULE,
    )
    .await?;
    Ok(schedule
        .is_some_and(|s| s.user_id == p.user_id && s.marked_for_deletion_on <= recheck.cutoff))
}

/// What every chunk re-checks the schedule against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Recheck {
    /// The cutoff evaluated at verification.
    pub cutoff: NaiveDate,
    /// The database's deletion-state model.
    pub model: DeletionModel,
}

/// Lock project `project` (`FOR UPDATE`) and its namespace row (`FOR SHARE`: any
/// transfer above it updates one of the two), then tell whether it still lies under
/// `root`.
async fn lock_project<C: GenericClient>(c: &C, root: i64, project: i64) -> Result<ProjectLock> {
    let Some(row) = c.query_opt(sql::LOCK_PROJECT, &[&project]).await? else {
        return Ok(ProjectLock::Gone);
    };
    let ns: i64 = row.get(0);
    let under: bool = c
        .query_opt(sql::SHARE_NAMESPACE_UNDER, &[&ns, &root])
        .await?
        .is_some_and(|r| r.get(0));
    Ok(if under {
        ProjectLock::Under {
            project_namespace: row.get(1),
        }
    } else {
        ProjectLock::Left
    })
}

/// Chunk "contributions t of p": at most `CONTRIBUTION_BATCH` rows, lowest ids first,
/// while p is locked and still under the still scheduled group.
pub(super) async fn contributions_chunk<C>(
    client: &mut C,
    p: &GroupDestroyRun,
    recheck: Recheck,
    table: Contribution,
    project: i64,
) -> Result<Chunk>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, p, recheck).await? {
        tx.commit().await?;
        return Ok(Chunk::Unscheduled);
    }
    let chunk = match lock_project(&tx, p.group_id, project).await? {
        ProjectLock::Gone => Chunk::Nothing,
        ProjectLock::Left => Chunk::Left,
        // A repository storage move in progress holds the whole project back.
        ProjectLock::Under { .. } if storage::storage_move_in_progress(&tx, project).await? => {
            Chunk::Nothing
        }
        ProjectLock::Under { .. } => {
            let n = tx
                .execute(table.statement(), &[&project, &CONTRIBUTION_BATCH])
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
/// (behaviour §B51.4.3 row 2, §B51.4.4 row 2). Its intents (the `delete-user`
/// messages, the memberships' hooks) go into `intents`.
async fn remove_bots<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    initiator: i64,
    source_type: &str,
    source_id: i64,
    intents: &mut Vec<Intent>,
) -> Result<()> {
    let bots: Vec<i64> = c
        .query(sql::BOTS_OF_SOURCE, &[&source_type, &source_id])
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
            bot_resource: None,
            reason_for_deletion: None,
        };
        user_removal::schedule_removal(c, inv, &req, intents).await?;
    }
    Ok(())
}

/// Memberships (invites and requests included) and notification settings of a source.
async fn delete_source_rows<C: GenericClient>(
    c: &C,
    source_type: &str,
    source_id: i64,
) -> Result<()> {
    c.execute(sql::DELETE_SOURCE_MEMBERS, &[&source_type, &source_id])
        .await?;
    c.execute(
        sql::DELETE_SOURCE_NOTIFICATION_SETTINGS,
        &[&source_type, &source_id],
    )
    .await?;
    Ok(())
}

/// Chunk "project p" (behaviour §B51.4.3), after the same re-checks as a contributions chunk.
pub(super) async fn project_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    msg: &GroupDestroyRun,
    recheck: Recheck,
    p: i64,
    keys: &[Key],
) -> Result<(Chunk, StorageSent)>
where
    C: GenericClient + Send + Sync,
{
    let none = StorageSent::default();
    let user_id = msg.user_id;
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, msg, recheck).await? {
        tx.commit().await?;
        return Ok((Chunk::Unscheduled, none));
    }
    let project_namespace = match lock_project(&tx, msg.group_id, p).await? {
        ProjectLock::Gone => {
            tx.commit().await?;
            return Ok((Chunk::Nothing, none));
        }
        ProjectLock::Left => {
            tx.commit().await?;
            return Ok((Chunk::Left, none));
        }
        ProjectLock::Under { project_namespace } => project_namespace,
    };
    // GitLab's Projects::DestroyService refuses a project whose repository is being
    // moved to another storage: the copy on the destination would be leaked.
    if storage::storage_move_in_progress(&tx, p).await? {
        tx.commit().await?;
        return Ok((
            Chunk::NotEmpty(vec![
                "a repository storage move in progress (project_repository_storage_moves scheduled or started): the next run retries once it ends".into(),
            ]),
            none,
        ));
    }
    let modes = inv.settings.storage;
    let mut outbox = Vec::new();
    // The registry first: the rows of its repositories hold the project back (their
    // key is NO ACTION), and storage-cleanup deletes them after the images. With the
    // registry off they are the blocking keys' (`gitlab::blockers`).
    if modes.registry == Mode::On {
        let repos = storage::container_repositories(&tx, p).await?;
        if !repos.is_empty() {
            let due: Vec<&storage::ContainerRepository> = repos
                .iter()
                .filter(|r| {
                    r.delete_started_at
                        .is_none_or(|t| (inv.now - t).num_seconds() >= REGISTRY_RESEND_S)
                })
                .collect();
            let ids: Vec<i64> = due.iter().map(|r| r.id).collect();
            for r in &due {
                let item = StorageItem::ContainerRepository {
                    id: r.id,
                    path: r.path.clone(),
                };
                outbox.push(cleanup_message(inv, env, msg, p, item));
            }
            if !ids.is_empty() {
                storage::mark_container_repositories(&tx, &ids, inv.now).await?;
            }
            inv.queue.send(&outbox).await?;
            tx.commit().await?;
            tracing::info!(
                group_id = msg.group_id,
                project_id = p,
                container_repositories = repos.len(),
                sent = ids.len(),
                "Group destroy waiting: the project's container images are being deleted from the registry"
            );
            let sent = StorageSent {
                sent: ids.len() as u64,
                left: 0,
            };
            return Ok((Chunk::Waiting, sent));
        }
    }
    // The manifest, then the rows (send-then-commit: a crash before COMMIT leaves the
    // project, and storage-cleanup waits for its rows to go).
    let manifest = storage::take_manifest(&tx, p, &modes).await?;
    if !manifest.blocked.is_empty() {
        tx.rollback().await?;
        return Ok((Chunk::NotEmpty(manifest.blocked), none));
    }
    let sent = StorageSent {
        sent: manifest.remove.len() as u64,
        left: manifest.left.len() as u64,
    };
    for item in manifest.remove {
        outbox.push(cleanup_message(inv, env, msg, p, item));
    }
    if !manifest.left.is_empty() {
        let shown: Vec<String> = manifest
            .left
            .iter()
            .take(10)
            .map(|i| i.describe())
            .collect();
        tracing::warn!(
            group_id = msg.group_id,
            project_id = p,
            storage_items_left = manifest.left.len(),
            items = shown.join("; ").as_str(),
            "Group destroy left storage in place (STORAGE_*=leave, or files on local disk)"
        );
    }
    let hooks = system_hooks::prepare(&tx, inv, Subject::Project(p)).await?;
    let mut intents = Vec::new();
    remove_bots(&tx, inv, user_id, "Project", p, &mut intents).await?;
    if inv.settings.audit_events {
        audit::destroyed(&tx, inv.now, Destroyed::Project(p), user_id).await?;
    }
    delete_source_rows(&tx, "Project", p).await?;
    tx.execute(sql::DELETE_PROJECT_AUTHORIZATIONS, &[&p])
        .await?;
    tx.execute(sql::DELETE_PROJECT_HOOKS, &[&p]).await?;
    tx.execute(sql::DELETE_PROJECT_ROUTES, &[&p, &project_namespace])
        .await?;
    // The rows GitLab deletes in the database before the project (saved replies,
    // compliance statuses): found in the catalog, so absent tables are no matter.
    blockers::delete_dependents(&tx, keys, Parent::Project, &[p]).await?;
    if let Some(ns) = project_namespace {
        blockers::delete_dependents(&tx, keys, Parent::Namespace, &[ns]).await?;
    }
    tx.execute(sql::DELETE_PROJECT, &[&p]).await?;
    if let Some(ns) = project_namespace {
        tx.execute(sql::DELETE_PROJECT_NAMESPACE, &[&ns]).await?;
    }
    intents.extend(hooks.claim(inv));
    outbox.extend(Intent::messages(intents, &env.run_id, inv.now));
    // Send-then-commit (behaviour §9.5).
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok((Chunk::Deleted(1), sent))
}

/// Chunk "group g" (behaviour §B51.4.4): g locked and still under the group being
/// destroyed, deleted with its orphan project namespaces when nothing else is below it.
pub(super) async fn group_chunk<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    msg: &GroupDestroyRun,
    recheck: Recheck,
    g: i64,
    keys: &[Key],
) -> Result<Chunk>
where
    C: GenericClient + Send + Sync,
{
    let user_id = msg.user_id;
    let tx = client.transaction().await?;
    if !still_scheduled(&tx, msg, recheck).await? {
        tx.commit().await?;
        return Ok(Chunk::Unscheduled);
    }
    let Some(row) = tx
        .query_opt(sql::LOCK_GROUP_UNDER, &[&g, &msg.group_id])
        .await?
    else {
        tx.commit().await?;
        return Ok(Chunk::Nothing);
    };
    if !row.get::<_, bool>(0) {
        tx.commit().await?;
        return Ok(Chunk::Left);
    }
    // Orphan project namespaces directly below g: GitLab never leaves one behind on
    // purpose, but one blocks the group's deletion (`namespaces.parent_id` restricts),
    // so the subtree takes it along with its route.
    let orphans = tx.query(sql::LOCK_ORPHANS, &[&g]).await?;
    let orphans: Vec<i64> = orphans.iter().map(|r| r.get(0)).collect();
    if !orphans.is_empty() {
        tx.execute(sql::DELETE_NAMESPACE_ROUTES, &[&orphans])
            .await?;
        blockers::delete_dependents(&tx, keys, Parent::Namespace, &orphans).await?;
        tx.execute(sql::DELETE_NAMESPACES, &[&orphans]).await?;
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
        .query(sql::LEFT_BELOW_GROUP, &[&g])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !left.is_empty() {
        tx.commit().await?;
        return Ok(Chunk::NotEmpty(left));
    }
    // The group's own uploads (avatar, files): left with `leave` (rows deleted, each
    // logged), otherwise they hold the group back.
    let uploads = storage::take_group_uploads(&tx, g, &inv.settings.storage).await?;
    if !uploads.blocked.is_empty() {
        tx.rollback().await?;
        return Ok(Chunk::NotEmpty(uploads.blocked));
    }
    if !uploads.left.is_empty() {
        let shown: Vec<String> = uploads.left.iter().take(10).map(|i| i.describe()).collect();
        tracing::warn!(
            group_id = msg.group_id,
            namespace_id = g,
            storage_items_left = uploads.left.len(),
            items = shown.join("; ").as_str(),
            "Group destroy left storage in place (STORAGE_*=leave, or files on local disk)"
        );
    }
    let mut intents = Vec::new();
    // What g's shares reached (groups shared with g, projects shared with g): the
    // links go with g, so every row on those projects is recomputed after it.
    let shared = authz::reached_from(&tx, &[g]).await?;
    let hooks = system_hooks::prepare(&tx, inv, Subject::Group(g)).await?;
    remove_bots(&tx, inv, user_id, "Namespace", g, &mut intents).await?;
    // GitLab destroys the group's members with their callbacks: their hooks first.
    let member_hooks = system_hooks::prepare(&tx, inv, Subject::MembershipsIn(g)).await?;
    if inv.settings.audit_events && g == msg.group_id {
        audit::destroyed(&tx, inv.now, Destroyed::Group(g), user_id).await?;
    }
    delete_source_rows(&tx, "Namespace", g).await?;
    intents.extend(member_hooks.claim(inv));
    tx.execute(sql::DELETE_GROUP_HOOKS, &[&g]).await?;
    tx.execute(sql::DELETE_GROUP_ROUTE, &[&g]).await?;
    tx.execute(sql::DELETE_GROUP_SCHEDULE, &[&g]).await?;
    blockers::delete_dependents(&tx, keys, Parent::Namespace, &[g]).await?;
    // FK effects: see `sql::DELETE_GROUP` (behaviour §S4).
    tx.execute(sql::DELETE_GROUP, &[&g]).await?;
    intents.extend(hooks.claim(inv));
    authz::refresh_projects(&tx, &shared).await?;
    let outbox: Vec<OutMessage> = Intent::messages(intents, &env.run_id, inv.now).collect();
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(Chunk::Deleted(1))
}
