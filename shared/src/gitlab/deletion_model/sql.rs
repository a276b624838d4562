//! The SQL of [`crate::gitlab::deletion_model`]: the column probes.

crate::statements::statements! {
    /// Whether `namespaces.state` and `namespace_details.state_metadata` exist (18.4),
    /// and whether `namespace_details.deletion_scheduled_at` does (18.10).
    PROBE = "SELECT
             (SELECT count(*) = 2 FROM pg_attribute
               WHERE NOT attisdropped AND attnum > 0
                 AND ((attrelid = to_regclass('namespaces') AND attname = 'state')
                   OR (attrelid = to_regclass('namespace_details') AND attname = 'state_metadata'))),
             EXISTS (SELECT 1 FROM pg_attribute
               WHERE NOT attisdropped AND attnum > 0
                 AND attrelid = to_regclass('namespace_details') AND attname = 'deletion_scheduled_at')";
    /// Whether table `$1` has column `$2`: the probe of a column a statement needs
    /// (`catalogue::needed_columns`) or a release added.
    HAS_COLUMN = "SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass($1::text) AND attname = $2::text
                 AND attnum > 0 AND NOT attisdropped)";
}
