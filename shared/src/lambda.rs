//! The Lambda glue: the only module that names `lambda_runtime` or `aws_lambda_events`
//! types (common.md §9.6).
//!
//! Owns: cold-start wiring ([`Deps`]: config, AWS clients, the kept database session),
//! turning an `SqsEvent` into one [`runtime::process_record`] call per record, in
//! order, and the results into an `SqsBatchResponse` with partial batch failures. A
//! malformed or failed record never fails the batch; a missing `messageId` does,
//! because Lambda would otherwise treat the whole batch as failed anyway. After a
//! failed record the session is reset before the next one (§7.1).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use lambda_runtime::{service_fn, Diagnostic, LambdaEvent};

use crate::clock::{Clock, SystemClock};
use crate::config::{Config, TransportKind};
use crate::db::{Connector, Session};
use crate::error::Error;
use crate::function::Function;
use crate::queue::sqs::SqsQueue;
use crate::queue::Queue;
use crate::runtime::{process_record, Deadline, Invocation, RecordMeta, RecordOutcome};
use crate::telemetry;

/// What a function builds once per execution environment.
pub struct Deps {
    /// The function.
    pub function: Function,
    /// Its configuration.
    pub config: Config,
    /// The transport.
    pub queue: Arc<dyn Queue>,
    /// The database session kept across warm invocations.
    pub session: Session,
    /// The clock (the system clock in Lambda).
    pub clock: Arc<dyn Clock>,
    /// B28's instance and delivery means (mailer, web-hook client, keys), built once;
    /// `None` for functions that send no notification.
    pub notifier: Option<crate::notify::Notifier>,
}

/// An error that fails the whole invocation (never a single record's failure).
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// A record without `messageId` cannot be reported as an item failure.
    #[error("SQS record without messageId")]
    MissingMessageId,
}

impl From<InvokeError> for Diagnostic {
    fn from(e: InvokeError) -> Diagnostic {
        Diagnostic {
            error_type: "InvokeError".into(),
            error_message: e.to_string(),
        }
    }
}

impl Deps {
    /// Build the dependencies from configuration (cold start).
    pub async fn new(function: Function, config: Config) -> Result<Deps, Error> {
        if config.transport != TransportKind::Sqs {
            return Err(Error::Config(
                "TRANSPORT=local is for `hk`; a Lambda function needs TRANSPORT=sqs".into(),
            ));
        }
        config.require_queues(function.sends_to())?;
        let env = |k: &str| std::env::var(k).ok();
        let aws = aws_from_env(env);
        let pg = config.database.source.resolve(Some(&aws)).await?;
        let connector = Connector::new(pg, &config.database)?;
        let mut sqs = aws_sdk_sqs::config::Builder::from(&aws);
        if let Some(url) = service_endpoint(env, "SQS") {
            sqs = sqs.endpoint_url(url);
        }
        let mut scheduler = aws_sdk_scheduler::config::Builder::from(&aws);
        if let Some(url) = service_endpoint(env, "SCHEDULER") {
            scheduler = scheduler.endpoint_url(url);
        }
        let queue = SqsQueue::new(
            aws_sdk_sqs::Client::from_conf(sqs.build()),
            aws_sdk_scheduler::Client::from_conf(scheduler.build()),
            config.queues.clone(),
            config.scheduler.clone(),
            Arc::new(SystemClock),
        );
        let notifier =
            crate::notify::Notifier::for_function(function, &config.notify, Some(&aws)).await?;
        Ok(Deps {
            function,
            notifier,
            session: Session::new(connector, function.name()),
            config,
            queue: Arc::new(queue),
            clock: Arc::new(SystemClock),
        })
    }
}

/// The AWS SDK configuration of a function, from Lambda's environment alone: the
/// region (`AWS_REGION`, else `AWS_DEFAULT_REGION`), the execution role's credentials
/// (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, read when the
/// SDK asks for them) and the global endpoint override (`AWS_ENDPOINT_URL`, unless
/// `AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`). A function never needs the rest of the
/// default provider chain (profile files, SSO, IMDS, web identity), whose code and
/// start-up work it therefore does not carry (issue 8, footprint).
pub fn aws_from_env(get: impl Fn(&str) -> Option<String>) -> aws_config::SdkConfig {
    let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
    let region = get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION"));
    let custom_endpoint = ["", "SQS", "SCHEDULER", "SECRETS_MANAGER"]
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

/// The one HTTPS client of a function's AWS SDK clients: rustls with ring, trusting the
/// Amazon roots only, so a cold start parses five certificates instead of loading the
/// system store (about 150 files). With a custom endpoint (`AWS_ENDPOINT_URL*`, local
/// emulators or a proxy) the system store is trusted too.
pub fn https_client(with_system_roots: bool) -> aws_sdk_sqs::config::SharedHttpClient {
    use aws_smithy_http_client::tls;
    let trust = tls::TrustStore::empty()
        .with_native_roots(with_system_roots)
        .with_pem_certificate(AMAZON_ROOTS);
    let context = tls::TlsContext::builder()
        .with_trust_store(trust)
        .build()
        .expect("a trust store of valid certificates");
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .tls_context(context)
        .build_https()
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

/// Time left before Lambda's deadline. A deadline more than a day in the past is not
/// a real one (emulators such as `cargo lambda watch` send a fixed 600000 ms, i.e.
/// 1970): then the function's configured timeout is used, as in `hk`.
fn remaining(deadline_ms: u64, function: Function) -> Duration {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    if deadline_ms.saturating_add(86_400_000) < now_ms {
        tracing::debug!(
            deadline_ms,
            "implausible Lambda deadline; using the function timeout"
        );
        return function.timeout();
    }
    Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}

/// Handle one SQS event: every record in order, failures reported per record.
pub async fn handle_event(
    deps: &Deps,
    event: LambdaEvent<SqsEvent>,
) -> Result<SqsBatchResponse, InvokeError> {
    let (sqs, ctx) = (event.payload, event.context);
    if sqs.records.iter().any(|r| r.message_id.is_none()) {
        tracing::error!("SQS record without messageId: failing the whole invocation");
        return Err(InvokeError::MissingMessageId);
    }
    let mut response = SqsBatchResponse::default();
    for rec in &sqs.records {
        let id = rec.message_id.clone().expect("checked above");
        let meta = RecordMeta {
            sqs_message_id: Some(id.clone()),
            receive_count: rec
                .attributes
                .get("ApproximateReceiveCount")
                .and_then(|c| c.parse().ok())
                .unwrap_or(1),
            aws_request_id: Some(ctx.request_id.clone()),
        };
        let inv = Invocation {
            function: deps.function,
            now: deps.clock.now(),
            queue: deps.queue.as_ref(),
            settings: &deps.config.settings,
            deadline: Deadline::in_(
                remaining(ctx.deadline, deps.function),
                deps.config.settings.deadline_margin,
            ),
            notifier: deps.notifier.as_ref(),
        };
        let body = rec.body.as_deref().unwrap_or("");
        let outcome = match deps.session.client().await {
            Ok(mut client) => process_record(&inv, &mut *client, body, &meta).await,
            Err(e) => {
                tracing::error!(
                    function = deps.function.name(),
                    sqs_message_id = id.as_str(),
                    receive_count = meta.receive_count,
                    error = %e,
                    error_class = e.class(),
                    "database unavailable"
                );
                RecordOutcome::Retryable {
                    error_class: e.class().into(),
                    error: e.to_string(),
                    discard_session: true,
                    report: None,
                }
            }
        };
        match outcome {
            RecordOutcome::Success(_) => {}
            RecordOutcome::Permanent { .. } => response.add_failure(id),
            RecordOutcome::Retryable {
                discard_session, ..
            } => {
                response.add_failure(id);
                deps.session.reset(discard_session).await;
            }
        }
    }
    Ok(response)
}

/// The whole `main` of a function binary: logs, config, dependencies, runtime loop.
pub async fn run(function: Function) -> Result<(), lambda_runtime::Error> {
    telemetry::init(telemetry::Sink::Stdout);
    let deps = match Config::from_env() {
        Ok(config) => Deps::new(function, config).await,
        Err(e) => Err(e),
    };
    let deps = match deps {
        Ok(d) => d,
        Err(e) => {
            tracing::error!(function = function.name(), error = %e, error_class = e.class(), "cold start failed");
            return Err(e.into());
        }
    };
    let deps = &deps;
    lambda_runtime::run(service_fn(move |event| handle_event(deps, event))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sdk_configuration_comes_from_lambdas_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let c = aws_from_env(env(&[
            ("AWS_REGION", "eu-west-1"),
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
        ]));
        assert_eq!(c.region().map(|r| r.as_ref()), Some("eu-west-1"));
        assert_eq!(c.endpoint_url(), Some("http://127.0.0.1:5000"));
        assert!(c.credentials_provider().is_some());
        let c = aws_from_env(env(&[("AWS_DEFAULT_REGION", "us-east-2")]));
        assert_eq!(c.region().map(|r| r.as_ref()), Some("us-east-2"));
        assert_eq!(c.endpoint_url(), None);
        let e = env(&[
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_SQS", "http://b"),
        ]);
        assert_eq!(service_endpoint(e, "SQS").as_deref(), Some("http://b"));
        assert_eq!(service_endpoint(e, "SCHEDULER"), None);
        let e = env(&[
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
        ]);
        assert_eq!(service_endpoint(e, ""), None);
    }

    #[test]
    fn a_real_deadline_is_used_and_an_emulators_1970_deadline_is_not() {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let r = remaining(now_ms + 30_000, Function::DeleteUser);
        assert!(r <= Duration::from_secs(30) && r > Duration::from_secs(25));
        assert_eq!(
            remaining(now_ms - 5_000, Function::DeleteUser),
            Duration::ZERO
        );
        assert_eq!(
            remaining(600_000, Function::DeleteUser),
            Function::DeleteUser.timeout()
        );
    }
}
