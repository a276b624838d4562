//! The statements of [`crate::gitlab::hierarchy`].

/// The descendants of group `$1` (itself included) as namespaces `n` joined to `g` (the
/// group's own `traversal_ids` as `g.t`): the prefix range over `traversal_ids`,
/// bounded by the column's own values so it suits both array types, plus the exact
/// `:g = ANY(traversal_ids)` filter. Ends in a WHERE clause.
macro_rules! descendants_of {
    () => {
        "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
     SELECT n.id::bigint FROM g, namespaces n
     WHERE n.type = 'Group'
       AND n.traversal_ids >= g.t
       AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
       AND $1::bigint = ANY(n.traversal_ids)"
    };
}

crate::statements::statements! {
    /// `self_and_descendant_groups($1)`, ascending ids.
    DESCENDANT_GROUPS = concat!(descendants_of!(), " ORDER BY n.id");
    /// `self_and_descendant_groups($1)`, deepest first, then by id.
    DESCENDANT_GROUPS_DEEPEST_FIRST =
        concat!(descendants_of!(), " ORDER BY cardinality(n.traversal_ids) DESC, n.id ASC");
    /// `projects_under($1)`: projects whose namespace is `$1` or a descendant group,
    /// ascending ids.
    PROJECTS_UNDER = "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
             SELECT p.id::bigint FROM g, namespaces n JOIN projects p ON p.namespace_id = n.id
             WHERE n.type = 'Group'
               AND n.traversal_ids >= g.t
               AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
               AND $1::bigint = ANY(n.traversal_ids)
             ORDER BY p.id";
    /// Whether group `$1` is top level, and its `traversal_ids` (for `owner_scope`).
    OWNER_SCOPE = "SELECT parent_id IS NULL, traversal_ids::bigint[] FROM namespaces WHERE id = $1::bigint";
}
