//! The test harness itself: a passing test's database is dropped with it, a failing
//! test's database is kept for inspection.

use integration_tests::TestDb;
use tokio_postgres::Client;

async fn database_exists(observer: &Client, name: &str) -> bool {
    observer
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)",
            &[&name],
        )
        .await
        .expect("read pg_database")
        .get(0)
}

#[tokio::test]
async fn a_passing_test_drops_its_database_and_a_failing_one_keeps_it() {
    let observer = TestDb::new().await;

    let passing = TestDb::new().await;
    let name = passing.name.clone();
    assert!(database_exists(&observer.client, &name).await);
    drop(passing);
    assert!(
        !database_exists(&observer.client, &name).await,
        "{name} is left behind after its TestDb was dropped"
    );

    // A failing test: its TestDb is dropped while its thread unwinds from a panic.
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let db = rt.block_on(TestDb::new());
        tx.send(db.name.clone()).expect("send the name");
        panic!("a failing test (expected by harness::a_passing_test_drops_its_database_and_a_failing_one_keeps_it)");
    })
    .join();
    assert!(failed.is_err(), "the thread was to panic");
    let kept = rx.recv().expect("the failing test's database name");
    assert!(
        database_exists(&observer.client, &kept).await,
        "{kept} was dropped although its test failed"
    );
    observer
        .client
        .batch_execute(&format!("DROP DATABASE {kept} WITH (FORCE)"))
        .await
        .expect("drop the kept database");
}
