//! B28's bot tokens (behaviour §B28.6).
//!
//! Owns: one page of bots, grouped as behaviour §7.2 allows: one transaction in which
//! one statement finds the page's bots' resources and claims their tokens and one
//! more reads the claimed bots' resources, hooks and recipients (or, when that fails
//! or the deadline guard is near, one savepoint per bot, so a failing bot rolls back
//! alone); the page's messages are sent in calls of ten before COMMIT. When a send
//! fails, the page rolls back and its bots run again one transaction each. Also the
//! notices of a bot's claim ([`bot_notices`]: in the 7-day interval a web hook per
//! subscribed hook with the body of [`super::hook_body`], then an email per
//! recipient), bots without a resource, and their log lines and counters. The keyset
//! page loop is [`super::keyset_pages`].

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::hook_body::{hook_body, ClaimedToken};
use super::interval::Interval;
use super::lookup::{
    bot_contexts, find_resource, load_resource, recipients, subscribed_hooks, BotContext,
};
use super::{in_savepoint, send_then_commit, Flow, GroupEnd, Run, Sent};
use crate::error::{Error, Result};
use crate::function::Function;
use crate::messages::{
    bot_email_key, webhook_event_key, webhook_key, EmailNotification, Envelope, WebhookNotification,
};
use crate::notify::Instance;
use crate::queue::OutMessage;
use crate::retry_transient;

/// The messages of one bot's claim (behaviour §B28.6 steps 3–5): `rows` are its claimed tokens.
fn bot_messages(
    run: &Run<'_, '_>,
    iv: Interval,
    bot: i64,
    rows: Vec<ClaimedToken>,
    ctx: &BotContext,
) -> Option<BotClaim> {
    let marked = rows.len() as u64;
    let reported = rows.into_iter().min_by_key(|t| t.id)?;
    let out = bot_notices(
        iv,
        bot,
        &reported,
        ctx,
        run.instance,
        &run.env.run_id,
        run.inv.now,
    );
    Some(BotClaim {
        bot,
        marked,
        out,
        recipients: ctx.2.clone(),
    })
}

/// The notices of one bot's claim, `reported` being its claimed token of the lowest id:
/// in the 7-day interval a web hook per subscribed hook, then an email per recipient.
/// Pure: also what the `b28` bench's floor sends for the same claim.
pub fn bot_notices(
    iv: Interval,
    bot: i64,
    reported: &ClaimedToken,
    (resource, hooks, recipients): &BotContext,
    instance: &Instance,
    run_id: &str,
    now: DateTime<Utc>,
) -> Vec<OutMessage> {
    let today = now.date_naive();
    let deliver = |envelope: Envelope| OutMessage::new(Function::DeliverNotification, 0, envelope);
    let mut out: Vec<OutMessage> = Vec::new();
    if iv == Interval::SevenDays {
        let body = hook_body(resource, reported, instance);
        let event_key = webhook_event_key(bot, reported.id);
        for &hook_id in hooks {
            out.push(deliver(Envelope::new(
                "deliver-notification.webhook",
                webhook_key(&event_key, hook_id),
                run_id,
                now,
                WebhookNotification {
                    hook_id,
                    event_key: event_key.clone(),
                    body: body.clone(),
                },
            )));
        }
    }
    for &user_id in recipients {
        let n = EmailNotification::BotResourceAccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            bot_user_id: bot,
            token_name: reported.name.clone(),
            resource_type: resource.kind(),
            resource_id: resource.id(),
            resource_full_path: resource.full_path().to_string(),
            resource_name: resource.name().to_string(),
        };
        out.push(deliver(Envelope::new(
            "deliver-notification.email",
            bot_email_key(iv.name(), bot, user_id, today),
            run_id,
            now,
            &n,
        )));
    }
    out
}

/// behaviour §B28.6 steps 1–5 for a whole page of bots, set-based: one statement finds every bot's
/// resource and claims the tokens of the bots that have one; one more reads the
/// claimed bots' resources, hooks and recipients. Outcomes in the order of `bots`.
async fn claim_bots_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
) -> Result<Vec<(i64, BotOutcome)>> {
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query_typed(
            iv.statements().claim_bots,
            &[
                (&min, Type::DATE),
                (&last, Type::DATE),
                (&run.inv.now, Type::TIMESTAMPTZ),
                (&bots, Type::INT8_ARRAY),
            ],
        )
        .await?;
    let mut with_resource = HashSet::new();
    let mut claimed: HashMap<i64, Vec<ClaimedToken>> = HashMap::new();
    for r in &rows {
        let bot: i64 = r.get(0);
        with_resource.insert(bot);
        if let Some(id) = r.get::<_, Option<i64>>(1) {
            claimed.entry(bot).or_default().push(
                ClaimedToken {
                    id,
                    name: r.get(2),
                    created_at: r.get(3),
                    expires_at: r.get(4),
                    last_used_at: r.get(5),
                    user_id: bot,
                }
                .checked(),
            );
        }
    }
    let mut claimed_bots: Vec<i64> = claimed.keys().copied().collect();
    claimed_bots.sort_unstable();
    let contexts = if claimed_bots.is_empty() {
        HashMap::new()
    } else {
        bot_contexts(c, &claimed_bots).await?
    };
    let mut out = Vec::with_capacity(bots.len());
    for &bot in bots {
        let outcome = if !with_resource.contains(&bot) {
            BotOutcome::NoResource
        } else {
            match claimed.remove(&bot) {
                None => BotOutcome::NothingClaimed,
                Some(rows) => {
                    let ctx = contexts.get(&bot).ok_or_else(|| {
                        Error::Invariant(format!("the resource of bot {bot} vanished"))
                    })?;
                    match bot_messages(run, iv, bot, rows, ctx) {
                        Some(c) => BotOutcome::Claimed(c),
                        None => BotOutcome::NothingClaimed,
                    }
                }
            }
        };
        out.push((bot, outcome));
    }
    Ok(out)
}

/// A bot's claim: how many tokens, its messages, and its email recipients (for the
/// log lines).
struct BotClaim {
    bot: i64,
    marked: u64,
    out: Vec<OutMessage>,
    recipients: Vec<i64>,
}

impl BotClaim {
    fn log(&self, iv: Interval) {
        for &user_id in &self.recipients {
            tracing::info!(
                user_id,
                bot_user_id = self.bot,
                interval = iv.name(),
                "Notifying resource access token owner about expiring tokens"
            );
        }
    }

    fn count(&self, run: &mut Run<'_, '_>) {
        run.progress = true;
        run.totals.bot_tokens_marked += self.marked;
        run.totals.bots_notified += 1;
    }
}

/// How a bot ended.
enum BotOutcome {
    /// The bot has no resource: its tokens stay unmarked.
    NoResource,
    /// Another session claimed the tokens (or none is left in scope).
    NothingClaimed,
    /// Tokens claimed.
    Claimed(BotClaim),
}

/// behaviour §B28.6 steps 1–5 for one bot inside the caller's transaction or savepoint: resource,
/// claim, hooks, recipients; the messages are returned, not sent.
async fn claim_bot_rows<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bot: i64,
) -> Result<BotOutcome> {
    let Some(found) = find_resource(c, bot).await? else {
        return Ok(BotOutcome::NoResource);
    };
    let (_, last) = iv.bounds(run.inv.today());
    let today = run.inv.today();
    let rows = c
        .query(
            iv.statements().claim_bot,
            &[&min, &last, &run.inv.now, &bot],
        )
        .await?;
    let Some(reported) = rows
        .iter()
        .map(|r| {
            ClaimedToken {
                id: r.get(0),
                name: r.get(1),
                created_at: r.get(2),
                expires_at: r.get(3),
                last_used_at: r.get(4),
                user_id: r.get(5),
            }
            .checked()
        })
        .min_by_key(|t| t.id)
    else {
        return Ok(BotOutcome::NothingClaimed);
    };
    let resource = load_resource(c, found.0, found.1).await?;
    let mut out: Vec<OutMessage> = Vec::new();
    if iv == Interval::SevenDays {
        let body = hook_body(&resource, &reported, run.instance);
        let event_key = webhook_event_key(bot, reported.id);
        for hook_id in subscribed_hooks(c, &resource).await? {
            out.push(OutMessage::new(
                Function::DeliverNotification,
                0,
                Envelope::new(
                    "deliver-notification.webhook",
                    webhook_key(&event_key, hook_id),
                    &run.env.run_id,
                    run.inv.now,
                    WebhookNotification {
                        hook_id,
                        event_key: event_key.clone(),
                        body: body.clone(),
                    },
                ),
            ));
        }
    }
    let recipients = recipients(c, &resource, bot).await?;
    for &user_id in &recipients {
        let n = EmailNotification::BotResourceAccessTokenAboutToExpire {
            recipient_user_id: user_id,
            days_to_expire: iv.days_to_expire(),
            bot_user_id: bot,
            token_name: reported.name.clone(),
            resource_type: resource.kind(),
            resource_id: resource.id(),
            resource_full_path: resource.full_path().to_string(),
            resource_name: resource.name().to_string(),
        };
        out.push(run.email(bot_email_key(iv.name(), bot, user_id, today), &n));
    }
    Ok(BotOutcome::Claimed(BotClaim {
        bot,
        marked: rows.len() as u64,
        out,
        recipients,
    }))
}

/// behaviour §B28.6 steps 1–6 for one bot in its own transaction (the fall-back when a page's group
/// could not be sent).
async fn claim_bot<C>(
    run: &Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    bot: i64,
) -> Result<BotOutcome>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let outcome = claim_bot_rows(run, &tx, iv, min, bot).await?;
    if let BotOutcome::Claimed(c) = &outcome {
        c.log(iv);
        run.inv.queue.send(&c.out).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// Counts and logs a bot that ended without a claim (no resource, or a failure).
fn bot_ended(
    run: &mut Run<'_, '_>,
    excluded: &mut Vec<i64>,
    iv: Interval,
    bot: i64,
    outcome: &Result<BotOutcome>,
) {
    match outcome {
        Ok(BotOutcome::NoResource) => {
            // No log, as in GitLab; the tokens stay unmarked.
            excluded.push(bot);
            run.totals.bots_without_membership += 1;
        }
        Ok(BotOutcome::NothingClaimed) | Ok(BotOutcome::Claimed(_)) => {}
        Err(e) => {
            excluded.push(bot);
            run.totals.bot_failures += 1;
            tracing::error!(
                user_id = bot,
                interval = iv.name(),
                error = %e,
                error_class = e.class(),
                "Failed to send notification about expiring resource access tokens"
            );
        }
    }
}

/// One page of bots (see the module header); `excluded` collects the bots without a
/// resource and the bots that failed, which the following pages exclude.
pub(super) async fn page<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
    excluded: &mut Vec<i64>,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    if run.deadline_stop() {
        return Ok(Flow::Stop);
    }
    let (flow, attempted) = match group(run, client, iv, min, bots, excluded).await? {
        GroupEnd::Committed(flow) => return Ok(flow),
        GroupEnd::Unsent { attempted, flow } => (flow, attempted),
    };
    tracing::warn!(
        interval = iv.name(),
        bots = attempted.len(),
        "bot group could not be sent; its bots run one by one"
    );
    for bot in attempted {
        if run.deadline_stop() {
            return Ok(Flow::Stop);
        }
        match retry_transient!(claim_bot(run, client, iv, min, bot).await) {
            Ok(BotOutcome::Claimed(c)) => c.count(run),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => bot_ended(run, excluded, iv, bot, &other),
        }
    }
    Ok(flow)
}

/// The grouped transaction of [`page`].
async fn group<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
    excluded: &mut Vec<i64>,
) -> Result<GroupEnd>
where
    C: GenericClient + Send + Sync,
{
    let mut flow = Flow::Done;
    let mut claims: Vec<BotClaim> = Vec::new();
    // Bots attempted in the group (claimed, or claimed elsewhere), for the fall-back.
    let mut attempted: Vec<i64> = Vec::new();
    let mut progress = run.progress;
    let mut tx = client.transaction().await?;
    let mut set = None;
    // Near the deadline, bot by bot, so the guard can stop after the first unit.
    if !run.inv.deadline.reached() {
        match claim_bots_set(run, &tx, iv, min, bots).await {
            Ok(c) => set = Some(c),
            Err(e) if e.is_connection_lost() => return Err(e),
            Err(_) => {
                // The claim was the transaction's first statement.
                tx.rollback().await?;
                tx = client.transaction().await?;
            }
        }
    }
    let one_by_one: &[i64] = if set.is_some() { &[] } else { bots };
    for (bot, outcome) in set.into_iter().flatten() {
        match outcome {
            BotOutcome::Claimed(c) => {
                attempted.push(bot);
                claims.push(c);
            }
            BotOutcome::NothingClaimed => attempted.push(bot),
            other => bot_ended(run, excluded, iv, bot, &Ok(other)),
        }
    }
    for &bot in one_by_one {
        if progress && run.inv.deadline.reached() {
            flow = Flow::Stop;
            break;
        }
        let outcome = retry_transient!(in_savepoint(&mut tx, async |sp| claim_bot_rows(
            run, sp, iv, min, bot
        )
        .await)
        .await?
        .into_result());
        match outcome {
            Ok(BotOutcome::Claimed(c)) => {
                attempted.push(bot);
                progress = true;
                claims.push(c);
            }
            Ok(BotOutcome::NothingClaimed) => attempted.push(bot),
            Err(e) if e.is_connection_lost() => return Err(e),
            other => bot_ended(run, excluded, iv, bot, &other),
        }
    }
    // Send-then-commit, in calls of ten (behaviour §7.2 (b)).
    let out: Vec<OutMessage> = claims.iter().flat_map(|c| c.out.iter().cloned()).collect();
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

#[cfg(test)]
mod tests {
    use super::super::hook_body::fixtures::{site, t20};
    use super::*;
    use crate::messages::{Envelope, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS};
    use crate::notify::Instance;

    fn notices_for_path(full_path: String) -> Vec<OutMessage> {
        let instance = Instance::new("https://gitlab.example.com", None, "18.0.0").unwrap();
        let (token, project) = (t20(), site(&full_path));
        let now = "2025-03-10T01:00:00Z".parse().unwrap();
        let ctx = (project, vec![1], vec![11, 12]);
        bot_notices(Interval::SevenDays, 20, &token, &ctx, &instance, "r", now)
    }

    /// The receiver's limit is the sender's: every notice built for GitLab's longest
    /// full path (20 ancestors and the project, 255 characters each) decodes at
    /// `deliver-notification`, and one character more is refused there.
    #[test]
    fn every_notice_for_gitlabs_longest_path_decodes_at_the_receiver() {
        let segment = "p".repeat(NAME_MAX_CHARS);
        let longest = vec![segment.as_str(); 21].join("/");
        assert_eq!(longest.chars().count(), FULL_PATH_MAX_CHARS);
        let notices = notices_for_path(longest.clone());
        assert_eq!(notices.len(), 3, "one web hook and two owner mails");
        for m in &notices {
            let body = m.envelope.to_body();
            if let Err(e) = Envelope::decode(&body, Function::DeliverNotification) {
                panic!("{}: {}", m.envelope.kind, e.error);
            }
        }
        let too_long = notices_for_path(format!("{longest}x"));
        let mail = too_long
            .iter()
            .find(|m| m.envelope.kind == "deliver-notification.email")
            .unwrap();
        let err =
            Envelope::decode(&mail.envelope.to_body(), Function::DeliverNotification).unwrap_err();
        assert!(err.error.contains("resource_full_path"), "{}", err.error);
    }
}
