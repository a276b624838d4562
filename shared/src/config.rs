//! Typed configuration, read once at cold start (behaviour §10).
//!
//! Owns: every environment variable the functions use, parsed into [`Config`] with an
//! error naming the variable. Tests build one with [`Config::from_lookup`].

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

pub mod notify;
pub mod storage;

use crate::error::{Error, Result};
use crate::function::Function;

/// Where the database connection comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum DatabaseSource {
    /// `DATABASE_URL`: a libpq-style URL or key=value string.
    Url(String),
    /// `DATABASE_SECRET_ARN`: a Secrets Manager secret in the RDS JSON shape
    /// (`username`, `password`, `host`, `port`, `dbname`).
    SecretArn(String),
}

impl std::fmt::Debug for DatabaseSource {
    // Never print the URL: it may carry a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DatabaseSource::Url(_) => f.write_str("Url(<redacted>)"),
            DatabaseSource::SecretArn(a) => write!(f, "SecretArn({a})"),
        }
    }
}

/// Which transport the functions use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportKind {
    /// SQS and EventBridge Scheduler (Lambda).
    Sqs,
    /// The in-process queue of `hk`.
    Local,
}

/// Database settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DatabaseConfig {
    /// URL or secret.
    pub source: DatabaseSource,
    /// `DATABASE_CA_BUNDLE`: PEM bundle of trusted CAs; the system roots when absent.
    pub ca_bundle: Option<PathBuf>,
    /// `DB_STATEMENT_TIMEOUT_MS` (default 30000).
    pub statement_timeout_ms: u64,
    /// `DB_LOCK_TIMEOUT_MS` (default 5000).
    pub lock_timeout_ms: u64,
    /// Whether TLS must be used (always outside local mode, unless the host is loopback).
    pub require_tls: bool,
}

/// Time limits of the handlers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `DEADLINE_MARGIN_S` (default 60).
    pub deadline_margin: Duration,
    /// `DELETE_USER_BUDGET_S` (default 600).
    pub delete_user_budget: Duration,
    /// `PRUNE_DELETIONS_BUDGET_S` (default 60).
    pub prune_deletions_budget: Duration,
    /// `PAT_EXPIRING_BUDGET_S` (default 180).
    pub pat_expiring_budget: Duration,
    /// `GROUP_DESTROY_BUDGET_S` (default 600).
    pub group_destroy_budget: Duration,
    /// `remove-expired-members`' members per grouped transaction (default
    /// [`MEMBER_GROUP_SIZE`]; not read from the environment: `hk bench` varies it).
    pub member_group_size: usize,
    /// `STORAGE_GITALY`, `STORAGE_REGISTRY`, `STORAGE_OBJECTS`: what `group-destroy`
    /// does with each kind of storage (default `off`: blocked).
    pub storage: storage::StorageModes,
    /// `AUDIT_EVENTS` (`on` or `off`, default `off`): whether the removals write EE's
    /// audit events, as a licensed EE instance does (docs/gitlab-differences.md D3).
    pub audit_events: bool,
    /// `GROUP_HOOKS` (`on` or `off`, default `off`): whether the removals send EE's
    /// group hooks (`Member Hook`, `Subgroup Hook`, `Project Hook`), as an instance
    /// licensed for `group_webhooks` (Premium and up) does (docs/gitlab-differences.md,
    /// "System hooks").
    pub group_hooks: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from_lookup(&|_: &str| None).expect("the defaults are valid")
    }
}

impl Settings {
    fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<Settings> {
        Ok(Settings {
            deadline_margin: secs(get, "DEADLINE_MARGIN_S", 60)?,
            delete_user_budget: secs(get, "DELETE_USER_BUDGET_S", 600)?,
            prune_deletions_budget: secs(get, "PRUNE_DELETIONS_BUDGET_S", 60)?,
            pat_expiring_budget: secs(get, "PAT_EXPIRING_BUDGET_S", 180)?,
            group_destroy_budget: secs(get, "GROUP_DESTROY_BUDGET_S", 600)?,
            member_group_size: MEMBER_GROUP_SIZE,
            storage: storage::StorageModes::from_lookup(get)?,
            audit_events: on_off(get, AUDIT_EVENTS_ENV)?,
            group_hooks: on_off(get, GROUP_HOOKS_ENV)?,
        })
    }
}

/// The variable saying whether the instance writes EE audit events.
pub const AUDIT_EVENTS_ENV: &str = "AUDIT_EVENTS";

/// The variable saying whether the instance sends EE group hooks.
pub const GROUP_HOOKS_ENV: &str = "GROUP_HOOKS";

/// An `on`/`off` variable, `off` when unset; anything else is refused by name.
fn on_off(get: &impl Fn(&str) -> Option<String>, var: &str) -> Result<bool> {
    match get(var).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("off") => Ok(false),
        Some("on") => Ok(true),
        Some(other) => Err(Error::Config(format!(
            "{var} must be `on` or `off`, not `{other}`"
        ))),
    }
}

/// Members per grouped transaction (behaviour §7.2 allows up to a page, 1,000): past
/// 250 the time per member no longer falls while a group holds its members' row locks
/// longer (`hk bench b38-groups`, docs/benchmarks.md, "B38 after issue 19").
pub const MEMBER_GROUP_SIZE: usize = 250;

/// The variable naming the newest GitLab migration accepted past the tested range.
pub const SCHEMA_ACCEPTED_ENV: &str = "GITLAB_SCHEMA_ACCEPTED";

/// Everything a function needs from its environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Database.
    pub database: DatabaseConfig,
    /// Transport kind.
    pub transport: TransportKind,
    /// Queue of each function that this function may send to.
    pub queues: HashMap<Function, QueueTarget>,
    /// Scheduler settings for long delays.
    pub scheduler: Option<SchedulerTarget>,
    /// Budgets and the deadline margin.
    pub settings: Settings,
    /// B28 notification settings (instance, email, web hooks).
    pub notify: notify::NotifyConfig,
    /// Where `storage-cleanup` reaches Gitaly, the registry and the buckets.
    pub storage: storage::StorageConfig,
    /// `SERVICE_NAME`: the metrics' `Service` dimension (the stack). Required under
    /// Lambda (`TRANSPORT=sqs`); `local` in `hk` and tests.
    pub service: String,
    /// `GITLAB_SCHEMA_ACCEPTED`: the newest GitLab migration version an operator
    /// checked past the tested range (14 digits); the release gate
    /// ([`crate::gitlab::release`]) refuses anything newer.
    pub schema_accepted: Option<String>,
}

impl Config {
    /// Read the process environment.
    pub fn from_env() -> Result<Config> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Read configuration through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let transport = match get("TRANSPORT").as_deref() {
            None | Some("sqs") => TransportKind::Sqs,
            Some("local") => TransportKind::Local,
            Some(other) => {
                return Err(Error::Config(format!(
                    "TRANSPORT must be `sqs` or `local`, not `{other}`"
                )))
            }
        };
        let source = match (get("DATABASE_URL"), get("DATABASE_SECRET_ARN")) {
            (Some(url), _) => DatabaseSource::Url(url),
            (None, Some(arn)) => DatabaseSource::SecretArn(arn),
            (None, None) => {
                return Err(Error::Config(
                    "set DATABASE_URL or DATABASE_SECRET_ARN (the PostgreSQL connection)".into(),
                ))
            }
        };
        let database = DatabaseConfig {
            source,
            ca_bundle: get("DATABASE_CA_BUNDLE").map(PathBuf::from),
            statement_timeout_ms: num(&get, "DB_STATEMENT_TIMEOUT_MS", 30_000)?,
            lock_timeout_ms: num(&get, "DB_LOCK_TIMEOUT_MS", 5_000)?,
            require_tls: transport == TransportKind::Sqs,
        };
        if let Some(ca) = &database.ca_bundle {
            if !ca.is_file() {
                return Err(Error::Config(format!(
                    "DATABASE_CA_BUNDLE points to `{}`, which is not a readable file",
                    ca.display()
                )));
            }
        }
        let service = match (get(crate::metrics::SERVICE_ENV), transport) {
            (Some(s), _) => s.trim().to_string(),
            (None, TransportKind::Local) => crate::metrics::LOCAL_SERVICE.to_string(),
            (None, TransportKind::Sqs) => {
                return Err(Error::Config(format!(
                    "{} is required under Lambda (TRANSPORT=sqs): the metrics' Service \
                     dimension that keeps two stacks apart",
                    crate::metrics::SERVICE_ENV
                )))
            }
        };
        let mut queues = HashMap::new();
        for f in Function::ALL {
            let sfx = f.env_suffix();
            if let Some(url) = get(&format!("QUEUE_URL_{sfx}")) {
                queues.insert(
                    *f,
                    QueueTarget {
                        url,
                        arn: get(&format!("QUEUE_ARN_{sfx}")),
                        dlq_arn: get(&format!("DLQ_ARN_{sfx}")),
                    },
                );
            }
        }
        let scheduler = match (get("SCHEDULER_GROUP_NAME"), get("SCHEDULER_ROLE_ARN")) {
            (Some(group_name), Some(role_arn)) => Some(SchedulerTarget {
                group_name,
                role_arn,
            }),
            (None, None) => None,
            _ => {
                return Err(Error::Config(
                    "SCHEDULER_GROUP_NAME and SCHEDULER_ROLE_ARN must be set together".into(),
                ))
            }
        };
        let settings = Settings::from_lookup(&get)?;
        let schema_accepted = get(SCHEMA_ACCEPTED_ENV).map(|v| v.trim().to_string());
        if let Some(v) = schema_accepted.as_deref() {
            if !crate::gitlab::release::valid_accepted(v) {
                return Err(Error::Config(format!(
                    "{SCHEMA_ACCEPTED_ENV} must be a GitLab migration version (14 digits, \
                     the newest in schema_migrations that you checked), not `{v}`"
                )));
            }
        }
        Ok(Config {
            database,
            transport,
            queues,
            scheduler,
            settings,
            notify: notify::NotifyConfig::from_lookup(&get)?,
            storage: storage::StorageConfig::from_lookup(&get)?,
            service,
            schema_accepted,
        })
    }

    /// `hk`'s and the tests' configuration: `TRANSPORT=local` on `database_url`, every
    /// other variable at its default.
    pub fn local(database_url: &str) -> Result<Config> {
        Config::from_lookup(|k| match k {
            "DATABASE_URL" => Some(database_url.to_string()),
            "TRANSPORT" => Some("local".into()),
            _ => None,
        })
    }

    /// Check that the queues this function sends to are configured (SQS mode only).
    pub fn require_queues(&self, targets: &[Function]) -> Result<()> {
        if self.transport == TransportKind::Local {
            return Ok(());
        }
        for f in targets {
            if !self.queues.contains_key(f) {
                return Err(Error::Config(format!(
                    "QUEUE_URL_{} is required: this function sends to {f}",
                    f.env_suffix()
                )));
            }
        }
        Ok(())
    }
}

/// Where a function's messages go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueTarget {
    /// The queue URL (`QUEUE_URL_<FUNCTION>`).
    pub url: String,
    /// The queue ARN (`QUEUE_ARN_<FUNCTION>`), the target of schedules.
    pub arn: Option<String>,
    /// The DLQ ARN (`DLQ_ARN_<FUNCTION>`), the schedule's dead-letter target.
    pub dlq_arn: Option<String>,
}

/// Scheduler settings for delays over 900 s.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerTarget {
    /// `SCHEDULER_GROUP_NAME`.
    pub group_name: String,
    /// `SCHEDULER_ROLE_ARN`: the role Scheduler assumes to send to the queue.
    pub role_arn: String,
}

fn num(get: &impl Fn(&str) -> Option<String>, key: &str, default: u64) -> Result<u64> {
    match get(key) {
        None => Ok(default),
        Some(v) => v
            .trim()
            .parse()
            .map_err(|_| Error::Config(format!("{key} must be a non-negative integer, not `{v}`"))),
    }
}

fn secs(get: &impl Fn(&str) -> Option<String>, key: &str, default: u64) -> Result<Duration> {
    num(get, key, default).map(Duration::from_secs)
}

/// Build a connection configuration from an RDS-shaped secret
/// (`{"username","password","host","port","dbname"}`). TLS is required.
pub fn pg_config_from_secret(text: &str) -> Result<tokio_postgres::Config> {
    #[derive(serde::Deserialize)]
    struct Secret {
        username: String,
        password: String,
        host: String,
        #[serde(default)]
        port: Option<serde_json::Value>,
        #[serde(default)]
        dbname: Option<String>,
    }
    let s: Secret = serde_json::from_str(text).map_err(|e| {
        Error::Config(format!(
            "the database secret must be JSON with username, password, host, port, dbname ({})",
            crate::error::json_error_kind(&e)
        ))
    })?;
    let bad_port = || Error::Config("the database secret's port is not a number".into());
    let port = match s.port {
        None => 5432,
        Some(serde_json::Value::Number(n)) => n.as_u64().unwrap_or(5432) as u16,
        Some(serde_json::Value::String(p)) => p.parse().map_err(|_| bad_port())?,
        Some(_) => return Err(bad_port()),
    };
    let mut cfg = tokio_postgres::Config::new();
    cfg.user(&s.username)
        .password(&s.password)
        .host(&s.host)
        .port(port)
        .dbname(s.dbname.as_deref().unwrap_or("postgres"))
        .ssl_mode(tokio_postgres::config::SslMode::Require);
    Ok(cfg)
}
