//! Web-hook requests (behaviour §B28.10.3–§B28.10.5, §D23).
//!
//! Owns: the target-safety check ([`is_local_network`]: every IPv6 form that carries an
//! IPv4 address is checked as that address), the [`Network`] port (resolution and
//! connects, so tests can route public names to a local receiver), [`WebhookClient`]
//! (HTTP/1.1 to the pinned, checked address; local targets only as GitLab's setting and
//! [`LocalNetwork`] allow; no redirects; one timeout per request), and the
//! auto-disabling rules ([`HookState`]). It knows nothing of hooks rows or logs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use http_body_util::Full;
use hyper::header::{HeaderName, HeaderValue};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::config::notify::LocalNetwork;
use crate::error::{Error, Result};

/// Name resolution and TCP connects (a port, so tests can simulate DNS).
#[async_trait]
pub trait Network: Send + Sync {
    /// Resolve `host` (never an IP literal) to addresses.
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>>;
    /// Open a TCP connection to exactly `addr`.
    async fn connect(&self, addr: SocketAddr) -> std::io::Result<TcpStream>;
}

/// The operating system's resolver and sockets.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemNetwork;

#[async_trait]
impl Network for SystemNetwork {
    async fn resolve(&self, host: &str, port: u16) -> std::io::Result<Vec<SocketAddr>> {
        Ok(tokio::net::lookup_host((host, port)).await?.collect())
    }

    async fn connect(&self, addr: SocketAddr) -> std::io::Result<TcpStream> {
        TcpStream::connect(addr).await
    }
}

/// Why a target is refused (the `reason` of `Webhook target refused`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an `http`/`https` URL with a host.
    InvalidUrl,
    /// An address in a local, private, link-local, metadata or multicast range.
    LocalNetwork,
    /// GitLab's `deny_all_requests_except_allowed` is on (its allow list is not read).
    NotOnAllowList,
}

impl Refusal {
    /// The log's `reason`.
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::InvalidUrl => "invalid_url",
            Refusal::LocalNetwork => "local_network",
            Refusal::NotOnAllowList => "not_on_allow_list",
        }
    }
}

fn v4_blocked(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    o[0] == 0                                   // 0.0.0.0/8
        || o[0] == 10                           // 10.0.0.0/8
        || (o[0] == 100 && (o[1] & 0xC0) == 64) // 100.64.0.0/10
        || o[0] == 127                          // 127.0.0.0/8
        || (o[0] == 169 && o[1] == 254)         // 169.254.0.0/16 (metadata included)
        || (o[0] == 172 && (o[1] & 0xF0) == 16) // 172.16.0.0/12
        || (o[0] == 192 && o[1] == 168)         // 192.168.0.0/16
        || o[0] >= 224 // 224.0.0.0/4 and 240.0.0.0/4
}

/// The IPv4 address an IPv6 address embeds or translates to, for the ranges that carry
/// one (the IPv4 rules then apply to it): IPv4-compatible `::/96`, IPv4-mapped
/// `::ffff:0:0/96`, IPv4-translated `::ffff:0:0:0/96`, NAT64 `64:ff9b::/96`, 6to4
/// `2002::/16` (bits 16–47). Teredo `2001::/32` embeds two (the server in bits 32–63 and
/// the client, inverted, in bits 96–127); both are returned.
fn v6_embedded_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if s[..5] == [0; 5] && (s[5] == 0 || s[5] == 0xFFFF) {
        // ::/96 (IPv4-compatible, also :: and ::1) and ::ffff:0:0/96 (IPv4-mapped).
        return vec![v4(s[6], s[7])];
    }
    if s[..4] == [0; 4] && s[4] == 0xFFFF && s[5] == 0 {
        // ::ffff:0:0:0/96 (IPv4-translated, SIIT).
        return vec![v4(s[6], s[7])];
    }
    if s[0] == 0x64 && s[1] == 0xFF9B && s[2..6] == [0; 4] {
        // 64:ff9b::/96 (NAT64 well-known prefix).
        return vec![v4(s[6], s[7])];
    }
    if s[0] == 0x2002 {
        // 2002::/16 (6to4).
        return vec![v4(s[1], s[2])];
    }
    if s[0] == 0x2001 && s[1] == 0 {
        // 2001::/32 (Teredo): server, then the obfuscated client.
        return vec![v4(s[2], s[3]), v4(!s[6], !s[7])];
    }
    Vec::new()
}

fn v6_blocked(ip: Ipv6Addr) -> bool {
    let embedded = v6_embedded_v4(ip);
    if !embedded.is_empty() {
        return embedded.into_iter().any(v4_blocked);
    }
    let s = ip.segments();
    (s[0] == 0x64 && s[1] == 0xFF9B && s[2] == 1) // 64:ff9b:1::/48 (local-use NAT64)
        || (s[0] & 0xFE00) == 0xFC00    // fc00::/7
        || (s[0] & 0xFFC0) == 0xFE80    // fe80::/10
        || (s[0] & 0xFF00) == 0xFF00 // ff00::/8
}

/// Whether an address lies in a range that behaviour §B28.10.5 refuses.
pub fn is_local_network(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_blocked(v4),
        IpAddr::V6(v6) => v6_blocked(v6),
    }
}

/// A parsed, checkable target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Whether TLS is used.
    pub https: bool,
    /// The host as written (brackets removed for IPv6).
    pub host: String,
    /// The port (explicit or the scheme's default).
    pub port: u16,
    /// Path and query, at least `/`.
    pub path_and_query: String,
    /// The `Host` header value.
    pub host_header: String,
    /// The literal address, when the host is one.
    pub literal: Option<IpAddr>,
}

/// Parse a hook URL; only `http` and `https` with a host are accepted.
pub fn parse_target(url: &str) -> std::result::Result<Target, Refusal> {
    let u = url::Url::parse(url).map_err(|_| Refusal::InvalidUrl)?;
    let https = match u.scheme() {
        "https" => true,
        "http" => false,
        _ => return Err(Refusal::InvalidUrl),
    };
    let (host, literal) = match u.host() {
        Some(url::Host::Domain(d)) if !d.is_empty() => (d.to_string(), None),
        Some(url::Host::Ipv4(a)) => (a.to_string(), Some(IpAddr::V4(a))),
        Some(url::Host::Ipv6(a)) => (a.to_string(), Some(IpAddr::V6(a))),
        _ => return Err(Refusal::InvalidUrl),
    };
    let port = u.port_or_known_default().ok_or(Refusal::InvalidUrl)?;
    let mut path_and_query = u.path().to_string();
    if path_and_query.is_empty() {
        path_and_query.push('/');
    }
    if let Some(q) = u.query() {
        path_and_query.push('?');
        path_and_query.push_str(q);
    }
    let shown = match literal {
        Some(IpAddr::V6(_)) => format!("[{host}]"),
        _ => host.clone(),
    };
    let host_header = match u.port() {
        Some(p) => format!("{shown}:{p}"),
        None => shown,
    };
    Ok(Target {
        https,
        host,
        port,
        path_and_query,
        host_header,
        literal,
    })
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostOutcome {
    /// The target was refused before any connection (behaviour §B28.10.5).
    Refused(Refusal),
    /// A response arrived (any status).
    Status {
        /// The HTTP status.
        status: u16,
        /// Time from the start of the request to the response head.
        duration: Duration,
    },
    /// No response: a timeout, a resolution, connection, TLS or protocol error.
    Failed {
        /// `timeout`, `dns`, `connect`, `tls` or `http`.
        error_class: &'static str,
    },
}

/// The HTTP client of `deliver-notification`, built once at cold start.
#[derive(Clone)]
pub struct WebhookClient {
    network: Arc<dyn Network>,
    verifying: native_tls::TlsConnector,
    /// For hooks with SSL verification off; built on first use, because native-tls
    /// loads the system CA store (twice, ~45 ms) even for a connector that trusts
    /// everything, and most instances never need it (issue 8, footprint).
    trusting: Arc<std::sync::OnceLock<Option<native_tls::TlsConnector>>>,
    timeout: Duration,
    local_network: LocalNetwork,
}

impl std::fmt::Debug for WebhookClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookClient")
            .field("timeout", &self.timeout)
            .field("local_network", &self.local_network)
            .finish_non_exhaustive()
    }
}

impl WebhookClient {
    /// A client on the system network and the system roots (plus `extra_roots`, for
    /// private CAs and tests); `local_network` is `WEBHOOK_ALLOW_LOCAL_NETWORK`.
    pub fn new(
        timeout: Duration,
        local_network: LocalNetwork,
        extra_roots: &[native_tls::Certificate],
    ) -> Result<WebhookClient> {
        let mut b = native_tls::TlsConnector::builder();
        for c in extra_roots {
            b.add_root_certificate(c.clone());
        }
        let verifying = b
            .build()
            .map_err(|e| Error::Config(format!("web-hook TLS setup failed: {e}")))?;
        Ok(WebhookClient {
            network: Arc::new(SystemNetwork),
            verifying,
            trusting: Arc::default(),
            timeout,
            local_network,
        })
    }

    /// The same client on another network (tests).
    pub fn with_network(mut self, network: Arc<dyn Network>) -> WebhookClient {
        self.network = network;
        self
    }

    /// Check a target: resolve it and refuse it if any address is local, unless
    /// GitLab's setting (`gitlab_allows_local`, `allow_local_requests_from_web_hooks_and_services`)
    /// allows it and the environment does not narrow it. Returns the checked addresses
    /// to connect to.
    pub async fn check(
        &self,
        target: &Target,
        gitlab_allows_local: bool,
    ) -> std::result::Result<Vec<SocketAddr>, PostOutcome> {
        let addrs = match target.literal {
            Some(ip) => vec![SocketAddr::new(ip, target.port)],
            None => match tokio::time::timeout(
                self.timeout,
                self.network.resolve(&target.host, target.port),
            )
            .await
            {
                Ok(Ok(a)) if !a.is_empty() => a,
                Ok(_) => return Err(PostOutcome::Failed { error_class: "dns" }),
                Err(_) => {
                    return Err(PostOutcome::Failed {
                        error_class: "timeout",
                    })
                }
            },
        };
        if !self.local_network.allows(gitlab_allows_local)
            && addrs.iter().any(|a| is_local_network(a.ip()))
        {
            return Err(PostOutcome::Refused(Refusal::LocalNetwork));
        }
        Ok(addrs)
    }

    /// POST `body` to `url` with exactly `headers` (plus `Host` and `Content-Length`).
    /// Redirects are never followed: a 3xx is just a status. `gitlab_allows_local` is
    /// GitLab's setting as read for this delivery (see [`WebhookClient::check`]).
    pub async fn post(
        &self,
        url: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        verify_tls: bool,
        gitlab_allows_local: bool,
    ) -> PostOutcome {
        let target = match parse_target(url) {
            Ok(t) => t,
            Err(r) => return PostOutcome::Refused(r),
        };
        let started = Instant::now();
        let addrs = match self.check(&target, gitlab_allows_local).await {
            Ok(a) => a,
            Err(outcome) => return outcome,
        };
        let remaining = self.timeout.saturating_sub(started.elapsed());
        match tokio::time::timeout(
            remaining,
            self.exchange(&target, &addrs, headers, body, verify_tls),
        )
        .await
        {
            Ok(Ok(status)) => PostOutcome::Status {
                status,
                duration: started.elapsed(),
            },
            Ok(Err(error_class)) => PostOutcome::Failed { error_class },
            Err(_) => PostOutcome::Failed {
                error_class: "timeout",
            },
        }
    }

    async fn exchange(
        &self,
        target: &Target,
        addrs: &[SocketAddr],
        headers: &[(HeaderName, HeaderValue)],
        body: Bytes,
        verify_tls: bool,
    ) -> std::result::Result<u16, &'static str> {
        // Pinned: only the checked addresses, in order.
        let mut tcp = None;
        for a in addrs {
            if let Ok(s) = self.network.connect(*a).await {
                tcp = Some(s);
                break;
            }
        }
        let tcp = tcp.ok_or("connect")?;
        let mut req = hyper::Request::post(target.path_and_query.as_str())
            .header(hyper::header::HOST, target.host_header.as_str());
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(Full::new(body)).map_err(|_| "http")?;
        if target.https {
            let connector = if verify_tls {
                &self.verifying
            } else {
                self.trusting
                    .get_or_init(|| {
                        native_tls::TlsConnector::builder()
                            .danger_accept_invalid_certs(true)
                            .danger_accept_invalid_hostnames(true)
                            .build()
                            .ok()
                    })
                    .as_ref()
                    .ok_or("tls")?
            };
            let tls = tokio_native_tls::TlsConnector::from(connector.clone())
                .connect(&target.host, tcp)
                .await
                .map_err(|_| "tls")?;
            send(TokioIo::new(tls), req).await
        } else {
            send(TokioIo::new(tcp), req).await
        }
    }
}

async fn send<IO>(
    io: IO,
    req: hyper::Request<Full<Bytes>>,
) -> std::result::Result<u16, &'static str>
where
    IO: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| "http")?;
    let driver = tokio::spawn(conn);
    let result = sender.send_request(req).await.map(|r| r.status().as_u16());
    driver.abort();
    result.map_err(|_| "http")
}

/// `recent_failures` and `disabled_until` of a hook (behaviour §B28.10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookState {
    /// `recent_failures`.
    pub recent_failures: i16,
    /// `disabled_until`.
    pub disabled_until: Option<DateTime<Utc>>,
}

/// `TEMPORARILY_DISABLED_FAILURE_THRESHOLD`.
const TEMPORARY_THRESHOLD: i16 = 3;
/// `PERMANENTLY_DISABLED_FAILURE_THRESHOLD`.
const PERMANENT_THRESHOLD: i16 = 39;

impl HookState {
    /// `recent_failures > 39 OR (recent_failures > 3 AND disabled_until IS NULL)`.
    pub fn permanently_disabled(&self) -> bool {
        self.recent_failures > PERMANENT_THRESHOLD
            || (self.recent_failures > TEMPORARY_THRESHOLD && self.disabled_until.is_none())
    }

    /// `disabled_until IS NOT NULL AND disabled_until >= now`.
    pub fn temporarily_disabled(&self, now: DateTime<Utc>) -> bool {
        self.disabled_until.is_some_and(|d| d >= now)
    }

    /// Neither disabled state.
    pub fn executable(&self, now: DateTime<Utc>) -> bool {
        !self.permanently_disabled() && !self.temporarily_disabled(now)
    }

    /// The state after a success, or `None` when nothing changes.
    pub fn after_success(&self) -> Option<HookState> {
        (self.recent_failures != 0 || self.disabled_until.is_some()).then_some(HookState {
            recent_failures: 0,
            disabled_until: None,
        })
    }

    /// The state after a failure, or `None` when the hook is no longer executable.
    /// `new = min(old + 1, 40)`; past 3 failures the hook is disabled for
    /// `clamp(60 s × 2^(old − 3), 60 s, 1 day)`.
    pub fn after_failure(&self, now: DateTime<Utc>) -> Option<HookState> {
        if !self.executable(now) {
            return None;
        }
        let old = self.recent_failures;
        let new = (old + 1).min(PERMANENT_THRESHOLD + 1);
        let disabled_until = if new > TEMPORARY_THRESHOLD {
            let exp = i32::from(old - TEMPORARY_THRESHOLD).clamp(0, 20) as u32;
            let secs = (60i64 << exp).clamp(60, 86_400);
            Some(now + chrono::Duration::seconds(secs))
        } else {
            self.disabled_until
        };
        Some(HookState {
            recent_failures: new,
            disabled_until,
        })
    }
}
