//! B51 at scale: 60 due groups through the real SQS + Scheduler adapter on moto
//! (indexes ≤ 45 as SQS delays, the rest as one-time schedules), and a three-level
//! tree with 50 projects and 1,000 members destroyed until idle with no orphan row
//! left in any table of the schema.

use shared::handlers::Dispatch;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::assert::assert_fields;
use aws_sdk_scheduler::types::ActionAfterCompletion;
use engine::local::process_record;
use integration_tests::aws::{
    config_for, create_queue, moto_config, moto_endpoint, proxy::FaultProxy,
};
use integration_tests::fixtures::U;
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use serde_json::json;
use shared::clock::FixedClock;
use shared::config::{QueueTarget, SchedulerTarget, Settings};
use shared::messages::Envelope;
use shared::queue::{schedule_name, sqs::at_expression, sqs::SqsQueue};
use shared::runtime::{Invocation, RecordMeta};
use shared::Function;

const NOW: &str = "2025-03-10T02:00:00Z";
const CRON: Function = Function::AdjournedGroupDeletion;

#[tokio::test]
async fn sixty_due_groups_go_to_sqs_up_to_index_45_and_to_one_time_schedules_after() {
    const N: i64 = 60;
    let db = TestDb::new().await;
    super::period(&db, 1, 7).await;
    Fx(&db).users(&[U::human(11).admin()]).await;
    db.exec(&format!(
        "INSERT INTO namespaces (id, name, path, type, traversal_ids, created_at, updated_at, organization_id)
           SELECT g, 'g' || g, 'g' || g, 'Group', ARRAY[g]::bigint[], '2024-01-01', '2024-01-01'
          , 1 FROM generate_series(1000, {last}) g;
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
           SELECT g, 11, '2025-03-03' FROM generate_series(1000, {last}) g;",
        last = 1000 + N - 1
    ))
    .await;
    // The group-destroy queue and DLQ on moto; SQS calls pass a recording proxy.
    let moto = moto_config().await;
    let sqs = aws_sdk_sqs::Client::new(&moto);
    let scheduler = aws_sdk_scheduler::Client::new(&moto);
    let (url, arn) = create_queue(&sqs, "group-destroy").await;
    let (_, dlq_arn) = create_queue(&sqs, "group-destroy-dlq").await;
    let (own_url, own_arn) = create_queue(&sqs, "adjourned-group-deletion").await;
    let group = format!("hk-{}", uuid::Uuid::new_v4().simple());
    scheduler
        .create_schedule_group()
        .name(&group)
        .send()
        .await
        .expect("schedule group");
    let proxy = FaultProxy::start(&moto_endpoint()).await;
    let via_proxy = config_for(&proxy.endpoint).await;
    let routes = HashMap::from([
        (
            Function::GroupDestroy,
            QueueTarget {
                url: url.clone(),
                arn: Some(arn.clone()),
                dlq_arn: Some(dlq_arn.clone()),
            },
        ),
        (
            CRON,
            QueueTarget {
                url: own_url,
                arn: Some(own_arn),
                dlq_arn: None,
            },
        ),
    ]);
    let queue = SqsQueue::new(
        aws_sdk_sqs::Client::new(&via_proxy),
        scheduler.clone(),
        routes,
        Some(SchedulerTarget {
            group_name: group.clone(),
            role_arn: "arn:aws:iam::123456789012:role/hk-scheduler".into(),
        }),
        Arc::new(FixedClock(t(NOW))),
    );
    // The handler, exactly as Lambda runs it, with the AWS transport.
    let settings = Settings::default();
    let inv = Invocation::new(CRON, t(NOW), &queue, &settings);
    let (log, _g) = capture();
    let mut client = db.connector().connect(CRON.name()).await.unwrap();
    let body = Envelope::cron(CRON, "run-moto", t(NOW)).to_body();
    let outcome = process_record(
        &Dispatch::new(),
        &inv,
        &mut client,
        &body,
        &RecordMeta::default(),
    )
    .await;
    assert!(outcome.is_success(), "{outcome:?}");
    assert_eq!(log.done()["destroy_enqueued"], N);
    let key = |i: i64| format!("group-destroy:{}:2025-03-03:11", 1000 + i);

    // Indexes 0..=45: SendMessageBatch entries to the group-destroy queue.
    let mut sqs_delays: BTreeMap<String, i64> = BTreeMap::new();
    for req in proxy.request_bodies("SendMessageBatch") {
        assert_eq!(req["QueueUrl"], url.as_str());
        for e in req["Entries"].as_array().unwrap() {
            let env: Envelope = serde_json::from_str(e["MessageBody"].as_str().unwrap()).unwrap();
            assert_eq!(
                e["MessageAttributes"]["message_key"]["StringValue"],
                env.message_key.as_str()
            );
            let delay = e["DelaySeconds"].as_i64().unwrap_or(0);
            assert!(
                sqs_delays.insert(env.message_key, delay).is_none(),
                "sent once"
            );
        }
    }
    let expected: BTreeMap<String, i64> = (0..=45).map(|i| (key(i), 20 * i)).collect();
    assert_eq!(sqs_delays, expected);
    assert_eq!(sqs_delays[&key(45)], 900);
    // moto holds them: one visible now (delay 0), 45 delayed.
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap();
    let attr = |n: aws_sdk_sqs::types::QueueAttributeName| attrs[&n].parse::<i64>().unwrap();
    assert_eq!(
        attr(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages),
        1
    );
    assert_eq!(
        attr(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesDelayed),
        45
    );

    // Indexes 46..60: one-time schedules at now + index × 20 s, deleted after completion.
    let listed: BTreeSet<String> = scheduler
        .list_schedules()
        .group_name(&group)
        .send()
        .await
        .unwrap()
        .schedules()
        .iter()
        .filter_map(|s| s.name().map(str::to_string))
        .collect();
    let expected_names: BTreeSet<String> = (46..N).map(|i| schedule_name(&key(i))).collect();
    assert_eq!(listed, expected_names);
    for i in 46..N {
        let got = scheduler
            .get_schedule()
            .name(schedule_name(&key(i)))
            .group_name(&group)
            .send()
            .await
            .expect("schedule exists");
        let at = at_expression(t(NOW), (20 * i) as u32);
        assert_eq!(got.schedule_expression(), Some(at.as_str()));
        assert_eq!(got.schedule_expression_timezone(), Some("UTC"));
        assert_eq!(
            got.action_after_completion(),
            Some(&ActionAfterCompletion::Delete)
        );
        let target = got.target().unwrap();
        assert_eq!(target.arn(), arn);
        assert_eq!(
            target.dead_letter_config().and_then(|d| d.arn()),
            Some(dlq_arn.as_str())
        );
        let env: Envelope = serde_json::from_str(target.input().unwrap()).unwrap();
        assert_eq!(env.message_key, key(i));
        assert_eq!(env.kind, "group-destroy.run");
        assert_eq!(env.payload["group_id"], 1000 + i);
    }
    let first = scheduler
        .get_schedule()
        .name(schedule_name(&key(46)))
        .group_name(&group)
        .send()
        .await
        .unwrap();
    assert_eq!(first.schedule_expression(), Some("at(2025-03-10T02:15:20)"));

    // The cron running twice in one day: duplicate schedules are ConflictExceptions,
    // which count as success; nothing new is scheduled.
    let mut client = db.connector().connect(CRON.name()).await.unwrap();
    let again = Envelope::cron(CRON, "run-moto-2", t(NOW)).to_body();
    let outcome = process_record(
        &Dispatch::new(),
        &inv,
        &mut client,
        &again,
        &RecordMeta::default(),
    )
    .await;
    assert!(outcome.is_success(), "{outcome:?}");
    let listed_again = scheduler
        .list_schedules()
        .group_name(&group)
        .send()
        .await
        .unwrap()
        .schedules()
        .len();
    assert_eq!(listed_again, (N - 46) as usize);
}

/// The ten groups of the tree: root 5000; 5001–5003 below it; 5011–5016 below those.
pub(super) const TREE: [i64; 10] = [5000, 5001, 5002, 5003, 5011, 5012, 5013, 5014, 5015, 5016];

/// Root G5000 (scheduled 2025-03-01 by U11, an owner) with three subgroups (5001
/// also scheduled) and six sub-subgroups; 50 projects spread over the ten groups; 200
/// humans and 6 bots with 1,000 memberships (invites and a request among them);
/// authorizations, notification settings, hooks, contributions, member-deletion
/// schedules, import rows. Control data in G8000 / P8001 must survive.
async fn tree() -> TestDb {
    let db = TestDb::new().await;
    super::period(&db, 1, 7).await;
    let fx = Fx(&db);
    fx.users(&[U::human(11), U::ghost(5), U::placeholder(3100)])
        .await;
    db.exec(
        "INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'u' || g, 'u' || g || '@example.com', 'active', 0, 100000, 1 FROM generate_series(2001, 2200) g;
         INSERT INTO users (id, username, email, state, user_type, projects_limit, organization_id)
           SELECT g, 'bot' || g, 'bot' || g || '@noreply.example.com', 'active', 6, 100000, 1 FROM generate_series(3001, 3006) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id) VALUES
           (5000, 'big-deletion_scheduled-5000', 'big-deletion_scheduled-5000', 'Group', NULL, '{5000}', 1),
           (8000, 'keep', 'keep', 'Group', NULL, '{8000}', 1);
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id)
           SELECT g, 'l2-' || g, 'l2-' || g, 'Group', 5000, ARRAY[5000, g], 1 FROM generate_series(5001, 5003) g;
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id)
           SELECT g, 'l3-' || g, 'l3-' || g, 'Group', 5001 + (g - 5011) / 2,
                  ARRAY[5000, 5001 + (g - 5011) / 2, g]
          , 1 FROM generate_series(5011, 5016) g;
         INSERT INTO routes (source_id, source_type, path, name, namespace_id)
           SELECT n.id, 'Namespace',
                  (SELECT string_agg(a.path, '/' ORDER BY u.o) FROM unnest(n.traversal_ids) WITH ORDINALITY u(aid, o) JOIN namespaces a ON a.id = u.aid),
                  (SELECT string_agg(a.name, ' / ' ORDER BY u.o) FROM unnest(n.traversal_ids) WITH ORDINALITY u(aid, o) JOIN namespaces a ON a.id = u.aid),
                  n.id
           FROM namespaces n WHERE n.type = 'Group';
         INSERT INTO namespaces (id, name, path, type, parent_id, traversal_ids, organization_id)
           SELECT p + 1000, 'p' || p, 'p' || p, 'Project', x.ns, n.traversal_ids || (p + 1000)::bigint
          , 1 FROM (SELECT p, (ARRAY[5000, 5001, 5002, 5003, 5011, 5012, 5013, 5014, 5015, 5016])[(p - 6001) % 10 + 1] AS ns
                 FROM generate_series(6001, 6050) p
                 UNION ALL SELECT 8001, 8000) x
           JOIN namespaces n ON n.id = x.ns;
         INSERT INTO projects (id, name, path, namespace_id, project_namespace_id, organization_id)
           SELECT id - 1000, path, path, parent_id, id, 1 FROM namespaces WHERE type = 'Project';
         INSERT INTO routes (source_id, source_type, path, name, namespace_id)
           SELECT p.id, 'Project', r.path || '/' || p.path, r.name || ' / ' || p.path, p.project_namespace_id
           FROM projects p JOIN routes r ON r.source_type = 'Namespace' AND r.source_id = p.namespace_id;
         -- 1,000 memberships in the tree.
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level) VALUES
           (1, 50, 5000, 'Namespace', 'GroupMember', 11, 5000, 3);
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level)
           SELECT 10000 + j, 30, 6001 + j / 14, 'Project', 'ProjectMember', 2001 + j % 200, 7001 + j / 14
          , 3 FROM generate_series(0, 699) j;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level)
           SELECT 11000 + j, 20, (ARRAY[5000, 5001, 5002, 5003, 5011, 5012, 5013, 5014, 5015, 5016])[j % 10 + 1],
                  'Namespace', 'GroupMember', 2001 + (j * 7) % 200,
                  (ARRAY[5000, 5001, 5002, 5003, 5011, 5012, 5013, 5014, 5015, 5016])[j % 10 + 1]
          , 3 FROM generate_series(0, 290) j;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level)
           SELECT 12000 + b - 3000, 40, 6001 + (b - 3001) * 10, 'Project', 'ProjectMember', b, 7001 + (b - 3001) * 10
          , 3 FROM generate_series(3001, 3005) b;
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level) VALUES
           (12006, 30, 5011, 'Namespace', 'GroupMember', 3006, 5011, 3);
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, invite_email, invite_token, member_namespace_id, notification_level) VALUES
           (12100, 30, 6002, 'Project', 'ProjectMember', NULL, 'x@example.org', 'tok-1', 7002, 3);
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, requested_at, member_namespace_id, notification_level) VALUES
           (12101, 30, 5002, 'Namespace', 'GroupMember', 2002, '2025-03-01', 5002, 3);
         -- Control: G8000 / P8001 with its own members.
         INSERT INTO members (id, access_level, source_id, source_type, type, user_id, member_namespace_id, notification_level) VALUES
           (13000, 30, 8001, 'Project', 'ProjectMember', 2001, 9001, 3),
           (13001, 50, 8000, 'Namespace', 'GroupMember', 2002, 8000, 3);
         INSERT INTO notification_settings (user_id, source_id, source_type, level, created_at, updated_at)
           SELECT DISTINCT user_id, source_id, source_type, 3, '2024-01-01'::timestamp, '2024-01-01'::timestamp
           FROM members WHERE user_id IS NOT NULL;
         INSERT INTO web_hooks (project_id, type) SELECT id, 'ProjectHook' FROM projects;
         INSERT INTO web_hooks (group_id, type) SELECT id, 'GroupHook' FROM namespaces WHERE type = 'Group';
         INSERT INTO issues (project_id, author_id, namespace_id, work_item_type_id) SELECT p.id, 2001, (SELECT project_namespace_id FROM projects WHERE id = p.id), 1 FROM projects p, generate_series(1, 3);
         INSERT INTO merge_requests (target_project_id, author_id, target_branch, source_branch) SELECT p.id, 2002, 'main', 'feature' FROM projects p, generate_series(1, 2);
         INSERT INTO notes (project_id, author_id, noteable_type) SELECT p.id, 3001, 'Issue' FROM projects p, generate_series(1, 5);
         INSERT INTO personal_access_tokens (user_id, name, created_at, updated_at, organization_id)
           SELECT g, 'bot token', '2024-01-01', '2024-01-01', 1 FROM generate_series(3001, 3006) g;
         INSERT INTO members_deletion_schedules (namespace_id, user_id, scheduled_by_id, created_at, updated_at) VALUES
           (5000, 2001, 11, '2025-03-01', '2025-03-01'),
           (5011, 2002, 11, '2025-03-01', '2025-03-01'),
           (8000, 2003, 2002, '2025-03-01', '2025-03-01');
         INSERT INTO import_source_users (placeholder_user_id, namespace_id, source_user_identifier, source_hostname, import_type, created_at, updated_at) VALUES
           (3100, 5000, '1', 'https://github.com', 'github', '2025-03-01', '2025-03-01'),
           (3100, 5012, '2', 'https://github.com', 'github', '2025-03-01', '2025-03-01'),
           (3100, 8000, '3', 'https://github.com', 'github', '2025-03-01', '2025-03-01');
         INSERT INTO import_placeholder_user_details (placeholder_user_id, namespace_id, organization_id, created_at, updated_at) VALUES
           (3100, 5000, 1, '2025-03-01', '2025-03-01'),
           (3100, 5013, 1, '2025-03-01', '2025-03-01'),
           (3100, 8000, 1, '2025-03-01', '2025-03-01');
         INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on) VALUES
           (5000, 11, '2025-03-01'), (5001, 11, '2025-03-02');",
    )
    .await;
    assert_eq!(
        db.count("members WHERE source_id BETWEEN 5000 AND 6999")
            .await,
        1000
    );
    // Authorizations as GitLab keeps them, derived with the same refresh.
    let projects = db.ids("projects").await;
    for u in db.ids("users").await {
        shared::gitlab::authz::refresh(&db.client, u, &projects)
            .await
            .unwrap();
    }
    db
}

#[tokio::test]
async fn a_three_level_tree_is_destroyed_until_idle_without_orphan_rows() {
    let db = tree().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let body = r.cron_message(CRON).to_body();
    r.run_until_idle(CRON, &body).await.unwrap();
    assert_eq!(r.exit_code(false), 0, "{}", log.dump());
    assert!(r.dead_letters().is_empty());
    // The root's destroy (index 0) took everything; the subgroup's (index 1, 20 s
    // later) found its group gone.
    assert_fields(
        &log.one("Group destroyed"),
        json!({"group_id": 5000, "projects_deleted": 50, "groups_deleted": 10}),
    );
    assert_eq!(
        log.one("Group destroy skipped: group not found")["group_id"],
        5001
    );
    // Six bots went through both phases of user removal.
    assert_eq!(log.with_message("User deleted").len(), 6);

    // Every table of the schema is checked.
    let tables: BTreeSet<String> = db
        .client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
               AND to_regclass(format('%I.%I', table_schema, table_name)) NOT IN (SELECT inhrelid FROM pg_inherits)",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let checks = super::orphan_checks::orphan_checks();
    let covered: BTreeSet<String> = checks.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(
        tables, covered,
        "every table of the schema has an orphan check"
    );
    for (table, from_where) in &checks {
        if let Some(fw) = from_where {
            assert_eq!(db.count(fw).await, 0, "orphans in {table}: {fw}");
        }
    }
    // The placeholders' details lost their namespace (eligible for B70), not their rows.
    assert_eq!(
        db.count("import_placeholder_user_details WHERE namespace_id IS NULL")
            .await,
        2
    );
    // Humans stay; the control group is untouched.
    assert_eq!(db.count("users WHERE id BETWEEN 2001 AND 2200").await, 200);
    assert!(db.exists("users WHERE id = 11 AND state = 'active'").await);
    assert_eq!(db.ids("namespaces").await, vec![8000, 9001]);
    assert_eq!(db.ids("projects").await, vec![8001]);
    assert_eq!(db.ids("members").await, vec![13000, 13001]);
    assert_eq!(db.count("routes").await, 2);
    assert_eq!(db.pas().await, vec![(2001, 8001, 30), (2002, 8001, 50)]);
    assert_eq!(db.count("web_hooks").await, 2);
    assert_eq!(
        (
            db.count("issues").await,
            db.count("merge_requests").await,
            db.count("notes WHERE project_id = 8001").await
        ),
        (3, 2, 5)
    );
    assert_eq!(db.count("notification_settings").await, 2);
    assert_eq!(db.count("members_deletion_schedules").await, 1);
    assert_eq!(db.count("import_source_users").await, 1);
    assert!(
        db.exists("import_placeholder_user_details WHERE namespace_id = 8000")
            .await
    );
    // GitLab's loose-FK triggers recorded every deleted group, project namespace,
    // project and bot for GitLab's cleanup of the children left to it.
    let recorded = |table: &str, ids: &str| {
        format!(
            "(SELECT DISTINCT primary_key_value FROM loose_foreign_keys_deleted_records
              WHERE fully_qualified_table_name = 'public.{table}' AND primary_key_value = ANY({ids})) x"
        )
    };
    let tree =
        format!("ARRAY{TREE:?}::bigint[] || ARRAY(SELECT generate_series(7001, 7050))::bigint[]");
    assert_eq!(db.count(&recorded("namespaces", &tree)).await, 60);
    let projects = "ARRAY(SELECT generate_series(6001, 6050))::bigint[]";
    assert_eq!(db.count(&recorded("projects", projects)).await, 50);
    let bots = "ARRAY(SELECT generate_series(3001, 3006))::bigint[]";
    assert_eq!(db.count(&recorded("users", bots)).await, 6);
}
