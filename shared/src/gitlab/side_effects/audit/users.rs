//! EE's audit events of a user's deletion (docs/gitlab-differences.md D3), written
//! when `AUDIT_EVENTS` is `on`.
//!
//! Owns: [`user_destroyed`], the event `Users::DestroyService#execute` writes when it
//! schedules the deletion (EE `log_audit_event`: our phase 1), and [`user_deleted`],
//! the one EE's `MigrateRecordsToGhostUserService#post_migrate_records` writes once
//! the ghost migration destroyed the user (our phase 2's final transaction): before
//! GitLab 18.4 `AuditEventService#for_user` with `action: :destroy` (no event name),
//! from 18.4 on `user_records_migrated_to_ghost`, which GitLab writes only with an
//! initiator. Both go through the audit module's insert (legacy row and scoped copy).

use chrono::{DateTime, Utc};
use tokio_postgres::GenericClient;

use super::{sql, yaml, Row, Scope, Value, DELETED_USER, SYSTEM_AUTHOR_ID, SYSTEM_AUTHOR_NAME};
use crate::error::Result;
use crate::gitlab::release;

/// `UnauthenticatedAuthor#name` without a name: `AuditEventService`'s author when the
/// ghost migration has no initiator.
pub const UNAUTHENTICATED_NAME: &str = "An unauthenticated user";

/// The first migration of GitLab 18.4, from which the ghost migration's event is
/// `user_records_migrated_to_ghost`.
const AUDITOR_FORM_FROM: &str = "18.4";

/// A deletion as its audit event needs it.
#[derive(Debug, Clone, Copy)]
pub struct Deletion<'a> {
    /// The user deleted.
    pub user_id: i64,
    /// The current user of `Users::DestroyService` (none: the system).
    pub author: Option<i64>,
    /// A project bot's `project_bot_resource` (`Project` or `Namespace`, id): the
    /// event's scope instead of the user.
    pub bot_resource: Option<(&'a str, i64)>,
    /// `reason_for_deletion`, appended to the message.
    pub reason: Option<&'a str>,
}

/// `user_destroyed` for deletion `d`: "User `<username>` scheduled for deletion" (with
/// ". Reason: …"), target the user with its username (`User#full_path`), author the
/// current user or "(System)". Read before the user's rows change; none for a user
/// already gone. Returns its id.
pub async fn user_destroyed<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    d: &Deletion<'_>,
) -> Result<Vec<i64>> {
    let (scope_type, scope_id) = match d.bot_resource {
        Some((t, id)) => (Some(t), Some(id)),
        None => (None, None),
    };
    let Some(f) = c
        .query_opt(
            sql::USER_FACTS,
            &[&d.user_id, &d.author, &scope_type, &scope_id],
        )
        .await?
    else {
        return Ok(Vec::new());
    };
    let (username, author_name, scope_path): (Option<String>, Option<String>, Option<String>) =
        (f.get(0), f.get(1), f.get(2));
    let username = username.unwrap_or_default();
    let (author_id, author_name, author_class) = match d.author {
        None => (
            SYSTEM_AUTHOR_ID,
            SYSTEM_AUTHOR_NAME.to_string(),
            "Gitlab::Audit::UnauthenticatedAuthor",
        ),
        Some(a) => (
            a,
            author_name.unwrap_or_else(|| DELETED_USER.into()),
            "User",
        ),
    };
    let (scope, entity_id, entity_path) = match d.bot_resource {
        Some(("Project", id)) => (Scope::Project, id, scope_path),
        Some((_, id)) => (Scope::Group, id, scope_path),
        None => (Scope::User, d.user_id, Some(username.clone())),
    };
    let mut message = format!("User {username} scheduled for deletion");
    if let Some(r) = d.reason {
        message.push_str(&format!(". Reason: {r}"));
    }
    let details = yaml(&[
        ("event_name", Value::Str("user_destroyed".into())),
        ("author_name", Value::Str(author_name.clone())),
        ("author_class", Value::Str(author_class.into())),
        ("target_id", Value::Int(d.user_id)),
        ("target_type", Value::Str("User".into())),
        ("target_details", Value::Str(username.clone())),
        ("custom_message", Value::Str(message)),
        ("ip_address", Value::Nil),
        (
            "entity_path",
            entity_path.clone().map_or(Value::Nil, Value::Str),
        ),
    ]);
    let row = Row {
        event_name: Some("user_destroyed"),
        target_type: "User",
        entity_id,
        scope,
        author_id,
        target_id: d.user_id,
        details,
        author_name,
        entity_path,
        target_details: username,
    };
    super::insert(c, now, &[row]).await
}

/// The event of user `user_id`'s deletion by the ghost migration of `initiator`,
/// scoped to the user, in the form of the database's release (module header). Read
/// before the user's row goes; none for a user already gone, nor from 18.4 on without
/// an initiator. Returns its id.
pub async fn user_deleted<C: GenericClient>(
    c: &C,
    now: DateTime<Utc>,
    user_id: i64,
    initiator: Option<i64>,
) -> Result<Vec<i64>> {
    let auditor_form = match release::read(c).await? {
        release::Read::Version(v) => v.as_str() >= release::marker(AUDITOR_FORM_FROM),
        _ => true,
    };
    if auditor_form && initiator.is_none() {
        return Ok(Vec::new());
    }
    let Some(f) = c
        .query_opt(
            sql::USER_FACTS,
            &[&user_id, &initiator, &None::<&str>, &None::<i64>],
        )
        .await?
    else {
        return Ok(Vec::new());
    };
    let (username, initiator_name): (Option<String>, Option<String>) = (f.get(0), f.get(1));
    let username = username.unwrap_or_default();
    let (author_id, author_name) = match initiator {
        None => (SYSTEM_AUTHOR_ID, UNAUTHENTICATED_NAME.to_string()),
        Some(a) => (a, initiator_name.unwrap_or_else(|| DELETED_USER.into())),
    };
    let (event_name, details) = if auditor_form {
        let details = yaml(&[
            ("action", Value::Str("migrate_to_ghost".into())),
            ("author_name", Value::Str(author_name.clone())),
            ("target_id", Value::Int(user_id)),
            ("target_type", Value::Str("User".into())),
            (
                "event_name",
                Value::Str("user_records_migrated_to_ghost".into()),
            ),
            ("author_class", Value::Str("User".into())),
            ("target_details", Value::Str(username.clone())),
            (
                "custom_message",
                Value::Str("User records migrated to ghost user".into()),
            ),
            ("ip_address", Value::Nil),
            ("entity_path", Value::Str(username.clone())),
        ]);
        (Some("user_records_migrated_to_ghost"), details)
    } else {
        let details = yaml(&[
            ("remove", Value::Str("user".into())),
            ("author_name", Value::Str(author_name.clone())),
            ("target_id", Value::Int(user_id)),
            ("target_type", Value::Str("User".into())),
            ("target_details", Value::Str(username.clone())),
            ("ip_address", Value::Nil),
            ("entity_path", Value::Str(username.clone())),
        ]);
        (None, details)
    };
    let row = Row {
        event_name,
        target_type: "User",
        entity_id: user_id,
        scope: Scope::User,
        author_id,
        target_id: user_id,
        details,
        author_name,
        entity_path: Some(username.clone()),
        target_details: username,
    };
    super::insert(c, now, &[row]).await
}
