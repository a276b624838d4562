//! `hk local pump`: the event-source-mapping stand-in. It polls the queues, posts SQS
//! events to the functions served by `cargo lambda watch`, deletes what succeeded,
//! leaves reported failures to the queue's redrive into the DLQ, and fires due
//! one-time schedules (moto never fires them).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use chrono::{NaiveDateTime, Utc};
use serde_json::{json, Value};

use super::{batch_size, queue_name, Aws};
use shared::Function;

/// One SQS event record as Lambda builds it.
fn record(m: &aws_sdk_sqs::types::Message, arn: &str) -> Value {
    let attrs: serde_json::Map<String, Value> = m
        .attributes
        .as_ref()
        .map(|a| {
            a.iter()
                .map(|(k, v)| (k.as_str().to_string(), Value::from(v.clone())))
                .collect()
        })
        .unwrap_or_default();
    json!({
        "messageId": m.message_id,
        "receiptHandle": m.receipt_handle,
        "body": m.body,
        "attributes": attrs,
        "messageAttributes": {},
        "md5OfBody": m.md5_of_body,
        "eventSource": "aws:sqs",
        "eventSourceARN": arn,
        "awsRegion": "us-east-1",
    })
}

/// Counters of a pump session.
#[derive(Debug, Default, Clone)]
pub struct PumpStats {
    /// Messages delivered, by function.
    pub delivered: BTreeMap<String, u64>,
    /// Messages reported as failed, by function.
    pub failed: BTreeMap<String, u64>,
    /// One-time schedules fired.
    pub schedules_fired: u64,
    /// `--until-idle` stopped at `--max-seconds` with messages or schedules left.
    pub work_left: bool,
}

struct Target {
    f: Function,
    url: String,
    arn: String,
}

async fn targets(aws: &Aws, prefix: &str) -> Result<Vec<Target>> {
    let mut out = Vec::new();
    for f in Function::ALL {
        let url = aws.url(&queue_name(prefix, *f)).await?;
        let arn = aws.arn(&url).await?;
        out.push(Target { f: *f, url, arn });
    }
    Ok(out)
}

/// Fire every one-time schedule of `group` whose `at()` time has passed: send its
/// Input to its target queue, then delete it (ActionAfterCompletion = DELETE).
pub async fn fire_due_schedules(aws: &Aws, group: &str, now: chrono::DateTime<Utc>) -> Result<u64> {
    let list = aws
        .scheduler
        .list_schedules()
        .group_name(group)
        .send()
        .await?;
    let mut fired = 0;
    for s in list.schedules() {
        let Some(name) = s.name() else { continue };
        let sched = aws
            .scheduler
            .get_schedule()
            .name(name)
            .group_name(group)
            .send()
            .await?;
        let Some(at) = sched
            .schedule_expression()
            .and_then(|e| e.strip_prefix("at(")?.strip_suffix(')').map(str::to_string))
        else {
            continue; // a recurring schedule: not ours to fire
        };
        let at = NaiveDateTime::parse_from_str(&at, "%Y-%m-%dT%H:%M:%S")
            .with_context(|| format!("schedule {name} has a bad at() expression"))?
            .and_utc();
        if at > now {
            continue;
        }
        let target = sched
            .target()
            .ok_or_else(|| anyhow!("schedule {name} has no target"))?;
        let queue = target
            .arn()
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string();
        let url = aws.url(&queue).await?;
        aws.sqs
            .send_message()
            .queue_url(&url)
            .message_body(target.input().unwrap_or_default())
            .send()
            .await?;
        aws.scheduler
            .delete_schedule()
            .name(name)
            .group_name(group)
            .send()
            .await?;
        println!("fired schedule {name} -> {queue}");
        fired += 1;
    }
    Ok(fired)
}

/// Whether any message is still queued (visible, in flight or delayed) or any one-time
/// schedule of the prefix's group is still waiting.
async fn work_left(aws: &Aws, targets: &[Target], prefix: &str) -> Result<bool> {
    for t in targets {
        if queue_depth(aws, &t.url).await? > 0 {
            return Ok(true);
        }
    }
    let pending = aws
        .scheduler
        .list_schedules()
        .group_name(prefix)
        .send()
        .await?
        .schedules()
        .len();
    Ok(pending > 0)
}

async fn queue_depth(aws: &Aws, url: &str) -> Result<u64> {
    let a = aws
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesDelayed)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    Ok(a.values().filter_map(|v| v.parse::<u64>().ok()).sum())
}

/// `hk local pump`: deliver queue messages to `cargo lambda watch` at `invoke`.
pub async fn pump(
    aws: &Aws,
    prefix: &str,
    invoke: &str,
    until_idle: bool,
    max: Duration,
) -> Result<PumpStats> {
    let http = reqwest::Client::new();
    let targets = targets(aws, prefix).await?;
    let started = Instant::now();
    let mut stats = PumpStats::default();
    loop {
        let mut busy = false;
        stats.schedules_fired += fire_due_schedules(aws, prefix, Utc::now()).await?;
        for t in &targets {
            let out = aws
                .sqs
                .receive_message()
                .queue_url(&t.url)
                .max_number_of_messages(batch_size(t.f))
                .message_system_attribute_names(MessageSystemAttributeName::All)
                .send()
                .await?;
            let msgs = out.messages.unwrap_or_default();
            if msgs.is_empty() {
                continue;
            }
            busy = true;
            let event =
                json!({ "Records": msgs.iter().map(|m| record(m, &t.arn)).collect::<Vec<_>>() });
            let url = format!(
                "{}/2015-03-31/functions/{}/invocations",
                invoke.trim_end_matches('/'),
                t.f.name()
            );
            let resp = http.post(&url).json(&event).send().await;
            let failed: Vec<String> = match resp {
                Ok(r) if r.status().is_success() => {
                    let v: Value = r.json().await.unwrap_or(Value::Null);
                    match v.get("batchItemFailures").and_then(Value::as_array) {
                        Some(list) => list
                            .iter()
                            .filter_map(|f| {
                                f.get("itemIdentifier")
                                    .and_then(Value::as_str)
                                    .map(str::to_string)
                            })
                            .collect(),
                        // No batch response: the invocation failed as a whole.
                        None => msgs.iter().filter_map(|m| m.message_id.clone()).collect(),
                    }
                }
                Ok(r) => {
                    eprintln!("{}: invocation failed with HTTP {}", t.f.name(), r.status());
                    msgs.iter().filter_map(|m| m.message_id.clone()).collect()
                }
                Err(e) => bail!("cannot reach cargo lambda watch at {invoke}: {e}"),
            };
            let mut del = aws.sqs.delete_message_batch().queue_url(&t.url);
            let mut n = 0;
            for m in &msgs {
                if m.message_id.as_ref().is_some_and(|id| failed.contains(id)) {
                    continue; // left for redelivery after the visibility timeout, then the DLQ
                }
                del = del.entries(
                    aws_sdk_sqs::types::DeleteMessageBatchRequestEntry::builder()
                        .id(format!("d{n}"))
                        .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                        .build()?,
                );
                n += 1;
            }
            if n > 0 {
                del.send().await?;
            }
            *stats.delivered.entry(t.f.name().into()).or_default() += msgs.len() as u64;
            *stats.failed.entry(t.f.name().into()).or_default() += failed.len() as u64;
            println!(
                "{}: delivered {}, failed {}",
                t.f.name(),
                msgs.len(),
                failed.len()
            );
        }
        if started.elapsed() >= max {
            if until_idle {
                stats.work_left = work_left(aws, &targets, prefix).await?;
            }
            return Ok(stats);
        }
        if !busy {
            if until_idle && !work_left(aws, &targets, prefix).await? {
                return Ok(stats);
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
