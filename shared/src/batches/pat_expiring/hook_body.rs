//! The web-hook body of B28's resource-access-token event (behaviour §B28.10.3,
//! behaviour §D23).
//!
//! Owns: [`ClaimedToken`] (the columns of a claimed bot token that the body reports),
//! [`Resource`] (a bot's project or group with what its hook body and emails need)
//! and [`hook_body`], GitLab's `expiring_access_token` payload, built at claim time and
//! carried unchanged to `deliver-notification`. Pure: no SQL, no I/O.

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::{json, Value};

use crate::notify::Instance;
use crate::workers::deliver_notification::payload::ResourceType;

/// A claimed token of a bot (the columns the hook body reports).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedToken {
    /// `id`.
    pub id: i64,
    /// `name`.
    pub name: String,
    /// `created_at` (UTC).
    pub created_at: NaiveDateTime,
    /// `expires_at`.
    pub expires_at: NaiveDate,
    /// `last_used_at`.
    pub last_used_at: Option<DateTime<Utc>>,
    /// `user_id` (the bot).
    pub user_id: i64,
}

impl ClaimedToken {
    /// This token, with a warning when a time of it was `±infinity`, read by the claim
    /// as the first or last day of the calendar (behaviour §D29).
    pub(super) fn checked(self) -> ClaimedToken {
        use chrono::Datelike;
        let clamped = |y: i32| y == 1 || y == 9999;
        if clamped(self.created_at.year()) || self.last_used_at.is_some_and(|t| clamped(t.year())) {
            tracing::warn!(
                token_id = self.id,
                user_id = self.user_id,
                "Token time outside the calendar: shown as its first or last day"
            );
        }
        self
    }
}

/// A bot's resource with what its hook body and emails need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// A project.
    Project {
        /// `projects.id`.
        id: i64,
        /// `projects.name`.
        name: String,
        /// `projects.description`.
        description: Option<String>,
        /// `projects.visibility_level`.
        visibility_level: i32,
        /// `projects.ci_config_path`.
        ci_config_path: Option<String>,
        /// The name of the project's namespace.
        namespace_name: String,
        /// The project's full path.
        full_path: String,
    },
    /// A group.
    Group {
        /// `namespaces.id`.
        id: i64,
        /// `namespaces.name`.
        name: String,
        /// `namespaces.path`.
        path: String,
        /// The group's full path.
        full_path: String,
        /// `traversal_ids` (for the hooks of the group and its ancestors).
        traversal_ids: Vec<i64>,
    },
}

impl Resource {
    pub(super) fn kind(&self) -> ResourceType {
        match self {
            Resource::Project { .. } => ResourceType::Project,
            Resource::Group { .. } => ResourceType::Group,
        }
    }
    pub(super) fn id(&self) -> i64 {
        match self {
            Resource::Project { id, .. } | Resource::Group { id, .. } => *id,
        }
    }
    pub(super) fn name(&self) -> &str {
        match self {
            Resource::Project { name, .. } | Resource::Group { name, .. } => name,
        }
    }
    pub(super) fn full_path(&self) -> &str {
        match self {
            Resource::Project { full_path, .. } | Resource::Group { full_path, .. } => full_path,
        }
    }
}

fn hook_time(t: NaiveDateTime) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
}

/// GitLab's resource-access-token hook body for `token` of `resource` (behaviour §B28.10.3,
/// behaviour §D23: `avatar_url` and `default_branch` are null). Pure.
pub fn hook_body(resource: &Resource, token: &ClaimedToken, instance: &Instance) -> Value {
    let attrs = json!({
        "user_id": token.user_id,
        "created_at": hook_time(token.created_at),
        "id": token.id,
        "name": token.name,
        "expires_at": token.expires_at.to_string(),
        "last_used_at": token.last_used_at.map(|t| hook_time(t.naive_utc())),
    });
    match resource {
        Resource::Project {
            id,
            name,
            description,
            visibility_level,
            ci_config_path,
            namespace_name,
            full_path,
        } => {
            let web_url = format!("{}/{full_path}", instance.base_url);
            let http_url = format!("{web_url}.git");
            let ssh_url = format!("{}{full_path}.git", instance.ssh_url_prefix);
            json!({
                "object_kind": "access_token",
                "project": {
                    "id": id, "name": name, "description": description,
                    "web_url": web_url, "avatar_url": null,
                    "git_ssh_url": ssh_url, "git_http_url": http_url,
                    "namespace": namespace_name, "visibility_level": visibility_level,
                    "path_with_namespace": full_path, "default_branch": null,
                    "ci_config_path": ci_config_path, "homepage": web_url,
                    "url": ssh_url, "ssh_url": ssh_url, "http_url": http_url,
                },
                "object_attributes": attrs,
                "event_name": "expiring_access_token",
            })
        }
        // GitLab's data builder (lib/gitlab/data_builder/resource_access_token.rb and
        // its spec) builds only `group`; payloads captured in gitlab-org/gitlab
        // MR 141907 / issue 465421 also show a top-level `group_id`, whose source was
        // not found. Not added (the spec's format) [CONFIRM].
        Resource::Group {
            id,
            name,
            path,
            full_path,
            ..
        } => json!({
            "object_kind": "access_token",
            "group": {
                "group_name": name, "group_path": path, "group_id": id, "full_path": full_path,
            },
            "object_attributes": attrs,
            "event_name": "expiring_access_token",
        }),
    }
}
