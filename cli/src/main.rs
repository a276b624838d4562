//! `hk`: the operator CLI. It parses arguments and calls the same `shared` handlers
//! as the Lambda functions, through the in-process queue with virtual time. It holds
//! no SQL of its own.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, SubsecRound, Utc};
use clap::{Parser, Subcommand};
use serde_json::Value;

use hk::chaos::ChaosSpec;
use hk::local::{Run, Runner};
use shared::config::Config;
use shared::db::Connector;
use shared::notify::Notifier;
use shared::Function;

#[derive(Parser)]
#[command(
    name = "hk",
    version,
    about = "Operator CLI for the GitLab housekeeping functions"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// A throwaway local PostgreSQL cluster.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
    /// Apply the schema subset to $DATABASE_URL (local and test databases only).
    Migrate,
    /// Load a data set into $DATABASE_URL.
    Seed {
        /// The data set: `demo`.
        set: String,
        /// The date the data is relative to (RFC 3339; default: now).
        #[arg(long)]
        now: Option<String>,
    },
    /// Run a function as its trigger would, with the in-process queue.
    Run(RunArgs),
    /// Local AWS emulation around `cargo lambda watch` (moto).
    Local {
        #[command(subcommand)]
        action: LocalAction,
    },
    /// Recovery: move messages back from a DLQ or a file.
    Replay {
        #[command(subcommand)]
        action: ReplayAction,
    },
    /// Benchmarks: ratios measured side by side in one run, written to docs/benchmarks.md.
    Bench(BenchArgs),
    /// Throwaway database, demo data, every batch until idle, and a summary.
    Demo {
        /// Fix the clock (RFC 3339; default: now).
        #[arg(long)]
        now: Option<String>,
        /// Leave the throwaway cluster running and print its URL.
        #[arg(long)]
        keep_db: bool,
        /// Also print the functions' JSON log lines (info and above) on stderr; by
        /// default the demo shows warnings only, and `RUST_LOG` still applies.
        #[arg(long, short)]
        verbose: bool,
    },
}

#[derive(clap::Args)]
struct BenchArgs {
    /// b38, b38-baseline, b28, keyset, queue-calls, footprint, or all.
    name: String,
    /// small, full, or a number of expired memberships.
    #[arg(long, default_value = "small")]
    scale: String,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// The document the table is written to, with the command.
    #[arg(long, default_value = "docs/benchmarks.md")]
    doc: PathBuf,
    /// Where the function binaries are (footprint).
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// The moto endpoint for queue-calls and b28.
    #[arg(long, env = "MOTO_ENDPOINT")]
    moto: Option<String>,
    /// Keep the bench databases for inspection (they are dropped otherwise).
    #[arg(long)]
    keep: bool,
    /// b28: send the notices to moto's SQS (--moto) instead of the in-process queue
    /// (moto slows as its queues fill: small data sets only)
    #[arg(long)]
    b28_on_moto: bool,
}

#[derive(Subcommand)]
enum DbAction {
    /// initdb + start; prints DATABASE_URL.
    Up,
    /// Stop the cluster.
    Down,
}

#[derive(clap::Args, Clone)]
struct AwsArgs {
    /// SQS/Scheduler endpoint (moto), e.g. http://127.0.0.1:5000; default: the AWS
    /// environment (AWS_ENDPOINT_URL, region, credentials).
    #[arg(long)]
    endpoint: Option<String>,
    /// Queue-name prefix of the local convention (`<prefix>-<function>`, `…-dlq`) and
    /// the schedule group name.
    #[arg(long, default_value = "hk")]
    prefix: String,
}

#[derive(Subcommand)]
enum LocalAction {
    /// Create every queue, DLQ and the schedule group; write the env file for
    /// `cargo lambda watch --env-file`.
    Setup {
        #[command(flatten)]
        aws: AwsArgs,
        /// Visibility timeout of the local queues (seconds before a failure is retried).
        #[arg(long, default_value_t = 10)]
        visibility_s: u32,
        /// Where to write the env file.
        #[arg(long, default_value = ".dev/lambda.env")]
        env_file: PathBuf,
    },
    /// Poll the queues and deliver SQS events to `cargo lambda watch`; fire due
    /// one-time schedules.
    Pump {
        #[command(flatten)]
        aws: AwsArgs,
        /// The address `cargo lambda watch` serves the invoke API on.
        #[arg(long, default_value = "http://127.0.0.1:9000")]
        invoke: String,
        /// Stop when every queue is empty and no schedule is pending.
        #[arg(long)]
        until_idle: bool,
        /// Stop after this many seconds in any case.
        #[arg(long, default_value_t = 600)]
        max_seconds: u64,
    },
}

#[derive(Subcommand)]
enum ReplayAction {
    /// Move messages from a function's DLQ back to its queue.
    Dlq {
        /// The function whose DLQ is replayed.
        function: String,
        #[command(flatten)]
        aws: AwsArgs,
        /// Move at most this many messages.
        #[arg(long, default_value_t = 1000)]
        max: usize,
        /// Only messages of this type (e.g. delete-user.run).
        #[arg(long = "type")]
        kind: Option<String>,
        /// Count what would move; move nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Replay a JSON-lines file of message bodies or --outbox records.
    File {
        /// The file.
        path: PathBuf,
        /// Send to the queues (SQS/moto) instead of running locally.
        #[arg(long)]
        queue: bool,
        /// The receiving function for bare bodies (outbox records name their own).
        #[arg(long)]
        to: Option<String>,
        #[command(flatten)]
        aws: AwsArgs,
        /// Local runs: the clock (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Local runs: also deliver what the replayed messages send.
        #[arg(long)]
        until_idle: bool,
        /// Local runs: one JSON object per function run.
        #[arg(long)]
        json: bool,
    },
}

fn function_arg(name: &str) -> Result<Function> {
    Function::from_name(name).ok_or_else(|| {
        anyhow!(
            "unknown function `{name}` (known: {})",
            Function::ALL
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

fn print_replay(r: &hk::aws_local::ReplayReport, verb: &str) {
    let total: u64 = r.by_type.values().sum();
    println!(
        "{verb} {total} message(s); left in place by the filter: {}",
        r.skipped
    );
    for (k, n) in &r.by_type {
        println!("  {k}: {n}");
    }
}

async fn cmd_local(action: LocalAction) -> Result<ExitCode> {
    match action {
        LocalAction::Setup {
            aws,
            visibility_s,
            env_file,
        } => {
            let clients = hk::aws_local::Aws::new(aws.endpoint.as_deref()).await;
            let env =
                hk::aws_local::setup(&clients, &aws.prefix, visibility_s, aws.endpoint.as_deref())
                    .await?;
            if let Some(dir) = env_file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&env_file, text)
                .with_context(|| format!("cannot write {}", env_file.display()))?;
            println!(
                "{} queues with DLQs and schedule group `{}` ready; env file: {}",
                Function::ALL.len(),
                aws.prefix,
                env_file.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        LocalAction::Pump {
            aws,
            invoke,
            until_idle,
            max_seconds,
        } => {
            let clients = hk::aws_local::Aws::new(aws.endpoint.as_deref()).await;
            let stats = hk::aws_local::pump(
                &clients,
                &aws.prefix,
                &invoke,
                until_idle,
                std::time::Duration::from_secs(max_seconds),
            )
            .await?;
            let failed: u64 = stats.failed.values().sum();
            if stats.work_left {
                eprintln!("hk: stopped after --max-seconds {max_seconds} with messages or schedules still pending");
                return Ok(ExitCode::from(1));
            }
            println!(
                "pump done: delivered {:?}, failed {:?}, schedules fired {}",
                stats.delivered, stats.failed, stats.schedules_fired
            );
            Ok(if failed > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

async fn cmd_replay(action: ReplayAction) -> Result<ExitCode> {
    match action {
        ReplayAction::Dlq {
            function,
            aws,
            max,
            kind,
            dry_run,
        } => {
            let f = function_arg(&function)?;
            let clients = hk::aws_local::Aws::new(aws.endpoint.as_deref()).await;
            let dlq = clients
                .url(&hk::aws_local::dlq_name(&aws.prefix, f))
                .await?;
            let queue = clients
                .url(&hk::aws_local::queue_name(&aws.prefix, f))
                .await?;
            let r =
                hk::aws_local::replay_dlq(&clients, &dlq, &queue, max, kind.as_deref(), dry_run)
                    .await?;
            print_replay(&r, if dry_run { "would move" } else { "moved" });
            Ok(ExitCode::SUCCESS)
        }
        ReplayAction::File {
            path,
            queue,
            to,
            aws,
            now,
            until_idle,
            json,
        } => {
            let lines = hk::aws_local::read_lines(&path)?;
            let to = to.as_deref().map(function_arg).transpose()?;
            if queue {
                let clients = hk::aws_local::Aws::new(aws.endpoint.as_deref()).await;
                let r =
                    hk::aws_local::replay_file_to_queues(&clients, &aws.prefix, &lines, to).await?;
                print_replay(&r, "sent");
                return Ok(ExitCode::SUCCESS);
            }
            let config = local_config()?;
            let mut runner = Runner::new(
                connector(&config).await?,
                config.settings.clone(),
                parse_now(now.as_deref())?,
            );
            for (recv, body) in &lines {
                let f = to
                    .or(*recv)
                    .ok_or_else(|| anyhow!("a bare message body needs --to <function>"))?;
                if until_idle {
                    runner.run_until_idle(f, body).await?;
                } else {
                    runner.invoke(f, body, 1).await?;
                }
            }
            for r in &runner.runs {
                if json {
                    println!("{}", r.to_json());
                } else {
                    print_run(r);
                }
            }
            let code = if until_idle {
                runner.exit_code(false)
            } else {
                runner.worst_exit_code()
            };
            Ok(ExitCode::from(code as u8))
        }
    }
}

#[derive(clap::Args)]
struct RunArgs {
    /// The function name, e.g. remove-expired-members.
    function: String,
    /// Fix the clock (RFC 3339).
    #[arg(long)]
    now: Option<String>,
    /// The message body (JSON).
    #[arg(long, conflicts_with = "message_file")]
    message: Option<String>,
    /// A file holding the message body.
    #[arg(long)]
    message_file: Option<PathBuf>,
    /// Keep delivering continuations and children until no message is left.
    #[arg(long, conflicts_with = "dry_run")]
    until_idle: bool,
    /// One invocation in a rolled-back transaction; report what would change.
    #[arg(long)]
    dry_run: bool,
    /// One JSON object per function run on stdout.
    #[arg(long)]
    json: bool,
    /// Also write every sent message to this directory.
    #[arg(long)]
    outbox: Option<PathBuf>,
    /// Chaos for --until-idle: `seed=N,duplicate=P,reorder[=S],crash=P` duplicates
    /// sent messages, delivers out of order within S seconds (60) and aborts
    /// handlers at random points (before/after a transaction, at a statement, after
    /// an enqueue, before the ack); what was not acknowledged comes back after 30 s.
    #[arg(long, requires = "until_idle", value_parser = parse_chaos)]
    chaos: Option<ChaosSpec>,
}

fn parse_chaos(s: &str) -> std::result::Result<ChaosSpec, String> {
    s.parse()
}

fn parse_now(s: Option<&str>) -> Result<DateTime<Utc>> {
    match s {
        None => Ok(Utc::now().trunc_subsecs(6)),
        Some(s) => Ok(DateTime::parse_from_rfc3339(s)
            .with_context(|| format!("--now `{s}` is not an RFC 3339 time"))?
            .with_timezone(&Utc)),
    }
}

fn database_url() -> Result<String> {
    std::env::var("DATABASE_URL")
        .map_err(|_| anyhow!("DATABASE_URL is not set (start a local database with `hk db up`)"))
}

/// The configuration of local mode: the environment, with `TRANSPORT=local` and the
/// embedded B28 defaults (`file` emails, the demo `db_key_base`) for unset variables.
fn local_config() -> Result<Config> {
    Ok(Config::from_lookup(|k| {
        if k == "TRANSPORT" {
            Some("local".into())
        } else {
            local_env(k)
        }
    })?)
}

/// A variable of local mode: the environment, else `hk`'s embedded B28 default.
fn local_env(k: &str) -> Option<String> {
    std::env::var(k)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| hk::demo::hk_default(k))
}

/// B28's instance and delivery means for local runs.
async fn local_notifier() -> Result<Arc<Notifier>> {
    let cfg = shared::notify::NotifyConfig::from_lookup(&local_env)?;
    Ok(Arc::new(Notifier::full(&cfg, None).await?))
}

async fn connector(config: &Config) -> Result<Connector> {
    let pg = shared::aws::database_config(&config.database.source, None).await?;
    Ok(Connector::new(pg, &config.database)?)
}

async fn migrate(url: &str) -> Result<Vec<i32>> {
    let mut c = Connector::from_url(url)?.connect("hk").await?;
    Ok(hk::migrate::run(&mut c).await?)
}

fn print_run(r: &Run) {
    let status = r
        .report
        .as_ref()
        .and_then(|v| v.get("status"))
        .and_then(Value::as_str)
        .unwrap_or("-");
    let fields = r
        .report
        .as_ref()
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| *k != "status")
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
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

/// Per-function totals: runs, outcomes, and the sum of every numeric report field.
fn summarize(runs: &[Run]) -> BTreeMap<String, BTreeMap<String, i64>> {
    let mut t: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for r in runs {
        let e = t.entry(r.function.name().to_string()).or_default();
        *e.entry("runs".into()).or_default() += 1;
        *e.entry(r.outcome.into()).or_default() += 1;
        if let Some(Value::Object(m)) = &r.report {
            for (k, v) in m {
                // Ids are labels, not quantities.
                if k.ends_with("_id") {
                    continue;
                }
                if let Some(n) = v.as_i64() {
                    *e.entry(k.clone()).or_default() += n;
                }
            }
            if let Some(s) = m.get("status").and_then(Value::as_str) {
                *e.entry(format!("status:{s}")).or_default() += 1;
            }
        }
        *e.entry("messages_sent".into()).or_default() += r.sent.len() as i64;
    }
    t
}

fn print_summary(runs: &[Run], dead: usize) {
    println!("\nSummary");
    println!("{:<26} totals", "function");
    for (f, m) in summarize(runs) {
        let cols: Vec<String> = m.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("{f:<26} {}", cols.join("  "));
    }
    println!("dead-lettered messages: {dead}");
}

/// An `--outbox` record (`{"receiver", "delay_seconds", "body"}`) replays as its body;
/// anything else is taken as a message body as is.
fn unwrap_outbox_record(text: &str, function: Function) -> Result<String> {
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

async fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let function = Function::from_name(&a.function).ok_or_else(|| {
        anyhow!(
            "unknown function `{}` (known: {})",
            a.function,
            Function::ALL
                .iter()
                .map(|f| f.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    let now = parse_now(a.now.as_deref())?;
    let config = local_config()?;
    let mut runner = Runner::new(connector(&config).await?, config.settings.clone(), now);
    if matches!(
        function,
        Function::PatExpiring | Function::DeliverNotification
    ) {
        runner = runner.with_notifier(local_notifier().await?);
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
    if a.dry_run {
        let r = runner.dry_run(function, &body).await?;
        if a.json {
            println!("{}", r.to_json());
        } else {
            println!("dry run (rolled back, nothing delivered):");
            print_run(&r);
        }
        return Ok(ExitCode::from(runner.exit_code(true) as u8));
    }
    if a.until_idle {
        runner.run_until_idle(function, &body).await?;
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
    Ok(ExitCode::from(runner.exit_code(!a.until_idle) as u8))
}

async fn cmd_bench(a: BenchArgs) -> Result<ExitCode> {
    let scale = hk::bench::Scale::parse(&a.scale)?;
    let opts = hk::bench::Options {
        database_url: database_url()?,
        moto_endpoint: a.moto.clone(),
        bin_dir: a.bin_dir.clone(),
        now: parse_now(Some("2025-03-10T00:10:00Z"))?,
        keep: a.keep,
        b28_on_moto: a.b28_on_moto,
    };
    let context = hk::bench::context(&scale, &opts).await?;
    let rows = hk::bench::run(&a.name, &scale, &opts).await?;
    let command = format!(
        "hk {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({"command": command, "context": context, "rows": rows})
        );
    } else {
        println!(
            "{command}\n{context}\n\n{}",
            hk::bench::render_markdown(&rows)
        );
    }
    hk::bench::write_doc(
        &a.doc,
        // One block per scale and bench; footprint's also per binary directory (the
        // native build and the Lambda build are both worth keeping).
        &if matches!(a.name.as_str(), "footprint" | "all") {
            format!("{}:{}:{}", scale.label, a.name, a.bin_dir.display())
        } else {
            format!("{}:{}", scale.label, a.name)
        },
        &command,
        &context,
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}

async fn cmd_demo(now: Option<String>, keep_db: bool) -> Result<ExitCode> {
    let now = parse_now(now.as_deref())?;
    let mut cluster = None;
    let url = match std::env::var("DATABASE_URL") {
        Ok(u) => u,
        Err(_) => {
            let c = hk::pg::Cluster {
                base: std::env::temp_dir().join(format!("hk-demo-{}", std::process::id())),
                port: hk::pg::free_port()?,
            };
            eprintln!(
                "starting a throwaway PostgreSQL in {} on port {}",
                c.base.display(),
                c.port
            );
            c.up()?;
            let url = c.url();
            cluster = Some(c);
            url
        }
    };
    let result = demo(&url, now).await;
    if let Some(c) = cluster {
        if keep_db {
            println!("\nthe demo database is still running: DATABASE_URL={url}  (stop it with HK_PG_BASE={} hk db down)", c.base.display());
        } else {
            c.down()?;
            let _ = std::fs::remove_dir_all(&c.base);
        }
    }
    result
}

async fn demo(url: &str, now: DateTime<Utc>) -> Result<ExitCode> {
    migrate(url).await?;
    let connector = Connector::from_url(url)?;
    {
        let mut c = connector.connect("hk").await?;
        hk::demo::seed(&mut c, now.date_naive()).await?;
    }
    let before = hk::demo::table_counts(&connector.connect("hk").await?).await?;
    let mut all: Vec<Run> = Vec::new();
    let mut code = 0;
    let notifier = local_notifier().await?;
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let mut runner =
            Runner::new(connector.clone(), Default::default(), now).with_notifier(notifier.clone());
        let body = runner.cron_message(*f).to_body();
        runner.run_until_idle(*f, &body).await?;
        code = code.max(runner.exit_code(false));
        all.extend(runner.runs);
    }
    let after = hk::demo::table_counts(&connector.connect("hk").await?).await?;
    println!(
        "hk demo at {} (virtual time; every batch run until idle)\n",
        shared::clock::rfc3339(now)
    );
    println!(
        "{:<26} {:>6} {:>9} {:>9} {:>9}  results",
        "function", "runs", "success", "retryable", "permanent"
    );
    for (f, m) in summarize(&all) {
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        let results: Vec<String> = m
            .iter()
            .filter(|(k, _)| {
                !["runs", "success", "retryable", "permanent", "hop"].contains(&k.as_str())
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "{f:<26} {:>6} {:>9} {:>9} {:>9}  {}",
            g("runs"),
            g("success"),
            g("retryable"),
            g("permanent"),
            results.join(" ")
        );
    }
    println!("\n{:<32} {:>8} {:>8}", "table", "before", "after");
    for ((t, b), (_, a)) in before.iter().zip(after.iter()) {
        println!("{t:<32} {b:>8} {a:>8}");
    }
    if let Some(d) = &notifier.delivery {
        println!(
            "\nemails: {}; web hooks to local or private addresses are refused",
            d.mailer.describe()
        );
    }
    Ok(ExitCode::from(code as u8))
}

async fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Db { action } => {
            let c = hk::pg::Cluster::default_location();
            match action {
                DbAction::Up => {
                    c.up()?;
                    println!("DATABASE_URL={}", c.url());
                }
                DbAction::Down => c.down()?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Migrate => {
            let applied = migrate(&database_url()?).await?;
            println!("migrations applied: {applied:?}");
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Seed { set, now } => {
            if set != "demo" {
                bail!("unknown data set `{set}` (known: demo)");
            }
            let now = parse_now(now.as_deref())?;
            let mut c = Connector::from_url(&database_url()?)?.connect("hk").await?;
            hk::demo::seed(&mut c, now.date_naive()).await?;
            println!("demo data loaded (dates relative to {})", now.date_naive());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Run(a) => cmd_run(a).await,
        Cmd::Local { action } => cmd_local(action).await,
        Cmd::Replay { action } => cmd_replay(action).await,
        Cmd::Bench(a) => cmd_bench(a).await,
        Cmd::Demo { now, keep_db, .. } => cmd_demo(now, keep_db).await,
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // A bench measures the handlers, not their info lines; a person running the demo
    // wants its table: warnings only for both, unless asked (`--verbose`, RUST_LOG).
    let quiet = match &cli.command {
        Cmd::Bench(_) => true,
        Cmd::Demo { verbose, .. } => !verbose,
        _ => false,
    };
    if quiet && std::env::var_os("RUST_LOG").is_none() {
        std::env::set_var("RUST_LOG", "warn");
    }
    shared::telemetry::init(shared::telemetry::Sink::Stderr);
    match real_main(cli).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("hk: {e:#}");
            ExitCode::from(2)
        }
    }
}
