//! `hk local setup|pump`: the local AWS stand-ins around `cargo lambda watch`.

use super::ui::progress;
use super::*;
use shared::Function;

#[derive(Subcommand)]
pub(crate) enum LocalAction {
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
        /// Print `{"queues", "schedule_group", "env_file"}` instead of the sentence.
        #[arg(long)]
        json: bool,
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
        /// Print one JSON object (`delivered`, `failed`, `schedules_fired`,
        /// `work_left`) instead of the sentence.
        #[arg(long)]
        json: bool,
    },
}

pub(crate) async fn cmd_local(action: LocalAction) -> Result<ExitCode> {
    match action {
        LocalAction::Setup {
            aws,
            visibility_s,
            env_file,
            json,
        } => {
            let clients = aws.clients().await?;
            let env =
                hk::aws_local::setup(&clients, &aws.prefix, visibility_s, aws.endpoint.as_deref())
                    .await?;
            if let Some(dir) = env_file.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            std::fs::write(&env_file, text)
                .with_context(|| format!("cannot write {}", env_file.display()))?;
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "queues": Function::ALL.len(),
                        "schedule_group": aws.prefix,
                        "env_file": env_file.display().to_string(),
                    })
                );
            } else {
                println!(
                    "{} queues with DLQs and schedule group `{}` ready; env file: {}",
                    Function::ALL.len(),
                    aws.prefix,
                    env_file.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalAction::Pump {
            aws,
            invoke,
            until_idle,
            max_seconds,
            json,
        } => {
            let clients = aws.clients().await?;
            let pb = progress(json, format!("pumping the `{}` queues", aws.prefix));
            let stats = hk::aws_local::pump(
                &clients,
                &aws.prefix,
                &invoke,
                until_idle,
                std::time::Duration::from_secs(max_seconds),
            )
            .await;
            pb.finish_and_clear();
            let stats = stats?;
            let failed: u64 = stats.failed.values().sum();
            if json {
                println!(
                    "{}",
                    serde_json::json!({
                        "delivered": stats.delivered,
                        "failed": stats.failed,
                        "schedules_fired": stats.schedules_fired,
                        "work_left": stats.work_left,
                    })
                );
            }
            if stats.work_left {
                eprintln!("hk: stopped after --max-seconds {max_seconds} with messages or schedules still pending");
                return Ok(ExitCode::from(1));
            }
            if !json {
                println!(
                    "pump done: delivered {:?}, failed {:?}, schedules fired {}",
                    stats.delivered, stats.failed, stats.schedules_fired
                );
            }
            Ok(if failed > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}
