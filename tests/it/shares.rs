//! Group and project shares in every authorization refresh (GitLab's rule, behaviour
//! §2.2 and §3): a share keeps access at the lower of the two levels when another
//! membership goes; access that came only through a share goes with the membership
//! it came through; `share_with_group_lock` stops project shares; a share of an
//! ancestor reaches subgroup projects. Through B38 (set-based and per-user paths),
//! B43 and the single-user refresh.

use engine::local::Runner;
use integration_tests::fixtures::{M, U};
use integration_tests::{t, Fx, TestDb};
use shared::gitlab::authz;
use shared::messages::{prune_deletions_key, Envelope};
use shared::workers::prune_deletions::PruneDeletionsRun;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// G100 "acme" > G101 "web"; P200 in G101; G500 "other" with P600; G900 "ext" with
/// P700; G901 "locked" (share_with_group_lock) with P701. U1 admin, U10, U11.
async fn world() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.group(500, "other", None).await;
    fx.project(600, 500).await;
    fx.group(900, "ext", None).await;
    fx.project(700, 900).await;
    fx.group(901, "locked", None).await;
    fx.project(701, 901).await;
    db.exec("UPDATE namespaces SET share_with_group_lock = true WHERE id = 901")
        .await;
    fx.users(&[U::human(1).admin(), U::human(10), U::human(11)])
        .await;
    // Owners, so that no removal is refused as a last owner's.
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::gm(2, 500, 11, 50),
        M::gm(3, 900, 11, 50),
        M::gm(4, 901, 11, 50),
    ])
    .await;
    db
}

/// Group `shared` shared with group `with` at `access` (`group_group_links`).
async fn share_group(db: &TestDb, shared: i64, with: i64, access: i32) {
    db.exec(&format!(
        "INSERT INTO group_group_links (shared_group_id, shared_with_group_id, group_access, created_at, updated_at)
         VALUES ({shared}, {with}, {access}, '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// Project `project` shared with group `group` at `access` (`project_group_links`).
async fn share_project(db: &TestDb, project: i64, group: i64, access: i32) {
    db.exec(&format!(
        "INSERT INTO project_group_links (project_id, group_id, group_access, created_at, updated_at)
         VALUES ({project}, {group}, {access}, '2024-01-01', '2024-01-01')"
    ))
    .await;
}

/// One remove-expired-members cron invocation at NOW.
async fn b38(db: &TestDb) {
    let f = Function::RemoveExpiredMembers;
    let mut r: Runner = db.runner(t(NOW));
    let body = r.cron_message(f).to_body();
    r.invoke(f, &body, 1).await.unwrap();
}

/// U10's authorizations, ascending.
async fn pas_of_u10(db: &TestDb) -> Vec<(i64, i64, i32)> {
    db.pas().await.into_iter().filter(|r| r.0 == 10).collect()
}

#[tokio::test]
async fn a_shared_project_stays_at_the_lower_level_when_another_membership_expires() {
    let db = world().await;
    // G500 is shared with G100 at REPORTER; U10 is a DEVELOPER of G100 and, until
    // 2025-03-01, a MAINTAINER of G500 itself.
    share_group(&db, 500, 100, 20).await;
    Fx(&db)
        .members(&[
            M::gm(10, 100, 10, 30),
            M::gm(11, 500, 10, 40).expires("2025-03-01"),
        ])
        .await;
    Fx(&db).pas(&[(10, 200, 30), (10, 600, 40)]).await;
    b38(&db).await;
    assert!(!db.exists("members WHERE id = 11").await);
    assert_eq!(
        pas_of_u10(&db).await,
        vec![(10, 200, 30), (10, 600, 20)],
        "P600 kept through the share, at the lower of DEVELOPER and the link's REPORTER"
    );
}

#[tokio::test]
async fn access_that_came_only_through_a_share_goes_with_the_membership() {
    let db = world().await;
    // U10 reaches G500 (and P600) only as a member of G100, and P700 only because it
    // is shared with G101, a subgroup of G100.
    share_group(&db, 500, 100, 40).await;
    share_project(&db, 700, 101, 20).await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30).expires("2025-03-01")])
        .await;
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 600, 30), (10, 700, 20)])
        .await;
    b38(&db).await;
    assert_eq!(
        pas_of_u10(&db).await,
        vec![],
        "every share-derived row goes"
    );
}

#[tokio::test]
async fn a_project_share_gives_nothing_under_share_with_group_lock() {
    let db = world().await;
    // P700 and P701 are both shared with G100 at MAINTAINER; only G901 locks shares.
    share_project(&db, 700, 100, 40).await;
    share_project(&db, 701, 100, 40).await;
    Fx(&db)
        .members(&[
            M::gm(10, 100, 10, 30),
            M::pm(11, 700, 10, 10).expires("2025-03-01"),
            M::pm(12, 701, 10, 10).expires("2025-03-01"),
        ])
        .await;
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 700, 30), (10, 701, 30)])
        .await;
    b38(&db).await;
    assert_eq!(
        pas_of_u10(&db).await,
        vec![(10, 200, 30), (10, 700, 30)],
        "P700 through the share at min(30, 40); P701 locked: nothing"
    );
}

#[tokio::test]
async fn a_group_share_of_an_ancestor_reaches_subgroup_projects() {
    let db = world().await;
    // G100 (ancestor of G101, which holds P200) is shared with G500 at DEVELOPER.
    share_group(&db, 100, 500, 30).await;
    Fx(&db)
        .members(&[
            M::gm(10, 500, 10, 40),
            M::pm(11, 200, 10, 50).expires("2025-03-01"),
        ])
        .await;
    Fx(&db).pas(&[(10, 200, 50), (10, 600, 40)]).await;
    b38(&db).await;
    assert_eq!(pas_of_u10(&db).await, vec![(10, 200, 30), (10, 600, 40)]);
}

#[tokio::test]
async fn minimal_access_links_and_inherited_membership_of_the_invited_group_grant_nothing() {
    let db = world().await;
    // G500 shared with G100 at MINIMAL_ACCESS; G900 shared with G101, where U10 is
    // only an inherited member (direct member of G100).
    share_group(&db, 500, 100, 5).await;
    share_group(&db, 900, 101, 30).await;
    Fx(&db).members(&[M::gm(10, 100, 10, 30)]).await;
    let levels = authz::refresh(&db.client, 10, &[200, 600, 700])
        .await
        .unwrap();
    assert_eq!(levels.written, 1);
    assert_eq!(pas_of_u10(&db).await, vec![(10, 200, 30)]);
}

#[tokio::test]
async fn the_single_user_refresh_counts_every_source_at_its_level() {
    let db = world().await;
    share_group(&db, 500, 100, 20).await;
    share_project(&db, 700, 101, 40).await;
    share_project(&db, 701, 100, 40).await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::pm(11, 600, 10, 10)])
        .await;
    authz::refresh(&db.client, 10, &[200, 600, 700, 701])
        .await
        .unwrap();
    assert_eq!(
        pas_of_u10(&db).await,
        vec![(10, 200, 30), (10, 600, 20), (10, 700, 30)],
        "P600: max(share 20, project 10); P700: min(30, 40); P701 locked"
    );
    assert_eq!(
        authz::reached_from(&db.client, &[100]).await.unwrap(),
        vec![200, 600, 700, 701],
        "the affected set of a G100 membership: its subtree, G500 shared with it, \
         projects shared with its groups"
    );
}

#[tokio::test]
async fn prune_deletions_revokes_what_the_pruned_membership_reached_through_shares() {
    let db = world().await;
    share_group(&db, 500, 100, 30).await;
    share_project(&db, 700, 101, 30).await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::gm(12, 900, 10, 20)])
        .await;
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 600, 30), (10, 700, 30)])
        .await;
    db.exec(
        "INSERT INTO members_deletion_schedules (id, namespace_id, user_id, scheduled_by_id, created_at, updated_at)
         VALUES (1, 100, 10, 11, '2025-03-09T00:10:00Z', '2025-03-09T00:10:00Z')",
    )
    .await;
    let mut r = db.runner(t(NOW));
    let msg = Envelope::new(
        "prune-deletions.run",
        prune_deletions_key("run-1"),
        "run-1",
        t(NOW),
        PruneDeletionsRun {},
    );
    r.invoke(Function::PruneDeletions, &msg.to_body(), 1)
        .await
        .unwrap();
    assert!(!db.exists("members WHERE id = 10").await);
    assert_eq!(
        pas_of_u10(&db).await,
        vec![(10, 700, 20)],
        "P200 and P600 gone; P700 kept through U10's own G900 membership"
    );
}

#[tokio::test]
async fn a_destroyed_group_takes_the_access_its_shares_gave_with_it() {
    let db = world().await;
    // G100's tree is due for deletion. G500 is shared with G100; P700 is shared with
    // G101. U10 reaches both only through G100; U12 is a direct member of G500 and
    // keeps P600.
    Fx(&db).users(&[U::human(12)]).await;
    share_group(&db, 500, 100, 30).await;
    share_project(&db, 700, 101, 20).await;
    Fx(&db)
        .members(&[M::gm(10, 100, 10, 30), M::gm(12, 500, 12, 40)])
        .await;
    Fx(&db)
        .pas(&[(10, 200, 30), (10, 600, 30), (10, 700, 20), (12, 600, 40)])
        .await;
    db.exec(
        "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 7, '2024-01-01', '2024-01-01');
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES (100, 11, '2025-03-01')",
    )
    .await;
    let msg = Envelope::new(
        "group-destroy.run",
        shared::messages::group_destroy_key(100, integration_tests::d("2025-03-01"), 11),
        "run-1",
        t(NOW),
        shared::workers::group_destroy::GroupDestroyRun {
            group_id: 100,
            user_id: 11,
            marked_for_deletion_on: integration_tests::d("2025-03-01"),
        },
    );
    let mut r = db.runner(t(NOW));
    r.invoke(Function::GroupDestroy, &msg.to_body(), 1)
        .await
        .unwrap();
    assert!(!db.exists("namespaces WHERE id = 100").await);
    assert_eq!(
        db.pas().await,
        vec![(12, 600, 40)],
        "U10's rows through G100's shares are gone; U12's own access stays"
    );
}

/// Every relation of the instance the authorization statements read is read by key in
/// their generic plans (the plan every call of a prepared statement runs): no sequential
/// scan, no index scan without a key condition (an index on `type` alone walks every
/// group), on the bench's data shape and with `random_page_cost` at PostgreSQL's
/// default and at the 1.1 usual on SSD-backed servers, so a group's refresh costs the
/// same whatever the number of projects, namespaces and shares (docs/benchmarks.md: as
/// plain joins, the plan hashed the whole `projects` table on every call; with a
/// redundant `g = ANY(traversal_ids)` beside the subtree's range, it scanned every group
/// once per removed group membership).
#[tokio::test]
async fn the_refreshes_read_the_instance_by_key_only() {
    use lab::bench::data::{self, B38Sizes};
    let db = TestDb::new().await;
    // 200 top-level groups with two subgroups each (ids 201..600), 1,200 projects, shares.
    let c = db.session().await;
    data::b38(
        &c,
        t("2026-01-01T00:00:00Z").date_naive(),
        B38Sizes::for_expired(20_000),
    )
    .await
    .unwrap();
    // Ten project shares per project and ten group shares per group: enough rows that a
    // scan of the share tables costs more than a lookup by key.
    c.batch_execute(
        "INSERT INTO project_group_links (project_id, group_id, group_access, created_at, updated_at)
           SELECT p, 1 + (p * 7 + k * 13) % 600, 20, '2025-01-01', '2025-01-01'
           FROM generate_series(1, 1200) p, generate_series(1, 10) k ON CONFLICT DO NOTHING;
         INSERT INTO group_group_links (shared_group_id, shared_with_group_id, group_access, created_at, updated_at)
           SELECT g, 1 + (g * 7 + k * 13) % 600, 30, '2025-01-01', '2025-01-01'
           FROM generate_series(1, 600) g, generate_series(1, 10) k
           WHERE g <> 1 + (g * 7 + k * 13) % 600 ON CONFLICT DO NOTHING;
         ANALYZE",
    )
    .await
    .unwrap();
    let statements = [
        (
            "REFRESH_REMOVED",
            authz::sql::REFRESH_REMOVED,
            "'{10,11}', '{5,6}', '{10,12}', '{3,203}', '{10,11,12}'",
        ),
        ("REACHED_FROM", authz::sql::REACHED_FROM, "'{3,203}'"),
        ("REFRESH", authz::sql::REFRESH, "10, '{5,6}'"),
        (
            "PROJECT_ACCESS",
            shared::gitlab::permissions::sql::PROJECT_ACCESS,
            "10, '{5}'",
        ),
        (
            "GROUP_ACCESS",
            shared::gitlab::permissions::sql::GROUP_ACCESS,
            "10, 203",
        ),
    ];
    let mut reads = Vec::new();
    // A read is by key when its index condition names more than the row's type (an
    // index scan on `type = 'Group'` alone walks every group) and, run on this data,
    // it drops next to nothing by filter on any loop.
    fn walk(name: &str, node: &serde_json::Value, reads: &mut Vec<(String, String, String, bool)>) {
        if let Some(rel) = node.get("Relation Name").and_then(|r| r.as_str()) {
            let kind = node["Node Type"].as_str().unwrap_or_default().to_string();
            let cond = node
                .get("Index Cond")
                .or_else(|| node.get("Recheck Cond"))
                .and_then(|c| c.as_str());
            let by_type = |c: &str| c.trim() == "((type)::text = 'Group'::text)";
            let loops = node["Actual Loops"].as_f64().unwrap_or(1.0).max(1.0);
            let dropped = node["Rows Removed by Filter"].as_f64().unwrap_or(0.0) / loops;
            let keyed = kind == "ModifyTable" || cond.is_some_and(|c| !by_type(c));
            let read = format!("{kind} on {cond:?}, {dropped} rows filtered out per loop");
            reads.push((name.to_string(), rel.to_string(), read, keyed));
        }
        for child in node
            .get("Plans")
            .and_then(|p| p.as_array())
            .into_iter()
            .flatten()
        {
            walk(name, child, reads);
        }
    }
    for cost in ["4", "1.1"] {
        c.batch_execute(&format!(
            "DEALLOCATE ALL; SET plan_cache_mode = force_generic_plan; SET random_page_cost = {cost}"
        ))
        .await
        .unwrap();
        for (i, (name, sql, args)) in statements.iter().enumerate() {
            c.batch_execute(&format!("PREPARE s{i} AS {sql}"))
                .await
                .unwrap();
            let plan: serde_json::Value = c
                .query_one(
                    &format!("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE s{i}({args})"),
                    &[],
                )
                .await
                .unwrap()
                .get(0);
            walk(
                &format!("{name} at random_page_cost {cost}"),
                &plan[0]["Plan"],
                &mut reads,
            );
        }
    }
    let instance = [
        "projects",
        "namespaces",
        "project_group_links",
        "group_group_links",
        "project_authorizations",
        "members",
    ];
    let whole: Vec<_> = reads
        .iter()
        .filter(|(_, rel, kind, cond)| {
            instance.contains(&rel.as_str()) && (kind.starts_with("Seq Scan") || !cond)
        })
        .collect();
    assert!(
        reads.iter().any(|(_, rel, _, _)| rel == "projects"),
        "the plan reads projects: {reads:?}"
    );
    assert!(
        whole.is_empty(),
        "whole-relation reads in the generic plan: {whole:?}"
    );
}
