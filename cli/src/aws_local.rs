//! `hk local` and `hk replay`: local AWS emulation around `cargo lambda watch`, and
//! recovery by replaying messages.
//!
//! * `hk local setup` creates every function's queue and DLQ (redrive after 5
//!   receives) and the schedule group in an SQS/Scheduler endpoint (moto), and writes
//!   the env file for `cargo lambda watch --env-file`.
//! * `hk local pump` is the event-source-mapping stand-in: it polls the queues, posts
//!   SQS events to the functions served by `cargo lambda watch`, deletes what
//!   succeeded, leaves reported failures to the queue's redrive into the DLQ, and fires
//!   due one-time schedules (moto never fires them).
//! * `hk replay dlq|file` moves messages back: DLQ → source queue (receive,
//!   SendMessageBatch, delete), a JSON-lines file → a queue, or a file → the local
//!   runner.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use aws_sdk_sqs::types::{
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use chrono::{NaiveDateTime, Utc};
use serde_json::{json, Value};

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

    async fn arn(&self, url: &str) -> Result<String> {
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

    async fn create(&self, name: &str, attrs: &[(QueueAttributeName, String)]) -> Result<String> {
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

/// What a replay moved.
#[derive(Debug, Default, Clone)]
pub struct ReplayReport {
    /// Messages moved (or, in a dry run, that would move), by message type.
    pub by_type: BTreeMap<String, u64>,
    /// Their message keys.
    pub keys: Vec<String>,
    /// Messages left in place by the type filter.
    pub skipped: u64,
}

fn kind_and_key(body: &str) -> (String, String) {
    let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let s = |k: &str, d: &str| v.get(k).and_then(Value::as_str).unwrap_or(d).to_string();
    (s("type", "unparseable"), s("message_key", ""))
}

fn entry(i: usize, body: &str) -> Result<SendMessageBatchRequestEntry> {
    let (kind, key) = kind_and_key(body);
    let mut e = SendMessageBatchRequestEntry::builder()
        .id(format!("r{i}"))
        .message_body(body);
    if kind != "unparseable" {
        e = e.message_attributes(
            "type",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(kind)
                .build()?,
        );
    }
    if !key.is_empty() {
        e = e.message_attributes(
            "message_key",
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(key)
                .build()?,
        );
    }
    Ok(e.build()?)
}

async fn send_bodies(aws: &Aws, url: &str, bodies: &[String]) -> Result<()> {
    for chunk in bodies.chunks(10) {
        let mut req = aws.sqs.send_message_batch().queue_url(url);
        for (i, b) in chunk.iter().enumerate() {
            req = req.entries(entry(i, b)?);
        }
        let out = req.send().await?;
        if !out.failed().is_empty() {
            bail!(
                "{} entries of a SendMessageBatch failed; nothing was deleted from the source",
                out.failed().len()
            );
        }
    }
    Ok(())
}

/// `hk replay dlq`: move messages from `dlq_url` back to `queue_url` (at most `max`,
/// only type `kind` if given). A dry run receives and counts, then makes everything
/// visible again. Messages are deleted from the DLQ only after the send succeeded.
pub async fn replay_dlq(
    aws: &Aws,
    dlq_url: &str,
    queue_url: &str,
    max: usize,
    kind: Option<&str>,
    dry_run: bool,
) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut seen = std::collections::HashSet::new();
    let mut counted = 0usize;
    let mut empty_rounds = 0;
    while counted < max && empty_rounds < 2 {
        let msgs = aws
            .sqs
            .receive_message()
            .queue_url(dlq_url)
            .max_number_of_messages(((max - counted).min(10)) as i32)
            .visibility_timeout(30)
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if msgs.is_empty() {
            empty_rounds += 1;
            continue;
        }
        let mut take = Vec::new();
        let mut release = Vec::new();
        let mut new_in_round = 0;
        for m in msgs {
            let first_time = seen.insert(m.message_id.clone().unwrap_or_default());
            let (k, key) = kind_and_key(m.body.as_deref().unwrap_or_default());
            if !first_time {
                release.push(m);
                continue;
            }
            new_in_round += 1;
            if kind.is_some_and(|want| want != k) || counted >= max {
                report.skipped += 1;
                release.push(m);
                continue;
            }
            *report.by_type.entry(k).or_default() += 1;
            report.keys.push(key);
            counted += 1;
            if dry_run {
                release.push(m);
            } else {
                take.push(m);
            }
        }
        for m in &release {
            aws.sqs
                .change_message_visibility()
                .queue_url(dlq_url)
                .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                .visibility_timeout(0)
                .send()
                .await?;
        }
        if !take.is_empty() {
            let bodies: Vec<String> = take
                .iter()
                .map(|m| m.body.clone().unwrap_or_default())
                .collect();
            send_bodies(aws, queue_url, &bodies).await?;
            for m in &take {
                aws.sqs
                    .delete_message()
                    .queue_url(dlq_url)
                    .receipt_handle(m.receipt_handle.clone().unwrap_or_default())
                    .send()
                    .await?;
            }
        }
        if new_in_round == 0 {
            break; // everything in view was seen before: the DLQ has nothing new
        }
    }
    Ok(report)
}

/// Read a JSON-lines file of message bodies or `--outbox` records:
/// `(receiver if recorded, body)` per non-empty line.
/// A directory is read as an `--outbox` directory: every `*.json` file, in name order.
pub fn read_lines(path: &std::path::Path) -> Result<Vec<(Option<Function>, String)>> {
    let text = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let mut text = String::new();
        for f in files {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&f)?)
                .with_context(|| format!("{} is not JSON", f.display()))?;
            text.push_str(&v.to_string());
            text.push('\n');
        }
        text
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?
    };
    let mut out = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("line {} is not JSON", i + 1))?;
        match (v.get("receiver").and_then(Value::as_str), v.get("body")) {
            (Some(r), Some(body)) => {
                let f = Function::from_name(r)
                    .ok_or_else(|| anyhow!("line {}: unknown receiver {r}", i + 1))?;
                out.push((Some(f), body.to_string()));
            }
            _ => out.push((None, line.to_string())),
        }
    }
    Ok(out)
}

/// `hk replay file … --queue`: send every line's body to its receiver's queue (or to
/// `to`), in batches of ten.
pub async fn replay_file_to_queues(
    aws: &Aws,
    prefix: &str,
    lines: &[(Option<Function>, String)],
    to: Option<Function>,
) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut by_queue: BTreeMap<Function, Vec<String>> = BTreeMap::new();
    for (recv, body) in lines {
        let f = to
            .or(*recv)
            .ok_or_else(|| anyhow!("a bare message body needs --to <function>"))?;
        let (k, key) = kind_and_key(body);
        *report.by_type.entry(k).or_default() += 1;
        report.keys.push(key);
        by_queue.entry(f).or_default().push(body.clone());
    }
    for (f, bodies) in by_queue {
        let url = aws.url(&queue_name(prefix, f)).await?;
        send_bodies(aws, &url, &bodies).await?;
    }
    Ok(report)
}
