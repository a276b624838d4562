//! The catalogue of Lambda functions (behaviour §R3, §9.8, §9.12).
//!
//! Owns: [`Function`], its name (= Cargo package, binary and SAM resource stem), the
//! message types it accepts, its timeout, hop limit and queue environment variable.
//! Adding a function means adding a variant here and a line in `handlers!` (`crate::handlers`).

use std::fmt;
use std::time::Duration;

/// A function of the bundle. Only implemented functions are listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Function {
    /// B38 cron batch.
    RemoveExpiredMembers,
    /// Phase 2 of user removal (behaviour §5.2).
    DeleteUser,
    /// B43 cron: enqueues `prune-deletions` when schedules exist.
    SchedulePruneDeletions,
    /// B43 single-flight worker: carries out `members_deletion_schedules`.
    PruneDeletions,
    /// B51 cron batch: destroy or restore groups whose adjourned period is over.
    AdjournedGroupDeletion,
    /// B51 child: destroy one group, depth first, in chunks.
    GroupDestroy,
    /// B70 cron batch.
    PlaceholderUserCleanup,
    /// B70 child: deletes one placeholder user.
    DeletePlaceholderUser,
    /// B28 cron batch: expiring personal and resource access tokens.
    PatExpiring,
    /// B28 child: delivers one email or one web hook.
    DeliverNotification,
}

impl Function {
    /// Every implemented function.
    pub const ALL: &'static [Function] = &[
        Function::RemoveExpiredMembers,
        Function::DeleteUser,
        Function::SchedulePruneDeletions,
        Function::PruneDeletions,
        Function::AdjournedGroupDeletion,
        Function::GroupDestroy,
        Function::PlaceholderUserCleanup,
        Function::DeletePlaceholderUser,
        Function::PatExpiring,
        Function::DeliverNotification,
    ];

    /// The function name, e.g. `remove-expired-members`.
    pub fn name(self) -> &'static str {
        match self {
            Function::RemoveExpiredMembers => "remove-expired-members",
            Function::DeleteUser => "delete-user",
            Function::SchedulePruneDeletions => "schedule-prune-deletions",
            Function::PruneDeletions => "prune-deletions",
            Function::AdjournedGroupDeletion => "adjourned-group-deletion",
            Function::GroupDestroy => "group-destroy",
            Function::PlaceholderUserCleanup => "placeholder-user-cleanup",
            Function::DeletePlaceholderUser => "delete-placeholder-user",
            Function::PatExpiring => "pat-expiring",
            Function::DeliverNotification => "deliver-notification",
        }
    }

    /// Parse a function name.
    pub fn from_name(name: &str) -> Option<Function> {
        Function::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The message types this function accepts (behaviour §9.2).
    pub fn accepts(self) -> &'static [&'static str] {
        match self {
            Function::RemoveExpiredMembers => &["remove-expired-members.run"],
            Function::DeleteUser => &["delete-user.run"],
            Function::SchedulePruneDeletions => &["schedule-prune-deletions.run"],
            Function::PruneDeletions => &["prune-deletions.run"],
            Function::AdjournedGroupDeletion => &["adjourned-group-deletion.run"],
            Function::GroupDestroy => &["group-destroy.run"],
            Function::PlaceholderUserCleanup => &["placeholder-user-cleanup.run"],
            Function::DeletePlaceholderUser => &["delete-placeholder-user.run"],
            Function::PatExpiring => &["pat-expiring.run"],
            Function::DeliverNotification => {
                &["deliver-notification.email", "deliver-notification.webhook"]
            }
        }
    }

    /// The function that receives a message type.
    pub fn receiver_of(message_type: &str) -> Option<Function> {
        Function::ALL
            .iter()
            .copied()
            .find(|f| f.accepts().contains(&message_type))
    }

    /// The GitLab Sidekiq worker class this function replaces: the `class` field of
    /// its log lines, so the searches operators keep for Sidekiq logs find them.
    /// `deliver-notification` replaces two: see [`Function::gitlab_class_for`].
    pub fn gitlab_class(self) -> &'static str {
        match self {
            Function::RemoveExpiredMembers => "RemoveExpiredMembersWorker",
            Function::DeleteUser => "DeleteUserWorker",
            Function::SchedulePruneDeletions => "Members::SchedulePruneDeletionsWorker",
            Function::PruneDeletions => "Members::PruneDeletionsWorker",
            Function::AdjournedGroupDeletion => "AdjournedGroupDeletionWorker",
            Function::GroupDestroy => "GroupDestroyWorker",
            Function::PlaceholderUserCleanup => "Import::PlaceholderUserCleanupWorker",
            Function::DeletePlaceholderUser => "Import::DeletePlaceholderUserWorker",
            Function::PatExpiring => "PersonalAccessTokens::ExpiringWorker",
            Function::DeliverNotification => "ActionMailer::MailDeliveryJob",
        }
    }

    /// The GitLab class of one message type: a web hook is GitLab's `WebHookWorker`,
    /// anything else the function's [`Function::gitlab_class`].
    pub fn gitlab_class_for(self, message_type: &str) -> &'static str {
        if message_type == "deliver-notification.webhook" {
            "WebHookWorker"
        } else {
            self.gitlab_class()
        }
    }

    /// Whether an EventBridge Scheduler cron starts this function (behaviour §9.7).
    pub fn cron(self) -> Option<&'static str> {
        match self {
            Function::RemoveExpiredMembers => Some("cron(10 0 * * ? *)"),
            Function::DeleteUser => None,
            Function::SchedulePruneDeletions => Some("cron(0/5 * * * ? *)"),
            Function::PruneDeletions => None,
            Function::AdjournedGroupDeletion => Some("cron(0 2 * * ? *)"),
            Function::GroupDestroy => None,
            Function::PlaceholderUserCleanup => Some("cron(0 0 * * ? *)"),
            Function::DeletePlaceholderUser => None,
            Function::PatExpiring => Some("cron(0 1 * * ? *)"),
            Function::DeliverNotification => None,
        }
    }

    /// The recommended Lambda timeout (behaviour §9.12); `hk` measures the deadline
    /// guard against it.
    pub fn timeout(self) -> Duration {
        match self {
            Function::RemoveExpiredMembers => Duration::from_secs(600),
            Function::DeleteUser => Duration::from_secs(900),
            Function::SchedulePruneDeletions => Duration::from_secs(300),
            Function::PruneDeletions => Duration::from_secs(120),
            Function::AdjournedGroupDeletion => Duration::from_secs(300),
            Function::GroupDestroy => Duration::from_secs(900),
            Function::PlaceholderUserCleanup => Duration::from_secs(300),
            Function::DeletePlaceholderUser => Duration::from_secs(300),
            Function::PatExpiring | Function::DeliverNotification => Duration::from_secs(300),
        }
    }

    /// `MAX_HOPS` (behaviour §9.8).
    pub fn max_hops(self) -> u32 {
        match self {
            Function::RemoveExpiredMembers => 10_000,
            Function::DeleteUser => 1000,
            // Sends no continuation of its own (its message to prune-deletions is hop 0).
            Function::SchedulePruneDeletions => 0,
            Function::PruneDeletions => 10_000,
            Function::AdjournedGroupDeletion => 1000,
            Function::GroupDestroy => 1000,
            Function::PlaceholderUserCleanup => 1000,
            // Never sends itself a continuation.
            Function::DeletePlaceholderUser => 0,
            Function::PatExpiring => 100,
            // Never continues itself: every message is one delivery.
            Function::DeliverNotification => 0,
        }
    }

    /// Environment-variable suffix, e.g. `DELETE_USER` for `QUEUE_URL_DELETE_USER`.
    pub fn env_suffix(self) -> String {
        self.name().to_ascii_uppercase().replace('-', "_")
    }

    /// The functions whose queues this function sends to (its least-privilege set).
    pub fn sends_to(self) -> &'static [Function] {
        match self {
            Function::RemoveExpiredMembers => {
                &[Function::RemoveExpiredMembers, Function::DeleteUser]
            }
            Function::DeleteUser => &[Function::DeleteUser],
            Function::SchedulePruneDeletions => &[Function::PruneDeletions],
            Function::PruneDeletions => &[Function::PruneDeletions],
            Function::AdjournedGroupDeletion => {
                &[Function::AdjournedGroupDeletion, Function::GroupDestroy]
            }
            Function::GroupDestroy => &[Function::GroupDestroy, Function::DeleteUser],
            Function::PlaceholderUserCleanup => &[
                Function::PlaceholderUserCleanup,
                Function::DeletePlaceholderUser,
            ],
            Function::DeletePlaceholderUser => &[Function::DeleteUser],
            Function::PatExpiring => &[Function::PatExpiring, Function::DeliverNotification],
            Function::DeliverNotification => &[],
        }
    }

    /// The message type of this function's cron or run message (`<name>.run`).
    pub fn run_type(self) -> &'static str {
        self.accepts()[0]
    }
}

impl fmt::Display for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_types_route_to_one_receiver() {
        for f in Function::ALL {
            assert_eq!(Function::from_name(f.name()), Some(*f));
            for t in f.accepts() {
                assert_eq!(Function::receiver_of(t), Some(*f));
            }
        }
        assert_eq!(Function::DeleteUser.env_suffix(), "DELETE_USER");
    }
}
