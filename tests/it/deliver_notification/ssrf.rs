//! Web-hook target safety (behaviour §B28.10.5) against request forgery, on the real client
//! (`WebhookClient`, system resolver) and a real receiver on 127.0.0.1: every
//! spelling of a loopback, private, link-local or metadata address (decimal, hex,
//! octal and short IPv4 forms, IPv4-mapped IPv6 in both notations, AWS's IPv6
//! metadata address, user-info and fragment tricks, names that resolve to loopback)
//! is refused by default and never reaches the receiver, while the same URLs do reach
//! it when local targets are explicitly allowed, so each refusal is a real one. A
//! public name whose endpoint redirects to the metadata service costs one request to
//! the checked address and nothing more. (The B28 suite covers names resolving to
//! private addresses, mixed answers and pinning through its test network.)

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use integration_tests::sinks::http::HttpReceiver;
use integration_tests::sinks::net::TestNetwork;
use shared::notify::webhook::{Network, PostOutcome, Refusal, WebhookClient};
use shared::notify::LocalNetwork;

/// A client that follows GitLab's setting, and that setting
/// (`allow_local_requests_from_web_hooks_and_services`).
struct Client(WebhookClient, bool);

impl Client {
    fn with_network(self, network: Arc<dyn Network>) -> Client {
        Client(self.0.with_network(network), self.1)
    }
}

fn client(gitlab_allows_local: bool) -> Client {
    let c = WebhookClient::new(Duration::from_secs(3), LocalNetwork::FollowGitLab, &[]).unwrap();
    Client(c, gitlab_allows_local)
}

async fn post(c: &Client, url: &str) -> PostOutcome {
    c.0.post(url, &[], Bytes::from_static(b"{}"), true, c.1)
        .await
}

#[tokio::test]
async fn every_spelling_of_loopback_is_refused_by_default_and_reaches_it_only_when_allowed() {
    let rx = HttpReceiver::start().await;
    let p = rx.addr.port();
    let spellings = [
        format!("http://127.0.0.1:{p}/x"),
        format!("http://2130706433:{p}/x"),
        format!("http://0x7f000001:{p}/x"),
        format!("http://0177.0.0.1:{p}/x"),
        format!("http://127.1:{p}/x"),
        format!("http://0x7f.1:{p}/x"),
        format!("http://127.000.000.001:{p}/x"),
        format!("http://[::ffff:127.0.0.1]:{p}/x"),
        format!("http://[::ffff:7f00:1]:{p}/x"),
        format!("http://[0:0:0:0:0:ffff:127.0.0.1]:{p}/x"),
        format!("http://localhost:{p}/x"),
        format!("HTTP://LocalHost:{p}/x"),
        format!("http://hooks.example.com@127.0.0.1:{p}/x"),
        format!("http://hooks.example.com:pw@localhost:{p}/x"),
        format!("http://127.0.0.1:{p}/x#@hooks.example.com/"),
        format!("http://127.0.0.1:{p}/x?@hooks.example.com/"),
    ];
    let strict = client(false);
    for url in &spellings {
        assert_eq!(
            post(&strict, url).await,
            PostOutcome::Refused(Refusal::LocalNetwork),
            "{url}"
        );
    }
    assert!(rx.requests().is_empty(), "a refused target got a request");
    // Names that do not resolve here never reach anything either.
    for url in [format!("http://localhost.:{p}/x")] {
        let out = post(&strict, &url).await;
        assert!(
            matches!(
                out,
                PostOutcome::Refused(_) | PostOutcome::Failed { error_class: "dns" }
            ),
            "{url}: {out:?}"
        );
    }
    assert!(rx.requests().is_empty());
    // Allowed explicitly: every spelling really is the receiver.
    let open = client(true);
    for url in &spellings {
        let out = post(&open, url).await;
        assert!(
            matches!(out, PostOutcome::Status { status: 200, .. }),
            "{url}: {out:?}"
        );
    }
    assert_eq!(rx.requests().len(), spellings.len());
}

#[tokio::test]
async fn metadata_private_link_local_and_unspecified_targets_are_refused_without_a_connection() {
    let net = Arc::new(TestNetwork::new());
    // Names of cloud metadata services and internal hosts, resolved as they would be.
    net.name("metadata.google.internal", &["169.254.169.254"])
        .name("instance-data.ec2.internal", &["169.254.169.254"])
        .name("imds6.example.com", &["fd00:ec2::254"])
        .name("alibaba-meta.example.com", &["100.100.100.200"])
        .name("rebind.example.com", &["203.0.113.9", "169.254.169.254"]);
    let strict = client(false).with_network(net.clone());
    for url in [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://169.254.170.2/v2/credentials",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://2852039166/latest/meta-data/",
        "http://0xa9fea9fe/latest/meta-data/",
        "http://0251.0376.0251.0376/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://0.0.0.0/",
        "http://0/",
        "http://[::]/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://[fc00::1]/",
        "http://224.0.0.1/",
        "http://255.255.255.255/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://instance-data.ec2.internal/latest/meta-data/",
        "http://imds6.example.com/latest/meta-data/",
        "http://alibaba-meta.example.com/latest/meta-data/",
        "http://rebind.example.com/x",
    ] {
        assert_eq!(
            post(&strict, url).await,
            PostOutcome::Refused(Refusal::LocalNetwork),
            "{url}"
        );
    }
    for url in [
        "gopher://169.254.169.254/",
        "file:///etc/passwd",
        "ftp://hooks.example.com/",
        "http://[fe80::1%25eth0]/",
        "//169.254.169.254/",
    ] {
        assert_eq!(
            post(&strict, url).await,
            PostOutcome::Refused(Refusal::InvalidUrl),
            "{url}"
        );
    }
    assert!(net.connects().is_empty(), "no connection was attempted");
}

#[tokio::test]
async fn a_redirect_to_the_metadata_service_is_never_followed() {
    // A public name routed to a receiver that answers 302 to the metadata service,
    // and a second receiver standing in for an internal service the redirect names.
    let rx = HttpReceiver::start().await;
    rx.respond(302);
    let net = Arc::new(TestNetwork::new());
    net.name("hooks.example.com", &["203.0.113.20"])
        .route("203.0.113.20:80", rx.addr);
    let strict = client(false).with_network(net.clone());
    let out = post(&strict, "http://hooks.example.com/x").await;
    assert!(
        matches!(out, PostOutcome::Status { status: 302, .. }),
        "{out:?}"
    );
    assert_eq!(rx.requests().len(), 1);
    // Exactly one connection, to the checked public address: the Location (the
    // metadata service) was neither resolved nor contacted.
    assert_eq!(net.connects(), vec!["203.0.113.20:80".parse().unwrap()]);
}

/// The blocked IPv4 ranges of behaviour §B28.10.5, as (first address, prefix length).
const BLOCKED_V4: [([u8; 4], u32); 9] = [
    ([0, 0, 0, 0], 8),
    ([10, 0, 0, 0], 8),
    ([100, 64, 0, 0], 10),
    ([127, 0, 0, 0], 8),
    ([169, 254, 0, 0], 16),
    ([172, 16, 0, 0], 12),
    ([192, 168, 0, 0], 16),
    ([224, 0, 0, 0], 4),
    ([240, 0, 0, 0], 4),
];

/// Every IPv6 form that carries an IPv4 address, as a function of it (and of the
/// free bits around it, so the whole range is covered).
fn embeddings(v4: std::net::Ipv4Addr, free: u128) -> Vec<(&'static str, std::net::Ipv6Addr)> {
    use std::net::Ipv6Addr;
    let a = u128::from(u32::from(v4));
    vec![
        ("IPv4-compatible ::/96", Ipv6Addr::from(a)),
        (
            "IPv4-mapped ::ffff:0:0/96",
            Ipv6Addr::from((0xFFFFu128 << 32) | a),
        ),
        (
            "IPv4-translated ::ffff:0:0:0/96",
            Ipv6Addr::from((0xFFFFu128 << 48) | a),
        ),
        (
            "NAT64 64:ff9b::/96",
            Ipv6Addr::from((0x64_ff9bu128 << 96) | a),
        ),
        (
            // The local-use prefix is refused whatever it carries, wherever.
            "NAT64 local-use 64:ff9b:1::/48",
            Ipv6Addr::from((0x64_ff9b_0001u128 << 80) | (free & ((1u128 << 80) - 1))),
        ),
        (
            "6to4 2002::/16",
            Ipv6Addr::from((0x2002u128 << 112) | (a << 80) | (free & ((1u128 << 80) - 1))),
        ),
        (
            // Teredo: the client address, inverted, in the low 32 bits; any server.
            "Teredo client 2001::/32",
            Ipv6Addr::from(
                (0x2001_0000u128 << 96) | (free & (((1u128 << 64) - 1) << 32)) | (a ^ 0xFFFF_FFFF),
            ),
        ),
        (
            "Teredo server 2001::/32",
            Ipv6Addr::from((0x2001_0000u128 << 96) | (a << 64) | (free & ((1u128 << 64) - 1))),
        ),
    ]
}

#[test]
fn every_ipv6_form_embedding_a_blocked_ipv4_address_is_refused_and_a_public_one_is_not() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    use shared::notify::webhook::is_local_network;
    use std::net::{IpAddr, Ipv4Addr};
    let mut runner = TestRunner::new(Config {
        cases: 2000,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..BLOCKED_V4.len(), any::<u32>(), any::<u128>());
    runner
        .run(&strategy, |(range, host, free)| {
            let (base, len) = BLOCKED_V4[range];
            let v4 = Ipv4Addr::from(u32::from(Ipv4Addr::from(base)) | (host >> len));
            prop_assert!(is_local_network(IpAddr::V4(v4)), "{v4}");
            for (form, v6) in embeddings(v4, free) {
                prop_assert!(is_local_network(IpAddr::V6(v6)), "{form}: {v6} ({v4})");
            }
            Ok(())
        })
        .unwrap();
    // A public IPv4 address carried by the translating forms stays reachable (they are
    // unwrapped, not refused wholesale); the local-use NAT64 prefix is refused always.
    for (form, v6) in embeddings(Ipv4Addr::new(203, 0, 113, 10), 0) {
        if form.starts_with("Teredo") {
            continue; // with free bits 0 its other address is 0.0.0.0 or 255.255.255.255
        }
        let want = form.starts_with("NAT64 local-use");
        assert_eq!(is_local_network(IpAddr::V6(v6)), want, "{form}: {v6}");
    }
    // Teredo with a public server (203.0.113.10) and a public client (203.255.0.10).
    let teredo = "2001:0:cb00:710a::3400:fff5".parse().unwrap();
    assert!(!is_local_network(IpAddr::V6(teredo)), "{teredo}");
}

#[tokio::test]
async fn nat64_ipv4_compatible_and_translated_loopback_or_private_targets_are_refused() {
    let rx = HttpReceiver::start().await;
    let p = rx.addr.port();
    let strict = client(false);
    for url in [
        format!("http://[64:ff9b::7f00:1]:{p}/x"),
        format!("http://[64:ff9b::a00:5]:{p}/x"),
        format!("http://[64:ff9b:1::a00:5]:{p}/x"),
        format!("http://[::127.0.0.1]:{p}/x"),
        format!("http://[::ffff:0:7f00:1]:{p}/x"),
        format!("http://[2002:7f00:1::1]:{p}/x"),
        format!("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{p}/x"),
    ] {
        assert_eq!(
            post(&strict, &url).await,
            PostOutcome::Refused(Refusal::LocalNetwork),
            "{url}"
        );
    }
    assert!(rx.requests().is_empty(), "a refused target got a request");
}
