//! The SQL of [`crate::batches::placeholder_user_cleanup`]: the keyset page of
//! eligible details and the guarded claim of one attempt.

crate::statements::statements! {
    /// One keyset page of eligible details: `$1` max attempts, `$2` retry before,
    /// `$3` after id, `$4` limit.
    READ_PAGE = "SELECT id::bigint, placeholder_user_id::bigint
             FROM import_placeholder_user_details
             WHERE namespace_id IS NULL
               AND deletion_attempts < $1::int4
               AND (last_deletion_attempt_at IS NULL OR last_deletion_attempt_at < $2::timestamptz)
               AND id > $3::bigint
             ORDER BY id LIMIT $4::int8";
    /// Step 2: count an attempt of detail `$1` at `$2` only while it is still eligible.
    CLAIM = "UPDATE import_placeholder_user_details
             SET deletion_attempts = deletion_attempts + 1,
                 last_deletion_attempt_at = $2::timestamptz,
                 updated_at = $2::timestamptz
             WHERE id = $1::bigint
               AND namespace_id IS NULL
               AND deletion_attempts < $3::int4
               AND (last_deletion_attempt_at IS NULL OR last_deletion_attempt_at < $4::timestamptz)
             RETURNING deletion_attempts::bigint, placeholder_user_id::bigint";
}
