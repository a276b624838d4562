//! GitLab's domain rules over the schema subset (behaviour §1–§5), shared by every
//! batch: hierarchy, permissions, the `project_authorizations` refresh, membership
//! removal, user removal, `blockers`, `storage`, `notifications`, the release gate. Everything here runs inside the
//! caller's transaction and never commits; each rule module keeps its statements in its
//! own `sql` submodule. What a rule asks of another function is an [`Intent`], never a
//! queue message: the caller's job sends it (`workers`).

use serde::Serialize;

pub mod authz;
pub mod blockers;
pub mod deletion_model;
pub mod group_deletion;
pub mod hierarchy;
pub mod membership;
pub mod notifications;
pub mod permissions;
pub mod release;
pub mod side_effects;
pub mod storage;
pub mod system_hooks;
pub mod user_removal;

/// What a GitLab rule asks another function to do, returned to the caller (this module
/// builds no queue message and knows no payload type): its job turns each into the
/// receiver's message (`Intent::message`, in `workers`) and sends it before its COMMIT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Intent {
    /// Phase 2 of a user's removal (`delete-user`).
    DeleteUser(UserDeletion),
    /// One claimed system or group hook to deliver (`deliver-notification`).
    DeliverHook(HookDelivery),
}

/// Phase 2 of a user's removal, asked for by phase 1: `delete-user`'s message (its key
/// `delete-user:<user_id>`, behaviour §9.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDeletion {
    /// The user to delete.
    pub user_id: i64,
    /// Who started the removal, if anyone.
    pub initiator_user_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}

/// A claimed hook: deliver `body` to web hook `hook_id` once the row `subject` reports
/// removed is gone (`deliver-notification`'s web-hook message; its key is the event
/// key plus `:hook:<hook_id>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookDelivery {
    /// `web_hooks.id`.
    pub hook_id: i64,
    /// The event key ([`system_hooks::event_key`], or a group hook's), the same for
    /// every attempt.
    pub event_key: String,
    /// The body, serialized in GitLab's key order, sent as is.
    pub body: String,
    /// The row the hook reports removed.
    pub subject: SystemHookSubject,
}

/// The row a system hook reports removed: `table` (`members`, `namespaces`,
/// `projects` or `users`) and `id`; for an EE group hook of the same removal, its
/// trigger (`group_hook`: `member_hooks`, `subgroup_hooks` or `project_hooks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SystemHookSubject {
    /// The table: one of [`SystemHookSubject::TABLES`].
    pub table: String,
    /// The row's id.
    pub id: i64,
    /// An EE group hook's trigger, one of [`SystemHookSubject::GROUP_TRIGGERS`];
    /// absent for a system hook.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_hook: Option<String>,
}

impl SystemHookSubject {
    /// The tables a system hook's subject may be in.
    pub const TABLES: [&'static str; 4] = ["members", "namespaces", "projects", "users"];
    /// The group-hook triggers a removal fires (GitLab's `TriggerableHooks` scopes).
    pub const GROUP_TRIGGERS: [&'static str; 3] =
        ["member_hooks", "subgroup_hooks", "project_hooks"];
}

/// Access levels (behaviour §1.1).
pub mod access {
    /// GUEST: the lowest level that grants project access.
    pub const GUEST: i32 = 10;
    /// MAINTAINER.
    pub const MAINTAINER: i32 = 40;
    /// OWNER.
    pub const OWNER: i32 = 50;
}

/// User types (behaviour §1.2).
pub mod user_type {
    /// A human.
    pub const HUMAN: i16 = 0;
    /// The ghost user.
    pub const GHOST: i16 = 5;
    /// A project or group bot.
    pub const PROJECT_BOT: i16 = 6;
    /// An import placeholder.
    pub const PLACEHOLDER: i16 = 15;
}
