//! `hk run <function> --dry-run --until-idle --read-only` (issue 36, docs/shadow.md):
//! the copy of the live database is made in one read-only snapshot that writes
//! nothing (every table and sequence as it was, no transaction id) and takes no lock
//! beyond reads (`pg_locks` of its session while the snapshot is open); the plan on
//! the copy is the plan on the database itself, for every cron function on the demo
//! data; a database whose schema model is not recognised is refused.

use std::collections::BTreeMap;
use std::process::Output;

use engine::local::{Plan, Run, Runner};
use engine::shadow::{self, Copied, ReadOnlySnapshot};
use integration_tests::{t, TestDb};
use serde_json::Value;
use shared::Function;
use tokio_postgres::Client;

mod common;
use common::{demo_on, hk_on, tomorrow};

const NOW: &str = "2026-03-01T00:10:00Z";

/// The demo data set on `NOW`'s date, as `hk seed demo` loads it.
async fn demo() -> TestDb {
    demo_on(NOW).await
}

/// Every sequence of `public` and its position.
async fn sequences(c: &Client) -> BTreeMap<String, (i64, bool)> {
    let names: Vec<String> = c
        .query(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE c.relkind = 'S' AND n.nspname = 'public' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let mut out = BTreeMap::new();
    for s in names {
        let r = c
            .query_one(&format!("SELECT last_value, is_called FROM {s}"), &[])
            .await
            .unwrap();
        out.insert(s, (r.get(0), r.get(1)));
    }
    out
}

/// A fresh database migrated with the model `model`, the copy's target.
async fn target(model: engine::migrate::GitlabVersion) -> TestDb {
    let mut db = TestDb::empty().await;
    engine::migrate::run_for(&mut db.client, model)
        .await
        .unwrap();
    db
}

/// Copy `source` into a new database of its model; the copy and the target.
async fn copy(source: &TestDb) -> (Copied, TestDb) {
    let mut live = source.connector().connect("read-only-copy").await.unwrap();
    let model = {
        let s = ReadOnlySnapshot::begin(&mut live).await.unwrap();
        let m = s.source.model;
        s.end().await.unwrap();
        m
    };
    let local = target(model).await;
    let s = ReadOnlySnapshot::begin(&mut live).await.unwrap();
    let copied = s.copy_into(&local.client).await.unwrap();
    s.end().await.unwrap();
    copied.finish(&local.client).await.unwrap();
    (copied, local)
}

#[tokio::test]
async fn the_copy_writes_nothing_and_takes_only_read_locks() {
    let db = demo().await;
    let rows_before = db.snapshot().await;
    let sequences_before = sequences(&db.client).await;
    assert!(
        sequences_before
            .values()
            .any(|(v, called)| *called && *v > 1),
        "the demo data moved some sequence: {sequences_before:?}"
    );

    let mut live = db.connector().connect("read-only-copy").await.unwrap();
    let s = ReadOnlySnapshot::begin(&mut live).await.unwrap();
    assert_eq!(
        s.source.model,
        integration_tests::db::gitlab_version(),
        "the model of the test database is recognised: {:?}",
        s.source
    );
    let local = target(s.source.model).await;
    let copied = s.copy_into(&local.client).await.unwrap();

    // Still inside the snapshot, which holds every lock it took until it ends: what
    // its session holds, seen from another session.
    let tx = s.transaction();
    let row = tx
        .query_one(
            "SELECT current_setting('transaction_read_only'), current_setting('transaction_isolation'),
                    pg_current_xact_id_if_assigned() IS NULL",
            &[],
        )
        .await
        .unwrap();
    let (ro, iso, no_xid): (String, String, bool) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((ro.as_str(), iso.as_str()), ("on", "repeatable read"));
    assert!(
        no_xid,
        "no transaction id was assigned: nothing was written"
    );
    let beyond = shadow::locks_beyond_reads(&db.client, s.pid).await.unwrap();
    assert!(beyond.is_empty(), "locks beyond reads: {beyond:?}");
    let read: Vec<String> = db
        .client
        .query(
            "SELECT relation::regclass::text FROM pg_locks
              WHERE pid = $1 AND granted AND locktype = 'relation' AND mode = 'AccessShareLock'",
            &[&s.pid],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    for table in ["members", "users", "namespaces", "project_authorizations"] {
        assert!(
            read.iter().any(|r| r == table),
            "the copy read {table} in the snapshot: {read:?}"
        );
    }
    s.end().await.unwrap();
    copied.finish(&local.client).await.unwrap();

    // Nothing changed on the source: every row of every table, every sequence.
    assert_eq!(db.snapshot().await, rows_before);
    assert_eq!(sequences(&db.client).await, sequences_before);

    // The copy holds every row, and the sequences stand where the source's do.
    for tc in &copied.tables {
        let n: i64 = db
            .scalar(&format!("SELECT count(*) FROM {}", tc.table))
            .await;
        assert_eq!(tc.rows as i64, n, "rows of {}", tc.table);
    }
    assert_eq!(local.snapshot().await, rows_before);
    assert_eq!(sequences(&local.client).await, sequences_before);
    assert!(copied.rows() > 1000, "{} rows", copied.rows());
}

/// What a plan decided, comparable between two databases: the whole `--json` plan
/// (per-table counts, removed ids, dead letters, slices, and whatever else a plan
/// records) but the lock figures (each server's own), and every run's key, outcome,
/// report and error.
fn decided(runs: &[Run], plan: &Plan) -> Value {
    let mut p = plan.to_json()["plan"].clone();
    p["locks"] = Value::Null;
    serde_json::json!({
        "plan": p,
        "runs": runs.iter().map(|r| serde_json::json!([
            r.function.name(), r.message_key, r.outcome, r.report.as_ref().map(|x| x.to_json()), r.error,
        ])).collect::<Vec<_>>(),
    })
}

async fn plan_on(url: &str, f: Function, body: &str) -> (Vec<Run>, Plan) {
    let connector = shared::db::Connector::from_url(url).unwrap();
    let mut runner = Runner::new(connector, shared::config::Settings::default(), t(NOW));
    if matches!(f, Function::PatExpiring | Function::DeliverNotification) {
        // hk's embedded defaults, as `hk run --dry-run` uses them; the plan sends nothing.
        let lookup = |k: &str| lab::demo::hk_default(k);
        let cfg = shared::notify::NotifyConfig::from_lookup(&lookup).unwrap();
        let notifier = shared::notify::Notifier::full(&cfg, None).await.unwrap();
        runner = runner.with_notifier(std::sync::Arc::new(notifier));
    }
    let plan = runner.plan_until_idle(f, body).await.unwrap();
    (runner.runs.clone(), plan)
}

#[tokio::test]
async fn the_plan_on_the_copy_is_the_plan_on_the_database() {
    let db = demo().await;
    let (copied, local) = copy(&db).await;
    let mut checked = Vec::new();
    for &f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let body = Runner::new(db.connector(), Default::default(), t(NOW))
            .cron_message(f)
            .to_body();
        // The copy first: the plan on the source advances the source's sequences.
        let (runs_copy, on_copy) = plan_on(&local.url, f, &body).await;
        let (runs_db, on_db) = plan_on(&db.url, f, &body).await;
        let (a, b) = (decided(&runs_db, &on_db), decided(&runs_copy, &on_copy));
        assert_eq!(a, b, "{f}: the plan on the copy differs");
        checked.push((f, on_db.tables.len(), on_db.decisions.len()));
    }
    // The comparison covers real work: the demo data gives most functions some, and
    // their decisions (docs/parity.md) are compared with the rest of the plan.
    let busy = checked.iter().filter(|(_, n, d)| *n > 0 && *d > 0).count();
    assert!(
        busy >= 3,
        "functions with changes and decisions: {checked:?}"
    );
    // No blocking key outside the copied tables: nothing for the live check to find.
    let mut live = db.connector().connect("t").await.unwrap();
    let groups: Vec<i64> = db.ids("namespaces WHERE type = 'Group'").await;
    let found = shadow::live_blockers(&mut live, &groups, &copied.table_names())
        .await
        .unwrap();
    assert!(found.is_empty(), "{found:?}");
}

#[tokio::test]
async fn rows_in_tables_the_copy_lacks_are_looked_up_on_the_live_database() {
    let db = demo().await;
    let group: i64 = db
        .scalar("SELECT min(id) FROM namespaces WHERE type = 'Group' AND parent_id IS NULL")
        .await;
    db.exec(&format!(
        "CREATE TABLE outside_model (id bigint PRIMARY KEY, group_id bigint NOT NULL
           REFERENCES namespaces(id) ON DELETE RESTRICT);
         INSERT INTO outside_model VALUES (1, {group}), (2, {group})"
    ))
    .await;
    let (copied, _local) = copy(&db).await;
    assert!(!copied.table_names().contains("outside_model"));
    let mut live = db.connector().connect("t").await.unwrap();
    let found = shadow::live_blockers(&mut live, &[group], &copied.table_names())
        .await
        .unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains(&format!(
            "group {group}: 2 row(s) in outside_model.group_id"
        )) && found[0].contains("ends blocked"),
        "{found:?}"
    );
}

fn hk(url: &str, args: &[&str], tmp: &std::path::Path) -> Output {
    let o = hk_on(url)
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .expect("hk runs");
    eprintln!(
        "hk {args:?} -> {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

fn lines(o: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn hk_run_read_only_plans_on_a_throwaway_copy() {
    let now = tomorrow();
    let db = demo_on(&now).await;
    let before = db.snapshot().await;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let tmp = std::env::temp_dir().join(format!("hk-t{}", &id[..8]));
    std::fs::create_dir_all(&tmp).unwrap();
    let args = [
        "run",
        "remove-expired-members",
        "--now",
        &now,
        "--dry-run",
        "--until-idle",
        "--json",
    ];
    let ro = hk(&db.url, &[&args[..], &["--read-only"]].concat(), &tmp);
    assert_eq!(ro.status.code(), Some(0));
    let ro = lines(&ro);
    assert_eq!(
        db.snapshot().await,
        before,
        "the live database is unchanged"
    );
    let copy = &ro.last().unwrap()["plan"]["read_only"];
    assert_eq!(
        copy["model"],
        integration_tests::db::gitlab_version().as_str()
    );
    assert!(copy["rows_copied"].as_i64().unwrap() > 1000, "{copy}");
    assert_eq!(copy["live_blockers"], serde_json::json!([]));
    assert_eq!(copy["approximations"].as_array().unwrap().len(), 4);
    // The copy's cluster is gone.
    assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);

    let plain = lines(&hk(&db.url, &args, &tmp));
    let plan = |v: &[Value]| {
        let mut p = v.last().unwrap()["plan"].clone();
        p["locks"] = Value::Null;
        p["sequences_advanced"] = Value::Null;
        p.as_object_mut().unwrap().remove("read_only");
        p
    };
    assert!(plan(&plain)["removed_users"].as_array().unwrap().len() == 1);
    assert_eq!(plan(&ro), plan(&plain));
    assert_eq!(ro.len(), plain.len(), "the same runs");
    std::fs::remove_dir(&tmp).unwrap();
}

#[tokio::test]
async fn an_unrecognised_schema_model_is_refused() {
    let tmp = std::env::temp_dir();
    // Not GitLab at all.
    let db = TestDb::new().await;
    db.exec("DROP TABLE schema_migrations").await;
    let mut live = db.connector().connect("t").await.unwrap();
    let e = ReadOnlySnapshot::begin(&mut live).await.err().unwrap();
    assert!(
        format!("{e:#}").contains("not recognised: no schema_migrations table"),
        "{e:#}"
    );

    // Older than 18.2.
    let db = TestDb::new().await;
    db.exec("DELETE FROM schema_migrations WHERE version >= '20250709143510'")
        .await;
    let o = hk(
        &db.url,
        &[
            "run",
            "remove-expired-members",
            "--now",
            NOW,
            "--dry-run",
            "--until-idle",
            "--read-only",
        ],
        &tmp,
    );
    assert_eq!(o.status.code(), Some(2), "refused as permanent");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("schema model is not recognised") && err.contains("GitLab 18.1"),
        "{err}"
    );

    // Newer than tested: past 19.5's release.
    let db = TestDb::new().await;
    db.exec("INSERT INTO schema_migrations (version) VALUES ('20261110000000')")
        .await;
    let mut live = db.connector().connect("t").await.unwrap();
    let e = ReadOnlySnapshot::begin(&mut live).await.err().unwrap();
    assert!(
        format!("{e:#}").contains("copies GitLab 18.2 to 19.5 only"),
        "{e:#}"
    );

    // A release whose columns GitLab never had: 18.2's migrations with the newer
    // deletion columns (or, on the 18.2 model, 18.11's migrations without them).
    let db = TestDb::new().await;
    if integration_tests::db::gitlab_version() == engine::migrate::GitlabVersion::V18_2 {
        db.exec("INSERT INTO schema_migrations (version) VALUES ('20260117231951')")
            .await;
    } else {
        db.exec("DELETE FROM schema_migrations WHERE version >= '20250722084637'")
            .await;
    }
    let mut live = db.connector().connect("t").await.unwrap();
    let e = ReadOnlySnapshot::begin(&mut live).await.err().unwrap();
    assert!(format!("{e:#}").contains("deletion model"), "{e:#}");
}

#[test]
fn the_model_follows_the_release_and_its_deletion_columns() {
    use engine::migrate::GitlabVersion::*;
    use shared::gitlab::deletion_model::DeletionModel::*;
    assert_eq!(shadow::model_for("18.2", Schedules), Some(V18_2));
    assert_eq!(shadow::model_for("18.3", Schedules), Some(V18_2));
    assert_eq!(shadow::model_for("18.4", StateColumns), Some(V18_8));
    assert_eq!(shadow::model_for("18.8", StateColumns), Some(V18_8));
    assert_eq!(shadow::model_for("18.9", StateColumns), Some(V18_8));
    assert_eq!(shadow::model_for("18.9", ScheduledAt), Some(V18_11));
    assert_eq!(shadow::model_for("18.1", Schedules), None);
    assert_eq!(shadow::model_for("18.2", StateColumns), None);
    assert_eq!(shadow::model_for("18.8", ScheduledAt), None);
    assert_eq!(shadow::model_for("19.0", ScheduledAt), Some(V19_5));
    assert_eq!(shadow::model_for("19.5", ScheduledAt), Some(V19_5));
    assert_eq!(shadow::model_for("19.0", StateColumns), None);
    assert_eq!(shadow::model_for("19.6", ScheduledAt), None);
}
