//! A storage item of a destroyed project (issue 37, docs/storage-cleanup.md): a Git
//! repository on a Gitaly storage, a container repository in the registry, the images
//! at the project's root registry path that have no row, or an object in one of
//! GitLab's buckets; and the one shape GitLab gives each for a project's (or
//! snippet's) id ([`bound_rule`]: hashed storage only, paths derived from the id).
//!
//! Owns: [`StorageItem`] (what `storage-cleanup`'s payload carries; its decoder is
//! `workers::storage_cleanup`'s), GitLab's hashed paths ([`id_hash`],
//! [`project_disk_path`], [`snippet_disk_path`]), [`is_project_full_path`] and the
//! storage path bounds.

use serde::Serialize;

use crate::config::storage::{Bucket, StorageKind};

/// The longest Gitaly storage name accepted.
pub const STORAGE_NAME_MAX: usize = 255;
/// The longest repository path, registry path or object key accepted (S3's key limit).
pub const STORAGE_PATH_MAX: usize = 1024;

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
        /// The snippet whose repository this is (`@snippets/…`); absent for the
        /// project's own repositories (`@hashed/…`).
        #[serde(skip_serializing_if = "Option::is_none")]
        snippet_id: Option<i64>,
    },
    /// A container repository: its images in the registry, then its row.
    ContainerRepository {
        /// `container_repositories.id`.
        id: i64,
        /// The registry path (`<project full path>[/<name>]`, lower case).
        path: String,
    },
    /// The images at a project's root path with no `container_repositories` row
    /// (GitLab's legacy root repository, `ContainerRepository.build_root_repository`):
    /// every tag there, no row.
    RegistryRoot {
        /// The project's full path at destroy time, lower case (the registry's name).
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

impl StorageItem {
    /// The kind of storage that owns this item.
    pub fn kind(&self) -> StorageKind {
        match self {
            StorageItem::Repository { .. } => StorageKind::Gitaly,
            StorageItem::ContainerRepository { .. } | StorageItem::RegistryRoot { .. } => {
                StorageKind::Registry
            }
            StorageItem::Object { .. } => StorageKind::Objects,
        }
    }

    /// How logs and the DLQ line name the item: `gitaly default:@hashed/…git`,
    /// `registry container_repositories.id=12 group/project`, `registry root
    /// group/project`, `objects uploads:key`.
    pub fn describe(&self) -> String {
        match self {
            StorageItem::Repository {
                storage,
                relative_path,
                ..
            } => format!("gitaly {storage}:{relative_path}"),
            StorageItem::ContainerRepository { id, path } => {
                format!("registry container_repositories.id={id} {path}")
            }
            StorageItem::RegistryRoot { path } => format!("registry root {path}"),
            StorageItem::Object { bucket, key } => format!("objects {}:{key}", bucket.as_str()),
        }
    }

    /// The path shown in dry-run listings.
    pub fn path(&self) -> String {
        match self {
            StorageItem::Repository {
                storage,
                relative_path,
                ..
            } => format!("{storage}:{relative_path}"),
            StorageItem::ContainerRepository { path, .. } | StorageItem::RegistryRoot { path } => {
                path.clone()
            }
            StorageItem::Object { bucket, key } => format!("{}:{key}", bucket.as_str()),
        }
    }
}

/// The SHA-256 of an id in lower-case hex, as GitLab's hashed storage computes it
/// (`Storage::Hashed`, `Gitlab::HashedPath`: the digest of the id's decimal text).
pub fn id_hash(id: i64) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(id.to_string().as_bytes()))
}

/// `<h[0..2]>/<h[2..4]>/<h>` of id hash `h`.
fn hashed_dirs(h: &str) -> String {
    format!("{}/{}/{h}", &h[..2], &h[2..4])
}

/// Project `p`'s hashed disk path, `@hashed/<h[0..2]>/<h[2..4]>/<h>`.
pub fn project_disk_path(p: i64) -> String {
    format!("@hashed/{}", hashed_dirs(&id_hash(p)))
}

/// Snippet `s`'s hashed disk path, `@snippets/<h[0..2]>/<h[2..4]>/<h>`.
pub fn snippet_disk_path(s: i64) -> String {
    format!("@snippets/{}", hashed_dirs(&id_hash(s)))
}

fn is_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `p` is a project's full path as the registry names it: at least a
/// namespace and the project, lower case, each segment a GitLab path
/// (`Gitlab::PathRegex`: letters, digits, `_`, `-`, `.`; not starting with `-` or `.`,
/// not ending with `.`, `.git` or `.atom`).
pub fn is_project_full_path(p: &str) -> bool {
    let segment = |s: &str| {
        !s.is_empty()
            && s.len() <= 255
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b))
            && !s.starts_with(['-', '.'])
            && !s.ends_with('.')
            && !s.ends_with(".git")
            && !s.ends_with(".atom")
    };
    p.len() <= STORAGE_PATH_MAX && p.split('/').count() >= 2 && p.split('/').all(segment)
}

/// Whether `item` has the one shape GitLab gives storage of project `project_id`
/// (docs/storage-cleanup.md, "Which items a message may name"): `Err` names the field
/// and the rule. Repositories are `@hashed/<h>{.git,.wiki.git,.design.git}` of the
/// project, or `@snippets/<h>.git` of the message's `snippet_id`; LFS keys a 64-hex
/// oid split `<2>/<2>/<60>`; package files under the project's hashed directory
/// (`packages/<id>/files/<id>/…` or a direct upload's `@final/<2>/<2>/<hex>`); uploads
/// under the project's hashed disk path (attachments) or `project/<mount>/<id>/…`
/// (avatars). Legacy (non-hashed) storage is refused. Container repositories are bound
/// to the project's current route by `storage-cleanup` under lock; a root registry
/// path must be a project's full path (`is_project_full_path`), and
/// `storage-cleanup` removes it only once `project_id`'s row is gone and no live
/// project's route has that path.
pub fn bound_rule(item: &StorageItem, project_id: i64) -> Result<(), (&'static str, String)> {
    let ok =
        |b: bool, field: &'static str, rule: String| if b { Ok(()) } else { Err((field, rule)) };
    match item {
        StorageItem::Repository {
            relative_path,
            snippet_id: None,
            ..
        } => {
            let dp = project_disk_path(project_id);
            let fits = [".git", ".wiki.git", ".design.git"]
                .iter()
                .any(|sfx| relative_path.strip_prefix(dp.as_str()) == Some(sfx));
            ok(
                fits,
                "relative_path",
                format!(
                    "must be the hashed path of project_id ({dp}.git, .wiki.git or .design.git)"
                ),
            )
        }
        StorageItem::Repository {
            relative_path,
            snippet_id: Some(s),
            ..
        } => {
            let dp = snippet_disk_path(*s);
            ok(
                relative_path.strip_prefix(dp.as_str()) == Some(".git"),
                "relative_path",
                format!("must be the hashed path of snippet_id ({dp}.git)"),
            )
        }
        StorageItem::ContainerRepository { .. } => Ok(()),
        StorageItem::RegistryRoot { path } => ok(
            is_project_full_path(path),
            "path",
            "must be a project's full path in lower case (namespace/…/project: segments of a-z, 0-9, '_', '-', '.', not starting with '-' or '.', not ending with '.', '.git' or '.atom')".into(),
        ),
        StorageItem::Object {
            bucket: Bucket::Lfs,
            key,
        } => {
            let parts: Vec<&str> = key.split('/').collect();
            let fits = parts.len() == 3
                && parts[0].len() == 2
                && parts[1].len() == 2
                && parts[2].len() == 60
                && parts.iter().all(|p| is_hex(p));
            ok(
                fits,
                "key",
                "must be an LFS oid (64 lower-case hex) split 2/2/60".into(),
            )
        }
        StorageItem::Object {
            bucket: Bucket::Packages,
            key,
        } => {
            let dir = hashed_dirs(&id_hash(project_id));
            let rest: Vec<&str> = key
                .strip_prefix(dir.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .map(|r| r.split('/').collect())
                .unwrap_or_default();
            let fits = match rest.as_slice() {
                ["packages", pkg, "files", file, _name, ..] => is_digits(pkg) && is_digits(file),
                ["@final", a, b, c] => {
                    a.len() == 2 && b.len() == 2 && is_hex(a) && is_hex(b) && is_hex(c)
                }
                _ => false,
            };
            ok(
                fits,
                "key",
                format!("must lie under project_id's hashed directory ({dir}/packages/<id>/files/<id>/… or {dir}/@final/…)"),
            )
        }
        StorageItem::Object {
            bucket: Bucket::Uploads,
            key,
        } => {
            let dp = project_disk_path(project_id);
            let attachment = key
                .strip_prefix(dp.as_str())
                .and_then(|r| r.strip_prefix('/'))
                .is_some_and(|r| r.split('/').count() >= 2);
            let id = project_id.to_string();
            let mounted = matches!(
                key.split('/').collect::<Vec<_>>().as_slice(),
                ["project", mount, pid, _file, ..]
                    if *pid == id && !mount.is_empty() && mount.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            );
            ok(
                attachment || mounted,
                "key",
                format!(
                    "must lie under project_id's hashed path ({dp}/…) or be project/<mount>/{id}/…"
                ),
            )
        }
    }
}
