//! The statements of [`crate::workers::prune_deletions`].

use crate::gitlab::membership::sql::member_columns;

/// `FROM` and `WHERE` of `hierarchy_members(s)` (behaviour §B43.4.2) with `$1` = the user, `$2` = the hierarchy's groups
/// (`self_and_descendant_groups(root)`) and `$3` = `projects_under(root)`. Every
/// membership state, access requests and any access level match; invites never do.
macro_rules! hierarchy_members {
    () => {
        "members m
    WHERE m.user_id = $1::bigint
      AND ((m.source_type = 'Namespace' AND m.source_id = ANY($2::bigint[]))
        OR (m.source_type = 'Project' AND m.source_id = ANY($3::bigint[])))"
    };
}

crate::statements::statements! {
    /// behaviour §B43.4.1 step 2: the page of schedules by id, `$1` the limit.
    SCHEDULES = "SELECT id::bigint, namespace_id::bigint, user_id::bigint, scheduled_by_id::bigint
             FROM members_deletion_schedules ORDER BY id LIMIT $1";
    /// behaviour §B43.4.2 a: lock schedule `$1`.
    LOCK_SCHEDULE = "SELECT id::bigint, namespace_id::bigint, user_id::bigint, scheduled_by_id::bigint
             FROM members_deletion_schedules WHERE id = $1::bigint FOR UPDATE";
    /// `root($1)`: the first id of `traversal_ids` (the namespace itself when empty).
    ROOT_OF = "SELECT COALESCE(traversal_ids[1], id)::bigint FROM namespaces WHERE id = $1::bigint";
    /// behaviour §B43.4.2 c: the batch, by id: up to `$4` of `hierarchy_members!`, locked.
    BATCH = concat!(
        "SELECT m.id::bigint FROM ",
        hierarchy_members!(),
        " ORDER BY m.id LIMIT $4 FOR UPDATE OF m"
    );
    /// The ids whose group-owner locks the batch `$1::bigint[]` needs: `owner_scope(g)`
    /// of each owner candidate's group, ascending.
    OWNER_SCOPES = "SELECT DISTINCT s.id::bigint
             FROM members m
               JOIN users u ON u.id = m.user_id AND u.user_type <> 6
               LEFT JOIN namespaces g ON g.id = m.source_id
               CROSS JOIN LATERAL unnest(
                 CASE WHEN g.id IS NULL OR g.parent_id IS NULL OR cardinality(g.traversal_ids) = 0
                      THEN ARRAY[m.source_id::bigint] ELSE g.traversal_ids::bigint[] END) AS s(id)
             WHERE m.id = ANY($1::bigint[]) AND m.type = 'GroupMember'
               AND m.source_type = 'Namespace' AND m.access_level = 50
               AND m.state = 0 AND m.requested_at IS NULL
             ORDER BY 1";
    /// (2): lock membership `$1` of user `$2`.
    LOCK_MEMBER = concat!(
        "SELECT ",
        member_columns!(),
        " FROM members
                     WHERE id = $1::bigint AND user_id = $2::bigint FOR UPDATE"
    );
    /// e: whether any of `hierarchy_members!` is left.
    ANY_LEFT = concat!("SELECT EXISTS (SELECT 1 FROM ", hierarchy_members!(), ")");
    /// f: delete schedule `$1`.
    DELETE_SCHEDULE = "DELETE FROM members_deletion_schedules WHERE id = $1::bigint";
    /// Whether any schedule is left (the continuation).
    ANY_SCHEDULE = "SELECT EXISTS (SELECT 1 FROM members_deletion_schedules)";
}
