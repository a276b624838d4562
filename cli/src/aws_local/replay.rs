//! `hk replay dlq|file`: moves messages back: DLQ → source queue (receive,
//! SendMessageBatch, delete), a JSON-lines file → a queue, or a file → the local
//! runner.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use serde_json::Value;

use super::{queue_name, Aws};
use shared::Function;

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

/// How `hk replay dlq` polls: long polling of `wait_s` seconds per receive, and the
/// window after which an empty DLQ counts as empty (default: the DLQ's
/// `VisibilityTimeout`, so a message another consumer held when the replay started
/// has become visible again by then).
#[derive(Debug, Clone, Copy)]
pub struct Poll {
    /// `WaitTimeSeconds` of each receive (1–20).
    pub wait_s: i32,
    /// The window in seconds; `None`: the DLQ's visibility timeout.
    pub window_s: Option<u64>,
}

impl Default for Poll {
    fn default() -> Poll {
        Poll {
            wait_s: 20,
            window_s: None,
        }
    }
}

async fn dlq_attrs(aws: &Aws, url: &str) -> Result<(i64, i64, u64)> {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attrs = aws
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .attribute_names(A::VisibilityTimeout)
        .send()
        .await?
        .attributes
        .unwrap_or_default();
    let n = |k: A| attrs.get(&k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok((
        n(A::ApproximateNumberOfMessages) as i64,
        n(A::ApproximateNumberOfMessagesNotVisible) as i64,
        n(A::VisibilityTimeout),
    ))
}

/// `hk replay dlq`: move messages from `dlq_url` back to `queue_url` (at most `max`,
/// only type `kind` if given), with long polling. A real replay stops only when a
/// receive came back empty, the DLQ reports no message (visible or in flight), and a
/// full visibility window has passed since the replay started; a dry run receives
/// and counts, makes everything visible again, and stops once it sees nothing new.
/// Messages are deleted from the DLQ only after the send succeeded.
pub async fn replay_dlq(
    aws: &Aws,
    dlq_url: &str,
    queue_url: &str,
    max: usize,
    kind: Option<&str>,
    dry_run: bool,
    poll: Poll,
) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut seen = std::collections::HashSet::new();
    let mut counted = 0usize;
    let started = std::time::Instant::now();
    let window = match poll.window_s {
        Some(w) => w,
        None => dlq_attrs(aws, dlq_url).await?.2,
    };
    let window = std::time::Duration::from_secs(window);
    while counted < max {
        // Within the window, wait no longer than what is left of it; past it, the
        // full long poll (a consumer elsewhere may still hold messages).
        let left = window.saturating_sub(started.elapsed()).as_secs() as i32;
        let wait = if left > 0 {
            poll.wait_s.min(left)
        } else {
            poll.wait_s
        };
        let msgs = aws
            .sqs
            .receive_message()
            .queue_url(dlq_url)
            .max_number_of_messages(((max - counted).min(10)) as i32)
            .visibility_timeout(30)
            .wait_time_seconds(wait.clamp(1, 20))
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if msgs.is_empty() {
            if dry_run {
                break; // what this run released is visible: nothing else is there
            }
            let (visible, in_flight, _) = dlq_attrs(aws, dlq_url).await?;
            if visible == 0 && in_flight == 0 && started.elapsed() >= window {
                break;
            }
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
