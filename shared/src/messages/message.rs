//! How a handler's payload is decoded once, on receipt (behaviour §9.2).
//!
//! Owns: [`FromMessage`] (message type and payload JSON to a handler's payload type,
//! the JSON a continuation carries back, the cursor the `start` line shows) and
//! [`Notification`], `deliver-notification`'s sum. Every function's sum is
//! `handlers::Message`, so a payload type may live in its function's module.

use serde::Serialize;
use serde_json::Value;

use super::payloads::{EmailNotification, Payload, PayloadError, WebhookNotification};

/// A handler's payload type, decoded once from the message type and payload JSON the
/// envelope carries (the envelope has checked that its function accepts the type).
pub trait FromMessage: Sized + Send + Sync {
    /// Decode `payload` of message type `kind`; the error names the field and the rule.
    fn decode(kind: &str, payload: &Value) -> Result<Self, PayloadError>;

    /// The payload as JSON (what the envelope of a continuation carries).
    fn payload_value(&self) -> Value;

    /// The cursor of a continuing run, re-serialized from its validated type (so
    /// bounded: only the cursor's own fields), for the `start` line.
    fn cursor(&self) -> Option<Value> {
        None
    }
}

/// A payload type of one message type: its validating decoder.
impl<T: Payload + Serialize + Send + Sync> FromMessage for T {
    fn decode(_kind: &str, payload: &Value) -> Result<Self, PayloadError> {
        T::from_value(payload)
    }

    fn payload_value(&self) -> Value {
        serde_json::to_value(self).expect("payloads always serialize")
    }

    fn cursor(&self) -> Option<Value> {
        Payload::cursor(self)
    }
}

/// The error of a message type no function of the bundle accepts.
pub fn unknown_type() -> PayloadError {
    PayloadError {
        field: "type".into(),
        rule: "must be a known message type".into(),
    }
}

/// `deliver-notification`'s payload: one mail or one web hook.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    /// `deliver-notification.email`.
    Email(EmailNotification),
    /// `deliver-notification.webhook`.
    Webhook(WebhookNotification),
}

impl FromMessage for Notification {
    fn decode(kind: &str, payload: &Value) -> Result<Self, PayloadError> {
        match kind {
            "deliver-notification.email" => EmailNotification::from_value(payload).map(Self::Email),
            "deliver-notification.webhook" => {
                WebhookNotification::from_value(payload).map(Self::Webhook)
            }
            _ => Err(unknown_type()),
        }
    }

    fn payload_value(&self) -> Value {
        match self {
            Notification::Email(e) => e.payload_value(),
            Notification::Webhook(w) => w.payload_value(),
        }
    }
}
