//! The statements of B28 `pat-expiring` (behaviour §B28.5, §B28.6).
//!
//! Owns: every SQL text the batch runs. The keyset pages, the claims and their
//! set-based forms differ per interval only in the interval's scope and SET list, so
//! each has one constant per interval (`…_SEVEN_DAYS`, `…_THIRTY_DAYS`,
//! `…_SIXTY_DAYS`), built with `concat!` from the small macros below and gathered per
//! interval in an [`IntervalStatements`]. Parameters of the per-interval statements:
//! `$1` = `:min`, `$2` = the interval's last date, `$3` = `:now` (claims) or the
//! excluded subjects (pages), `$4` = the subject(s) (claims) or the page size (pages).

/// `scope(iv, :min)` over alias `t`, with `$1` = `:min` and `$2` = the last date.
macro_rules! scope {
    ($iv:ident) => {
        concat!(
            "t.revoked = false AND t.",
            stringify!($iv),
            "_notification_sent_at IS NULL AND t.expire_notification_delivered = false \
             AND t.impersonation = false AND t.expires_at BETWEEN $1::date AND $2::date"
        )
    };
}

/// The claim's SET list, with `$3` = `:now`. Seven days also sets the legacy flag.
macro_rules! set_list {
    (seven_days) => {
        "seven_days_notification_sent_at = $3::timestamptz, expire_notification_delivered = true"
    };
    ($iv:ident) => {
        concat!(stringify!($iv), "_notification_sent_at = $3::timestamptz")
    };
}

/// A keyset page of 100 tokens in scope of `user_type`, by `(expires_at, id)`:
/// `(user_id, expires_at, id)`; `$3` the excluded users, `$4` the page size.
macro_rules! page {
    ($iv:ident, $user_type:literal) => {
        concat!(
            "SELECT t.user_id::bigint, t.expires_at, t.id::bigint \
             FROM personal_access_tokens t JOIN users u ON u.id = t.user_id \
             WHERE ",
            scope!($iv),
            " AND u.user_type = ",
            $user_type,
            " AND t.user_id <> ALL($3::bigint[]) \
             ORDER BY t.expires_at ASC, t.id ASC LIMIT $4"
        )
    };
}

/// The bot page: the same rows as `page!(iv, "6")`, read from the bots and each bot's
/// first `$4` tokens, so a page costs what the bots hold, not a scan of the interval.
macro_rules! bot_page {
    ($iv:ident) => {
        concat!(
            "SELECT t.user_id::bigint, t.expires_at, t.id::bigint \
             FROM (SELECT u.id FROM users u WHERE u.user_type = 6 AND u.id <> ALL($3::bigint[]) \
                   OFFSET 0) b \
             CROSS JOIN LATERAL ( \
               SELECT t.user_id, t.expires_at, t.id FROM personal_access_tokens t \
               WHERE t.user_id = b.id AND ",
            scope!($iv),
            " ORDER BY t.expires_at ASC, t.id ASC LIMIT $4) t \
             ORDER BY t.expires_at ASC, t.id ASC LIMIT $4"
        )
    };
}

/// behaviour §B28.5 step 2's claim of one user's tokens (`$4`): `(id, name, expires_at)`.
macro_rules! claim_user {
    ($iv:ident) => {
        concat!(
            "UPDATE personal_access_tokens t SET ",
            set_list!($iv),
            " WHERE t.user_id = $4::bigint AND ",
            scope!($iv),
            " RETURNING t.id::bigint, t.name, t.expires_at"
        )
    };
}

/// behaviour §B28.5 step 2 for a page of users (`$4`), in one statement: the claim, then the claimed
/// users' rows `FOR SHARE` (by id): `(user_id, id, name, expires_at, can_receive)`.
macro_rules! claim_users {
    ($iv:ident) => {
        concat!(
            "WITH claimed AS ( \
               UPDATE personal_access_tokens t SET ",
            set_list!($iv),
            " WHERE t.user_id = ANY($4::bigint[]) AND ",
            scope!($iv),
            " RETURNING t.user_id::bigint AS user_id, t.id::bigint AS id, t.name, \
                         t.expires_at), \
             readers AS ( \
               SELECT u.id::bigint AS id, ",
            crate::gitlab::notifications::can_receive_notifications!(),
            " AS can_receive \
               FROM users u WHERE u.id IN (SELECT user_id FROM claimed) \
               ORDER BY u.id FOR SHARE) \
             SELECT c.user_id, c.id, c.name, c.expires_at, COALESCE(r.can_receive, false) \
             FROM claimed c LEFT JOIN readers r ON r.id = c.user_id"
        )
    };
}

/// behaviour §B28.6 step 2's claim of one bot's tokens (`$4`): the columns of a `ClaimedToken`.
macro_rules! claim_bot {
    ($iv:ident) => {
        concat!(
            "UPDATE personal_access_tokens t SET ",
            set_list!($iv),
            " WHERE t.user_id = $4::bigint AND ",
            scope!($iv),
            " RETURNING t.id::bigint, t.name, LEAST(GREATEST(t.created_at, '0001-01-01'), '9999-12-31')::timestamp, t.expires_at, \
                       (CASE WHEN isfinite(t.last_used_at) OR t.last_used_at IS NULL THEN t.last_used_at \
                       WHEN t.last_used_at < 'epoch' THEN '0001-01-01' ELSE '9999-12-31' END)::timestamptz, t.user_id::bigint"
        )
    };
}

/// behaviour §B28.6 steps 1–2 for a page of bots (`$4`), in one statement: the bots that have a
/// resource, and the claim of their tokens: `(bot, id, name, created_at, expires_at,
/// last_used_at)`, the token columns NULL for a bot with a resource but no token.
macro_rules! claim_bots {
    ($iv:ident) => {
        concat!(
            "WITH b AS (SELECT DISTINCT unnest($4::bigint[]) AS bot), \
             res AS ( \
               SELECT b.bot FROM b \
               WHERE EXISTS (SELECT 1 FROM members m JOIN projects p ON p.id = m.source_id \
                             WHERE m.user_id = b.bot AND m.source_type = 'Project' \
                               AND m.requested_at IS NULL) \
                  OR EXISTS (SELECT 1 FROM members m \
                               JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group' \
                             WHERE m.user_id = b.bot AND m.source_type = 'Namespace' \
                               AND m.requested_at IS NULL AND m.access_level >= 10)), \
             claimed AS ( \
               UPDATE personal_access_tokens t SET ",
            set_list!($iv),
            " WHERE t.user_id IN (SELECT bot FROM res) AND ",
            scope!($iv),
            " RETURNING t.id::bigint AS id, t.name, LEAST(GREATEST(t.created_at, '0001-01-01'), '9999-12-31')::timestamp AS created_at, \
                         t.expires_at, (CASE WHEN isfinite(t.last_used_at) OR t.last_used_at IS NULL THEN t.last_used_at \
                       WHEN t.last_used_at < 'epoch' THEN '0001-01-01' ELSE '9999-12-31' END)::timestamptz AS last_used_at, \
                         t.user_id::bigint AS user_id) \
             SELECT res.bot, c.id, c.name, c.created_at, c.expires_at, c.last_used_at \
             FROM res LEFT JOIN claimed c ON c.user_id = res.bot"
        )
    };
}

crate::statements::statements! {
    // Each of the macros above, once per interval.
    HUMAN_PAGE_SEVEN_DAYS = page!(seven_days, "0");
    HUMAN_PAGE_THIRTY_DAYS = page!(thirty_days, "0");
    HUMAN_PAGE_SIXTY_DAYS = page!(sixty_days, "0");
    BOT_PAGE_SEVEN_DAYS = bot_page!(seven_days);
    BOT_PAGE_THIRTY_DAYS = bot_page!(thirty_days);
    BOT_PAGE_SIXTY_DAYS = bot_page!(sixty_days);
    CLAIM_USER_SEVEN_DAYS = claim_user!(seven_days);
    CLAIM_USER_THIRTY_DAYS = claim_user!(thirty_days);
    CLAIM_USER_SIXTY_DAYS = claim_user!(sixty_days);
    CLAIM_USERS_SEVEN_DAYS = claim_users!(seven_days);
    CLAIM_USERS_THIRTY_DAYS = claim_users!(thirty_days);
    CLAIM_USERS_SIXTY_DAYS = claim_users!(sixty_days);
    CLAIM_BOT_SEVEN_DAYS = claim_bot!(seven_days);
    CLAIM_BOT_THIRTY_DAYS = claim_bot!(thirty_days);
    CLAIM_BOT_SIXTY_DAYS = claim_bot!(sixty_days);
    CLAIM_BOTS_SEVEN_DAYS = claim_bots!(seven_days);
    CLAIM_BOTS_THIRTY_DAYS = claim_bots!(thirty_days);
    CLAIM_BOTS_SIXTY_DAYS = claim_bots!(sixty_days);

    /// Whether a claimed user (`$1`) can receive notifications, its row `FOR SHARE`.
    USER_CAN_RECEIVE = concat!(
        "SELECT ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " FROM users u WHERE u.id = $1::bigint FOR SHARE"
    );

    /// behaviour §B28.6 step 1: the bot's (`$1`) first project membership whose project exists.
    BOT_PROJECT = "SELECT m.source_id::bigint FROM members m JOIN projects p ON p.id = m.source_id \
         WHERE m.user_id = $1::bigint AND m.source_type = 'Project' AND m.requested_at IS NULL \
         ORDER BY m.id LIMIT 1";
    /// behaviour §B28.6 step 1: else its first access-granting group membership whose group exists.
    BOT_GROUP = "SELECT m.source_id::bigint FROM members m \
           JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group' \
         WHERE m.user_id = $1::bigint AND m.source_type = 'Namespace' AND m.requested_at IS NULL \
           AND m.access_level >= 10 \
         ORDER BY m.id LIMIT 1";

    /// A project's (`$1`) details for the hook body and the emails.
    PROJECT_RESOURCE = "SELECT p.id::bigint, COALESCE(p.name, p.path, ''), p.description, \
                p.visibility_level::int4, p.ci_config_path, n.name, \
                COALESCE(r.path, p.path, '') \
         FROM projects p JOIN namespaces n ON n.id = p.namespace_id \
         LEFT JOIN routes r ON r.source_type = 'Project' AND r.source_id = p.id \
         WHERE p.id = $1::bigint";
    /// A group's (`$1`) details for the hook body and the emails.
    GROUP_RESOURCE = "SELECT n.id::bigint, n.name, n.path, COALESCE(r.path, n.path), \
                n.traversal_ids::bigint[] \
         FROM namespaces n \
         LEFT JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = n.id \
         WHERE n.id = $1::bigint AND n.type = 'Group'";

    /// behaviour §B28.6 step 4 (behaviour §D20): a project's (`$1`) subscribed hooks, by id.
    PROJECT_HOOKS = "SELECT id::bigint FROM web_hooks \
         WHERE type = 'ProjectHook' AND project_id = $1::bigint \
           AND resource_access_token_events = true \
         ORDER BY id";
    /// behaviour §B28.6 step 4 (behaviour §D20): the subscribed hooks of a group and its ancestors (`$1`, the
    /// traversal ids), by id.
    GROUP_HOOKS = "SELECT id::bigint FROM web_hooks \
         WHERE type = 'GroupHook' AND group_id = ANY($1::bigint[]) \
           AND resource_access_token_events = true \
         ORDER BY id";

    /// behaviour §B28.6 step 5: the users ≠ the bot (`$2`) with `project_access(u, p) >= 40` on the
    /// project `$1` (behaviour §2.2) who can receive notifications, by id.
    PROJECT_RECIPIENTS = concat!(
        "WITH p AS ( \
           SELECT p.id, n.type AS ntype, n.traversal_ids::bigint[] AS t, n.owner_id \
           FROM projects p JOIN namespaces n ON n.id = p.namespace_id \
           WHERE p.id = $1::bigint), \
         granted AS ( \
           SELECT m.user_id FROM members m, p \
           WHERE m.source_type = 'Project' AND m.source_id = p.id \
             AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 40 \
           UNION \
           SELECT m.user_id FROM members m, p \
           WHERE p.ntype = 'Group' AND m.source_type = 'Namespace' \
             AND m.source_id = ANY(p.t) \
             AND m.state = 0 AND m.requested_at IS NULL AND m.access_level >= 40 \
           UNION \
           SELECT p.owner_id FROM p WHERE p.ntype = 'User') \
         SELECT u.id::bigint FROM users u JOIN granted g ON g.user_id = u.id \
         WHERE u.id <> $2::bigint AND ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " ORDER BY u.id"
    );
    /// behaviour §B28.6 step 5 (behaviour §D21): the group's (`$1`) active direct owners ≠ the bot (`$2`) who
    /// can receive notifications, by id.
    GROUP_RECIPIENTS = concat!(
        "SELECT DISTINCT u.id::bigint FROM members m JOIN users u ON u.id = m.user_id \
         WHERE m.source_type = 'Namespace' AND m.source_id = $1::bigint \
           AND m.state = 0 AND m.requested_at IS NULL AND m.access_level = 50 \
           AND u.id <> $2::bigint AND ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " ORDER BY 1"
    );

    /// The set-based form of the resource, hook and recipient reads above for bots
    /// (`$1`), one row per bot: `(bot, kind, rid, name, description, visibility_level,
    /// ci_config_path, namespace name, group path, full path, traversal ids, hooks,
    /// recipients)`; `kind` is NULL for a bot without a resource.
    BOT_CONTEXTS = concat!(
        "WITH b AS (SELECT DISTINCT unnest($1::bigint[]) AS bot), \
        res AS ( \
          SELECT b.bot, coalesce(pr.kind, gr.kind) AS kind, coalesce(pr.id, gr.id) AS rid \
          FROM b \
          LEFT JOIN LATERAL (SELECT 'project'::text AS kind, m.source_id::bigint AS id \
                             FROM members m JOIN projects p ON p.id = m.source_id \
                             WHERE m.user_id = b.bot AND m.source_type = 'Project' AND m.requested_at IS NULL \
                             ORDER BY m.id LIMIT 1) pr ON true \
          LEFT JOIN LATERAL (SELECT 'group'::text AS kind, m.source_id::bigint AS id \
                             FROM members m JOIN namespaces n ON n.id = m.source_id AND n.type = 'Group' \
                             WHERE m.user_id = b.bot AND m.source_type = 'Namespace' \
                               AND m.requested_at IS NULL AND m.access_level >= 10 \
                             ORDER BY m.id LIMIT 1) gr ON true) \
        SELECT res.bot, res.kind, res.rid, \
               CASE WHEN res.kind = 'project' THEN COALESCE(p.name, p.path, '') ELSE g.name END, \
               p.description, p.visibility_level::int4, p.ci_config_path, pn.name, g.path, \
               CASE WHEN res.kind = 'project' THEN COALESCE(pr.path, p.path, '') ELSE COALESCE(gr.path, g.path) END, \
               COALESCE(g.traversal_ids::bigint[], '{}'), \
               ARRAY(SELECT h.id::bigint FROM web_hooks h \
                     WHERE res.kind = 'project' AND h.type = 'ProjectHook' AND h.project_id = res.rid \
                       AND h.resource_access_token_events = true \
                     UNION ALL \
                     SELECT h.id::bigint FROM web_hooks h \
                     WHERE res.kind = 'group' AND h.type = 'GroupHook' \
                       AND h.group_id = ANY(COALESCE(NULLIF(g.traversal_ids::bigint[], '{}'), ARRAY[g.id::bigint])) \
                       AND h.resource_access_token_events = true \
                     ORDER BY 1), \
               CASE WHEN res.kind = 'project' THEN ARRAY( \
                 SELECT DISTINCT u.id::bigint FROM ( \
                   SELECT m.user_id FROM members m WHERE m.source_type = 'Project' \
                     AND m.source_id = res.rid AND m.state = 0 AND m.requested_at IS NULL \
                     AND m.access_level >= 40 \
                   UNION ALL \
                   SELECT m.user_id FROM members m WHERE pn.type = 'Group' AND m.source_type = 'Namespace' \
                     AND m.source_id = ANY(pn.traversal_ids::bigint[]) AND m.state = 0 \
                     AND m.requested_at IS NULL AND m.access_level >= 40 \
                   UNION ALL \
                   SELECT pn.owner_id WHERE pn.type = 'User') granted \
                 JOIN users u ON u.id = granted.user_id \
                 WHERE u.id <> res.bot AND ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " \
                 ORDER BY 1) \
               ELSE ARRAY( \
                 SELECT DISTINCT u.id::bigint FROM members m JOIN users u ON u.id = m.user_id \
                 WHERE m.source_type = 'Namespace' AND m.source_id = res.rid AND m.state = 0 \
                   AND m.requested_at IS NULL AND m.access_level = 50 AND u.id <> res.bot \
                   AND ",
        crate::gitlab::notifications::can_receive_notifications!(),
        " \
                 ORDER BY 1) END \
        FROM res \
        LEFT JOIN projects p ON res.kind = 'project' AND p.id = res.rid \
        LEFT JOIN namespaces pn ON pn.id = p.namespace_id \
        LEFT JOIN routes pr ON pr.source_type = 'Project' AND pr.source_id = p.id \
        LEFT JOIN namespaces g ON res.kind = 'group' AND g.id = res.rid AND g.type = 'Group' \
        LEFT JOIN routes gr ON gr.source_type = 'Namespace' AND gr.source_id = g.id"
    );
}

/// The statements of one interval.
#[derive(Debug, Clone, Copy)]
pub struct IntervalStatements {
    /// The human keyset page.
    pub human_page: &'static str,
    /// The bot keyset page.
    pub bot_page: &'static str,
    /// One user's claim.
    pub claim_user: &'static str,
    /// A page of users' claim.
    pub claim_users: &'static str,
    /// One bot's claim.
    pub claim_bot: &'static str,
    /// A page of bots' claim.
    pub claim_bots: &'static str,
}

/// The 7-day interval's statements.
pub const SEVEN_DAYS: IntervalStatements = IntervalStatements {
    human_page: HUMAN_PAGE_SEVEN_DAYS,
    bot_page: BOT_PAGE_SEVEN_DAYS,
    claim_user: CLAIM_USER_SEVEN_DAYS,
    claim_users: CLAIM_USERS_SEVEN_DAYS,
    claim_bot: CLAIM_BOT_SEVEN_DAYS,
    claim_bots: CLAIM_BOTS_SEVEN_DAYS,
};

/// The 30-day interval's statements.
pub const THIRTY_DAYS: IntervalStatements = IntervalStatements {
    human_page: HUMAN_PAGE_THIRTY_DAYS,
    bot_page: BOT_PAGE_THIRTY_DAYS,
    claim_user: CLAIM_USER_THIRTY_DAYS,
    claim_users: CLAIM_USERS_THIRTY_DAYS,
    claim_bot: CLAIM_BOT_THIRTY_DAYS,
    claim_bots: CLAIM_BOTS_THIRTY_DAYS,
};

/// The 60-day interval's statements.
pub const SIXTY_DAYS: IntervalStatements = IntervalStatements {
    human_page: HUMAN_PAGE_SIXTY_DAYS,
    bot_page: BOT_PAGE_SIXTY_DAYS,
    claim_user: CLAIM_USER_SIXTY_DAYS,
    claim_users: CLAIM_USERS_SIXTY_DAYS,
    claim_bot: CLAIM_BOT_SIXTY_DAYS,
    claim_bots: CLAIM_BOTS_SIXTY_DAYS,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_interval_claims_its_own_column_and_seven_days_the_legacy_flag() {
        for (s, col) in [
            (SEVEN_DAYS, "seven_days_notification_sent_at"),
            (THIRTY_DAYS, "thirty_days_notification_sent_at"),
            (SIXTY_DAYS, "sixty_days_notification_sent_at"),
        ] {
            for text in [
                s.human_page,
                s.bot_page,
                s.claim_user,
                s.claim_users,
                s.claim_bot,
                s.claim_bots,
            ] {
                assert!(text.contains(&format!("t.{col} IS NULL")), "{text}");
                assert!(text.contains("t.expire_notification_delivered = false"));
                assert!(!text.contains("now()"));
            }
            for text in [s.claim_user, s.claim_users, s.claim_bot, s.claim_bots] {
                assert!(
                    text.contains(&format!("SET {col} = $3::timestamptz")),
                    "{text}"
                );
                assert_eq!(
                    text.contains("expire_notification_delivered = true"),
                    col.starts_with("seven"),
                    "{text}"
                );
            }
        }
        assert!(HUMAN_PAGE_SEVEN_DAYS.contains("u.user_type = 0 AND"));
        assert!(BOT_PAGE_SEVEN_DAYS.contains("u.user_type = 6 AND"));
        assert_eq!(ALL.len(), 28);
    }
}
