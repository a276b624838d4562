//! group-destroy with storage (issue 37, docs/storage-cleanup.md): the project's
//! repositories, container images and files are recorded in the manifest, sent to
//! `storage-cleanup` before the rows go, and removed there through the real service of
//! each kind (the Gitaly test server, Debian's registry, moto's S3); a kind `off`
//! blocks the group with nothing deleted, `leave` keeps today's behaviour.
//!
//! * `modes`: off blocks whole, leave deletes the rows and logs what stays, on sends the
//!   manifest; the dry run lists it.
//! * `end_to_end`: a group destroyed with every kind removed through its real
//!   service; any kind off blocks it; crashes remove each item once.
//! * `objects`: files in S3 (uploads, LFS objects only this project links, package
//!   files), and storage-cleanup's re-checks.
//! * `binding` (issue 46): the registry's mark is invisible to GitLab and undone when a
//!   repository is kept; a stale path, a missing project id naming a live project's
//!   storage and another instance's database are refused with no service called.
//! * `refusals` (issue 46): what GitLab keeps or refuses — group uploads per mode, a
//!   repository storage move in progress — and package files at their final path in a
//!   prefixed bucket.
//! * `root` (issue 46): images at a project's root registry path without a row go
//!   with the project, stay when a live project has the path again, and stay with the
//!   registry off; a malformed root path is refused naming the field.
//!
//! Here: the storage rows of P200 and the buckets in moto.

use std::collections::BTreeMap;
use std::sync::Arc;

use shared::config::storage::Bucket;
use shared::config::storage::{Mode, StorageModes};
use shared::storage::objects::Objects;
use shared::storage::Storage;

use super::*;

mod binding;
mod end_to_end;
mod modes;
mod objects;
mod refusals;
mod root;

const SF: Function = Function::StorageCleanup;

/// SHA-256 of an id in hex, as GitLab's hashed storage computes it.
fn sha(id: i64) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(id.to_string().as_bytes()))
}

/// `@hashed/<h[0..1]>/<h[2..3]>/<h>` of project `id`.
fn disk_path(id: i64) -> String {
    let h = sha(id);
    format!("@hashed/{}/{}/{h}", &h[..2], &h[2..4])
}

/// The fixture instance's `application_settings.uuid` (`GITLAB_INSTANCE_UUID`).
const INSTANCE: &str = "0e5c1d2a-7d3f-4b8e-9a61-5f2c8d4e7b10";

/// `@snippets/<h[0..1]>/<h[2..3]>/<h>` of snippet `id`.
fn snippet_path(id: i64) -> String {
    let h = sha(id);
    format!("@snippets/{}/{}/{h}", &h[..2], &h[2..4])
}

/// The LFS object only P200 links.
const OID_OWN: &str = "aa11bb22cc33dd44ee55ff6677889900aa11bb22cc33dd44ee55ff6677889900";
/// The LFS object P200 shares with P900 (outside the group).
const OID_SHARED: &str = "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e";
/// The upload's secret.
const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// The object keys of P200's files, by bucket, as GitLab stores them.
fn p200_keys() -> Vec<(Bucket, String)> {
    let h = sha(200);
    vec![
        (
            Bucket::Uploads,
            format!("{}/{SECRET}/screen.png", disk_path(200)),
        ),
        (Bucket::Uploads, "project/avatar/200/logo.png".into()),
        (
            Bucket::Lfs,
            format!("{}/{}/{}", &OID_OWN[..2], &OID_OWN[2..4], &OID_OWN[4..]),
        ),
        (
            Bucket::Packages,
            format!(
                "{}/{}/{h}/packages/40/files/41/pkg-1.0.tgz",
                &h[..2],
                &h[2..4]
            ),
        ),
    ]
}

/// The key of the shared LFS object (must survive).
fn shared_lfs_key() -> String {
    format!(
        "{}/{}/{}",
        &OID_SHARED[..2],
        &OID_SHARED[2..4],
        &OID_SHARED[4..]
    )
}

/// P200's storage rows (and the instance's uuid): its repository on storage `default`
/// (wiki and design beside it), a snippet with a repository, two uploads and a package file in object storage,
/// an LFS object only it links and one it shares with P900 outside the group.
async fn storage_rows(db: &TestDb) {
    let fx = Fx(db);
    fx.group(900, "elsewhere", None).await;
    fx.project(900, 900).await;
    db.exec(&format!(
        "INSERT INTO shards (id, name) VALUES (1, 'default');
         INSERT INTO project_repositories (shard_id, disk_path, project_id) VALUES (1, '{dp}', 200);
         INSERT INTO snippets (id, title, author_id, project_id, type) VALUES (30, 's', 11, 200, 'ProjectSnippet');
         INSERT INTO snippet_repositories (snippet_id, shard_id, disk_path) VALUES (30, 1, '{sp}');
         INSERT INTO uploads (size, path, model_id, model_type, uploader, created_at, store, secret)
         VALUES (10, '{SECRET}/screen.png', 200, 'Project', 'FileUploader', '2025-01-01', 2, '{SECRET}'),
                (10, 'uploads/-/system/project/avatar/200/logo.png', 200, 'Project', 'AvatarUploader', '2025-01-01', 2, NULL);
         INSERT INTO lfs_objects (id, oid, size, file, file_store)
         VALUES (1, '{OID_OWN}', 5, 'x', 2), (2, '{OID_SHARED}', 5, 'y', 2);
         INSERT INTO lfs_objects_projects (lfs_object_id, project_id) VALUES (1, 200), (2, 200), (2, 900);
         INSERT INTO packages_packages (id, project_id, created_at, updated_at, name, package_type)
         VALUES (40, 200, '2025-01-01', '2025-01-01', 'pkg', 1);
         INSERT INTO packages_package_files (id, package_id, created_at, updated_at, file_store, file_name, file)
         VALUES (41, 40, '2025-01-01', '2025-01-01', 2, 'pkg-1.0.tgz', 'pkg-1.0.tgz');
         UPDATE application_settings SET uuid = '{INSTANCE}';",
        dp = disk_path(200),
        sp = snippet_path(30)
    ))
    .await;
}

/// P200's container repository 7, `app` (registry path `<P200's full path>/app`).
async fn container_repository(db: &TestDb) {
    db.exec(
        "INSERT INTO container_repositories (id, project_id, name, created_at, updated_at)
         VALUES (7, 200, 'app', '2025-03-01', '2025-03-01')",
    )
    .await;
}

/// The fixture of behaviour §B51.9 with P200's storage rows.
async fn storage_fixture() -> TestDb {
    let db = fixture().await;
    storage_rows(&db).await;
    db
}

/// Settings with the given modes.
fn with_modes(modes: StorageModes) -> Settings {
    Settings {
        storage: modes,
        ..Settings::default()
    }
}

/// Three fresh buckets in moto, one per kind.
async fn buckets() -> BTreeMap<Bucket, String> {
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&integration_tests::aws::moto_config().await)
            .force_path_style(true)
            .build(),
    );
    let mut out = BTreeMap::new();
    for b in Bucket::ALL {
        let name = format!("gitlab-{}-{}", b.as_str(), uuid::Uuid::new_v4().simple());
        s3.create_bucket().bucket(&name).send().await.unwrap();
        out.insert(b, name);
    }
    out
}

/// The object-storage client over moto.
async fn objects(buckets: &BTreeMap<Bucket, String>) -> Objects {
    let aws = integration_tests::aws::moto_config().await;
    Objects::new(&aws, Some(integration_tests::aws::moto_endpoint()), buckets)
}

/// Put `key` into `b`'s bucket.
async fn put(buckets: &BTreeMap<Bucket, String>, b: Bucket, key: &str) {
    let aws = integration_tests::aws::moto_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&aws)
            .force_path_style(true)
            .build(),
    );
    s3.put_object()
        .bucket(&buckets[&b])
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"data"))
        .send()
        .await
        .unwrap();
}

/// Every message of the runner's queue delivered, children included, until idle.
async fn until_idle(r: &mut Runner, group: i64) {
    r.run_until_idle(GD, &destroy_body(group, 11, "2025-03-03"))
        .await
        .unwrap();
}

/// The storage of a runner whose object storage is moto's.
fn storage_with(objects: Option<Objects>) -> Arc<Storage> {
    Arc::new(Storage {
        objects,
        instance_uuid: Some(INSTANCE.into()),
        ..Storage::default()
    })
}

/// The modes with objects on and repositories left.
const OBJECTS_ON: StorageModes = StorageModes {
    gitaly: Mode::Leave,
    registry: Mode::Off,
    objects: Mode::On,
};
