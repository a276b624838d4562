//! The model of GitLab's schema (behaviour §S): exactly the modelled GitLab tables in
//! `public`, indexed foreign keys, and code that works with GitLab's `int4` ids and
//! `integer[]` traversal ids (behaviour §S1.3). `model`: both releases' models, GitLab's
//! triggers and actions; `ghost`: the ghost user and user deletion on the model.

mod ghost;
mod model;

use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use shared::Function;

#[tokio::test]
async fn public_holds_exactly_the_modelled_gitlab_tables() {
    let db = TestDb::new().await;
    let rows = db
        .client
        .query(
            "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let tables: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    let mut expected = vec![
        "application_settings",
        "ghost_user_migrations",
        "group_deletion_schedules",
        "group_group_links",
        "import_placeholder_user_details",
        "import_source_users",
        "issues",
        "loose_foreign_keys_deleted_records",
        "member_roles",
        "members",
        "members_deletion_schedules",
        "merge_requests",
        "namespace_details",
        "namespaces",
        "namespaces_sync_events",
        "notes",
        "notification_settings",
        "organization_users",
        "organizations",
        "personal_access_tokens",
        "project_authorizations",
        "project_authorizations_for_migration",
        "project_group_links",
        "projects",
        "projects_sync_events",
        "routes",
        "schema_migrations",
        "user_details",
        "users",
        "web_hooks",
        // GitLab's blocking keys into projects and namespaces.
        "container_repositories",
        "packages_debian_group_distributions",
        "packages_debian_project_distributions",
        "project_requirement_compliance_statuses",
        "project_saved_replies",
        // Where a project's storage lives (issue 37).
        "lfs_objects",
        "lfs_objects_projects",
        "packages_package_files",
        "packages_packages",
        "project_repositories",
        // A repository storage move in progress holds a project back (issue 46).
        "project_repository_storage_moves",
        "shards",
        "snippet_repositories",
        "snippets",
        "uploads",
        // What GitLab writes beside a membership removal (docs/gitlab-differences.md
        // D3); the audit tables with the model's default partition.
        "events",
        "issue_assignees",
        "project_features",
        "todos",
        "user_highest_roles",
        "group_audit_events",
        "group_audit_events_default",
        "instance_audit_events",
        "instance_audit_events_default",
        "project_audit_events",
        "project_audit_events_default",
        "user_audit_events",
        "user_audit_events_default",
        // EE's rows of a user a membership removal deletes (D3).
        "identities",
        "protected_branch_merge_access_levels",
        "protected_branch_push_access_levels",
        "protected_branches",
        "protected_environment_approval_rules",
        "protected_environment_deploy_access_levels",
        "protected_environments",
        "saml_providers",
    ];
    // The legacy audit table, gone by GitLab 19.5.
    if integration_tests::db::gitlab_version() != engine::migrate::GitlabVersion::V19_5 {
        expected.extend(["audit_events", "audit_events_default"]);
    }
    // Created by GitLab 18.5.
    if integration_tests::db::gitlab_version() != engine::migrate::GitlabVersion::V18_2 {
        expected.push("virtual_registries_container_cache_entries");
    }
    // GitLab 19: the state propagations, and the partitions of uploads the model has.
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V19_5 {
        expected.extend([
            "namespace_state_propagations",
            "namespace_uploads",
            "other_uploads",
            "project_uploads",
            "snippet_uploads",
            "user_uploads",
        ]);
    }
    expected.sort();
    assert_eq!(tables, expected);
    // The default organization exists with id 1.
    assert_eq!(
        db.scalar::<String>("SELECT path FROM organizations WHERE id = 1")
            .await,
        "default"
    );
}

#[tokio::test]
async fn every_foreign_key_column_has_an_index_led_by_it() {
    let db = TestDb::new().await;
    let missing: Vec<String> = db
        .client
        .query(
            "SELECT c.conrelid::regclass::text || '.' || a.attname
             FROM pg_constraint c
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
             WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace
               AND NOT EXISTS (SELECT 1 FROM pg_index i
                               WHERE i.indrelid = c.conrelid AND i.indkey[0] = c.conkey[1])
             ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    // namespaces.organization_id and projects.organization_id have their own indexes;
    // anything listed here would make a cascade scan a whole table.
    assert!(
        missing.is_empty(),
        "foreign keys without an index: {missing:?}"
    );
}

#[tokio::test]
async fn b38_works_with_int4_ids_and_integer_traversal_ids() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.int4_ids(false).await;
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11), U::bot(20)]).await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::gm(2, 101, 10, 30).expires("2025-03-09"),
        M::pm(3, 200, 20, 40).expires("2025-03-09"),
        M::gm(4, 100, 10, 10),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (20, 200, 40)]).await;
    let mut r = db.runner(t("2025-03-10T00:10:00Z"));
    let body = r.cron_message(Function::RemoveExpiredMembers).to_body();
    r.run_until_idle(Function::RemoveExpiredMembers, &body)
        .await
        .unwrap();
    assert_eq!(db.ids("members").await, vec![1, 4]);
    assert_eq!(db.pas().await, vec![(10, 200, 10)]);
    assert!(!db.exists("users WHERE id = 20").await);
    assert_eq!(r.exit_code(false), 0);
}

/// The statement catalogue against the migrated schema: every statement the functions
/// can run PREPAREs (a renamed column, a changed type or a missing table fails here,
/// naming the statement).
#[tokio::test]
async fn every_statement_of_the_catalogue_prepares_on_the_schema() {
    let db = TestDb::new().await;
    let model = shared::gitlab::deletion_model::probe(&db.client)
        .await
        .unwrap();
    let all = shared::preflight::declared(&db.client, model)
        .await
        .unwrap();
    assert!(!all.is_empty());
    let mut failed = Vec::new();
    for s in &all {
        if let Err(e) = db.client.prepare(s.text).await {
            failed.push(format!(
                "{}::{}: {}",
                s.module,
                s.name,
                shared::Error::from(e)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} statements do not prepare:\n{}",
        failed.len(),
        all.len(),
        failed.join("\n")
    );
}

/// The catalogue test catches a schema change: with `members.expires_at` renamed, the
/// B38 page statements fail to prepare, and a statement that does not mention the
/// column still prepares.
#[tokio::test]
async fn a_renamed_column_fails_the_statements_that_use_it() {
    let db = TestDb::new().await;
    db.client
        .batch_execute("ALTER TABLE members RENAME COLUMN expires_at TO expires_on")
        .await
        .unwrap();
    let all = shared::catalogue::all();
    let b38: Vec<_> = all
        .iter()
        .filter(|s| s.module == "batches::remove_expired_members" && s.name.starts_with("PAGE"))
        .collect();
    assert!(
        !b38.is_empty(),
        "the B38 page statements are in the catalogue"
    );
    for s in b38 {
        let err = db.client.prepare(s.text).await.expect_err(s.name);
        assert!(
            err.to_string().contains("expires_at") || format!("{err:?}").contains("expires_at"),
            "{}: {err:?}",
            s.name
        );
    }
    let untouched = all
        .iter()
        .find(|s| !s.text.contains("expires_at") && s.text.contains("members"))
        .expect("a statement on members without expires_at");
    db.client.prepare(untouched.text).await.unwrap();
}
