//! Queue-triggered child workers: one module per worker.
//!
//! Owns: each worker's re-verification and effects. Every worker re-checks the
//! database before any destructive step, so duplicates, replays and stale messages
//! are harmless (behaviour §9.9). Each module is declared by its row of the function
//! table, and its `//!` header is its entry in the code map. Owns also how a GitLab
//! rule's [`Intent`] (phase 2 of a user's removal, a claimed hook) becomes the message
//! of the worker that carries it out ([`Intent::message`]).

use chrono::{DateTime, Utc};

use crate::function::modules;
use crate::gitlab::Intent;
use crate::messages::{delete_user_key, webhook_key};
use crate::queue::OutMessage;
use crate::workers::delete_user::payload::DeleteUserRun;
use crate::workers::deliver_notification::payload::WebhookNotification;

// A module per row of the function table whose job is `workers::<module>::…`.
crate::function::with_functions!(modules workers);

impl Intent {
    /// The message of this intent to its worker, from the sender's run (`run_id`) at
    /// `now`: receiver, message type and delay from the receiver's row.
    pub fn message(self, run_id: &str, now: DateTime<Utc>) -> OutMessage {
        match self {
            Intent::DeleteUser(d) => OutMessage::to(
                delete_user_key(d.user_id),
                run_id,
                now,
                &DeleteUserRun {
                    user_id: d.user_id,
                    initiator_user_id: d.initiator_user_id,
                    reason: d.reason,
                },
            ),
            Intent::DeliverHook(h) => OutMessage::to(
                webhook_key(&h.event_key, h.hook_id),
                run_id,
                now,
                &WebhookNotification {
                    hook_id: h.hook_id,
                    event_key: h.event_key,
                    body: serde_json::Value::String(h.body),
                    system_hook: Some(h.subject),
                },
            ),
        }
    }

    /// The messages of `intents`, in order.
    pub fn messages(
        intents: Vec<Intent>,
        run_id: &str,
        now: DateTime<Utc>,
    ) -> impl Iterator<Item = OutMessage> + '_ {
        intents.into_iter().map(move |i| i.message(run_id, now))
    }
}
