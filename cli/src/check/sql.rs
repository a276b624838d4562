//! The statements of `hk check` ([`super`]): catalog reads (information_schema,
//! pg_constraint, pg_stat_ssl, pg_locks) and the work-waiting counts. Every time is a
//! parameter bound from `--now` or the system clock, never the database clock.

/// `server_version_num` and the human-readable `server_version`.
pub const SERVER_VERSION: &str =
    "SELECT current_setting('server_version_num')::int4, current_setting('server_version')";

/// Every later statement of the session runs in a `READ ONLY` transaction (one per
/// statement, so a check that fails does not abort the ones after it).
pub const READ_ONLY: &str = "SET default_transaction_read_only = on";
/// Whether the current transaction is read only (`on`).
pub const IS_READ_ONLY: &str = "SHOW transaction_read_only";

/// The columns of table `$1` (schema search path) an INSERT must supply: NOT NULL, no
/// default, not identity or generated.
pub const REQUIRED_COLUMNS: &str = "SELECT column_name::text FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = $1
       AND is_nullable = 'NO' AND column_default IS NULL
       AND is_identity = 'NO' AND is_generated = 'NEVER'
     ORDER BY ordinal_position";

/// GitLab's loose-FK statement trigger on `users` (what stands in for the FKs of
/// members, notification_settings and project_authorizations on user_id).
pub const USERS_LOOSE_FK_TRIGGER: &str = "SELECT 1 FROM pg_trigger
     WHERE tgrelid = to_regclass('users') AND tgname = 'users_loose_fk_trigger' AND NOT tgisinternal";

/// The `ON DELETE` action (`confdeltype`: a no action, r restrict, c cascade, n set
/// null, d set default) of every single-column foreign key from `$1`.`$2` to `$3`.
pub const FK_ACTIONS: &str = "SELECT c.conname::text, c.confdeltype::text
     FROM pg_constraint c
     JOIN pg_class t ON t.oid = c.conrelid
     JOIN pg_class r ON r.oid = c.confrelid
     JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND cardinality(c.conkey) = 1
       AND t.relnamespace = to_regnamespace(current_schema())
       AND t.relname = $1 AND a.attname = $2 AND r.relname = $3";

/// Whether `application_settings` has a row (the batches read the first one).
pub const SETTINGS_ROWS: &str = "SELECT count(*)::int8 FROM application_settings";
/// The ghost user's id, if one exists (`user_type` 5).
pub const GHOST: &str = "SELECT id::int8 FROM users WHERE user_type = 5 ORDER BY id LIMIT 1";
/// Whether an organization exists (the ghost user's namespace needs one).
pub const ORGANIZATIONS: &str = "SELECT count(*)::int8 FROM organizations";

/// Session check, first statement (simple protocol, no prepared statement, so it
/// behaves the same behind PgBouncer): the backend and a session advisory lock on the
/// check's own key (`hk check` takes no key the functions use).
pub const SESSION_LOCK: &str =
    "SELECT pg_backend_pid()::text, pg_try_advisory_lock(7299164725402135153)::text";
/// Session check, next statement: the backend now, and whether that backend holds the
/// lock.
pub const SESSION_HELD: &str = "SELECT pg_backend_pid()::text, EXISTS (SELECT 1 FROM pg_locks
     WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
       AND classid = (7299164725402135153 >> 32)::oid
       AND objid = (7299164725402135153 & 4294967295)::oid AND objsubid = 1)::text";
/// Session check, cleanup: release every session advisory lock of this session.
pub const SESSION_UNLOCK: &str = "SELECT pg_advisory_unlock_all()";

/// TLS of this backend: `(ssl, version, cipher)`.
pub const TLS: &str = "SELECT ssl, coalesce(version, ''), coalesce(cipher, '')
     FROM pg_stat_ssl WHERE pid = pg_backend_pid()";

/// B38 `remove-expired-members`: memberships expired on or before `$1` (today).
pub const WAITING_EXPIRED_MEMBERS: &str =
    "SELECT count(*)::int8 FROM members WHERE expires_at IS NOT NULL AND expires_at <= $1::date";
/// `schedule-prune-deletions`: member deletion schedules.
pub const WAITING_PRUNE_SCHEDULES: &str = "SELECT count(*)::int8 FROM members_deletion_schedules";
/// B51 `adjourned-group-deletion`: groups marked for deletion on or before `$1` (the cutoff).
pub const WAITING_ADJOURNED_GROUPS: &str = "SELECT count(*)::int8
     FROM namespaces n JOIN group_deletion_schedules s ON s.group_id = n.id
     WHERE n.type = 'Group' AND s.marked_for_deletion_on <= $1::date";
/// B70 `placeholder-user-cleanup`: eligible details (`$1` max attempts, `$2` retry before).
pub const WAITING_PLACEHOLDERS: &str = "SELECT count(*)::int8 FROM import_placeholder_user_details
     WHERE namespace_id IS NULL AND deletion_attempts < $1::int4
       AND (last_deletion_attempt_at IS NULL OR last_deletion_attempt_at < $2::timestamptz)";
/// B28 `pat-expiring`: tokens of humans and bots to notify in one interval: `$1` its
/// first and `$2` its last date; `$3` which interval (`seven_days`, `thirty_days`,
/// `sixty_days`).
pub const WAITING_TOKENS: &str = "SELECT count(*)::int8
     FROM personal_access_tokens t JOIN users u ON u.id = t.user_id
     WHERE t.revoked = false AND t.expire_notification_delivered = false
       AND t.impersonation = false AND t.expires_at BETWEEN $1::date AND $2::date
       AND u.user_type IN (0, 6)
       AND CASE $3::text WHEN 'seven_days' THEN t.seven_days_notification_sent_at IS NULL
                         WHEN 'thirty_days' THEN t.thirty_days_notification_sent_at IS NULL
                         ELSE t.sixty_days_notification_sent_at IS NULL END";
