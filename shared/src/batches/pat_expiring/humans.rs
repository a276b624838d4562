//! B28's human tokens (behaviour §B28.5).
//!
//! Owns: [`Humans`], the human side of a page's claim ([`super::claims`]), set-based or
//! one user at a time; the human email (at most [`MAX_TOKENS`] names, by expiry then
//! id), its suppression for users who cannot receive notifications, and their log
//! lines and counters.

use std::collections::HashMap;

use chrono::NaiveDate;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::claims::{Claim, Claims, Outcome};
use super::interval::Interval;
use super::{sql, Run, MAX_TOKENS, TOKENS};
use crate::error::Result;
use crate::messages::user_email_key;
use crate::queue::OutMessage;
use crate::workers::deliver_notification::payload::EmailNotification;

/// A human's claimed tokens: how many, and the email when the user can receive one.
pub(super) struct UserClaim {
    user_id: i64,
    marked: u64,
    email: Option<OutMessage>,
    /// The claimed tokens and their interval (the plan's decisions).
    tokens: (Interval, Vec<i64>),
}

impl Claim for UserClaim {
    fn messages(&self) -> &[OutMessage] {
        self.email.as_slice()
    }

    /// The claim's line (behaviour §B28.9): the email, or its suppression.
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
        let decision = match self.email {
            Some(_) => "notified",
            None => "suppressed",
        };
        let (iv, tokens) = &self.tokens;
        for &id in tokens {
            run.inv.decide(TOKENS, id, decision, iv.name());
        }
        if self.email.is_some() {
            run.totals.user_emails_enqueued += 1;
        } else {
            run.totals.user_emails_suppressed += 1;
        }
    }
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
    let tokens = (iv, claimed.iter().map(|c| c.1).collect());
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
        tokens,
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
) -> Result<Outcome<UserClaim>> {
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query(
            iv.statements().claim_user,
            &[&min, &last, &run.inv.now, &user_id],
        )
        .await?;
    if rows.is_empty() {
        return Ok(Outcome::NothingClaimed);
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
    Ok(Outcome::Claimed(user_email(
        run,
        iv,
        user_id,
        claimed,
        can_receive,
    )))
}

/// behaviour §B28.5 step 2 for a whole page in one statement; the claims in the order
/// of `users`.
async fn claim_users_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    users: &[i64],
) -> Result<Vec<(i64, Outcome<UserClaim>)>> {
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
        .map(|&u| match by_user.remove(&u) {
            Some((can, claimed)) => (u, Outcome::Claimed(user_email(run, iv, u, claimed, can))),
            None => (u, Outcome::NothingClaimed),
        })
        .collect())
}

/// The human side of a page's claim.
pub(super) struct Humans;

impl Claims for Humans {
    type Claim = UserClaim;
    const SET_CLAIM_IS_PROGRESS: bool = true;
    const DONE_AFTER_FALL_BACK: bool = true;

    async fn claim_set<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        users: &[i64],
    ) -> Result<Vec<(i64, Outcome<UserClaim>)>> {
        claim_users_set(run, c, iv, min, users).await
    }

    async fn claim_rows<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        user_id: i64,
    ) -> Result<Outcome<UserClaim>> {
        claim_user_rows(run, c, iv, min, user_id).await
    }

    fn ended(
        run: &mut Run<'_, '_>,
        failed_users: &mut Vec<i64>,
        iv: Interval,
        user_id: i64,
        outcome: &Result<Outcome<UserClaim>>,
    ) {
        if let Err(e) = outcome {
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
    }

    fn unsent(iv: Interval, users: usize) {
        tracing::warn!(
            interval = iv.name(),
            users,
            "user group could not be sent; its users run one by one"
        );
    }
}
