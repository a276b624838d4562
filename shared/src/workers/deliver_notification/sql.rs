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
    /// The hook row (`$1`) at delivery time: subscribed, URL and token with their IVs,
    /// TLS verification, the auto-disabling state, and GitLab's current outbound
    /// settings (false without a settings row, GitLab's defaults).
    /// `$2` says which kind of hook: `system` (subscribed is `type = 'SystemHook'`), an
    /// EE group-hook trigger (`member_hooks`, `subgroup_hooks`, `project_hooks`: a
    /// `GroupHook` with the trigger's flag on), or `token` (a project or group hook with
    /// `resource_access_token_events`).
    HOOK = "SELECT CASE $2::text WHEN 'system' THEN w.type = 'SystemHook' \
                     WHEN 'member_hooks' THEN w.type = 'GroupHook' AND w.member_events \
                     WHEN 'subgroup_hooks' THEN w.type = 'GroupHook' AND w.subgroup_events \
                     WHEN 'project_hooks' THEN w.type = 'GroupHook' AND w.project_events \
                     ELSE w.type IN ('ProjectHook', 'GroupHook') AND w.resource_access_token_events END, \
                w.encrypted_url, w.encrypted_url_iv, w.encrypted_token, w.encrypted_token_iv, \
                COALESCE(w.enable_ssl_verification, true), w.recent_failures::int2, \
                w.disabled_until::timestamptz, \
                COALESCE(s.allow_local_requests_from_web_hooks_and_services, false), \
                COALESCE(s.deny_all_requests_except_allowed, false) \
         FROM web_hooks w \
         LEFT JOIN LATERAL (SELECT allow_local_requests_from_web_hooks_and_services, \
                                   deny_all_requests_except_allowed \
                              FROM application_settings ORDER BY id DESC LIMIT 1) s ON true \
         WHERE w.id = $1::bigint";
    /// The hook row's (`$1`) auto-disabling state under its row lock.
    LOCK_HOOK_STATE = "SELECT recent_failures::int2, disabled_until::timestamptz FROM web_hooks \
         WHERE id = $1::bigint FOR UPDATE";
    /// Record the hook's (`$1`) new auto-disabling state.
    SET_HOOK_STATE = "UPDATE web_hooks SET recent_failures = $2::int2, disabled_until = $3::timestamptz \
         WHERE id = $1::bigint";
}
