//! Expiry emails' transports (behaviour §B28.10.2, §D21).
//!
//! Owns: [`Rendered`] (an email's subject and body; the two templates are
//! `workers::deliver_notification`'s), user text made fit for a header or a body line
//! ([`one_line`], [`display_name`]), the `Message-ID` derived from the message key, and
//! [`Mailer`]: SMTP (lettre over native-tls, STARTTLS, implicit TLS or none as
//! configured), a `file` transport writing `<dir>/<message-id>.eml`, and a `log`
//! transport. It reads no database and never logs an address or a body (SMTP replies
//! are reduced to a code and a kind).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use lettre::message::{header::ContentType, Mailbox};
use lettre::Message;
use sha2::{Digest, Sha256};

use super::Instance;
use crate::aws::SecretSource;
use crate::config::notify::{EmailTransportKind, NotifyConfig, Secret};
use crate::error::{Error, Result};

mod smtp;
use smtp::smtp_transport;
pub use smtp::SmtpMailer;

/// A rendered email, before addressing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub body: String,
}

/// `s` as one line of text: control characters and line or paragraph separators
/// become spaces, white-space runs collapse to one space, the ends are trimmed.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let c = if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            ' '
        } else {
            c
        };
        if c.is_whitespace() && (out.is_empty() || out.ends_with(char::is_whitespace)) {
            continue;
        }
        out.push(c);
    }
    out.truncate(out.trim_end().len());
    out
}

/// The longest display name kept (GitLab's own limit for `users.name`): a name is one
/// word at worst, which header folding cannot break, and 255 characters keep the `To`
/// line far below RFC 5322's 998.
pub const DISPLAY_NAME_MAX_CHARS: usize = 255;

/// A display name fit for the `To` header and the greeting: [`one_line`], at most
/// [`DISPLAY_NAME_MAX_CHARS`] characters.
pub fn display_name(s: &str) -> String {
    let one = one_line(s);
    match one.char_indices().nth(DISPLAY_NAME_MAX_CHARS) {
        Some((cut, _)) => one[..cut].trim_end().to_string(),
        None => one,
    }
}

/// `<first 32 hex of sha256(message_key)>@<host of GITLAB_BASE_URL>` (without the
/// angle brackets of the header).
pub fn message_id(message_key: &str, instance: &Instance) -> String {
    let digest = hex::encode(Sha256::digest(message_key.as_bytes()));
    format!("{}@{}", &digest[..32], instance.host)
}

/// How one send ended (behaviour §B28.10.2 step 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// Accepted by the server, written to a file, or logged.
    Accepted,
    /// A 5xx reply (or an address the message cannot carry): a retry cannot help.
    Rejected {
        /// The SMTP code, when the server gave one.
        smtp_code: Option<u16>,
    },
}

/// The configured email transport.
#[derive(Clone)]
pub enum Mailer {
    /// SMTP with TLS.
    Smtp(SmtpMailer),
    /// `<dir>/<message-id>.eml`.
    File(PathBuf),
    /// Logs `Email (log transport)` with the subject only.
    Log,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mailer::Smtp(_) => f.write_str("Mailer::Smtp"),
            Mailer::File(d) => write!(f, "Mailer::File({})", d.display()),
            Mailer::Log => f.write_str("Mailer::Log"),
        }
    }
}

impl Mailer {
    /// Where mails go, for `hk demo`'s summary (no secret).
    pub fn describe(&self) -> String {
        match self {
            Mailer::Smtp(_) => "sent over SMTP".into(),
            Mailer::File(d) => format!("written as <message-id>.eml under {}", d.display()),
            Mailer::Log => "logged (subject only)".into(),
        }
    }

    /// Build the transport of `cfg` (no connection is made here). `password` is the
    /// SMTP password, already read from the environment or its secret.
    pub fn from_config(
        cfg: &NotifyConfig,
        username: Option<String>,
        password: Option<Secret>,
    ) -> Result<Mailer> {
        match cfg.email_transport {
            EmailTransportKind::Log => Ok(Mailer::Log),
            EmailTransportKind::File => {
                let dir = cfg.email_file_dir.clone().ok_or_else(|| {
                    Error::Config("EMAIL_FILE_DIR is required with EMAIL_TRANSPORT=file".into())
                })?;
                Ok(Mailer::File(dir))
            }
            EmailTransportKind::Smtp => Ok(Mailer::Smtp(SmtpMailer {
                transport: Arc::new(Mutex::new(smtp_transport(cfg, username, password)?)),
                rotation: None,
            })),
        }
    }

    /// Re-read `source` (`SMTP_SECRET_ARN`) when the server refuses the credentials
    /// (see [`SmtpMailer`]); `username` is `SMTP_USERNAME`, which wins over the secret's.
    pub fn with_secret(
        self,
        source: SecretSource,
        cfg: &NotifyConfig,
        username: Option<String>,
    ) -> Self {
        match self {
            Mailer::Smtp(m) => Mailer::Smtp(SmtpMailer {
                rotation: Some(Arc::new((source, cfg.clone(), username))),
                ..m
            }),
            other => other,
        }
    }

    /// The secret source given to [`Mailer::with_secret`], if any (its counters).
    pub fn secret(&self) -> Option<&SecretSource> {
        match self {
            Mailer::Smtp(m) => m.rotation.as_deref().map(|r| &r.0),
            _ => None,
        }
    }

    /// Build and send one email. `Err` is a retryable failure (connection, TLS, 4xx,
    /// file system); a 5xx reply is `Ok(Rejected)`.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        from: &str,
        to: &str,
        display_name: &str,
        rendered: &Rendered,
        message_id: &str,
        user_id: i64,
        template: &str,
    ) -> Result<SendOutcome> {
        let build = || -> Result<Option<Message>> {
            let from: Mailbox = from
                .parse()
                .map_err(|_| Error::Config("MAIL_FROM is not a valid mailbox".into()))?;
            let Ok(address) = to.parse::<lettre::Address>() else {
                // An address the message cannot carry: no retry can help.
                return Ok(None);
            };
            Message::builder()
                .from(from)
                .to(Mailbox::new(
                    Some(self::display_name(display_name)).filter(|n| !n.is_empty()),
                    address,
                ))
                .subject(one_line(&rendered.subject))
                .message_id(Some(format!("<{message_id}>")))
                .date_now()
                .header(ContentType::TEXT_PLAIN)
                .body(rendered.body.clone())
                .map(Some)
                .map_err(|e| Error::Invariant(format!("email could not be built: {e}")))
        };
        let message = match self {
            Mailer::Log => {
                tracing::info!(
                    user_id,
                    template,
                    subject = rendered.subject.as_str(),
                    "Email (log transport)"
                );
                return Ok(SendOutcome::Accepted);
            }
            _ => match build()? {
                Some(m) => m,
                None => return Ok(SendOutcome::Rejected { smtp_code: None }),
            },
        };
        match self {
            // Boxed: the retry after a re-read would otherwise deepen the future of
            // every caller past the compiler's layout limit.
            Mailer::Smtp(m) => Box::pin(m.send(message)).await,
            Mailer::File(dir) => {
                let file_err = |e: std::io::Error| Error::Delivery {
                    class: "file",
                    message: format!("cannot write the email file: {}", e.kind()),
                };
                tokio::fs::create_dir_all(dir).await.map_err(file_err)?;
                let path = dir.join(format!("{message_id}.eml"));
                let tmp = dir.join(format!(".{message_id}.eml.tmp"));
                tokio::fs::write(&tmp, message.formatted())
                    .await
                    .map_err(file_err)?;
                // A repeated delivery replaces the same file: one file per notice.
                tokio::fs::rename(&tmp, &path).await.map_err(file_err)?;
                Ok(SendOutcome::Accepted)
            }
            Mailer::Log => Ok(SendOutcome::Accepted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_certificate_of_a_bundle_is_found() {
        let pem = include_str!("../../testdata/two-certs.pem");
        assert_eq!(smtp::pem_certificates(pem).len(), 2);
        assert!(smtp::pem_certificates("nothing here").is_empty());
    }
}
