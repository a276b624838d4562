//! B28 `pat-expiring` (behaviour §B28.1–§B28.9, §D19–§D22, §D26, §D27).
//!
//! Owns: the handler and its typed `done` report ([`PatExpiringDone`]), the run's
//! state (budget, deadline guard, progress, totals), the one keyset page loop that
//! pages humans and bots alike (pages of 100 by `(expires_at, id)` with the inclusive
//! advance of `:min`, the excluded subjects, the budget and deadline stops), and the
//! continuation. It sends messages only; delivery is `deliver-notification`.

mod bots;
mod claims;
mod hook_body;
mod humans;
mod interval;
mod lookup;
pub mod payload;
pub(crate) mod sql;

use chrono::NaiveDate;
use serde::Serialize;
use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

pub use bots::bot_notices;
pub use hook_body::{hook_body, ClaimedToken, Resource};
pub use interval::Interval;
pub use lookup::{bot_contexts, recipients, BotContext};
pub use payload::PatExpiringRun;

use crate::config::Config;
use crate::error::Result;
use crate::function::Function;
use crate::job::{FromConfig, Job, Step};
use crate::messages::Envelope;
use crate::metrics::{self, Metric};
use crate::notify::Instance;
use crate::queue::OutMessage;
use crate::runtime::{Budget, Done, Invocation, Status};
use crate::workers::deliver_notification::payload::EmailNotification;

/// Tokens per page.
pub const BATCH_SIZE: i64 = 100;
/// The most token names in one human email: the receiver's limit.
pub const MAX_TOKENS: usize = crate::workers::deliver_notification::payload::TOKEN_NAMES_MAX;
/// Delay of the continuation when the budget or the deadline stops a run.
pub const REQUEUE_DELAY_S: u32 = 120;

const FUNCTION: Function = Function::PatExpiring;
/// The table of the tokens it decides on.
const TOKENS: &str = "personal_access_tokens";

/// The `done` result of one `pat-expiring.run`: the run's totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PatExpiringDone {
    /// Bot tokens claimed.
    #[serde(rename = "total_notification_delivered_for_resource_access_tokens")]
    pub bot_tokens_marked: u64,
    /// Bots without a resource (their tokens stay unmarked).
    #[serde(rename = "total_resource_bot_without_membership")]
    pub bots_without_membership: u64,
    /// Bots whose claim failed.
    #[serde(rename = "total_failed_notifications_for_resource_bots")]
    pub bot_failures: u64,
    /// Human tokens claimed.
    #[serde(rename = "total_user_tokens_marked")]
    pub user_tokens_marked: u64,
    /// Human emails enqueued.
    #[serde(rename = "total_user_emails_enqueued")]
    pub user_emails_enqueued: u64,
    /// Human emails suppressed (the user cannot receive notifications).
    #[serde(rename = "total_user_emails_suppressed")]
    pub user_emails_suppressed: u64,
    /// Users whose claim failed.
    #[serde(rename = "total_user_failures")]
    pub user_failures: u64,
    /// Bots whose tokens were claimed (the `items` metric, not a field).
    #[serde(skip)]
    pub bots_notified: u64,
}

impl PatExpiringDone {
    /// The subjects (users and bots) whose claim ran: notified, suppressed, left out
    /// for having no resource, or failed.
    pub fn subjects(&self) -> u64 {
        self.user_emails_enqueued
            + self.user_emails_suppressed
            + self.user_failures
            + self.bots_notified
            + self.bots_without_membership
            + self.bot_failures
    }
}

impl Done for PatExpiringDone {
    fn metrics(&self) -> Vec<(Metric, f64)> {
        vec![
            (metrics::USER_TOKENS_MARKED, self.user_tokens_marked as f64),
            (metrics::BOT_TOKENS_MARKED, self.bot_tokens_marked as f64),
            (
                metrics::FAILED,
                (self.user_failures + self.bot_failures) as f64,
            ),
            (metrics::ITEMS, self.subjects() as f64),
        ]
    }

    /// GitLab's worker logs the same `total_*` counters as this `done` line.
    fn gitlab_extras(&self, _: Status) -> Vec<(String, serde_json::Value)> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(m)) => m.into_iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// Whether a step ran to its end or the budget/deadline stopped it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Done,
    Stop,
}

/// One run's state, shared by the human and bot pages.
struct Run<'a, 'b> {
    inv: &'a Invocation<'b>,
    env: &'a Envelope,
    instance: &'a Instance,
    budget: Budget,
    /// Whether a unit of progress (a subject whose claim marked tokens) is complete.
    progress: bool,
    totals: PatExpiringDone,
}

impl Run<'_, '_> {
    /// The budget check after a page or a step: only once a unit is complete.
    fn budget_stop(&self) -> bool {
        self.progress && self.budget.exhausted()
    }

    /// The deadline guard before a user or bot: only once a unit is complete.
    fn deadline_stop(&self) -> bool {
        self.progress && self.inv.deadline.reached()
    }

    fn email(&self, key: String, n: &EmailNotification) -> OutMessage {
        OutMessage::to(key, &self.env.run_id, self.inv.now, n)
    }
}

fn distinct_in_order(ids: impl Iterator<Item = i64>) -> Vec<i64> {
    let mut seen = std::collections::HashSet::new();
    ids.filter(|id| seen.insert(*id)).collect()
}

/// Which subjects a keyset page holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subjects {
    /// Humans (`user_type = 0`), behaviour §B28.5.
    Humans,
    /// Project and group bots (`user_type = 6`), behaviour §B28.6.
    Bots,
}

impl Subjects {
    /// The page statement: `(user_id, expires_at, id)` rows.
    fn page_sql(self, iv: Interval) -> &'static str {
        match self {
            Subjects::Humans => iv.statements().human_page,
            Subjects::Bots => iv.statements().bot_page,
        }
    }

    /// Process one page's `subjects` (distinct, in order of first appearance).
    async fn page<C>(
        self,
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
        match self {
            Subjects::Humans => {
                claims::page::<humans::Humans, C>(run, client, iv, min, subjects, excluded).await
            }
            Subjects::Bots => {
                claims::page::<bots::Bots, C>(run, client, iv, min, subjects, excluded).await
            }
        }
    }
}

/// Every human token in scope of an interval on `today`, by id, read with the
/// run's own human pages in one read each: `hk parity` checks that a plan decided
/// each (a bot's tokens are decided only when it has a resource, so they are left
/// out).
pub async fn human_tokens_in_scope<C: GenericClient>(c: &C, today: NaiveDate) -> Result<Vec<i64>> {
    let mut out = Vec::new();
    for iv in Interval::ALL {
        let (min, last) = iv.bounds(today);
        let none: Vec<i64> = Vec::new();
        let rows = c
            .query_typed(
                Subjects::Humans.page_sql(iv),
                &[
                    (&min, Type::DATE),
                    (&last, Type::DATE),
                    (&none, Type::INT8_ARRAY),
                    (&i64::MAX, Type::INT8),
                ],
            )
            .await?;
        out.extend(rows.iter().map(|r| r.get::<_, i64>(2)));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// behaviour §B28.5 / §B28.6: the tokens of one interval of `kind`, page by page,
/// leaving out the subjects an earlier page could not notify.
async fn keyset_pages<C>(
    run: &mut Run<'_, '_>,
    client: &mut C,
    iv: Interval,
    kind: Subjects,
) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    let (mut min, last) = iv.bounds(run.inv.today());
    let mut excluded: Vec<i64> = Vec::new();
    loop {
        let page = client
            .query_typed(
                kind.page_sql(iv),
                &[
                    (&min, Type::DATE),
                    (&last, Type::DATE),
                    (&excluded, Type::INT8_ARRAY),
                    (&BATCH_SIZE, Type::INT8),
                ],
            )
            .await?;
        let Some(last_row) = page.last() else {
            return Ok(Flow::Done);
        };
        let next_min: NaiveDate = last_row.get(1);
        let subjects = distinct_in_order(page.iter().map(|r| r.get::<_, i64>(0)));
        if kind
            .page(run, client, iv, min, &subjects, &mut excluded)
            .await?
            == Flow::Stop
        {
            return Ok(Flow::Stop);
        }
        // Inclusive: tokens on the same date of subjects not seen yet are still found.
        min = next_min;
        if run.budget_stop() {
            return Ok(Flow::Stop);
        }
    }
}

/// behaviour §B28.4 step 2: the intervals in order, humans then bots, stopping on the budget.
async fn run_intervals<C>(run: &mut Run<'_, '_>, client: &mut C) -> Result<Flow>
where
    C: GenericClient + Send + Sync,
{
    for iv in Interval::ALL {
        for kind in [Subjects::Humans, Subjects::Bots] {
            if keyset_pages(run, client, iv, kind).await? == Flow::Stop || run.budget_stop() {
                return Ok(Flow::Stop);
            }
        }
    }
    Ok(Flow::Done)
}

/// The `pat-expiring` job: one run at a time, continued after [`REQUEUE_DELAY_S`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PatExpiring;

impl Job for PatExpiring {
    const FUNCTION: Function = FUNCTION;
    type Payload = PatExpiringRun;
    type Outcome = PatExpiringDone;
    /// The instance its notices link to.
    type Deps = Instance;

    async fn run<C>(
        inv: &Invocation<'_>,
        instance: &Instance,
        client: &mut C,
        env: &Envelope,
        _: PatExpiringRun,
    ) -> Result<Step<PatExpiringDone, PatExpiringRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let mut run = Run {
            inv,
            env,
            instance,
            budget: Budget::start(inv.settings.pat_expiring_budget),
            progress: false,
            totals: PatExpiringDone::default(),
        };
        let flow = run_intervals(&mut run, client).await?;
        let next = (flow == Flow::Stop).then_some(PatExpiringRun {});
        Ok(Step::then(run.totals, next, REQUEUE_DELAY_S))
    }
}

/// `pat-expiring` needs the instance its notices link to (`GITLAB_BASE_URL`).
impl FromConfig for Instance {
    async fn build(cfg: &Config, _: &aws_config::SdkConfig) -> Result<Instance> {
        Instance::from_config(&cfg.notify)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_are_taken_in_order_of_first_appearance() {
        assert_eq!(
            distinct_in_order([3, 1, 3, 2, 1].into_iter()),
            vec![3, 1, 2]
        );
    }
}
