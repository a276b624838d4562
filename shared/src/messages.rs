//! Typed, versioned queue messages (common.md §9.1–§9.4).
//!
//! Owns: the [`Envelope`] every message travels in, its validation (malformed =
//! permanent failure), message keys, and the payload types of each message type.
//! Changing these types is a compatibility change: fixtures in
//! `tests/fixtures/messages/` pin the wire format. No secret ever goes in a message.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::Value;

use crate::clock::{key_time, rfc3339};
use crate::error::{Error, Result};
use crate::function::Function;

/// The only envelope version.
pub const VERSION: u64 = 1;

/// A message as it travels through a queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// Always 1.
    pub version: u64,
    /// The message type, e.g. `remove-expired-members.run`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Stable idempotency key (common.md §9.3).
    pub message_key: String,
    /// The run this message belongs to; inherited by children and continuations.
    pub run_id: String,
    /// Continuation counter; 0 for a first message.
    pub hop: u64,
    /// The sender's `now`, diagnostics only.
    pub issued_at: String,
    /// Type-specific payload (an object).
    pub payload: Value,
}

/// Why a body is malformed, with the key if one could be read (for the log line).
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    /// What is wrong, without the body.
    pub error: String,
    /// The `message_key`, when it was readable.
    pub message_key: Option<String>,
}

fn valid_key(k: &str) -> bool {
    (1..=256).contains(&k.len())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

impl Envelope {
    /// Parse and validate a body for `receiver`. Every rule of §9.1 and §9.4 is checked;
    /// the error names the first violation and never quotes the body.
    pub fn parse(body: &str, receiver: Function) -> std::result::Result<Envelope, Malformed> {
        let value: Value = serde_json::from_str(body).map_err(|e| Malformed {
            error: format!(
                "body is not valid JSON ({})",
                crate::error::json_error_kind(&e)
            ),
            message_key: None,
        })?;
        let obj = value.as_object().ok_or_else(|| Malformed {
            error: "body is not a JSON object".into(),
            message_key: None,
        })?;
        let message_key = obj
            .get("message_key")
            .and_then(Value::as_str)
            .filter(|k| valid_key(k))
            .map(str::to_string);
        let fail = |error: String| Malformed {
            error,
            message_key: message_key.clone(),
        };
        match obj.get("version") {
            Some(Value::Number(n)) if n.as_u64() == Some(VERSION) => {}
            Some(_) => return Err(fail("unsupported version (must be 1)".into())),
            None => return Err(fail("missing field `version`".into())),
        }
        let kind = match obj.get("type") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(fail("field `type` is not a string".into())),
            None => return Err(fail("missing field `type`".into())),
        };
        if !receiver.accepts().contains(&kind.as_str()) {
            let shown: String = kind.chars().take(64).collect();
            return Err(fail(format!(
                "message type `{shown}` is not accepted by {receiver}"
            )));
        }
        let key = match obj.get("message_key") {
            Some(Value::String(s)) if valid_key(s) => s.clone(),
            Some(_) => {
                return Err(fail(
                    "field `message_key` must be 1-256 characters of [A-Za-z0-9:._-]".into(),
                ))
            }
            None => return Err(fail("missing field `message_key`".into())),
        };
        let run_id = match obj.get("run_id") {
            Some(Value::String(s)) if (1..=128).contains(&s.chars().count()) => s.clone(),
            Some(_) => return Err(fail("field `run_id` must be 1-128 characters".into())),
            None => return Err(fail("missing field `run_id`".into())),
        };
        let hop = match obj.get("hop") {
            Some(Value::Number(n)) => n
                .as_u64()
                .ok_or_else(|| fail("field `hop` must be an integer >= 0".into()))?,
            Some(_) => return Err(fail("field `hop` must be an integer >= 0".into())),
            None => return Err(fail("missing field `hop`".into())),
        };
        let issued_at = match obj.get("issued_at") {
            Some(Value::String(s)) if DateTime::parse_from_rfc3339(s).is_ok() => s.clone(),
            Some(_) => return Err(fail("field `issued_at` is not an RFC 3339 time".into())),
            None => return Err(fail("missing field `issued_at`".into())),
        };
        let payload = match obj.get("payload") {
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(fail("field `payload` is not an object".into())),
            None => return Err(fail("missing field `payload`".into())),
        };
        Ok(Envelope {
            version: VERSION,
            kind,
            message_key: key,
            run_id,
            hop,
            issued_at,
            payload,
        })
    }

    /// Decode the payload as `T`. An error makes the message malformed (§9.4).
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_value(self.payload.clone())
            .map_err(|e| Error::Malformed(format!("invalid payload: {e}")))
    }

    /// Serialize to the wire body.
    pub fn to_body(&self) -> String {
        serde_json::to_string(self).expect("an envelope always serializes")
    }

    /// A first message (hop 0) of a new logical message.
    pub fn new(
        kind: &str,
        message_key: String,
        run_id: &str,
        now: DateTime<Utc>,
        payload: impl Serialize,
    ) -> Envelope {
        Envelope {
            version: VERSION,
            kind: kind.to_string(),
            message_key,
            run_id: run_id.to_string(),
            hop: 0,
            issued_at: rfc3339(now),
            payload: serde_json::to_value(payload).expect("payloads always serialize"),
        }
    }

    /// The cron message of §9.7 for `function` at `scheduled` (what `hk run` builds
    /// when no message is given).
    pub fn cron(function: Function, run_id: &str, scheduled: DateTime<Utc>) -> Envelope {
        Envelope {
            version: VERSION,
            kind: function.run_type().to_string(),
            message_key: format!("{}:cron:{}", function.name(), key_time(scheduled)),
            run_id: run_id.to_string(),
            hop: 0,
            issued_at: key_time(scheduled),
            payload: Value::Object(Default::default()),
        }
    }

    /// The continuation of this message: same run, `hop + 1`, key
    /// `<function>:<run_id>:<hop+1>` (§9.8).
    pub fn continuation(
        &self,
        function: Function,
        now: DateTime<Utc>,
        payload: impl Serialize,
    ) -> Envelope {
        let hop = self.hop + 1;
        Envelope {
            version: VERSION,
            kind: self.kind.clone(),
            message_key: format!("{}:{}:{}", function.name(), self.run_id, hop),
            run_id: self.run_id.clone(),
            hop,
            issued_at: rfc3339(now),
            payload: serde_json::to_value(payload).expect("payloads always serialize"),
        }
    }

    /// A re-send of this message: same key and payload, `hop + 1` (delete-user,
    /// group-destroy).
    pub fn resend(&self, now: DateTime<Utc>) -> Envelope {
        Envelope {
            hop: self.hop + 1,
            issued_at: rfc3339(now),
            ..self.clone()
        }
    }
}

/// `remove-expired-members.run` payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RemoveExpiredMembersRun {
    /// Where the run goes on; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<MemberCursor>,
}

/// Keyset cursor of B38: the last row read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MemberCursor {
    /// The row's `expires_at`.
    pub expires_at: NaiveDate,
    /// The row's id.
    pub id: i64,
}

/// `delete-user.run` payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeleteUserRun {
    /// The user to delete.
    pub user_id: i64,
    /// Who started the removal, if anyone.
    pub initiator_user_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}

/// The key of `delete-user.run` (§9.3).
pub fn delete_user_key(user_id: i64) -> String {
    format!("delete-user:{user_id}")
}

/// `schedule-prune-deletions.run` payload: `{}` (unknown fields are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulePruneDeletionsRun {}

/// `prune-deletions.run` payload: `{}` (unknown fields are ignored). The work list is
/// `members_deletion_schedules` itself, so no cursor travels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PruneDeletionsRun {}

/// The key of the `prune-deletions.run` that the scheduler sends (§9.3):
/// `prune-deletions:<run_id>:0`.
pub fn prune_deletions_key(run_id: &str) -> String {
    format!("prune-deletions:{run_id}:0")
}

/// `adjourned-group-deletion.run` payload (b51 §3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdjournedGroupDeletionRun {
    /// Where the run goes on; absent for the cron message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<GroupCursor>,
}

/// Keyset cursor of B51: the last group visited and the run-wide index of the next.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GroupCursor {
    /// The id of the last group visited.
    pub group_id: i64,
    /// The run-wide 0-based index of the next group (its delay is `index × 20` s).
    pub index: u64,
}

/// `group-destroy.run` payload (b51 §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupDestroyRun {
    /// The group to destroy.
    pub group_id: i64,
    /// The user who scheduled the deletion.
    pub user_id: i64,
    /// The schedule's `marked_for_deletion_on` when the message was sent.
    pub marked_for_deletion_on: NaiveDate,
}

/// The key of `group-destroy.run` (§9.3): `group-destroy:<group_id>:<date>:<user_id>`.
pub fn group_destroy_key(group_id: i64, marked_for_deletion_on: NaiveDate, user_id: i64) -> String {
    format!("group-destroy:{group_id}:{marked_for_deletion_on}:{user_id}")
}

/// `placeholder-user-cleanup.run` payload (b70 §3).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PlaceholderUserCleanupRun {
    /// Where the run goes on; absent for the first message of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<DetailCursor>,
}

/// Keyset cursor of B70: the last visited detail and the run-wide child index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetailCursor {
    /// The id of the last `import_placeholder_user_details` row visited.
    pub detail_id: i64,
    /// How many children the run has sent so far (the next child's delay in seconds).
    pub index: u32,
}

/// `delete-placeholder-user.run` payload (b70 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletePlaceholderUserRun {
    /// The placeholder user to delete.
    pub placeholder_user_id: i64,
    /// The detail's `deletion_attempts` after the claim (informational: logs and key).
    pub attempt: i64,
}

/// The key of `delete-placeholder-user.run` (§9.3).
pub fn delete_placeholder_user_key(placeholder_user_id: i64, attempt: i64) -> String {
    format!("delete-placeholder-user:{placeholder_user_id}:{attempt}")
}

/// `pat-expiring.run` payload: empty; every invocation starts again at `seven_days`
/// (b28 §4), because claimed tokens no longer match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PatExpiringRun {}

/// The resource of a project or group bot (b28 §10.2).
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

/// `deliver-notification.email` payload (b28 §10.2). Addresses never travel: the
/// deliverer reads the recipient's address at delivery time (common.md §9.11).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// `deliver-notification.webhook` payload (b28 §10.3). The hook's URL and token are
/// read and decrypted at delivery time; `body` is sent unchanged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WebhookNotification {
    /// `web_hooks.id`.
    pub hook_id: i64,
    /// The message key without `:hook:<hook_id>` (for `X-Gitlab-Event-UUID`).
    pub event_key: String,
    /// GitLab's resource-access-token hook body.
    pub body: Value,
}

/// Key of a human's email (b28 §10.2): `pat-expiring:<iv>:user:<user_id>:<today>`.
pub fn user_email_key(interval: &str, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:user:{user_id}:{today}")
}

/// Key of a bot email (b28 §10.2):
/// `pat-expiring:<iv>:bot:<bot_user_id>:recipient:<user_id>:<today>`.
pub fn bot_email_key(interval: &str, bot_user_id: i64, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:bot:{bot_user_id}:recipient:{user_id}:{today}")
}

/// Event key of a bot's web hooks (b28 §10.3):
/// `pat-expiring:seven_days:bot:<bot_user_id>:token:<token_id>`.
pub fn webhook_event_key(bot_user_id: i64, token_id: i64) -> String {
    format!("pat-expiring:seven_days:bot:{bot_user_id}:token:{token_id}")
}

/// Key of one web-hook message: the event key plus `:hook:<hook_id>`.
pub fn webhook_key(event_key: &str, hook_id: i64) -> String {
    format!("{event_key}:hook:{hook_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: Value) -> String {
        v.to_string()
    }

    fn good() -> Value {
        serde_json::json!({"version":1,"type":"remove-expired-members.run",
            "message_key":"remove-expired-members:cron:2025-03-10T00:10:00Z",
            "run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z","payload":{}})
    }

    #[test]
    fn a_valid_cron_message_parses() {
        let e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
        assert_eq!(e.hop, 0);
        let p: RemoveExpiredMembersRun = e.payload().unwrap();
        assert_eq!(p.cursor, None);
    }

    #[test]
    fn every_envelope_rule_is_enforced() {
        let cases: Vec<(&str, Value)> = vec![
            ("version", serde_json::json!(2)),
            ("type", serde_json::json!("delete-user.run")),
            ("message_key", serde_json::json!("has space")),
            ("message_key", serde_json::json!("")),
            ("run_id", serde_json::json!("")),
            ("hop", serde_json::json!(-1)),
            ("hop", serde_json::json!(1.5)),
            ("issued_at", serde_json::json!("yesterday")),
            ("payload", serde_json::json!([])),
        ];
        for (field, value) in cases {
            let mut v = good();
            v[field] = value;
            let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
            assert!(err.error.contains(field), "{field}: {}", err.error);
        }
        for field in [
            "version",
            "type",
            "message_key",
            "run_id",
            "hop",
            "issued_at",
            "payload",
        ] {
            let mut v = good();
            v.as_object_mut().unwrap().remove(field);
            let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
            assert!(err.error.contains(field), "{field}: {}", err.error);
        }
    }

    #[test]
    fn malformed_keeps_a_readable_key_and_never_the_body() {
        let mut v = good();
        v["version"] = serde_json::json!(7);
        v["payload"] = serde_json::json!({"secret":"hunter2"});
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert_eq!(
            err.message_key.as_deref(),
            Some("remove-expired-members:cron:2025-03-10T00:10:00Z")
        );
        assert!(!err.error.contains("hunter2"));
        let err = Envelope::parse("{not json", Function::DeleteUser).unwrap_err();
        assert!(err.error.contains("not valid JSON"));
    }

    #[test]
    fn continuation_and_resend_follow_the_key_rules() {
        let e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
        let now = Utc::now();
        let c = e.continuation(
            Function::RemoveExpiredMembers,
            now,
            RemoveExpiredMembersRun::default(),
        );
        assert_eq!(c.hop, 1);
        assert_eq!(c.message_key, "remove-expired-members:r1:1");
        let d = Envelope::new(
            "delete-user.run",
            delete_user_key(20),
            "r1",
            now,
            DeleteUserRun {
                user_id: 20,
                initiator_user_id: None,
                reason: None,
            },
        );
        let r = d.resend(now);
        assert_eq!((r.hop, r.message_key.as_str()), (1, "delete-user:20"));
    }

    #[test]
    fn b28_payloads_and_keys_have_the_wire_shape_of_the_spec() {
        let today: NaiveDate = "2025-03-10".parse().unwrap();
        assert_eq!(
            user_email_key("seven_days", 10, today),
            "pat-expiring:seven_days:user:10:2025-03-10"
        );
        assert_eq!(
            bot_email_key("thirty_days", 20, 11, today),
            "pat-expiring:thirty_days:bot:20:recipient:11:2025-03-10"
        );
        let ev = webhook_event_key(20, 7);
        assert_eq!(ev, "pat-expiring:seven_days:bot:20:token:7");
        assert_eq!(webhook_key(&ev, 3), format!("{ev}:hook:3"));
        let human = EmailNotification::AccessTokenAboutToExpire {
            recipient_user_id: 10,
            days_to_expire: 7,
            token_names: vec!["deploy".into(), "ci".into()],
        };
        assert_eq!(
            serde_json::to_value(&human).unwrap(),
            serde_json::json!({"template":"access_token_about_to_expire","recipient_user_id":10,
                "days_to_expire":7,"token_names":["deploy","ci"]})
        );
        let bot: EmailNotification = serde_json::from_value(serde_json::json!({
            "template":"bot_resource_access_token_about_to_expire","recipient_user_id":11,
            "days_to_expire":30,"bot_user_id":20,"token_name":"T20","resource_type":"group",
            "resource_id":101,"resource_full_path":"acme/web","resource_name":"web"}))
        .unwrap();
        assert_eq!(bot.template(), "bot_resource_access_token_about_to_expire");
        assert_eq!(bot.recipient_user_id(), 11);
        assert_eq!(human.template(), "access_token_about_to_expire");
        // A bot email without its bot fields, or an unknown template, is malformed.
        assert!(
            serde_json::from_value::<EmailNotification>(serde_json::json!({
            "template":"bot_resource_access_token_about_to_expire","recipient_user_id":11,
            "days_to_expire":30}))
            .is_err()
        );
        assert!(
            serde_json::from_value::<EmailNotification>(serde_json::json!({
            "template":"welcome","recipient_user_id":11}))
            .is_err()
        );
    }

    #[test]
    fn ill_typed_payload_is_malformed() {
        let mut v = good();
        v["payload"] = serde_json::json!({"cursor": {"expires_at": "not a date", "id": 1}});
        let e = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap();
        assert!(matches!(
            e.payload::<RemoveExpiredMembersRun>(),
            Err(Error::Malformed(_))
        ));
    }
}
