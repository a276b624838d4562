//! The catalogue of Lambda functions (behaviour §R3, §9.8, §9.12).
//!
//! Owns: [`Function`], its name (= Cargo package, binary and SAM resource stem), the
//! message types it accepts, its timeout, hop limit and queue environment variable.
//! Owns also the table every per-function list is built from (`with_functions!`):
//! adding a function is a row there (CONTRIBUTING.md).

use std::fmt;
use std::time::Duration;

/// The table of every function, one row each: its name, GitLab class, the messages it
/// accepts (`Variant(payload type) = "type"`), cron, timeout, hop limit, the functions
/// it sends to, and its job. `with_functions!(m)` hands the whole table to macro `m`:
/// [`Function`] is built here, `messages::Message` and `handlers` from the same rows
/// (the payload and job names resolve where those modules expand them).
macro_rules! with_functions {
    ($m:ident) => {
        $m! {
            /// B38 cron batch.
            RemoveExpiredMembers = "remove-expired-members" {
                class: "RemoveExpiredMembersWorker",
                messages: [RemoveExpiredMembers(RemoveExpiredMembersRun) = "remove-expired-members.run"],
                cron: Some("cron(10 0 * * ? *)"),
                timeout_s: 600,
                max_hops: 10_000,
                sends_to: [RemoveExpiredMembers, DeleteUser],
                job: batches::remove_expired_members::RemoveExpiredMembers,
            }
            /// Phase 2 of user removal (behaviour §5.2).
            DeleteUser = "delete-user" {
                class: "DeleteUserWorker",
                messages: [DeleteUser(DeleteUserRun) = "delete-user.run"],
                cron: None,
                timeout_s: 900,
                max_hops: 1000,
                sends_to: [DeleteUser],
                job: workers::delete_user::DeleteUser,
            }
            /// B43 cron: enqueues `prune-deletions` when schedules exist (its message is
            /// hop 0).
            SchedulePruneDeletions = "schedule-prune-deletions" {
                class: "Members::SchedulePruneDeletionsWorker",
                messages: [SchedulePruneDeletions(SchedulePruneDeletionsRun) = "schedule-prune-deletions.run"],
                cron: Some("cron(0/5 * * * ? *)"),
                timeout_s: 300,
                max_hops: 0,
                sends_to: [PruneDeletions],
                job: batches::schedule_prune_deletions::SchedulePruneDeletions,
            }
            /// B43 single-flight worker: carries out `members_deletion_schedules`.
            PruneDeletions = "prune-deletions" {
                class: "Members::PruneDeletionsWorker",
                messages: [PruneDeletions(PruneDeletionsRun) = "prune-deletions.run"],
                cron: None,
                timeout_s: 120,
                max_hops: 10_000,
                sends_to: [PruneDeletions],
                job: workers::prune_deletions::PruneDeletions,
            }
            /// B51 cron batch: destroy or restore groups whose adjourned period is over.
            AdjournedGroupDeletion = "adjourned-group-deletion" {
                class: "AdjournedGroupDeletionWorker",
                messages: [AdjournedGroupDeletion(AdjournedGroupDeletionRun) = "adjourned-group-deletion.run"],
                cron: Some("cron(0 2 * * ? *)"),
                timeout_s: 300,
                max_hops: 1000,
                sends_to: [AdjournedGroupDeletion, GroupDestroy],
                job: batches::adjourned_group_deletion::AdjournedGroupDeletion,
            }
            /// B51 child: destroy one group, depth first, in chunks.
            GroupDestroy = "group-destroy" {
                class: "GroupDestroyWorker",
                messages: [GroupDestroy(GroupDestroyRun) = "group-destroy.run"],
                cron: None,
                timeout_s: 900,
                max_hops: 1000,
                sends_to: [GroupDestroy, DeleteUser],
                job: workers::group_destroy::GroupDestroy,
            }
            /// B70 cron batch.
            PlaceholderUserCleanup = "placeholder-user-cleanup" {
                class: "Import::PlaceholderUserCleanupWorker",
                messages: [PlaceholderUserCleanup(PlaceholderUserCleanupRun) = "placeholder-user-cleanup.run"],
                cron: Some("cron(0 0 * * ? *)"),
                timeout_s: 300,
                max_hops: 1000,
                sends_to: [PlaceholderUserCleanup, DeletePlaceholderUser],
                job: batches::placeholder_user_cleanup::PlaceholderUserCleanup,
            }
            /// B70 child: deletes one placeholder user (never continues itself).
            DeletePlaceholderUser = "delete-placeholder-user" {
                class: "Import::DeletePlaceholderUserWorker",
                messages: [DeletePlaceholderUser(DeletePlaceholderUserRun) = "delete-placeholder-user.run"],
                cron: None,
                timeout_s: 300,
                max_hops: 0,
                sends_to: [DeleteUser],
                job: workers::delete_placeholder_user::DeletePlaceholderUser,
            }
            /// B28 cron batch: expiring personal and resource access tokens.
            PatExpiring = "pat-expiring" {
                class: "PersonalAccessTokens::ExpiringWorker",
                messages: [PatExpiring(PatExpiringRun) = "pat-expiring.run"],
                cron: Some("cron(0 1 * * ? *)"),
                timeout_s: 300,
                max_hops: 100,
                sends_to: [PatExpiring, DeliverNotification],
                job: batches::pat_expiring::PatExpiring,
            }
            /// B28 child: delivers one email or one web hook (every message is one
            /// delivery).
            DeliverNotification = "deliver-notification" {
                class: "ActionMailer::MailDeliveryJob",
                messages: [
                    Email(EmailNotification) = "deliver-notification.email",
                    Webhook(WebhookNotification) = "deliver-notification.webhook"
                ],
                cron: None,
                timeout_s: 300,
                max_hops: 0,
                sends_to: [],
                job: workers::deliver_notification::DeliverNotification,
            }
        }
    };
}
pub(crate) use with_functions;

/// Builds [`Function`] and its facts from the table.
macro_rules! functions {
    ($(
        $(#[$doc:meta])*
        $variant:ident = $name:literal {
            class: $class:literal,
            messages: [$($message:ident($payload:ty) = $kind:literal),+ $(,)?],
            cron: $cron:expr,
            timeout_s: $timeout:literal,
            max_hops: $hops:literal,
            sends_to: [$($to:ident),*],
            job: $($job:ident)::+,
        }
    )*) => {
        /// A function of the bundle. Only implemented functions are listed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Function {
            $($(#[$doc])* $variant,)*
        }

        impl Function {
            /// Every implemented function.
            pub const ALL: &'static [Function] = &[$(Function::$variant),*];

            /// The function name, e.g. `remove-expired-members`.
            pub fn name(self) -> &'static str {
                match self { $(Function::$variant => $name,)* }
            }

            /// The message types this function accepts (behaviour §9.2).
            pub fn accepts(self) -> &'static [&'static str] {
                match self { $(Function::$variant => &[$($kind),+],)* }
            }

            /// The GitLab Sidekiq worker class this function replaces: the `class`
            /// field of its log lines, so the searches operators keep for Sidekiq logs
            /// find them. `deliver-notification` replaces two: see
            /// [`Function::gitlab_class_for`].
            pub fn gitlab_class(self) -> &'static str {
                match self { $(Function::$variant => $class,)* }
            }

            /// The EventBridge Scheduler cron that starts this function, if any
            /// (behaviour §9.7).
            pub fn cron(self) -> Option<&'static str> {
                match self { $(Function::$variant => $cron,)* }
            }

            /// The recommended Lambda timeout (behaviour §9.12); `hk` measures the
            /// deadline guard against it.
            pub fn timeout(self) -> Duration {
                match self { $(Function::$variant => Duration::from_secs($timeout),)* }
            }

            /// `MAX_HOPS` (behaviour §9.8): 0 for a function that never continues.
            pub fn max_hops(self) -> u32 {
                match self { $(Function::$variant => $hops,)* }
            }

            /// The functions whose queues this function sends to (its least-privilege
            /// set).
            pub fn sends_to(self) -> &'static [Function] {
                match self { $(Function::$variant => &[$(Function::$to),*],)* }
            }
        }
    };
}

with_functions!(functions);

impl Function {
    /// Parse a function name.
    pub fn from_name(name: &str) -> Option<Function> {
        Function::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// The function that receives a message type.
    pub fn receiver_of(message_type: &str) -> Option<Function> {
        Function::ALL
            .iter()
            .copied()
            .find(|f| f.accepts().contains(&message_type))
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

    /// Environment-variable suffix, e.g. `DELETE_USER` for `QUEUE_URL_DELETE_USER`.
    pub fn env_suffix(self) -> String {
        self.name().to_ascii_uppercase().replace('-', "_")
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
