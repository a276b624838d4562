//! The statements of [`crate::locks`]: the advisory-lock calls.

crate::statements::statements! {
    /// Try the session-level lock `$1` (an overlap or group-destroy key).
    TRY_SESSION_LOCK = "SELECT pg_try_advisory_lock($1)";
    /// Release the session-level lock `$1`.
    SESSION_UNLOCK = "SELECT pg_advisory_unlock($1)";
    /// Transaction-level locks on every key of `$1::int8[]`, in array order: a function
    /// scan over unnest keeps the array order, so one round trip takes them all in order.
    XACT_LOCKS = "SELECT count(pg_advisory_xact_lock(k)) FROM unnest($1::int8[]) AS k";
}
