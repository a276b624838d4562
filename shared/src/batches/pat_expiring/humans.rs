//! B28's human tokens (behaviour §B28.5).
//!
//! Owns: one page of users, grouped as behaviour §7.2 allows: one transaction; the
//! page's users claimed set-based in one statement (or, when that fails or the deadline
//! guard is near, one savepoint per user, so one user's failure never touches
//! another); the page's emails sent in calls of ten before COMMIT. When a send fails,
//! the page's transaction rolls back and its users run again one transaction each
//! (the outcome of behaviour §B28.5 without grouping: only the user whose email cannot be sent
//! fails). Also the human email (at most [`MAX_TOKENS`] names, by expiry then id), its
//! suppression for users who cannot receive notifications, and their log lines and
//! counters. The keyset page loop is [`super::keyset_pages`].

use std::collections::HashMap;

use chrono::NaiveDate;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::interval::Interval;
use super::{in_savepoint, send_then_commit, sql, Flow, GroupEnd, Run, Sent, MAX_TOKENS};
use crate::error::{Error, Result};
use crate::messages::{user_email_key, EmailNotification};
use crate::queue::OutMessage;
use crate::retry_transient;

/// A human's claimed tokens: how many, and the email when the user can receive one.
pub(super) struct UserClaim {
    user_id: i64,
    marked: u64,
    email: Option<OutMessage>,
}

impl UserClaim {
    /// Log the claim's line (behaviour §B28.9): the email, or its suppression.
    fn log(&self, iv: Interval) {
        if self.email.is_some() {
            tracing::info!(
                user_id = self.user_id,
                interval = iv.name(),
                token_count = self.marked,
                "Notifying User about expiring tokens"
            );
        } else {
            tracing::info!(
                user_id = self.user_id,
                interval = iv.name(),
                "Expiring token notification suppressed: user cannot receive notifications"
            );
        }
    }

    fn count(&self, run: &mut Run<'_, '_>) {
        run.progress = true;
        run.totals.user_tokens_marked += self.marked;
        if self.email.is_some() {
            run.totals.user_emails_enqueued += 1;
        } else {
            run.totals.user_emails_suppressed += 1;
        }
    }
}

/// How one user's claim ended.
enum UserOutcome {
    /// Another session claimed the tokens (or none is left in scope).
    NothingClaimed,
    /// Tokens claimed.
    Claimed(UserClaim),
}

/// The human email of `user_id` for its claimed `(expires_at, id, name)` rows, or
/// `None` when the user cannot receive notifications.
fn user_email(
    run: &Run<'_, '_>,
    iv: Interval,
    user_id: i64,
    mut claimed: Vec<(NaiveDate, i64, String)>,
    can_receive: bool,
) -> UserClaim {
    claimed.sort();
    let marked = claimed.len() as u64;
    let email = can_receive.then(|| {
        let n = EmailNotification::AccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            token_names: claimed
                .into_iter()
                .take(MAX_TOKENS)
                .map(|(_, _, name)| name)
                .collect(),
        };
        run.email(user_email_key(iv.name(), user_id, run.inv.today()), &n)
    });
    UserClaim {
        user_id,
        marked,
        email,
    }
}

/// behaviour §B28.5 step 2's claim of one user and the read of its user row (`FOR SHARE`), inside
/// the caller's transaction or savepoint.
async fn claim_user_rows<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    user_id: i64,
) -> Result<UserOutcome> {
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query(
            iv.statements().claim_user,
            &[&min, &last, &run.inv.now, &user_id],
        )
        .await?;
    if rows.is_empty() {
        return Ok(UserOutcome::NothingClaimed);
    }
    let claimed: Vec<(NaiveDate, i64, String)> = rows
        .iter()
        .map(|r| (r.get(2), r.get(0), r.get(1)))
        .collect();
    let can_receive: bool = c
        .query_opt(sql::USER_CAN_RECEIVE, &[&user_id])
        .await?
        .map(|r| r.get(0))
        .unwrap_or(false);
    Ok(UserOutcome::Claimed(user_email(
        run,
        iv,
        user_id,
        claimed,
        can_receive,
    )))
}

/// behaviour §B28.5 step 2 for a whole page at once, set-based: one claim of every matching token
/// of `users`, then their user rows `FOR SHARE` (by id). The claims in the order of
/// `users`; users whose tokens were claimed elsewhere are absent.
async fn claim_users_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
) -> Result<Vec<UserClaim>> {
    let (_, last) = iv.bounds(run.inv.today());
    // One statement: the claim, then the claimed users' rows `FOR SHARE` (by id).
    let rows = c
        .query_typed(
            iv.statements().claim_users,
            &[
                (&min, Type::DATE),
                (&last, Type::DATE),
                (&run.inv.now, Type::TIMESTAMPTZ),
                (&users, Type::INT8_ARRAY),
            ],
        )
        .await?;
    // user → (can receive, claimed `(expires_at, id, name)`)
    type Claims = HashMap<i64, (bool, Vec<(NaiveDate, i64, String)>)>;
    let mut by_user = Claims::new();
    for r in &rows {
        by_user
            .entry(r.get(0))
            .or_insert_with(|| (r.get(4), Vec::new()))
            .1
            .push((r.get(3), r.get(1), r.get(2)));
    }
    Ok(users
        .iter()
        .filter_map(|u| {
            by_user
                .remove(u)
                .map(|(can, claimed)| user_email(run, iv, *u, claimed, can))
        })
        .collect())
}

/// behaviour §B28.5 step 2 for one user in its own transaction: claim, then enqueue, then COMMIT
/// (the fall-back when a page's group could not be sent).
async fn claim_user<C>(
    run: &Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    user_id: i64,
) -> Result<UserOutcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let outcome = claim_user_rows(run, &tx, iv, min, user_id).await?;
    if let UserOutcome::Claimed(c) = &outcome {
        c.log(iv);
        if let Some(msg) = &c.email {
            run.inv.queue.send(std::slice::from_ref(msg)).await?;
        }
    }
    tx.commit().await?;
    Ok(outcome)
}

fn user_failed(
    run: &mut Run<'_, '_>,
    failed_users: &mut Vec<i64>,
    iv: Interval,
    user_id: i64,
    e: &Error,
) {
    failed_users.push(user_id);
    run.totals.user_failures += 1;
    tracing::error!(
        user_id,
        interval = iv.name(),
        error = %e,
        error_class = e.class(),
        "Failed to send notification about expiring personal access tokens"
    );
}

/// One page of humans (see the module header); `failed_users` collects the users
/// that failed, which the following pages exclude.
pub(super) async fn page<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
    failed_users: &mut Vec<i64>,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    if run.deadline_stop() {
        return Ok(Flow::Stop);
    }
    let attempted = match group(run, client, iv, min, users, failed_users).await? {
        GroupEnd::Committed(flow) => return Ok(flow),
        // The page ends `Done` after its fall-back, even if the guard stopped the group.
        GroupEnd::Unsent { attempted, .. } => attempted,
    };
    tracing::warn!(
        interval = iv.name(),
        users = attempted.len(),
        "user group could not be sent; its users run one by one"
    );
    for user_id in attempted {
        if run.deadline_stop() {
            return Ok(Flow::Stop);
        }
        match retry_transient!(claim_user(run, client, iv, min, user_id).await) {
            Ok(UserOutcome::NothingClaimed) => {}
            Ok(UserOutcome::Claimed(c)) => c.count(run),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(e) => user_failed(run, failed_users, iv, user_id, &e),
        }
    }
    Ok(Flow::Done)
}

/// The grouped transaction of [`page`].
async fn group<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
    failed_users: &mut Vec<i64>,
) -> Result<GroupEnd>
where
    C: GenericClient + Send + Sync,
{
    let mut flow = Flow::Done;
    let mut claims: Vec<UserClaim> = Vec::new();
    // Users attempted in the group (claimed, or claimed elsewhere), for the fall-back.
    let mut attempted: Vec<i64> = Vec::new();
    let mut tx = client.transaction().await?;
    let mut set = None;
    // Near the deadline, user by user, so the guard can stop after the first unit.
    if !run.inv.deadline.reached() {
        match claim_users_set(run, &tx, iv, min, users).await {
            Ok(c) => set = Some(c),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(_) => {
                // The claim was the transaction's only statement.
                tx.rollback().await?;
                tx = client.transaction().await?;
            }
        }
    }
    match set {
        Some(c) => {
            attempted.extend_from_slice(users);
            run.progress |= !c.is_empty();
            claims = c;
        }
        None => {
            let mut progress = run.progress;
            for &user_id in users {
                if progress && run.inv.deadline.reached() {
                    flow = Flow::Stop;
                    break;
                }
                match retry_transient!(in_savepoint(&mut tx, async |sp| claim_user_rows(
                    run, sp, iv, min, user_id
                )
                .await)
                .await?
                .into_result())
                {
                    Ok(UserOutcome::NothingClaimed) => attempted.push(user_id),
                    Ok(UserOutcome::Claimed(c)) => {
                        attempted.push(user_id);
                        progress = true;
                        claims.push(c);
                    }
                    Err(e) if e.is_connection_lost() => return Err(e),
                    Err(e) => user_failed(run, failed_users, iv, user_id, &e),
                }
            }
        }
    }
    // Send-then-commit, in calls of ten (behaviour §7.2 (b)).
    let out: Vec<OutMessage> = claims.iter().filter_map(|c| c.email.clone()).collect();
    match send_then_commit(run, tx, &out).await? {
        Sent::RolledBack => Ok(GroupEnd::Unsent { attempted, flow }),
        Sent::Committed => {
            for c in &claims {
                c.log(iv);
                c.count(run);
            }
            Ok(GroupEnd::Committed(flow))
        }
    }
}
