//! `hk`: the operator CLI. It parses arguments and calls the same `shared` handlers
//! as the Lambda functions, through the in-process queue with virtual time. Each
//! command is a module under `cmd/`; this file only sets up logging and exits with
//! the command's code (`cmd::exit`: 0, 1 retryable, 2 permanent or usage, 3 items failed
//! inside a run that ended). It holds no SQL of its own.

// Deep async state machines (every handler, storage-cleanup's clients included, inside
// the runner's futures) pass the default query depth of 128 in the test build.
#![recursion_limit = "256"]

mod cmd;

use std::process::ExitCode;

use clap::Parser;

use cmd::{real_main, Cli, Cmd};

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // A bench measures the handlers, not their info lines; a person running the demo
    // or one function wants its table: warnings only, unless asked (`--verbose`,
    // RUST_LOG). The AWS SDK's own log lines never reach the terminal unless RUST_LOG
    // asks for them: a failed call is one line of `hk`'s.
    let quiet = match &cli.command {
        Cmd::Bench(_) => true,
        Cmd::Demo { verbose, .. } => !verbose,
        Cmd::Run(a) => !a.verbose,
        _ => false,
    };
    let level = if quiet { "warn" } else { "info" };
    std::env::set_var("RUST_LOG", log_spec(std::env::var("RUST_LOG").ok(), level));
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
            eprintln!("hk: {} ({kind}: exit {code})", cmd::exit::render(&e));
            ExitCode::from(code)
        }
    }
}

/// The log filter `hk` installs: `RUST_LOG` if set, else `default` for `shared` and
/// `hk` (warn elsewhere); the AWS SDK's crates are off unless the spec names them
/// (`aws…=…`), so its retries and provider-chain warnings never reach the terminal.
fn log_spec(rust_log: Option<String>, default: &str) -> String {
    let spec = rust_log
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| default.to_string());
    let spec = if spec.contains('=') || spec.contains(',') {
        spec
    } else {
        format!("warn,shared={spec},hk={spec}")
    };
    if spec.contains("aws") {
        spec
    } else {
        format!("{spec},aws=off")
    }
}

#[cfg(test)]
mod tests {
    use super::log_spec;

    #[test]
    fn the_aws_sdk_is_silent_unless_named() {
        assert_eq!(log_spec(None, "warn"), "warn,shared=warn,hk=warn,aws=off");
        assert_eq!(
            log_spec(Some("debug".into()), "warn"),
            "warn,shared=debug,hk=debug,aws=off"
        );
        assert_eq!(
            log_spec(Some("info,aws_config=debug".into()), "warn"),
            "info,aws_config=debug"
        );
    }
}
