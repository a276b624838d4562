//! Permission predicates (common.md §2).
//!
//! Owns: the last-owner rule `owner_protected(m)` (§2.5) and `sole_owned_groups(u)`
//! (§2.6). Counted owners are active, non-bot users with an active `access_level = 50`
//! group membership (⚑ D7). Callers take the group-owner locks first.

use tokio_postgres::GenericClient;

use crate::error::Result;

/// Whether a counted owner row other than `member_id` exists in `scope` (§2.5).
pub async fn other_counted_owner_exists<C: GenericClient>(
    c: &C,
    scope: &[i64],
    member_id: i64,
) -> Result<bool> {
    let row = c
        .query_one(
            "SELECT EXISTS (
               SELECT 1 FROM members o JOIN users u ON u.id = o.user_id
               WHERE o.source_type = 'Namespace' AND o.source_id = ANY($1::bigint[])
                 AND o.id <> $2::bigint
                 AND o.state = 0 AND o.requested_at IS NULL AND o.access_level = 50
                 AND u.state = 'active' AND u.user_type <> 6)",
            &[&scope, &member_id],
        )
        .await?;
    Ok(row.get(0))
}

/// `sole_owned_groups(u)` (§2.6), ascending group ids.
pub async fn sole_owned_groups<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c
        .query(
            "SELECT m.source_id::bigint
             FROM members m
             JOIN users u ON u.id = m.user_id
             LEFT JOIN namespaces g ON g.id = m.source_id
             WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
               AND m.access_level = 50 AND m.state = 0 AND m.requested_at IS NULL
               AND u.state = 'active' AND u.user_type <> 6
               AND NOT EXISTS (
                 SELECT 1 FROM members o JOIN users ou ON ou.id = o.user_id
                 WHERE o.source_type = 'Namespace'
                   AND o.source_id = ANY(CASE WHEN g.parent_id IS NULL OR cardinality(g.traversal_ids) = 0
                                              THEN ARRAY[m.source_id::bigint]
                                              ELSE g.traversal_ids::bigint[] END)
                   AND o.user_id <> $1::bigint
                   AND o.state = 0 AND o.requested_at IS NULL AND o.access_level = 50
                   AND ou.state = 'active' AND ou.user_type <> 6)
             ORDER BY 1",
            &[&user_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// The owner scopes of every group where `user_id` has a direct owner membership,
/// flattened: the ids whose group-owner locks phase 1 takes (§5.1 step 3).
pub async fn owned_group_scopes<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c
        .query(
            "SELECT m.source_id::bigint, g.parent_id IS NULL OR g.id IS NULL, g.traversal_ids::bigint[]
             FROM members m LEFT JOIN namespaces g ON g.id = m.source_id
             WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace' AND m.access_level = 50",
            &[&user_id],
        )
        .await?;
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

/// Ids of the projects in personal namespaces owned by `user_id` (§5.1 step 2).
pub async fn personal_projects<C: GenericClient>(c: &C, user_id: i64) -> Result<Vec<i64>> {
    let rows = c
        .query(
            "SELECT p.id::bigint FROM projects p JOIN namespaces n ON n.id = p.namespace_id
             WHERE n.type = 'User' AND n.owner_id = $1::bigint ORDER BY p.id",
            &[&user_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}
