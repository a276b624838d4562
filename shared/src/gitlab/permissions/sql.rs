//! The statements of [`crate::gitlab::permissions`].

crate::statements::statements! {
    /// A user's permission facts: id, active, admin, user_type of user `$1`.
    LOAD_ACTOR = "SELECT id::bigint, state IS NOT DISTINCT FROM 'active', admin, user_type::int2
             FROM users WHERE id = $1::bigint";
    /// `project_access($1, $2)`: the access level `desired` gives user `$1` on the one
    /// project of `$2::bigint[]` (no row when the project does not exist).
    PROJECT_ACCESS = concat!(
        "SELECT access_level FROM (",
        crate::gitlab::authz::sql::desired!(),
        ") d"
    );
    /// `group_access($1, $2)`: the highest level user `$1` reaches (a membership or a
    /// group share, `crate::gitlab::authz::sql::reach!`) on group `$2` or its ancestors
    /// (0 when none).
    GROUP_ACCESS = concat!(
        "WITH ",
        crate::gitlab::authz::sql::reach!(),
        " SELECT COALESCE(max(r.l), 0)::int4
             FROM namespaces g JOIN reach r ON r.gid = ANY(g.traversal_ids::bigint[])
             WHERE g.id = $2::bigint"
    );
    /// Whether a counted owner row other than member `$2` exists in the groups
    /// `$1::bigint[]`.
    OTHER_COUNTED_OWNER_EXISTS = "SELECT EXISTS (
               SELECT 1 FROM members o JOIN users u ON u.id = o.user_id
               WHERE o.source_type = 'Namespace' AND o.source_id = ANY($1::bigint[])
                 AND o.id <> $2::bigint
                 AND o.state = 0 AND o.requested_at IS NULL AND o.access_level = 50
                 AND u.state = 'active' AND u.user_type <> 6)";
    /// `sole_owned_groups($1)`, ascending group ids.
    SOLE_OWNED_GROUPS = "SELECT m.source_id::bigint
             FROM members m
             JOIN users u ON u.id = m.user_id
             LEFT JOIN namespaces g ON g.id = m.source_id
             WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
               AND m.access_level = 50 AND m.state = 0 AND m.requested_at IS NULL
               AND u.user_type <> 6
               AND NOT EXISTS (
                 SELECT 1 FROM members o JOIN users ou ON ou.id = o.user_id
                 WHERE o.source_type = 'Namespace'
                   AND o.source_id = ANY(CASE WHEN g.parent_id IS NULL OR cardinality(g.traversal_ids) = 0
                                              THEN ARRAY[m.source_id::bigint]
                                              ELSE g.traversal_ids::bigint[] END)
                   AND o.user_id <> $1::bigint
                   AND o.state = 0 AND o.requested_at IS NULL AND o.access_level = 50
                   AND ou.state = 'active' AND ou.user_type <> 6)
             ORDER BY 1";
    /// Every group where user `$1` has a direct owner membership: its id, whether it is top
    /// level (or gone), its `traversal_ids`.
    OWNED_GROUP_SCOPES = "SELECT m.source_id::bigint, g.parent_id IS NULL OR g.id IS NULL, g.traversal_ids::bigint[]
             FROM members m LEFT JOIN namespaces g ON g.id = m.source_id
             WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace' AND m.access_level = 50";
    /// Ids of the projects in personal namespaces owned by user `$1`, ascending.
    PERSONAL_PROJECTS = "SELECT p.id::bigint FROM projects p JOIN namespaces n ON n.id = p.namespace_id
             WHERE n.type = 'User' AND n.owner_id = $1::bigint ORDER BY p.id";
}
