//! `hk status`: per function, the queue depth, messages in flight and delayed, the
//! DLQ depth, the age of the oldest message of the queue and of the DLQ, and the
//! state of every recurring schedule targeting its queue (listed under the table) of
//! a deployed stack, from SQS, CloudWatch and EventBridge Scheduler; then, to answer
//! "is it working?", whether it is paused, its mappings' state, the next cron run, the
//! last run that finished and its alarms in ALARM (read only: no message is received).

use super::*;

#[derive(clap::Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    stack: StackArgs,
    /// One JSON object per function (`schedule`: the common state or `MIXED`;
    /// `schedules`: every recurring schedule with its name, state and expression;
    /// `mappings`, `alarms`, `paused`, `last_done`, `next_run`).
    #[arg(long)]
    json: bool,
    /// The `Service` dimension of the functions' metrics (the `ServiceName` parameter;
    /// default: the stack name), for the last run that finished.
    #[arg(long)]
    service: Option<String>,
}

/// The schedule column: the common state (or `MIXED`), with the number of schedules
/// when more than one targets the queue; `-` for a child function without one.
fn schedule_column(l: &hk::aws_local::FunctionStatus) -> String {
    let state = l.schedule.as_deref().unwrap_or("-");
    match l.schedules.len() {
        0 | 1 => state.to_string(),
        n => format!("{state}({n})"),
    }
}

pub(crate) async fn cmd_status(a: StatusArgs) -> Result<ExitCode> {
    let names = a.stack.names()?.to_string();
    let group = a.stack.group()?;
    let clients = a.stack.clients().await?;
    let stack = a
        .stack
        .stack
        .as_deref()
        .filter(|_| a.stack.prefix.is_none());
    let lines =
        hk::aws_local::status(&clients, &names, &group, stack, a.service.as_deref()).await?;
    if a.json {
        for l in &lines {
            println!("{}", l.to_json());
        }
    } else {
        println!(
            "{:<28} {:>7} {:>9} {:>7} {:>7} {:>7} {:>9}  {:<9} {:>8}",
            "function",
            "queue",
            "in_flight",
            "delayed",
            "age_s",
            "dlq",
            "dlq_age_s",
            "schedule",
            "one-time"
        );
        let n = |d: &std::result::Result<hk::aws_local::Depth, String>,
                 f: fn(&hk::aws_local::Depth) -> i64| {
            d.as_ref().map(|d| f(d).to_string()).unwrap_or("?".into())
        };
        // `-`: CloudWatch has no datapoint (no data, not 0); `?`: it could not be read.
        let age = |a: &hk::aws_local::Age| match a {
            Ok(Some(s)) => s.to_string(),
            Ok(None) => "-".into(),
            Err(_) => "?".into(),
        };
        for l in &lines {
            println!(
                "{:<28} {:>7} {:>9} {:>7} {:>7} {:>7} {:>9}  {:<9} {:>8}",
                l.function.name(),
                n(&l.queue, |d| d.visible),
                n(&l.queue, |d| d.in_flight),
                n(&l.queue, |d| d.delayed),
                age(&l.queue_age),
                n(&l.dlq, hk::aws_local::Depth::total),
                age(&l.dlq_age),
                schedule_column(l),
                l.one_time_schedules
            );
        }
        // Every recurring schedule, so two ticking one queue are both seen.
        let all: Vec<_> = lines
            .iter()
            .flat_map(|l| l.schedules.iter().map(move |s| (l.function, s)))
            .collect();
        if !all.is_empty() {
            println!("schedules:");
            for (f, s) in all {
                println!(
                    "  {:<28} {:<9} {:<24} {}",
                    f.name(),
                    s.state,
                    s.expression,
                    s.name
                );
            }
        }
        println!(
            "{:<28} {:<8} {:<10} {:<21} {:<21} alarms in ALARM",
            "function", "paused", "mapping", "next_run", "last_done"
        );
        for l in &lines {
            let mapping = match &l.mappings {
                Ok(m) if m.is_empty() => "-".to_string(),
                Ok(m) => {
                    let first = &m[0].1;
                    if m.iter().all(|(_, s)| s == first) {
                        first.clone()
                    } else {
                        "MIXED".into()
                    }
                }
                Err(_) => "?".into(),
            };
            let last = match &l.last_done {
                Ok(Some(t)) => t.clone(),
                Ok(None) => "-".into(),
                Err(_) => "?".into(),
            };
            let firing = l.firing();
            println!(
                "{:<28} {:<8} {:<10} {:<21} {:<21} {}",
                l.function.name(),
                if l.paused() { "PAUSED" } else { "no" },
                mapping,
                l.next_run.as_deref().unwrap_or("-"),
                last,
                if firing.is_empty() {
                    "-".to_string()
                } else {
                    firing.join(" ")
                }
            );
        }
        for l in &lines {
            for e in [
                &l.mappings.as_ref().err(),
                &l.alarms.as_ref().err(),
                &l.last_done.as_ref().err(),
            ]
            .into_iter()
            .flatten()
            {
                println!("{}: {e}", l.function.name());
            }
        }
        for l in &lines {
            for e in [&l.queue, &l.dlq]
                .into_iter()
                .filter_map(|d| d.as_ref().err())
                .chain(
                    [&l.queue_age, &l.dlq_age]
                        .into_iter()
                        .filter_map(|a| a.as_ref().err()),
                )
            {
                println!("{}: {e}", l.function.name());
            }
        }
        println!(
            "age_s, dlq_age_s: Maximum of the CloudWatch metric ApproximateAgeOfOldestMessage \
             over the last {} min (- = no datapoint); last_done: the newest 5-minute period \
             with a run that finished (outcome_done) in the last {} days",
            hk::aws_local::AGE_WINDOW.as_secs() / 60,
            hk::aws_local::DONE_WINDOW.as_secs() / 86_400
        );
    }
    let missing = lines
        .iter()
        .any(|l| l.queue.is_err() || l.dlq.is_err() || l.schedule.as_deref() == Some("missing"));
    Ok(if missing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
