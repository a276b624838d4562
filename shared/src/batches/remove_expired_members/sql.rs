//! The statements of [`crate::batches::remove_expired_members`].

use crate::gitlab::membership::sql::member_columns;

crate::statements::statements! {
    /// The first page (behaviour §B38.4): `$1` today, `$2` the limit.
    PAGE = "SELECT expires_at, id::bigint FROM members
     WHERE expires_at IS NOT NULL AND expires_at <= $1::date AND isfinite(expires_at)
     ORDER BY expires_at DESC, id DESC LIMIT $2";
    /// A page after a cursor (behaviour §B38.4): `$1` today, `$2`/`$3` the cursor, `$4` the limit.
    PAGE_AFTER = "SELECT expires_at, id::bigint FROM members
     WHERE expires_at IS NOT NULL AND expires_at <= $1::date AND isfinite(expires_at)
       AND (expires_at, id) < ($2::date, $3::bigint)
     ORDER BY expires_at DESC, id DESC LIMIT $4";
    /// The rest of a page within the cursor's date, by the primary key: the rows of date
    /// `$1::date` (expired on `$5::date`) among the `$3` highest ids below `$2::bigint`,
    /// in page order, at most `$4`; a whole page is exactly [`PAGE_AFTER`]'s.
    PAGE_SAME_DATE = "SELECT expires_at, id FROM (
       SELECT id::bigint AS id, expires_at FROM members
       WHERE id < $2::bigint ORDER BY id DESC LIMIT $3
     ) w
     WHERE expires_at = $1::date AND expires_at <= $5::date
     ORDER BY id DESC LIMIT $4";
    /// The memberships that expire at `-infinity` (a date GitLab accepts, outside the
    /// keyset's dates), lowest ids first, at most `$1`.
    INFINITELY_EXPIRED = "SELECT id::bigint FROM members
     WHERE expires_at = '-infinity'::date ORDER BY id LIMIT $1";
    /// Step 2 for one member: member `$1` if still expired on `$2::date`, locked.
    LOCK_MEMBER = concat!(
        "SELECT ",
        member_columns!(),
        " FROM members
                 WHERE id = $1::bigint AND expires_at IS NOT NULL AND expires_at <= $2::date
                 FOR UPDATE"
    );
    /// Whether a user trigger fires on `DELETE` of `members`.
    MEMBERS_HAVE_DELETE_TRIGGERS = "SELECT EXISTS (SELECT 1 FROM pg_trigger
                            WHERE tgrelid = 'members'::regclass AND NOT tgisinternal
                              AND (tgtype & 8) <> 0)";
    /// A group's statements are planned once per session (their shape does not depend
    /// on the values); ends with the transaction.
    GENERIC_PLANS = "SET LOCAL plan_cache_mode = force_generic_plan";
    /// Step 1 of a group's lock order (behaviour §7.2 (d), §7.3), and steps 2 and 4 of
    /// every member that needs no per-member rule, in one statement. `locked`: the row
    /// locks, ascending, of every member of `$1::bigint[]` still expired on `$2::date`
    /// and of every membership of a project bot among them, each flagged in the group,
    /// bot, or owner candidate of behaviour §2.5. `del`: the others are deleted by the
    /// `ctid` `locked` holds, with their notification settings; a row changed before its
    /// lock was granted is invisible to this snapshot and goes the per-member way. One
    /// row per locked row: id, user, in the group, bot, owner candidate, source id,
    /// deleted, and for a deleted row its source type, access level, expiry and whether
    /// it was an access request.
    LOCK_AND_DELETE_PLAIN = "
    WITH locked AS MATERIALIZED (
      SELECT m.ctid AS row_version, m.id::bigint AS id, m.user_id::bigint AS user_id,
             (m.id = ANY($1::bigint[]) AND m.expires_at IS NOT NULL
              AND m.expires_at <= $2::date) AS in_group,
             COALESCE(u.user_type = 6, false) AS bot,
             (m.type = 'GroupMember' AND m.source_type = 'Namespace' AND m.access_level = 50
              AND m.state = 0 AND m.requested_at IS NULL AND u.id IS NOT NULL
              AND u.user_type <> 6) AS owner_candidate,
             m.source_id::bigint AS source_id
      FROM members m LEFT JOIN users u ON u.id = m.user_id
      WHERE (m.id = ANY($1::bigint[]) AND m.expires_at IS NOT NULL AND m.expires_at <= $2::date)
         OR m.user_id = ANY(ARRAY(
              SELECT x.user_id FROM members x JOIN users b ON b.id = x.user_id
              WHERE x.id = ANY($1::bigint[]) AND x.expires_at IS NOT NULL
                AND x.expires_at <= $2::date AND b.user_type = 6))
      ORDER BY m.id
      FOR UPDATE OF m
    ),
    del AS (
      DELETE FROM members m
      WHERE m.ctid = ANY(ARRAY(SELECT l.row_version FROM locked l
                               WHERE l.in_group AND NOT l.bot AND NOT l.owner_candidate))
      RETURNING m.id::bigint AS id, m.source_type, m.user_id::bigint AS user_id,
                m.source_id::bigint AS source_id, m.access_level::int4 AS access_level,
                m.expires_at, m.requested_at IS NOT NULL AS requested
    ),
    ns AS (
      DELETE FROM notification_settings n USING del
      WHERE n.user_id = del.user_id AND n.source_type = del.source_type
        AND n.source_id = del.source_id
    )
    SELECT l.id, l.user_id, l.in_group, l.bot, l.owner_candidate, l.source_id,
           d.id IS NOT NULL, d.source_type, d.access_level, d.expires_at, d.requested
    FROM locked l LEFT JOIN del d ON d.id = l.id
    ORDER BY l.id";
    /// Step 2: the ids whose group-owner locks the group needs: `owner_scope(g)` of every
    /// owner candidate's group `$1::bigint[]`, and of every group where a bot of
    /// `$2::bigint[]` has a direct owner membership (phase 1's round, taken up front).
    OWNER_SCOPES = "
    SELECT DISTINCT s.id::bigint
    FROM (SELECT unnest($1::bigint[]) AS gid
          UNION
          SELECT m.source_id::bigint FROM members m
          WHERE m.user_id = ANY($2::bigint[]) AND m.source_type = 'Namespace'
            AND m.access_level = 50) o
      LEFT JOIN namespaces g ON g.id = o.gid
      CROSS JOIN LATERAL unnest(
        CASE WHEN g.id IS NULL OR g.parent_id IS NULL OR cardinality(g.traversal_ids) = 0
             THEN ARRAY[o.gid] ELSE g.traversal_ids::bigint[] END) AS s(id)
    ORDER BY 1";
    /// Step 3: the `users` rows of the group's bots (phase 1 locks them), ascending.
    LOCK_BOTS = "SELECT id FROM users WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE";
}
