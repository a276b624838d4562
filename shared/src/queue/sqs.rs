//! The AWS adapter of the queue port (behaviour §9.5): SQS for delays ≤ 900 s, one-time
//! EventBridge Scheduler schedules for longer ones.
//!
//! Owns: `SendMessageBatch` calls of ten with the per-entry check and retry, the
//! schedule's exact shape, and the API-call counter of the `queue-calls` benchmark.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode,
    RetryPolicy, Target,
};
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use chrono::{DateTime, Duration, Utc};

use super::{schedule_name, schedule_token, OutMessage, Queue, QueueError, SQS_BATCH};
use crate::clock::Clock;
use crate::config::{QueueTarget, SchedulerTarget};
use crate::function::Function;

/// How often the failed entries of one batch are sent again before the send fails.
const ENTRY_RETRIES: u32 = 3;

/// SQS + Scheduler transport.
pub struct SqsQueue {
    sqs: aws_sdk_sqs::Client,
    scheduler: aws_sdk_scheduler::Client,
    routes: HashMap<Function, QueueTarget>,
    schedules: Option<SchedulerTarget>,
    wall_clock: Arc<dyn Clock>,
    api_calls: AtomicU64,
}

impl SqsQueue {
    /// Build the adapter. `wall_clock` gives the `at()` times of schedules (the
    /// system clock in Lambda; fixed in tests against moto).
    pub fn new(
        sqs: aws_sdk_sqs::Client,
        scheduler: aws_sdk_scheduler::Client,
        routes: HashMap<Function, QueueTarget>,
        schedules: Option<SchedulerTarget>,
        wall_clock: Arc<dyn Clock>,
    ) -> Self {
        SqsQueue {
            sqs,
            scheduler,
            routes,
            schedules,
            wall_clock,
            api_calls: AtomicU64::new(0),
        }
    }

    /// SQS and Scheduler API calls made so far.
    pub fn api_calls(&self) -> u64 {
        self.api_calls.load(Ordering::Relaxed)
    }

    fn route(&self, f: Function) -> Result<&QueueTarget, QueueError> {
        self.routes.get(&f).ok_or_else(|| {
            QueueError(format!(
                "no queue configured for {f} (QUEUE_URL_{})",
                f.env_suffix()
            ))
        })
    }

    async fn send_batch(&self, url: &str, batch: &[&OutMessage]) -> Result<(), QueueError> {
        let mut entries: Vec<(String, &OutMessage)> = batch
            .iter()
            .enumerate()
            .map(|(i, m)| (format!("m{i}"), *m))
            .collect();
        let mut attempt = 0;
        loop {
            let mut req = self.sqs.send_message_batch().queue_url(url);
            for (id, m) in &entries {
                req = req.entries(entry(id, m)?);
            }
            self.api_calls.fetch_add(1, Ordering::Relaxed);
            let out = req
                .send()
                .await
                .map_err(|e| QueueError(format!("SendMessageBatch failed: {}", sdk_error(&e))))?;
            let failed: Vec<_> = out.failed().iter().map(|f| f.id().to_string()).collect();
            if failed.is_empty() {
                return Ok(());
            }
            attempt += 1;
            let first = &out.failed()[0];
            if attempt > ENTRY_RETRIES || out.failed().iter().any(|f| f.sender_fault()) {
                return Err(QueueError(format!(
                    "SendMessageBatch: {} of {} entries failed ({}: {})",
                    failed.len(),
                    entries.len(),
                    first.code(),
                    first.message().unwrap_or("no message")
                )));
            }
            tracing::warn!(
                failed = failed.len(),
                attempt,
                "SendMessageBatch entries failed, retrying them"
            );
            entries.retain(|(id, _)| failed.contains(id));
            tokio::time::sleep(std::time::Duration::from_millis(100 * u64::from(attempt))).await;
        }
    }

    async fn schedule(&self, m: &OutMessage) -> Result<(), QueueError> {
        let s = self.schedules.as_ref().ok_or_else(|| {
            QueueError(
                "a delay over 900 s needs SCHEDULER_GROUP_NAME and SCHEDULER_ROLE_ARN".into(),
            )
        })?;
        let route = self.route(m.receiver)?;
        let arn = route.arn.as_deref().ok_or_else(|| {
            QueueError(format!(
                "a delay over 900 s needs QUEUE_ARN_{}",
                m.receiver.env_suffix()
            ))
        })?;
        let at = at_expression(self.wall_clock.now(), m.delay_s);
        let mut target = Target::builder()
            .arn(arn)
            .role_arn(&s.role_arn)
            .input(m.envelope.to_body())
            .retry_policy(
                RetryPolicy::builder()
                    .maximum_retry_attempts(10)
                    .maximum_event_age_in_seconds(86_400)
                    .build(),
            );
        if let Some(dlq) = &route.dlq_arn {
            target = target.dead_letter_config(DeadLetterConfig::builder().arn(dlq).build());
        }
        let target = target
            .build()
            .map_err(|e| QueueError(format!("schedule target: {e}")))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| QueueError(format!("schedule window: {e}")))?;
        self.api_calls.fetch_add(1, Ordering::Relaxed);
        let res = self
            .scheduler
            .create_schedule()
            .name(schedule_name(&m.envelope.message_key))
            .group_name(&s.group_name)
            .schedule_expression(&at)
            .schedule_expression_timezone("UTC")
            .flexible_time_window(window)
            .target(target)
            .action_after_completion(ActionAfterCompletion::Delete)
            .client_token(schedule_token(&m.envelope.message_key))
            .send()
            .await;
        match res {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conflict_exception()) =>
            {
                tracing::debug!(message_key = %m.envelope.message_key, "schedule already exists");
                Ok(())
            }
            Err(e) => Err(QueueError(format!(
                "CreateSchedule failed: {}",
                sdk_error(&e)
            ))),
        }
    }
}

fn entry(id: &str, m: &OutMessage) -> Result<SendMessageBatchRequestEntry, QueueError> {
    let attr = |v: &str| {
        MessageAttributeValue::builder()
            .data_type("String")
            .string_value(v)
            .build()
            .map_err(|e| QueueError(format!("message attribute: {e}")))
    };
    SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body(m.envelope.to_body())
        .delay_seconds(m.delay_s as i32)
        .message_attributes("type", attr(&m.envelope.kind)?)
        .message_attributes("message_key", attr(&m.envelope.message_key)?)
        .build()
        .map_err(|e| QueueError(format!("batch entry: {e}")))
}

fn sdk_error<E: std::error::Error>(e: &E) -> String {
    // The SDK's Display is terse ("service error"); the source chain has the reason.
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// `at(YYYY-MM-DDThh:mm:ss)` for `wall + delay_s`, rounded up to the whole second.
pub fn at_expression(wall: DateTime<Utc>, delay_s: u32) -> String {
    let t = wall + Duration::seconds(i64::from(delay_s));
    let t = if t.timestamp_subsec_nanos() > 0 {
        t + Duration::nanoseconds(1_000_000_000 - i64::from(t.timestamp_subsec_nanos()))
    } else {
        t
    };
    format!("at({})", t.format("%Y-%m-%dT%H:%M:%S"))
}

#[async_trait]
impl Queue for SqsQueue {
    async fn send(&self, messages: &[OutMessage]) -> Result<(), QueueError> {
        let mut by_url: Vec<(&str, Vec<&OutMessage>)> = Vec::new();
        for m in messages.iter().filter(|m| !m.needs_schedule()) {
            let url = self.route(m.receiver)?.url.as_str();
            match by_url.iter_mut().find(|(u, _)| *u == url) {
                Some((_, v)) => v.push(m),
                None => by_url.push((url, vec![m])),
            }
        }
        for (url, msgs) in &by_url {
            for chunk in msgs.chunks(SQS_BATCH) {
                self.send_batch(url, chunk).await?;
            }
        }
        for m in messages.iter().filter(|m| m.needs_schedule()) {
            self.schedule(m).await?;
        }
        Ok(())
    }
}
