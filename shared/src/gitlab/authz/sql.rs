//! The statements of [`crate::gitlab::authz`]: `desired(u, P)` and the two forms of
//! the refresh (one user, and many removed memberships at once).

/// `desired(u, p) = project_access(u, p)` (behaviour §2.2) for user `$1` and every
/// project in `$2::bigint[]`: columns `project_id`, `access_level` (0 = no access).
/// Memberships count when active (`state = 0`, no request) and at least GUEST;
/// MINIMAL_ACCESS never grants project access. A subquery for `concat!`
/// (`crate::gitlab::authz::sql::desired!()`).
macro_rules! desired {
    () => {
        "
    SELECT p.id::bigint AS project_id, GREATEST(
      COALESCE((SELECT max(m.access_level) FROM members m
                WHERE m.user_id = $1::bigint AND m.source_type = 'Project'
                  AND m.source_id = p.id AND m.state = 0
                  AND m.requested_at IS NULL AND m.access_level >= 10), 0),
      CASE WHEN n.type = 'Group' THEN
        COALESCE((SELECT max(m.access_level) FROM members m
                  WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace'
                    AND m.source_id = ANY(n.traversal_ids::bigint[]) AND m.state = 0
                    AND m.requested_at IS NULL AND m.access_level >= 10), 0)
      ELSE 0 END,
      CASE WHEN n.type = 'User' AND n.owner_id = $1::bigint THEN 50 ELSE 0 END
    )::int4 AS access_level
    FROM projects p JOIN namespaces n ON n.id = p.namespace_id
    WHERE p.id = ANY($2::bigint[])"
    };
}
pub(crate) use desired;

/// The set-based refresh over removed memberships read from the relations `$projects`
/// (`x(u, p)`), `$groups` (`x(u, g)`) and the user condition `$users` on `m.user_id`
/// (see [`REFRESH_REMOVED`] for what each part does). Returns one row: rows
/// deleted, rows written.
macro_rules! refresh_removed {
    ($projects:expr, $groups:expr, $users:expr) => {
        concat!(
            "WITH pairs AS (
               SELECT x.u, x.p, p.id IS NOT NULL AS project_exists, n.type,
                      n.traversal_ids::bigint[] AS t, n.owner_id::bigint AS owner_id
               FROM ",
            $projects,
            "
                 LEFT JOIN projects p ON p.id = x.p
                 LEFT JOIN namespaces n ON n.id = p.namespace_id
               UNION
               SELECT x.u, p.id::bigint, true, n.type, n.traversal_ids::bigint[], n.owner_id::bigint
               FROM ",
            $groups,
            "
                 JOIN namespaces g ON g.id = x.g
                 JOIN namespaces n ON n.type = 'Group'
                   AND n.traversal_ids >= g.traversal_ids
                   AND n.traversal_ids < (g.traversal_ids[1:cardinality(g.traversal_ids) - 1]
                                          || (g.traversal_ids[cardinality(g.traversal_ids)] + 1))
                   AND x.g = ANY(n.traversal_ids)
                 JOIN projects p ON p.namespace_id = n.id
             ),
             grants AS (
               SELECT m.user_id::bigint AS u, m.source_type, m.source_id::bigint AS sid,
                      m.access_level AS l
               FROM members m
               WHERE ",
            $users,
            " AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 10
             ),
             desired AS MATERIALIZED (
               SELECT t.u, t.p, t.project_exists, GREATEST(
                 COALESCE(max(g.l), 0),
                 CASE WHEN t.type = 'User' AND t.owner_id = t.u THEN 50 ELSE 0 END
               )::int4 AS access_level
               FROM pairs t LEFT JOIN grants g ON g.u = t.u
                 AND ((g.source_type = 'Project' AND g.sid = t.p)
                      OR (g.source_type = 'Namespace' AND t.type = 'Group' AND g.sid = ANY(t.t)))
               GROUP BY t.u, t.p, t.project_exists, t.type, t.t, t.owner_id
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
         SELECT (SELECT count(*) FROM del), (SELECT count(*) FROM ins)"
        )
    };
}

/// The removed project memberships as bound parameters: `$1` users, `$2` projects.
macro_rules! removed_projects_param {
    () => {
        "unnest($1::bigint[], $2::bigint[]) AS x(u, p)"
    };
}
/// The removed group memberships as bound parameters: `$3` users, `$4` groups.
macro_rules! removed_groups_param {
    () => {
        "unnest($3::bigint[], $4::bigint[]) AS x(u, g)"
    };
}
/// Every user of the removed memberships as a bound parameter: `$5`.
macro_rules! removed_users_param {
    () => {
        "m.user_id = ANY($5::bigint[])"
    };
}

/// The parts of [`REFRESH_REMOVED`] as values (the bench builds other forms).
pub const REMOVED_PROJECTS_PARAM: &str = removed_projects_param!();
/// See [`REMOVED_PROJECTS_PARAM`].
pub const REMOVED_GROUPS_PARAM: &str = removed_groups_param!();
/// See [`REMOVED_PROJECTS_PARAM`].
pub const REMOVED_USERS_PARAM: &str = removed_users_param!();

crate::statements::statements! {
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
    /// groups of the group memberships, `$5` the users.
    REFRESH_REMOVED = refresh_removed!(
        removed_projects_param!(),
        removed_groups_param!(),
        removed_users_param!()
    );
}
