//! The AWS clients of `hk`'s AWS commands ([`Aws`]: an endpoint such as moto, or the
//! default chain with `--region`/`--profile`), the up-front check that credentials and
//! a region resolve (one line saying what to set otherwise), and the naming convention
//! of queues and DLQs.

use anyhow::{anyhow, Context, Result};
use aws_sdk_sqs::types::QueueAttributeName;

use shared::Function;

/// Queue names of the local convention: `<prefix>-<function>` and `…-dlq`.
pub fn queue_name(prefix: &str, f: Function) -> String {
    format!("{prefix}-{}", f.name())
}

/// The DLQ name of a function.
pub fn dlq_name(prefix: &str, f: Function) -> String {
    format!("{prefix}-{}-dlq", f.name())
}

/// The event-source-mapping batch size of behaviour §9.12.
pub fn batch_size(f: Function) -> i32 {
    let single = f.cron().is_some()
        || matches!(
            f.name(),
            "prune-deletions" | "group-destroy" | "delete-user"
        );
    if single {
        1
    } else {
        10
    }
}

/// Where `hk`'s AWS commands take their SDK configuration from: `--endpoint` (moto),
/// `--region` and `--profile`, each passed to the SDK's loader; what is not given comes
/// from the environment and the shared config files, as the AWS CLI takes it.
#[derive(Debug, Clone, Default)]
pub struct AwsOptions {
    /// An SQS/Scheduler endpoint such as moto's.
    pub endpoint: Option<String>,
    /// `--region`: wins over `AWS_REGION` and the profile's region.
    pub region: Option<String>,
    /// `--profile`: wins over `AWS_PROFILE`.
    pub profile: Option<String>,
}

/// The AWS configuration is unusable before the first call (no credentials, no
/// region): one line saying what to set. `hk` exits 2 on it.
#[derive(Debug)]
pub struct AwsSetupError(pub String);

impl std::fmt::Display for AwsSetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AwsSetupError {}

/// What to tell a person whose credentials did not load: `profile` is the one asked
/// for (`--profile` or `AWS_PROFILE`), `reason` the provider chain's error text.
pub fn credentials_advice(profile: Option<&str>, reason: &str) -> String {
    match profile {
        None => "no AWS credentials: set AWS_PROFILE or pass --profile, or set \
                 AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
            .to_string(),
        // SSO profiles load (aws-config's `sso` feature) from the AWS CLI's token cache;
        // without a session, or with an expired one, the provider says so.
        Some(p) if reason.to_ascii_lowercase().contains("sso") => format!(
            "AWS profile `{p}` uses IAM Identity Center (SSO) and has no valid session: \
             run `aws sso login --profile {p}`, then hk again"
        ),
        Some(p) => {
            // The chain ends at instance metadata whatever the profile lacked: its
            // error says nothing about the profile.
            let reason = if reason.contains("IMDS") || reason.is_empty() {
                String::new()
            } else {
                format!(" ({reason})")
            };
            format!(
                "no AWS credentials from profile `{p}`{reason}: check it in ~/.aws/config and \
                 ~/.aws/credentials (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE), or pass \
                 another --profile"
            )
        }
    }
}

/// What to tell a person without a region.
pub const REGION_ADVICE: &str = "no AWS region: pass --region or set AWS_REGION";

/// An error's text with its sources, each once (a source whose text the chain already
/// shows is left out), on one line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        let t = s.to_string();
        if !t.is_empty() && !out.contains(&t) {
            out.push_str(": ");
            out.push_str(&t);
        }
        src = s.source();
    }
    out.replace('\n', " ")
}

/// AWS clients for an endpoint (moto) or the default chain.
pub struct Aws {
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// Scheduler.
    pub scheduler: aws_sdk_scheduler::Client,
    /// CloudWatch (the queues' `AWS/SQS` metrics and the alarms, for `hk status`;
    /// the missed-run pages' actions, for `hk pause`).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
    /// Lambda (the event-source mappings, for `hk pause` and `hk status`).
    pub lambda: aws_sdk_lambda::Client,
}

impl Aws {
    /// Clients for `o`, after resolving the credentials provider chain and the region
    /// up front: a missing one is an [`AwsSetupError`] saying what to set, before any
    /// call (so no request is retried without credentials). With an endpoint (moto)
    /// and nothing configured, the test credentials and `us-east-1` apply.
    pub async fn connect(o: &AwsOptions) -> Result<Aws> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let profile = o.profile.clone().or_else(|| env("AWS_PROFILE"));
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(shared::aws::https_client(true));
        if let Some(p) = &o.profile {
            loader = loader.profile_name(p);
        }
        if let Some(r) = &o.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        if let Some(e) = &o.endpoint {
            loader = loader.endpoint_url(e);
            let region_given = o.region.is_some()
                || env("AWS_REGION").is_some()
                || env("AWS_DEFAULT_REGION").is_some();
            if !region_given && profile.is_none() {
                loader = loader.region(aws_config::Region::new("us-east-1"));
            }
            if env("AWS_ACCESS_KEY_ID").is_none() && profile.is_none() {
                loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                    "testing", "testing", None, None, "hk-local",
                ));
            }
        }
        let cfg = loader.load().await;
        let creds = match cfg.credentials_provider() {
            None => Err("no credentials provider".to_string()),
            Some(p) => {
                use aws_sdk_sqs::config::ProvideCredentials;
                p.provide_credentials()
                    .await
                    .map(|_| ())
                    .map_err(|e| one_line(&e))
            }
        };
        match (creds, cfg.region().is_some()) {
            (Ok(()), true) => {}
            (Ok(()), false) => return Err(AwsSetupError(REGION_ADVICE.into()).into()),
            (Err(reason), region) => {
                let mut line = credentials_advice(profile.as_deref(), &reason);
                if !region {
                    line.push_str("; and no AWS region: pass --region or set AWS_REGION");
                }
                return Err(AwsSetupError(line).into());
            }
        }
        Ok(Aws {
            sqs: aws_sdk_sqs::Client::new(&cfg),
            scheduler: aws_sdk_scheduler::Client::new(&cfg),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&cfg),
            lambda: aws_sdk_lambda::Client::new(&cfg),
        })
    }

    /// The URL of a queue by name: [`QueueMissing`] when SQS says it does not exist,
    /// else the call's failure classified by [`sdk_failure`].
    pub async fn url(&self, name: &str) -> Result<String> {
        match self.sqs.get_queue_url().queue_name(name).send().await {
            Ok(out) => out
                .queue_url
                .ok_or_else(|| anyhow!("queue {name} has no URL")),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_queue_does_not_exist()) =>
            {
                Err(QueueMissing(name.to_string()).into())
            }
            Err(e) => Err(sdk_failure(&format!("looking up queue {name}"), e)),
        }
    }

    pub(super) async fn arn(&self, url: &str) -> Result<String> {
        self.sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| sdk_failure(&format!("reading the attributes of {url}"), e))?
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .ok_or_else(|| anyhow!("queue {url} has no ARN"))
    }

    pub(super) async fn create(
        &self,
        name: &str,
        attrs: &[(QueueAttributeName, String)],
    ) -> Result<String> {
        let mut req = self.sqs.create_queue().queue_name(name);
        for (k, v) in attrs {
            req = req.attributes(k.clone(), v);
        }
        Ok(req
            .send()
            .await
            .with_context(|| format!("cannot create queue {name}"))?
            .queue_url
            .unwrap_or_default())
    }
}

/// SQS has no queue of this name: a wrong `--stack` or `--region`, or local queues
/// not set up.
#[derive(Debug)]
pub struct QueueMissing(pub String);

impl std::fmt::Display for QueueMissing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "queue {} does not exist (is --stack the CloudFormation stack's name and --region \
             its region? local queues: `hk local setup`)",
            self.0
        )
    }
}

impl std::error::Error for QueueMissing {}

/// The error codes AWS answers a request with when its credentials are not accepted.
const REFUSED_CREDENTIALS: [&str; 7] = [
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "ExpiredToken",
    "ExpiredTokenException",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
];

/// An SDK call's failure `while` doing something, on one line: credentials AWS
/// refused or a permission missing are an [`AwsSetupError`] (exit 2, naming what to
/// fix); a request that never reached AWS keeps the SDK's `dispatch failure` text
/// (retryable: exit 1) with its cause; anything else says what failed and the code.
pub fn sdk_failure<E, R>(what: &str, e: aws_sdk_sqs::error::SdkError<E, R>) -> anyhow::Error
where
    E: aws_sdk_sqs::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_sqs::error::ProvideErrorMetadata as _;
    let code = e.code().map(String::from);
    let text = one_line(&e);
    match code.as_deref() {
        Some(c) if REFUSED_CREDENTIALS.contains(&c) => AwsSetupError(format!(
            "AWS refused the credentials ({c}) {what}: refresh them (for SSO: `aws sso login`) \
             or pass another --profile"
        ))
        .into(),
        Some(c) if c.starts_with("AccessDenied") || c == "AuthorizationError" => {
            AwsSetupError(format!(
                "not allowed ({c}) {what}: {}",
                e.message()
                    .unwrap_or("the identity's policies do not allow it")
            ))
            .into()
        }
        _ => anyhow!("{what}: {text}"),
    }
}
