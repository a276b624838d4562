//! The statements of B28 `deliver-notification` (behaviour §B28.10).
//!
//! Owns: every SQL text the worker runs: the recipient and the hook row as read at
//! delivery time, and the hook row's outcome (behaviour §B28.10.4) under its row lock.

crate::statements::statements! {
    /// The recipient (`$1`) as read at delivery time: display name,
    /// `notification_address(u)` and `can_receive_notifications(u)`.
    RECIPIENT = concat!(
        "SELECT COALESCE(NULLIF(u.name, ''), u.username, ''), \
                COALESCE(NULLIF(u.notification_email, ''), u.email, ''), ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " FROM users u WHERE u.id = $1::bigint"
    );
    /// The hook row (`$1`) as read at delivery time: subscribed, URL and token with
    /// their IVs, TLS verification and the auto-disabling state.
    HOOK = "SELECT type IN ('ProjectHook', 'GroupHook') AND resource_access_token_events, \
                encrypted_url, encrypted_url_iv, encrypted_token, encrypted_token_iv, \
                COALESCE(enable_ssl_verification, true), recent_failures::int2, \
                disabled_until::timestamptz \
         FROM web_hooks WHERE id = $1::bigint";
    /// The hook row's (`$1`) auto-disabling state under its row lock.
    LOCK_HOOK_STATE = "SELECT recent_failures::int2, disabled_until::timestamptz FROM web_hooks \
         WHERE id = $1::bigint FOR UPDATE";
    /// Record the hook's (`$1`) new auto-disabling state.
    SET_HOOK_STATE = "UPDATE web_hooks SET recent_failures = $2::int2, disabled_until = $3::timestamptz \
         WHERE id = $1::bigint";
}
