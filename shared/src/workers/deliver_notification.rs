//! B28 `deliver-notification` (behaviour §B28.10, §9.11).
//!
//! Owns: one delivery per record. Emails: the recipient is re-read, the mail rendered
//! and sent with a `Message-ID` derived from the message key; 5xx is final, any other
//! failure retryable. Web hooks: the hook row is re-read, URL and token decrypted, the
//! target checked against GitLab's local-network settings and pinned, the body POSTed
//! unchanged with GitLab's headers and an `Idempotency-Key`, the outcome recorded on the
//! hook row (behaviour §B28.10.4); HTTP failures are not retried. System hooks
//! (docs/gitlab-differences.md, "System hooks"): sent only once the row they report is
//! gone (waiting for the removal's lock), header `System Hook`, body as claimed, no
//! auto-disabling, a temporary failure retried. EE group hooks of a removal (the
//! subject's `group_hook` trigger): the same, with the hook re-read subscribed to the
//! trigger, the scope's header (`Member Hook`, …), and GitLab's auto-disabling as for
//! token hooks (skipped while disabled, the outcome recorded on the row). Nothing
//! secret is logged. The typed `done` result is in `report`.

pub mod payload;
mod render;
mod report;
pub(crate) mod sql;

pub use payload::{
    EmailNotification, Notification, ResourceType, WebhookNotification, DAYS_TO_EXPIRE,
    TOKEN_NAMES_MAX,
};
pub use render::render;
pub use report::{Delivered, Outcome};

use std::time::Instant;

use bytes::Bytes;
use hyper::header::{HeaderName, HeaderValue};
use tokio_postgres::GenericClient;

use crate::error::{Error, Result};
use crate::function::Function;
use crate::gitlab::system_hooks::{self, group::Scope};
use crate::job::{FromConfig, Job, Step};
use crate::messages::Envelope;
use crate::notify::mail::{self, SendOutcome};
use crate::notify::webhook::{self, HookState, PostOutcome, Refusal};
use crate::notify::{Instance, Notifier};
use crate::retry_transient;
use crate::runtime::Invocation;

/// The recipient as read at delivery time.
struct Recipient {
    display_name: String,
    address: String,
    can_receive: bool,
}

async fn load_recipient<C: GenericClient>(c: &C, user_id: i64) -> Result<Option<Recipient>> {
    let row = c.query_opt(sql::RECIPIENT, &[&user_id]).await?;
    Ok(row.map(|r| Recipient {
        display_name: r.get(0),
        address: r.get(1),
        can_receive: r.get(2),
    }))
}

/// A delivery's step: it ends here, whatever the outcome.
type DeliveryStep = Step<Delivered, Notification>;

async fn email<C: GenericClient>(
    notifier: &Notifier,
    client: &C,
    env: &Envelope,
    n: EmailNotification,
) -> Result<DeliveryStep> {
    let (instance, d) = (&notifier.instance, &notifier.delivery);
    let user_id = n.recipient_user_id();
    let template = n.template();
    let delivered = |outcome: Outcome| Delivered::Email {
        user_id,
        template,
        outcome,
    };
    let report = |outcome: Outcome| Step::Done(delivered(outcome));
    let recipient = match load_recipient(client, user_id).await? {
        Some(r) if r.can_receive && !r.address.trim().is_empty() => r,
        _ => {
            tracing::info!(
                user_id,
                template,
                "Notification skipped: recipient cannot receive notifications"
            );
            return Ok(report(Outcome::RecipientCannotReceive));
        }
    };
    let rendered = render(&n, &recipient.display_name, instance);
    let message_id = mail::message_id(&env.message_key, instance);
    if d.dry_run {
        tracing::info!(user_id, template, "Email not sent: dry run");
        return Ok(report(Outcome::DryRun));
    }
    let sent = d
        .mailer
        .send(
            &d.mail_from,
            recipient.address.trim(),
            &recipient.display_name,
            &rendered,
            &message_id,
            user_id,
            template,
        )
        .await;
    match sent {
        // A temporary failure is retried; the report carries it so the record's
        // metrics count it.
        Err(e) if !matches!(e, Error::Malformed(_)) => Ok(Step::Retry {
            outcome: delivered(Outcome::Deferred),
            error: e,
        }),
        Err(e) => Err(e),
        Ok(SendOutcome::Accepted) => {
            tracing::info!(user_id, template, "Email delivered");
            Ok(report(Outcome::Delivered))
        }
        Ok(SendOutcome::Rejected { smtp_code }) => {
            tracing::error!(user_id, smtp_code, "Email rejected");
            Ok(report(Outcome::Rejected))
        }
    }
}

/// The hook row as read at delivery time.
struct Hook {
    subscribed: bool,
    url: Option<(String, String)>,
    token: Option<(String, String)>,
    verify_tls: bool,
    state: HookState,
    /// GitLab's `allow_local_requests_from_web_hooks_and_services`, read with the row.
    gitlab_allows_local: bool,
    /// GitLab's `deny_all_requests_except_allowed`, read with the row.
    gitlab_denies_all: bool,
}

/// Hook `hook_id` as read at delivery time, subscribed as `kind` says (`system`, a
/// group-hook trigger, or `token`: `sql::HOOK`).
async fn load_hook<C: GenericClient>(c: &C, hook_id: i64, kind: &str) -> Result<Option<Hook>> {
    let row = c.query_opt(sql::HOOK, &[&hook_id, &kind]).await?;
    let pair = |v: Option<String>, iv: Option<String>| match (v, iv) {
        (Some(v), Some(iv)) if !v.trim().is_empty() => Some((v, iv)),
        _ => None,
    };
    Ok(row.map(|r| Hook {
        subscribed: r.get::<_, Option<bool>>(0).unwrap_or(false),
        url: pair(r.get(1), r.get(2)),
        token: pair(r.get(3), r.get(4)),
        verify_tls: r.get(5),
        state: HookState {
            recent_failures: r.get(6),
            disabled_until: r.get(7),
        },
        gitlab_allows_local: r.get(8),
        gitlab_denies_all: r.get(9),
    }))
}

/// Record a success or failure on the hook row (behaviour §B28.10.4), under its row lock, in its
/// own transaction. Returns whether the row changed.
async fn record<C>(
    inv: &Invocation<'_>,
    client: &mut C,
    hook_id: i64,
    success: bool,
) -> Result<bool>
where
    C: GenericClient + Send + Sync,
{
    let tx = client.transaction().await?;
    let Some(row) = tx.query_opt(sql::LOCK_HOOK_STATE, &[&hook_id]).await? else {
        tx.commit().await?;
        return Ok(false);
    };
    let state = HookState {
        recent_failures: row.get(0),
        disabled_until: row.get(1),
    };
    let next = if success {
        state.after_success()
    } else {
        state.after_failure(inv.now)
    };
    if let Some(next) = next {
        tx.execute(
            sql::SET_HOOK_STATE,
            &[&hook_id, &next.recent_failures, &next.disabled_until],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(next.is_some())
}

/// `X-Gitlab-Event` of a resource-access-token hook.
const TOKEN_HOOK: &str = "Resource Access Token Hook";
/// `X-Gitlab-Event` of a system hook (`SystemHook` titleized).
const SYSTEM_HOOK: &str = "System Hook";

/// The headers of behaviour §B28.10.3, in a fixed order.
fn hook_headers(
    instance: &Instance,
    env: &Envelope,
    event_key: &str,
    token: &str,
    event: &str,
) -> Result<Vec<(HeaderName, HeaderValue)>> {
    let uuid = |k: &str| uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, k.as_bytes()).to_string();
    let value = |v: String| {
        HeaderValue::from_str(&v)
            .map_err(|_| Error::Invariant("a web-hook header value is not valid".into()))
    };
    let mut h = vec![
        (
            hyper::header::CONTENT_TYPE,
            value("application/json".into())?,
        ),
        (
            hyper::header::USER_AGENT,
            value(format!("GitLab/{}", instance.version))?,
        ),
        (
            HeaderName::from_static("x-gitlab-event"),
            value(event.into())?,
        ),
        (
            HeaderName::from_static("x-gitlab-instance"),
            value(instance.base_url.clone())?,
        ),
        (
            HeaderName::from_static("x-gitlab-webhook-uuid"),
            value(uuid(&env.message_key))?,
        ),
        (
            HeaderName::from_static("x-gitlab-event-uuid"),
            value(uuid(event_key))?,
        ),
        (
            HeaderName::from_static("idempotency-key"),
            value(env.message_key.clone())?,
        ),
    ];
    if !token.is_empty() {
        let mut v = HeaderValue::from_str(token).map_err(|_| Error::Delivery {
            class: "decrypt",
            message: "the web-hook token is not a valid header value".into(),
        })?;
        v.set_sensitive(true);
        h.push((HeaderName::from_static("x-gitlab-token"), v));
    }
    Ok(h)
}

async fn webhook<C>(
    inv: &Invocation<'_>,
    notifier: &Notifier,
    client: &mut C,
    env: &Envelope,
    p: WebhookNotification,
) -> Result<DeliveryStep>
where
    C: GenericClient + Send + Sync,
{
    let (instance, d) = (&notifier.instance, &notifier.delivery);
    let hook_id = p.hook_id;
    let report = |outcome: Outcome| {
        Step::Done(Delivered::Webhook {
            hook_id,
            outcome,
            temporary: false,
        })
    };
    // A removal's hook (system or EE group hook) reports a row; a token hook does not.
    let removal = p.system_hook.is_some();
    let scope = p
        .system_hook
        .as_ref()
        .and_then(|s| s.group_hook.as_deref())
        .and_then(Scope::parse);
    let system = removal && scope.is_none();
    let kind = match scope {
        Some(s) => s.trigger(),
        None if system => "system",
        None => "token",
    };
    let hook = match load_hook(&*client, hook_id, kind).await? {
        Some(h) if h.subscribed => h,
        _ => {
            tracing::info!(hook_id, "Webhook skipped: hook no longer subscribed");
            return Ok(report(Outcome::NotSubscribed));
        }
    };
    if let Some(subject) = &p.system_hook {
        // Sent before the removal's COMMIT: wait for it; a removal rolled back sends
        // nothing (its retry claims the hook again under the same key).
        if system_hooks::still_present(&*client, subject).await? {
            tracing::info!(
                hook_id,
                table = subject.table.as_str(),
                id = subject.id,
                "System hook skipped: the row it reports is still there"
            );
            return Ok(report(Outcome::NotRemoved));
        }
    }
    // GitLab auto-disables project (and EE group) hooks only, never system hooks.
    if !system && !hook.state.executable(inv.now) {
        let disabled_until = hook.state.disabled_until.map(crate::clock::rfc3339);
        tracing::info!(
            hook_id,
            recent_failures = hook.state.recent_failures,
            disabled_until = disabled_until.as_deref(),
            "Webhook skipped: hook disabled"
        );
        return Ok(report(Outcome::Disabled));
    }
    let decrypt_failed = || {
        tracing::error!(hook_id, "Webhook secret decryption failed");
        Error::Delivery {
            class: "decrypt",
            message: format!("web hook {hook_id}: secret decryption failed"),
        }
    };
    let url = match &hook.url {
        Some((v, iv)) => d.keys.decrypt(v, iv).map_err(|_| decrypt_failed())?,
        None => return Err(decrypt_failed()),
    };
    let token = match &hook.token {
        Some((v, iv)) => d.keys.decrypt(v, iv).map_err(|_| decrypt_failed())?,
        None => String::new(),
    };
    let host = webhook::parse_target(&url).ok().map(|t| t.host);
    let log_host = if d.log_host { host.as_deref() } else { None };
    if d.dry_run {
        tracing::info!(hook_id, host = log_host, "Webhook not sent: dry run");
        return Ok(report(Outcome::DryRun));
    }
    let event = match scope {
        Some(s) => s.header(),
        None if system => SYSTEM_HOOK,
        None => TOKEN_HOOK,
    };
    let headers = hook_headers(instance, env, &p.event_key, &token, event)?;
    let body = match &p.body {
        // A removal's hook body, serialized at claim time in GitLab's key order.
        serde_json::Value::String(s) if removal => Bytes::from(s.clone().into_bytes()),
        b => Bytes::from(serde_json::to_vec(b).expect("a JSON value serializes")),
    };
    let started = Instant::now();
    let outcome = if hook.gitlab_denies_all && host.is_some() {
        // GitLab then requests only what its allow list names; the bundle does not
        // read the list, so it requests nothing (narrower, never wider).
        PostOutcome::Refused(Refusal::NotOnAllowList)
    } else {
        d.webhooks
            .post(
                &url,
                &headers,
                body,
                hook.verify_tls,
                hook.gitlab_allows_local,
            )
            .await
    };
    let mut temporary = false;
    let (success, delivered) = match outcome {
        PostOutcome::Refused(r) => {
            tracing::warn!(
                hook_id,
                reason = r.reason(),
                host = log_host,
                "Webhook target refused"
            );
            (
                false,
                if r == Refusal::InvalidUrl {
                    Outcome::InvalidUrl
                } else {
                    Outcome::Refused
                },
            )
        }
        PostOutcome::Status { status, duration } if (200..400).contains(&status) => {
            tracing::info!(
                hook_id,
                status,
                duration_ms = duration.as_millis() as u64,
                host = log_host,
                "Webhook delivered"
            );
            (true, Outcome::Delivered)
        }
        PostOutcome::Status { status, .. } => {
            temporary = status >= 500 || status == 408 || status == 429;
            tracing::warn!(
                hook_id,
                status,
                duration_ms = started.elapsed().as_millis() as u64,
                host = log_host,
                "Webhook delivery failed"
            );
            (false, Outcome::Failed)
        }
        PostOutcome::Failed { error_class } => {
            temporary = true;
            tracing::warn!(
                hook_id,
                error_class,
                host = log_host,
                "Webhook delivery failed"
            );
            (false, Outcome::Failed)
        }
    };
    if !system {
        retry_transient!(record(inv, client, hook_id, success).await)?;
    }
    if removal {
        // A removal's hook: a temporary failure is retried (the message again, same
        // Idempotency-Key) until the DLQ takes it, or, for a group hook, until
        // GitLab's auto-disabling (recorded above) says the hook is disabled.
        if temporary {
            return Ok(Step::Retry {
                outcome: Delivered::Webhook {
                    hook_id,
                    outcome: delivered,
                    temporary,
                },
                error: Error::Delivery {
                    class: "system_hook",
                    message: format!(
                        "{} {hook_id}: temporary failure, retried",
                        if system { "system hook" } else { "group hook" }
                    ),
                },
            });
        }
    }
    Ok(Step::Done(Delivered::Webhook {
        hook_id,
        outcome: delivered,
        temporary,
    }))
}

/// The `deliver-notification` job: one delivery per message, never continued.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliverNotification;

impl Job for DeliverNotification {
    const FUNCTION: Function = Function::DeliverNotification;
    type Payload = Notification;
    type Outcome = Delivered;

    /// The instance and the delivery means.
    type Deps = Notifier;

    async fn run<C>(
        inv: &Invocation<'_>,
        notifier: &Notifier,
        client: &mut C,
        env: &Envelope,
        payload: Notification,
    ) -> Result<DeliveryStep>
    where
        C: GenericClient + Send + Sync,
    {
        let step = match payload {
            Notification::Email(n) => email(notifier, &*client, env, n).await,
            Notification::Webhook(p) => webhook(inv, notifier, client, env, p).await,
        }?;
        if let Step::Done(d) | Step::Retry { outcome: d, .. } = &step {
            let (table, id) = match d {
                Delivered::Email { user_id, .. } => ("users", *user_id),
                Delivered::Webhook { hook_id, .. } => ("web_hooks", *hook_id),
            };
            let o = d.outcome();
            inv.decide(table, id, o.decision(), o.name());
        }
        Ok(step)
    }
}

/// `deliver-notification` needs the instance and the delivery means (secrets behind
/// ARNs read through `aws`).
impl FromConfig for Notifier {
    async fn build(cfg: &crate::config::Config, aws: &aws_config::SdkConfig) -> Result<Notifier> {
        Notifier::full(&cfg.notify, Some(aws)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn headers_are_gitlabs_with_deterministic_uuids_and_the_key() {
        let instance = Instance::new("https://gitlab.example.com", None, "18.0.0").unwrap();
        let env = Envelope::new(
            "deliver-notification.webhook",
            "pat-expiring:seven_days:bot:20:token:20:hook:1".into(),
            "r",
            chrono::Utc::now(),
            json!({}),
        );
        let ev = "pat-expiring:seven_days:bot:20:token:20";
        let h = hook_headers(&instance, &env, ev, "", TOKEN_HOOK).unwrap();
        let names: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "content-type",
                "user-agent",
                "x-gitlab-event",
                "x-gitlab-instance",
                "x-gitlab-webhook-uuid",
                "x-gitlab-event-uuid",
                "idempotency-key"
            ]
        );
        assert_eq!(h[1].1, "GitLab/18.0.0");
        let again = hook_headers(&instance, &env, ev, "s3cr3t", TOKEN_HOOK).unwrap();
        assert_eq!(again[4].1, h[4].1);
        assert_ne!(h[4].1, h[5].1);
        assert_eq!(
            h[5].1,
            uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, ev.as_bytes()).to_string()
        );
        assert_eq!(again.last().unwrap().0, "x-gitlab-token");
        assert!(again.last().unwrap().1.is_sensitive());
        // A token that cannot be a header value is a decryption-class failure.
        assert!(hook_headers(&instance, &env, ev, "bad\ntoken", TOKEN_HOOK).is_err());
    }
}
