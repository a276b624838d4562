//! Bad stored values are data, not crashes: values GitLab's columns accept but no form
//! writes (dates at `-infinity`, a deletion period past the calendar) end as a logged
//! skip or a clamp, never a panic, and never stop the rest of the batch.

use std::sync::Arc;
use std::time::Duration;

use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::sinks::net::TestNetwork;
use integration_tests::{t, Fx, TestDb};
use shared::Function;

const NOW: &str = "2025-03-10T00:10:00Z";

/// G100 "acme" with P200 in G101; humans U10, U11, U12; U11 owns G100.
async fn members_fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.group(101, "web", Some(100)).await;
    fx.project(200, 101).await;
    fx.users(&[U::human(10), U::human(11), U::human(12)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db
}

/// `members.expires_at = '-infinity'` is a legal date: the membership is expired (as
/// GitLab's `expires_at <= today` says) and removed with the others, without a panic.
#[tokio::test]
async fn a_membership_expiring_at_minus_infinity_is_removed_with_the_others() {
    let db = members_fixture().await;
    let fx = Fx(&db);
    fx.members(&[
        M::pm(10, 200, 10, 30).expires("2025-03-01"),
        M::pm(11, 200, 12, 30).expires("2025-03-02"),
    ])
    .await;
    db.exec(
        "INSERT INTO members (id, access_level, source_id, source_type, type, user_id, expires_at, notification_level, member_namespace_id)
             VALUES (12, 30, 200, 'Project', 'ProjectMember', 11, '-infinity', 3, (SELECT project_namespace_id FROM projects WHERE id = 200))",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t(NOW));
    let cron = r.cron_message(Function::RemoveExpiredMembers).to_body();
    r.run_until_idle(Function::RemoveExpiredMembers, &cron)
        .await
        .unwrap();
    assert!(
        r.runs.iter().all(|run| run.outcome == "success"),
        "{:?}",
        r.runs
    );
    assert_eq!(db.count("members WHERE id IN (10, 11, 12)").await, 0);
    assert_eq!(db.count("members WHERE id = 1").await, 1);
    assert_eq!(log.done()["updated_rows"], 3);
    log.one("Expired Member ID=12 expires at -infinity");
}

/// `deletion_adjourned_period = 2147483647` reaches past the calendar: no group is due,
/// the run completes with a warning, and nothing is deleted.
#[tokio::test]
async fn a_deletion_period_past_the_calendar_makes_no_group_due() {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme-deletion_scheduled-100", None).await;
    fx.users(&[U::human(11)]).await;
    fx.members(&[M::gm(1, 100, 11, 50)]).await;
    db.exec(
        "INSERT INTO group_deletion_schedules (group_id, user_id, marked_for_deletion_on)
         VALUES (100, 11, '2025-03-03');
         INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
         VALUES (1, 2147483647, '2024-01-01', '2024-01-01')",
    )
    .await;
    let (log, _g) = capture();
    let mut r = db.runner(t("2025-03-10T02:00:00Z"));
    let cron = r.cron_message(Function::AdjournedGroupDeletion).to_body();
    r.run_until_idle(Function::AdjournedGroupDeletion, &cron)
        .await
        .unwrap();
    assert_eq!(r.runs.len(), 1, "one run, no destroy message: {:?}", r.runs);
    assert_eq!(r.runs[0].outcome, "success");
    assert_eq!(log.done()["groups_due"], 0);
    assert_eq!(log.done()["cutoff"], "0001-01-01");
    assert!(db.exists("namespaces WHERE id = 100").await);
    let warn = log.one("deletion_adjourned_period is outside GitLab's 1..=90 days: a period below 1 counts as 1 day, one past the calendar makes no group due");
    assert_eq!(warn["deletion_adjourned_period"], 2147483647);
}

/// Values GitLab's columns accept, one world each: every column of a world gets its
/// value in every row of the demo data, then every cron function runs until idle. Each
/// column the batches read that can hold such a value is in each world that applies;
/// a value a rule cannot use must be logged (the world's warnings).
/// A world: the value, the columns that get it, and the warnings its run must log.
type World = (
    &'static str,
    &'static [(&'static str, &'static str)],
    &'static [&'static str],
);

const GROUP_WARNING: &str = "Group deletion schedules marked at ±infinity: never due";
const BACKLOG_WARNING: &str =
    "Member deletion schedules created at ±infinity: left out of the oldest age";
const TOKEN_WARNING: &str = "Token time outside the calendar: shown as its first or last day";

const WORLDS: &[World] = &[
    (
        "-infinity",
        &[
            ("members", "expires_at"),
            ("group_deletion_schedules", "marked_for_deletion_on"),
            ("members_deletion_schedules", "created_at"),
            ("personal_access_tokens", "expires_at"),
            ("import_placeholder_user_details", "last_deletion_attempt_at"),
        ],
        &[GROUP_WARNING, BACKLOG_WARNING],
    ),
    (
        "infinity",
        &[
            ("members", "expires_at"),
            ("group_deletion_schedules", "marked_for_deletion_on"),
            ("members_deletion_schedules", "created_at"),
            ("personal_access_tokens", "expires_at"),
            ("import_placeholder_user_details", "last_deletion_attempt_at"),
        ],
        &[GROUP_WARNING, BACKLOG_WARNING],
    ),
    // Token times alone, so the tokens are still claimed (their expiry is untouched).
    (
        "-infinity",
        &[
            ("personal_access_tokens", "created_at"),
            ("personal_access_tokens", "last_used_at"),
        ],
        &[TOKEN_WARNING],
    ),
    (
        "infinity",
        &[
            ("personal_access_tokens", "created_at"),
            ("personal_access_tokens", "last_used_at"),
        ],
        &[TOKEN_WARNING],
    ),
    (
        "4713-01-01 BC",
        &[
            ("members", "expires_at"),
            ("group_deletion_schedules", "marked_for_deletion_on"),
            ("personal_access_tokens", "expires_at"),
        ],
        &[],
    ),
    (
        "2147483647",
        &[
            ("members", "access_level"),
            ("import_placeholder_user_details", "deletion_attempts"),
            ("application_settings", "deletion_adjourned_period"),
        ],
        &["deletion_adjourned_period is outside GitLab's 1..=90 days: a period below 1 counts as 1 day, one past the calendar makes no group due"],
    ),
    (
        "-2147483648",
        &[
            ("members", "access_level"),
            ("import_placeholder_user_details", "deletion_attempts"),
            ("application_settings", "deletion_adjourned_period"),
        ],
        &["deletion_adjourned_period is outside GitLab's 1..=90 days: a period below 1 counts as 1 day, one past the calendar makes no group due"],
    ),
];

/// A bad stored value never panics a function: in each of the [`WORLDS`], every cron
/// function (and every child it sends) runs until idle and no record ends in a panic
/// and each value a rule cannot use is a logged skip or a clamp with a warning.
#[tokio::test]
async fn extreme_stored_values_never_panic_any_function() {
    let mut panics = Vec::new();
    for (value, columns, warnings) in WORLDS {
        let mut db = TestDb::new().await;
        lab::demo::seed(&mut db.client, t(NOW).date_naive())
            .await
            .unwrap();
        db.exec(
            "INSERT INTO application_settings (id, deletion_adjourned_period, created_at, updated_at)
             VALUES (1, 7, '2024-01-01', '2024-01-01') ON CONFLICT DO NOTHING",
        )
        .await;
        for (table, column) in *columns {
            db.exec(&format!("UPDATE {table} SET {column} = '{value}'"))
                .await;
        }
        let cfg = shared::notify::NotifyConfig::from_lookup(&|k: &str| match k {
            "EMAIL_TRANSPORT" => Some("log".into()),
            other => lab::demo::hk_default(other),
        })
        .unwrap();
        let mut notifier = shared::notify::Notifier::full(&cfg, None).await.unwrap();
        // Web hooks resolve nothing: no request leaves the test.
        notifier.delivery.webhooks = shared::notify::webhook::WebhookClient::new(
            Duration::from_secs(2),
            shared::notify::LocalNetwork::Deny,
            &[],
        )
        .unwrap()
        .with_network(Arc::new(TestNetwork::new()));
        let (log, _g) = capture();
        let mut r = db.runner(t(NOW)).with_notifier(Arc::new(notifier));
        for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
            let cron = r.cron_message(*f).to_body();
            r.run_until_idle(*f, &cron).await.unwrap();
        }
        for line in log.with_message("record failed: handler panicked") {
            panics.push(format!("{value} ({}): {}", line["function"], line["error"]));
        }
        for w in *warnings {
            if log.with_message(w).is_empty() {
                panics.push(format!("{value} {columns:?}: no warning `{w}`"));
            }
        }
    }
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n"));
}
