//! The catalogue of Lambda functions (behaviour §R3, §9.8, §9.12).
//!
//! Owns: [`Function`], its name (= Cargo package, binary and SAM resource stem), the
//! message types it accepts, its timeout, hop limit and queue environment variable.
//! Owns also the table every per-function list is built from (`with_functions!`):
//! adding a function is a row there (CONTRIBUTING.md).

use std::fmt;
use std::time::Duration;

/// The table of every function, one row each: its job (`layer::module::Type`, the
/// module declared from this row in `batches` or `workers`), GitLab class, the message
/// types it accepts, cron, timeout, hop limit, the delay of a message sent to it, the
/// back-off schedule of its re-sends (`job::Step::Backoff`: one re-send per entry, so
/// its length is the hop limit), whether its runs count item failures (the `failed`
/// and `items` metrics and their alarms), the functions it sends to, and what its deployment
/// needs (batch size, single flight, [`Needs`]). `infra/template.yaml`'s per-function
/// resources and the contract's function table (behaviour §R3) are generated from
/// these rows (infra/gen, CONTRIBUTING.md).
/// `with_functions!(m)` hands the whole table to macro `m`: [`Function`] is built
/// here; the modules of `batches` and `workers`, and `handlers` (re-exports, the sum
/// `Message` of every job's payload type, `Dispatch`) from the same rows (the job
/// paths resolve where those modules expand them).
macro_rules! with_functions {
    ($m:ident $($arg:ident)?) => {
        $m! {
            $($arg)?
            /// B38 cron batch.
            RemoveExpiredMembers = "remove-expired-members" {
                job: batches::remove_expired_members::RemoveExpiredMembers,
                class: "RemoveExpiredMembersWorker",
                messages: ["remove-expired-members.run"],
                cron: Some("cron(10 0 * * ? *)"),
                timeout_s: 600,
                max_hops: 10_000,
                delay_s: 0,
                backoff_s: [],
                item_failures: true,
                sends_to: [RemoveExpiredMembers, DeleteUser, DeliverNotification],
                batch_size: 1,
                single_flight: true,
                needs: [],
            }
            /// Phase 2 of user removal (behaviour §5.2).
            DeleteUser = "delete-user" {
                job: workers::delete_user::DeleteUser,
                class: "DeleteUserWorker",
                messages: ["delete-user.run"],
                cron: None,
                timeout_s: 900,
                max_hops: 1000,
                delay_s: 30,
                backoff_s: [],
                item_failures: false,
                sends_to: [DeleteUser, DeliverNotification],
                batch_size: 1,
                single_flight: false,
                needs: [],
            }
            /// B43 cron: enqueues `prune-deletions` when schedules exist (its message is
            /// hop 0).
            SchedulePruneDeletions = "schedule-prune-deletions" {
                job: batches::schedule_prune_deletions::SchedulePruneDeletions,
                class: "Members::SchedulePruneDeletionsWorker",
                messages: ["schedule-prune-deletions.run"],
                cron: Some("cron(0/5 * * * ? *)"),
                timeout_s: 300,
                max_hops: 0,
                delay_s: 0,
                backoff_s: [],
                item_failures: false,
                sends_to: [PruneDeletions],
                batch_size: 1,
                single_flight: true,
                needs: [],
            }
            /// B43 single-flight worker: carries out `members_deletion_schedules`.
            PruneDeletions = "prune-deletions" {
                job: workers::prune_deletions::PruneDeletions,
                class: "Members::PruneDeletionsWorker",
                messages: ["prune-deletions.run"],
                cron: None,
                timeout_s: 120,
                max_hops: 10_000,
                delay_s: 0,
                backoff_s: [],
                item_failures: true,
                sends_to: [PruneDeletions, DeliverNotification],
                batch_size: 1,
                single_flight: true,
                needs: [],
            }
            /// B51 cron batch: destroy or restore groups whose adjourned period is over.
            AdjournedGroupDeletion = "adjourned-group-deletion" {
                job: batches::adjourned_group_deletion::AdjournedGroupDeletion,
                class: "AdjournedGroupDeletionWorker",
                messages: ["adjourned-group-deletion.run"],
                cron: Some("cron(0 2 * * ? *)"),
                timeout_s: 300,
                max_hops: 1000,
                delay_s: 0,
                backoff_s: [],
                item_failures: true,
                sends_to: [AdjournedGroupDeletion, GroupDestroy],
                batch_size: 1,
                single_flight: true,
                needs: [DelaySchedules],
            }
            /// B51 child: destroy one group, depth first, in chunks.
            GroupDestroy = "group-destroy" {
                job: workers::group_destroy::GroupDestroy,
                class: "GroupDestroyWorker",
                messages: ["group-destroy.run"],
                cron: None,
                timeout_s: 900,
                max_hops: 1000,
                delay_s: 0,
                backoff_s: [],
                item_failures: false,
                sends_to: [GroupDestroy, DeleteUser, StorageCleanup, DeliverNotification],
                batch_size: 1,
                single_flight: false,
                needs: [StorageModes],
            }
            /// B51 child: removes one storage item of a destroyed project (a Git
            /// repository through Gitaly, a container repository through the registry,
            /// an object from S3), idempotently; a failure is re-sent once per
            /// `backoff_s` delay (so `max_hops` is its length).
            StorageCleanup = "storage-cleanup" {
                job: workers::storage_cleanup::StorageCleanup,
                class: "Projects::DestroyService",
                messages: ["storage-cleanup.remove"],
                cron: None,
                timeout_s: 300,
                max_hops: 6,
                delay_s: 0,
                backoff_s: [30, 60, 120, 300, 600, 900],
                item_failures: false,
                sends_to: [StorageCleanup],
                batch_size: 10,
                single_flight: false,
                needs: [StorageModes, StorageClients],
            }
            /// B70 cron batch.
            PlaceholderUserCleanup = "placeholder-user-cleanup" {
                job: batches::placeholder_user_cleanup::PlaceholderUserCleanup,
                class: "Import::PlaceholderUserCleanupWorker",
                messages: ["placeholder-user-cleanup.run"],
                cron: Some("cron(0 0 * * ? *)"),
                timeout_s: 300,
                max_hops: 1000,
                delay_s: 0,
                backoff_s: [],
                item_failures: true,
                sends_to: [PlaceholderUserCleanup, DeletePlaceholderUser],
                batch_size: 1,
                single_flight: true,
                needs: [DelaySchedules],
            }
            /// B70 child: deletes one placeholder user (never continues itself).
            DeletePlaceholderUser = "delete-placeholder-user" {
                job: workers::delete_placeholder_user::DeletePlaceholderUser,
                class: "Import::DeletePlaceholderUserWorker",
                messages: ["delete-placeholder-user.run"],
                cron: None,
                timeout_s: 300,
                max_hops: 0,
                delay_s: 0,
                backoff_s: [],
                item_failures: false,
                sends_to: [DeleteUser, DeliverNotification],
                batch_size: 10,
                single_flight: false,
                needs: [],
            }
            /// B28 cron batch: expiring personal and resource access tokens.
            PatExpiring = "pat-expiring" {
                job: batches::pat_expiring::PatExpiring,
                class: "PersonalAccessTokens::ExpiringWorker",
                messages: ["pat-expiring.run"],
                cron: Some("cron(0 1 * * ? *)"),
                timeout_s: 300,
                max_hops: 100,
                delay_s: 0,
                backoff_s: [],
                item_failures: true,
                sends_to: [PatExpiring, DeliverNotification],
                batch_size: 1,
                single_flight: true,
                needs: [GitlabLinks],
            }
            /// B28 child: delivers one email or one web hook (every message is one
            /// delivery).
            DeliverNotification = "deliver-notification" {
                job: workers::deliver_notification::DeliverNotification,
                class: "ActionMailer::MailDeliveryJob",
                messages: [
                    "deliver-notification.email",
                    "deliver-notification.webhook"
                ],
                cron: None,
                timeout_s: 300,
                max_hops: 0,
                delay_s: 0,
                backoff_s: [],
                item_failures: false,
                sends_to: [],
                batch_size: 10,
                single_flight: false,
                needs: [MailAndHooks],
            }
        }
    };
}
pub(crate) use with_functions;

/// Builds [`Function`] and its facts from the table.
macro_rules! functions {
    ($(
        $(#[doc = $doc:literal])*
        $variant:ident = $name:literal {
            job: $layer:ident::$module:ident::$job:ident,
            class: $class:literal,
            messages: [$($kind:literal),+ $(,)?],
            cron: $cron:expr,
            timeout_s: $timeout:literal,
            max_hops: $hops:literal,
            delay_s: $delay:literal,
            backoff_s: [$($backoff:literal),*],
            item_failures: $items:literal,
            sends_to: [$($to:ident),*],
            batch_size: $batch:literal,
            single_flight: $single:literal,
            needs: [$($need:ident),*],
        }
    )*) => {
        // A back-off schedule is one re-send per entry: the hop limit is its length.
        $(const _: () = assert!(
            <[u32]>::len(&[$($backoff),*]) == 0
                || <[u32]>::len(&[$($backoff),*]) as u32 == $hops,
            concat!($name, ": max_hops must be the length of backoff_s")
        );)*

        /// A function of the bundle. Only implemented functions are listed.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Function {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Function {
            /// Every implemented function.
            pub const ALL: &'static [Function] = &[$(Function::$variant),*];

            /// The row's doc comment, its lines joined by spaces (its first sentence
            /// is the function's role in behaviour §R3).
            pub fn doc(self) -> &'static str {
                match self { $(Function::$variant => concat!($($doc),*),)* }
            }

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

            /// The delay of a message sent to this function, in seconds (behaviour
            /// §9.5: `delete-user` waits `DELETE_USER_DELAY_S`); a sender may stagger
            /// its messages later ([`crate::queue::OutMessage::after`]).
            pub const fn delay_s(self) -> u32 {
                match self { $(Function::$variant => $delay,)* }
            }

            /// The delays of this function's re-sends after a failure, one per hop
            /// (`job::Step::Backoff`); empty for a function that does not re-send.
            pub const fn backoff_s(self) -> &'static [u32] {
                match self { $(Function::$variant => &[$($backoff),*],)* }
            }

            /// Whether its runs count items failing inside a run (a per-item failure
            /// counter in its `Done`): it then emits `metrics::FAILED` and
            /// `metrics::ITEMS` on every record it completes, and its template has the
            /// `ItemFailures` and `AllItemsFailed` alarms.
            pub const fn counts_item_failures(self) -> bool {
                match self { $(Function::$variant => $items,)* }
            }

            /// The functions whose queues this function sends to (its least-privilege
            /// set).
            pub fn sends_to(self) -> &'static [Function] {
                match self { $(Function::$variant => &[$(Function::$to),*],)* }
            }

            /// The event-source mapping's batch size (behaviour §9.12): 1 for a run
            /// that fills its invocation, 10 for one short item per message.
            pub fn batch_size(self) -> u32 {
                match self { $(Function::$variant => $batch,)* }
            }

            /// Runs one at a time under an overlap lock (behaviour §9.4): the
            /// mapping's maximum concurrency is then 2, the lock serializes.
            pub fn single_flight(self) -> bool {
                match self { $(Function::$variant => $single,)* }
            }

            /// What the function reads beyond the database and its queues: each
            /// [`Needs`] brings its template parameters and IAM (infra/gen).
            pub fn needs(self) -> &'static [Needs] {
                match self { $(Function::$variant => &[$(Needs::$need),*],)* }
            }
        }
    };
}

with_functions!(functions);

/// Declares the modules of the functions of one layer: `with_functions!(modules
/// batches)` in `batches/mod.rs` is `pub mod <module>;` for every row whose job is
/// `batches::<module>::…` (likewise `workers`), so a function's module is declared by
/// its row.
macro_rules! modules {
    ($here:ident $($(#[$doc:meta])* $f:ident = $n:literal {
        job: $layer:ident::$module:ident::$job:ident, $($rest:tt)*
    })*) => {
        $(crate::function::module_of!($here $layer $module);)*
    };
}
pub(crate) use modules;

/// `pub mod $module;` when the row's layer is the layer being declared.
macro_rules! module_of {
    (batches batches $module:ident) => {
        pub mod $module;
    };
    (workers workers $module:ident) => {
        pub mod $module;
    };
    ($here:ident $layer:ident $module:ident) => {};
}
pub(crate) use module_of;

/// A group of settings a function reads beyond the database, its queues and Globals:
/// each brings its environment variables (template parameters) and IAM statements to
/// the function's resource in `infra/template.yaml` (rendered by infra/gen).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Needs {
    /// One-time EventBridge Scheduler schedules for delays over 900 s (behaviour
    /// §9.5): the group, the role to pass, the queue and DLQ ARNs of what it sends.
    DelaySchedules,
    /// The storage modes (`STORAGE_GITALY`, `STORAGE_REGISTRY`, `STORAGE_OBJECTS`).
    StorageModes,
    /// The storage clients (docs/storage-cleanup.md): Gitaly, the registry, the
    /// object storage buckets, their secrets and bucket permissions.
    StorageClients,
    /// Links into GitLab for notices (`GITLAB_BASE_URL`, `GITLAB_SSH_URL_PREFIX`).
    GitlabLinks,
    /// Mail over SMTP and web hooks: the SMTP settings and secret, `db_key_base`.
    MailAndHooks,
}

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
        if self == Function::DeliverNotification && message_type == Function::webhook_kind() {
            "WebHookWorker"
        } else {
            self.gitlab_class()
        }
    }

    /// `deliver-notification`'s mail message type: its row's first.
    pub fn email_kind() -> &'static str {
        Function::DeliverNotification.accepts()[0]
    }

    /// `deliver-notification`'s web-hook message type: its row's second.
    pub fn webhook_kind() -> &'static str {
        Function::DeliverNotification.accepts()[1]
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
