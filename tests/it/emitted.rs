//! What the functions emit: every EMF line of a local run of every function, for the
//! observability tests and the template tests (alarms and dashboard may reference
//! only what is emitted).
//!
//! [`emitted_metrics`] runs the five cron functions until idle on the demo data set
//! (so every child runs too: delete-user, prune-deletions, group-destroy,
//! delete-placeholder-user, deliver-notification with real SMTP and HTTP sinks), one
//! storage-cleanup item of each kind (no storage client: the failure path), plus
//! one malformed record per function, with the `hk` local runner, then the cold-start
//! schema gate of every function against a schema it refuses (the alarm on
//! `schema_incompatible` reads it), and collects every EMF line written.

use std::collections::BTreeSet;

use integration_tests::logs::capture;
use integration_tests::notice::{publish_demo_hooks, Notices};
use integration_tests::state::demo_without_ghost;
use integration_tests::t;
use serde_json::Value;
use shared::messages::Envelope;
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// One metric as emitted: the line's namespace and dimension names, the function
/// (the `function` dimension's value), the metric name and its unit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct EmittedMetric {
    /// `_aws.CloudWatchMetrics[].Namespace`.
    pub namespace: String,
    /// `_aws.CloudWatchMetrics[].Dimensions[0]` (e.g. `["Service", "function"]`).
    pub dimensions: Vec<String>,
    /// The function that emitted it.
    pub function: String,
    /// The metric name.
    pub name: String,
    /// Its unit (`Count`, `Seconds`).
    pub unit: String,
}

/// Everything emitted by one local run of every function.
#[derive(Debug, Clone, Default)]
pub struct Emitted {
    /// Every distinct (namespace, dimensions, function, metric, unit).
    pub metrics: BTreeSet<EmittedMetric>,
    /// Every `Service` value seen.
    pub services: BTreeSet<String>,
    /// Every log line of the run (for the log-field tests).
    pub lines: Vec<Value>,
}

impl Emitted {
    /// Whether `function` emitted `name`.
    pub fn has(&self, function: &str, name: &str) -> bool {
        self.metrics
            .iter()
            .any(|m| m.function == function && m.name == name)
    }
}

/// The metrics of EMF lines among `lines`.
pub fn collect(lines: &[Value]) -> Emitted {
    let mut e = Emitted {
        lines: lines.to_vec(),
        ..Emitted::default()
    };
    for l in lines.iter().filter(|l| l.get("_aws").is_some()) {
        let function = l["function"].as_str().unwrap_or_default().to_string();
        if let Some(s) = l["Service"].as_str() {
            e.services.insert(s.to_string());
        }
        for d in l["_aws"]["CloudWatchMetrics"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let dims: Vec<String> = d["Dimensions"][0]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x.as_str().map(String::from))
                .collect();
            for m in d["Metrics"].as_array().into_iter().flatten() {
                e.metrics.insert(EmittedMetric {
                    namespace: d["Namespace"].as_str().unwrap_or_default().into(),
                    dimensions: dims.clone(),
                    function: function.clone(),
                    name: m["Name"].as_str().unwrap_or_default().into(),
                    unit: m["Unit"].as_str().unwrap_or_default().into(),
                });
            }
        }
    }
    e
}

/// Run every function locally (demo data, every cron until idle, one malformed
/// record each) and collect what it emitted. Needs the test database (`DATABASE_URL`
/// of `hk db up`); takes a few seconds.
pub async fn emitted_metrics() -> Emitted {
    let db = demo_without_ghost(t(NOW)).await;
    publish_demo_hooks(&db).await;
    let notices = Notices::start().await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW)).with_notifier(notices.notifier.clone());
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let body = r.cron_message(*f).to_body();
        r.run_until_idle(*f, &body).await.expect("the run ends");
    }
    // storage-cleanup, one item of each kind of a project that is gone, with no client
    // (storage off): its per-kind metrics.
    let mut r = r.with_storage(std::sync::Arc::new(shared::storage::Storage::default()));
    for body in storage_items() {
        r.invoke(Function::StorageCleanup, &body, 1)
            .await
            .expect("invoked");
    }
    for f in Function::ALL {
        r.invoke(*f, &malformed(*f), 1).await.expect("invoked");
    }
    refuse_the_schema_in_every_function(&db).await;
    collect(&log.lines())
}

/// Each function's cold-start schema gate (shared/src/lambda.rs) on a schema it
/// refuses: a table one of its own statements reads renamed away while it checks (a
/// function checks only the statements it can run, issue 52), as in
/// tests/it/reliability/cold_start.rs, which tests the refusal itself.
async fn refuse_the_schema_in_every_function(db: &integration_tests::TestDb) {
    use shared::lambda::{Environment, SchemaGate};
    let queue = std::sync::Arc::new(engine::local_queue::LocalQueue::new(t(NOW)));
    let (model, has) = shared::preflight::probe_all(&db.client).await.unwrap();
    for f in Function::ALL.iter().copied() {
        let table = a_table_it_reads(db, f, model, &has).await;
        db.exec(&format!("ALTER TABLE {table} RENAME TO {table}_away"))
            .await;
        let env = [
            ("DATABASE_URL", db.url.clone()),
            ("TRANSPORT", "local".into()),
        ];
        let lookup = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let deps = Environment::new(
            f,
            shared::config::Config::from_lookup(lookup).unwrap(),
            db.connector(),
            queue.clone(),
        )
        .with_clock(std::sync::Arc::new(shared::clock::FixedClock(t(NOW))));
        let refused = SchemaGate::new().check(&deps).await;
        assert!(
            matches!(
                refused,
                Err(shared::lambda::InvokeError::SchemaIncompatible(_))
            ),
            "{f}: the gate let an incompatible schema ({table} missing) through"
        );
        db.exec(&format!("ALTER TABLE {table}_away RENAME TO {table}"))
            .await;
    }
}

/// The first table named after `FROM` in the statements `f` checks at cold start.
async fn a_table_it_reads(
    db: &integration_tests::TestDb,
    f: Function,
    model: shared::gitlab::deletion_model::DeletionModel,
    has: &[shared::catalogue::Column],
) -> String {
    for s in shared::catalogue::for_function(f, model, has) {
        for after in s.text.split("FROM ").skip(1) {
            let word: String = after
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !word.is_empty()
                && db
                    .exists(&format!("pg_tables WHERE tablename = '{word}'"))
                    .await
            {
                return word;
            }
        }
    }
    panic!("{f}: no statement of it reads a table")
}

/// One `storage-cleanup.remove` per kind, for project 999999 (never there).
fn storage_items() -> Vec<String> {
    use shared::config::storage::Bucket;
    use shared::gitlab::storage::StorageItem;
    use shared::workers::storage_cleanup::{storage_cleanup_key, StorageCleanupRun};
    [
        StorageItem::Repository {
            storage: "default".into(),
            relative_path: format!(
                "{}.git",
                shared::gitlab::storage::item::project_disk_path(999_999)
            ),
            snippet_id: None,
        },
        StorageItem::ContainerRepository {
            id: 999_999,
            path: "gone/project".into(),
        },
        StorageItem::Object {
            bucket: Bucket::Uploads,
            key: "project/avatar/999999/gone.png".into(),
        },
    ]
    .into_iter()
    .map(|item| {
        Envelope::new(
            "storage-cleanup.remove",
            storage_cleanup_key(999_999, &item),
            "r-storage",
            t(NOW),
            StorageCleanupRun {
                group_id: 999_999,
                project_id: 999_999,
                item,
            },
        )
        .to_body()
    })
    .collect()
}

/// A record of `f` that does not parse as an envelope (version 2): malformed.
pub fn malformed(f: Function) -> String {
    let mut v: Value = serde_json::from_str(&Envelope::cron(f, "r-bad", t(NOW)).to_body()).unwrap();
    v["version"] = Value::from(2);
    v["type"] = Value::from(f.accepts()[0]);
    v.to_string()
}
