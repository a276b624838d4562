//! The exit codes of a local run (behaviour §11): which failure a run leaves, and how
//! two codes combine.

use super::Run;

/// The exit code of a run that ended but counted failed items inside it (behaviour
/// §11, README "Exit codes"): failed rows, groups, users… that nothing redelivers
/// (the next run retries them). 1 and 2 take precedence ([`worse_exit_code`]).
pub const EXIT_ITEMS_FAILED: i32 = 3;

/// The worse of two exit codes: 2 (permanent), then 1 (retryable), then 3 (items
/// failed inside a run), then 0.
pub fn worse_exit_code(a: i32, b: i32) -> i32 {
    let rank = |c: i32| match c {
        0 => 0,
        EXIT_ITEMS_FAILED => 1,
        1 => 2,
        _ => 3,
    };
    if rank(b) > rank(a) {
        b
    } else {
        a
    }
}

/// The exit code of behaviour §11 for `runs` whose dead-lettered keys are `dead`
/// (`single`: every run of `runs` is an invocation whose failure is left).
pub(super) fn exit_code_of(runs: &[Run], dead: &[String], single: bool) -> i32 {
    let failed: Vec<&Run> = if single {
        runs.iter().collect()
    } else {
        // The last run of each dead-lettered key tells how it failed.
        let mut v = Vec::new();
        for k in dead {
            if let Some(r) = runs
                .iter()
                .rev()
                .find(|r| r.message_key.as_deref() == Some(k))
            {
                v.push(r);
            }
        }
        // A malformed initial message never enters the queue.
        v.extend(
            runs.iter()
                .filter(|r| r.outcome == "permanent" && r.message_key.is_none()),
        );
        v
    };
    if failed.iter().any(|r| r.outcome == "permanent") {
        2
    } else if failed.iter().any(|r| r.outcome == "retryable") {
        1
    } else {
        items_failed_code(runs)
    }
}

/// [`EXIT_ITEMS_FAILED`] when a run that succeeded counted failed items, else 0.
pub(super) fn items_failed_code(runs: &[Run]) -> i32 {
    if runs.iter().any(|r| r.items_failed() > 0) {
        EXIT_ITEMS_FAILED
    } else {
        0
    }
}
