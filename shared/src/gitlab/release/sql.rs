//! The SQL of [`crate::gitlab::release`]: GitLab's newest schema migration.

crate::statements::statements! {
    /// The newest migration version (14 digits, so text order is numeric order).
    NEWEST_MIGRATION = "SELECT version::text FROM schema_migrations
     WHERE version ~ '^[0-9]{14}$' ORDER BY version DESC LIMIT 1";
}
