//! PostgreSQL sessions (behaviour §7.1).
//!
//! Owns: TLS through native-tls (every certificate of the CA bundle trusted), connecting
//! with the session settings of §7.1, the [`Session`] kept across warm invocations and
//! checked before use, its reset after a failed record, and with `DATABASE_SECRET_ARN`
//! the bounded re-read of the secret when the server refuses the credentials (issue 20).
//! Its own statements are in [`sql`].

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use native_tls::{Certificate, TlsConnector};
use postgres_native_tls::MakeTlsConnector;
use tokio::sync::Mutex;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::types::Type;
use tokio_postgres::{AsyncMessage, Client};

/// Where a connection's task sends the server's notices.
type Notices = tokio::sync::mpsc::UnboundedSender<tokio_postgres::error::DbError>;

use crate::aws::{SecretSource, Stage};
use crate::config::DatabaseConfig;
use crate::error::{Error, Result};

pub mod sql;

/// `idle_in_transaction_session_timeout` of every session (behaviour §7.1).
const IDLE_IN_TRANSACTION_MS: u64 = 60_000;

/// Everything needed to open sessions: the resolved connection config and TLS.
#[derive(Clone)]
pub struct Connector {
    pg: tokio_postgres::Config,
    tls: MakeTlsConnector,
    statement_timeout_ms: u64,
    lock_timeout_ms: u64,
    rotation: Option<Arc<Rotation>>,
}

/// The credentials of a secret the connector re-read after an authentication failure;
/// they replace the user and password of the connector's config for every later
/// session, in every clone of the connector.
struct Rotation {
    source: Arc<SecretSource>,
    current: std::sync::Mutex<Option<Credentials>>,
}

/// A user and password from the database secret.
#[derive(Clone, PartialEq, Eq)]
struct Credentials {
    user: String,
    password: Vec<u8>,
}

impl Credentials {
    fn of(pg: &tokio_postgres::Config) -> Credentials {
        Credentials {
            user: pg.get_user().unwrap_or_default().to_string(),
            password: pg.get_password().unwrap_or_default().to_vec(),
        }
    }

    fn apply(&self, pg: &mut tokio_postgres::Config) {
        pg.user(&self.user);
        pg.password(self.password.clone());
    }
}

/// Whether a connection error is the server refusing the credentials:
/// `invalid_password` (28P01) or `invalid_authorization_specification` (28000).
fn is_auth_failure(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == tokio_postgres::error::SqlState::INVALID_PASSWORD
            || *c == tokio_postgres::error::SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    })
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector")
            .field("hosts", &self.pg.get_hosts())
            .field("dbname", &self.pg.get_dbname())
            .field("ssl_mode", &self.pg.get_ssl_mode())
            .finish_non_exhaustive()
    }
}

/// Build a TLS connector that trusts the system roots plus every certificate of
/// `ca_pem` (an RDS `global-bundle.pem` holds many; `Certificate::from_pem` would read
/// only the first).
pub fn tls_connector(ca_pem: Option<&[u8]>) -> Result<MakeTlsConnector> {
    let mut b = TlsConnector::builder();
    if let Some(pem) = ca_pem {
        let certs = Certificate::stack_from_pem(pem)
            .map_err(|e| Error::Config(format!("DATABASE_CA_BUNDLE is not a PEM bundle: {e}")))?;
        if certs.is_empty() {
            return Err(Error::Config(
                "DATABASE_CA_BUNDLE holds no certificate".into(),
            ));
        }
        for c in certs {
            b.add_root_certificate(c);
        }
    }
    let tls = b
        .build()
        .map_err(|e| Error::Config(format!("TLS setup failed: {e}")))?;
    Ok(MakeTlsConnector::new(tls))
}

fn is_loopback(pg: &tokio_postgres::Config) -> bool {
    pg.get_hosts().iter().all(|h| match h {
        Host::Tcp(name) => {
            name == "localhost" || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        Host::Unix(_) => true,
    })
}

impl Connector {
    /// Build a connector from a resolved connection config and the database settings.
    pub fn new(mut pg: tokio_postgres::Config, cfg: &DatabaseConfig) -> Result<Connector> {
        if cfg.require_tls && pg.get_ssl_mode() != SslMode::Require {
            if is_loopback(&pg) {
                // Local development (cargo lambda watch against a throwaway cluster).
            } else if pg.get_ssl_mode() == SslMode::Disable {
                return Err(Error::Config(
                    "TLS is required for a non-local database: remove sslmode=disable".into(),
                ));
            } else {
                pg.ssl_mode(SslMode::Require);
            }
        }
        pg.connect_timeout(Duration::from_secs(10));
        pg.keepalives(true);
        pg.keepalives_idle(Duration::from_secs(30));
        pg.tcp_user_timeout(Duration::from_secs(30));
        let pem = match &cfg.ca_bundle {
            Some(p) => Some(std::fs::read(p).map_err(|e| {
                Error::Config(format!(
                    "cannot read DATABASE_CA_BUNDLE `{}`: {e}",
                    p.display()
                ))
            })?),
            None => None,
        };
        Ok(Connector {
            pg,
            tls: tls_connector(pem.as_deref())?,
            statement_timeout_ms: cfg.statement_timeout_ms,
            lock_timeout_ms: cfg.lock_timeout_ms,
            rotation: None,
        })
    }

    /// Re-read `source` (the database secret) when the server refuses the credentials,
    /// at most once per its interval, and use what it holds from then on (user and
    /// password; a rotation changes nothing else).
    pub fn with_secret(mut self, source: Arc<SecretSource>) -> Self {
        self.rotation = Some(Arc::new(Rotation {
            source,
            current: std::sync::Mutex::new(None),
        }));
        self
    }

    /// The secret source given to [`Connector::with_secret`], if any (its counters).
    pub fn secret(&self) -> Option<&SecretSource> {
        self.rotation.as_ref().map(|r| r.source.as_ref())
    }

    /// The connection config of a new session: the credentials of the last re-read
    /// secret, if any.
    fn session_config(&self, application_name: &str) -> tokio_postgres::Config {
        let mut pg = self.pg.clone();
        if let Some(r) = &self.rotation {
            if let Some(c) = r.current.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
                c.apply(&mut pg);
            }
        }
        pg.application_name(application_name);
        pg
    }

    /// Open a connection with `pg` and spawn its task.
    async fn open(
        &self,
        pg: &tokio_postgres::Config,
    ) -> std::result::Result<Client, tokio_postgres::Error> {
        self.open_with(pg, None).await
    }

    /// Open a connection with `pg` and spawn its task, which sends every notice the
    /// server sends to `notices` (when given) and drops them otherwise.
    async fn open_with(
        &self,
        pg: &tokio_postgres::Config,
        notices: Option<Notices>,
    ) -> std::result::Result<Client, tokio_postgres::Error> {
        let (client, mut conn) = pg.connect(self.tls.clone()).await?;
        // The connection must run on its own task, or every query hangs. A notice is
        // sent on before the messages after it are routed, so a statement's notices
        // are in the channel when its result is.
        tokio::spawn(async move {
            let ended = std::future::poll_fn(|cx| loop {
                match conn.poll_message(cx) {
                    std::task::Poll::Ready(Some(Ok(AsyncMessage::Notice(n)))) => {
                        if let Some(tx) = &notices {
                            let _ = tx.send(n);
                        }
                    }
                    std::task::Poll::Ready(Some(Ok(_))) => {}
                    std::task::Poll::Ready(Some(Err(e))) => return std::task::Poll::Ready(Err(e)),
                    std::task::Poll::Ready(None) => return std::task::Poll::Ready(Ok(())),
                    std::task::Poll::Pending => return std::task::Poll::Pending,
                }
            })
            .await;
            if let Err(e) = ended {
                tracing::debug!(error = %e, "database connection ended");
            }
        });
        Ok(client)
    }

    /// Open a session like [`Connector::connect`] whose server notices (and log
    /// messages, with `client_min_messages = log`) arrive on the returned channel:
    /// for `hk check`, which reads the server's rewritten parse trees. No secret
    /// re-read on an authentication failure.
    pub async fn connect_with_notices(
        &self,
        application_name: &str,
    ) -> Result<(
        Client,
        tokio::sync::mpsc::UnboundedReceiver<tokio_postgres::error::DbError>,
    )> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let pg = self.session_config(application_name);
        let client = self.open_with(&pg, Some(tx)).await?;
        self.configure(&client).await?;
        Ok((client, rx))
    }

    /// After the server refused `pg`'s credentials: re-read the secret (bounded) and
    /// connect with what it holds.
    ///
    /// Which version: `AWSCURRENT` first. RDS's single-user rotation sets the new
    /// password on the database (`setSecret`) while the new value is still only
    /// `AWSPENDING`, and moves `AWSCURRENT` to it a moment later (`finishSecret`): a
    /// reconnect inside that window is refused with `AWSCURRENT`'s value, so when
    /// `AWSCURRENT` still holds the refused credentials, `AWSPENDING` (if any) is tried
    /// too. Both reads are one re-read of the bound.
    async fn reconnect_rotated(
        &self,
        r: &Rotation,
        pg: &tokio_postgres::Config,
        refused: tokio_postgres::Error,
    ) -> Result<Client> {
        let var = r.source.var();
        if !r.source.may_reread() {
            tracing::warn!(
                variable = var,
                sqlstate = refused.code().map(|c| c.code()),
                error_class = "db_auth",
                "database authentication failed; {var} was re-read less than the bound ago, not again"
            );
            return Err(refused.into());
        }
        let old = Credentials::of(pg);
        let mut candidates = Vec::new();
        let current = Credentials::of(&crate::config::pg_config_from_secret(
            &r.source.read_stage(Stage::Current).await?,
        )?);
        if current != old {
            candidates.push(current);
        } else {
            match r.source.read_stage(Stage::Pending).await {
                Ok(text) => candidates.push(Credentials::of(
                    &crate::config::pg_config_from_secret(&text)?,
                )),
                Err(e) => tracing::debug!(variable = var, error = %e, "no AWSPENDING version"),
            }
        }
        let mut last = refused;
        for c in candidates {
            let mut next = pg.clone();
            c.apply(&mut next);
            match self.open(&next).await {
                Ok(client) => {
                    tracing::info!(
                        variable = var,
                        "database credentials refused; re-read {var} and reconnected"
                    );
                    *r.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
                    return Ok(client);
                }
                Err(e) if is_auth_failure(&e) => last = e,
                Err(e) => {
                    // Not the credentials: keep them for the next attempt.
                    *r.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
                    return Err(e.into());
                }
            }
        }
        tracing::warn!(
            variable = var,
            sqlstate = last.code().map(|c| c.code()),
            error_class = "db_auth",
            "database authentication failed with the re-read {var} too"
        );
        Err(last.into())
    }

    /// A connector for a URL with default settings and no TLS requirement (tests, `hk`).
    pub fn from_url(url: &str) -> Result<Connector> {
        let pg = url
            .parse()
            .map_err(|e| Error::Config(format!("invalid database URL: {e}")))?;
        Connector::new(
            pg,
            &DatabaseConfig {
                source: crate::config::DatabaseSource::Url(url.to_string()),
                ca_bundle: None,
                statement_timeout_ms: 30_000,
                lock_timeout_ms: 5_000,
                require_tls: false,
            },
        )
    }

    /// Override the lock timeout (tests use a short one).
    pub fn with_lock_timeout_ms(mut self, ms: u64) -> Self {
        self.lock_timeout_ms = ms;
        self
    }

    /// Override the statement timeout (the test harness's own sessions).
    pub fn with_statement_timeout_ms(mut self, ms: u64) -> Self {
        self.statement_timeout_ms = ms;
        self
    }

    /// Open a session for `application_name`, with the settings of behaviour §7.1.
    /// A refused login with a secret source re-reads it (see [`Connector::with_secret`]).
    pub async fn connect(&self, application_name: &str) -> Result<Client> {
        let client = self.connect_unconfigured(application_name).await?;
        self.configure(&client).await?;
        Ok(client)
    }

    /// [`Connector::connect`] without the session settings: the caller must run
    /// [`Connector::configure`] before any statement that depends on them.
    async fn connect_unconfigured(&self, application_name: &str) -> Result<Client> {
        let pg = self.session_config(application_name);
        match (self.open(&pg).await, &self.rotation) {
            (Ok(c), _) => Ok(c),
            (Err(e), Some(r)) if is_auth_failure(&e) => {
                // Boxed: keeps `connect`'s future small and its type shallow for callers.
                Box::pin(self.reconnect_rotated(r, &pg, e)).await
            }
            (Err(e), _) => Err(e.into()),
        }
    }

    /// Open a session for `application_name` over a plain TCP socket that `wrap`
    /// wraps, with the settings of behaviour §7.1: for a caller that must read the
    /// protocol on the wire (local tooling, tests), so it refuses TLS (whose bytes a
    /// wrapper could not read) and Unix sockets. Functions never call it.
    pub async fn connect_through<S, F>(&self, application_name: &str, wrap: F) -> Result<Client>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
        F: FnOnce(tokio::net::TcpStream) -> S,
    {
        if self.pg.get_ssl_mode() == SslMode::Require {
            return Err(Error::Config(
                "a wrapped session reads the database protocol: use a database without sslmode=require"
                    .into(),
            ));
        }
        let host = match self.pg.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            _ => {
                return Err(Error::Config(
                    "a wrapped session needs a TCP database host, not a Unix socket".into(),
                ))
            }
        };
        let port = self.pg.get_ports().first().copied().unwrap_or(5432);
        let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| Error::Retryable(format!("cannot connect to {host}:{port}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let mut pg = self.session_config(application_name);
        pg.ssl_mode(SslMode::Disable);
        let (client, conn) = pg.connect_raw(wrap(tcp), tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "database connection ended");
            }
        });
        self.configure(&client).await?;
        Ok(client)
    }

    /// The session settings of behaviour §7.1.
    async fn configure(&self, client: &Client) -> Result<()> {
        let (statement_ms, lock_ms, idle_ms) = (
            self.statement_timeout_ms.to_string(),
            self.lock_timeout_ms.to_string(),
            IDLE_IN_TRANSACTION_MS.to_string(),
        );
        // One unnamed statement, parsed, bound and run in one message: a named one is
        // prepared in one exchange and run in the next, which a pool per transaction
        // may send to another backend ("prepared statement does not exist"), before
        // `hk check` could tell why. One round trip instead of two, too.
        client
            .query_typed_one(
                sql::CONFIGURE,
                &[
                    (&statement_ms, Type::TEXT),
                    (&lock_ms, Type::TEXT),
                    (&idle_ms, Type::TEXT),
                ],
            )
            .await?;
        Ok(())
    }
}

/// One database session kept across the records and warm invocations of a Lambda
/// execution environment.
///
/// Round trips (issue 52): the kept client is pinged at most once per invocation (a
/// frozen environment thaws between invocations, never inside one: see
/// [`Session::invocation_started`]), never when it was connected in this invocation;
/// and a new client's settings can go out in the flight of its first statements
/// ([`Session::client_unsettled`]).
pub struct Session {
    connector: Connector,
    application_name: String,
    client: Mutex<Option<Client>>,
    /// The kept client answered a ping or was connected since the invocation started.
    checked: AtomicBool,
    /// The kept client's settings (`CONFIGURE`) were applied.
    settled: AtomicBool,
}

/// A checked-out client ([`Session::client`]).
pub type Checkout<'a> = tokio::sync::MappedMutexGuard<'a, Client>;

impl Session {
    /// A holder that connects lazily.
    pub fn new(connector: Connector, application_name: &str) -> Session {
        Session {
            connector,
            application_name: application_name.to_string(),
            client: Mutex::new(None),
            checked: AtomicBool::new(false),
            settled: AtomicBool::new(false),
        }
    }

    /// The connector new sessions are opened with.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// A new invocation starts (a thawed environment may hold a dead socket): the next
    /// checkout pings the kept client, once.
    pub fn invocation_started(&self) {
        self.checked.store(false, Ordering::Release);
    }

    /// The kept client, if any, was connected for this invocation (by the schema check
    /// an on-demand init started right before it): it is not pinged in it.
    pub fn connected_for_invocation(&self) {
        self.checked.store(true, Ordering::Release);
    }

    /// Borrow a live client with the session settings applied: the kept one (pinged
    /// once per invocation, [`Session::invocation_started`]: a frozen environment can
    /// thaw with a dead socket, hence the check), otherwise a new one.
    pub async fn client(&self) -> Result<Checkout<'_>> {
        let (client, unsettled) = self.client_unsettled().await?;
        if let Some(settle) = unsettled {
            settle.run(&client).await?;
        }
        Ok(client)
    }

    /// [`Session::client`], but a new client comes without its session settings: then
    /// the [`Settle`] returned must run before any statement that depends on them, and
    /// may be sent in one flight with statements that do not (polled first in a
    /// `futures::join!`, it is processed first). Until it has succeeded, the next
    /// checkout settles the client first.
    pub async fn client_unsettled(&self) -> Result<(Checkout<'_>, Option<Settle<'_>>)> {
        let mut guard = self.client.lock().await;
        let alive = match guard.as_ref() {
            Some(c) if !c.is_closed() => {
                self.checked.load(Ordering::Acquire)
                    || tokio::time::timeout(Duration::from_secs(5), c.simple_query(sql::PING))
                        .await
                        .is_ok_and(|r| r.is_ok())
            }
            _ => false,
        };
        if !alive {
            *guard = None;
            self.settled.store(false, Ordering::Release);
            *guard = Some(
                self.connector
                    .connect_unconfigured(&self.application_name)
                    .await?,
            );
        }
        self.checked.store(true, Ordering::Release);
        let settle = (!self.settled.load(Ordering::Acquire)).then_some(Settle { session: self });
        let client = tokio::sync::MutexGuard::map(guard, |c| c.as_mut().expect("connected above"));
        Ok((client, settle))
    }

    /// After a record that failed or panicked: roll back, release every session lock,
    /// or drop the connection when that fails or its state is unknown (behaviour §7.1, §9.10).
    ///
    /// Even a session that will be dropped first gets a best-effort, time-bounded
    /// unlock: closing a socket does not release the old backend's locks
    /// synchronously, and the next record must not find its own overlap lock still
    /// held and end as `skipped: already running`.
    pub async fn reset(&self, discard: bool) {
        let mut guard = self.client.lock().await;
        if let Some(c) = guard.as_ref() {
            let ok = tokio::time::timeout(Duration::from_secs(2), async {
                c.batch_execute(sql::ROLLBACK).await?;
                c.batch_execute(sql::UNLOCK_ALL).await
            })
            .await
            .is_ok_and(|r| r.is_ok());
            if !ok || discard {
                *guard = None;
            }
        }
    }
}

/// A new client's session settings, to be applied ([`Session::client_unsettled`]).
#[must_use = "the session settings must be applied before the record's statements"]
pub struct Settle<'a> {
    session: &'a Session,
}

impl Settle<'_> {
    /// Apply the settings to `client` (the checkout this came with). A failure is
    /// returned, and the next checkout applies them again before handing the client out.
    pub async fn run(self, client: &Client) -> Result<()> {
        self.session.connector.configure(client).await?;
        self.session.settled.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_is_forced_for_remote_hosts_and_refused_when_disabled() {
        let cfg = |require| DatabaseConfig {
            source: crate::config::DatabaseSource::Url(String::new()),
            ca_bundle: None,
            statement_timeout_ms: 1,
            lock_timeout_ms: 1,
            require_tls: require,
        };
        let c = Connector::new("postgres://u@db.example/x".parse().unwrap(), &cfg(true)).unwrap();
        assert_eq!(c.pg.get_ssl_mode(), SslMode::Require);
        let c = Connector::new("postgres://u@127.0.0.1/x".parse().unwrap(), &cfg(true)).unwrap();
        assert_eq!(c.pg.get_ssl_mode(), SslMode::Prefer);
        let e = Connector::new(
            "postgres://u@db.example/x?sslmode=disable".parse().unwrap(),
            &cfg(true),
        )
        .unwrap_err();
        assert!(e.to_string().contains("TLS is required"));
    }
}
