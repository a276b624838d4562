//! Typed, versioned queue messages (behaviour §9.1–§9.4).
//!
//! Owns: the [`Envelope`] every message travels in, its validation (malformed =
//! permanent failure), message keys, and the payload types of each message type.
//!
//! Validation is strict and happens once, on receipt, before any handler runs: a body
//! with a duplicate object key anywhere is malformed; `run_id` must be 1–128
//! characters of the key set `[A-Za-z0-9:._-]` (keys are built from it); `issued_at`
//! must be RFC 3339 in UTC (`Z`); and the payload must satisfy its type's
//! [`Payload::from_payload`], the one place where each field's type and range is
//! checked (ids ≥ 1, dates exactly `YYYY-MM-DD`, `days_to_expire` ∈ {7, 30, 60}, at
//! most 100 `token_names`, a web-hook `body` that is an object, bounded strings, a
//! cursor `index` within the ids visited, cursor ids ≥ 0). Serde's `Deserialize` of every payload type
//! goes through the same function. An error names the field and the rule, never the
//! value.
//! Changing these types is a compatibility change: fixtures in
//! `tests/fixtures/messages/` pin the wire format. No secret ever goes in a message.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

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
    /// Stable idempotency key (behaviour §9.3).
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

/// What [`Strict`] reports for a repeated key (no key name: it is body text).
const DUPLICATE_KEY: &str = "an object has a duplicate key";

/// A JSON value parsed like `serde_json::Value`, except that an object with the same
/// key twice is an error (`Value` silently keeps the last one).
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Strict, D::Error> {
        use serde::de::{Error as _, MapAccess, SeqAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Strict;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::Bool(v)))
            }
            fn visit_i64<E>(self, v: i64) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::from(v)))
            }
            fn visit_u64<E>(self, v: u64) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::String(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::String(v)))
            }
            fn visit_unit<E>(self) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_none<E>(self) -> std::result::Result<Strict, E> {
                Ok(Strict(Value::Null))
            }
            fn visit_seq<A: SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Strict, A::Error> {
                let mut v = Vec::new();
                while let Some(Strict(e)) = a.next_element()? {
                    v.push(e);
                }
                Ok(Strict(Value::Array(v)))
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut a: A,
            ) -> std::result::Result<Strict, A::Error> {
                let mut m = Map::new();
                while let Some(k) = a.next_key::<String>()? {
                    let Strict(v) = a.next_value()?;
                    if m.insert(k, v).is_some() {
                        return Err(A::Error::custom(DUPLICATE_KEY));
                    }
                }
                Ok(Strict(Value::Object(m)))
            }
        }
        d.deserialize_any(V)
    }
}

/// `run_id` (behaviour §9.1), narrowed to what the keys built from it can carry.
fn valid_run_id(r: &str) -> bool {
    (1..=128).contains(&r.len())
        && r.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

/// A payload field that breaks its rule: the field's path and the rule, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadError {
    /// The field, dotted for nested ones (`cursor.index`).
    pub field: String,
    /// The rule it breaks.
    pub rule: String,
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid payload: field `{}` {}", self.field, self.rule)
    }
}

type Checked<T> = std::result::Result<T, PayloadError>;

/// The fields of one payload object (or a nested one), read by rule.
pub struct Fields<'a> {
    obj: &'a Map<String, Value>,
    prefix: String,
}

/// Longest free-text payload string (a reason, a resource path).
pub const TEXT_MAX_CHARS: usize = 1024;
/// Longest name in a payload (GitLab's limit for token and resource names).
pub const NAME_MAX_CHARS: usize = 255;

impl<'a> Fields<'a> {
    fn top(v: &'a Value) -> Checked<Fields<'a>> {
        match v {
            Value::Object(obj) => Ok(Fields {
                obj,
                prefix: String::new(),
            }),
            _ => Err(PayloadError {
                field: "payload".into(),
                rule: "must be an object".into(),
            }),
        }
    }

    fn path(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    /// An error for `name` breaking `rule`.
    pub fn err(&self, name: &str, rule: &str) -> PayloadError {
        PayloadError {
            field: self.path(name),
            rule: rule.to_string(),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.obj.get(name).filter(|v| !v.is_null())
    }

    fn required(&self, name: &str) -> Checked<&'a Value> {
        self.get(name).ok_or_else(|| self.err(name, "is required"))
    }

    /// An integer in `lo..=hi`.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Checked<i64> {
        let rule = || format!("must be an integer in {lo}..={hi}");
        self.required(name)?
            .as_i64()
            .filter(|n| (lo..=hi).contains(n))
            .ok_or_else(|| self.err(name, &rule()))
    }

    /// A database id: an integer ≥ 1.
    pub fn id(&self, name: &str) -> Checked<i64> {
        self.int(name, 1, i64::MAX)
    }

    /// An optional id (absent or `null` is `None`).
    pub fn opt_id(&self, name: &str) -> Checked<Option<i64>> {
        self.get(name).map(|_| self.id(name)).transpose()
    }

    /// A string of at most `max` characters.
    pub fn text(&self, name: &str, max: usize) -> Checked<String> {
        match self.required(name)? {
            Value::String(s) if s.chars().count() <= max => Ok(s.clone()),
            _ => Err(self.err(
                name,
                &format!("must be a string of at most {max} characters"),
            )),
        }
    }

    /// An optional string of at most `max` characters.
    pub fn opt_text(&self, name: &str, max: usize) -> Checked<Option<String>> {
        self.get(name).map(|_| self.text(name, max)).transpose()
    }

    /// A date written exactly `YYYY-MM-DD`.
    pub fn date(&self, name: &str) -> Checked<NaiveDate> {
        let rule = "must be a date written YYYY-MM-DD";
        match self.required(name)? {
            Value::String(s)
                if s.len() == 10
                    && s.bytes().enumerate().all(|(i, b)| {
                        if i == 4 || i == 7 {
                            b == b'-'
                        } else {
                            b.is_ascii_digit()
                        }
                    }) =>
            {
                NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| self.err(name, rule))
            }
            _ => Err(self.err(name, rule)),
        }
    }

    /// A nested object.
    pub fn object(&self, name: &str) -> Checked<Fields<'a>> {
        match self.required(name)? {
            Value::Object(obj) => Ok(Fields {
                obj,
                prefix: self.path(name),
            }),
            _ => Err(self.err(name, "must be an object")),
        }
    }

    /// An optional nested object.
    pub fn opt_object(&self, name: &str) -> Checked<Option<Fields<'a>>> {
        self.get(name).map(|_| self.object(name)).transpose()
    }
}

/// A payload type: its one validating decoder (every field's type and range, behaviour §9.2).
pub trait Payload: Sized {
    /// Decode and validate the payload's fields. Unknown fields are ignored.
    fn from_payload(f: &Fields<'_>) -> Checked<Self>;

    /// Decode and validate a payload value (it must be an object).
    fn from_value(v: &Value) -> Checked<Self> {
        Self::from_payload(&Fields::top(v)?)
    }
}

/// `Deserialize` through the validating decoder, so no path decodes a payload unchecked.
macro_rules! validated_deserialize {
    ($($t:ty),* $(,)?) => {$(
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let Strict(v) = Strict::deserialize(d)?;
                <$t as Payload>::from_value(&v).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

/// Validate `payload` for message type `kind` (already known to be accepted); returns
/// the cursor, re-serialized from its validated type, when the type has one.
pub fn payload_cursor(kind: &str, payload: &Value) -> Checked<Option<Value>> {
    fn cursor<C: Serialize>(c: Option<C>) -> Option<Value> {
        c.and_then(|c| serde_json::to_value(c).ok())
    }
    Ok(match kind {
        "remove-expired-members.run" => {
            cursor(RemoveExpiredMembersRun::from_value(payload)?.cursor)
        }
        "adjourned-group-deletion.run" => {
            cursor(AdjournedGroupDeletionRun::from_value(payload)?.cursor)
        }
        "placeholder-user-cleanup.run" => {
            cursor(PlaceholderUserCleanupRun::from_value(payload)?.cursor)
        }
        "schedule-prune-deletions.run" => {
            SchedulePruneDeletionsRun::from_value(payload)?;
            None
        }
        "prune-deletions.run" => {
            PruneDeletionsRun::from_value(payload)?;
            None
        }
        "group-destroy.run" => {
            GroupDestroyRun::from_value(payload)?;
            None
        }
        "delete-placeholder-user.run" => {
            DeletePlaceholderUserRun::from_value(payload)?;
            None
        }
        "delete-user.run" => {
            DeleteUserRun::from_value(payload)?;
            None
        }
        "pat-expiring.run" => {
            PatExpiringRun::from_value(payload)?;
            None
        }
        "deliver-notification.email" => {
            EmailNotification::from_value(payload)?;
            None
        }
        "deliver-notification.webhook" => {
            WebhookNotification::from_value(payload)?;
            None
        }
        _ => {
            return Err(PayloadError {
                field: "type".into(),
                rule: "must be a known message type".into(),
            })
        }
    })
}

fn validate_payload(kind: &str, payload: &Value) -> Checked<()> {
    payload_cursor(kind, payload).map(|_| ())
}

impl Envelope {
    /// Parse and validate a body for `receiver`. Every rule of behaviour §9.1 and §9.4 is checked;
    /// the error names the first violation and never quotes the body.
    pub fn parse(body: &str, receiver: Function) -> std::result::Result<Envelope, Malformed> {
        let value: Value = match serde_json::from_str::<Strict>(body) {
            Ok(Strict(v)) => v,
            Err(e) if e.to_string().starts_with(DUPLICATE_KEY) => {
                return Err(Malformed {
                    error: format!("body is not valid JSON ({DUPLICATE_KEY})"),
                    message_key: None,
                })
            }
            Err(e) => {
                return Err(Malformed {
                    error: format!(
                        "body is not valid JSON ({})",
                        crate::error::json_error_kind(&e)
                    ),
                    message_key: None,
                })
            }
        };
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
            Some(Value::String(s)) if valid_run_id(s) => s.clone(),
            Some(_) => {
                return Err(fail(
                    "field `run_id` must be 1-128 characters of [A-Za-z0-9:._-]".into(),
                ))
            }
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
            Some(Value::String(s))
                if s.ends_with('Z') && DateTime::parse_from_rfc3339(s).is_ok() =>
            {
                s.clone()
            }
            Some(_) => {
                return Err(fail(
                    "field `issued_at` is not an RFC 3339 UTC time ending in `Z`".into(),
                ))
            }
            None => return Err(fail("missing field `issued_at`".into())),
        };
        let payload = match obj.get("payload") {
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(fail("field `payload` is not an object".into())),
            None => return Err(fail("missing field `payload`".into())),
        };
        validate_payload(&kind, &payload).map_err(|e| fail(e.to_string()))?;
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

    /// Decode and validate the payload as `T` ([`Payload::from_payload`]). An error
    /// makes the message malformed (behaviour §9.4) and names the field, never its value.
    pub fn payload<T: Payload>(&self) -> Result<T> {
        T::from_value(&self.payload).map_err(|e| Error::Malformed(e.to_string()))
    }

    /// The payload's cursor, validated and re-serialized from its type (so bounded:
    /// only the cursor's own fields), for the `start` line; `None` without one.
    pub fn validated_cursor(&self) -> Option<Value> {
        payload_cursor(&self.kind, &self.payload).ok().flatten()
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

    /// The cron message of behaviour §9.7 for `function` at `scheduled` (what `hk run` builds
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

    /// The continuation of this message: same run, `hop + 1` (saturating, so a hop at
    /// the top stays above every limit and is never sent), key
    /// `<function>:<run_id>:<hop+1>` (behaviour §9.8).
    pub fn continuation(
        &self,
        function: Function,
        now: DateTime<Utc>,
        payload: impl Serialize,
    ) -> Envelope {
        let hop = self.hop.saturating_add(1);
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
            hop: self.hop.saturating_add(1),
            issued_at: rfc3339(now),
            ..self.clone()
        }
    }
}

/// `remove-expired-members.run` payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RemoveExpiredMembersRun {
    /// Where the run goes on; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<MemberCursor>,
}

/// Keyset cursor of B38: the last row read.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemberCursor {
    /// The row's `expires_at`.
    pub expires_at: NaiveDate,
    /// The row's id.
    pub id: i64,
}

/// `delete-user.run` payload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeleteUserRun {
    /// The user to delete.
    pub user_id: i64,
    /// Who started the removal, if anyone.
    pub initiator_user_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}

/// The key of `delete-user.run` (behaviour §9.3).
pub fn delete_user_key(user_id: i64) -> String {
    format!("delete-user:{user_id}")
}

/// `schedule-prune-deletions.run` payload: `{}` (unknown fields are ignored).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SchedulePruneDeletionsRun {}

/// `prune-deletions.run` payload: `{}` (unknown fields are ignored). The work list is
/// `members_deletion_schedules` itself, so no cursor travels.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PruneDeletionsRun {}

/// The key of the `prune-deletions.run` that the scheduler sends (behaviour §9.3):
/// `prune-deletions:<run_id>:0`.
pub fn prune_deletions_key(run_id: &str) -> String {
    format!("prune-deletions:{run_id}:0")
}

/// `adjourned-group-deletion.run` payload (behaviour §B51.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AdjournedGroupDeletionRun {
    /// Where the run goes on; absent for the cron message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<GroupCursor>,
}

/// Keyset cursor of B51: the last group visited and the run-wide index of the next.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GroupCursor {
    /// The id of the last group visited.
    pub group_id: i64,
    /// The run-wide 0-based index of the next group (its delay is `index × 20` s).
    pub index: u64,
}

/// `group-destroy.run` payload (behaviour §B51.4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupDestroyRun {
    /// The group to destroy.
    pub group_id: i64,
    /// The user who scheduled the deletion.
    pub user_id: i64,
    /// The schedule's `marked_for_deletion_on` when the message was sent.
    pub marked_for_deletion_on: NaiveDate,
}

/// The key of `group-destroy.run` (behaviour §9.3): `group-destroy:<group_id>:<date>:<user_id>`.
pub fn group_destroy_key(group_id: i64, marked_for_deletion_on: NaiveDate, user_id: i64) -> String {
    format!("group-destroy:{group_id}:{marked_for_deletion_on}:{user_id}")
}

/// `placeholder-user-cleanup.run` payload (behaviour §B70.3).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PlaceholderUserCleanupRun {
    /// Where the run goes on; absent for the first message of a run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<DetailCursor>,
}

/// Keyset cursor of B70: the last visited detail and the run-wide child index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DetailCursor {
    /// The id of the last `import_placeholder_user_details` row visited.
    pub detail_id: i64,
    /// How many children the run has sent so far (the next child's delay in seconds).
    pub index: u32,
}

/// `delete-placeholder-user.run` payload (behaviour §B70.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeletePlaceholderUserRun {
    /// The placeholder user to delete.
    pub placeholder_user_id: i64,
    /// The detail's `deletion_attempts` after the claim (informational: logs and key).
    pub attempt: i64,
}

/// The key of `delete-placeholder-user.run` (behaviour §9.3).
pub fn delete_placeholder_user_key(placeholder_user_id: i64, attempt: i64) -> String {
    format!("delete-placeholder-user:{placeholder_user_id}:{attempt}")
}

/// `pat-expiring.run` payload: empty; every invocation starts again at `seven_days`
/// (behaviour §B28.4), because claimed tokens no longer match.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PatExpiringRun {}

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
    /// GitLab's resource-access-token hook body.
    pub body: Value,
}

/// Key of a human's email (behaviour §B28.10.2): `pat-expiring:<iv>:user:<user_id>:<today>`.
pub fn user_email_key(interval: &str, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:user:{user_id}:{today}")
}

/// Key of a bot email (behaviour §B28.10.2):
/// `pat-expiring:<iv>:bot:<bot_user_id>:recipient:<user_id>:<today>`.
pub fn bot_email_key(interval: &str, bot_user_id: i64, user_id: i64, today: NaiveDate) -> String {
    format!("pat-expiring:{interval}:bot:{bot_user_id}:recipient:{user_id}:{today}")
}

/// Event key of a bot's web hooks (behaviour §B28.10.3):
/// `pat-expiring:seven_days:bot:<bot_user_id>:token:<token_id>`.
pub fn webhook_event_key(bot_user_id: i64, token_id: i64) -> String {
    format!("pat-expiring:seven_days:bot:{bot_user_id}:token:{token_id}")
}

/// Key of one web-hook message: the event key plus `:hook:<hook_id>`.
pub fn webhook_key(event_key: &str, hook_id: i64) -> String {
    format!("{event_key}:hook:{hook_id}")
}

/// `days_to_expire` of behaviour §B28.10.2.
pub const DAYS_TO_EXPIRE: [u32; 3] = [7, 30, 60];
/// At most this many `token_names` (behaviour §B28.10.2).
pub const TOKEN_NAMES_MAX: usize = 100;
/// `MAX_ATTEMPTS` of b70: an `attempt` is a claimed count, 1 to 15.
pub const ATTEMPT_MAX: i64 = 15;

/// A cursor's run-wide `index` counts children of rows with ids up to the cursor's
/// id (≥ 0; 0 reads from the start), each at most once, and row ids are ≥ 1: so
/// `index <= id`. Anything larger is not a cursor this bundle wrote.
fn index_within(c: &Fields<'_>, index: u64, id: i64) -> Checked<()> {
    if i64::try_from(index).is_ok_and(|i| i <= id) {
        Ok(())
    } else {
        Err(c.err(
            "index",
            "must not exceed the cursor's id (one index per visited row)",
        ))
    }
}

impl Payload for MemberCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(MemberCursor {
            expires_at: f.date("expires_at")?,
            id: f.int("id", 0, i64::MAX)?,
        })
    }
}

impl Payload for RemoveExpiredMembersRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(RemoveExpiredMembersRun {
            cursor: f
                .opt_object("cursor")?
                .map(|c| MemberCursor::from_payload(&c))
                .transpose()?,
        })
    }
}

impl Payload for DeleteUserRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(DeleteUserRun {
            user_id: f.id("user_id")?,
            initiator_user_id: f.opt_id("initiator_user_id")?,
            reason: f.opt_text("reason", TEXT_MAX_CHARS)?,
        })
    }
}

impl Payload for SchedulePruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(SchedulePruneDeletionsRun {})
    }
}

impl Payload for PruneDeletionsRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(PruneDeletionsRun {})
    }
}

impl Payload for PatExpiringRun {
    fn from_payload(_: &Fields<'_>) -> Checked<Self> {
        Ok(PatExpiringRun {})
    }
}

impl Payload for GroupCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let group_id = f.int("group_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::MAX)? as u64;
        index_within(f, index, group_id)?;
        Ok(GroupCursor { group_id, index })
    }
}

impl Payload for AdjournedGroupDeletionRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(AdjournedGroupDeletionRun {
            cursor: f
                .opt_object("cursor")?
                .map(|c| GroupCursor::from_payload(&c))
                .transpose()?,
        })
    }
}

impl Payload for GroupDestroyRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(GroupDestroyRun {
            group_id: f.id("group_id")?,
            user_id: f.id("user_id")?,
            marked_for_deletion_on: f.date("marked_for_deletion_on")?,
        })
    }
}

impl Payload for DetailCursor {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        let detail_id = f.int("detail_id", 0, i64::MAX)?;
        let index = f.int("index", 0, i64::from(u32::MAX))? as u32;
        index_within(f, u64::from(index), detail_id)?;
        Ok(DetailCursor { detail_id, index })
    }
}

impl Payload for PlaceholderUserCleanupRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(PlaceholderUserCleanupRun {
            cursor: f
                .opt_object("cursor")?
                .map(|c| DetailCursor::from_payload(&c))
                .transpose()?,
        })
    }
}

impl Payload for DeletePlaceholderUserRun {
    fn from_payload(f: &Fields<'_>) -> Checked<Self> {
        Ok(DeletePlaceholderUserRun {
            placeholder_user_id: f.id("placeholder_user_id")?,
            attempt: f.int("attempt", 1, ATTEMPT_MAX)?,
        })
    }
}

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
                    resource_full_path: f.text("resource_full_path", TEXT_MAX_CHARS)?,
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
        let body = match f.required("body")? {
            b @ Value::Object(_) => b.clone(),
            _ => return Err(f.err("body", "must be an object")),
        };
        Ok(WebhookNotification {
            hook_id: f.id("hook_id")?,
            event_key,
            body,
        })
    }
}

validated_deserialize!(
    RemoveExpiredMembersRun,
    MemberCursor,
    DeleteUserRun,
    SchedulePruneDeletionsRun,
    PruneDeletionsRun,
    AdjournedGroupDeletionRun,
    GroupCursor,
    GroupDestroyRun,
    PlaceholderUserCleanupRun,
    DetailCursor,
    DeletePlaceholderUserRun,
    PatExpiringRun,
    EmailNotification,
    WebhookNotification,
);

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
    fn ill_typed_payload_is_malformed_on_receipt_naming_the_field_not_the_value() {
        let mut v = good();
        v["payload"] = serde_json::json!({"cursor": {"expires_at": "SECRET-hunter2", "id": 1}});
        let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
        assert_eq!(
            err.error,
            "invalid payload: field `cursor.expires_at` must be a date written YYYY-MM-DD"
        );
        let mut v = good();
        v["type"] = serde_json::json!("delete-user.run");
        v["payload"] = serde_json::json!({"user_id": "SECRET-hunter2"});
        let err = Envelope::parse(&body(v), Function::DeleteUser).unwrap_err();
        assert!(err.error.contains("`user_id`"), "{}", err.error);
        assert!(!err.error.contains("hunter2"), "{}", err.error);
    }

    #[test]
    fn duplicate_keys_run_ids_keys_cannot_carry_and_offset_times_are_malformed() {
        let dup = r#"{"version":1,"type":"remove-expired-members.run","message_key":"k:1",
            "run_id":"r1","hop":0,"issued_at":"2025-03-10T00:10:00Z",
            "payload":{"cursor":{"expires_at":"2025-03-01","id":1,"id":2}}}"#;
        let err = Envelope::parse(dup, Function::RemoveExpiredMembers).unwrap_err();
        assert!(err.error.contains("duplicate key"), "{}", err.error);
        let dup_top = r#"{"version":1,"version":1,"type":"remove-expired-members.run"}"#;
        assert!(Envelope::parse(dup_top, Function::RemoveExpiredMembers)
            .unwrap_err()
            .error
            .contains("duplicate key"));
        for run_id in ["run id/é", "r\u{0}", "a:b c", &"r".repeat(129)] {
            let mut v = good();
            v["run_id"] = Value::from(run_id);
            let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
            assert!(err.error.contains("`run_id`"), "{run_id}: {}", err.error);
        }
        for at in ["2025-03-10T05:10:00+05:00", "2025-03-10T00:10:00+00:00"] {
            let mut v = good();
            v["issued_at"] = Value::from(at);
            let err = Envelope::parse(&body(v), Function::RemoveExpiredMembers).unwrap_err();
            assert!(err.error.contains("`issued_at`"), "{at}: {}", err.error);
        }
    }

    #[test]
    fn continuations_of_the_top_hop_saturate_above_every_limit() {
        let mut e = Envelope::parse(&body(good()), Function::RemoveExpiredMembers).unwrap();
        e.hop = u64::MAX;
        let c = e.continuation(
            Function::RemoveExpiredMembers,
            Utc::now(),
            serde_json::json!({}),
        );
        assert_eq!(c.hop, u64::MAX);
        assert_eq!(e.resend(Utc::now()).hop, u64::MAX);
    }
}
