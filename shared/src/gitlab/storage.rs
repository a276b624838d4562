//! Where a project's storage lives outside the database, GitLab's way (issue 37,
//! docs/storage-cleanup.md): its Git repositories on a Gitaly storage (hashed paths:
//! project, wiki, design, snippets), its container repositories in the registry, and
//! its files in object storage (uploads, LFS objects no other project links, package
//! files).
//!
//! Owns: what a group's tree holds of each kind ([`tree_counts`]) and whether the
//! configured modes let a destroy start ([`blocking`]); a project's container
//! repositories and their delete-scheduled mark; and [`take_manifest`], which reads a
//! project's storage items and deletes the rows no foreign key removes with the project
//! (LFS links and unlinked LFS objects, uploads). Runs inside the caller's transaction
//! and never commits.

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use crate::config::storage::{Mode, StorageModes};
use crate::error::Result;
use crate::messages::{Bucket, StorageItem};

pub mod sql;

/// What a group's projects hold of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeStorage {
    /// Git repositories (project, and snippets'), as GitLab records them.
    pub repositories: i64,
    /// Files in object storage.
    pub remote_files: i64,
    /// Files on the local disk of GitLab's nodes (`store`/`file_store` 1).
    pub local_files: i64,
}

/// What `projects` hold of each kind.
pub async fn tree_counts<C: GenericClient>(c: &C, projects: &[i64]) -> Result<TreeStorage> {
    if projects.is_empty() {
        return Ok(TreeStorage::default());
    }
    let r = c.query_one(sql::TREE_COUNTS, &[&projects]).await?;
    Ok(TreeStorage {
        repositories: r.get(0),
        remote_files: r.get(1),
        local_files: r.get(2),
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
    let files = t.remote_files + t.local_files;
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

/// Mark `ids` delete-scheduled at `now`.
pub async fn mark_container_repositories<C: GenericClient>(
    c: &C,
    ids: &[i64],
    now: DateTime<Utc>,
) -> Result<()> {
    c.execute(sql::MARK_CONTAINER_REPOSITORIES, &[&ids, &now])
        .await?;
    Ok(())
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

/// Read project `p`'s storage items and delete the rows no foreign key removes with
/// the project: its LFS links, the LFS objects no other project links (locked first),
/// and its upload rows. With `blocked` non-empty the caller must roll back.
pub async fn take_manifest<C: GenericClient>(
    c: &C,
    p: i64,
    modes: &StorageModes,
) -> Result<Manifest> {
    let mut m = Manifest::default();
    let place =
        |m: &mut Manifest, item: StorageItem, local: bool| match (modes.of(item.kind()), local) {
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
        };
    for r in c.query(sql::REPOSITORIES, &[&p]).await? {
        let item = StorageItem::Repository {
            storage: r.get(0),
            relative_path: r.get(1),
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
    let lfs = c.query(sql::LFS_ONLY_OF_PROJECT, &[&p]).await?;
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
    if !m.blocked.is_empty() {
        return Ok(m);
    }
    c.execute(sql::DELETE_LFS_LINKS, &[&p]).await?;
    if !lfs_ids.is_empty() {
        c.execute(sql::DELETE_LFS_OBJECTS, &[&lfs_ids]).await?;
    }
    c.execute(sql::DELETE_UPLOADS, &[&p]).await?;
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

/// Lock container repository `id` of project `p`; whether it still exists.
pub async fn lock_container_repository<C: GenericClient>(c: &C, id: i64, p: i64) -> Result<bool> {
    Ok(c.query_opt(sql::LOCK_CONTAINER_REPOSITORY, &[&id, &p])
        .await?
        .is_some())
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
    }
}
