//! Issue 46: storage GitLab keeps or refuses to touch. A group's own uploads (its
//! avatar) are blocked with `off`, left with their rows deleted and logged with
//! `leave`, and block the group with `on` (storage-cleanup does not remove them); a
//! project whose repository storage move is scheduled or started is not destroyed
//! until the move ends (GitLab's `Projects::DestroyService` refuses it); and a package
//! file uploaded to its final path, in a bucket configured with GitLab's bucket prefix,
//! is removed where GitLab stored it.

use super::*;

/// G101's avatar in object storage, as GitLab records it.
async fn group_avatar(db: &TestDb) {
    db.exec(
        "INSERT INTO uploads (size, path, model_id, model_type, uploader, created_at, store, namespace_id)
         VALUES (10, 'uploads/-/system/group/avatar/101/logo.png', 101, 'Namespace', 'AvatarUploader',
                 '2025-01-01', 2, 101)",
    )
    .await;
}

const BLOCKED: &str = "Group destroy blocked: the group's projects hold storage this deployment does not remove; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run";

#[tokio::test]
async fn a_group_avatar_is_blocked_off_left_with_leave_and_blocks_on() {
    for (modes, case) in [
        (StorageModes::default(), "off"),
        (StorageModes::ALL_ON, "on"),
    ] {
        let db = fixture().await;
        group_avatar(&db).await;
        let before = db.snapshot().await;
        let (log, _g) = capture();
        let mut r = db.runner_with(t(NOW), with_modes(modes));
        until_idle(&mut r, 100).await;
        assert_eq!(db.snapshot().await, before, "{case}: not one row changed");
        assert_eq!(log.done()["status"], "blocked", "{case}");
        let blocking = log.one(BLOCKED)["blocking"].as_str().unwrap().to_string();
        let expected = if case == "off" {
            "1 files (STORAGE_OBJECTS=off)"
        } else {
            "1 uploads of the groups or beside their projects (group avatars"
        };
        assert!(blocking.contains(expected), "{case}: {blocking}");
    }
    let db = fixture().await;
    group_avatar(&db).await;
    let leave = StorageModes {
        gitaly: Mode::Leave,
        registry: Mode::Off,
        objects: Mode::Leave,
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), with_modes(leave));
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    assert!(
        !db.exists("uploads").await,
        "the avatar's row went with G101"
    );
    let left =
        log.one("Group destroy left storage in place (STORAGE_*=leave, or files on local disk)");
    assert_eq!(left["namespace_id"], 101);
    assert_eq!(
        left["items"],
        "objects uploads:uploads/-/system/group/avatar/101/logo.png"
    );
}

#[tokio::test]
async fn a_repository_storage_move_in_progress_holds_its_project_until_it_ends() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO project_repository_storage_moves
           (created_at, updated_at, project_id, state, source_storage_name, destination_storage_name)
         VALUES ('2025-03-09', '2025-03-09', 200, 3, 'default', 'other')",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), Settings::default());
    until_idle(&mut r, 100).await;
    assert!(db.exists("projects WHERE id = 200").await, "P200 kept");
    assert!(db.exists("namespaces WHERE id = 100").await);
    assert_eq!(log.done()["status"], "blocked");
    let line = log.one("Group destroy blocked: rows below the group cannot be deleted; an operator must move or delete them, then the next cron run destroys the group");
    assert!(
        line["blocking"]
            .to_string()
            .contains("repository storage move in progress"),
        "{line}"
    );
    // Finished (4): the next run destroys the group.
    db.exec("UPDATE project_repository_storage_moves SET state = 4")
        .await;
    let mut r = db.runner_with(t(NOW), Settings::default());
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
}

#[tokio::test]
async fn a_package_file_at_its_final_path_in_a_prefixed_bucket_is_removed() {
    let db = storage_fixture().await;
    let h = sha(200);
    let final_path = format!(
        "{}/{}/{h}/@final/1f/2e/3d4c5b6a79881726354453627180",
        &h[..2],
        &h[2..4]
    );
    db.exec(&format!(
        "UPDATE packages_package_files SET file_final_path = '{final_path}' WHERE id = 41"
    ))
    .await;
    let mut b = buckets().await;
    let name = b[&Bucket::Packages].clone();
    b.insert(Bucket::Packages, format!("{name}/gitlab/packages"));
    // Where GitLab stored it: the final path under the bucket prefix.
    let aws = integration_tests::aws::moto_config().await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&aws)
            .force_path_style(true)
            .build(),
    );
    let stored = format!("gitlab/packages/{final_path}");
    s3.put_object()
        .bucket(&name)
        .key(&stored)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(b"pkg"))
        .send()
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    let gone = s3.get_object().bucket(&name).key(&stored).send().await;
    assert!(gone.is_err(), "the package file left the bucket");
    let removed = log.with_message("Storage removed");
    let pkg = removed
        .iter()
        .find(|l| l["item"] == format!("objects packages:{final_path}"))
        .unwrap_or_else(|| panic!("{removed:?}"));
    assert_eq!(pkg["result"], "removed");
}
