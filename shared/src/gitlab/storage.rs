//! Where a project's storage lives outside the database, GitLab's way (issue 37,
//! docs/storage-cleanup.md): its Git repositories on a Gitaly storage (hashed paths:
//! project, wiki, design, snippets), its container repositories in the registry, and
//! its files in object storage (uploads, LFS objects no other project links, package
//! files).
//!
//! Owns: what a group's tree holds of each kind ([`tree_counts`]) and whether the
//! configured modes let a destroy start ([`blocking`]); a project's container
//! repositories, the mark `group-destroy` leaves on them (`delete_started_at` alone:
//! GitLab's `ContainerRegistry::CleanupWorker` acts on `status`, never set here) and
//! their re-check under lock ([`lock_registry_item`]: the path recomputed from the
//! project's current route, the project still under the scheduled group); a project's
//! root registry path (the legacy root repository GitLab removes without a row) and
//! whether a live project's route has it; a project's repository storage moves in
//! progress; [`take_manifest`], which reads a project's
//! storage items and deletes the rows no foreign key removes with the project (LFS
//! links and unlinked LFS objects, uploads), and [`take_group_uploads`] for a group's
//! own uploads; and the instance's identity (`application_settings.uuid`). Runs inside
//! the caller's transaction and never commits. The items themselves, GitLab's hashed
//! paths and the shape each item must have are in [`item`].

use chrono::{DateTime, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::config::storage::{Bucket, Mode, StorageModes};
use crate::error::Result;
use crate::gitlab::deletion_model;

pub mod item;
pub mod sql;

use item::bound_rule;
pub use item::StorageItem;

/// What a group's projects hold of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStorage {
    /// Git repositories (project, and snippets'), as GitLab records them.
    pub repositories: i64,
    /// Files in object storage.
    pub remote_files: i64,
    /// Files on the local disk of GitLab's nodes (`store`/`file_store` 1).
    pub local_files: i64,
    /// Uploads of the groups themselves and uploads beside the projects (group avatars
    /// and files, design thumbnails, import/export files: any model but `Project`),
    /// which `storage-cleanup` does not remove.
    pub other_uploads: i64,
}

/// What `projects` and the `namespaces` of a tree hold of each kind.
pub async fn tree_counts<C: GenericClient>(
    c: &C,
    projects: &[i64],
    namespaces: &[i64],
) -> Result<TreeStorage> {
    let r = c
        .query_one(sql::TREE_COUNTS, &[&projects, &namespaces])
        .await?;
    Ok(TreeStorage {
        repositories: r.get(0),
        remote_files: r.get(1),
        local_files: r.get(2),
        other_uploads: r.get(3),
    })
}

/// The storage `modes` do not let a destroy remove or leave: one line per kind, with
/// the operator's choice. Container repositories with the registry off are the
/// blocking keys' (`gitlab::blockers`), not listed here.
pub fn blocking(modes: &StorageModes, t: &TreeStorage) -> Vec<String> {
    let mut out = Vec::new();
    if modes.gitaly == Mode::Off && t.repositories > 0 {
        out.push(format!(
            "{} Git repositories (STORAGE_GITALY=off): set STORAGE_GITALY=on to remove them through Gitaly, or leave to keep them on the storage",
            t.repositories
        ));
    }
    let files = t.remote_files + t.local_files + t.other_uploads;
    if modes.objects == Mode::On && t.other_uploads > 0 {
        out.push(format!(
            "{} uploads of the groups or beside their projects (group avatars and files, design thumbnails, import/export files), which storage-cleanup does not remove: set STORAGE_OBJECTS=leave to delete their rows and keep the files (each logged), or remove them in GitLab first",
            t.other_uploads
        ));
    }
    if modes.objects == Mode::Off && files > 0 {
        out.push(format!(
            "{files} files (STORAGE_OBJECTS=off): set STORAGE_OBJECTS=on to remove them from object storage, or leave to keep them"
        ));
    } else if modes.objects == Mode::On && t.local_files > 0 {
        out.push(format!(
            "{} files on the local disk of GitLab's nodes, which storage-cleanup cannot reach: migrate them to object storage (gitlab-rake gitlab:uploads:migrate:all, gitlab:lfs:migrate, gitlab:packages:migrate), or set STORAGE_OBJECTS=leave",
            t.local_files
        ));
    }
    out
}

/// One container repository of a project.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRepository {
    /// `container_repositories.id`.
    pub id: i64,
    /// Its registry path.
    pub path: String,
    /// When its deletion was last asked for.
    pub delete_started_at: Option<DateTime<Utc>>,
}

/// Project `p`'s container repositories, ascending ids.
pub async fn container_repositories<C: GenericClient>(
    c: &C,
    p: i64,
) -> Result<Vec<ContainerRepository>> {
    Ok(c.query(sql::CONTAINER_REPOSITORIES, &[&p])
        .await?
        .iter()
        .map(|r| ContainerRepository {
            id: r.get(0),
            path: r.get(1),
            delete_started_at: r.get(2),
        })
        .collect())
}

/// Mark `ids` as sent to `storage-cleanup` at `now`: `delete_started_at` only, on rows
/// without a `status` (GitLab's own deletion state is never set nor touched).
pub async fn mark_container_repositories<C: GenericClient>(
    c: &C,
    ids: &[i64],
    now: DateTime<Utc>,
) -> Result<()> {
    c.execute(sql::MARK_CONTAINER_REPOSITORIES, &[&ids, &now])
        .await?;
    Ok(())
}

/// Undo the mark of container repository `id` (kept: restored, moved or renamed).
pub async fn unmark_container_repository<C: GenericClient>(c: &C, id: i64) -> Result<()> {
    c.execute(sql::UNMARK_CONTAINER_REPOSITORY, &[&id]).await?;
    Ok(())
}

/// Whether project `p` has a repository storage move scheduled or started (GitLab's
/// `Projects::DestroyService` refuses to destroy it then).
pub async fn storage_move_in_progress<C: GenericClient>(c: &C, p: i64) -> Result<bool> {
    Ok(c.query_one(sql::STORAGE_MOVE_IN_PROGRESS, &[&p])
        .await?
        .get(0))
}

/// What the re-check of a container repository found under its locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryItem {
    /// The row is gone (removed, or never this project's).
    Gone,
    /// The group is no longer scheduled, or the project left it: keep.
    Kept,
    /// The repository's path is no longer the message's (rename or transfer): keep.
    Moved {
        /// The path the database gives it now.
        current: String,
    },
    /// Locked, under the scheduled group, at the message's path: it may go.
    Go,
}

/// Lock container repository `id` of project `project` and what its removal depends
/// on, in the chunks' order: the group's schedule (`schedule`: the caller's locked
/// read, `FOR SHARE`), then the project and its namespace `FOR SHARE` (a transfer
/// updates one of them), its routes `FOR SHARE` (a rename updates them), then the row
/// `FOR UPDATE`. `Go` only when the schedule holds, the project lies under `group`,
/// and the path recomputed from the current route is `path`.
pub async fn lock_registry_item<C: GenericClient>(
    c: &C,
    scheduled: bool,
    group: i64,
    project: i64,
    id: i64,
    path: &str,
) -> Result<RegistryItem> {
    if !scheduled {
        return Ok(
            match c
                .query_typed_opt(
                    sql::LOCK_CONTAINER_REPOSITORY,
                    &[(&id, Type::INT8), (&project, Type::INT8)],
                )
                .await?
            {
                None => RegistryItem::Gone,
                Some(_) => RegistryItem::Kept,
            },
        );
    }
    let under = c
        .query_opt(sql::SHARE_PROJECT_UNDER, &[&project, &group])
        .await?
        .is_some_and(|r| r.get::<_, bool>(0));
    let base: Option<String> = match c.query_opt(sql::SHARE_PROJECT_ROUTE, &[&project]).await? {
        Some(r) => Some(r.get(0)),
        None => c
            .query_opt(sql::SHARE_NAMESPACE_ROUTE, &[&project])
            .await?
            .map(|r| r.get(0)),
    };
    let Some(row) = c
        .query_opt(sql::LOCK_CONTAINER_REPOSITORY, &[&id, &project])
        .await?
    else {
        return Ok(RegistryItem::Gone);
    };
    if !under {
        return Ok(RegistryItem::Kept);
    }
    let name: String = row.get(1);
    let current = registry_path(base.as_deref().unwrap_or_default(), &name);
    Ok(if current == path {
        RegistryItem::Go
    } else {
        RegistryItem::Moved { current }
    })
}

/// Project `p`'s root registry path (its full path, lower case), `None` when the
/// project is gone.
pub async fn root_registry_path<C: GenericClient>(c: &C, p: i64) -> Result<Option<String>> {
    Ok(c.query_opt(sql::ROOT_REGISTRY_PATH, &[&p])
        .await?
        .and_then(|r| r.get(0)))
}

/// Whether a live project's route has full path `path` (lower case), locking those
/// routes `FOR SHARE` in the caller's transaction.
pub async fn live_project_at<C: GenericClient>(c: &C, path: &str) -> Result<bool> {
    Ok(!c
        .query(sql::SHARE_PROJECT_ROUTES_AT, &[&path])
        .await?
        .is_empty())
}

/// A container repository's registry path, GitLab's way: the project's full path, then
/// `/<name>` when it has one, lower case (`ContainerRegistry::Path`).
pub fn registry_path(project_full_path: &str, name: &str) -> String {
    let p = if name.is_empty() {
        project_full_path.to_string()
    } else {
        format!("{project_full_path}/{name}")
    };
    p.to_lowercase()
}

/// The instance's identity, `application_settings.uuid` (`None` without a row or a uuid).
pub async fn instance_uuid<C: GenericClient>(c: &C) -> Result<Option<String>> {
    Ok(c.query_typed_opt(sql::INSTANCE_UUID, &[])
        .await?
        .and_then(|r| r.get(0)))
}

/// A project's storage items, by what happens to them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// Sent to `storage-cleanup` (their kind is `on`).
    pub remove: Vec<StorageItem>,
    /// Left where they are (their kind is `leave`, or a local file).
    pub left: Vec<StorageItem>,
    /// Kinds `off` that hold items: the chunk must not delete the project.
    pub blocked: Vec<String>,
}

/// Read project `p`'s storage items (with the registry on, its root registry path
/// too) and delete the rows no foreign key removes with the project: its LFS links, the LFS objects no other project links (locked first),
/// and its upload rows. With `blocked` non-empty the caller must roll back.
pub async fn take_manifest<C: GenericClient>(
    c: &C,
    p: i64,
    modes: &StorageModes,
) -> Result<Manifest> {
    let mut m = Manifest::default();
    let place = |m: &mut Manifest, item: StorageItem, local: bool| {
        match (modes.of(item.kind()), local) {
            (Mode::On, false) if bound_rule(&item, p).is_err() => m.blocked.push(format!(
                "{} of project {p}, not at the hashed path GitLab gives it (legacy storage: migrate the project to hashed storage, or set {}=leave)",
                item.describe(),
                StorageModes::variable(item.kind())
            )),
            (Mode::On, false) => m.remove.push(item),
            (Mode::Off, _) => {
                let kind = item.kind();
                let line = format!(
                    "{} storage of project {p} ({}=off)",
                    kind.as_str(),
                    StorageModes::variable(kind)
                );
                if !m.blocked.contains(&line) {
                    m.blocked.push(line);
                }
            }
            _ => m.left.push(item),
        }
    };
    for r in c.query(sql::REPOSITORIES, &[&p]).await? {
        let item = StorageItem::Repository {
            storage: r.get(0),
            relative_path: r.get(1),
            snippet_id: r.get(2),
        };
        place(&mut m, item, false);
    }
    for r in c.query(sql::OBJECTS, &[&p]).await? {
        let bucket = match r.get::<_, String>(0).as_str() {
            "uploads" => Bucket::Uploads,
            _ => Bucket::Packages,
        };
        let item = StorageItem::Object {
            bucket,
            key: r.get(1),
        };
        place(&mut m, item, !r.get::<_, bool>(2));
    }
    // From GitLab 19.3 a link may name its object by oid alone: another project's
    // such link keeps the object too.
    let only = if deletion_model::has_column(c, "lfs_objects_projects", "oid").await? {
        sql::oid_links::LFS_ONLY_OF_PROJECT_BY_OID
    } else {
        sql::LFS_ONLY_OF_PROJECT
    };
    let lfs = c.query(only, &[&p]).await?;
    let mut lfs_ids = Vec::new();
    for r in &lfs {
        lfs_ids.push(r.get::<_, i64>(0));
        let oid: String = r.get(1);
        let item = StorageItem::Object {
            bucket: Bucket::Lfs,
            key: lfs_key(&oid),
        };
        place(&mut m, item, !r.get::<_, bool>(2));
    }
    // The images at the project's root path without a row (GitLab's legacy root
    // repository, which `Projects::DestroyService#remove_legacy_registry_tags`
    // removes): with the registry on, one item for the path the route gives now.
    // (Off: they stay, as before; no row blocks on them.)
    if modes.registry == Mode::On {
        if let Some(path) = root_registry_path(c, p).await? {
            let item = StorageItem::RegistryRoot { path };
            if bound_rule(&item, p).is_ok() {
                m.remove.push(item);
            } else {
                m.left.push(item);
            }
        }
    }
    // Uploads beside the project (design thumbnails, import/export files): never
    // removed here; left (and their rows deleted) only with `leave`.
    for r in c.query(sql::OTHER_UPLOADS_OF_PROJECT, &[&p]).await? {
        other_upload(&mut m, modes, format!("project {p}"), r.get(0));
    }
    if !m.blocked.is_empty() {
        return Ok(m);
    }
    c.execute(sql::DELETE_OTHER_UPLOADS_OF_PROJECT, &[&p])
        .await?;
    c.execute(sql::DELETE_LFS_LINKS, &[&p]).await?;
    if !lfs_ids.is_empty() {
        c.execute(sql::DELETE_LFS_OBJECTS, &[&lfs_ids]).await?;
    }
    c.execute(sql::DELETE_UPLOADS, &[&p]).await?;
    Ok(m)
}

/// An upload of a model other than `Project` (`path` as recorded): left with `leave`,
/// blocking otherwise.
fn other_upload(m: &mut Manifest, modes: &StorageModes, owner: String, path: String) {
    let item = StorageItem::Object {
        bucket: Bucket::Uploads,
        key: path,
    };
    if modes.objects == Mode::Leave {
        m.left.push(item);
    } else {
        let line = format!(
            "uploads of {owner} that storage-cleanup does not remove (STORAGE_OBJECTS={}): set STORAGE_OBJECTS=leave, or remove them in GitLab first",
            modes.objects.as_str()
        );
        if !m.blocked.contains(&line) {
            m.blocked.push(line);
        }
    }
}

/// Group `g`'s own uploads (avatar, group files): with `leave` their rows are deleted
/// and the items returned as left; otherwise `blocked` names them and nothing changes.
pub async fn take_group_uploads<C: GenericClient>(
    c: &C,
    g: i64,
    modes: &StorageModes,
) -> Result<Manifest> {
    let mut m = Manifest::default();
    for r in c.query(sql::UPLOADS_OF_GROUP, &[&g]).await? {
        other_upload(&mut m, modes, format!("group {g}"), r.get(0));
    }
    if m.blocked.is_empty() && !m.left.is_empty() {
        c.execute(sql::DELETE_UPLOADS_OF_GROUP, &[&g]).await?;
    }
    Ok(m)
}

/// GitLab's object key of LFS object `oid`: `<oid[0..2]>/<oid[2..4]>/<oid[4..]>`.
pub fn lfs_key(oid: &str) -> String {
    if oid.len() < 5 || !oid.is_ascii() {
        return oid.to_string();
    }
    format!("{}/{}/{}", &oid[..2], &oid[2..4], &oid[4..])
}

/// The oid of LFS key `key` (the inverse of [`lfs_key`]).
pub fn lfs_oid(key: &str) -> String {
    key.replace('/', "")
}

/// Whether project `p` still exists.
pub async fn project_exists<C: GenericClient>(c: &C, p: i64) -> Result<bool> {
    Ok(c.query_one(sql::PROJECT_EXISTS, &[&p]).await?.get(0))
}

/// Whether an LFS object `oid` exists (linked again or uploaded again since).
pub async fn lfs_oid_exists<C: GenericClient>(c: &C, oid: &str) -> Result<bool> {
    Ok(c.query_one(sql::LFS_OID_EXISTS, &[&oid]).await?.get(0))
}

/// Whether snippet `s` still exists.
pub async fn snippet_exists<C: GenericClient>(c: &C, s: i64) -> Result<bool> {
    Ok(c.query_one(sql::SNIPPET_EXISTS, &[&s]).await?.get(0))
}

/// Whether a package file row names `key` as its direct upload's final path.
pub async fn final_path_in_use<C: GenericClient>(c: &C, key: &str) -> Result<bool> {
    Ok(c.query_one(sql::FINAL_PATH_IN_USE, &[&key]).await?.get(0))
}

/// Delete container repository `id`'s row.
pub async fn delete_container_repository<C: GenericClient>(c: &C, id: i64) -> Result<()> {
    c.execute(sql::DELETE_CONTAINER_REPOSITORY, &[&id]).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfs_keys_split_the_oid_as_gitlab_does() {
        let oid = "b5bb9d8014a0f9b1d61e21e796d78dccdf1352f23cd32812f4850b878ae4944c";
        let key = lfs_key(oid);
        assert_eq!(key, format!("b5/bb/{}", &oid[4..]));
        assert_eq!(lfs_oid(&key), oid);
    }

    #[test]
    fn modes_block_what_they_cannot_remove_or_leave() {
        let t = TreeStorage {
            repositories: 3,
            remote_files: 2,
            local_files: 1,
            other_uploads: 0,
        };
        assert_eq!(blocking(&StorageModes::default(), &t).len(), 2);
        let on = StorageModes::ALL_ON;
        let lines = blocking(&on, &t);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].contains("local disk"), "{lines:?}");
        let leave = StorageModes {
            gitaly: Mode::Leave,
            registry: Mode::On,
            objects: Mode::Leave,
        };
        assert!(blocking(&leave, &t).is_empty());
        let avatar = TreeStorage {
            other_uploads: 1,
            ..TreeStorage::default()
        };
        assert_eq!(blocking(&StorageModes::default(), &avatar).len(), 1);
        assert!(blocking(&on, &avatar)[0].contains("group avatars"));
        assert!(blocking(&leave, &avatar).is_empty());
    }

    #[test]
    fn registry_paths_are_the_full_path_and_name_in_lower_case() {
        assert_eq!(registry_path("Acme/Web", "App"), "acme/web/app");
        assert_eq!(registry_path("acme/web", ""), "acme/web");
    }
}
