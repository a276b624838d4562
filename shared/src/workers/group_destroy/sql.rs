//! The SQL of [`crate::workers::group_destroy`]: the listing, the re-checks every
//! chunk makes under its locks, and the deletions of each chunk. Each contribution
//! table has its own complete chunk statement.

/// Orphan project namespaces directly below `$1`: type 'Project', no `projects` row
/// refers to them, and nothing below them.
macro_rules! orphans_below {
    () => {
        "namespaces o
     WHERE o.parent_id = $1::bigint AND o.type = 'Project'
       AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.project_namespace_id = o.id)
       AND NOT EXISTS (SELECT 1 FROM projects p WHERE p.namespace_id = o.id)
       AND NOT EXISTS (SELECT 1 FROM namespaces c WHERE c.parent_id = o.id)"
    };
}

crate::statements::statements! {
    /// The projects directly in namespace `$1`, ascending.
    PROJECTS_IN = "SELECT id::bigint FROM projects WHERE namespace_id = $1::bigint ORDER BY id";
    /// Project `$1` locked `FOR UPDATE`: its namespace and project namespace.
    LOCK_PROJECT = "SELECT namespace_id::bigint, project_namespace_id::bigint FROM projects
             WHERE id = $1::bigint FOR UPDATE";
    /// Namespace `$1` locked `FOR SHARE`: whether it lies under `$2`.
    SHARE_NAMESPACE_UNDER = "SELECT $2::bigint = ANY(traversal_ids::bigint[]) FROM namespaces
             WHERE id = $1::bigint FOR SHARE";
    /// Contributions chunk: at most `$2` issues of project `$1`, lowest ids first.
    DELETE_ISSUES_CHUNK = "DELETE FROM issues WHERE id IN
                           (SELECT id FROM issues WHERE project_id = $1::bigint ORDER BY id LIMIT $2)";
    /// Contributions chunk: at most `$2` merge requests of target project `$1`.
    DELETE_MERGE_REQUESTS_CHUNK = "DELETE FROM merge_requests WHERE id IN
                           (SELECT id FROM merge_requests WHERE target_project_id = $1::bigint ORDER BY id LIMIT $2)";
    /// Contributions chunk: at most `$2` notes of project `$1`, lowest ids first.
    DELETE_NOTES_CHUNK = "DELETE FROM notes WHERE id IN
                           (SELECT id FROM notes WHERE project_id = $1::bigint ORDER BY id LIMIT $2)";
    /// The project bots with a membership of source `$1`/`$2`, ascending.
    BOTS_OF_SOURCE = "SELECT DISTINCT m.user_id::bigint FROM members m JOIN users u ON u.id = m.user_id
             WHERE m.source_type = $1 AND m.source_id = $2::bigint AND u.user_type = 6
             ORDER BY 1";
    /// Memberships (invites and requests included) of source `$1`/`$2`.
    DELETE_SOURCE_MEMBERS = "DELETE FROM members WHERE source_type = $1 AND source_id = $2::bigint";
    /// Notification settings of source `$1`/`$2`.
    DELETE_SOURCE_NOTIFICATION_SETTINGS = "DELETE FROM notification_settings WHERE source_type = $1 AND source_id = $2::bigint";
    /// The authorizations of project `$1`.
    DELETE_PROJECT_AUTHORIZATIONS = "DELETE FROM project_authorizations WHERE project_id = $1::bigint";
    /// The hooks of project `$1`.
    DELETE_PROJECT_HOOKS = "DELETE FROM web_hooks WHERE project_id = $1::bigint";
    /// The routes of project `$1` and of its project namespace `$2`.
    DELETE_PROJECT_ROUTES = "DELETE FROM routes WHERE (source_type = 'Project' AND source_id = $1::bigint)
            OR (source_type = 'Namespace' AND source_id = $2::bigint)";
    /// Project `$1`.
    DELETE_PROJECT = "DELETE FROM projects WHERE id = $1::bigint";
    /// Project namespace `$1`.
    DELETE_PROJECT_NAMESPACE = "DELETE FROM namespaces WHERE id = $1::bigint AND type = 'Project'";
    /// Group `$1` locked `FOR UPDATE`: whether it lies under `$2`.
    LOCK_GROUP_UNDER = "SELECT $2::bigint = ANY(traversal_ids::bigint[]) FROM namespaces
             WHERE id = $1::bigint AND type = 'Group' FOR UPDATE";
    /// The orphan project namespaces directly below `$1`, locked.
    LOCK_ORPHANS = concat!("SELECT o.id::bigint FROM ", orphans_below!(), " ORDER BY o.id FOR UPDATE OF o");
    /// The routes of namespaces `$1`.
    DELETE_NAMESPACE_ROUTES = "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id = ANY($1::bigint[])";
    /// Namespaces `$1`.
    DELETE_NAMESPACES = "DELETE FROM namespaces WHERE id = ANY($1::bigint[])";
    /// What is still below group `$1`, named for the log.
    LEFT_BELOW_GROUP = "SELECT 'namespace ' || id || ' (' || COALESCE(type, 'NULL') || ')' FROM namespaces
             WHERE parent_id = $1::bigint
             UNION ALL
             SELECT 'project ' || id FROM projects WHERE namespace_id = $1::bigint
             ORDER BY 1";
    /// The hooks of group `$1`.
    DELETE_GROUP_HOOKS = "DELETE FROM web_hooks WHERE group_id = $1::bigint";
    /// The route of group `$1`.
    DELETE_GROUP_ROUTE = "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id = $1::bigint";
    /// The deletion schedule of group `$1`.
    DELETE_GROUP_SCHEDULE = "DELETE FROM group_deletion_schedules WHERE group_id = $1::bigint";
    /// Group `$1` (members_deletion_schedules and import_source_users cascade;
    /// placeholder details and member_namespace_id become NULL).
    DELETE_GROUP = "DELETE FROM namespaces WHERE id = $1::bigint";
    /// The state of user `$1` (for the inactive-user error line).
    USER_STATE = "SELECT state FROM users WHERE id = $1::bigint";
}
