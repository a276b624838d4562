//! B38 `remove-expired-members` (b38-remove-expired-members.md).
//!
//! Owns: the keyset page of expired memberships (`expires_at DESC, id DESC`, one page
//! of 1000 per invocation, read in one statement without locks), the per-member
//! transaction (re-check under `FOR UPDATE` ⚑ D5, last-owner rule, removal, phase 1
//! for project bots), and the continuation with the cursor of the last row read.
//!
//! Members are grouped as common.md §7.2 allows: up to [`GROUP_SIZE`] consecutive
//! members of a page share one transaction. The group first takes every lock its
//! members need in the lock order of ARCHITECTURE.md (rows, group owners, `users`
//! rows, authorizations; each step ascending, for the group as a whole): the rows of its
//! still-expired members and every membership of a project bot among them; the
//! group-owner locks of each owner candidate's `owner_scope` and of the groups a bot
//! owns; the bots' `users` rows; the authorization locks of the other users. No member
//! then takes a lock of an earlier step after one of a later step, so a group cannot
//! deadlock against `prune-deletions`, `delete-user` or a phase 1 (only a bot's own
//! authorization lock is left to its nested phase 1). Then one statement deletes every
//! member that is still expired and needs no per-member rule (no project bot, no owner
//! candidate of §2.5 — an active owner row of a non-bot user in any state: a blocked or
//! deactivated sole owner is protected too) together with its notification setting, and
//! one set-based refresh follows (`authz::refresh_removed`); the members it left (owner
//! candidates, bots, or rows no longer expired) then run the per-member steps in page
//! order, each in its own SAVEPOINT, and the group's `delete-user` messages are sent in
//! calls of ten before COMMIT.
//!
//! **A failed send, or any failure of the group** (an error in the set-based part, a
//! failed COMMIT): the group is rolled back and its members run again one transaction
//! each, exactly as §5 describes, so a member's failure never affects another and every
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

use std::collections::HashSet;

use chrono::NaiveDate;
use serde_json::json;
use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement, Transaction};

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::authz::{self, Removed, RemovedRefresher};
use crate::gitlab::membership::{self, Member, Refresh, MEMBER_COLUMNS};
use crate::gitlab::permissions;
use crate::gitlab::user_removal::{self, PhaseOne, RemovalRequest};
use crate::locks;
use crate::messages::{Envelope, MemberCursor, RemoveExpiredMembersRun};
use crate::queue::{OutMessage, SQS_BATCH};
use crate::retry_transient;
use crate::runtime::{Invocation, Report};

/// Members per page.
pub const BATCH_SIZE: usize = 1000;
/// Delay of the continuation after a full page.
pub const BATCH_DELAY_S: u32 = 10;
/// Reason passed to phase 1 for bots.
pub const REMOVAL_REASON: &str = "Membership expired";
/// Members per grouped transaction (common.md §7.2 allows up to 100).
pub const GROUP_SIZE: usize = 100;

const FUNCTION: Function = Function::RemoveExpiredMembers;

/// How one member ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemberOutcome {
    Deleted,
    NoLongerExpired,
    LastOwner { group_id: i64, user_id: i64 },
}

/// The first page (§4): `$1` today, `$2` the limit.
pub const PAGE_SQL: &str = "SELECT expires_at, id::bigint FROM members
     WHERE expires_at IS NOT NULL AND expires_at <= $1::date
     ORDER BY expires_at DESC, id DESC LIMIT $2";

/// A page after a cursor (§4): `$1` today, `$2`/`$3` the cursor, `$4` the limit.
pub const PAGE_AFTER_SQL: &str = "SELECT expires_at, id::bigint FROM members
     WHERE expires_at IS NOT NULL AND expires_at <= $1::date
       AND (expires_at, id) < ($2::date, $3::bigint)
     ORDER BY expires_at DESC, id DESC LIMIT $4";

/// One page read (§4): `(expires_at, id)` in page order, and whether more rows follow.
pub async fn read_page<C: GenericClient>(
    c: &C,
    today: NaiveDate,
    cursor: Option<MemberCursor>,
) -> Result<(Vec<(NaiveDate, i64)>, bool)> {
    let limit = (BATCH_SIZE + 1) as i64;
    let rows = match cursor {
        None => c.query(PAGE_SQL, &[&today, &limit]).await?,
        Some(cur) => {
            c.query(PAGE_AFTER_SQL, &[&today, &cur.expires_at, &cur.id, &limit])
                .await?
        }
    };
    let mut page: Vec<(NaiveDate, i64)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let has_next = page.len() > BATCH_SIZE;
    page.truncate(BATCH_SIZE);
    Ok((page, has_next))
}

/// Where a member's `delete-user` message goes.
enum Sends<'o> {
    /// Sent before the member's own COMMIT (one transaction per member).
    Now,
    /// Added to the group's outbox once the member's SAVEPOINT is released.
    Collect(&'o mut Vec<OutMessage>),
}

/// Steps 2–6 of §5 for one member, in its own transaction (or, inside a group, its own
/// SAVEPOINT: `client.transaction()` on a transaction opens one).
async fn process_member<C>(
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

/// Whether a user trigger fires on `DELETE` of `members`. Such a trigger could change
/// another member of the same group, which the set-based deletion would not see.
async fn members_have_delete_triggers<C: GenericClient>(c: &C) -> Result<bool> {
    let row = c
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_trigger
                            WHERE tgrelid = 'members'::regclass AND NOT tgisinternal
                              AND (tgtype & 8) <> 0)",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

/// Steps 2 and 4 for every member of `ids` that is still expired and needs no
/// per-member rule: not a project bot's (phase 1, step 5) and not an owner candidate
/// (step 3): an active owner membership of a group whose user is not a project bot,
/// whatever the user's state, since a blocked or deactivated sole owner is protected. The rows are locked and re-checked by the
/// DELETE itself (ascending ids); each user's notification setting for the source
/// goes in the same statement.
const DELETE_PLAIN: &str = "
    WITH del AS (
      DELETE FROM members m
      WHERE m.id = ANY($1::bigint[]) AND m.expires_at IS NOT NULL AND m.expires_at <= $2::date
        AND NOT EXISTS (
          SELECT 1 FROM users u
          WHERE u.id = m.user_id
            AND (u.user_type = 6
                 OR (m.type = 'GroupMember' AND m.source_type = 'Namespace'
                     AND m.access_level = 50 AND m.state = 0 AND m.requested_at IS NULL)))
      RETURNING m.id::bigint AS id, m.user_id::bigint AS user_id, m.source_type,
                m.source_id::bigint AS source_id
    ),
    ns AS (
      DELETE FROM notification_settings n USING del
      WHERE n.user_id = del.user_id AND n.source_type = del.source_type
        AND n.source_id = del.source_id
    )
    SELECT id, user_id, source_type, source_id FROM del";

/// Step 1 of a group's lock order (common.md §7.2 (d), §7.3): the row locks of every
/// member of `$1::bigint[]` still expired on `$2::date`, and of every membership of a
/// project bot among them (phase 1 deletes those too), in ascending id order. Each row
/// says whether it is one of the group's expired members, whether its user is a project
/// bot, and whether it is an owner candidate of §2.5 (an active owner membership of a
/// group whose user exists and is not a bot, in any state).
const LOCK_ROWS: &str = "
    SELECT m.id::bigint, m.user_id::bigint,
           (m.id = ANY($1::bigint[]) AND m.expires_at IS NOT NULL AND m.expires_at <= $2::date),
           COALESCE(u.user_type = 6, false),
           (m.type = 'GroupMember' AND m.source_type = 'Namespace' AND m.access_level = 50
            AND m.state = 0 AND m.requested_at IS NULL AND u.id IS NOT NULL AND u.user_type <> 6),
           m.source_id::bigint
    FROM members m LEFT JOIN users u ON u.id = m.user_id
    WHERE (m.id = ANY($1::bigint[]) AND m.expires_at IS NOT NULL AND m.expires_at <= $2::date)
       OR m.user_id = ANY(ARRAY(
            SELECT x.user_id FROM members x JOIN users b ON b.id = x.user_id
            WHERE x.id = ANY($1::bigint[]) AND x.expires_at IS NOT NULL
              AND x.expires_at <= $2::date AND b.user_type = 6))
    ORDER BY m.id
    FOR UPDATE OF m";

/// Step 2: the ids whose group-owner locks the group needs: `owner_scope(g)` of every
/// owner candidate's group `$1::bigint[]`, and of every group where a bot of
/// `$2::bigint[]` has a direct owner membership (phase 1's round, taken up front).
const OWNER_SCOPES: &str = "
    SELECT DISTINCT s.id::bigint
    FROM (SELECT unnest($1::bigint[]) AS gid
          UNION
          SELECT m.source_id::bigint FROM members m
          WHERE m.user_id = ANY($2::bigint[]) AND m.source_type = 'Namespace'
            AND m.access_level = 50) o
      LEFT JOIN namespaces g ON g.id = o.gid
      CROSS JOIN LATERAL unnest(
        CASE WHEN g.id IS NULL OR g.parent_id IS NULL OR cardinality(g.traversal_ids) = 0
             THEN ARRAY[o.gid] ELSE g.traversal_ids::bigint[] END) AS s(id)
    ORDER BY 1";

/// Step 3: the `users` rows of the group's bots (phase 1 locks them), ascending.
const LOCK_BOTS: &str = "SELECT id FROM users WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE";

/// The rows of `$1::bigint[]` still expired on `$2::date`.
const STILL_EXPIRED: &str = "SELECT id::bigint FROM members
     WHERE id = ANY($1::bigint[]) AND expires_at IS NOT NULL AND expires_at <= $2::date";

/// Each member of a group, in page order, with how it ended.
type Outcomes = Vec<(i64, Result<MemberOutcome>)>;

/// The statements of a group, prepared once per page.
struct GroupStatements {
    lock_rows: Statement,
    owner_scopes: Statement,
    lock_bots: Statement,
    xact_locks: Statement,
    delete_plain: Statement,
    still_expired: Statement,
    refresher: RemovedRefresher,
}

impl GroupStatements {
    async fn prepare<C: GenericClient>(c: &C) -> Result<GroupStatements> {
        Ok(GroupStatements {
            lock_rows: c.prepare(LOCK_ROWS).await?,
            owner_scopes: c.prepare(OWNER_SCOPES).await?,
            lock_bots: c.prepare(LOCK_BOTS).await?,
            xact_locks: c.prepare(locks::XACT_LOCKS_SQL).await?,
            delete_plain: c.prepare(DELETE_PLAIN).await?,
            still_expired: c.prepare(STILL_EXPIRED).await?,
            refresher: RemovedRefresher::prepare(c).await?,
        })
    }
}

/// A group's work that is done: each member's outcome in page order, the messages to
/// send, and whether the deadline guard stopped it before a per-member item (then the
/// outcomes end just before that member; later members deleted by the set-based
/// statement, or found no longer expired, are included after it).
struct GroupDone {
    outcomes: Outcomes,
    outbox: Vec<OutMessage>,
    /// The page-order index (within the group) of the first member left for the next
    /// invocation, when the guard fired.
    stopped_at: Option<usize>,
}

/// Steps 1–4 of the group's lock order (common.md §7.2 (d), §7.3), before any member is
/// changed: member rows, then group-owner locks, then the bots' `users` rows, then the
/// authorization locks of every other user whose membership the group may remove. The
/// per-member steps that follow (`owner_protected`, `remove_membership`, phase 1) find
/// these locks held and do not wait for them; only a phase 1 nested for a bot takes its
/// bot's authorization lock itself (common.md §7.3: never before phase 1).
async fn lock_group(
    tx: &Transaction<'_>,
    st: &GroupStatements,
    ids: &[i64],
    today: NaiveDate,
) -> Result<()> {
    let rows = tx.query(&st.lock_rows, &[&ids, &today]).await?;
    let mut owner_groups: Vec<i64> = Vec::new();
    let mut bots: Vec<i64> = Vec::new();
    let mut users: Vec<i64> = Vec::new();
    for r in &rows {
        let in_group: bool = r.get(2);
        if !in_group {
            continue;
        }
        let user: Option<i64> = r.get(1);
        let bot: bool = r.get(3);
        let owner_candidate: bool = r.get(4);
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
    if !users.is_empty() {
        let keys: Vec<i64> = users
            .iter()
            .map(|u| locks::lock_key(&format!("project-authorizations:{u}")))
            .collect();
        tx.execute(&st.xact_locks, &[&keys]).await?;
    }
    Ok(())
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
    // The group's statements are prepared once per page and planned once per session:
    // a generic plan (their shape does not depend on the values) instead of planning
    // every statement again for every group. SET LOCAL ends with the transaction.
    tx.batch_execute("SET LOCAL plan_cache_mode = force_generic_plan")
        .await?;
    lock_group(tx, st, ids, today).await?;
    // The set-based item: every member that needs no per-member rule.
    let params: [&(dyn ToSql + Sync); 2] = [&ids, &today];
    let rows = tx.query(&st.delete_plain, &params).await?;
    let deleted: HashSet<i64> = rows.iter().map(|r| r.get::<_, i64>(0)).collect();
    let removed: Vec<Removed> = rows
        .iter()
        .filter_map(|r| {
            r.get::<_, Option<i64>>(1).map(|user_id| Removed {
                user_id,
                source_type: r.get(2),
                source_id: r.get(3),
            })
        })
        .collect();
    // The rows left behind: still expired means a per-member rule applies; the others
    // are stale (step 2).
    let left: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !deleted.contains(id))
        .collect();
    let per_member: HashSet<i64> = if left.is_empty() {
        HashSet::new()
    } else {
        tx.query(&st.still_expired, &[&left, &today])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    // Step 4's refresh for every deleted member, after all of the group's deletions.
    st.refresher.run(&*tx, &removed).await?;
    let mut outbox = Vec::new();
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
            // The deadline guard before each item (common.md §7.2 (c)), never before
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
    })
}

/// One group in one transaction (common.md §7.2). `Ok(Some(_))`: committed, with each
/// member's outcome (the guard may have stopped it early). `Ok(None)`: rolled back; the
/// caller runs the members one by one. `Err(_)`: the connection is lost.
async fn run_group<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    st: &GroupStatements,
    ids: &[i64],
    page_index: usize,
) -> Result<Option<(Outcomes, Option<usize>)>>
where
    C: GenericClient + Send + Sync,
{
    let mut tx = client.transaction().await?;
    let failure = match group_body(inv, run_id, &mut tx, st, ids, page_index).await {
        Ok(GroupDone {
            outcomes,
            outbox,
            stopped_at,
        }) => {
            let mut sent = Ok(());
            for part in outbox.chunks(SQS_BATCH) {
                sent = inv.queue.send(part).await.map_err(crate::Error::from);
                if sent.is_err() {
                    break;
                }
            }
            match sent {
                Ok(()) => match tx.commit().await {
                    Ok(()) => return Ok(Some((outcomes, stopped_at))),
                    Err(e) => {
                        let e = crate::Error::from(e);
                        if e.is_connection_lost() {
                            return Err(e);
                        }
                        // COMMIT failed: nothing of the group is kept.
                        tracing::warn!(members = ids.len(), error = %e, error_class = e.class(), "member group not committed; its members run one by one");
                        return Ok(None);
                    }
                },
                Err(e) => e,
            }
        }
        Err(e) if e.is_connection_lost() => return Err(e),
        Err(e) => e,
    };
    tx.rollback().await?;
    tracing::warn!(
        members = ids.len(),
        error = %failure,
        error_class = failure.class(),
        "member group rolled back; its members run one by one"
    );
    Ok(None)
}

struct PageResult {
    updated: u64,
    skipped: u64,
    failed: u64,
    next: Option<(MemberCursor, u32)>,
}

impl PageResult {
    /// Count and log one member's outcome (§5 step E, §8).
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

/// One member in its own transaction, with the retries of §7.4.
async fn one_member<C>(
    inv: &Invocation<'_>,
    run_id: &str,
    client: &mut C,
    id: i64,
) -> Result<Result<MemberOutcome>>
where
    C: GenericClient + Send + Sync,
{
    match retry_transient!(process_member(inv, run_id, client, id, Sends::Now).await) {
        Err(e) if e.is_connection_lost() => Err(e),
        r => Ok(r),
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
            (i + GROUP_SIZE).min(page.len())
        };
        let ids: Vec<i64> = page[i..end].iter().map(|(_, id)| *id).collect();
        let outcomes = match &statements {
            Some(st) if ids.len() > 1 => run_group(inv, &env.run_id, client, st, &ids, i).await?,
            _ => None,
        };
        match outcomes {
            Some((outcomes, stopped_at)) => {
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
            None => {
                for (k, &(expires_at, id)) in page[i..end].iter().enumerate() {
                    if i + k > 0 && inv.deadline.reached() {
                        r.next = last.map(|c| (c, 0));
                        return Ok(r);
                    }
                    let outcome = one_member(inv, &env.run_id, client, id).await?;
                    r.record(id, outcome);
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
    Ok(Report::untyped(
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
