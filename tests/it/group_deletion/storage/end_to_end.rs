//! The "done when": a group with a project that has a repository, a container
//! image, an upload and an LFS object is destroyed completely, each kind removed
//! through its real service (the Gitaly test server built from Gitaly's protos,
//! Debian's registry with GitLab's token auth, moto's S3); with a kind switched off the
//! same group ends `blocked` with nothing deleted. The images at P200's root path
//! without a row go with it; an image outside the group stays. And a crash between the manifest and
//! the rows, or around each storage call, ends with every item removed exactly once and
//! no row left.
//!
//! The runner's clock starts at the wall clock (the schedule is due by then); its
//! virtual time runs ahead with each wait, while the services' tokens are dated by the
//! storage clients' wall clock (`Storage::token_clock`), as Gitaly (±30 s) and the
//! registry (`nbf`/`exp`) check them against their own clocks.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use engine::chaos::CrashPoint;
use integration_tests::sinks::gitaly::GitalyStub;
use integration_tests::sinks::registry::TestRegistry;
use shared::storage::gitaly::{Gitaly, GitalyConfig};
use shared::storage::registry::Registry;

use super::*;

/// The Gitaly token of the stand-in.
const GITALY_TOKEN: &str = "gitaly-secret";

/// The registry path of P200's container repository `app`.
pub(super) const IMAGE: &str = "acme-deletion_scheduled-100/web/site/app";

/// P200's root registry path: images there have no `container_repositories` row
/// (GitLab's legacy root repository).
pub(super) const ROOT: &str = "acme-deletion_scheduled-100/web/site";

/// An image of P900, outside the group: never removed.
pub(super) const OTHER: &str = "elsewhere/p900";

/// Every real service with P200's storage in it.
pub(super) struct World {
    pub(super) gitaly: GitalyStub,
    pub(super) registry: TestRegistry,
    pub(super) buckets: BTreeMap<Bucket, String>,
    /// The wall-clock start of the run, and the schedule date due by then.
    pub(super) now: DateTime<Utc>,
    marked: chrono::NaiveDate,
}

/// P200's four repositories.
pub(super) fn repositories() -> Vec<String> {
    let dp = disk_path(200);
    vec![
        format!("{dp}.git"),
        format!("{dp}.wiki.git"),
        format!("{dp}.design.git"),
        format!("{}.git", snippet_path(30)),
    ]
}

/// The fixture of behaviour §B51.9 scheduled 8 days before the wall clock, with P200's
/// storage rows and a container repository, and every item present in its service.
pub(super) async fn world() -> (TestDb, World) {
    let db = storage_fixture().await;
    let now = Utc::now();
    let marked = (now - chrono::Duration::days(8)).date_naive();
    db.exec(&format!(
        "UPDATE group_deletion_schedules SET marked_for_deletion_on = '{marked}'"
    ))
    .await;
    container_repository(&db).await;
    let gitaly = GitalyStub::start(&["default"], Some(GITALY_TOKEN)).await;
    for r in repositories() {
        gitaly.create_repo("default", &r);
    }
    let registry = TestRegistry::start().await;
    registry.push_image(IMAGE, "v1", "layer one").await;
    registry.push_image(IMAGE, "v2", "layer two").await;
    registry.push_image(ROOT, "latest", "root layer").await;
    registry.push_image(OTHER, "v1", "other layer").await;
    let buckets = buckets().await;
    for (b, key) in p200_keys() {
        put(&buckets, b, &key).await;
    }
    put(&buckets, Bucket::Lfs, &shared_lfs_key()).await;
    let w = World {
        gitaly,
        registry,
        buckets,
        now,
        marked,
    };
    (db, w)
}

impl World {
    /// The Gitaly client of the stand-in.
    pub(super) fn gitaly_client(&self) -> Gitaly {
        Gitaly::new(&GitalyConfig {
            storages: [("default".to_string(), self.gitaly.address())].into(),
            token: Some(GITALY_TOKEN.into()),
            timeout: std::time::Duration::from_secs(10),
        })
        .unwrap()
    }

    /// The clients of every kind.
    pub(super) async fn storage(&self) -> Arc<Storage> {
        Arc::new(Storage {
            gitaly: Some(self.gitaly_client()),
            registry: Some(Registry::new(&self.registry.client_config()).unwrap()),
            objects: Some(objects(&self.buckets).await),
            instance_uuid: Some(INSTANCE.into()),
            ..Storage::default()
        })
    }

    /// The destroy message of G100 for the world's schedule.
    pub(super) fn destroy(&self) -> String {
        Envelope::new(
            "group-destroy.run",
            group_destroy_key(100, self.marked, 11),
            "run-e2e",
            self.now,
            GroupDestroyRun {
                group_id: 100,
                user_id: 11,
                marked_for_deletion_on: self.marked,
            },
        )
        .to_body()
    }

    /// A runner at the wall clock with `modes` and every client.
    pub(super) async fn runner(&self, db: &TestDb, modes: StorageModes) -> Runner {
        db.runner_with(self.now, with_modes(modes))
            .with_storage(self.storage().await)
    }

    /// Assert every item of P200 is gone from its service and the shared one stayed.
    async fn assert_all_removed(&self) {
        for r in repositories() {
            assert!(!self.gitaly.exists("default", &r), "{r} still on Gitaly");
        }
        let (status, tags) = self.registry.tags(IMAGE).await;
        assert!(
            status == 404 || tags["tags"].as_array().is_none_or(|t| t.is_empty()),
            "the image's tags are gone: {status} {tags}"
        );
        assert!(!self.registry.manifest_exists(IMAGE, "v1").await);
        assert!(!self.registry.manifest_exists(IMAGE, "v2").await);
        assert!(
            !self.registry.manifest_exists(ROOT, "latest").await,
            "the root path's image without a row is gone"
        );
        assert!(
            self.registry.manifest_exists(OTHER, "v1").await,
            "an image outside the group stays"
        );
        let s3 = objects(&self.buckets).await;
        for (b, key) in p200_keys() {
            assert!(!s3.exists(b, &key).await.unwrap(), "{key} still in S3");
        }
        assert!(s3.exists(Bucket::Lfs, &shared_lfs_key()).await.unwrap());
    }

    /// Assert every item of P200 is still in its service.
    pub(super) async fn assert_all_present(&self) {
        for r in repositories() {
            assert!(self.gitaly.exists("default", &r), "{r} removed");
        }
        assert!(self.registry.manifest_exists(IMAGE, "v1").await);
        let s3 = objects(&self.buckets).await;
        for (b, key) in p200_keys() {
            assert!(s3.exists(b, &key).await.unwrap(), "{key} removed");
        }
        assert!(self.gitaly.calls().is_empty(), "Gitaly was not called");
    }

    /// Each repository answered `OK` exactly once (later calls: already gone).
    fn assert_each_repository_removed_once(&self) {
        let calls = self.gitaly.calls();
        for r in repositories() {
            let ok = calls
                .iter()
                .filter(|c| c.relative_path == r && c.code == "OK")
                .count();
            assert_eq!(ok, 1, "{r}: {calls:?}");
        }
        assert!(
            calls.iter().all(|c| c.authorized == Some(true)),
            "every call carried a token Gitaly accepts: {calls:?}"
        );
    }
}

/// No row of the group, its projects or their storage is left.
async fn assert_no_row_left(db: &TestDb) {
    assert!(
        !db.exists("namespaces WHERE id IN (100, 101, 300, 301)")
            .await
    );
    assert!(!db.exists("projects WHERE id IN (200, 201)").await);
    for table in [
        "container_repositories",
        "project_repositories",
        "snippets",
        "snippet_repositories",
        "uploads",
        "packages_packages",
        "packages_package_files",
        "lfs_objects_projects WHERE project_id = 200",
        "lfs_objects WHERE id = 1",
    ] {
        assert!(!db.exists(table).await, "{table} left");
    }
    assert!(
        db.exists("lfs_objects WHERE id = 2").await,
        "the shared object stays"
    );
}

#[tokio::test]
async fn a_group_is_destroyed_with_its_repositories_image_and_files() {
    let (db, w) = world().await;
    let (log, _g) = capture();
    let mut r = w.runner(&db, StorageModes::ALL_ON).await;
    r.run_until_idle(GD, &w.destroy()).await.unwrap();
    assert!(r.dead_letters().is_empty());
    assert_no_row_left(&db).await;
    w.assert_all_removed().await;
    w.assert_each_repository_removed_once();
    // The registry went first: the project waited for it.
    let waiting = log.with_message(
        "Group destroy waiting: the project's container images are being deleted from the registry",
    );
    assert_eq!(waiting[0]["project_id"], 200);
    let dones: Vec<_> = log
        .with_message("done")
        .into_iter()
        .filter(|l| l["function"] == "group-destroy")
        .collect();
    assert_eq!(dones[0]["outcome"], "waiting_for_registry");
    assert_eq!(dones.last().unwrap()["outcome"], "destroyed");
    let removed = log.with_message("Storage removed");
    assert_eq!(
        removed.len(),
        11,
        "4 repositories, 1 container repository, 2 root paths (P200's, P201's), 4 files"
    );
    let registry = removed
        .iter()
        .find(|l| {
            l["item"]
                .as_str()
                .unwrap()
                .starts_with("registry container_repositories")
        })
        .unwrap();
    assert_eq!(registry["manifests_deleted"], 2);
    let root = removed
        .iter()
        .find(|l| l["item"] == format!("registry root {ROOT}"))
        .unwrap();
    assert_eq!(
        (&root["result"], &root["manifests_deleted"]),
        (&json!("removed"), &json!(1))
    );
}

/// A project repository without a shard row (GitLab 19.0 made `shard_id` nullable) is
/// removed from the project's `repository_storage`; where the shard row exists, it
/// names the storage (on 18.x the project's column is set elsewhere to show it).
#[tokio::test]
async fn a_repository_without_a_shard_row_is_removed_from_the_projects_storage() {
    let (db, w) = world().await;
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V19_5 {
        db.exec("UPDATE project_repositories SET shard_id = NULL")
            .await;
    } else {
        db.exec("UPDATE projects SET repository_storage = 'nowhere' WHERE id = 200")
            .await;
    }
    let mut r = w.runner(&db, StorageModes::ALL_ON).await;
    r.run_until_idle(GD, &w.destroy()).await.unwrap();
    assert!(r.dead_letters().is_empty());
    assert_no_row_left(&db).await;
    w.assert_all_removed().await;
    w.assert_each_repository_removed_once();
}

#[tokio::test]
async fn with_any_kind_off_the_same_group_is_blocked_with_nothing_deleted() {
    let (db, w) = world().await;
    for off in [
        StorageModes {
            gitaly: Mode::Off,
            ..StorageModes::ALL_ON
        },
        StorageModes {
            registry: Mode::Off,
            ..StorageModes::ALL_ON
        },
        StorageModes {
            objects: Mode::Off,
            ..StorageModes::ALL_ON
        },
    ] {
        let before = db.snapshot().await;
        let (log, _g) = capture();
        let mut r = w.runner(&db, off).await;
        r.run_until_idle(GD, &w.destroy()).await.unwrap();
        assert_eq!(db.snapshot().await, before, "{off:?}: not one row changed");
        assert_eq!(log.done()["status"], "blocked", "{off:?}");
        assert!(
            r.runs.iter().all(|run| run.function == GD),
            "{off:?}: nothing sent to storage-cleanup"
        );
        w.assert_all_present().await;
    }
}

/// The runs that crashed, as (function, message key).
fn crashed(r: &Runner) -> Vec<(Function, String)> {
    r.runs
        .iter()
        .filter(|x| x.error.as_deref().is_some_and(|e| e.starts_with("chaos:")))
        .map(|x| (x.function, x.message_key.clone().unwrap_or_default()))
        .collect()
}

/// Destroy the world's group with `arm` applied to the runner; assert the end state.
async fn destroy_with_crashes(case: &str, arm: impl FnOnce(Runner) -> Runner) -> Runner {
    let (db, w) = world().await;
    let mut r = arm(w.runner(&db, StorageModes::ALL_ON).await);
    r.run_until_idle(GD, &w.destroy()).await.unwrap();
    assert!(r.dead_letters().is_empty(), "{case}");
    assert_no_row_left(&db).await;
    w.assert_all_removed().await;
    w.assert_each_repository_removed_once();
    r
}

#[tokio::test]
async fn a_crash_between_the_manifest_and_the_rows_removes_each_item_once() {
    // group-destroy crashes before the COMMIT of each of its first transactions: the
    // messages of that transaction are sent, its rows stay.
    let mut manifest_crashed = false;
    for nth in 1..=8 {
        let case = format!("group-destroy before-commit #{nth}");
        let r = destroy_with_crashes(&case, |mut r| {
            r.plan_crash(Some(GD), CrashPoint::BeforeCommit, nth);
            r
        })
        .await;
        assert_eq!(crashed(&r).len(), 1, "{case}");
        // The crashed transaction had sent storage items: the manifest, then no rows.
        manifest_crashed |= r
            .runs
            .iter()
            .any(|x| x.error.is_some() && x.sent.iter().any(|m| m.message.receiver == SF));
    }
    assert!(
        manifest_crashed,
        "one case crashed between the manifest and the rows"
    );
}

#[tokio::test]
async fn a_crash_at_each_point_of_a_registry_removal_removes_the_image_once() {
    // The first storage-cleanup delivery is the container repository: before its
    // transaction, between the registry calls and the row's COMMIT, after it, at a
    // statement, and before the acknowledgement.
    for point in [
        CrashPoint::BeforeBegin,
        CrashPoint::BeforeCommit,
        CrashPoint::AfterCommit,
        CrashPoint::Statement,
        CrashPoint::BeforeAck,
    ] {
        let case = format!("storage-cleanup {point}");
        let r = destroy_with_crashes(&case, |mut r| {
            r.plan_crash(Some(SF), point, 1);
            r
        })
        .await;
        let c = crashed(&r);
        assert_eq!(c.len(), 1, "{case}");
        assert!(c[0].1.contains(":registry:"), "{case}: {c:?}");
    }
}

#[tokio::test]
async fn random_crashes_duplicates_and_reordering_remove_every_item_once() {
    // Crashes at random points of every delivery, duplicates and reordering (seeded,
    // so each run replays): around the Gitaly and S3 calls (the registry's are the
    // planned crashes above).
    let mut kinds = BTreeSet::new();
    for seed in 1..=6 {
        let spec: engine::chaos::ChaosSpec = format!("seed={seed},duplicate=0.3,reorder,crash=0.2")
            .parse()
            .unwrap();
        let r = destroy_with_crashes(&format!("seed {seed}"), |r| r.with_chaos(spec)).await;
        for (f, key) in crashed(&r) {
            if f == SF {
                kinds.insert(key.split(':').nth(2).unwrap_or_default().to_string());
            }
        }
    }
    assert!(
        kinds.contains("gitaly") && kinds.contains("objects"),
        "a crash around a Gitaly call and an S3 call: {kinds:?}"
    );
}
