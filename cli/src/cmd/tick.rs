//! `hk tick <function> --stack S [--now T]`: a cron function's message on its queue,
//! as its EventBridge Scheduler schedule sends it (`hk::aws_local::tick`), to re-run a
//! missed or failed cron run without writing the message by hand.

use super::*;

#[derive(clap::Args)]
pub(crate) struct TickArgs {
    /// The cron function (remove-expired-members, schedule-prune-deletions,
    /// adjourned-group-deletion, placeholder-user-cleanup, pat-expiring).
    #[arg(value_parser = FunctionParser)]
    function: Function,
    #[command(flatten)]
    stack: StackArgs,
    /// The scheduled time the message carries (RFC 3339; default: now), as Scheduler
    /// fills `<aws.scheduler.scheduled-time>`: its `issued_at` and its key
    /// `<function>:cron:<time>`, in whole seconds. It names the run (give the missed
    /// slot, e.g. 2026-03-01T00:10:00Z); the function still works with its own clock
    /// when it runs, as every cron run does.
    #[arg(long)]
    now: Option<String>,
    /// Print the message that would be sent; send nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print one JSON object (`function`, `queue_url`, `schedule`, `message_key`,
    /// `run_id`, `issued_at`, `message_id`, `body`).
    #[arg(long)]
    json: bool,
}

pub(crate) async fn cmd_tick(a: TickArgs) -> Result<ExitCode> {
    let names = a.stack.names()?.to_string();
    let group = a.stack.group()?;
    let scheduled = parse_now(a.now.as_deref())?;
    let clients = a.stack.clients().await?;
    let t =
        hk::aws_local::tick(&clients, &names, &group, a.function, scheduled, !a.dry_run).await?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "function": t.function.name(),
                "queue_url": t.queue_url,
                "schedule": t.schedule,
                "message_key": t.envelope.message_key,
                "run_id": t.envelope.run_id,
                "issued_at": t.envelope.issued_at,
                "message_id": t.message_id,
                "body": t.body,
            })
        );
        return Ok(ExitCode::SUCCESS);
    }
    let source = match &t.schedule {
        Some(s) => format!("the input of schedule {group}/{s}"),
        None => format!(
            "behaviour §9.7's cron message (no schedule of group {group} targets the queue)"
        ),
    };
    let verb = if a.dry_run { "would send" } else { "sent" };
    println!(
        "{verb} {}'s cron message to {} ({source}): key {}, run_id {}",
        t.function, t.queue_url, t.envelope.message_key, t.envelope.run_id
    );
    if a.dry_run {
        println!("{}", t.body);
    }
    Ok(ExitCode::SUCCESS)
}
