//! The statements of [`crate::gitlab::side_effects::ee`]. Each takes the memberships
//! left as parallel arrays `($1[i] user, $2[i] project or group)` and returns the ids
//! it deleted.

use crate::gitlab::side_effects::sql::left_group_subtrees;

/// The user's access levels of table `$table` on the protected branches of the
/// projects left, unless the user is still an active member (guest or more, not an
/// access request) of the project's group or an ancestor (`group&.member?(user)`).
macro_rules! project_branch_access {
    ($table:literal) => {
        concat!(
            "DELETE FROM ",
            $table,
            " a
       USING unnest($1::bigint[], $2::bigint[]) AS r(user_id, project_id)
         JOIN projects p ON p.id = r.project_id
         LEFT JOIN namespaces n ON n.id = p.namespace_id AND n.type = 'Group'
         JOIN protected_branches b ON b.project_id = p.id
       WHERE a.protected_branch_id = b.id AND a.user_id = r.user_id
         AND NOT EXISTS (
           SELECT 1 FROM members m JOIN users u ON u.id = m.user_id
           WHERE n.id IS NOT NULL AND m.user_id = r.user_id AND m.source_type = 'Namespace'
             AND m.source_id = ANY(n.traversal_ids::bigint[])
             AND m.requested_at IS NULL AND m.state = 0 AND m.access_level >= 10
             AND u.state = 'active')
       RETURNING a.id::bigint"
        )
    };
}

/// The user's access levels of table `$table` on the protected branches of the
/// projects under the groups left (the group and its descendants) that the user no
/// longer reaches (`Project#member?`: no `project_authorizations` row).
macro_rules! group_branch_access {
    ($table:literal) => {
        concat!(
            "DELETE FROM ",
            $table,
            " a ",
            left_group_subtrees!(),
            "
         JOIN projects p ON p.namespace_id = n.id
         JOIN protected_branches b ON b.project_id = p.id
       WHERE a.protected_branch_id = b.id AND a.user_id = r.user_id
         AND NOT EXISTS (SELECT 1 FROM project_authorizations pa
                         WHERE pa.user_id = r.user_id AND pa.project_id = p.id)
       RETURNING a.id::bigint"
        )
    };
}

crate::statements::statements! {
    /// EE ProjectMember#delete_member_branch_protection: merge access levels.
    DELETE_PROJECT_MERGE_ACCESS = project_branch_access!("protected_branch_merge_access_levels");
    /// EE ProjectMember#delete_member_branch_protection: push access levels.
    DELETE_PROJECT_PUSH_ACCESS = project_branch_access!("protected_branch_push_access_levels");
    /// ProtectedEnvironment.revoke_user on the projects left: the user's deploy access
    /// levels of the project's protected environments.
    DELETE_DEPLOY_ACCESS = "DELETE FROM protected_environment_deploy_access_levels d
       USING unnest($1::bigint[], $2::bigint[]) AS r(user_id, project_id)
         JOIN protected_environments e ON e.project_id = r.project_id
       WHERE d.protected_environment_id = e.id AND d.user_id = r.user_id
       RETURNING d.id::bigint";
    /// ProtectedEnvironment.revoke_user on the projects left: the user's approval rules
    /// of the project's protected environments where another approver remains (a rule
    /// whose user is not this user), so an environment never loses its last rule.
    DELETE_APPROVAL_RULES = "DELETE FROM protected_environment_approval_rules a
       USING unnest($1::bigint[], $2::bigint[]) AS r(user_id, project_id)
         JOIN protected_environments e ON e.project_id = r.project_id
       WHERE a.protected_environment_id = e.id AND a.user_id = r.user_id
         AND EXISTS (SELECT 1 FROM protected_environment_approval_rules o
                     WHERE o.protected_environment_id = e.id
                       AND o.user_id IS DISTINCT FROM r.user_id)
       RETURNING a.id::bigint";
    /// CleanUpGroupProtectedBranchRulesWorker: merge access levels.
    DELETE_GROUP_MERGE_ACCESS = group_branch_access!("protected_branch_merge_access_levels");
    /// CleanUpGroupProtectedBranchRulesWorker: push access levels.
    DELETE_GROUP_PUSH_ACCESS = group_branch_access!("protected_branch_push_access_levels");
    /// EE::Members::DestroyService#cleanup_group_identity: the user's identities of the
    /// SAML provider of the group left itself (`saml_providers.group_id`).
    DELETE_GROUP_IDENTITIES = "DELETE FROM identities i
       USING unnest($1::bigint[], $2::bigint[]) AS r(user_id, group_id)
         JOIN saml_providers s ON s.group_id = r.group_id
       WHERE i.saml_provider_id = s.id AND i.user_id = r.user_id
       RETURNING i.id::bigint";
}
