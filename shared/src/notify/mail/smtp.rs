//! The SMTP transport of [`super::Mailer`]: lettre over native-tls (STARTTLS or
//! implicit TLS, extra roots from `SMTP_CA_BUNDLE`; plain only with `SMTP_TLS=none`,
//! and a server that offers no STARTTLS refused, never used in plain text), and the
//! re-read of `SMTP_SECRET_ARN` when the server refuses the credentials (issue 20,
//! rotation).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use super::SendOutcome;
use crate::aws::SecretSource;
use crate::config::notify::{NotifyConfig, Secret, SmtpTls};
use crate::error::{Error, Result};

/// The SMTP transport, rebuilt with the password of a re-read `SMTP_SECRET_ARN` when
/// the server refuses the credentials (issue 20): at most once per the source's
/// bound, `AWSCURRENT` only (no RDS rotation installs SMTP passwords, so there is no
/// `AWSPENDING` window to bridge). Clones share the transport and the bound.
#[derive(Clone)]
pub struct SmtpMailer {
    pub(super) transport: Arc<Mutex<AsyncSmtpTransport<Tokio1Executor>>>,
    pub(super) rotation: Option<Arc<(SecretSource, NotifyConfig, Option<String>)>>,
}

/// Whether lettre's error is a failed TLS handshake (lettre reports those as
/// connection errors: an untrusted certificate, or implicit TLS to a plain server).
fn is_handshake_failure(e: &lettre::transport::smtp::Error) -> bool {
    // lettre nests its connection errors; the handshake's own error is further down.
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        if c.is::<native_tls::Error>() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// 530 (authentication required), 534 (mechanism too weak), 535 (credentials invalid).
fn is_auth_failure(code: Option<u16>) -> bool {
    matches!(code, Some(530 | 534 | 535))
}

impl SmtpMailer {
    fn transport(&self) -> AsyncSmtpTransport<Tokio1Executor> {
        self.transport
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-read the secret (bounded) after refused credentials and rebuild the
    /// transport; `false` when the bound forbids it or nothing changed.
    async fn reread(&self) -> Result<bool> {
        let Some(r) = &self.rotation else {
            return Ok(false);
        };
        let (source, cfg, username) = r.as_ref();
        if !source.may_reread() {
            tracing::warn!(
                variable = source.var(),
                error_class = "smtp_auth",
                "SMTP authentication failed; the secret was re-read less than the bound ago, not again"
            );
            return Ok(false);
        }
        let (user, pw) = super::super::smtp_secret(&source.read().await?);
        let transport = smtp_transport(cfg, username.clone().or(user), Some(pw))?;
        *self.transport.lock().unwrap_or_else(|p| p.into_inner()) = transport;
        Ok(true)
    }

    /// Send over SMTP; refused credentials re-read the secret once (bounded) and
    /// send again.
    pub(super) async fn send(&self, message: Message) -> Result<SendOutcome> {
        let m = self;
        match m.transport().send(message.clone()).await {
            Ok(_) => Ok(SendOutcome::Accepted),
            Err(e) => {
                let mut code = e.status().map(u16::from);
                let mut e = e;
                if is_auth_failure(code) && m.reread().await? {
                    match m.transport().send(message).await {
                        Ok(_) => {
                            tracing::info!("SMTP credentials refused; re-read the secret and sent");
                            return Ok(SendOutcome::Accepted);
                        }
                        Err(again) => {
                            code = again.status().map(u16::from);
                            e = again;
                        }
                    }
                }
                if is_auth_failure(code) {
                    // Not the recipient's fault: retryable, never a rejection.
                    tracing::warn!(
                        smtp_code = code,
                        error_class = "smtp_auth",
                        "SMTP authentication failed"
                    );
                    return Err(Error::Delivery {
                        class: "smtp_auth",
                        message: format!("SMTP authentication failed ({})", code.unwrap_or(0)),
                    });
                }
                if e.is_permanent() {
                    return Ok(SendOutcome::Rejected { smtp_code: code });
                }
                // Only the kind and the code: the server's text may echo addresses.
                let kind = if e.is_transient() {
                    "temporary rejection"
                } else if e.is_client() && e.to_string().contains("STARTTLS") {
                    // SMTP_TLS=starttls and the server does not offer it: refused
                    // rather than sent in plain text.
                    "TLS failure: the server offers no STARTTLS (SMTP_TLS=starttls; \
                     `none` only for a relay without TLS)"
                } else if e.is_tls() || is_handshake_failure(&e) {
                    "TLS failure"
                } else if e.is_timeout() {
                    "timeout"
                } else {
                    "connection failure"
                };
                Err(Error::Delivery {
                    class: "smtp",
                    message: match code {
                        Some(c) => format!("SMTP {kind} ({c})"),
                        None => format!("SMTP {kind}"),
                    },
                })
            }
        }
    }
}

/// Every certificate of a PEM bundle (native-tls reads one per call).
pub(super) fn pem_certificates(pem: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut inside = false;
    for line in pem.lines() {
        if line.starts_with("-----BEGIN CERTIFICATE-----") {
            inside = true;
            cur.clear();
        }
        if inside {
            cur.push_str(line);
            cur.push('\n');
        }
        if line.starts_with("-----END CERTIFICATE-----") && inside {
            inside = false;
            out.push(std::mem::take(&mut cur));
        }
    }
    out
}

/// The SMTP transport of `cfg` with these credentials (no connection is made here).
pub(super) fn smtp_transport(
    cfg: &NotifyConfig,
    username: Option<String>,
    password: Option<Secret>,
) -> Result<AsyncSmtpTransport<Tokio1Executor>> {
    let host =
        cfg.smtp.host.clone().ok_or_else(|| {
            Error::Config("SMTP_HOST is required with EMAIL_TRANSPORT=smtp".into())
        })?;
    let tls = match cfg.smtp.tls {
        SmtpTls::StartTls => Tls::Required(tls_parameters(cfg, &host)?),
        SmtpTls::Implicit => Tls::Wrapper(tls_parameters(cfg, &host)?),
        SmtpTls::None => Tls::None,
    };
    let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)
        .port(cfg.smtp.port())
        .tls(tls)
        .timeout(Some(Duration::from_secs(30)));
    if let (Some(user), Some(pw)) = (username, password) {
        b = b.credentials(Credentials::new(user, pw.expose().to_string()));
    }
    Ok(b.build())
}

/// The TLS parameters for `host`: the system roots plus `SMTP_CA_BUNDLE`.
fn tls_parameters(cfg: &NotifyConfig, host: &str) -> Result<TlsParameters> {
    let mut params = TlsParameters::builder(host.to_string());
    if let Some(path) = &cfg.smtp.ca_bundle {
        let pem = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!(
                "cannot read SMTP_CA_BUNDLE `{}`: {e}",
                path.display()
            ))
        })?;
        let certs = pem_certificates(&pem);
        if certs.is_empty() {
            return Err(Error::Config(format!(
                "SMTP_CA_BUNDLE `{}` holds no PEM certificate",
                path.display()
            )));
        }
        for c in certs {
            let cert = Certificate::from_pem(c.as_bytes()).map_err(|e| {
                Error::Config(format!("SMTP_CA_BUNDLE has an invalid certificate: {e}"))
            })?;
            params = params.add_root_certificate(cert);
        }
    }
    params
        .build_native()
        .map_err(|e| Error::Config(format!("SMTP TLS setup failed: {e}")))
}
