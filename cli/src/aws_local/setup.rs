//! `hk local setup`: every function's queue and DLQ (redrive after 5 receives), the
//! schedule group, and the env file for `cargo lambda watch --env-file`.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::json;

use super::{dlq_name, queue_name, Aws};
use shared::Function;

/// `hk local setup`: queues, DLQs, the schedule group, and the env file.
pub async fn setup(
    aws: &Aws,
    prefix: &str,
    visibility_s: u32,
    endpoint: Option<&str>,
) -> Result<BTreeMap<String, String>> {
    let mut env = BTreeMap::new();
    for f in Function::ALL {
        let dlq_url = aws
            .create(
                &dlq_name(prefix, *f),
                &[(QueueAttributeName::MessageRetentionPeriod, "1209600".into())],
            )
            .await?;
        let dlq_arn = aws.arn(&dlq_url).await?;
        let redrive = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}).to_string();
        let url = aws
            .create(
                &queue_name(prefix, *f),
                &[
                    (QueueAttributeName::RedrivePolicy, redrive),
                    (
                        QueueAttributeName::VisibilityTimeout,
                        visibility_s.to_string(),
                    ),
                ],
            )
            .await?;
        let arn = aws.arn(&url).await?;
        let sfx = f.env_suffix();
        env.insert(format!("QUEUE_URL_{sfx}"), url);
        env.insert(format!("QUEUE_ARN_{sfx}"), arn);
        env.insert(format!("DLQ_ARN_{sfx}"), dlq_arn);
    }
    match aws
        .scheduler
        .create_schedule_group()
        .name(prefix)
        .send()
        .await
    {
        Ok(_) => {}
        Err(e)
            if e.as_service_error()
                .is_some_and(|s| s.is_conflict_exception()) => {}
        Err(e) => return Err(anyhow!("cannot create schedule group {prefix}: {e}")),
    }
    env.insert("SCHEDULER_GROUP_NAME".into(), prefix.into());
    env.insert(
        "SCHEDULER_ROLE_ARN".into(),
        "arn:aws:iam::123456789012:role/hk-local-scheduler".into(),
    );
    env.insert("TRANSPORT".into(), "sqs".into());
    env.insert(
        shared::metrics::SERVICE_ENV.into(),
        format!("hk-local-{prefix}"),
    );
    if let Some(e) = endpoint {
        env.insert("AWS_ENDPOINT_URL".into(), e.into());
    }
    for k in ["AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"] {
        let v = std::env::var(k).unwrap_or_else(|_| {
            if k == "AWS_REGION" {
                "us-east-1".into()
            } else {
                "testing".into()
            }
        });
        env.insert(k.into(), v);
    }
    if let Ok(db) = std::env::var("DATABASE_URL") {
        env.insert("DATABASE_URL".into(), db);
    }
    Ok(env)
}
