//! The HTTP client under every AWS SDK client of a function: hyper's HTTP/1.1 client
//! (connection pool included) over the same OpenSSL, through native-tls, that the
//! database and mail connections use.
//!
//! Owns: the TLS trust of the AWS calls ([`Trust`]: the Amazon roots, plus the system
//! store with a custom endpoint), the SDK's connect and read timeouts, and how a
//! transport failure is classified for the SDK's retries (`classify`: a timeout, an
//! I/O failure, or another error).
//!
//! Why not the SDK's own client (`aws-smithy-http-client`): its only TLS stacks are
//! rustls (with ring) and s2n, a second TLS implementation beside OpenSSL in every
//! function, about 1.5 MB of each bootstrap (issue 48).

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector as Tcp};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

type BoxError = Box<dyn StdError + Send + Sync>;

/// Which certificate authorities an AWS call trusts.
#[derive(Debug, Clone)]
pub struct Trust {
    /// Also the system store (`AWS_ENDPOINT_URL*` set: an emulator or a proxy).
    pub system_roots: bool,
    /// PEM certificates trusted besides (the Amazon roots).
    pub roots_pem: std::borrow::Cow<'static, [u8]>,
}

/// The SDK's HTTP client trusting `trust`. Its TLS connector is built on its first
/// call, once per process and trust (`tls_connector`); connections are pooled per
/// host, as the SDK's own client does.
pub fn client(trust: Trust) -> SharedHttpClient {
    SharedHttpClient::new(NativeTlsClient {
        trust,
        tls: std::sync::OnceLock::new(),
        connectors: std::sync::Mutex::new(Vec::new()),
    })
}

#[derive(Debug)]
struct NativeTlsClient {
    trust: Trust,
    tls: std::sync::OnceLock<Option<tokio_native_tls::TlsConnector>>,
    /// One connector (one connection pool) per timeout settings: the SDK asks for a
    /// connector on every request attempt, and a new one per attempt would open a new
    /// connection (TCP and TLS) for every AWS call.
    connectors: std::sync::Mutex<Vec<(Timeouts, SharedHttpConnector)>>,
}

/// The connect and read timeouts a connector was built with.
type Timeouts = (Option<Duration>, Option<Duration>);

impl HttpClient for NativeTlsClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, c)) = connectors.iter().find(|(k, _)| *k == key) {
            return c.clone();
        }
        let connector = self.new_connector(key);
        connectors.push((key, connector.clone()));
        connector
    }
}

impl NativeTlsClient {
    fn new_connector(&self, (connect_timeout, read_timeout): Timeouts) -> SharedHttpConnector {
        let tls = self
            .tls
            .get_or_init(|| match tls_connector(&self.trust) {
                Ok(tls) => Some(tls),
                Err(e) => {
                    tracing::error!(error = %e, "AWS HTTPS client: TLS setup failed");
                    None
                }
            })
            .clone();
        let mut tcp = Tcp::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        tcp.set_connect_timeout(connect_timeout);
        let connector = Connect { tcp, tls };
        let pool = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .build(connector);
        SharedHttpConnector::new(Connector { pool, read_timeout })
    }
}

/// The TLS connectors built so far, by `(system_roots, roots_pem)`.
type Built = Vec<((bool, Vec<u8>), tokio_native_tls::TlsConnector)>;
static TLS_BUILT: std::sync::Mutex<Built> = std::sync::Mutex::new(Vec::new());

/// The TLS connector trusting `trust`: built once per process and trust, then shared
/// by every client built with the same trust. Building one reads the system store when
/// `system_roots` is set (about 140 PEM certificates; tens of milliseconds of OpenSSL 3
/// CPU each time), which a process building many AWS clients (`hk`, the tests) paid per
/// client. A failure is not kept: the next client tries again.
fn tls_connector(trust: &Trust) -> Result<tokio_native_tls::TlsConnector, native_tls::Error> {
    let mut built = TLS_BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let key = (trust.system_roots, trust.roots_pem.to_vec());
    if let Some((_, tls)) = built.iter().find(|(k, _)| *k == key) {
        return Ok(tls.clone());
    }
    let mut b = native_tls::TlsConnector::builder();
    b.disable_built_in_roots(!trust.system_roots);
    for cert in native_tls::Certificate::stack_from_pem(&trust.roots_pem)? {
        b.add_root_certificate(cert);
    }
    let tls = tokio_native_tls::TlsConnector::from(b.build()?);
    built.push((key, tls.clone()));
    Ok(tls)
}

#[derive(Debug)]
struct Connector {
    pool: Client<Connect, SdkBody>,
    read_timeout: Option<Duration>,
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let request = match request.try_into_http1x() {
            Ok(r) => r,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        let sent = self.pool.request(request);
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let response = match read_timeout {
                Some(d) => match tokio::time::timeout(d, sent).await {
                    Ok(r) => r,
                    Err(elapsed) => return Err(ConnectorError::timeout(elapsed.into())),
                },
                None => sent.await,
            };
            match response {
                Ok(r) => HttpResponse::try_from(r.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(classify(e)),
            }
        })
    }
}

/// A transport failure as the SDK's retry strategy reads it: timeouts and I/O failures
/// (refused, reset, closed, a TLS failure while connecting) are retried as transient.
fn classify(err: hyper_util::client::legacy::Error) -> ConnectorError {
    let timed_out = source::<io::Error>(&err).is_some_and(|e| e.kind() == io::ErrorKind::TimedOut)
        || source::<hyper::Error>(&err).is_some_and(hyper::Error::is_timeout);
    if timed_out {
        return ConnectorError::timeout(err.into());
    }
    if let Some(h) = source::<hyper::Error>(&err) {
        if h.is_user() {
            return ConnectorError::user(err.into());
        }
        if h.is_incomplete_message() {
            return ConnectorError::other(err.into(), Some(ErrorKind::TransientError));
        }
        if h.is_closed() || h.is_canceled() {
            return ConnectorError::io(err.into());
        }
    }
    if err.is_connect() || source::<io::Error>(&err).is_some() {
        return ConnectorError::io(err.into());
    }
    ConnectorError::other(err.into(), None)
}

fn source<'a, E: StdError + 'static>(err: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut next = Some(err);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// Opens a connection: TCP, then TLS for `https`.
#[derive(Clone)]
struct Connect {
    tcp: Tcp,
    tls: Option<tokio_native_tls::TlsConnector>,
}

impl std::fmt::Debug for Connect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connect").finish_non_exhaustive()
    }
}

impl tower_service::Service<Uri> for Connect {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let host = uri.host().unwrap_or_default().to_string();
        let tls = self.tls.clone();
        let tcp = self.tcp.call(uri);
        Box::pin(async move {
            let tcp = tcp.await?;
            if !https {
                return Ok(Stream::Plain(tcp));
            }
            let tls = tls.ok_or("the TLS connector could not be built (see the log)")?;
            let stream = tls.connect(&host, tcp.into_inner()).await?;
            Ok(Stream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A connection to an AWS endpoint: TLS, or plain TCP for an `http://` endpoint
/// (an emulator).
enum Stream {
    Plain(TokioIo<tokio::net::TcpStream>),
    Tls(Box<TokioIo<tokio_native_tls::TlsStream<tokio::net::TcpStream>>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(s) => s.connected(),
            Stream::Tls(_) => Connected::new(),
        }
    }
}

impl Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn built(key: &(bool, Vec<u8>)) -> usize {
        let built = TLS_BUILT.lock().unwrap_or_else(|e| e.into_inner());
        built.iter().filter(|(k, _)| k == key).count()
    }

    #[test]
    fn clients_with_the_same_trust_share_one_tls_connector() {
        // A trust of its own (no test shares it): no roots besides the system store's.
        let trust = |pem: &'static [u8]| Trust {
            system_roots: true,
            roots_pem: std::borrow::Cow::Borrowed(pem),
        };
        let a = trust(b"");
        let key = (true, Vec::new());
        tls_connector(&a).unwrap();
        tls_connector(&a.clone()).unwrap();
        assert_eq!(built(&key), 1, "the second client built its own connector");
        // Another trust gets its own.
        let b = Trust {
            system_roots: false,
            ..a
        };
        tls_connector(&b).unwrap();
        assert_eq!(built(&(false, Vec::new())), 1);
        assert_eq!(built(&key), 1);
    }
}
