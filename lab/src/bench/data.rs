//! The bench data sets, generated with set-based SQL (`generate_series`, a seeded
//! `random()`), dated relative to the run's `today`.
//!
//! Owns: the B38 set (groups with subgroups, projects, users, expired and live
//! memberships, notification settings, and `project_authorizations` consistent with
//! the memberships), the keyset tables, the project-bot set of the queue-calls bench,
//! the B28 token set (humans, bots with resources, members and hooks), and the state
//! checksums that shows two runs left the same rows. Every number bound
//! into the SQL text is an integer computed here.
//!
//! Every set is loaded through [`load`]: with the row triggers and foreign-key checks
//! of GitLab's schema switched off for the load only, then the rows those triggers
//! would have written added in one set-based pass. Row by row, GitLab's triggers made
//! the full-scale B38 load take over 13 minutes; the measured runs keep every trigger.

use chrono::NaiveDate;
use tokio_postgres::Client;

use shared::error::Result;

/// The rows GitLab's INSERT row triggers write (`engine/migrations/`), added set-based
/// after a load that ran without them: `namespace_details` from groups and projects,
/// `projects_sync_events`, and the `project_authorizations_for_migration` mirror.
/// Idempotent; must list every INSERT row trigger of the model (a test compares it
/// with a load that fires them).
pub const TRIGGER_ROWS: &str = "
    INSERT INTO namespace_details (description, description_html, cached_markdown_version, updated_at, created_at, namespace_id)
      SELECT description, description_html, cached_markdown_version, updated_at, updated_at, id
      FROM namespaces WHERE type <> 'Project'
      ON CONFLICT (namespace_id) DO NOTHING;
    INSERT INTO namespace_details (description, description_html, cached_markdown_version, updated_at, created_at, namespace_id)
      SELECT description, description_html, cached_markdown_version, updated_at, updated_at, project_namespace_id
      FROM projects
      ON CONFLICT (namespace_id) DO NOTHING;
    INSERT INTO projects_sync_events (project_id)
      SELECT p.id FROM projects p
      WHERE NOT EXISTS (SELECT 1 FROM projects_sync_events e WHERE e.project_id = p.id)
      ORDER BY p.id;
    INSERT INTO project_authorizations_for_migration (project_id, user_id, access_level)
      SELECT project_id, user_id, max(access_level)::smallint FROM project_authorizations
      GROUP BY project_id, user_id
      ON CONFLICT (project_id, user_id) DO NOTHING;";

/// Run a data set's `sql` with `session_replication_role = replica` (no row triggers,
/// no foreign-key checks: the generated rows are consistent by construction), then
/// add [`TRIGGER_ROWS`] with every trigger back on. With `fire_triggers`, the plain
/// load instead (the reference the tests compare against).
pub async fn load(c: &Client, sql: &str, fire_triggers: bool) -> Result<()> {
    if fire_triggers {
        return Ok(c.batch_execute(sql).await?);
    }
    c.batch_execute("SET session_replication_role = replica")
        .await?;
    let loaded = c.batch_execute(sql).await;
    c.batch_execute("SET session_replication_role = DEFAULT")
        .await?;
    loaded?;
    Ok(c.batch_execute(TRIGGER_ROWS).await?)
}

/// Sizes of the B38 data set derived from its number of expired memberships.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct B38Sizes {
    /// Expired memberships (ids 1..=expired).
    pub expired: u64,
    /// Top-level groups; each has two subgroups, and every group two projects.
    pub top_groups: u64,
    /// Users.
    pub users: u64,
    /// Memberships that stay (no expiry, or a later one).
    pub live: u64,
}

impl B38Sizes {
    /// The shape used at every scale: a user holds about four expired and two live
    /// memberships; a top-level group has 100 expired memberships across its tree.
    pub fn for_expired(expired: u64) -> B38Sizes {
        B38Sizes {
            expired,
            top_groups: (expired / 100).max(1),
            users: (expired / 4).max(10),
            live: expired / 2,
        }
    }
}

/// Fill an empty migrated database with the B38 data set: expiry dates spread over the
/// 1,000 days up to `today`; 60 % project and 40 % group memberships (a third of those
/// on top-level groups); access levels 10–40; 2 % invites, 1 % access requests; no
/// project bot and no owner among the expired rows (the floor cannot apply phase 1 or
/// the last-owner rule). Live memberships include one owner per top-level group.
pub async fn b38(c: &Client, today: NaiveDate, s: B38Sizes) -> Result<()> {
    b38_dated(c, today, s, true).await
}

/// [`b38`], with the expired rows spread over 1,000 days (`spread`) or all on the day
/// before `today` (the one-date run of `b38-one-date`).
pub async fn b38_dated(c: &Client, today: NaiveDate, s: B38Sizes, spread: bool) -> Result<()> {
    load(c, &b38_sql(today, s, spread), false).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
}

/// The SQL of [`b38_dated`], shares included.
pub fn b38_sql(today: NaiveDate, s: B38Sizes, spread: bool) -> String {
    let (n, t, u, l) = (s.expired, s.top_groups, s.users, s.live);
    let date = if spread {
        format!("date '{today}' - floor(r_date * 1000)::int")
    } else {
        format!("date '{today}' - 1")
    };
    let (projects, groups) = (6 * t, 3 * t);
    let sql = format!(
        "SELECT setseed(0.38);
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT g, 'g' || g, 'g' || g, 'Group', NULL, ARRAY[g]::bigint[], 1, '{today}', '{today}'
           FROM generate_series(1, {t}) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT {t} + s, 'g' || ({t} + s), 'g' || ({t} + s), 'Group', 1 + (s - 1) % {t},
                  ARRAY[1 + (s - 1) % {t}, {t} + s]::bigint[], 1, '{today}', '{today}'
           FROM generate_series(1, {groups} - {t}) s;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT 100000000 + p, 'p' || p, 'p' || p, 'Project', n.id, n.traversal_ids || (100000000 + p)::bigint, 1,
                  '{today}', '{today}'
           FROM generate_series(1, {projects}) p JOIN namespaces n ON n.id = 1 + (p - 1) / 2;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT p, 'p' || p, 'p' || p, 1 + (p - 1) / 2, 100000000 + p, 1, '{today}', '{today}'
           FROM generate_series(1, {projects}) p;
         INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT i, 'u' || i, 'User ' || i, 'u' || i || '@example.com', 'active', 0, '{today}', '{today}'
          , 100000, 1 FROM generate_series(1, {u}) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, invite_email,
                              invite_token, requested_at, expires_at, created_at, updated_at, notification_level, member_namespace_id)
           SELECT i, 10 * (1 + floor(r_level * 4))::int,
                  CASE WHEN r_kind < 0.6 THEN 1 + floor(r_src * {projects}) ELSE 1 + floor(r_src * {groups}) END,
                  CASE WHEN r_kind < 0.6 THEN 'Project' ELSE 'Namespace' END,
                  CASE WHEN r_kind < 0.6 THEN 'ProjectMember' ELSE 'GroupMember' END,
                  CASE WHEN r_inv < 0.02 THEN NULL ELSE 1 + floor(r_user * {u}) END,
                  CASE WHEN r_inv < 0.02 THEN 'invite' || i || '@example.org' END,
                  CASE WHEN r_inv < 0.02 THEN 'bench-invite-' || i END,
                  CASE WHEN r_inv >= 0.02 AND r_inv < 0.03 THEN timestamp '{today}' - interval '40 days' END,
                  {date}, '{today}', '{today}'
          , 3, (CASE WHEN CASE WHEN r_kind < 0.6 THEN 'Project' ELSE 'Namespace' END = 'Project' THEN (SELECT project_namespace_id FROM projects WHERE id = (1 + floor(r_src * {projects}))::bigint) ELSE (1 + floor(r_src * {groups}))::bigint END) FROM (SELECT i, random() r_kind, random() r_src, random() r_level, random() r_inv,
                        random() r_user, random() r_date
                 FROM generate_series(1, {n}) i) x;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at, notification_level, member_namespace_id)
           SELECT {n} + i, 10 * (1 + floor(r_level * 4))::int,
                  CASE WHEN r_kind < 0.5 THEN 1 + floor(r_src * {projects}) ELSE 1 + floor(r_src * {groups}) END,
                  CASE WHEN r_kind < 0.5 THEN 'Project' ELSE 'Namespace' END,
                  CASE WHEN r_kind < 0.5 THEN 'ProjectMember' ELSE 'GroupMember' END,
                  1 + floor(r_user * {u}),
                  CASE WHEN r_date < 0.1 THEN date '{today}' + 1 + floor(r_date * 3650)::int END,
                  '{today}', '{today}'
          , 3, (CASE WHEN CASE WHEN r_kind < 0.5 THEN 'Project' ELSE 'Namespace' END = 'Project' THEN (SELECT project_namespace_id FROM projects WHERE id = (1 + floor(r_src * {projects}))::bigint) ELSE (1 + floor(r_src * {groups}))::bigint END) FROM (SELECT i, random() r_kind, random() r_src, random() r_level, random() r_user, random() r_date
                 FROM generate_series(1, {l}) i) x;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, created_at, updated_at, notification_level, member_namespace_id)
           SELECT {n} + {l} + g, 50, g, 'Namespace', 'GroupMember', 1 + floor(random() * {u}), '{today}', '{today}'
          , 3, g FROM generate_series(1, {t}) g;
         INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at)
           SELECT user_id, source_id, source_type, 2, '{today}', '{today}' FROM members
           WHERE user_id IS NOT NULL AND random() < 0.3
           ON CONFLICT DO NOTHING;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT user_id, project_id, max(access_level), true FROM (
             SELECT m.user_id, m.source_id AS project_id, m.access_level FROM members m
             WHERE m.source_type = 'Project' AND m.user_id IS NOT NULL AND m.state = 0
               AND m.requested_at IS NULL AND m.access_level >= 10
             UNION ALL
             SELECT m.user_id, p.id, m.access_level FROM members m JOIN projects p ON p.namespace_id = m.source_id
             WHERE m.source_type = 'Namespace' AND m.user_id IS NOT NULL AND m.state = 0
               AND m.requested_at IS NULL AND m.access_level >= 10
             UNION ALL
             SELECT m.user_id, p.id, m.access_level FROM members m
               JOIN namespaces n ON n.parent_id = m.source_id JOIN projects p ON p.namespace_id = n.id
             WHERE m.source_type = 'Namespace' AND m.user_id IS NOT NULL AND m.state = 0
               AND m.requested_at IS NULL AND m.access_level >= 10
           ) x GROUP BY user_id, project_id;"
    );
    sql + &b38_shares(today, t, groups, projects)
}

/// The shares of the B38 data set, so that every refresh reads them as GitLab's rule
/// does: one top group in ten shared with the next top group (DEVELOPER), one project
/// in ten shared with a random group (REPORTER). The initial authorizations ignore
/// them: the first refresh of a pair writes what they give, on every side alike.
fn b38_shares(today: NaiveDate, t: u64, groups: u64, projects: u64) -> String {
    format!(
        "SELECT setseed(0.39);
         INSERT INTO group_group_links (shared_group_id, shared_with_group_id, group_access, created_at, updated_at)
           SELECT g, 1 + g % {t}, 30, '{today}', '{today}'
           FROM generate_series(1, {t}) g WHERE {t} > 1 AND g % 10 = 0;
         INSERT INTO project_group_links (project_id, group_id, group_access, created_at, updated_at)
           SELECT p, 1 + floor(random() * {groups}), 20, '{today}', '{today}'
           FROM generate_series(1, {projects}) p WHERE p % 10 = 0
           ON CONFLICT DO NOTHING;"
    )
}

/// Fill an empty migrated database with `total` members for the keyset bench. The
/// first `expired` ids expire on `today − (id mod 1000)` days (`spread`), or all on
/// `today − 1` (the pathological case); the others never expire (90 %) or expire
/// later. Sources need no rows (`members.source_id` has no foreign key).
pub async fn keyset(
    c: &Client,
    today: NaiveDate,
    expired: u64,
    total: u64,
    spread: bool,
) -> Result<()> {
    let date = if spread {
        format!("date '{today}' - (i % 1000)::int")
    } else {
        format!("date '{today}' - 1")
    };
    let sql = format!(
        "-- The memberships name projects that are not loaded (the bench reads members only);
         -- their member_namespace_id (NOT NULL in GitLab) is one stand-in namespace.
         INSERT INTO namespaces (id, name, path, type, traversal_ids, organization_id)
           VALUES (1, 'keyset', 'keyset', 'Group', ARRAY[1]::bigint[], 1) ON CONFLICT (id) DO NOTHING;
         INSERT INTO users (id, username, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT i, 'k' || i, 'k' || i || '@example.com', 'active', 0, '{today}', '{today}'
          , 100000, 1 FROM generate_series(1, 1000) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at, notification_level, member_namespace_id)
           SELECT i, 30, 1 + i % 5000, 'Project', 'ProjectMember', 1 + i % 1000,
                  CASE WHEN i <= {expired} THEN {date}
                       WHEN i % 10 = 0 THEN date '{today}' + 1 + (i % 3650)::int END,
                  '{today}', '{today}'
          , 3, 1 FROM generate_series(1, {total}) i;"
    );
    load(c, &sql, false).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
}

/// `count` project bots, each with one expired project membership and one token, in
/// groups/projects of their own (the queue-calls bench's B38 producer).
pub async fn b38_bots(c: &Client, today: NaiveDate, count: u64) -> Result<()> {
    let sql = format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, organization_id, created_at, updated_at)
           VALUES (1, 'bots', 'bots', 'Group', ARRAY[1]::bigint[], 1, '{today}', '{today}');
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           VALUES (100000001, 'p', 'p', 'Project', 1, ARRAY[1, 100000001]::bigint[], 1, '{today}', '{today}');
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           VALUES (1, 'p', 'p', 1, 100000001, 1, '{today}', '{today}');
         INSERT INTO users (id, username, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT i, 'bot' || i, 'bot' || i || '@noreply.example.com', 'active', 6, '{today}', '{today}'
          , 100000, 1 FROM generate_series(1, {count}) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at, notification_level, member_namespace_id)
           SELECT i, 40, 1, 'Project', 'ProjectMember', i, date '{today}' - 1, '{today}', '{today}'
          , 3, (SELECT project_namespace_id FROM projects WHERE id = 1) FROM generate_series(1, {count}) i;
         INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT i, 'bot token', date '{today}' - 1, '{today}', '{today}', 1 FROM generate_series(1, {count}) i;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT i, 1, 40, true FROM generate_series(1, {count}) i;"
    );
    load(c, &sql, false).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
}

/// Sizes of the B28 data set derived from its number of tokens and users.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct B28Sizes {
    /// Personal access tokens (ids 1..=tokens).
    pub tokens: u64,
    /// Users (humans, then bots).
    pub users: u64,
    /// Bots among the users (ids `users − bots + 1 ..= users`): two thirds project bots,
    /// the rest group bots, and every 25th without any membership.
    pub bots: u64,
    /// Top-level groups; each has one subgroup holding `projects / top_groups` projects.
    pub top_groups: u64,
    /// Projects (one per two project bots).
    pub projects: u64,
}

impl B28Sizes {
    /// The shape used at every scale: 2 % of the users are bots (at least 12), each
    /// with one or two tokens; a group tree per 300 users.
    pub fn new(tokens: u64, users: u64) -> B28Sizes {
        let users = users.max(30);
        let bots = (users / 50).max(12);
        let project_bots = bots * 2 / 3;
        B28Sizes {
            tokens,
            users,
            bots,
            top_groups: (users / 300).max(1),
            projects: (project_bots / 2).max(1),
        }
    }

    /// Human users (ids 1..=humans).
    pub fn humans(&self) -> u64 {
        self.users - self.bots
    }
}

/// Fill an empty migrated database with the B28 data set (dated relative to `today`):
///
/// * users: humans 1..=H (4 % blocked, 1 % deactivated, 1 % with a NULL state: they
///   cannot receive notifications, their tokens are marked silently), then bots
///   (`user_type` 6): project bots (a maintainer membership of their project), group
///   bots (a developer membership of a subgroup), and every 25th bot without any
///   membership (its tokens stay unmarked);
/// * groups: top-level groups, each with one subgroup and an owner per group; projects
///   in the subgroups, each with one maintainer; hooks: every 3rd project a
///   subscribed project hook (every 7th an unsubscribed one), every 2nd top-level
///   group a subscribed group hook;
/// * tokens: bots hold the first 1.5 × bots tokens, humans the rest at random;
///   `expires_at` spread uniformly over `today − 10 .. today + 89` (so every interval,
///   the past and the future beyond 60 days are all present); 3 % revoked, 1 %
///   impersonation, 2 % with the legacy `expire_notification_delivered`, 2 % with
///   the 30-day notice already sent; each a unique `token_digest` (a SHA-256 in
///   base64, as GitLab stores every token's), so the unique digest index has one entry
///   per token as in production, not a million-entry run of NULLs.
pub async fn b28(c: &Client, today: NaiveDate, s: B28Sizes) -> Result<()> {
    load(c, &b28_sql(today, s), false).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
}

/// The SQL of [`b28`].
pub fn b28_sql(today: NaiveDate, s: B28Sizes) -> String {
    let (n, b, t, p) = (s.tokens, s.bots, s.top_groups, s.projects);
    let h = s.humans();
    let pb = b * 2 / 3;
    let bot_tokens = (b * 3 / 2).min(n);
    let sql = format!(
        "SELECT setseed(0.28);
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT g, 'g' || g, 'g' || g, 'Group', NULL, ARRAY[g]::bigint[], 1, '{today}', '{today}'
           FROM generate_series(1, {t}) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT {t} + g, 's' || g, 's' || g, 'Group', g, ARRAY[g, {t} + g]::bigint[], 1, '{today}', '{today}'
           FROM generate_series(1, {t}) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id, created_at, updated_at)
           SELECT 100000000 + i, 'p' || i, 'p' || i, 'Project', n.id, n.traversal_ids || (100000000 + i)::bigint, 1,
                  '{today}', '{today}'
           FROM generate_series(1, {p}) i JOIN namespaces n ON n.id = {t} + 1 + (i - 1) % {t};
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT i, 'p' || i, 'p' || i, {t} + 1 + (i - 1) % {t}, 100000000 + i, 1, '{today}', '{today}'
           FROM generate_series(1, {p}) i;
         INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT i, 'u' || i, 'User ' || i, 'u' || i || '@example.com',
                  CASE WHEN r < 0.04 THEN 'blocked' WHEN r < 0.05 THEN 'deactivated'
                       WHEN r < 0.06 THEN NULL ELSE 'active' END, 0, '{today}', '{today}'
          , 100000, 1 FROM (SELECT i, random() r FROM generate_series(1, {h}) i) x;
         INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
           SELECT {h} + i, 'bot' || i, 'Bot ' || i, 'bot' || i || '@noreply.example.com', 'active', 6,
                  '{today}', '{today}'
          , 100000, 1 FROM generate_series(1, {b}) i;
         INSERT INTO members (access_level, source_id, source_type, type, user_id, created_at, updated_at, notification_level, member_namespace_id)
           SELECT 40, 1 + (i - 1) % {p}, 'Project', 'ProjectMember', {h} + i, '{today}', '{today}'
          , 3, (SELECT project_namespace_id FROM projects WHERE id = 1 + (i - 1) % {p}) FROM generate_series(1, {pb}) i WHERE i % 25 <> 0;
         INSERT INTO members (access_level, source_id, source_type, type, user_id, created_at, updated_at, notification_level, member_namespace_id)
           SELECT 30, {t} + 1 + i % {t}, 'Namespace', 'GroupMember', {h} + i, '{today}', '{today}'
          , 3, {t} + 1 + i % {t} FROM generate_series({pb} + 1, {b}) i WHERE i % 25 <> 0;
         INSERT INTO members (access_level, source_id, source_type, type, user_id, created_at, updated_at, notification_level, member_namespace_id)
           SELECT 40, i, 'Project', 'ProjectMember', 1 + (i * 7919) % {h}, '{today}', '{today}'
          , 3, (SELECT project_namespace_id FROM projects WHERE id = i) FROM generate_series(1, {p}) i;
         INSERT INTO members (access_level, source_id, source_type, type, user_id, created_at, updated_at, notification_level, member_namespace_id)
           SELECT 50, g, 'Namespace', 'GroupMember', 1 + (g * 104729) % {h}, '{today}', '{today}'
          , 3, g FROM generate_series(1, 2 * {t}) g;
         INSERT INTO web_hooks (project_id, type, resource_access_token_events, created_at, updated_at)
           SELECT i, 'ProjectHook', i % 3 = 0, '{today}', '{today}'
           FROM generate_series(1, {p}) i WHERE i % 3 = 0 OR i % 7 = 0;
         INSERT INTO web_hooks (group_id, type, resource_access_token_events, created_at, updated_at)
           SELECT g, 'GroupHook', true, '{today}', '{today}' FROM generate_series(1, {t}) g WHERE g % 2 = 0;
         INSERT INTO personal_access_tokens (id, user_id, name, revoked, expires_at, created_at, updated_at,
                                             impersonation, expire_notification_delivered,
                                             thirty_days_notification_sent_at, organization_id, token_digest)
           SELECT i,
                  CASE WHEN i <= {bot_tokens} THEN {h} + 1 + (i - 1) % {b} ELSE 1 + floor(r_user * {h}) END,
                  'token-' || i, r_flag < 0.03, date '{today}' - 10 + floor(r_date * 100)::int,
                  timestamp '{today}' - interval '100 days', '{today}',
                  r_flag >= 0.03 AND r_flag < 0.04, r_flag >= 0.04 AND r_flag < 0.06,
                  CASE WHEN r_flag >= 0.06 AND r_flag < 0.08 THEN timestamptz '{today}' - interval '5 days' END, 1,
                  encode(sha256(('token-' || i)::bytea), 'base64')
           FROM (SELECT i, random() r_user, random() r_date, random() r_flag
                 FROM generate_series(1, {n}) i) x;"
    );
    sql
}

/// A checksum of the rows B28 changes: which tokens carry which notice (not when:
/// the sides run at different instants), and the legacy flag.
pub async fn b28_checksum(c: &Client) -> Result<String> {
    let r = c
        .query_one(
            "SELECT count(*) FILTER (WHERE seven_days_notification_sent_at IS NOT NULL),
                    count(*) FILTER (WHERE thirty_days_notification_sent_at IS NOT NULL),
                    count(*) FILTER (WHERE sixty_days_notification_sent_at IS NOT NULL),
                    count(*) FILTER (WHERE expire_notification_delivered),
                    coalesce(sum(hashtext(id || ':' || (seven_days_notification_sent_at IS NULL)::text
                                          || (thirty_days_notification_sent_at IS NULL)::text
                                          || (sixty_days_notification_sent_at IS NULL)::text
                                          || expire_notification_delivered::text)::bigint), 0)::int8
             FROM personal_access_tokens",
            &[],
        )
        .await?;
    let v: Vec<i64> = (0..5).map(|i| r.get(i)).collect();
    Ok(format!(
        "notified 7/30/60 days {}/{}/{}, delivered flag {} ({:x})",
        v[0], v[1], v[2], v[3], v[4]
    ))
}

/// A checksum of the rows B38 changes: equal checksums mean equal rows.
pub async fn checksum(c: &Client) -> Result<String> {
    let r = c
        .query_one(
            "SELECT (SELECT count(*) FROM members),
                    (SELECT coalesce(sum(hashint8(id::bigint)::bigint), 0) FROM members)::int8,
                    (SELECT count(*) FROM project_authorizations),
                    (SELECT coalesce(sum(hashtext(user_id || ':' || project_id || ':' || access_level
                                                  || ':' || coalesce(is_unique::text, '-'))::bigint), 0)
                     FROM project_authorizations)::int8,
                    (SELECT count(*) FROM notification_settings),
                    (SELECT coalesce(sum(hashint8(id::bigint)::bigint), 0) FROM notification_settings)::int8",
            &[],
        )
        .await?;
    let v: Vec<i64> = (0..6).map(|i| r.get(i)).collect();
    Ok(format!(
        "members {} ({:x}), authorizations {} ({:x}), notification settings {} ({:x})",
        v[0], v[1], v[2], v[3], v[4], v[5]
    ))
}

/// Rows of `members` that are expired on `today`.
pub async fn expired_count(c: &Client, today: NaiveDate) -> Result<i64> {
    Ok(c.query_one(
        "SELECT count(*) FROM members WHERE expires_at IS NOT NULL AND expires_at <= $1::date",
        &[&today],
    )
    .await?
    .get(0))
}
