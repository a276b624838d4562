//! prune-deletions at scale and on GitLab's column types: a hierarchy with 2,000
//! memberships drained until idle, and `int4` ids with `integer[]` traversal ids.

use super::*;
use crate::assert::assert_authorizations_of;

/// Three levels: G100 > G101 and G102..G111 > G1000..G1189 (202 groups), with 1,798
/// projects in the third level. U10 has a membership in every one of these groups and
/// projects: 202 + 1,798 = 2,000.
async fn big_hierarchy(db: &TestDb) {
    db.exec(
        "INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
           SELECT g, 'l2-' || g, 'l2-' || g, 'Group', 100, ARRAY[100, g], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(102, 111) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
           SELECT 1000 + i, 'l3-' || i, 'l3-' || i, 'Group', 102 + i % 10, ARRAY[100, 102 + i % 10, 1000 + i],
                  '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(0, 189) i;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, created_at, updated_at, organization_id)
           SELECT 20000 + j, 'p' || j, 'p' || j, 'Project', 1000 + j % 190,
                  ARRAY[100, 102 + (j % 190) % 10, 1000 + j % 190, 20000 + j], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(0, 1797) j;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id, created_at, updated_at)
           SELECT 10000 + j, 'p' || j, 'p' || j, 1000 + j % 190, 20000 + j, 1, '2024-01-01', '2024-01-01'
           FROM generate_series(0, 1797) j;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, notification_level, member_namespace_id)
           SELECT 100000 + n.id, 30, n.id, 'Namespace', 'GroupMember', 10
          , 3, n.id FROM namespaces n WHERE n.type = 'Group' AND 100 = ANY(n.traversal_ids);
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, notification_level, member_namespace_id)
           SELECT 200000 + p.id, 20, p.id, 'Project', 'ProjectMember', 10, 3, (SELECT project_namespace_id FROM projects WHERE id = p.id) FROM projects p WHERE p.id >= 10000;
         INSERT INTO project_authorizations (user_id, project_id, access_level, is_unique)
           SELECT 10, p.id, 30, true FROM projects p WHERE p.namespace_id <> 500;",
    )
    .await;
}

#[tokio::test]
async fn a_hierarchy_with_two_thousand_memberships_drains_until_idle() {
    let db = fixture().await;
    big_hierarchy(&db).await;
    Fx(&db).members(&[M::gm(14, 500, 10, 30)]).await;
    Fx(&db).pas(&[(10, 600, 30)]).await;
    assert_eq!(db.count("members WHERE user_id = 10").await, 2001);
    schedule(&db, 1, 100, 10, 11).await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(SCHED);
    r.run_until_idle(SCHED, &cron.to_body()).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    // The schedule is gone, every membership of the hierarchy too; G500's stays.
    assert!(!db.exists("members_deletion_schedules").await);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_authorizations_of(&db, 10, &[(10, 600, 30)]).await;
    // One cron run, then twenty prune-deletions invocations of 100, hops 0..19.
    assert_eq!(r.runs.len(), 21);
    assert_eq!(r.runs[0].function, SCHED);
    for (i, run) in r.runs[1..].iter().enumerate() {
        assert_eq!(run.function, F);
        assert_eq!(run.hop, Some(i as u64));
        assert_eq!(
            run.message_key.as_deref(),
            Some(format!("prune-deletions:{}:{i}", cron.run_id).as_str())
        );
        assert_eq!(run.outcome, "success");
        let report = run.report.as_ref().unwrap().to_json();
        assert_eq!(report["destroyed_count_total"], 100);
        if i < 19 {
            assert_eq!(report["status"], "more_work");
            assert_continuation(&run.sent, &cron.run_id, i as u64 + 1);
        } else {
            assert_eq!(report["status"], "completed");
            assert!(run.sent.is_empty());
        }
    }
    let lines = log.with_message(PROCESSED);
    assert_eq!(lines.len(), 20);
    let destroyed: i64 = lines
        .iter()
        .map(|l| l["destroyed_count"].as_i64().unwrap())
        .sum();
    assert_eq!(destroyed, 2000);
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for l in &lines {
        *outcomes
            .entry(l["outcome"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert_eq!(
        outcomes,
        BTreeMap::from([("completed".to_string(), 1), ("partial".to_string(), 19)])
    );
    assert!(log.with_message(DENIED).is_empty());
    assert!(log.with_message(FAILED).is_empty());
}

#[tokio::test]
async fn prune_deletions_works_with_int4_ids_and_integer_traversal_ids() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.int4_ids(true).await;
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.project(201, 100).await;
    fx.group(500, "other", None).await;
    fx.project(600, 500).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    scenario_2_memberships(&db).await;
    schedule(&db, 1, 101, 10, 11).await;
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(SCHED).to_body();
    r.run_until_idle(SCHED, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0);
    assert_eq!(r.runs.len(), 2);
    assert_eq!(db.ids("members WHERE user_id = 10").await, vec![14]);
    assert_authorizations_of(&db, 10, &[(10, 600, 30)]).await;
    assert!(!db.exists("members_deletion_schedules").await);
}
