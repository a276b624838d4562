//! Notification settings from the environment (behaviour §10, §B28.10).
//!
//! Owns: [`NotifyConfig`] (`GITLAB_*`, `EMAIL_*`, `SMTP_*`, `MAIL_FROM`, `WEBHOOK_*`,
//! errors naming the variable; required only by the functions that need them:
//! [`NotifyConfig::require_for`]) and [`Secret`], whose `Debug` never shows it.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::function::Function;

/// A secret string: compared and cloned like a string, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The secret itself (pass it on; never log it).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// `EMAIL_TRANSPORT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmailTransportKind {
    /// SMTP with mandatory TLS (the Lambda default).
    Smtp,
    /// One `.eml` file per mail under `EMAIL_FILE_DIR` (the `hk` default).
    File,
    /// Logs the subject only (never the address or the body).
    Log,
}

/// `SMTP_TLS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpTls {
    /// Plain connection upgraded with STARTTLS, which is required (default; port 587):
    /// a server that does not offer it is refused, never used in plain text.
    StartTls,
    /// TLS from the first byte (port 465).
    Implicit,
    /// `none`: no TLS at all (port 25), for an internal relay that has none, as GitLab
    /// allows with `smtp_enable_starttls_auto false` and `smtp_tls false`. Only when
    /// set explicitly; credentials, if any, then travel in plain text (a warning at
    /// cold start).
    None,
}

/// `WEBHOOK_ALLOW_LOCAL_NETWORK`: how the environment narrows GitLab's own
/// `application_settings.allow_local_requests_from_web_hooks_and_services`, which is
/// read from the database before each web-hook delivery (behaviour §B28.10.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LocalNetwork {
    /// Unset (default): GitLab's setting decides.
    FollowGitLab,
    /// `false`: local targets are refused even when GitLab's setting allows them.
    Deny,
}

impl LocalNetwork {
    /// Whether a local target may be requested when GitLab's setting is `gitlab_allows`.
    pub fn allows(self, gitlab_allows: bool) -> bool {
        self == LocalNetwork::FollowGitLab && gitlab_allows
    }

    /// Parse `WEBHOOK_ALLOW_LOCAL_NETWORK`: unset follows GitLab, `false` denies; `true`
    /// is refused, since the environment may only narrow GitLab's setting.
    fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<LocalNetwork> {
        const KEY: &str = "WEBHOOK_ALLOW_LOCAL_NETWORK";
        match get(KEY).map(|v| v.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") => Ok(LocalNetwork::FollowGitLab),
            Some("false" | "0") => Ok(LocalNetwork::Deny),
            Some("true" | "1") => Err(Error::Config(format!(
                "{KEY}=true is no longer supported: GitLab's own setting decides whether web \
                 hooks may reach the local network (Admin area > Settings > Network > Outbound \
                 requests, `allow_local_requests_from_web_hooks_and_services`); unset {KEY} \
                 to follow it, or set it to `false` to refuse local targets even when GitLab \
                 allows them"
            ))),
            Some(v) => Err(Error::Config(format!(
                "{KEY} must be unset (follow GitLab's setting) or `false`, not `{v}`"
            ))),
        }
    }
}

/// SMTP settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmtpConfig {
    /// `SMTP_HOST`.
    pub host: Option<String>,
    /// `SMTP_PORT` (default 587 for STARTTLS, 465 for implicit TLS, 25 without TLS).
    pub port: Option<u16>,
    /// `SMTP_TLS` (default `starttls`).
    pub tls: SmtpTls,
    /// `SMTP_USERNAME`.
    pub username: Option<String>,
    /// `SMTP_PASSWORD`.
    pub password: Option<Secret>,
    /// `SMTP_SECRET_ARN`: a Secrets Manager secret holding the password (plain, or
    /// JSON with a `password` field and optionally `username`).
    pub secret_arn: Option<String>,
    /// `SMTP_CA_BUNDLE`: extra trusted roots, added to the system roots.
    pub ca_bundle: Option<PathBuf>,
}

impl SmtpConfig {
    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(match self.tls {
            SmtpTls::StartTls => 587,
            SmtpTls::Implicit => 465,
            SmtpTls::None => 25,
        })
    }
}

/// Everything `pat-expiring` and `deliver-notification` read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotifyConfig {
    /// `GITLAB_BASE_URL`, without a trailing slash.
    pub base_url: Option<String>,
    /// `GITLAB_SSH_URL_PREFIX` (default `git@<host of base URL>:`).
    pub ssh_url_prefix: Option<String>,
    /// `GITLAB_VERSION` for `User-Agent: GitLab/<version>` (default `18.0.0`).
    pub version: String,
    /// `GITLAB_DB_KEY_BASE`: one or more keys, comma-separated, tried in order.
    pub db_key_base: Option<Secret>,
    /// `GITLAB_DB_KEY_BASE_SECRET_ARN`: the same, from Secrets Manager.
    pub db_key_base_secret_arn: Option<String>,
    /// `EMAIL_TRANSPORT` (default `smtp`).
    pub email_transport: EmailTransportKind,
    /// `EMAIL_FILE_DIR`.
    pub email_file_dir: Option<PathBuf>,
    /// `MAIL_FROM`.
    pub mail_from: Option<String>,
    /// SMTP.
    pub smtp: SmtpConfig,
    /// `WEBHOOK_TIMEOUT_S` (default 10).
    pub webhook_timeout: Duration,
    /// `WEBHOOK_ALLOW_LOCAL_NETWORK` (default: follow GitLab's setting).
    pub webhook_local_network: LocalNetwork,
    /// `WEBHOOK_LOG_HOST` (default false).
    pub webhook_log_host: bool,
}

fn boolean(get: &impl Fn(&str) -> Option<String>, key: &str) -> Result<bool> {
    match get(key).map(|v| v.trim().to_ascii_lowercase()) {
        None => Ok(false),
        Some(v) if v == "true" || v == "1" => Ok(true),
        Some(v) if v == "false" || v == "0" => Ok(false),
        Some(v) => Err(Error::Config(format!(
            "{key} must be `true` or `false`, not `{v}`"
        ))),
    }
}

/// Check an `http(s)` base URL and return it without a trailing slash.
fn base_url(v: &str) -> Result<String> {
    let trimmed = v.trim().trim_end_matches('/');
    match url::Url::parse(trimmed) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => {
            Ok(trimmed.to_string())
        }
        _ => Err(Error::Config(format!(
            "GITLAB_BASE_URL must be an http(s) URL such as https://gitlab.example.com, not `{v}`"
        ))),
    }
}

impl NotifyConfig {
    /// Parse the notification variables through `get` (empty values count as unset).
    pub fn from_lookup(get: &impl Fn(&str) -> Option<String>) -> Result<NotifyConfig> {
        let email_transport = match get("EMAIL_TRANSPORT").as_deref().map(str::trim) {
            None | Some("smtp") => EmailTransportKind::Smtp,
            Some("file") => EmailTransportKind::File,
            Some("log") => EmailTransportKind::Log,
            Some(other) => {
                return Err(Error::Config(format!(
                    "EMAIL_TRANSPORT must be `smtp`, `file` or `log`, not `{other}`"
                )))
            }
        };
        let tls = match get("SMTP_TLS").as_deref().map(str::trim) {
            None | Some("starttls") => SmtpTls::StartTls,
            Some("implicit") => SmtpTls::Implicit,
            Some("none") => SmtpTls::None,
            Some(other) => {
                return Err(Error::Config(format!(
                    "SMTP_TLS must be `starttls` (default), `implicit` or `none` (a relay \
                     without TLS), not `{other}`"
                )))
            }
        };
        let port = match get("SMTP_PORT") {
            None => None,
            Some(p) => Some(p.trim().parse::<u16>().map_err(|_| {
                Error::Config(format!("SMTP_PORT must be a port number, not `{p}`"))
            })?),
        };
        let ca_bundle = get("SMTP_CA_BUNDLE").map(PathBuf::from);
        if let Some(ca) = &ca_bundle {
            if !ca.is_file() {
                return Err(Error::Config(format!(
                    "SMTP_CA_BUNDLE points to `{}`, which is not a readable file",
                    ca.display()
                )));
            }
            if tls == SmtpTls::None {
                return Err(Error::Config(
                    "SMTP_CA_BUNDLE is set but SMTP_TLS=none uses no TLS: unset one of them".into(),
                ));
            }
        }
        let timeout = match get("WEBHOOK_TIMEOUT_S") {
            None => 10,
            Some(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(|| {
                    Error::Config(format!(
                        "WEBHOOK_TIMEOUT_S must be a positive number of seconds, not `{v}`"
                    ))
                })?,
        };
        Ok(NotifyConfig {
            base_url: get("GITLAB_BASE_URL").map(|v| base_url(&v)).transpose()?,
            ssh_url_prefix: get("GITLAB_SSH_URL_PREFIX"),
            version: get("GITLAB_VERSION").unwrap_or_else(|| "18.0.0".into()),
            db_key_base: get("GITLAB_DB_KEY_BASE").map(Secret::new),
            db_key_base_secret_arn: get("GITLAB_DB_KEY_BASE_SECRET_ARN"),
            email_transport,
            email_file_dir: get("EMAIL_FILE_DIR").map(PathBuf::from),
            mail_from: get("MAIL_FROM"),
            smtp: SmtpConfig {
                host: get("SMTP_HOST"),
                port,
                tls,
                username: get("SMTP_USERNAME"),
                password: get("SMTP_PASSWORD").map(Secret::new),
                secret_arn: get("SMTP_SECRET_ARN"),
                ca_bundle,
            },
            webhook_timeout: Duration::from_secs(timeout),
            webhook_local_network: LocalNetwork::from_lookup(get)?,
            webhook_log_host: boolean(get, "WEBHOOK_LOG_HOST")?,
        })
    }

    /// Check that what `function` needs is configured (cold start). Other functions
    /// need nothing from here.
    pub fn require_for(&self, function: Function) -> Result<()> {
        let missing = |what: &str| Err(Error::Config(format!("{what} is required by {function}")));
        let needs_delivery = match function {
            Function::PatExpiring => false,
            Function::DeliverNotification => true,
            _ => return Ok(()),
        };
        if self.base_url.is_none() {
            return missing("GITLAB_BASE_URL");
        }
        if !needs_delivery {
            return Ok(());
        }
        if self.db_key_base.is_none() && self.db_key_base_secret_arn.is_none() {
            return missing("GITLAB_DB_KEY_BASE or GITLAB_DB_KEY_BASE_SECRET_ARN");
        }
        if self.mail_from.is_none() {
            return missing("MAIL_FROM");
        }
        match self.email_transport {
            EmailTransportKind::Smtp if self.smtp.host.is_none() => {
                return missing("SMTP_HOST (EMAIL_TRANSPORT=smtp)")
            }
            EmailTransportKind::File if self.email_file_dir.is_none() => {
                return missing("EMAIL_FILE_DIR (EMAIL_TRANSPORT=file)")
            }
            _ => {}
        }
        if self.smtp.password.is_some() && self.smtp.secret_arn.is_some() {
            return Err(Error::Config(
                "set SMTP_PASSWORD or SMTP_SECRET_ARN, not both".into(),
            ));
        }
        Ok(())
    }
}
