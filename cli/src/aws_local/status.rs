//! `hk status`: per function, what SQS and EventBridge Scheduler say about a deployed
//! stack (or the local convention): queue depth, messages in flight and delayed, DLQ
//! depth, the age of the oldest message of the queue and of the DLQ, and every
//! recurring schedule that targets the function's queue, with its state.
//!
//! Names are those infra/template.yaml creates: queues `<stack>-<function>` and
//! `<stack>-<function>-dlq`, schedules in the group `<stack>-hk`. The template does
//! not name its cron schedules (CloudFormation generates the names), so a function's
//! cron schedule is found by its target (the function's queue ARN) and its
//! `cron(…)`/`rate(…)` expression; `at(…)` schedules in the group are the pending
//! one-time delays (behaviour §9.5). The age of the oldest message is not a queue
//! attribute: SQS publishes it only as the CloudWatch metric
//! `ApproximateAgeOfOldestMessage` (namespace `AWS/SQS`, dimension `QueueName`), so
//! it is the Maximum over the last [`AGE_WINDOW`] in periods of [`AGE_PERIOD_S`]
//! (`None` when CloudWatch has no datapoint: "no data", not 0). The mappings, alarms,
//! last run that finished and next run come from `health`. `hk status` receives no
//! message and changes nothing.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::{json, Value};

use super::clients::{sdk_failure, QueueMissing};
use super::{dlq_name, queue_name, Aws};
use shared::Function;

/// How far back `hk status` looks for `ApproximateAgeOfOldestMessage` datapoints.
pub const AGE_WINDOW: Duration = Duration::from_secs(5 * 60);

/// The period of the statistics `hk status` asks CloudWatch for, in seconds.
pub const AGE_PERIOD_S: i32 = 60;

/// The oldest message's age in seconds (`Ok(None)`: no datapoint), or why CloudWatch
/// could not say.
pub type Age = std::result::Result<Option<i64>, String>;

/// The approximate counts SQS reports for one queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Depth {
    /// `ApproximateNumberOfMessages`: visible, waiting.
    pub visible: i64,
    /// `ApproximateNumberOfMessagesNotVisible`: received, not yet deleted.
    pub in_flight: i64,
    /// `ApproximateNumberOfMessagesDelayed`.
    pub delayed: i64,
}

impl Depth {
    /// Every message the queue holds.
    pub fn total(&self) -> i64 {
        self.visible + self.in_flight + self.delayed
    }
}

/// One function's line of `hk status`.
#[derive(Debug, Clone)]
pub struct FunctionStatus {
    /// The function.
    pub function: Function,
    /// Its queue's counts (or why they are missing).
    pub queue: std::result::Result<Depth, String>,
    /// Its DLQ's counts (or why they are missing).
    pub dlq: std::result::Result<Depth, String>,
    /// The age of the oldest message of its queue.
    pub queue_age: Age,
    /// The age of the oldest message of its DLQ.
    pub dlq_age: Age,
    /// The state of its recurring schedules: `ENABLED`/`DISABLED` when every one
    /// is, `MIXED` when they differ, `missing` for a cron function none targets,
    /// `None` for a child function without one ([`summary`]).
    pub schedule: Option<String>,
    /// Every recurring (`cron(…)`/`rate(…)`) schedule of the group that targets its
    /// queue, in name order: one for a deployed cron, more when another schedule (a
    /// leftover, one made by hand) also ticks it.
    pub schedules: Vec<Schedule>,
    /// One-time (`at(…)`) schedules waiting to send to its queue.
    pub one_time_schedules: usize,
    /// Its queue's event-source mappings: `(uuid, state)` (`Enabled`, `Disabled`, …).
    pub mappings: std::result::Result<Vec<(String, String)>, String>,
    /// Its alarms (deployed stack only): `(name without the stack prefix, state,
    /// actions on)`; a missed-run page with its actions off is paused.
    pub alarms: std::result::Result<Vec<(String, String, bool)>, String>,
    /// The last run that finished (`outcome_done`), RFC 3339, or `None` within
    /// [`super::DONE_WINDOW`].
    pub last_done: std::result::Result<Option<String>, String>,
    /// The next run of its cron schedule (UTC), when one is enabled.
    pub next_run: Option<String>,
}

/// One recurring schedule targeting a function's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Its name in the group (CloudFormation generates the template's).
    pub name: String,
    /// `ENABLED` or `DISABLED`.
    pub state: String,
    /// Its `cron(…)` or `rate(…)` expression.
    pub expression: String,
}

/// The `schedule` of a function: the common state of `schedules`, `MIXED` when they
/// differ, `missing` when a cron function has none, `None` for a child function
/// without one.
pub fn summary(cron: bool, schedules: &[Schedule]) -> Option<String> {
    let Some(first) = schedules.first() else {
        return cron.then(|| "missing".to_string());
    };
    if schedules.iter().all(|s| s.state == first.state) {
        Some(first.state.clone())
    } else {
        Some("MIXED".to_string())
    }
}

impl FunctionStatus {
    /// The line as JSON (`hk status --json`).
    pub fn to_json(&self) -> Value {
        let depth = |d: &std::result::Result<Depth, String>, age: &Age| {
            let mut v = match d {
                Ok(d) => {
                    json!({"visible": d.visible, "in_flight": d.in_flight, "delayed": d.delayed})
                }
                Err(e) => json!({"error": e}),
            };
            v["oldest_age_s"] = json!(age.as_ref().ok().copied().flatten());
            if let Err(e) = age {
                v["oldest_age_error"] = json!(e);
            }
            v
        };
        json!({
            "function": self.function.name(),
            "queue": depth(&self.queue, &self.queue_age),
            "dlq": depth(&self.dlq, &self.dlq_age),
            "schedule": self.schedule,
            "schedules": self
                .schedules
                .iter()
                .map(|s| json!({"name": s.name, "state": s.state, "expression": s.expression}))
                .collect::<Vec<_>>(),
            "one_time_schedules": self.one_time_schedules,
            "mappings": match &self.mappings {
                Ok(m) => json!(m.iter().map(|(u, s)| json!({"uuid": u, "state": s})).collect::<Vec<_>>()),
                Err(e) => json!({"error": e}),
            },
            "alarms": match &self.alarms {
                Ok(a) => json!(a.iter().map(|(n, s, on)| json!({"name": n, "state": s, "actions_enabled": on})).collect::<Vec<_>>()),
                Err(e) => json!({"error": e}),
            },
            "paused": self.paused(),
            "last_done": match &self.last_done {
                Ok(t) => json!(t),
                Err(e) => json!({"error": e}),
            },
            "next_run": self.next_run,
        })
    }

    /// Whether `hk pause` (or a deploy) stopped it: every schedule disabled and every
    /// mapping disabled, at least one of them present.
    pub fn paused(&self) -> bool {
        let maps = self.mappings.as_deref().unwrap_or_default();
        let any = !self.schedules.is_empty() || !maps.is_empty();
        any && self.schedules.iter().all(|s| s.state == "DISABLED")
            && maps
                .iter()
                .all(|(_, s)| s == "Disabled" || s == "Disabling")
    }

    /// The alarms in ALARM, by name.
    pub fn firing(&self) -> Vec<&str> {
        self.alarms
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter(|(_, s, _)| s == "ALARM")
            .map(|(n, _, _)| n.as_str())
            .collect()
    }
}

/// The counts and the ARN of the queue `name`.
pub async fn depth(aws: &Aws, name: &str) -> Result<(Depth, String)> {
    let url = aws.url(name).await?;
    let attrs = aws
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .map_err(|e| sdk_failure(&format!("reading the attributes of queue {name}"), e))?
        .attributes
        .unwrap_or_default();
    let n = |k: QueueAttributeName| -> i64 {
        attrs
            .get(&k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_default()
    };
    let arn = attrs
        .get(&QueueAttributeName::QueueArn)
        .cloned()
        .ok_or_else(|| anyhow!("queue {name} has no ARN"))?;
    Ok((
        Depth {
            visible: n(QueueAttributeName::ApproximateNumberOfMessages),
            in_flight: n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
            delayed: n(QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        },
        arn,
    ))
}

/// The Maximum of `ApproximateAgeOfOldestMessage` of the queue `name` over the last
/// [`AGE_WINDOW`] (system clock), in whole seconds; `None` when there is no datapoint.
pub async fn oldest_age(aws: &Aws, name: &str) -> Result<Option<i64>> {
    let end = SystemTime::now();
    let out = aws
        .cloudwatch
        .get_metric_statistics()
        .namespace("AWS/SQS")
        .metric_name("ApproximateAgeOfOldestMessage")
        .dimensions(Dimension::builder().name("QueueName").value(name).build())
        .start_time(DateTime::from(end - AGE_WINDOW))
        .end_time(DateTime::from(end))
        .period(AGE_PERIOD_S)
        .statistics(Statistic::Maximum)
        .send()
        .await
        .map_err(|e| {
            anyhow!(
                "cannot read ApproximateAgeOfOldestMessage of {name} from CloudWatch: {}",
                aws_sdk_cloudwatch::error::DisplayErrorContext(e)
            )
        })?;
    Ok(out
        .datapoints()
        .iter()
        .filter_map(|d| d.maximum())
        .reduce(f64::max)
        .map(|s| s.round() as i64))
}

/// One schedule of a group as Scheduler reads it back.
pub(super) struct Listed {
    /// Name, state and expression.
    pub(super) schedule: Schedule,
    /// The target's ARN (a queue's).
    pub(super) target: String,
    /// The target's input: the message body with Scheduler's placeholders.
    pub(super) input: Option<String>,
}

/// Every schedule of `group` with its target, in name order.
pub(super) async fn schedules(aws: &Aws, group: &str) -> Result<Vec<Listed>> {
    let mut names = Vec::new();
    let mut token = None;
    loop {
        let out = aws
            .scheduler
            .list_schedules()
            .group_name(group)
            .set_next_token(token)
            .send()
            .await
            .map_err(|e| sdk_failure(&format!("listing the schedules of group {group}"), e))?;
        names.extend(
            out.schedules()
                .iter()
                .filter_map(|s| s.name().map(String::from)),
        );
        token = out.next_token().map(String::from);
        if token.is_none() {
            break;
        }
    }
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let s = aws
            .scheduler
            .get_schedule()
            .group_name(group)
            .name(&name)
            .send()
            .await
            .map_err(|e| sdk_failure(&format!("reading schedule {group}/{name}"), e))?;
        out.push(Listed {
            schedule: Schedule {
                state: s
                    .state()
                    .map(|s| s.as_str().to_string())
                    .unwrap_or_default(),
                expression: s.schedule_expression().unwrap_or_default().to_string(),
                name,
            },
            target: s.target().map(|t| t.arn().to_string()).unwrap_or_default(),
            input: s.target().and_then(|t| t.input()).map(String::from),
        });
    }
    Ok(out)
}

/// The status of every function: queues named `<names>-<function>` (and `…-dlq`),
/// schedules in `group`; with `stack`, its alarms and (the `Service` dimension
/// `service`, default the stack) the last run that finished.
pub async fn status(
    aws: &Aws,
    names: &str,
    group: &str,
    stack: Option<&str>,
    service: Option<&str>,
) -> Result<Vec<FunctionStatus>> {
    // One call first: a failure that is not a missing queue (no network, credentials
    // refused, no permission) ends the command on one line, not one line per queue.
    if let Err(e) = aws.url(&queue_name(names, Function::ALL[0])).await {
        if !e.is::<QueueMissing>() {
            return Err(e);
        }
    }
    let mut arns: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, f) in Function::ALL.iter().enumerate() {
        let mut queue_arn = None;
        let queue = depth(aws, &queue_name(names, *f)).await.map(|(d, arn)| {
            arns.insert(arn.clone(), i);
            queue_arn = Some(arn);
            d
        });
        let mappings = match &queue_arn {
            Some(arn) => super::mappings(aws, arn)
                .await
                .map_err(|e| format!("{e:#}")),
            None => Err("no queue".to_string()),
        };
        let (alarms, last_done) = match stack {
            Some(s) => (
                super::alarms(aws, s, *f)
                    .await
                    .map_err(|e| format!("{e:#}")),
                super::last_done(aws, service.unwrap_or(s), *f)
                    .await
                    .map_err(|e| format!("{e:#}")),
            ),
            None => (Ok(Vec::new()), Ok(None)),
        };
        let dlq = depth(aws, &dlq_name(names, *f)).await.map(|(d, _)| d);
        let age = |name: String| async move {
            oldest_age(aws, &name).await.map_err(|e| format!("{e:#}"))
        };
        out.push(FunctionStatus {
            function: *f,
            queue: queue.map_err(|e| format!("{e:#}")),
            dlq: dlq.map_err(|e| format!("{e:#}")),
            queue_age: age(queue_name(names, *f)).await,
            dlq_age: age(dlq_name(names, *f)).await,
            schedule: None,
            schedules: Vec::new(),
            one_time_schedules: 0,
            mappings,
            alarms,
            last_done,
            next_run: None,
        });
    }
    for Listed {
        schedule, target, ..
    } in schedules(aws, group).await?
    {
        let Some(&i) = arns.get(&target) else {
            continue;
        };
        if schedule.expression.starts_with("at(") {
            out[i].one_time_schedules += 1;
        } else {
            out[i].schedules.push(schedule);
        }
    }
    let now = chrono::Utc::now();
    for s in &mut out {
        s.schedule = summary(s.function.cron().is_some(), &s.schedules);
        s.next_run = s
            .schedules
            .iter()
            .filter(|x| x.state == "ENABLED")
            .filter_map(|x| super::next_run(&x.expression, now))
            .min()
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    Ok(out)
}
