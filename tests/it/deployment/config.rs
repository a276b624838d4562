//! Configuration read from the environment: the functions' [`Config`], B28's
//! [`NotifyConfig`], the database secret's shape and CA bundle, and the AWS SDK's
//! endpoints.

use std::collections::HashMap;
use std::time::Duration;

use shared::aws::{from_env, service_endpoint};
use shared::config::notify::{EmailTransportKind, SmtpTls};
use shared::config::{pg_config_from_secret, Config, Settings, TransportKind};
use shared::db::tls_connector;
use shared::notify::{LocalNetwork, NotifyConfig};
use shared::{Function, Result};

fn cfg(pairs: &[(&str, &str)]) -> Result<Config> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(|k| m.get(k).cloned())
}

#[test]
fn missing_database_is_a_clear_error() {
    let e = cfg(&[]).unwrap_err().to_string();
    assert!(e.contains("DATABASE_URL"), "{e}");
}

#[test]
fn defaults_and_queues_are_read() {
    let c = cfg(&[
        ("DATABASE_URL", "postgres://u@h/db"),
        ("SERVICE_NAME", "gitlab-housekeeping-prod"),
        ("QUEUE_URL_DELETE_USER", "http://q/delete-user"),
        ("QUEUE_ARN_DELETE_USER", "arn:q"),
    ])
    .unwrap();
    assert_eq!(c.transport, TransportKind::Sqs);
    assert!(c.database.require_tls);
    assert_eq!(c.database.statement_timeout_ms, 30_000);
    assert_eq!(c.database.lock_timeout_ms, 5_000);
    assert_eq!(c.settings, Settings::default());
    assert_eq!(c.service, "gitlab-housekeeping-prod");
    assert_eq!(
        c.queues[&Function::DeleteUser].arn.as_deref(),
        Some("arn:q")
    );
    assert!(c.require_queues(&[Function::DeleteUser]).is_ok());
    let e = c
        .require_queues(&[Function::RemoveExpiredMembers])
        .unwrap_err();
    assert!(e.to_string().contains("QUEUE_URL_REMOVE_EXPIRED_MEMBERS"));
}

#[test]
fn bad_values_name_their_variable() {
    let e = cfg(&[("DATABASE_URL", "x"), ("DB_LOCK_TIMEOUT_MS", "soon")]).unwrap_err();
    assert!(e.to_string().contains("DB_LOCK_TIMEOUT_MS"));
    let e = cfg(&[("DATABASE_URL", "x"), ("TRANSPORT", "carrier-pigeon")]).unwrap_err();
    assert!(e.to_string().contains("TRANSPORT"));
    let e = cfg(&[
        ("DATABASE_URL", "x"),
        ("SERVICE_NAME", "s"),
        ("SCHEDULER_GROUP_NAME", "g"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("SCHEDULER_ROLE_ARN"));
    let e = cfg(&[
        ("DATABASE_URL", "x"),
        ("DATABASE_CA_BUNDLE", "/nonexistent.pem"),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("DATABASE_CA_BUNDLE"));
}

#[test]
fn the_service_name_is_required_under_lambda_and_local_elsewhere() {
    for empty in [None, Some("  ")] {
        let mut pairs = vec![("DATABASE_URL", "x")];
        if let Some(v) = empty {
            pairs.push(("SERVICE_NAME", v));
        }
        let e = cfg(&pairs).unwrap_err().to_string();
        assert!(e.contains("SERVICE_NAME"), "{e}");
    }
    let c = cfg(&[("DATABASE_URL", "x"), ("TRANSPORT", "local")]).unwrap();
    assert_eq!(c.service, "local");
    let c = cfg(&[
        ("DATABASE_URL", "x"),
        ("TRANSPORT", "local"),
        ("SERVICE_NAME", "staging"),
    ])
    .unwrap();
    assert_eq!(c.service, "staging");
}

#[test]
fn debug_output_hides_the_database_url() {
    let c = cfg(&[
        ("DATABASE_URL", "postgres://u:hunter2@h/db"),
        ("TRANSPORT", "local"),
    ])
    .unwrap();
    assert!(!format!("{c:?}").contains("hunter2"));
}

#[test]
fn rds_secrets_become_tls_configs() {
    let c = pg_config_from_secret(
        r#"{"username":"gl","password":"p@ss/word","host":"db.example","port":5433,"dbname":"gitlabhq"}"#,
    )
    .unwrap();
    assert_eq!(c.get_user(), Some("gl"));
    assert_eq!(c.get_ports(), &[5433]);
    assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
    assert!(pg_config_from_secret("{}").is_err());
}

fn notify_cfg(pairs: &[(&str, &str)]) -> Result<NotifyConfig> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    NotifyConfig::from_lookup(&|k: &str| m.get(k).cloned())
}

#[test]
fn defaults_need_nothing_until_a_b28_function_asks() {
    let c = notify_cfg(&[]).unwrap();
    assert_eq!(c.email_transport, EmailTransportKind::Smtp);
    assert_eq!(c.smtp.tls, SmtpTls::StartTls);
    assert_eq!(c.smtp.port(), 587);
    assert_eq!(c.webhook_timeout, Duration::from_secs(10));
    assert_eq!(c.webhook_local_network, LocalNetwork::FollowGitLab);
    assert!(!c.webhook_log_host);
    assert!(c.require_for(Function::RemoveExpiredMembers).is_ok());
    let e = c.require_for(Function::PatExpiring).unwrap_err();
    assert!(e.to_string().contains("GITLAB_BASE_URL"), "{e}");
    let c = notify_cfg(&[
        ("GITLAB_BASE_URL", "https://gitlab.example.com/"),
        ("GITLAB_DB_KEY_BASE", "k"),
        ("MAIL_FROM", "GitLab <gitlab@example.com>"),
    ])
    .unwrap();
    assert_eq!(c.base_url.as_deref(), Some("https://gitlab.example.com"));
    assert!(c.require_for(Function::PatExpiring).is_ok());
    let e = c.require_for(Function::DeliverNotification).unwrap_err();
    assert!(e.to_string().contains("SMTP_HOST"), "{e}");
    let c = notify_cfg(&[
        ("GITLAB_BASE_URL", "https://gitlab.example.com"),
        ("GITLAB_DB_KEY_BASE", "k"),
        ("MAIL_FROM", "gitlab@example.com"),
        ("EMAIL_TRANSPORT", "file"),
    ])
    .unwrap();
    let e = c.require_for(Function::DeliverNotification).unwrap_err();
    assert!(e.to_string().contains("EMAIL_FILE_DIR"), "{e}");
    let c = notify_cfg(&[
        ("GITLAB_BASE_URL", "https://gitlab.example.com"),
        ("MAIL_FROM", "gitlab@example.com"),
        ("EMAIL_TRANSPORT", "log"),
    ])
    .unwrap();
    let e = c.require_for(Function::DeliverNotification).unwrap_err();
    assert!(e.to_string().contains("GITLAB_DB_KEY_BASE"), "{e}");
}

#[test]
fn bad_notify_values_name_their_variable() {
    for (k, v) in [
        ("EMAIL_TRANSPORT", "pigeon"),
        ("SMTP_TLS", "plain"),
        ("SMTP_TLS", "off"),
        ("SMTP_PORT", "smtp"),
        ("WEBHOOK_TIMEOUT_S", "0"),
        ("WEBHOOK_ALLOW_LOCAL_NETWORK", "maybe"),
        ("WEBHOOK_ALLOW_LOCAL_NETWORK", "true"),
        ("WEBHOOK_ALLOW_LOCAL_NETWORK", "1"),
        ("WEBHOOK_LOG_HOST", "yes please"),
        ("GITLAB_BASE_URL", "gitlab.example.com"),
        ("SMTP_CA_BUNDLE", "/nonexistent.pem"),
    ] {
        let e = notify_cfg(&[(k, v)]).unwrap_err().to_string();
        assert!(e.contains(k), "{k}: {e}");
    }
    let c = notify_cfg(&[
        ("SMTP_TLS", "implicit"),
        ("WEBHOOK_ALLOW_LOCAL_NETWORK", "false"),
    ])
    .unwrap();
    assert_eq!(c.smtp.port(), 465);
    assert_eq!(c.webhook_local_network, LocalNetwork::Deny);
}

#[test]
fn the_environment_only_narrows_gitlabs_local_network_setting() {
    let follow = notify_cfg(&[]).unwrap().webhook_local_network;
    assert!(follow.allows(true) && !follow.allows(false));
    let deny = notify_cfg(&[("WEBHOOK_ALLOW_LOCAL_NETWORK", " FALSE ")])
        .unwrap()
        .webhook_local_network;
    assert!(!deny.allows(true) && !deny.allows(false));
    // `true` once widened; now it is refused with what to do instead.
    let e = notify_cfg(&[("WEBHOOK_ALLOW_LOCAL_NETWORK", "true")])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("allow_local_requests_from_web_hooks_and_services")
            && e.contains("unset WEBHOOK_ALLOW_LOCAL_NETWORK"),
        "{e}"
    );
}

#[test]
fn smtp_without_tls_only_when_set_explicitly() {
    let c = notify_cfg(&[("SMTP_TLS", "none")]).unwrap();
    assert_eq!(c.smtp.tls, SmtpTls::None);
    assert_eq!(c.smtp.port(), 25);
    let c = notify_cfg(&[("SMTP_TLS", "none"), ("SMTP_PORT", "2525")]).unwrap();
    assert_eq!(c.smtp.port(), 2525);
    let e = notify_cfg(&[("SMTP_TLS", "plain")])
        .unwrap_err()
        .to_string();
    assert!(e.contains("SMTP_TLS") && e.contains("`none`"), "{e}");
    let bundle = std::env::current_exe().unwrap();
    let bundle = bundle.to_string_lossy();
    assert!(notify_cfg(&[("SMTP_TLS", "starttls"), ("SMTP_CA_BUNDLE", &bundle)]).is_ok());
    let e = notify_cfg(&[("SMTP_TLS", "none"), ("SMTP_CA_BUNDLE", &bundle)])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("SMTP_CA_BUNDLE") && e.contains("SMTP_TLS=none"),
        "{e}"
    );
}

#[test]
fn debug_output_hides_passwords_and_keys() {
    let c = notify_cfg(&[
        ("SMTP_PASSWORD", "hunter2"),
        ("GITLAB_DB_KEY_BASE", "0123456789abcdef-key-base"),
    ])
    .unwrap();
    let d = format!("{c:?}");
    assert!(
        !d.contains("hunter2") && !d.contains("0123456789abcdef-key-base"),
        "{d}"
    );
    assert_eq!(c.smtp.password.as_ref().unwrap().expose(), "hunter2");
}

#[test]
fn the_sdk_configuration_comes_from_lambdas_environment() {
    let env = |pairs: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    let c = from_env(env(&[
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ENDPOINT_URL", "http://127.0.0.1:5000"),
    ]));
    assert_eq!(c.region().map(|r| r.as_ref()), Some("eu-west-1"));
    assert_eq!(c.endpoint_url(), Some("http://127.0.0.1:5000"));
    assert!(c.credentials_provider().is_some());
    let c = from_env(env(&[("AWS_DEFAULT_REGION", "us-east-2")]));
    assert_eq!(c.region().map(|r| r.as_ref()), Some("us-east-2"));
    assert_eq!(c.endpoint_url(), None);
    let e = env(&[
        ("AWS_ENDPOINT_URL", "http://a"),
        ("AWS_ENDPOINT_URL_SQS", "http://b"),
    ]);
    assert_eq!(service_endpoint(e, "SQS").as_deref(), Some("http://b"));
    assert_eq!(service_endpoint(e, "SCHEDULER"), None);
    let e = env(&[
        ("AWS_ENDPOINT_URL", "http://a"),
        ("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true"),
    ]);
    assert_eq!(service_endpoint(e, ""), None);
}

#[test]
fn a_bundle_with_several_certificates_loads_them_all() {
    // Two throwaway self-signed certificates generated for this test.
    let pem = include_bytes!("../../../shared/testdata/two-certs.pem");
    let certs = native_tls::Certificate::stack_from_pem(pem).unwrap();
    assert_eq!(certs.len(), 2);
    assert!(tls_connector(Some(pem)).is_ok());
    assert!(tls_connector(Some(b"not a pem")).is_err());
}
