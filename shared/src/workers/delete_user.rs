//! Phase 2 of user removal: the `delete-user` worker (behaviour §5.2, §D9).
//!
//! Owns: the commit-aware pre-check, the reassignment of `issues`, `merge_requests`
//! and `notes` to the ghost user in batches of 1000 under the budget (re-sent when it
//! runs out), and the final transaction that re-checks everything under locks and
//! deletes the user (with `AUDIT_EVENTS=on`, EE's audit event of the ghost migration's
//! destroy, docs/gitlab-differences.md D3). Replays are no-ops.

use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::membership::{self, Member, Refresh};
use crate::gitlab::side_effects::audit::users;
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::user_removal::{self, Refusal};
use crate::gitlab::{permissions, user_type, Intent};
use crate::job::{Job, Next, Step};
use crate::locks;
use crate::messages::Envelope;
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Budget, Done, Invocation, Status};

pub mod payload;
pub mod sql;

pub use payload::DeleteUserRun;

/// Rows reassigned per statement.
pub const REASSIGN_BATCH: i64 = 1000;

/// The reassignment of each contribution table, in order.
const REASSIGN: [&str; 3] = [
    sql::REASSIGN_ISSUES,
    sql::REASSIGN_MERGE_REQUESTS,
    sql::REASSIGN_NOTES,
];

/// The `outcome` field of `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The user does not exist (stale).
    NotFound,
    /// No pending ghost user migration (stale).
    NoMigration,
    /// The ghost user is never deleted (refused).
    Ghost,
    /// Sole owner or personal projects (refused).
    Refused,
    /// The user was deleted (completed).
    Deleted,
}

impl Outcome {
    /// The `outcome` field's value.
    fn name(self) -> &'static str {
        match self {
            Outcome::NotFound => "not_found",
            Outcome::NoMigration => "no_migration",
            Outcome::Ghost => "ghost",
            Outcome::Refused => "refused",
            Outcome::Deleted => "deleted",
        }
    }
}

/// Rows reassigned to the ghost user by this invocation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Reassigned {
    /// `issues` rows.
    pub issues_reassigned: u64,
    /// `merge_requests` rows.
    pub merge_requests_reassigned: u64,
    /// `notes` rows.
    pub notes_reassigned: u64,
}

impl Reassigned {
    fn from_counts(c: [u64; 3]) -> Reassigned {
        Reassigned {
            issues_reassigned: c[0],
            merge_requests_reassigned: c[1],
            notes_reassigned: c[2],
        }
    }
}

/// The `done` result: `stale` and `refused` carry the outcome, `limit_reached` the rows
/// reassigned so far, `completed` both.
#[derive(Debug, Clone, Serialize)]
pub struct DeleteUserDone {
    /// The user of the message.
    pub user_id: i64,
    /// How it ended (absent while the reassignment goes on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// Rows reassigned (absent for `stale` and `refused`).
    #[serde(flatten)]
    pub reassigned: Option<Reassigned>,
}

impl DeleteUserDone {
    fn ended(user_id: i64, outcome: Outcome) -> DeleteUserDone {
        DeleteUserDone {
            user_id,
            outcome: Some(outcome),
            reassigned: None,
        }
    }
    fn reassigning(user_id: i64, counts: [u64; 3]) -> DeleteUserDone {
        DeleteUserDone {
            user_id,
            outcome: None,
            reassigned: Some(Reassigned::from_counts(counts)),
        }
    }
    fn completed(user_id: i64, counts: [u64; 3]) -> DeleteUserDone {
        DeleteUserDone {
            outcome: Some(Outcome::Deleted),
            ..DeleteUserDone::reassigning(user_id, counts)
        }
    }
}

impl Done for DeleteUserDone {
    fn status(&self) -> Status {
        match self.outcome {
            Some(Outcome::NotFound | Outcome::NoMigration) => Status::Stale,
            Some(Outcome::Ghost | Outcome::Refused) => Status::Refused,
            Some(Outcome::Deleted) => Status::Completed,
            None => Status::LimitReached,
        }
    }
}

enum Pre {
    Missing,
    NoMigration,
    Present { user_type: i16 },
}

/// Steps 1–2: wait for any phase-1 transaction on the user, then look for the row.
async fn precheck<C: GenericClient + Send + Sync>(client: &mut C, u: i64) -> Result<Pre> {
    let tx = client.transaction().await?;
    // One round trip (parsed, bound and run in one flight; issue 52).
    let row = tx
        .query_typed(sql::SHARE_USER, &[(&u, Type::INT8)])
        .await?
        .into_iter()
        .next();
    let Some(row) = row else {
        tx.commit().await?;
        return Ok(Pre::Missing);
    };
    let migration = tx.query_opt(sql::MIGRATION, &[&u]).await?.is_some();
    tx.commit().await?;
    Ok(if migration {
        Pre::Present {
            user_type: row.get(0),
        }
    } else {
        Pre::NoMigration
    })
}

fn log_refusal(u: i64, r: &Refusal) {
    match r {
        Refusal::SoleOwner(group_ids) => {
            tracing::warn!(user_id = u, group_ids = ?group_ids, "User deletion refused: sole owner of group")
        }
        Refusal::PersonalProjects(project_ids) => {
            tracing::warn!(user_id = u, project_ids = ?project_ids, "User deletion refused: user owns personal projects")
        }
    }
}

/// How the final transaction ended.
enum Final {
    Deleted,
    Missing,
    NoMigration,
    Ghost,
    Refused(Refusal),
}

/// Step 7: everything again under locks, then the deletion.
async fn final_transaction<C: GenericClient + Send + Sync>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    u: i64,
) -> Result<Final> {
    let tx = client.transaction().await?;
    let scopes = permissions::owned_group_scopes(&tx, u).await?;
    locks::group_owner_locks(&tx, &scopes).await?;
    let Some(row) = tx.query_opt(sql::LOCK_USER, &[&u]).await? else {
        return Ok(Final::Missing);
    };
    let Some(migration) = tx.query_opt(sql::MIGRATION, &[&u]).await? else {
        return Ok(Final::NoMigration);
    };
    let initiator: Option<i64> = migration.get(0);
    if row.get::<_, i16>(0) == user_type::GHOST {
        return Ok(Final::Ghost);
    }
    if let Some(r) = user_removal::refusal(&tx, u, false).await? {
        return Ok(Final::Refused(r));
    }
    // Memberships that reappeared since phase 1.
    let rows = tx.query(sql::LOCK_MEMBERSHIPS, &[&u]).await?;
    let members: Vec<Member> = rows.iter().map(Member::from_row).collect();
    let ids: Vec<i64> = members.iter().map(|m| m.id).collect();
    // System hooks: GitLab's `user.destroy` destroys the memberships with their
    // callbacks, then reports the user; bodies read before the rows go.
    let member_hooks = system_hooks::prepare(&tx, inv, Subject::Members(&ids)).await?;
    let user_hook = system_hooks::prepare(&tx, inv, Subject::User(u)).await?;
    // EE's event of the ghost migration's destroy (D3), read before the rows go.
    let audit_events = if inv.settings.audit_events {
        users::user_deleted(&tx, inv.now, u, initiator).await?
    } else {
        Vec::new()
    };
    for m in &members {
        membership::remove_membership(&tx, m, Refresh::Now).await?;
    }
    tx.execute(sql::DELETE_ROUTES, &[&u]).await?;
    tx.execute(sql::DELETE_NAMESPACES, &[&u]).await?;
    tx.execute(sql::DELETE_MIGRATION, &[&u]).await?;
    tx.execute(sql::DELETE_AUTHORIZATIONS, &[&u]).await?;
    tx.execute(sql::DELETE_USER, &[&u]).await?;
    if !audit_events.is_empty() {
        tracing::info!(user_id = u, audit_events = ?audit_events, "User deletion audited");
    }
    let mut intents = member_hooks.claim(inv);
    intents.extend(user_hook.claim(inv));
    let outbox: Vec<OutMessage> = Intent::messages(intents, run_id, inv.now).collect();
    // Send-then-commit.
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(Final::Deleted)
}

/// The `delete-user` job, re-sent while the reassignment goes on.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeleteUser;

impl Job for DeleteUser {
    const FUNCTION: Function = Function::DeleteUser;
    type Payload = DeleteUserRun;
    type Outcome = DeleteUserDone;
    type Deps = ();

    fn continuing(done: &DeleteUserDone, hop: u64) {
        tracing::info!(user_id = done.user_id, hop, "delete-user continuing");
    }

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        p: DeleteUserRun,
    ) -> Result<Step<DeleteUserDone, DeleteUserRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let step = work(inv, &env.run_id, client, p).await?;
        if let Step::Done(DeleteUserDone {
            user_id,
            outcome: Some(o),
            ..
        }) = &step
        {
            let decision = match o {
                Outcome::Deleted => "deleted",
                Outcome::Ghost | Outcome::Refused => "refused",
                Outcome::NotFound | Outcome::NoMigration => "kept",
            };
            inv.decide("users", *user_id, decision, o.name());
        }
        Ok(step)
    }
}

/// Steps 1–7 of behaviour §5.2 for message `p`.
async fn work<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    p: DeleteUserRun,
) -> Result<Step<DeleteUserDone, DeleteUserRun>>
where
    C: GenericClient + Send + Sync,
{
    // Steps 1–7 of behaviour §5.2.
    let u = p.user_id;
    let budget = Budget::start(inv.settings.delete_user_budget);
    match retry_transient!(precheck(client, u).await)? {
        Pre::Missing => {
            tracing::info!(user_id = u, "delete-user skipped: user not found");
            return Ok(Step::Done(DeleteUserDone::ended(u, Outcome::NotFound)));
        }
        Pre::NoMigration => {
            tracing::info!(
                user_id = u,
                "delete-user skipped: no pending ghost user migration"
            );
            return Ok(Step::Done(DeleteUserDone::ended(u, Outcome::NoMigration)));
        }
        Pre::Present { user_type } if user_type == user_type::GHOST => {
            tracing::error!(
                user_id = u,
                "delete-user refused: ghost user cannot be deleted"
            );
            return Ok(Step::Done(DeleteUserDone::ended(u, Outcome::Ghost)));
        }
        Pre::Present { .. } => {}
    }
    if let Some(r) = user_removal::refusal(&*client, u, false).await? {
        log_refusal(u, &r);
        return Ok(Step::Done(DeleteUserDone::ended(u, Outcome::Refused)));
    }
    let ghost = retry_transient!(
        user_removal::ensure_ghost_user(client.transaction().await?, inv.now).await
    )?;
    let mut counts = [0u64; 3];
    for (i, statement) in REASSIGN.iter().enumerate() {
        loop {
            let n = client
                .execute(*statement, &[&u, &ghost, &REASSIGN_BATCH])
                .await?;
            if n == 0 {
                break; // this table is finished: not a unit, no reason to stop
            }
            counts[i] += n;
            if budget.exhausted() || inv.deadline.reached() {
                return Ok(Step::Continue {
                    outcome: DeleteUserDone::reassigning(u, counts),
                    next: Next::Resend,
                    delay_s: 0,
                });
            }
        }
    }
    match retry_transient!(final_transaction(inv, run_id, client, u).await)? {
        Final::Deleted => {
            tracing::info!(
                user_id = u,
                ghost_user_id = ghost,
                issues_reassigned = counts[0],
                merge_requests_reassigned = counts[1],
                notes_reassigned = counts[2],
                initiator_user_id = p.initiator_user_id,
                reason = p.reason.as_deref(),
                "User deleted"
            );
            Ok(Step::Done(DeleteUserDone::completed(u, counts)))
        }
        Final::Missing => {
            tracing::info!(user_id = u, "delete-user skipped: user not found");
            Ok(Step::Done(DeleteUserDone::ended(u, Outcome::NotFound)))
        }
        Final::NoMigration => {
            tracing::info!(
                user_id = u,
                "delete-user skipped: no pending ghost user migration"
            );
            Ok(Step::Done(DeleteUserDone::ended(u, Outcome::NoMigration)))
        }
        Final::Ghost => {
            tracing::error!(
                user_id = u,
                "delete-user refused: ghost user cannot be deleted"
            );
            Ok(Step::Done(DeleteUserDone::ended(u, Outcome::Ghost)))
        }
        Final::Refused(r) => {
            log_refusal(u, &r);
            Ok(Step::Done(DeleteUserDone::ended(u, Outcome::Refused)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Report;
    use serde_json::json;

    #[test]
    fn done_lines_keep_their_shapes() {
        let json = |d: DeleteUserDone| Report::new(d).to_json();
        assert_eq!(
            json(DeleteUserDone::ended(7, Outcome::NoMigration)),
            json!({"status": "stale", "user_id": 7, "outcome": "no_migration"})
        );
        assert_eq!(
            json(DeleteUserDone::ended(7, Outcome::Ghost)),
            json!({"status": "refused", "user_id": 7, "outcome": "ghost"})
        );
        let r = Report::new(DeleteUserDone::reassigning(7, [1, 2, 3]));
        assert_eq!(
            r.to_json(),
            json!({"status": "limit_reached", "user_id": 7, "issues_reassigned": 1,
                   "merge_requests_reassigned": 2, "notes_reassigned": 3})
        );
        assert_eq!(r.counts().len(), 3);
        assert_eq!(
            json(DeleteUserDone::completed(7, [0, 0, 4])),
            json!({"status": "completed", "user_id": 7, "outcome": "deleted",
                   "issues_reassigned": 0, "merge_requests_reassigned": 0,
                   "notes_reassigned": 4})
        );
    }
}
