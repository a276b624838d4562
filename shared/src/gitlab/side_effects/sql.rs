//! The statements of [`crate::gitlab::side_effects`]. Each takes the removed
//! memberships as parallel arrays (one element per membership), so a grouped B38
//! transaction runs each statement once.

/// The groups left and their subtrees, for a `DELETE`: from the pairs of user `$1[i]`
/// and group left `$2[i]` as `r(user_id, group_id)`, the group `g` and each group `n`
/// of its subtree (itself included), by the prefix range over `traversal_ids`. Starts
/// with `USING`; the statement's `WHERE` follows.
macro_rules! left_group_subtrees {
    () => {
        "USING unnest($1::bigint[], $2::bigint[]) AS r(user_id, group_id)
         JOIN namespaces g ON g.id = r.group_id AND cardinality(g.traversal_ids) > 0
         JOIN namespaces n ON n.type = 'Group'
           AND n.traversal_ids >= g.traversal_ids
           AND n.traversal_ids < g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                 || (g.traversal_ids[cardinality(g.traversal_ids)] + 1)"
    };
}
pub(crate) use left_group_subtrees;

crate::statements::statements! {
    /// Member `$1`'s `expires_at`, read before its removal (the audit event's reason).
    EXPIRES_AT = "SELECT expires_at FROM members WHERE id = $1::bigint";
    /// EventCreateService#expired_leave_project / #leave_project: one `events` row per
    /// removed project membership `($1[i] user, $2[i] project)` whose project and user
    /// still exist, action `$3` (expired 11, left 9), target the project, at `$4`.
    /// The ids written, for the plan.
    INSERT_EVENTS = "INSERT INTO events
         (project_id, author_id, target_id, target_type, action, created_at, updated_at)
       SELECT p.id, u.id, p.id, 'Project', $3::int2, $4::timestamptz, $4::timestamptz
       FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS r(user_id, project_id, n)
         JOIN projects p ON p.id = r.project_id
         JOIN users u ON u.id = r.user_id
       ORDER BY r.n
       RETURNING id::bigint";
    /// UpdateHighestRoleWorker for users `$1::bigint[]` at `$2`: an active human's row
    /// becomes the highest `access_level` of its memberships that are not access
    /// requests (NULL with none), written only when it differs; any other user's row
    /// goes. The users whose row changed.
    UPSERT_HIGHEST_ROLES = "WITH u AS (
         SELECT x.id::bigint AS id, (x.state = 'active' AND x.user_type = 0) AS eligible
         FROM users x WHERE x.id = ANY($1::bigint[])
       ),
       gone AS (
         DELETE FROM user_highest_roles h USING u
         WHERE h.user_id = u.id AND NOT u.eligible
         RETURNING h.user_id::bigint AS user_id
       ),
       written AS (
         INSERT INTO user_highest_roles (user_id, highest_access_level, updated_at)
         SELECT u.id, l.level, $2::timestamptz
         FROM u CROSS JOIN LATERAL (
           SELECT max(m.access_level)::int4 AS level FROM members m
           WHERE m.user_id = u.id AND m.requested_at IS NULL) l
         WHERE u.eligible
         ON CONFLICT (user_id) DO UPDATE
           SET highest_access_level = EXCLUDED.highest_access_level,
               updated_at = EXCLUDED.updated_at
           WHERE user_highest_roles.highest_access_level
                 IS DISTINCT FROM EXCLUDED.highest_access_level
         RETURNING user_highest_roles.user_id::bigint AS user_id
       )
       SELECT user_id FROM gone UNION ALL SELECT user_id FROM written";
    /// TodosDestroyer::EntityLeaveWorker (`Todos::Destroy::EntityLeaveService`) for
    /// pairs `($1[i] user, $2[i] project)`, after the authorization refresh, with `$3[i]`
    /// the privacy of the entity left (the group's; NULL for a project left: the
    /// project's own). The user's todos on the project's confidential issues when the
    /// user is no longer at least a planner there (unless the user wrote or is assigned
    /// the issue). A private entity: every todo of the user on the project once the user
    /// no longer reaches it, and the merge-request todos below planner. A public or
    /// internal one: `TodosDestroyer::PrivateFeaturesWorker`
    /// (`Todos::Destroy::PrivateFeaturesService`), the user's todos on the project's
    /// private features (`project_features` level 10: issues, merge requests, the
    /// repository's commits) once the user no longer reaches the project. The todo ids
    /// removed.
    DELETE_LEAVE_TODOS = "DELETE FROM todos t
       USING unnest($1::bigint[], $2::bigint[], $3::bool[]) AS r(user_id, project_id, private)
         JOIN projects p ON p.id = r.project_id
         LEFT JOIN project_features f ON f.project_id = p.id
       WHERE t.user_id = r.user_id AND t.project_id = r.project_id
         AND (
           (COALESCE(r.private, p.visibility_level = 0) AND NOT EXISTS (
              SELECT 1 FROM project_authorizations pa
              WHERE pa.user_id = r.user_id AND pa.project_id = r.project_id))
           OR (COALESCE(r.private, p.visibility_level = 0) AND t.target_type = 'MergeRequest'
              AND NOT EXISTS (
              SELECT 1 FROM project_authorizations pa
              WHERE pa.user_id = r.user_id AND pa.project_id = r.project_id
                AND pa.access_level >= 15))
           OR (NOT COALESCE(r.private, p.visibility_level = 0)
              AND ((t.target_type = 'Issue' AND f.issues_access_level = 10)
                OR (t.target_type = 'MergeRequest' AND f.merge_requests_access_level = 10)
                OR (t.target_type = 'Commit' AND f.repository_access_level = 10))
              AND NOT EXISTS (
              SELECT 1 FROM project_authorizations pa
              WHERE pa.user_id = r.user_id AND pa.project_id = r.project_id))
           OR (t.target_type = 'Issue' AND t.note_id IS NOT NULL AND EXISTS (
              SELECT 1 FROM notes n WHERE n.id = t.note_id AND n.internal)
              AND NOT EXISTS (
              SELECT 1 FROM project_authorizations pa
              WHERE pa.user_id = r.user_id AND pa.project_id = r.project_id
                AND pa.access_level >= 15))
           OR (t.target_type = 'Issue' AND EXISTS (
              SELECT 1 FROM issues i
              WHERE i.id = t.target_id AND i.project_id = r.project_id AND i.confidential
                AND i.author_id <> r.user_id
                AND NOT EXISTS (SELECT 1 FROM issue_assignees a
                                WHERE a.issue_id = i.id AND a.user_id = r.user_id))
              AND NOT EXISTS (
              SELECT 1 FROM project_authorizations pa
              WHERE pa.user_id = r.user_id AND pa.project_id = r.project_id
                AND pa.access_level >= 15)))
       RETURNING t.id::bigint";
    /// For user `$1` leaving group `$2`: whether the group is private, whether the user
    /// is still at least a planner of the group through it or an ancestor
    /// (`Group#member?(user, PLANNER)`, which keeps every todo), and the projects under
    /// the group outside the subgroups the user is still at least a planner of
    /// (`non_authorized_planner_groups`).
    GROUP_LEAVE_SCOPE = "SELECT g.visibility_level = 0 AS private,
         EXISTS (SELECT 1 FROM members m
                 WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
                   AND m.requested_at IS NULL AND m.state = 0 AND m.access_level >= 15
                   AND m.source_id = ANY(g.traversal_ids::bigint[])) AS reporter,
         ARRAY(SELECT p.id::bigint FROM namespaces n JOIN projects p ON p.namespace_id = n.id
               WHERE n.type = 'Group'
                 AND n.traversal_ids >= g.traversal_ids
                 AND n.traversal_ids < g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                       || (g.traversal_ids[cardinality(g.traversal_ids)] + 1)
                 AND NOT EXISTS (
                   SELECT 1 FROM members m
                   WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
                     AND m.requested_at IS NULL AND m.access_level >= 15
                     AND m.source_id = ANY(n.traversal_ids::bigint[])
                     AND NOT (m.source_id = ANY(g.traversal_ids::bigint[])))
               ORDER BY p.id) AS projects
       FROM namespaces g WHERE g.id = $2::bigint AND cardinality(g.traversal_ids) > 0";
    /// `remove_group_todos` for each pair of user `$1[i]` and group `$2[i]` left below
    /// planner: the user's todos on the private groups of the group's subtree (itself
    /// included) the user no longer sees (`GroupsFinder` with `all_available: false`): no
    /// membership in the group or an ancestor, and no share of the group or an ancestor
    /// with a group the user belongs to (directly or through an ancestor; an expired
    /// link still counts, so its todos stay).
    DELETE_GROUP_LEAVE_TODOS = concat!(
        "DELETE FROM todos t ",
        left_group_subtrees!(),
        "
       WHERE t.user_id = r.user_id AND t.group_id = n.id AND n.visibility_level = 0
         AND NOT EXISTS (
           SELECT 1 FROM members m
           WHERE m.user_id = r.user_id AND m.source_type = 'Namespace'
             AND m.requested_at IS NULL AND m.source_id = ANY(n.traversal_ids::bigint[]))
         AND NOT EXISTS (
           SELECT 1 FROM group_group_links l
             JOIN namespaces w ON w.id = l.shared_with_group_id
             JOIN members m ON m.user_id = r.user_id AND m.source_type = 'Namespace'
               AND m.requested_at IS NULL AND m.source_id = ANY(w.traversal_ids::bigint[])
           WHERE l.shared_group_id = ANY(n.traversal_ids::bigint[]))
       RETURNING t.id::bigint"
    );
    /// The `users` rows of `$1::bigint[]` that the 2FA recompute may write, locked
    /// ascending before the authorization refresh (ARCHITECTURE.md, lock order).
    LOCK_TWO_FACTOR_USERS = "SELECT id::bigint FROM users
       WHERE id = ANY($1::bigint[]) AND require_two_factor_authentication_from_group
       ORDER BY id FOR NO KEY UPDATE";
    /// User#update_two_factor_requirement for users `$1::bigint[]` that the flag
    /// binds: the requirement and the shortest grace period over the groups that
    /// require 2FA among the user's groups (non-request group memberships of at least
    /// guest), their ancestors and their descendants; GitLab's default period (48)
    /// when none does. Only rows whose values change are written.
    UPDATE_TWO_FACTOR = "WITH r AS (
         SELECT u.id::bigint AS id,
           (SELECT min(x.period) FROM members m JOIN namespaces g ON g.id = m.source_id
              CROSS JOIN LATERAL (
                SELECT a.two_factor_grace_period AS period FROM namespaces a
                WHERE a.id = ANY(g.traversal_ids::bigint[]) AND a.require_two_factor_authentication
                UNION ALL
                SELECT d.two_factor_grace_period FROM namespaces d
                WHERE d.type = 'Group' AND cardinality(g.traversal_ids) > 0
                  AND d.traversal_ids >= g.traversal_ids
                  AND d.traversal_ids < g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                        || (g.traversal_ids[cardinality(g.traversal_ids)] + 1)
                  AND d.require_two_factor_authentication) x
            WHERE m.user_id = u.id AND m.source_type = 'Namespace'
              AND m.type = 'GroupMember' AND m.requested_at IS NULL
              AND m.access_level >= 10) AS period
         FROM users u
         WHERE u.id = ANY($1::bigint[]) AND u.require_two_factor_authentication_from_group
       )
       UPDATE users u
       SET require_two_factor_authentication_from_group = (r.period IS NOT NULL),
           two_factor_grace_period = COALESCE(r.period, 48)
       FROM r
       WHERE u.id = r.id
         AND (u.require_two_factor_authentication_from_group IS DISTINCT FROM (r.period IS NOT NULL)
              OR u.two_factor_grace_period IS DISTINCT FROM COALESCE(r.period, 48))
       RETURNING u.id::bigint";
}
