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
/// Before [`READ_ONLY`]: whether the server is a replica, the session's
/// `default_transaction_read_only` and `transaction_read_only` as the role and
/// database set them, and where the default comes from (`pg_settings.source`).
pub const WRITABLE: &str = "SELECT pg_is_in_recovery(),
            current_setting('default_transaction_read_only'),
            current_setting('transaction_read_only'),
            (SELECT source FROM pg_settings WHERE name = 'default_transaction_read_only')";

/// The parse-tree session (simple query, several statements): read only, and the
/// server sends each statement's rewritten parse tree as a LOG message (parse only:
/// PREPARE runs nothing).
pub const PARSE_TREES: &str = "SET default_transaction_read_only = on;
     SET debug_pretty_print = off; SET client_min_messages = log;
     SET debug_print_rewritten = on";
/// Tables of this database another session holds a lock on that blocks a PREPARE
/// (SHARE mode or stronger: they block the ROW EXCLUSIVE lock of a write's target;
/// ACCESS EXCLUSIVE blocks every read too).
pub const LOCKED_TABLES: &str = "SELECT DISTINCT c.relname::text FROM pg_locks l
     JOIN pg_class c ON c.oid = l.relation
     WHERE l.locktype = 'relation' AND l.granted AND l.pid <> pg_backend_pid()
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
       AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
     ORDER BY 1";
/// The schemas holding a table named `$1` that the role may not use (so it is not on
/// its search path), with the role, both quoted for a GRANT.
pub const HIDDEN_SCHEMAS: &str = "SELECT quote_ident(n.nspname::text), quote_ident(current_user)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relname = $1 AND c.relkind IN ('r', 'p', 'v')
       AND NOT has_schema_privilege(n.oid, 'USAGE')
     ORDER BY n.nspname = 'public' DESC, 1 LIMIT 1";
/// The connected role, quoted for a GRANT.
pub const ROLE: &str = "SELECT quote_ident(current_user)";
/// Whether the role holds privilege `$2` (SELECT, INSERT, UPDATE, DELETE) on relation
/// `$1` as the executor checks it: the table privilege; else (not for DELETE, and not
/// when `$3` holds a system column, `-32768`: `tree::SYSTEM_COLUMN`) every column of
/// `$3` (0: every column), and any one column when `$4`. Also the relation's name as a
/// GRANT names it.
pub const PRIVILEGE: &str = "SELECT $1::oid::regclass::text,
       has_table_privilege($1::oid, $2::text)
       OR ($2::text <> 'DELETE'
           AND NOT ((-32768)::int2 = ANY($3::int2[]))
           AND (NOT $4::bool OR has_any_column_privilege($1::oid, $2::text))
           AND coalesce((SELECT bool_and(has_column_privilege($1::oid, a.attnum, $2::text))
                         FROM pg_attribute a
                         WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped
                           AND (a.attnum = ANY($3::int2[]) OR 0 = ANY($3::int2[]))), true))";
/// The sequences the column defaults of relation `$1` draw from (`nextval`), for the
/// columns an INSERT leaves out (not in `$2`), and whether the role may use each
/// (`nextval` needs USAGE or UPDATE).
pub const SEQUENCES: &str = "SELECT DISTINCT s.oid::regclass::text,
            has_sequence_privilege(s.oid, 'USAGE') OR has_sequence_privilege(s.oid, 'UPDATE')
     FROM pg_attrdef d
     JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum AND NOT a.attisdropped
     JOIN pg_depend p ON p.classid = 'pg_attrdef'::regclass AND p.objid = d.oid
                     AND p.refclassid = 'pg_class'::regclass
     JOIN pg_class s ON s.oid = p.refobjid AND s.relkind = 'S'
     WHERE d.adrelid = $1::oid AND NOT (d.adnum = ANY($2::int2[]))";

/// The enabled user triggers of relation `$1` on the events of `$2` (`tgtype` bits)
/// whose function runs as the caller (not `SECURITY DEFINER`): name and body.
pub const TRIGGERS: &str = "SELECT t.tgname::text, p.prosrc FROM pg_trigger t
     JOIN pg_proc p ON p.oid = t.tgfoid
     WHERE t.tgrelid = $1::oid AND NOT t.tgisinternal AND t.tgenabled <> 'D'
       AND NOT p.prosecdef AND (t.tgtype::int4 & $2::int4) <> 0";
/// The table `$1` (unqualified, by the search path) and the attribute number of its
/// column `$2`: a blocking foreign key's column (`shared::gitlab::blockers`).
pub const COLUMN_OF: &str = "SELECT c.oid, a.attnum FROM pg_class c
     JOIN pg_attribute a ON a.attrelid = c.oid AND NOT a.attisdropped
     WHERE c.oid = to_regclass(quote_ident($1::text)) AND a.attname = $2::text";
/// The table a name (as a trigger body writes it) resolves to by the search path, if
/// any.
pub const RELATION_OID: &str = "SELECT c.oid FROM pg_class c
     WHERE c.oid = to_regclass($1::text) AND c.relkind IN ('r', 'p')";

/// Whether GitLab's `schema_migrations` exists.
pub const HAS_SCHEMA_MIGRATIONS: &str = "SELECT to_regclass('schema_migrations') IS NOT NULL";
/// The newest migration version (the functions' own statement).
pub use shared::gitlab::release::sql::NEWEST_MIGRATION;
/// The unique indexes (or constraints) of table `$1` that can arbitrate `ON CONFLICT
/// ($2)`: unique, immediate, valid, not partial, no expression, key columns exactly
/// the set `$2`.
pub const ARBITER_INDEXES: &str = "SELECT count(*)::int8 FROM pg_index i
     JOIN pg_class t ON t.oid = i.indrelid
     WHERE t.relname = $1 AND t.relnamespace = to_regnamespace(current_schema())
       AND i.indisunique AND i.indimmediate AND i.indisvalid
       AND i.indpred IS NULL AND i.indexprs IS NULL
       AND (SELECT array_agg(a.attname::text ORDER BY a.attname::text) FROM pg_attribute a
            WHERE a.attrelid = t.oid
              AND a.attnum = ANY((i.indkey::int2[])[0:i.indnkeyatts - 1]))
         = (SELECT array_agg(c ORDER BY c) FROM unnest($2::text[]) c)";

/// The columns of table `$1` (current schema) an INSERT must supply: not null (by the
/// column's `NOT NULL`, or by a `CHECK (col IS NOT NULL)` constraint, validated or
/// not, GitLab's usual way: its name is the second column, empty for `NOT NULL`), no
/// default, not identity or generated. Read from the catalog, which shows every
/// column whatever the role's grants.
pub const REQUIRED_COLUMNS: &str = "SELECT a.attname::text,
            CASE WHEN a.attnotnull THEN '' ELSE ck.conname END
     FROM pg_attribute a
     JOIN pg_class t ON t.oid = a.attrelid
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
     LEFT JOIN LATERAL (
       SELECT c.conname::text AS conname FROM pg_constraint c
       WHERE c.conrelid = a.attrelid AND c.contype = 'c' AND c.conkey = ARRAY[a.attnum]
         AND pg_get_constraintdef(c.oid)
             ~ ('^CHECK \\(\\(' || quote_ident(a.attname::text) || ' IS NOT NULL\\)\\)')
       ORDER BY 1 LIMIT 1) ck ON true
     WHERE t.relname = $1 AND t.relnamespace = to_regnamespace(current_schema())
       AND a.attnum > 0 AND NOT a.attisdropped AND d.adrelid IS NULL
       AND a.attidentity = '' AND a.attgenerated = ''
       AND (a.attnotnull OR ck.conname IS NOT NULL)
     ORDER BY a.attnum";

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
/// The instance's identity (`application_settings.uuid`, the first row), which
/// `GITLAB_INSTANCE_UUID` must name for storage removal.
pub const INSTANCE_UUID: &str = "SELECT uuid::text FROM application_settings ORDER BY id LIMIT 1";
/// The system hooks a removal sends to (`web_hooks` rows of type `SystemHook`) and
/// whether silent mode holds them (docs/gitlab-differences.md, "System hooks").
pub const SYSTEM_HOOKS: &str = "SELECT (SELECT count(*) FROM web_hooks WHERE type = 'SystemHook')::int8,
            COALESCE((SELECT silent_mode_enabled FROM application_settings ORDER BY id DESC LIMIT 1), false)";
/// The `GroupHook` rows subscribed to an event a removal sends (member, subgroup or
/// project events: EE's group hooks, `GROUP_HOOKS`).
pub const GROUP_HOOKS: &str = "SELECT count(*)::int8 FROM web_hooks
     WHERE type = 'GroupHook' AND (member_events OR subgroup_events OR project_events)";
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

/// `hk grants`: the current database and role `$1`, both quoted for a GRANT.
pub const GRANT_TARGET: &str = "SELECT quote_ident(current_database()), quote_ident($1::text)";
/// `hk grants`: relation `$1` as a GRANT names it, and its schema, quoted.
pub const RELATION_NAMES: &str = "SELECT c.oid::regclass::text, quote_ident(n.nspname::text)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::oid";
/// `hk grants`: the schema of sequence `$1` (as [`SEQUENCES`] names it), quoted.
pub const SEQUENCE_SCHEMA: &str = "SELECT quote_ident(n.nspname::text)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = to_regclass($1::text)";
/// `hk grants --columns`: the columns `$2` (attribute numbers) of relation `$1`, quoted
/// and in table order.
pub const COLUMN_NAMES: &str =
    "SELECT coalesce(string_agg(quote_ident(a.attname::text), ', ' ORDER BY a.attnum), '')
     FROM pg_attribute a
     WHERE a.attrelid = $1::oid AND a.attnum = ANY($2::int2[]) AND NOT a.attisdropped";
