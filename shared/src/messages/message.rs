//! How a handler's payload is decoded once, on receipt (behaviour §9.2).
//!
//! Owns: [`FromMessage`] (message type and payload JSON to a handler's payload type,
//! the JSON a continuation carries back, the cursor the `start` line shows),
//! [`Addressed`] (a child's payload names its receiver and message type through the
//! function table: no sender writes either) and [`Notification`],
//! `deliver-notification`'s sum. Every function's sum is `handlers::Message`, so a
//! payload type may live in its function's module.

use serde::Serialize;
use serde_json::Value;

use super::payloads::{
    DeletePlaceholderUserRun, DeleteUserRun, EmailNotification, GroupDestroyRun, Payload,
    PayloadError, PruneDeletionsRun, StorageCleanupRun, WebhookNotification,
};
use crate::function::Function;

/// The payload of a message one function sends another: its receiver, and its message
/// type taken from the receiver's row in the function table ([`Function::accepts`]).
/// `queue::OutMessage::to` builds the message from it, with the row's delay.
pub trait Addressed: Serialize {
    /// The function that receives it.
    const RECEIVER: Function;

    /// Its message type: the receiver's one type (`<name>.run` or its only one).
    fn kind(&self) -> &'static str {
        Self::RECEIVER.run_type()
    }
}

impl Addressed for DeleteUserRun {
    const RECEIVER: Function = Function::DeleteUser;
}

impl Addressed for PruneDeletionsRun {
    const RECEIVER: Function = Function::PruneDeletions;
}

impl Addressed for GroupDestroyRun {
    const RECEIVER: Function = Function::GroupDestroy;
}

impl Addressed for StorageCleanupRun {
    const RECEIVER: Function = Function::StorageCleanup;
}

impl Addressed for DeletePlaceholderUserRun {
    const RECEIVER: Function = Function::DeletePlaceholderUser;
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
