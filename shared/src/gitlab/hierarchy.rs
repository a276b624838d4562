//! The namespace hierarchy (behaviour §1.5).
//!
//! Owns: `projects_under(g)`, `self_and_descendant_groups(g)` and `owner_scope(g)`.
//! Descendants are a range over `traversal_ids` (served by its index; the bound computed
//! from the column, so `integer[]` works too) with the spec's `:g = ANY(traversal_ids)`
//! as the exact filter. The statements are in [`sql`].

use tokio_postgres::GenericClient;

use crate::error::Result;

pub mod sql;

async fn descendants<C: GenericClient>(c: &C, group_id: i64, statement: &str) -> Result<Vec<i64>> {
    let rows = c.query(statement, &[&group_id]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `self_and_descendant_groups(g)`, ascending ids.
pub async fn descendant_groups<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    descendants(c, group_id, sql::DESCENDANT_GROUPS).await
}

/// `self_and_descendant_groups(g)`, deepest first, then by id (the destroy order of
/// behaviour §B51.4.2).
pub async fn descendant_groups_deepest_first<C: GenericClient>(
    c: &C,
    group_id: i64,
) -> Result<Vec<i64>> {
    descendants(c, group_id, sql::DESCENDANT_GROUPS_DEEPEST_FIRST).await
}

/// `projects_under(g)`: projects whose namespace is g or a descendant group.
pub async fn projects_under<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    let rows = c.query(sql::PROJECTS_UNDER, &[&group_id]).await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `owner_scope(g)`: `{g}` for a top-level group (or one that no longer exists),
/// otherwise its `traversal_ids`.
pub async fn owner_scope<C: GenericClient>(c: &C, group_id: i64) -> Result<Vec<i64>> {
    let row = c.query_opt(sql::OWNER_SCOPE, &[&group_id]).await?;
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
