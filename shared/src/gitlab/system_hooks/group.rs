//! EE's group hooks of a removal, with `GROUP_HOOKS=on` (an instance licensed for
//! `group_webhooks`; docs/gitlab-differences.md, "System hooks").
//!
//! Owns: the three triggers a removal fires ([`Scope`]: `Member Hook` for a removed
//! group membership, `ee/app/models/ee/member.rb` `execute_hooks_for`; `Subgroup Hook`
//! for a destroyed subgroup, to its parent's hooks, `ee/app/models/ee/group.rb`
//! `execute_subgroup_hooks`; `Project Hook` for a destroyed group project,
//! `ee/app/services/ee/projects/destroy_service.rb`), their receivers (`GroupHook`
//! rows with the trigger's flag on the group and its ancestors, executable as
//! GitLab's auto-disabling says: [`receivers`]), the `subgroup_destroy` body
//! (`Gitlab::HookData::SubgroupBuilder`) and the claims
//! ([`Claim`]) that [`super::Prepared::claim`] turns into
//! `deliver-notification.webhook` messages. Its statements are in [`sql`].

use chrono::{DateTime, Utc};
use serde::Serialize;
use tokio_postgres::GenericClient;

use super::{Body, Event};
use crate::error::Result;

pub mod sql;

/// A group-hook trigger (`GroupHook`'s `TriggerableHooks` scope).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `member_hooks` (`member_events`).
    Member,
    /// `subgroup_hooks` (`subgroup_events`).
    Subgroup,
    /// `project_hooks` (`project_events`).
    Project,
}

impl Scope {
    /// GitLab's scope name, as the message carries it.
    pub fn trigger(self) -> &'static str {
        match self {
            Scope::Member => "member_hooks",
            Scope::Subgroup => "subgroup_hooks",
            Scope::Project => "project_hooks",
        }
    }

    /// The scope named `trigger`, if it is one of the three.
    pub fn parse(trigger: &str) -> Option<Scope> {
        [Scope::Member, Scope::Subgroup, Scope::Project]
            .into_iter()
            .find(|s| s.trigger() == trigger)
    }

    /// `X-Gitlab-Event` of the scope (`WebHookService#hook_to_event`).
    pub fn header(self) -> &'static str {
        match self {
            Scope::Member => "Member Hook",
            Scope::Subgroup => "Subgroup Hook",
            Scope::Project => "Project Hook",
        }
    }
}

/// One group-hook event of a removal: its receivers and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The trigger.
    pub scope: Scope,
    /// The body's `event_name`.
    pub event_name: &'static str,
    /// The table of the row whose removal it reports.
    pub table: &'static str,
    /// That row's id.
    pub id: i64,
    /// The JSON body, in the builder's key order.
    pub json: String,
    /// The `web_hooks` ids that receive it.
    pub hooks: Vec<i64>,
}

impl Claim {
    /// The event key: `group-hook:<trigger>:<id>` (its hooks' messages add
    /// `:hook:<hook_id>`), the same for every attempt of the same removal.
    pub fn key(&self) -> String {
        format!("group-hook:{}:{}", self.scope.trigger(), self.id)
    }
}

/// The executable `GroupHook` rows with `scope`'s flag on group `group`'s ancestors
/// and, with `with_self`, on the group itself, at `now`.
pub async fn receivers<C: GenericClient>(
    c: &C,
    scope: Scope,
    group: i64,
    with_self: bool,
    now: DateTime<Utc>,
) -> Result<Vec<i64>> {
    Ok(c.query(
        sql::RECEIVERS,
        &[&group, &scope.trigger(), &with_self, &now],
    )
    .await?
    .iter()
    .map(|r| r.get(0))
    .collect())
}

/// EE `GroupMember#post_destroy_member_hook`: each group membership body of `bodies`
/// (the system hook's) to the member hooks of its group (with `with_self`) and the
/// group's ancestors.
pub(super) async fn member_claims<C: GenericClient>(
    c: &C,
    bodies: &[Body],
    with_self: bool,
    now: DateTime<Utc>,
) -> Result<Vec<Claim>> {
    let mut out = Vec::new();
    for b in bodies
        .iter()
        .filter(|b| b.event == Event::UserRemoveFromGroup)
    {
        out.push(Claim {
            scope: Scope::Member,
            event_name: Event::UserRemoveFromGroup.name(),
            table: Event::UserRemoveFromGroup.table(),
            id: b.id,
            json: b.json.clone(),
            hooks: receivers(c, Scope::Member, b.source, with_self, now).await?,
        });
    }
    Ok(out)
}

/// EE `Group#execute_subgroup_hooks(:destroy)`: subgroup `g`'s destroy to its parent's
/// hooks and theirs (never its own); none for a top-level group.
pub(super) async fn subgroup_claim<C: GenericClient>(
    c: &C,
    g: i64,
    now: DateTime<Utc>,
) -> Result<Option<Claim>> {
    let Some(json) = subgroup_body(c, g).await? else {
        return Ok(None);
    };
    Ok(Some(Claim {
        scope: Scope::Subgroup,
        event_name: "subgroup_destroy",
        table: Event::GroupDestroy.table(),
        id: g,
        json,
        hooks: receivers(c, Scope::Subgroup, g, false, now).await?,
    }))
}

/// EE `Projects::DestroyService#execute_hooks`: the destroyed project of system body
/// `b` to its group's project hooks and its ancestors', with body `json`.
pub(super) async fn project_claim<C: GenericClient>(
    c: &C,
    b: &Body,
    json: String,
    now: DateTime<Utc>,
) -> Result<Claim> {
    Ok(Claim {
        scope: Scope::Project,
        event_name: Event::ProjectDestroy.name(),
        table: Event::ProjectDestroy.table(),
        id: b.id,
        json,
        hooks: receivers(c, Scope::Project, b.source, true, now).await?,
    })
}

/// `SubgroupBuilder#build(:destroy)`: `GroupBuilder`'s fields, then the parent's.
#[derive(Serialize)]
struct SubgroupBody {
    created_at: Option<String>,
    updated_at: Option<String>,
    event_name: &'static str,
    name: Option<String>,
    path: Option<String>,
    full_path: Option<String>,
    group_id: i64,
    parent_group_id: i64,
    parent_name: Option<String>,
    parent_path: Option<String>,
    parent_full_path: Option<String>,
}

/// Subgroup `g`'s `subgroup_destroy` body, `None` for a top-level group (GitLab
/// sends no subgroup hook for it).
async fn subgroup_body<C: GenericClient>(c: &C, g: i64) -> Result<Option<String>> {
    let Some(r) = c.query_opt(sql::SUBGROUP_BODY, &[&g]).await? else {
        return Ok(None);
    };
    let b = SubgroupBody {
        created_at: super::xmlschema(r.get(0)),
        updated_at: super::xmlschema(r.get(1)),
        event_name: "subgroup_destroy",
        name: r.get(2),
        path: r.get(3),
        full_path: r.get(4),
        group_id: r.get(5),
        parent_group_id: r.get(6),
        parent_name: r.get(7),
        parent_path: r.get(8),
        parent_full_path: r.get(9),
    };
    Ok(Some(super::json(&b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_round_trip_with_gitlabs_names_and_headers() {
        for s in [Scope::Member, Scope::Subgroup, Scope::Project] {
            assert_eq!(Scope::parse(s.trigger()), Some(s));
        }
        assert_eq!(Scope::parse("push_hooks"), None);
        assert_eq!(Scope::Member.header(), "Member Hook");
        assert_eq!(Scope::Project.trigger(), "project_hooks");
    }
}
