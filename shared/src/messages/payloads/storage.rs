//! The payload of `storage-cleanup` (issue 37, docs/storage-cleanup.md).
//!
//! Owns: [`StorageCleanupRun`] (one storage item of one destroyed project: a Git
//! repository on a Gitaly storage, a container repository in the registry, or an object
//! in one of GitLab's buckets) and its validating decoder, which refuses paths that could
//! leave their tree (`..`, a leading `/`, control characters).

use serde::Serialize;

use super::fields::{Checked, Fields, Payload};

/// The longest Gitaly storage name accepted.
pub const STORAGE_NAME_MAX: usize = 255;
/// The longest repository path, registry path or object key accepted (S3's key limit).
pub const STORAGE_PATH_MAX: usize = 1024;

/// One of GitLab's object-storage buckets (`object_store` of GitLab's configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bucket {
    /// `uploads`: project attachments and avatars.
    Uploads,
    /// `lfs`: Git LFS objects, by object id.
    Lfs,
    /// `packages`: package registry files.
    Packages,
}

impl Bucket {
    /// Every bucket.
    pub const ALL: [Bucket; 3] = [Bucket::Uploads, Bucket::Lfs, Bucket::Packages];

    /// `uploads`, `lfs` or `packages`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Uploads => "uploads",
            Bucket::Lfs => "lfs",
            Bucket::Packages => "packages",
        }
    }

    fn parse(s: &str) -> Option<Bucket> {
        Bucket::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// What one `storage-cleanup.remove` message removes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StorageItem {
    /// A Git repository (project, wiki, design or snippet) on a Gitaly storage.
    Repository {
        /// The Gitaly storage name (`shards.name`, GitLab's `repository_storage`).
        storage: String,
        /// The path relative to the storage, `….git`.
        relative_path: String,
    },
    /// A container repository: its images in the registry, then its row.
    ContainerRepository {
        /// `container_repositories.id`.
        id: i64,
        /// The registry path (`<project full path>[/<name>]`, lower case).
        path: String,
    },
    /// An object in one of GitLab's buckets.
    Object {
        /// The bucket kind.
        bucket: Bucket,
        /// The object key.
        key: String,
    },
}

/// The three storage kinds, as configuration and metrics name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StorageKind {
    /// Git repositories through Gitaly.
    Gitaly,
    /// Container images through the registry API.
    Registry,
    /// Files in object storage (S3).
    Objects,
}

impl StorageKind {
    /// Every kind, in the order a project's storage is removed (registry first: its
    /// rows hold the project back).
    pub const ALL: [StorageKind; 3] = [
        StorageKind::Registry,
        StorageKind::Gitaly,
        StorageKind::Objects,
    ];

    /// `gitaly`, `registry` or `objects`.
    pub fn as_str(self) -> &'static str {
        match self {
            StorageKind::Gitaly => "gitaly",
            StorageKind::Registry => "registry",
            StorageKind::Objects => "objects",
        }
    }
}

impl StorageItem {
    /// The kind of storage that owns this item.
    pub fn kind(&self) -> StorageKind {
        match self {
            StorageItem::Repository { .. } => StorageKind::Gitaly,
            StorageItem::ContainerRepository { .. } => StorageKind::Registry,
            StorageItem::Object { .. } => StorageKind::Objects,
        }
    }

    /// How logs and the DLQ line name the item: `gitaly default:@hashed/…git`,
    /// `registry 12 group/project`, `objects uploads:key`.
    pub fn describe(&self) -> String {
        match self {
            StorageItem::Repository {
                storage,
                relative_path,
            } => format!("gitaly {storage}:{relative_path}"),
            StorageItem::ContainerRepository { id, path } => {
                format!("registry container_repositories.id={id} {path}")
            }
            StorageItem::Object { bucket, key } => format!("objects {}:{key}", bucket.as_str()),
        }
    }

    /// The path shown in dry-run listings.
    pub fn path(&self) -> String {
        match self {
            StorageItem::Repository {
                storage,
                relative_path,
            } => format!("{storage}:{relative_path}"),
            StorageItem::ContainerRepository { path, .. } => path.clone(),
            StorageItem::Object { bucket, key } => format!("{}:{key}", bucket.as_str()),
        }
    }
}

/// `storage-cleanup.remove` payload: one item of one destroyed project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageCleanupRun {
    /// The group being destroyed (its schedule is re-checked before a registry delete).
    pub group_id: i64,
    /// The project the item belongs to.
    pub project_id: i64,
    /// The item.
    pub item: StorageItem,
}

/// A path that stays inside its tree: relative, no `.`/`..` segment, no empty segment,
/// no control character, no backslash.
pub fn is_contained_path(p: &str) -> bool {
    !p.is_empty()
        && !p.starts_with('/')
        && !p.chars().any(|c| c.is_control() || c == '\\')
        && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

fn contained(f: &Fields<'_>, name: &str, max: usize) -> Checked<String> {
    let s = f.text(name, max)?;
    if is_contained_path(&s) {
        Ok(s)
    } else {
        Err(f.err(
            name,
            "must be a relative path without '.', '..' or empty segments, backslashes or control characters",
        ))
    }
}

impl Payload for StorageItem {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let kind = f.text("kind", 32)?;
        match kind.as_str() {
            "repository" => {
                let storage = f.text("storage", STORAGE_NAME_MAX)?;
                if storage.is_empty() || storage.chars().any(|c| c.is_control()) {
                    return Err(f.err("storage", "must be a non-empty storage name"));
                }
                let relative_path = contained(f, "relative_path", STORAGE_PATH_MAX)?;
                if !relative_path.ends_with(".git") {
                    return Err(f.err("relative_path", "must end with .git"));
                }
                Ok(StorageItem::Repository {
                    storage,
                    relative_path,
                })
            }
            "container_repository" => Ok(StorageItem::ContainerRepository {
                id: f.id("id")?,
                path: contained(f, "path", STORAGE_PATH_MAX)?,
            }),
            "object" => {
                let b = f.text("bucket", 32)?;
                let bucket = Bucket::parse(&b)
                    .ok_or_else(|| f.err("bucket", "must be uploads, lfs or packages"))?;
                Ok(StorageItem::Object {
                    bucket,
                    key: contained(f, "key", STORAGE_PATH_MAX)?,
                })
            }
            _ => Err(f.err("kind", "must be repository, container_repository or object")),
        }
    }
}

impl Payload for StorageCleanupRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(StorageCleanupRun {
            group_id: f.id("group_id")?,
            project_id: f.id("project_id")?,
            item: StorageItem::from_payload(&f.object("item")?)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_that_leave_their_tree_are_refused() {
        for bad in [
            "", "/abs", "a/../b", "a//b", "./a", "a/.", "a\\b", "a\nb", "..",
        ] {
            assert!(!is_contained_path(bad), "{bad:?}");
        }
        for good in [
            "@hashed/aa/bb/cc.git",
            "group/sub/project/image",
            "aa/bb/cdef",
        ] {
            assert!(is_contained_path(good), "{good:?}");
        }
    }

    #[test]
    fn items_decode_and_name_the_bad_field() {
        let ok = serde_json::json!({"group_id": 1, "project_id": 2,
            "item": {"kind": "object", "bucket": "lfs", "key": "aa/bb/cc"}});
        let run = StorageCleanupRun::from_value(&ok).unwrap();
        assert_eq!(run.item.kind(), StorageKind::Objects);
        assert_eq!(serde_json::to_value(&run).unwrap(), ok);
        let bad = serde_json::json!({"group_id": 1, "project_id": 2,
            "item": {"kind": "repository", "storage": "default", "relative_path": "../x.git"}});
        let e = StorageCleanupRun::from_value(&bad).unwrap_err();
        assert_eq!(e.field, "item.relative_path");
        let bad = serde_json::json!({"group_id": 1, "project_id": 2,
            "item": {"kind": "repository", "storage": "default", "relative_path": "a/b"}});
        assert!(StorageCleanupRun::from_value(&bad)
            .unwrap_err()
            .rule
            .contains(".git"));
        let bad = serde_json::json!({"group_id": 1, "project_id": 2, "item": {"kind": "disk"}});
        assert_eq!(
            StorageCleanupRun::from_value(&bad).unwrap_err().field,
            "item.kind"
        );
    }
}
