//! The floor's refresh: GitLab's authorization rule over every removed membership at
//! once, as plain joins (`shared::gitlab::authz::sql::REFRESH_REMOVED` before its reads
//! became per-row lookups by key). For one statement over a whole run, hash joins over
//! whole tables are the fastest plan; ours and the chunked floor run the keyed form,
//! whose cost per call does not grow with the instance. Both compute the same rows
//! (every side's checksum is compared).

/// The join form over the temporary table `floor_removed (u, st, sid)`.
pub const JOIN_FORM: &str = r#"WITH roots AS (
               SELECT x.u, x.g FROM (SELECT u, sid AS g FROM floor_removed WHERE st = 'Namespace') x
               UNION
               SELECT x.u, gl.shared_group_id::bigint FROM (SELECT u, sid AS g FROM floor_removed WHERE st = 'Namespace') x
                 JOIN group_group_links gl ON gl.shared_with_group_id = x.g
             ),
             sub AS (
               SELECT DISTINCT r.u, n.id::bigint AS n
               FROM roots r
                 JOIN namespaces g ON g.id = r.g
                 JOIN namespaces n ON n.type = 'Group'
                   AND n.traversal_ids >= g.traversal_ids
                   AND n.traversal_ids < (g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                          || (g.traversal_ids[cardinality(g.traversal_ids)] + 1))
                   AND r.g = ANY(n.traversal_ids)
             ),
             affected AS (
               SELECT x.u, x.p FROM (SELECT u, sid AS p FROM floor_removed WHERE st = 'Project') x
               UNION
               SELECT s.u, p.id::bigint FROM sub s JOIN projects p ON p.namespace_id = s.n
               UNION
               SELECT s.u, pl.project_id::bigint FROM sub s
                 JOIN project_group_links pl ON pl.group_id = s.n
             ),
             pairs AS (
               SELECT a.u, a.p, p.id IS NOT NULL AS project_exists, n.type,
                      n.traversal_ids::bigint[] AS t, n.owner_id::bigint AS owner_id,
                      n.share_with_group_lock IS TRUE AS locked
               FROM affected a
                 LEFT JOIN projects p ON p.id = a.p
                 LEFT JOIN namespaces n ON n.id = p.namespace_id
             ),
             grants AS (
               SELECT m.user_id::bigint AS u, m.source_type, m.source_id::bigint AS sid,
                      m.access_level AS l
               FROM members m
               WHERE m.user_id IN (SELECT u FROM floor_removed) AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 10
             ),
             reach AS (
               SELECT g.u, g.sid AS gid, g.l FROM grants g WHERE g.source_type = 'Namespace'
               UNION ALL
               SELECT g.u, gl.shared_group_id::bigint, LEAST(g.l, gl.group_access)
               FROM grants g JOIN group_group_links gl ON gl.shared_with_group_id = g.sid
               WHERE g.source_type = 'Namespace' AND gl.group_access > 5
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
             via_links AS (
               SELECT t.u, t.p, max(LEAST(r.l, pl.group_access)) AS l FROM pairs t
                 JOIN project_group_links pl ON pl.project_id = t.p AND NOT t.locked
                 JOIN namespaces ln ON ln.id = pl.group_id
                 JOIN reach r ON r.u = t.u AND r.gid = ANY(ln.traversal_ids::bigint[])
               GROUP BY t.u, t.p
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
               WHERE pa.user_id = d.u AND pa.project_id = d.p
                 AND (d.access_level = 0 OR pa.access_level <> d.access_level)
               RETURNING 1
             ),
             ins AS (
               INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
               SELECT d.u, d.p, d.access_level, true FROM desired d
               WHERE d.access_level > 0 AND d.project_exists
                 AND NOT EXISTS (SELECT 1 FROM project_authorizations c
                                 WHERE c.user_id = d.u AND c.project_id = d.p
                                   AND c.access_level = d.access_level AND c.is_unique IS TRUE)
               ON CONFLICT (user_id, project_id, access_level)
                 DO UPDATE SET is_unique = true
                 WHERE project_authorizations.is_unique IS DISTINCT FROM true
               RETURNING 1
             )
         SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"#;
