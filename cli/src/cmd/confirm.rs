//! Confirmation before a destructive command (issue 51): `hk replay dlq` of a deletion
//! worker (its messages delete users, groups and their storage again) and `hk run` of a
//! function that deletes against a database `hk` did not create (no
//! `hk_meta.throwaway` marker). On a terminal the command asks and goes on only on
//! `yes`; without a terminal it needs `--yes`. `--dry-run` never asks: nothing is kept.

use std::io::{BufRead, IsTerminal, Write};

use super::*;

/// The deletion workers, whose dead letters a replay sends to production again.
pub(crate) fn deletion_worker(f: Function) -> bool {
    matches!(
        f,
        Function::GroupDestroy
            | Function::DeleteUser
            | Function::DeletePlaceholderUser
            | Function::StorageCleanup
    )
}

/// The functions that delete rows (or storage): every one but the expiry notices.
pub(crate) fn deletes(f: Function) -> bool {
    !matches!(f, Function::PatExpiring | Function::DeliverNotification)
}

/// Goes on when `yes`, or when a person on a terminal answers `yes` to `question`;
/// otherwise refuses (exit 2), saying to pass `--yes`.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    if !(stdin.is_terminal() && std::io::stderr().is_terminal()) {
        bail!("{question} Not confirmed: no terminal to ask on; pass --yes to go on");
    }
    eprint!("{question} Type yes to go on: ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        bail!("{question} Not confirmed (answer was not `yes`): nothing done")
    }
}
