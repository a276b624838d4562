//! `storage-cleanup` (issue 37, docs/storage-cleanup.md): removes one storage item of
//! a project `group-destroy` deletes — a Git repository through Gitaly, a container
//! repository through the registry (then its row), or an object from S3.
//!
//! Owns: the re-check before every removal (at-least-once delivery: the database says
//! whether the item is still to go) and the removal through the item's client,
//! idempotently (already gone = done). Nothing is removed unless the database is the
//! instance's the stack serves (`GITLAB_INSTANCE_UUID` = `application_settings.uuid`).
//! Every item is bound to its ids by the payload's decoder (hashed paths only); a
//! repository or object goes only once its project's row (and its snippet's) is gone
//! (the manifest is sent before `group-destroy` commits); a project still there waits
//! while its group is scheduled for deletion and is kept once the group is restored. An
//! LFS object goes only while no `lfs_objects` row has its oid again, a package file's
//! final path only while no row names it. A container repository goes while its row
//! exists, its project lies under the still scheduled group and its path recomputed from
//! the project's current route is the message's (all under lock, schedule and project
//! `FOR SHARE`); the registry is called outside any transaction, then the same re-check
//! runs again under lock and the row is deleted; a repository kept (restored, moved,
//! renamed) loses `group-destroy`'s mark. The images at a destroyed project's root
//! registry path that have no row (GitLab's legacy root repository) go once the
//! project's row is gone and no live project's route has that path, re-checked before
//! and after the registry calls, which run outside any transaction. A failure is re-sent with a growing delay
//! ([`BACKOFF_S`]), then the record fails and reaches the DLQ with the item named. The
//! `done` result is [`StorageCleanupDone`].

use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::config::storage::{Bucket, StorageKind};
use crate::error::{Error, Result};
use crate::function::Function;
use crate::gitlab::deletion_model;
use crate::gitlab::group_deletion;
use crate::gitlab::storage;
use crate::gitlab::storage::StorageItem;
use crate::job::{FromConfig, Job, Step};
use crate::messages::Envelope;
use crate::metrics::{self, Metric};
use crate::retry_transient;
use crate::runtime::{Done, Invocation, Status};
use crate::storage::{Removal, Storage};

pub mod payload;

pub use payload::{is_contained_path, storage_cleanup_key, StorageCleanupRun};

/// The delays of the re-sends after a failed removal, by hop (`storage-cleanup`'s row
/// in the function table; `job::drive` sends them): past the last, the record fails
/// and SQS's redrive takes it to the DLQ.
pub const BACKOFF_S: &[u32] = Function::StorageCleanup.backoff_s();

/// How one message ended: the `outcome` field of `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The item existed and was removed.
    Removed,
    /// The item was already gone.
    AlreadyGone,
    /// Dry run: the item would be removed.
    WouldRemove,
    /// The project still exists and its group is scheduled: retried later.
    ProjectPresent,
    /// The project still exists and its group is no longer scheduled: kept.
    Kept,
    /// A live row refers to the object again (an LFS object with this oid, a package
    /// file with this final path, a live project's route at a root registry path): kept.
    Reused,
    /// The container repository's path is no longer the message's (renamed or moved):
    /// kept, its mark undone; `group-destroy` sends the current path.
    Moved,
    /// The removal failed: re-sent later, or failed for the DLQ.
    Failed,
}

/// The `done` result of one item.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StorageCleanupDone {
    /// The group being destroyed.
    pub group_id: i64,
    /// The item's project.
    pub project_id: i64,
    /// The item's kind.
    pub kind: StorageKind,
    /// How it ended.
    pub outcome: Outcome,
    /// Registry: manifests deleted.
    #[serde(skip_serializing_if = "is_zero")]
    pub manifests_deleted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Done for StorageCleanupDone {
    fn status(&self) -> Status {
        match self.outcome {
            Outcome::Removed | Outcome::AlreadyGone | Outcome::WouldRemove => Status::Completed,
            Outcome::Kept | Outcome::Reused | Outcome::Moved => Status::Stale,
            Outcome::ProjectPresent => Status::LimitReached,
            Outcome::Failed => Status::Failed,
        }
    }

    fn metrics(&self) -> Vec<(Metric, f64)> {
        let [removed, gone, failed] = match self.kind {
            StorageKind::Gitaly => [
                metrics::GITALY_REMOVED,
                metrics::GITALY_ALREADY_GONE,
                metrics::GITALY_FAILED,
            ],
            StorageKind::Registry => [
                metrics::REGISTRY_REMOVED,
                metrics::REGISTRY_ALREADY_GONE,
                metrics::REGISTRY_FAILED,
            ],
            StorageKind::Objects => [
                metrics::OBJECTS_REMOVED,
                metrics::OBJECTS_ALREADY_GONE,
                metrics::OBJECTS_FAILED,
            ],
        };
        let one = |o: Outcome| if self.outcome == o { 1.0 } else { 0.0 };
        vec![
            (removed, one(Outcome::Removed)),
            (gone, one(Outcome::AlreadyGone)),
            (failed, one(Outcome::Failed)),
        ]
    }
}

/// Whether the group `p` belongs to is still scheduled for deletion.
async fn group_scheduled<C: GenericClient>(c: &C, group_id: i64) -> Result<bool> {
    let model = deletion_model::probe(c).await?;
    Ok(group_deletion::schedule_of(c, model, group_id)
        .await?
        .is_some())
}

/// The re-check of a repository or an object: `None` when it may go.
async fn recheck<C: GenericClient>(c: &C, p: &StorageCleanupRun) -> Result<Option<Outcome>> {
    let snippet = match &p.item {
        StorageItem::Repository {
            snippet_id: Some(s),
            ..
        } => storage::snippet_exists(c, *s).await?,
        _ => false,
    };
    if snippet || storage::project_exists(c, p.project_id).await? {
        return Ok(Some(if group_scheduled(c, p.group_id).await? {
            Outcome::ProjectPresent
        } else {
            Outcome::Kept
        }));
    }
    let reused = match &p.item {
        StorageItem::Object {
            bucket: Bucket::Lfs,
            key,
        } => storage::lfs_oid_exists(c, &storage::lfs_oid(key)).await?,
        StorageItem::Object {
            bucket: Bucket::Packages,
            key,
        } => storage::final_path_in_use(c, key).await?,
        _ => false,
    };
    Ok(reused.then_some(Outcome::Reused))
}

/// The re-check of the images at a project's root registry path (no row), in one
/// transaction: `None` when they may go — the project's row is gone (else waiting or
/// kept, as for a repository) and no live project's route has the path (locked `FOR
/// SHARE`; a new or renamed project there keeps its images: `Reused`).
async fn recheck_root<C>(
    client_db: &mut C,
    p: &StorageCleanupRun,
    path: &str,
) -> Result<Option<Outcome>>
where
    C: GenericClient + Send + Sync,
{
    let tx = client_db.transaction().await?;
    let mut found = recheck(&tx, p).await?;
    if found.is_none() && storage::live_project_at(&tx, path).await? {
        found = Some(Outcome::Reused);
    }
    tx.commit().await?;
    Ok(found)
}

/// Refuse to remove anything unless this database is the instance's the stack serves:
/// `GITLAB_INSTANCE_UUID` must be `application_settings.uuid` (a staging copy of
/// production's database with production's storage endpoints must not remove
/// production's storage). A dry run without the variable is let through: it calls
/// nothing.
async fn same_instance<C: GenericClient>(c: &C, s: &Storage) -> Result<()> {
    use crate::config::storage::INSTANCE_UUID_VAR;
    let Some(want) = s.instance_uuid.as_deref() else {
        if s.dry_run {
            return Ok(());
        }
        return Err(Error::Config(format!(
            "storage-cleanup has no {INSTANCE_UUID_VAR}: set it to the instance's application_settings.uuid (the item is kept for a replay)"
        )));
    };
    let have = storage::instance_uuid(c).await?;
    if have.as_deref() == Some(want) {
        return Ok(());
    }
    Err(Error::Config(format!(
        "{INSTANCE_UUID_VAR} is {want} but this database's application_settings.uuid is {}: storage removal refused (a copy of another instance's database?); the item is kept for a replay",
        have.as_deref().unwrap_or("not set")
    )))
}

/// The re-check of container repository `id` at `path` under its locks, in the open
/// transaction `tx`: the instance ([`same_instance`]) and the deletion-state model in
/// one flight (issue 52), then the group's schedule `FOR SHARE`, then the project, its
/// routes and the row (`gitlab::storage::lock_registry_item`). A repository kept loses
/// its mark.
async fn lock_registry<C: GenericClient>(
    tx: &C,
    s: &Storage,
    p: &StorageCleanupRun,
    id: i64,
    path: &str,
) -> Result<storage::RegistryItem> {
    let (same, model) = futures::join!(same_instance(tx, s), deletion_model::probe(tx));
    same?;
    let model = model?;
    let scheduled = group_deletion::locked_schedule(
        tx,
        model,
        p.group_id,
        group_deletion::sql::scheduled_at::SHARE_DETAILS_SCHEDULE,
        group_deletion::sql::SHARE_SCHEDULE,
    )
    .await?
    .is_some();
    let found =
        storage::lock_registry_item(tx, scheduled, p.group_id, p.project_id, id, path).await?;
    if matches!(
        found,
        storage::RegistryItem::Kept | storage::RegistryItem::Moved { .. }
    ) {
        storage::unmark_container_repository(tx, id).await?;
    }
    Ok(found)
}

/// What a registry re-check that does not let the item go means.
fn registry_kept(p: &StorageCleanupRun, found: &storage::RegistryItem, after: bool) -> Outcome {
    let when = if after {
        "after the registry calls (its images are removed, the row is kept)"
    } else {
        "(nothing removed)"
    };
    match found {
        storage::RegistryItem::Moved { current } => {
            tracing::warn!(
                group_id = p.group_id,
                project_id = p.project_id,
                current_path = current.as_str(),
                "Storage cleanup refused: the container repository's path is no longer the message's {}",
                when
            );
            Outcome::Moved
        }
        _ => {
            if after {
                tracing::warn!(
                    group_id = p.group_id,
                    project_id = p.project_id,
                    "Storage cleanup: the group was restored or the project left it {}",
                    when
                );
            }
            Outcome::Kept
        }
    }
}

fn client<'a, T>(c: Option<&'a T>, var: &str) -> Result<&'a T> {
    c.ok_or_else(|| {
        Error::Config(format!(
            "storage-cleanup received an item of a kind that is not on: set {var}=on (the item is kept for a replay)"
        ))
    })
}

/// Remove `p`'s item; the outcome and registry manifests deleted.
async fn remove<C>(client_db: &mut C, s: &Storage, p: &StorageCleanupRun) -> Result<(Outcome, u64)>
where
    C: GenericClient + Send + Sync,
{
    let done = |r: Removal| match r {
        Removal::Removed => Outcome::Removed,
        Removal::AlreadyGone => Outcome::AlreadyGone,
    };
    use storage::RegistryItem;
    if !matches!(p.item, StorageItem::ContainerRepository { .. }) {
        // A container repository's is read in its first transaction's first flight.
        same_instance(&*client_db, s).await?;
    }
    match &p.item {
        StorageItem::ContainerRepository { id, path } => {
            let tx = client_db.transaction().await?;
            let found = lock_registry(&tx, s, p, *id, path).await?;
            if found != RegistryItem::Go {
                tx.commit().await?;
                return Ok(match found {
                    RegistryItem::Gone => (Outcome::AlreadyGone, 0),
                    other => (registry_kept(p, &other, false), 0),
                });
            }
            if s.dry_run {
                // The row goes as it would after the registry (a dry run is rolled
                // back), so the plan goes on to the project's deletion.
                storage::delete_container_repository(&tx, *id).await?;
                tx.commit().await?;
                return Ok((Outcome::WouldRemove, 0));
            }
            tx.commit().await?;
            // The registry outside any transaction (a repository with many tags takes
            // longer than the idle-in-transaction limit), then the same re-check under
            // lock before the row goes.
            let registry = client(s.registry.as_ref(), "STORAGE_REGISTRY")?;
            let r = registry
                .delete_repository(path, s.token_clock.now())
                .await?;
            let tx = client_db.transaction().await?;
            let found = lock_registry(&tx, s, p, *id, path).await?;
            let outcome = match &found {
                RegistryItem::Go => {
                    storage::delete_container_repository(&tx, *id).await?;
                    done(r.removal)
                }
                RegistryItem::Gone => done(r.removal),
                other => registry_kept(p, other, true),
            };
            tx.commit().await?;
            Ok((outcome, r.manifests_deleted))
        }
        StorageItem::RegistryRoot { path } => {
            if let Some(o) = recheck_root(client_db, p, path).await? {
                return Ok((o, 0));
            }
            if s.dry_run {
                return Ok((Outcome::WouldRemove, 0));
            }
            // The registry outside any transaction, then the same re-check.
            let registry = client(s.registry.as_ref(), "STORAGE_REGISTRY")?;
            let r = registry
                .delete_repository(path, s.token_clock.now())
                .await?;
            if let Some(o) = recheck_root(client_db, p, path).await? {
                tracing::warn!(
                    group_id = p.group_id,
                    project_id = p.project_id,
                    path = path.as_str(),
                    manifests_deleted = r.manifests_deleted,
                    "Storage cleanup: a live project took the root registry path during the registry calls (the images there when they began are removed)"
                );
                return Ok((o, r.manifests_deleted));
            }
            Ok((done(r.removal), r.manifests_deleted))
        }
        StorageItem::Repository {
            storage: name,
            relative_path,
            ..
        } => {
            if let Some(o) = recheck(&*client_db, p).await? {
                return Ok((o, 0));
            }
            if s.dry_run {
                return Ok((Outcome::WouldRemove, 0));
            }
            let gitaly = client(s.gitaly.as_ref(), "STORAGE_GITALY")?;
            let r = gitaly
                .remove_repository(name, relative_path, s.token_clock.now())
                .await?;
            Ok((done(r), 0))
        }
        StorageItem::Object { bucket, key } => {
            if let Some(o) = recheck(&*client_db, p).await? {
                return Ok((o, 0));
            }
            if s.dry_run {
                return Ok((Outcome::WouldRemove, 0));
            }
            let objects = client(s.objects.as_ref(), "STORAGE_OBJECTS")?;
            Ok((done(objects.delete(*bucket, key).await?), 0))
        }
    }
}

/// The `storage-cleanup` job: one item per message, never continued except to retry.
#[derive(Debug, Clone, Copy, Default)]
pub struct StorageCleanup;

impl Job for StorageCleanup {
    const FUNCTION: Function = Function::StorageCleanup;
    type Payload = StorageCleanupRun;
    type Outcome = StorageCleanupDone;

    /// The clients of the storage kinds that are on.
    type Deps = Storage;

    async fn run<C>(
        inv: &Invocation<'_>,
        s: &Storage,
        client: &mut C,
        env: &Envelope,
        p: StorageCleanupRun,
    ) -> Result<Step<StorageCleanupDone, StorageCleanupRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let item = p.item.describe();
        let report = |outcome: Outcome, manifests_deleted: u64| StorageCleanupDone {
            group_id: p.group_id,
            project_id: p.project_id,
            kind: p.item.kind(),
            outcome,
            manifests_deleted,
        };
        let backoff = |outcome: Outcome, error: Error| Step::Backoff {
            outcome: report(outcome, 0),
            error,
        };
        match retry_transient!(remove(client, s, &p).await) {
            Ok((Outcome::ProjectPresent, _)) => {
                tracing::info!(
                    group_id = p.group_id,
                    project_id = p.project_id,
                    item = item.as_str(),
                    "Storage cleanup waiting: the project's rows are not deleted yet"
                );
                Ok(backoff(
                    Outcome::ProjectPresent,
                    Error::Retryable(format!(
                        "project {} still exists; item {item} kept for a replay",
                        p.project_id
                    )),
                ))
            }
            Ok((outcome, manifests)) => {
                match outcome {
                    Outcome::Kept => tracing::warn!(
                        group_id = p.group_id,
                        project_id = p.project_id,
                        item = item.as_str(),
                        "Storage cleanup skipped: the group is no longer scheduled for deletion"
                    ),
                    Outcome::Reused => tracing::warn!(
                        project_id = p.project_id,
                        item = item.as_str(),
                        "Storage cleanup skipped: a live row refers to this object again"
                    ),
                    Outcome::Moved => {}
                    Outcome::WouldRemove => tracing::info!(
                        project_id = p.project_id,
                        item = item.as_str(),
                        "Storage not removed: dry run"
                    ),
                    o => {
                        inv.decide(
                            "storage",
                            p.project_id,
                            if o == Outcome::Removed {
                                "removed"
                            } else {
                                "already_gone"
                            },
                            p.item.kind().as_str(),
                        );
                        tracing::info!(
                            project_id = p.project_id,
                            item = item.as_str(),
                            manifests_deleted = manifests,
                            result = if o == Outcome::Removed {
                                "removed"
                            } else {
                                "already_gone"
                            },
                            "Storage removed"
                        )
                    }
                }
                Ok(Step::Done(report(outcome, manifests)))
            }
            Err(e @ (Error::Storage { .. } | Error::Config(_))) => {
                tracing::error!(
                    group_id = p.group_id,
                    project_id = p.project_id,
                    item = item.as_str(),
                    error = %e,
                    error_class = e.class(),
                    hop = env.hop,
                    "Storage cleanup failed"
                );
                Ok(backoff(Outcome::Failed, e))
            }
            Err(e) => Err(e),
        }
    }
}

/// `storage-cleanup` needs the clients of the storage kinds that are on (secrets
/// behind ARNs read through `aws`).
impl FromConfig for Storage {
    async fn build(cfg: &crate::config::Config, aws: &aws_config::SdkConfig) -> Result<Storage> {
        Storage::build(&cfg.settings.storage, &cfg.storage, aws).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backoff_delay_grows_within_an_sqs_delay() {
        assert!(BACKOFF_S.windows(2).all(|w| w[0] < w[1]));
        assert!(
            BACKOFF_S.iter().all(|&d| d <= 900),
            "SQS delays, no schedule"
        );
    }
}
