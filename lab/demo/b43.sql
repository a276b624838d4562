-- B43 demo data (prune-deletions): scheduled removals of users from the "globex"
-- hierarchy. Ids: users, namespaces and projects 3000-3999; members 30000-39999;
-- members_deletion_schedules 3001+. No membership here expires (B38's demo numbers
-- stay as they are). `:today` is replaced with the run's date before execution.
--
-- What the demo shows (schedule-prune-deletions, then prune-deletions until idle):
--   S3001 sam, by olivia (owner): every membership in globex's three levels goes,
--         his initech membership stays                         -> completed
--   S3002 tina, by mallory (maintainer): her project membership goes, her group
--         membership is denied (not_authorized)                -> denied
--   S3003 the globex CI bot, by ada (admin): a bot's group membership is never
--         removed (project_bot_group_member)                   -> denied
--   S3004 victor, by olivia: 120 project memberships, 100 per invocation
--                                                              -> partial, then completed
--   S3011-S3022 twelve seasonal users, by olivia: more than 10 schedules, so the
--         chain continues with hop 1                           -> completed

INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id) VALUES
 (3001, 'olivia',     'Olivia Owner',  'olivia@example.com',  'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3002, 'mallory',    'Mallory Maint', 'mallory@example.com', 'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3003, 'sam',        'Sam Leaver',    'sam@example.com',     'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3004, 'tina',       'Tina Temp',     'tina@example.com',    'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3005, 'group_3000_bot_1', 'globex ci bot', 'group_3000_bot_1@noreply.example.com', 'active', false, 6, '2024-01-01', '2024-01-01', 100000, 1),
 (3006, 'victor',     'Victor Vendor', 'victor@example.com',  'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (3007, 'ada',        'Ada Admin',     'ada@example.com',     'active', true,  0, '2024-01-01', '2024-01-01', 100000, 1);
INSERT INTO users (id, username, name, email, state, user_type, created_at, updated_at, projects_limit, organization_id)
SELECT 3100 + g, 'seasonal' || g, 'Seasonal ' || g, 'seasonal' || g || '@example.com',
       'active', 0, '2024-06-01', '2024-06-01', 100000, 1
FROM generate_series(1, 12) g;

-- Groups: globex > platform > tools (three levels); initech (another hierarchy).
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (3000, 'globex',   'globex',   'Group', NULL, '{3000}',           '2024-01-01', '2024-01-01', 1),
 (3001, 'platform', 'platform', 'Group', 3000, '{3000,3001}',      '2024-01-01', '2024-01-01', 1),
 (3002, 'tools',    'tools',    'Group', 3001, '{3000,3001,3002}', '2024-01-01', '2024-01-01', 1),
 (3900, 'initech',  'initech',  'Group', NULL, '{3900}',           '2024-01-01', '2024-01-01', 1);

-- Projects (project namespace = id + 100, erp's 3911), and 120 vendor projects in tools
-- (P3200-P3319, project namespaces 3500-3619).
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (3110, 'api',    'api',    'Project', 3001, '{3000,3001,3110}',      '2024-01-01', '2024-01-01', 1),
 (3111, 'cli',    'cli',    'Project', 3002, '{3000,3001,3002,3111}', '2024-01-01', '2024-01-01', 1),
 (3112, 'www',    'www',    'Project', 3000, '{3000,3112}',           '2024-01-01', '2024-01-01', 1),
 (3911, 'erp',    'erp',    'Project', 3900, '{3900,3911}',           '2024-01-01', '2024-01-01', 1);
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
SELECT 3500 + g, 'vendor' || g, 'vendor' || g, 'Project', 3002, ARRAY[3000, 3001, 3002, 3500 + g],
       '2024-01-01', '2024-01-01', 1
FROM generate_series(0, 119) g;
INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at) VALUES
 (3010, 'api', 'api', 3001, 3110, 1, '2024-01-01', '2024-01-01'),
 (3011, 'cli', 'cli', 3002, 3111, 1, '2024-01-01', '2024-01-01'),
 (3012, 'www', 'www', 3000, 3112, 1, '2024-01-01', '2024-01-01'),
 (3910, 'erp', 'erp', 3900, 3911, 1, '2024-01-01', '2024-01-01');
INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
SELECT 3200 + g, 'vendor' || g, 'vendor' || g, 3002, 3500 + g, 1, '2024-01-01', '2024-01-01'
FROM generate_series(0, 119) g;

INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at) VALUES
 (3000, 'Namespace', 'globex',                'globex',                      3000, '2024-01-01', '2024-01-01'),
 (3001, 'Namespace', 'globex/platform',       'globex / platform',           3001, '2024-01-01', '2024-01-01'),
 (3002, 'Namespace', 'globex/platform/tools', 'globex / platform / tools',   3002, '2024-01-01', '2024-01-01'),
 (3900, 'Namespace', 'initech',               'initech',                     3900, '2024-01-01', '2024-01-01'),
 (3010, 'Project',   'globex/platform/api',       'globex / platform / api',         3110, '2024-01-01', '2024-01-01'),
 (3011, 'Project',   'globex/platform/tools/cli', 'globex / platform / tools / cli', 3111, '2024-01-01', '2024-01-01'),
 (3012, 'Project',   'globex/www',                'globex / www',                    3112, '2024-01-01', '2024-01-01'),
 (3910, 'Project',   'initech/erp',               'initech / erp',                   3911, '2024-01-01', '2024-01-01');
INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
SELECT 3200 + g, 'Project', 'globex/platform/tools/vendor' || g, 'globex / platform / tools / vendor' || g,
       3500 + g, '2024-01-01', '2024-01-01'
FROM generate_series(0, 119) g;

-- Memberships (none expires).
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level) VALUES
 -- olivia owns globex; mallory maintains it; the CI bot develops in platform.
 (30001, 50, 3000, 'Namespace', 'GroupMember', 3001, 3000, '2024-01-01', '2024-01-01', 3),
 (30002, 40, 3000, 'Namespace', 'GroupMember', 3002, 3000, '2024-01-01', '2024-01-01', 3),
 (30003, 30, 3001, 'Namespace', 'GroupMember', 3005, 3001, '2024-01-01', '2024-01-01', 3),
 -- sam, at every level of globex, and in initech (kept).
 (30010, 30, 3001, 'Namespace', 'GroupMember',   3003, 3001, '2024-01-01', '2024-01-01', 3),
 (30011, 20, 3002, 'Namespace', 'GroupMember',   3003, 3002, '2024-01-01', '2024-01-01', 3),
 (30012, 30, 3010, 'Project',   'ProjectMember', 3003, 3110, '2024-01-01', '2024-01-01', 3),
 (30013, 40, 3011, 'Project',   'ProjectMember', 3003, 3111, '2024-01-01', '2024-01-01', 3),
 (30014, 30, 3012, 'Project',   'ProjectMember', 3003, 3112, '2024-01-01', '2024-01-01', 3),
 (30015, 30, 3910, 'Project',   'ProjectMember', 3003, 3911, '2024-01-01', '2024-01-01', 3),
 -- tina: a project membership (mallory may remove it), then a group membership (she may not).
 (30020, 30, 3010, 'Project',   'ProjectMember', 3004, 3110, '2024-01-01', '2024-01-01', 3),
 (30021, 30, 3000, 'Namespace', 'GroupMember',   3004, 3000, '2024-01-01', '2024-01-01', 3);
-- victor: one membership in each vendor project.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level)
SELECT 31000 + g, 30, 3200 + g, 'Project', 'ProjectMember', 3006, 3500 + g, '2024-06-01', '2024-06-01', 3
FROM generate_series(0, 119) g;
-- seasonal users: reporter in tools, guest in cli.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level)
SELECT 32000 + g, 20, 3002, 'Namespace', 'GroupMember', 3100 + g, 3002, '2024-06-01', '2024-06-01', 3
FROM generate_series(1, 12) g;
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level)
SELECT 32100 + g, 10, 3011, 'Project', 'ProjectMember', 3100 + g, 3111, '2024-06-01', '2024-06-01', 3
FROM generate_series(1, 12) g;

INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at) VALUES
 (3003, 3001, 'Namespace', 2, '2024-01-01', '2024-01-01'),
 (3003, 3910, 'Project',   3, '2024-01-01', '2024-01-01');

-- The schedules GitLab recorded (SCIM deprovisioning, dormant-member cleanup).
INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at) VALUES
 (3001, 3000, 3003, 3001, DATE ':today' - 1, DATE ':today' - 1),
 (3002, 3000, 3004, 3002, DATE ':today' - 1, DATE ':today' - 1),
 (3003, 3000, 3005, 3007, DATE ':today' - 1, DATE ':today' - 1),
 (3004, 3000, 3006, 3001, DATE ':today' - 1, DATE ':today' - 1);
INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
SELECT 3010 + g, 3000, 3100 + g, 3001, DATE ':today' - 1, DATE ':today' - 1
FROM generate_series(1, 12) g;
