//! The chaos-gated delivery of [`Runner`] (`--chaos`, or a planned crash in tests):
//! the same per-record pipeline as Lambda's ([`deliver`]) on a session tapped and a
//! transport gated by a [`crate::chaos::CrashGate`];
//! when the gate fires, the handler future is dropped mid-flight, the message is not
//! acknowledged, and the runner waits until PostgreSQL has ended the dead session
//! before anything is redelivered.

use std::time::Duration;

use serde_json::Value;

use super::{OneRecord, Run, Runner};
use crate::chaos::{CrashGate, GatedQueue, TappedStream};
use shared::error::{Error, Result};
use shared::function::Function;
use shared::runtime::{deliver, Invocation, RecordMeta, RecordOutcome};

impl Runner {
    /// One delivery behind a crash gate (chaos or a planned crash).
    pub(super) async fn invoke_gated(
        &mut self,
        function: Function,
        body: &str,
        receive_count: u32,
    ) -> Result<(Run, RecordOutcome)> {
        let planned_at = self
            .planned
            .iter()
            .position(|p| p.function.is_none_or(|f| f == function));
        let planned = planned_at.and_then(|i| self.planned.get(i).copied());
        let target = match (&self.chaos, planned) {
            (_, Some(p)) => Some((p.point, p.nth)),
            (Some(c), None) => c.plan_delivery(receive_count),
            (None, None) => None,
        };
        let gate = CrashGate::new(target);
        let tap = gate.clone();
        let now = self.queue.now();
        let client = self
            .connector
            .connect_through(function.name(), move |s| TappedStream::new(s, tap))
            .await?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .get(0);
        gate.arm();
        let queue = GatedQueue::new(self.queue.clone(), gate.clone(), self.chaos.clone());
        let inv = Invocation::new(function, now, &queue, &self.settings);
        let meta = RecordMeta {
            sqs_message_id: Some(format!("local-{}", self.runs.len() + 1)),
            receive_count,
            aws_request_id: None,
        };
        let before = self.queue.sent_count();
        let outcome = {
            // The tapped session is this record's only, dropped with it (a crash drops
            // it mid-flight, as a dead Lambda environment's).
            let session = OneRecord::connected(&self.connector, function, client);
            let record = deliver(&self.dispatch, &inv, session, body, &meta, true);
            tokio::select! {
                biased;
                _ = gate.wait() => None,
                o = record => Some(o),
            }
        };
        // A record that finished after the gate fired did nothing after that point
        // (the tap and the gated queue refused it all): it is a crash all the same.
        let outcome = match outcome {
            Some(o) if gate.fired().is_none() => {
                if gate.next_action()
                    || (o.is_success() && gate.hit(crate::chaos::CrashPoint::BeforeAck))
                {
                    None
                } else {
                    Some(o)
                }
            }
            _ => None,
        };
        // A planned crash is used up once it fired; until then it waits for the next
        // delivery of its function that reaches the point.
        if let (Some(i), Some(_)) = (planned_at, gate.fired()) {
            self.planned.remove(i);
        }
        let outcome = match outcome {
            Some(o) => o,
            None => {
                let point = gate.fired().expect("the gate fired");
                if let Some(c) = &self.chaos {
                    c.record_crash(point);
                }
                let env = serde_json::from_str::<Value>(body).ok();
                let key = env
                    .as_ref()
                    .and_then(|e| e.get("message_key"))
                    .and_then(|k| k.as_str());
                tracing::warn!(
                    function = function.name(),
                    message_key = key,
                    receive_count,
                    point = point.name(),
                    "chaos: handler aborted"
                );
                self.await_session_end(pid).await?;
                RecordOutcome::Retryable {
                    error_class: "crash".into(),
                    error: format!("chaos: handler aborted at {point}"),
                    discard_session: true,
                    report: None,
                }
            }
        };
        self.finish_run(function, now, body, before, outcome)
    }

    /// Wait until PostgreSQL has ended the aborted session `pid`, so its transaction
    /// is rolled back and its session locks are free before anything is redelivered
    /// (in AWS the visibility timeout gives the server that time).
    async fn await_session_end(&self, pid: i32) -> Result<()> {
        let admin = self.connector.connect("hk-chaos").await?;
        for _ in 0..1000 {
            let alive: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE pid = $1",
                    &[&pid],
                )
                .await?
                .get(0);
            if alive == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(Error::Invariant(format!(
            "the aborted session {pid} did not end within 10 s"
        )))
    }
}
