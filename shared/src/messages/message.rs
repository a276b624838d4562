//! The typed message (behaviour §9.2): a message type and its validated payload, decoded
//! once on receipt.
//!
//! Owns: [`Message`], the one list from message type (`remove-expired-members.run`, …)
//! to payload type, its decoder ([`Message::decode`], through each payload type's
//! validating decoder), the cursor the `start` line shows, and [`FromMessage`], how a
//! function's handler takes its own payload out of a [`Message`].

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::payloads::{
    AdjournedGroupDeletionRun, DeletePlaceholderUserRun, DeleteUserRun, EmailNotification,
    GroupDestroyRun, PatExpiringRun, Payload, PayloadError, PlaceholderUserCleanupRun,
    PruneDeletionsRun, RemoveExpiredMembersRun, SchedulePruneDeletionsRun, WebhookNotification,
};

/// Builds [`Message`] (serde-tagged by message type, the payload beside it, as the
/// envelope carries them) from the messages of the function table.
macro_rules! messages {
    ($(
        $(#[$doc:meta])*
        $function:ident = $name:literal {
            class: $class:literal,
            messages: [$($variant:ident($payload:ty) = $kind:literal),+ $(,)?],
            $($rest:tt)*
        }
    )*) => {
        /// A validated payload with its message type.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "type", content = "payload")]
        pub enum Message {
            $($(
                #[doc = concat!("`", $kind, "`.")]
                #[serde(rename = $kind)]
                $variant($payload),
            )+)*
        }

        impl Message {
            /// Every message type.
            pub const KINDS: &'static [&'static str] = &[$($($kind),+),*];

            /// The message type, e.g. `remove-expired-members.run`.
            pub fn kind(&self) -> &'static str {
                match self {
                    $($(Message::$variant(_) => $kind,)+)*
                }
            }

            /// Decode `payload` as message type `kind` through the payload type's
            /// validating decoder; the error names the field and the rule.
            pub fn decode(kind: &str, payload: &Value) -> Result<Message, PayloadError> {
                match kind {
                    $($($kind => Ok(Message::$variant(<$payload>::from_value(payload)?)),)+)*
                    _ => Err(PayloadError {
                        field: "type".into(),
                        rule: "must be a known message type".into(),
                    }),
                }
            }

            /// The payload as JSON (what the envelope carries).
            pub fn payload_value(&self) -> Value {
                match self {
                    $($(Message::$variant(p) => serde_json::to_value(p),)+)*
                }
                .expect("payloads always serialize")
            }
        }

        $($(
            impl From<$payload> for Message {
                fn from(p: $payload) -> Message {
                    Message::$variant(p)
                }
            }

            impl FromMessage for $payload {
                fn from_message(m: Message) -> Option<Self> {
                    match m {
                        Message::$variant(p) => Some(p),
                        _ => None,
                    }
                }
            }
        )+)*
    };
}

crate::function::with_functions!(messages);

impl Message {
    /// The cursor of a continuing run, re-serialized from its validated type (so
    /// bounded: only the cursor's own fields), for the `start` line.
    pub fn cursor(&self) -> Option<Value> {
        let cursor = match self {
            Message::RemoveExpiredMembers(p) => p.cursor.map(serde_json::to_value),
            Message::AdjournedGroupDeletion(p) => p.cursor.map(serde_json::to_value),
            Message::PlaceholderUserCleanup(p) => p.cursor.map(serde_json::to_value),
            _ => None,
        };
        cursor.and_then(Result::ok)
    }
}

/// A handler's payload type, taken out of the [`Message`] the runtime decoded: a
/// payload type of one message type, or a sum of several (`deliver-notification`).
pub trait FromMessage: Sized + Into<Message> {
    /// The payload, when `m` is of this type; `None` for a message of another type.
    fn from_message(m: Message) -> Option<Self>;
}

/// `deliver-notification`'s payload: one mail or one web hook.
#[derive(Debug, Clone, PartialEq)]
pub enum Notification {
    /// `deliver-notification.email`.
    Email(EmailNotification),
    /// `deliver-notification.webhook`.
    Webhook(WebhookNotification),
}

impl From<Notification> for Message {
    fn from(n: Notification) -> Message {
        match n {
            Notification::Email(e) => Message::Email(e),
            Notification::Webhook(w) => Message::Webhook(w),
        }
    }
}

impl FromMessage for Notification {
    fn from_message(m: Message) -> Option<Self> {
        match m {
            Message::Email(e) => Some(Notification::Email(e)),
            Message::Webhook(w) => Some(Notification::Webhook(w)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_kind_decodes_round_trips_and_names_itself() {
        let samples = [
            ("remove-expired-members.run", json!({})),
            ("delete-user.run", json!({"user_id": 3})),
            ("schedule-prune-deletions.run", json!({})),
            ("prune-deletions.run", json!({})),
            ("adjourned-group-deletion.run", json!({})),
            (
                "group-destroy.run",
                json!({"group_id": 1, "user_id": 2, "marked_for_deletion_on": "2025-03-01"}),
            ),
            ("placeholder-user-cleanup.run", json!({})),
            (
                "delete-placeholder-user.run",
                json!({"placeholder_user_id": 5, "attempt": 1}),
            ),
            ("pat-expiring.run", json!({})),
        ];
        for (kind, payload) in samples {
            let m = Message::decode(kind, &payload).unwrap();
            assert_eq!(m.kind(), kind);
            let tagged = serde_json::to_value(&m).unwrap();
            assert_eq!(tagged["type"], kind);
            assert_eq!(serde_json::from_value::<Message>(tagged).unwrap(), m);
        }
        assert_eq!(Message::KINDS.len(), 11);
        let err = Message::decode("nope.run", &json!({})).unwrap_err();
        assert_eq!(err.field, "type");
    }

    #[test]
    fn a_payload_comes_out_of_its_own_message_only() {
        let m = Message::decode("delete-user.run", &json!({"user_id": 3})).unwrap();
        assert!(PruneDeletionsRun::from_message(m.clone()).is_none());
        assert_eq!(DeleteUserRun::from_message(m).unwrap().user_id, 3);
    }
}
