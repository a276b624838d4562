//! The SQL of [`crate::gitlab::group_deletion`]: the deletion period, the schedule
//! rows, and the statements of `restore_group` (locks, free-name checks, renames, and
//! from GitLab 19.1 the state change's propagation record).

crate::statements::statements! {
    /// The root's schedule row `FOR SHARE` (the first re-check of every `group-destroy`
    /// chunk and of `storage-cleanup`'s container repositories).
    SHARE_SCHEDULE = "SELECT user_id::bigint, marked_for_deletion_on FROM group_deletion_schedules
             WHERE group_id = $1::bigint FOR SHARE";
    /// `deletion_adjourned_period` of the highest-id settings row (NULL without one), and
    /// the column's default in the installed GitLab's schema (7 before 18.3, 30 since).
    DELETION_ADJOURNED_PERIOD = "SELECT
             (SELECT deletion_adjourned_period::int4 FROM application_settings ORDER BY id DESC LIMIT 1),
             (SELECT NULLIF(regexp_replace(pg_get_expr(d.adbin, d.adrelid), '[^0-9]', '', 'g'), '')::int4
                FROM pg_attrdef d
                JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
               WHERE d.adrelid = 'application_settings'::regclass
                 AND a.attname = 'deletion_adjourned_period')";
    /// One keyset page of due groups: `$1` cutoff, `$2` after id, `$3` limit.
    DUE_PAGE = "SELECT n.id::bigint, s.user_id::bigint, s.marked_for_deletion_on
             FROM namespaces n JOIN group_deletion_schedules s ON s.group_id = n.id
             WHERE n.type = 'Group' AND s.marked_for_deletion_on <= $1::date
               AND isfinite(s.marked_for_deletion_on) AND n.id > $2::bigint
             ORDER BY n.id LIMIT $3";
    /// How many schedules are marked at `±infinity` (never due: behaviour §D29).
    NOT_FINITE_SCHEDULES = "SELECT count(*)::bigint FROM group_deletion_schedules
             WHERE NOT isfinite(marked_for_deletion_on)";
    /// The schedule row of one group.
    SCHEDULE_OF = "SELECT group_id::bigint, user_id::bigint, marked_for_deletion_on
             FROM group_deletion_schedules
             WHERE group_id = $1::bigint AND isfinite(marked_for_deletion_on)";
    /// Whether a namespace exists with `type = 'Group'`.
    GROUP_EXISTS = "SELECT 1 FROM namespaces WHERE id = $1::bigint AND type = 'Group'";
    /// Namespaces of any type strictly below `$1`.
    NAMESPACES_BELOW = "WITH g AS (SELECT traversal_ids AS t FROM namespaces WHERE id = $1::bigint)
             SELECT n.id::bigint FROM g, namespaces n
             WHERE n.traversal_ids > g.t
               AND n.traversal_ids < (g.t[1:cardinality(g.t) - 1] || (g.t[cardinality(g.t)] + 1))
               AND $1::bigint = ANY(n.traversal_ids) AND n.id <> $1::bigint
             ORDER BY n.id";
    /// Restore step 1: the schedule row, locked.
    LOCK_SCHEDULE = "SELECT user_id::bigint, marked_for_deletion_on FROM group_deletion_schedules
             WHERE group_id = $1::bigint FOR UPDATE";
    /// The group's row, locked.
    LOCK_GROUP = "SELECT name, path, parent_id::bigint, traversal_ids::bigint[] FROM namespaces
             WHERE id = $1::bigint AND type = 'Group' FOR UPDATE";
    /// The routes of the namespaces in `$1` (the traversal ids), locked root first.
    LOCK_ANCESTOR_ROUTES = "SELECT count(*) FROM (
           SELECT r.id FROM routes r
           WHERE r.source_type = 'Namespace' AND r.source_id = ANY($1::bigint[])
           ORDER BY array_position($1::bigint[], r.source_id::bigint), r.id
           FOR UPDATE) AS locked";
    /// The committed route path and name of the group (`$1`) and its parent (`$2`).
    ROUTES_OF_GROUP_AND_PARENT = "SELECT (SELECT path FROM routes WHERE source_type = 'Namespace' AND source_id = $1::bigint),
                    (SELECT name FROM routes WHERE source_type = 'Namespace' AND source_id = $1::bigint),
                    (SELECT path FROM routes WHERE source_type = 'Namespace' AND source_id = $2::bigint),
                    (SELECT name FROM routes WHERE source_type = 'Namespace' AND source_id = $2::bigint)";
    /// Whether a full path `$1` is taken by a route other than group `$2`'s own.
    PATH_TAKEN = "SELECT EXISTS (SELECT 1 FROM routes WHERE lower(path) = lower($1)
                       AND NOT (source_type = 'Namespace' AND source_id = $2::bigint))";
    /// Whether a sibling group of parent `$1` other than `$3` has the name `$2`.
    NAME_TAKEN = "SELECT EXISTS (SELECT 1 FROM namespaces
                   WHERE parent_id IS NOT DISTINCT FROM $1::bigint AND type = 'Group'
                     AND name = $2 AND id <> $3::bigint)";
    /// Restore step 5: rename the group.
    RENAME_GROUP = "UPDATE namespaces SET name = $2, path = $3, updated_at = $4::timestamptz
         WHERE id = $1::bigint";
    /// Restore step 6: the group's own route.
    UPDATE_GROUP_ROUTE = "UPDATE routes SET path = $2, name = $3, updated_at = $4::timestamptz
         WHERE source_type = 'Namespace' AND source_id = $1::bigint";
    /// Restore step 6: re-prefix every route below the group.
    REPREFIX_ROUTES_BELOW = "UPDATE routes SET
           path = $2 || substr(path, char_length($1) + 1),
           name = CASE WHEN left(name, char_length($3)) = $3
                       THEN $4 || substr(name, char_length($3) + 1) ELSE name END,
           updated_at = $5::timestamptz
         WHERE ((source_type = 'Namespace' AND source_id = ANY($6::bigint[]))
             OR (source_type = 'Project' AND source_id = ANY($7::bigint[])))
           AND left(path, char_length($1)) = $1";
    /// Restore step 7: delete the schedule.
    DELETE_SCHEDULE = "DELETE FROM group_deletion_schedules WHERE group_id = $1::bigint";
}

/// The scheduling user in `state_metadata` (a jsonb integer GitLab writes), NULL when
/// absent or not an id.
macro_rules! metadata_user {
    () => {
        "CASE WHEN d.state_metadata->>'deletion_scheduled_by_user_id' ~ '^[0-9]{1,18}$'
              THEN (d.state_metadata->>'deletion_scheduled_by_user_id')::bigint END"
    };
}

/// The select of [`scheduled_at::DETAILS_SCHEDULE_OF`], locked or not.
macro_rules! details_schedule {
    () => {
        concat!(
            "SELECT ",
            metadata_user!(),
            ",
                    CASE WHEN isfinite(d.deletion_scheduled_at)
                         THEN (d.deletion_scheduled_at AT TIME ZONE 'UTC')::date END,
                    d.deletion_scheduled_at IS NOT NULL
               FROM namespace_details d WHERE d.namespace_id = $1::bigint"
        )
    };
}

/// Statements for GitLab 18.4 and later (`namespaces.state`, `state_metadata`).
pub mod state {
    crate::statements::statements! {
        /// Restore step 7 on the state model, as GitLab's `cancel_deletion` (behaviour
        /// §B51.5): `$1` group, `$2` now. Returns the group's id when it was in state 2.
        RESTORE_STATE = "WITH n AS (
               UPDATE namespaces SET state = CASE
                   WHEN (SELECT d.state_metadata->'preserved_states'->>'schedule_deletion'
                           FROM namespace_details d WHERE d.namespace_id = $1::bigint) = 'archived'
                   THEN 1 ELSE 0 END
                WHERE id = $1::bigint AND state = 2
            RETURNING id, organization_id)
             UPDATE namespace_details d SET state_metadata =
                   ((((d.state_metadata #- '{preserved_states,schedule_deletion}')
                      - 'deletion_scheduled_by_user_id') - 'deletion_scheduled_at') - 'last_error')
                   || jsonb_build_object(
                        'last_updated_at', to_char($2::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'),
                        'last_changed_by_user_id',
                        (SELECT u.id FROM users u WHERE u.user_type = 11
                          ORDER BY (u.organization_id = n.organization_id) DESC, u.id LIMIT 1))
              FROM n WHERE d.namespace_id = n.id
            RETURNING d.namespace_id::bigint";
    }
}

/// Statements for GitLab 18.10 and later (`namespace_details.deletion_scheduled_at`).
pub mod scheduled_at {
    crate::statements::statements! {
        /// One keyset page of due groups (`$1` cutoff date, `$2` after id, `$3` limit): a
        /// group with `deletion_scheduled_at` is due when it is at or before the cutoff's
        /// midnight UTC (GitLab's `deletion_scheduled_before(cutoff date)`), its user from
        /// `state_metadata`, else its schedule row's; a group without it is due by its
        /// `group_deletion_schedules` row as on older releases. Each group once.
        DUE_PAGE_SCHEDULED_AT = concat!("SELECT x.id::bigint, x.user_id::bigint, x.marked FROM (
               SELECT d.namespace_id AS id,
                      COALESCE(", metadata_user!(), ", s.user_id) AS user_id,
                      (d.deletion_scheduled_at AT TIME ZONE 'UTC')::date AS marked
                 FROM namespace_details d
                 LEFT JOIN group_deletion_schedules s ON s.group_id = d.namespace_id
                WHERE d.deletion_scheduled_at <= ($1::date)::timestamp AT TIME ZONE 'UTC'
                  AND isfinite(d.deletion_scheduled_at) AND d.namespace_id > $2::bigint
               UNION ALL
               SELECT s.group_id, s.user_id, s.marked_for_deletion_on
                 FROM group_deletion_schedules s
                WHERE s.marked_for_deletion_on <= $1::date AND isfinite(s.marked_for_deletion_on)
                  AND s.group_id > $2::bigint
                  AND NOT EXISTS (SELECT 1 FROM namespace_details d
                                   WHERE d.namespace_id = s.group_id AND d.deletion_scheduled_at IS NOT NULL)
             ) x JOIN namespaces n ON n.id = x.id AND n.type = 'Group'
             WHERE x.user_id IS NOT NULL
             ORDER BY x.id LIMIT $3");
        /// Group `$1`'s `namespace_details` schedule: the user in `state_metadata`, the UTC
        /// date of `deletion_scheduled_at` (NULL when not finite), and whether it is set.
        DETAILS_SCHEDULE_OF = details_schedule!();
        /// [`DETAILS_SCHEDULE_OF`], the row locked (restore step 1, before the schedule row).
        LOCK_DETAILS_SCHEDULE = concat!(details_schedule!(), " FOR UPDATE");
        /// The root's `namespace_details` row `FOR SHARE` (the first re-check on this
        /// model, before the schedule row, as [`super::SHARE_SCHEDULE`]): the user in
        /// `state_metadata`, the UTC date of `deletion_scheduled_at` (NULL when not
        /// finite), and whether it is set.
        SHARE_DETAILS_SCHEDULE = "SELECT CASE WHEN d.state_metadata->>'deletion_scheduled_by_user_id' ~ '^[0-9]{1,18}$'
                         THEN (d.state_metadata->>'deletion_scheduled_by_user_id')::bigint END,
                    CASE WHEN isfinite(d.deletion_scheduled_at)
                         THEN (d.deletion_scheduled_at AT TIME ZONE 'UTC')::date END,
                    d.deletion_scheduled_at IS NOT NULL
               FROM namespace_details d WHERE d.namespace_id = $1::bigint FOR SHARE";
        /// Restore: clear `deletion_scheduled_at` of group `$1`.
        CLEAR_SCHEDULED_AT = "UPDATE namespace_details SET deletion_scheduled_at = NULL
             WHERE namespace_id = $1::bigint AND deletion_scheduled_at IS NOT NULL";
    }
}

/// Statements for GitLab 19.1 and later (`namespace_state_propagations`).
pub mod propagation {
    crate::statements::statements! {
        /// Restore, after [`super::state::RESTORE_STATE`]: the outbox record of group
        /// `$1`'s change from deletion-scheduled (2) to its restored state (`$2` now),
        /// pending; one already pending for that target stands (GitLab's unique partial
        /// index).
        PROPAGATE_RESTORE = "INSERT INTO namespace_state_propagations
               (namespace_id, source_state, target_state, status, created_at, updated_at)
             SELECT n.id, 2, n.state, 0, $2::timestamptz, $2::timestamptz
               FROM namespaces n WHERE n.id = $1::bigint AND n.state IN (0, 1)
             ON CONFLICT DO NOTHING";
    }
}
