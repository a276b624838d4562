//! `hk run`: one function as its trigger would run it (or its whole run with
//! `--until-idle`, or a rolled-back `--dry-run`, or with both the plan of the whole
//! run), and the run table and summary. Against a database `hk` did not create it
//! uses none of its demo defaults for the notifying functions.

use super::ui::{num, observe, progress, render, table};
use super::*;
use comfy_table::Cell;
use hk::chaos::ChaosSpec;
use hk::local::{Plan, Run, Runner};
use shared::Function;
use std::collections::BTreeMap;

#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// The function name, e.g. remove-expired-members.
    #[arg(value_parser = FunctionParser)]
    pub(crate) function: Function,
    /// Fix the clock (RFC 3339).
    #[arg(long)]
    pub(crate) now: Option<String>,
    /// The message body (JSON).
    #[arg(long, conflicts_with = "message_file")]
    pub(crate) message: Option<String>,
    /// A file holding the message body.
    #[arg(long)]
    pub(crate) message_file: Option<PathBuf>,
    /// Keep delivering continuations and children until no message is left.
    #[arg(long)]
    pub(crate) until_idle: bool,
    /// One invocation in a rolled-back transaction; report what would change. With
    /// --until-idle: the whole run in ONE transaction, rolled back, and its plan (per
    /// table changes, removed users, groups and projects). It holds every row lock it
    /// takes until it ends: prefer a restored snapshot or staging to a primary.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// One JSON object per function run on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also write every sent message to this directory.
    #[arg(long)]
    pub(crate) outbox: Option<PathBuf>,
    /// Chaos for --until-idle: `seed=N,duplicate=P,reorder[=S],crash=P` duplicates
    /// sent messages, delivers out of order within S seconds (60) and aborts
    /// handlers at random points (before/after a transaction, at a statement, after
    /// an enqueue, before the ack); what was not acknowledged comes back after 30 s.
    #[arg(long, requires = "until_idle", conflicts_with = "dry_run", value_parser = parse_chaos)]
    pub(crate) chaos: Option<ChaosSpec>,
}

/// What a notifying function needs that `hk` would otherwise take from its demo
/// defaults (`GITLAB_DB_KEY_BASE` may come as `GITLAB_DB_KEY_BASE_SECRET_ARN`).
const NOTICE_VARS: [&str; 4] = [
    "EMAIL_TRANSPORT",
    "GITLAB_BASE_URL",
    "GITLAB_DB_KEY_BASE",
    "MAIL_FROM",
];

fn env_set(k: &str) -> bool {
    std::env::var(k).is_ok_and(|v| !v.trim().is_empty())
}

/// The instance and delivery means of a notifying function. `hk`'s demo defaults
/// (file mailer, demo key base, placeholder URL) apply only with `demo_defaults`: a
/// database `hk` created, or a dry run, which sends nothing. Anywhere else a missing
/// variable is refused by name, so notices are never marked sent into a temp folder.
async fn notifier_for(function: Function, demo_defaults: bool) -> Result<Arc<Notifier>> {
    if demo_defaults {
        return local_notifier().await;
    }
    let missing: Vec<&str> = NOTICE_VARS
        .into_iter()
        .filter(|k| {
            let given = env_set(k)
                || (*k == "GITLAB_DB_KEY_BASE" && env_set("GITLAB_DB_KEY_BASE_SECRET_ARN"));
            !given
        })
        .collect();
    if !missing.is_empty() {
        bail!(
            "{function} sends notices and this database was not created by hk (no {} marker), \
             so hk uses none of its demo defaults: set {} (or use --dry-run)",
            hk::migrate::THROWAWAY_TABLE,
            missing.join(", ")
        );
    }
    let lookup = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let cfg = shared::notify::NotifyConfig::from_lookup(&lookup)?;
    cfg.require_for(function)?;
    Ok(Arc::new(Notifier::full(&cfg, None).await?))
}

/// The plan of `--dry-run --until-idle`: every run, then per table what would
/// change and the removed users, groups and projects.
fn print_plan(runs: &[Run], plan: &Plan, json: bool) {
    if json {
        for r in runs {
            println!("{}", r.to_json());
        }
        println!("{}", plan.to_json());
        return;
    }
    println!("dry run of the whole run (one transaction, rolled back; nothing sent or kept):");
    for r in runs {
        print_run(r);
    }
    println!("\nPlan (what the run would change)");
    println!(
        "{:<40} {:>9} {:>9} {:>9}",
        "table", "inserted", "updated", "deleted"
    );
    for t in &plan.tables {
        println!(
            "{:<40} {:>9} {:>9} {:>9}",
            t.table, t.inserted, t.updated, t.deleted
        );
    }
    if plan.tables.is_empty() {
        println!("(no table would change)");
    }
    let ids = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    println!(
        "removed users ({}): {}",
        plan.removed_users.len(),
        ids(&plan.removed_users)
    );
    println!(
        "removed groups ({}): {}",
        plan.removed_groups.len(),
        ids(&plan.removed_groups)
    );
    println!(
        "removed projects ({}): {}",
        plan.removed_projects.len(),
        ids(&plan.removed_projects)
    );
    println!("dead-lettered messages: {}", plan.dead_letters);
}

pub(crate) fn parse_chaos(s: &str) -> std::result::Result<ChaosSpec, String> {
    s.parse()
}

pub(crate) fn print_run(r: &Run) {
    let status = r.report.as_ref().map(|r| r.status().name()).unwrap_or("-");
    // The `done` line's result fields, as the log shows them.
    let fields = r
        .report
        .as_ref()
        .map(|rep| match rep.to_json() {
            Value::Object(m) => m
                .iter()
                .filter(|(k, _)| *k != "status")
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        })
        .unwrap_or_default();
    println!(
        "{:<24} hop={:<3} {:<9} status={:<13} {}{}",
        r.function.name(),
        r.hop.map(|h| h.to_string()).unwrap_or("-".into()),
        r.outcome,
        status,
        fields,
        r.error
            .as_ref()
            .map(|e| format!(" error={e}"))
            .unwrap_or_default()
    );
    for s in &r.sent {
        println!(
            "  -> {} delay={}s key={}{}",
            s.message.receiver.name(),
            s.message.delay_s,
            s.message.envelope.message_key,
            s.schedule_name
                .as_ref()
                .map(|n| format!(" schedule={n}"))
                .unwrap_or_default()
        );
    }
}

/// Per-function totals: runs, outcomes, statuses, messages sent, and the item
/// counters each handler's typed report declares (`shared::runtime::Report::counts`).
pub(crate) fn summarize(runs: &[Run]) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut t: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for r in runs {
        let e = t.entry(r.function.name().to_string()).or_default();
        *e.entry("runs".into()).or_default() += 1;
        *e.entry(r.outcome.into()).or_default() += 1;
        if let Some(rep) = &r.report {
            for (k, n) in rep.counts() {
                *e.entry(k.to_string()).or_default() += n;
            }
            *e.entry(format!("status:{}", rep.status())).or_default() += 1;
        }
        *e.entry("messages_sent".into()).or_default() += r.sent.len() as u64;
    }
    t
}

pub(crate) fn print_summary(runs: &[Run], dead: usize) {
    println!("\nSummary");
    let mut t = table(
        &["function", "runs", "failed", "messages_sent", "totals"],
        &[1, 2, 3],
    );
    for (f, m) in summarize(runs) {
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        let cols: Vec<String> = m
            .iter()
            .filter(|(k, _)| !["runs", "messages_sent"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        t.add_row(vec![
            Cell::new(&f),
            num(g("runs")),
            num(g("retryable") + g("permanent")),
            num(g("messages_sent")),
            Cell::new(cols.join("  ")),
        ]);
    }
    println!("{}", render(&t));
    println!("dead-lettered messages: {dead}");
}

/// An `--outbox` record (`{"receiver", "delay_seconds", "body"}`) replays as its body;
/// anything else is taken as a message body as is.
pub(crate) fn unwrap_outbox_record(text: &str, function: Function) -> Result<String> {
    if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(text) {
        if let (Some(Value::String(receiver)), Some(body)) = (m.get("receiver"), m.get("body")) {
            if receiver != function.name() {
                bail!("this outbox record is for {receiver}, not {function}");
            }
            return Ok(body.to_string());
        }
    }
    Ok(text.to_string())
}

pub(crate) async fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let function = a.function;
    let now = parse_now(a.now.as_deref())?;
    let config = local_config()?;
    let connector = connector(&config).await?;
    let throwaway = hk::migrate::is_throwaway(&connector.connect("hk").await?).await?;
    let mut runner = Runner::new(connector, config.settings.clone(), now);
    if matches!(
        function,
        Function::PatExpiring | Function::DeliverNotification
    ) {
        runner = runner.with_notifier(notifier_for(function, throwaway || a.dry_run).await?);
    }
    if let Some(dir) = a.outbox.clone() {
        runner = runner.with_outbox(dir)?;
    }
    if let Some(spec) = a.chaos.clone() {
        runner = runner.with_chaos(spec);
    }
    let body = match (&a.message, &a.message_file) {
        (Some(m), _) => m.clone(),
        (None, Some(p)) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            unwrap_outbox_record(&text, function)?
        }
        (None, None) => {
            if function.cron().is_none() {
                bail!("{function} is not a cron function: give --message or --message-file");
            }
            runner.cron_message(function).to_body()
        }
    };
    if a.dry_run && a.until_idle {
        let plan = runner.plan_until_idle(function, &body).await?;
        print_plan(&runner.runs, &plan, a.json);
        return Ok(exit::run_code(&runner.runs, plan.exit_code));
    }
    if a.dry_run {
        let r = runner.dry_run(function, &body).await?;
        if a.json {
            println!("{}", r.to_json());
        } else {
            println!("dry run (rolled back, nothing delivered):");
            print_run(&r);
        }
        return Ok(exit::run_code(&runner.runs, runner.exit_code(true)));
    }
    if a.until_idle {
        let pb = progress(a.json, format!("{function} until idle"));
        runner = runner.with_observer(observe(&pb));
        let r = runner.run_until_idle(function, &body).await;
        pb.finish_and_clear();
        r?;
    } else {
        runner.invoke(function, &body, 1).await?;
    }
    for r in &runner.runs {
        if a.json {
            println!("{}", r.to_json());
        } else {
            print_run(r);
        }
    }
    if !a.json && a.until_idle {
        print_summary(&runner.runs, runner.dead_letters().len());
    }
    if let (Some(spec), Some(stats)) = (&a.chaos, runner.chaos_stats()) {
        if a.json {
            println!(
                "{}",
                serde_json::json!({"chaos": spec.to_string(), "stats": stats.to_json()})
            );
        } else {
            println!("chaos {spec}: {stats}");
        }
    }
    Ok(exit::run_code(
        &runner.runs,
        runner.exit_code(!a.until_idle),
    ))
}
