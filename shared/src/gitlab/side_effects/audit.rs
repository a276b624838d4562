//! EE's audit events (docs/gitlab-differences.md D3), written when the stack's
//! `AUDIT_EVENTS` is `on` (a licensed EE instance).
//!
//! Owns: [`member_destroyed`] (one event per removed membership) and [`destroyed`]
//! (group-destroy's `project_destroyed` / `group_destroyed`), each written as the legacy
//! `audit_events` row where the table exists and the scoped copy —
//! `project_audit_events` or `group_audit_events` — with the same id, drawn by the
//! legacy table's default; the scoped table's own default where there is no legacy
//! table), the event's `details` as GitLab serialises it (`serialize
//! :details, Hash`: Ruby YAML with symbol keys, [`yaml`]) and the access labels. Its
//! statements are in [`sql`]; the legacy insert in `sql::legacy`, run only where
//! `audit_events` exists (GitLab 18; 19.5 has only the scoped tables).

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use tokio_postgres::GenericClient;

use super::{Cause, Left};
use crate::error::Result;
use crate::gitlab::deletion_model;

pub mod sql;
pub mod users;

/// `Gitlab::Audit::UnauthenticatedAuthor`'s id and name: the author of a system event.
pub const SYSTEM_AUTHOR_ID: i64 = -1;
/// The system author's name.
pub const SYSTEM_AUTHOR_NAME: &str = "(System)";
/// `User#name` GitLab's audit events put for a user that no longer exists.
pub const DELETED_USER: &str = "Deleted User";

/// Whether the database holds any project or group audit event: an instance that
/// writes them (`hk check` compares it with `AUDIT_EVENTS`).
pub async fn instance_has_events<C: GenericClient>(c: &C) -> Result<bool> {
    Ok(c.query_one(sql::ANY_ROWS, &[]).await?.get(0))
}

/// `Gitlab::Access.human_access` of a standard level ("No access" otherwise).
pub fn human_access(level: i32) -> &'static str {
    crate::gitlab::system_hooks::human_access(level).unwrap_or("No access")
}

/// One value of a `details` hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// `true` / `false`.
    Bool(bool),
    /// `nil`.
    Nil,
}

/// Psych's dump of a Ruby hash with symbol keys (`---`, then `:key: value` per line):
/// a string stays plain when YAML would read it back as the same string, is
/// single-quoted otherwise, and double-quoted with escapes when it holds a line break
/// or control character; `nil` is an empty value.
pub fn yaml(pairs: &[(&str, Value)]) -> String {
    let mut out = String::from("---\n");
    for (k, v) in pairs {
        out.push(':');
        out.push_str(k);
        out.push(':');
        match v {
            Value::Nil => {}
            Value::Int(i) => out.push_str(&format!(" {i}")),
            Value::Bool(b) => out.push_str(if *b { " true" } else { " false" }),
            Value::Str(s) => {
                out.push(' ');
                out.push_str(&scalar(s));
            }
        }
        out.push('\n');
    }
    out
}

fn scalar(s: &str) -> String {
    if s.chars().any(|c| c.is_control()) {
        let mut q = String::from("\"");
        for c in s.chars() {
            match c {
                '"' => q.push_str("\\\""),
                '\\' => q.push_str("\\\\"),
                '\n' => q.push_str("\\n"),
                '\t' => q.push_str("\\t"),
                '\r' => q.push_str("\\r"),
                c if c.is_control() => q.push_str(&format!("\\u{:04X}", c as u32)),
                c => q.push(c),
            }
        }
        q.push('"');
        return q;
    }
    if plain_ok(s) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// Whether `s` reads back as the same string when written plain.
fn plain_ok(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    if s.starts_with(' ') || s.ends_with(' ') || s.ends_with(':') {
        return false;
    }
    if "-?:,[]{}#&*!|>'\"%@`~".contains(first) {
        return false;
    }
    if s.contains(": ") || s.contains(" #") {
        return false;
    }
    let lower = s.to_ascii_lowercase();
    const RESERVED: &[&str] = &[
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "nil", ".nan", ".inf",
        "-.inf", "+.inf",
    ];
    if RESERVED.contains(&lower.as_str()) {
        return false;
    }
    // Numbers, dates and times resolve to other types.
    let numeric_like = s
        .chars()
        .all(|c| c.is_ascii_digit() || "+-._:eExXoObB ".contains(c) || c.is_ascii_hexdigit());
    !(numeric_like && s.chars().any(|c| c.is_ascii_digit()))
}

/// The `member_destroyed` events of `left` (GitLab's `log_audit_event` in EE's
/// `Members::DestroyService`): for an expiry, author "(System)", with `system_event`,
/// the reason and "Membership expired on `<date>`"; for a prune, the scheduling user and
/// "Membership destroyed". Returns their ids.
pub async fn member_destroyed<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    cause: Cause,
    left: &[Left],
) -> Result<Vec<i64>> {
    let left: Vec<&Left> = left.iter().filter(|l| !l.requested).collect();
    if left.is_empty() {
        return Ok(Vec::new());
    }
    let users: Vec<i64> = left.iter().map(|l| l.user_id).collect();
    let types: Vec<String> = left.iter().map(|l| l.source_type.clone()).collect();
    let sources: Vec<i64> = left.iter().map(|l| l.source_id).collect();
    let author: Option<i64> = match cause {
        Cause::Expired => None,
        Cause::Pruned { by } => Some(by),
    };
    let facts = c
        .query(sql::FACTS, &[&users, &types, &sources, &author])
        .await?;
    let mut rows = Vec::new();
    for (l, f) in left.iter().zip(&facts) {
        let target_details: String = f
            .get::<_, Option<String>>(0)
            .unwrap_or_else(|| DELETED_USER.into());
        let entity_path: Option<String> = f.get(1);
        let (author_id, author_name, author_class) = match author {
            None => (
                SYSTEM_AUTHOR_ID,
                SYSTEM_AUTHOR_NAME.to_string(),
                "Gitlab::Audit::UnauthenticatedAuthor",
            ),
            Some(a) => (
                a,
                f.get::<_, Option<String>>(2)
                    .unwrap_or_else(|| DELETED_USER.into()),
                "User",
            ),
        };
        let mut pairs: Vec<(&str, Value)> = vec![
            ("remove", Value::Str("user_access".into())),
            (
                "as",
                Value::Str(format!("Default role: {}", human_access(l.access_level))),
            ),
            ("member_id", Value::Int(l.member_id)),
        ];
        let message = match (author, l.expires_at) {
            (None, expires) => {
                let date = expires.map(|d| d.to_string()).unwrap_or_default();
                pairs.push(("system_event", Value::Bool(true)));
                pairs.push(("reason", Value::Str(format!("access expired on {date}"))));
                format!("Membership expired on {date}")
            }
            (Some(_), _) => "Membership destroyed".to_string(),
        };
        pairs.extend([
            ("event_name", Value::Str("member_destroyed".into())),
            ("author_name", Value::Str(author_name.clone())),
            ("author_class", Value::Str(author_class.into())),
            ("target_id", Value::Int(l.user_id)),
            ("target_type", Value::Str("User".into())),
            ("target_details", Value::Str(target_details.clone())),
            ("custom_message", Value::Str(message)),
            ("ip_address", Value::Nil),
            (
                "entity_path",
                entity_path.clone().map_or(Value::Nil, Value::Str),
            ),
        ]);
        let project = l.source_type == "Project";
        rows.push(Row {
            event_name: Some("member_destroyed"),
            target_type: "User",
            entity_id: l.source_id,
            scope: if project {
                Scope::Project
            } else {
                Scope::Group
            },
            author_id,
            target_id: l.user_id,
            details: yaml(&pairs),
            author_name,
            entity_path,
            target_details,
        });
    }
    insert(c, now, &rows).await
}

/// What group-destroy destroys, for its audit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Destroyed {
    /// A project (`project_destroyed`, scoped to its parent group).
    Project(i64),
    /// The scheduled group itself (`group_destroyed`, scoped to its root ancestor;
    /// GitLab writes none for the subgroups it destroys with it).
    Group(i64),
}

/// EE's `project_destroyed` / `group_destroyed` event (`ee/app/services/ee/projects/
/// destroy_service.rb`, `ee/app/services/ee/groups/destroy_service.rb`): authored by
/// the deleting user, target the project or group with its full path, GitLab 18's
/// messages "Project destroyed" / "Group destroyed". Read before the routes go.
/// Returns its id (none when the row is already gone).
pub async fn destroyed<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    what: Destroyed,
    author: i64,
) -> Result<Vec<i64>> {
    let (id, statement, event_name, target_type, remove, message) = match what {
        Destroyed::Project(p) => (
            p,
            sql::PROJECT_FACTS,
            "project_destroyed",
            "Project",
            "project",
            "Project destroyed",
        ),
        Destroyed::Group(g) => (
            g,
            sql::GROUP_FACTS,
            "group_destroyed",
            "Group",
            "group",
            "Group destroyed",
        ),
    };
    let Some(f) = c.query_opt(statement, &[&id, &author]).await? else {
        return Ok(Vec::new());
    };
    let (target_details, scope_id, entity_path, author_name): (
        Option<String>,
        i64,
        Option<String>,
        Option<String>,
    ) = (f.get(0), f.get(1), f.get(2), f.get(3));
    let target_details = target_details.unwrap_or_default();
    let author_name = author_name.unwrap_or_else(|| DELETED_USER.into());
    let details = yaml(&[
        ("remove", Value::Str(remove.into())),
        ("event_name", Value::Str(event_name.into())),
        ("author_name", Value::Str(author_name.clone())),
        ("author_class", Value::Str("User".into())),
        ("target_id", Value::Int(id)),
        ("target_type", Value::Str(target_type.into())),
        ("target_details", Value::Str(target_details.clone())),
        ("custom_message", Value::Str(message.into())),
        ("ip_address", Value::Nil),
        (
            "entity_path",
            entity_path.clone().map_or(Value::Nil, Value::Str),
        ),
    ]);
    let rows = [Row {
        event_name: Some(event_name),
        target_type,
        entity_id: scope_id,
        scope: Scope::Group,
        author_id: author,
        target_id: id,
        details,
        author_name,
        entity_path,
        target_details,
    }];
    insert(c, now, &rows).await
}

/// Write `rows`, one event at a time, the project events first, then the group's,
/// then the users': the legacy row where `audit_events` exists (its id from the
/// table's default), then the scoped copy with that id; where it does not, the scoped
/// row alone with its table's default id. Returns the ids.
pub(super) async fn insert<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    rows: &[Row],
) -> Result<Vec<i64>> {
    let legacy = deletion_model::has_column(c, "audit_events", "id").await?;
    let mut ids = Vec::new();
    for scope in [Scope::Project, Scope::Group, Scope::User] {
        for r in rows.iter().filter(|r| r.scope == scope) {
            let common: [&(dyn ToSql + Sync); 9] = [
                &r.entity_id,
                &r.author_id,
                &r.target_id,
                &r.event_name,
                &r.details,
                &r.author_name,
                &r.entity_path,
                &r.target_details,
                &r.target_type,
            ];
            let (scoped, alone) = match scope {
                Scope::Project => (sql::INSERT_PROJECT, sql::INSERT_PROJECT_ALONE),
                Scope::Group => (sql::INSERT_GROUP, sql::INSERT_GROUP_ALONE),
                Scope::User => (sql::INSERT_USER, sql::INSERT_USER_ALONE),
            };
            let id: i64 = if legacy {
                let id: i64 = c
                    .query_one(
                        sql::legacy::INSERT_LEGACY,
                        &[
                            &now,
                            &r.entity_id,
                            &r.author_id,
                            &r.target_id,
                            &r.details,
                            &r.author_name,
                            &r.entity_path,
                            &r.target_details,
                            &r.target_type,
                            &scope.entity_type(),
                        ],
                    )
                    .await?
                    .get(0);
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&id, &now];
                params.extend(common);
                c.execute(scoped, &params).await?;
                id
            } else {
                let mut params: Vec<&(dyn ToSql + Sync)> = vec![&now];
                params.extend(common);
                c.query_one(alone, &params).await?.get(0)
            };
            ids.push(id);
        }
    }
    Ok(ids)
}

/// The entity an event is scoped to: its scoped table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// `project_audit_events`.
    Project,
    /// `group_audit_events`.
    Group,
    /// `user_audit_events`.
    User,
}

impl Scope {
    /// The legacy row's `entity_type`.
    fn entity_type(self) -> &'static str {
        match self {
            Scope::Project => "Project",
            Scope::Group => "Group",
            Scope::User => "User",
        }
    }
}

/// One event as its rows carry it.
pub(super) struct Row {
    /// `event_name` (none for the legacy `AuditEventService` events).
    pub event_name: Option<&'static str>,
    pub target_type: &'static str,
    pub entity_id: i64,
    pub scope: Scope,
    pub author_id: i64,
    pub target_id: i64,
    pub details: String,
    pub author_name: String,
    pub entity_path: Option<String>,
    pub target_details: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_psych_yaml_with_symbol_keys() {
        let y = yaml(&[
            ("remove", Value::Str("user_access".into())),
            ("as", Value::Str("Default role: Developer".into())),
            ("member_id", Value::Int(12)),
            ("system_event", Value::Bool(true)),
            ("author_name", Value::Str("(System)".into())),
            ("target_details", Value::Str("O'Brien".into())),
            ("x", Value::Str("2025-01-01".into())),
            ("ip_address", Value::Nil),
        ]);
        assert_eq!(
            y,
            "---\n:remove: user_access\n:as: 'Default role: Developer'\n:member_id: 12\n\
             :system_event: true\n:author_name: (System)\n:target_details: O'Brien\n\
             :x: '2025-01-01'\n:ip_address:\n"
        );
    }
}
