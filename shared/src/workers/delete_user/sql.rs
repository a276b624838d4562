//! The statements of [`crate::workers::delete_user`].

use crate::gitlab::membership::sql::member_columns;

/// The reassignment of one contribution table: up to `$3` rows authored by `$1` to the
/// ghost user `$2`, by id.
macro_rules! reassign {
    ($table:literal) => {
        concat!(
            "UPDATE ",
            $table,
            " SET author_id = $2::bigint WHERE id IN
                           (SELECT id FROM ",
            $table,
            " WHERE author_id = $1::bigint ORDER BY id LIMIT $3)"
        )
    };
}

crate::statements::statements! {
    /// Steps 1 and 7: user `$1`'s type, waiting for any phase-1 transaction on it.
    SHARE_USER = "SELECT user_type::int2 FROM users WHERE id = $1::bigint FOR SHARE";
    /// Steps 2 and 7: user `$1`'s pending ghost user migration, if any, with its
    /// initiator (the author of the deletion's audit event).
    MIGRATION = "SELECT initiator_user_id::bigint FROM ghost_user_migrations WHERE user_id = $1::bigint";
    /// Step 7: lock user `$1`'s row, with its type.
    LOCK_USER = "SELECT user_type::int2 FROM users WHERE id = $1::bigint FOR UPDATE";
    /// Step 7: the memberships of user `$1` that reappeared since phase 1, locked.
    LOCK_MEMBERSHIPS = concat!(
        "SELECT ",
        member_columns!(),
        " FROM members WHERE user_id = $1::bigint ORDER BY id FOR UPDATE"
    );
    /// Step 7: the routes of user `$1`'s personal namespaces.
    DELETE_ROUTES = "DELETE FROM routes WHERE source_type = 'Namespace' AND source_id IN
           (SELECT id FROM namespaces WHERE type = 'User' AND owner_id = $1::bigint)";
    /// Step 7: user `$1`'s personal namespaces.
    DELETE_NAMESPACES = "DELETE FROM namespaces WHERE type = 'User' AND owner_id = $1::bigint";
    /// Step 7: user `$1`'s migration row.
    DELETE_MIGRATION = "DELETE FROM ghost_user_migrations WHERE user_id = $1::bigint";
    /// Step 7: user `$1`'s remaining project authorizations (a loose foreign key in
    /// GitLab, whose destroy removes them at once).
    DELETE_AUTHORIZATIONS = "DELETE FROM project_authorizations WHERE user_id = $1::bigint";
    /// Step 7: user `$1` (GitLab's `users_loose_fk_trigger` records the delete in
    /// `loose_foreign_keys_deleted_records` for GitLab's cleanup of what is left to it).
    DELETE_USER = "DELETE FROM users WHERE id = $1::bigint";
    /// Reassign a batch of `issues`.
    REASSIGN_ISSUES = reassign!("issues");
    /// Reassign a batch of `merge_requests`.
    REASSIGN_MERGE_REQUESTS = reassign!("merge_requests");
    /// Reassign a batch of `notes`.
    REASSIGN_NOTES = reassign!("notes");
}
