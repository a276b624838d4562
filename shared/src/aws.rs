//! The AWS side of a function: the SDK configuration from Lambda's environment alone
//! ([`from_env`]), the one HTTPS client of every SDK client ([`https_client`]), the
//! endpoint overrides (`AWS_ENDPOINT_URL*`), the SQS and Scheduler clients, and every
//! Secrets Manager read. Parsing the configuration is [`crate::config`]'s.

pub mod http;

use crate::config::{pg_config_from_secret, DatabaseSource};
use crate::error::{Error, Result};

/// The AWS SDK configuration of a function from Lambda's environment alone: region,
/// the execution role's credentials from the environment, and `AWS_ENDPOINT_URL`. A
/// function never needs the rest of the default provider chain (profiles, SSO, IMDS),
/// so it does not carry it (issue 8, footprint).
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> aws_config::SdkConfig {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let region = get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION"));
    let custom_endpoint = ["", "SQS", "SCHEDULER", "SECRETS_MANAGER", "S3"]
        .iter()
        .any(|s| service_endpoint(get, s).is_some());
    let mut b = aws_config::SdkConfig::builder()
        .behavior_version(aws_config::BehaviorVersion::latest())
        .http_client(https_client(custom_endpoint))
        .region(region.map(aws_config::Region::new))
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_config::environment::EnvironmentVariableCredentialsProvider::new(),
        ));
    if let Some(url) = service_endpoint(get, "") {
        b = b.endpoint_url(url);
    }
    b.build()
}

/// The Amazon Trust Services roots (Amazon Root CA 1–4, Starfield Services Root G2):
/// every AWS endpoint a function calls (SQS, Scheduler, Secrets Manager, public or
/// through interface VPC endpoints) chains to one of them.
const AMAZON_ROOTS: &[u8] = include_bytes!("../certs/amazon-trust-services.pem");

/// The one HTTPS client of a function's AWS SDK clients ([`http`]: hyper over
/// OpenSSL), trusting the Amazon roots only, so a cold start trusts five certificates
/// instead of the system store (about 150). With a custom endpoint (`AWS_ENDPOINT_URL*`,
/// local emulators or a proxy) the system store is trusted too.
pub fn https_client(with_system_roots: bool) -> aws_sdk_sqs::config::SharedHttpClient {
    http::client(http::Trust {
        system_roots: with_system_roots,
        roots_pem: AMAZON_ROOTS.into(),
    })
}

/// `AWS_ENDPOINT_URL_<service>` (or `AWS_ENDPOINT_URL` for `""`), unless
/// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS` is true.
pub fn service_endpoint(get: impl Fn(&str) -> Option<String>, service: &str) -> Option<String> {
    if get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return None;
    }
    let key = if service.is_empty() {
        "AWS_ENDPOINT_URL".to_string()
    } else {
        format!("AWS_ENDPOINT_URL_{service}")
    };
    get(&key).filter(|v| !v.trim().is_empty())
}

/// The SQS client, with `AWS_ENDPOINT_URL_SQS` applied.
pub fn sqs_client(
    aws: &aws_config::SdkConfig,
    get: impl Fn(&str) -> Option<String>,
) -> aws_sdk_sqs::Client {
    let mut conf = aws_sdk_sqs::config::Builder::from(aws);
    if let Some(url) = service_endpoint(get, "SQS") {
        conf = conf.endpoint_url(url);
    }
    aws_sdk_sqs::Client::from_conf(conf.build())
}

/// The EventBridge Scheduler client, with `AWS_ENDPOINT_URL_SCHEDULER` applied.
pub fn scheduler_client(
    aws: &aws_config::SdkConfig,
    get: impl Fn(&str) -> Option<String>,
) -> aws_sdk_scheduler::Client {
    let mut conf = aws_sdk_scheduler::config::Builder::from(aws);
    if let Some(url) = service_endpoint(get, "SCHEDULER") {
        conf = conf.endpoint_url(url);
    }
    aws_sdk_scheduler::Client::from_conf(conf.build())
}

/// Read a Secrets Manager secret's string (`AWS_ENDPOINT_URL_SECRETS_MANAGER`
/// applied), its `AWSCURRENT` version. `var` names the variable that holds the ARN,
/// for the error line.
pub async fn read_secret(
    aws: Option<&aws_config::SdkConfig>,
    var: &str,
    arn: &str,
) -> Result<String> {
    read_secret_stage(aws, var, arn, Stage::Current).await
}

/// A Secrets Manager version stage a function reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `AWSCURRENT`: the value every reader should use.
    Current,
    /// `AWSPENDING`: the value a rotation is installing (see [`SecretSource`]).
    Pending,
}

impl Stage {
    fn label(self) -> &'static str {
        match self {
            Stage::Current => "AWSCURRENT",
            Stage::Pending => "AWSPENDING",
        }
    }
}

/// Read one version stage of a secret (see [`read_secret`]).
pub async fn read_secret_stage(
    aws: Option<&aws_config::SdkConfig>,
    var: &str,
    arn: &str,
    stage: Stage,
) -> Result<String> {
    let aws = aws.ok_or_else(|| Error::Config(format!("{var} needs AWS configuration")))?;
    let mut conf = aws_sdk_secretsmanager::config::Builder::from(aws);
    if let Some(url) = service_endpoint(|k| std::env::var(k).ok(), "SECRETS_MANAGER") {
        conf = conf.endpoint_url(url);
    }
    let out = aws_sdk_secretsmanager::Client::from_conf(conf.build())
        .get_secret_value()
        .secret_id(arn)
        .version_stage(stage.label())
        .send()
        .await
        .map_err(|e| Error::Config(format!("reading {var} ({}) failed: {e}", stage.label())))?;
    out.secret_string()
        .map(str::to_string)
        .ok_or_else(|| Error::Config(format!("{var} has no SecretString")))
}

/// The least time between two re-reads of one secret after an authentication failure,
/// per execution environment. A rotation needs one re-read; a secret that is simply
/// wrong must not cost a Secrets Manager call (billed, and throttled per account) for
/// every record of every warm container, so a second failure within this interval is
/// an ordinary retryable error. A minute keeps a rotation's visible failures to about
/// one minute in the worst case (the re-read raced the rotation's last step).
pub const SECRET_REREAD_MIN_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// A secret behind an ARN that can be read again, at most once per interval, after
/// the credentials it gave were refused (issue 20, secret rotation). Shared by the
/// clones of whatever holds it (an `Arc`), so the bound is per execution environment.
pub struct SecretSource {
    aws: aws_config::SdkConfig,
    var: &'static str,
    arn: String,
    min_interval: std::time::Duration,
    last_reread: std::sync::Mutex<Option<std::time::Instant>>,
    rereads: std::sync::atomic::AtomicU64,
    reads: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SecretSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSource")
            .field("var", &self.var)
            .field("min_interval", &self.min_interval)
            .finish_non_exhaustive()
    }
}

impl SecretSource {
    /// The secret `arn`, named by its variable `var` in errors and logs, re-read at
    /// most once per [`SECRET_REREAD_MIN_INTERVAL`].
    pub fn new(aws: aws_config::SdkConfig, var: &'static str, arn: &str) -> SecretSource {
        SecretSource {
            aws,
            var,
            arn: arn.to_string(),
            min_interval: SECRET_REREAD_MIN_INTERVAL,
            last_reread: std::sync::Mutex::new(None),
            rereads: Default::default(),
            reads: Default::default(),
        }
    }

    /// Another bound between re-reads (tests).
    pub fn with_min_interval(mut self, d: std::time::Duration) -> SecretSource {
        self.min_interval = d;
        self
    }

    /// The variable that names the secret.
    pub fn var(&self) -> &'static str {
        self.var
    }

    /// The first read (cold start): `AWSCURRENT`, not counted as a re-read.
    pub async fn read(&self) -> Result<String> {
        self.read_stage(Stage::Current).await
    }

    /// Read one stage, counted in [`SecretSource::reads`].
    pub async fn read_stage(&self, stage: Stage) -> Result<String> {
        self.reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        read_secret_stage(Some(&self.aws), self.var, &self.arn, stage).await
    }

    /// Claim the right to re-read after an authentication failure: `true` at most once
    /// per interval (then counted in [`SecretSource::rereads`]). The caller then reads
    /// `AWSCURRENT`, and `AWSPENDING` when `AWSCURRENT` still holds the refused value.
    pub fn may_reread(&self) -> bool {
        let mut last = self.last_reread.lock().unwrap_or_else(|p| p.into_inner());
        let now = std::time::Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < self.min_interval) {
            return false;
        }
        *last = Some(now);
        self.rereads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }

    /// How many re-reads were claimed (each reads one or two stages).
    pub fn rereads(&self) -> u64 {
        self.rereads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many `GetSecretValue` calls this source made, the first read included.
    pub fn reads(&self) -> u64 {
        self.reads.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// The database connection configuration of a [`DatabaseSource`]: the URL parsed, or
/// the RDS-shaped secret read and parsed.
pub async fn database_config(
    source: &DatabaseSource,
    aws: Option<&aws_config::SdkConfig>,
) -> Result<tokio_postgres::Config> {
    match source {
        DatabaseSource::Url(url) => url.parse().map_err(|e| {
            Error::Config(format!(
                "DATABASE_URL is not a valid connection string: {e}"
            ))
        }),
        DatabaseSource::SecretArn(arn) => {
            let text = read_secret(aws, "DATABASE_SECRET_ARN", arn).await?;
            pg_config_from_secret(&text)
        }
    }
}
