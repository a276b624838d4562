//! Notification delivery for B28 (behaviour §B28.10, §9.11, §10).
//!
//! Owns: [`Instance`] (the GitLab instance's URL facts and version: `pat-expiring`'s
//! dependencies) and [`Notifier`] (the instance and the [`Delivery`] means:
//! `deliver-notification`'s), built once at cold start or by `hk`; the secrets behind
//! ARNs are read here. Nothing here reads the database.

pub mod crypto;
pub mod mail;
pub mod webhook;

pub use crate::config::notify::{LocalNetwork, NotifyConfig, Secret};
use crate::error::{Error, Result};
use crate::function::Function;

/// Facts about the GitLab instance used in links, payloads and headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `GITLAB_BASE_URL` without a trailing slash.
    pub base_url: String,
    /// The host of the base URL (for `Message-ID`s).
    pub host: String,
    /// `GITLAB_SSH_URL_PREFIX`, default `git@<host>:`.
    pub ssh_url_prefix: String,
    /// `GITLAB_VERSION`.
    pub version: String,
}

impl Instance {
    /// The instance of a base URL.
    pub fn new(base_url: &str, ssh_url_prefix: Option<&str>, version: &str) -> Result<Instance> {
        let base_url = base_url.trim_end_matches('/').to_string();
        let host = url::Url::parse(&base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .ok_or_else(|| Error::Config(format!("GITLAB_BASE_URL `{base_url}` has no host")))?;
        Ok(Instance {
            ssh_url_prefix: ssh_url_prefix
                .map(str::to_string)
                .unwrap_or_else(|| format!("git@{host}:")),
            host,
            base_url,
            version: version.to_string(),
        })
    }
}

/// What `deliver-notification` delivers with.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The email transport.
    pub mailer: mail::Mailer,
    /// `MAIL_FROM`.
    pub mail_from: String,
    /// The web-hook HTTP client.
    pub webhooks: webhook::WebhookClient,
    /// `WEBHOOK_LOG_HOST`.
    pub log_host: bool,
    /// The `db_key_base` keys.
    pub keys: crypto::KeyRing,
    /// `hk run --dry-run`: send nothing, request nothing.
    pub dry_run: bool,
}

/// What `deliver-notification` needs besides the database and the queue (and what
/// `hk` gives both B28 functions).
#[derive(Debug, Clone)]
pub struct Notifier {
    /// The GitLab instance.
    pub instance: Instance,
    /// The delivery means.
    pub delivery: Delivery,
}

/// The SMTP credentials from a secret: a plain password, or JSON with `password`
/// (and optionally `username`).
fn smtp_secret(text: &str) -> (Option<String>, Secret) {
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str::<serde_json::Value>(text) {
        if let Some(p) = m.get("password").and_then(|v| v.as_str()) {
            let user = m
                .get("username")
                .and_then(|v| v.as_str())
                .map(str::to_string);
            return (user, Secret::new(p));
        }
    }
    (None, Secret::new(text.trim_end_matches(['\r', '\n'])))
}

impl Instance {
    /// The instance `cfg` names (enough for `pat-expiring`).
    pub fn from_config(cfg: &NotifyConfig) -> Result<Instance> {
        cfg.require_for(Function::PatExpiring)?;
        let base = cfg.base_url.as_deref().unwrap_or_default();
        Instance::new(base, cfg.ssh_url_prefix.as_deref(), &cfg.version)
    }
}

impl Notifier {
    /// The instance and the delivery means (what `deliver-notification` and `hk` use).
    pub async fn full(cfg: &NotifyConfig, aws: Option<&aws_config::SdkConfig>) -> Result<Notifier> {
        cfg.require_for(Function::DeliverNotification)?;
        let instance = Instance::from_config(cfg)?;
        let key_list = match (&cfg.db_key_base, &cfg.db_key_base_secret_arn) {
            (Some(k), _) => k.expose().to_string(),
            (None, Some(arn)) => {
                crate::aws::read_secret(aws, "GITLAB_DB_KEY_BASE_SECRET_ARN", arn).await?
            }
            (None, None) => String::new(),
        };
        let keys = crypto::KeyRing::from_list(&key_list);
        if keys.is_empty() {
            return Err(Error::Config("GITLAB_DB_KEY_BASE holds no key".into()));
        }
        let mut source = None;
        let (username, password) = match (&cfg.smtp.password, &cfg.smtp.secret_arn) {
            (Some(p), _) => (cfg.smtp.username.clone(), Some(p.clone())),
            (None, Some(arn)) => {
                let aws = aws.ok_or_else(|| {
                    Error::Config("SMTP_SECRET_ARN needs AWS configuration".into())
                })?;
                // Kept, so refused credentials re-read it (issue 20, rotation).
                let s = crate::aws::SecretSource::new(aws.clone(), "SMTP_SECRET_ARN", arn);
                let (user, pw) = smtp_secret(&s.read().await?);
                source = Some(s);
                (cfg.smtp.username.clone().or(user), Some(pw))
            }
            (None, None) => (cfg.smtp.username.clone(), None),
        };
        if cfg.email_transport == crate::config::notify::EmailTransportKind::Smtp
            && cfg.smtp.tls == crate::config::notify::SmtpTls::None
        {
            // As GitLab with `smtp_tls false` and STARTTLS off: allowed, but said.
            if username.is_some() && password.is_some() {
                tracing::warn!(
                    variable = "SMTP_TLS",
                    "SMTP_TLS=none with credentials: the SMTP password is sent in plain text"
                );
            } else {
                tracing::info!(
                    variable = "SMTP_TLS",
                    "SMTP_TLS=none: mail is sent without TLS"
                );
            }
        }
        let mut mailer = mail::Mailer::from_config(cfg, username, password)?;
        if let Some(s) = source {
            mailer = mailer.with_secret(s, cfg, cfg.smtp.username.clone());
        }
        let delivery = Delivery {
            mailer,
            mail_from: cfg.mail_from.clone().unwrap_or_default(),
            webhooks: webhook::WebhookClient::new(
                cfg.webhook_timeout,
                cfg.webhook_local_network,
                &[],
            )?,
            log_host: cfg.webhook_log_host,
            keys,
            dry_run: false,
        };
        Ok(Notifier { instance, delivery })
    }

    /// A copy that sends no email and makes no request (`hk run --dry-run`).
    pub fn dry_run(&self) -> Notifier {
        let mut n = self.clone();
        n.delivery.dry_run = true;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smtp_secrets_are_plain_or_json() {
        let (u, p) = smtp_secret("hunter2\n");
        assert_eq!((u, p.expose()), (None, "hunter2"));
        let (u, p) = smtp_secret(r#"{"username":"mailer","password":"pw"}"#);
        assert_eq!((u.as_deref(), p.expose()), (Some("mailer"), "pw"));
    }
}
