//! What each kind's mode does with a project's storage: `off` blocks the group whole,
//! `leave` deletes the rows and logs every item left, `on` sends the manifest before
//! the rows go; a dry run lists it without calling a service.

use super::*;

#[tokio::test]
async fn with_every_kind_off_a_group_holding_storage_is_blocked_with_nothing_deleted() {
    let db = storage_fixture().await;
    let before = db.snapshot().await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success", "acknowledged: no retry loop");
    assert!(r.runs[0].sent.is_empty(), "nothing sent");
    assert_eq!(db.snapshot().await, before, "not one row changed");
    let e = log.one("Group destroy blocked: the group's projects hold storage this deployment does not remove; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run");
    let blocking = e["blocking"].as_str().unwrap();
    assert!(
        blocking.starts_with("4 Git repositories (STORAGE_GITALY=off)"),
        "{blocking}"
    );
    assert!(
        blocking.contains("4 files (STORAGE_OBJECTS=off)"),
        "{blocking}"
    );
    assert_eq!(log.done()["status"], "blocked");
}

#[tokio::test]
async fn with_the_registry_off_a_container_image_blocks_the_group_even_with_the_rest_on() {
    let db = storage_fixture().await;
    container_repository(&db).await;
    let before = db.snapshot().await;
    let modes = StorageModes {
        registry: Mode::Off,
        ..StorageModes::ALL_ON
    };
    let (_, log, _) = destroy_with(&db, 100, with_modes(modes)).await;
    assert_eq!(db.snapshot().await, before, "not one row changed");
    assert_eq!(log.done()["status"], "blocked");
    assert_eq!(log.done()["blocking_rows"], 1);
}

#[tokio::test]
async fn leave_deletes_the_rows_and_logs_every_item_left_in_place() {
    let db = storage_fixture().await;
    let modes = StorageModes {
        gitaly: Mode::Leave,
        registry: Mode::Off,
        objects: Mode::Leave,
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), with_modes(modes));
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    assert!(
        r.runs.iter().all(|run| run.function != SF),
        "nothing for storage-cleanup"
    );
    let left =
        log.one("Group destroy left storage in place (STORAGE_*=leave, or files on local disk)");
    assert_eq!(left["project_id"], 200);
    assert_eq!(left["storage_items_left"], 8, "4 repositories and 4 files");
    let items = left["items"].as_str().unwrap();
    assert!(
        items.contains(&format!("gitaly default:{}.wiki.git", disk_path(200))),
        "{items}"
    );
    // The rows no foreign key removes went with the project; the shared object stayed.
    assert!(!db.exists("uploads").await);
    assert_eq!(
        db.scalar::<String>("SELECT string_agg(oid, ',') FROM lfs_objects")
            .await,
        OID_SHARED
    );
    assert_eq!(db.count("lfs_objects_projects").await, 1);
    assert!(!db.exists("project_repositories").await);
    assert!(!db.exists("snippet_repositories").await);
    assert!(!db.exists("packages_package_files").await);
}

#[tokio::test]
async fn on_sends_one_message_per_item_before_the_rows_go() {
    let db = storage_fixture().await;
    let (r, log, _) = destroy_with(&db, 100, with_modes(StorageModes::ALL_ON)).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    let sent: Vec<_> = r.runs[0]
        .sent
        .iter()
        .filter(|m| m.message.receiver == SF)
        .map(|m| m.message.envelope.clone())
        .collect();
    assert_eq!(
        sent.len(),
        10,
        "4 repositories, 4 files, 2 root registry paths (P200's, P201's)"
    );
    assert_eq!(log.done()["storage_items_sent"], 10);
    let paths: Vec<String> = sent
        .iter()
        .map(|e| {
            let item = &e.payload["item"];
            match item["kind"].as_str().unwrap() {
                "repository" => item["relative_path"].as_str().unwrap().to_string(),
                "registry_root" => format!("root:{}", item["path"].as_str().unwrap()),
                _ => format!(
                    "{}:{}",
                    item["bucket"].as_str().unwrap(),
                    item["key"].as_str().unwrap()
                ),
            }
        })
        .collect();
    let dp = disk_path(200);
    for p in [
        format!("{dp}.git"),
        format!("{dp}.wiki.git"),
        format!("{dp}.design.git"),
        format!("{}.git", snippet_path(30)),
    ] {
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    for (b, k) in p200_keys() {
        let p = format!("{}:{k}", b.as_str());
        assert!(paths.contains(&p), "{p} in {paths:?}");
    }
    assert!(
        !paths.iter().any(|p| p.contains(&OID_SHARED[4..])),
        "the shared LFS object is not in the manifest"
    );
    for root in [
        "root:acme-deletion_scheduled-100/web/site",
        "root:acme-deletion_scheduled-100/p201",
    ] {
        assert!(paths.iter().any(|p| p == root), "{root}: {paths:?}");
    }
    for e in sent
        .iter()
        .filter(|e| e.payload["item"]["kind"] != "registry_root")
    {
        assert_eq!(e.payload["group_id"], 100);
        assert_eq!(e.payload["project_id"], 200);
        assert!(
            e.message_key.starts_with("storage-cleanup:200:"),
            "{}",
            e.message_key
        );
    }
}

#[tokio::test]
async fn a_dry_run_until_idle_lists_the_storage_per_kind_and_changes_nothing() {
    let db = storage_fixture().await;
    container_repository(&db).await;
    let before = db.snapshot().await;
    // No client at all: a dry run calls no service.
    let mut r = db.runner_with(t(NOW), with_modes(StorageModes::ALL_ON));
    let plan = r
        .plan_until_idle(GD, &destroy_body(100, 11, "2025-03-03"))
        .await
        .unwrap();
    assert_eq!(db.snapshot().await, before, "rolled back");
    assert_eq!(plan.removed_groups, vec![100, 101]);
    let kinds = &plan.storage.kinds;
    assert_eq!(kinds["gitaly"].0, 4);
    assert_eq!(kinds["objects"].0, 4);
    // The container repository, then (its row gone in the plan) each project's root
    // path.
    assert_eq!(
        kinds["registry"],
        (
            3,
            vec![
                "acme-deletion_scheduled-100/web/site/app".to_string(),
                "acme-deletion_scheduled-100/p201".to_string(),
                "acme-deletion_scheduled-100/web/site".to_string()
            ]
        )
    );
    assert_eq!(
        kinds["gitaly"].1[0],
        format!("default:{}.design.git", disk_path(200)),
        "sorted by storage and path"
    );
    let json = plan.to_json();
    assert_eq!(json["plan"]["storage"]["objects"]["count"], 4);
}
