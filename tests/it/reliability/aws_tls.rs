//! The AWS SDK clients' HTTPS client (`shared::aws::http`, issue 48: hyper over the
//! OpenSSL every function links, instead of the SDK's rustls stack). Against moto
//! behind a TLS terminator whose certificate the test CA signs: a real SQS exchange
//! when the CA is trusted, a TLS refusal when only the Amazon roots are, calls of one
//! client on one kept connection, and a server that never answers classified as a
//! timeout, which the SDK retries.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_config::{BehaviorVersion, Region};
use aws_sdk_sqs::config::{Credentials, SharedHttpClient};
use integration_tests::aws::{create_queue, moto_endpoint};
use integration_tests::sinks::certs::TestCa;
use shared::aws::http::{client, Trust};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A TLS terminator on 127.0.0.1 in front of moto; its address.
async fn tls_front_of_moto() -> String {
    let leaf = TestCa::get().issue(&["localhost"], &["127.0.0.1"]);
    let acceptor = leaf.acceptor();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let moto = moto_endpoint();
    let moto = moto.trim_start_matches("http://").to_string();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, moto) = (acceptor.clone(), moto.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let Ok(mut upstream) = tokio::net::TcpStream::connect(&moto).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut upstream).await;
            });
        }
    });
    format!("https://localhost:{}", addr.port())
}

fn sqs(http: SharedHttpClient, endpoint: &str, timeout: Option<Duration>) -> aws_sdk_sqs::Client {
    let mut timeouts = aws_config::timeout::TimeoutConfig::builder();
    if let Some(t) = timeout {
        timeouts = timeouts.read_timeout(t);
    }
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(BehaviorVersion::latest())
        .http_client(http)
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "t"))
        .timeout_config(timeouts.build())
        .retry_config(aws_config::retry::RetryConfig::standard().with_max_attempts(1))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

fn trusting(pem: Vec<u8>) -> SharedHttpClient {
    client(Trust {
        system_roots: false,
        roots_pem: pem.into(),
    })
}

#[tokio::test]
async fn an_sqs_exchange_over_tls_works_when_the_ca_is_trusted_and_is_refused_otherwise() {
    let endpoint = tls_front_of_moto().await;
    let trusted = sqs(trusting(TestCa::get().cert_pem()), &endpoint, None);
    let (url, _) = create_queue(&trusted, "tls").await;
    let name = url.rsplit('/').next().unwrap().to_string();
    trusted
        .send_message()
        .queue_url(&url)
        .message_body("over TLS")
        .send()
        .await
        .expect("send_message over TLS");
    let got = trusted
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .expect("receive_message over TLS");
    let bodies: Vec<_> = got.messages().iter().filter_map(|m| m.body()).collect();
    assert_eq!(bodies, ["over TLS"]);

    // The Amazon roots only (what a function trusts without a custom endpoint): the
    // test CA's certificate is refused before any request is sent.
    let amazon = sqs(shared::aws::https_client(false), &endpoint, None);
    let err = amazon
        .get_queue_url()
        .queue_name(&name)
        .send()
        .await
        .expect_err("an untrusted certificate must be refused");
    let text = format!("{}", aws_sdk_sqs::error::DisplayErrorContext(&err));
    assert!(
        text.contains("certificate verify failed"),
        "a TLS refusal: {text}"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout_the_sdk_retries() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((tcp, _)) = listener.accept().await {
            held.push(tcp); // accepted, read never answered
        }
    });
    let client = sqs(
        trusting(TestCa::get().cert_pem()),
        &format!("http://{addr}"),
        Some(Duration::from_millis(300)),
    );
    let err = client.list_queues().send().await.expect_err("no answer");
    let aws_sdk_sqs::error::SdkError::DispatchFailure(dispatch) = &err else {
        panic!("a dispatch failure: {err:?}");
    };
    assert!(dispatch.is_timeout(), "classified as a timeout: {err:?}");

    // A refused connection is an I/O failure (retried as transient), not "other".
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let client = sqs(
        trusting(TestCa::get().cert_pem()),
        &format!("http://127.0.0.1:{port}"),
        None,
    );
    let err = client.list_queues().send().await.expect_err("refused");
    let aws_sdk_sqs::error::SdkError::DispatchFailure(dispatch) = &err else {
        panic!("a dispatch failure: {err:?}");
    };
    assert!(dispatch.is_io(), "classified as I/O: {err:?}");
}

/// An HTTPS server on 127.0.0.1 answering every request `{}` (an empty SQS JSON
/// response) and keeping the connection open; its address and the connections it
/// accepted.
async fn keep_alive_server() -> (String, Arc<AtomicUsize>) {
    let acceptor = TestCa::get()
        .issue(&["localhost"], &["127.0.0.1"])
        .acceptor();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    // One request: its head, then Content-Length bytes of body.
                    let head_end = loop {
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break i + 4;
                        }
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map(|v| v.trim().parse().unwrap())
                        .unwrap_or(0);
                    while buf.len() < head_end + len {
                        match tls.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    buf.drain(..head_end + len);
                    let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/x-amz-json-1.0\r\ncontent-length: 2\r\n\r\n{}";
                    if tls.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("https://localhost:{port}"), accepted)
}

#[tokio::test]
async fn the_calls_of_one_client_share_one_kept_connection() {
    let (endpoint, accepted) = keep_alive_server().await;
    let client = sqs(trusting(TestCa::get().cert_pem()), &endpoint, None);
    for _ in 0..3 {
        client.list_queues().send().await.expect("list_queues");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "three calls, one TCP and TLS connection (the SDK asks for a connector per attempt)"
    );
}
