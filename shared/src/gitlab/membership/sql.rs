//! The statements of [`crate::gitlab::membership`], and the select list of a
//! [`Member`](super::Member) row that other modules' statements share.

/// The select list that [`Member::from_row`](super::Member::from_row) reads, for
/// `concat!` in any module's statements (`crate::gitlab::membership::sql::member_columns!()`).
macro_rules! member_columns {
    () => {
        "id::bigint, user_id::bigint, source_id::bigint, source_type, type, \
         access_level::int4, state::int2, requested_at IS NOT NULL"
    };
}
pub(crate) use member_columns;

/// The select list of `member_columns!` as a value (test code builds its own
/// queries from it).
pub const MEMBER_COLUMNS: &str = member_columns!();

crate::statements::statements! {
    /// `remove_membership`: the row `$1`.
    DELETE_MEMBER = "DELETE FROM members WHERE id = $1::bigint";
    /// `remove_membership`: user `$1`'s notification setting for source `$2`/`$3`.
    DELETE_NOTIFICATION_SETTING = "DELETE FROM notification_settings
             WHERE user_id = $1::bigint AND source_type = $2 AND source_id = $3::bigint";
}
