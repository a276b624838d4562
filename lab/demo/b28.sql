-- B28 demo data (pat-expiring, deliver-notification). Ids: users/namespaces/projects
-- 6000-6999, members 60000-69999, tokens and hooks 6001+. `:today` is the run's date.
-- The hooks' URLs and token are encrypted as GitLab stores them (AES-256-GCM,
-- pack('m') Base64) with the demo db_key_base (shared::demo::DEMO_DB_KEY_BASE, the
-- `hk` default); every demo hook points at a loopback or private address, so the
-- deliverer refuses it (local_network) and the demo sends no network traffic.

INSERT INTO users (id, username, name, email, notification_email, state, admin, user_type, created_at, updated_at, projects_limit, organization_id) VALUES
 (6001, 'erin',  'Erin Tokens',  'erin@example.com',  'erin.alerts@example.com', 'active',  false, 0, '2024-06-01', '2024-06-01', 100000, 1),
 (6002, 'frank', 'Frank Blocked', 'frank@example.com', NULL, 'blocked', false, 0, '2024-06-01', '2024-06-01', 100000, 1),
 (6003, 'grace', 'Grace Maint',  'grace@example.com', NULL, 'active',  false, 0, '2024-06-01', '2024-06-01', 100000, 1),
 (6004, 'heidi', 'Heidi Owner',  'heidi@example.com', NULL, 'active',  false, 0, '2024-06-01', '2024-06-01', 100000, 1),
 (6010, 'project_6200_bot_1', 'hooks deploy bot', 'project_6200_bot_1@noreply.example.com', NULL, 'active', false, 6, '2024-06-01', '2024-06-01', 100000, 1),
 (6011, 'group_6100_bot_1',   'demo-b28 ci bot',  'group_6100_bot_1@noreply.example.com',   NULL, 'active', false, 6, '2024-06-01', '2024-06-01', 100000, 1),
 (6012, 'project_6999_bot_1', 'orphan bot',       'project_6999_bot_1@noreply.example.com', NULL, 'active', false, 6, '2024-06-01', '2024-06-01', 100000, 1);

-- Groups: demo-b28 > tokens; project hooks in tokens.
INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id) VALUES
 (6100, 'demo-b28', 'demo-b28', 'Group',   NULL, '{6100}',           '2024-06-01', '2024-06-01', 1),
 (6101, 'tokens',   'tokens',   'Group',   6100, '{6100,6101}',      '2024-06-01', '2024-06-01', 1),
 (6300, 'hooks',    'hooks',    'Project', 6101, '{6100,6101,6300}', '2024-06-01', '2024-06-01', 1);
INSERT INTO projects (id, name, path, description, namespace_id, project_namespace_id, organization_id, created_at, updated_at) VALUES
 (6200, 'hooks', 'hooks', 'Receives web hooks', 6101, 6300, 1, '2024-06-01', '2024-06-01');
INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at) VALUES
 (6100, 'Namespace', 'demo-b28',              'demo-b28',                     6100, '2024-06-01', '2024-06-01'),
 (6101, 'Namespace', 'demo-b28/tokens',       'demo-b28 / tokens',            6101, '2024-06-01', '2024-06-01'),
 (6200, 'Project',   'demo-b28/tokens/hooks', 'demo-b28 / tokens / hooks',    6300, '2024-06-01', '2024-06-01');

-- heidi owns demo-b28; grace maintains hooks; the bots are members of their resource.
-- No membership expires (B38 leaves them alone).
INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, created_at, updated_at, notification_level) VALUES
 (60001, 50, 6100, 'Namespace', 'GroupMember',   6004, 6100, '2024-06-01', '2024-06-01', 3),
 (60002, 40, 6200, 'Project',   'ProjectMember', 6003, 6300, '2024-06-01', '2024-06-01', 3),
 (60003, 40, 6200, 'Project',   'ProjectMember', 6010, 6300, '2024-06-01', '2024-06-01', 3),
 (60004, 30, 6100, 'Namespace', 'GroupMember',   6011, 6100, '2024-06-01', '2024-06-01', 3);

-- Tokens: erin's expire in 3 and 20 days (and a revoked one), frank (blocked) is
-- marked without a mail, the project bot's in 6 days fires the hooks, the group bot's
-- in 45 days mails heidi, and the orphan bot's is left unmarked.
INSERT INTO personal_access_tokens (id, user_id, name, revoked, expires_at, created_at, updated_at, organization_id) VALUES
 (6001, 6001, 'laptop',      false, DATE ':today' + 3,  '2024-06-01 09:00:00', '2024-06-01', 1),
 (6002, 6001, 'ci',          false, DATE ':today' + 20, '2024-06-01 09:00:00', '2024-06-01', 1),
 (6003, 6001, 'old-laptop',  true,  DATE ':today' + 4,  '2024-06-01 09:00:00', '2024-06-01', 1),
 (6004, 6002, 'old-script',  false, DATE ':today' + 5,  '2024-06-01 09:00:00', '2024-06-01', 1),
 (6005, 6010, 'site-deploy', false, DATE ':today' + 6,  '2024-06-01 09:00:00', '2024-06-01', 1),
 (6006, 6011, 'group-ci',    false, DATE ':today' + 45, '2024-06-01 09:00:00', '2024-06-01', 1),
 (6007, 6012, 'orphan',      false, DATE ':today' + 2,  '2024-06-01 09:00:00', '2024-06-01', 1);
SELECT setval(pg_get_serial_sequence('personal_access_tokens', 'id'), 6999);

INSERT INTO web_hooks (id, project_id, group_id, type, encrypted_url, encrypted_url_iv, encrypted_token,
                       encrypted_token_iv, resource_access_token_events, created_at, updated_at) VALUES
 (6001, 6200, NULL, 'ProjectHook',
  E'G4zzq+IpRxOwvstL2fiNc+UAQfoJI5ImV+frsgoELQZKJUiggJwDC7HXVTJW\n', E'AQEBAQEBAQEBAQEB\n',
  E'i6fLkDfbN7vJeF/ssQ0V3glam7CxeBai5Usy52LryA==\n', E'AgICAgICAgICAgIC\n',
  true, '2024-06-01', '2024-06-01'),
 (6002, NULL, 6100, 'GroupHook',
  E'kepbLBTcIZk6QQRGjiiNUYZEmVHkJcM4YREtSggrAqH4F5eb2UUV5p0s\n', E'AwMDAwMDAwMDAwMD\n',
  NULL, NULL, true, '2024-06-01', '2024-06-01'),
 (6003, 6200, NULL, 'ProjectHook',
  E'Sez4R8XQNDLGCwYvwrfNo+vioogJQv4W+uLdEfJlXwYK2VT/KT7EIrUoFceE\nArIJ1kW61OM=\n', E'BAQEBAQEBAQEBAQE\n',
  NULL, NULL, false, '2024-06-01', '2024-06-01');
SELECT setval(pg_get_serial_sequence('web_hooks', 'id'), 6999);
