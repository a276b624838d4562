//! The rows GitLab writes beside a membership removal (docs/gitlab-differences.md D3).
//!
//! Owns: [`Left`] (a removed membership as the side effects need it), [`Cause`] and
//! [`after_removal`], called by every removal point inside the removal's transaction,
//! after its authorization refresh: the project's `events` row (`expired` 11 or `left`
//! 9), `user_highest_roles` recomputed, the todos `TodosDestroyer::EntityLeaveWorker`
//! removes, the 2FA requirement recomputed for users who left a group, and (with
//! `AUDIT_EVENTS=on`) the `member_destroyed` audit events ([`audit`]), and EE's rows
//! of the user the removal deletes ([`ee`]: protected-branch and protected-environment
//! access, the group's SAML identities on expiry). In the same
//! transaction as the `DELETE`, so a replay that finds the membership gone writes
//! nothing again, and a crash loses nothing. Its statements are in [`sql`].

use std::collections::BTreeSet;

use chrono::NaiveDate;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::gitlab::membership::Member;
use crate::runtime::Invocation;

pub mod audit;
pub mod ee;
pub mod sql;

/// `Event.actions[:left]`.
pub const ACTION_LEFT: i16 = 9;
/// `Event.actions[:expired]`.
pub const ACTION_EXPIRED: i16 = 11;

/// A removed membership of a user (invites have none and no side effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// `members.id`.
    pub member_id: i64,
    /// `members.user_id`.
    pub user_id: i64,
    /// `Project` or `Namespace`.
    pub source_type: String,
    /// The project or group id.
    pub source_id: i64,
    /// `members.access_level`.
    pub access_level: i32,
    /// `members.expires_at` (the audit event's reason names it).
    pub expires_at: Option<NaiveDate>,
    /// An access request: GitLab's member hooks and events skip pending members.
    pub requested: bool,
}

impl Left {
    fn is_project(&self) -> bool {
        self.source_type == "Project"
    }
}

/// Why the memberships went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// `RemoveExpiredMembersWorker` (no current user: the system).
    Expired,
    /// `Members::PruneDeletionsWorker`, as the schedule's `scheduled_by` user.
    Pruned {
        /// `members_deletion_schedules.scheduled_by_id`.
        by: i64,
    },
}

/// Membership `m` as [`after_removal`] needs it, read before its removal (its expiry
/// only when audit events are written), with its user's row locked when the 2FA
/// recompute may write it ([`lock_users`]); none for an invite.
pub async fn left_of<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    m: &Member,
) -> Result<Vec<Left>> {
    let Some(user_id) = m.user_id else {
        return Ok(Vec::new());
    };
    let expires_at = if inv.settings.audit_events {
        c.query_opt(sql::EXPIRES_AT, &[&m.id])
            .await?
            .and_then(|r| r.get(0))
    } else {
        None
    };
    let left = vec![Left {
        member_id: m.id,
        user_id,
        source_type: m.source_type.clone(),
        source_id: m.source_id,
        access_level: m.access_level,
        expires_at,
        requested: m.requested,
    }];
    lock_users(c, &left).await?;
    Ok(left)
}

/// The users of `left` who left a group (not a project), once each, ascending.
fn group_leavers(left: &[Left]) -> Vec<i64> {
    left.iter()
        .filter(|l| !l.is_project())
        .map(|l| l.user_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// Lock the `users` rows [`after_removal`]'s 2FA recompute may write (users leaving a
/// group whom the requirement binds), ascending, so that they are taken before the
/// authorization refresh's locks as the lock order wants.
pub async fn lock_users<C: GenericClient>(c: &C, left: &[Left]) -> Result<()> {
    let users = group_leavers(left);
    if !users.is_empty() {
        c.query(sql::LOCK_TWO_FACTOR_USERS, &[&users]).await?;
    }
    Ok(())
}

/// What [`after_removal`] wrote, by table (ids, or user ids for the per-user rows).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// `events` ids.
    pub events: Vec<i64>,
    /// Users whose `user_highest_roles` row changed.
    pub highest_roles: Vec<i64>,
    /// `todos` ids removed.
    pub todos: Vec<i64>,
    /// Users whose 2FA requirement changed.
    pub two_factor: Vec<i64>,
    /// Audit event ids (legacy and scoped share them).
    pub audit_events: Vec<i64>,
    /// EE's rows of the users removed ([`ee`]).
    pub ee: ee::Removed,
}

/// Every side effect of the removed memberships `left`, in the removal's transaction
/// after its authorization refresh (the todo rule reads `project_authorizations`).
/// The rows written are logged on one line.
pub async fn after_removal<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    cause: Cause,
    left: &[Left],
) -> Result<Written> {
    let mut w = Written::default();
    if left.is_empty() {
        return Ok(w);
    }
    let now = inv.now;
    // Member#post_destroy_member_hook (ProjectMember, not pending): the events row.
    let (users, projects): (Vec<i64>, Vec<i64>) = left
        .iter()
        .filter(|l| l.is_project() && !l.requested)
        .map(|l| (l.user_id, l.source_id))
        .unzip();
    if !users.is_empty() {
        let action = match cause {
            Cause::Expired => ACTION_EXPIRED,
            Cause::Pruned { .. } => ACTION_LEFT,
        };
        for r in c
            .query(sql::INSERT_EVENTS, &[&users, &projects, &action, &now])
            .await?
        {
            w.events.push(r.get(0));
        }
    }
    // UpdateHighestRole: every user whose memberships changed.
    let changed: Vec<i64> = left
        .iter()
        .map(|l| l.user_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    for r in c
        .query(sql::UPSERT_HIGHEST_ROLES, &[&changed, &now])
        .await?
    {
        w.highest_roles.push(r.get(0));
    }
    w.todos = leave_todos(c, left).await?;
    // Member#update_two_factor_requirement: group memberships that were not invites.
    let two_factor = group_leavers(left);
    if !two_factor.is_empty() {
        for r in c.query(sql::UPDATE_TWO_FACTOR, &[&two_factor]).await? {
            w.two_factor.push(r.get(0));
        }
    }
    w.ee = ee_rows(c, cause, left).await?;
    if inv.settings.audit_events {
        w.audit_events = audit::member_destroyed(c, now, cause, left).await?;
    }
    record(inv, &w);
    Ok(w)
}

/// EE's rows of the users of `left` ([`ee`]): a project left, the user's protected
/// branch and environment access there; a group left, the protected-branch access on
/// the projects under it the user no longer reaches and, on expiry only (a prune
/// passes `skip_saml_identity`), the user's identities of the group's SAML provider.
async fn ee_rows<C: GenericClient>(c: &C, cause: Cause, left: &[Left]) -> Result<ee::Removed> {
    let pairs = |project: bool| -> (Vec<i64>, Vec<i64>) {
        left.iter()
            .filter(|l| l.is_project() == project)
            .map(|l| (l.user_id, l.source_id))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .unzip()
    };
    let (users, projects) = pairs(true);
    let mut removed = ee::project_left(c, &users, &projects).await?;
    let (users, groups) = pairs(false);
    removed.extend(ee::group_left(c, &users, &groups).await?);
    if cause == Cause::Expired {
        removed.identities = ee::group_identities(c, &users, &groups).await?;
    }
    Ok(removed)
}

/// `TodosDestroyer::EntityLeaveWorker` for each membership left, with the
/// `TodosDestroyer::PrivateFeaturesWorker` it enqueues for a public or internal entity:
/// the pairs of user and project its rule looks at (a group left: the projects under it
/// outside the subgroups the user is still a planner of, none while the user is still a
/// planner of the group), then one statement over all pairs (`sql::DELETE_LEAVE_TODOS`:
/// private projects, private features, confidential issues, internal notes); and for a
/// group left, its `remove_group_todos` (`sql::DELETE_GROUP_LEAVE_TODOS`).
async fn leave_todos<C: GenericClient>(c: &C, left: &[Left]) -> Result<Vec<i64>> {
    let mut users: Vec<i64> = Vec::new();
    let mut projects: Vec<i64> = Vec::new();
    let mut private: Vec<Option<bool>> = Vec::new();
    let (mut group_users, mut groups): (Vec<i64>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut seen = BTreeSet::new();
    for l in left.iter().filter(|l| !l.requested) {
        if !seen.insert((l.user_id, l.source_type.clone(), l.source_id)) {
            continue;
        }
        if l.is_project() {
            users.push(l.user_id);
            projects.push(l.source_id);
            private.push(None);
            continue;
        }
        let Some(row) = c
            .query_opt(sql::GROUP_LEAVE_SCOPE, &[&l.user_id, &l.source_id])
            .await?
        else {
            continue;
        };
        let (group_private, planner, under): (bool, bool, Vec<i64>) =
            (row.get(0), row.get(1), row.get(2));
        if planner {
            continue;
        }
        group_users.push(l.user_id);
        groups.push(l.source_id);
        for p in under {
            users.push(l.user_id);
            projects.push(p);
            private.push(Some(group_private));
        }
    }
    let mut removed: Vec<i64> = Vec::new();
    if !users.is_empty() {
        let rows = c
            .query(sql::DELETE_LEAVE_TODOS, &[&users, &projects, &private])
            .await?;
        removed.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
    }
    if !groups.is_empty() {
        let rows = c
            .query(sql::DELETE_GROUP_LEAVE_TODOS, &[&group_users, &groups])
            .await?;
        removed.extend(rows.iter().map(|r| r.get::<_, i64>(0)));
    }
    Ok(removed)
}

/// One log line per call with the rows written (`hk run --dry-run` shows it for the
/// rows a plan would write; ids only, never names).
fn record(_inv: &Invocation<'_>, w: &Written) {
    tracing::info!(
        events = ?w.events,
        highest_roles = ?w.highest_roles,
        todos_removed = ?w.todos,
        two_factor = ?w.two_factor,
        audit_events = ?w.audit_events,
        merge_access_levels_removed = ?w.ee.merge_access_levels,
        push_access_levels_removed = ?w.ee.push_access_levels,
        deploy_access_levels_removed = ?w.ee.deploy_access_levels,
        approval_rules_removed = ?w.ee.approval_rules,
        identities_removed = ?w.ee.identities,
        "membership side effects written"
    );
}
