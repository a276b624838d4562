//! group-destroy on GitLab's blocking foreign keys (docs/gitlab-differences.md, "Rows
//! that block a group's deletion"): rows only GitLab's services can delete (a container
//! repository, a Debian distribution, an unknown table's rows) end the message once as
//! `blocked` with every row of the database intact and the group restorable; rows
//! GitLab deletes in the database (saved replies, compliance statuses) go with their
//! parent; a blocking row created during the destroy ends it blocked, not in a retry
//! loop; without these tables the destroy works as before.

use shared::gitlab::blockers;
use shared::gitlab::group_deletion::{self, Expected, Restore};

use super::*;

async fn container_repository(db: &TestDb, id: i64, project: i64) {
    db.exec(&format!(
        "INSERT INTO container_repositories (id, project_id, name, created_at, updated_at)
         VALUES ({id}, {project}, 'app{id}', '2025-03-01', '2025-03-01')"
    ))
    .await;
}

async fn group_distribution(db: &TestDb, id: i64, group: i64) {
    db.exec(&format!(
        "INSERT INTO packages_debian_group_distributions (id, group_id, codename, created_at, updated_at)
         VALUES ({id}, {group}, 'bookworm{id}', '2025-03-01', '2025-03-01')"
    ))
    .await;
}

/// A saved reply of `project` and a compliance status of `project` in `namespace`.
async fn category_a_rows(db: &TestDb, id: i64, project: i64, namespace: i64) {
    db.exec(&format!(
        "INSERT INTO project_saved_replies (id, project_id, name, content, created_at, updated_at)
         VALUES ({id}, {project}, 'r{id}', 'thanks', '2025-03-01', '2025-03-01');
         INSERT INTO project_requirement_compliance_statuses
           (id, project_id, namespace_id, compliance_requirement_id, compliance_framework_id, created_at, updated_at)
         VALUES ({id}, {project}, {namespace}, {id}, 1, '2025-03-01', '2025-03-01');"
    ))
    .await;
}

/// The fixture with contributions, memberships and category-(a) rows, whose whole
/// state a blocked destroy must leave as it was.
async fn busy_fixture() -> TestDb {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(50, 200, 10, 30)]).await;
    fx.contribution("issues", 1, 200, 10).await;
    fx.contribution("notes", 2, 201, 10).await;
    category_a_rows(&db, 1, 200, 101).await;
    db
}

/// Restore the group as GitLab's UI would: the schedule is still there and due.
async fn assert_restorable(db: &TestDb) {
    let mut c = db.session().await;
    let tx = c.transaction().await.unwrap();
    let cutoff = group_deletion::cutoff(d("2025-03-10"), 7);
    let model = shared::gitlab::deletion_model::probe(&tx).await.unwrap();
    let r = group_deletion::restore_group(
        &tx,
        model,
        100,
        t(NOW),
        Expected {
            user_id: 11,
            cutoff,
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(r, Restore::Restored { .. }), "{r:?}");
    assert_eq!(name_and_path(db, 100).await.1, "acme");
}

#[tokio::test]
async fn a_container_repository_blocks_the_group_with_every_row_intact_and_restorable() {
    let db = busy_fixture().await;
    container_repository(&db, 7, 200).await;
    let before = db.snapshot().await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(
        run.outcome, "success",
        "acknowledged once: no retry, no DLQ"
    );
    assert!(r.queue().pop().is_none(), "no re-send");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(db.snapshot().await, before, "not one row changed");
    let e = log.one("Group destroy blocked: rows that only GitLab's services can delete refer to the group; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run");
    assert_eq!(e["level"], "error");
    assert_eq!(e["blocking_rows"], 1);
    assert_eq!(
        e["blocking"],
        "container_repositories.project_id (fk_rails_32f7bf5aad, NO ACTION): 1 row(s) \
         (1 for project acme-deletion_scheduled-100/web/site (200)): delete the project's \
         container images in the container registry (GitLab UI: Deploy > Container registry, \
         or API DELETE /projects/:id/registry/repositories/:repository_id); GitLab deletes \
         the rows with the images"
    );
    let done = log.done();
    assert_eq!(done["status"], "blocked");
    assert_eq!(done["outcome"], "blocked");
    assert_eq!(done["blocking_rows"], 1);
    assert_eq!(done["projects_deleted"], 0);
    let emf = log.one("metrics");
    assert_eq!(emf["groups_blocked"], 1.0);
    assert_eq!(emf["blocking_rows"], 1.0);
    assert_restorable(&db).await;
}

#[tokio::test]
async fn once_the_images_are_gone_the_next_run_destroys_the_group() {
    let db = busy_fixture().await;
    container_repository(&db, 7, 200).await;
    let (_, log, _) = destroy_once(&db).await;
    assert_eq!(log.done()["status"], "blocked");
    // What GitLab does when the operator deletes the images in the registry.
    db.exec("DELETE FROM container_repositories").await;
    let (_, log, _) = destroy_once(&db).await;
    assert_eq!(log.done()["status"], "completed");
    assert!(!db.exists("namespaces").await);
    assert_eq!(log.one("metrics")["blocking_rows"], 0.0);
}

#[tokio::test]
async fn a_debian_distribution_of_a_subgroup_blocks_the_group_with_every_row_intact() {
    let db = busy_fixture().await;
    group_distribution(&db, 3, 101).await;
    let before = db.snapshot().await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(db.snapshot().await, before, "not one row changed");
    let blocking = log.one("Group destroy blocked: rows that only GitLab's services can delete refer to the group; nothing was deleted. Do what each entry says, then the group deletion resumes at the next cron run")["blocking"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        blocking.starts_with(
            "packages_debian_group_distributions.group_id (fk_rails_0adf75c347, RESTRICT): \
             1 row(s) (1 for namespace acme-deletion_scheduled-100/web (101)): delete the \
             group's Debian distributions through GitLab"
        ),
        "{blocking}"
    );
    assert_eq!(log.done()["status"], "blocked");
    assert_restorable(&db).await;
}

#[tokio::test]
async fn saved_replies_and_compliance_statuses_go_with_their_project_and_group() {
    let db = busy_fixture().await;
    category_a_rows(&db, 2, 201, 100).await;
    // A status whose project lies elsewhere but whose namespace is a subgroup.
    Fx(&db).group(900, "other", None).await;
    Fx(&db).project(901, 900).await;
    category_a_rows(&db, 3, 901, 101).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(log.done()["status"], "completed");
    assert!(
        !db.exists("namespaces WHERE id IN (100, 101, 300, 301)")
            .await
    );
    assert!(!db.exists("projects WHERE id IN (200, 201)").await);
    assert_eq!(db.ids("project_saved_replies").await, vec![3]);
    assert!(!db.exists("project_requirement_compliance_statuses").await);
    assert!(db.exists("projects WHERE id = 901").await);
}

#[tokio::test]
async fn the_saved_replies_no_action_key_fires_before_the_cascade_one() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO project_saved_replies (project_id, name, content, created_at, updated_at)
         VALUES (201, 'r', 'c', '2025-03-01', '2025-03-01')",
    )
    .await;
    let e = db
        .client
        .execute("DELETE FROM projects WHERE id = 201", &[])
        .await
        .unwrap_err();
    let e = e.as_db_error().unwrap();
    assert_eq!(e.code().code(), "23503");
    assert_eq!(e.constraint(), Some("fk_rails_0ace76afbb"));
}

#[tokio::test]
async fn a_blocking_row_created_during_the_destroy_ends_it_blocked_not_retried() {
    let db = fixture().await;
    // A container repository created for P201 just as its chunk deletes it: after the
    // scan, inside the chunk's transaction.
    db.exec(
        "CREATE FUNCTION late_image() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF OLD.id = 201 THEN
             INSERT INTO container_repositories (project_id, name, created_at, updated_at)
             VALUES (OLD.id, 'late', '2025-03-10', '2025-03-10');
           END IF;
           RETURN OLD;
         END $$;
         CREATE TRIGGER late_image BEFORE DELETE ON projects
           FOR EACH ROW EXECUTE FUNCTION late_image();",
    )
    .await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success", "blocked, not a retry loop");
    assert!(r.queue().pop().is_none(), "no re-send");
    let e = log.one("Group destroy blocked: rows that only GitLab's services can delete appeared during the deletion; the chunk was rolled back. Do what each entry says, then the group deletion resumes at the next cron run");
    assert_eq!(e["constraint"], "fk_rails_32f7bf5aad");
    assert_eq!(e["table"], "container_repositories");
    assert_eq!(log.done()["status"], "blocked");
    // The chunk rolled back: P201 and its namespace are there, the late row is not.
    assert!(db.exists("projects WHERE id = 201").await);
    assert!(db.exists("namespaces WHERE id IN (100, 301)").await);
    assert!(!db.exists("container_repositories").await);
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
}

#[tokio::test]
async fn without_the_blocking_tables_the_scan_finds_nothing_and_the_destroy_works() {
    let db = fixture().await;
    db.exec(
        "DROP TABLE IF EXISTS container_repositories, project_saved_replies,
           packages_debian_project_distributions, packages_debian_group_distributions,
           project_requirement_compliance_statuses, virtual_registries_container_cache_entries",
    )
    .await;
    assert!(blockers::keys(&db.client).await.unwrap().is_empty());
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(log.done()["status"], "completed");
    assert!(!db.exists("namespaces").await);
}

#[tokio::test]
async fn an_unknown_blocking_table_with_an_odd_name_is_quoted_counted_and_blocks() {
    let db = fixture().await;
    db.exec(
        r#"CREATE TABLE "Odd Table" ("Project Id" bigint REFERENCES projects (id));
           INSERT INTO "Odd Table" VALUES (200), (200), (201);"#,
    )
    .await;
    let keys = blockers::keys(&db.client).await.unwrap();
    let tree = blockers::tree(&db.client, 100).await.unwrap();
    assert_eq!(tree.projects, vec![200, 201]);
    assert_eq!(tree.namespaces, vec![100, 101, 300, 301]);
    let found = blockers::scan(&db.client, &keys, &tree).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].key.table, "Odd Table");
    assert_eq!(
        found[0].parents,
        vec![
            (200, Some("acme-deletion_scheduled-100/web/site".into()), 2),
            (201, Some("acme-deletion_scheduled-100/p201".into()), 1)
        ]
    );
    let (_, log, _) = destroy_once(&db).await;
    assert_eq!(log.done()["status"], "blocked");
    assert_eq!(log.done()["blocking_rows"], 3);
    assert_eq!(db.count(r#""Odd Table""#).await, 3);
    assert_eq!(db.count("projects").await, 2);
}

#[tokio::test]
async fn registry_cache_entries_of_a_group_block_it() {
    let db = fixture().await;
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V18_2 {
        // GitLab 18.2 has no such table (created in 18.5); the destroy without the
        // blocking tables is `without_the_blocking_tables_the_scan_finds_nothing_and_the_destroy_works`' case.
        assert!(
            !db.exists("pg_tables WHERE tablename = 'virtual_registries_container_cache_entries'")
                .await
        );
        return;
    }
    db.exec(
        "INSERT INTO virtual_registries_container_cache_entries
           (group_id, upstream_id, created_at, updated_at, size, file_sha1, relative_path, file, object_storage_key)
         VALUES (101, 1, '2025-03-01', '2025-03-01', 10, decode(repeat('ab', 20), 'hex'), '/a', 'f', 'k1'),
                (101, 1, '2025-03-01', '2025-03-01', 10, decode(repeat('ab', 20), 'hex'), '/b', 'f', 'k2')",
    )
    .await;
    let (_, log, _) = destroy_once(&db).await;
    assert_eq!(log.done()["status"], "blocked");
    assert_eq!(
        log.done()["blocking_rows"],
        2,
        "a partitioned table counted once"
    );
    assert_eq!(db.count("namespaces").await, 4);
}
