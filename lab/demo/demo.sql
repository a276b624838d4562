-- Demo data for `hk seed demo` / `hk demo`: a small GitLab instance whose data
-- touches every batch. `:today` is replaced with the run's date before execution.
-- Ids are fixed so the demo summary reads the same on every machine.

INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id) VALUES
 (1, 'root',  'Administrator', 'root@example.com',  'active',  true,  0, '2024-01-01', '2024-01-01', 100000, 1),
 (2, 'alice', 'Alice Owner',   'alice@example.com', 'active',  false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3, 'bob',   'Bob Dev',       'bob@example.com',   'active',  false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (4, 'carol', 'Carol Maint',   'carol@example.com', 'active',  false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (5, 'dave',  'Dave Solo',     'dave@example.com',  'active',  false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (6, 'ghost', 'Ghost User',    'ghost@example.com', 'active',  false, 5, '2024-01-01', '2024-01-01', 100000, 1),
 (10, 'project_300_bot_1', 'site deploy bot', 'project_300_bot_1@noreply.example.com', 'active', false, 6, '2024-01-01', '2024-01-01', 100000, 1),
 (11, 'group_100_bot_1',   'acme ci bot',     'group_100_bot_1@noreply.example.com',   'active', false, 6, '2024-01-01', '2024-01-01', 100000, 1);

-- 1,200 short-term contractors with expiring project access (B38 pagination).
INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
SELECT 1000 + g, 'contractor' || g, 'Contractor ' || g, 'contractor' || g || '@example.com',
       'active', 0, '2024-06-01', '2024-06-01', 100000, 1
FROM generate_series(1, 1200) g;

-- Personal namespaces (type User) for the named humans.
INSERT INTO namespaces (id, name, path, owner_id, type, traversal_ids, created_at, updated_at, organization_id)
SELECT 500 + id, name, username, id, 'User', ARRAY[500 + id], '2024-01-01', '2024-01-01', 1
FROM users WHERE id BETWEEN 1 AND 6;

-- Groups: acme > web, acme > infra; widgets.
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (100, 'acme',    'acme',    'Group', NULL, '{100}',     '2024-01-01', '2024-01-01', 1),
 (101, 'web',     'web',     'Group', 100,  '{100,101}', '2024-01-01', '2024-01-01', 1),
 (102, 'infra',   'infra',   'Group', 100,  '{100,102}', '2024-01-01', '2024-01-01', 1),
 (200, 'widgets', 'widgets', 'Group', NULL, '{200}',     '2024-01-01', '2024-01-01', 1);

-- Projects and their project namespaces.
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (1300, 'site', 'site', 'Project', 101, '{100,101,1300}', '2024-01-01', '2024-01-01', 1),
 (1301, 'tf',   'tf',   'Project', 102, '{100,102,1301}', '2024-01-01', '2024-01-01', 1),
 (1302, 'app',  'app',  'Project', 200, '{200,1302}',     '2024-01-01', '2024-01-01', 1);
INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at) VALUES
 (300, 'site', 'site', 101, 1300, 1, '2024-01-01', '2024-01-01'),
 (301, 'tf',   'tf',   102, 1301, 1, '2024-01-01', '2024-01-01'),
 (302, 'app',  'app',  200, 1302, 1, '2024-01-01', '2024-01-01');

INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
SELECT id, 'Namespace', path, name, id, '2024-01-01', '2024-01-01' FROM namespaces WHERE type = 'User';
INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at) VALUES
 (100, 'Namespace', 'acme',       'acme',          100, '2024-01-01', '2024-01-01'),
 (101, 'Namespace', 'acme/web',   'acme / web',    101, '2024-01-01', '2024-01-01'),
 (102, 'Namespace', 'acme/infra', 'acme / infra',  102, '2024-01-01', '2024-01-01'),
 (200, 'Namespace', 'widgets',    'widgets',       200, '2024-01-01', '2024-01-01'),
 (300, 'Project',   'acme/web/site',  'acme / web / site',  1300, '2024-01-01', '2024-01-01'),
 (301, 'Project',   'acme/infra/tf',  'acme / infra / tf',  1301, '2024-01-01', '2024-01-01'),
 (302, 'Project',   'widgets/app',    'widgets / app',      1302, '2024-01-01', '2024-01-01');

-- Memberships.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, requested_at,
                     invite_email, invite_token, member_namespace_id, created_at, updated_at, notification_level) VALUES
 -- alice owns acme for good; root has no memberships (admin).
 (1, 50, 100, 'Namespace', 'GroupMember', 2, NULL, NULL, NULL, NULL, 100, '2024-01-01', '2024-01-01', 3),
 -- bob's developer access to acme/web ran out three days ago.
 (2, 30, 101, 'Namespace', 'GroupMember', 3, DATE ':today' - 3, NULL, NULL, NULL, 101, '2024-01-01', '2024-01-01', 3),
 -- carol keeps reporter on acme, her maintainer role on site expired yesterday.
 (3, 20, 100, 'Namespace', 'GroupMember', 4, NULL, NULL, NULL, NULL, 100, '2024-01-01', '2024-01-01', 3),
 (4, 40, 300, 'Project', 'ProjectMember', 4, DATE ':today' - 1, NULL, NULL, NULL, 1300, '2024-01-01', '2024-01-01', 3),
 -- dave is the only owner of widgets: his expired ownership is kept (last owner).
 (5, 50, 200, 'Namespace', 'GroupMember', 5, DATE ':today' - 1, NULL, NULL, NULL, 200, '2024-01-01', '2024-01-01', 3),
 -- the site deploy bot's membership expired: the bot is removed as a user.
 (6, 40, 300, 'Project', 'ProjectMember', 10, DATE ':today' - 2, NULL, NULL, NULL, 1300, '2024-01-01', '2024-01-01', 3),
 -- the acme CI bot does not expire.
 (7, 30, 100, 'Namespace', 'GroupMember', 11, NULL, NULL, NULL, NULL, 100, '2024-01-01', '2024-01-01', 3),
 -- an expired invite and an expired access request.
 (8, 30, 301, 'Project', 'ProjectMember', NULL, DATE ':today' - 5, NULL, 'invitee@example.org', 'demo-invite-token', 1301, '2024-01-01', '2024-01-01', 3),
 (9, 30, 101, 'Namespace', 'GroupMember', 3, DATE ':today' - 4, '2024-12-01', NULL, NULL, 101, '2024-01-01', '2024-01-01', 3),
 -- bob's infra access expires next month: untouched.
 (10, 30, 102, 'Namespace', 'GroupMember', 3, DATE ':today' + 30, NULL, NULL, NULL, 102, '2024-01-01', '2024-01-01', 3);

-- Contractors: project developers, expiries spread over the past 60 days, ten in the future.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, member_namespace_id, created_at, updated_at, notification_level)
SELECT 10000 + g, 30, CASE WHEN g % 2 = 0 THEN 300 ELSE 302 END, 'Project', 'ProjectMember', 1000 + g,
       CASE WHEN g <= 1190 THEN DATE ':today' - (g % 60) ELSE DATE ':today' + 7 END,
       CASE WHEN g % 2 = 0 THEN 1300 ELSE 1302 END, '2024-06-01', '2024-06-01', 3
FROM generate_series(1, 1200) g;

SELECT setval(pg_get_serial_sequence('users', 'id'), 10000);
SELECT setval(pg_get_serial_sequence('namespaces', 'id'), 10000);
SELECT setval(pg_get_serial_sequence('projects', 'id'), 10000);
SELECT setval(pg_get_serial_sequence('members', 'id'), 100000);

INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at) VALUES
 (3, 101, 'Namespace', 2, '2024-01-01', '2024-01-01'),
 (4, 300, 'Project',   3, '2024-01-01', '2024-01-01'),
 (10, 300, 'Project',  3, '2024-01-01', '2024-01-01');

-- The deploy bot's token and its contributions (reassigned to the ghost user).
INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id) VALUES
 (10, 'deploy', DATE ':today' + 20, '2024-01-01', '2024-01-01', 1);
INSERT INTO issues (project_id, author_id, title, created_at, updated_at, namespace_id, work_item_type_id) VALUES
 (300, 10, 'Deploy failed on main', '2024-02-01', '2024-02-01', (SELECT project_namespace_id FROM projects WHERE id = 300), 1),
 (300, 10, 'Deploy failed again',   '2024-02-02', '2024-02-02', (SELECT project_namespace_id FROM projects WHERE id = 300), 1);
INSERT INTO merge_requests (target_project_id, author_id, title, created_at, updated_at, target_branch, source_branch) VALUES
 (300, 10, 'Bump deploy image', '2024-02-03', '2024-02-03', 'main', 'feature');
INSERT INTO notes (project_id, author_id, note, created_at, updated_at, noteable_type) VALUES
 (300, 10, 'Pipeline passed', '2024-02-03', '2024-02-03', 'Issue'),
 (300, 3,  'LGTM',            '2024-02-03', '2024-02-03', 'Issue');
