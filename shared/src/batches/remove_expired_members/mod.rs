//! B38 `remove-expired-members` (behaviour §B38).
//!
//! Owns: the keyset page of expired memberships (`expires_at DESC, id DESC`, 1000 per
//! invocation, read without locks), the page loop that runs it in groups of up to
//! `Settings::member_group_size` members (`group`) or one member per transaction
//! (`member`), the typed `done` result ([`ExpiredMembersDone`]) and the job, which
//! continues with the cursor of the last row read. Key rule: a group that fails in any
//! way is rolled back and its members run again one transaction each (behaviour
//! §B38.5), so a member's failure never affects another. `updated_rows` counts only
//! rows actually removed (docs/gitlab-differences.md).

use std::time::Duration;

use chrono::NaiveDate;
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::{Job, Step};
use crate::messages::Envelope;
use crate::metrics::{self, Metric};
use crate::runtime::{Done, Invocation, Status};

mod group;
mod member;
pub mod payload;
pub mod sql;

pub use payload::{MemberCursor, RemoveExpiredMembersRun};

use group::{members_have_delete_triggers, run_group, GroupEnd, GroupStatements};
use member::{one_member, MemberOutcome, MemberRun};

/// The page statements under their former names (the bench reads pages the same way).
pub use sql::{PAGE as PAGE_SQL, PAGE_AFTER as PAGE_AFTER_SQL};

/// Members per page.
pub const BATCH_SIZE: usize = 1000;
/// Delay of the continuation after a full page.
pub const BATCH_DELAY_S: u32 = 10;
/// Reason passed to phase 1 for bots.
pub const REMOVAL_REASON: &str = "Membership expired";
/// Members per grouped transaction by default: `Settings::member_group_size`.
pub use crate::config::MEMBER_GROUP_SIZE as GROUP_SIZE;
/// Ids below the cursor that [`read_page`] looks through by the primary key for the
/// rest of the cursor's date: about the cost of one keyset page read.
pub const SAME_DATE_WINDOW: usize = 4 * BATCH_SIZE;

const FUNCTION: Function = Function::RemoveExpiredMembers;

/// One page read (behaviour §B38.4): `(expires_at, id)` in page order, and whether more
/// rows follow. After a cursor, the window of [`sql::PAGE_SAME_DATE`] is tried first, so
/// a date shared by many memberships is never read and sorted as a whole; when it does
/// not hold a whole page, the keyset read [`sql::PAGE_AFTER`] returns the same rows.
pub async fn read_page<C: GenericClient>(
    c: &C,
    today: NaiveDate,
    cursor: Option<MemberCursor>,
) -> Result<(Vec<(NaiveDate, i64)>, bool)> {
    let limit = (BATCH_SIZE + 1) as i64;
    // Parsed, bound and run in one flight each (one round trip, issue 52).
    let rows = match cursor {
        None => {
            c.query_typed(sql::PAGE, &[(&today, Type::DATE), (&limit, Type::INT8)])
                .await?
        }
        Some(cur) => {
            let window = SAME_DATE_WINDOW as i64;
            let same = c
                .query_typed(
                    sql::PAGE_SAME_DATE,
                    &[
                        (&cur.expires_at, Type::DATE),
                        (&cur.id, Type::INT8),
                        (&window, Type::INT8),
                        (&limit, Type::INT8),
                        (&today, Type::DATE),
                    ],
                )
                .await?;
            if same.len() as i64 == limit {
                same
            } else {
                c.query_typed(
                    sql::PAGE_AFTER,
                    &[
                        (&today, Type::DATE),
                        (&cur.expires_at, Type::DATE),
                        (&cur.id, Type::INT8),
                        (&limit, Type::INT8),
                    ],
                )
                .await?
            }
        }
    };
    let mut page: Vec<(NaiveDate, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let has_next = page.len() > BATCH_SIZE;
    page.truncate(BATCH_SIZE);
    Ok((page, has_next))
}

/// The `done` result of one page (`limit_reached`: with the continuation's cursor).
#[derive(Debug, Clone, Serialize)]
pub struct ExpiredMembersDone {
    /// Rows removed.
    pub updated_rows: u64,
    /// Rows no longer expired, or kept by the last-owner rule.
    pub skipped_rows: u64,
    /// Rows whose removal failed.
    pub failed_rows: u64,
    /// The last row read before the continuation (`null` when the run is complete).
    pub next_cursor: Option<MemberCursor>,
    /// The longest grouped transaction of this invocation and the most member rows one
    /// of them locked: what `hk bench` reports against behaviour §7.2's bound.
    #[serde(skip)]
    pub longest_group: (Duration, u64),
}

impl Done for ExpiredMembersDone {
    fn metrics(&self) -> Vec<(Metric, f64)> {
        vec![
            (metrics::PROCESSED, self.updated_rows as f64),
            (metrics::SKIPPED, self.skipped_rows as f64),
            (metrics::FAILED, self.failed_rows as f64),
            (
                metrics::ITEMS,
                (self.updated_rows + self.skipped_rows + self.failed_rows) as f64,
            ),
            (metrics::UPDATED_ROWS, self.updated_rows as f64),
            (metrics::SKIPPED_ROWS, self.skipped_rows as f64),
            (metrics::FAILED_ROWS, self.failed_rows as f64),
        ]
    }

    /// `RemoveExpiredMembersWorker` logs `log_extra_metadata_on_done(:result,
    /// status:, updated_rows:)`; the skipped and failed rows are added beside them.
    fn gitlab_extras(&self, status: Status) -> Vec<(String, serde_json::Value)> {
        vec![(
            "result".into(),
            serde_json::json!({
                "status": status.name(),
                "updated_rows": self.updated_rows,
                "skipped_rows": self.skipped_rows,
                "failed_rows": self.failed_rows,
            }),
        )]
    }
}

struct PageResult {
    updated: u64,
    skipped: u64,
    failed: u64,
    next: Option<(MemberCursor, u32)>,
    longest_group: (Duration, u64),
}

impl PageResult {
    /// The page's `done` result.
    fn done(&self) -> ExpiredMembersDone {
        ExpiredMembersDone {
            updated_rows: self.updated,
            skipped_rows: self.skipped,
            failed_rows: self.failed,
            next_cursor: self.next.map(|(c, _)| c),
            longest_group: self.longest_group,
        }
    }

    /// Count, log and decide one member's outcome (behaviour §B38.5 step E, §B38.8).
    fn record(&mut self, inv: &Invocation<'_>, id: i64, outcome: Result<MemberOutcome>) {
        let (decision, rule) = match &outcome {
            Ok(MemberOutcome::Deleted) => ("removed", "expired"),
            Ok(MemberOutcome::NoLongerExpired) => ("kept", "no_longer_expired"),
            Ok(MemberOutcome::LastOwner { .. }) => ("kept", "last_owner"),
            Err(_) => ("failed", "error"),
        };
        inv.decide("members", id, decision, rule);
        match outcome {
            Ok(MemberOutcome::Deleted) => self.updated += 1,
            Ok(MemberOutcome::NoLongerExpired) => {
                self.skipped += 1;
                tracing::info!(
                    member_id = id,
                    "Expired Member ID={id} skipped - no longer expired"
                );
            }
            Ok(MemberOutcome::LastOwner { group_id, user_id }) => {
                self.skipped += 1;
                tracing::warn!(
                    member_id = id,
                    group_id,
                    user_id,
                    "Expired Member ID={id} not removed - last owner of group"
                );
            }
            Err(e) => {
                self.failed += 1;
                tracing::error!(
                    member_id = id,
                    error = %e,
                    error_class = e.class(),
                    "Expired Member ID={id} cannot be removed - {e}"
                );
            }
        }
    }
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
        longest_group: (Duration::ZERO, 0),
    };
    let statements = if page.len() > 1 && !members_have_delete_triggers(&*client).await? {
        Some(GroupStatements::prepare(&*client).await?)
    } else {
        None
    };
    let grouped = statements.is_some();
    let mut last: Option<MemberCursor> = None;
    let mut i = 0;
    while i < page.len() {
        // Step 1: the deadline guard, never before the first member (progress rule).
        if i > 0 && inv.deadline.reached() {
            r.next = last.map(|c| (c, 0));
            return Ok(r);
        }
        let end = if !grouped || inv.deadline.reached() {
            i + 1
        } else {
            (i + inv.settings.member_group_size.clamp(1, BATCH_SIZE)).min(page.len())
        };
        let ids: Vec<i64> = page[i..end].iter().map(|(_, id)| *id).collect();
        let group = match &statements {
            Some(st) if ids.len() > 1 => run_group(inv, &env.run_id, client, st, &ids, i).await,
            _ => GroupEnd::RolledBack,
        };
        match group {
            GroupEnd::Lost(e) => return Err(e),
            GroupEnd::Committed {
                outcomes,
                stopped_at,
                took,
                rows_locked,
            } => {
                let (longest, most) = r.longest_group;
                r.longest_group = (longest.max(took), most.max(rows_locked as u64));
                for (id, outcome) in outcomes {
                    r.record(inv, id, outcome);
                }
                if let Some(k) = stopped_at {
                    // The guard fired inside the group: continue before its first
                    // member left undone (one before it is the cursor).
                    let (expires_at, id) = page[i + k - 1];
                    last = Some(MemberCursor { expires_at, id });
                    r.next = last.map(|c| (c, 0));
                    return Ok(r);
                }
                let (expires_at, id) = page[end - 1];
                last = Some(MemberCursor { expires_at, id });
            }
            // Rolled back, or never grouped: one transaction per member.
            GroupEnd::RolledBack => {
                for (k, &(expires_at, id)) in page[i..end].iter().enumerate() {
                    if i + k > 0 && inv.deadline.reached() {
                        r.next = last.map(|c| (c, 0));
                        return Ok(r);
                    }
                    match one_member(inv, &env.run_id, client, id).await {
                        MemberRun::Ended(outcome) => r.record(inv, id, outcome),
                        MemberRun::ConnectionLost(e) => return Err(e),
                    }
                    last = Some(MemberCursor { expires_at, id });
                }
            }
        }
        i = end;
    }
    if has_next {
        r.next = last.map(|c| (c, BATCH_DELAY_S));
    } else {
        infinitely_expired(inv, env, client, &mut r).await?;
    }
    Ok(r)
}

/// After the last page: the memberships expiring at `-infinity`, which no cursor can
/// carry, one transaction each, up to a page per run.
async fn infinitely_expired<C>(
    inv: &Invocation<'_>,
    env: &Envelope,
    client: &mut C,
    r: &mut PageResult,
) -> Result<()>
where
    C: GenericClient + Send + Sync,
{
    let limit = BATCH_SIZE as i64;
    let rows = client
        .query_typed(sql::INFINITELY_EXPIRED, &[(&limit, Type::INT8)])
        .await?;
    for row in &rows {
        if inv.deadline.reached() {
            break; // the next run goes on with them
        }
        let id: i64 = row.get(0);
        tracing::warn!(
            member_id = id,
            "Expired Member ID={id} expires at -infinity"
        );
        match one_member(inv, &env.run_id, client, id).await {
            MemberRun::Ended(outcome) => r.record(inv, id, outcome),
            MemberRun::ConnectionLost(e) => return Err(e),
        }
    }
    Ok(())
}

/// The `remove-expired-members` job: one run at a time, a page per invocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoveExpiredMembers;

impl Job for RemoveExpiredMembers {
    const FUNCTION: Function = FUNCTION;
    type Payload = RemoveExpiredMembersRun;
    type Outcome = ExpiredMembersDone;
    type Deps = ();

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        payload: RemoveExpiredMembersRun,
    ) -> Result<Step<ExpiredMembersDone, RemoveExpiredMembersRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let page = run_page(inv, env, client, payload.cursor).await?;
        let (next, delay_s) = match page.next {
            Some((c, delay_s)) => (Some(RemoveExpiredMembersRun { cursor: Some(c) }), delay_s),
            None => (None, 0),
        };
        Ok(Step::then(page.done(), next, delay_s))
    }
}
