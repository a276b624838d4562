//! B38's per-member path: steps 2–6 of behaviour §B38.5 for one member.
//!
//! Owns: [`MemberOutcome`], [`process_member`] (re-check under `FOR UPDATE`, behaviour
//! §D5, the last-owner rule, the removal, phase 1 for a project bot, its `delete-user`
//! message, the removal's side effects) and [`one_member`]: one member in its own transaction with the retries of
//! behaviour §7.4 ([`MemberRun`]).

use tokio_postgres::GenericClient;

use super::{sql, REMOVAL_REASON};
use crate::error::{Error, Result};
use crate::gitlab::authz;
use crate::gitlab::membership::{self, Member, Refresh};
use crate::gitlab::permissions;
use crate::gitlab::side_effects::{self, Cause};
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::user_removal::{self, PhaseOne, RemovalRequest};
use crate::gitlab::Intent;
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::Invocation;

/// How one member ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MemberOutcome {
    /// Removed (with phase 1 for a project bot).
    Deleted,
    /// Not expired any more (or gone): skipped.
    NoLongerExpired,
    /// Kept by the last-owner rule: skipped.
    LastOwner { group_id: i64, user_id: i64 },
}

/// Where a member's `delete-user` message goes.
pub(super) enum Sends<'o> {
    /// Sent before the member's own COMMIT (one transaction per member).
    Now,
    /// Added to the group's outbox once the member's SAVEPOINT is released.
    Collect(&'o mut Vec<OutMessage>),
}

/// Steps 2–6 of behaviour §B38.5 for one member, in its own transaction (or, inside a group, its own
/// SAVEPOINT: `client.transaction()` on a transaction opens one).
pub(super) async fn process_member<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    id: i64,
    sends: Sends<'_>,
) -> Result<MemberOutcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let row = tx.query_opt(sql::LOCK_MEMBER, &[&id, &inv.today()]).await?;
    let Some(row) = row else {
        tx.commit().await?;
        return Ok(MemberOutcome::NoLongerExpired);
    };
    let m = Member::from_row(&row);
    // Step 3: the last-owner rule (takes the group-owner locks when it applies).
    if permissions::owner_protected(&tx, &m).await? {
        tx.commit().await?;
        return Ok(MemberOutcome::LastOwner {
            group_id: m.source_id,
            user_id: m.user_id.unwrap_or_default(),
        });
    }
    let is_bot = match m.user_id {
        Some(u) => permissions::load_actor(&tx, u)
            .await?
            .is_some_and(|a| a.is_project_bot()),
        None => false,
    };
    // Step 4: remove; a bot's refresh is left to phase 1's combined refresh.
    let refresh = if is_bot {
        Refresh::Deferred
    } else {
        Refresh::Now
    };
    let hooks = system_hooks::prepare(&tx, inv, Subject::Members(&[m.id])).await?;
    let left = side_effects::left_of(&tx, inv, &m).await?;
    membership::remove_membership(&tx, &m, refresh).await?;
    let mut intents = hooks.claim(inv);
    // Step 5: a project bot loses its account too.
    if let (true, Some(u)) = (is_bot, m.user_id) {
        let affected = membership::affected(&tx, &m).await?;
        let req = RemovalRequest {
            user_id: u,
            initiator: None,
            reason: REMOVAL_REASON,
            extra_affected: &affected,
            bot_resource: Some((m.source_type.as_str(), m.source_id)),
            reason_for_deletion: Some(REMOVAL_REASON),
        };
        let phase1 = user_removal::schedule_removal(&tx, inv, &req, &mut intents).await?;
        if !matches!(phase1, PhaseOne::Scheduled { .. }) {
            authz::refresh(&tx, u, &affected).await?;
        }
    }
    // What GitLab writes beside the removal, after its refresh.
    side_effects::after_removal(&tx, inv, Cause::Expired, &left).await?;
    let outbox: Vec<OutMessage> = Intent::messages(intents, run_id, inv.now).collect();
    // Step 6: send-then-commit (a group sends its members' messages before its COMMIT).
    match sends {
        Sends::Now => {
            inv.queue.send(&outbox).await?;
            tx.commit().await?;
        }
        Sends::Collect(group) => {
            tx.commit().await?;
            group.extend(outbox);
        }
    }
    Ok(MemberOutcome::Deleted)
}

/// How [`one_member`] ended.
pub(super) enum MemberRun {
    /// The member ended, removed, skipped or failed (the page counts and logs it).
    Ended(Result<MemberOutcome>),
    /// The connection is lost: the record fails with this error.
    ConnectionLost(Error),
}

/// One member in its own transaction, with the retries of behaviour §7.4.
pub(super) async fn one_member<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    id: i64,
) -> MemberRun
where
    C: GenericClient + Send + Sync,
{
    match retry_transient!(process_member(inv, run_id, client, id, Sends::Now).await) {
        Err(e) if e.is_connection_lost() => MemberRun::ConnectionLost(e),
        r => MemberRun::Ended(r),
    }
}
