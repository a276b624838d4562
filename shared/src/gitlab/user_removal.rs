//! Two-phase user removal, phase 1, and the ghost user (common.md §5.1, §5.3).
//!
//! Owns: `schedule_removal` (block, drop memberships with one combined refresh,
//! revoke tokens, record the `ghost_user_migrations` row, enqueue `delete-user`) and
//! `ensure_ghost_user`. Phase 1 runs inside the caller's transaction and never commits;
//! its `delete-user` message goes into the caller's outbox, which the caller sends
//! before COMMIT (send-then-commit, §9.5). Phase 2 is `workers::delete_user`.

use chrono::{DateTime, Utc};
use tokio_postgres::{GenericClient, Transaction};

use crate::error::Result;
use crate::function::Function;
use crate::gitlab::{authz, hierarchy, permissions};
use crate::locks;
use crate::messages::{delete_user_key, DeleteUserRun, Envelope};
use crate::queue::OutMessage;

/// `DELETE_USER_DELAY_S` (§9.5).
pub const DELETE_USER_DELAY_S: u32 = 30;

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
    /// The user owns personal projects (⚑ D8).
    PersonalProjects(Vec<i64>),
    /// The user is the sole owner of these groups.
    SoleOwner(Vec<i64>),
}

/// §5.1 steps 2–3: the checks that refuse a removal. Takes the group-owner locks
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

/// `schedule_removal(u, initiator, reason)` (§5.1), inside the caller's transaction.
pub async fn schedule_removal<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    run_id: &str,
    req: &RemovalRequest<'_>,
    outbox: &mut Vec<OutMessage>,
) -> Result<PhaseOne> {
    let u = req.user_id;
    let exists = c
        .query_opt("SELECT 1 FROM users WHERE id = $1::bigint", &[&u])
        .await?
        .is_some();
    if !exists {
        tracing::info!(user_id = u, "User removal skipped: user not found");
        return Ok(PhaseOne::NotFound);
    }
    // The user's membership rows first (ascending ids): the lock order puts row locks
    // before group-owner locks (ARCHITECTURE.md), and step 5 deletes these rows. A
    // caller that nests phase 1 (B38 for a bot) already holds them.
    c.execute(
        "SELECT count(*) FROM (SELECT id FROM members WHERE user_id = $1::bigint
                                ORDER BY id FOR UPDATE) AS locked",
        &[&u],
    )
    .await?;
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
    if c.query_opt(
        "SELECT id FROM users WHERE id = $1::bigint FOR UPDATE",
        &[&u],
    )
    .await?
    .is_none()
    {
        tracing::info!(user_id = u, "User removal skipped: user not found");
        return Ok(PhaseOne::NotFound);
    }
    c.execute(
        "UPDATE users SET state = 'blocked', updated_at = $2::timestamptz
         WHERE id = $1::bigint AND state IS DISTINCT FROM 'blocked'",
        &[&u, &now],
    )
    .await?;
    // Step 5: every membership, one combined refresh.
    let removed = c
        .query(
            "DELETE FROM members WHERE user_id = $1::bigint RETURNING source_type, source_id::bigint",
            &[&u],
        )
        .await?;
    let mut affected: Vec<i64> = req.extra_affected.to_vec();
    let mut types = Vec::with_capacity(removed.len());
    let mut sources = Vec::with_capacity(removed.len());
    for r in &removed {
        let st: String = r.get(0);
        let sid: i64 = r.get(1);
        match st.as_str() {
            "Project" => affected.push(sid),
            "Namespace" => affected.extend(hierarchy::projects_under(c, sid).await?),
            _ => {}
        }
        types.push(st);
        sources.push(sid);
    }
    if !removed.is_empty() {
        c.execute(
            "DELETE FROM notification_settings ns
             USING unnest($2::text[], $3::bigint[]) AS x(st, sid)
             WHERE ns.user_id = $1::bigint AND ns.source_type = x.st AND ns.source_id = x.sid",
            &[&u, &types, &sources],
        )
        .await?;
    }
    let existing = c
        .query(
            "SELECT project_id::bigint FROM project_authorizations WHERE user_id = $1::bigint",
            &[&u],
        )
        .await?;
    affected.extend(existing.iter().map(|r| r.get::<_, i64>(0)));
    authz::refresh(c, u, &affected).await?;
    // Step 6 (⚑ D10).
    let tokens_revoked = c
        .execute(
            "UPDATE personal_access_tokens SET revoked = true, updated_at = $2::timestamptz
             WHERE user_id = $1::bigint AND revoked IS DISTINCT FROM true",
            &[&u, &now],
        )
        .await?;
    // Step 7.
    c.execute(
        "INSERT INTO ghost_user_migrations
           (user_id, initiator_user_id, hard_delete, consume_after, created_at, updated_at)
         VALUES ($1::bigint, $2::bigint, false, $3::timestamptz, $3::timestamptz, $3::timestamptz)
         ON CONFLICT (user_id) DO NOTHING",
        &[&u, &req.initiator, &now],
    )
    .await?;
    // Step 8.
    outbox.push(OutMessage::new(
        Function::DeleteUser,
        DELETE_USER_DELAY_S,
        Envelope::new(
            "delete-user.run",
            delete_user_key(u),
            run_id,
            now,
            DeleteUserRun {
                user_id: u,
                initiator_user_id: req.initiator,
                reason: Some(req.reason.to_string()),
            },
        ),
    ));
    let memberships_deleted = removed.len() as u64;
    tracing::info!(
        user_id = u,
        initiator_user_id = req.initiator,
        reason = req.reason,
        memberships_deleted,
        tokens_revoked,
        "User scheduled for removal"
    );
    Ok(PhaseOne::Scheduled {
        memberships_deleted,
        tokens_revoked,
    })
}

/// `ensure_ghost_user()` (§5.3) in its own short transaction; returns the ghost's id.
pub async fn ensure_ghost_user(tx: Transaction<'_>, now: DateTime<Utc>) -> Result<i64> {
    locks::xact_locks(&tx, &["ghost-user".to_string()]).await?;
    if let Some(r) = tx
        .query_opt(
            "SELECT id::bigint FROM users WHERE user_type = 5 ORDER BY id LIMIT 1",
            &[],
        )
        .await?
    {
        tx.commit().await?;
        return Ok(r.get(0));
    }
    // The first of ghost, ghost1, ghost2, … free as a username, email and route path
    // (compared case-insensitively).
    let taken: Vec<String> = tx
        .query(
            "SELECT lower(username) FROM users WHERE lower(username) ~ '^ghost[0-9]*$'
             UNION SELECT lower(split_part(email, '@', 1)) FROM users
               WHERE lower(email) ~ '^ghost[0-9]*@example\\.com$'
             UNION SELECT lower(path) FROM routes WHERE lower(path) ~ '^ghost[0-9]*$'",
            &[],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let username = (0..)
        .map(|i| {
            if i == 0 {
                "ghost".to_string()
            } else {
                format!("ghost{i}")
            }
        })
        .find(|n| !taken.contains(n))
        .expect("an unused ghost name exists");
    let email = format!("{username}@example.com"); // [CONFIRM GitLab's pattern]
    let id: i64 = tx
        .query_one(
            "INSERT INTO users (username, name, email, user_type, state, admin, created_at, updated_at)
             VALUES ($1, 'Ghost User', $2, 5, 'active', false, $3::timestamptz, $3::timestamptz)
             RETURNING id::bigint",
            &[&username, &email, &now],
        )
        .await?
        .get(0);
    let ns: i64 = tx
        .query_one(
            "INSERT INTO namespaces (name, path, owner_id, type, traversal_ids, organization_id, created_at, updated_at)
             VALUES ('Ghost User', $1, $2::bigint, 'User', '{}',
                     (SELECT min(id) FROM organizations), $3::timestamptz, $3::timestamptz)
             RETURNING id::bigint",
            &[&username, &id, &now],
        )
        .await?
        .get(0);
    tx.execute(
        "UPDATE namespaces SET traversal_ids = ARRAY[id] WHERE id = $1::bigint",
        &[&ns],
    )
    .await?;
    tx.execute(
        "INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
         VALUES ($1::bigint, 'Namespace', $2, 'Ghost User', $1::bigint, $3::timestamptz, $3::timestamptz)",
        &[&ns, &username, &now],
    )
    .await?;
    tx.commit().await?;
    tracing::info!(user_id = id, "Ghost user created");
    Ok(id)
}
