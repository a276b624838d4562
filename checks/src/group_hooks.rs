//! The `group hooks` check: whether `GROUP_HOOKS` (EE's `group_webhooks` license,
//! docs/gitlab-differences.md, "System hooks") agrees with the group hooks the
//! database holds.

use tokio_postgres::Client;

use crate::{sql, Check};

/// Whether the removals send EE's group hooks (`GROUP_HOOKS`), and how many `GroupHook`
/// rows subscribe to the member, subgroup or project events they send. Such rows
/// while it is `off` mean an instance that may be licensed for them: advisory.
pub async fn check(c: &Client, group_hooks: bool) -> Check {
    let n: i64 = match c.query_one(sql::GROUP_HOOKS, &[]).await {
        Ok(r) => r.get(0),
        Err(e) => return Check::fail(
            "group hooks",
            format!(
                "GROUP_HOOKS={}; cannot read the group hooks: {e}",
                if group_hooks { "on" } else { "off" }
            ),
            "web_hooks must have member_events, subgroup_events and project_events as in GitLab 18",
        )
        .advisory(),
    };
    match (group_hooks, n) {
        (true, n) => Check::pass(
            "group hooks",
            format!("on (GROUP_HOOKS): Member, Subgroup and Project Hooks to {n} GroupHook row(s) with those events"),
        ),
        (false, 0) => Check::pass(
            "group hooks",
            "off (GROUP_HOOKS), and no GroupHook row has member, subgroup or project events",
        ),
        (false, n) => Check::fail(
            "group hooks",
            format!("off (GROUP_HOOKS), but {n} GroupHook row(s) have member, subgroup or project events"),
            "if the instance is licensed for group webhooks (Premium and up), set the stack's GroupHooks (GROUP_HOOKS) to on, or those hooks miss the removals",
        )
        .advisory(),
    }
}
