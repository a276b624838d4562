//! One delivery of [`super::Runner`] as `hk` sees it: the database session of one
//! record ([`OneRecord`]: fresh, or tapped by chaos) that the shared pipeline
//! (`shared::runtime::deliver`) runs it on, and the [`Run`] it records, derived from
//! its `RecordOutcome` (`outcome` is [`RecordOutcome::label`]).

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::local_queue::SentRecord;
use shared::db::Connector;
use shared::error::Result;
use shared::function::Function;
use shared::runtime::{RecordOutcome, RecordSession, Report};
use tokio_postgres::Client;

/// One handler run, as `hk` reports it.
#[derive(Debug, Clone)]
pub struct Run {
    /// The function.
    pub function: Function,
    /// The message key, when the body parsed.
    pub message_key: Option<String>,
    /// The hop.
    pub hop: Option<u64>,
    /// The injected `now` of the run.
    pub now: DateTime<Utc>,
    /// `success`, `retryable` or `permanent`: its outcome's
    /// [`RecordOutcome::label`].
    pub outcome: &'static str,
    /// The handler's typed `done` result, if it produced one.
    pub report: Option<Report>,
    /// The error text of a failed run.
    pub error: Option<String>,
    /// Messages the run sent.
    pub sent: Vec<SentRecord>,
}

impl Run {
    /// Items that failed inside this run although it succeeded: its report's
    /// `failed` metric ([`shared::metrics::FAILED`], the sum of the `Done`'s per-item
    /// failure counters). 0 for a failed run: its message is redelivered whole.
    pub fn items_failed(&self) -> u64 {
        if self.outcome != "success" {
            return 0;
        }
        self.report.as_ref().map_or(0, |r| {
            r.metrics()
                .iter()
                .filter(|(m, _)| *m == shared::metrics::FAILED)
                .map(|(_, v)| *v as u64)
                .sum()
        })
    }

    /// The run as one JSON object (`hk run --json`).
    pub fn to_json(&self) -> Value {
        json!({
            "function": self.function.name(),
            "message_key": self.message_key,
            "hop": self.hop,
            "now": shared::clock::rfc3339(self.now),
            "outcome": self.outcome,
            "report": self.report.as_ref().map(Report::to_json),
            "error": self.error,
            "sent": self.sent.iter().map(sent_json).collect::<Vec<_>>(),
        })
    }
}

/// The outbox form of a sent message (behaviour §11).
pub fn sent_json(s: &SentRecord) -> Value {
    let mut v = json!({
        "receiver": s.message.receiver.name(),
        "delay_seconds": s.message.delay_s,
        "body": s.message.envelope,
    });
    if let Some(n) = &s.schedule_name {
        v["schedule_name"] = Value::from(n.clone());
    }
    v
}

/// The run of a delivery of `function` at `now` (its body's envelope `env`, when it
/// parsed) that ended with `outcome` and sent `sent`.
pub(super) fn run_of(
    function: Function,
    now: DateTime<Utc>,
    env: Option<&Value>,
    outcome: &RecordOutcome,
    sent: Vec<SentRecord>,
) -> Run {
    Run {
        function,
        message_key: env
            .and_then(|e| e.get("message_key"))
            .and_then(Value::as_str)
            .map(str::to_string),
        hop: env.and_then(|e| e.get("hop")).and_then(Value::as_u64),
        now,
        outcome: outcome.label(),
        report: outcome.report().cloned(),
        error: outcome.error().map(str::to_string),
        sent,
    }
}

/// The database session of one record in `hk`: connected on checkout (or given,
/// tapped by chaos), never reset but dropped after the record, which ends its
/// transaction and releases its locks on the server.
pub(crate) struct OneRecord<'a> {
    connector: &'a Connector,
    function: Function,
    client: Option<Client>,
}

impl<'a> OneRecord<'a> {
    /// A session of `function` connected through `connector` when checked out.
    pub(crate) fn new(connector: &'a Connector, function: Function) -> OneRecord<'a> {
        OneRecord {
            connector,
            function,
            client: None,
        }
    }

    /// A session on `client`, already connected.
    pub(crate) fn connected(
        connector: &'a Connector,
        function: Function,
        client: Client,
    ) -> OneRecord<'a> {
        OneRecord {
            client: Some(client),
            ..OneRecord::new(connector, function)
        }
    }
}

impl RecordSession for OneRecord<'_> {
    type Client = Client;

    type Checkout<'s>
        = &'s mut Client
    where
        Self: 's;

    async fn checkout(&mut self) -> Result<&mut Client> {
        if self.client.is_none() {
            let client = self.connector.connect(self.function.name()).await?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("connected above"))
    }

    async fn reset(&mut self, _discard: bool) {}
}
