//! The `project_authorizations` refresh (common.md §3, ⚑ D1, D2).
//!
//! Owns: `refresh(u, P)`: after it, for every p in P there is exactly one row
//! `(u, p, desired(u, p))` with `is_unique = true` when `desired > 0`, and none
//! otherwise; rows outside P are untouched. `desired` comes from memberships only
//! (group shares are ignored) and ignores the user's state. One statement computes,
//! deletes and upserts, after the user's authorization lock.

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
