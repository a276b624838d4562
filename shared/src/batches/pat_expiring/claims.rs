//! B28's grouped claim of one page, the same for humans and bots (behaviour §B28.4,
//! §7.2).
//!
//! Owns: [`Claims`] (what a subject kind claims, set-based and one by one), [`page`]
//! and the savepoint and send-then-commit steps. Key rule, **claim-then-enqueue**:
//! `UPDATE … RETURNING` claims the tokens, the messages are sent, then COMMIT, so a
//! crash never loses a notice and no token is claimed twice. When the set-based claim
//! fails or the deadline is near, each subject runs in a SAVEPOINT of its own; when a
//! send fails, the page's subjects run again one transaction each. Either way only the
//! failing subject fails, never the record (docs/gitlab-differences.md).

use std::future::Future;

use chrono::NaiveDate;
use tokio_postgres::{GenericClient, Transaction};

use super::interval::Interval;
use super::{Flow, Run};
use crate::error::{Error, Result};
use crate::queue::{self, OutMessage};
use crate::retry_transient;

/// How one subject's claim ended.
pub(super) enum Outcome<T> {
    /// The bot has no resource: its tokens stay unmarked.
    NoResource,
    /// Another session claimed the tokens (or none is left in scope).
    NothingClaimed,
    /// Tokens claimed.
    Claimed(T),
}

/// One subject's claim: its messages, log lines and counters.
pub(super) trait Claim: Send + Sync {
    /// The messages to send before COMMIT.
    fn messages(&self) -> &[OutMessage];
    /// Its log lines, once sent.
    fn log(&self, iv: Interval);
    /// Its counters, once committed.
    fn count(&self, run: &mut Run<'_, '_>);
}

/// A kind of subject (humans, bots): how its claims are made and how one ends.
pub(super) trait Claims {
    /// One subject's claim.
    type Claim: Claim;
    /// Whether a set-based claim that found tokens is progress for the deadline guard
    /// of the fall-back (humans: yes; bots: not until committed).
    const SET_CLAIM_IS_PROGRESS: bool;
    /// Whether the page ends `Done` after its fall-back even if the guard stopped
    /// the group (humans), or keeps the group's flow (bots).
    const DONE_AFTER_FALL_BACK: bool;

    /// The whole page set-based; the outcomes in the order of `subjects`.
    fn claim_set<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        subjects: &[i64],
    ) -> impl Future<Output = Result<Vec<(i64, Outcome<Self::Claim>)>>> + Send;

    /// One subject inside the caller's transaction or savepoint; messages returned.
    fn claim_rows<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        subject: i64,
    ) -> impl Future<Output = Result<Outcome<Self::Claim>>> + Send;

    /// Counts and logs a subject that ended without a claim (no resource, or a
    /// failure), adding it to `excluded` (the following pages leave it out).
    fn ended(
        run: &mut Run<'_, '_>,
        excluded: &mut Vec<i64>,
        iv: Interval,
        subject: i64,
        outcome: &Result<Outcome<Self::Claim>>,
    );

    /// The warning that the page's group could not be sent.
    fn unsent(iv: Interval, subjects: usize);
}

/// One page of subjects; `excluded` collects those the following pages leave out.
pub(super) async fn page<S: Claims, C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    subjects: &[i64],
    excluded: &mut Vec<i64>,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    if run.deadline_stop() {
        return Ok(Flow::Stop);
    }
    let (flow, attempted) = match group::<S, C>(run, client, iv, min, subjects, excluded).await? {
        GroupEnd::Committed(flow) => return Ok(flow),
        GroupEnd::Unsent { attempted, flow } => (flow, attempted),
    };
    S::unsent(iv, attempted.len());
    for subject in attempted {
        if run.deadline_stop() {
            return Ok(Flow::Stop);
        }
        match retry_transient!(alone::<S, C>(run, client, iv, min, subject).await) {
            Ok(Outcome::Claimed(c)) => c.count(run),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => S::ended(run, excluded, iv, subject, &other),
        }
    }
    Ok(if S::DONE_AFTER_FALL_BACK {
        Flow::Done
    } else {
        flow
    })
}

/// One subject in its own transaction: the fall-back when a page could not be sent.
async fn alone<S: Claims, C>(
    run: &Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    subject: i64,
) -> Result<Outcome<S::Claim>>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let outcome = S::claim_rows(run, &tx, iv, min, subject).await?;
    if let Outcome::Claimed(c) = &outcome {
        c.log(iv);
        run.inv.queue.send(c.messages()).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// The grouped transaction of [`page`].
async fn group<S: Claims, C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    subjects: &[i64],
    excluded: &mut Vec<i64>,
) -> Result<GroupEnd>
where
    C: GenericClient + Send + Sync,
{
    let mut flow = Flow::Done;
    let mut claims: Vec<S::Claim> = Vec::new();
    // Subjects attempted in the group (claimed, or claimed elsewhere), for the fall-back.
    let mut attempted: Vec<i64> = Vec::new();
    let mut progress = run.progress;
    let mut tx = client.transaction().await?;
    let mut set = None;
    // Near the deadline, one by one, so the guard can stop after the first unit.
    if !run.inv.deadline.reached() {
        match S::claim_set(run, &tx, iv, min, subjects).await {
            Ok(c) => set = Some(c),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(_) => {
                // The claim was the transaction's first statement.
                tx.rollback().await?;
                tx = client.transaction().await?;
            }
        }
    }
    let one_by_one: &[i64] = if set.is_some() { &[] } else { subjects };
    for (subject, outcome) in set.into_iter().flatten() {
        match outcome {
            Outcome::Claimed(c) => {
                attempted.push(subject);
                run.progress |= S::SET_CLAIM_IS_PROGRESS;
                claims.push(c);
            }
            Outcome::NothingClaimed => attempted.push(subject),
            other => S::ended(run, excluded, iv, subject, &Ok(other)),
        }
    }
    for &subject in one_by_one {
        if progress && run.inv.deadline.reached() {
            flow = Flow::Stop;
            break;
        }
        let outcome = retry_transient!(in_savepoint(&mut tx, async |sp| S::claim_rows(
            run, sp, iv, min, subject
        )
        .await)
        .await?
        .into_result());
        match outcome {
            Ok(Outcome::Claimed(c)) => {
                attempted.push(subject);
                progress = true;
                claims.push(c);
            }
            Ok(Outcome::NothingClaimed) => attempted.push(subject),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => S::ended(run, excluded, iv, subject, &other),
        }
    }
    // Send-then-commit, in calls of ten (behaviour §7.2 (b)).
    let out: Vec<OutMessage> = claims
        .iter()
        .flat_map(|c| c.messages().iter().cloned())
        .collect();
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

/// How one subject's savepoint ended (the page's transaction is still usable).
enum Savepoint<T> {
    /// The work succeeded and the savepoint was released.
    Released(T),
    /// The work failed and was rolled back to its savepoint, alone.
    RolledBack(Error),
}

impl<T> Savepoint<T> {
    /// The subject's own outcome.
    fn into_result(self) -> Result<T> {
        match self {
            Savepoint::Released(v) => Ok(v),
            Savepoint::RolledBack(e) => Err(e),
        }
    }
}

/// `work` in its own savepoint of the page's transaction. `Err(e)`: the savepoint
/// failed, so the page's transaction is unusable.
async fn in_savepoint<T>(
    tx: &mut Transaction<'_>,
    work: impl AsyncFnOnce(&Transaction<'_>) -> Result<T>,
) -> Result<Savepoint<T>> {
    let sp = tx.transaction().await?;
    match work(&sp).await {
        Ok(v) => {
            sp.commit().await?;
            Ok(Savepoint::Released(v))
        }
        Err(e) => {
            sp.rollback().await?;
            Ok(Savepoint::RolledBack(e))
        }
    }
}

/// How a page's grouped transaction ended once its messages were handed over.
enum Sent {
    /// Every message was sent and the transaction committed.
    Committed,
    /// A send failed and the transaction rolled back.
    RolledBack,
}

/// Send-then-commit (behaviour §7.2 (b)): a failed send rolls the page back instead.
/// `Err(e)`: the COMMIT or the ROLLBACK failed (the connection is lost).
async fn send_then_commit(
    run: &Run<'_, '_>,
    tx: Transaction<'_>,
    out: &[OutMessage],
) -> Result<Sent> {
    if queue::send_outbox(run.inv.queue, out).await.is_err() {
        tx.rollback().await?;
        return Ok(Sent::RolledBack);
    }
    tx.commit().await?;
    Ok(Sent::Committed)
}

/// How a page's group ended.
enum GroupEnd {
    /// Sent and committed; whether the deadline guard stopped the page.
    Committed(Flow),
    /// A send failed and the group rolled back: these subjects run again one by one.
    Unsent {
        /// The subjects the group attempted (claimed, or claimed elsewhere).
        attempted: Vec<i64>,
        /// Whether the deadline guard stopped the group.
        flow: Flow,
    },
}
