//! `hk`'s exit codes (README, "Exit codes"): 0 success, 1 a retryable failure left
//! (including a database or AWS that cannot be reached, or throttling), 2 a
//! permanent failure or a usage error, 3 a run that ended with items failed inside
//! it (`hk run`, `hk replay file`, `hk demo`: [`ITEMS_FAILED`]), 4 `hk parity` found
//! a disagreement ([`DISAGREED`]). A command that fails
//! with an error is classified here by the causes it carries.

use std::io::ErrorKind;

/// A retryable failure is left: running the same command later may succeed.
pub(crate) const RETRYABLE: u8 = 1;
/// A permanent failure or a usage error: the same command will fail again.
pub(crate) const PERMANENT: u8 = 2;
/// A run ended, but items failed inside it (failed rows, groups, users…): nothing
/// redelivers them; the next run retries them. 1 and 2 take precedence.
pub(crate) const ITEMS_FAILED: u8 = engine::local::EXIT_ITEMS_FAILED as u8;

/// `hk parity`: a planned decision disagrees with the database, or its row's id now
/// belongs to another row (docs/parity.md).
pub(crate) const DISAGREED: u8 = 4;

/// What `hk run --help` and `hk replay file --help` say about exit codes.
pub(crate) const EXIT_CODES_HELP: &str = "Exit codes: 0 success (stale and skipped \
included); 1 a retryable failure left (a message dead-lettered or failing, a database \
or AWS that cannot be reached); 2 a permanent failure (malformed message, \
configuration) or a usage error; 3 the run ended but items failed inside it \
(failed_rows, failed_groups, failed_count, total_user_failures, \
total_failed_notifications_for_resource_bots, failed schedule batches: the next run \
retries them). 2 and 1 take precedence over 3.";

/// The exit code of a finished local run, with a line on stderr when items failed
/// inside it (stdout may be `--json`).
pub(crate) fn run_code(runs: &[engine::local::Run], code: i32) -> std::process::ExitCode {
    let items: u64 = runs.iter().map(engine::local::Run::items_failed).sum();
    if items > 0 {
        let mut by_function = std::collections::BTreeMap::<&str, u64>::new();
        for r in runs {
            *by_function.entry(r.function.name()).or_default() += r.items_failed();
        }
        let list: Vec<String> = by_function
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(f, n)| format!("{f}: {n}"))
            .collect();
        let worse = if code as u8 == ITEMS_FAILED {
            ""
        } else {
            ", and a worse failure is left"
        };
        eprintln!(
            "hk: {items} item(s) failed inside runs that ended ({}){worse}; see their error \
             lines and the done lines' failure counters (exit {code})",
            list.join(", ")
        );
    }
    std::process::ExitCode::from(code as u8)
}

/// The one line `hk` prints for a command that ended with `e`: its message and its
/// causes, each once. A cause whose text the line already holds is left out: a
/// database error shows its `tokio_postgres` error's text, and that error its own
/// cause's (`error connecting to server: Connection refused`, not the first part
/// twice); newlines of multi-line causes become spaces.
pub(crate) fn render(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let t = cause.to_string().replace('\n', " ");
        let t = t.trim();
        if t.is_empty() || out.contains(t) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(t);
    }
    out
}

/// The exit code for a command that ended with `e`.
pub(crate) fn code_for(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if let Some(se) = cause.downcast_ref::<shared::error::Error>() {
            use shared::error::Error as E;
            return match se {
                E::Retryable(_) | E::Delivery { .. } | E::Storage { .. } | E::Transport(_) => {
                    RETRYABLE
                }
                E::Db(_) if se.is_transient() || se.is_connection_lost() => RETRYABLE,
                E::Db(pe) => pg_code(pe),
                E::Malformed(_) | E::Config(_) | E::Invariant(_) => PERMANENT,
            };
        }
        if cause.is::<hk::aws_local::AwsSetupError>() {
            return PERMANENT;
        }
        if let Some(pe) = cause.downcast_ref::<tokio_postgres::Error>() {
            return pg_code(pe);
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            if retryable_io(io.kind()) {
                return RETRYABLE;
            }
        }
        if retryable_text(&cause.to_string()) {
            return RETRYABLE;
        }
    }
    PERMANENT
}

fn pg_code(e: &tokio_postgres::Error) -> u8 {
    if e.is_closed() {
        return RETRYABLE;
    }
    match e.code().map(|c| c.code()) {
        // Serialization failure, deadlock, lock not available, the connection class,
        // the server shutting down or starting, too many connections.
        Some(c)
            if [
                "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300",
            ]
            .contains(&c)
                || c.starts_with("08") =>
        {
            RETRYABLE
        }
        Some(_) => PERMANENT,
        // No SQLSTATE and no server error: the socket (refused, reset, timed out).
        None if e.as_db_error().is_none() => RETRYABLE,
        None => PERMANENT,
    }
}

fn retryable_io(kind: ErrorKind) -> bool {
    matches!(
        kind,
        ErrorKind::ConnectionRefused
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::NotConnected
            | ErrorKind::TimedOut
            | ErrorKind::BrokenPipe
            | ErrorKind::AddrNotAvailable
            | ErrorKind::HostUnreachable
            | ErrorKind::NetworkUnreachable
            | ErrorKind::NetworkDown
    )
}

/// The AWS SDK's errors, as their text shows them once they are wrapped: a request
/// that never reached AWS (`dispatch failure`), a timeout, or throttling.
fn retryable_text(s: &str) -> bool {
    let s = s.to_ascii_lowercase();
    [
        "dispatch failure",
        "timeout error",
        "connection refused",
        "throttl",
        "toomanyrequests",
        "requestlimitexceeded",
        "slowdown",
        "service unavailable",
    ]
    .iter()
    .any(|p| s.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::anyhow;

    #[test]
    fn unreachable_is_retryable_and_configuration_is_permanent() {
        let refused = std::io::Error::new(ErrorKind::ConnectionRefused, "refused");
        assert_eq!(
            code_for(&anyhow::Error::new(refused).context("cannot reach")),
            RETRYABLE
        );
        let e = shared::error::Error::Retryable("cannot connect to 127.0.0.1:1".into());
        assert_eq!(code_for(&e.into()), RETRYABLE);
        let e = shared::error::Error::Config("DATABASE_URL is not a URL".into());
        assert_eq!(code_for(&e.into()), PERMANENT);
        assert_eq!(code_for(&anyhow!("dispatch failure")), RETRYABLE);
        assert_eq!(
            code_for(&anyhow!("unhandled error (ThrottlingException)")),
            RETRYABLE
        );
        assert_eq!(code_for(&anyhow!("unknown data set `x`")), PERMANENT);
    }

    #[test]
    fn a_failure_left_outranks_items_failed_inside_a_run() {
        let worse = |a: u8, b: u8| engine::local::worse_exit_code(a.into(), b.into()) as u8;
        assert_eq!(worse(0, ITEMS_FAILED), ITEMS_FAILED);
        assert_eq!(worse(ITEMS_FAILED, RETRYABLE), RETRYABLE);
        assert_eq!(worse(RETRYABLE, ITEMS_FAILED), RETRYABLE);
        assert_eq!(worse(PERMANENT, ITEMS_FAILED), PERMANENT);
        assert_eq!(worse(RETRYABLE, PERMANENT), PERMANENT);
        assert_eq!(worse(ITEMS_FAILED, 0), ITEMS_FAILED);
    }
}
