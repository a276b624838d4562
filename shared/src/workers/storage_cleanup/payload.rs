//! The payload of `storage-cleanup` (issue 37, docs/storage-cleanup.md) and its key.
//!
//! Owns: [`StorageCleanupRun`] (one storage item of one destroyed project) and its
//! validating decoder, with the item's ([`StorageItem`]'s shape is `gitlab::storage`'s):
//! it refuses paths that could leave their tree (`..`, a leading `/`, control
//! characters) and binds every item to the ids the message carries (issue 46): the only
//! path an item may name is the one GitLab derives from its project's id (or its
//! snippet's), hashed storage only ([`bound_rule`]), and a root registry path must be a
//! project's full path; the database confirms the rest at removal. Also
//! [`storage_cleanup_key`], the message's key.

use serde::Serialize;

use crate::config::storage::Bucket;
use crate::function::Function;
use crate::gitlab::storage::item::{bound_rule, STORAGE_NAME_MAX, STORAGE_PATH_MAX};
use crate::gitlab::storage::StorageItem;
use crate::messages::{validated_deserialize, Addressed, Checked, Fields, Payload};

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

/// The key of `storage-cleanup.remove`: `storage-cleanup:<project_id>:<kind>:<h>`, h
/// the first 32 hex digits of the SHA-256 of the item's path (paths hold characters a
/// key cannot).
pub fn storage_cleanup_key(project_id: i64, item: &StorageItem) -> String {
    use sha2::Digest;
    // A root registry path is also the path of a container repository without a name:
    // the two items keep distinct keys.
    let path = match item {
        StorageItem::RegistryRoot { path } => format!("root:{path}"),
        other => other.path(),
    };
    let h = hex::encode(sha2::Sha256::digest(path.as_bytes()));
    format!(
        "storage-cleanup:{project_id}:{}:{}",
        item.kind().as_str(),
        &h[..32]
    )
}

impl Addressed for StorageCleanupRun {
    const RECEIVER: Function = Function::StorageCleanup;
}

validated_deserialize!(StorageCleanupRun);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::storage::StorageKind;
    use crate::gitlab::storage::item::{id_hash, project_disk_path, snippet_disk_path};

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
