//! group-destroy, the child of B51 (behaviour §B51.4): a due group is destroyed depth
//! first with everything that refers to it, in chunks when its budget is spent
//! (contributions a thousand at a time before their project), resent up to the hop
//! limit, finished on redelivery after an interruption; a second copy finding the group
//! lock held changes nothing; an orphan project namespace goes with the group, a row it
//! cannot delete blocks it once; malformed messages, the sample events and the demo
//! data.

use super::*;
use crate::assert::{
    assert_fields, assert_hop_limit_reached, assert_message, assert_sent_one, assert_user_state,
};

/// The extra data of scenario 7.
async fn full_fixture() -> TestDb {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.users(&[U::human(10), U::human(12), U::bot(20), U::placeholder(30)])
        .await;
    fx.members(&[
        M::pm(50, 200, 10, 30),
        M::gm(51, 101, 12, 40),
        M::pm(52, 200, 20, 40),
    ])
    .await;
    fx.pas(&[(10, 200, 30), (12, 200, 40), (20, 200, 40)]).await;
    fx.pat(1, 20, None).await;
    fx.notification(10, "Project", 200).await;
    fx.notification(12, "Namespace", 101).await;
    fx.notification(11, "Namespace", 100).await;
    db.exec(
        "INSERT INTO web_hooks (id, project_id, type) VALUES (1, 200, 'ProjectHook');
         INSERT INTO web_hooks (id, group_id, type) VALUES (2, 100, 'GroupHook');
         INSERT INTO members_deletion_schedules (namespace_id, user_id, scheduled_by_id, created_at, updated_at)
           VALUES (100, 10, 11, '2025-03-01', '2025-03-01');
         INSERT INTO import_placeholder_user_details (id, placeholder_user_id, namespace_id, organization_id, created_at, updated_at)
           VALUES (1, 30, 100, 1, '2025-03-01', '2025-03-01');
         INSERT INTO import_source_users (placeholder_user_id, namespace_id, source_user_identifier, source_hostname, import_type, created_at, updated_at)
           VALUES (30, 100, '42', 'https://github.com', 'github', '2025-03-01', '2025-03-01');",
    )
    .await;
    db
}

#[tokio::test]
async fn a_due_group_is_destroyed_depth_first_with_everything_that_refers_to_it() {
    let db = full_fixture().await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert!(!db.exists("projects").await);
    assert!(
        !db.exists("namespaces WHERE id IN (100, 101, 300, 301)")
            .await
    );
    assert!(!db.exists("routes").await);
    assert!(!db.exists("members WHERE id IN (1, 50, 51, 52)").await);
    assert!(!db.exists("web_hooks").await);
    assert!(db.pas().await.is_empty());
    assert!(!db.exists("group_deletion_schedules").await);
    assert!(!db.exists("members_deletion_schedules").await);
    assert!(!db.exists("import_source_users").await);
    assert!(!db.exists("notification_settings").await);
    assert!(
        db.exists("import_placeholder_user_details WHERE id = 1 AND namespace_id IS NULL")
            .await
    );
    // The bot: blocked, token revoked, ghost migration by U11, delete-user queued.
    assert_user_state(&db, 20, "blocked").await;
    assert!(
        db.scalar::<bool>("SELECT revoked FROM personal_access_tokens WHERE id = 1")
            .await
    );
    assert_eq!(
        db.scalar::<i64>("SELECT initiator_user_id FROM ghost_user_migrations WHERE user_id = 20")
            .await,
        11
    );
    assert_sent_one(
        &r.runs[0].sent,
        json!({
            "receiver": Function::DeleteUser.name(),
            "delay_s": 30,
            "message_key": "delete-user:20",
            "payload": {"user_id": 20, "initiator_user_id": 11, "reason": "Group deleted"}
        }),
    );
    // Humans stay users.
    assert_eq!(
        db.ids("users WHERE state = 'active'").await,
        vec![10, 11, 12, 30]
    );
    assert_fields(
        &log.one("Group destroyed"),
        json!({
            "level": "info",
            "group_id": 100,
            "user_id": 11,
            "projects_deleted": 2,
            "groups_deleted": 2,
            "hop": 0
        }),
    );
    assert_eq!(log.done()["status"], "completed");
    // A duplicate after completion is stale.
    let (log2, _g) = capture();
    let mut r2 = db.runner(t("2025-03-10T02:05:00Z"));
    let (run2, _) = r2
        .invoke(GD, &destroy_body(100, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    assert_eq!(run2.outcome, "success");
    log2.one("Group destroy skipped: group not found");
    assert_eq!(log2.done()["status"], "stale");
}

#[tokio::test]
async fn an_admin_without_memberships_may_destroy_the_group() {
    let db = fixture().await;
    Fx(&db).users(&[U::human(1).admin()]).await;
    db.exec("UPDATE group_deletion_schedules SET user_id = 1")
        .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.invoke(GD, &destroy_body(100, 1, "2025-03-03"), 1)
        .await
        .unwrap();
    log.one("Group destroyed");
    assert!(!db.exists("namespaces WHERE type = 'Group'").await);
}

#[tokio::test]
async fn with_no_budget_each_invocation_runs_one_chunk_deepest_first() {
    let db = fixture().await;
    let settings = Settings {
        group_destroy_budget: Duration::ZERO,
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let (run, _) = r
        .invoke(GD, &destroy_body(100, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success");
    // Invocation 1: project P200 (in the deepest group G101).
    assert!(!db.exists("projects WHERE id = 200").await);
    assert!(db.exists("namespaces WHERE id = 101").await);
    assert!(db.exists("projects WHERE id = 201").await);
    assert_message(
        &r.runs[0].sent[0].message,
        json!({
            "receiver": GD.name(),
            "delay_s": 0,
            "hop": 1,
            "message_key": "group-destroy:100:2025-03-03:11",
            "payload": {"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"}
        }),
    );
    assert_fields(
        &log.with_message("Group destroy continuing")[0],
        json!({"group_id": 100, "hop": 1, "projects_deleted": 1, "groups_deleted": 0}),
    );
    // Invocation 2: group G101.
    deliver_next(&mut r).await;
    assert!(!db.exists("namespaces WHERE id = 101").await);
    assert!(db.exists("projects WHERE id = 201").await);
    // Invocation 3: project P201.
    deliver_next(&mut r).await;
    assert!(!db.exists("projects WHERE id = 201").await);
    assert!(db.exists("namespaces WHERE id = 100").await);
    // Invocation 4: group G100, and nothing more is sent.
    let last = deliver_next(&mut r).await;
    assert!(!db.exists("namespaces WHERE id = 100").await);
    assert!(last.sent.is_empty());
    assert_eq!(r.queue().pending_len(), 0);
    let hops: Vec<_> = r.runs.iter().map(|x| x.hop.unwrap()).collect();
    assert_eq!(hops, vec![0, 1, 2, 3]);
    let destroyed = log.one("Group destroyed");
    assert_eq!(destroyed["hop"], 3);
    assert_eq!(log.with_message("Group destroy continuing").len(), 3);
}

#[tokio::test]
async fn contributions_go_in_chunks_of_a_thousand_before_the_project() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO issues (id, project_id, author_id, namespace_id, work_item_type_id) SELECT g, 200, 11, (SELECT project_namespace_id FROM projects WHERE id = 200), 1 FROM generate_series(1, 1500) g;
         INSERT INTO notes (id, project_id, author_id, noteable_type) VALUES (1, 200, 11, 'Issue'), (2, 200, 11, 'Issue');",
    )
    .await;
    let settings = Settings {
        group_destroy_budget: Duration::ZERO,
        ..Default::default()
    };
    let (mut r, _log, _) = destroy_with(&db, 100, settings).await;
    // Invocation 1: the 1,000 lowest issue ids.
    assert_eq!(db.ids("issues").await, (1001..=1500).collect::<Vec<i64>>());
    assert!(db.exists("projects WHERE id = 200").await);
    assert_eq!(r.runs[0].sent[0].message.envelope.hop, 1);
    // Invocation 2: the other 500.
    let run = deliver_next(&mut r).await;
    assert_eq!(db.count("issues").await, 0);
    assert_eq!(db.count("notes").await, 2);
    assert_eq!(run.sent[0].message.envelope.hop, 2);
    // Invocation 3: no issue or merge request left; the 2 notes.
    let run = deliver_next(&mut r).await;
    assert_eq!(db.count("notes").await, 0);
    assert!(db.exists("projects WHERE id = 200").await);
    assert_eq!(run.sent[0].message.envelope.hop, 3);
    assert_eq!(
        run.report.as_ref().unwrap().to_json()["contributions_deleted"],
        2
    );
    // Invocation 4: the chunk "project P200".
    let run = deliver_next(&mut r).await;
    assert!(!db.exists("projects WHERE id = 200").await);
    assert!(db.exists("namespaces WHERE id = 101").await);
    assert_eq!(run.sent[0].message.envelope.hop, 4);
    // The rest as with no contributions: G101, P201, G100.
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 7);
    assert!(!db.exists("namespaces WHERE id = 100").await);
}

#[tokio::test]
async fn a_resend_past_the_hop_limit_is_not_sent() {
    let db = fixture().await;
    let settings = Settings {
        group_destroy_budget: Duration::ZERO,
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let mut env: Envelope = serde_json::from_str(&destroy_body(100, 11, "2025-03-03")).unwrap();
    env.hop = 1000;
    let (run, _) = r.invoke(GD, &env.to_body(), 1).await.unwrap();
    assert_hop_limit_reached(&log, &run, 1000);
    assert!(log.with_message("Group destroy continuing").is_empty());
}

#[tokio::test]
async fn a_destroy_interrupted_after_half_the_projects_finishes_on_redelivery() {
    let db = full_fixture().await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON projects FOR EACH ROW WHEN (OLD.id = 201) EXECUTE FUNCTION boom();",
    )
    .await;
    let (mut r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "retryable");
    assert_fields(
        &log.one("Group destroy failed"),
        json!({"level": "error", "group_id": 100, "error": "boom", "error_class": "db"}),
    );
    // P200 and G101 are gone; P201's chunk rolled back as a whole.
    assert!(!db.exists("projects WHERE id = 200").await);
    assert!(!db.exists("namespaces WHERE id = 101").await);
    assert!(db.exists("projects WHERE id = 201").await);
    assert!(
        db.exists("routes WHERE source_type = 'Project' AND source_id = 201")
            .await
    );
    assert!(db.exists("namespaces WHERE id = 301").await);
    // The bot's phase 1 committed with P200's chunk: its message was sent then.
    assert_eq!(r.runs[0].sent.len(), 1);
    db.exec("DROP TRIGGER boom ON projects").await;
    let (log2, _g) = capture();
    let (run2, _) = r
        .invoke(GD, &destroy_body(100, 11, "2025-03-03"), 2)
        .await
        .unwrap();
    assert_eq!(run2.outcome, "success");
    assert_fields(
        &log2.one("Group destroyed"),
        json!({"projects_deleted": 1, "groups_deleted": 1}),
    );
    assert!(
        !db.exists("namespaces WHERE type IN ('Group', 'Project')")
            .await
    );
    assert!(!db.exists("routes").await);
}

#[tokio::test]
async fn a_second_copy_finding_the_group_lock_held_ends_without_changes() {
    let db = fixture().await;
    let other = db.session().await;
    let key = shared::locks::lock_key("group-destroy:100");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let before = snapshot(&db).await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: already in progress")["level"],
        "info"
    );
    assert_eq!(log.done()["status"], "skipped");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(snapshot(&db).await, before);
    other
        .execute("SELECT pg_advisory_unlock($1)", &[&key])
        .await
        .unwrap();
    destroy_once(&db).await;
    assert!(!db.exists("namespaces WHERE id = 100").await);
}

#[tokio::test]
async fn a_group_with_an_orphan_project_namespace_is_destroyed_with_it_in_one_delivery() {
    let db = fixture().await;
    // A project namespace below G101 whose project row is gone, with its route.
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
         VALUES (350, 'lost', 'lost', 'Project', 101, ARRAY[100, 101, 350], '2024-01-01', '2024-01-01', 1);
         INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
         VALUES (350, 'Namespace', 'acme-deletion_scheduled-100/web/lost', 'lost', 350, '2024-01-01', '2024-01-01');",
    )
    .await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(r.runs.len(), 1, "no retry");
    assert!(!db.exists("namespaces").await);
    assert!(!db.exists("routes").await);
    assert_fields(
        &log.one("Group destroy removed an orphan project namespace"),
        json!({"namespace_id": 350, "parent_id": 101}),
    );
    assert_eq!(log.done()["outcome"], "destroyed");
}

#[tokio::test]
async fn a_group_blocked_by_a_row_it_cannot_delete_ends_once_with_a_line_naming_it() {
    let db = fixture().await;
    // A project namespace below G101 that a project elsewhere still uses: not an orphan.
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
         VALUES (900, 'other', 'other', 'Group', NULL, ARRAY[900], '2024-01-01', '2024-01-01', 1);
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
         VALUES (350, 'odd', 'odd', 'Project', 101, ARRAY[100, 101, 350], '2024-01-01', '2024-01-01', 1);
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id)
         VALUES (950, 'odd', 'odd', 900, 350, 1);",
    )
    .await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success", "acknowledged: never a retry loop");
    assert!(r.queue().pop().is_none(), "no re-send");
    let e = log.one("Group destroy blocked: rows below the group cannot be deleted; an operator must move or delete them, then the next cron run destroys the group");
    assert_eq!(e["level"], "error");
    assert!(e["blocking"]
        .as_str()
        .unwrap()
        .contains("namespace 350 (Project) in group 101"));
    assert!(db.exists("projects WHERE id = 950").await);
    assert_eq!(log.done()["status"], "blocked");
}

#[tokio::test]
async fn a_destroy_message_without_user_id_is_malformed() {
    let db = fixture().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let mut env: Envelope = serde_json::from_str(&destroy_body(100, 11, "2025-03-03")).unwrap();
    env.payload = json!({"group_id": 100, "marked_for_deletion_on": "2025-03-03"});
    let (run, _) = r.invoke(GD, &env.to_body(), 1).await.unwrap();
    assert_eq!(run.outcome, "permanent");
    assert!(log.one("malformed message")["error"]
        .as_str()
        .unwrap()
        .contains("user_id"));
    assert!(db.exists("namespaces WHERE id = 100").await);
}

#[tokio::test]
async fn the_sample_events_parse_for_their_functions() {
    for (f, path) in [
        (CRON, "events/adjourned-group-deletion.json"),
        (GD, "events/group-destroy.json"),
    ] {
        let p = format!("{}/../{path}", env!("CARGO_MANIFEST_DIR"));
        let ev: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let body = ev["Records"][0]["body"].as_str().unwrap();
        let env = Envelope::parse(body, f).unwrap();
        assert_eq!(env.kind, f.run_type());
    }
}

#[tokio::test]
async fn the_demo_data_destroys_oldco_restores_labs_and_keeps_newco() {
    let db = TestDb::new().await;
    let mut c = db.connector().connect("hk").await.unwrap();
    lab::demo::seed(&mut c, d("2025-03-10")).await.unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(CRON).to_body();
    r.run_until_idle(CRON, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0, "{}", log.dump());
    assert!(
        !db.exists("namespaces WHERE id IN (4100, 4101, 4300, 4301)")
            .await
    );
    assert!(!db.exists("projects WHERE id IN (4200, 4201)").await);
    assert!(!db.exists("users WHERE id = 4003").await, "the site bot");
    assert_eq!(
        name_and_path(&db, 4110).await,
        ("labs".into(), "labs".into())
    );
    assert_eq!(route(&db, "Project", 4210).await.0, "labs/lab");
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 4120")
            .await
    );
    assert!(
        !db.exists("group_deletion_schedules WHERE group_id IN (4100, 4110)")
            .await
    );
    assert_eq!(log.one("Group destroyed")["projects_deleted"], 2);
    log.one("Group restored: scheduling user cannot remove group");
}
