//! What `hk status` adds to the queues to answer "is it working?" (issue 51): per
//! function, its event-source mappings' state, its alarms' states, the last run that
//! finished (the newest datapoint of the heartbeat metric `outcome_done`, as its
//! missed-run alarm reads it) and the next run of its cron schedule.
//!
//! Alarms are found by name: infra/template.yaml names every alarm
//! `<stack>-<Function><Kind>Alarm` with the function's name in CamelCase; the prefix
//! `<stack>-<Function>` of one function is no prefix of another's. The heartbeat is
//! read with the `Service` dimension the functions write (`ServiceName`, default the
//! stack name) over the last [`DONE_WINDOW`] in 5-minute periods.

use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use chrono::{DateTime as ChronoTime, Datelike, Timelike, Utc};

use super::Aws;
use shared::metrics::{FUNCTION_DIMENSION, NAMESPACE, OUTCOME_DONE, SERVICE_DIMENSION};
use shared::Function;

/// How far back `hk status` looks for the last run that finished (CloudWatch answers
/// at most 1440 datapoints: three days of 5-minute periods).
pub const DONE_WINDOW: Duration = Duration::from_secs(3 * 86_400);

/// The function's name in CamelCase, as the template's logical ids carry it.
pub fn camel(f: Function) -> String {
    f.name()
        .split('-')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect()
}

/// Every alarm of `f` in `stack`: `(name without the stack prefix, state, actions on)`,
/// in name order.
pub async fn alarms(aws: &Aws, stack: &str, f: Function) -> Result<Vec<(String, String, bool)>> {
    let prefix = format!("{stack}-{}", camel(f));
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = aws
            .cloudwatch
            .describe_alarms()
            .alarm_name_prefix(&prefix)
            .alarm_types(aws_sdk_cloudwatch::types::AlarmType::CompositeAlarm)
            .alarm_types(aws_sdk_cloudwatch::types::AlarmType::MetricAlarm)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| {
                anyhow!(
                    "cannot read the alarms {prefix}*: {}",
                    aws_sdk_cloudwatch::error::DisplayErrorContext(e)
                )
            })?;
        for a in page.metric_alarms() {
            out.push((
                a.alarm_name().unwrap_or_default().to_string(),
                a.state_value()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                a.actions_enabled().unwrap_or(true),
            ));
        }
        for a in page.composite_alarms() {
            out.push((
                a.alarm_name().unwrap_or_default().to_string(),
                a.state_value()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                a.actions_enabled().unwrap_or(true),
            ));
        }
        token = page.next_token().map(String::from);
        if token.is_none() {
            break;
        }
    }
    let strip = format!("{stack}-");
    // No function's CamelCase name is a prefix of another's, so the prefix takes one
    // function's alarms only.
    let mut out: Vec<_> = out
        .into_iter()
        .map(|(n, s, a)| (n.strip_prefix(&strip).unwrap_or(&n).to_string(), s, a))
        .collect();
    out.sort();
    Ok(out)
}

/// The start of the newest 5-minute period in which a record of `f` ended with its work
/// done (`outcome_done` > 0), within [`DONE_WINDOW`]; `None` when there is none.
pub async fn last_done(aws: &Aws, service: &str, f: Function) -> Result<Option<String>> {
    let end = SystemTime::now();
    let out = aws
        .cloudwatch
        .get_metric_statistics()
        .namespace(NAMESPACE)
        .metric_name(OUTCOME_DONE.name)
        .dimensions(
            Dimension::builder()
                .name(SERVICE_DIMENSION)
                .value(service)
                .build(),
        )
        .dimensions(
            Dimension::builder()
                .name(FUNCTION_DIMENSION)
                .value(f.name())
                .build(),
        )
        .start_time(DateTime::from(end - DONE_WINDOW))
        .end_time(DateTime::from(end))
        .period(300)
        .statistics(Statistic::Sum)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "cannot read {} of {f} from CloudWatch: {}",
                OUTCOME_DONE.name,
                aws_sdk_cloudwatch::error::DisplayErrorContext(e)
            )
        })?;
    Ok(out
        .datapoints()
        .iter()
        .filter(|d| d.sum().unwrap_or_default() > 0.0)
        .filter_map(|d| d.timestamp())
        .max_by_key(|t| (t.secs(), t.subsec_nanos()))
        .and_then(|t| ChronoTime::<Utc>::from_timestamp(t.secs(), 0))
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
}

/// One field of a cron expression matches `v`: `*`, `?`, a number, `a/b` (from a, every
/// b) or a comma list of those.
fn field_matches(field: &str, v: u32) -> Option<bool> {
    let mut any = false;
    for part in field.split(',') {
        any |= match part {
            "*" | "?" => true,
            p if p.contains('/') => {
                let (start, step) = p.split_once('/')?;
                let start: u32 = if start == "*" { 0 } else { start.parse().ok()? };
                let step: u32 = step.parse().ok()?;
                step > 0 && v >= start && (v - start).is_multiple_of(step)
            }
            p => p.parse::<u32>().ok()? == v,
        };
    }
    Some(any)
}

/// The next time after `now` an EventBridge Scheduler `cron(min hour dom month dow
/// year)` expression in UTC fires, for the forms the template uses (numbers, `*`, `?`,
/// `a/b` and lists in minutes and hours, `*`/`?` or numbers in the day fields); `None`
/// for anything else (`rate(…)`, names, `L`, `W`, `#`) or nothing within two days.
pub fn next_run(expr: &str, now: ChronoTime<Utc>) -> Option<ChronoTime<Utc>> {
    let inner = expr.strip_prefix("cron(")?.strip_suffix(')')?;
    let f: Vec<&str> = inner.split_whitespace().collect();
    if f.len() != 6 || (f[4] != "?" && f[4] != "*") {
        return None;
    }
    let mut t = now.with_second(0)?.with_nanosecond(0)? + chrono::Duration::minutes(1);
    for _ in 0..(2 * 24 * 60) {
        if field_matches(f[0], t.minute())?
            && field_matches(f[1], t.hour())?
            && field_matches(f[2], t.day())?
            && field_matches(f[3], t.month())?
            && field_matches(f[5], t.year() as u32)?
        {
            return Some(t);
        }
        t += chrono::Duration::minutes(1);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> ChronoTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_next_run_of_the_templates_crons() {
        let now = at("2026-03-01T00:07:30Z");
        assert_eq!(
            next_run("cron(10 0 * * ? *)", now),
            Some(at("2026-03-01T00:10:00Z"))
        );
        assert_eq!(
            next_run("cron(0/5 * * * ? *)", now),
            Some(at("2026-03-01T00:10:00Z"))
        );
        assert_eq!(
            next_run("cron(0 2 * * ? *)", now),
            Some(at("2026-03-01T02:00:00Z"))
        );
        assert_eq!(
            next_run("cron(0 0 * * ? *)", now),
            Some(at("2026-03-02T00:00:00Z"))
        );
        assert_eq!(
            next_run("cron(0 0 * * ? *)", at("2026-03-01T00:00:00Z")),
            Some(at("2026-03-02T00:00:00Z"))
        );
        assert_eq!(next_run("rate(5 minutes)", now), None);
        assert_eq!(next_run("cron(0 0 ? * MON *)", now), None);
    }
}
