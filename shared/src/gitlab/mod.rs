//! GitLab's domain rules over the schema subset (behaviour §1–§5), shared by every
//! batch: hierarchy, permissions, the `project_authorizations` refresh, membership
//! removal, user removal, `blockers`, `storage`, `notifications`, the release gate. Everything here runs inside the
//! caller's transaction and never commits; each rule module keeps its statements in its
//! own `sql` submodule.

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
