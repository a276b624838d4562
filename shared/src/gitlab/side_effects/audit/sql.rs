//! The statements of [`crate::gitlab::side_effects::audit`]. Every insert takes one
//! array per column (one element per event) and the time `$1`.

crate::statements::statements! {
    /// Whether the instance has written any project or group audit event (`hk check`
    /// compares it with `AUDIT_EVENTS`).
    ANY_ROWS = "SELECT EXISTS (SELECT 1 FROM project_audit_events)
                    OR EXISTS (SELECT 1 FROM group_audit_events)";
    /// `$1` ids from `audit_events_id_seq`: the legacy table's sequence, which the
    /// scoped copies share during dual writes and draw from alone from GitLab 19.1 on.
    NEXT_IDS = "SELECT nextval('audit_events_id_seq')::bigint FROM generate_series(1, $1::int4)";
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
    /// The scoped copies of project events (`project_audit_events`), same ids.
    INSERT_PROJECT = "INSERT INTO project_audit_events
         (id, created_at, project_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       SELECT x.id, $1::timestamptz, x.entity_id, x.author_id, x.target_id, x.event_name, x.details,
              x.author_name, x.entity_path, x.target_details, x.target_type
       FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
                   $8::text[], $9::text[], $10::text[], $11::text[])
         AS x(id, entity_id, author_id, target_id, event_name, details, author_name, entity_path,
              target_details, target_type)";
    /// The scoped copies of group events (`group_audit_events`), same ids.
    INSERT_GROUP = "INSERT INTO group_audit_events
         (id, created_at, group_id, author_id, target_id, event_name, details, author_name,
          entity_path, target_details, target_type)
       SELECT x.id, $1::timestamptz, x.entity_id, x.author_id, x.target_id, x.event_name, x.details,
              x.author_name, x.entity_path, x.target_details, x.target_type
       FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
                   $8::text[], $9::text[], $10::text[], $11::text[])
         AS x(id, entity_id, author_id, target_id, event_name, details, author_name, entity_path,
              target_details, target_type)";
}

/// The legacy table, which GitLab 18 writes first and 19.5 no longer has
/// (`audit_events.id`: a column module of the catalogue).
pub mod legacy {
    crate::statements::statements! {
        /// The legacy rows (`audit_events`, `created_at` without time zone, in UTC);
        /// `$12` the entity types.
        INSERT_LEGACY = "INSERT INTO audit_events
             (id, created_at, entity_id, author_id, target_id, details, author_name,
              entity_path, target_details, target_type, entity_type)
           SELECT x.id, ($1::timestamptz AT TIME ZONE 'UTC'), x.entity_id, x.author_id, x.target_id,
                  x.details, x.author_name, x.entity_path, x.target_details, x.target_type,
                  x.entity_type
           FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::text[], $7::text[],
                       $8::text[], $9::text[], $10::text[], $11::text[], $12::text[])
             AS x(id, entity_id, author_id, target_id, event_name, details, author_name, entity_path,
                  target_details, target_type, entity_type)";
    }
}
