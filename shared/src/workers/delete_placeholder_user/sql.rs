//! The SQL of [`crate::workers::delete_placeholder_user`]: the re-checks of the
//! placeholder before phase 1.

crate::statements::statements! {
    /// Steps 1 and 2: the user's type, if the user exists.
    USER_TYPE = "SELECT user_type::int2 FROM users WHERE id = $1::bigint";
    /// Step 3 (behaviour §D17): whether an issue, merge request or note names `$1` as author.
    REFERENCED = "SELECT EXISTS (SELECT 1 FROM issues WHERE author_id = $1::bigint)
                 OR EXISTS (SELECT 1 FROM merge_requests WHERE author_id = $1::bigint)
                 OR EXISTS (SELECT 1 FROM notes WHERE author_id = $1::bigint)";
}
