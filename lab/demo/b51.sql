-- B51 demo data (adjourned group deletion): ids 4000-4999 for users, namespaces and
-- projects, 40000-49999 for members. `:today` is replaced with the run's date. The
-- instance's application_settings row keeps a 7-day period (an instance upgraded from
-- before GitLab 18.3 keeps its stored 7; new installs default to 30).
--   oldco  (marked 8 days ago by its owner gina)  -> destroyed with its subgroup,
--          projects, memberships and hooks; its site bot is removed as a user.
--   labs   (marked 10 days ago by ivan, who is only a maintainer) -> restored as `labs`.
--   newco  (marked 2 days ago)                    -> not yet due, untouched.

INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
VALUES (1, 7, '2024-01-01', '2024-01-01');

INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id) VALUES
 (4001, 'gina', 'Gina Owner', 'gina@example.com', 'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (4002, 'hank', 'Hank Dev',   'hank@example.com', 'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1),
 (4003, 'project_4200_bot_1', 'oldco site bot', 'project_4200_bot_1@noreply.example.com', 'active', false, 6, '2024-01-01', '2024-01-01', 100000, 1),
 (4004, 'ivan', 'Ivan Maint', 'ivan@example.com', 'active', false, 0, '2024-01-01', '2024-01-01', 100000, 1);

INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (4100, 'oldco-deletion_scheduled-4100', 'oldco-deletion_scheduled-4100', 'Group', NULL, '{4100}', '2024-01-01', '2024-01-01', 1),
 (4101, 'legacy', 'legacy', 'Group', 4100, '{4100,4101}', '2024-01-01', '2024-01-01', 1),
 (4110, 'labs-deletion_scheduled-4110', 'labs-deletion_scheduled-4110', 'Group', NULL, '{4110}', '2024-01-01', '2024-01-01', 1),
 (4120, 'newco-deletion_scheduled-4120', 'newco-deletion_scheduled-4120', 'Group', NULL, '{4120}', '2024-01-01', '2024-01-01', 1),
 (4300, 'site', 'site', 'Project', 4101, '{4100,4101,4300}', '2024-01-01', '2024-01-01', 1),
 (4301, 'api',  'api',  'Project', 4100, '{4100,4301}',      '2024-01-01', '2024-01-01', 1),
 (4310, 'lab',  'lab',  'Project', 4110, '{4110,4310}',      '2024-01-01', '2024-01-01', 1);

INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at) VALUES
 (4200, 'site', 'site', 4101, 4300, 1, '2024-01-01', '2024-01-01'),
 (4201, 'api',  'api',  4100, 4301, 1, '2024-01-01', '2024-01-01'),
 (4210, 'lab',  'lab',  4110, 4310, 1, '2024-01-01', '2024-01-01');

INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at) VALUES
 (4100, 'Namespace', 'oldco-deletion_scheduled-4100', 'oldco-deletion_scheduled-4100', 4100, '2024-01-01', '2024-01-01'),
 (4101, 'Namespace', 'oldco-deletion_scheduled-4100/legacy', 'oldco-deletion_scheduled-4100 / legacy', 4101, '2024-01-01', '2024-01-01'),
 (4110, 'Namespace', 'labs-deletion_scheduled-4110', 'labs-deletion_scheduled-4110', 4110, '2024-01-01', '2024-01-01'),
 (4120, 'Namespace', 'newco-deletion_scheduled-4120', 'newco-deletion_scheduled-4120', 4120, '2024-01-01', '2024-01-01'),
 (4200, 'Project', 'oldco-deletion_scheduled-4100/legacy/site', 'oldco-deletion_scheduled-4100 / legacy / site', 4300, '2024-01-01', '2024-01-01'),
 (4201, 'Project', 'oldco-deletion_scheduled-4100/api', 'oldco-deletion_scheduled-4100 / api', 4301, '2024-01-01', '2024-01-01'),
 (4210, 'Project', 'labs-deletion_scheduled-4110/lab', 'labs-deletion_scheduled-4110 / lab', 4310, '2024-01-01', '2024-01-01');

-- Memberships: none expires.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level) VALUES
 (40001, 50, 4100, 'Namespace', 'GroupMember',   4001, 4100, '2024-01-01', '2024-01-01', 3),
 (40002, 30, 4101, 'Namespace', 'GroupMember',   4002, 4101, '2024-01-01', '2024-01-01', 3),
 (40003, 40, 4200, 'Project',   'ProjectMember', 4003, 4300, '2024-01-01', '2024-01-01', 3),
 (40004, 40, 4110, 'Namespace', 'GroupMember',   4004, 4110, '2024-01-01', '2024-01-01', 3),
 (40005, 50, 4110, 'Namespace', 'GroupMember',   4001, 4110, '2024-01-01', '2024-01-01', 3),
 (40006, 50, 4120, 'Namespace', 'GroupMember',   4001, 4120, '2024-01-01', '2024-01-01', 3);

INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on) VALUES
 (4100, 4001, DATE ':today' - 8),
 (4110, 4004, DATE ':today' - 10),
 (4120, 4001, DATE ':today' - 2);

INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at) VALUES
 (4002, 4101, 'Namespace', 3, '2024-01-01', '2024-01-01');
INSERT INTO web_hooks (project_id, group_id, type, created_at, updated_at) VALUES
 (4200, NULL, 'ProjectHook', '2024-01-01', '2024-01-01'),
 (NULL, 4100, 'GroupHook',   '2024-01-01', '2024-01-01');
INSERT INTO personal_access_tokens (user_id, name, expires_at, created_at, updated_at, organization_id) VALUES
 (4003, 'site deploy', DATE ':today' + 90, '2024-01-01', '2024-01-01', 1);
INSERT INTO issues (project_id, author_id, title, created_at, updated_at, namespace_id, work_item_type_id) VALUES
 (4200, 4002, 'Legacy site is slow', '2024-03-01', '2024-03-01', (SELECT project_namespace_id FROM projects WHERE id = 4200), 1),
 (4201, 4002, 'Deprecate v1 API',    '2024-03-02', '2024-03-02', (SELECT project_namespace_id FROM projects WHERE id = 4201), 1);
INSERT INTO merge_requests (target_project_id, author_id, title, created_at, updated_at, target_branch, source_branch) VALUES
 (4200, 4003, 'Bump site image', '2024-03-03', '2024-03-03', 'main', 'feature');
INSERT INTO notes (project_id, author_id, note, created_at, updated_at, noteable_type) VALUES
 (4210, 4003, 'Nightly lab build passed', '2024-03-04', '2024-03-04', 'Issue');
