//! Restoring a group whose scheduling user may no longer remove it: by the cron or by
//! group-destroy, with its name, path and every route below it (a random suffix when
//! the path is taken, found case-insensitively); not when the schedule changed after
//! the page read or was taken over meanwhile; and consistent routes when an ancestor
//! is restored at the same time. The suffix rules on their own.

use super::*;
use crate::assert::assert_fields;
use shared::gitlab::group_deletion::{random_suffix, strip_deletion_suffix};
use shared::random::below;

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
    assert_routes(
        &db,
        &[
            ("Namespace", 100, "acme", "acme"),
            ("Namespace", 101, "acme/web", "acme / web"),
            ("Project", 200, "acme/web/site", "acme / web / site"),
            ("Project", 201, "acme/p201", "acme / p201"),
        ],
    )
    .await;
    assert!(!db.exists("group_deletion_schedules").await);
    assert!(r.runs[0].sent.is_empty());
    assert_fields(
        &log.one("Group restored: scheduling user cannot remove group"),
        json!({"level": "info", "group_id": 100, "user_id": 11, "full_path": "acme"}),
    );
    assert_fields(&log.done(), json!({"restored": 1, "destroy_enqueued": 0}));
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
    schedule(&db, 101, 11, "2025-02-01").await;
    let (_, log) = cron_once(&db).await;
    assert_eq!(name_and_path(&db, 101).await, ("web".into(), "web".into()));
    assert_routes(
        &db,
        &[
            ("Namespace", 101, "acme/web", "acme / web"),
            ("Project", 200, "acme/web/site", "acme / web / site"),
        ],
    )
    .await;
    assert_eq!(route(&db, "Namespace", 100).await.0, "acme");
    // No application_settings row: the installed GitLab's default period applies (the
    // column default: 7 days on 18.2, 30 since 18.3).
    let cutoff = match integration_tests::db::gitlab_version() {
        engine::migrate::GitlabVersion::V18_2 => "2025-03-03",
        engine::migrate::GitlabVersion::V18_8
        | engine::migrate::GitlabVersion::V18_11
        | engine::migrate::GitlabVersion::V19_5 => "2025-02-08",
    };
    assert_eq!(log.done()["cutoff"], cutoff);
}

#[tokio::test]
async fn a_user_who_lost_permission_before_the_destroy_gets_the_group_restored() {
    let db = fixture().await;
    db.exec("DELETE FROM members WHERE id = 1").await;
    let (r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "success");
    assert_fields(
        &log.one("Group destroy unauthorized: group restored"),
        json!({"level": "warn", "group_id": 100, "user_id": 11}),
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
async fn a_blocked_user_is_a_retryable_failure_and_the_next_cron_restores_the_group() {
    let db = fixture().await;
    db.exec("UPDATE users SET state = 'blocked' WHERE id = 11")
        .await;
    let before = snapshot(&db).await;
    let (mut r, log, run) = destroy_once(&db).await;
    assert_eq!(run.outcome, "retryable");
    assert_fields(
        &log.one("Group destroy failed: user is not active"),
        json!({"level": "error", "user_state": "blocked", "group_id": 100}),
    );
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
    assert_fields(&log.done(), json!({"restored": 1, "skipped_groups": 1}));
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
    assert_routes(
        &db,
        &[
            ("Namespace", 100, "p", "p"),
            ("Namespace", 101, "p/g", "p / g"),
            ("Namespace", 102, "p/g/leaf", "p / g / leaf"),
            ("Project", 200, "p/g/leaf/site", "p / g / leaf / site"),
        ],
    )
    .await;
    assert!(!db.exists("group_deletion_schedules").await);
}

#[test]
fn the_deletion_suffix_is_stripped_only_at_the_end() {
    assert_eq!(strip_deletion_suffix("acme-deletion_scheduled-100"), "acme");
    assert_eq!(strip_deletion_suffix("acme-deleted-7"), "acme");
    assert_eq!(strip_deletion_suffix("acme"), "acme");
    assert_eq!(
        strip_deletion_suffix("acme-deletion_scheduled-"),
        "acme-deletion_scheduled-"
    );
    assert_eq!(strip_deletion_suffix("acme-deleted-1x"), "acme-deleted-1x");
    assert_eq!(
        strip_deletion_suffix("a-deletion_scheduled-1-b"),
        "a-deletion_scheduled-1-b"
    );
    assert_eq!(
        strip_deletion_suffix("a-deleted-1-deletion_scheduled-22"),
        "a-deleted-1"
    );
}
#[test]
fn random_suffixes_have_five_lowercase_alphanumerics() {
    for _ in 0..100 {
        let s = random_suffix();
        assert_eq!(s.len(), 6);
        assert!(s.starts_with('-'));
        assert!(s[1..]
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    }
}

#[test]
fn below_stays_in_range_and_reaches_every_value() {
    let mut seen = [false; 5];
    for _ in 0..2_000 {
        let v = below(5);
        assert!(v < 5);
        seen[v as usize] = true;
    }
    assert!(seen.iter().all(|s| *s));
}
