//! The rows a plan's membership removals write beside them (docs/gitlab-differences.md
//! D3, `shared::gitlab::side_effects`): read inside the slice's transaction (after)
//! and on a session that sees the database without the slice (before), for the users
//! of the removed memberships (EE's protected-branch, protected-environment and SAML
//! identity rows among them, and the `user_destroyed` events of removed bots). Recorded in the plan (`side_rows` of `hk run --dry-run
//! --json` and of the shadow plan; the text output counts them in its per-table
//! changes); `hk parity` does not judge them (their ids come from sequences a real run
//! draws again).

use std::collections::BTreeMap;

use serde_json::{json, Value};
use shared::error::Result;
use shared::runtime::Decision;
use tokio_postgres::GenericClient;

/// Each row of the side-effect tables the slice wrote, changed or removed for the
/// users of its removed memberships, one object each with its `table`.
pub async fn written<C: GenericClient, D: GenericClient>(
    tx: &C,
    other: &D,
    decisions: &[Decision],
) -> Result<Vec<Value>> {
    let ids: Vec<i64> = decisions
        .iter()
        .filter(|d| d.table == "members" && d.decision == "removed")
        .map(|d| d.id)
        .collect();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let users: Vec<i64> = other
        .query(
            "SELECT DISTINCT user_id::bigint FROM public.members
              WHERE id = ANY($1::bigint[]) AND user_id IS NOT NULL ORDER BY 1",
            &[&ids],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if users.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    // Each query gives (key, row as JSON) per row.
    const QUERIES: &[(&str, &str)] = &[
        (
            "events",
            "SELECT id::bigint, jsonb_build_object('id', id, 'project_id', project_id,
                      'author_id', author_id, 'action', action)
               FROM public.events WHERE author_id = ANY($1::bigint[])",
        ),
        (
            "user_highest_roles",
            "SELECT user_id::bigint, jsonb_build_object('user_id', user_id,
                      'highest_access_level', highest_access_level)
               FROM public.user_highest_roles WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "todos",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'project_id', project_id, 'target_type', target_type, 'target_id', target_id)
               FROM public.todos WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "users",
            "SELECT id::bigint, jsonb_build_object('id', id,
                      'require_two_factor_authentication_from_group',
                      require_two_factor_authentication_from_group,
                      'two_factor_grace_period', two_factor_grace_period)
               FROM public.users WHERE id = ANY($1::bigint[])",
        ),
        (
            "project_audit_events",
            "SELECT id::bigint, jsonb_build_object('id', id, 'project_id', project_id,
                      'author_id', author_id, 'target_id', target_id, 'event_name', event_name)
               FROM public.project_audit_events
              WHERE target_id = ANY($1::bigint[])
                AND event_name IN ('member_destroyed', 'user_destroyed')",
        ),
        (
            "group_audit_events",
            "SELECT id::bigint, jsonb_build_object('id', id, 'group_id', group_id,
                      'author_id', author_id, 'target_id', target_id, 'event_name', event_name)
               FROM public.group_audit_events
              WHERE target_id = ANY($1::bigint[])
                AND event_name IN ('member_destroyed', 'user_destroyed')",
        ),
        (
            "user_audit_events",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'author_id', author_id, 'target_id', target_id, 'event_name', event_name)
               FROM public.user_audit_events
              WHERE target_id = ANY($1::bigint[]) AND event_name = 'user_destroyed'",
        ),
        // EE's rows of the removed users (shared::gitlab::side_effects::ee).
        (
            "protected_branch_merge_access_levels",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'protected_branch_id', protected_branch_id)
               FROM public.protected_branch_merge_access_levels WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "protected_branch_push_access_levels",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'protected_branch_id', protected_branch_id)
               FROM public.protected_branch_push_access_levels WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "protected_environment_deploy_access_levels",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'protected_environment_id', protected_environment_id)
               FROM public.protected_environment_deploy_access_levels
              WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "protected_environment_approval_rules",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'protected_environment_id', protected_environment_id)
               FROM public.protected_environment_approval_rules WHERE user_id = ANY($1::bigint[])",
        ),
        (
            "identities",
            "SELECT id::bigint, jsonb_build_object('id', id, 'user_id', user_id,
                      'saml_provider_id', saml_provider_id)
               FROM public.identities WHERE user_id = ANY($1::bigint[])",
        ),
    ];
    for (table, q) in QUERIES {
        let read = |rows: Vec<tokio_postgres::Row>| -> BTreeMap<i64, Value> {
            rows.iter().map(|r| (r.get(0), r.get(1))).collect()
        };
        let before = read(other.query(*q, &[&users]).await?);
        let after = read(tx.query(*q, &[&users]).await?);
        for (k, row) in &after {
            match before.get(k) {
                None => out.push(json!({"table": table, "change": "inserted", "row": row})),
                Some(b) if b != row => {
                    out.push(json!({"table": table, "change": "updated", "before": b, "row": row}))
                }
                Some(_) => {}
            }
        }
        for (k, row) in &before {
            if !after.contains_key(k) {
                out.push(json!({"table": table, "change": "deleted", "row": row}));
            }
        }
    }
    Ok(out)
}
