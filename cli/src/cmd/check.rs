//! `hk check`: the read-only preflight against the target database, connected as
//! the functions connect (the same configuration variables, TLS rules and Secrets
//! Manager read). The checks are in `hk::check`; this file parses the arguments,
//! prints one line per check (or `--json`) and sets the exit code.

use std::process::ExitCode;

use anyhow::Result;

use super::parse_now;

/// `hk check`'s arguments.
#[derive(clap::Args)]
pub(crate) struct CheckArgs {
    /// Print one JSON document instead of lines (the `hk-check` function's result).
    #[arg(long)]
    json: bool,
    /// The time the work-waiting counts are taken at (RFC 3339; default: now).
    #[arg(long)]
    now: Option<String>,
    /// Accept a GitLab schema newer than the tested range up to this migration version
    /// (the newest in schema_migrations, 14 digits), after reading that release's notes;
    /// default: GITLAB_SCHEMA_ACCEPTED, as the functions read it.
    #[arg(long, value_name = "VERSION")]
    accept_schema: Option<String>,
}

// The report's statuses are `hk`'s exit codes.
const _: () = assert!(
    hk::check::report::BUSY == super::exit::RETRYABLE
        && hk::check::report::FAIL == super::exit::PERMANENT
);

/// Run every check; exit 0 only when every required one passes, 1 when the only
/// failures are a busy database (a lock held elsewhere: retry), 2 otherwise (the
/// database must change first).
pub(crate) async fn cmd_check(a: CheckArgs) -> Result<ExitCode> {
    let now = parse_now(a.now.as_deref())?;
    let accepted = shared::config::SCHEMA_ACCEPTED_ENV;
    let target = hk::check::target::from_lookup(|k| match (k, &a.accept_schema) {
        (k, Some(v)) if k == accepted => Some(v.clone()),
        _ => std::env::var(k).ok(),
    })
    .await?;
    let checks = hk::check::run(&target, now).await?;
    let report = hk::check::report::Report::new(now, checks);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for c in &report.checks {
            println!("{}", c.line());
        }
        println!("{}", report.summary());
    }
    Ok(ExitCode::from(report.exit_code))
}
