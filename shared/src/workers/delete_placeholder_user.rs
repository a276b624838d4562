//! B70 `delete-placeholder-user` (b70-placeholder-user-cleanup.md §4).
//!
//! Owns: the re-checks of one `delete-placeholder-user.run` message (the user still
//! exists and is still a placeholder; no issue, merge request or note names it as
//! author, ⚑ D17) and, when they pass, phase 1 of user removal with the placeholder as
//! its own initiator, in one transaction whose `delete-user.run` is sent before COMMIT.
//! Phase 2 (`workers::delete_user`) deletes the row; the detail row follows through
//! the FK cascade. A missing or non-placeholder user is a silent success, so replays
//! and duplicates are harmless. It never touches the detail row: the attempt was
//! counted by the cron batch.

use serde_json::json;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::gitlab::user_removal::{self, PhaseOne, RemovalRequest};
use crate::gitlab::user_type;
use crate::messages::{DeletePlaceholderUserRun, Envelope};
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Invocation, Report};

/// The reason phase 1 records and passes on to `delete-user`.
pub const REMOVAL_REASON: &str = "Placeholder user cleanup";
/// The warning of step 3.
pub const REFERENCED_WARNING: &str =
    "Unable to delete placeholder user because it is still referenced in other tables";

/// How one message ended: the `outcome` field of `done` (§7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    NotFound,
    NotPlaceholder,
    Referenced,
    Scheduled,
    Refused,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::NotFound => "not_found",
            Outcome::NotPlaceholder => "not_placeholder",
            Outcome::Referenced => "referenced",
            Outcome::Scheduled => "scheduled",
            Outcome::Refused => "refused",
        }
    }
}

/// Steps 1–4 in one transaction; phase 1's message is sent before COMMIT.
async fn process<C>(inv: &Invocation<'_>, run_id: &str, client: &mut C, u: i64) -> Result<Outcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    // Steps 1 and 2.
    let Some(row) = tx
        .query_opt(
            "SELECT user_type::int2 FROM users WHERE id = $1::bigint",
            &[&u],
        )
        .await?
    else {
        tx.commit().await?;
        return Ok(Outcome::NotFound);
    };
    if row.get::<_, i16>(0) != user_type::PLACEHOLDER {
        tx.commit().await?;
        return Ok(Outcome::NotPlaceholder);
    }
    // Step 3 (⚑ D17: the subset's contribution tables only).
    let referenced: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM issues WHERE author_id = $1::bigint)
                 OR EXISTS (SELECT 1 FROM merge_requests WHERE author_id = $1::bigint)
                 OR EXISTS (SELECT 1 FROM notes WHERE author_id = $1::bigint)",
            &[&u],
        )
        .await?
        .get(0);
    if referenced {
        tx.commit().await?;
        return Ok(Outcome::Referenced);
    }
    // Step 4: phase 1 with the placeholder as its own initiator.
    let mut outbox: Vec<OutMessage> = Vec::new();
    let req = RemovalRequest {
        user_id: u,
        initiator: Some(u),
        reason: REMOVAL_REASON,
        extra_affected: &[],
    };
    let phase1 = user_removal::schedule_removal(&tx, inv.now, run_id, &req, &mut outbox).await?;
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(match phase1 {
        PhaseOne::Scheduled { .. } => Outcome::Scheduled,
        PhaseOne::Refused => Outcome::Refused,
        PhaseOne::NotFound => Outcome::NotFound,
    })
}

/// Handle one `delete-placeholder-user.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let p: DeletePlaceholderUserRun = env.payload()?;
    let u = p.placeholder_user_id;
    let outcome = retry_transient!(process(inv, &env.run_id, client, u).await)?;
    let status = match outcome {
        Outcome::NotFound => {
            tracing::debug!(
                placeholder_user_id = u,
                "delete-placeholder-user skipped: user not found"
            );
            "stale"
        }
        Outcome::NotPlaceholder => {
            tracing::debug!(
                placeholder_user_id = u,
                "delete-placeholder-user skipped: not a placeholder user"
            );
            "stale"
        }
        Outcome::Referenced => {
            tracing::warn!(
                placeholder_user_id = u,
                attempt = p.attempt,
                "{REFERENCED_WARNING}"
            );
            "completed"
        }
        Outcome::Scheduled => {
            tracing::info!(
                placeholder_user_id = u,
                attempt = p.attempt,
                "Placeholder user deletion scheduled"
            );
            "completed"
        }
        // Phase 1 has logged why.
        Outcome::Refused => "refused",
    };
    Ok(Report::untyped(
        status,
        json!({ "outcome": outcome.as_str(), "placeholder_user_id": u }),
    ))
}
