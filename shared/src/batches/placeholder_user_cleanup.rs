//! B70 `placeholder-user-cleanup` (b70-placeholder-user-cleanup.md §3).
//!
//! Owns: the eligibility rule of `import_placeholder_user_details` (namespace gone,
//! fewer than 15 attempts, never tried or last tried strictly before `now − 2 days`),
//! the keyset pages by id (1000 per read, repeated until a page is empty), the guarded
//! claim that counts an attempt only while the detail is still eligible (so overlapping
//! or redelivered runs never count twice), the final-attempt warning, the
//! `delete-placeholder-user.run` children delayed `i × 1 s` (`i` carried through
//! `cursor.index`), and the deadline continuation.
//!
//! Details are grouped as common.md §7.2 allows: up to 100 consecutive details of a
//! page share one transaction, each detail runs in its own SAVEPOINT (a failing detail
//! rolls back to it alone and is logged and counted as step E says), and the group's
//! children are sent before COMMIT in `send` calls of at most ten. A failed send rolls
//! the whole group back and ends the record as a retryable failure (b70 §3.2). It
//! never deletes anything: the child does that.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use tokio_postgres::{GenericClient, Transaction};

use crate::error::Result;
use crate::function::Function;
use crate::locks;
use crate::messages::{
    delete_placeholder_user_key, DeletePlaceholderUserRun, DetailCursor, Envelope,
    PlaceholderUserCleanupRun,
};
use crate::queue::{OutMessage, SQS_BATCH};
use crate::retry_transient;
use crate::runtime::{Invocation, Report};

/// `MAX_ATTEMPTS`: deletion attempts per placeholder.
pub const MAX_ATTEMPTS: i32 = 15;
/// `DELETION_RETRY_PERIOD` in days: the minimum gap between two attempts.
pub const DELETION_RETRY_PERIOD_DAYS: i64 = 2;
/// `BATCH_SIZE`: details per keyset page.
pub const BATCH_SIZE: i64 = 1000;
/// Details per grouped transaction (common.md §7.2 allows up to 100).
pub const GROUP_SIZE: usize = 100;
/// `DELAY_STEP_S`: child `i` is delayed `i × DELAY_STEP_S` seconds.
pub const DELAY_STEP_S: u32 = 1;
/// The warning of step 3 (⚑ D18: a space after the first period).
pub const FINAL_ATTEMPT_WARNING: &str = "Maximum deletion attempts (15) reached for deletion of placeholder user. Making final deletion attempt.";

const FUNCTION: Function = Function::PlaceholderUserCleanup;

/// `:retry_before = now − 2 days`, computed in the application (§3.1).
pub fn retry_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::days(DELETION_RETRY_PERIOD_DAYS)
}

/// One row of a page.
#[derive(Debug, Clone, Copy)]
struct Detail {
    id: i64,
    placeholder_user_id: i64,
}

/// One keyset page of eligible details after `after` (ids are positive, so 0 reads
/// from the start), ordered by id.
async fn read_page<C: GenericClient>(
    c: &C,
    retry_before: DateTime<Utc>,
    after: i64,
) -> Result<Vec<Detail>> {
    let rows = c
        .query(
            "SELECT id::bigint, placeholder_user_id::bigint
             FROM import_placeholder_user_details
             WHERE namespace_id IS NULL
               AND deletion_attempts < $1::int4
               AND (last_deletion_attempt_at IS NULL OR last_deletion_attempt_at < $2::timestamptz)
               AND id > $3::bigint
             ORDER BY id LIMIT $4::int8",
            &[&MAX_ATTEMPTS, &retry_before, &after, &BATCH_SIZE],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Detail {
            id: r.get(0),
            placeholder_user_id: r.get(1),
        })
        .collect())
}

/// A successful claim: the counted attempt and the placeholder it belongs to.
#[derive(Debug, Clone, Copy)]
struct Claimed {
    attempts: i64,
    placeholder_user_id: i64,
}

/// Step 2, the guarded claim, inside its own savepoint of the group transaction.
///
/// `Ok(Ok(None))`: stale (no longer eligible). `Ok(Err(e))`: the detail failed and was
/// rolled back to its savepoint; the group goes on. `Err(e)`: the savepoint could not
/// be rolled back, so the group transaction is unusable.
async fn claim_once(
    tx: &mut Transaction<'_>,
    id: i64,
    now: DateTime<Utc>,
    retry_before: DateTime<Utc>,
) -> Result<Result<Option<Claimed>>> {
    let sp = tx.transaction().await?;
    let row = sp
        .query_opt(
            "UPDATE import_placeholder_user_details
             SET deletion_attempts = deletion_attempts + 1,
                 last_deletion_attempt_at = $2::timestamptz,
                 updated_at = $2::timestamptz
             WHERE id = $1::bigint
               AND namespace_id IS NULL
               AND deletion_attempts < $3::int4
               AND (last_deletion_attempt_at IS NULL OR last_deletion_attempt_at < $4::timestamptz)
             RETURNING deletion_attempts::bigint, placeholder_user_id::bigint",
            &[&id, &now, &MAX_ATTEMPTS, &retry_before],
        )
        .await;
    match row {
        Ok(row) => match sp.commit().await {
            Ok(()) => Ok(Ok(row.map(|r| Claimed {
                attempts: r.get(0),
                placeholder_user_id: r.get(1),
            }))),
            Err(e) => Err(e.into()),
        },
        Err(e) => {
            sp.rollback().await?;
            Ok(Err(e.into()))
        }
    }
}

/// Step 4's message: `delete-placeholder-user.run` with delay `index × 1 s`, hop 0.
fn child(env: &Envelope, now: DateTime<Utc>, c: Claimed, index: u32) -> OutMessage {
    let receiver = Function::DeletePlaceholderUser;
    OutMessage::new(
        receiver,
        index.saturating_mul(DELAY_STEP_S),
        Envelope::new(
            receiver.run_type(),
            delete_placeholder_user_key(c.placeholder_user_id, c.attempts),
            &env.run_id,
            now,
            DeletePlaceholderUserRun {
                placeholder_user_id: c.placeholder_user_id,
                attempt: c.attempts,
            },
        ),
    )
}

/// The run's progress within one invocation.
#[derive(Debug, Default)]
struct Progress {
    enqueued: u64,
    max_attempts_reached: u64,
    stale: u64,
    failed: u64,
    /// The run-wide index of the next child (`i`).
    index: u32,
    /// The last visited detail id (from the cursor, then this invocation's).
    last_visited: i64,
    /// Details visited by this invocation (the deadline guard waits for one).
    visited: u64,
}

/// Whether a group ran to its end or the deadline guard stopped it.
enum GroupEnd {
    Done,
    Deadline,
}

/// Up to [`GROUP_SIZE`] details in one transaction, one savepoint each; the group's
/// children are sent in calls of at most ten before COMMIT (common.md §7.2).
async fn run_group<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    details: &[Detail],
    p: &mut Progress,
) -> Result<GroupEnd>
where
    C: GenericClient + Send + Sync,
{
    let retry_before = retry_before(inv.now);
    let mut tx = client.transaction().await?;
    let mut outbox: Vec<OutMessage> = Vec::new();
    let mut end = GroupEnd::Done;
    for d in details {
        // Step 1: never before the first detail of the invocation (progress rule).
        if p.visited > 0 && inv.deadline.reached() {
            end = GroupEnd::Deadline;
            break;
        }
        match retry_transient!(claim_once(&mut tx, d.id, inv.now, retry_before).await?) {
            Ok(Some(c)) => {
                // Step 3.
                if c.attempts >= i64::from(MAX_ATTEMPTS) {
                    p.max_attempts_reached += 1;
                    tracing::warn!(
                        placeholder_user_id = c.placeholder_user_id,
                        detail_id = d.id,
                        "{FINAL_ATTEMPT_WARNING}"
                    );
                }
                // Step 4 (sent with the group) and step 5's increment.
                outbox.push(child(env, inv.now, c, p.index));
                // `i` comes from the message: checked (the group rolls back on error).
                p.index = p.index.checked_add(1).ok_or_else(|| {
                    crate::error::Error::Malformed(
                        "invalid payload: field `cursor.index` leaves no room for another child"
                            .into(),
                    )
                })?;
                p.enqueued += 1;
            }
            Ok(None) => {
                p.stale += 1;
                tracing::debug!(
                    detail_id = d.id,
                    placeholder_user_id = d.placeholder_user_id,
                    "Placeholder user detail skipped: no longer eligible"
                );
            }
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(e) => {
                // Step E: rolled back to the detail's savepoint; the group goes on.
                p.failed += 1;
                tracing::error!(
                    detail_id = d.id,
                    placeholder_user_id = d.placeholder_user_id,
                    error = %e,
                    error_class = e.class(),
                    "Placeholder user cleanup failed for detail"
                );
            }
        }
        p.visited += 1;
        p.last_visited = d.id;
    }
    // Send-then-commit; a failed send rolls back the whole group (§7.2 (b)).
    for part in outbox.chunks(SQS_BATCH) {
        if let Err(e) = inv.queue.send(part).await {
            tx.rollback().await?;
            return Err(e.into());
        }
    }
    tx.commit().await?;
    Ok(end)
}

/// Pages until one is empty, or until the deadline guard fires: then the cursor to
/// continue from.
async fn run<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    p: &mut Progress,
) -> Result<Option<DetailCursor>>
where
    C: GenericClient + Send + Sync,
{
    loop {
        let page = read_page(&*client, retry_before(inv.now), p.last_visited).await?;
        if page.is_empty() {
            return Ok(None);
        }
        for group in page.chunks(GROUP_SIZE) {
            if let GroupEnd::Deadline = run_group(inv, env, client, group, p).await? {
                return Ok(Some(DetailCursor {
                    detail_id: p.last_visited,
                    index: p.index,
                }));
            }
        }
    }
}

/// Handle one `placeholder-user-cleanup.run` message.
pub async fn handle<C>(inv: &Invocation<'_>, client: &mut C, env: &Envelope) -> Result<Report>
where
    C: GenericClient + Send + Sync,
{
    let payload: PlaceholderUserCleanupRun = env.payload()?;
    let lock = locks::function_key(FUNCTION.name());
    if !locks::try_session_lock(&*client, &lock).await? {
        return Ok(Report::skipped());
    }
    let mut p = Progress {
        index: payload.cursor.map_or(0, |c| c.index),
        last_visited: payload.cursor.map_or(0, |c| c.detail_id),
        ..Progress::default()
    };
    let result = run(inv, env, client, &mut p).await;
    // Released before any continuation is sent, on error paths too (§9.10).
    let unlocked = locks::session_unlock(&*client, &lock).await;
    let next = result?;
    unlocked?;
    let status = if next.is_some() {
        "limit_reached"
    } else {
        "completed"
    };
    if let Some(cursor) = next {
        let message = env.continuation(
            FUNCTION,
            inv.now,
            PlaceholderUserCleanupRun {
                cursor: Some(cursor),
            },
        );
        inv.continue_with(OutMessage::new(FUNCTION, 0, message))
            .await?;
    }
    Ok(Report::untyped(
        status,
        json!({
            "enqueued_count": p.enqueued,
            "max_attempts_reached_count": p.max_attempts_reached,
            "stale_count": p.stale,
            "failed_count": p.failed,
        }),
    )
    .metric("processed", p.enqueued as f64)
    .metric("skipped", p.stale as f64)
    .metric("failed", p.failed as f64)
    .metric("max_attempts_reached", p.max_attempts_reached as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_before_is_exactly_two_days_earlier() {
        let now: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let expected: DateTime<Utc> = "2025-03-08T00:00:00Z".parse().unwrap();
        assert_eq!(retry_before(now), expected);
    }

    #[test]
    fn the_child_is_delayed_by_its_index_and_keyed_by_user_and_attempt() {
        let now: DateTime<Utc> = "2025-03-10T00:00:00Z".parse().unwrap();
        let env = Envelope::cron(FUNCTION, "run-1", now);
        let c = Claimed {
            attempts: 3,
            placeholder_user_id: 53,
        };
        let m = child(&env, now, c, 901);
        assert_eq!(m.receiver, Function::DeletePlaceholderUser);
        assert_eq!(m.delay_s, 901);
        assert!(m.needs_schedule());
        assert_eq!(m.envelope.message_key, "delete-placeholder-user:53:3");
        assert_eq!(m.envelope.kind, "delete-placeholder-user.run");
        assert_eq!((m.envelope.hop, m.envelope.run_id.as_str()), (0, "run-1"));
        assert_eq!(
            m.envelope.payload,
            json!({"placeholder_user_id": 53, "attempt": 3})
        );
        assert!(!child(&env, now, c, 900).needs_schedule());
    }
}
