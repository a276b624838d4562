//! `hk`'s commands: the argument tree ([`Cli`]), the dispatch to one module per
//! command, and the helpers every command shares (the clock, the local
//! configuration with `hk`'s embedded defaults, the database connection).

mod bench;
mod check;
mod confirm;
mod db;
mod demo;
pub(crate) mod exit;
mod grants;
mod local;
mod parity;
mod pause;
mod read_only;
mod replay;
mod run;
mod status;
mod tick;
mod ui;

pub(crate) use bench::BenchArgs;
pub(crate) use check::CheckArgs;
pub(crate) use db::DbAction;
pub(crate) use grants::GrantsArgs;
pub(crate) use local::LocalAction;
pub(crate) use parity::ParityArgs;
pub(crate) use replay::ReplayAction;
pub(crate) use run::RunArgs;

use bench::cmd_bench;
use check::cmd_check;
use demo::cmd_demo;
use grants::cmd_grants;
use local::cmd_local;
use parity::cmd_parity;
use pause::{cmd_pause, PauseArgs};
use replay::cmd_replay;
use run::cmd_run;
use status::{cmd_status, StatusArgs};
use tick::{cmd_tick, TickArgs};

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use chrono::{DateTime, SubsecRound, Utc};
use clap::builder::{PossibleValue, TypedValueParser};
use clap::{CommandFactory, Parser, Subcommand};
use serde_json::Value;

use shared::config::Config;
use shared::db::Connector;
use shared::notify::Notifier;
use shared::Function;

/// `hk`'s arguments.
#[derive(Parser)]
#[command(
    name = "hk",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("HK_GIT_COMMIT"), ")"),
    about = "Operator CLI for the GitLab housekeeping functions"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Cmd,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// A throwaway local PostgreSQL cluster.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
    /// Apply the model of GitLab's tables to $DATABASE_URL (local and test databases
    /// only).
    Migrate {
        /// Print `{"applied": [versions]}` instead of the sentence.
        #[arg(long)]
        json: bool,
        /// The GitLab release to model: `18.2` (the oldest supported), `18.8`,
        /// `18.11`, or `19.5` (the newest).
        #[arg(long, default_value = "19.5")]
        gitlab: engine::migrate::GitlabVersion,
    },
    /// Load a data set into $DATABASE_URL.
    Seed {
        /// The data set: `demo`.
        set: String,
        /// The date the data is relative to (RFC 3339; default: now).
        #[arg(long)]
        now: Option<String>,
        /// Print `{"set", "relative_to"}` instead of the sentence.
        #[arg(long)]
        json: bool,
    },
    /// Read-only preflight of the target database: version, writable primary, GitLab
    /// schema version, statement catalogue and the grants it needs, GitLab facts, session
    /// locks, TLS and the work waiting (exit 0 when all pass; 1 when the only failure is a
    /// lock held by another session: retry; 2 when the database must change).
    Check(CheckArgs),
    /// Print the GRANT statements a role needs to run the functions on the target
    /// database: per table SELECT, INSERT, UPDATE, DELETE as the statements need them,
    /// USAGE on the sequences their inserts draw from (derived like `hk check`'s
    /// privileges check; run it as the tables' owner).
    Grants(GrantsArgs),
    /// Run a function as its trigger would, with the in-process queue.
    #[command(after_help = exit::EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Compare a plan (`hk run <function> --dry-run --until-idle --json > plan.json`)
    /// with the database after GitLab's own cron ran, read only: per function and
    /// rule, the decisions that agree, disagree, changed meanwhile or whose id was
    /// reused (exit 0 at full agreement, 4 otherwise).
    Parity(ParityArgs),
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
    /// Per function: queue depth, in flight, DLQ depth and cron schedule state of a
    /// deployed stack (`--stack`/`HK_STACK`).
    Status(StatusArgs),
    /// Send a cron function's message to its queue as its EventBridge schedule sends
    /// it (re-running a missed or failed cron run).
    Tick(TickArgs),
    /// Pause a function of a deployed stack, no deploy needed: its schedule disabled,
    /// its event-source mapping disabled (messages wait on the queue), its missed-run
    /// page silenced.
    Pause(PauseArgs),
    /// Undo `hk pause`: schedule and mapping enabled, missed-run page on again.
    Resume(PauseArgs),
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
        /// Print one JSON object (`now`, `exit_code`, `functions`, `tables`) instead
        /// of the tables.
        #[arg(long)]
        json: bool,
    },
    /// Print a completion script for a shell (e.g. `hk completions bash >
    /// /etc/bash_completion.d/hk`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `--region` and `--profile` of every command that calls AWS, passed to the SDK's
/// configuration loader.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct SdkArgs {
    /// The AWS region (default: AWS_REGION, else the profile's region).
    #[arg(long)]
    pub(crate) region: Option<String>,
    /// The AWS profile of ~/.aws/config and ~/.aws/credentials (default: AWS_PROFILE,
    /// else the environment's credentials, else `default`).
    #[arg(long)]
    pub(crate) profile: Option<String>,
}

impl SdkArgs {
    pub(crate) fn options(&self, endpoint: Option<&str>) -> hk::aws_local::AwsOptions {
        hk::aws_local::AwsOptions {
            endpoint: endpoint.map(String::from),
            region: self.region.clone(),
            profile: self.profile.clone(),
        }
    }
}

#[derive(clap::Args, Clone)]
pub(crate) struct AwsArgs {
    /// SQS/Scheduler endpoint (moto), e.g. http://127.0.0.1:5000; default: the AWS
    /// environment (AWS_ENDPOINT_URL, region, credentials).
    #[arg(long)]
    pub(crate) endpoint: Option<String>,
    #[command(flatten)]
    pub(crate) sdk: SdkArgs,
    /// Queue-name prefix of the local convention (`<prefix>-<function>`, `…-dlq`) and
    /// the schedule group name.
    #[arg(long, default_value = "hk")]
    pub(crate) prefix: String,
}

/// Which queues and schedules: a deployed stack (the names infra/template.yaml
/// creates: `<stack>-<function>`, `<stack>-<function>-dlq`, schedule group
/// `<stack>-hk`) or the local convention of `hk local setup --prefix`.
#[derive(clap::Args, Clone)]
pub(crate) struct StackArgs {
    /// SQS/Scheduler endpoint (moto); default: the AWS environment.
    #[arg(long)]
    pub(crate) endpoint: Option<String>,
    /// The CloudFormation stack name of the deployment.
    #[arg(long, env = "HK_STACK")]
    pub(crate) stack: Option<String>,
    /// Instead of --stack: the local convention's prefix (`hk local setup`).
    #[arg(long)]
    pub(crate) prefix: Option<String>,
    #[command(flatten)]
    pub(crate) sdk: SdkArgs,
}

impl AwsArgs {
    /// The AWS clients, with credentials and region resolved up front.
    pub(crate) async fn clients(&self) -> Result<hk::aws_local::Aws> {
        hk::aws_local::Aws::connect(&self.sdk.options(self.endpoint.as_deref())).await
    }
}

impl StackArgs {
    /// The AWS clients, with credentials and region resolved up front.
    pub(crate) async fn clients(&self) -> Result<hk::aws_local::Aws> {
        hk::aws_local::Aws::connect(&self.sdk.options(self.endpoint.as_deref())).await
    }

    /// The queue-name prefix: `--prefix` if given, else the stack name.
    pub(crate) fn names(&self) -> Result<&str> {
        self.prefix.as_deref().or(self.stack.as_deref()).ok_or_else(|| {
            anyhow!("no stack: give --stack <name> (or set HK_STACK) for a deployed stack, or --prefix for `hk local setup` queues")
        })
    }

    /// The schedule group: `<stack>-hk`, or the local convention's `<prefix>`.
    pub(crate) fn group(&self) -> Result<String> {
        match (&self.prefix, &self.stack) {
            (Some(p), _) => Ok(p.clone()),
            (None, Some(s)) => Ok(format!("{s}-hk")),
            (None, None) => self.names().map(String::from),
        }
    }
}

pub(crate) fn function_arg(name: &str) -> Result<Function> {
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

/// Function names as a value with its possible values (listed in `--help` and in
/// completions); an unknown name is refused with the list.
#[derive(Clone)]
pub(crate) struct FunctionParser;

impl TypedValueParser for FunctionParser {
    type Value = Function;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<Function, clap::Error> {
        function_arg(&value.to_string_lossy())
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n")))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            Function::ALL.iter().map(|f| PossibleValue::new(f.name())),
        ))
    }
}

pub(crate) fn parse_now(s: Option<&str>) -> Result<DateTime<Utc>> {
    match s {
        None => Ok(Utc::now().trunc_subsecs(6)),
        Some(s) => Ok(DateTime::parse_from_rfc3339(s)
            .with_context(|| format!("--now `{s}` is not an RFC 3339 time"))?
            .with_timezone(&Utc)),
    }
}

pub(crate) fn database_url() -> Result<String> {
    std::env::var("DATABASE_URL")
        .map_err(|_| anyhow!("DATABASE_URL is not set (start a local database with `hk db up`)"))
}

/// The configuration of local mode: the environment, with `TRANSPORT=local` and the
/// embedded B28 defaults (`file` emails, the demo `db_key_base`) for unset variables.
pub(crate) fn local_config() -> Result<Config> {
    Ok(Config::from_lookup(|k| {
        if k == "TRANSPORT" {
            Some("local".into())
        } else {
            local_env(k)
        }
    })?)
}

/// A variable of local mode: the environment, else `hk`'s embedded B28 default.
pub(crate) fn local_env(k: &str) -> Option<String> {
    std::env::var(k)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| lab::demo::hk_default(k))
}

/// B28's instance and delivery means for local runs.
pub(crate) async fn local_notifier() -> Result<Arc<Notifier>> {
    let cfg = shared::notify::NotifyConfig::from_lookup(&local_env)?;
    Ok(Arc::new(Notifier::full(&cfg, None).await?))
}

pub(crate) async fn connector(config: &Config) -> Result<Connector> {
    let pg = shared::aws::database_config(&config.database.source, None).await?;
    Ok(Connector::new(pg, &config.database)?)
}

/// Mark the database at `url`, which `hk` has just created, as throwaway.
pub(crate) async fn mark_throwaway(url: &str, by: &str) -> Result<()> {
    let c = Connector::from_url(url)?.connect("hk").await?;
    Ok(engine::migrate::mark_throwaway(&c, by).await?)
}

/// Apply the newest model (`hk db up`, `hk demo`).
pub(crate) async fn migrate(url: &str) -> Result<Vec<i32>> {
    migrate_for(url, engine::migrate::GitlabVersion::default()).await
}

/// Apply `version`'s model.
pub(crate) async fn migrate_for(
    url: &str,
    version: engine::migrate::GitlabVersion,
) -> Result<Vec<i32>> {
    let mut c = Connector::from_url(url)?.connect("hk").await?;
    Ok(engine::migrate::run_for(&mut c, version).await?)
}

pub(crate) async fn real_main(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Db { action } => db::cmd_db(action).await,
        Cmd::Migrate { json, gitlab } => db::cmd_migrate(json, gitlab).await,
        Cmd::Seed { set, now, json } => db::cmd_seed(&set, now.as_deref(), json).await,
        Cmd::Check(a) => cmd_check(a).await,
        Cmd::Grants(a) => cmd_grants(a).await,
        Cmd::Run(a) if a.read_only => read_only::cmd_read_only(a).await,
        Cmd::Run(a) => cmd_run(a).await,
        Cmd::Parity(a) => cmd_parity(a).await,
        Cmd::Local { action } => cmd_local(action).await,
        Cmd::Replay { action } => cmd_replay(action).await,
        Cmd::Status(a) => cmd_status(a).await,
        Cmd::Tick(a) => cmd_tick(a).await,
        Cmd::Pause(a) => cmd_pause(a, true).await,
        Cmd::Resume(a) => cmd_pause(a, false).await,
        Cmd::Bench(a) => cmd_bench(a).await,
        Cmd::Demo {
            now, keep_db, json, ..
        } => cmd_demo(now, keep_db, json).await,
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "hk", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    }
}
