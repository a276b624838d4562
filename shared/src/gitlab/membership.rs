//! Membership rows and the removal primitive (behaviour §1.4, §4).
//!
//! Owns: [`Member`], `affected(m)`, and `remove_membership` (the row, the user's
//! notification setting for the source, the authorization refresh unless deferred).
//! Callers check permissions first. Its statements, and the `member_columns!` select
//! list other modules share, are in [`sql`].

use tokio_postgres::{GenericClient, Row};

use crate::error::Result;
use crate::gitlab::authz;

pub mod sql;

/// The columns of a `members` row that the rules look at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// id.
    pub id: i64,
    /// NULL for invites.
    pub user_id: Option<i64>,
    /// Group id or project id.
    pub source_id: i64,
    /// 'Namespace' or 'Project'.
    pub source_type: String,
    /// 'GroupMember' or 'ProjectMember'.
    pub kind: Option<String>,
    /// Access level.
    pub access_level: i32,
    /// 0 active, 1 awaiting.
    pub state: i16,
    /// Whether this is an access request.
    pub requested: bool,
}

pub use sql::MEMBER_COLUMNS;

impl Member {
    /// Read a row selected with [`MEMBER_COLUMNS`].
    pub fn from_row(r: &Row) -> Member {
        Member {
            id: r.get(0),
            user_id: r.get(1),
            source_id: r.get(2),
            source_type: r.get(3),
            kind: r.get(4),
            access_level: r.get(5),
            state: r.get(6),
            requested: r.get(7),
        }
    }

    /// A group membership: `type = 'GroupMember' AND source_type = 'Namespace'`.
    pub fn is_group(&self) -> bool {
        self.source_type == "Namespace" && self.kind.as_deref() == Some("GroupMember")
    }

    /// A project membership: `type = 'ProjectMember' AND source_type = 'Project'`.
    pub fn is_project(&self) -> bool {
        self.source_type == "Project" && self.kind.as_deref() == Some("ProjectMember")
    }

    /// An active membership: `state = 0 AND requested_at IS NULL AND user_id IS NOT NULL`.
    pub fn is_active(&self) -> bool {
        self.state == 0 && !self.requested && self.user_id.is_some()
    }
}

/// `affected(m)`: the projects whose authorizations may change when m goes (behaviour §3).
pub async fn affected<C: GenericClient>(c: &C, m: &Member) -> Result<Vec<i64>> {
    match m.source_type.as_str() {
        "Project" => Ok(vec![m.source_id]),
        "Namespace" => authz::reached_from(c, &[m.source_id]).await,
        _ => Ok(Vec::new()),
    }
}

/// Whether `remove_membership` refreshes at once or leaves it to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refresh {
    /// Refresh `affected(m)` now (the default of behaviour §4).
    Now,
    /// The caller refreshes later (B43's batch refresh, B38's bot path).
    Deferred,
}

/// `remove_membership(m)` (behaviour §4). Returns whether the row was deleted.
pub async fn remove_membership<C: GenericClient>(
    c: &C,
    m: &Member,
    refresh: Refresh,
) -> Result<bool> {
    let n = c.execute(sql::DELETE_MEMBER, &[&m.id]).await?;
    if let Some(u) = m.user_id {
        c.execute(
            sql::DELETE_NOTIFICATION_SETTING,
            &[&u, &m.source_type, &m.source_id],
        )
        .await?;
        if refresh == Refresh::Now {
            let p = affected(c, m).await?;
            authz::refresh(c, u, &p).await?;
        }
    }
    Ok(n == 1)
}
