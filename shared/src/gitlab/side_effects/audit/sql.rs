//! The statements of [`crate::gitlab::side_effects::audit`]: one event per insert; ids
//! come from the tables' defaults (the legacy table's, copied into the scoped table).

crate::statements::statements! {
    /// Whether the instance has written any project or group audit event (`hk check`
    /// compares it with `AUDIT_EVENTS`).
    ANY_ROWS = "SELECT EXISTS (SELECT 1 FROM project_audit_events)
                    OR EXISTS (SELECT 1 FROM group_audit_events)";
    /// The names and full paths the events' columns and `details` carry: per event,
    /// target user `$1[i]`'s name and the full path of source `$2[i]`/`$3[i]`
    /// (`Project` or `Namespace`), and author `$4`'s name (NULL: the system).
    FACTS = "SELECT u.name, rt.path, a.name
       FROM unnest($1::bigint[], $2::text[], $3::bigint[]) WITH ORDINALITY AS r(user_id, source_type, source_id, n)
         LEFT JOIN users u ON u.id = r.user_id
         LEFT JOIN routes rt ON rt.source_id = r.source_id AND rt.source_type = r.source_type
         LEFT JOIN users a ON a.id = $4::bigint
       ORDER BY r.n";
    /// `project_destroyed`'s facts for project `$1` and author `$2`: the project's full
    /// path, its parent group and that group's full path, the author's name.
    PROJECT_FACTS = "SELECT rp.path, p.namespace_id::bigint, rn.path, a.name
       FROM projects p
         LEFT JOIN routes rp ON rp.source_id = p.id AND rp.source_type = 'Project'
         LEFT JOIN routes rn ON rn.source_id = p.namespace_id AND rn.source_type = 'Namespace'
         LEFT JOIN users a ON a.id = $2::bigint
       WHERE p.id = $1::bigint";
    /// `group_destroyed`'s facts for group `$1` and author `$2`: the group's full path,
    /// its root ancestor and that root's full path, the author's name.
    GROUP_FACTS = "SELECT rg.path, r.id, rr.path, a.name
       FROM namespaces g
         CROSS JOIN LATERAL (SELECT COALESCE(g.traversal_ids[1], g.id)::bigint AS id) r
         LEFT JOIN routes rg ON rg.source_id = g.id AND rg.source_type = 'Namespace'
         LEFT JOIN routes rr ON rr.source_id = r.id AND rr.source_type = 'Namespace'
         LEFT JOIN users a ON a.id = $2::bigint
       WHERE g.id = $1::bigint";
    /// A user deletion's facts: user `$1`'s username, author `$2`'s name, and the full
    /// path of the bot resource `$3` (`Project` or `Namespace`) `$4` (NULL: none).
    USER_FACTS = "SELECT u.username::text, a.name::text, rt.path::text
       FROM users u
         LEFT JOIN users a ON a.id = $2::bigint
         LEFT JOIN routes rt ON rt.source_type = $3::text AND rt.source_id = $4::bigint
       WHERE u.id = $1::bigint";
    /// The scoped copy of a user event with the legacy row's id `$1` (dual write).
    INSERT_USER = "INSERT INTO user_audit_events
         (id, created_at, user_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::bigint, $2::timestamptz, $3::bigint, $4::bigint, $5::bigint, $6, $7, $8, $9, $10, $11)";
    /// A user event where there is no legacy table (GitLab 19.5): the id from the
    /// table's default.
    INSERT_USER_ALONE = "INSERT INTO user_audit_events
         (created_at, user_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::timestamptz, $2::bigint, $3::bigint, $4::bigint, $5, $6, $7, $8, $9, $10)
       RETURNING id::bigint";
    /// The scoped copy of a project event with the legacy row's id `$1` (dual write).
    INSERT_PROJECT = "INSERT INTO project_audit_events
         (id, created_at, project_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::bigint, $2::timestamptz, $3::bigint, $4::bigint, $5::bigint, $6, $7, $8, $9, $10, $11)";
    /// The scoped copy of a group event with the legacy row's id `$1` (dual write).
    INSERT_GROUP = "INSERT INTO group_audit_events
         (id, created_at, group_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::bigint, $2::timestamptz, $3::bigint, $4::bigint, $5::bigint, $6, $7, $8, $9, $10, $11)";
    /// A project event where there is no legacy table (GitLab 19.5): the id from the
    /// table's default (`audit_events_id_seq` from GitLab 19.1 on).
    INSERT_PROJECT_ALONE = "INSERT INTO project_audit_events
         (created_at, project_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::timestamptz, $2::bigint, $3::bigint, $4::bigint, $5, $6, $7, $8, $9, $10)
       RETURNING id::bigint";
    /// A group event where there is no legacy table (GitLab 19.5): the id from the
    /// table's default.
    INSERT_GROUP_ALONE = "INSERT INTO group_audit_events
         (created_at, group_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       VALUES ($1::timestamptz, $2::bigint, $3::bigint, $4::bigint, $5, $6, $7, $8, $9, $10)
       RETURNING id::bigint";
}

/// The legacy table, which GitLab 18 writes first and 19.5 no longer has
/// (`audit_events.id`: a column module of the catalogue).
pub mod legacy {
    crate::statements::statements! {
        /// The legacy row (`audit_events`, `created_at` without time zone, in UTC), its
        /// id from the table's default (`audit_events_id_seq`); `$11` the entity type.
        INSERT_LEGACY = "INSERT INTO audit_events
             (created_at, entity_id, author_id, target_id, details, author_name,
              entity_path, target_details, target_type, entity_type)
           VALUES (($1::timestamptz AT TIME ZONE 'UTC'), $2::bigint, $3::bigint, $4::bigint,
                   $5, $6, $7, $8, $9, $10)
           RETURNING id::bigint";
    }
}
