//! `hk pause <function>|all --stack S` and `hk resume …`: a function of a deployed stack
//! stopped and restarted without a deploy (`hk::aws_local::set_paused`; what a later
//! deploy does to it: docs/runbook.md#pause).

use super::*;

#[derive(clap::Args)]
pub(crate) struct PauseArgs {
    /// A function name, or `all` for every function of the stack.
    function: String,
    #[command(flatten)]
    stack: StackArgs,
    /// One JSON object per function: `function`, `schedules` (`name`, `before`,
    /// `after`), `mappings` (`uuid`, `before`, `enabled`), `missed_run_alarm`.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn cmd_pause(a: PauseArgs, paused: bool) -> Result<ExitCode> {
    let functions: Vec<Function> = if a.function == "all" {
        Function::ALL.to_vec()
    } else {
        vec![function_arg(&a.function)?]
    };
    let names = a.stack.names()?.to_string();
    let group = a.stack.group()?;
    let clients = a.stack.clients().await?;
    let changes = hk::aws_local::set_paused(
        &clients,
        &names,
        &group,
        a.stack
            .stack
            .as_deref()
            .filter(|_| a.stack.prefix.is_none()),
        &functions,
        paused,
        a.function != "all",
    )
    .await?;
    for c in &changes {
        if a.json {
            println!("{}", c.to_json());
            continue;
        }
        let f = c.function.map(|f| f.name()).unwrap_or_default();
        let verb = if paused { "paused" } else { "resumed" };
        let mut parts = Vec::new();
        for (name, before, after) in &c.schedules {
            parts.push(format!("schedule {name} {before} -> {after}"));
        }
        for (uuid, before, enabled) in &c.mappings {
            let after = if *enabled { "Enabled" } else { "Disabled" };
            parts.push(format!("mapping {uuid} {before} -> {after}"));
        }
        if let Some(alarm) = &c.alarm {
            let state = if paused { "silenced" } else { "on" };
            parts.push(format!("page {alarm} {state}"));
        }
        if parts.is_empty() {
            println!("{f}: no schedule, mapping or page to change");
        } else {
            println!("{f}: {verb}: {}", parts.join("; "));
        }
    }
    if !a.json && !paused {
        let crons: Vec<&str> = changes
            .iter()
            .filter_map(|c| c.function)
            .filter(|f| f.cron().is_some())
            .map(|f| f.name())
            .collect();
        if !crons.is_empty() {
            println!(
                "tick a cron whose runs were missed while paused (`hk tick <function> --stack {names}`), else its missed-run page fires: {}",
                crons.join(", ")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
