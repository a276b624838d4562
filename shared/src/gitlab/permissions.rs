//! Permission predicates (behaviour §2): access levels from memberships (§2.2), the
//! rules of §2.3, authorized member removal `can_remove_member` (§2.4), the last-owner
//! rule `owner_protected` (§2.5) and `sole_owned_groups` (§2.6).
//!
//! Counted owners are active, non-bot `access_level = 50` group members (§D7); an owner
//! row of a non-bot user is protected whatever the user's state while no other counted
//! owner remains, and a project bot's membership is never removed through
//! `can_remove_member` (docs/gitlab-differences.md). The statements are in [`sql`].

use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::gitlab::membership::Member;
use crate::gitlab::{access, hierarchy, user_type};
use crate::locks;

pub mod sql;

/// The facts about a user that the permission rules read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Actor {
    /// users.id
    pub id: i64,
    /// `state = 'active'` (NULL or anything else is not active).
    pub active: bool,
    /// `users.admin`.
    pub admin: bool,
    /// `users.user_type`.
    pub user_type: i16,
}

impl Actor {
    /// `is_admin(u)`: admin and active.
    pub fn is_admin(&self) -> bool {
        self.admin && self.active
    }

    /// `is_project_bot(u)`.
    pub fn is_project_bot(&self) -> bool {
        self.user_type == user_type::PROJECT_BOT
    }
}

/// Load a user's permission facts; `None` when the user does not exist.
pub async fn load_actor<C: GenericClient>(c: &C, user_id: i64) -> Result<Option<Actor>> {
    let row = c.query_opt(sql::LOAD_ACTOR, &[&user_id]).await?;
    Ok(row.map(|r| Actor {
        id: r.get(0),
        active: r.get(1),
        admin: r.get(2),
        user_type: r.get(3),
    }))
}

/// `group_access(u, g)` (behaviour §2.2): the highest access-granting group membership of u over
/// g and its ancestors; 0 when none (or when g does not exist).
pub async fn group_access<C: GenericClient>(c: &C, user_id: i64, group_id: i64) -> Result<i32> {
    let row = c
        .query_one(sql::GROUP_ACCESS, &[&user_id, &group_id])
        .await?;
    Ok(row.get(0))
}

/// `project_access(u, p)` (behaviour §2.2); 0 when none (or when p does not exist).
pub async fn project_access<C: GenericClient>(c: &C, user_id: i64, project_id: i64) -> Result<i32> {
    let row = c
        .query_opt(sql::PROJECT_ACCESS, &[&user_id, &vec![project_id]])
        .await?;
    Ok(row.map(|r| r.get(0)).unwrap_or(0))
}

/// `owner(u, g)` (behaviour §2.3): active and `group_access >= 50`.
pub async fn owner<C: GenericClient>(c: &C, u: &Actor, group_id: i64) -> Result<bool> {
    Ok(u.active && group_access(c, u.id, group_id).await? >= access::OWNER)
}

/// `remove_group(u, g)` = `admin_group_member(u, g)` = `is_admin(u) OR owner(u, g)`.
pub async fn remove_group<C: GenericClient>(c: &C, u: &Actor, group_id: i64) -> Result<bool> {
    Ok(u.is_admin() || owner(c, u, group_id).await?)
}

/// `admin_group_member(u, g)` (behaviour §2.3).
pub async fn admin_group_member<C: GenericClient>(c: &C, u: &Actor, group_id: i64) -> Result<bool> {
    remove_group(c, u, group_id).await
}

/// `admin_project_member(u, p)`: admin, or active with `project_access >= 40`.
pub async fn admin_project_member<C: GenericClient>(
    c: &C,
    u: &Actor,
    project_id: i64,
) -> Result<bool> {
    Ok(u.is_admin()
        || (u.active && project_access(c, u.id, project_id).await? >= access::MAINTAINER))
}

/// `project_owner(u, p)`: admin, or active with `project_access >= 50`.
pub async fn project_owner<C: GenericClient>(c: &C, u: &Actor, project_id: i64) -> Result<bool> {
    Ok(u.is_admin() || (u.active && project_access(c, u.id, project_id).await? >= access::OWNER))
}

/// Why `can_remove_member` denies (behaviour §2.4); [`Denial::code`] is the log's `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Rule 1.
    ActorInactive,
    /// Rule 2 for a group membership (even for admins).
    ProjectBotGroupMember,
    /// Rule 2 for a project membership (even for admins).
    ProjectBotProjectMember,
    /// Rules 3 and 5.
    NotAuthorized,
    /// Rule 4.
    LastOwner,
    /// Rule 6.
    OwnerRequired,
}

impl Denial {
    /// The reason code of behaviour §2.4.
    pub fn code(self) -> &'static str {
        match self {
            Denial::ActorInactive => "actor_inactive",
            Denial::ProjectBotGroupMember => "project_bot_group_member",
            Denial::ProjectBotProjectMember => "project_bot_project_member",
            Denial::NotAuthorized => "not_authorized",
            Denial::LastOwner => "last_owner",
            Denial::OwnerRequired => "owner_required",
        }
    }
}

/// `owner_protected(m)` (behaviour §2.5). A candidate is an active owner membership of a group
/// whose user exists and is not a project bot, in any state: a blocked or deactivated
/// owner is not counted, but it is protected while no counted owner other than itself
/// remains. Takes the group-owner locks of `owner_scope(g)` first (ascending) when m is
/// a candidate, so the answer holds until COMMIT.
pub async fn owner_protected<C: GenericClient>(c: &C, m: &Member) -> Result<bool> {
    if !(m.is_group() && m.access_level == access::OWNER && m.is_active()) {
        return Ok(false);
    }
    let Some(uid) = m.user_id else {
        return Ok(false);
    };
    let candidate = match load_actor(c, uid).await? {
        Some(u) => !u.is_project_bot(),
        None => false,
    };
    if !candidate {
        return Ok(false);
    }
    let scope = hierarchy::owner_scope(c, m.source_id).await?;
    locks::group_owner_locks(c, &scope).await?;
    Ok(!other_counted_owner_exists(c, &scope, m.id).await?)
}

/// `can_remove_member(a, m)` (behaviour §2.4): `None` allows; the first rule that applies decides.
pub async fn can_remove_member<C: GenericClient>(
    c: &C,
    a: &Actor,
    m: &Member,
) -> Result<Option<Denial>> {
    if !a.active {
        return Ok(Some(Denial::ActorInactive));
    }
    // Rule 2: a project bot's membership, of a group or of a project.
    if m.is_group() || m.is_project() {
        if let Some(uid) = m.user_id {
            if load_actor(c, uid)
                .await?
                .is_some_and(|u| u.is_project_bot())
            {
                return Ok(Some(if m.is_group() {
                    Denial::ProjectBotGroupMember
                } else {
                    Denial::ProjectBotProjectMember
                }));
            }
        }
    }
    if m.is_group() {
        if !admin_group_member(c, a, m.source_id).await? {
            return Ok(Some(Denial::NotAuthorized));
        }
        if owner_protected(c, m).await? {
            return Ok(Some(Denial::LastOwner));
        }
        return Ok(None);
    }
    if m.is_project() {
        if !admin_project_member(c, a, m.source_id).await? {
            return Ok(Some(Denial::NotAuthorized));
        }
        if m.access_level >= access::OWNER && !project_owner(c, a, m.source_id).await? {
            return Ok(Some(Denial::OwnerRequired));
        }
    }
    Ok(None)
}

/// Whether a counted owner row other than `member_id` exists in `scope` (behaviour §2.5).
pub async fn other_counted_owner_exists<C: GenericClient>(
    c: &C,
    scope: &[i64],
    member_id: i64,
) -> Result<bool> {
    let row = c
        .query_one(sql::OTHER_COUNTED_OWNER_EXISTS, &[&scope, &member_id])
        .await?;
    Ok(row.get(0))
}

/// `sole_owned_groups(u)` (behaviour §2.6), ascending group ids. u's own state does not matter
/// (only a project bot is never a sole owner); the other owners must be counted ones.
pub async fn sole_owned_groups<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::SOLE_OWNED_GROUPS, &[&user_id]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The owner scopes of every group where `user_id` has a direct owner membership,
/// flattened: the ids whose group-owner locks phase 1 takes (behaviour §5.1 step 3).
pub async fn owned_group_scopes<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::OWNED_GROUP_SCOPES, &[&user_id]).await?;
    let mut ids = Vec::new();
    for r in rows {
        let gid: i64 = r.get(0);
        let top: bool = r.get(1);
        let t: Option<Vec<i64>> = r.get(2);
        match t {
            Some(t) if !top && !t.is_empty() => ids.extend(t),
            _ => ids.push(gid),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

/// Ids of the projects in personal namespaces owned by `user_id` (behaviour §5.1 step 2).
pub async fn personal_projects<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::PERSONAL_PROJECTS, &[&user_id]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
