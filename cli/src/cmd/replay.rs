//! `hk replay dlq|file`: recovery, moving messages back from a DLQ (of a deployed
//! stack, `--stack`/`HK_STACK`, or the local convention, `--prefix`) or a file.

use super::run::print_run;
use super::*;
use hk::local::Runner;

#[derive(Subcommand)]
pub(crate) enum ReplayAction {
    /// Move messages from a function's DLQ back to its queue.
    Dlq {
        /// The function whose DLQ is replayed.
        function: String,
        #[command(flatten)]
        stack: StackArgs,
        /// Long polling: seconds each receive waits for a message (1-20).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(i32).range(1..=20))]
        wait_s: i32,
        /// Stop only after this many seconds with the DLQ empty (default: the DLQ's
        /// visibility timeout, so messages in flight elsewhere are seen again).
        #[arg(long)]
        window_s: Option<u64>,
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

pub(crate) fn print_replay(r: &hk::aws_local::ReplayReport, verb: &str) {
    let total: u64 = r.by_type.values().sum();
    println!(
        "{verb} {total} message(s); left in place by the filter: {}",
        r.skipped
    );
    for (k, n) in &r.by_type {
        println!("  {k}: {n}");
    }
}

pub(crate) async fn cmd_replay(action: ReplayAction) -> Result<ExitCode> {
    match action {
        ReplayAction::Dlq {
            function,
            stack,
            wait_s,
            window_s,
            max,
            kind,
            dry_run,
        } => {
            let f = function_arg(&function)?;
            let names = stack.names()?;
            let clients = hk::aws_local::Aws::new(stack.endpoint.as_deref()).await;
            let dlq = clients.url(&hk::aws_local::dlq_name(names, f)).await?;
            let queue = clients.url(&hk::aws_local::queue_name(names, f)).await?;
            let poll = hk::aws_local::Poll { wait_s, window_s };
            let r = hk::aws_local::replay_dlq(
                &clients,
                &dlq,
                &queue,
                max,
                kind.as_deref(),
                dry_run,
                poll,
            )
            .await?;
            print_replay(&r, if dry_run { "would move" } else { "moved" });
            for k in &r.keys {
                println!("  key {k}");
            }
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
