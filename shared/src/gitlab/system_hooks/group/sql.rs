//! The statements of [`crate::gitlab::system_hooks::group`]: the EE group hooks that
//! receive an event and the subgroup body, read in the removal's transaction before
//! its rows go.

crate::statements::statements! {
    /// The `GroupHook` rows GitLab's `Group#execute_hooks(data, $2)` reaches from group
    /// `$1`: on its ancestors and (with `$3`) itself (`self_and_ancestors`), with the
    /// trigger's flag on (`hooks_for`: `member_hooks` → `member_events`,
    /// `subgroup_hooks` → `subgroup_events`, `project_hooks` → `project_events`),
    /// executable at `$4` (GitLab's auto-disabling: not more than 39 failures, not
    /// more than 3 without a `disabled_until`, not disabled until `$4` or later), none
    /// while the instance is in silent mode.
    RECEIVERS = "SELECT w.id::bigint FROM namespaces g \
           JOIN web_hooks w ON w.group_id = ANY(g.traversal_ids::bigint[]) \
         WHERE g.id = $1::bigint AND ($3::bool OR w.group_id <> g.id) \
           AND w.type = 'GroupHook' \
           AND CASE $2::text WHEN 'member_hooks' THEN w.member_events \
                             WHEN 'subgroup_hooks' THEN w.subgroup_events \
                             WHEN 'project_hooks' THEN w.project_events \
                             ELSE false END \
           AND NOT (w.recent_failures > 39 \
                    OR (w.recent_failures > 3 AND w.disabled_until IS NULL)) \
           AND NOT (w.disabled_until IS NOT NULL AND w.disabled_until >= $4::timestamptz) \
           AND NOT COALESCE((SELECT s.silent_mode_enabled FROM application_settings s \
                             ORDER BY s.id DESC LIMIT 1), false) \
         ORDER BY w.id";
    /// Subgroup `$1`'s `subgroup_destroy` fields (`SubgroupBuilder`): timestamps, name,
    /// path, full path, id, and its parent's id, name, path and full path; no row for
    /// a top-level group.
    SUBGROUP_BODY = "SELECT g.created_at, g.updated_at, g.name, g.path, COALESCE(r.path, g.path), \
                g.id::bigint, p.id::bigint, p.name, p.path, COALESCE(pr.path, p.path) \
         FROM namespaces g \
         JOIN namespaces p ON p.id = g.parent_id \
         LEFT JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = g.id \
         LEFT JOIN routes pr ON pr.source_type = 'Namespace' AND pr.source_id = p.id \
         WHERE g.id = $1::bigint AND g.type = 'Group'";
}
