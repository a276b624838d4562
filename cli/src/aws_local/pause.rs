//! `hk pause` / `hk resume`: stop and restart a function of a deployed stack without a
//! deploy (docs/runbook.md#pause). For each function: every recurring schedule that
//! targets its queue is set `DISABLED` / `ENABLED` with UpdateSchedule, every other
//! field sent back as GetSchedule returned it (UpdateSchedule replaces the whole
//! schedule); every Lambda event-source mapping reading its queue is disabled /
//! enabled (UpdateEventSourceMapping `Enabled`); and the actions of its missed-run
//! page (`<stack>-<Cron>MissedRunAlarm`, infra/template.yaml) are switched off / on, so
//! that a paused cron does not page for the runs the pause stops. Nothing else of the
//! stack changes; a later deploy leaves the pause alone unless it changes one of these
//! resources (the runbook says what to do).

use anyhow::{anyhow, Result};
use aws_sdk_scheduler::types::ScheduleState;
use serde_json::{json, Value};

use super::clients::sdk_failure;
use super::status::{schedules, Listed};
use super::{queue_name, Aws};
use shared::Function;

/// What `hk pause` / `hk resume` changed for one function.
#[derive(Debug, Clone, Default)]
pub struct PauseChange {
    /// The function.
    pub function: Option<Function>,
    /// Every recurring schedule targeting its queue: `(name, state before, state after)`.
    pub schedules: Vec<(String, String, String)>,
    /// Every event-source mapping reading its queue: `(uuid, state before, enabled after)`.
    pub mappings: Vec<(String, String, bool)>,
    /// Its missed-run page whose actions were switched, when the stack has one.
    pub alarm: Option<String>,
}

impl PauseChange {
    /// The change as JSON (`--json`).
    pub fn to_json(&self) -> Value {
        json!({
            "function": self.function.map(|f| f.name()),
            "schedules": self.schedules.iter().map(|(n, b, a)| json!({"name": n, "before": b, "after": a})).collect::<Vec<_>>(),
            "mappings": self.mappings.iter().map(|(u, b, a)| json!({"uuid": u, "before": b, "enabled": a})).collect::<Vec<_>>(),
            "missed_run_alarm": self.alarm,
        })
    }
}

/// The missed-run page of a cron function in `stack` (infra/template.yaml names every
/// alarm `<stack>-<logical id>`).
pub fn missed_run_alarm(stack: &str, f: Function) -> String {
    format!("{stack}-{}MissedRunAlarm", super::health::camel(f))
}

/// The event-source mappings reading the queue `arn`: `(uuid, state)`.
pub async fn mappings(aws: &Aws, arn: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut marker = None;
    loop {
        let page = aws
            .lambda
            .list_event_source_mappings()
            .event_source_arn(arn)
            .set_marker(marker)
            .send()
            .await
            .map_err(|e| sdk_failure(&format!("listing the event-source mappings of {arn}"), e))?;
        for m in page.event_source_mappings() {
            out.push((
                m.uuid().unwrap_or_default().to_string(),
                m.state().unwrap_or_default().to_string(),
            ));
        }
        marker = page.next_marker().map(String::from);
        if marker.is_none() {
            break;
        }
    }
    Ok(out)
}

/// Sets one schedule's state, sending back every other field as GetSchedule returned it.
async fn set_schedule_state(
    aws: &Aws,
    group: &str,
    name: &str,
    state: ScheduleState,
) -> Result<()> {
    let s = aws
        .scheduler
        .get_schedule()
        .group_name(group)
        .name(name)
        .send()
        .await
        .map_err(|e| sdk_failure(&format!("reading schedule {group}/{name}"), e))?;
    aws.scheduler
        .update_schedule()
        .name(name)
        .group_name(group)
        .set_schedule_expression(s.schedule_expression().map(String::from))
        .set_schedule_expression_timezone(s.schedule_expression_timezone().map(String::from))
        .set_start_date(s.start_date().cloned())
        .set_end_date(s.end_date().cloned())
        .set_description(s.description().map(String::from))
        .set_kms_key_arn(s.kms_key_arn().map(String::from))
        .set_target(s.target().cloned())
        .set_flexible_time_window(s.flexible_time_window().cloned())
        .set_action_after_completion(s.action_after_completion().cloned())
        .state(state)
        .send()
        .await
        .map_err(|e| sdk_failure(&format!("updating schedule {group}/{name}"), e))?;
    Ok(())
}

/// Pauses (`paused`) or resumes each of `functions` of the stack whose queues are
/// `<names>-<function>`, schedules in `group`; `stack` names its alarms (`None` for
/// local queues: no alarm). A function without its queue is an error naming it; so is,
/// when `strict` (one function named), one that no schedule and no mapping reads.
pub async fn set_paused(
    aws: &Aws,
    names: &str,
    group: &str,
    stack: Option<&str>,
    functions: &[Function],
    paused: bool,
    strict: bool,
) -> Result<Vec<PauseChange>> {
    let listed: Vec<Listed> = schedules(aws, group).await?;
    let state = if paused {
        ScheduleState::Disabled
    } else {
        ScheduleState::Enabled
    };
    let mut out = Vec::new();
    for &f in functions {
        let url = aws.url(&queue_name(names, f)).await?;
        let arn = aws.arn(&url).await?;
        let mut change = PauseChange {
            function: Some(f),
            ..PauseChange::default()
        };
        for l in listed
            .iter()
            .filter(|l| l.target == arn && !l.schedule.expression.starts_with("at("))
        {
            set_schedule_state(aws, group, &l.schedule.name, state.clone()).await?;
            change.schedules.push((
                l.schedule.name.clone(),
                l.schedule.state.clone(),
                state.as_str().to_string(),
            ));
        }
        for (uuid, before) in mappings(aws, &arn).await? {
            aws.lambda
                .update_event_source_mapping()
                .uuid(&uuid)
                .enabled(!paused)
                .send()
                .await
                .map_err(|e| sdk_failure(&format!("updating event-source mapping {uuid}"), e))?;
            change.mappings.push((uuid, before, !paused));
        }
        if let (Some(stack), Some(_)) = (stack, f.cron()) {
            let name = missed_run_alarm(stack, f);
            // By name, metric or composite (the template's is a composite).
            let found = aws
                .cloudwatch
                .describe_alarms()
                .alarm_names(&name)
                .alarm_types(aws_sdk_cloudwatch::types::AlarmType::CompositeAlarm)
                .alarm_types(aws_sdk_cloudwatch::types::AlarmType::MetricAlarm)
                .send()
                .await
                .map_err(|e| {
                    anyhow!(
                        "cannot read alarm {name}: {}",
                        aws_sdk_cloudwatch::error::DisplayErrorContext(e)
                    )
                })?;
            if !found.composite_alarms().is_empty() || !found.metric_alarms().is_empty() {
                let switched = if paused {
                    aws.cloudwatch
                        .disable_alarm_actions()
                        .alarm_names(&name)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_sdk_cloudwatch::error::DisplayErrorContext(e).to_string())
                } else {
                    aws.cloudwatch
                        .enable_alarm_actions()
                        .alarm_names(&name)
                        .send()
                        .await
                        .map(|_| ())
                        .map_err(|e| aws_sdk_cloudwatch::error::DisplayErrorContext(e).to_string())
                };
                switched.map_err(|e| anyhow!("cannot switch the actions of {name}: {e}"))?;
                change.alarm = Some(name);
            }
        }
        if strict && change.schedules.is_empty() && change.mappings.is_empty() {
            return Err(anyhow!(
                "{f}: no schedule and no event-source mapping reads its queue {} (is --stack the deployed stack?)",
                queue_name(names, f)
            ));
        }
        out.push(change);
    }
    Ok(out)
}
