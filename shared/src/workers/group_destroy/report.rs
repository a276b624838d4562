//! The `done` results of `group-destroy`: [`GroupDestroyDone`] (every outcome of a
//! message that got the per-group try-lock) and [`GroupDestroyLocked`] (another
//! invocation holds it), with the metrics each declares.

use serde::Serialize;

use super::payload::GroupDestroyRun;
use crate::metrics::{self, Metric};
use crate::runtime::{Done, Status};

/// Rows this invocation deleted, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Deleted {
    /// Projects deleted (one chunk each).
    #[serde(rename = "projects_deleted")]
    pub projects: u64,
    /// Groups deleted (one chunk each).
    #[serde(rename = "groups_deleted")]
    pub groups: u64,
    /// Issues, merge requests and notes deleted.
    #[serde(rename = "contributions_deleted")]
    pub contributions: u64,
    /// Rows that only GitLab's services can delete, found under the group when the
    /// message ended as blocked by them (not a deletion; absent from `done` when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub blocking_rows: u64,
    /// Storage items handed to `storage-cleanup` (container repositories and the
    /// deleted projects' manifests; absent when 0).
    #[serde(rename = "storage_items_sent", skip_serializing_if = "is_zero")]
    pub storage_sent: u64,
    /// Storage items left in place (`STORAGE_*=leave`; absent when 0).
    #[serde(rename = "storage_items_left", skip_serializing_if = "is_zero")]
    pub storage_left: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a message that got the try-lock ended: the `outcome` field of `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Stale (behaviour §B51.4.1 step 2): the group is gone.
    GroupNotFound,
    /// Stale (behaviour §B51.4.1 step 3, or the restore found no schedule): not scheduled.
    NotScheduled,
    /// Stale (behaviour §B51.4.1 step 4): another user scheduled the deletion.
    UserChanged,
    /// Stale (behaviour §B51.4.1 step 5): not yet due under the current period.
    NotDue,
    /// Stale (behaviour §B51.4.1 step 6): the scheduling user is gone.
    UserNotFound,
    /// Failed, retryable (behaviour §B51.4.1 step 7): the user is not active.
    UserNotActive,
    /// Permission lost (behaviour §B51.4.1 step 8): the group was restored.
    Restored,
    /// The budget or the deadline ran out: the message was re-sent.
    Continuing,
    /// The schedule went away or changed during the destroy: stopped.
    #[serde(rename = "not_scheduled")]
    Unscheduled,
    /// Rows only GitLab's services can delete refer to the group, or a pass deleted
    /// nothing and the group is still there.
    Blocked,
    /// Projects wait for their container repositories to leave the registry
    /// (`storage-cleanup`): the message was re-sent with a delay.
    WaitingForRegistry,
    /// The group itself is gone.
    Destroyed,
}

impl Outcome {
    /// The decision on the group and its rule (the `outcome` names), once the message
    /// ended; `None` while it goes on.
    pub(super) fn decision(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Outcome::Continuing | Outcome::WaitingForRegistry => return None,
            Outcome::Destroyed => ("destroyed", "destroyed"),
            Outcome::Restored => ("restored", "permission_lost"),
            Outcome::Blocked => ("blocked", "blocked"),
            Outcome::UserNotActive => ("failed", "user_not_active"),
            Outcome::GroupNotFound => ("kept", "group_not_found"),
            Outcome::NotScheduled | Outcome::Unscheduled => ("kept", "not_scheduled"),
            Outcome::UserChanged => ("kept", "user_changed"),
            Outcome::NotDue => ("kept", "not_due"),
            Outcome::UserNotFound => ("kept", "user_not_found"),
        })
    }

    /// Whether the destruction had started (the deletion metrics are then emitted).
    fn destroying(self) -> bool {
        matches!(
            self,
            Outcome::Continuing
                | Outcome::WaitingForRegistry
                | Outcome::Unscheduled
                | Outcome::Blocked
                | Outcome::Destroyed
        )
    }
}

/// The `done` result of a message that got the per-group try-lock.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GroupDestroyDone {
    /// The group of the message.
    pub group_id: i64,
    /// The scheduling user of the message.
    pub user_id: i64,
    /// How it ended.
    pub outcome: Outcome,
    /// What this invocation deleted.
    #[serde(flatten)]
    pub deleted: Deleted,
}

impl GroupDestroyDone {
    /// The result of message `p` ending as `outcome` after deleting `deleted`.
    pub fn new(p: &GroupDestroyRun, outcome: Outcome, deleted: Deleted) -> Self {
        GroupDestroyDone {
            group_id: p.group_id,
            user_id: p.user_id,
            outcome,
            deleted,
        }
    }
}

impl Done for GroupDestroyDone {
    fn status(&self) -> Status {
        match self.outcome {
            Outcome::GroupNotFound
            | Outcome::NotScheduled
            | Outcome::UserChanged
            | Outcome::NotDue
            | Outcome::UserNotFound
            | Outcome::Unscheduled => Status::Stale,
            Outcome::UserNotActive => Status::Failed,
            Outcome::Restored => Status::Restored,
            Outcome::Continuing | Outcome::WaitingForRegistry => Status::LimitReached,
            Outcome::Blocked => Status::Blocked,
            Outcome::Destroyed => Status::Completed,
        }
    }
    fn metrics(&self) -> Vec<(Metric, f64)> {
        let blocked = if self.outcome == Outcome::Blocked {
            1.0
        } else {
            0.0
        };
        let mut m = vec![
            (metrics::GROUPS_BLOCKED, blocked),
            (metrics::BLOCKING_ROWS, self.deleted.blocking_rows as f64),
        ];
        if self.outcome.destroying() {
            m.push((metrics::PROJECTS_DELETED, self.deleted.projects as f64));
            m.push((metrics::GROUPS_DELETED, self.deleted.groups as f64));
            m.push((
                metrics::STORAGE_ITEMS_SENT,
                self.deleted.storage_sent as f64,
            ));
            m.push((
                metrics::STORAGE_ITEMS_LEFT,
                self.deleted.storage_left as f64,
            ));
        }
        m
    }
}

/// The `skipped` result when another invocation holds the group's try-lock.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct GroupDestroyLocked {
    /// The group of the message.
    pub group_id: i64,
    /// Always `locked`.
    outcome: &'static str,
}

impl GroupDestroyLocked {
    /// The result for group `group_id`.
    pub fn new(group_id: i64) -> Self {
        GroupDestroyLocked {
            group_id,
            outcome: "locked",
        }
    }
}

impl Done for GroupDestroyLocked {
    fn status(&self) -> Status {
        Status::Skipped
    }
}
