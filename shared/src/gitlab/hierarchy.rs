//! The namespace hierarchy (common.md §1.5).
//!
//! Owns: `projects_under(g)`, `self_and_descendant_groups(g)` and `owner_scope(g)`.
//! Descendants are found with a range over `traversal_ids` (all arrays with g's path as
//! prefix), which `index_namespaces_on_traversal_ids` serves, plus the spec's
//! `:g = ANY(traversal_ids)` as the exact filter. The range bound is computed from the
//! column itself, so it works for `integer[]` and `bigint[]` alike.

use tokio_postgres::GenericClient;

use crate::error::Result;

/// The descendants of group `$1` (itself included) as namespaces `n`: the prefix range
/// over `traversal_ids`, bounded by the column's own values so it suits both array
/// types, plus the exact `:g = ANY(traversal_ids)` filter.
const DESCENDANTS: &str =
    "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
     SELECT n.id::bigint FROM g, namespaces n
     WHERE n.type = 'Group'
       AND n.traversal_ids >= g.t
       AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
       AND $1::bigint = ANY(n.traversal_ids)";

async fn descendants<C: GenericClient>(c: &C, group_id: i64, order: &str) -> Result<Vec<i64>> {
    let rows = c
        .query(&format!("{DESCENDANTS} ORDER BY {order}"), &[&group_id])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `self_and_descendant_groups(g)`, ascending ids.
pub async fn descendant_groups<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    descendants(c, group_id, "n.id").await
}

/// `self_and_descendant_groups(g)`, deepest first, then by id (the destroy order of
/// b51 §4.2).
pub async fn descendant_groups_deepest_first<C: GenericClient>(
    c: &C,
    group_id: i64,
) -> Result<Vec<i64>> {
    descendants(c, group_id, "cardinality(n.traversal_ids) DESC, n.id ASC").await
}

/// `projects_under(g)`: projects whose namespace is g or a descendant group.
pub async fn projects_under<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    let rows = c
        .query(
            "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
             SELECT p.id::bigint FROM g, namespaces n JOIN projects p ON p.namespace_id = n.id
             WHERE n.type = 'Group'
               AND n.traversal_ids >= g.t
               AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
               AND $1::bigint = ANY(n.traversal_ids)
             ORDER BY p.id",
            &[&group_id],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `owner_scope(g)`: `{g}` for a top-level group (or one that no longer exists),
/// otherwise its `traversal_ids`.
pub async fn owner_scope<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    let row = c
        .query_opt(
            "SELECT parent_id IS NULL, traversal_ids::bigint[] FROM namespaces WHERE id = $1::bigint",
            &[&group_id],
        )
        .await?;
    Ok(match row {
        Some(r) if !r.get::<_, bool>(0) => {
            let t: Vec<i64> = r.get(1);
            if t.is_empty() {
                vec![group_id]
            } else {
                t
            }
        }
        _ => vec![group_id],
    })
}
