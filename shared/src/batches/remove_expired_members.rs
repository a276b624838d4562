//! B38 `remove-expired-members` (b38-remove-expired-members.md).
//!
//! Owns: the keyset page of expired memberships (`expires_at DESC, id DESC`, one page
//! of 1000 per invocation, read in one statement without locks), the per-member
//! transaction (re-check under `FOR UPDATE` ⚑ D5, last-owner rule, removal, phase 1
//! for project bots), and the continuation with the cursor of the last row read.

use chrono::NaiveDate;
use serde_json::json;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::membership::{self, Member, Refresh, MEMBER_COLUMNS};
use crate::gitlab::user_removal::{self, PhaseOne, RemovalRequest};
use crate::gitlab::{authz, permissions};
use crate::locks;
use crate::messages::{Envelope, MemberCursor, RemoveExpiredMembersRun};
use crate::queue::OutMessage;
use crate::retry_transient;
use crate::runtime::{Invocation, Report};

/// Members per page.
pub const BATCH_SIZE: usize = 1000;
/// Delay of the continuation after a full page.
pub const BATCH_DELAY_S: u32 = 10;
/// Reason passed to phase 1 for bots.
pub const REMOVAL_REASON: &str = "Membership expired";

const FUNCTION: Function = Function::RemoveExpiredMembers;

/// How one member ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberOutcome {
    Deleted,
    NoLongerExpired,
    LastOwner { group_id: i64, user_id: i64 },
}

/// One page read: `(expires_at, id)` in page order, and whether more rows follow.
async fn read_page<C: GenericClient>(
    c: &C,
    today: NaiveDate,
    cursor: Option<MemberCursor>,
) -> Result<(Vec<(NaiveDate, i64)>, bool)> {
    let limit = (BATCH_SIZE + 1) as i64;
    let rows = match cursor {
        None => {
            c.query(
                "SELECT expires_at, id::bigint FROM members
                 WHERE expires_at IS NOT NULL AND expires_at <= $1::date
                 ORDER BY expires_at DESC, id DESC LIMIT $2",
                &[&today, &limit],
            )
            .await?
        }
        Some(cur) => {
            c.query(
                "SELECT expires_at, id::bigint FROM members
                 WHERE expires_at IS NOT NULL AND expires_at <= $1::date
                   AND (expires_at, id) < ($2::date, $3::bigint)
                 ORDER BY expires_at DESC, id DESC LIMIT $4",
                &[&today, &cur.expires_at, &cur.id, &limit],
            )
            .await?
        }
    };
    let mut page: Vec<(NaiveDate, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let has_next = page.len() > BATCH_SIZE;
    page.truncate(BATCH_SIZE);
    Ok((page, has_next))
}

/// Steps 2–6 of §5 for one member, in its own transaction.
async fn process_member<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    id: i64,
) -> Result<MemberOutcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let row = tx
        .query_opt(
            &format!(
                "SELECT {MEMBER_COLUMNS} FROM members
                 WHERE id = $1::bigint AND expires_at IS NOT NULL AND expires_at <= $2::date
                 FOR UPDATE"
            ),
            &[&id, &inv.today()],
        )
        .await?;
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
    membership::remove_membership(&tx, &m, refresh).await?;
    // Step 5: a project bot loses its account too.
    let mut outbox: Vec<OutMessage> = Vec::new();
    if let (true, Some(u)) = (is_bot, m.user_id) {
        let affected = membership::affected(&tx, &m).await?;
        let req = RemovalRequest {
            user_id: u,
            initiator: None,
            reason: REMOVAL_REASON,
            extra_affected: &affected,
        };
        let phase1 =
            user_removal::schedule_removal(&tx, inv.now, run_id, &req, &mut outbox).await?;
        if !matches!(phase1, PhaseOne::Scheduled { .. }) {
            authz::refresh(&tx, u, &affected).await?;
        }
    }
    // Step 6: send-then-commit.
    inv.queue.send(&outbox).await?;
    tx.commit().await?;
    Ok(MemberOutcome::Deleted)
}

struct PageResult {
    updated: u64,
    skipped: u64,
    failed: u64,
    next: Option<(MemberCursor, u32)>,
}

async fn run_page<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    cursor: Option<MemberCursor>,
) -> Result<PageResult>
where
    C: GenericClient + Send + Sync,
{
    let (page, has_next) = read_page(&*client, inv.today(), cursor).await?;
    let mut r = PageResult {
        updated: 0,
        skipped: 0,
        failed: 0,
        next: None,
    };
    let mut last: Option<MemberCursor> = None;
    for (i, (expires_at, id)) in page.iter().copied().enumerate() {
        // Step 1: the deadline guard, never before the first member (progress rule).
        if i > 0 && inv.deadline.reached() {
            r.next = last.map(|c| (c, 0));
            return Ok(r);
        }
        match retry_transient!(process_member(inv, &env.run_id, client, id).await) {
            Ok(MemberOutcome::Deleted) => r.updated += 1,
            Ok(MemberOutcome::NoLongerExpired) => {
                r.skipped += 1;
                tracing::info!(
                    member_id = id,
                    "Expired Member ID={id} skipped - no longer expired"
                );
            }
            Ok(MemberOutcome::LastOwner { group_id, user_id }) => {
                r.skipped += 1;
                tracing::warn!(
                    member_id = id,
                    group_id,
                    user_id,
                    "Expired Member ID={id} not removed - last owner of group"
                );
            }
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(e) => {
                r.failed += 1;
                tracing::error!(
                    member_id = id,
                    error = %e,
                    error_class = e.class(),
                    "Expired Member ID={id} cannot be removed - {e}"
                );
            }
        }
        last = Some(MemberCursor { expires_at, id });
    }
    if has_next {
        r.next = last.map(|c| (c, BATCH_DELAY_S));
    }
    Ok(r)
}

/// Handle one `remove-expired-members.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let payload: RemoveExpiredMembersRun = env.payload()?;
    let lock = locks::function_key(FUNCTION.name());
    if !locks::try_session_lock(&*client, &lock).await? {
        return Ok(Report::skipped());
    }
    let result = run_page(inv, env, client, payload.cursor).await;
    // Released before any continuation is sent, on error paths too (§9.10).
    let unlocked = locks::session_unlock(&*client, &lock).await;
    let page = result?;
    unlocked?;
    let status = if page.next.is_some() {
        "limit_reached"
    } else {
        "completed"
    };
    if let Some((cursor, delay)) = page.next {
        let next = env.continuation(
            FUNCTION,
            inv.now,
            RemoveExpiredMembersRun {
                cursor: Some(cursor),
            },
        );
        inv.continue_with(OutMessage::new(FUNCTION, delay, next))
            .await?;
    }
    Ok(Report::new(
        status,
        json!({
            "updated_rows": page.updated,
            "skipped_rows": page.skipped,
            "failed_rows": page.failed,
            "next_cursor": page.next.map(|(c, _)| c),
        }),
    )
    .metric("processed", page.updated as f64)
    .metric("skipped", page.skipped as f64)
    .metric("failed", page.failed as f64))
}
