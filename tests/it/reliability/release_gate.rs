//! The cold-start release gate (issue 45): a database whose newest GitLab migration is
//! past the tested range stops every function at cold start with one clear line
//! naming the release, the migration and the range, and the `schema_incompatible`
//! metric the paging alarm reads; nothing is processed. With `GITLAB_SCHEMA_ACCEPTED`
//! at that migration the same batch runs, and the next GitLab upgrade (a newer
//! migration) is refused again.

use std::collections::HashMap;
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use engine::local_queue::LocalQueue;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::{t, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use shared::clock::FixedClock;
use shared::config::Config;
use shared::db::Session;
use shared::gitlab::release;
use shared::handlers::Dispatch;
use shared::lambda::{handle_event_checked, Deps, InvokeError, SchemaGate};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

fn event() -> SqsEvent {
    let p = format!(
        "{}/../events/remove-expired-members.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn deps(db: &TestDb, function: Function, accepted: Option<&str>) -> Deps {
    let mut env: HashMap<&str, String> = HashMap::from([
        ("DATABASE_URL", db.url.clone()),
        ("TRANSPORT", "local".into()),
    ]);
    if let Some(v) = accepted {
        env.insert("GITLAB_SCHEMA_ACCEPTED", v.to_string());
    }
    Deps {
        function,
        session: Session::new(db.connector(), function.name()),
        config: Config::from_lookup(|k| env.get(k).cloned()).unwrap(),
        queue: Arc::new(LocalQueue::new(t(NOW))),
        clock: Arc::new(FixedClock(t(NOW))),
        notifier: None,
        storage: None,
    }
}

async fn invoke(deps: &Deps) -> Result<usize, InvokeError> {
    let r = handle_event_checked(
        &Dispatch,
        deps,
        &SchemaGate::new(),
        LambdaEvent::new(event(), Context::default()),
    )
    .await?;
    Ok(r.batch_item_failures.len())
}

/// A migration version `step` past the first one the tested range excludes.
fn past_range(step: u64) -> String {
    let first: u64 = release::PAST_NEWEST.parse().unwrap();
    (first + step).to_string()
}

#[tokio::test]
async fn a_release_past_the_tested_range_stops_every_function_until_accepted() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    let newer = past_range(0);
    db.exec(&format!(
        "INSERT INTO schema_migrations (version) VALUES ('{newer}')"
    ))
    .await;

    for f in Function::ALL {
        let (log, _g) = capture();
        let err = invoke(&deps(&db, *f, None))
            .await
            .expect_err("the invocation fails as a whole");
        let InvokeError::ReleaseRefused(reason) = &err else {
            panic!("{f}: {err}");
        };
        for part in [
            format!("GitLab newer than {}", release::NEWEST),
            newer.clone(),
            release::range(),
            format!("GITLAB_SCHEMA_ACCEPTED={newer}"),
        ] {
            assert!(
                reason.contains(&part),
                "{f}: `{part}` missing from {reason}"
            );
        }
        let refused: Vec<_> = log
            .lines()
            .into_iter()
            .filter(|l| l["error_class"] == "release_refused")
            .collect();
        assert_eq!(refused.len(), 1, "{f}: one line\n{}", log.dump());
        assert_eq!(refused[0]["level"], "error");
        assert_eq!(refused[0]["function"], f.name());
        let emf: Vec<_> = log
            .with_message("metrics")
            .into_iter()
            .filter(|l| l["schema_incompatible"] == 1.0)
            .collect();
        assert_eq!(emf.len(), 1, "{f}: the paging metric\n{}", log.dump());
        assert!(
            log.with_message("start").is_empty(),
            "{f}: no record started\n{}",
            log.dump()
        );
    }
    assert!(
        db.exists("members WHERE id = 10").await,
        "nothing processed"
    );

    // Accepted at exactly this migration: the batch runs.
    let failures = invoke(&deps(&db, Function::RemoveExpiredMembers, Some(&newer)))
        .await
        .expect("an accepted schema is served");
    assert_eq!(failures, 0);
    assert!(
        !db.exists("members WHERE id = 10").await,
        "processed once accepted"
    );

    // The next GitLab upgrade is past what was accepted: refused again.
    db.exec(&format!(
        "INSERT INTO schema_migrations (version) VALUES ('{}')",
        past_range(1)
    ))
    .await;
    let err = invoke(&deps(&db, Function::RemoveExpiredMembers, Some(&newer)))
        .await
        .expect_err("a later upgrade is refused");
    assert!(matches!(err, InvokeError::ReleaseRefused(_)), "{err}");
}

#[tokio::test]
async fn a_release_older_than_the_range_is_refused_and_no_override_helps() {
    let db = TestDb::new().await;
    db.exec("DELETE FROM schema_migrations").await;
    db.exec("INSERT INTO schema_migrations (version) VALUES ('20250526065102')")
        .await;
    let err = invoke(&deps(&db, Function::PatExpiring, Some("29991231235959")))
        .await
        .expect_err("18.1 is refused");
    let InvokeError::ReleaseRefused(reason) = &err else {
        panic!("{err}");
    };
    assert!(
        reason.contains("GitLab 18.1") && reason.contains("older than the tested range"),
        "{reason}"
    );
}

#[test]
fn the_accepted_version_is_checked_at_start_naming_the_variable() {
    let env = HashMap::from([
        ("DATABASE_URL", "postgres://h/db".to_string()),
        ("TRANSPORT", "local".into()),
        ("GITLAB_SCHEMA_ACCEPTED", "19.6".into()),
    ]);
    let e = Config::from_lookup(|k| env.get(k).cloned()).unwrap_err();
    assert!(e.to_string().contains("GITLAB_SCHEMA_ACCEPTED"), "{e}");
}
