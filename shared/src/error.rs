//! The crate's error type and its classification.
//!
//! Owns: [`Error`], the `error_class` vocabulary of the logs (behaviour §8) and the
//! retry meaning of each error (transient, connection lost, retryable, permanent).
//! It does not decide what a handler does with an error: handlers do.

/// A send that did not happen. Sends are all-or-error: the caller rolls back.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct QueueError(pub String);

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error a handler or adapter can produce.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A database error. Display shows the server's message text alone (for example
    /// `boom` for `RAISE EXCEPTION 'boom'`), which is what the spec's log lines carry.
    #[error("{}", db_message(.0))]
    Db(#[from] tokio_postgres::Error),
    /// The transport (SQS, Scheduler or the in-process queue) refused a send.
    #[error("transport: {0}")]
    Transport(#[from] QueueError),
    /// A message that can never be processed (behaviour §9.4).
    #[error("malformed message: {0}")]
    Malformed(String),
    /// Configuration missing or invalid.
    #[error("configuration: {0}")]
    Config(String),
    /// Something the code relies on does not hold (a bug or corrupt data).
    #[error("{0}")]
    Invariant(String),
    /// A condition that the batch file calls retryable (for example a blocked user).
    #[error("{0}")]
    Retryable(String),
    /// A retryable delivery failure of `deliver-notification` (SMTP, secret
    /// decryption): `class` is its `error_class`. The text never holds a secret.
    #[error("{message}")]
    Delivery {
        /// The `error_class` (`smtp`, `decrypt`, …).
        class: &'static str,
        /// What failed, without addresses, URLs or tokens.
        message: String,
    },
    /// A retryable failure of a storage service (`storage-cleanup`: Gitaly, the
    /// container registry, object storage): `kind` is its `error_class`. The text
    /// names the item, never a token.
    #[error("{kind}: {message}")]
    Storage {
        /// `gitaly`, `registry` or `s3`.
        kind: &'static str,
        /// What failed and on which item.
        message: String,
    },
}

fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => db.message().to_string(),
        None => e.to_string(),
    }
}

/// SQLSTATEs retried by behaviour §7.4.
const TRANSIENT_SQLSTATES: [&str; 3] = ["40001", "40P01", "55P03"];

impl Error {
    /// Stable identifier of the error kind for the `error_class` log field.
    pub fn class(&self) -> &'static str {
        match self {
            Error::Db(_) => "db",
            Error::Transport(_) => "transport",
            Error::Malformed(_) => "malformed",
            Error::Config(_) => "config",
            Error::Invariant(_) => "invariant",
            Error::Retryable(_) => "retryable",
            Error::Delivery { class, .. } => class,
            Error::Storage { kind, .. } => kind,
        }
    }

    /// Serialization failure, deadlock or lock not available: retry the item (behaviour §7.4).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Db(e) => e
                .code()
                .is_some_and(|c| TRANSIENT_SQLSTATES.contains(&c.code())),
            _ => false,
        }
    }

    /// The database session is gone or unusable: abort the invocation (behaviour §7.4).
    pub fn is_connection_lost(&self) -> bool {
        match self {
            Error::Db(e) => {
                if e.is_closed() {
                    return true;
                }
                match e.code() {
                    // admin_shutdown / crash_shutdown / cannot_connect_now, and the
                    // connection-exception class 08.
                    Some(c) => {
                        let c = c.code();
                        c.starts_with("08") || c == "57P01" || c == "57P02" || c == "57P03"
                    }
                    // No SQLSTATE: an I/O or protocol error on the socket.
                    None => e.as_db_error().is_none(),
                }
            }
            _ => false,
        }
    }

    /// The SQLSTATE of a database error, if any.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// Sleep a random 100–500 ms before retrying a transient error (behaviour §7.4).
pub async fn transient_backoff() {
    let ms = 100 + u64::from(crate::random::below(401));
    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
}

/// How often a transient error is retried before it counts as an item error (behaviour §7.4).
pub const TRANSIENT_RETRIES: u32 = 3;

/// Evaluate an async expression, retrying it while it fails with a transient database
/// error, up to [`TRANSIENT_RETRIES`] times with random back-off (behaviour §7.4).
/// The expression must start its own transaction, so a retry restarts the item.
#[macro_export]
macro_rules! retry_transient {
    ($body:expr) => {{
        let mut attempt = 0u32;
        loop {
            match $body {
                Err(e) if e.is_transient() && attempt < $crate::error::TRANSIENT_RETRIES => {
                    attempt += 1;
                    tracing::debug!(attempt, error = %e, "transient database error, retrying");
                    $crate::error::transient_backoff().await;
                }
                r => break r,
            }
        }
    }};
}

/// A short, body-free description of a JSON error (bodies are never logged, behaviour §9.4).
pub fn json_error_kind(e: &serde_json::Error) -> String {
    let kind = match e.classify() {
        serde_json::error::Category::Io => "io error",
        serde_json::error::Category::Syntax => "syntax error",
        serde_json::error::Category::Data => "missing or ill-typed field",
        serde_json::error::Category::Eof => "unexpected end",
    };
    format!("{kind} at line {} column {}", e.line(), e.column())
}
