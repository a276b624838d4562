//! `hk replay dlq|file`: recovery, moving messages back from a DLQ, or from a file to
//! the queues (`--queue`) or the local runner; the queues of a deployed stack
//! (`--stack`/`HK_STACK`) or of the local convention (`--prefix`). An outbox record
//! goes to the receiver it names; `--to` names the receiver of bare bodies only.

use super::run::{deliver, notifier_for, print_handed_on, print_run};
use super::ui::{observe, progress};
use super::*;
use engine::local::Runner;

#[derive(Subcommand)]
pub(crate) enum ReplayAction {
    /// Move messages from a function's DLQ back to its queue.
    Dlq {
        /// The function whose DLQ is replayed.
        #[arg(value_parser = FunctionParser)]
        function: Function,
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
        /// Print one JSON object (`action`, `total`, `by_type`, `skipped`, `keys`).
        #[arg(long)]
        json: bool,
        /// Replay a deletion worker's DLQ (group-destroy, delete-user,
        /// delete-placeholder-user, storage-cleanup) without asking; needed when not on
        /// a terminal.
        #[arg(long)]
        yes: bool,
    },
    /// Replay a JSON-lines file of message bodies or --outbox records.
    #[command(after_help = exit::EXIT_CODES_HELP)]
    File {
        /// The file.
        path: PathBuf,
        /// Send to the queues (SQS/moto) of a deployed stack (`--stack`/`HK_STACK`:
        /// `<stack>-<function>`) or of `hk local setup` (`--prefix`) instead of
        /// running locally.
        #[arg(long)]
        queue: bool,
        /// The receiving function of bare message bodies. An outbox record always goes
        /// to the receiver it names: `--to` never overrides it.
        #[arg(long, value_parser = FunctionParser)]
        to: Option<Function>,
        #[command(flatten)]
        stack: StackArgs,
        /// Local runs: the clock (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Local runs: also deliver the replayed functions' own continuations (what
        /// they send to other functions is always delivered).
        #[arg(long)]
        until_idle: bool,
        /// Local runs: one JSON object per function run; --queue: one JSON object
        /// like `replay dlq --json`'s.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn print_replay(r: &hk::aws_local::ReplayReport, verb: &str, json: bool) {
    let total: u64 = r.by_type.values().sum();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "action": verb,
                "total": total,
                "by_type": r.by_type,
                "skipped": r.skipped,
                "keys": r.keys,
            })
        );
        return;
    }
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
            json,
            yes,
        } => {
            let f = function;
            let names = stack.names()?;
            let clients = stack.clients().await?;
            let dlq = clients.url(&hk::aws_local::dlq_name(names, f)).await?;
            let queue = clients.url(&hk::aws_local::queue_name(names, f)).await?;
            // Asked once the queues are known to exist (credentials, region, names).
            if !dry_run && super::confirm::deletion_worker(f) {
                super::confirm::confirm(
                    &format!(
                        "{f} deletes for good: replaying its DLQ ({}) sends its deletions to the \
                         stack's queue again (look first with --dry-run).",
                        hk::aws_local::dlq_name(names, f)
                    ),
                    yes,
                )?;
            }
            let poll = hk::aws_local::Poll { wait_s, window_s };
            let pb = progress(json, format!("replaying {f}'s DLQ"));
            let r = hk::aws_local::replay_dlq(
                &clients,
                &dlq,
                &queue,
                max,
                kind.as_deref(),
                dry_run,
                poll,
            )
            .await;
            pb.finish_and_clear();
            let r = r?;
            print_replay(&r, if dry_run { "would move" } else { "moved" }, json);
            if !json {
                for k in &r.keys {
                    println!("  key {k}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        ReplayAction::File {
            path,
            queue,
            to,
            stack,
            now,
            until_idle,
            json,
        } => {
            let lines = hk::aws_local::read_lines(&path)?;
            if queue {
                let names = stack.names()?;
                let clients = stack.clients().await?;
                let pb = progress(json, format!("sending {} message(s)", lines.len()));
                let r = hk::aws_local::replay_file_to_queues(&clients, names, &lines, to).await;
                pb.finish_and_clear();
                print_replay(&r?, "sent", json);
                return Ok(ExitCode::SUCCESS);
            }
            let mut targets = Vec::with_capacity(lines.len());
            for (recv, body) in &lines {
                let f = hk::aws_local::receiver_of(*recv, to)?;
                targets.push((f, body));
            }
            let config = local_config()?;
            let connector = connector(&config).await?;
            let throwaway = engine::migrate::is_throwaway(&connector.connect("hk").await?).await?;
            let mut runner = Runner::new(
                connector,
                config.settings.clone(),
                parse_now(now.as_deref())?,
            );
            // A replayed notice is delivered the way `hk run` delivers it.
            if let Some((f, _)) = targets
                .iter()
                .find(|(f, _)| matches!(f, Function::PatExpiring | Function::DeliverNotification))
            {
                runner = runner.with_notifier(notifier_for(*f, throwaway).await?);
            }
            runner = runner.with_storage(super::run::storage_for(&config).await?);
            // What the replay cannot deliver is handed on, as in `hk run` (behaviour §11).
            let handoff = engine::local::Handoff::create(&engine::local::state_dir(), "replay")?;
            runner = runner
                .with_handoff(handoff.clone())
                .with_backoff(engine::local::Backoff::from_env()?);
            let pb = progress(json, format!("replaying {} message(s)", lines.len()));
            runner = runner.with_observer(observe(&pb));
            let mut result = Ok(());
            for (f, body) in targets {
                result = deliver(&mut runner, f, body, until_idle).await;
                if result.is_err() {
                    break;
                }
            }
            pb.finish_and_clear();
            for r in &runner.runs {
                if json {
                    println!("{}", r.to_json());
                } else {
                    print_run(r);
                }
            }
            print_handed_on(&runner, json);
            handoff.finish();
            result?;
            Ok(exit::run_code(&runner.runs, runner.exit_code(!until_idle)))
        }
    }
}
