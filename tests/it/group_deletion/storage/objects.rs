//! Files in object storage (moto's S3): a destroyed project's uploads, the LFS objects
//! only it linked and its package files are deleted by `storage-cleanup` once the rows
//! are gone; an object shared with another project, an object already gone, a project
//! still there and an LFS oid uploaded again are each handled without a wrong delete.

use super::*;

/// The storage-cleanup message of one object of P200.
fn object_body(bucket: Bucket, key: &str, hop: u64) -> String {
    let item = shared::gitlab::storage::StorageItem::Object {
        bucket,
        key: key.to_string(),
    };
    let mut e = Envelope::new(
        "storage-cleanup.remove",
        shared::workers::storage_cleanup::storage_cleanup_key(200, &item),
        "run-1",
        t(NOW),
        shared::workers::storage_cleanup::StorageCleanupRun {
            group_id: 100,
            project_id: 200,
            item,
        },
    );
    e.hop = hop;
    e.to_body()
}

#[tokio::test]
async fn a_destroyed_projects_files_leave_s3_and_a_shared_lfs_object_stays() {
    let db = storage_fixture().await;
    let b = buckets().await;
    for (bucket, key) in p200_keys() {
        put(&b, bucket, &key).await;
    }
    put(&b, Bucket::Lfs, &shared_lfs_key()).await;
    let s3 = objects(&b).await;
    let (log, _g) = capture();
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    for (bucket, key) in p200_keys() {
        assert!(!s3.exists(bucket, &key).await.unwrap(), "{key} removed");
    }
    assert!(
        s3.exists(Bucket::Lfs, &shared_lfs_key()).await.unwrap(),
        "P900 still links the shared object"
    );
    let removed = log.with_message("Storage removed");
    assert_eq!(removed.len(), 4);
    assert!(removed.iter().all(|l| l["result"] == "removed"));
    let emf: Vec<_> = log
        .with_message("metrics")
        .into_iter()
        .filter(|m| m["function"] == "storage-cleanup")
        .collect();
    assert_eq!(emf.len(), 4);
    assert!(emf
        .iter()
        .all(|m| m["objects_removed"] == 1.0 && m["objects_failed"] == 0.0));
}

#[tokio::test]
async fn a_replayed_object_message_finds_it_already_gone() {
    let db = storage_fixture().await;
    db.exec("DELETE FROM projects WHERE id = 200").await;
    let b = buckets().await;
    let (bucket, key) = p200_keys().remove(0);
    put(&b, bucket, &key).await;
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    let (log, _g) = capture();
    for expected in ["removed", "already_gone"] {
        r.invoke(SF, &object_body(bucket, &key, 0), 1)
            .await
            .unwrap();
        assert_eq!(log.done()["outcome"], expected);
    }
    assert_eq!(log.with_message("Storage removed").len(), 2);
}

#[tokio::test]
async fn an_item_whose_project_still_exists_is_re_sent_later_and_kept_once_restored() {
    let db = storage_fixture().await;
    let b = buckets().await;
    let (bucket, key) = p200_keys().remove(0);
    put(&b, bucket, &key).await;
    let s3 = objects(&b).await;
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    let (log, _g) = capture();
    let (run, _) = r
        .invoke(SF, &object_body(bucket, &key, 0), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(log.done()["outcome"], "project_present");
    let resent = &run.sent[0].message;
    assert_eq!(
        (resent.receiver, resent.delay_s),
        (SF, 30),
        "re-sent after 30 s"
    );
    assert!(s3.exists(bucket, &key).await.unwrap(), "not removed");
    // The group restored: the item is kept for good.
    db.exec("DELETE FROM group_deletion_schedules").await;
    r.invoke(SF, &object_body(bucket, &key, 1), 1)
        .await
        .unwrap();
    assert_eq!(log.done()["outcome"], "kept");
    assert!(s3.exists(bucket, &key).await.unwrap(), "kept");
}

#[tokio::test]
async fn an_lfs_oid_uploaded_again_keeps_its_object() {
    let db = storage_fixture().await;
    db.exec("DELETE FROM projects WHERE id = 200").await;
    let b = buckets().await;
    let key = format!("{}/{}/{}", &OID_OWN[..2], &OID_OWN[2..4], &OID_OWN[4..]);
    put(&b, Bucket::Lfs, &key).await;
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    let (log, _g) = capture();
    r.invoke(SF, &object_body(Bucket::Lfs, &key, 0), 1)
        .await
        .unwrap();
    assert_eq!(
        log.done()["outcome"],
        "reused",
        "lfs_objects row 1 still has the oid"
    );
    assert!(objects(&b).await.exists(Bucket::Lfs, &key).await.unwrap());
}

#[tokio::test]
async fn a_failing_bucket_is_retried_with_growing_delays_then_fails_naming_the_item() {
    let db = storage_fixture().await;
    db.exec("DELETE FROM projects WHERE id = 200").await;
    let mut b = buckets().await;
    b.insert(Bucket::Uploads, "no-such-bucket-anywhere".into());
    let (bucket, key) = p200_keys().remove(0);
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    let (log, _g) = capture();
    let mut delays = Vec::new();
    for hop in 0..=6u64 {
        let (run, _) = r
            .invoke(SF, &object_body(bucket, &key, hop), 1)
            .await
            .unwrap();
        match run.sent.first() {
            Some(s) => delays.push(s.message.delay_s),
            None => {
                assert_eq!(hop, 6, "the last attempt is not re-sent");
                assert_eq!(run.outcome, "retryable", "the record fails towards the DLQ");
            }
        }
    }
    assert_eq!(delays, shared::workers::storage_cleanup::BACKOFF_S.to_vec());
    let e = log.with_message("Storage cleanup failed");
    assert_eq!(e.len(), 7);
    assert_eq!(e[0]["error_class"], "s3");
    assert!(
        e[0]["item"]
            .as_str()
            .unwrap()
            .starts_with("objects uploads:@hashed/"),
        "{}",
        e[0]["item"]
    );
    assert!(e[0]["error"]
        .as_str()
        .unwrap()
        .contains("no-such-bucket-anywhere"));
}

/// From GitLab 19.3 a link may name its LFS object by oid alone (`lfs_object_id` NULL):
/// P900's link to the shared object in that shape still keeps it (its row and its
/// object). On an older model the shape does not exist: the test says so and stops.
#[tokio::test]
async fn an_lfs_object_another_project_links_by_oid_alone_stays() {
    let db = storage_fixture().await;
    let has_oid: bool = db
        .scalar(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns
              WHERE table_name = 'lfs_objects_projects' AND column_name = 'oid')",
        )
        .await;
    if !has_oid {
        assert!(
            matches!(
                integration_tests::db::gitlab_version(),
                engine::migrate::GitlabVersion::V18_2
                    | engine::migrate::GitlabVersion::V18_8
                    | engine::migrate::GitlabVersion::V18_11
            ),
            "only releases before 19.3 lack lfs_objects_projects.oid"
        );
        return;
    }
    db.exec(&format!(
        "UPDATE lfs_objects_projects SET lfs_object_id = NULL, oid = '{OID_SHARED}'
          WHERE project_id = 900"
    ))
    .await;
    let b = buckets().await;
    for (bucket, key) in p200_keys() {
        put(&b, bucket, &key).await;
    }
    put(&b, Bucket::Lfs, &shared_lfs_key()).await;
    let s3 = objects(&b).await;
    let mut r = db
        .runner_with(t(NOW), with_modes(OBJECTS_ON))
        .with_storage(storage_with(Some(objects(&b).await)));
    until_idle(&mut r, 100).await;
    assert!(!db.exists("namespaces WHERE id = 100").await, "destroyed");
    assert!(
        db.exists(&format!("lfs_objects WHERE oid = '{OID_SHARED}'"))
            .await,
        "the shared object's row stays"
    );
    assert!(
        s3.exists(Bucket::Lfs, &shared_lfs_key()).await.unwrap(),
        "P900 still links the shared object by its oid"
    );
    let own = &p200_keys()[2];
    assert!(
        !s3.exists(own.0, &own.1).await.unwrap(),
        "P200's own LFS object removed"
    );
}
