//! Issue 46: storage-cleanup never deletes what GitLab keeps. The mark `group-destroy`
//! leaves on a container repository is one GitLab's own `ContainerRegistry::CleanupWorker`
//! does not act on, and it is undone when the repository is kept (group restored,
//! project transferred, project renamed); a message is bound to the ids it carries, so
//! a missing project id naming a live project's storage is refused before any service
//! call; and nothing is removed from a database of another GitLab instance.

use shared::gitlab::storage::StorageItem;

use super::end_to_end::{repositories, world, World, IMAGE, ROOT};
use super::*;

/// The rows GitLab's `ContainerRegistry::CleanupWorker` acts on at `now`:
/// `delete_scheduled` (status 0), and `delete_ongoing` (2) whose `delete_started_at` is
/// older than its 30-minute stale threshold (reset to delete_scheduled).
async fn gitlab_cleanup_selects(db: &TestDb, now: chrono::DateTime<chrono::Utc>) -> i64 {
    db.count(&format!(
        "container_repositories WHERE status = 0
            OR (status = 2 AND delete_started_at < '{}'::timestamptz - interval '30 minutes')",
        now.to_rfc3339()
    ))
    .await
}

/// The first group-destroy invocation of the world's group: the container repository's
/// `storage-cleanup` message it sent (the project waits for it).
async fn registry_message(db: &TestDb, w: &World, r: &mut Runner) -> String {
    let (run, _) = r.invoke(GD, &w.destroy(), 1).await.unwrap();
    assert_eq!(run.outcome, "success", "{:?}", run.error);
    // P201, without container repositories, went in the same pass: its root registry
    // path is the other item sent.
    let sent: Vec<_> = run
        .sent
        .iter()
        .filter(|m| {
            m.message.receiver == SF
                && m.message
                    .envelope
                    .to_body()
                    .contains("\"container_repository\"")
        })
        .collect();
    assert_eq!(sent.len(), 1, "P200's container repository");
    assert!(db.exists("container_repositories WHERE id = 7").await);
    sent[0].message.envelope.to_body()
}

/// Row 7 carries no deletion state GitLab acts on and no mark of ours.
async fn assert_unmarked(db: &TestDb, w: &World, case: &str) {
    assert!(
        db.exists(
            "container_repositories WHERE id = 7 AND status IS NULL AND delete_started_at IS NULL"
        )
        .await,
        "{case}: row 7 kept, status NULL, mark undone"
    );
    assert_eq!(gitlab_cleanup_selects(db, w.now).await, 0, "{case}");
}

#[tokio::test]
async fn the_registry_mark_is_invisible_to_gitlab_and_undone_on_restore_or_transfer() {
    for case in ["restore", "transfer"] {
        let (db, w) = world().await;
        let mut r = w.runner(&db, StorageModes::ALL_ON).await;
        let msg = registry_message(&db, &w, &mut r).await;
        assert!(
            db.exists("container_repositories WHERE id = 7 AND status IS NULL")
                .await,
            "{case}: group-destroy sets no GitLab deletion state"
        );
        assert_eq!(gitlab_cleanup_selects(&db, w.now).await, 0, "{case}");
        match case {
            "restore" => db.exec("DELETE FROM group_deletion_schedules").await,
            _ => {
                db.exec(
                    "UPDATE projects SET namespace_id = 900 WHERE id = 200;
                     UPDATE namespaces SET parent_id = 900, traversal_ids = '{900,300}' WHERE id = 300;
                     UPDATE routes SET path = 'elsewhere/site' WHERE source_type = 'Project' AND source_id = 200;",
                )
                .await
            }
        }
        let (log, _g) = capture();
        let (run, _) = r.invoke(SF, &msg, 1).await.unwrap();
        assert_eq!(run.outcome, "success", "{case}");
        assert_eq!(log.done()["outcome"], "kept", "{case}");
        assert_unmarked(&db, &w, case).await;
        assert!(w.registry.manifest_exists(IMAGE, "v1").await, "{case}");
        assert!(w.registry.manifest_exists(IMAGE, "v2").await, "{case}");
    }
}

#[tokio::test]
async fn a_stale_registry_path_after_a_rename_is_refused_and_the_current_one_removed() {
    let (db, w) = world().await;
    let mut r = w.runner(&db, StorageModes::ALL_ON).await;
    let msg = registry_message(&db, &w, &mut r).await;
    // The project renamed after the message was sent: its images now live under the
    // new path, and the old path holds someone else's image.
    let renamed = "acme-deletion_scheduled-100/web/renamed/app";
    w.registry.push_image(renamed, "v1", "moved layer").await;
    db.exec(
        "UPDATE projects SET path = 'renamed', name = 'renamed' WHERE id = 200;
         UPDATE routes SET path = 'acme-deletion_scheduled-100/web/renamed'
          WHERE source_type = 'Project' AND source_id = 200;",
    )
    .await;
    let (log, _g) = capture();
    r.invoke(SF, &msg, 1).await.unwrap();
    assert_eq!(log.done()["outcome"], "moved");
    let refused = log.with_message(
        "Storage cleanup refused: the container repository's path is no longer the message's (nothing removed)",
    );
    assert_eq!(refused[0]["current_path"], renamed);
    assert!(
        w.registry.manifest_exists(IMAGE, "v1").await,
        "old path kept"
    );
    assert_unmarked(&db, &w, "rename").await;
    // The next passes send the current path, which goes with the group.
    r.run_until_idle(GD, &w.destroy()).await.unwrap();
    assert!(!db.exists("container_repositories").await);
    assert!(!w.registry.manifest_exists(renamed, "v1").await);
    assert!(
        w.registry.manifest_exists(IMAGE, "v1").await,
        "old path kept"
    );
}

/// One storage-cleanup message for `project` naming `item`.
fn message_for(project: i64, item: StorageItem) -> String {
    Envelope::new(
        "storage-cleanup.remove",
        shared::workers::storage_cleanup::storage_cleanup_key(project, &item),
        "run-forged",
        t(NOW),
        shared::workers::storage_cleanup::StorageCleanupRun {
            group_id: 100,
            project_id: project,
            item,
        },
    )
    .to_body()
}

/// Every item of the live P200 (and P201's repository), each under a project id that
/// never existed.
fn forged_items() -> Vec<StorageItem> {
    let mut items: Vec<StorageItem> = repositories()
        .into_iter()
        .chain([format!("{}.git", disk_path(201))])
        .map(|p| StorageItem::Repository {
            storage: "default".into(),
            relative_path: p,
            snippet_id: None,
        })
        .collect();
    items.extend(
        p200_keys()
            .into_iter()
            .map(|(bucket, key)| StorageItem::Object { bucket, key }),
    );
    items.push(StorageItem::ContainerRepository {
        id: 7,
        path: IMAGE.into(),
    });
    items.push(StorageItem::RegistryRoot { path: ROOT.into() });
    items
}

#[tokio::test]
async fn a_missing_project_id_naming_a_live_projects_storage_calls_no_service() {
    let (db, w) = world().await;
    let mut r = w.runner(&db, StorageModes::ALL_ON).await;
    let (log, _g) = capture();
    for item in forged_items() {
        let what = item.describe();
        let (run, _) = r.invoke(SF, &message_for(999_999, item), 1).await.unwrap();
        if what.starts_with("registry root ") {
            // Bound under lock: a live project's route has the path.
            assert_eq!(log.done()["outcome"], "reused", "{what}");
        } else if what.starts_with("registry ") {
            // Bound under lock: row 7 is not project 999999's.
            assert_eq!(log.done()["outcome"], "already_gone", "{what}");
        } else if what.starts_with("objects lfs:") {
            // Content-addressed, shared by projects: bound to the oid, which a live
            // `lfs_objects` row still has.
            assert_eq!(log.done()["outcome"], "reused", "{what}");
        } else {
            assert_eq!(run.outcome, "permanent", "{what}: to the DLQ");
            let e = run.error.unwrap_or_default();
            assert!(
                e.contains("item.relative_path") || e.contains("item.key"),
                "{what}: the field is named: {e}"
            );
        }
    }
    assert!(w.gitaly.calls().is_empty(), "no Gitaly call");
    w.assert_all_present().await;
    assert!(w.registry.manifest_exists(ROOT, "latest").await);
    assert!(db.exists("container_repositories WHERE id = 7").await);
}

#[tokio::test]
async fn another_instances_database_is_refused_before_any_service_call() {
    let (db, w) = world().await;
    db.exec("DELETE FROM container_repositories; DELETE FROM projects WHERE id = 200")
        .await;
    let item = StorageItem::Repository {
        storage: "default".into(),
        relative_path: format!("{}.git", disk_path(200)),
        snippet_id: None,
    };
    for (configured, named) in [
        (Some("11111111-2222-3333-4444-555555555555"), "differs"),
        (None, "missing"),
    ] {
        let storage = Arc::new(Storage {
            gitaly: Some(w.gitaly_client()),
            instance_uuid: configured.map(str::to_string),
            ..Storage::default()
        });
        let mut r = db
            .runner_with(w.now, with_modes(StorageModes::ALL_ON))
            .with_storage(storage);
        let (log, _g) = capture();
        r.invoke(SF, &message_for(200, item.clone()), 1)
            .await
            .unwrap();
        assert_eq!(log.done()["outcome"], "failed", "{named}");
        let e = log.one("Storage cleanup failed");
        assert_eq!(e["error_class"], "config", "{named}");
        assert!(
            e["error"]
                .as_str()
                .unwrap()
                .contains("GITLAB_INSTANCE_UUID"),
            "{named}: {e}"
        );
    }
    assert!(w.gitaly.calls().is_empty(), "no Gitaly call");
    assert!(w
        .gitaly
        .exists("default", &format!("{}.git", disk_path(200))));
}
