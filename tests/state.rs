//! Canonical database state for equivalence checks (chaos runs against a clean run).
//!
//! Two runs that did the same work leave the same rows, but not byte for byte: the
//! timestamps they write come from their own virtual clocks, and rows they insert
//! (the ghost user, its namespace and route, `ghost_user_migrations`) get identity
//! values that depend on how many inserts were rolled back before. The canonical
//! form therefore masks every `timestamp` value (NULL stays NULL), and replaces the
//! id of every row inserted after the [`Baseline`] with a label (`<new users #0>`,
//! ranked by the row's masked content), in the row itself and in every column that
//! refers to it (foreign keys, `namespaces.owner_id`, `traversal_ids`, and the
//! polymorphic `source_id` of `routes`, `members` and `notification_settings`).
//! Everything else is compared exactly.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::db::TestDb;

/// The highest id of every table with an `id` column, before the runs.
#[derive(Debug, Clone)]
pub struct Baseline {
    max_ids: BTreeMap<String, i64>,
}

/// A reference from a column to a table.
#[derive(Debug, Clone)]
enum Ref {
    /// The column holds an id of the table.
    To(String),
    /// The column holds an array of ids of the table.
    ArrayTo(String),
    /// `source_id` whose table depends on `source_type` (`Namespace` or `Project`).
    Polymorphic,
}

async fn tables(db: &TestDb) -> Vec<String> {
    db.client
        .query(
            "SELECT table_name::text FROM information_schema.tables
             WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
               AND table_name NOT LIKE 'refinery%' ORDER BY 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

impl Baseline {
    /// Record the highest id of every table.
    pub async fn capture(db: &TestDb) -> Baseline {
        let mut max_ids = BTreeMap::new();
        for t in tables(db).await {
            if has_id(db, &t).await {
                let m: i64 = db
                    .scalar(&format!("SELECT coalesce(max(id), 0)::bigint FROM {t}"))
                    .await;
                max_ids.insert(t, m);
            }
        }
        Baseline { max_ids }
    }
}

async fn has_id(db: &TestDb, table: &str) -> bool {
    db.exists(&format!(
        "information_schema.columns WHERE table_schema = 'public' AND table_name = '{table}' AND column_name = 'id'"
    ))
    .await
}

async fn references(db: &TestDb) -> BTreeMap<(String, String), Ref> {
    let mut refs = BTreeMap::new();
    for r in db
        .client
        .query(
            "SELECT c.conrelid::regclass::text, a.attname::text, c.confrelid::regclass::text
             FROM pg_constraint c
             JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
             WHERE c.contype = 'f' AND cardinality(c.conkey) = 1
               AND c.connamespace = 'public'::regnamespace",
            &[],
        )
        .await
        .unwrap()
    {
        refs.insert((r.get(0), r.get(1)), Ref::To(r.get(2)));
    }
    // References the subset keeps without a foreign key (behaviour §S).
    refs.insert(
        ("namespaces".into(), "owner_id".into()),
        Ref::To("users".into()),
    );
    refs.insert(
        ("namespaces".into(), "traversal_ids".into()),
        Ref::ArrayTo("namespaces".into()),
    );
    for t in ["routes", "members", "notification_settings"] {
        refs.insert((t.into(), "source_id".into()), Ref::Polymorphic);
    }
    refs
}

async fn timestamp_columns(db: &TestDb) -> BTreeSet<(String, String)> {
    db.client
        .query(
            "SELECT table_name::text, column_name::text FROM information_schema.columns
             WHERE table_schema = 'public' AND data_type LIKE 'timestamp%'",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Keys sorted at every level, so equal data prints equal.
fn canonical_text(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> =
                    m.iter().map(|(k, v)| (k, sort(v))).collect();
                serde_json::to_value(sorted).unwrap()
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    sort(v).to_string()
}

fn target_of(r: &Ref, row: &serde_json::Map<String, Value>) -> Option<String> {
    match r {
        Ref::To(t) | Ref::ArrayTo(t) => Some(t.clone()),
        Ref::Polymorphic => match row.get("source_type").and_then(Value::as_str) {
            Some("Namespace") => Some("namespaces".into()),
            Some("Project") => Some("projects".into()),
            _ => None,
        },
    }
}

/// Every table's rows in canonical form (see the module docs), each table's rows
/// sorted. Two states are equivalent exactly when these maps are equal.
pub async fn canonical(db: &TestDb, base: &Baseline) -> BTreeMap<String, Vec<String>> {
    let refs = references(db).await;
    let stamps = timestamp_columns(db).await;
    let mut rows: BTreeMap<String, Vec<serde_json::Map<String, Value>>> = BTreeMap::new();
    for t in tables(db).await {
        let r: Vec<serde_json::Map<String, Value>> = db
            .client
            .query(&format!("SELECT row_to_json(x)::text FROM {t} x"), &[])
            .await
            .unwrap()
            .iter()
            .map(
                |r| match serde_json::from_str(r.get::<_, &str>(0)).unwrap() {
                    Value::Object(m) => m,
                    _ => unreachable!("row_to_json gives objects"),
                },
            )
            .collect();
        rows.insert(t, r);
    }
    // Which ids are new.
    let is_new = |table: &str, id: i64| base.max_ids.get(table).is_some_and(|m| id > *m);
    // Pass 1: mask timestamps; mark references to new rows.
    let masked = |table: &str,
                  row: &serde_json::Map<String, Value>,
                  labels: &BTreeMap<(String, i64), String>| {
        let mut out = serde_json::Map::new();
        for (col, v) in row {
            let key = (table.to_string(), col.clone());
            let v = if stamps.contains(&key) && !v.is_null() {
                Value::from("<timestamp>")
            } else if col == "id" && v.as_i64().is_some_and(|id| is_new(table, id)) {
                let id = v.as_i64().unwrap();
                Value::from(
                    labels
                        .get(&(table.to_string(), id))
                        .cloned()
                        .unwrap_or_else(|| "<new>".into()),
                )
            } else if let Some(r) = refs.get(&key) {
                let target = target_of(r, row);
                let map = |x: &Value| -> Value {
                    match (&target, x.as_i64()) {
                        (Some(t), Some(id)) if is_new(t, id) => Value::from(
                            labels
                                .get(&(t.clone(), id))
                                .cloned()
                                .unwrap_or_else(|| "<new>".into()),
                        ),
                        _ => x.clone(),
                    }
                };
                match (r, v) {
                    (Ref::ArrayTo(_), Value::Array(a)) => Value::Array(a.iter().map(map).collect()),
                    _ => map(v),
                }
            } else {
                v.clone()
            };
            out.insert(col.clone(), v);
        }
        Value::Object(out)
    };
    // Pass 2: label new rows by their rank in masked content (labels unknown yet).
    let mut labels: BTreeMap<(String, i64), String> = BTreeMap::new();
    for (t, rs) in &rows {
        let mut new: Vec<(String, i64)> = rs
            .iter()
            .filter_map(|r| {
                let id = r.get("id")?.as_i64()?;
                is_new(t, id).then(|| (canonical_text(&masked(t, r, &BTreeMap::new())), id))
            })
            .collect();
        new.sort();
        for (k, (_, id)) in new.into_iter().enumerate() {
            labels.insert((t.clone(), id), format!("<new {t} #{k}>"));
        }
    }
    // Pass 3: the canonical rows.
    rows.iter()
        .map(|(t, rs)| {
            let mut v: Vec<String> = rs
                .iter()
                .map(|r| canonical_text(&masked(t, r, &labels)))
                .collect();
            v.sort();
            (t.clone(), v)
        })
        .collect()
}

/// The first difference between two canonical states, for assertion messages.
pub fn first_difference(
    a: &BTreeMap<String, Vec<String>>,
    b: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    for (t, ra) in a {
        let Some(rb) = b.get(t) else {
            return Some(format!("table {t} missing on the right"));
        };
        if ra != rb {
            let only_a: Vec<&String> = ra.iter().filter(|r| !rb.contains(r)).take(5).collect();
            let only_b: Vec<&String> = rb.iter().filter(|r| !ra.contains(r)).take(5).collect();
            return Some(format!(
                "table {t}: {} vs {} rows\n  only left:  {only_a:?}\n  only right: {only_b:?}",
                ra.len(),
                rb.len()
            ));
        }
    }
    b.keys()
        .find(|t| !a.contains_key(*t))
        .map(|t| format!("table {t} missing on the left"))
}

const NO_GHOST: &str = "
    DELETE FROM routes WHERE source_type = 'Namespace'
      AND source_id IN (SELECT id FROM namespaces WHERE owner_id IN (SELECT id FROM users WHERE user_type = 5));
    DELETE FROM namespaces WHERE owner_id IN (SELECT id FROM users WHERE user_type = 5);
    DELETE FROM users WHERE user_type = 5;";

/// The rich data set of the reliability tests: the demo data of `hk demo` (dates
/// relative to `now`), without its ghost user, so that phase 2 creates one. Built once
/// per cluster into a template database named after its content.
pub async fn demo_without_ghost(now: chrono::DateTime<chrono::Utc>) -> TestDb {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (lab::demo::DEMO_SQL, NO_GHOST, now.date_naive().to_string()).hash(&mut h);
    let template = format!("hk_demo_{:016x}", h.finish());
    TestDb::from_template(&template, |mut db| async move {
        lab::demo::seed(&mut db.client, now.date_naive())
            .await
            .expect("demo seed");
        db.exec(NO_GHOST).await;
        db
    })
    .await
}
