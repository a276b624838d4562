//! The orphan check of every table of the schema for `at_scale`'s three-level tree:
//! the rows that would still refer to a destroyed group, project namespace or project.

/// Every table of the schema, with the rows that would refer to a deleted group
/// (`D`), project namespace (`PN`) or project (`P`). Tables without such references
/// are listed with `None`, so a table added to the schema fails this test until it
/// is considered here.
pub(super) fn orphan_checks() -> Vec<(&'static str, Option<String>)> {
    let d = format!("ARRAY{:?}::bigint[]", super::at_scale::TREE);
    let pn = "ARRAY(SELECT generate_series(7001, 7050))::bigint[]";
    let p = "ARRAY(SELECT generate_series(6001, 6050))::bigint[]";
    let ns = format!("({d} || {pn})");
    let mut checks = vec![
        ("organizations", None),
        ("application_settings", None),
        (
            "users",
            Some("users WHERE user_type = 6 AND id BETWEEN 3001 AND 3006".into()),
        ),
        (
            "namespaces",
            Some(format!("namespaces WHERE id = ANY{ns} OR parent_id = ANY{ns}")),
        ),
        (
            "routes",
            Some(format!(
                "routes WHERE (source_type = 'Namespace' AND source_id = ANY{ns})
                   OR (source_type = 'Project' AND source_id = ANY({p})) OR namespace_id = ANY{ns}"
            )),
        ),
        (
            "projects",
            Some(format!("projects WHERE id = ANY({p}) OR namespace_id = ANY({d}) OR project_namespace_id = ANY({pn})")),
        ),
        (
            "members",
            Some(format!(
                "members WHERE (source_type = 'Namespace' AND source_id = ANY({d}))
                   OR (source_type = 'Project' AND source_id = ANY({p})) OR member_namespace_id = ANY{ns}
                   OR user_id BETWEEN 3001 AND 3006"
            )),
        ),
        (
            "notification_settings",
            Some(format!(
                "notification_settings WHERE (source_type = 'Namespace' AND source_id = ANY({d}))
                   OR (source_type = 'Project' AND source_id = ANY({p}))"
            )),
        ),
        (
            "project_authorizations",
            Some(format!("project_authorizations WHERE project_id = ANY({p})")),
        ),
        (
            "group_deletion_schedules",
            Some(format!("group_deletion_schedules WHERE group_id = ANY{ns}")),
        ),
        (
            "members_deletion_schedules",
            Some(format!("members_deletion_schedules WHERE namespace_id = ANY{ns}")),
        ),
        (
            "import_placeholder_user_details",
            Some(format!("import_placeholder_user_details WHERE namespace_id = ANY{ns}")),
        ),
        (
            "import_source_users",
            Some(format!("import_source_users WHERE namespace_id = ANY{ns}")),
        ),
        (
            "personal_access_tokens",
            Some("personal_access_tokens WHERE user_id BETWEEN 3001 AND 3006".into()),
        ),
        (
            "web_hooks",
            Some(format!("web_hooks WHERE project_id = ANY({p}) OR group_id = ANY{ns}")),
        ),
        (
            "ghost_user_migrations",
            Some("ghost_user_migrations".into()),
        ),
        ("issues", Some(format!("issues WHERE project_id = ANY({p})"))),
        (
            "merge_requests",
            Some(format!("merge_requests WHERE target_project_id = ANY({p})")),
        ),
        ("notes", Some(format!("notes WHERE project_id = ANY({p})"))),
        (
            "namespace_details",
            Some(format!("namespace_details WHERE namespace_id = ANY{ns}")),
        ),
        (
            "project_authorizations_for_migration",
            Some(format!("project_authorizations_for_migration WHERE project_id = ANY({p})")),
        ),
        (
            "project_group_links",
            Some(format!("project_group_links WHERE project_id = ANY({p}) OR group_id = ANY({d})")),
        ),
        (
            "group_group_links",
            Some(format!("group_group_links WHERE shared_group_id = ANY({d}) OR shared_with_group_id = ANY({d})")),
        ),
        (
            "namespaces_sync_events",
            Some(format!("namespaces_sync_events WHERE namespace_id = ANY{ns}")),
        ),
        (
            "projects_sync_events",
            Some(format!("projects_sync_events WHERE project_id = ANY({p})")),
        ),
        (
            "member_roles",
            Some(format!("member_roles WHERE namespace_id = ANY{ns}")),
        ),
        (
            "user_details",
            Some("user_details WHERE user_id BETWEEN 3001 AND 3006".into()),
        ),
        // Storage rows (issue 37): this tree holds none, and none may be left.
        ("shards", None),
        (
            "project_repositories",
            Some(format!("project_repositories WHERE project_id = ANY({p})")),
        ),
        (
            "project_repository_storage_moves",
            Some(format!("project_repository_storage_moves WHERE project_id = ANY({p})")),
        ),
        ("snippets", Some(format!("snippets WHERE project_id = ANY({p})"))),
        ("snippet_repositories", Some("snippet_repositories".into())),
        (
            "uploads",
            Some(format!("uploads WHERE model_type = 'Project' AND model_id = ANY({p})")),
        ),
        ("lfs_objects", Some("lfs_objects".into())),
        (
            "lfs_objects_projects",
            Some(format!("lfs_objects_projects WHERE project_id = ANY({p})")),
        ),
        (
            "packages_packages",
            Some(format!("packages_packages WHERE project_id = ANY({p})")),
        ),
        ("packages_package_files", Some("packages_package_files".into())),
        (
            "organization_users",
            Some("organization_users WHERE user_id BETWEEN 3001 AND 3006".into()),
        ),
        // GitLab's loose-FK queue and its migration versions: written, never orphans.
        ("loose_foreign_keys_deleted_records", None),
        ("schema_migrations", None),
        // GitLab's blocking keys (group_deletion::blockers covers them).
        (
            "container_repositories",
            Some(format!("container_repositories WHERE project_id = ANY({p})")),
        ),
        (
            "project_saved_replies",
            Some(format!("project_saved_replies WHERE project_id = ANY({p})")),
        ),
        (
            "packages_debian_project_distributions",
            Some(format!("packages_debian_project_distributions WHERE project_id = ANY({p})")),
        ),
        (
            "packages_debian_group_distributions",
            Some(format!("packages_debian_group_distributions WHERE group_id = ANY{ns}")),
        ),
        (
            "project_requirement_compliance_statuses",
            Some(format!(
                "project_requirement_compliance_statuses WHERE project_id = ANY({p}) OR namespace_id = ANY{ns}"
            )),
        ),
        (
            "virtual_registries_container_cache_entries",
            Some(format!("virtual_registries_container_cache_entries WHERE group_id = ANY{ns}")),
        ),
        // Rows written beside removals (docs/gitlab-differences.md D3); audit events
        // outlive what they record, as in GitLab.
        ("events", Some(format!("events WHERE project_id = ANY({p})"))),
        (
            "todos",
            Some(format!("todos WHERE project_id = ANY({p}) OR group_id = ANY{ns}")),
        ),
        ("issue_assignees", Some("issue_assignees".into())),
        (
            "project_features",
            Some(format!("project_features WHERE project_id = ANY({p})")),
        ),
        ("user_highest_roles", None),
        // EE's rows of a user a removal deletes (D3): they cascade with their owner.
        (
            "saml_providers",
            Some(format!("saml_providers WHERE group_id = ANY{ns}")),
        ),
        ("identities", None),
        (
            "protected_branches",
            Some(format!("protected_branches WHERE project_id = ANY({p}) OR namespace_id = ANY{ns}")),
        ),
        (
            "protected_branch_merge_access_levels",
            Some(format!("protected_branch_merge_access_levels WHERE group_id = ANY{ns}")),
        ),
        (
            "protected_branch_push_access_levels",
            Some(format!("protected_branch_push_access_levels WHERE group_id = ANY{ns}")),
        ),
        (
            "protected_environments",
            Some(format!("protected_environments WHERE project_id = ANY({p}) OR group_id = ANY{ns}")),
        ),
        (
            "protected_environment_deploy_access_levels",
            Some(format!("protected_environment_deploy_access_levels WHERE group_id = ANY{ns}")),
        ),
        (
            "protected_environment_approval_rules",
            Some(format!("protected_environment_approval_rules WHERE group_id = ANY{ns}")),
        ),
        ("group_audit_events", None),
        ("project_audit_events", None),
        ("user_audit_events", None),
        ("instance_audit_events", None),
    ];
    if integration_tests::db::gitlab_version() != engine::migrate::GitlabVersion::V19_5 {
        checks.push(("audit_events", None));
    }
    // GitLab 19 (the uploads check covers its partitions, which the listing leaves out).
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V19_5 {
        let sp = format!("namespace_state_propagations WHERE namespace_id = ANY{ns}");
        checks.push(("namespace_state_propagations", Some(sp)));
    }
    checks
}
