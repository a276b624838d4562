//! The message envelope (behaviour §9.1, §9.4, §9.7, §9.8).
//!
//! Owns: [`Envelope`] and [`VERSION`]; parsing a body strictly ([`Strict`]: a duplicate
//! object key anywhere is malformed), the validation of every envelope field
//! ([`Malformed`] names the first violation, never the body), and the envelopes built
//! from others: first messages, cron messages, continuations (hop + 1) and re-sends.
//! The payload itself is checked by [`crate::messages::payloads`].

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::keys::{valid_key, valid_run_id};
use super::message::FromMessage;
use super::strict::{Strict, DUPLICATE_KEY};
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

impl Envelope {
    /// Parse and validate a body for `receiver`. Every rule of behaviour §9.1 and §9.4 is checked;
    /// the error names the first violation and never quotes the body.
    /// The payload is decoded as `M` (for every function at once: `handlers::Message`,
    /// whose `Envelope::parse` and `Envelope::decode` are this with it), and kept: what
    /// the runtime hands to a handler, so a payload is decoded once.
    pub fn decode_as<M: FromMessage>(
        body: &str,
        receiver: Function,
    ) -> std::result::Result<(Envelope, M), Malformed> {
        let value: Value = match serde_json::from_str::<Strict>(body) {
            Ok(Strict(v)) => v,
            // `Strict` accepts every JSON value, so the only data error it can raise is
            // its own: a repeated key (syntax, EOF and I/O errors are other classes).
            Err(e) if e.is_data() => {
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
        // A field by its rule: `missing field` when absent, `rule` when it breaks it.
        let field = |name: &str, rule: &str, ok: &dyn Fn(&Value) -> bool| match obj.get(name) {
            Some(v) if ok(v) => Ok(v.clone()),
            Some(_) => Err(fail(rule.to_string())),
            None => Err(fail(format!("missing field `{name}`"))),
        };
        let text = |v: Value| v.as_str().unwrap_or_default().to_string();
        field("version", "unsupported version (must be 1)", &|v| {
            v.as_u64() == Some(VERSION)
        })?;
        let kind = text(field(
            "type",
            "field `type` is not a string",
            &Value::is_string,
        )?);
        if !receiver.accepts().contains(&kind.as_str()) {
            let shown: String = kind.chars().take(64).collect();
            return Err(fail(format!(
                "message type `{shown}` is not accepted by {receiver}"
            )));
        }
        let key = text(field(
            "message_key",
            "field `message_key` must be 1-256 characters of [A-Za-z0-9:._-]",
            &|v| v.as_str().is_some_and(valid_key),
        )?);
        let run_id = text(field(
            "run_id",
            "field `run_id` must be 1-128 characters of [A-Za-z0-9:._-]",
            &|v| v.as_str().is_some_and(valid_run_id),
        )?);
        let hop = field("hop", "field `hop` must be an integer >= 0", &Value::is_u64)?
            .as_u64()
            .unwrap_or_default();
        let issued_at = text(field(
            "issued_at",
            "field `issued_at` is not an RFC 3339 UTC time ending in `Z`",
            &|v| {
                v.as_str()
                    .is_some_and(|s| s.ends_with('Z') && DateTime::parse_from_rfc3339(s).is_ok())
            },
        )?);
        let payload = field(
            "payload",
            "field `payload` is not an object",
            &Value::is_object,
        )?;
        let message = M::decode(&kind, &payload).map_err(|e| fail(e.to_string()))?;
        let env = Envelope {
            version: VERSION,
            kind,
            message_key: key,
            run_id,
            hop,
            issued_at,
            payload,
        };
        Ok((env, message))
    }

    /// The payload as `T`, decoded and validated (tests and tools; the runtime keeps
    /// the payload of [`Envelope::decode_as`]). An error makes the message malformed
    /// (behaviour §9.4) and names the field, never its value.
    pub fn payload<T: FromMessage>(&self) -> Result<T> {
        T::decode(&self.kind, &self.payload).map_err(|e| Error::Malformed(e.to_string()))
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
