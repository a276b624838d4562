//! The AWS clients of `hk local` and `hk replay` ([`Aws`]: an endpoint such as moto,
//! or the default chain) and the local naming convention of queues and DLQs.

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

/// AWS clients for an endpoint (moto) or the default chain.
pub struct Aws {
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
    /// Scheduler.
    pub scheduler: aws_sdk_scheduler::Client,
    /// CloudWatch (the queues' `AWS/SQS` metrics, for `hk status`).
    pub cloudwatch: aws_sdk_cloudwatch::Client,
}

impl Aws {
    /// Clients for `endpoint`, or from the environment (`AWS_ENDPOINT_URL`, region,
    /// credentials) when `None`.
    pub async fn new(endpoint: Option<&str>) -> Aws {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(shared::aws::https_client(true));
        if let Some(e) = endpoint {
            loader = loader.endpoint_url(e);
            if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err()
            {
                loader = loader.region(aws_config::Region::new("us-east-1"));
            }
            if std::env::var("AWS_ACCESS_KEY_ID").is_err() {
                loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                    "testing", "testing", None, None, "hk-local",
                ));
            }
        }
        let cfg = loader.load().await;
        Aws {
            sqs: aws_sdk_sqs::Client::new(&cfg),
            scheduler: aws_sdk_scheduler::Client::new(&cfg),
            cloudwatch: aws_sdk_cloudwatch::Client::new(&cfg),
        }
    }

    /// The URL of a queue by name.
    pub async fn url(&self, name: &str) -> Result<String> {
        self.sqs
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .with_context(|| format!("queue {name} not found (run `hk local setup`?)"))?
            .queue_url
            .ok_or_else(|| anyhow!("queue {name} has no URL"))
    }

    pub(super) async fn arn(&self, url: &str) -> Result<String> {
        self.sqs
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await?
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
