//! B28's bot tokens (behaviour §B28.6).
//!
//! Owns: [`Bots`], the bot side of a page's claim ([`super::claims`]), set-based or one
//! bot at a time; the notices of a bot's claim ([`bot_notices`]), bots without a
//! resource, and their log lines and counters.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::claims::{Claim, Claims, Outcome};
use super::hook_body::{hook_body, ClaimedToken};
use super::interval::Interval;
use super::lookup::{
    bot_contexts, find_resource, load_resource, recipients, subscribed_hooks, BotContext,
};
use super::{Run, TOKENS};
use crate::error::{Error, Result};
use crate::messages::{bot_email_key, webhook_event_key, webhook_key};
use crate::notify::Instance;
use crate::queue::OutMessage;
use crate::workers::deliver_notification::payload::{EmailNotification, WebhookNotification};

/// The messages of one bot's claim (behaviour §B28.6 steps 3–5): `rows` are its claimed tokens.
fn bot_messages(
    run: &Run<'_, '_>,
    iv: Interval,
    bot: i64,
    rows: Vec<ClaimedToken>,
    ctx: &BotContext,
) -> Option<BotClaim> {
    let marked = rows.len() as u64;
    let tokens = (iv, rows.iter().map(|t| t.id).collect());
    let reported = rows.into_iter().min_by_key(|t| t.id)?;
    let (env, inv) = (run.env, run.inv);
    let out = bot_notices(iv, bot, &reported, ctx, run.instance, &env.run_id, inv.now);
    Some(BotClaim {
        bot,
        marked,
        out,
        recipients: ctx.2.clone(),
        tokens,
    })
}

/// The notices of one bot's claim, `reported` being its claimed token of the lowest id:
/// in the 7-day interval a web hook per subscribed hook, then an email per recipient.
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
    let mut out: Vec<OutMessage> = Vec::new();
    if iv == Interval::SevenDays {
        let body = hook_body(resource, reported, instance);
        let event_key = webhook_event_key(bot, reported.id);
        for &hook_id in hooks {
            out.push(OutMessage::to(
                webhook_key(&event_key, hook_id),
                run_id,
                now,
                &WebhookNotification {
                    hook_id,
                    event_key: event_key.clone(),
                    body: body.clone(),
                    system_hook: None,
                },
            ));
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
        out.push(OutMessage::to(
            bot_email_key(iv.name(), bot, user_id, today),
            run_id,
            now,
            &n,
        ));
    }
    out
}

/// behaviour §B28.6 steps 1–5 for a whole page of bots in two statements (claim, then
/// the claimed bots' contexts). Outcomes in the order of `bots`.
async fn claim_bots_set<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bots: &[i64],
) -> Result<Vec<(i64, Outcome<BotClaim>)>> {
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
            Outcome::NoResource
        } else {
            match claimed.remove(&bot) {
                None => Outcome::NothingClaimed,
                Some(rows) => {
                    let ctx = contexts.get(&bot).ok_or_else(|| {
                        Error::Invariant(format!("the resource of bot {bot} vanished"))
                    })?;
                    match bot_messages(run, iv, bot, rows, ctx) {
                        Some(c) => Outcome::Claimed(c),
                        None => Outcome::NothingClaimed,
                    }
                }
            }
        };
        out.push((bot, outcome));
    }
    Ok(out)
}

/// A bot's claim: how many tokens, its messages, and its email recipients.
pub(super) struct BotClaim {
    bot: i64,
    marked: u64,
    out: Vec<OutMessage>,
    recipients: Vec<i64>,
    /// The claimed tokens and their interval (the plan's decisions).
    tokens: (Interval, Vec<i64>),
}

impl Claim for BotClaim {
    fn messages(&self) -> &[OutMessage] {
        &self.out
    }

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
        let (iv, tokens) = &self.tokens;
        for &id in tokens {
            run.inv.decide(TOKENS, id, "notified", iv.name());
        }
        run.totals.bots_notified += 1;
    }
}

/// behaviour §B28.6 steps 1–5 for one bot inside the caller's transaction or savepoint: resource,
/// claim, hooks, recipients; the messages are returned, not sent.
async fn claim_bot_rows<C: GenericClient>(
    run: &Run<'_, '_>,
    c: &C,
    iv: Interval,
    min: NaiveDate,
    bot: i64,
) -> Result<Outcome<BotClaim>> {
    let Some(found) = find_resource(c, bot).await? else {
        return Ok(Outcome::NoResource);
    };
    let (_, last) = iv.bounds(run.inv.today());
    let rows = c
        .query(
            iv.statements().claim_bot,
            &[&min, &last, &run.inv.now, &bot],
        )
        .await?;
    let claimed: Vec<ClaimedToken> = rows
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
        .collect();
    if claimed.is_empty() {
        return Ok(Outcome::NothingClaimed);
    }
    let resource = load_resource(c, found.0, found.1).await?;
    let hooks = match iv {
        Interval::SevenDays => subscribed_hooks(c, &resource).await?,
        _ => Vec::new(),
    };
    let recipients = recipients(c, &resource, bot).await?;
    let ctx = (resource, hooks, recipients);
    Ok(bot_messages(run, iv, bot, claimed, &ctx).map_or(Outcome::NothingClaimed, Outcome::Claimed))
}

/// The bot side of a page's claim.
pub(super) struct Bots;

impl Claims for Bots {
    type Claim = BotClaim;
    const SET_CLAIM_IS_PROGRESS: bool = false;
    const DONE_AFTER_FALL_BACK: bool = false;

    async fn claim_set<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        bots: &[i64],
    ) -> Result<Vec<(i64, Outcome<BotClaim>)>> {
        claim_bots_set(run, c, iv, min, bots).await
    }

    async fn claim_rows<C: GenericClient + Send + Sync>(
        run: &Run<'_, '_>,
        c: &C,
        iv: Interval,
        min: NaiveDate,
        bot: i64,
    ) -> Result<Outcome<BotClaim>> {
        claim_bot_rows(run, c, iv, min, bot).await
    }

    fn ended(
        run: &mut Run<'_, '_>,
        excluded: &mut Vec<i64>,
        iv: Interval,
        bot: i64,
        outcome: &Result<Outcome<BotClaim>>,
    ) {
        match outcome {
            Ok(Outcome::NoResource) => {
                // No log, as in GitLab; the tokens stay unmarked.
                run.inv.decide("users", bot, "kept", "bot_without_resource");
                excluded.push(bot);
                run.totals.bots_without_membership += 1;
            }
            Ok(Outcome::NothingClaimed) | Ok(Outcome::Claimed(_)) => {}
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

    fn unsent(iv: Interval, bots: usize) {
        tracing::warn!(
            interval = iv.name(),
            bots,
            "bot group could not be sent; its bots run one by one"
        );
    }
}
