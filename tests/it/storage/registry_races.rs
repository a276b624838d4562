//! The registry client against a scripted registry (issue 46): what a real registry
//! only does under a race or a hostile answer. An image pushed while the repository is
//! being deleted is found by listing the tags again and deleted too; a pagination
//! `Link` to another host is refused before the token goes there.

use std::sync::{Arc, Mutex};

use integration_tests::sinks::registry::key_and_certificate;
use shared::storage::registry::{Registry, RegistryConfig};
use shared::storage::Removal;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the scripted registry answers, from the requests it has seen so far.
type Script = dyn Fn(&str, &str, &[String]) -> (u16, Vec<(String, String)>, String) + Send + Sync;

/// A registry on 127.0.0.1 answering every request by `script(method, target, seen)`
/// (one request per connection); the requests (`METHOD target`) it received.
async fn scripted(script: Arc<Script>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let mut first = head.lines().next().unwrap_or_default().split(' ');
            let (method, target) = (
                first.next().unwrap_or_default().to_string(),
                first.next().unwrap_or_default().to_string(),
            );
            let before = log.lock().unwrap().clone();
            let (status, headers, body) = script(&method, &target, &before);
            log.lock().unwrap().push(format!("{method} {target}"));
            let mut resp = format!(
                "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in headers {
                resp.push_str(&format!("{k}: {v}\r\n"));
            }
            resp.push_str("\r\n");
            resp.push_str(&body);
            let _ = sock.write_all(resp.as_bytes()).await;
            let _ = sock.shutdown().await;
        }
    });
    (url, seen)
}

fn client(url: &str) -> Registry {
    Registry::new(&RegistryConfig {
        api_url: url.into(),
        issuer: "gitlab-issuer".into(),
        service: "container_registry".into(),
        key_pem: key_and_certificate().0,
        ca_bundle: None,
        timeout: std::time::Duration::from_secs(5),
    })
    .unwrap()
}

/// A manifest answer for `tag`: digest `sha256:<tag>`, no blobs.
fn manifest(tag: &str) -> (u16, Vec<(String, String)>, String) {
    (
        200,
        vec![("Docker-Content-Digest".into(), format!("sha256:{tag}"))],
        r#"{"schemaVersion":2}"#.into(),
    )
}

#[tokio::test]
async fn an_image_pushed_during_the_deletion_is_deleted_too() {
    // `v1` first; once its manifest is deleted, `v2` has been pushed meanwhile.
    let script: Arc<Script> = Arc::new(|method, target, seen| {
        let deleted = |d: &str| {
            seen.iter()
                .any(|s| s == &format!("DELETE /v2/g/p/manifests/sha256:{d}"))
        };
        match (method, target) {
            ("GET", "/v2/g/p/tags/list") => {
                let tags = match (deleted("v1"), deleted("v2")) {
                    (false, _) => r#"["v1"]"#,
                    (true, false) => r#"["v2"]"#,
                    (true, true) => "[]",
                };
                (200, vec![], format!(r#"{{"name":"g/p","tags":{tags}}}"#))
            }
            ("GET", t) if t.starts_with("/v2/g/p/manifests/") => {
                manifest(t.rsplit('/').next().unwrap())
            }
            ("DELETE", _) => (202, vec![], String::new()),
            _ => (404, vec![], r#"{"errors":[{"code":"UNKNOWN"}]}"#.into()),
        }
    });
    let (url, seen) = scripted(script).await;
    let r = client(&url)
        .delete_repository("g/p", chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(r.removal, Removal::Removed);
    assert_eq!(r.manifests_deleted, 2, "v1, then v2 pushed meanwhile");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.iter()
            .filter(|s| *s == "GET /v2/g/p/tags/list")
            .count(),
        3,
        "listed again after each round: {seen:?}"
    );
}

#[tokio::test]
async fn a_pagination_link_to_another_host_is_refused_before_the_token_goes_there() {
    let script: Arc<Script> = Arc::new(|_, target, _| {
        if target == "/v2/g/p/tags/list" {
            (
                200,
                vec![(
                    "Link".into(),
                    r#"<http://collector.example/v2/g/p/tags/list?last=v1>; rel="next""#.into(),
                )],
                r#"{"name":"g/p","tags":["v1"]}"#.into(),
            )
        } else {
            (404, vec![], String::new())
        }
    });
    let (url, seen) = scripted(script).await;
    let e = client(&url)
        .tags("g/p", chrono::Utc::now())
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("leaves the registry"), "{e}");
    assert!(e.contains("collector.example"), "{e}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "one request, to the registry"
    );
}
