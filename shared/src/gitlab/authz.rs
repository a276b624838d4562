//! The `project_authorizations` refresh (common.md §3, ⚑ D1, D2).
//!
//! Owns: `refresh(u, P)`: after it, for every p in P there is exactly one row
//! `(u, p, desired(u, p))` with `is_unique = true` when `desired > 0`, and none
//! otherwise; rows outside P are untouched. `desired` comes from memberships only
//! (group shares are ignored) and ignores the user's state. One statement computes,
//! deletes and upserts, after the user's authorization lock.
//!
//! [`refresh_removed`] is the set-based form for many removed memberships at once (a
//! B38 group): it takes every affected user's authorization lock (ascending ids), then
//! one statement derives `affected(m)` for each removed membership (§3's table), and
//! recomputes exactly those `(user, project)` pairs, reading each user's memberships
//! once and joining by hash, so its cost grows linearly with the pairs. For a set of removals that are
//! all already done, it leaves the same rows as `refresh(m.user_id, affected(m))` run
//! after each of them in turn: a later removal of the same user changes `desired`
//! only for projects in its own affected set, which it refreshes itself.

use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::error::Result;
use crate::locks;

/// `desired(u, p) = project_access(u, p)` (common.md §2.2) for user `$1` and every
/// project in `$2::bigint[]`: columns `project_id`, `access_level` (0 = no access).
/// Memberships count when active (`state = 0`, no request) and at least GUEST;
/// MINIMAL_ACCESS never grants project access.
pub(crate) const DESIRED: &str = "
    SELECT p.id::bigint AS project_id, GREATEST(
      COALESCE((SELECT max(m.access_level) FROM members m
                WHERE m.user_id = $1::bigint AND m.source_type = 'Project'
                  AND m.source_id = p.id AND m.state = 0
                  AND m.requested_at IS NULL AND m.access_level >= 10), 0),
      CASE WHEN n.type = 'Group' THEN
        COALESCE((SELECT max(m.access_level) FROM members m
                  WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
                    AND m.source_id = ANY(n.traversal_ids::bigint[]) AND m.state = 0
                    AND m.requested_at IS NULL AND m.access_level >= 10), 0)
      ELSE 0 END,
      CASE WHEN n.type = 'User' AND n.owner_id = $1::bigint THEN 50 ELSE 0 END
    )::int4 AS access_level
    FROM projects p JOIN namespaces n ON n.id = p.namespace_id
    WHERE p.id = ANY($2::bigint[])";

/// Where [`refresh_removed_sql`] reads the removed memberships from.
pub struct RemovedFrom<'a> {
    /// A relation `x(u, p)`: the removed project memberships (user, project).
    pub projects: &'a str,
    /// A relation `x(u, g)`: the removed group memberships (user, group).
    pub groups: &'a str,
    /// A condition on `m.user_id` that holds for every user in either relation.
    pub users: &'a str,
}

/// The removed memberships as bound parameters: `$1`/`$2` users and projects of the
/// project memberships, `$3`/`$4` users and groups of the group memberships, `$5` the
/// users.
pub const REMOVED_PARAMS: RemovedFrom<'static> = RemovedFrom {
    projects: "unnest($1::bigint[], $2::bigint[]) AS x(u, p)",
    groups: "unnest($3::bigint[], $4::bigint[]) AS x(u, g)",
    users: "m.user_id = ANY($5::bigint[])",
};

/// The set-based refresh statement over removed memberships: `refresh(u, affected(m))`
/// for all of them at once. Returns one row: rows deleted, rows written.
///
/// * `pairs`: §3's affected sets: `{p}` for a project membership, `projects_under(g)`
///   for a group membership (the predicate of `hierarchy::projects_under`).
/// * `pairs` carries each pair's project namespace (type, `traversal_ids`, owner), read
///   while the pairs are found.
/// * `grants`: every access-granting membership of the users (active, no request,
///   level ≥ 10), read once per user.
/// * `desired`: one row per pair, [`DESIRED`]'s definition: the highest of 0, the
///   user's grants on the project, its grants on any of the project namespace's
///   `traversal_ids` when that namespace is a Group, and 50 for the owner of a User
///   namespace. A pair whose project does not exist gets 0 and is never inserted.
/// * `cur`: the pairs' current rows, read once. Then the same effects as [`refresh`]: a
///   row goes unless `desired` has it at that level (> 0); a desired row is inserted, or
///   its `is_unique` set, unless it is already there with `is_unique = true`.
pub fn refresh_removed_sql(from: &RemovedFrom<'_>) -> String {
    let (projects, groups, users) = (from.projects, from.groups, from.users);
    format!(
        "WITH pairs AS (
               SELECT x.u, x.p, p.id IS NOT NULL AS project_exists, n.type,
                      n.traversal_ids::bigint[] AS t, n.owner_id::bigint AS owner_id
               FROM {projects}
                 LEFT JOIN projects p ON p.id = x.p
                 LEFT JOIN namespaces n ON n.id = p.namespace_id
               UNION
               SELECT x.u, p.id::bigint, true, n.type, n.traversal_ids::bigint[], n.owner_id::bigint
               FROM {groups}
                 JOIN namespaces g ON g.id = x.g
                 JOIN namespaces n ON n.type = 'Group'
                   AND n.traversal_ids >= g.traversal_ids
                   AND n.traversal_ids < (g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                          || (g.traversal_ids[cardinality(g.traversal_ids)] + 1))
                   AND x.g = ANY(n.traversal_ids)
                 JOIN projects p ON p.namespace_id = n.id
             ),
             grants AS (
               SELECT m.user_id::bigint AS u, m.source_type, m.source_id::bigint AS sid,
                      m.access_level AS l
               FROM members m
               WHERE {users} AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 10
             ),
             desired AS MATERIALIZED (
               SELECT t.u, t.p, t.project_exists, GREATEST(
                 COALESCE(max(g.l) FILTER (WHERE g.source_type = 'Project' AND g.sid = t.p), 0),
                 COALESCE(max(g.l) FILTER (WHERE g.source_type = 'Namespace' AND t.type = 'Group'
                                                 AND g.sid = ANY(t.t)), 0),
                 CASE WHEN t.type = 'User' AND t.owner_id = t.u THEN 50 ELSE 0 END
               )::int4 AS access_level
               FROM pairs t LEFT JOIN grants g ON g.u = t.u
               GROUP BY t.u, t.p, t.project_exists, t.type, t.t, t.owner_id
             ),
             cur AS MATERIALIZED (
               SELECT pa.user_id::bigint AS u, pa.project_id::bigint AS p, pa.access_level,
                      pa.is_unique, d.access_level AS desired
               FROM desired d
                 JOIN project_authorizations pa ON pa.user_id = d.u AND pa.project_id = d.p
             ),
             del AS (
               DELETE FROM project_authorizations pa USING cur c
               WHERE pa.user_id = c.u AND pa.project_id = c.p AND pa.access_level = c.access_level
                 AND (c.desired = 0 OR c.desired <> c.access_level)
               RETURNING 1
             ),
             ins AS (
               INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
               SELECT d.u, d.p, d.access_level, true FROM desired d
               WHERE d.access_level > 0 AND d.project_exists
                 AND NOT EXISTS (SELECT 1 FROM cur c
                                 WHERE c.u = d.u AND c.p = d.p AND c.access_level = d.access_level
                                   AND c.is_unique IS TRUE)
               ON CONFLICT (user_id, project_id, access_level)
                 DO UPDATE SET is_unique = true
                 WHERE project_authorizations.is_unique IS DISTINCT FROM true
               RETURNING 1
             )
         SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"
    )
}

/// A membership that was removed: what `affected(m)` and the refresh need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    /// `m.user_id` (invites have none and need no refresh).
    pub user_id: i64,
    /// `m.source_type`.
    pub source_type: String,
    /// `m.source_id`.
    pub source_id: i64,
}

/// The two statements of [`refresh_removed`], prepared once per session and reused
/// (B38 prepares them once per page and runs them once per group).
pub struct RemovedRefresher {
    lock: Statement,
    refresh: Statement,
}

impl RemovedRefresher {
    /// Prepare the statements on `c`'s session.
    pub async fn prepare<C: GenericClient>(c: &C) -> Result<RemovedRefresher> {
        Ok(RemovedRefresher {
            lock: c.prepare(locks::XACT_LOCKS_SQL).await?,
            refresh: c.prepare(&refresh_removed_sql(&REMOVED_PARAMS)).await?,
        })
    }

    /// [`refresh_removed`] with the prepared statements. The lock statement and the
    /// refresh are sent together (pipelined): the server runs the refresh, and takes its
    /// snapshot, only after every lock is held.
    pub async fn run<C: GenericClient>(&self, c: &C, removed: &[Removed]) -> Result<RefreshCounts> {
        if removed.is_empty() {
            return Ok(RefreshCounts::default());
        }
        let mut users: Vec<i64> = removed.iter().map(|r| r.user_id).collect();
        users.sort_unstable();
        users.dedup();
        let keys: Vec<i64> = users
            .iter()
            .map(|u| locks::lock_key(&format!("project-authorizations:{u}")))
            .collect();
        let [pu, pp, gu, gg] = removed_params(removed);
        let lock_params: [&(dyn ToSql + Sync); 1] = [&keys];
        let refresh_params: [&(dyn ToSql + Sync); 5] = [&pu, &pp, &gu, &gg, &users];
        let (locked, row) = futures::join!(
            c.execute(&self.lock, &lock_params),
            c.query_one(&self.refresh, &refresh_params)
        );
        locked?;
        let row = row?;
        Ok(RefreshCounts {
            deleted: row.get(0),
            written: row.get(1),
        })
    }
}

/// The arrays of [`REMOVED_PARAMS`] `$1`–`$4`; other source types affect no project.
fn removed_params(removed: &[Removed]) -> [Vec<i64>; 4] {
    let mut v: [Vec<i64>; 4] = Default::default();
    for r in removed {
        match r.source_type.as_str() {
            "Project" => {
                v[0].push(r.user_id);
                v[1].push(r.source_id);
            }
            "Namespace" => {
                v[2].push(r.user_id);
                v[3].push(r.source_id);
            }
            _ => {}
        }
    }
    v
}

/// `refresh(m.user_id, affected(m))` for every removed membership at once, inside the
/// caller's transaction and after the removals: the users' authorization locks in
/// ascending user id order, then one statement. Equivalent to the per-membership
/// refreshes run one after another once every removal is done.
pub async fn refresh_removed<C: GenericClient>(
    c: &C,
    removed: &[Removed],
) -> Result<RefreshCounts> {
    if removed.is_empty() {
        return Ok(RefreshCounts::default());
    }
    RemovedRefresher::prepare(c).await?.run(c, removed).await
}

/// Rows removed and rows written by one refresh.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RefreshCounts {
    /// Rows deleted.
    pub deleted: i64,
    /// Rows inserted or corrected.
    pub written: i64,
}

/// `refresh(u, P)` inside the caller's transaction.
pub async fn refresh<C: GenericClient>(
    c: &C,
    user_id: i64,
    projects: &[i64],
) -> Result<RefreshCounts> {
    if projects.is_empty() {
        return Ok(RefreshCounts::default());
    }
    let mut p = projects.to_vec();
    p.sort_unstable();
    p.dedup();
    locks::authorization_lock(c, user_id).await?;
    let sql = format!(
        "WITH desired AS ({DESIRED}),
             del AS (
               DELETE FROM project_authorizations pa
               WHERE pa.user_id = $1::bigint AND pa.project_id = ANY($2::bigint[])
                 AND NOT EXISTS (SELECT 1 FROM desired d
                                 WHERE d.project_id = pa.project_id
                                   AND d.access_level = pa.access_level AND d.access_level > 0)
               RETURNING 1
             ),
             ins AS (
               INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
               SELECT $1::bigint, d.project_id, d.access_level, true FROM desired d
               WHERE d.access_level > 0
               ON CONFLICT (user_id, project_id, access_level)
                 DO UPDATE SET is_unique = true
                 WHERE project_authorizations.is_unique IS DISTINCT FROM true
               RETURNING 1
             )
             SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"
    );
    let row = c.query_one(&sql, &[&user_id, &p]).await?;
    Ok(RefreshCounts {
        deleted: row.get(0),
        written: row.get(1),
    })
}
