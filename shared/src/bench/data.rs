//! The bench data sets, generated with set-based SQL (`generate_series`, a seeded
//! `random()`), dated relative to the run's `today`.
//!
//! Owns: the B38 set (groups with subgroups, projects, users, expired and live
//! memberships, notification settings, and `project_authorizations` consistent with
//! the memberships), the keyset tables, the project-bot set of the queue-calls bench,
//! and the state checksum that shows two runs left the same rows. Every number bound
//! into the SQL text is an integer computed here.

use chrono::NaiveDate;
use tokio_postgres::Client;

use crate::error::Result;

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
    let (n, t, u, l) = (s.expired, s.top_groups, s.users, s.live);
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
         INSERT INTO projects (id, name, path, namespace_id, organization_id, created_at, updated_at)
           SELECT p, 'p' || p, 'p' || p, 1 + (p - 1) / 2, 1, '{today}', '{today}'
           FROM generate_series(1, {projects}) p;
         INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at)
           SELECT i, 'u' || i, 'User ' || i, 'u' || i || '@example.com', 'active', 0, '{today}', '{today}'
           FROM generate_series(1, {u}) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, invite_email,
                              invite_token, requested_at, expires_at, created_at, updated_at)
           SELECT i, 10 * (1 + floor(r_level * 4))::int,
                  CASE WHEN r_kind < 0.6 THEN 1 + floor(r_src * {projects}) ELSE 1 + floor(r_src * {groups}) END,
                  CASE WHEN r_kind < 0.6 THEN 'Project' ELSE 'Namespace' END,
                  CASE WHEN r_kind < 0.6 THEN 'ProjectMember' ELSE 'GroupMember' END,
                  CASE WHEN r_inv < 0.02 THEN NULL ELSE 1 + floor(r_user * {u}) END,
                  CASE WHEN r_inv < 0.02 THEN 'invite' || i || '@example.org' END,
                  CASE WHEN r_inv < 0.02 THEN 'bench-invite-' || i END,
                  CASE WHEN r_inv >= 0.02 AND r_inv < 0.03 THEN timestamp '{today}' - interval '40 days' END,
                  date '{today}' - floor(r_date * 1000)::int, '{today}', '{today}'
           FROM (SELECT i, random() r_kind, random() r_src, random() r_level, random() r_inv,
                        random() r_user, random() r_date
                 FROM generate_series(1, {n}) i) x;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at)
           SELECT {n} + i, 10 * (1 + floor(r_level * 4))::int,
                  CASE WHEN r_kind < 0.5 THEN 1 + floor(r_src * {projects}) ELSE 1 + floor(r_src * {groups}) END,
                  CASE WHEN r_kind < 0.5 THEN 'Project' ELSE 'Namespace' END,
                  CASE WHEN r_kind < 0.5 THEN 'ProjectMember' ELSE 'GroupMember' END,
                  1 + floor(r_user * {u}),
                  CASE WHEN r_date < 0.1 THEN date '{today}' + 1 + floor(r_date * 3650)::int END,
                  '{today}', '{today}'
           FROM (SELECT i, random() r_kind, random() r_src, random() r_level, random() r_user, random() r_date
                 FROM generate_series(1, {l}) i) x;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, created_at, updated_at)
           SELECT {n} + {l} + g, 50, g, 'Namespace', 'GroupMember', 1 + floor(random() * {u}), '{today}', '{today}'
           FROM generate_series(1, {t}) g;
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
    c.batch_execute(&sql).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
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
        "INSERT INTO users (id, username, email, state, user_type, created_at, updated_at)
           SELECT i, 'k' || i, 'k' || i || '@example.com', 'active', 0, '{today}', '{today}'
           FROM generate_series(1, 1000) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at)
           SELECT i, 30, 1 + i % 5000, 'Project', 'ProjectMember', 1 + i % 1000,
                  CASE WHEN i <= {expired} THEN {date}
                       WHEN i % 10 = 0 THEN date '{today}' + 1 + (i % 3650)::int END,
                  '{today}', '{today}'
           FROM generate_series(1, {total}) i;"
    );
    c.batch_execute(&sql).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
}

/// `count` project bots, each with one expired project membership and one token, in
/// groups/projects of their own (the queue-calls bench's B38 producer).
pub async fn b38_bots(c: &Client, today: NaiveDate, count: u64) -> Result<()> {
    let sql = format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, organization_id, created_at, updated_at)
           VALUES (1, 'bots', 'bots', 'Group', ARRAY[1]::bigint[], 1, '{today}', '{today}');
         INSERT INTO projects (id, name, path, namespace_id, organization_id, created_at, updated_at)
           VALUES (1, 'p', 'p', 1, 1, '{today}', '{today}');
         INSERT INTO users (id, username, email, state, user_type, created_at, updated_at)
           SELECT i, 'bot' || i, 'bot' || i || '@noreply.example.com', 'active', 6, '{today}', '{today}'
           FROM generate_series(1, {count}) i;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, created_at, updated_at)
           SELECT i, 40, 1, 'Project', 'ProjectMember', i, date '{today}' - 1, '{today}', '{today}'
           FROM generate_series(1, {count}) i;
         INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id)
           SELECT i, 'bot token', date '{today}' - 1, '{today}', '{today}', 1 FROM generate_series(1, {count}) i;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT i, 1, 40, true FROM generate_series(1, {count}) i;"
    );
    c.batch_execute(&sql).await?;
    c.batch_execute("VACUUM ANALYZE").await?;
    Ok(())
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
