//! B38's grouped transaction (behaviour §7.2): up to [`super::GROUP_SIZE`] consecutive
//! members of a page in one transaction.
//!
//! Owns: the group's statements ([`GroupStatements`], prepared once per page), its locks
//! taken for the group as a whole in the lock order of ARCHITECTURE.md, the set-based
//! deletion of every member no per-member rule concerns, its one `authz` refresh and
//! its side effects (`gitlab::side_effects`),
//! the others' per-member steps in SAVEPOINTs, and how the group ended ([`GroupEnd`]).
//! Also the check for user triggers on `DELETE` of `members` that rules grouping out.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement, Transaction};

use super::member::{process_member, MemberOutcome, Sends};
use super::sql;
use crate::error::{Error, Result};
use crate::gitlab::authz::{Removed, RemovedRefresher};
use crate::gitlab::side_effects::{self, Cause, Left};
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::Intent;
use crate::locks;
use crate::queue::{self, OutMessage};
use crate::retry_transient;
use crate::runtime::Invocation;

/// Whether a user trigger fires on `DELETE` of `members`. Such a trigger could change
/// another member of the same group, which the set-based deletion would not see.
pub(super) async fn members_have_delete_triggers<C: GenericClient>(c: &C) -> Result<bool> {
    let row = c.query_one(sql::MEMBERS_HAVE_DELETE_TRIGGERS, &[]).await?;
    Ok(row.get(0))
}

/// Each member of a group, in page order, with how it ended.
pub(super) type Outcomes = Vec<(i64, Result<MemberOutcome>)>;

/// The statements of a group, prepared once per page.
pub(super) struct GroupStatements {
    lock_and_delete: Statement,
    owner_scopes: Statement,
    lock_bots: Statement,
    xact_locks: Statement,
    refresher: RemovedRefresher,
}

impl GroupStatements {
    /// Prepare them on `c`'s session.
    pub(super) async fn prepare<C: GenericClient>(c: &C) -> Result<GroupStatements> {
        Ok(GroupStatements {
            lock_and_delete: c.prepare(sql::LOCK_AND_DELETE_PLAIN).await?,
            owner_scopes: c.prepare(sql::OWNER_SCOPES).await?,
            lock_bots: c.prepare(sql::LOCK_BOTS).await?,
            xact_locks: c.prepare(locks::sql::XACT_LOCKS).await?,
            refresher: RemovedRefresher::prepare(c).await?,
        })
    }
}

/// A group's work that is done: each member's outcome in page order, the messages to
/// send, and where the deadline guard stopped it.
struct GroupDone {
    outcomes: Outcomes,
    outbox: Vec<OutMessage>,
    /// The page-order index (within the group) of the first member left for the next
    /// invocation, when the guard fired.
    stopped_at: Option<usize>,
    /// Member rows the group locked in step 1.
    rows_locked: usize,
}

/// What steps 1–3 left: the members deleted set-based and what they removed, the
/// members a per-member rule concerns, and the users step 4 locks.
struct Locked {
    rows_locked: usize,
    deleted: HashSet<i64>,
    removed: Vec<Removed>,
    left: Vec<Left>,
    per_member: HashSet<i64>,
    users: Vec<i64>,
}

/// Steps 1–3 of the group's locks (behaviour §7.2 (d), §7.3): member rows (deleting
/// the plain ones), group owners, the bots' `users` rows; the caller takes step 4.
async fn lock_group(
    tx: &Transaction<'_>,
    st: &GroupStatements,
    ids: &[i64],
    today: NaiveDate,
) -> Result<Locked> {
    // A generic plan per page (the shapes do not depend on the values); SET LOCAL is
    // sent with the first statement and ends with the transaction.
    let params: [&(dyn ToSql + Sync); 2] = [&ids, &today];
    let (generic, rows) = futures::join!(
        tx.batch_execute(sql::GENERIC_PLANS),
        tx.query(&st.lock_and_delete, &params)
    );
    generic?;
    let rows = rows?;
    let mut owner_groups: Vec<i64> = Vec::new();
    let mut bots: Vec<i64> = Vec::new();
    let mut users: Vec<i64> = Vec::new();
    let mut deleted = HashSet::new();
    let mut removed = Vec::new();
    let mut left = Vec::new();
    let mut per_member = HashSet::new();
    for r in &rows {
        let in_group: bool = r.get(2);
        if !in_group {
            continue;
        }
        let id: i64 = r.get(0);
        let user: Option<i64> = r.get(1);
        let bot: bool = r.get(3);
        let owner_candidate: bool = r.get(4);
        if r.get::<_, bool>(6) {
            deleted.insert(id);
            if let Some(user_id) = user {
                removed.push(Removed {
                    user_id,
                    source_type: r.get(7),
                    source_id: r.get(5),
                });
                left.push(Left {
                    member_id: id,
                    user_id,
                    source_type: r.get(7),
                    source_id: r.get(5),
                    access_level: r.get(8),
                    expires_at: r.get(9),
                    requested: r.get(10),
                });
            }
        } else {
            per_member.insert(id);
        }
        match (user, bot) {
            (Some(u), true) => bots.push(u),
            (Some(u), false) => users.push(u),
            (None, _) => {}
        }
        if owner_candidate {
            owner_groups.push(r.get(5));
        }
    }
    for v in [&mut owner_groups, &mut bots, &mut users] {
        v.sort_unstable();
        v.dedup();
    }
    if !owner_groups.is_empty() || !bots.is_empty() {
        let scopes: Vec<i64> = tx
            .query(&st.owner_scopes, &[&owner_groups, &bots])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let keys: Vec<i64> = scopes
            .iter()
            .map(|g| locks::lock_key(&format!("group-owners:{g}")))
            .collect();
        tx.execute(&st.xact_locks, &[&keys]).await?;
    }
    if !bots.is_empty() {
        tx.query(&st.lock_bots, &[&bots]).await?;
    }
    Ok(Locked {
        rows_locked: rows.len(),
        deleted,
        removed,
        left,
        per_member,
        users,
    })
}

/// The work of one group inside its transaction; the caller sends and commits.
async fn group_body(
    inv: &Invocation<'_>,
    run_id: &str,
    tx: &mut Transaction<'_>,
    st: &GroupStatements,
    ids: &[i64],
    page_index: usize,
) -> Result<GroupDone> {
    let today = inv.today();
    // System hooks: bodies read before the set-based deletion, kept for what it deleted.
    let mut hooks = system_hooks::prepare(&*tx, inv, Subject::Members(ids)).await?;
    let Locked {
        rows_locked,
        deleted,
        removed,
        left,
        per_member,
        users,
    } = lock_group(tx, st, ids, today).await?;
    hooks.retain(|id| deleted.contains(&id));
    // The users rows the side effects' 2FA recompute may write, before any
    // authorization lock (lock order).
    side_effects::lock_users(&*tx, &left).await?;
    // Step 4: the authorization locks, then the refresh for every member deleted
    // set-based, after all of the group's set-based deletions.
    st.refresher.lock_and_run(&*tx, &users, &removed).await?;
    // What GitLab writes beside each removal, for the set-based deletions at once.
    side_effects::after_removal(&*tx, inv, Cause::Expired, &left).await?;
    let mut outbox: Vec<OutMessage> = Intent::messages(hooks.claim(inv), run_id, inv.now).collect();
    let mut outcomes = Vec::with_capacity(ids.len());
    let mut stopped_at = None;
    for (k, &id) in ids.iter().enumerate() {
        let outcome = if deleted.contains(&id) {
            Ok(MemberOutcome::Deleted)
        } else if !per_member.contains(&id) {
            Ok(MemberOutcome::NoLongerExpired)
        } else if stopped_at.is_some() {
            continue;
        } else if page_index + k > 0 && inv.deadline.reached() {
            // The deadline guard before each item (behaviour §7.2 (c)), never before
            // the page's first member; a stop resumes at this member.
            stopped_at = Some(k);
            continue;
        } else {
            match retry_transient!(
                process_member(inv, run_id, tx, id, Sends::Collect(&mut outbox)).await
            ) {
                Err(e) if e.is_connection_lost() => return Err(e),
                r => r,
            }
        };
        outcomes.push((id, outcome));
    }
    Ok(GroupDone {
        outcomes,
        outbox,
        stopped_at,
        rows_locked,
    })
}

/// How [`run_group`] ended.
pub(super) enum GroupEnd {
    /// Committed, with each member's outcome in page order and where the guard
    /// stopped.
    Committed {
        outcomes: Outcomes,
        stopped_at: Option<usize>,
        /// BEGIN sent → COMMIT acknowledged.
        took: Duration,
        /// The member rows the group locked.
        rows_locked: usize,
    },
    /// Rolled back (a failed statement, send or COMMIT): nothing of the group is kept,
    /// and the caller runs its members one by one.
    RolledBack,
    /// The connection is lost: the record fails with this error.
    Lost(Error),
}

/// One group in one transaction (behaviour §7.2).
pub(super) async fn run_group<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    st: &GroupStatements,
    ids: &[i64],
    page_index: usize,
) -> GroupEnd
where
    C: GenericClient + Send + Sync,
{
    let began = Instant::now();
    let mut tx = match client.transaction().await {
        Ok(tx) => tx,
        Err(e) => return GroupEnd::Lost(e.into()),
    };
    let failure = match group_body(inv, run_id, &mut tx, st, ids, page_index).await {
        Ok(GroupDone {
            outcomes,
            outbox,
            stopped_at,
            rows_locked,
        }) => match queue::send_outbox(inv.queue, &outbox).await {
            Ok(()) => match tx.commit().await {
                Ok(()) => {
                    return GroupEnd::Committed {
                        outcomes,
                        stopped_at,
                        took: began.elapsed(),
                        rows_locked,
                    };
                }
                Err(e) => {
                    let e = Error::from(e);
                    if e.is_connection_lost() {
                        return GroupEnd::Lost(e);
                    }
                    // COMMIT failed: nothing of the group is kept.
                    tracing::warn!(members = ids.len(), error = %e, error_class = e.class(), "member group not committed; its members run one by one");
                    return GroupEnd::RolledBack;
                }
            },
            Err(e) => Error::from(e),
        },
        Err(e) if e.is_connection_lost() => return GroupEnd::Lost(e),
        Err(e) => e,
    };
    if let Err(e) = tx.rollback().await {
        return GroupEnd::Lost(e.into());
    }
    tracing::warn!(
        members = ids.len(),
        error = %failure,
        error_class = failure.class(),
        "member group rolled back; its members run one by one"
    );
    GroupEnd::RolledBack
}
