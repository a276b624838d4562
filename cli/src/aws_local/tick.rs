//! `hk tick`: a cron function's message sent to its queue as its EventBridge Scheduler
//! schedule sends it, so a missed or failed run is re-run without hand-written JSON.
//!
//! The body is the deployed schedule's own target input (infra/template.yaml:
//! behaviour §9.7's cron message with Scheduler's placeholders), found as `hk status`
//! finds it (the recurring schedule of the group whose target is the function's queue
//! ARN), with `<aws.scheduler.scheduled-time>` and `<aws.scheduler.execution-id>`
//! filled in as Scheduler fills them (a UTC time without fraction, a fresh UUID). Where
//! no schedule targets the queue (queues of `hk local setup`, a schedule deleted by
//! hand) it is behaviour §9.7's message itself. Either way the body is validated as the
//! function will validate it before it is sent, and sent bare (no message
//! attributes), as Scheduler's SQS target sends it.

use anyhow::{anyhow, bail, Result};
use chrono::{DateTime, Utc};

use shared::messages::Envelope;
use shared::Function;

use super::clients::sdk_failure;
use super::status::{schedules, Listed};
use super::{queue_name, Aws};

/// Scheduler's placeholder for the time the invocation was scheduled for.
pub const SCHEDULED_TIME: &str = "<aws.scheduler.scheduled-time>";
/// Scheduler's placeholder for the invocation's id.
pub const EXECUTION_ID: &str = "<aws.scheduler.execution-id>";

/// What `hk tick` sent (or, with `send = false`, would send).
#[derive(Debug, Clone)]
pub struct Tick {
    /// The function.
    pub function: Function,
    /// The queue's URL.
    pub queue_url: String,
    /// The schedule whose input it is (`None`: behaviour §9.7's message, no schedule
    /// targets the queue).
    pub schedule: Option<String>,
    /// The body sent.
    pub body: String,
    /// The message as the function will read it.
    pub envelope: Envelope,
    /// SQS's message id (`None` when nothing was sent).
    pub message_id: Option<String>,
}

/// A schedule's input with Scheduler's placeholders filled in: `scheduled` (whole
/// seconds, `Z`) and `execution_id`.
pub fn fill(input: &str, scheduled: DateTime<Utc>, execution_id: &str) -> String {
    input
        .replace(SCHEDULED_TIME, &shared::clock::key_time(scheduled))
        .replace(EXECUTION_ID, execution_id)
}

/// The cron message of `function` at `scheduled`, from the recurring schedule of
/// `group` that targets the queue `<names>-<function>`, sent to that queue when `send`.
pub async fn tick(
    aws: &Aws,
    names: &str,
    group: &str,
    function: Function,
    scheduled: DateTime<Utc>,
    send: bool,
) -> Result<Tick> {
    if function.cron().is_none() {
        let crons: Vec<&str> = Function::ALL
            .iter()
            .filter(|f| f.cron().is_some())
            .map(|f| f.name())
            .collect();
        bail!(
            "{function} has no schedule (another function's messages start it): `hk tick` \
             sends the cron message of {}",
            crons.join(", ")
        );
    }
    let name = queue_name(names, function);
    let queue_url = aws.url(&name).await?;
    let arn = aws.arn(&queue_url).await?;
    // A group that does not exist holds no schedule: the local convention has one,
    // a deployed stack always has one.
    let listed = match schedules(aws, group).await {
        Ok(l) => l,
        Err(e) if format!("{e:#}").contains("ResourceNotFound") => Vec::new(),
        Err(e) => return Err(e),
    };
    let own: Vec<&Listed> = listed
        .iter()
        .filter(|l| l.target == arn && !l.schedule.expression.starts_with("at("))
        .collect();
    let execution_id = uuid::Uuid::new_v4().to_string();
    let (schedule, body) = match own.as_slice() {
        [] => (
            None,
            Envelope::cron(function, &execution_id, scheduled).to_body(),
        ),
        [one] => {
            let input = one.input.as_deref().ok_or_else(|| {
                anyhow!(
                    "schedule {group}/{} targets {name} without an input",
                    one.schedule.name
                )
            })?;
            (
                Some(one.schedule.name.clone()),
                fill(input, scheduled, &execution_id),
            )
        }
        more => bail!(
            "{} recurring schedules target {name} ({}): which one missed its run is not \
             clear; delete the extra one (`hk status` lists them)",
            more.len(),
            more.iter()
                .map(|l| l.schedule.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let envelope = Envelope::parse(&body, function).map_err(|m| {
        anyhow!(
            "the schedule's message for {function} is malformed ({}): {function} would refuse it",
            m.error
        )
    })?;
    if envelope.kind != function.run_type() || envelope.hop != 0 {
        bail!(
            "the schedule's message for {function} is a `{}` at hop {}, not {function}'s cron message",
            envelope.kind,
            envelope.hop
        );
    }
    let message_id = if send {
        aws.sqs
            .send_message()
            .queue_url(&queue_url)
            .message_body(&body)
            .send()
            .await
            .map_err(|e| sdk_failure(&format!("sending to {name}"), e))?
            .message_id
    } else {
        None
    };
    Ok(Tick {
        function,
        queue_url,
        schedule,
        body,
        envelope,
        message_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholders_are_filled_as_scheduler_fills_them() {
        let input = r#"{"message_key":"f:cron:<aws.scheduler.scheduled-time>","run_id":"<aws.scheduler.execution-id>","issued_at":"<aws.scheduler.scheduled-time>"}"#;
        let t = DateTime::parse_from_rfc3339("2026-03-01T00:10:04.5+00:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            fill(input, t, "e-1"),
            r#"{"message_key":"f:cron:2026-03-01T00:10:04Z","run_id":"e-1","issued_at":"2026-03-01T00:10:04Z"}"#
        );
    }
}
