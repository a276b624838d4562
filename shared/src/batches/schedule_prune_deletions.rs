//! B43 `schedule-prune-deletions` (behaviour §B43.3, §B43.10).
//!
//! Owns: the 5-minute cron that starts a `prune-deletions` chain when any
//! `members_deletion_schedules` row exists, and the backlog metrics printed on every
//! run. It never touches memberships: `workers::prune_deletions` does.

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::{Job, Step};
use crate::messages::{prune_deletions_key, Envelope};
use crate::metrics::{self, Metric};
use crate::queue::OutMessage;
use crate::runtime::{Done, Invocation, Report, Status};
use crate::workers::prune_deletions::payload::PruneDeletionsRun;

pub mod payload;
pub mod sql;

pub use payload::SchedulePruneDeletionsRun;

const FUNCTION: Function = Function::SchedulePruneDeletions;

/// The backlog: how many schedules exist and how old the oldest one is.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Backlog {
    /// `count(*)` of `members_deletion_schedules`.
    remaining: i64,
    /// `now − min(created_at)` in seconds; 0 when there is no row (never negative).
    oldest_age_s: f64,
}

/// Step 2: read the row count and `min(created_at)`; `remaining > 0` is the `EXISTS`.
async fn backlog<C: GenericClient>(c: &C, now: DateTime<Utc>) -> Result<Backlog> {
    // Parsed, bound and run in one round trip (issue 52).
    let row = c.query_typed_one(sql::BACKLOG, &[]).await?;
    let oldest: Option<DateTime<Utc>> = row.get(1);
    let outside: i64 = row.get(2);
    if outside > 0 {
        tracing::warn!(
            schedules = outside,
            "Member deletion schedules created at ±infinity: left out of the oldest age"
        );
    }
    let oldest_age_s = oldest
        .map(|o| (now - o).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6)
        .unwrap_or(0.0)
        .max(0.0);
    Ok(Backlog {
        remaining: row.get(0),
        oldest_age_s,
    })
}

/// The `done` result: whether a `prune-deletions.run` was sent, and the backlog.
#[derive(Debug, Clone, Serialize)]
pub struct ScheduleDone {
    /// Whether a `prune-deletions.run` message was sent.
    pub enqueued: bool,
    /// The backlog read under the lock; `None` when skipped (no metrics then).
    #[serde(skip)]
    backlog: Option<Backlog>,
}

impl Done for ScheduleDone {
    fn status(&self) -> Status {
        if self.backlog.is_some() {
            Status::Completed
        } else {
            Status::Skipped
        }
    }
    fn metrics(&self) -> Vec<(Metric, f64)> {
        match self.backlog {
            Some(b) => vec![
                (metrics::REMAINING_SCHEDULES, b.remaining as f64),
                (metrics::OLDEST_SCHEDULE_AGE_S, b.oldest_age_s),
            ],
            None => Vec::new(),
        }
    }
}

/// Steps 2–3 under the overlap lock: whether a message was sent, and the backlog.
async fn enqueue_if_needed<C: GenericClient>(
    inv: &Invocation<'_>,
    client: &C,
    env: &Envelope,
) -> Result<(bool, Backlog)> {
    let b = backlog(client, inv.now).await?;
    if b.remaining == 0 {
        return Ok((false, b));
    }
    let message = OutMessage::to(
        prune_deletions_key(&env.run_id),
        &env.run_id,
        inv.now,
        &PruneDeletionsRun {},
    );
    inv.queue.send(&[message]).await?;
    Ok((true, b))
}

/// The `schedule-prune-deletions` job: one run at a time, never continued.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchedulePruneDeletions;

impl Job for SchedulePruneDeletions {
    const FUNCTION: Function = FUNCTION;
    type Payload = SchedulePruneDeletionsRun;
    type Outcome = ScheduleDone;
    type Deps = ();

    fn busy(_: &SchedulePruneDeletionsRun) -> Report {
        Report::new(ScheduleDone {
            enqueued: false,
            backlog: None,
        })
    }

    async fn run<C>(
        inv: &Invocation<'_>,
        _: &(),
        client: &mut C,
        env: &Envelope,
        _: SchedulePruneDeletionsRun,
    ) -> Result<Step<ScheduleDone, SchedulePruneDeletionsRun>>
    where
        C: GenericClient + Send + Sync,
    {
        let (enqueued, b) = enqueue_if_needed(inv, &*client, env).await?;
        Ok(Step::Done(ScheduleDone {
            enqueued,
            backlog: Some(b),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn skipped_says_nothing_was_enqueued_and_has_no_metrics() {
        let r = Report::new(ScheduleDone {
            enqueued: false,
            backlog: None,
        });
        assert_eq!(r.to_json(), json!({"status": "skipped", "enqueued": false}));
        assert!(r.metrics().is_empty());
        let r = Report::new(ScheduleDone {
            enqueued: true,
            backlog: Some(Backlog {
                remaining: 3,
                oldest_age_s: 1.5,
            }),
        });
        assert_eq!(
            r.to_json(),
            json!({"status": "completed", "enqueued": true})
        );
        assert_eq!(
            crate::metrics::named(&r.metrics()),
            vec![("remaining_schedules", 3.0), ("oldest_schedule_age_s", 1.5)]
        );
    }
}
