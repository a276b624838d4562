//! GitLab's system hooks of a removal (docs/gitlab-differences.md, "System hooks").
//!
//! Owns: the five events a removal makes GitLab send ([`Event`]), their bodies in the
//! key order of GitLab's builders (`Gitlab::HookData::ProjectMemberBuilder`,
//! `GroupMemberBuilder`, `GroupBuilder`, `ProjectBuilder` with the deprecated owner,
//! `UserBuilder`), read **before** the rows go, in the removal's transaction
//! ([`prepare`]), and their claim ([`Prepared::claim`]): one [`HookDelivery`] intent per
//! executable `SystemHook` row, with the body fixed, into the caller's intents (its job
//! sends them as `deliver-notification` web-hook messages before the removal commits);
//! delivered after (the delivery waits for the removal's row lock and sends nothing if
//! the row, its [`SystemHookSubject`], is still there: [`still_present`]). The plan records each claim as a
//! `system_hook` decision on the hook's row. With `GROUP_HOOKS=on`, the same removal
//! claims EE's group hooks too ([`group`]: `Member Hook`, `Subgroup Hook`, `Project
//! Hook`, each a `group_hook` decision), and the group-member bodies carry EE's
//! `group_plan`. Its statements are in [`sql`].

use chrono::{NaiveDate, NaiveDateTime};
use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::gitlab::{HookDelivery, Intent, SystemHookSubject};
use crate::runtime::Invocation;

pub mod group;
pub mod sql;

use group::Claim;

/// A system-hook event of a removal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A project membership removed.
    UserRemoveFromTeam,
    /// A group membership removed.
    UserRemoveFromGroup,
    /// A group or subgroup destroyed.
    GroupDestroy,
    /// A project destroyed.
    ProjectDestroy,
    /// A user deleted.
    UserDestroy,
}

impl Event {
    /// GitLab's `event_name`.
    pub fn name(self) -> &'static str {
        match self {
            Event::UserRemoveFromTeam => "user_remove_from_team",
            Event::UserRemoveFromGroup => "user_remove_from_group",
            Event::GroupDestroy => "group_destroy",
            Event::ProjectDestroy => "project_destroy",
            Event::UserDestroy => "user_destroy",
        }
    }

    /// The table of the row whose removal it reports.
    pub fn table(self) -> &'static str {
        match self {
            Event::UserRemoveFromTeam | Event::UserRemoveFromGroup => "members",
            Event::GroupDestroy => "namespaces",
            Event::ProjectDestroy => "projects",
            Event::UserDestroy => "users",
        }
    }
}

/// What a removal is about to remove.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// Memberships (only those GitLab reports get a body: no invites or requests).
    Members(&'a [i64]),
    /// Every membership of a user (phase 1 of removing them).
    MembershipsOf(i64),
    /// Every membership of a group (destroyed with it).
    MembershipsIn(i64),
    /// A group or subgroup.
    Group(i64),
    /// A project.
    Project(i64),
    /// A user.
    User(i64),
}

/// One event with its body, serialized in GitLab's key order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Body {
    /// The event.
    pub event: Event,
    /// The id of the row it reports.
    pub id: i64,
    /// The group a removed group membership belongs to (its member hooks' group),
    /// the namespace of a destroyed project (its project hooks' group), else `id`.
    pub source: i64,
    /// The JSON body.
    pub json: String,
}

/// The receivers and bodies of one removal, prepared before its rows go.
#[derive(Debug, Default)]
pub struct Prepared {
    hooks: Vec<i64>,
    bodies: Vec<Body>,
    group: Vec<Claim>,
}

/// GitLab's `xmlschema` of a UTC timestamp column.
fn xmlschema(t: Option<NaiveDateTime>) -> Option<String> {
    t.map(|t| t.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// `User#webhook_email`: the public email, or `[REDACTED]`.
fn webhook_email(public_email: Option<String>) -> String {
    public_email
        .filter(|e| !e.trim().is_empty())
        .unwrap_or_else(|| "[REDACTED]".into())
}

/// `Gitlab::Access.human_access` (EE's minimal access included).
pub fn human_access(level: i32) -> Option<&'static str> {
    Some(match level {
        5 => "Minimal Access",
        10 => "Guest",
        15 => "Planner",
        20 => "Reporter",
        30 => "Developer",
        40 => "Maintainer",
        50 => "Owner",
        _ => return None,
    })
}

/// `Gitlab::VisibilityLevel.string_level`.
pub fn visibility(level: i32) -> &'static str {
    match level {
        20 => "public",
        10 => "internal",
        _ => "private",
    }
}

/// `ProjectMemberBuilder#build(:destroy)`.
#[derive(Serialize)]
struct ProjectMemberBody {
    created_at: Option<String>,
    updated_at: Option<String>,
    project_name: Option<String>,
    project_path: Option<String>,
    project_path_with_namespace: Option<String>,
    project_id: i64,
    user_username: String,
    user_name: Option<String>,
    user_email: String,
    user_id: i64,
    access_level: Option<&'static str>,
    project_visibility: &'static str,
    event_name: &'static str,
}

/// CE's `GroupMemberBuilder#build(:destroy)`.
#[derive(Serialize)]
struct GroupMemberBody {
    created_at: Option<String>,
    updated_at: Option<String>,
    group_name: Option<String>,
    group_path: Option<String>,
    group_id: i64,
    user_username: String,
    user_name: Option<String>,
    user_email: String,
    user_id: i64,
    group_access: Option<&'static str>,
    expires_at: Option<String>,
    /// EE's `group_plan` (`gitlab_subscription&.plan_name`: null on a self-managed
    /// instance, which has no subscription rows); absent on CE.
    #[serde(skip_serializing_if = "Option::is_none")]
    group_plan: Option<serde_json::Value>,
    event_name: &'static str,
}

/// `GroupBuilder#build(:destroy)`.
#[derive(Serialize)]
struct GroupBody {
    created_at: Option<String>,
    updated_at: Option<String>,
    event_name: &'static str,
    name: Option<String>,
    path: Option<String>,
    full_path: Option<String>,
    group_id: i64,
}

/// One entry of `owners`.
#[derive(Serialize)]
struct Owner {
    name: Option<String>,
    email: String,
}

/// The deprecated owner fields `include_deprecated_owner: true` adds.
#[derive(Serialize)]
struct DeprecatedOwner {
    owner_name: Option<String>,
    owner_email: String,
}

/// `ProjectBuilder#build(:destroy, include_deprecated_owner: true)` (the system hook),
/// or without the deprecated owner (EE's group `Project Hook`).
#[derive(Serialize)]
struct ProjectBody {
    event_name: &'static str,
    created_at: Option<String>,
    updated_at: Option<String>,
    name: Option<String>,
    path: Option<String>,
    path_with_namespace: Option<String>,
    project_id: i64,
    project_namespace_id: i64,
    owners: Vec<Owner>,
    project_visibility: &'static str,
    #[serde(flatten)]
    deprecated_owner: Option<DeprecatedOwner>,
}

/// `UserBuilder#build(:destroy)`.
#[derive(Serialize)]
struct UserBody {
    created_at: Option<String>,
    updated_at: Option<String>,
    event_name: &'static str,
    name: Option<String>,
    email: Option<String>,
    user_id: i64,
    username: Option<String>,
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("a hook body serializes")
}

/// The bodies of memberships `ids` (with EE's `group_plan` when `ee`).
async fn member_bodies<C: GenericClient>(c: &C, ids: &[i64], ee: bool) -> Result<Vec<Body>> {
    let rows = c.query(sql::MEMBER_BODIES, &[&ids]).await?;
    Ok(rows
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            let project: bool = r.get(1);
            let (created_at, updated_at) = (xmlschema(r.get(2)), xmlschema(r.get(3)));
            let (name, path, full_path): (Option<String>, Option<String>, Option<String>) =
                (r.get(4), r.get(5), r.get(6));
            let access = human_access(r.get(12));
            let user_email = webhook_email(r.get(10));
            let source: i64 = r.get(7);
            if project {
                let b = ProjectMemberBody {
                    created_at,
                    updated_at,
                    project_name: name,
                    project_path: path,
                    project_path_with_namespace: full_path,
                    project_id: r.get(7),
                    user_username: r.get(8),
                    user_name: r.get(9),
                    user_email,
                    user_id: r.get(11),
                    access_level: access,
                    project_visibility: visibility(r.get::<_, Option<i32>>(13).unwrap_or(0)),
                    event_name: Event::UserRemoveFromTeam.name(),
                };
                Body {
                    event: Event::UserRemoveFromTeam,
                    id,
                    source,
                    json: json(&b),
                }
            } else {
                let b = GroupMemberBody {
                    created_at,
                    updated_at,
                    group_name: name,
                    group_path: path,
                    group_id: r.get(7),
                    user_username: r.get(8),
                    user_name: r.get(9),
                    user_email,
                    user_id: r.get(11),
                    group_access: access,
                    // `Date#xmlschema`: the date alone.
                    expires_at: r
                        .get::<_, Option<NaiveDate>>(14)
                        .map(|d| d.format("%Y-%m-%d").to_string()),
                    group_plan: ee.then_some(serde_json::Value::Null),
                    event_name: Event::UserRemoveFromGroup.name(),
                };
                Body {
                    event: Event::UserRemoveFromGroup,
                    id,
                    source,
                    json: json(&b),
                }
            }
        })
        .collect())
}

async fn group_body<C: GenericClient>(c: &C, g: i64) -> Result<Option<Body>> {
    let Some(r) = c.query_opt(sql::GROUP_BODY, &[&g]).await? else {
        return Ok(None);
    };
    let b = GroupBody {
        created_at: xmlschema(r.get(0)),
        updated_at: xmlschema(r.get(1)),
        event_name: Event::GroupDestroy.name(),
        name: r.get(2),
        path: r.get(3),
        full_path: r.get(4),
        group_id: r.get(5),
    };
    Ok(Some(Body {
        event: Event::GroupDestroy,
        id: g,
        source: g,
        json: json(&b),
    }))
}

/// Project `p`'s `project_destroy` body for system hooks and, when `ee`, the body of
/// EE's group `Project Hook` (the same without the deprecated owner).
async fn project_body<C: GenericClient>(
    c: &C,
    p: i64,
    ee: bool,
) -> Result<Option<(Body, Option<String>)>> {
    let Some(r) = c.query_opt(sql::PROJECT_BODY, &[&p]).await? else {
        return Ok(None);
    };
    let namespace_id: i64 = r.get(6);
    let owners = c
        .query(sql::GROUP_OWNERS, &[&namespace_id])
        .await?
        .iter()
        .map(|o| Owner {
            name: o.get(0),
            email: webhook_email(o.get(1)),
        })
        .collect();
    let mut b = ProjectBody {
        event_name: Event::ProjectDestroy.name(),
        created_at: xmlschema(r.get(0)),
        updated_at: xmlschema(r.get(1)),
        name: r.get(2),
        path: r.get(3),
        path_with_namespace: r.get(4),
        project_id: r.get(5),
        project_namespace_id: namespace_id,
        owners,
        project_visibility: visibility(r.get(7)),
        deprecated_owner: None,
    };
    let group_json = ee.then(|| json(&b));
    // The deprecated owner is the group, which has no `webhook_email`: "".
    b.deprecated_owner = Some(DeprecatedOwner {
        owner_name: r.get(8),
        owner_email: String::new(),
    });
    Ok(Some((
        Body {
            event: Event::ProjectDestroy,
            id: p,
            source: namespace_id,
            json: json(&b),
        },
        group_json,
    )))
}

async fn user_body<C: GenericClient>(c: &C, u: i64) -> Result<Option<Body>> {
    let Some(r) = c.query_opt(sql::USER_BODY, &[&u]).await? else {
        return Ok(None);
    };
    let b = UserBody {
        created_at: xmlschema(r.get(0)),
        updated_at: xmlschema(r.get(1)),
        event_name: Event::UserDestroy.name(),
        name: r.get(2),
        email: r.get(3),
        user_id: r.get(4),
        username: r.get(5),
    };
    Ok(Some(Body {
        event: Event::UserDestroy,
        id: u,
        source: u,
        json: json(&b),
    }))
}

fn ids(rows: Vec<tokio_postgres::Row>) -> Vec<i64> {
    rows.iter().map(|r| r.get(0)).collect()
}

/// The receivers and bodies of `subject`, read in the removal's transaction before its
/// rows go (no body is read when no system hook would receive it and group hooks are
/// off). With `GROUP_HOOKS=on`, EE's group hooks of the same removal too.
pub async fn prepare<C: GenericClient>(
    c: &C,
    inv: &Invocation<'_>,
    subject: Subject<'_>,
) -> Result<Prepared> {
    let hooks = ids(c.query(sql::RECEIVERS, &[]).await?);
    let ee = inv.settings.group_hooks;
    if hooks.is_empty() && !ee {
        return Ok(Prepared::default());
    }
    let mut group = Vec::new();
    let bodies = match subject {
        Subject::Members([]) => Vec::new(),
        Subject::Members(ids) => member_bodies(c, ids, ee).await?,
        Subject::MembershipsOf(u) => {
            let ids = ids(c.query(sql::MEMBERSHIPS_OF, &[&u]).await?);
            member_bodies(c, &ids, ee).await?
        }
        Subject::MembershipsIn(g) => {
            let ids = ids(c.query(sql::MEMBERSHIPS_IN, &[&g]).await?);
            member_bodies(c, &ids, ee).await?
        }
        Subject::Group(g) => {
            if ee {
                group.extend(group::subgroup_claim(c, g, inv.now).await?);
            }
            group_body(c, g).await?.into_iter().collect()
        }
        Subject::Project(p) => match project_body(c, p, ee).await? {
            Some((b, group_json)) => {
                if let Some(json) = group_json {
                    group.push(group::project_claim(c, &b, json, inv.now).await?);
                }
                vec![b]
            }
            None => Vec::new(),
        },
        Subject::User(u) => user_body(c, u).await?.into_iter().collect(),
    };
    if ee {
        // A group destroyed with its members has lost its own hooks by then.
        let with_self = !matches!(subject, Subject::MembershipsIn(_));
        group.extend(group::member_claims(c, &bodies, with_self, inv.now).await?);
    }
    group.retain(|g| !g.hooks.is_empty());
    Ok(Prepared {
        hooks,
        bodies,
        group,
    })
}

/// The event key of one event: `system-hook:<event>:<id>` (its hooks' messages add
/// `:hook:<hook_id>`), the same for every attempt of the same removal.
pub fn event_key(event: Event, id: i64) -> String {
    format!("system-hook:{}:{id}", event.name())
}

impl Prepared {
    /// Keep only the bodies of the rows `removed` says went.
    pub fn retain(&mut self, removed: impl Fn(i64) -> bool) {
        self.bodies.retain(|b| removed(b.id));
        self.group.retain(|g| removed(g.id));
    }

    /// The bodies prepared.
    pub fn bodies(&self) -> &[Body] {
        &self.bodies
    }

    /// Claim every prepared event for every receiver: one [`HookDelivery`] intent each
    /// (the caller's job sends them before its COMMIT).
    pub fn claim(&self, inv: &Invocation<'_>) -> Vec<Intent> {
        let hook = |hook_id, key: &str, body: &str, table: &str, id, group_hook: Option<&str>| {
            let subject = SystemHookSubject {
                table: table.into(),
                id,
                group_hook: group_hook.map(Into::into),
            };
            let (event_key, body) = (key.into(), body.into());
            Intent::DeliverHook(HookDelivery {
                hook_id,
                event_key,
                body,
                subject,
            })
        };
        let mut intents = Vec::new();
        for b in &self.bodies {
            let key = event_key(b.event, b.id);
            for &hook_id in &self.hooks {
                inv.decide("web_hooks", hook_id, "system_hook", b.event.name());
                intents.push(hook(hook_id, &key, &b.json, b.event.table(), b.id, None));
            }
        }
        let n = intents.len();
        for c in &self.group {
            let key = c.key();
            let trigger = Some(c.scope.trigger());
            for &hook_id in &c.hooks {
                inv.decide("web_hooks", hook_id, "group_hook", c.event_name);
                intents.push(hook(hook_id, &key, &c.json, c.table, c.id, trigger));
            }
        }
        let g = intents.len() - n;
        if n > 0 {
            tracing::info!(system_hooks = n, "System hooks claimed");
        }
        if g > 0 {
            tracing::info!(group_hooks = g, "Group hooks claimed");
        }
        intents
    }
}

/// Delivery: whether the row a system hook reports is still there, waiting for a
/// removal in flight to end (its row lock): `true` means the removal did not happen
/// (rolled back) and nothing is sent.
pub async fn still_present<C: GenericClient>(c: &C, s: &SystemHookSubject) -> Result<bool> {
    let statement = match s.table.as_str() {
        "members" => sql::MEMBER_PRESENT,
        "namespaces" => sql::NAMESPACE_PRESENT,
        "projects" => sql::PROJECT_PRESENT,
        _ => sql::USER_PRESENT,
    };
    Ok(c.query_opt(statement, &[&s.id]).await?.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_keep_gitlabs_key_order() {
        let b = GroupBody {
            created_at: xmlschema(
                NaiveDate::from_ymd_opt(2025, 1, 2)
                    .unwrap()
                    .and_hms_opt(3, 4, 5),
            ),
            updated_at: None,
            event_name: "group_destroy",
            name: Some("g".into()),
            path: Some("g".into()),
            full_path: Some("p/g".into()),
            group_id: 7,
        };
        assert_eq!(
            json(&b),
            r#"{"created_at":"2025-01-02T03:04:05Z","updated_at":null,"event_name":"group_destroy","name":"g","path":"g","full_path":"p/g","group_id":7}"#
        );
        assert_eq!(webhook_email(None), "[REDACTED]");
        assert_eq!(webhook_email(Some(String::new())), "[REDACTED]");
        assert_eq!(webhook_email(Some("a@b".into())), "a@b");
        assert_eq!(human_access(30), Some("Developer"));
        assert_eq!(visibility(10), "internal");
    }
}
