//! `noop-cron`: a throwaway cron function that does nothing (it checks the steps of
//! CONTRIBUTING.md's "Adding a cron function").
//!
//! Owns: its payload [`NoopCronRun`], its outcome [`NoopDone`] and its job [`NoopCron`].

use serde::Serialize;
use tokio_postgres::GenericClient;

use crate::error::Result;
use crate::function::Function;
use crate::job::{Job, Step};
use crate::messages::{Envelope, Fields, Payload, PayloadError, TEXT_MAX_CHARS};
use crate::runtime::{Done, Invocation, Status};

/// `noop-cron.run` payload.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NoopCronRun {
    /// A note (never logged: a log line never quotes a body).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Payload for NoopCronRun {
    fn from_payload(f: &Fields<'_>) -> std::result::Result<Self, PayloadError> {
        Ok(NoopCronRun {
            note: f.opt_text("note", TEXT_MAX_CHARS)?,
        })
    }
}

/// The `done` result: whether the payload had a note.
#[derive(Debug, Clone, Serialize)]
pub struct NoopDone {
    /// Whether the payload had a note.
    pub noted: bool,
}

impl Done for NoopDone {
    fn status(&self) -> Status {
        Status::Completed
    }
}

/// The job: done at once.
#[derive(Debug, Default)]
pub struct NoopCron;

impl Job for NoopCron {
    const FUNCTION: Function = Function::NoopCron;
    type Payload = NoopCronRun;
    type Outcome = NoopDone;

    async fn run<C>(
        _inv: &Invocation<'_>,
        _client: &mut C,
        _env: &Envelope,
        payload: NoopCronRun,
    ) -> Result<Step<NoopDone, NoopCronRun>>
    where
        C: GenericClient + Send + Sync,
    {
        Ok(Step::Done(NoopDone {
            noted: payload.note.is_some(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::Message;
    use crate::messages::FromMessage;
    use serde_json::json;

    #[test]
    fn its_message_decodes_to_its_payload_through_the_dispatch() {
        let m = Message::decode("noop-cron.run", &json!({"note": "hi"})).unwrap();
        let want = NoopCronRun {
            note: Some("hi".into()),
        };
        assert_eq!(m, Message::NoopCron(want));
        let err = Message::decode("noop-cron.run", &json!({"note": 1})).unwrap_err();
        assert_eq!(err.field, "note");
    }
}
