//! The statements of [`crate::gitlab::system_hooks`]: the system hooks that receive
//! an event, the rows a body is built from (read before the removal, in its
//! transaction), and the delivery's re-check that the reported row is gone.

crate::statements::statements! {
    /// Every `SystemHook` row GitLab's `SystemHook.executable` returns: all of them
    /// (auto-disabling applies to `ProjectHook`, and in EE `GroupHook`, only), none
    /// while the instance is in silent mode (GitLab's defaults without a settings row).
    RECEIVERS = "SELECT w.id::bigint FROM web_hooks w \
         WHERE w.type = 'SystemHook' \
           AND NOT COALESCE((SELECT s.silent_mode_enabled FROM application_settings s \
                             ORDER BY s.id DESC LIMIT 1), false) \
         ORDER BY w.id";
    /// The memberships `$1` whose removal GitLab reports (`Member#post_destroy_member_hook`:
    /// not an invite or request, with a user): id, project or group, timestamps, the
    /// source's name, path, full path and id, the user's username, name, public email
    /// and id, access level, project visibility, expiry.
    MEMBER_BODIES = "SELECT m.id::bigint, m.source_type = 'Project', m.created_at, m.updated_at, \
                COALESCE(p.name, g.name), COALESCE(p.path, g.path), \
                COALESCE(r.path, p.path, g.path), m.source_id::bigint, \
                u.username, u.name, u.public_email, u.id::bigint, m.access_level::int4, \
                p.visibility_level::int4, m.expires_at \
         FROM members m \
         JOIN users u ON u.id = m.user_id \
         LEFT JOIN projects p ON m.source_type = 'Project' AND p.id = m.source_id \
         LEFT JOIN namespaces g ON m.source_type = 'Namespace' AND g.id = m.source_id \
         LEFT JOIN routes r ON r.source_type = m.source_type AND r.source_id = m.source_id \
         WHERE m.id = ANY($1::bigint[]) AND m.requested_at IS NULL AND m.invite_token IS NULL \
           AND (p.id IS NOT NULL OR g.id IS NOT NULL) \
         ORDER BY m.id";
    /// Every membership of user `$1` (phase 1 of removing the user).
    MEMBERSHIPS_OF = "SELECT id::bigint FROM members WHERE user_id = $1::bigint ORDER BY id";
    /// Every membership of group `$1` (destroyed with the group: GitLab's
    /// `all_group_members`, `dependent: :destroy`).
    MEMBERSHIPS_IN = "SELECT id::bigint FROM members \
         WHERE source_type = 'Namespace' AND source_id = $1::bigint ORDER BY id";
    /// Group `$1`'s `group_destroy` fields: timestamps, name, path, full path, id.
    GROUP_BODY = "SELECT g.created_at, g.updated_at, g.name, g.path, COALESCE(r.path, g.path), \
                g.id::bigint \
         FROM namespaces g \
         LEFT JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = g.id \
         WHERE g.id = $1::bigint AND g.type = 'Group'";
    /// Project `$1`'s `project_destroy` fields: timestamps, name, path, full path, id,
    /// parent namespace, visibility, and the deprecated owner's name (the parent
    /// group's: group-destroy destroys group projects only).
    PROJECT_BODY = "SELECT p.created_at, p.updated_at, p.name, p.path, COALESCE(r.path, p.path), \
                p.id::bigint, p.namespace_id::bigint, p.visibility_level::int4, n.name \
         FROM projects p \
         JOIN namespaces n ON n.id = p.namespace_id \
         LEFT JOIN routes r ON r.source_type = 'Project' AND r.source_id = p.id \
         WHERE p.id = $1::bigint";
    /// The owners of a group project (`project.group.all_owner_members`): group `$1`'s
    /// own non-request owner rows with a user, by member id: name, public email.
    GROUP_OWNERS = "SELECT u.name, u.public_email FROM members m JOIN users u ON u.id = m.user_id \
         WHERE m.source_type = 'Namespace' AND m.source_id = $1::bigint \
           AND m.requested_at IS NULL AND m.access_level = 50 \
         ORDER BY m.id";
    /// User `$1`'s `user_destroy` fields: timestamps, name, email, id, username.
    USER_BODY = "SELECT u.created_at, u.updated_at, u.name, u.email, u.id::bigint, u.username \
         FROM users u WHERE u.id = $1::bigint";
    /// Delivery: membership `$1` still there (waits for a removal in flight).
    MEMBER_PRESENT = "SELECT id::bigint FROM members WHERE id = $1::bigint FOR KEY SHARE";
    /// Delivery: namespace `$1` still there (waits for a removal in flight).
    NAMESPACE_PRESENT = "SELECT id::bigint FROM namespaces WHERE id = $1::bigint FOR KEY SHARE";
    /// Delivery: project `$1` still there (waits for a removal in flight).
    PROJECT_PRESENT = "SELECT id::bigint FROM projects WHERE id = $1::bigint FOR KEY SHARE";
    /// Delivery: user `$1` still there (waits for a removal in flight).
    USER_PRESENT = "SELECT id::bigint FROM users WHERE id = $1::bigint FOR KEY SHARE";
}
