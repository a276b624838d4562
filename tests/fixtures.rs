//! Fixture builders in the spec's notation (behaviour §R2): `U10(human, active)`,
//! `G101 < G100`, `P200 in G101`, `M5: GM G100 U10 50`, `PA(U10,P200,30)`, … Every
//! row gets GitLab-shaped values; ids are explicit so scenarios read like the spec.

use crate::db::TestDb;

/// A user row to insert.
#[derive(Debug, Clone)]
pub struct U {
    id: i64,
    user_type: i16,
    state: Option<String>,
    admin: bool,
    name: Option<String>,
}

impl U {
    fn new(id: i64, user_type: i16) -> U {
        U {
            id,
            user_type,
            state: Some("active".into()),
            admin: false,
            name: None,
        }
    }
    /// `U<id>(human, active)`.
    pub fn human(id: i64) -> U {
        U::new(id, 0)
    }
    /// `U<id>(bot, active)`: a project bot (user_type 6).
    pub fn bot(id: i64) -> U {
        U::new(id, 6)
    }
    /// A placeholder (user_type 15).
    pub fn placeholder(id: i64) -> U {
        U::new(id, 15)
    }
    /// The ghost user (user_type 5).
    pub fn ghost(id: i64) -> U {
        U::new(id, 5)
    }
    /// With another state (`blocked`, …); `None` stores NULL.
    pub fn state(mut self, s: Option<&str>) -> U {
        self.state = s.map(str::to_string);
        self
    }
    /// State `blocked`.
    pub fn blocked(self) -> U {
        self.state(Some("blocked"))
    }
    /// `admin = true`.
    pub fn admin(mut self) -> U {
        self.admin = true;
        self
    }
    /// With a display name.
    pub fn named(mut self, n: &str) -> U {
        self.name = Some(n.into());
        self
    }
}

/// A members row to insert.
#[derive(Debug, Clone)]
pub struct M {
    id: i64,
    group: bool,
    source: i64,
    user: Option<i64>,
    level: i32,
    expires: Option<String>,
    requested: Option<String>,
    invite: Option<(String, String)>,
    state: i16,
}

impl M {
    /// `M<id>: GM G<group> U<user> <level>`.
    pub fn gm(id: i64, group: i64, user: i64, level: i32) -> M {
        M {
            id,
            group: true,
            source: group,
            user: Some(user),
            level,
            expires: None,
            requested: None,
            invite: None,
            state: 0,
        }
    }
    /// `M<id>: PM P<project> U<user> <level>`.
    pub fn pm(id: i64, project: i64, user: i64, level: i32) -> M {
        M {
            group: false,
            ..M::gm(id, project, user, level)
        }
    }
    /// `expires_at`.
    pub fn expires(mut self, date: &str) -> M {
        self.expires = Some(date.into());
        self
    }
    /// `requested_at` (an access request).
    pub fn requested(mut self, ts: &str) -> M {
        self.requested = Some(ts.into());
        self
    }
    /// An invite: no user, with email and token.
    pub fn invite(mut self, email: &str, token: &str) -> M {
        self.user = None;
        self.invite = Some((email.into(), token.into()));
        self
    }
    /// `state` (1 = awaiting).
    pub fn state(mut self, s: i16) -> M {
        self.state = s;
        self
    }
}

/// Fixture helper bound to a test database.
pub struct Fx<'a>(pub &'a TestDb);

fn q(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The `members.member_namespace_id` of a source: the group itself, or the project's
/// project namespace.
pub fn member_namespace(source_type: &str, source_id: i64) -> String {
    if source_type == "Project" {
        format!("(SELECT project_namespace_id FROM projects WHERE id = {source_id})")
    } else {
        source_id.to_string()
    }
}

fn opt(s: &Option<String>) -> String {
    s.as_deref().map(q).unwrap_or_else(|| "NULL".into())
}

impl Fx<'_> {
    /// GitLab's `int4` ids, as older installations have them: `members`' ids,
    /// `project_authorizations.project_id` and `namespaces.traversal_ids` (`integer[]`)
    /// narrowed, and with `schedules` the ids of `members_deletion_schedules` too.
    pub async fn int4_ids(&self, schedules: bool) {
        self.0
            .exec(
                "ALTER TABLE members ALTER COLUMN id TYPE integer,
                   ALTER COLUMN source_id TYPE integer, ALTER COLUMN user_id TYPE integer;
                 -- GitLab's sync trigger reads traversal_ids in its WHEN clause: recreated around the change.
                 DROP TRIGGER trigger_namespaces_traversal_ids_on_update ON namespaces;
                 ALTER TABLE namespaces ALTER COLUMN traversal_ids DROP DEFAULT;
                 ALTER TABLE namespaces ALTER COLUMN traversal_ids TYPE integer[];
                 ALTER TABLE namespaces ALTER COLUMN traversal_ids SET DEFAULT '{}';
                 CREATE TRIGGER trigger_namespaces_traversal_ids_on_update AFTER UPDATE ON namespaces
                   FOR EACH ROW WHEN (old.traversal_ids IS DISTINCT FROM new.traversal_ids)
                   EXECUTE FUNCTION insert_namespaces_sync_event();
                 ALTER TABLE project_authorizations ALTER COLUMN project_id TYPE integer;",
            )
            .await;
        if schedules {
            self.0
                .exec(
                    "ALTER TABLE members_deletion_schedules ALTER COLUMN id TYPE integer,
                       ALTER COLUMN namespace_id TYPE integer, ALTER COLUMN user_id TYPE integer,
                       ALTER COLUMN scheduled_by_id TYPE integer;",
                )
                .await;
        }
    }

    /// Insert users.
    pub async fn users(&self, us: &[U]) {
        for u in us {
            self.0
                .exec(&format!(
                    "INSERT INTO users (id, username, name, email, state, admin, user_type, projects_limit,
                                        organization_id, created_at, updated_at)
                     VALUES ({id}, 'u{id}', {name}, 'u{id}@example.com', {state}, {admin}, {t}, 100000, 1,
                             '2024-01-01', '2024-01-01')",
                    id = u.id,
                    name = u.name.as_deref().map(q).unwrap_or_else(|| format!("'User {}'", u.id)),
                    state = opt(&u.state),
                    admin = u.admin,
                    t = u.user_type
                ))
                .await;
        }
    }

    /// GitLab's `allow_local_requests_from_web_hooks_and_services` (Admin area >
    /// Settings > Network > Outbound requests): set on the settings row, created when
    /// there is none.
    pub async fn local_web_hooks(&self, allow: bool) {
        self.0
            .exec(&format!(
                "UPDATE application_settings SET allow_local_requests_from_web_hooks_and_services = {allow};
                 INSERT INTO application_settings (allow_local_requests_from_web_hooks_and_services)
                 SELECT {allow} WHERE NOT EXISTS (SELECT 1 FROM application_settings)"
            ))
            .await;
    }

    /// `G<id> "<path>"`, optionally `< G<parent>`: namespace (name = path) and route.
    pub async fn group(&self, id: i64, path: &str, parent: Option<i64>) {
        let (traversal, full_path, full_name) = match parent {
            None => (format!("ARRAY[{id}]::bigint[]"), q(path), q(path)),
            Some(p) => (
                format!("(SELECT traversal_ids || {id}::bigint FROM namespaces WHERE id = {p})"),
                format!("(SELECT path || '/' || {} FROM routes WHERE source_type = 'Namespace' AND source_id = {p})", q(path)),
                format!("(SELECT name || ' / ' || {} FROM routes WHERE source_type = 'Namespace' AND source_id = {p})", q(path)),
            ),
        };
        self.0
            .exec(&format!(
                "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
                 VALUES ({id}, {p}, {p}, 'Group', {parent}, {traversal}, 1, '2024-01-01', '2024-01-01');
                 INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
                 VALUES ({id}, 'Namespace', {full_path}, {full_name}, {id}, '2024-01-01', '2024-01-01');",
                p = q(path),
                parent = parent.map(|p| p.to_string()).unwrap_or_else(|| "NULL".into()),
            ))
            .await;
    }

    /// `P<id> in G<ns>` with path `p<id>` and project namespace `id + 100`.
    pub async fn project(&self, id: i64, ns: i64) {
        self.project_path(id, ns, &format!("p{id}")).await
    }

    /// `P<id> in <ns>` with an explicit path.
    pub async fn project_path(&self, id: i64, ns: i64, path: &str) {
        let pns = id + 100;
        self.0
            .exec(&format!(
                "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
                 SELECT {pns}, {p}, {p}, 'Project', {ns}, traversal_ids || {pns}::bigint, organization_id, '2024-01-01', '2024-01-01'
                 FROM namespaces WHERE id = {ns};
                 INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
                 VALUES ({id}, {p}, {p}, {ns}, {pns}, 1, '2024-01-01', '2024-01-01');
                 INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
                 SELECT {id}, 'Project', r.path || '/' || {p}, r.name || ' / ' || {p}, {pns}, '2024-01-01', '2024-01-01'
                 FROM routes r WHERE r.source_id = {ns} AND r.source_type = 'Namespace';",
                p = q(path)
            ))
            .await;
    }

    /// A personal namespace (type User) owned by `user`, with its route.
    pub async fn personal_namespace(&self, id: i64, user: i64) {
        self.0
            .exec(&format!(
                "INSERT INTO namespaces (id, name, path, owner_id, type, traversal_ids, organization_id, created_at, updated_at)
                 VALUES ({id}, 'u{user}', 'u{user}', {user}, 'User', ARRAY[{id}]::bigint[], 1, '2024-01-01', '2024-01-01');
                 INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
                 VALUES ({id}, 'Namespace', 'u{user}', 'u{user}', {id}, '2024-01-01', '2024-01-01');"
            ))
            .await;
    }

    /// Insert members rows.
    pub async fn members(&self, ms: &[M]) {
        for m in ms {
            let (kind, st) = if m.group {
                ("GroupMember", "Namespace")
            } else {
                ("ProjectMember", "Project")
            };
            let (email, token) = match &m.invite {
                Some((e, t)) => (q(e), q(t)),
                None => ("NULL".into(), "NULL".into()),
            };
            self.0
                .exec(&format!(
                    "INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at,
                                          requested_at, invite_email, invite_token, state, notification_level,
                                          member_namespace_id, created_at, updated_at)
                     VALUES ({id}, {lvl}, {src}, '{st}', '{kind}', {user}, {exp}, {req}, {email}, {token}, {state}, 3,
                             {mns}, '2024-01-01', '2024-01-01')",
                    id = m.id,
                    lvl = m.level,
                    src = m.source,
                    user = m.user.map(|u| u.to_string()).unwrap_or_else(|| "NULL".into()),
                    exp = opt(&m.expires),
                    req = opt(&m.requested),
                    state = m.state,
                    mns = member_namespace(st, m.source),
                ))
                .await;
        }
    }

    /// `PA(u, p, level)` rows.
    pub async fn pas(&self, rows: &[(i64, i64, i32)]) {
        for (u, p, l) in rows {
            self.0
                .exec(&format!(
                    "INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique) VALUES ({u}, {p}, {l}, true)"
                ))
                .await;
        }
    }

    /// A notification setting of `user` for a source.
    pub async fn notification(&self, user: i64, source_type: &str, source_id: i64) {
        self.0
            .exec(&format!(
                "INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at)
                 VALUES ({user}, {source_id}, '{source_type}', 3, '2024-01-01', '2024-01-01')"
            ))
            .await;
    }

    /// `T<id>: PAT U<user>` (not revoked, no expiry unless given).
    pub async fn pat(&self, id: i64, user: i64, expires: Option<&str>) {
        self.0
            .exec(&format!(
                "INSERT INTO personal_access_tokens (id, user_id, name, expires_at, created_at, updated_at, organization_id)
                 VALUES ({id}, {user}, 'T{id}', {exp}, '2024-01-01', '2024-01-01', 1)",
                exp = expires.map(q).unwrap_or_else(|| "NULL".into())
            ))
            .await;
    }

    /// A contribution row (`issues`, `merge_requests` or `notes`) by `author`.
    pub async fn contribution(&self, table: &str, id: i64, project: i64, author: i64) {
        self.0
            .exec(&contribution_sql(table, id, project, &author))
            .await;
    }

    /// `ghost_user_migrations(user_id, initiator)`.
    pub async fn ghost_migration(&self, user: i64, initiator: Option<i64>) {
        self.0
            .exec(&format!(
                "INSERT INTO ghost_user_migrations (user_id, initiator_user_id, hard_delete, consume_after, created_at, updated_at)
                 VALUES ({user}, {i}, false, '2025-03-10T00:00:00Z', '2025-03-10T00:00:00Z', '2025-03-10T00:00:00Z')",
                i = initiator.map(|i| i.to_string()).unwrap_or_else(|| "NULL".into())
            ))
            .await;
    }
}

/// The INSERT of a contribution row (`issues`, `merge_requests` or `notes`) `id` in
/// `project` by `author` (a SQL expression), with the columns GitLab requires: an
/// issue's namespace (the project namespace) and work item type, a merge request's
/// branches, a note's noteable type.
pub fn contribution_sql(
    table: &str,
    id: i64,
    project: i64,
    author: &dyn std::fmt::Display,
) -> String {
    let pns = format!("(SELECT project_namespace_id FROM projects WHERE id = {project})");
    match table {
        "issues" => format!(
            "INSERT INTO issues (id, project_id, namespace_id, work_item_type_id, author_id, created_at, updated_at)
             VALUES ({id}, {project}, {pns}, 1, {author}, '2024-01-01', '2024-01-01')"
        ),
        "merge_requests" => format!(
            "INSERT INTO merge_requests (id, target_project_id, source_project_id, target_branch, source_branch,
                                         author_id, created_at, updated_at)
             VALUES ({id}, {project}, {project}, 'main', 'topic-{id}', {author}, '2024-01-01', '2024-01-01')"
        ),
        "notes" => format!(
            "INSERT INTO notes (id, project_id, noteable_type, author_id, created_at, updated_at)
             VALUES ({id}, {project}, 'Issue', {author}, '2024-01-01', '2024-01-01')"
        ),
        other => panic!("not a contribution table: {other}"),
    }
}
