//! The payloads of `deliver-notification` (B28, and a removal's system hooks):
//! [`Notification`], one mail ([`EmailNotification`], with [`ResourceType`]) or one web
//! hook ([`WebhookNotification`], a system hook's with the `gitlab::system_hooks`
//! subject it reports removed), their bounds ([`DAYS_TO_EXPIRE`], [`TOKEN_NAMES_MAX`]),
//! their validating decoders and their message types (the row's first and second).
//! Their keys are in `crate::messages::keys`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::function::Function;
use crate::gitlab::SystemHookSubject;
use crate::messages::{
    unknown_type, valid_key, validated_deserialize, Addressed, Checked, Fields, FromMessage,
    Payload, PayloadError, FULL_PATH_MAX_CHARS, NAME_MAX_CHARS,
};

/// The resource of a project or group bot (behaviour §B28.10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceType {
    /// A project access token's project.
    Project,
    /// A group access token's group.
    Group,
}

impl ResourceType {
    /// `project` or `group`, as in payloads and emails.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceType::Project => "project",
            ResourceType::Group => "group",
        }
    }
}

/// `deliver-notification.email` payload (behaviour §B28.10.2). Addresses never travel: the
/// deliverer reads the recipient's address at delivery time (behaviour §9.11).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "template")]
pub enum EmailNotification {
    /// A human's own tokens.
    #[serde(rename = "access_token_about_to_expire")]
    AccessTokenAboutToExpire {
        /// The token owner.
        recipient_user_id: i64,
        /// 7, 30 or 60.
        days_to_expire: u32,
        /// At most 100 names, by `(expires_at, id)`.
        token_names: Vec<String>,
    },
    /// A project or group bot's token, sent to an owner or maintainer.
    #[serde(rename = "bot_resource_access_token_about_to_expire")]
    BotResourceAccessTokenAboutToExpire {
        /// The owner or maintainer.
        recipient_user_id: i64,
        /// 7, 30 or 60.
        days_to_expire: u32,
        /// The bot.
        bot_user_id: i64,
        /// The reported token's name.
        token_name: String,
        /// `project` or `group`.
        resource_type: ResourceType,
        /// The project or group id.
        resource_id: i64,
        /// Its full path.
        resource_full_path: String,
        /// Its name.
        resource_name: String,
    },
}

impl EmailNotification {
    /// The template name (`template` field).
    pub fn template(&self) -> &'static str {
        match self {
            EmailNotification::AccessTokenAboutToExpire { .. } => "access_token_about_to_expire",
            EmailNotification::BotResourceAccessTokenAboutToExpire { .. } => {
                "bot_resource_access_token_about_to_expire"
            }
        }
    }

    /// The recipient.
    pub fn recipient_user_id(&self) -> i64 {
        match self {
            EmailNotification::AccessTokenAboutToExpire {
                recipient_user_id, ..
            }
            | EmailNotification::BotResourceAccessTokenAboutToExpire {
                recipient_user_id, ..
            } => *recipient_user_id,
        }
    }
}

/// `deliver-notification.webhook` payload (behaviour §B28.10.3). The hook's URL and token are
/// read and decrypted at delivery time; `body` is sent unchanged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WebhookNotification {
    /// `web_hooks.id`.
    pub hook_id: i64,
    /// The message key without `:hook:<hook_id>` (for `X-Gitlab-Event-UUID`).
    pub event_key: String,
    /// GitLab's resource-access-token hook body; for a system hook, the body already
    /// serialized in GitLab's key order (a JSON string holding a JSON object), sent as is.
    pub body: Value,
    /// For a system hook (docs/gitlab-differences.md, system hooks): the row whose
    /// removal it reports, re-checked gone at delivery. Absent for token hooks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_hook: Option<SystemHookSubject>,
}

/// `days_to_expire` of behaviour §B28.10.2.
pub const DAYS_TO_EXPIRE: [u32; 3] = [7, 30, 60];
/// At most this many `token_names` (behaviour §B28.10.2).
pub const TOKEN_NAMES_MAX: usize = 100;

fn days_to_expire(f: &Fields<'_>) -> Checked<u32> {
    let d = f.required("days_to_expire")?.as_u64();
    d.and_then(|d| u32::try_from(d).ok())
        .filter(|d| DAYS_TO_EXPIRE.contains(d))
        .ok_or_else(|| f.err("days_to_expire", "must be 7, 30 or 60"))
}

impl Payload for EmailNotification {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let template = match f.required("template")? {
            Value::String(t) => t.as_str(),
            _ => "",
        };
        match template {
            "access_token_about_to_expire" => {
                let rule = format!(
                    "must be an array of at most {TOKEN_NAMES_MAX} strings of at most {NAME_MAX_CHARS} characters"
                );
                let names = match f.required("token_names")? {
                    Value::Array(a) if a.len() <= TOKEN_NAMES_MAX => a
                        .iter()
                        .map(|n| match n {
                            Value::String(s) if s.chars().count() <= NAME_MAX_CHARS => {
                                Ok(s.clone())
                            }
                            _ => Err(f.err("token_names", &rule)),
                        })
                        .collect::<Checked<Vec<String>>>()?,
                    _ => return Err(f.err("token_names", &rule)),
                };
                Ok(EmailNotification::AccessTokenAboutToExpire {
                    recipient_user_id: f.id("recipient_user_id")?,
                    days_to_expire: days_to_expire(f)?,
                    token_names: names,
                })
            }
            "bot_resource_access_token_about_to_expire" => {
                let resource_type = match f.required("resource_type")? {
                    Value::String(t) if t == "project" => ResourceType::Project,
                    Value::String(t) if t == "group" => ResourceType::Group,
                    _ => return Err(f.err("resource_type", "must be `project` or `group`")),
                };
                Ok(EmailNotification::BotResourceAccessTokenAboutToExpire {
                    recipient_user_id: f.id("recipient_user_id")?,
                    days_to_expire: days_to_expire(f)?,
                    bot_user_id: f.id("bot_user_id")?,
                    token_name: f.text("token_name", NAME_MAX_CHARS)?,
                    resource_type,
                    resource_id: f.id("resource_id")?,
                    resource_full_path: f.text("resource_full_path", FULL_PATH_MAX_CHARS)?,
                    resource_name: f.text("resource_name", NAME_MAX_CHARS)?,
                })
            }
            _ => Err(f.err(
                "template",
                "must be `access_token_about_to_expire` or `bot_resource_access_token_about_to_expire`",
            )),
        }
    }
}

impl Payload for WebhookNotification {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let event_key = match f.required("event_key")? {
            Value::String(k) if valid_key(k) => k.clone(),
            _ => return Err(f.err("event_key", "must be 1-256 characters of [A-Za-z0-9:._-]")),
        };
        let system_hook = match f.opt_object("system_hook")? {
            None => None,
            Some(o) => {
                let table = o.text("table", 16)?;
                if !SystemHookSubject::TABLES.contains(&table.as_str()) {
                    return Err(o.err("table", "must be members, namespaces, projects or users"));
                }
                let group_hook = o.opt_text("group_hook", 16)?;
                if let Some(t) = &group_hook {
                    if !SystemHookSubject::GROUP_TRIGGERS.contains(&t.as_str()) {
                        return Err(o.err(
                            "group_hook",
                            "must be member_hooks, subgroup_hooks or project_hooks",
                        ));
                    }
                }
                Some(SystemHookSubject {
                    table,
                    id: o.id("id")?,
                    group_hook,
                })
            }
        };
        let body = match (f.required("body")?, &system_hook) {
            (b @ Value::Object(_), None) => b.clone(),
            (Value::String(s), Some(_))
                if serde_json::from_str::<Value>(s).is_ok_and(|v| v.is_object()) =>
            {
                Value::String(s.clone())
            }
            (_, None) => return Err(f.err("body", "must be an object")),
            (_, Some(_)) => return Err(f.err("body", "must be a string holding a JSON object")),
        };
        Ok(WebhookNotification {
            hook_id: f.id("hook_id")?,
            event_key,
            body,
            system_hook,
        })
    }
}

impl Addressed for EmailNotification {
    const RECEIVER: Function = Function::DeliverNotification;

    fn kind(&self) -> &'static str {
        Function::email_kind()
    }
}

impl Addressed for WebhookNotification {
    const RECEIVER: Function = Function::DeliverNotification;

    fn kind(&self) -> &'static str {
        Function::webhook_kind()
    }
}

validated_deserialize!(EmailNotification, WebhookNotification);

/// `deliver-notification`'s payload: one mail or one web hook.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    /// One mail (the row's first message type).
    Email(EmailNotification),
    /// One web hook (the row's second).
    Webhook(WebhookNotification),
}

impl FromMessage for Notification {
    fn decode(kind: &str, payload: &Value) -> Result<Self, PayloadError> {
        if kind == Function::email_kind() {
            EmailNotification::from_value(payload).map(Self::Email)
        } else if kind == Function::webhook_kind() {
            WebhookNotification::from_value(payload).map(Self::Webhook)
        } else {
            Err(unknown_type())
        }
    }

    fn payload_value(&self) -> Value {
        match self {
            Notification::Email(e) => e.payload_value(),
            Notification::Webhook(w) => w.payload_value(),
        }
    }
}
