//! The statements of [`crate::gitlab::user_removal`]: phase 1 and the ghost user.

crate::statements::statements! {
    /// Whether user `$1` exists.
    USER_EXISTS = "SELECT 1 FROM users WHERE id = $1::bigint";
    /// Lock every membership row of user `$1`, ascending ids (step 5 deletes them).
    LOCK_MEMBERSHIPS = "SELECT count(*) FROM (SELECT id FROM members WHERE user_id = $1::bigint
                                ORDER BY id FOR UPDATE) AS locked";
    /// Step 4: lock user `$1`'s row.
    LOCK_USER = "SELECT id FROM users WHERE id = $1::bigint FOR UPDATE";
    /// Step 4: block user `$1` (`$2` now).
    BLOCK_USER = "UPDATE users SET state = 'blocked', updated_at = $2::timestamptz
         WHERE id = $1::bigint AND state IS DISTINCT FROM 'blocked'";
    /// Step 5: delete every membership of user `$1`, returning each source.
    DELETE_MEMBERSHIPS = "DELETE FROM members WHERE user_id = $1::bigint RETURNING source_type, source_id::bigint";
    /// Step 5: user `$1`'s notification settings for the sources
    /// `$2::text[]`/`$3::bigint[]`.
    DELETE_NOTIFICATION_SETTINGS = "DELETE FROM notification_settings ns
             USING unnest($2::text[], $3::bigint[]) AS x(st, sid)
             WHERE ns.user_id = $1::bigint AND ns.source_type = x.st AND ns.source_id = x.sid";
    /// Step 5: the projects user `$1` has authorizations for today.
    AUTHORIZED_PROJECTS = "SELECT project_id::bigint FROM project_authorizations WHERE user_id = $1::bigint";
    /// Step 6: revoke user `$1`'s tokens (`$2` now).
    REVOKE_TOKENS = "UPDATE personal_access_tokens SET revoked = true, updated_at = $2::timestamptz
             WHERE user_id = $1::bigint AND revoked IS DISTINCT FROM true";
    /// Step 7: the `ghost_user_migrations` row of user `$1` (initiator `$2`, `$3` now),
    /// on a GitLab before 19.1 (no `user_type` column; [`typed::INSERT_MIGRATION_TYPED`]
    /// from 19.1 on).
    INSERT_MIGRATION = "INSERT INTO ghost_user_migrations
           (user_id, initiator_user_id, hard_delete, consume_after, created_at, updated_at)
         VALUES ($1::bigint, $2::bigint, false, $3::timestamptz, $3::timestamptz, $3::timestamptz)
         ON CONFLICT (user_id) DO NOTHING";
    /// The ghost user, if one exists (GitLab's lookup: the first `user_type = 5` by id).
    FIND_GHOST = "SELECT id::bigint FROM users WHERE user_type = 5 ORDER BY id LIMIT 1";
    /// The `ghost`, `ghost1`, … names already taken as a username, a namespace path or a
    /// route path (lower case): GitLab makes the ghost's username unique against
    /// namespace paths, and its personal namespace and route take the same path.
    TAKEN_GHOST_USERNAMES = "SELECT lower(username) FROM users WHERE lower(username) ~ '^ghost[0-9]*$'
             UNION SELECT lower(path) FROM namespaces WHERE lower(path) ~ '^ghost[0-9]*$'
             UNION SELECT lower(path) FROM routes WHERE lower(path) ~ '^ghost[0-9]*$'";
    /// The `ghost@example.com`, `ghost1@example.com`, … emails already taken (the local
    /// part, lower case).
    TAKEN_GHOST_EMAILS = "SELECT lower(split_part(email, '@', 1)) FROM users
               WHERE lower(email) ~ '^ghost[0-9]*@example\\.com$'";
    /// A new ghost user as GitLab creates it: username `$1`, email `$2`, `$3` now;
    /// `projects_limit` from the settings (GitLab's default 100000 without one), the
    /// first organization. Returns its id and organization.
    INSERT_GHOST = "INSERT INTO users (username, name, email, user_type, state, admin, projects_limit,
                                organization_id, created_at, updated_at)
             VALUES ($1, 'Ghost', $2, 5, 'active', false,
                     COALESCE((SELECT default_projects_limit FROM application_settings ORDER BY id DESC LIMIT 1), 100000),
                     (SELECT min(id) FROM organizations), $3::timestamptz, $3::timestamptz)
             RETURNING id::bigint, organization_id::bigint";
    /// The ghost user `$1`'s details row with GitLab's bio.
    INSERT_GHOST_DETAILS = "INSERT INTO user_details (user_id, bio) VALUES ($1::bigint,
             'This is a \"Ghost User\", created to hold all issues authored by users that have since been deleted. This user cannot be removed.')";
    /// The ghost user `$1`'s membership of organization `$2` (`$3` now).
    INSERT_GHOST_ORGANIZATION_USER = "INSERT INTO organization_users (organization_id, user_id, created_at, updated_at)
             VALUES ($2::bigint, $1::bigint, $3::timestamptz, $3::timestamptz)";
    /// The ghost user's personal namespace: path `$1`, owner `$2`, `$3` now, organization
    /// `$4`; returns its id. GitLab's trigger adds its `namespace_details` row.
    INSERT_GHOST_NAMESPACE = "INSERT INTO namespaces (name, path, owner_id, type, traversal_ids, organization_id, created_at, updated_at)
             VALUES ('Ghost', $1, $2::bigint, 'User', '{}', $4::bigint, $3::timestamptz, $3::timestamptz)
             RETURNING id::bigint";
    /// The ghost namespace `$1`'s `traversal_ids`.
    SET_GHOST_TRAVERSAL_IDS = "UPDATE namespaces SET traversal_ids = ARRAY[id] WHERE id = $1::bigint";
    /// The ghost namespace `$1`'s route: path `$2`, `$3` now.
    INSERT_GHOST_ROUTE = "INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
         VALUES ($1::bigint, 'Namespace', $2, 'Ghost', $1::bigint, $3::timestamptz, $3::timestamptz)";
}

/// Statements for GitLab 19.1 and later (`ghost_user_migrations.user_type`).
pub mod typed {
    crate::statements::statements! {
        /// Step 7 from GitLab 19.1 on: the row with the user's `user_type`, as GitLab's
        /// model stamps it on create (its workers pick rows by it: a row without one is
        /// consumed by neither). `$1` user, `$2` initiator, `$3` now.
        INSERT_MIGRATION_TYPED = "INSERT INTO ghost_user_migrations
               (user_id, initiator_user_id, hard_delete, consume_after, created_at, updated_at, user_type)
             SELECT u.id, $2::bigint, false, $3::timestamptz, $3::timestamptz, $3::timestamptz, u.user_type
               FROM users u WHERE u.id = $1::bigint
             ON CONFLICT (user_id) DO NOTHING";
    }
}
