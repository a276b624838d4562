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

/// How long `hk replay dlq` keeps each message it received and did not move
/// invisible: the messages it leaves in place (type filter, `--max`, a dry run) stay
/// held until the replay ends, so every receive shows messages not seen yet instead
/// of the same first ones again. A message whose hold ran out comes back, is
/// recognised and held again.
pub const HOLD_S: i32 = 60;

/// Make every held message visible again (ChangeMessageVisibilityBatch, ten a call).
async fn release(aws: &Aws, dlq_url: &str, held: &BTreeMap<String, String>) -> Result<()> {
    use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry as E;
    let handles: Vec<&String> = held.values().collect();
    for chunk in handles.chunks(10) {
        let mut req = aws.sqs.change_message_visibility_batch().queue_url(dlq_url);
        for (i, h) in chunk.iter().enumerate() {
            req = req.entries(
                E::builder()
                    .id(format!("v{i}"))
                    .receipt_handle(h.as_str())
                    .visibility_timeout(0)
                    .build()?,
            );
        }
        let out = req.send().await?;
        if !out.failed().is_empty() {
            bail!(
                "{} message(s) of the DLQ could not be made visible again; they will be after {HOLD_S} s",
                out.failed().len()
            );
        }
    }
    Ok(())
}

/// `hk replay dlq`: move messages from `dlq_url` back to `queue_url` (at most `max`,
/// only type `kind` if given), with long polling. Every message received and not
/// moved (another type, past `max`, or any message of a dry run) is held invisible
/// ([`HOLD_S`], renewed when it comes back) until the end, then made visible again,
/// so a receive never shows the same messages twice and the replay reaches the
/// messages behind them. A real replay stops once `max` messages moved, or when a
/// receive came back empty, the DLQ reports nothing visible and nothing in flight but
/// what the replay holds, and a full visibility window has passed since it started; a
/// dry run stops at the first empty receive (everything else is held by it).
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
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    let moved = move_messages(aws, dlq_url, queue_url, max, kind, dry_run, poll, &mut held).await;
    // Release what is held whatever happened, then report the first error.
    let released = release(aws, dlq_url, &held).await;
    let report = moved?;
    released?;
    Ok(report)
}

/// The loop of [`replay_dlq`]; `held` collects `message id → latest receipt handle`
/// of every message it keeps invisible.
#[allow(clippy::too_many_arguments)]
async fn move_messages(
    aws: &Aws,
    dlq_url: &str,
    queue_url: &str,
    max: usize,
    kind: Option<&str>,
    dry_run: bool,
    poll: Poll,
    held: &mut BTreeMap<String, String>,
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
            .visibility_timeout(HOLD_S)
            .wait_time_seconds(wait.clamp(1, 20))
            .send()
            .await?
            .messages
            .unwrap_or_default();
        if msgs.is_empty() {
            if dry_run {
                break; // everything visible was seen and is held by this run
            }
            let (visible, in_flight, _) = dlq_attrs(aws, dlq_url).await?;
            if visible == 0 && in_flight <= held.len() as i64 && started.elapsed() >= window {
                break;
            }
            continue;
        }
        let mut take = Vec::new();
        for m in msgs {
            let id = m.message_id.clone().unwrap_or_default();
            let handle = m.receipt_handle.clone().unwrap_or_default();
            if !seen.insert(id.clone()) {
                held.insert(id, handle); // its hold ran out: hold it again
                continue;
            }
            let (k, key) = kind_and_key(m.body.as_deref().unwrap_or_default());
            if kind.is_some_and(|want| want != k) || counted >= max {
                report.skipped += 1;
                held.insert(id, handle);
                continue;
            }
            *report.by_type.entry(k).or_default() += 1;
            report.keys.push(key);
            counted += 1;
            if dry_run {
                held.insert(id, handle);
            } else {
                take.push(m);
            }
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

/// The function a replayed line goes to: the receiver an `--outbox` record names,
/// else `to` (`--to`, which only ever applies to bare message bodies: a record's own
/// receiver is never overridden, so a run's children go back to their own queues).
pub fn receiver_of(recorded: Option<Function>, to: Option<Function>) -> Result<Function> {
    recorded
        .or(to)
        .ok_or_else(|| anyhow!("a bare message body needs --to <function>"))
}

/// `hk replay file … --queue`: send every line's body to its receiver's queue
/// ([`receiver_of`]: the record's receiver, else `to`), in batches of ten.
pub async fn replay_file_to_queues(
    aws: &Aws,
    prefix: &str,
    lines: &[(Option<Function>, String)],
    to: Option<Function>,
) -> Result<ReplayReport> {
    let mut report = ReplayReport::default();
    let mut by_queue: BTreeMap<Function, Vec<String>> = BTreeMap::new();
    for (recv, body) in lines {
        let f = receiver_of(*recv, to)?;
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
