//! The statements of [`crate::db`]: session settings, the liveness ping, the reset, and
//! the transaction the cold-start check PREPAREs in ([`crate::preflight::prepare_all`]).

crate::statements::statements! {
    /// The session settings of behaviour §7.1 (each `set_config(…, false)` is a session-level
    /// `SET`): `$1` statement_timeout, `$2` lock_timeout and
    /// `$3` idle_in_transaction_session_timeout, in milliseconds, as text.
    CONFIGURE = "SELECT set_config('TimeZone', 'UTC', false),
                        set_config('statement_timeout', $1::text, false),
                        set_config('lock_timeout', $2::text, false),
                        set_config('idle_in_transaction_session_timeout', $3::text, false),
                        set_config('default_transaction_isolation', 'read committed', false)";
    /// The liveness check of a kept session.
    PING = "SELECT 1";
    /// Reset after a failed record, first: end any open transaction.
    ROLLBACK = "ROLLBACK";
    /// Opens the transaction the cold-start check sends its PREPAREs in (parse only,
    /// nothing written; it ends with [`ROLLBACK`]): the first failure aborts the rest.
    CHECK_BEGIN = "BEGIN READ ONLY";
    /// Reset after a failed record, then: release every session-level advisory lock.
    UNLOCK_ALL = "SELECT pg_advisory_unlock_all()";
}
