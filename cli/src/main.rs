//! `hk`: the operator CLI. It parses arguments and calls the same `shared` handlers
//! as the Lambda functions, through the in-process queue with virtual time. Each
//! command is a module under `cmd/`; this file only sets up logging and exits with
//! the command's code (`cmd::exit`: 0, 1 retryable, 2 permanent or usage, 3 items failed
//! inside a run that ended). It holds no SQL of its own.

mod cmd;

use std::process::ExitCode;

use clap::Parser;

use cmd::{real_main, Cli, Cmd};

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
            let code = cmd::exit::code_for(&e);
            let kind = if code == cmd::exit::RETRYABLE {
                "retryable"
            } else {
                "permanent"
            };
            eprintln!("hk: {e:#} ({kind}: exit {code})");
            ExitCode::from(code)
        }
    }
}
