//! How a handler's payload is decoded once, on receipt (behaviour §9.2).
//!
//! Owns: [`FromMessage`] (message type and payload JSON to a handler's payload type,
//! the JSON a continuation carries back, the cursor the `start` line shows),
//! [`Addressed`] (a child's payload names its receiver and message type through the
//! function table: no sender writes either; each payload type implements it in its
//! function's module). Every function's sum is `handlers::Message`.

use serde::Serialize;
use serde_json::Value;

use super::fields::{Payload, PayloadError};
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
