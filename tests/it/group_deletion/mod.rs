//! B51 adjourned-group-deletion and group-destroy: every acceptance scenario of
//! behaviour §B51.9, plus stale and replayed messages, interrupted
//! destroys, locks, the deadline continuation and a large tree destroyed until idle.

use std::time::Duration;

use hk::local::{Run, Runner};
use integration_tests::fixtures::{M, U};
use integration_tests::{d, t, wait, Fx, TestDb};
use serde_json::json;
use shared::config::Settings;
use shared::messages::{group_destroy_key, Envelope, GroupDestroyRun};
use shared::queue::schedule_name;
use shared::telemetry::{capture, Captured};
use shared::Function;

mod at_scale;

const NOW: &str = "2025-03-10T02:00:00Z";
const CRON: Function = Function::AdjournedGroupDeletion;
const GD: Function = Function::GroupDestroy;

async fn schedule(db: &TestDb, group: i64, user: i64, marked: &str) {
    db.exec(&format!(
        "INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES ({group}, {user}, '{marked}')"
    ))
    .await;
}

async fn period(db: &TestDb, id: i64, days: i32) {
    db.exec(&format!(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES ({id}, {days}, '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// The fixture of behaviour §B51.9: G100 "acme-deletion_scheduled-100"; G101 "web" < G100; P200
/// "site" in G101 (project namespace 300); P201 in G100 (301); U11(human, active);
/// M1: GM G100 U11 50; SCH(100, 11, 2025-03-03); period 7.
async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.project(201, 100).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    period(&db, 1, 7).await;
    schedule(&db, 100, 11, "2025-03-03").await;
    db
}

/// One invocation of the cron message at `now`.
async fn cron_at(db: &TestDb, now: &str) -> (Runner, Captured) {
    let (log, _g) = capture();
    let mut r = db.runner(t(now));
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    (r, log)
}

async fn cron_once(db: &TestDb) -> (Runner, Captured) {
    cron_at(db, NOW).await
}

fn destroy_body(group: i64, user: i64, marked: &str) -> String {
    Envelope::new(
        "group-destroy.run",
        group_destroy_key(group, d(marked), user),
        "run-1",
        t(NOW),
        GroupDestroyRun {
            group_id: group,
            user_id: user,
            marked_for_deletion_on: d(marked),
        },
    )
    .to_body()
}

/// One `group-destroy.run {group, 11, '2025-03-03'}` at NOW with `settings`.
async fn destroy_with(db: &TestDb, group: i64, settings: Settings) -> (Runner, Captured, Run) {
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let (run, _) = r
        .invoke(GD, &destroy_body(group, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    (r, log, run)
}

async fn destroy_once(db: &TestDb) -> (Runner, Captured, Run) {
    destroy_with(db, 100, Settings::default()).await
}

/// Deliver the next pending message of the runner's queue.
async fn deliver_next(r: &mut Runner) -> Run {
    let p = r.queue().pop().expect("a pending message");
    let (run, _) = r
        .invoke(
            p.message.receiver,
            &p.message.envelope.to_body(),
            p.receive_count,
        )
        .await
        .unwrap();
    run
}

/// `(path, name)` of a route.
async fn route(db: &TestDb, source_type: &str, id: i64) -> (String, String) {
    let r = db
        .client
        .query_one(
            "SELECT path, name FROM routes WHERE source_type = $1 AND source_id = $2",
            &[&source_type, &id],
        )
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

async fn name_and_path(db: &TestDb, id: i64) -> (String, String) {
    let r = db
        .client
        .query_one("SELECT name, path FROM namespaces WHERE id = $1", &[&id])
        .await
        .unwrap();
    (r.get(0), r.get(1))
}

/// Row counts of the tables a destroy changes: proof that nothing changed.
async fn snapshot(db: &TestDb) -> Vec<i64> {
    let mut v = Vec::new();
    for t in [
        "namespaces",
        "projects",
        "routes",
        "members",
        "group_deletion_schedules",
        "users",
    ] {
        v.push(db.count(t).await);
    }
    v.push(
        db.count("routes WHERE path LIKE 'acme-deletion_scheduled-100%'")
            .await,
    );
    v
}

fn is_random_suffixed(s: &str, base: &str) -> bool {
    s.strip_prefix(base)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|tail| {
            tail.len() == 5
                && tail
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

// ---- adjourned-group-deletion (behaviour §B51.3) ------------------------------------------------

#[tokio::test]
async fn a_group_marked_exactly_period_days_ago_is_due_and_its_destroy_is_sent_at_once() {
    let db = fixture().await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!((m.receiver, m.delay_s, m.envelope.hop), (GD, 0, 0));
    assert_eq!(m.envelope.kind, "group-destroy.run");
    assert_eq!(m.envelope.message_key, "group-destroy:100:2025-03-03:11");
    assert_eq!(
        m.envelope.payload,
        json!({"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"})
    );
    let l = log.one("Group deletion scheduled");
    assert_eq!(l["level"], "info");
    assert_eq!(
        (
            l["group_id"].as_i64(),
            l["user_id"].as_i64(),
            l["delay_s"].as_i64()
        ),
        (Some(100), Some(11), Some(0))
    );
    let done = log.done();
    assert_eq!(done["status"], "completed");
    assert_eq!(done["groups_due"], 1);
    assert_eq!(done["destroy_enqueued"], 1);
    assert_eq!(done["restored"], 0);
    assert_eq!(done["skipped_groups"], 0);
    assert_eq!(done["failed_groups"], 0);
    assert_eq!(done["cutoff"], "2025-03-03");
    // The cron itself deletes nothing.
    assert!(db.exists("namespaces WHERE id = 100").await);
}

#[tokio::test]
async fn a_group_marked_one_day_after_the_cutoff_is_not_selected() {
    let db = fixture().await;
    db.exec("UPDATE group_deletion_schedules SET marked_for_deletion_on = '2025-03-04'")
        .await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    let done = log.done();
    assert_eq!(done["groups_due"], 0);
    assert_eq!(done["status"], "completed");
}

#[tokio::test]
async fn destroy_messages_are_staggered_by_twenty_seconds_in_id_order() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(700, "zeta", None).await;
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50), M::gm(3, 700, 11, 50)])
        .await;
    schedule(&db, 700, 11, "2025-03-03").await;
    schedule(&db, 400, 11, "2025-03-03").await;
    let (r, log) = cron_once(&db).await;
    let got: Vec<(u32, String)> = r.runs[0]
        .sent
        .iter()
        .map(|s| (s.message.delay_s, s.message.envelope.message_key.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, "group-destroy:100:2025-03-03:11".to_string()),
            (20, "group-destroy:400:2025-03-03:11".to_string()),
            (40, "group-destroy:700:2025-03-03:11".to_string()),
        ]
    );
    assert_eq!(log.done()["destroy_enqueued"], 3);
}

/// `n` top-level due groups with ids `first..first+n`, scheduled by `user`.
async fn due_groups(db: &TestDb, first: i64, n: i64, user: i64) {
    let last = first + n - 1;
    db.exec(&format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, created_at, updated_at)
           SELECT g, 'g' || g || '-deletion_scheduled-' || g, 'g' || g || '-deletion_scheduled-' || g,
                  'Group', ARRAY[g]::bigint[], '2024-01-01', '2024-01-01'
           FROM generate_series({first}, {last}) g;
         INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
           SELECT id, 'Namespace', path, name, id, '2024-01-01', '2024-01-01'
           FROM namespaces WHERE id BETWEEN {first} AND {last};
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
           SELECT g, {user}, '2025-03-01' FROM generate_series({first}, {last}) g;"
    ))
    .await;
}

#[tokio::test]
async fn delays_over_900_seconds_become_one_time_schedules_due_at_now_plus_the_delay() {
    let db = TestDb::new().await;
    Fx(&db).users(&[U::human(11).admin()]).await;
    period(&db, 1, 7).await;
    due_groups(&db, 1000, 50, 11).await;
    let (r, log) = cron_once(&db).await;
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 50);
    for (i, s) in sent.iter().enumerate() {
        assert_eq!(s.message.delay_s, 20 * i as u32);
        let key = format!("group-destroy:{}:2025-03-01:11", 1000 + i);
        assert_eq!(s.message.envelope.message_key, key);
        if i <= 45 {
            assert_eq!(s.schedule_name, None, "index {i} goes to SQS");
        } else {
            assert_eq!(
                s.schedule_name.as_deref(),
                Some(schedule_name(&key).as_str())
            );
        }
    }
    assert_eq!(sent[45].message.delay_s, 900);
    assert_eq!(sent[46].message.delay_s, 920);
    let name = sent[46].schedule_name.clone().unwrap();
    assert!(name.starts_with("hk-") && name.len() == 43);
    // In local mode the schedule is due at now + 920 s.
    let pending: Vec<_> = std::iter::from_fn(|| r.queue().pop()).collect();
    assert_eq!(pending[46].due, t("2025-03-10T02:15:20Z"));
    assert_eq!(pending[45].due, t("2025-03-10T02:15:00Z"));
    assert_eq!(log.done()["destroy_enqueued"], 50);
}

#[tokio::test]
async fn a_group_whose_scheduler_lost_owner_rights_is_restored_with_its_routes() {
    let db = fixture().await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(
        name_and_path(&db, 100).await,
        ("acme".into(), "acme".into())
    );
    assert_eq!(
        route(&db, "Namespace", 100).await,
        ("acme".into(), "acme".into())
    );
    assert_eq!(
        route(&db, "Namespace", 101).await,
        ("acme/web".into(), "acme / web".into())
    );
    assert_eq!(
        route(&db, "Project", 200).await,
        ("acme/web/site".into(), "acme / web / site".into())
    );
    assert_eq!(
        route(&db, "Project", 201).await,
        ("acme/p201".into(), "acme / p201".into())
    );
    assert!(!db.exists("group_deletion_schedules").await);
    assert!(r.runs[0].sent.is_empty());
    let l = log.one("Group restored: scheduling user cannot remove group");
    assert_eq!(l["level"], "info");
    assert_eq!(
        (
            l["group_id"].as_i64(),
            l["user_id"].as_i64(),
            l["full_path"].as_str()
        ),
        (Some(100), Some(11), Some("acme"))
    );
    let done = log.done();
    assert_eq!(
        (done["restored"].as_i64(), done["destroy_enqueued"].as_i64()),
        (Some(1), Some(0))
    );
    // Nothing else was touched: the projects and the subgroup keep their own names.
    assert_eq!(name_and_path(&db, 101).await, ("web".into(), "web".into()));
    assert_eq!(db.count("projects").await, 2);
    assert!(db.exists("members WHERE id = 1").await);
}

#[tokio::test]
async fn a_restore_whose_path_is_taken_gets_a_random_suffix_and_children_follow_it() {
    let db = fixture().await;
    Fx(&db).group(900, "acme", None).await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    let (_, log) = cron_once(&db).await;
    let (name, path) = name_and_path(&db, 100).await;
    assert!(is_random_suffixed(&path, "acme"), "{path}");
    // G900 is also named "acme" at the top level, so the name gets a suffix too.
    assert!(is_random_suffixed(&name, "acme"), "{name}");
    let (rpath, rname) = route(&db, "Namespace", 100).await;
    assert_eq!(rpath, path);
    assert_eq!(rname, name);
    assert_eq!(route(&db, "Namespace", 101).await.0, format!("{path}/web"));
    assert_eq!(
        route(&db, "Project", 200).await,
        (format!("{path}/web/site"), format!("{name} / web / site"))
    );
    assert_eq!(route(&db, "Namespace", 900).await.0, "acme");
    assert_eq!(
        log.one("Group restored: scheduling user cannot remove group")["full_path"],
        path
    );
}

#[tokio::test]
async fn a_path_collision_is_found_case_insensitively() {
    let db = fixture().await;
    Fx(&db).group(900, "ACME", None).await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    cron_once(&db).await;
    let (name, path) = name_and_path(&db, 100).await;
    assert!(is_random_suffixed(&path, "acme"), "{path}");
    // The names differ ("ACME" vs "acme"): the name stays as stripped.
    assert_eq!(name, "acme");
}

#[tokio::test]
async fn a_restored_subgroup_keeps_its_parent_prefix() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web-deletion_scheduled-101", Some(100)).await;
    fx.project_path(200, 101, "site").await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 101, 11, 40)]).await;
    schedule(&db, 101, 11, "2025-03-01").await;
    let (_, log) = cron_once(&db).await;
    assert_eq!(name_and_path(&db, 101).await, ("web".into(), "web".into()));
    assert_eq!(
        route(&db, "Namespace", 101).await,
        ("acme/web".into(), "acme / web".into())
    );
    assert_eq!(
        route(&db, "Project", 200).await,
        ("acme/web/site".into(), "acme / web / site".into())
    );
    assert_eq!(route(&db, "Namespace", 100).await.0, "acme");
    // No application_settings row: the default period of 7 days applies.
    assert_eq!(log.done()["cutoff"], "2025-03-03");
}

#[tokio::test]
async fn the_period_comes_from_the_highest_settings_row() {
    let db = fixture().await;
    period(&db, 2, 30).await;
    let (r, log) = cron_once(&db).await;
    assert!(r.runs[0].sent.is_empty());
    let done = log.done();
    assert_eq!(done["cutoff"], "2025-02-08");
    assert_eq!(done["groups_due"], 0);
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
}

#[tokio::test]
async fn a_missing_scheduling_user_is_skipped_with_a_warning() {
    let db = fixture().await;
    Fx(&db).group(400, "beta", None).await;
    Fx(&db).members(&[M::gm(2, 400, 11, 50)]).await;
    Fx(&db).users(&[U::human(12)]).await;
    schedule(&db, 400, 12, "2025-03-03").await;
    // Only a database without the FK keeps a schedule whose user is gone.
    db.exec(
        "SET session_replication_role = replica; DELETE FROM users WHERE id = 12;
         SET session_replication_role = origin;",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let w = log.one("Adjourned group deletion skipped: scheduling user not found");
    assert_eq!(w["level"], "warn");
    assert_eq!(
        (w["group_id"].as_i64(), w["user_id"].as_i64()),
        (Some(400), Some(12))
    );
    // G100 still gets its destroy at index 0; the skipped group used index 1.
    assert_eq!(r.runs[0].sent.len(), 1);
    let done = log.done();
    assert_eq!(
        (done["groups_due"].as_i64(), done["skipped_groups"].as_i64()),
        (Some(2), Some(1))
    );
}

#[tokio::test]
async fn a_failing_restore_is_logged_and_the_next_group_is_still_handled() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50)]).await;
    schedule(&db, 400, 11, "2025-03-03").await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE UPDATE ON namespaces FOR EACH ROW WHEN (OLD.id = 100) EXECUTE FUNCTION boom();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    let e = log.one("Adjourned group deletion failed for group");
    assert_eq!(e["level"], "error");
    assert_eq!(
        (
            e["group_id"].as_i64(),
            e["error"].as_str(),
            e["error_class"].as_str()
        ),
        (Some(100), Some("boom"), Some("db"))
    );
    // The restore rolled back as a whole.
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
    assert_eq!(
        route(&db, "Namespace", 101).await.0,
        "acme-deletion_scheduled-100/web"
    );
    // G400 is index 1: its destroy is delayed 20 s.
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    assert_eq!(
        (
            sent[0].message.delay_s,
            sent[0].message.envelope.message_key.as_str()
        ),
        (20, "group-destroy:400:2025-03-03:11")
    );
    let done = log.done();
    assert_eq!(
        (
            done["failed_groups"].as_i64(),
            done["destroy_enqueued"].as_i64()
        ),
        (Some(1), Some(1))
    );
    assert_eq!(r.runs[0].outcome, "success");
}

#[tokio::test]
async fn a_failed_send_is_logged_per_group_and_the_run_goes_on() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50)]).await;
    schedule(&db, 400, 11, "2025-03-03").await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    r.queue()
        .fail_when(|m| m.envelope.message_key == "group-destroy:100:2025-03-03:11");
    let body = r.cron_message(CRON).to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    let e = log.one("Adjourned group deletion failed for group");
    assert_eq!(e["error_class"], "transport");
    assert_eq!(r.runs[0].sent.len(), 1);
    assert_eq!(r.runs[0].sent[0].message.delay_s, 20);
    assert_eq!(log.done()["failed_groups"], 1);
}

#[tokio::test]
async fn the_deadline_guard_continues_with_the_cursor_and_the_run_wide_index() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta", None).await;
    fx.group(700, "zeta", None).await;
    fx.members(&[M::gm(2, 400, 11, 50), M::gm(3, 700, 11, 50)])
        .await;
    schedule(&db, 400, 11, "2025-03-03").await;
    schedule(&db, 700, 11, "2025-03-03").await;
    let settings = Settings {
        deadline_margin: Duration::from_secs(100_000),
        ..Default::default()
    };
    let (log, _g) = capture();
    let mut r = db.runner_with(t(NOW), settings);
    let cron = r.cron_message(CRON);
    r.invoke(CRON, &cron.to_body(), 1).await.unwrap();
    // Progress rule: the first group is handled even though the guard fires.
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].message.envelope.message_key,
        "group-destroy:100:2025-03-03:11"
    );
    let c = &sent[1].message;
    assert_eq!((c.receiver, c.delay_s, c.envelope.hop), (CRON, 0, 1));
    assert_eq!(
        c.envelope.payload,
        json!({"cursor": {"group_id": 100, "index": 1}})
    );
    assert_eq!(
        c.envelope.message_key,
        format!("adjourned-group-deletion:{}:1", cron.run_id)
    );
    let done = log.done();
    assert_eq!(done["status"], "limit_reached");
    assert_eq!(done["next_cursor"], json!({"group_id": 100, "index": 1}));
    // Invocation 2 carries the index on: G400 gets 20 s.
    let body = c.envelope.to_body();
    r.invoke(CRON, &body, 1).await.unwrap();
    let sent = &r.runs[1].sent;
    assert_eq!(
        (
            sent[0].message.delay_s,
            sent[0].message.envelope.message_key.as_str()
        ),
        (20, "group-destroy:400:2025-03-03:11")
    );
    assert_eq!(sent[0].message.envelope.run_id, cron.run_id);
    assert_eq!(
        sent[1].message.envelope.payload,
        json!({"cursor": {"group_id": 400, "index": 2}})
    );
}

#[tokio::test]
async fn a_cron_run_finding_its_overlap_lock_held_does_nothing() {
    let db = fixture().await;
    let other = db.session().await;
    let key = shared::locks::lock_key("function:adjourned-group-deletion");
    other
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await
        .unwrap();
    let (r, log) = cron_once(&db).await;
    log.one("skipped: already running");
    assert_eq!(log.done()["status"], "skipped");
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(r.runs[0].outcome, "success");
}

// ---- group-destroy (behaviour §B51.4) -----------------------------------------------------------

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
    assert_eq!(
        db.scalar::<String>("SELECT state FROM users WHERE id = 20")
            .await,
        "blocked"
    );
    assert!(
        db.scalar::<bool>("SELECT revoked FROM personal_access_tokens WHERE id = 1")
            .await
    );
    assert_eq!(
        db.scalar::<i64>("SELECT initiator_user_id FROM ghost_user_migrations WHERE user_id = 20")
            .await,
        11
    );
    let sent = &r.runs[0].sent;
    assert_eq!(sent.len(), 1);
    let m = &sent[0].message;
    assert_eq!((m.receiver, m.delay_s), (Function::DeleteUser, 30));
    assert_eq!(m.envelope.message_key, "delete-user:20");
    assert_eq!(
        m.envelope.payload,
        json!({"user_id": 20, "initiator_user_id": 11, "reason": "Group deleted"})
    );
    // Humans stay users.
    assert_eq!(
        db.ids("users WHERE state = 'active'").await,
        vec![10, 11, 12, 30]
    );
    let l = log.one("Group destroyed");
    assert_eq!(l["level"], "info");
    assert_eq!(
        (
            l["group_id"].as_i64(),
            l["user_id"].as_i64(),
            l["projects_deleted"].as_i64(),
            l["groups_deleted"].as_i64(),
            l["hop"].as_i64()
        ),
        (Some(100), Some(11), Some(2), Some(2), Some(0))
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
async fn a_message_for_a_missing_group_is_stale() {
    let db = fixture().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let (run, _) = r
        .invoke(GD, &destroy_body(999, 11, "2025-03-03"), 1)
        .await
        .unwrap();
    assert_eq!(run.outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: group not found")["level"],
        "info"
    );
    assert_eq!(log.done()["status"], "stale");
}

#[tokio::test]
async fn a_group_restored_after_its_message_was_sent_is_not_deleted_even_a_day_later() {
    let db = fixture().await;
    // The cron sends the destroy message, then the owner restores the group in GitLab.
    let (mut r, _) = cron_once(&db).await;
    assert_eq!(r.runs[0].sent.len(), 1);
    let body = r.runs[0].sent[0].message.envelope.to_body();
    db.exec(
        "DELETE FROM group_deletion_schedules WHERE group_id = 100;
         UPDATE namespaces SET name = 'acme', path = 'acme' WHERE id = 100;",
    )
    .await;
    let before = snapshot(&db).await;
    let (log, _g) = capture();
    r.drain().await.unwrap();
    assert_eq!(r.runs.len(), 2);
    assert_eq!(r.runs[1].outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: group no longer scheduled for deletion")["level"],
        "info"
    );
    assert_eq!(snapshot(&db).await, before);
    // Replayed a day later: still stale.
    let (log, _g) = capture();
    let mut later = db.runner(t("2025-03-11T02:00:00Z"));
    later.invoke(GD, &body, 1).await.unwrap();
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(snapshot(&db).await, before);
    // Marked again the next day by the same user: the old message is not yet due.
    schedule(&db, 100, 11, "2025-03-11").await;
    let (log, _g) = capture();
    later.invoke(GD, &body, 2).await.unwrap();
    log.one("Group destroy skipped: deletion not yet due");
    assert!(db.exists("namespaces WHERE id = 100").await);
    assert_eq!(db.count("projects").await, 2);
}

#[tokio::test]
async fn a_deleted_schedule_makes_the_message_stale() {
    let db = fixture().await;
    db.exec("DELETE FROM group_deletion_schedules").await;
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_group_marked_again_is_not_yet_due_at_destroy_time() {
    let db = fixture().await;
    db.exec("UPDATE group_deletion_schedules SET marked_for_deletion_on = '2025-03-09'")
        .await;
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(
        log.one("Group destroy skipped: deletion not yet due")["level"],
        "info"
    );
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_longer_current_period_makes_the_message_not_yet_due() {
    let db = fixture().await;
    period(&db, 2, 30).await;
    let before = snapshot(&db).await;
    let (_, log, _) = destroy_once(&db).await;
    log.one("Group destroy skipped: deletion not yet due");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_schedule_by_another_user_makes_the_message_stale() {
    let db = fixture().await;
    Fx(&db).users(&[U::human(12)]).await;
    db.exec("UPDATE group_deletion_schedules SET user_id = 12")
        .await;
    let before = snapshot(&db).await;
    let (_, log, _) = destroy_once(&db).await;
    log.one("Group destroy skipped: scheduling user changed");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_blocked_user_is_a_retryable_failure_and_the_next_cron_restores_the_group() {
    let db = fixture().await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 11")
        .await;
    let before = snapshot(&db).await;
    let (mut r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "retryable");
    let e = log.one("Group destroy failed: user is not active");
    assert_eq!(e["level"], "error");
    assert_eq!(e["user_state"], "blocked");
    assert_eq!(e["group_id"], 100);
    assert_eq!(log.one("record failed")["receive_count"], 1);
    assert_eq!(snapshot(&db).await, before);
    assert_eq!(r.exit_code(true), 1);
    // Redelivered until the DLQ: maxReceiveCount receives, nothing deleted.
    r.run_until_idle(GD, &destroy_body(100, 11, "2025-03-03"))
        .await
        .unwrap();
    assert_eq!(r.dead_letters().len(), 1);
    assert_eq!(snapshot(&db).await, before);
    // The next cron run restores it: a blocked user has no permission.
    let (r2, log2) = cron_at(&db, "2025-03-11T02:00:00Z").await;
    assert!(r2.runs[0].sent.is_empty());
    log2.one("Group restored: scheduling user cannot remove group");
    assert_eq!(name_and_path(&db, 100).await.1, "acme");
}

#[tokio::test]
async fn a_user_who_lost_permission_before_the_destroy_gets_the_group_restored() {
    let db = fixture().await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    let w = log.one("Group destroy unauthorized: group restored");
    assert_eq!(w["level"], "warn");
    assert_eq!(
        (w["group_id"].as_i64(), w["user_id"].as_i64()),
        (Some(100), Some(11))
    );
    assert_eq!(
        name_and_path(&db, 100).await,
        ("acme".into(), "acme".into())
    );
    assert_eq!(route(&db, "Namespace", 101).await.0, "acme/web");
    assert_eq!(route(&db, "Project", 200).await.0, "acme/web/site");
    assert!(!db.exists("group_deletion_schedules").await);
    assert_eq!(db.count("projects").await, 2);
    assert!(r.runs[0].sent.is_empty());
    assert_eq!(log.done()["status"], "restored");
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
    let resend = &r.runs[0].sent[0].message;
    assert_eq!(
        (resend.receiver, resend.delay_s, resend.envelope.hop),
        (GD, 0, 1)
    );
    assert_eq!(
        resend.envelope.message_key,
        "group-destroy:100:2025-03-03:11"
    );
    assert_eq!(
        resend.envelope.payload,
        json!({"group_id": 100, "user_id": 11, "marked_for_deletion_on": "2025-03-03"})
    );
    let c = &log.with_message("Group destroy continuing")[0];
    assert_eq!(
        (
            c["group_id"].as_i64(),
            c["hop"].as_i64(),
            c["projects_deleted"].as_i64(),
            c["groups_deleted"].as_i64()
        ),
        (Some(100), Some(1), Some(1), Some(0))
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
async fn a_user_deleted_with_its_schedule_makes_the_message_stale() {
    let db = fixture().await;
    db.exec("DELETE FROM users WHERE id = 11").await;
    assert!(!db.exists("group_deletion_schedules").await, "FK cascade");
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    log.one("Group destroy skipped: group no longer scheduled for deletion");
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn a_missing_user_with_a_kept_schedule_is_stale_with_a_warning() {
    let db = fixture().await;
    db.exec(
        "SET session_replication_role = replica; DELETE FROM users WHERE id = 11;
         SET session_replication_role = origin;",
    )
    .await;
    assert!(db.exists("group_deletion_schedules").await);
    let before = snapshot(&db).await;
    let (_, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    let w = log.one("Group destroy skipped: user not found");
    assert_eq!(w["level"], "warn");
    assert_eq!(log.done()["status"], "stale");
    assert_eq!(snapshot(&db).await, before);
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
async fn contributions_go_in_chunks_of_a_thousand_before_the_project() {
    let db = fixture().await;
    db.exec(
        "INSERT INTO issues (id, project_id, author_id) SELECT g, 200, 11 FROM generate_series(1, 1500) g;
         INSERT INTO notes (id, project_id, author_id) VALUES (1, 200, 11), (2, 200, 11);",
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
async fn a_destroy_interrupted_after_half_the_projects_finishes_on_redelivery() {
    let db = full_fixture().await;
    db.exec(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'boom'; END $$;
         CREATE TRIGGER boom BEFORE DELETE ON projects FOR EACH ROW WHEN (OLD.id = 201) EXECUTE FUNCTION boom();",
    )
    .await;
    let (mut r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "retryable");
    let e = log.one("Group destroy failed");
    assert_eq!(e["level"], "error");
    assert_eq!(
        (
            e["group_id"].as_i64(),
            e["error"].as_str(),
            e["error_class"].as_str()
        ),
        (Some(100), Some("boom"), Some("db"))
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
    let l = log2.one("Group destroyed");
    assert_eq!(
        (l["projects_deleted"].as_i64(), l["groups_deleted"].as_i64()),
        (Some(1), Some(1))
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
    assert_eq!(run.outcome, "success");
    let l = log.one("continuation not sent: hop limit reached");
    assert_eq!(l["max_hops"], 1000);
    assert!(run.sent.is_empty());
    assert!(log.with_message("Group destroy continuing").is_empty());
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
async fn a_schedule_changed_after_the_page_read_is_not_restored() {
    let db = fixture().await;
    let fx = Fx(&db);
    fx.group(400, "beta-deletion_scheduled-400", None).await;
    schedule(&db, 400, 11, "2025-03-03").await;
    db.exec("UPDATE members SET access_level = 40 WHERE id = 1")
        .await;
    // Restoring G100 (first in page order) re-marks G400 the way GitLab would in
    // another session, between the page read and G400's own transaction.
    db.exec(
        "CREATE FUNCTION remark_400() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN UPDATE group_deletion_schedules SET marked_for_deletion_on = '2025-03-10' WHERE group_id = 400; RETURN NEW; END $$;
         CREATE TRIGGER remark_400 AFTER UPDATE ON namespaces FOR EACH ROW WHEN (NEW.id = 100)
           EXECUTE FUNCTION remark_400();",
    )
    .await;
    let (r, log) = cron_once(&db).await;
    assert_eq!(name_and_path(&db, 100).await.1, "acme");
    assert_eq!(
        name_and_path(&db, 400).await.1,
        "beta-deletion_scheduled-400"
    );
    assert!(
        db.exists("group_deletion_schedules WHERE group_id = 400 AND marked_for_deletion_on = '2025-03-10'")
            .await
    );
    assert!(r.runs[0].sent.is_empty());
    let done = log.done();
    assert_eq!(
        (done["restored"].as_i64(), done["skipped_groups"].as_i64()),
        (Some(1), Some(1))
    );
}

#[tokio::test]
async fn a_schedule_taken_over_while_the_restore_waits_is_left_alone() {
    let db = fixture().await;
    Fx(&db).users(&[U::human(12)]).await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    // Another session hands the schedule to U12 and commits only after group-destroy
    // has read the old row: the restore waits for the row lock, then sees U12.
    let mut other = db.session().await;
    let tx = other.transaction().await.unwrap();
    tx.execute(
        "UPDATE group_deletion_schedules SET user_id = 12 WHERE group_id = 100",
        &[],
    )
    .await
    .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = destroy_body(100, 11, "2025-03-03");
    let commit_later = async {
        db.blocked_on_lock("group-destroy").await;
        tx.commit().await.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(GD, &body, 1), commit_later);
    assert_eq!(res.unwrap().0.outcome, "success");
    log.one("Group destroy skipped: scheduling user changed");
    assert!(log
        .with_message("Group destroy unauthorized: group restored")
        .is_empty());
    assert_eq!(
        name_and_path(&db, 100).await.1,
        "acme-deletion_scheduled-100"
    );
    assert!(
        db.exists("group_deletion_schedules WHERE user_id = 12")
            .await
    );
}

#[tokio::test]
async fn the_demo_data_destroys_oldco_restores_labs_and_keeps_newco() {
    let db = TestDb::new().await;
    let mut c = db.connector().connect("hk").await.unwrap();
    hk::demo::seed(&mut c, d("2025-03-10")).await.unwrap();
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

/// Wait until a session of this test's database named `app` waits for a lock.
async fn until_waiting(db: &TestDb, app: &str) {
    db.blocked_on_lock(app).await;
}

/// G100 (scheduled by U11, its owner) with subgroups G101 "one" and G102 "two", P201 in
/// G101 and P202 in G102 with three issues each, and G900 "elsewhere" outside it.
async fn transfer_fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.group(101, "one", Some(100)).await;
    fx.group(102, "two", Some(100)).await;
    fx.group(900, "elsewhere", None).await;
    fx.project(201, 101).await;
    fx.project(202, 102).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    period(&db, 1, 7).await;
    schedule(&db, 100, 11, "2025-03-03").await;
    for i in 0..3 {
        fx.contribution("issues", 1000 + i, 201, 11).await;
        fx.contribution("issues", 2000 + i, 202, 11).await;
    }
    db
}

/// Run `group-destroy` for G100 while another session holds P202's row; once the
/// destroy waits for it (G101 and P201 are gone by then), `change` runs in the holding
/// transaction, which then commits.
async fn destroy_with_change_while_p202_is_held(db: &TestDb, change: &str) -> (Captured, Run) {
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM projects WHERE id = 202 FOR UPDATE")
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = destroy_body(100, 11, "2025-03-03");
    let mover = async {
        until_waiting(db, "group-destroy").await;
        assert!(
            !db.exists("projects WHERE id = 201").await,
            "G101 went first"
        );
        tx.batch_execute(change).await.unwrap();
        tx.commit().await.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(GD, &body, 1), mover);
    (log, res.unwrap().0)
}

#[tokio::test]
async fn a_subgroup_transferred_out_mid_destroy_survives_with_its_project_and_issues() {
    let db = transfer_fixture().await;
    let (log, run) = destroy_with_change_while_p202_is_held(
        &db,
        "UPDATE namespaces SET parent_id = 900, traversal_ids = ARRAY[900, 102] WHERE id = 102;
         UPDATE namespaces SET traversal_ids = ARRAY[900, 102, 302] WHERE id = 302;
         UPDATE routes SET path = 'elsewhere/two' || substr(path, char_length('acme-deletion_scheduled-100/two') + 1)
          WHERE path LIKE 'acme-deletion_scheduled-100/two%';",
    )
    .await;
    assert_eq!(run.outcome, "success");
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 101, 301)").await,
        Vec::<i64>::new()
    );
    assert_eq!(
        db.ids("namespaces WHERE id IN (102, 302)").await,
        vec![102, 302]
    );
    assert!(db.exists("projects WHERE id = 202").await);
    assert_eq!(db.ids("issues").await, vec![2000, 2001, 2002]);
    assert_eq!(route(&db, "Project", 202).await.0, "elsewhere/two/p202");
    let w = log.one("Group destroy skipped: project no longer belongs to the group");
    assert_eq!(
        (w["group_id"].as_i64(), w["project_id"].as_i64()),
        (Some(100), Some(202))
    );
    let w = log.one("Group destroy skipped: subgroup no longer belongs to the group");
    assert_eq!(w["namespace_id"], 102);
    let done = log.done();
    assert_eq!(done["outcome"], "destroyed");
    assert_eq!(
        (
            done["contributions_deleted"].as_i64(),
            done["projects_deleted"].as_i64(),
            done["groups_deleted"].as_i64()
        ),
        (Some(3), Some(1), Some(2))
    );
}

#[tokio::test]
async fn a_project_transferred_out_mid_destroy_survives_with_its_issues() {
    let db = transfer_fixture().await;
    let (log, _) = destroy_with_change_while_p202_is_held(
        &db,
        "UPDATE projects SET namespace_id = 900 WHERE id = 202;
         UPDATE namespaces SET parent_id = 900, traversal_ids = ARRAY[900, 302] WHERE id = 302;
         UPDATE routes SET path = 'elsewhere/p202' WHERE source_type = 'Project' AND source_id = 202;",
    )
    .await;
    assert!(
        db.exists("projects WHERE id = 202 AND namespace_id = 900")
            .await
    );
    assert_eq!(db.ids("issues").await, vec![2000, 2001, 2002]);
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 101, 102)").await,
        Vec::<i64>::new()
    );
    log.one("Group destroy skipped: project no longer belongs to the group");
    let done = log.done();
    assert_eq!(
        (
            done["projects_deleted"].as_i64(),
            done["groups_deleted"].as_i64()
        ),
        (Some(1), Some(3))
    );
}

#[tokio::test]
async fn a_restore_mid_destroy_stops_it_before_the_next_chunk() {
    let db = transfer_fixture().await;
    // P202 gets 1002 issues: its first chunk deletes 1000, the other two must survive.
    db.exec(
        "INSERT INTO issues (id, project_id, author_id, created_at, updated_at)
         SELECT 3000 + i, 202, 11, '2024-01-01', '2024-01-01' FROM generate_series(0, 998) i",
    )
    .await;
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM projects WHERE id = 202 FOR UPDATE")
        .await
        .unwrap();
    let restorer = db.session().await;
    restorer
        .batch_execute(&format!(
            "SET application_name = 'restorer'; SET lock_timeout = {}",
            wait::LOCK_WAIT.as_millis()
        ))
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = destroy_body(100, 11, "2025-03-03");
    let restore = async {
        // P202's first chunk holds the schedule row FOR SHARE and waits for P202.
        until_waiting(&db, "group-destroy").await;
        // The restore deletes the schedule between that chunk and the next. A row lock
        // freed by a COMMIT is not handed to its waiter first (the next chunk could take
        // it again), so the restore queues on the table lock instead, which PostgreSQL
        // grants in order: it commits before the next chunk can read the schedule.
        let restore = restorer.batch_execute(
            "BEGIN;
             LOCK TABLE group_deletion_schedules IN EXCLUSIVE MODE;
             DELETE FROM group_deletion_schedules WHERE group_id = 100;
             COMMIT",
        );
        let release = async {
            until_waiting(&db, "restorer").await;
            tx.commit().await.unwrap();
        };
        let (restored, ()) = tokio::join!(restore, release);
        restored.unwrap();
    };
    let (res, ()) = tokio::join!(r.invoke(GD, &body, 1), restore);
    res.unwrap();
    assert!(
        !db.exists("group_deletion_schedules WHERE group_id = 100")
            .await
    );
    assert_eq!(db.count("issues WHERE project_id = 202").await, 2);
    assert!(db.exists("projects WHERE id = 202").await);
    assert_eq!(
        db.ids("namespaces WHERE id IN (100, 102)").await,
        vec![100, 102]
    );
    let l = log.one("Group destroy stopped: group no longer scheduled for deletion");
    assert_eq!(l["groups_deleted"], 1);
    let done = log.done();
    assert_eq!(
        (done["status"].as_str(), done["outcome"].as_str()),
        (Some("stale"), Some("not_scheduled"))
    );
}

#[tokio::test]
async fn a_group_with_an_orphan_project_namespace_is_destroyed_with_it_in_one_delivery() {
    let db = fixture().await;
    // A project namespace below G101 whose project row is gone, with its route.
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
         VALUES (350, 'lost', 'lost', 'Project', 101, ARRAY[100, 101, 350], '2024-01-01', '2024-01-01');
         INSERT INTO routes (source_id, source_type, path, name, namespace_id, created_at, updated_at)
         VALUES (350, 'Namespace', 'acme-deletion_scheduled-100/web/lost', 'lost', 350, '2024-01-01', '2024-01-01');",
    )
    .await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_eq!(r.runs.len(), 1, "no retry");
    assert!(!db.exists("namespaces").await);
    assert!(!db.exists("routes").await);
    let l = log.one("Group destroy removed an orphan project namespace");
    assert_eq!(
        (l["namespace_id"].as_i64(), l["parent_id"].as_i64()),
        (Some(350), Some(101))
    );
    assert_eq!(log.done()["outcome"], "destroyed");
}

#[tokio::test]
async fn a_group_blocked_by_a_row_it_cannot_delete_ends_once_with_a_line_naming_it() {
    let db = fixture().await;
    // A project namespace below G101 that a project elsewhere still uses: not an orphan.
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
         VALUES (900, 'other', 'other', 'Group', NULL, ARRAY[900], '2024-01-01', '2024-01-01');
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at)
         VALUES (350, 'odd', 'odd', 'Project', 101, ARRAY[100, 101, 350], '2024-01-01', '2024-01-01');
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
async fn a_restore_racing_an_ancestors_restore_leaves_every_route_consistent_with_its_parent() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "p-deletion_scheduled-100", None).await;
    fx.group(101, "g-deletion_scheduled-101", Some(100)).await;
    fx.group(102, "leaf", Some(101)).await;
    fx.project_path(200, 102, "site").await;
    // U11 owns nothing: both destroys find it unauthorized and restore.
    fx.users(&[U::human(11)]).await;
    period(&db, 1, 7).await;
    schedule(&db, 100, 11, "2025-03-03").await;
    schedule(&db, 101, 11, "2025-03-03").await;
    // Hold the child's row: its restore waits there while the parent's restore commits.
    let mut holder = db.session().await;
    let tx = holder.transaction().await.unwrap();
    tx.batch_execute("SELECT 1 FROM namespaces WHERE id = 101 FOR UPDATE")
        .await
        .unwrap();
    let (log, _g) = capture();
    let mut child = db.runner(t(NOW));
    let mut parent = db.runner(t(NOW));
    let child_body = destroy_body(101, 11, "2025-03-03");
    let parent_body = destroy_body(100, 11, "2025-03-03");
    let race = async {
        until_waiting(&db, "group-destroy").await;
        parent.invoke(GD, &parent_body, 1).await.unwrap();
        assert_eq!(route(&db, "Namespace", 100).await.0, "p");
        tx.rollback().await.unwrap();
    };
    let (res, ()) = tokio::join!(child.invoke(GD, &child_body, 1), race);
    res.unwrap();
    assert_eq!(
        log.with_message("Group destroy unauthorized: group restored")
            .len(),
        2
    );
    assert_eq!(route(&db, "Namespace", 100).await, ("p".into(), "p".into()));
    assert_eq!(
        route(&db, "Namespace", 101).await,
        ("p/g".into(), "p / g".into())
    );
    assert_eq!(
        route(&db, "Namespace", 102).await,
        ("p/g/leaf".into(), "p / g / leaf".into())
    );
    assert_eq!(
        route(&db, "Project", 200).await,
        ("p/g/leaf/site".into(), "p / g / leaf / site".into())
    );
    assert!(!db.exists("group_deletion_schedules").await);
}
