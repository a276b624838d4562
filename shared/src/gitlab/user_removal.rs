//! Two-phase user removal, phase 1, and the ghost user (behaviour §5.1, §5.3).
//!
//! Owns: `schedule_removal` (block, drop memberships with one combined refresh and
//! EE's protected-branch and protected-environment rows of the project memberships,
//! the `user_destroyed` audit event with `AUDIT_EVENTS=on`, revoke tokens, record the
//! `ghost_user_migrations` row, then ask for phase 2: a [`UserDeletion`] intent, with
//! the memberships' system hooks, into the caller's intents, which its job sends) and
//! `ensure_ghost_user`, inside the caller's transaction. Phase 2 is
//! `workers::delete_user`. The statements are in [`sql`].

use chrono::{DateTime, Utc};
use tokio_postgres::{GenericClient, Transaction};

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::side_effects::{self, audit::users};
use crate::gitlab::system_hooks::{self, Subject};
use crate::gitlab::{authz, deletion_model, permissions, Intent, UserDeletion};
use crate::locks;
use crate::runtime::Invocation;

pub mod sql;

/// `DELETE_USER_DELAY_S` (behaviour §9.5): `delete-user`'s row in the function table.
pub const DELETE_USER_DELAY_S: u32 = Function::DeleteUser.delay_s();

/// What phase 1 is asked to do.
#[derive(Debug, Clone)]
pub struct RemovalRequest<'a> {
    /// The user to remove.
    pub user_id: i64,
    /// Who initiates it (NULL for B38).
    pub initiator: Option<i64>,
    /// The reason passed on to `delete-user`.
    pub reason: &'a str,
    /// The affected set of a membership the caller removed with its refresh deferred.
    pub extra_affected: &'a [i64],
    /// A project bot's `project_bot_resource` (`Project` or `Namespace`, id), the scope
    /// of its `user_destroyed` audit event (B38 passes it; others do not).
    pub bot_resource: Option<(&'a str, i64)>,
    /// The `reason_for_deletion` GitLab passes `Users::DestroyService` (B38's
    /// "Membership expired"; none for group-destroy's bots and placeholders).
    pub reason_for_deletion: Option<&'a str>,
}

/// Phase 1's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PhaseOne {
    /// Blocked, memberships removed, `delete-user` queued.
    Scheduled {
        /// Memberships deleted by step 5.
        memberships_deleted: u64,
        /// Tokens revoked by step 6.
        tokens_revoked: u64,
    },
    /// Refused (personal projects or sole owner); nothing changed.
    Refused,
    /// No such user; nothing changed.
    NotFound,
}

/// Why phase 1 (or the final check of phase 2) refuses a user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The user owns personal projects (behaviour §D8).
    PersonalProjects(Vec<i64>),
    /// The user is the sole owner of these groups.
    SoleOwner(Vec<i64>),
}

/// behaviour §5.1 steps 2–3: the checks that refuse a removal. Takes the group-owner locks
/// (ascending) before evaluating the sole-owner rule.
pub async fn refusal<C: GenericClient>(c: &C, user_id: i64, lock: bool) -> Result<Option<Refusal>> {
    let projects = permissions::personal_projects(c, user_id).await?;
    if !projects.is_empty() {
        return Ok(Some(Refusal::PersonalProjects(projects)));
    }
    if lock {
        let scopes = permissions::owned_group_scopes(c, user_id).await?;
        locks::group_owner_locks(c, &scopes).await?;
    }
    let groups = permissions::sole_owned_groups(c, user_id).await?;
    if !groups.is_empty() {
        return Ok(Some(Refusal::SoleOwner(groups)));
    }
    Ok(None)
}

/// `schedule_removal(u, initiator, reason)` (behaviour §5.1), inside the caller's
/// transaction: what it asks of other functions (the memberships' hooks, then phase 2)
/// goes into `intents`, for the caller's job to send before its COMMIT.
pub async fn schedule_removal<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    req: &RemovalRequest<'_>,
    intents: &mut Vec<Intent>,
) -> Result<PhaseOne> {
    let now = inv.now;
    let u = req.user_id;
    let exists = c.query_opt(sql::USER_EXISTS, &[&u]).await?.is_some();
    if !exists {
        tracing::info!(user_id = u, "User removal skipped: user not found");
        return Ok(PhaseOne::NotFound);
    }
    // Row locks first (ARCHITECTURE.md, lock order); step 5 deletes these rows. A
    // caller that nests phase 1 (B38 for a bot) already holds them.
    c.execute(sql::LOCK_MEMBERSHIPS, &[&u]).await?;
    match refusal(c, u, true).await? {
        Some(Refusal::PersonalProjects(project_ids)) => {
            tracing::warn!(user_id = u, project_ids = ?project_ids, "User removal refused: user owns personal projects");
            return Ok(PhaseOne::Refused);
        }
        Some(Refusal::SoleOwner(group_ids)) => {
            tracing::warn!(user_id = u, group_ids = ?group_ids, reason = req.reason, "User removal refused: sole owner of group");
            return Ok(PhaseOne::Refused);
        }
        None => {}
    }
    // Step 4: lock the row, then block.
    if c.query_opt(sql::LOCK_USER, &[&u]).await?.is_none() {
        tracing::info!(user_id = u, "User removal skipped: user not found");
        return Ok(PhaseOne::NotFound);
    }
    c.execute(sql::BLOCK_USER, &[&u, &now]).await?;
    // Step 5: every membership, one combined refresh.
    // Their system hooks (GitLab destroys them with their callbacks).
    let hooks = system_hooks::prepare(c, inv, Subject::MembershipsOf(u)).await?;
    let removed = c.query(sql::DELETE_MEMBERSHIPS, &[&u]).await?;
    intents.extend(hooks.claim(inv));
    let mut affected: Vec<i64> = req.extra_affected.to_vec();
    let mut types = Vec::with_capacity(removed.len());
    let mut sources = Vec::with_capacity(removed.len());
    let mut groups = Vec::new();
    for r in &removed {
        let st: String = r.get(0);
        let sid: i64 = r.get(1);
        match st.as_str() {
            "Project" => affected.push(sid),
            "Namespace" => groups.push(sid),
            _ => {}
        }
        types.push(st);
        sources.push(sid);
    }
    affected.extend(authz::reached_from(c, &groups).await?);
    if !removed.is_empty() {
        c.execute(sql::DELETE_NOTIFICATION_SETTINGS, &[&u, &types, &sources])
            .await?;
    }
    let existing = c.query(sql::AUTHORIZED_PROJECTS, &[&u]).await?;
    affected.extend(existing.iter().map(|r| r.get::<_, i64>(0)));
    authz::refresh(c, u, &affected).await?;
    // EE's ProjectMember callbacks of each project membership destroyed (D3).
    let projects: Vec<i64> = types
        .iter()
        .zip(&sources)
        .filter(|(t, _)| t.as_str() == "Project")
        .map(|(_, s)| *s)
        .collect();
    let users = vec![u; projects.len()];
    let ee = side_effects::ee::project_left(c, &users, &projects).await?;
    // EE's `user_destroyed` (Users::DestroyService#execute's audit event).
    let audit_events = if inv.settings.audit_events {
        let d = users::Deletion {
            user_id: u,
            author: req.initiator,
            bot_resource: req.bot_resource,
            reason: req.reason_for_deletion,
        };
        users::user_destroyed(c, now, &d).await?
    } else {
        Vec::new()
    };
    // Step 6 (behaviour §D10).
    let tokens_revoked = c.execute(sql::REVOKE_TOKENS, &[&u, &now]).await?;
    // Step 7, with the user's type where the release records it (19.1).
    let insert = if deletion_model::has_column(c, "ghost_user_migrations", "user_type").await? {
        sql::typed::INSERT_MIGRATION_TYPED
    } else {
        sql::INSERT_MIGRATION
    };
    c.execute(insert, &[&u, &req.initiator, &now]).await?;
    // Step 8.
    intents.push(Intent::DeleteUser(UserDeletion {
        user_id: u,
        initiator_user_id: req.initiator,
        reason: Some(req.reason.to_string()),
    }));
    let memberships_deleted = removed.len() as u64;
    tracing::info!(
        user_id = u,
        initiator_user_id = req.initiator,
        reason = req.reason,
        memberships_deleted,
        tokens_revoked,
        audit_events = ?audit_events,
        merge_access_levels_removed = ?ee.merge_access_levels,
        push_access_levels_removed = ?ee.push_access_levels,
        deploy_access_levels_removed = ?ee.deploy_access_levels,
        approval_rules_removed = ?ee.approval_rules,
        "User scheduled for removal"
    );
    Ok(PhaseOne::Scheduled {
        memberships_deleted,
        tokens_revoked,
    })
}

/// `ensure_ghost_user()` (behaviour §5.3) in its own short transaction; returns the ghost's id.
pub async fn ensure_ghost_user(tx: Transaction<'_>, now: DateTime<Utc>) -> Result<i64> {
    locks::xact_locks(&tx, &["ghost-user".to_string()]).await?;
    if let Some(r) = tx.query_opt(sql::FIND_GHOST, &[]).await? {
        tx.commit().await?;
        return Ok(r.get(0));
    }
    // The first of ghost, ghost1, ghost2, … free as a username, namespace and route
    // path, and separately the first free ghost…@example.com (compared
    // case-insensitively), as GitLab's `Users::Internal` picks them.
    let taken =
        |rows: Vec<tokio_postgres::Row>| -> Vec<String> { rows.iter().map(|r| r.get(0)).collect() };
    let username = first_free_ghost_name(&taken(tx.query(sql::TAKEN_GHOST_USERNAMES, &[]).await?));
    let email = format!(
        "{}@example.com",
        first_free_ghost_name(&taken(tx.query(sql::TAKEN_GHOST_EMAILS, &[]).await?))
    );
    let row = tx
        .query_one(sql::INSERT_GHOST, &[&username, &email, &now])
        .await?;
    let (id, organization): (i64, i64) = (row.get(0), row.get(1));
    tx.execute(sql::INSERT_GHOST_DETAILS, &[&id]).await?;
    tx.execute(
        sql::INSERT_GHOST_ORGANIZATION_USER,
        &[&id, &organization, &now],
    )
    .await?;
    let ns: i64 = tx
        .query_one(
            sql::INSERT_GHOST_NAMESPACE,
            &[&username, &id, &now, &organization],
        )
        .await?
        .get(0);
    tx.execute(sql::SET_GHOST_TRAVERSAL_IDS, &[&ns]).await?;
    tx.execute(sql::INSERT_GHOST_ROUTE, &[&ns, &username, &now])
        .await?;
    tx.commit().await?;
    tracing::info!(user_id = id, "Ghost user created");
    Ok(id)
}

/// The first of `ghost`, `ghost1`, `ghost2`, … not in `taken` (lower case).
fn first_free_ghost_name(taken: &[String]) -> String {
    (0..)
        .map(|i| {
            if i == 0 {
                "ghost".to_string()
            } else {
                format!("ghost{i}")
            }
        })
        .find(|n| !taken.contains(n))
        .expect("an unused ghost name exists")
}
