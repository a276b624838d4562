-- B70 demo data (placeholder-user-cleanup, delete-placeholder-user). Ids 5000-5999
-- for users, namespaces and projects; import_placeholder_user_details and
-- import_source_users use explicit ids from 5001. `:today` is replaced with the run's
-- date before execution.
--
-- An import into the group "imported" (G5100) is still there; the top-level group of
-- an older import was deleted, which set its details' namespace_id to NULL.

INSERT INTO users (id, username, name, email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id) VALUES
 -- no contribution left: deleted (phase 1 drops its leftover membership)
 (5001, 'placeholder_5001', 'Placeholder Ada',   'placeholder_5001@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- still the author of a note: warned about and kept
 (5002, 'placeholder_5002', 'Placeholder Brook', 'placeholder_5002@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- 14 attempts so far: the final attempt is logged, then it is deleted
 (5003, 'placeholder_5003', 'Placeholder Cyd',   'placeholder_5003@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- its import's namespace still exists: not selected
 (5004, 'placeholder_5004', 'Placeholder Dee',   'placeholder_5004@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- tried yesterday: waits until two days have passed
 (5005, 'placeholder_5005', 'Placeholder Eli',   'placeholder_5005@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- 15 attempts used up: never selected again
 (5006, 'placeholder_5006', 'Placeholder Fay',   'placeholder_5006@noreply.example.com', 'active', false, 15, '2024-05-01', '2024-05-01', 100000, 1),
 -- reassigned to a real account since (user_type 0): the child leaves it alone
 (5007, 'gus',              'Gus Imported',      'gus@example.com',                       'active', false, 0,  '2024-05-01', '2024-05-01', 100000, 1);

-- The group of the surviving import and its project.
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (5100, 'imported',   'imported',   'Group',   NULL, '{5100}',      '2024-05-01', '2024-05-01', 1),
 (5300, 'legacy-app', 'legacy-app', 'Project', 5100, '{5100,5300}', '2024-05-01', '2024-05-01', 1);
INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at) VALUES
 (5200, 'legacy-app', 'legacy-app', 5100, 5300, 1, '2024-05-01', '2024-05-01');
INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at) VALUES
 (5100, 'Namespace', 'imported',            'imported',              5100, '2024-05-01', '2024-05-01'),
 (5200, 'Project',   'imported/legacy-app', 'imported / legacy-app', 5300, '2024-05-01', '2024-05-01');

-- alice owns the group; placeholder 5001 kept a developer membership there.
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, member_namespace_id, created_at, updated_at, notification_level) VALUES
 (5001, 50, 5100, 'Namespace', 'GroupMember', 2,    NULL, 5100, '2024-05-01', '2024-05-01', 3),
 (5002, 30, 5100, 'Namespace', 'GroupMember', 5001, NULL, 5100, '2024-05-01', '2024-05-01', 3);

INSERT INTO notes (project_id, author_id, note, created_at, updated_at, noteable_type) VALUES
 (5200, 5002, 'Imported comment', '2024-05-01', '2024-05-01', 'Issue');

INSERT INTO import_placeholder_user_details
  (id, placeholder_user_id, namespace_id, deletion_attempts, organization_id, last_deletion_attempt_at, created_at, updated_at) VALUES
 (5001, 5001, NULL, 0,  1, NULL,             '2024-05-01', '2024-05-01'),
 (5002, 5002, NULL, 3,  1, DATE ':today' - 5,  '2024-05-01', DATE ':today' - 5),
 (5003, 5003, NULL, 14, 1, DATE ':today' - 3,  '2024-05-01', DATE ':today' - 3),
 (5004, 5004, 5100, 0,  1, NULL,             '2024-05-01', '2024-05-01'),
 (5005, 5005, NULL, 1,  1, DATE ':today' - 1,  '2024-05-01', DATE ':today' - 1),
 (5006, 5006, NULL, 15, 1, DATE ':today' - 10, '2024-05-01', DATE ':today' - 10),
 (5007, 5007, NULL, 0,  1, NULL,             '2024-05-01', '2024-05-01');

INSERT INTO import_source_users
  (id, placeholder_user_id, namespace_id, status, source_username, source_name, source_user_identifier,
   source_hostname, import_type, created_at, updated_at) VALUES
 (5001, 5001, 5100, 0, 'ada',  'Ada',  '101', 'https://gitlab.example.org', 'gitlab_migration', '2024-05-01', '2024-05-01'),
 (5002, 5004, 5100, 0, 'dee',  'Dee',  '104', 'https://gitlab.example.org', 'gitlab_migration', '2024-05-01', '2024-05-01');

SELECT setval(pg_get_serial_sequence('import_placeholder_user_details', 'id'),
              (SELECT max(id) FROM import_placeholder_user_details));
SELECT setval(pg_get_serial_sequence('import_source_users', 'id'),
              (SELECT max(id) FROM import_source_users));
