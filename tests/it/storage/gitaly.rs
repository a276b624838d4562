//! `shared::storage::gitaly` against the Gitaly stand-in (`tests/sinks/gitaly.rs`):
//! removal, idempotence, the v2 token, configuration and outage errors, and the wiki
//! and design repositories of a project.

use std::time::Duration;

use chrono::Utc;
use integration_tests::sinks::gitaly::GitalyStub;
use shared::error::Error;
use shared::storage::gitaly::{Gitaly, GitalyConfig};
use shared::storage::Removal;

const TOKEN: &str = "gitaly-secret-4b1d";
const PROJECT: &str =
    "@hashed/6b/86/6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b.git";

fn client(storages: &[(&str, String)], token: Option<&str>) -> Gitaly {
    Gitaly::new(&GitalyConfig {
        storages: storages
            .iter()
            .map(|(n, a)| (n.to_string(), a.clone()))
            .collect(),
        token: token.map(str::to_string),
        timeout: Duration::from_secs(10),
    })
    .unwrap()
}

/// The message of a `gitaly` storage error (panics on anything else).
fn storage_error(result: shared::error::Result<Removal>) -> String {
    match result {
        Err(e @ Error::Storage { kind: "gitaly", .. }) => {
            assert_eq!(e.class(), "gitaly");
            e.to_string()
        }
        other => panic!("expected a gitaly storage error, got {other:?}"),
    }
}

#[tokio::test]
async fn removes_an_existing_repository_with_the_token_accepted() {
    let stub = GitalyStub::start(&["default"], Some(TOKEN)).await;
    stub.create_repo("default", PROJECT);
    stub.create_repo("default", "@hashed/d4/73/other.git");
    let gitaly = client(&[("default", stub.address())], Some(TOKEN));

    let removal = gitaly
        .remove_repository("default", PROJECT, Utc::now())
        .await
        .unwrap();

    assert_eq!(removal, Removal::Removed);
    assert!(!stub.exists("default", PROJECT));
    assert!(
        stub.exists("default", "@hashed/d4/73/other.git"),
        "only the one asked for"
    );
    let calls = stub.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].storage, "default");
    assert_eq!(calls[0].relative_path, PROJECT);
    assert_eq!(calls[0].authorized, Some(true));
    assert_eq!(calls[0].code, "OK");
}

#[tokio::test]
async fn a_second_removal_is_already_gone() {
    let stub = GitalyStub::start(&["default"], None).await;
    stub.create_repo("default", PROJECT);
    let gitaly = client(&[("default", stub.address())], None);

    let first = gitaly
        .remove_repository("default", PROJECT, Utc::now())
        .await
        .unwrap();
    let second = gitaly
        .remove_repository("default", PROJECT, Utc::now())
        .await
        .unwrap();

    assert_eq!((first, second), (Removal::Removed, Removal::AlreadyGone));
    let codes: Vec<String> = stub.calls().into_iter().map(|c| c.code).collect();
    assert_eq!(codes, ["OK", "NOT_FOUND"]);
    assert_eq!(
        stub.calls()[1].authorized,
        None,
        "no token configured: no check"
    );
}

#[tokio::test]
async fn a_wrong_token_is_a_gitaly_error_without_the_token() {
    let stub = GitalyStub::start(&["default"], Some(TOKEN)).await;
    stub.create_repo("default", PROJECT);
    let wrong = "not-the-gitaly-secret";
    let gitaly = client(&[("default", stub.address())], Some(wrong));

    let msg = storage_error(
        gitaly
            .remove_repository("default", PROJECT, Utc::now())
            .await,
    );

    assert!(msg.contains("PermissionDenied"), "{msg}");
    assert!(msg.contains(PROJECT) && msg.contains("default"), "{msg}");
    assert!(!msg.contains(wrong) && !msg.contains(TOKEN), "{msg}");
    assert!(stub.exists("default", PROJECT));
    assert_eq!(stub.calls()[0].authorized, Some(false));
}

#[tokio::test]
async fn no_token_or_a_stale_clock_is_refused_by_a_gitaly_with_a_token() {
    let stub = GitalyStub::start(&["default"], Some(TOKEN)).await;
    stub.create_repo("default", PROJECT);

    let anonymous = client(&[("default", stub.address())], None);
    let msg = storage_error(
        anonymous
            .remove_repository("default", PROJECT, Utc::now())
            .await,
    );
    assert!(msg.contains("Unauthenticated"), "{msg}");

    // The token is dated by the injected clock: two minutes off is outside Gitaly's
    // ±30 s window, the right secret notwithstanding.
    let gitaly = client(&[("default", stub.address())], Some(TOKEN));
    let stale = Utc::now() - chrono::Duration::minutes(2);
    let msg = storage_error(gitaly.remove_repository("default", PROJECT, stale).await);
    assert!(msg.contains("PermissionDenied"), "{msg}");
    assert!(stub.exists("default", PROJECT));

    let removal = gitaly
        .remove_repository("default", PROJECT, Utc::now())
        .await
        .unwrap();
    assert_eq!(removal, Removal::Removed);
    let authorized: Vec<Option<bool>> = stub.calls().into_iter().map(|c| c.authorized).collect();
    assert_eq!(authorized, [Some(false), Some(false), Some(true)]);
}

#[tokio::test]
async fn a_storage_missing_from_the_configuration_is_named() {
    let stub = GitalyStub::start(&["default"], None).await;
    let gitaly = client(&[("default", stub.address())], None);

    let msg = storage_error(
        gitaly
            .remove_repository("nfs-archive", PROJECT, Utc::now())
            .await,
    );

    assert!(
        msg.contains("\"nfs-archive\"") && msg.contains("GITALY_ADDRESSES"),
        "{msg}"
    );
    assert!(msg.contains(PROJECT), "{msg}");
    assert!(stub.calls().is_empty(), "nothing sent");
}

#[tokio::test]
async fn a_storage_the_server_does_not_serve_is_an_error_not_already_gone() {
    let stub = GitalyStub::start(&["default"], None).await;
    // Configured here, unknown to that Gitaly: Gitaly answers InvalidArgument.
    let gitaly = client(
        &[("default", stub.address()), ("other", stub.address())],
        None,
    );

    let msg = storage_error(gitaly.remove_repository("other", PROJECT, Utc::now()).await);

    assert!(
        msg.contains("InvalidArgument") && msg.contains("storage name not found"),
        "{msg}"
    );
    assert_eq!(stub.calls()[0].storage, "other");
}

#[tokio::test]
async fn a_server_that_is_down_is_a_retryable_gitaly_error() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let gitaly = client(
        &[("default", format!("tcp://127.0.0.1:{port}"))],
        Some(TOKEN),
    );

    let msg = storage_error(
        gitaly
            .remove_repository("default", PROJECT, Utc::now())
            .await,
    );

    assert!(msg.contains("Unavailable"), "{msg}");
    assert!(msg.contains(PROJECT) && !msg.contains(TOKEN), "{msg}");
}

#[tokio::test]
async fn wiki_and_design_repositories_are_removed_the_same_way() {
    let stub = GitalyStub::start(&["default", "second"], Some(TOKEN)).await;
    let base = PROJECT.trim_end_matches(".git");
    let wiki = format!("{base}.wiki.git");
    let design = format!("{base}.design.git");
    stub.create_repo("second", PROJECT);
    stub.create_repo("second", &wiki);
    stub.create_repo("second", &design);
    let gitaly = client(
        &[("default", stub.address()), ("second", stub.address())],
        Some(TOKEN),
    );

    for path in [&wiki, &design] {
        let removal = gitaly
            .remove_repository("second", path, Utc::now())
            .await
            .unwrap();
        assert_eq!(removal, Removal::Removed, "{path}");
        assert!(!stub.exists("second", path), "{path}");
        let again = gitaly
            .remove_repository("second", path, Utc::now())
            .await
            .unwrap();
        assert_eq!(again, Removal::AlreadyGone, "{path}");
    }
    assert!(
        stub.exists("second", PROJECT),
        "the project's own repository stays"
    );
    let seen: Vec<(String, String)> = stub
        .calls()
        .into_iter()
        .map(|c| (c.relative_path, c.code))
        .collect();
    assert_eq!(
        seen,
        [
            (wiki.clone(), "OK".to_string()),
            (wiki, "NOT_FOUND".to_string()),
            (design.clone(), "OK".to_string()),
            (design, "NOT_FOUND".to_string()),
        ]
    );
}

#[tokio::test]
async fn a_server_that_never_answers_fails_after_the_configured_timeout() {
    // Accepts connections (the kernel's backlog) but never speaks HTTP/2.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("tcp://{}", silent.local_addr().unwrap());
    let gitaly = Gitaly::new(&GitalyConfig {
        storages: [("default".to_string(), address)].into(),
        token: None,
        timeout: Duration::from_millis(300),
    })
    .unwrap();

    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        gitaly.remove_repository("default", PROJECT, Utc::now()),
    )
    .await
    .expect("the call is bounded by the configured timeout");
    let msg = storage_error(outcome);

    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    // tonic's per-request deadline: Cancelled "Timeout expired".
    assert!(msg.contains("Cancelled") && msg.contains(PROJECT), "{msg}");
    drop(silent);
}
