//! Typed, versioned queue messages (behaviour §9.1–§9.4), what is generic about them:
//! the re-exports that keep `shared::messages::*` one flat API over `envelope` (the
//! [`Envelope`], its fields' validation, continuations), `message` ([`FromMessage`],
//! [`Addressed`]), `fields` (the rules a payload field is read by, [`Payload`]),
//! `strict` and `keys`. Each payload type lives in the module of the function that
//! receives it (`batches::<f>::payload`, `workers::<f>::payload`).
//!
//! Validation is strict and happens once, on receipt, before any handler runs; an error
//! names the field and the rule, never the value. The sample events in `events/` and the
//! SQS fixtures in `tests/fixtures/sqs/` pin the wire format. No secret goes in a message.

mod envelope;
mod fields;
mod keys;
mod message;
mod strict;

pub use envelope::{Envelope, Malformed, VERSION};
pub(crate) use fields::{cursor_run, validated_deserialize};
pub use fields::{
    deserialize_validated, index_within, Checked, Fields, Payload, PayloadError, ANCESTORS_MAX,
    FULL_PATH_MAX_CHARS, NAME_MAX_CHARS, TEXT_MAX_CHARS,
};
pub(crate) use keys::valid_key;
pub use keys::{
    bot_email_key, delete_placeholder_user_key, delete_user_key, group_destroy_key,
    prune_deletions_key, user_email_key, webhook_event_key, webhook_key,
};
pub use message::{unknown_type, Addressed, FromMessage};
