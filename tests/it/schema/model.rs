//! The model per supported GitLab release (18.2, 18.8 and 18.11): it loads, every catalogue
//! statement PREPAREs on it, its marker versions tell the release, and GitLab's actions
//! and triggers behave as on GitLab (member_namespace_id cascades, the loose-FK records
//! of deleted users, namespaces and projects, the deletion period's default).

use engine::migrate::GitlabVersion;
use integration_tests::fixtures::{M, U};
use integration_tests::{Fx, TestDb};

/// An empty database with `version`'s model.
async fn model(version: GitlabVersion) -> TestDb {
    let mut db = TestDb::empty().await;
    let applied = engine::migrate::run_for(&mut db.client, version)
        .await
        .unwrap_or_else(|e| panic!("the {version} model does not load: {e}"));
    assert_eq!(applied.last().copied(), Some(version.target()), "{version}");
    db
}

/// Preflight on each release's model: the probe finds the deletion-state model that
/// release has, and every statement declared for that model PREPAREs (the invariant of
/// ARCHITECTURE.md "Statements per deletion model"); the statements declared only for
/// newer models are the ones that would not.
#[tokio::test]
async fn the_model_loads_on_every_release_and_preflight_prepares_its_statements() {
    use shared::gitlab::deletion_model::DeletionModel;
    for version in GitlabVersion::ALL {
        let db = model(version).await;
        let p = shared::preflight::prepare_catalogue(&db.client)
            .await
            .unwrap();
        let expected_model = match version {
            GitlabVersion::V18_2 => DeletionModel::Schedules,
            GitlabVersion::V18_8 => DeletionModel::StateColumns,
            GitlabVersion::V18_11 | GitlabVersion::V19_5 => DeletionModel::ScheduledAt,
        };
        assert_eq!(p.model, expected_model, "{version}");
        let failed: Vec<String> = p.failed.iter().map(|f| f.to_string()).collect();
        assert!(failed.is_empty(), "on {version}:\n{}", failed.join("\n"));
        // The columns some statements need: 19.1 added ghost_user_migrations.user_type
        // (and the other needed columns are 19.x's); the legacy audit_events went
        // before 19.5.
        let legacy_audit = ("audit_events", "id");
        let has: Vec<_> = shared::catalogue::needed_columns()
            .into_iter()
            .filter(|c| (*c == legacy_audit) != (version == GitlabVersion::V19_5))
            .collect();
        for c in shared::catalogue::needed_columns() {
            assert_eq!(
                shared::gitlab::deletion_model::has_column(&db.client, c.0, c.1)
                    .await
                    .unwrap(),
                has.contains(&c),
                "{}.{} on {version}",
                c.0,
                c.1
            );
        }
        assert_eq!(
            p.declared,
            shared::catalogue::for_model(p.model, &has).len()
        );
        // Every statement not declared for this model and its columns needs a newer
        // release: it fails here.
        let all = shared::catalogue::all();
        let others: Vec<_> = all
            .iter()
            .filter(|s| !s.models.contains(p.model) || s.needs.is_some_and(|c| !has.contains(&c)))
            .collect();
        // On the newest release only the legacy audit table's statements are not declared.
        assert_eq!(
            others.iter().all(|s| s.needs == Some(legacy_audit)),
            version == GitlabVersion::V19_5,
            "{version}"
        );
        for s in others {
            assert!(
                db.client.prepare(s.text).await.is_err(),
                "{}::{} on {version}",
                s.module,
                s.name
            );
        }
        // The newest marker version tells the release (docs/gitlab-source-notes.md §A.1).
        let newest: String = db
            .scalar("SELECT max(version) FROM schema_migrations")
            .await;
        let expected = match version {
            GitlabVersion::V18_2 => "20250709143510",
            GitlabVersion::V18_8 => "20251231013427",
            GitlabVersion::V18_11 => "20260126124047",
            GitlabVersion::V19_5 => "20260916223000",
        };
        assert_eq!(newest, expected, "{version}");
    }
}

#[tokio::test]
async fn the_releases_differ_where_gitlab_changed_the_tables() {
    let old = model(GitlabVersion::V18_2).await;
    let new = model(GitlabVersion::V18_8).await;
    let default_of = |table: &'static str, column: &'static str| {
        format!(
            "SELECT coalesce(column_default, 'none') FROM information_schema.columns
             WHERE table_name = '{table}' AND column_name = '{column}'"
        )
    };
    let users_org = default_of("users", "organization_id");
    assert_eq!(old.scalar::<String>(&users_org).await, "1");
    assert_eq!(new.scalar::<String>(&users_org).await, "none");
    let period = default_of("application_settings", "deletion_adjourned_period");
    assert_eq!(old.scalar::<String>(&period).await, "7");
    assert_eq!(new.scalar::<String>(&period).await, "30");
    let column = |table: &str, column: &str| {
        format!(
            "information_schema.columns WHERE table_name = '{table}' AND column_name = '{column}'"
        )
    };
    for (table, col) in [
        ("namespaces", "state"),
        ("namespace_details", "state_metadata"),
        ("personal_access_tokens", "group_id"),
        ("personal_access_tokens", "granular"),
    ] {
        assert!(
            !old.exists(&column(table, col)).await,
            "{table}.{col} on 18.2"
        );
        assert!(
            new.exists(&column(table, col)).await,
            "{table}.{col} on 18.8"
        );
    }
    assert!(old.exists(&column("users", "role")).await);
    assert!(!new.exists(&column("users", "role")).await);
    // 18.10 moved the deletion schedule's time into its own column (§B.1).
    let newest = model(GitlabVersion::V18_11).await;
    let scheduled_at = column("namespace_details", "deletion_scheduled_at");
    assert!(!new.exists(&scheduled_at).await);
    assert!(newest.exists(&scheduled_at).await);
    assert!(
        !newest
            .exists(&column("namespace_details", "deleted_at"))
            .await
    );
    assert_eq!(
        newest
            .scalar::<String>(&default_of("namespaces", "state"))
            .await,
        "0"
    );
    // 19.x (§A.3): state never NULL, a repository may lack a shard, ghost-user
    // migrations carry the user's type, uploads are partitioned by model type.
    let v19 = model(GitlabVersion::V19_5).await;
    let null_state = "INSERT INTO namespaces (name, path, type, organization_id, state) VALUES ('n', 'n', 'Group', 1, NULL)";
    newest.exec(&null_state.replace("'n'", "'n1'")).await;
    let err = v19
        .client
        .batch_execute(null_state)
        .await
        .expect_err("NOT NULL");
    assert!(format!("{err:?}").contains("check_9d490f2140"), "{err:?}");
    let nullable = |t: &str, c: &str| format!("{} AND is_nullable = 'YES'", column(t, c));
    assert!(
        !newest
            .exists(&nullable("project_repositories", "shard_id"))
            .await
    );
    assert!(
        v19.exists(&nullable("project_repositories", "shard_id"))
            .await
    );
    assert!(
        !newest
            .exists(&column("ghost_user_migrations", "user_type"))
            .await
    );
    assert!(
        v19.exists(&column("ghost_user_migrations", "user_type"))
            .await
    );
    let partitioned = "pg_partitioned_table WHERE partrelid = 'uploads'::regclass";
    assert!(!newest.exists(partitioned).await);
    assert!(v19.exists(partitioned).await);
    // projects_limit never has a default: every user insert must give it.
    for db in [&old, &new] {
        let err = db
            .client
            .batch_execute("INSERT INTO users (username, email, organization_id) VALUES ('x', 'x@example.com', 1)")
            .await
            .expect_err("projects_limit is NOT NULL without a default");
        assert!(format!("{err:?}").contains("projects_limit"), "{err:?}");
    }
}

#[tokio::test]
async fn a_missing_deletion_period_is_the_default_of_the_installed_release() {
    for (version, days) in [
        (GitlabVersion::V18_2, 7),
        (GitlabVersion::V18_8, 30),
        (GitlabVersion::V18_11, 30),
        (GitlabVersion::V19_5, 30),
    ] {
        let db = model(version).await;
        // No settings row: the column's default.
        let period = shared::gitlab::group_deletion::deletion_adjourned_period(&db.client)
            .await
            .unwrap();
        assert_eq!(period, days, "{version}");
        // A stored value wins over the default.
        db.exec("INSERT INTO application_settings (deletion_adjourned_period) VALUES (12)")
            .await;
        let period = shared::gitlab::group_deletion::deletion_adjourned_period(&db.client)
            .await
            .unwrap();
        assert_eq!(period, 12, "{version}");
    }
}

#[tokio::test]
async fn deleting_a_namespace_cascades_to_its_members() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    fx.members(&[M::gm(1, 101, 10, 30), M::gm(2, 100, 11, 50)])
        .await;
    db.exec("DELETE FROM routes WHERE source_id = 101; DELETE FROM namespaces WHERE id = 101")
        .await;
    // members_namespace_id → namespaces is ON DELETE CASCADE in GitLab.
    assert_eq!(db.ids("members").await, vec![2]);
    // And the namespace's delete is recorded for GitLab's loose-FK cleanup.
    assert!(
        db.exists(
            "loose_foreign_keys_deleted_records
             WHERE fully_qualified_table_name = 'public.namespaces' AND primary_key_value = 101"
        )
        .await
    );
}

#[tokio::test]
async fn a_project_delete_removes_its_namespace_and_is_recorded_for_the_loose_fk_cleanup() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.pas(&[(10, 200, 30)]).await;
    // The sync triggers: the project's insert event and its mirrored authorization.
    assert!(
        db.exists("projects_sync_events WHERE project_id = 200")
            .await
    );
    assert!(
        db.exists("project_authorizations_for_migration WHERE user_id = 10 AND project_id = 200")
            .await
    );
    // namespace_details rows come from GitLab's triggers.
    assert!(
        db.exists("namespace_details WHERE namespace_id = 100")
            .await
    );
    assert!(
        db.exists("namespace_details WHERE namespace_id = 300")
            .await
    );
    db.exec(
        "DELETE FROM routes WHERE source_type = 'Project'; DELETE FROM projects WHERE id = 200",
    )
    .await;
    // delete_associated_project_namespace removed the project namespace.
    assert!(!db.exists("namespaces WHERE id = 300").await);
    assert!(!db.exists("project_authorizations").await);
    assert!(!db.exists("project_authorizations_for_migration").await);
    let recorded: Vec<String> = db
        .client
        .query(
            "SELECT fully_qualified_table_name || ':' || primary_key_value
             FROM loose_foreign_keys_deleted_records ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        recorded,
        vec!["public.namespaces:300", "public.projects:200"]
    );
}

#[tokio::test]
async fn the_default_organization_cannot_be_deleted() {
    let db = TestDb::new().await;
    let err = db
        .client
        .batch_execute("DELETE FROM organizations WHERE id = 1")
        .await
        .expect_err("GitLab's trigger refuses");
    assert!(
        format!("{err:?}").contains("default Organization"),
        "{err:?}"
    );
}
