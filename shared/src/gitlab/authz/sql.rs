//! The statements of [`crate::gitlab::authz`]: `desired(u, P)` and the two forms of
//! the refresh (one user, and many removed memberships at once).

/// The groups user `$1` reaches before inheritance, as `reach(gid, l)` CTEs for
/// `concat!` (`crate::gitlab::authz::sql::reach!()`): `grants(source_type, sid, l)` are
/// the user's access-granting memberships (active, no request, at least GUEST;
/// MINIMAL_ACCESS never grants project access), and `reach` adds, for each group
/// membership, the groups shared with that group (`group_group_links`, the lower of
/// the member's and the link's level; minimal-access links excluded). A group inherits
/// from every `reach` row on its `traversal_ids`.
macro_rules! reach {
    () => {
        "grants AS (
       SELECT m.source_type, m.source_id::bigint AS sid, m.access_level AS l FROM members m
       WHERE m.user_id = $1::bigint AND m.state = 0
         AND m.requested_at IS NULL AND m.access_level >= 10),
     reach AS (
       SELECT g.sid AS gid, g.l FROM grants g WHERE g.source_type = 'Namespace'
       UNION ALL
       SELECT gl.shared_group_id::bigint, LEAST(g.l, gl.group_access)
       FROM grants g JOIN group_group_links gl ON gl.shared_with_group_id = g.sid
       WHERE g.source_type = 'Namespace' AND gl.group_access > 5)"
    };
}
pub(crate) use reach;

/// `desired(u, p) = project_access(u, p)` (behaviour §2.2) for user `$1` and every
/// project in `$2::bigint[]`: columns `project_id`, `access_level` (0 = no access).
/// The highest of the user's project membership, the groups it reaches ([`reach!`]) on
/// the project namespace's `traversal_ids`, 50 for the owner of a User namespace, and
/// each project share (`project_group_links`: the lower of the reached level of the
/// linked group and the link's) unless the project's namespace has
/// `share_with_group_lock`. A query for `concat!`
/// (`crate::gitlab::authz::sql::desired!()`).
macro_rules! desired {
    () => {
        concat!(
            "WITH ",
            crate::gitlab::authz::sql::reach!(),
            "
    SELECT p.id::bigint AS project_id, GREATEST(
      COALESCE((SELECT max(g.l) FROM grants g
                WHERE g.source_type = 'Project' AND g.sid = p.id), 0),
      CASE WHEN n.type = 'Group' THEN
        COALESCE((SELECT max(r.l) FROM reach r WHERE r.gid = ANY(n.traversal_ids::bigint[])), 0)
      ELSE 0 END,
      CASE WHEN n.type = 'User' AND n.owner_id = $1::bigint THEN 50 ELSE 0 END,
      CASE WHEN n.share_with_group_lock IS TRUE THEN 0 ELSE
        COALESCE((SELECT max(LEAST(r.l, pl.group_access))
                  FROM project_group_links pl
                    CROSS JOIN LATERAL (SELECT ln.traversal_ids::bigint[] AS lt FROM namespaces ln
                                        WHERE ln.id = pl.group_id OFFSET 0) k
                    JOIN reach r ON r.gid = ANY(k.lt)
                  WHERE pl.project_id = p.id), 0)
      END
    )::int4 AS access_level
    FROM projects p
      CROSS JOIN LATERAL (SELECT n.type, n.traversal_ids, n.owner_id, n.share_with_group_lock
                          FROM namespaces n WHERE n.id = p.namespace_id OFFSET 0) n
    WHERE p.id = ANY($2::bigint[])"
        )
    };
}
pub(crate) use desired;

/// The groups of the subtree of group `r.g` (itself included), one row `d(n, t)` each,
/// as a `CROSS JOIN LATERAL` ending a `FROM` for `concat!`: the groups whose
/// `traversal_ids` lie in the range the root's own `traversal_ids` open (every array
/// with that prefix sorts at or after it and before the prefix with its last id plus
/// one), read on the `traversal_ids` index. The range alone decides; inside the lookup
/// a `r.g = ANY(n.traversal_ids)` made generic plans walk every group once per root
/// (docs/benchmarks.md), so that always-true check stands outside it, where it only
/// brings the planner's estimate of the subtree's size down to the truth.
macro_rules! subtree {
    () => {
        "CROSS JOIN LATERAL (
                   SELECT n.id::bigint AS n, n.traversal_ids::bigint[] AS t FROM namespaces g
                     JOIN namespaces n ON n.traversal_ids >= g.traversal_ids
                       AND n.traversal_ids < (g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                              || (g.traversal_ids[cardinality(g.traversal_ids)] + 1))
                   WHERE g.id = r.g AND n.type = 'Group' OFFSET 0
                 ) d
               WHERE r.g = ANY(d.t)"
    };
}

crate::statements::statements! {
    /// The (user, project) pairs authorized on any project of `$1::bigint[]`.
    AUTHORIZED_ON_PROJECTS = "SELECT DISTINCT user_id::bigint, project_id::bigint
             FROM project_authorizations WHERE project_id = ANY($1::bigint[])
             ORDER BY 1, 2";
    /// `affected` of group memberships `$1::bigint[]` (behaviour §3): the projects under
    /// each group and under every group shared with it (`group_group_links`), plus
    /// the projects shared (`project_group_links`) with any group of those subtrees.
    /// Ascending ids, each once; every relation read by key, as in `refresh_removed!`.
    REACHED_FROM = concat!(
        "WITH roots AS (
               SELECT unnest($1::bigint[]) AS g
               UNION
               SELECT gl.shared_group_id::bigint FROM group_group_links gl
               WHERE gl.shared_with_group_id = ANY($1::bigint[])
             ),
             sub AS (
               SELECT DISTINCT d.n
               FROM roots r
                 ",
        subtree!(),
        "
             )
             SELECT q.p FROM sub s
               CROSS JOIN LATERAL (SELECT p.id::bigint AS p FROM projects p
                                   WHERE p.namespace_id = s.n OFFSET 0) q
             UNION
             SELECT l.p FROM sub s
               CROSS JOIN LATERAL (SELECT pl.project_id::bigint AS p FROM project_group_links pl
                                   WHERE pl.group_id = s.n OFFSET 0) l
             ORDER BY 1"
    );
    /// `refresh(u, P)` for user `$1` and projects `$2::bigint[]` (after the user's
    /// authorization lock): delete what `desired` does not have, upsert what it has.
    /// Returns one row: rows deleted, rows written.
    REFRESH = concat!(
        "WITH desired AS (",
        desired!(),
        "),
             del AS (
               DELETE FROM project_authorizations pa
               WHERE pa.user_id = $1::bigint AND pa.project_id = ANY($2::bigint[])
                 AND NOT EXISTS (SELECT 1 FROM desired d
                                 WHERE d.project_id = pa.project_id
                                   AND d.access_level = pa.access_level AND d.access_level > 0)
               RETURNING 1
             ),
             ins AS (
               INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
               SELECT $1::bigint, d.project_id, d.access_level, true FROM desired d
               WHERE d.access_level > 0
               ON CONFLICT (user_id, project_id, access_level)
                 DO UPDATE SET is_unique = true
                 WHERE project_authorizations.is_unique IS DISTINCT FROM true
               RETURNING 1
             )
             SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"
    );
    /// `refresh(m.user_id, affected(m))` for every removed membership at once:
    /// `$1`/`$2` users and projects of the project memberships, `$3`/`$4` users and
    /// groups of the group memberships, `$5` the users. Returns one row: rows deleted,
    /// rows written.
    ///
    /// Every read of the instance's projects, namespaces and shares is a lookup by key
    /// (`LATERAL … OFFSET 0`, which the planner may not flatten into a join), and the
    /// authorizations are read through `$5`: as joins, generic plans hashed the whole
    /// `projects` table, merged whole indexes or scanned `project_authorizations`, so a
    /// group's refresh grew with the instance (docs/benchmarks.md).
    REFRESH_REMOVED = concat!(
        "WITH roots AS (
           SELECT x.u, x.g FROM unnest($3::bigint[], $4::bigint[]) AS x(u, g)
           UNION
           SELECT x.u, l.g FROM unnest($3::bigint[], $4::bigint[]) AS x(u, g)
             CROSS JOIN LATERAL (SELECT gl.shared_group_id::bigint AS g FROM group_group_links gl
                                 WHERE gl.shared_with_group_id = x.g OFFSET 0) l
         ),
         sub AS (
           SELECT DISTINCT r.u, d.n
           FROM roots r
             ",
        subtree!(),
        "
         ),
         affected AS (
           SELECT x.u, x.p FROM unnest($1::bigint[], $2::bigint[]) AS x(u, p)
           UNION
           SELECT s.u, q.p FROM sub s
             CROSS JOIN LATERAL (SELECT p.id::bigint AS p FROM projects p
                                 WHERE p.namespace_id = s.n OFFSET 0) q
           UNION
           SELECT s.u, l.p FROM sub s
             CROSS JOIN LATERAL (SELECT pl.project_id::bigint AS p FROM project_group_links pl
                                 WHERE pl.group_id = s.n OFFSET 0) l
         ),
         pairs AS (
           SELECT a.u, a.p, q.id IS NOT NULL AS project_exists, q.type,
                  q.t, q.owner_id, COALESCE(q.locked, false) AS locked
           FROM affected a
             LEFT JOIN LATERAL (
               SELECT p.id, n.type, n.traversal_ids::bigint[] AS t, n.owner_id::bigint AS owner_id,
                      n.share_with_group_lock IS TRUE AS locked
               FROM projects p LEFT JOIN namespaces n ON n.id = p.namespace_id
               WHERE p.id = a.p OFFSET 0
             ) q ON true
         ),
         grants AS (
           SELECT m.user_id::bigint AS u, m.source_type, m.source_id::bigint AS sid,
                  m.access_level AS l
           FROM members m
           WHERE m.user_id = ANY($5::bigint[]) AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 10
         ),
         reach AS (
           SELECT g.u, g.sid AS gid, g.l FROM grants g WHERE g.source_type = 'Namespace'
           UNION ALL
           SELECT g.u, l.gid, LEAST(g.l, l.access)
           FROM grants g
             CROSS JOIN LATERAL (SELECT gl.shared_group_id::bigint AS gid, gl.group_access AS access
                                 FROM group_group_links gl
                                 WHERE gl.shared_with_group_id = g.sid AND gl.group_access > 5
                                 OFFSET 0) l
           WHERE g.source_type = 'Namespace'
         ),
         via_project AS (
           SELECT t.u, t.p, max(g.l) AS l FROM pairs t
             JOIN grants g ON g.u = t.u AND g.source_type = 'Project' AND g.sid = t.p
           GROUP BY t.u, t.p
         ),
         via_groups AS (
           SELECT t.u, t.p, max(r.l) AS l FROM pairs t
             JOIN reach r ON r.u = t.u AND t.type = 'Group' AND r.gid = ANY(t.t)
           GROUP BY t.u, t.p
         ),
         links AS MATERIALIZED (
           SELECT t.u, t.p, k.access, k.lt FROM pairs t
             CROSS JOIN LATERAL (
               SELECT pl.group_access AS access, ln.lt FROM project_group_links pl
                 CROSS JOIN LATERAL (SELECT n.traversal_ids::bigint[] AS lt FROM namespaces n
                                     WHERE n.id = pl.group_id OFFSET 0) ln
               WHERE pl.project_id = t.p OFFSET 0
             ) k
           WHERE NOT t.locked
         ),
         via_links AS (
           SELECT k.u, k.p, max(LEAST(r.l, k.access)) AS l FROM links k
             JOIN reach r ON r.u = k.u AND r.gid = ANY(k.lt)
           GROUP BY k.u, k.p
         ),
         desired AS MATERIALIZED (
           SELECT t.u, t.p, t.project_exists, GREATEST(
             COALESCE(vp.l, 0), COALESCE(vg.l, 0), COALESCE(vl.l, 0),
             CASE WHEN t.type = 'User' AND t.owner_id = t.u THEN 50 ELSE 0 END
           )::int4 AS access_level
           FROM pairs t
             LEFT JOIN via_project vp ON vp.u = t.u AND vp.p = t.p
             LEFT JOIN via_groups vg ON vg.u = t.u AND vg.p = t.p
             LEFT JOIN via_links vl ON vl.u = t.u AND vl.p = t.p
         ),
         del AS (
           DELETE FROM project_authorizations pa USING desired d
           WHERE pa.user_id = ANY($5::bigint[]) AND pa.user_id = d.u AND pa.project_id = d.p
             AND (d.access_level = 0 OR pa.access_level <> d.access_level)
           RETURNING 1
         ),
         ins AS (
           INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT d.u, d.p, d.access_level, true FROM desired d
           WHERE d.access_level > 0 AND d.project_exists
             AND NOT EXISTS (SELECT 1 FROM project_authorizations c
                             WHERE c.user_id = ANY($5::bigint[]) AND c.user_id = d.u AND c.project_id = d.p
                               AND c.access_level = d.access_level AND c.is_unique IS TRUE)
           ON CONFLICT (user_id, project_id, access_level)
             DO UPDATE SET is_unique = true
             WHERE project_authorizations.is_unique IS DISTINCT FROM true
           RETURNING 1
         )
     SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"
    );
}
