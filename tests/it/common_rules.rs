//! The common rules (behaviour §2–§5) exercised directly: the authorization refresh,
//! the last-owner and sole-owner rules, and phase 1 of user removal.

use crate::assert::assert_user_state;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use shared::gitlab::membership::{self, Member, Refresh, MEMBER_COLUMNS};
use shared::gitlab::user_removal::{schedule_removal, PhaseOne, RemovalRequest};

/// The invocation phase 1 runs in at `now` (its intents go back to the caller, not to
/// this queue).
pub(crate) fn phase_one_invocation(
    now: chrono::DateTime<chrono::Utc>,
) -> shared::runtime::Invocation<'static> {
    use std::sync::LazyLock;
    static QUEUE: LazyLock<engine::local_queue::LocalQueue> =
        LazyLock::new(|| engine::local_queue::LocalQueue::new(t(NOW)));
    static SETTINGS: LazyLock<shared::config::Settings> =
        LazyLock::new(shared::config::Settings::default);
    shared::runtime::Invocation::new(shared::Function::DeleteUser, now, &*QUEUE, &SETTINGS)
}
use shared::gitlab::{authz, hierarchy, permissions, Intent};

const NOW: &str = "2025-03-10T00:10:00Z";

/// G100 > G101 > G102; P200 in G101, P201 in G102, P202 in G100; G500 with P600.
async fn tree() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.group(102, "deep", Some(101)).await;
    fx.group(500, "other", None).await;
    fx.project(200, 101).await;
    fx.project(201, 102).await;
    fx.project(202, 100).await;
    fx.project(600, 500).await;
    fx.users(&[U::human(10), U::human(11), U::human(12), U::bot(20)])
        .await;
    db
}

#[tokio::test]
async fn hierarchy_queries_follow_traversal_ids() {
    let db = tree().await;
    assert_eq!(
        hierarchy::descendant_groups(&db.client, 101).await.unwrap(),
        vec![101, 102]
    );
    assert_eq!(
        hierarchy::projects_under(&db.client, 100).await.unwrap(),
        vec![200, 201, 202]
    );
    assert_eq!(
        hierarchy::projects_under(&db.client, 102).await.unwrap(),
        vec![201]
    );
    assert_eq!(
        hierarchy::owner_scope(&db.client, 102).await.unwrap(),
        vec![100, 101, 102]
    );
    assert_eq!(
        hierarchy::owner_scope(&db.client, 100).await.unwrap(),
        vec![100]
    );
    assert_eq!(
        hierarchy::owner_scope(&db.client, 999).await.unwrap(),
        vec![999]
    );
}

#[tokio::test]
async fn refresh_derives_access_from_memberships_and_touches_only_the_given_projects() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.members(&[
        M::gm(1, 100, 10, 20),          // reporter on the whole tree
        M::pm(2, 201, 10, 40),          // maintainer on P201
        M::gm(3, 500, 10, 5),           // minimal access: no row
        M::gm(4, 101, 10, 50).state(1), // awaiting: no access
        M::gm(5, 102, 10, 30).requested("2025-03-01T00:00:00Z"), // access request: no access
    ])
    .await;
    // Stale rows: a wrong level inside P, a row outside P that must not change.
    fx.pas(&[(10, 200, 50), (10, 600, 30)]).await;
    let c = authz::refresh(&db.client, 10, &[200, 201, 202])
        .await
        .unwrap();
    assert_eq!(
        db.pas().await,
        vec![(10, 200, 20), (10, 201, 40), (10, 202, 20), (10, 600, 30)]
    );
    assert_eq!((c.deleted, c.written), (1, 3));
    // Idempotent.
    let c = authz::refresh(&db.client, 10, &[200, 201, 202, 600])
        .await
        .unwrap();
    assert_eq!(
        db.pas().await,
        vec![(10, 200, 20), (10, 201, 40), (10, 202, 20)]
    );
    assert_eq!((c.deleted, c.written), (1, 0));
}

#[tokio::test]
async fn refresh_gives_the_owner_of_a_personal_namespace_owner_access() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.personal_namespace(900, 10).await;
    Fx(&db).project_path(901, 900, "mine").await;
    authz::refresh(&db.client, 10, &[901]).await.unwrap();
    assert_eq!(db.pas().await, vec![(10, 901, 50)]);
}

#[tokio::test]
async fn removing_a_group_membership_refreshes_every_project_below_it() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.members(&[M::gm(1, 101, 10, 30), M::gm(2, 100, 10, 10)])
        .await;
    authz::refresh(&db.client, 10, &[200, 201, 202, 600])
        .await
        .unwrap();
    assert_eq!(
        db.pas().await,
        vec![(10, 200, 30), (10, 201, 30), (10, 202, 10)]
    );
    let row = db
        .client
        .query_one(
            &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = 1"),
            &[],
        )
        .await
        .unwrap();
    let m = Member::from_row(&row);
    assert!(m.is_group() && m.is_active());
    membership::remove_membership(&db.client, &m, Refresh::Now)
        .await
        .unwrap();
    assert_eq!(
        db.pas().await,
        vec![(10, 200, 10), (10, 201, 10), (10, 202, 10)]
    );
}

#[tokio::test]
async fn counted_owners_are_active_non_bot_owner_rows_in_the_owner_scope() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.users(&[U::human(13).blocked()]).await;
    fx.members(&[
        M::gm(1, 100, 11, 50),
        M::gm(2, 100, 20, 50),          // bot: never counted
        M::gm(3, 100, 13, 50),          // blocked: not counted
        M::gm(4, 100, 12, 50).state(1), // awaiting: not counted
        M::gm(5, 102, 10, 50),          // subgroup owner
    ])
    .await;
    // M1 is the only counted owner of the top-level group.
    assert!(
        !permissions::other_counted_owner_exists(&db.client, &[100], 1)
            .await
            .unwrap()
    );
    // M5 in a subgroup counts the inherited owner M1.
    let scope = hierarchy::owner_scope(&db.client, 102).await.unwrap();
    assert!(
        permissions::other_counted_owner_exists(&db.client, &scope, 5)
            .await
            .unwrap()
    );
    assert_eq!(
        permissions::sole_owned_groups(&db.client, 11)
            .await
            .unwrap(),
        vec![100]
    );
    assert!(permissions::sole_owned_groups(&db.client, 10)
        .await
        .unwrap()
        .is_empty());
    assert!(permissions::sole_owned_groups(&db.client, 20)
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn phase_one_refuses_a_sole_owner_and_changes_nothing() {
    let db = tree().await;
    Fx(&db).members(&[M::gm(1, 100, 11, 50)]).await;
    let (log, _g) = capture();
    let mut tx_client = db.session().await;
    let tx = tx_client.transaction().await.unwrap();
    let mut intents = Vec::new();
    let req = RemovalRequest {
        user_id: 11,
        initiator: None,
        reason: "test",
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    let r = schedule_removal(&tx, &phase_one_invocation(t(NOW)), &req, &mut intents)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(r, PhaseOne::Refused);
    assert!(intents.is_empty());
    let w = log.one("User removal refused: sole owner of group");
    assert_eq!(w["group_ids"], "[100]");
    assert_user_state(&db, 11, "active").await;
}

#[tokio::test]
async fn phase_one_refuses_a_user_with_personal_projects() {
    let db = tree().await;
    Fx(&db).personal_namespace(900, 12).await;
    Fx(&db).project_path(901, 900, "mine").await;
    let (log, _g) = capture();
    let mut intents = Vec::new();
    let req = RemovalRequest {
        user_id: 12,
        initiator: None,
        reason: "test",
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    let r = schedule_removal(
        &db.client,
        &phase_one_invocation(t(NOW)),
        &req,
        &mut intents,
    )
    .await
    .unwrap();
    assert_eq!(r, PhaseOne::Refused);
    assert_eq!(
        log.one("User removal refused: user owns personal projects")["project_ids"],
        "[901]"
    );
}

#[tokio::test]
async fn phase_one_of_a_missing_user_is_not_found() {
    let db = tree().await;
    let (log, _g) = capture();
    let mut intents = Vec::new();
    let req = RemovalRequest {
        user_id: 999,
        initiator: None,
        reason: "test",
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    let r = schedule_removal(
        &db.client,
        &phase_one_invocation(t(NOW)),
        &req,
        &mut intents,
    )
    .await
    .unwrap();
    assert_eq!(r, PhaseOne::NotFound);
    log.one("User removal skipped: user not found");
}

#[tokio::test]
async fn phase_one_is_idempotent() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.members(&[M::gm(1, 101, 20, 30), M::pm(2, 600, 20, 40)])
        .await;
    fx.notification(20, "Namespace", 101).await;
    fx.notification(20, "Project", 600).await;
    fx.pat(1, 20, None).await;
    authz::refresh(&db.client, 20, &[200, 201, 202, 600])
        .await
        .unwrap();
    assert_eq!(db.pas().await.len(), 3);
    let req = RemovalRequest {
        user_id: 20,
        initiator: Some(11),
        reason: "Group deleted",
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    for round in 0..2 {
        let mut intents = Vec::new();
        let r = schedule_removal(
            &db.client,
            &phase_one_invocation(t(NOW)),
            &req,
            &mut intents,
        )
        .await
        .unwrap();
        let expect = if round == 0 {
            PhaseOne::Scheduled {
                memberships_deleted: 2,
                tokens_revoked: 1,
            }
        } else {
            PhaseOne::Scheduled {
                memberships_deleted: 0,
                tokens_revoked: 0,
            }
        };
        assert_eq!(r, expect);
        let outbox: Vec<_> = Intent::messages(intents, "run", t(NOW)).collect();
        assert_eq!(outbox.len(), 1, "delete-user is sent again every time");
        assert_eq!(outbox[0].envelope.message_key, "delete-user:20");
    }
    assert!(db.pas().await.is_empty());
    assert_eq!(db.count("notification_settings").await, 0);
    assert_eq!(
        db.count("ghost_user_migrations WHERE user_id = 20 AND initiator_user_id = 11")
            .await,
        1
    );
    assert_user_state(&db, 20, "blocked").await;
}

mod permission_rules {
    use super::*;
    use shared::gitlab::permissions::{self as p, Denial};

    async fn member(db: &TestDb, id: i64) -> Member {
        let row = db
            .client
            .query_one(
                &format!("SELECT {MEMBER_COLUMNS} FROM members WHERE id = {id}"),
                &[],
            )
            .await
            .unwrap();
        Member::from_row(&row)
    }

    async fn actor(db: &TestDb, id: i64) -> p::Actor {
        p::load_actor(&db.client, id).await.unwrap().unwrap()
    }

    #[tokio::test]
    async fn access_levels_come_from_active_memberships_of_ancestors_and_the_project() {
        let db = tree().await;
        Fx(&db)
            .members(&[
                M::gm(1, 100, 10, 30),
                M::gm(2, 102, 10, 40).state(1),
                M::pm(3, 201, 10, 50),
                M::gm(4, 101, 11, 5),
            ])
            .await;
        let c = &db.client;
        assert_eq!(
            p::group_access(c, 10, 102).await.unwrap(),
            30,
            "inherited; the awaiting row does not count"
        );
        assert_eq!(p::group_access(c, 10, 500).await.unwrap(), 0);
        assert_eq!(
            p::group_access(c, 11, 101).await.unwrap(),
            0,
            "minimal access grants nothing"
        );
        assert_eq!(
            p::group_access(c, 10, 999).await.unwrap(),
            0,
            "missing group"
        );
        assert_eq!(p::project_access(c, 10, 201).await.unwrap(), 50);
        assert_eq!(p::project_access(c, 10, 200).await.unwrap(), 30);
        assert_eq!(p::project_access(c, 10, 600).await.unwrap(), 0);
        assert_eq!(p::project_access(c, 10, 999).await.unwrap(), 0);
        assert!(p::load_actor(c, 999).await.unwrap().is_none());
    }

    #[tokio::test]
    async fn permission_rules_need_an_active_user_and_admins_have_them_all() {
        let db = tree().await;
        let fx = Fx(&db);
        fx.users(&[
            U::human(1).admin(),
            U::human(2).admin().blocked(),
            U::human(13).blocked(),
        ])
        .await;
        fx.members(&[
            M::gm(1, 100, 11, 50),
            M::gm(2, 100, 13, 50),
            M::pm(3, 200, 12, 40),
        ])
        .await;
        let c = &db.client;
        let (admin, blocked_admin, owner, blocked_owner, maint) = (
            actor(&db, 1).await,
            actor(&db, 2).await,
            actor(&db, 11).await,
            actor(&db, 13).await,
            actor(&db, 12).await,
        );
        assert!(p::remove_group(c, &admin, 500).await.unwrap());
        assert!(!p::remove_group(c, &blocked_admin, 500).await.unwrap());
        assert!(
            p::remove_group(c, &owner, 102).await.unwrap(),
            "ownership is inherited"
        );
        assert!(!p::owner(c, &blocked_owner, 100).await.unwrap());
        assert!(p::admin_project_member(c, &maint, 200).await.unwrap());
        assert!(!p::project_owner(c, &maint, 200).await.unwrap());
        assert!(p::project_owner(c, &owner, 200).await.unwrap());
        assert!(p::admin_group_member(c, &owner, 101).await.unwrap());
        assert!(!p::admin_group_member(c, &maint, 101).await.unwrap());
    }

    #[tokio::test]
    async fn can_remove_member_applies_the_rules_in_order() {
        let db = tree().await;
        let fx = Fx(&db);
        fx.users(&[U::human(1).admin(), U::human(13).blocked(), U::human(14)])
            .await;
        fx.members(&[
            M::gm(1, 100, 11, 50), // the only owner of G100
            M::gm(2, 101, 20, 30), // a bot's group membership
            M::gm(3, 101, 10, 30),
            M::pm(4, 200, 10, 50), // a project owner row
            M::pm(5, 200, 10, 30),
            M::pm(6, 200, 12, 40), // U12: maintainer of P200
        ])
        .await;
        let c = &db.client;
        let admin = actor(&db, 1).await;
        let owner = actor(&db, 11).await;
        let maint = actor(&db, 12).await;
        let inactive = actor(&db, 13).await;
        let check = |a: p::Actor, m: i64| {
            let db = &db;
            async move {
                p::can_remove_member(&db.client, &a, &member(db, m).await)
                    .await
                    .unwrap()
            }
        };
        assert_eq!(check(inactive, 3).await, Some(Denial::ActorInactive));
        assert_eq!(
            check(admin, 2).await,
            Some(Denial::ProjectBotGroupMember),
            "even for admins"
        );
        assert_eq!(check(maint, 3).await, Some(Denial::NotAuthorized));
        assert_eq!(check(admin, 1).await, Some(Denial::LastOwner));
        assert_eq!(check(owner, 3).await, None);
        assert_eq!(check(maint, 5).await, None);
        assert_eq!(check(maint, 4).await, Some(Denial::OwnerRequired));
        assert_eq!(check(owner, 4).await, None);
        let outsider = actor(&db, 14).await;
        assert_eq!(check(outsider, 6).await, Some(Denial::NotAuthorized));
        assert_eq!(
            Denial::ProjectBotGroupMember.code(),
            "project_bot_group_member"
        );
        let _ = c;
    }
}

#[tokio::test]
async fn a_blocked_user_holding_the_only_owner_row_is_a_sole_owner_for_phase_one() {
    let db = tree().await;
    let fx = Fx(&db);
    fx.users(&[
        U::human(13).blocked(),
        U::human(14).state(Some("deactivated")),
    ])
    .await;
    fx.members(&[M::gm(1, 100, 13, 50), M::gm(2, 100, 14, 50)])
        .await;
    // Neither counts; each is the only owner row besides an uncounted one.
    assert_eq!(
        permissions::sole_owned_groups(&db.client, 13)
            .await
            .unwrap(),
        vec![100]
    );
    let (log, _g) = capture();
    let mut intents = Vec::new();
    let req = RemovalRequest {
        user_id: 13,
        initiator: None,
        reason: "test",
        extra_affected: &[],
        bot_resource: None,
        reason_for_deletion: None,
    };
    let r = schedule_removal(
        &db.client,
        &phase_one_invocation(t(NOW)),
        &req,
        &mut intents,
    )
    .await
    .unwrap();
    assert_eq!(r, PhaseOne::Refused);
    assert_eq!(
        log.one("User removal refused: sole owner of group")["group_ids"],
        "[100]"
    );
    assert!(db.exists("members WHERE id = 1").await);
    // An active co-owner makes the blocked one removable.
    fx.members(&[M::gm(3, 100, 11, 50)]).await;
    assert!(permissions::sole_owned_groups(&db.client, 13)
        .await
        .unwrap()
        .is_empty());
}
