//! The SQL of [`crate::gitlab::group_deletion`]: the deletion period, the schedule
//! rows, and the statements of `restore_group` (locks, free-name checks, renames).

crate::statements::statements! {
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
