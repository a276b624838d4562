//! B70 `placeholder-user-cleanup` (behaviour §B70.3).
//!
//! Owns: the eligibility rule of `import_placeholder_user_details` (namespace gone,
//! fewer than 15 attempts, never tried or last tried before `now − 2 days`), its keyset
//! pages by id, the guarded claim that counts an attempt only while the detail is still
//! eligible (so overlapping or redelivered runs never count twice), the final-attempt
//! warning, the `delete-placeholder-user.run` children delayed `i × 1 s`, and the
//! deadline continuation. It never deletes anything: the child does that.

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::{GenericClient, Transaction};

use crate::error::{Error, Result};
use crate::function::Function;
use crate::job::{Job, Step};
use crate::messages::{delete_placeholder_user_key, Envelope};
use crate::metrics::{self, Metric};
use crate::queue::{self, OutMessage};
use crate::runtime::{Done, Invocation};
use crate::workers::delete_placeholder_user::payload::DeletePlaceholderUserRun;

pub mod payload;

pub use payload::{DetailCursor, PlaceholderUserCleanupRun};

pub(crate) mod sql;

/// `MAX_ATTEMPTS`: deletion attempts per placeholder.
pub const MAX_ATTEMPTS: i32 = 15;
/// `DELETION_RETRY_PERIOD` in days: the minimum gap between two attempts.
pub const DELETION_RETRY_PERIOD_DAYS: i64 = 2;
/// `BATCH_SIZE`: details per keyset page.
pub const BATCH_SIZE: i64 = 1000;
/// Details per grouped transaction (behaviour §7.2 allows up to 100).
pub const GROUP_SIZE: usize = 100;
/// `DELAY_STEP_S`: child `i` is delayed `i × DELAY_STEP_S` seconds.
pub const DELAY_STEP_S: u32 = 1;
/// The warning of step 3 (behaviour §D18: a space after the first period).
pub const FINAL_ATTEMPT_WARNING: &str = "Maximum deletion attempts (15) reached for deletion of placeholder user. Making final deletion attempt.";

const FUNCTION: Function = Function::PlaceholderUserCleanup;

/// `:retry_before = now − 2 days`, computed in the application (behaviour §B70.3.1).
pub fn retry_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::days(DELETION_RETRY_PERIOD_DAYS)
}

/// One row of a page.
#[derive(Debug, Clone, Copy)]
struct Detail {
    id: i64,
    placeholder_user_id: i64,
}

/// One keyset page of eligible details after id `after` (0: from the start).
async fn read_page<C: GenericClient>(
    c: &C,
    retry_before: DateTime<Utc>,
    after: i64,
) -> Result<Vec<Detail>> {
    // Parsed, bound and run in one round trip (issue 52).
    let rows = c
        .query_typed(
            sql::READ_PAGE,
            &[
                (&MAX_ATTEMPTS, Type::INT4),
                (&retry_before, Type::TIMESTAMPTZ),
                (&after, Type::INT8),
                (&BATCH_SIZE, Type::INT8),
            ],
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

/// Every detail eligible at `now`, by id, read with the run's own keyset page:
/// `hk parity` checks that a plan decided each.
pub async fn eligible_details<C: GenericClient>(c: &C, now: DateTime<Utc>) -> Result<Vec<i64>> {
    let (mut out, mut after) = (Vec::new(), 0);
    loop {
        let page = read_page(c, retry_before(now), after).await?;
        out.extend(page.iter().map(|d| d.id));
        match page.last() {
            Some(d) if page.len() as i64 == BATCH_SIZE => after = d.id,
            _ => return Ok(out),
        }
    }
}

/// A successful claim: the counted attempt and the placeholder it belongs to.
#[derive(Debug, Clone, Copy)]
struct Claimed {
    attempts: i64,
    placeholder_user_id: i64,
}

/// How one detail's claim ended. In every case the group transaction is still usable.
#[derive(Debug)]
enum Claim {
    /// The attempt was counted.
    Claimed(Claimed),
    /// No longer eligible: nothing changed.
    Stale,
    /// The claim failed and was rolled back to its savepoint; the group goes on.
    RolledBack(Error),
}

/// Step 2, the guarded claim, inside its own savepoint of the group transaction.
///
/// `Err(e)`: the savepoint could not be released or rolled back, so the group
/// transaction is unusable.
async fn claim_once(
    tx: &mut Transaction<'_>,
    id: i64,
    now: DateTime<Utc>,
    retry_before: DateTime<Utc>,
) -> Result<Claim> {
    let sp = tx.transaction().await?;
    let row = sp
        .query_opt(sql::CLAIM, &[&id, &now, &MAX_ATTEMPTS, &retry_before])
        .await;
    match row {
        Ok(row) => {
            sp.commit().await?;
            Ok(row.map_or(Claim::Stale, |r| {
                Claim::Claimed(Claimed {
                    attempts: r.get(0),
                    placeholder_user_id: r.get(1),
                })
            }))
        }
        Err(e) => {
            sp.rollback().await?;
            Ok(Claim::RolledBack(e.into()))
        }
    }
}

/// [`claim_once`], again while it rolls back with a transient error, up to
/// [`crate::error::TRANSIENT_RETRIES`] times with random back-off (behaviour §7.4).
async fn claim(
    tx: &mut Transaction<'_>,
    id: i64,
    now: DateTime<Utc>,
    retry_before: DateTime<Utc>,
) -> Result<Claim> {
    let mut attempt = 0u32;
    loop {
        match claim_once(tx, id, now, retry_before).await? {
            Claim::RolledBack(e)
                if e.is_transient() && attempt < crate::error::TRANSIENT_RETRIES =>
            {
                attempt += 1;
                tracing::debug!(attempt, error = %e, "transient database error, retrying");
                crate::error::transient_backoff().await;
            }
            c => return Ok(c),
        }
    }
}

/// Step 4's message: `delete-placeholder-user.run` with delay `index × 1 s`, hop 0.
fn child(env: &Envelope, now: DateTime<Utc>, c: Claimed, index: u32) -> OutMessage {
    OutMessage::to(
        delete_placeholder_user_key(c.placeholder_user_id, c.attempts),
        &env.run_id,
        now,
        &DeletePlaceholderUserRun {
            placeholder_user_id: c.placeholder_user_id,
            attempt: c.attempts,
        },
    )
    .after(index.saturating_mul(DELAY_STEP_S))
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

/// The `done` result of one invocation.
#[derive(Debug, Clone, Serialize)]
pub struct PlaceholderUserCleanupDone {
    /// Children sent (attempts counted).
    pub enqueued_count: u64,
    /// Of those, final attempts (step 3's warning).
    pub max_attempts_reached_count: u64,
    /// Details no longer eligible when claimed.
    pub stale_count: u64,
    /// Details whose claim failed.
    pub failed_count: u64,
}

impl Done for PlaceholderUserCleanupDone {
    fn metrics(&self) -> Vec<(Metric, f64)> {
        vec![
            (metrics::PROCESSED, self.enqueued_count as f64),
            (metrics::SKIPPED, self.stale_count as f64),
            (metrics::FAILED, self.failed_count as f64),
            (
                metrics::ITEMS,
                (self.enqueued_count + self.stale_count + self.failed_count) as f64,
            ),
            (
                metrics::MAX_ATTEMPTS_REACHED,
                self.max_attempts_reached_count as f64,
            ),
        ]
    }
}

/// Whether a group ran to its end or the deadline guard stopped it.
enum GroupEnd {
    Done,
    Deadline,
}

/// Up to [`GROUP_SIZE`] details in one transaction, one savepoint each; the group's
/// children are sent in calls of at most ten before COMMIT (behaviour §7.2).
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
        let claimed = claim(&mut tx, d.id, inv.now, retry_before).await?;
        let (decision, rule) = match &claimed {
            Claim::Claimed(c) if c.attempts >= i64::from(MAX_ATTEMPTS) => {
                ("claimed", "max_attempts_reached")
            }
            Claim::Claimed(_) => ("claimed", "attempt"),
            Claim::Stale => ("kept", "no_longer_eligible"),
            Claim::RolledBack(_) => ("failed", "error"),
        };
        inv.decide("import_placeholder_user_details", d.id, decision, rule);
        match claimed {
            Claim::Claimed(c) => {
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
                    Error::Malformed(
                        "invalid payload: field `cursor.index` leaves no room for another child"
                            .into(),
                    )
                })?;
                p.enqueued += 1;
            }
            Claim::Stale => {
                p.stale += 1;
                tracing::debug!(
                    detail_id = d.id,
                    placeholder_user_id = d.placeholder_user_id,
                    "Placeholder user detail skipped: no longer eligible"
                );
            }
            Claim::RolledBack(e) if e.is_connection_lost() => return Err(e),
            Claim::RolledBack(e) => {
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
    // Send-then-commit; a failed send rolls back the whole group (behaviour §7.2 (b)).
    if let Err(e) = queue::send_outbox(inv.queue, &outbox).await {
        tx.rollback().await?;
        return Err(e.into());
    }
    tx.commit().await?;
    Ok(end)
}

/// Pages until one is empty, or the cursor to continue from when the guard fires.
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

/// The `placeholder-user-cleanup` job: one run at a time, continued with its cursor.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlaceholderUserCleanup;

impl Job for PlaceholderUserCleanup {
    const FUNCTION: Function = FUNCTION;
    type Payload = PlaceholderUserCleanupRun;
    type Outcome = PlaceholderUserCleanupDone;
    type Deps = ();

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        payload: PlaceholderUserCleanupRun,
    ) -> Result<Step<PlaceholderUserCleanupDone, PlaceholderUserCleanupRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let mut p = Progress {
            index: payload.cursor.map_or(0, |c| c.index),
            last_visited: payload.cursor.map_or(0, |c| c.detail_id),
            ..Progress::default()
        };
        let next = run(inv, env, client, &mut p).await?;
        let done = PlaceholderUserCleanupDone {
            enqueued_count: p.enqueued,
            max_attempts_reached_count: p.max_attempts_reached,
            stale_count: p.stale,
            failed_count: p.failed,
        };
        let next = next.map(|c| PlaceholderUserCleanupRun { cursor: Some(c) });
        Ok(Step::then(done, next, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
