//! The container registry client (`shared::storage::registry`) against a real registry
//! (Debian's `docker-registry`, Distribution 2.8, token auth as GitLab configures it):
//! deleting a repository's images, replays, unknown repositories, a token the registry
//! refuses, a registry that is down, nested paths, and what the catalogue shows.

use integration_tests::sinks::certs::TestCa;
use integration_tests::sinks::registry::{key_and_certificate, TestRegistry};
use integration_tests::t;
use shared::error::Error;
use shared::storage::registry::{Registry, RegistryConfig, RepositoryRemoval};
use shared::storage::Removal;

fn client(reg: &TestRegistry) -> Registry {
    Registry::new(&reg.client_config()).unwrap()
}

/// The clock the client signs with: the real time, because the registry checks
/// `nbf`/`exp` against its own clock (the injected `now` is what the function passes).
fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

#[tokio::test]
async fn deleting_a_repository_removes_its_tags_and_manifests() {
    let reg = TestRegistry::start().await;
    let path = "group/project/app";
    let a = reg.push_image(path, "v1", "layer one").await;
    // `latest` shares v1's manifest; v2 is another image.
    let a2 = reg.push_image(path, "latest", "layer one").await;
    assert_eq!(a.digest, a2.digest);
    let b = reg.push_image(path, "v2", "layer two").await;
    assert_ne!(a.digest, b.digest);
    let other = reg
        .push_image("group/project/other", "v1", "layer one")
        .await;
    assert!(reg.catalogue().await.contains(&path.to_string()));
    let r = client(&reg);
    let mut tags = r.tags(path, now()).await.unwrap().unwrap();
    tags.sort();
    assert_eq!(tags, ["latest", "v1", "v2"]);

    let removed = r.delete_repository(path, now()).await.unwrap();
    assert_eq!(
        removed,
        RepositoryRemoval {
            removal: Removal::Removed,
            manifests_deleted: 2,
            tags: 3,
            // config (shared by both images) + two layers.
            blobs_unlinked: 3,
        },
        "registry log:\n{}",
        reg.log()
    );
    for reference in ["v1", "v2", "latest", &a.digest, &b.digest] {
        assert!(
            !reg.manifest_exists(path, reference).await,
            "{reference} still there"
        );
    }
    let (status, body) = reg.tags(path).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["tags"].as_array().is_none_or(|t| t.is_empty()),
        "{body}"
    );
    // The other repository, sharing the layer, is untouched.
    assert!(reg.manifest_exists("group/project/other", "v1").await);
    assert!(
        reg.manifest_exists("group/project/other", &other.digest)
            .await
    );
    for b in &other.blobs {
        assert!(reg.blob_exists("group/project/other", b).await);
    }
    for blob in a.blobs.iter().chain(&b.blobs) {
        assert!(!reg.blob_exists(path, blob).await, "{blob} still linked");
    }

    // A replay finds nothing left.
    let again = r.delete_repository(path, now()).await.unwrap();
    assert_eq!(
        again,
        RepositoryRemoval {
            removal: Removal::AlreadyGone,
            manifests_deleted: 0,
            tags: 0,
            blobs_unlinked: 0,
        }
    );
    assert_eq!(r.tags(path, now()).await.unwrap(), Some(vec![]));
}

/// What Distribution 2.8 does with the catalogue: it lists every repository
/// directory that has a `_layers` directory, and neither the API (manifest and blob
/// link deletes) nor its garbage collector removes that directory. So after the
/// client's delete, and after the garbage collector an operator runs on a schedule,
/// the catalogue still names the repository, with no tag, no manifest and (after the
/// collector) no data of its own. This test pins that finding: if a registry
/// version drops emptied repositories from the catalogue, it fails and the
/// documentation (docs/storage-cleanup.md) must say so.
#[tokio::test]
async fn the_catalogue_keeps_an_emptied_repository_even_after_garbage_collection() {
    let reg = TestRegistry::start().await;
    let path = "group/project/app";
    let pushed = reg.push_image(path, "v1", "a layer of its own").await;
    // Same config blob, another layer: the shared config must survive.
    let kept = reg
        .push_image("group/project/kept", "v1", "kept layer")
        .await;
    assert_eq!(pushed.blobs[0], kept.blobs[0], "the config blob is shared");
    let layer = &pushed.blobs[1];

    let removed = client(&reg).delete_repository(path, now()).await.unwrap();
    assert_eq!((removed.manifests_deleted, removed.blobs_unlinked), (1, 2));
    assert!(!reg.manifest_exists(path, &pushed.digest).await);
    // Unlinked: not served under this path any more, though its data is still stored.
    assert!(!reg.blob_exists(path, layer).await);
    assert!(reg.blob_data_exists(layer));
    assert!(reg.blob_exists("group/project/kept", &kept.blobs[0]).await);
    let catalogue = reg.catalogue().await;
    assert!(catalogue.contains(&path.to_string()), "{catalogue:?}");
    assert!(reg.layers_dir_exists(path));

    let gc = reg.garbage_collect();
    // The collector reclaimed the deleted image's own layer and kept the shared config.
    assert!(!reg.blob_data_exists(layer), "{gc}");
    assert!(reg.blob_data_exists(&kept.blobs[0]), "{gc}");
    assert!(reg.manifest_exists("group/project/kept", "v1").await);
    // …and the emptied repository is still in the catalogue.
    assert!(reg.layers_dir_exists(path), "{gc}");
    assert_eq!(
        reg.catalogue().await,
        ["group/project/app", "group/project/kept"],
        "{gc}"
    );
    let (status, body) = reg.tags(path).await;
    assert_eq!(status, 200);
    assert!(
        body["tags"].as_array().is_none_or(|t| t.is_empty()),
        "{body}"
    );
}

#[tokio::test]
async fn a_repository_never_pushed_is_already_gone() {
    let reg = TestRegistry::start().await;
    let r = client(&reg);
    assert_eq!(r.tags("group/project/never", now()).await.unwrap(), None);
    assert_eq!(
        r.delete_repository("group/project/never", now())
            .await
            .unwrap(),
        RepositoryRemoval {
            removal: Removal::AlreadyGone,
            manifests_deleted: 0,
            tags: 0,
            blobs_unlinked: 0,
        }
    );
}

#[tokio::test]
async fn an_index_is_deleted_with_its_child_manifests() {
    let reg = TestRegistry::start().await;
    let path = "group/project/multi";
    // The children are pushed by digest, untagged: only the index reaches them.
    let amd = reg.push_image(path, "", "amd64 layer").await;
    let arm = reg.push_image(path, "", "arm64 layer").await;
    let index = reg.push_index(path, "v1", &[&amd, &arm]).await;
    let r = client(&reg);
    let removed = r.delete_repository(path, now()).await.unwrap();
    assert_eq!(removed.removal, Removal::Removed);
    // One tag; manifests: the index and its two children; blobs: the shared config
    // and two layers.
    assert_eq!(
        (
            removed.tags,
            removed.manifests_deleted,
            removed.blobs_unlinked
        ),
        (1, 3, 3)
    );
    for m in [&index, &amd.digest, &arm.digest] {
        assert!(!reg.manifest_exists(path, m).await, "{m}");
    }
}

#[tokio::test]
async fn a_nested_path_is_deleted() {
    let reg = TestRegistry::start().await;
    let path = "top/sub/deeper/project/image-name";
    let pushed = reg.push_image(path, "1.0", "nested").await;
    let removed = client(&reg).delete_repository(path, now()).await.unwrap();
    assert_eq!(removed.removal, Removal::Removed);
    assert_eq!((removed.manifests_deleted, removed.tags), (1, 1));
    assert!(!reg.manifest_exists(path, &pushed.digest).await);
}

#[tokio::test]
async fn a_token_signed_with_another_key_is_a_registry_error_without_the_token() {
    let reg = TestRegistry::start().await;
    let path = "group/project/app";
    reg.push_image(path, "v1", "layer").await;
    let (other_key, _) = key_and_certificate();
    let r = Registry::new(&RegistryConfig {
        key_pem: other_key,
        ..reg.client_config()
    })
    .unwrap();
    let e = r.delete_repository(path, now()).await.unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(
            e,
            Error::Storage {
                kind: "registry",
                ..
            }
        ),
        "{m}"
    );
    assert_eq!(e.class(), "registry");
    assert!(
        m.contains(path) && m.contains("GET") && m.contains("401"),
        "{m}"
    );
    assert!(m.contains("UNAUTHORIZED"), "the registry's error code: {m}");
    assert!(!m.contains("Bearer") && !m.contains("eyJ"), "{m}");
    // Nothing was deleted.
    assert!(reg.manifest_exists(path, "v1").await);
}

#[tokio::test]
async fn an_expired_token_is_refused() {
    let reg = TestRegistry::start().await;
    let path = "group/project/app";
    reg.push_image(path, "v1", "layer").await;
    // Issued 10 minutes ago: expired after GitLab's 5.
    let e = client(&reg)
        .delete_repository(path, now() - chrono::Duration::minutes(10))
        .await
        .unwrap_err();
    assert_eq!(e.class(), "registry", "{e}");
    assert!(e.to_string().contains("401"), "{e}");
    assert!(reg.manifest_exists(path, "v1").await);
}

#[tokio::test]
async fn https_with_the_ca_bundle_works_and_without_it_fails() {
    let ca = TestCa::new();
    let reg = TestRegistry::start_tls(&ca.issue(&[], &["127.0.0.1"])).await;
    let dir =
        std::env::temp_dir().join(format!("hk-registry-ca-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).unwrap();
    let bundle = dir.join("ca.pem");
    std::fs::write(&bundle, ca.cert_pem()).unwrap();
    let trusting = Registry::new(&RegistryConfig {
        ca_bundle: Some(bundle),
        ..reg.client_config()
    })
    .unwrap();
    // A full exchange over TLS: the token is accepted, the repository unknown.
    assert_eq!(
        trusting.tags("group/project/app", now()).await.unwrap(),
        None,
        "registry log:\n{}",
        reg.log()
    );
    let e = client(&reg)
        .tags("group/project/app", now())
        .await
        .unwrap_err();
    assert_eq!(e.class(), "registry", "{e}");
    assert!(e.to_string().contains("no response"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_registry_that_is_down_is_a_registry_error() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (key_pem, _) = key_and_certificate();
    let r = Registry::new(&RegistryConfig {
        api_url: format!("http://127.0.0.1:{port}"),
        issuer: "gitlab-issuer".into(),
        service: "container_registry".into(),
        key_pem,
        ca_bundle: None,
        timeout: std::time::Duration::from_secs(5),
    })
    .unwrap();
    let e = r
        .delete_repository("group/project/app", t("2026-11-26T12:00:00Z"))
        .await
        .unwrap_err();
    let m = e.to_string();
    assert!(
        matches!(
            e,
            Error::Storage {
                kind: "registry",
                ..
            }
        ),
        "{m}"
    );
    assert!(
        m.contains("group/project/app") && m.contains("no response"),
        "{m}"
    );
}
