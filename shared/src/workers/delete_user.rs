//! Phase 2 of user removal: the `delete-user` worker (common.md §5.2, ⚑ D9).
//!
//! Owns: the commit-aware pre-check (`FOR SHARE` on the user, then the migration row),
//! the reassignment of `issues`, `merge_requests` and `notes` to the ghost user in
//! batches of 1000 under the budget, the re-send when the budget runs out, and the
//! final transaction that re-checks everything under locks and deletes the user.
//! Replays are no-ops: once the user or its migration row is gone, step 1 or 2 stops.

use serde_json::json;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::membership::{self, Member, Refresh, MEMBER_COLUMNS};
use crate::gitlab::user_removal::{self, Refusal};
use crate::gitlab::{permissions, user_type};
use crate::locks;
use crate::messages::{DeleteUserRun, Envelope};
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Budget, Invocation, Report};

/// Rows reassigned per statement.
pub const REASSIGN_BATCH: i64 = 1000;

/// The contribution tables, in reassignment order.
const TABLES: [&str; 3] = ["issues", "merge_requests", "notes"];

enum Pre {
    Missing,
    NoMigration,
    Present { user_type: i16 },
}

/// Steps 1–2: wait for any phase-1 transaction on the user, then look for the row.
async fn precheck<C: GenericClient + Send + Sync>(client: &mut C, u: i64) -> Result<Pre> {
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            "SELECT user_type::int2 FROM users WHERE id = $1::bigint FOR SHARE",
            &[&u],
        )
        .await?;
    let Some(row) = row else {
        tx.commit().await?;
        return Ok(Pre::Missing);
    };
    let migration = tx
        .query_opt(
            "SELECT 1 FROM ghost_user_migrations WHERE user_id = $1::bigint",
            &[&u],
        )
        .await?
        .is_some();
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
    client: &mut C,
    u: i64,
) -> Result<Final> {
    let tx = client.transaction().await?;
    let scopes = permissions::owned_group_scopes(&tx, u).await?;
    locks::group_owner_locks(&tx, &scopes).await?;
    let Some(row) = tx
        .query_opt(
            "SELECT user_type::int2 FROM users WHERE id = $1::bigint FOR UPDATE",
            &[&u],
        )
        .await?
    else {
        return Ok(Final::Missing);
    };
    if tx
        .query_opt(
            "SELECT 1 FROM ghost_user_migrations WHERE user_id = $1::bigint",
            &[&u],
        )
        .await?
        .is_none()
    {
        return Ok(Final::NoMigration);
    }
    if row.get::<_, i16>(0) == user_type::GHOST {
        return Ok(Final::Ghost);
    }
    if let Some(r) = user_removal::refusal(&tx, u, false).await? {
        return Ok(Final::Refused(r));
    }
    // Memberships that reappeared since phase 1.
    let rows = tx
        .query(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE user_id = $1::bigint ORDER BY id FOR UPDATE"),
            &[&u],
        )
        .await?;
    for r in &rows {
        membership::remove_membership(&tx, &Member::from_row(r), Refresh::Now).await?;
    }
    tx.execute(
        "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id IN
           (SELECT id FROM namespaces WHERE type = 'User' AND owner_id = $1::bigint)",
        &[&u],
    )
    .await?;
    tx.execute(
        "DELETE FROM namespaces WHERE type = 'User' AND owner_id = $1::bigint",
        &[&u],
    )
    .await?;
    tx.execute(
        "DELETE FROM ghost_user_migrations WHERE user_id = $1::bigint",
        &[&u],
    )
    .await?;
    tx.execute("DELETE FROM users WHERE id = $1::bigint", &[&u])
        .await?;
    tx.commit().await?;
    Ok(Final::Deleted)
}

/// Handle one `delete-user.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let p: DeleteUserRun = env.payload()?;
    let u = p.user_id;
    let budget = Budget::start(inv.settings.delete_user_budget);
    let stale =
        |outcome: &str| Report::untyped("stale", json!({ "user_id": u, "outcome": outcome }));
    match retry_transient!(precheck(client, u).await)? {
        Pre::Missing => {
            tracing::info!(user_id = u, "delete-user skipped: user not found");
            return Ok(stale("not_found"));
        }
        Pre::NoMigration => {
            tracing::info!(
                user_id = u,
                "delete-user skipped: no pending ghost user migration"
            );
            return Ok(stale("no_migration"));
        }
        Pre::Present { user_type } if user_type == user_type::GHOST => {
            tracing::error!(
                user_id = u,
                "delete-user refused: ghost user cannot be deleted"
            );
            return Ok(Report::untyped(
                "refused",
                json!({ "user_id": u, "outcome": "ghost" }),
            ));
        }
        Pre::Present { .. } => {}
    }
    if let Some(r) = user_removal::refusal(&*client, u, false).await? {
        log_refusal(u, &r);
        return Ok(Report::untyped(
            "refused",
            json!({ "user_id": u, "outcome": "refused" }),
        ));
    }
    let ghost = retry_transient!(
        user_removal::ensure_ghost_user(client.transaction().await?, inv.now).await
    )?;
    let mut counts = [0u64; 3];
    for (i, table) in TABLES.iter().enumerate() {
        loop {
            let n = client
                .execute(
                    &format!(
                        "UPDATE {table} SET author_id = $2::bigint WHERE id IN
                           (SELECT id FROM {table} WHERE author_id = $1::bigint ORDER BY id LIMIT $3)"
                    ),
                    &[&u, &ghost, &REASSIGN_BATCH],
                )
                .await?;
            if n == 0 {
                break; // this table is finished: not a unit, no reason to stop
            }
            counts[i] += n;
            if budget.exhausted() || inv.deadline.reached() {
                let sent = inv
                    .continue_with(OutMessage::new(
                        Function::DeleteUser,
                        0,
                        env.resend(inv.now),
                    ))
                    .await?;
                if sent {
                    tracing::info!(
                        user_id = u,
                        hop = env.hop.saturating_add(1),
                        "delete-user continuing"
                    );
                }
                return Ok(Report::untyped(
                    "limit_reached",
                    json!({
                        "user_id": u,
                        "issues_reassigned": counts[0],
                        "merge_requests_reassigned": counts[1],
                        "notes_reassigned": counts[2],
                    }),
                ));
            }
        }
    }
    match retry_transient!(final_transaction(client, u).await)? {
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
            Ok(Report::untyped(
                "completed",
                json!({
                    "user_id": u,
                    "outcome": "deleted",
                    "issues_reassigned": counts[0],
                    "merge_requests_reassigned": counts[1],
                    "notes_reassigned": counts[2],
                }),
            ))
        }
        Final::Missing => {
            tracing::info!(user_id = u, "delete-user skipped: user not found");
            Ok(stale("not_found"))
        }
        Final::NoMigration => {
            tracing::info!(
                user_id = u,
                "delete-user skipped: no pending ghost user migration"
            );
            Ok(stale("no_migration"))
        }
        Final::Ghost => {
            tracing::error!(
                user_id = u,
                "delete-user refused: ghost user cannot be deleted"
            );
            Ok(Report::untyped(
                "refused",
                json!({ "user_id": u, "outcome": "ghost" }),
            ))
        }
        Final::Refused(r) => {
            log_refusal(u, &r);
            Ok(Report::untyped(
                "refused",
                json!({ "user_id": u, "outcome": "refused" }),
            ))
        }
    }
}
