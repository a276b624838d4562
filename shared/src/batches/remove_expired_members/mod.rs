//! B38 `remove-expired-members` (behaviour §B38).
//!
//! Owns: the keyset page of expired memberships (`expires_at DESC, id DESC`, one page
//! of 1000 per invocation, read in one statement without locks), the page loop that
//! runs it in groups or one member at a time, the typed `done` result
//! ([`ExpiredMembersDone`]), and the continuation with the cursor of the last row read.
//! The grouped transaction is in `group`, the per-member transaction (re-check under
//! `FOR UPDATE` behaviour §D5, last-owner rule, removal, phase 1 for project bots) in `member`,
//! the statements in [`sql`].
//!
//! Members are grouped as behaviour §7.2 allows: up to [`GROUP_SIZE`] consecutive
//! members of a page share one transaction. The group takes every lock its members
//! need in the lock order of ARCHITECTURE.md (rows, group owners, `users` rows,
//! authorizations; each step ascending, for the group as a whole). Step 1 is one
//! statement: it locks the rows of the group's still-expired members and every
//! membership of a project bot among them, and deletes, under those locks, every
//! locked member that needs no per-member rule (no project bot, no owner candidate of
//! behaviour §2.5 — an active owner row of a non-bot user in any state: a blocked or
//! deactivated sole owner is protected too) with its notification setting. Then the
//! group-owner locks of each owner candidate's `owner_scope` and of the groups a bot
//! owns; the bots' `users` rows; and the authorization locks of the other users, sent
//! together with one set-based refresh of the deleted members' users
//! (`authz::RemovedRefresher`). No member then takes a lock of an earlier step after
//! one of a later step, so a group cannot deadlock against `prune-deletions`,
//! `delete-user` or a phase 1 (only a bot's own authorization lock is left to its
//! nested phase 1). The members left (owner candidates, bots, a row changed while the
//! group waited for its lock) then run the per-member steps in page order, each in its
//! own SAVEPOINT; rows no longer expired are skipped. The group's `delete-user`
//! messages are sent in calls of ten before COMMIT.
//!
//! **A failed send, or any failure of the group** (an error in the set-based part, a
//! failed COMMIT): the group is rolled back and its members run again one transaction
//! each, exactly as behaviour §B38.5 describes, so a member's failure never affects another and every
//! outcome (counts, log lines, effects) is the per-member one. The record never ends as
//! a retryable failure because of a group.
//!
//! A user trigger on `DELETE` of `members` could make one member's deletion change
//! another member of the same group; when one exists the page runs one transaction per
//! member from the start. **The deadline guard** is checked before each item: before
//! each group (its set-based statement is one item bounded by the group size) and
//! before each per-member step inside it; when it fires inside a group, what the group
//! did so far is sent and committed and the continuation resumes at the first member
//! left undone. `updated_rows` counts only rows actually removed: a row kept by the
//! last-owner rule is a skipped row (docs/gitlab-differences.md).

use std::time::Duration;

use chrono::NaiveDate;
use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::{Job, Next, Overlap, Step};
use crate::messages::{Envelope, MemberCursor, RemoveExpiredMembersRun};
use crate::metrics::{self, Metric};
use crate::runtime::{Done, Invocation, Status};

mod group;
mod member;
pub mod sql;

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
/// rest of the cursor's date: a whole page is found there when at least one id in
/// four below the cursor expires on that date (one date shared by most expired rows).
/// Reading 4,000 consecutive ids by the primary key costs about as much as the keyset
/// read of one page, so a run over spread dates pays little for it.
pub const SAME_DATE_WINDOW: usize = 4 * BATCH_SIZE;

const FUNCTION: Function = Function::RemoveExpiredMembers;

/// One page read (behaviour §B38.4): `(expires_at, id)` in page order, and whether more rows follow.
///
/// After a cursor, the page is first looked for within the cursor's date by the primary
/// key ([`sql::PAGE_SAME_DATE`], a window of [`SAME_DATE_WINDOW`] ids below the cursor):
/// when many memberships share one date, a page ends inside that date and the window
/// holds the whole next page, so the date is never read and sorted as a whole (which
/// made a run over one date quadratic). When the window does not hold a whole page (the
/// date ends, or its rows are sparse among the ids), the keyset read on
/// `index_members_on_expires_at` ([`sql::PAGE_AFTER`]) runs as before. Both return the
/// same rows in the same order (`expires_at DESC, id DESC`).
pub async fn read_page<C: GenericClient>(
    c: &C,
    today: NaiveDate,
    cursor: Option<MemberCursor>,
) -> Result<(Vec<(NaiveDate, i64)>, bool)> {
    let limit = (BATCH_SIZE + 1) as i64;
    let rows = match cursor {
        None => c.query(sql::PAGE, &[&today, &limit]).await?,
        Some(cur) => {
            let window = SAME_DATE_WINDOW as i64;
            let same = c
                .query(
                    sql::PAGE_SAME_DATE,
                    &[&cur.expires_at, &cur.id, &window, &limit, &today],
                )
                .await?;
            if same.len() as i64 == limit {
                same
            } else {
                c.query(sql::PAGE_AFTER, &[&today, &cur.expires_at, &cur.id, &limit])
                    .await?
            }
        }
    };
    let mut page: Vec<(NaiveDate, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let has_next = page.len() > BATCH_SIZE;
    page.truncate(BATCH_SIZE);
    Ok((page, has_next))
}

/// The `done` result of one page: `completed`, or `limit_reached` with the cursor
/// the continuation starts after.
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
    /// The longest grouped transaction of this invocation (BEGIN sent → COMMIT
    /// acknowledged), and the most member rows one of them locked: what `hk bench`
    /// reports against behaviour §7.2's bound (not on the `done` line).
    #[serde(skip)]
    pub longest_group: (Duration, u64),
}

impl Done for ExpiredMembersDone {
    fn status(&self) -> Status {
        Status::Completed
    }
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

    /// Count and log one member's outcome (behaviour §B38.5 step E, §B38.8).
    fn record(&mut self, id: i64, outcome: Result<MemberOutcome>) {
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
                    r.record(id, outcome);
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
                        MemberRun::Ended(outcome) => r.record(id, outcome),
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
    }
    Ok(r)
}

/// The `remove-expired-members` job: one run at a time, a page per invocation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RemoveExpiredMembers;

impl Job for RemoveExpiredMembers {
    const FUNCTION: Function = FUNCTION;
    type Payload = RemoveExpiredMembersRun;
    type Outcome = ExpiredMembersDone;

    fn overlap(_: &RemoveExpiredMembersRun) -> Overlap {
        Overlap::Function
    }

    async fn run<C>(
        inv: &Invocation<'_>,
        client: &mut C,
        env: &Envelope,
        payload: RemoveExpiredMembersRun,
    ) -> Result<Step<ExpiredMembersDone, RemoveExpiredMembersRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let page = run_page(inv, env, client, payload.cursor).await?;
        let done = page.done();
        Ok(match page.next {
            None => Step::Done(done),
            Some((cursor, delay_s)) => Step::Continue {
                outcome: done,
                next: Next::Payload(RemoveExpiredMembersRun {
                    cursor: Some(cursor),
                }),
                delay_s,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Report;
    use serde_json::json;

    #[test]
    fn the_done_line_carries_the_counters_and_the_cursor() {
        let done = ExpiredMembersDone {
            updated_rows: 2,
            skipped_rows: 1,
            failed_rows: 0,
            next_cursor: None,
            longest_group: (Duration::ZERO, 0),
        };
        assert_eq!(
            Report::new(done.clone()).to_json(),
            json!({"status": "completed", "updated_rows": 2, "skipped_rows": 1,
                   "failed_rows": 0, "next_cursor": null})
        );
        let cursor = MemberCursor {
            expires_at: NaiveDate::from_ymd_opt(2025, 3, 1).unwrap(),
            id: 9,
        };
        let r = Report::with_status(
            ExpiredMembersDone {
                next_cursor: Some(cursor),
                ..done
            },
            Status::LimitReached,
        );
        assert_eq!(
            r.done_fields("RemoveExpiredMembersWorker")
                ["extra.remove_expired_members_worker.result"]["status"],
            "limit_reached"
        );
        assert_eq!(
            r.to_json()["next_cursor"],
            json!({"expires_at": "2025-03-01", "id": 9})
        );
        assert_eq!(
            crate::metrics::named(&r.metrics()),
            vec![
                ("processed", 2.0),
                ("skipped", 1.0),
                ("failed", 0.0),
                ("items", 3.0),
                ("updated_rows", 2.0),
                ("skipped_rows", 1.0),
                ("failed_rows", 0.0)
            ]
        );
    }
}
