//! Issue 46, point 6: the images at a project's root registry path that have no
//! `container_repositories` row (GitLab's legacy root repository, which
//! `Projects::DestroyService#remove_legacy_registry_tags` removes; docs/storage-cleanup.md).
//! With the registry on, `group-destroy` sends one item per destroyed project for its
//! full path, and `storage-cleanup` removes the tags there once the project's row is
//! gone and no live project's route has the path; a project created at that path
//! meanwhile keeps its images. With the registry off nothing changes: no item is sent
//! and the images stay.
//!
//! Here: P200 ("acme-deletion_scheduled-100/web/site") has an image at its root path
//! and no container repository row; P900 ("elsewhere/p900") has one outside the group.

use integration_tests::sinks::registry::TestRegistry;
use shared::storage::registry::Registry;

use super::end_to_end::{OTHER, ROOT};
use super::*;

/// The registry on, the other kinds left.
const REGISTRY_ON: StorageModes = StorageModes {
    gitaly: Mode::Leave,
    registry: Mode::On,
    objects: Mode::Leave,
};

/// The fixture with P200's storage rows (no container repository), due at NOW, and a
/// registry holding an image at P200's root path and one at P900's.
async fn root_world() -> (TestDb, TestRegistry) {
    let db = storage_fixture().await;
    let registry = TestRegistry::start().await;
    registry.push_image(ROOT, "latest", "root layer").await;
    registry.push_image(ROOT, "v1", "root layer one").await;
    registry.push_image(OTHER, "v1", "other layer").await;
    (db, registry)
}

/// A runner at NOW with `modes`, the registry's client and the instance's uuid.
fn runner(db: &TestDb, modes: StorageModes, registry: &TestRegistry) -> Runner {
    db.runner_with(t(NOW), with_modes(modes))
        .with_storage(Arc::new(Storage {
            registry: Some(Registry::new(&registry.client_config()).unwrap()),
            instance_uuid: Some(INSTANCE.into()),
            ..Storage::default()
        }))
}

/// Deliver every group-destroy message until none is left; the storage-cleanup
/// messages it sent, undelivered.
async fn destroy_holding_cleanup(r: &mut Runner) -> Vec<String> {
    let (run, _) = r
        .invoke(GD, &destroy_body(100, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success", "{:?}", run.error);
    let mut held = Vec::new();
    while let Some(p) = r.queue().pop() {
        let body = p.message.envelope.to_body();
        if p.message.receiver == SF {
            held.push(body);
        } else {
            r.invoke(p.message.receiver, &body, p.receive_count)
                .await
                .unwrap();
        }
    }
    held
}

#[tokio::test]
async fn root_path_images_without_a_row_go_with_their_project() {
    let (db, registry) = root_world().await;
    let (log, _g) = capture();
    let mut r = runner(&db, REGISTRY_ON, &registry);
    until_idle(&mut r, 100).await;
    assert!(r.dead_letters().is_empty());
    assert!(!db.exists("projects WHERE id IN (200, 201)").await);
    assert!(!registry.manifest_exists(ROOT, "latest").await);
    assert!(!registry.manifest_exists(ROOT, "v1").await);
    let (status, tags) = registry.tags(ROOT).await;
    assert!(
        status == 404 || tags["tags"].as_array().is_none_or(|t| t.is_empty()),
        "{status} {tags}"
    );
    assert!(
        registry.manifest_exists(OTHER, "v1").await,
        "outside the group"
    );
    let removed = log.with_message("Storage removed");
    let items: Vec<(String, String)> = removed
        .iter()
        .map(|l| {
            (
                l["item"].as_str().unwrap().to_string(),
                l["result"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        items.len(),
        2,
        "one root item per destroyed project: {items:?}"
    );
    assert!(items.contains(&(format!("registry root {ROOT}"), "removed".into())));
    assert!(items.contains(&(
        "registry root acme-deletion_scheduled-100/p201".into(),
        "already_gone".into()
    )));
}

#[tokio::test]
async fn a_project_created_at_the_path_before_cleanup_keeps_its_images() {
    let (db, registry) = root_world().await;
    let mut r = runner(&db, REGISTRY_ON, &registry);
    let held = destroy_holding_cleanup(&mut r).await;
    assert!(!db.exists("projects WHERE id = 200").await);
    assert_eq!(held.len(), 2, "P200's and P201's root paths");
    // A new project at P200's old path (its route in another case: routes are unique
    // without case), with images of its own at the same registry path.
    let fx = Fx(&db);
    fx.group(150, "Acme-Deletion_Scheduled-100", None).await;
    fx.group(151, "Web", Some(150)).await;
    fx.project_path(250, 151, "Site").await;
    registry
        .push_image(ROOT, "v2", "the new project's layer")
        .await;
    for body in &held {
        let (log, _g) = capture();
        let (run, _) = r.invoke(SF, body, 1).await.unwrap();
        assert_eq!(run.outcome, "success", "{:?}", run.error);
        let done = log.done();
        if body.contains(ROOT) {
            assert_eq!(done["outcome"], "reused", "{done}");
        } else {
            assert_eq!(done["outcome"], "already_gone", "{done}");
        }
    }
    for tag in ["latest", "v1", "v2"] {
        assert!(registry.manifest_exists(ROOT, tag).await, "{tag} kept");
    }
    // The new project deleted too (its row and route), a replay of the item removes
    // every tag at the path.
    db.exec(
        "DELETE FROM routes WHERE source_type = 'Project' AND source_id = 250;
         DELETE FROM projects WHERE id = 250",
    )
    .await;
    let root = held.iter().find(|b| b.contains(ROOT)).unwrap();
    let (log, _g) = capture();
    r.invoke(SF, root, 2).await.unwrap();
    assert_eq!(log.done()["outcome"], "removed");
    assert!(!registry.manifest_exists(ROOT, "v2").await);
    assert!(registry.manifest_exists(OTHER, "v1").await);
}

#[tokio::test]
async fn with_the_registry_off_root_path_images_stay_as_before() {
    let (db, registry) = root_world().await;
    let modes = StorageModes {
        registry: Mode::Off,
        ..REGISTRY_ON
    };
    let mut r = runner(&db, modes, &registry);
    until_idle(&mut r, 100).await;
    assert!(r.dead_letters().is_empty());
    assert!(!db.exists("projects WHERE id IN (200, 201)").await);
    assert!(
        r.runs.iter().all(|x| x.function != SF),
        "nothing sent to storage-cleanup"
    );
    assert!(registry.manifest_exists(ROOT, "latest").await);
    assert!(registry.manifest_exists(OTHER, "v1").await);
}

#[tokio::test]
async fn a_malformed_root_path_is_refused_naming_the_field() {
    let (db, registry) = root_world().await;
    let mut r = runner(&db, REGISTRY_ON, &registry);
    for bad in ["site", "Acme/site", "acme/../site", "acme/site.git"] {
        let body = Envelope::new(
            "storage-cleanup.remove",
            format!("storage-cleanup:999:registry:{}", bad.len()),
            "run-forged",
            t(NOW),
            json!({"group_id": 100, "project_id": 999,
                   "item": {"kind": "registry_root", "path": bad}}),
        )
        .to_body();
        let (run, _) = r.invoke(SF, &body, 1).await.unwrap();
        assert_eq!(run.outcome, "permanent", "{bad}: to the DLQ");
        let e = run.error.unwrap_or_default();
        assert!(e.contains("item.path"), "{bad}: the field is named: {e}");
    }
    assert!(registry.manifest_exists(ROOT, "latest").await);
}
