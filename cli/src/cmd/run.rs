//! `hk run`: one function as its trigger would run it, with what it causes in other
//! functions (`--until-idle`: its whole run; `--dry-run`: rolled back, with the plan),
//! the run table and summary, and what it handed on (behaviour §11: a local run never
//! drops what it sends). Against a database `hk` did not create it uses none of its
//! demo defaults for the notifying functions, refuses the `log` mailer, and a run that
//! deletes needs confirmation (`--yes`).

use super::read_only::write_plan;
use super::ui::{num, observe, progress, render, table};
use super::*;
use comfy_table::Cell;
use engine::chaos::ChaosSpec;
use engine::local::{Plan, Run, Runner};
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
    /// Keep delivering continuations and children until no message is left. Without
    /// it, one invocation and what it sends to other functions are delivered; its own
    /// continuation is written to a file (printed), never dropped.
    #[arg(long)]
    pub(crate) until_idle: bool,
    /// One invocation in a rolled-back transaction; report what would change. With
    /// --until-idle: the whole run in rolled-back transactions, and its plan (per
    /// table changes, removed users, groups and projects, sequences advanced). Each
    /// holds every row lock it takes until it ends: prefer a restored snapshot or
    /// staging to a primary. It slices the run and stops before holding half the
    /// server's lock table.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// With --dry-run --until-idle: plan on a copy, never on DATABASE_URL itself. One
    /// `REPEATABLE READ READ ONLY` transaction copies the model's tables (reads only:
    /// AccessShareLock, nothing written) into a throwaway local PostgreSQL (HK_PG_BIN)
    /// built with the live database's GitLab model; the plan runs there
    /// (docs/shadow.md).
    #[arg(long, requires_all = ["dry_run", "until_idle"])]
    pub(crate) read_only: bool,
    /// One JSON object per function run on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// With --dry-run --until-idle: write the plan's JSON lines (what --json prints)
    /// to this file, which hk creates with mode 0600 (a plan names production rows);
    /// stdout then holds the text form (nothing with --json).
    #[arg(long, requires_all = ["dry_run", "until_idle"])]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) copy: super::read_only::CopyArgs,
    /// Also write every sent message to this directory. Not with --dry-run: a dry
    /// run's messages stand for work that was rolled back, so none is kept.
    #[arg(long)]
    pub(crate) outbox: Option<PathBuf>,
    /// Chaos for --until-idle: `seed=N,duplicate=P,reorder[=S],crash=P` duplicates
    /// sent messages, delivers out of order within S seconds (60) and aborts
    /// handlers at random points (before/after a transaction, at a statement, after
    /// an enqueue, before the ack); what was not acknowledged comes back after 30 s.
    #[arg(long, requires = "until_idle", conflicts_with = "dry_run", value_parser = parse_chaos)]
    pub(crate) chaos: Option<ChaosSpec>,
    /// Also print the functions' JSON log lines (info and above) on stderr; by
    /// default `hk run` shows warnings only, as `hk demo` does (`RUST_LOG` applies).
    #[arg(long, short)]
    pub(crate) verbose: bool,
    /// Run a function that deletes against a database `hk` did not create without
    /// asking; needed when not on a terminal (`--dry-run` never asks).
    #[arg(long)]
    pub(crate) yes: bool,
}

/// What a notifying function needs that `hk` would otherwise take from its demo
/// defaults (`GITLAB_DB_KEY_BASE` may come as `GITLAB_DB_KEY_BASE_SECRET_ARN`).
#[rustfmt::skip]
const NOTICE_VARS: [&str; 4] = ["EMAIL_TRANSPORT", "GITLAB_BASE_URL", "GITLAB_DB_KEY_BASE", "MAIL_FROM"];

fn env_set(k: &str) -> bool {
    std::env::var(k).is_ok_and(|v| !v.trim().is_empty())
}

/// The instance and delivery means of a notifying function. `hk`'s demo defaults
/// (file mailer, demo key base, placeholder URL) apply only with `demo_defaults`: a
/// database `hk` created, or a dry run, which sends nothing. Anywhere else a missing
/// variable is refused by name, so notices are never marked sent into a temp folder.
///
/// The same holds for `EMAIL_TRANSPORT=log` (behaviour §11): it only writes a log
/// line per email, so a notice it "delivers" is marked sent and reaches nobody. It is
/// for throwaway databases only: on a database `hk` did not create it is refused,
/// naming the variable, before anything is claimed.
pub(crate) async fn notifier_for(function: Function, demo_defaults: bool) -> Result<Arc<Notifier>> {
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
            engine::migrate::THROWAWAY_TABLE,
            missing.join(", ")
        );
    }
    let lookup = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let cfg = shared::notify::NotifyConfig::from_lookup(&lookup)?;
    if cfg.email_transport == shared::config::notify::EmailTransportKind::Log {
        bail!(
            "EMAIL_TRANSPORT=log only logs each email (nobody receives it, yet the notice is \
             marked sent), and this database was not created by hk (no {} marker): set \
             EMAIL_TRANSPORT=smtp (or file with EMAIL_FILE_DIR), or use --dry-run",
            engine::migrate::THROWAWAY_TABLE
        );
    }
    cfg.require_for(function)?;
    Ok(Arc::new(Notifier::full(&cfg, None).await?))
}

/// `storage-cleanup`'s clients for a local run, from the same variables as in Lambda
/// (`STORAGE_*`, `GITALY_ADDRESSES`, `REGISTRY_*`, `OBJECT_STORAGE_BUCKET_*`); a
/// kind on without its service is refused by variable name.
pub(crate) async fn storage_for(
    config: &shared::config::Config,
) -> Result<Arc<shared::storage::Storage>> {
    let aws = shared::aws::from_env(|k| std::env::var(k).ok());
    Ok(Arc::new(
        shared::storage::Storage::build(&config.settings.storage, &config.storage, &aws).await?,
    ))
}

/// The plan of `--dry-run --until-idle`: every run, then per table what would
/// change and the removed users, groups and projects.
pub(crate) fn print_plan(runs: &[Run], plan: &Plan, json: bool) {
    if json {
        for r in runs {
            println!("{}", r.to_json());
        }
        println!("{}", plan.to_json());
        return;
    }
    println!("dry run of the whole run (rolled back; nothing sent or kept):");
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
    if plan.storage.kinds.is_empty() {
        println!("storage removed by storage-cleanup: none");
    }
    for (kind, (n, first)) in &plan.storage.kinds {
        println!(
            "storage removed by storage-cleanup, {kind}: {n} (first: {})",
            first.join(", ")
        );
    }
    println!(
        "slices: {} (rolled-back transactions{}); locks: at most {} held, the plan stops at {} \
         (half of the server's lock table: {})",
        plan.slices,
        if plan.slices > 1 {
            "; a later slice does not see what an earlier one changed"
        } else {
            ""
        },
        plan.most_locks,
        plan.locks.stop_at(),
        plan.locks.describe()
    );
    print_sequences(&plan.sequences);
    println!(
        "\nDecisions ({}; clock {}; GitLab {}): function, decision, rule, rows",
        plan.decisions.len(),
        plan.now.map(shared::clock::rfc3339).unwrap_or_default(),
        plan.gitlab
    );
    for ((f, d, r), n) in engine::local::decisions::counts(&plan.decisions) {
        println!("  {f:<26} {d:<18} {r:<28} {n:>7}");
    }
    if let Some(why) = &plan.stopped {
        println!("\nINCOMPLETE: {why}; the figures above cover only what was planned until then");
    }
}

/// The sequences a rolled-back run advanced: `nextval` is not undone by a rollback
/// (behaviour §11), so the ids it handed out are skipped; nothing else changes.
fn print_sequences(moved: &[engine::local::SequenceAdvance]) {
    if moved.is_empty() {
        return;
    }
    println!(
        "sequences advanced while it ran (nextval is not undone by a rollback: these ids are \
         skipped, nothing else changes; other sessions' inserts count here too):"
    );
    for m in moved {
        println!("  {}", m.describe());
    }
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

/// The message body given (`--message`, `--message-file`), or `None` for the cron
/// message of a cron function.
pub(crate) fn message_body(a: &RunArgs) -> Result<Option<String>> {
    Ok(match (&a.message, &a.message_file) {
        (Some(m), _) => Some(m.clone()),
        (None, Some(p)) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            Some(unwrap_outbox_record(&text, a.function)?)
        }
        (None, None) => {
            if a.function.cron().is_none() {
                bail!(
                    "{} is not a cron function: give --message or --message-file",
                    a.function
                );
            }
            None
        }
    })
}

/// `--outbox` with `--dry-run` is refused: a dry run's messages stand for work that was
/// rolled back.
pub(crate) fn refuse_dry_outbox(a: &RunArgs) -> Result<()> {
    if a.dry_run && a.outbox.is_some() {
        bail!(
            "--outbox cannot be used with --dry-run: a dry run's messages stand for work that \
             was rolled back, so none is kept (run without --dry-run to record what a run sends)"
        );
    }
    Ok(())
}

pub(crate) async fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    refuse_dry_outbox(&a)?;
    let function = a.function;
    let now = parse_now(a.now.as_deref())?;
    let config = local_config()?;
    let connector = connector(&config).await?;
    let throwaway = engine::migrate::is_throwaway(&connector.connect("hk").await?).await?;
    if !throwaway && !a.dry_run && super::confirm::deletes(function) {
        super::confirm::confirm(
            &format!(
                "{function} deletes for good and this database is not a throwaway one `hk` \
                 created (no hk_meta.throwaway): the run changes it."
            ),
            a.yes,
        )?;
    }
    let mut runner = Runner::new(connector, config.settings.clone(), now);
    if matches!(
        function,
        Function::PatExpiring | Function::DeliverNotification
    ) {
        runner = runner.with_notifier(notifier_for(function, throwaway || a.dry_run).await?);
    }
    if !a.dry_run {
        runner = runner.with_storage(storage_for(&config).await?);
    }
    if let Some(dir) = a.outbox.clone() {
        runner = runner.with_outbox(dir)?;
    }
    if let Some(spec) = a.chaos.clone() {
        runner = runner.with_chaos(spec);
    }
    let body = match message_body(&a)? {
        Some(b) => b,
        None => runner.cron_message(function).to_body(),
    };
    if a.dry_run && a.until_idle {
        let plan = runner.plan_until_idle(function, &body).await;
        let plan = match plan {
            Ok(p) => p,
            Err(e) => {
                print_runs(&runner.runs, a.json);
                return Err(e.into());
            }
        };
        match &a.out {
            Some(out) => write_plan(out, &runner.runs, &plan, a.json)?,
            None => print_plan(&runner.runs, &plan, a.json),
        }
        if let Some(why) = &plan.stopped {
            bail!("{why}");
        }
        return Ok(exit::run_code(&runner.runs, plan.exit_code));
    }
    if a.dry_run {
        let r = runner.dry_run(function, &body).await?;
        if a.json {
            println!("{}", r.to_json());
        } else {
            println!("dry run (rolled back, nothing delivered):");
            print_run(&r);
            print_sequences(runner.sequences_advanced());
        }
        return Ok(exit::run_code(&runner.runs, runner.exit_code(true)));
    }
    // A local run never drops what it sends (behaviour §11): what it cannot deliver
    // goes to this directory, which must be writable before anything is claimed.
    let handoff = engine::local::Handoff::create(&engine::local::state_dir(), function.name())?;
    runner = runner
        .with_handoff(handoff.clone())
        .with_backoff(engine::local::Backoff::from_env()?);
    let what = if a.until_idle {
        "until idle"
    } else {
        "and its children"
    };
    let pb = progress(a.json, format!("{function} {what}"));
    runner = runner.with_observer(observe(&pb));
    let result = deliver(&mut runner, function, &body, a.until_idle).await;
    pb.finish_and_clear();
    print_runs(&runner.runs, a.json);
    if !a.json && a.until_idle {
        print_summary(&runner.runs, runner.dead_letters().len());
    }
    print_handed_on(&runner, a.json);
    handoff.finish();
    result?;
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

/// Deliver `body` to `function`: its whole run (`until_idle`) or one invocation and
/// what it causes in other functions ([`Runner::run_one`]). Interrupted (Ctrl-C), or
/// stopped by an error of the runner itself, the run hands on what was in flight or
/// still waiting before it returns.
pub(crate) async fn deliver(
    runner: &mut Runner,
    function: Function,
    body: &str,
    until_idle: bool,
) -> Result<()> {
    let run = async {
        if until_idle {
            runner.run_until_idle(function, body).await
        } else {
            runner.run_one(function, body).await
        }
    };
    let result = tokio::select! {
        r = run => r.map_err(anyhow::Error::from),
        _ = tokio::signal::ctrl_c() => Err(shared::error::Error::Retryable(
            "interrupted (Ctrl-C)".into(),
        )
        .into()),
    };
    if let Err(e) = &result {
        runner
            .hand_on_pending(&format!("the run stopped before it was idle: {e:#}"))
            .context("the messages still waiting could not be written")?;
    }
    result
}

fn print_runs(runs: &[Run], json: bool) {
    for r in runs {
        if json {
            println!("{}", r.to_json());
        } else {
            print_run(r);
        }
    }
}

/// What the run handed on (behaviour §11), with the file and how to deliver it
/// again: each dead letter with its key and reason, each undelivered message with its
/// key. With `--json`, one object `{"handed_on": {…}}` after the runs.
pub(crate) fn print_handed_on(runner: &Runner, json: bool) {
    let h = runner.handed_on();
    if h.is_empty() {
        return;
    }
    let file = |f: Option<std::path::PathBuf>| f.map(|p| p.display().to_string());
    let dead_file = file(runner.handoff().map(|h| h.dead_letters_file()));
    let undelivered_file = file(runner.handoff().map(|h| h.undelivered_file()));
    if json {
        println!(
            "{}",
            serde_json::json!({"handed_on": {
                "dead_letters": {
                    "file": if h.dead.is_empty() { None } else { dead_file.clone() },
                    "messages": h.dead.iter().map(|d| serde_json::json!({
                        "receiver": d.message.receiver.name(),
                        "message_key": d.message.envelope.message_key,
                        "receives": d.receives,
                        "error_class": d.error_class,
                        "reason": d.reason,
                    })).collect::<Vec<_>>(),
                },
                "undelivered": {
                    "file": if h.undelivered.is_empty() { None } else { undelivered_file.clone() },
                    "messages": h.undelivered.iter().map(|u| serde_json::json!({
                        "receiver": u.message.receiver.name(),
                        "message_key": u.message.envelope.message_key,
                        "why": u.why,
                    })).collect::<Vec<_>>(),
                },
            }})
        );
        return;
    }
    let replay = |f: &Option<String>| match f {
        Some(f) => {
            format!("written to {f}; deliver them again with `hk replay file {f} --until-idle`")
        }
        None => "kept in memory only".into(),
    };
    if !h.dead.is_empty() {
        println!(
            "\ndead letters: {} ({}, once their cause is fixed)",
            h.dead.len(),
            replay(&dead_file)
        );
        for d in &h.dead {
            println!(
                "  {} key={} receives={} error_class={} reason={}",
                d.message.receiver.name(),
                d.message.envelope.message_key,
                d.receives,
                d.error_class,
                d.reason
            );
        }
    }
    if !h.undelivered.is_empty() {
        println!(
            "\nnot delivered: {} ({})",
            h.undelivered.len(),
            replay(&undelivered_file)
        );
        for u in &h.undelivered {
            println!(
                "  {} key={}: {}",
                u.message.receiver.name(),
                u.message.envelope.message_key,
                u.why
            );
        }
    }
}
