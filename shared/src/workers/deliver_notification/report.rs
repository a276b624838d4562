//! The `done` result of `deliver-notification`: [`Delivered`] (one mail or one web
//! hook) with its [`Outcome`], which decides the `status`, and the delivery metrics.

use serde::Serialize;

use crate::metrics::{self, Metric};
use crate::runtime::{Done, Status};

/// How one delivery ended: `done`'s `outcome`, which decides its `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The recipient is missing or cannot receive notifications (`stale`).
    RecipientCannotReceive,
    /// The hook is missing or no longer subscribed (`stale`).
    NotSubscribed,
    /// The hook is disabled for now (`skipped`).
    Disabled,
    /// A system hook's row is still there: its removal was rolled back (`stale`).
    NotRemoved,
    /// Rendered or checked, not sent: dry run.
    DryRun,
    /// Accepted by the mail server, or a 2xx/3xx answer from the hook.
    Delivered,
    /// The mail server rejected the message for good (5xx).
    Rejected,
    /// The hook's target is on a local network.
    Refused,
    /// The hook's URL is not a valid target.
    InvalidUrl,
    /// The hook answered with an error status or could not be reached.
    Failed,
    /// The mail server could not take the message now: the record is retried.
    Deferred,
}

impl Outcome {
    /// The `outcome` field's value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::RecipientCannotReceive => "recipient_cannot_receive",
            Outcome::NotSubscribed => "not_subscribed",
            Outcome::Disabled => "disabled",
            Outcome::NotRemoved => "not_removed",
            Outcome::DryRun => "dry_run",
            Outcome::Delivered => "delivered",
            Outcome::Rejected => "rejected",
            Outcome::Refused => "refused",
            Outcome::InvalidUrl => "invalid_url",
            Outcome::Failed => "failed",
            Outcome::Deferred => "deferred",
        }
    }

    /// The decision it stands for (`hk`'s plan): delivered, would deliver (dry
    /// run), skipped or failed.
    pub fn decision(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::DryRun => "would_deliver",
            Outcome::RecipientCannotReceive
            | Outcome::NotSubscribed
            | Outcome::Disabled
            | Outcome::NotRemoved => "skipped",
            _ => "failed",
        }
    }

    /// The `status` of `done` for this outcome.
    pub fn status(self) -> Status {
        match self {
            Outcome::RecipientCannotReceive | Outcome::NotSubscribed | Outcome::NotRemoved => {
                Status::Stale
            }
            Outcome::Disabled => Status::Skipped,
            Outcome::DryRun
            | Outcome::Delivered
            | Outcome::Rejected
            | Outcome::Refused
            | Outcome::InvalidUrl
            | Outcome::Failed => Status::Completed,
            Outcome::Deferred => Status::Failed,
        }
    }
}

/// The `done` result of one delivery: ids only, never an address, URL or body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Delivered {
    /// A `deliver-notification.email`.
    Email {
        /// The recipient.
        user_id: i64,
        /// The email's template.
        template: &'static str,
        /// How it ended.
        outcome: Outcome,
    },
    /// A `deliver-notification.webhook`.
    Webhook {
        /// The hook.
        hook_id: i64,
        /// How it ended.
        outcome: Outcome,
        /// For `failed`: whether the failure was temporary (no answer, 5xx, 408,
        /// 429) rather than a final 4xx. Counted in the metrics, not logged.
        #[serde(skip)]
        temporary: bool,
    },
}

impl Delivered {
    /// How the delivery ended.
    pub fn outcome(&self) -> Outcome {
        match self {
            Delivered::Email { outcome, .. } | Delivered::Webhook { outcome, .. } => *outcome,
        }
    }
}

impl Done for Delivered {
    fn status(&self) -> Status {
        self.outcome().status()
    }

    /// The mail counters on an email record, the web-hook counters on a web-hook
    /// record: each 0 or 1, so a failure rate can be computed from them.
    fn metrics(&self) -> Vec<(Metric, f64)> {
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        match *self {
            Delivered::Email { outcome, .. } => vec![
                (metrics::MAILS_SENT, flag(outcome == Outcome::Delivered)),
                (
                    metrics::MAILS_FAILED_TEMPORARY,
                    flag(outcome == Outcome::Deferred),
                ),
                (
                    metrics::MAILS_FAILED_PERMANENT,
                    flag(outcome == Outcome::Rejected),
                ),
            ],
            Delivered::Webhook {
                outcome, temporary, ..
            } => {
                let failed = outcome == Outcome::Failed;
                vec![
                    (metrics::WEBHOOKS_SENT, flag(outcome == Outcome::Delivered)),
                    (
                        metrics::WEBHOOKS_REFUSED,
                        flag(matches!(outcome, Outcome::Refused | Outcome::InvalidUrl)),
                    ),
                    (
                        metrics::WEBHOOKS_FAILED_TEMPORARY,
                        flag(failed && temporary),
                    ),
                    (
                        metrics::WEBHOOKS_FAILED_PERMANENT,
                        flag(failed && !temporary),
                    ),
                ]
            }
        }
    }
}
