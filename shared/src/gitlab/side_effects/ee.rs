//! EE's rows of a user that a membership removal deletes (docs/gitlab-differences.md
//! D3): plain rows, deleted where they exist (a CE database has none).
//!
//! Owns: [`project_left`] (EE `ProjectMember`'s `before_destroy` callbacks: the user's
//! protected-branch merge and push access levels on the project, unless the user is
//! still a member of the project's group, and the user's protected-environment deploy
//! access levels and approval rules, `ProtectedEnvironment.revoke_user`),
//! [`group_left`] (`MembersDestroyer::CleanUpGroupProtectedBranchRulesWorker`: the
//! user's merge and push access levels on the projects under the group the user no
//! longer reaches) and [`group_identities`] (`EE::Members::DestroyService
//! #cleanup_group_identity`: the user's identities of the group's own SAML provider;
//! expiry only, a prune skips it). Each takes parallel arrays of users and sources and
//! runs in the removal's transaction, after its authorization refresh. Its statements
//! are in [`sql`].

use tokio_postgres::GenericClient;

use crate::error::Result;

pub mod sql;

/// The ids of the EE rows deleted, by table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Removed {
    /// `protected_branch_merge_access_levels` ids.
    pub merge_access_levels: Vec<i64>,
    /// `protected_branch_push_access_levels` ids.
    pub push_access_levels: Vec<i64>,
    /// `protected_environment_deploy_access_levels` ids.
    pub deploy_access_levels: Vec<i64>,
    /// `protected_environment_approval_rules` ids.
    pub approval_rules: Vec<i64>,
    /// `identities` ids.
    pub identities: Vec<i64>,
}

impl Removed {
    /// Add what `other` removed.
    pub fn extend(&mut self, other: Removed) {
        self.merge_access_levels.extend(other.merge_access_levels);
        self.push_access_levels.extend(other.push_access_levels);
        self.deploy_access_levels.extend(other.deploy_access_levels);
        self.approval_rules.extend(other.approval_rules);
        self.identities.extend(other.identities);
    }
}

async fn ids<C: GenericClient>(
    c: &C,
    statement: &str,
    users: &[i64],
    sources: &[i64],
) -> Result<Vec<i64>> {
    Ok(c.query(statement, &[&users, &sources])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// The project memberships `(users[i], projects[i])` left: EE `ProjectMember`'s
/// `delete_member_branch_protection` and `delete_protected_environment_acceses`.
pub async fn project_left<C: GenericClient>(
    c: &C,
    users: &[i64],
    projects: &[i64],
) -> Result<Removed> {
    if users.is_empty() {
        return Ok(Removed::default());
    }
    Ok(Removed {
        merge_access_levels: ids(c, sql::DELETE_PROJECT_MERGE_ACCESS, users, projects).await?,
        push_access_levels: ids(c, sql::DELETE_PROJECT_PUSH_ACCESS, users, projects).await?,
        deploy_access_levels: ids(c, sql::DELETE_DEPLOY_ACCESS, users, projects).await?,
        approval_rules: ids(c, sql::DELETE_APPROVAL_RULES, users, projects).await?,
        identities: Vec::new(),
    })
}

/// The group memberships `(users[i], groups[i])` left:
/// `CleanUpGroupProtectedBranchRulesWorker`, after the authorization refresh it reads.
pub async fn group_left<C: GenericClient>(c: &C, users: &[i64], groups: &[i64]) -> Result<Removed> {
    if users.is_empty() {
        return Ok(Removed::default());
    }
    Ok(Removed {
        merge_access_levels: ids(c, sql::DELETE_GROUP_MERGE_ACCESS, users, groups).await?,
        push_access_levels: ids(c, sql::DELETE_GROUP_PUSH_ACCESS, users, groups).await?,
        ..Removed::default()
    })
}

/// The expired group memberships `(users[i], groups[i])`: `cleanup_group_identity`.
pub async fn group_identities<C: GenericClient>(
    c: &C,
    users: &[i64],
    groups: &[i64],
) -> Result<Vec<i64>> {
    if users.is_empty() {
        return Ok(Vec::new());
    }
    ids(c, sql::DELETE_GROUP_IDENTITIES, users, groups).await
}
