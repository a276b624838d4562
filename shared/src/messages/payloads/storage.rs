//! The payload of `storage-cleanup` (issue 37, docs/storage-cleanup.md).
//!
//! Owns: [`StorageCleanupRun`] (one storage item of one destroyed project: a Git
//! repository on a Gitaly storage, a container repository in the registry, the images
//! at the project's root registry path that have no row, or an object in one of
//! GitLab's buckets) and its validating decoder, which refuses paths that could
//! leave their tree (`..`, a leading `/`, control characters) and binds every item to the
//! ids the message carries (issue 46): the only path an item may name is the one GitLab
//! derives from its project's id (or its snippet's), hashed storage only
//! ([`bound_rule`]), and a root registry path must be a project's full path; the
//! database confirms the rest at removal.

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
                    snippet_id: f.opt_id("snippet_id")?,
                })
            }
            "container_repository" => Ok(StorageItem::ContainerRepository {
                id: f.id("id")?,
                path: contained(f, "path", STORAGE_PATH_MAX)?,
            }),
            "registry_root" => Ok(StorageItem::RegistryRoot {
                path: f.text("path", STORAGE_PATH_MAX)?,
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
            _ => Err(f.err(
                "kind",
                "must be repository, container_repository, registry_root or object",
            )),
        }
    }
}

impl Payload for StorageCleanupRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let project_id = f.id("project_id")?;
        let fields = f.object("item")?;
        let item = StorageItem::from_payload(&fields)?;
        if let Err((field, rule)) = bound_rule(&item, project_id) {
            return Err(fields.err(field, &rule));
        }
        Ok(StorageCleanupRun {
            group_id: f.id("group_id")?,
            project_id,
            item,
        })
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
        let oid = "aa11bb22cc33dd44ee55ff6677889900aa11bb22cc33dd44ee55ff6677889900";
        let key = format!("{}/{}/{}", &oid[..2], &oid[2..4], &oid[4..]);
        let ok = serde_json::json!({"group_id": 1, "project_id": 2,
            "item": {"kind": "object", "bucket": "lfs", "key": key}});
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

    #[test]
    fn items_are_bound_to_the_ids_the_message_carries() {
        let run = |project: i64, item: serde_json::Value| {
            StorageCleanupRun::from_value(
                &serde_json::json!({"group_id": 1, "project_id": project, "item": item}),
            )
        };
        let dp = project_disk_path(200);
        let repo = |p: &str| serde_json::json!({"kind": "repository", "storage": "default", "relative_path": p});
        for sfx in [".git", ".wiki.git", ".design.git"] {
            assert!(run(200, repo(&format!("{dp}{sfx}"))).is_ok(), "{sfx}");
        }
        // Another project's path under a missing project's id, a legacy path, and a
        // snippet path without its snippet id are refused, naming the field.
        for p in [
            format!("{dp}.git"),
            "acme/web.git".into(),
            snippet_disk_path(30) + ".git",
        ] {
            let e = run(999, repo(&p)).unwrap_err();
            assert_eq!(e.field, "item.relative_path", "{p}");
        }
        let snip = serde_json::json!({"kind": "repository", "storage": "default",
            "relative_path": snippet_disk_path(30) + ".git", "snippet_id": 30});
        assert!(run(200, snip.clone()).is_ok());
        let mut other = snip;
        other["snippet_id"] = 31.into();
        assert!(run(200, other).is_err());
        let h = id_hash(200);
        let obj = |b: &str, k: &str| serde_json::json!({"kind": "object", "bucket": b, "key": k});
        let dir = format!("{}/{}/{h}", &h[..2], &h[2..4]);
        for (b, k, good) in [
            (
                "packages",
                format!("{dir}/packages/40/files/41/pkg-1.0.tgz"),
                true,
            ),
            (
                "packages",
                format!("{dir}/@final/ab/cd/0123456789abcdef"),
                true,
            ),
            ("packages", format!("{dir}/@final/ab/cd/../x"), false),
            ("packages", "ab/cd/ef/packages/40/files/41/x".into(), false),
            (
                "uploads",
                format!("{dp}/0123456789abcdef0123456789abcdef/a.png"),
                true,
            ),
            ("uploads", "project/avatar/200/logo.png".into(), true),
            ("uploads", "project/avatar/201/logo.png".into(), false),
            ("uploads", format!("{dp}/a.png"), false),
            ("lfs", "aa/bb/cc".into(), false),
        ] {
            assert_eq!(run(200, obj(b, &k)).is_ok(), good, "{b} {k}");
        }
        let root = |p: &str| serde_json::json!({"kind": "registry_root", "path": p});
        let ok = run(200, root("acme-x_1/web/site.v2")).unwrap();
        assert_eq!(ok.item.kind(), StorageKind::Registry);
        assert_eq!(ok.item.describe(), "registry root acme-x_1/web/site.v2");
        for bad in [
            "site",
            "Acme/web",
            "acme/../web",
            "acme//web",
            "acme/-web",
            "acme/.web",
            "acme/web.",
            "acme/web.git",
            "acme/web.atom",
            "acme/web/",
            "acme/we b",
        ] {
            let e = run(200, root(bad)).unwrap_err();
            assert_eq!(e.field, "item.path", "{bad}");
        }
    }
}
