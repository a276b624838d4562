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
//! once. For a set of removals that are
//! all already done, it leaves the same rows as `refresh(m.user_id, affected(m))` run
//! after each of them in turn: a later removal of the same user changes `desired`
//! only for projects in its own affected set, which it refreshes itself.

use tokio_postgres::GenericClient;

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

/// The pairs of §3's affected sets for the memberships in relation `r(u, st, sid)`
/// (user, `source_type`, `source_id`): `{p}` for a project membership,
/// `projects_under(g)` for a group membership (the predicate of
/// `hierarchy::projects_under`), nothing for any other source type. Columns `u`, `p`,
/// distinct.
fn affected_pairs(removed: &str) -> String {
    format!(
        "SELECT r.u, r.sid AS p FROM {removed} WHERE r.st = 'Project'
         UNION
         SELECT r.u, p.id::bigint FROM {removed}
           JOIN namespaces g ON g.id = r.sid
           JOIN namespaces n ON n.type = 'Group'
             AND n.traversal_ids >= g.traversal_ids
             AND n.traversal_ids < (g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                    || (g.traversal_ids[cardinality(g.traversal_ids)] + 1))
             AND r.sid = ANY(n.traversal_ids)
           JOIN projects p ON p.namespace_id = n.id
         WHERE r.st = 'Namespace'"
    )
}

/// The set-based refresh statement over the removed memberships in relation
/// `r(u, st, sid)`: `desired` for every affected pair, then the same delete and upsert
/// as [`refresh`]. Returns one row: rows deleted, rows written.
///
/// `desired` is [`DESIRED`]'s definition computed by joins instead of one correlated
/// lookup per pair: each affected user's access-granting memberships (active, no
/// request, level ≥ 10) are read once (`grants`, the highest level per source), then
/// per pair the highest of its project grant, its group grants on any of the project
/// namespace's `traversal_ids` (when that namespace is a Group), and 50 for the owner
/// of a User namespace.
pub(crate) fn refresh_removed_sql(removed: &str) -> String {
    let pairs = affected_pairs(removed);
    format!(
        "WITH pairs AS ({pairs}),
             pusers AS (SELECT DISTINCT u FROM pairs),
             grants AS (
               SELECT m.user_id::bigint AS u, m.source_type, m.source_id::bigint AS sid,
                      max(m.access_level) AS l
               FROM members m JOIN pusers ON m.user_id = pusers.u
               WHERE m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 10
               GROUP BY 1, 2, 3
             ),
             desired AS (
               SELECT pr.u, pr.p, GREATEST(
                 COALESCE(max(pg.l), 0),
                 COALESCE(max(gg.l), 0),
                 CASE WHEN n.type = 'User' AND n.owner_id = pr.u THEN 50 ELSE 0 END
               )::int4 AS access_level
               FROM pairs pr JOIN projects p ON p.id = pr.p JOIN namespaces n ON n.id = p.namespace_id
               LEFT JOIN grants pg ON pg.u = pr.u AND pg.source_type = 'Project' AND pg.sid = pr.p
               LEFT JOIN grants gg ON gg.u = pr.u AND gg.source_type = 'Namespace'
                                  AND n.type = 'Group' AND gg.sid = ANY(n.traversal_ids::bigint[])
               GROUP BY pr.u, pr.p, n.type, n.owner_id
             ),
             del AS (
               DELETE FROM project_authorizations pa USING pairs pr
               WHERE pa.user_id = pr.u AND pa.project_id = pr.p
                 AND NOT EXISTS (SELECT 1 FROM desired d
                                 WHERE d.u = pa.user_id AND d.p = pa.project_id
                                   AND d.access_level = pa.access_level AND d.access_level > 0)
               RETURNING 1
             ),
             ins AS (
               INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
               SELECT d.u, d.p, d.access_level, true FROM desired d
               WHERE d.access_level > 0
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
    let mut users: Vec<i64> = removed.iter().map(|r| r.user_id).collect();
    users.sort_unstable();
    users.dedup();
    let keys: Vec<String> = users
        .iter()
        .map(|u| format!("project-authorizations:{u}"))
        .collect();
    locks::xact_locks(c, &keys).await?;
    let u: Vec<i64> = removed.iter().map(|r| r.user_id).collect();
    let st: Vec<&str> = removed.iter().map(|r| r.source_type.as_str()).collect();
    let sid: Vec<i64> = removed.iter().map(|r| r.source_id).collect();
    let sql =
        refresh_removed_sql("unnest($1::bigint[], $2::text[], $3::bigint[]) AS r(u, st, sid)");
    let row = c.query_one(&sql, &[&u, &st, &sid]).await?;
    Ok(RefreshCounts {
        deleted: row.get(0),
        written: row.get(1),
    })
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
