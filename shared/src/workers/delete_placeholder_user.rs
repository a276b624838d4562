//! B70 `delete-placeholder-user` (behaviour §B70.4).
//!
//! Owns: the re-checks of one `delete-placeholder-user.run` message (still a
//! placeholder, named as author by no issue, merge request or note, behaviour §D17)
//! and then phase 1 of user removal with the placeholder as its own initiator, its
//! `delete-user.run` sent before COMMIT. A missing or non-placeholder user is a silent
//! success, so replays are harmless. It never touches the detail row.

use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::user_removal::{self, PhaseOne, RemovalRequest};
use crate::gitlab::{user_type, Intent};
use crate::job::{Job, Step};
use crate::messages::Envelope;
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Done, Invocation, Status};

pub mod payload;

pub use payload::{DeletePlaceholderUserRun, ATTEMPT_MAX};

pub(crate) mod sql;

/// The reason phase 1 records and passes on to `delete-user`.
pub const REMOVAL_REASON: &str = "Placeholder user cleanup";
/// The warning of step 3.
pub const REFERENCED_WARNING: &str =
    "Unable to delete placeholder user because it is still referenced in other tables";

/// How one message ended: the `outcome` field of `done` (behaviour §B70.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The user is gone.
    NotFound,
    /// The user is no longer a placeholder.
    NotPlaceholder,
    /// A contribution still names the placeholder as author.
    Referenced,
    /// Phase 1 ran: `delete-user.run` was sent.
    Scheduled,
    /// Phase 1 refused (it has logged why).
    Refused,
}

impl Outcome {
    /// The `outcome` field's value.
    fn name(self) -> &'static str {
        match self {
            Outcome::NotFound => "not_found",
            Outcome::NotPlaceholder => "not_placeholder",
            Outcome::Referenced => "referenced",
            Outcome::Scheduled => "scheduled",
            Outcome::Refused => "refused",
        }
    }
}

/// The `done` result: the outcome and the placeholder.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct DeletePlaceholderUserDone {
    /// How the message ended.
    pub outcome: Outcome,
    /// The placeholder user of the message.
    pub placeholder_user_id: i64,
}

impl Done for DeletePlaceholderUserDone {
    fn status(&self) -> Status {
        match self.outcome {
            Outcome::NotFound | Outcome::NotPlaceholder => Status::Stale,
            Outcome::Referenced | Outcome::Scheduled => Status::Completed,
            Outcome::Refused => Status::Refused,
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
    // Parsed, bound and run in one round trip (issue 52).
    let Some(row) = tx
        .query_typed_opt(sql::USER_TYPE, &[(&u, Type::INT8)])
        .await?
    else {
        tx.commit().await?;
        return Ok(Outcome::NotFound);
    };
    if row.get::<_, i16>(0) != user_type::PLACEHOLDER {
        tx.commit().await?;
        return Ok(Outcome::NotPlaceholder);
    }
    // Step 3 (behaviour §D17: the subset's contribution tables only).
    let referenced: bool = tx.query_one(sql::REFERENCED, &[&u]).await?.get(0);
    if referenced {
        tx.commit().await?;
        return Ok(Outcome::Referenced);
    }
    // Step 4: phase 1 with the placeholder as its own initiator.
    let mut intents = Vec::new();
    let req = RemovalRequest {
        user_id: u,
        initiator: Some(u),
        reason: REMOVAL_REASON,
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    let phase1 = user_removal::schedule_removal(&tx, inv, &req, &mut intents).await?;
    let outbox: Vec<OutMessage> = Intent::messages(intents, run_id, inv.now).collect();
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(match phase1 {
        PhaseOne::Scheduled { .. } => Outcome::Scheduled,
        PhaseOne::Refused => Outcome::Refused,
        PhaseOne::NotFound => Outcome::NotFound,
    })
}

/// The `delete-placeholder-user` job, never continued.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeletePlaceholderUser;

impl Job for DeletePlaceholderUser {
    const FUNCTION: Function = Function::DeletePlaceholderUser;
    type Payload = DeletePlaceholderUserRun;
    type Outcome = DeletePlaceholderUserDone;
    type Deps = ();

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        p: DeletePlaceholderUserRun,
    ) -> Result<Step<DeletePlaceholderUserDone, DeletePlaceholderUserRun>>
    where
        C: GenericClient + Send + Sync,
    {
        // Steps 1–4 of behaviour §B70.4, with their log lines.
        let u = p.placeholder_user_id;
        let outcome = retry_transient!(process(inv, &env.run_id, client, u).await)?;
        let decision = match outcome {
            Outcome::Scheduled => "removal_scheduled",
            Outcome::Refused => "refused",
            _ => "kept",
        };
        inv.decide("users", u, decision, outcome.name());
        match outcome {
            Outcome::NotFound => {
                tracing::debug!(
                    placeholder_user_id = u,
                    "delete-placeholder-user skipped: user not found"
                );
            }
            Outcome::NotPlaceholder => {
                tracing::debug!(
                    placeholder_user_id = u,
                    "delete-placeholder-user skipped: not a placeholder user"
                );
            }
            Outcome::Referenced => {
                tracing::warn!(
                    placeholder_user_id = u,
                    attempt = p.attempt,
                    "{REFERENCED_WARNING}"
                );
            }
            Outcome::Scheduled => {
                tracing::info!(
                    placeholder_user_id = u,
                    attempt = p.attempt,
                    "Placeholder user deletion scheduled"
                );
            }
            // Phase 1 has logged why.
            Outcome::Refused => {}
        }
        Ok(Step::Done(DeletePlaceholderUserDone {
            outcome,
            placeholder_user_id: u,
        }))
    }
}
