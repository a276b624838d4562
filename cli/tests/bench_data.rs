//! The bench data loads (`lab::bench::data`) run without GitLab's row triggers and
//! foreign-key checks, then add the trigger rows set-based: each data set loaded that
//! way is row for row the set a load firing every trigger and checking every key
//! leaves (which also proves the generated rows break no foreign key).

use chrono::NaiveDate;
use integration_tests::TestDb;
use lab::bench::data::{self, B28Sizes, B38Sizes};

fn today() -> NaiveDate {
    NaiveDate::from_ymd_opt(2026, 3, 1).unwrap()
}

const ALL: [&str; 3] = [
    "namespace_details",
    "projects_sync_events",
    "project_authorizations_for_migration",
];

async fn same_rows_both_ways(sql: &str, trigger_tables: &[&str]) {
    let fired = TestDb::new().await;
    data::load(&fired.session().await, sql, true).await.unwrap();
    let fast = TestDb::new().await;
    let session = fast.session().await;
    data::load(&session, sql, false).await.unwrap();
    let (a, b) = (fired.snapshot().await, fast.snapshot().await);
    for table in trigger_tables {
        assert_ne!(a[*table], "[]", "{table}: the data set writes trigger rows");
    }
    for (table, rows) in &a {
        assert!(rows == &b[table], "{table} differs between the two loads");
    }
    // The session is back to firing triggers once the load is over.
    let role: String = session
        .query_one("SHOW session_replication_role", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(role, "origin");
}

#[tokio::test]
async fn b38_set_loads_as_with_triggers() {
    same_rows_both_ways(
        &data::b38_sql(today(), B38Sizes::for_expired(2_000), true),
        &ALL,
    )
    .await;
}

#[tokio::test]
async fn b28_set_loads_as_with_triggers() {
    same_rows_both_ways(
        &data::b28_sql(today(), B28Sizes::new(2_000, 300)),
        &ALL[..2],
    )
    .await;
}

/// Every B28 token has its own digest, as every GitLab token does: the unique digest
/// index then costs the bench what it costs production (one entry per token, a
/// uniqueness check per claimed row), not a run of NULLs that no instance has.
#[tokio::test]
async fn b28_tokens_each_have_a_unique_digest() {
    let db = TestDb::new().await;
    let c = db.session().await;
    data::load(
        &c,
        &data::b28_sql(today(), B28Sizes::new(2_000, 300)),
        false,
    )
    .await
    .unwrap();
    let r = c
        .query_one(
            "SELECT count(*), count(DISTINCT token_digest), count(token_digest) \
             FROM personal_access_tokens",
            &[],
        )
        .await
        .unwrap();
    let (all, distinct, set): (i64, i64, i64) = (r.get(0), r.get(1), r.get(2));
    assert_eq!(all, 2_000);
    assert_eq!(
        (distinct, set),
        (all, all),
        "every token has its own digest"
    );
}
