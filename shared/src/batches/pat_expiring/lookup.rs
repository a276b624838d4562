//! What a bot's notices need, read inside the bot's transaction (behaviour
//! §B28.6 steps 1, 4 and 5).
//!
//! Owns: a bot's resource, its details, subscribed hooks (behaviour §D20) and email
//! recipients (behaviour §D21), one bot at a time and set-based for a page of bots
//! ([`bot_contexts`]). Reads only.

use std::collections::HashMap;

use tokio_postgres::types::Type;
use tokio_postgres::GenericClient;

use super::hook_body::Resource;
use super::sql;
use crate::error::{Error, Result};
use crate::workers::deliver_notification::payload::ResourceType;

/// behaviour §B28.6 step 1: the first project membership whose project exists, else the first
/// access-granting group membership whose group exists.
pub(super) async fn find_resource<C: GenericClient>(
    c: &C,
    bot: i64,
) -> Result<Option<(ResourceType, i64)>> {
    if let Some(r) = c.query_opt(sql::BOT_PROJECT, &[&bot]).await? {
        return Ok(Some((ResourceType::Project, r.get(0))));
    }
    Ok(c.query_opt(sql::BOT_GROUP, &[&bot])
        .await?
        .map(|r| (ResourceType::Group, r.get(0))))
}

/// The resource's details, read inside the bot's transaction.
pub(super) async fn load_resource<C: GenericClient>(
    c: &C,
    kind: ResourceType,
    id: i64,
) -> Result<Resource> {
    let vanished =
        || Error::Invariant(format!("the bot's {} {id} no longer exists", kind.as_str()));
    match kind {
        ResourceType::Project => {
            let r = c
                .query_opt(sql::PROJECT_RESOURCE, &[&id])
                .await?
                .ok_or_else(vanished)?;
            Ok(Resource::Project {
                id: r.get(0),
                name: r.get(1),
                description: r.get(2),
                visibility_level: r.get(3),
                ci_config_path: r.get(4),
                namespace_name: r.get(5),
                full_path: r.get(6),
            })
        }
        ResourceType::Group => {
            let r = c
                .query_opt(sql::GROUP_RESOURCE, &[&id])
                .await?
                .ok_or_else(vanished)?;
            let mut traversal_ids: Vec<i64> = r.get(4);
            if traversal_ids.is_empty() {
                traversal_ids.push(id);
            }
            Ok(Resource::Group {
                id: r.get(0),
                name: r.get(1),
                path: r.get(2),
                full_path: r.get(3),
                traversal_ids,
            })
        }
    }
}

/// behaviour §B28.6 step 4: the subscribed hooks of the resource (behaviour §D20), by id.
pub(super) async fn subscribed_hooks<C: GenericClient>(
    c: &C,
    resource: &Resource,
) -> Result<Vec<i64>> {
    let rows = match resource {
        Resource::Project { id, .. } => c.query(sql::PROJECT_HOOKS, &[id]).await?,
        Resource::Group { traversal_ids, .. } => {
            c.query(sql::GROUP_HOOKS, &[traversal_ids]).await?
        }
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// behaviour §B28.6 step 5: for a project, users u ≠ bot with `project_access(u, p) >= 40`
/// (behaviour §2.2); for a group, its active direct owners (behaviour §D21). Both only
/// users who can receive notifications, by id.
pub async fn recipients<C: GenericClient>(
    c: &C,
    resource: &Resource,
    bot: i64,
) -> Result<Vec<i64>> {
    let rows = match resource {
        Resource::Project { id, .. } => c.query(sql::PROJECT_RECIPIENTS, &[id, &bot]).await?,
        Resource::Group { id, .. } => c.query(sql::GROUP_RECIPIENTS, &[id, &bot]).await?,
    };
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A bot's resource, its subscribed hooks and its email recipients.
pub type BotContext = (Resource, Vec<i64>, Vec<i64>);

/// `sql::BOT_CONTEXTS` for `bots`, in one statement: the bots that have a resource.
pub async fn bot_contexts<C: GenericClient>(
    c: &C,
    bots: &[i64],
) -> Result<HashMap<i64, BotContext>> {
    let rows = c
        .query_typed(sql::BOT_CONTEXTS, &[(&bots, Type::INT8_ARRAY)])
        .await?;
    let mut out = HashMap::new();
    for r in rows {
        let kind: Option<String> = r.get(1);
        let rid: Option<i64> = r.get(2);
        let (Some(kind), Some(rid)) = (kind, rid) else {
            continue;
        };
        let resource = if kind == "project" {
            // A project without its namespace: left out (the bot's claim then fails
            // and runs alone, where `load_resource` reports it).
            let Some(namespace_name) = r.get::<_, Option<String>>(7) else {
                continue;
            };
            Resource::Project {
                id: rid,
                name: r.get(3),
                description: r.get(4),
                visibility_level: r.get(5),
                ci_config_path: r.get(6),
                namespace_name,
                full_path: r.get(9),
            }
        } else {
            let (Some(name), Some(path)) =
                (r.get::<_, Option<String>>(3), r.get::<_, Option<String>>(8))
            else {
                continue;
            };
            let mut traversal_ids: Vec<i64> = r.get(10);
            if traversal_ids.is_empty() {
                traversal_ids.push(rid);
            }
            Resource::Group {
                id: rid,
                name,
                path,
                full_path: r.get(9),
                traversal_ids,
            }
        };
        out.insert(r.get(0), (resource, r.get(11), r.get(12)));
    }
    Ok(out)
}
