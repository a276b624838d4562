//! Secret rotation (issue 20): a warm function whose database or SMTP password is
//! rotated in Secrets Manager (moto) re-reads the secret once and carries on; a wrong
//! secret costs at most one re-read per bound, not one per record.
//!
//! The throwaway cluster trusts every login, so these tests make it check passwords
//! for the members of one group role (`hk_password_required`, a `pg_hba.conf` line
//! added once): each test's own role joins it, every other session stays trusted.

use integration_tests::environment;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use integration_tests::aws::moto_config;
use integration_tests::fixtures::{M, U};
use integration_tests::logs::capture;
use integration_tests::sinks::certs::TestCa;
use integration_tests::sinks::smtp::{SinkTls, SmtpSink};
use integration_tests::{t, wait, Fx, TestDb};
use lambda_runtime::{Context, LambdaEvent};
use shared::aws::SecretSource;
use shared::config::{DatabaseConfig, DatabaseSource};
use shared::db::Connector;
use shared::lambda::Environment;
use shared::messages::Envelope;
use shared::notify::mail::{Mailer, Rendered, SendOutcome};
use shared::notify::{Notifier, NotifyConfig};
use shared::Function;

use crate::handle_event;

const NOW: &str = "2025-03-10T00:10:00Z";
/// The group whose members must give a password (scram) to the test cluster.
const GROUP: &str = "hk_password_required";
/// A bound no test reaches: any second re-read would be a bug.
const LONG: Duration = Duration::from_secs(3600);

/// Make the cluster check passwords for `GROUP`'s members (once; idempotent, and
/// serialized across concurrent tests by an advisory lock), and wait until it does.
async fn require_passwords(db: &TestDb) {
    db.client
        .execute("SELECT pg_advisory_lock(4320)", &[])
        .await
        .unwrap();
    db.client
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {GROUP} NOLOGIN; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        ))
        .await
        .unwrap();
    let hba: String = db.scalar("SHOW hba_file").await;
    let text = std::fs::read_to_string(&hba).unwrap();
    let lines = format!("host all +{GROUP} all scram-sha-256\nlocal all +{GROUP} scram-sha-256\n");
    if !text.contains(&lines) {
        std::fs::write(&hba, format!("{lines}{text}")).unwrap();
        db.client
            .execute("SELECT pg_reload_conf()", &[])
            .await
            .unwrap();
    }
    db.client
        .execute("SELECT pg_advisory_unlock(4320)", &[])
        .await
        .unwrap();
    // The postmaster reloads asynchronously: wait until a wrong password is refused.
    let probe = new_role(db, "probe-password").await;
    let url = role_url(db, &probe, "not-the-password");
    wait::until(
        "pg_hba.conf to require passwords",
        wait::SERVER_RELOAD,
        || {
            let url = url.clone();
            async move {
                let refused = Connector::from_url(&url)
                    .unwrap()
                    .connect("probe")
                    .await
                    .is_err_and(|e| e.sqlstate() == Some("28P01"));
                refused.then_some(())
            }
        },
    )
    .await;
}

/// A login role in `GROUP` with `password` (a superuser: it runs the batches on a
/// database the harness owns, like the application user does in production).
async fn new_role(db: &TestDb, password: &str) -> String {
    let role = format!("hk_rot_{}", uuid::Uuid::new_v4().simple());
    db.client
        .batch_execute(&format!(
            "CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{password}' IN ROLE {GROUP}"
        ))
        .await
        .unwrap();
    role
}

fn role_url(db: &TestDb, role: &str, password: &str) -> String {
    let u = url::Url::parse(&db.url).unwrap();
    format!(
        "postgres://{role}:{password}@{}:{}{}",
        u.host_str().unwrap(),
        u.port().unwrap_or(5432),
        u.path()
    )
}

/// The RDS-shaped secret of `role` on the test database.
fn rds_secret(db: &TestDb, role: &str, password: &str) -> String {
    let u = url::Url::parse(&db.url).unwrap();
    serde_json::json!({
        "username": role,
        "password": password,
        "host": u.host_str().unwrap(),
        "port": u.port().unwrap_or(5432),
        "dbname": u.path().trim_start_matches('/'),
    })
    .to_string()
}

async fn create_secret(sm: &aws_sdk_secretsmanager::Client, value: &str) -> String {
    sm.create_secret()
        .name(format!("hk-rot-{}", uuid::Uuid::new_v4().simple()))
        .secret_string(value)
        .send()
        .await
        .unwrap()
        .arn
        .unwrap()
}

async fn put_secret(sm: &aws_sdk_secretsmanager::Client, arn: &str, value: &str, stage: &str) {
    sm.put_secret_value()
        .secret_id(arn)
        .secret_string(value)
        .version_stages(stage)
        .send()
        .await
        .unwrap();
}

/// What `lambda::Deps::new` builds for `DATABASE_SECRET_ARN`: the secret read once,
/// the connector keeping its source (TLS is not required on the loopback cluster).
async fn secret_connector(arn: &str, bound: Duration) -> Connector {
    let source =
        SecretSource::new(moto_config().await, "DATABASE_SECRET_ARN", arn).with_min_interval(bound);
    let mut pg = shared::config::pg_config_from_secret(&source.read().await.unwrap()).unwrap();
    pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
    let cfg = DatabaseConfig {
        source: DatabaseSource::SecretArn(arn.to_string()),
        ca_bundle: None,
        statement_timeout_ms: 30_000,
        lock_timeout_ms: 5_000,
        require_tls: false,
    };
    Connector::new(pg, &cfg)
        .unwrap()
        .with_secret(Arc::new(source))
}

fn deps(connector: Connector) -> Environment {
    let url = "postgres://unused@127.0.0.1/unused";
    environment(Function::RemoveExpiredMembers, url, t(NOW))
        .connector(connector)
        .build()
}

/// An SQS event of `n` cron ticks of remove-expired-members.
fn ticks(n: usize) -> LambdaEvent<SqsEvent> {
    let f = Function::RemoveExpiredMembers;
    let mut ev = SqsEvent::default();
    for i in 0..n {
        let mut m = SqsMessage::default();
        m.message_id = Some(uuid::Uuid::new_v4().to_string());
        m.body = Some(
            Envelope::cron(
                f,
                &format!("rotation-{i}-{}", uuid::Uuid::new_v4().simple()),
                t(NOW),
            )
            .to_body(),
        );
        ev.records.push(m);
    }
    LambdaEvent::new(ev, Context::default())
}

async fn failed(deps: &Environment, n: usize) -> usize {
    handle_event(deps, ticks(n))
        .await
        .unwrap()
        .batch_item_failures
        .len()
}

async fn fixture() -> TestDb {
    let db = TestDb::new().await;
    let fx = Fx(&db);
    fx.group(100, "acme", None).await;
    fx.project(200, 100).await;
    fx.users(&[U::human(10), U::human(11)]).await;
    fx.members(&[M::pm(10, 200, 10, 30).expires("2025-03-09")])
        .await;
    db
}

/// End every session of `role` (an idle disconnect, a failover): the next record
/// must log in again.
async fn terminate_sessions(db: &TestDb, role: &str) {
    let n: i64 = db
        .client
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
            &[&role],
        )
        .await
        .unwrap()
        .get(0);
    assert!(n >= 1, "the warm function keeps its session");
}

#[tokio::test]
async fn a_rotated_database_password_costs_one_re_read_and_the_next_record_succeeds() {
    let db = fixture().await;
    require_passwords(&db).await;
    let role = new_role(&db, "first-Passw0rd").await;
    let sm = aws_sdk_secretsmanager::Client::new(&moto_config().await);
    let arn = create_secret(&sm, &rds_secret(&db, &role, "first-Passw0rd")).await;
    let deps = deps(secret_connector(&arn, LONG).await);
    let source = || deps.session.connector().secret().unwrap();
    assert_eq!(failed(&deps, 1).await, 0);
    assert!(!db.exists("members WHERE id = 10").await);
    assert_eq!((source().reads(), source().rereads()), (1, 0));

    // The rotation: the database password changes, then the secret; the warm
    // function's session ends, so the next record must log in again.
    db.client
        .batch_execute(&format!("ALTER ROLE {role} PASSWORD 'second-Passw0rd'"))
        .await
        .unwrap();
    put_secret(
        &sm,
        &arn,
        &rds_secret(&db, &role, "second-Passw0rd"),
        "AWSCURRENT",
    )
    .await;
    terminate_sessions(&db, &role).await;
    let (log, _g) = capture();
    assert_eq!(failed(&deps, 1).await, 0, "the record after the rotation");
    assert_eq!(
        (source().reads(), source().rereads()),
        (2, 1),
        "exactly one re-read"
    );
    log.one("database credentials refused; re-read DATABASE_SECRET_ARN and reconnected");
    // Later records use the new password without reading again.
    terminate_sessions(&db, &role).await;
    assert_eq!(failed(&deps, 2).await, 0);
    assert_eq!((source().reads(), source().rereads()), (2, 1));
}

#[tokio::test]
async fn inside_the_rotation_window_the_pending_password_is_used() {
    // RDS single-user rotation: setSecret changes the password to AWSPENDING's value
    // before finishSecret moves AWSCURRENT to it.
    let db = fixture().await;
    require_passwords(&db).await;
    let role = new_role(&db, "first-Passw0rd").await;
    let sm = aws_sdk_secretsmanager::Client::new(&moto_config().await);
    let arn = create_secret(&sm, &rds_secret(&db, &role, "first-Passw0rd")).await;
    let deps = deps(secret_connector(&arn, LONG).await);
    let source = || deps.session.connector().secret().unwrap();
    assert_eq!(failed(&deps, 1).await, 0);
    put_secret(
        &sm,
        &arn,
        &rds_secret(&db, &role, "pending-Passw0rd"),
        "AWSPENDING",
    )
    .await;
    db.client
        .batch_execute(&format!("ALTER ROLE {role} PASSWORD 'pending-Passw0rd'"))
        .await
        .unwrap();
    terminate_sessions(&db, &role).await;
    assert_eq!(failed(&deps, 1).await, 0, "the record inside the window");
    // AWSCURRENT (unchanged, refused) then AWSPENDING: one re-read, two reads.
    assert_eq!((source().reads(), source().rereads()), (3, 1));
}

#[tokio::test]
async fn a_wrong_database_secret_fails_each_record_retryably_with_one_re_read_per_bound() {
    let db = fixture().await;
    require_passwords(&db).await;
    let role = new_role(&db, "the-real-Passw0rd").await;
    let sm = aws_sdk_secretsmanager::Client::new(&moto_config().await);
    let arn = create_secret(&sm, &rds_secret(&db, &role, "a-wrong-password")).await;
    let deps = deps(secret_connector(&arn, LONG).await);
    let source = || deps.session.connector().secret().unwrap();
    let (log, _g) = capture();
    assert_eq!(failed(&deps, 3).await, 3);
    assert_eq!(failed(&deps, 2).await, 2);
    // The cold-start read, then one re-read (AWSCURRENT, and AWSPENDING, which does
    // not exist) for five records.
    assert_eq!((source().reads(), source().rereads()), (3, 1));
    let lines = log.lines();
    let auth: Vec<_> = lines
        .iter()
        .filter(|l| l["error_class"] == "db_auth")
        .collect();
    assert_eq!(auth.len(), 5, "one clear line per failed record: {auth:?}");
    assert!(auth
        .iter()
        .all(|l| l["variable"] == "DATABASE_SECRET_ARN" && l["sqlstate"] == "28P01"));
    let unavailable: Vec<_> = lines
        .iter()
        .filter(|l| l["message"] == "database unavailable")
        .collect();
    assert_eq!(unavailable.len(), 5);
    assert!(db.exists("members WHERE id = 10").await, "nothing ran");
    // With the secret fixed, a re-read once the bound has passed (none here: a
    // zero bound) recovers.
    let deps = self::deps(secret_connector(&arn, Duration::ZERO).await);
    put_secret(
        &sm,
        &arn,
        &rds_secret(&db, &role, "the-real-Passw0rd"),
        "AWSCURRENT",
    )
    .await;
    assert_eq!(failed(&deps, 1).await, 0);
}

// ---- SMTP ----

const MAIL_USER: &str = "mailer";

/// `deliver-notification`'s mailer as `Notifier::full` builds it at cold start: the
/// secret read once and kept for re-reads, with the production bound (a minute;
/// these tests send within seconds).
async fn smtp_mailer(sink: &SmtpSink, arn: &str) -> Mailer {
    let env: HashMap<&str, String> = HashMap::from([
        ("GITLAB_BASE_URL", "https://gitlab.example.com".to_string()),
        ("GITLAB_VERSION", "18.0.1".to_string()),
        (
            "GITLAB_DB_KEY_BASE",
            lab::demo::DEMO_DB_KEY_BASE.to_string(),
        ),
        (
            "MAIL_FROM",
            "GitLab <gitlab@gitlab.example.com>".to_string(),
        ),
        ("EMAIL_TRANSPORT", "smtp".to_string()),
        ("SMTP_HOST", "127.0.0.1".to_string()),
        ("SMTP_PORT", sink.port.to_string()),
        ("SMTP_TLS", "starttls".to_string()),
        ("SMTP_SECRET_ARN", arn.to_string()),
        (
            "SMTP_CA_BUNDLE",
            TestCa::get().write_bundle().to_string_lossy().into_owned(),
        ),
    ]);
    let cfg = NotifyConfig::from_lookup(&|k: &str| env.get(k).cloned()).unwrap();
    let n = Notifier::full(&cfg, Some(&moto_config().await))
        .await
        .unwrap();
    n.delivery.mailer
}

async fn send(m: &Mailer, i: usize) -> shared::error::Result<SendOutcome> {
    let rendered = Rendered {
        subject: format!("rotation {i}"),
        body: "body".into(),
    };
    m.send(
        "GitLab <gitlab@gitlab.example.com>",
        "user@example.com",
        "User",
        &rendered,
        &format!(
            "rotation-{i}-{}@gitlab.example.com",
            uuid::Uuid::new_v4().simple()
        ),
        1,
        "t",
    )
    .await
}

fn smtp_secret(password: &str) -> String {
    serde_json::json!({"username": MAIL_USER, "password": password}).to_string()
}

#[tokio::test]
async fn a_rotated_smtp_password_costs_one_re_read_and_the_next_send_succeeds() {
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    sink.require_auth(MAIL_USER, "first-pw");
    let sm = aws_sdk_secretsmanager::Client::new(&moto_config().await);
    let arn = create_secret(&sm, &smtp_secret("first-pw")).await;
    let mailer = smtp_mailer(&sink, &arn).await;
    assert_eq!(send(&mailer, 1).await.unwrap(), SendOutcome::Accepted);
    // Rotation: the server's password, then the secret.
    sink.require_auth(MAIL_USER, "second-pw");
    put_secret(&sm, &arn, &smtp_secret("second-pw"), "AWSCURRENT").await;
    assert_eq!(send(&mailer, 2).await.unwrap(), SendOutcome::Accepted);
    assert_eq!(send(&mailer, 3).await.unwrap(), SendOutcome::Accepted);
    let source = mailer.secret().unwrap();
    assert_eq!(
        (source.reads(), source.rereads()),
        (2, 1),
        "exactly one re-read"
    );
    assert_eq!(sink.auth_failures(), 1);
    let got = sink.received();
    assert_eq!(got.len(), 3);
    assert_eq!(got[2].auth, Some((MAIL_USER.into(), "second-pw".into())));
}

#[tokio::test]
async fn a_wrong_smtp_secret_fails_each_send_retryably_with_one_re_read_per_bound() {
    let sink = SmtpSink::start(SinkTls::StartTls).await;
    sink.require_auth(MAIL_USER, "the-real-pw");
    let sm = aws_sdk_secretsmanager::Client::new(&moto_config().await);
    let arn = create_secret(&sm, &smtp_secret("a-wrong-pw")).await;
    let mailer = smtp_mailer(&sink, &arn).await;
    for i in 0..4 {
        let e = send(&mailer, i).await.unwrap_err();
        // Retryable (an `Err`), never a rejection of the notice.
        assert_eq!(e.class(), "smtp_auth");
        assert_eq!(e.to_string(), "SMTP authentication failed (535)");
    }
    let source = mailer.secret().unwrap();
    assert_eq!((source.reads(), source.rereads()), (2, 1));
    // Four sends, one retry after the re-read.
    assert_eq!(sink.auth_failures(), 5);
    assert!(sink.received().is_empty());
}
