//! What a local run does with the messages it does not deliver (behaviour §11: "a
//! local run never drops what it sends").
//!
//! Owns: the run's hand-on directory ([`Handoff`], under [`state_dir`]) and its two
//! files, written line by line and synced before `hk` goes on: `dead-letters.jsonl`
//! (a message that used its 5 receives, with its key, error class and reason) and
//! `undelivered.jsonl` (a message the run did not deliver: the invoked function's own
//! continuation without `--until-idle`, or what was pending or in flight when the
//! run was interrupted or stopped by an error). Each line is an `--outbox` record
//! (`receiver`, `delay_seconds`, `body`) plus why it is there, so `hk replay file`
//! delivers it again. Also owns [`Backoff`], the bounded real delays before a failed
//! delivery is received again, and the runner's single-invocation mode
//! ([`Runner::run_one`]).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{Run, Runner};
use crate::local_queue::Pending;
use shared::error::{Error, Result};
use shared::function::Function;
use shared::queue::OutMessage;
use shared::runtime::RecordOutcome;

/// The file of dead letters in a hand-on directory.
pub const DEAD_LETTERS_FILE: &str = "dead-letters.jsonl";
/// The file of undelivered messages in a hand-on directory.
pub const UNDELIVERED_FILE: &str = "undelivered.jsonl";

/// Where `hk` keeps what local runs hand on: `HK_STATE_DIR`, else
/// `$XDG_STATE_HOME/hk`, else `~/.local/state/hk`, else `<tmp>/hk-state`.
pub fn state_dir() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    if let Some(d) = var("HK_STATE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = var("XDG_STATE_HOME") {
        return PathBuf::from(d).join("hk");
    }
    if let Some(h) = var("HOME") {
        return PathBuf::from(h).join(".local/state/hk");
    }
    std::env::temp_dir().join("hk-state")
}

/// The bounded real back-off of a retryable delivery: receive `n` failed, the next
/// one waits `first × 2^(n-1)` of real time (1, 2, 4, 8 s by default: 15 s in all
/// before the fifth and last receive), on top of the 30 virtual seconds. A chaos
/// crash is not delayed (it is no outage), nor a permanent failure (it never heals).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub first: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first: Duration::from_secs(1),
        }
    }
}

impl Backoff {
    /// `HK_RETRY_FIRST_MS` (the first delay in milliseconds), else the default.
    pub fn from_env() -> Result<Backoff> {
        match std::env::var("HK_RETRY_FIRST_MS") {
            Err(_) => Ok(Backoff::default()),
            Ok(v) => v
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|ms| *ms <= 60_000)
                .map(|ms| Backoff {
                    first: Duration::from_millis(ms),
                })
                .ok_or_else(|| {
                    Error::Config(format!(
                        "HK_RETRY_FIRST_MS `{v}` is not a number of milliseconds up to 60000"
                    ))
                }),
        }
    }

    /// The real delay after the `receive_count`-th receive failed with `outcome`.
    pub fn after(&self, outcome: &RecordOutcome, receive_count: u32) -> Option<Duration> {
        // A crash is redelivered after the visibility timeout alone, as in AWS; a
        // permanent failure is never retried.
        let retried = outcome.label() == "retryable" && outcome.error_class() != Some("crash");
        retried.then(|| self.first * 2u32.pow(receive_count.clamp(1, 16) - 1))
    }
}

/// A message that used its receives.
#[derive(Debug, Clone)]
pub struct DeadLetter {
    /// The message.
    pub message: OutMessage,
    /// How often it was received.
    pub receives: u32,
    /// The `error_class` of its last failure (`malformed` for a permanent one).
    pub error_class: String,
    /// The error text of its last failure.
    pub reason: String,
    /// Virtual time it was dead-lettered.
    pub at: DateTime<Utc>,
}

impl DeadLetter {
    /// Its line in `dead-letters.jsonl`: an outbox record, its key and why.
    pub fn to_json(&self) -> Value {
        json!({
            "receiver": self.message.receiver.name(),
            "delay_seconds": 0,
            "body": self.message.envelope,
            "message_key": self.message.envelope.message_key,
            "receives": self.receives,
            "error_class": self.error_class,
            "reason": self.reason,
            "dead_lettered_at": shared::clock::rfc3339(self.at),
        })
    }
}

/// A message the run did not deliver, and why.
#[derive(Debug, Clone)]
pub struct Undelivered {
    /// The message.
    pub message: OutMessage,
    /// Why it was not delivered.
    pub why: String,
}

impl Undelivered {
    /// Its line in `undelivered.jsonl`.
    pub fn to_json(&self) -> Value {
        json!({
            "receiver": self.message.receiver.name(),
            "delay_seconds": self.message.delay_s,
            "body": self.message.envelope,
            "message_key": self.message.envelope.message_key,
            "why": self.why,
        })
    }
}

/// A run's hand-on directory. Cloning shares it.
#[derive(Debug, Clone)]
pub struct Handoff {
    dir: PathBuf,
    synced_dir: Arc<Mutex<bool>>,
}

impl Handoff {
    /// Create the directory of one run under `state` (`runs/<UTC time>-<function>-<pid>`)
    /// and check that a file can be written and synced there. `hk` does this before
    /// the first delivery: a run that could not hand its messages on claims nothing.
    pub fn create(state: &Path, function: &str) -> Result<Handoff> {
        let stamp = Utc::now().format("%Y%m%dT%H%M%S%.6fZ");
        let dir = state
            .join("runs")
            .join(format!("{stamp}-{function}-{}", std::process::id()));
        let refuse = |e: std::io::Error| {
            Error::Config(format!(
                "cannot write to `{}`, where this run would write the messages it cannot deliver \
                 (set HK_STATE_DIR to a writable directory): {e}",
                dir.display()
            ))
        };
        std::fs::create_dir_all(&dir).map_err(refuse)?;
        let probe = dir.join(".probe");
        std::fs::write(&probe, b"hk")
            .and_then(|_| std::fs::File::open(&probe)?.sync_all())
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(refuse)?;
        Ok(Handoff {
            dir,
            synced_dir: Arc::new(Mutex::new(false)),
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The dead-letter file (it exists once a message was dead-lettered).
    pub fn dead_letters_file(&self) -> PathBuf {
        self.dir.join(DEAD_LETTERS_FILE)
    }

    /// The file of undelivered messages (it exists once one was written).
    pub fn undelivered_file(&self) -> PathBuf {
        self.dir.join(UNDELIVERED_FILE)
    }

    /// Append `records` to `file` of the directory, one JSON object a line, and sync
    /// the file (and the directory, the first time) before returning.
    fn append(&self, file: &str, records: &[Value]) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let path = self.dir.join(file);
        let fail =
            |e: std::io::Error| Error::Config(format!("cannot write `{}`: {e}", path.display()));
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(fail)?;
        let mut text = String::new();
        for r in records {
            text.push_str(&r.to_string());
            text.push('\n');
        }
        f.write_all(text.as_bytes()).map_err(fail)?;
        f.sync_all().map_err(fail)?;
        let mut synced = self.synced_dir.lock().expect("the hand-on lock");
        if !*synced {
            std::fs::File::open(&self.dir)
                .and_then(|d| d.sync_all())
                .map_err(fail)?;
            *synced = true;
        }
        Ok(())
    }

    /// Remove the directory when nothing was written to it.
    pub fn finish(&self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// What a run handed on so far.
#[derive(Debug, Clone, Default)]
pub struct HandedOn {
    /// Dead letters, in order.
    pub dead: Vec<DeadLetter>,
    /// Undelivered messages, in order.
    pub undelivered: Vec<Undelivered>,
}

impl HandedOn {
    /// Whether nothing was handed on.
    pub fn is_empty(&self) -> bool {
        self.dead.is_empty() && self.undelivered.is_empty()
    }
}

impl Runner {
    /// Write dead letters and undelivered messages to `handoff` (`hk run`, `hk replay
    /// file`, `hk demo`). Without it they stay in memory ([`Runner::handed_on`]).
    pub fn with_handoff(mut self, handoff: Handoff) -> Runner {
        self.handoff = Some(handoff);
        self
    }

    /// Wait real time before a failed delivery is received again ([`Backoff`]).
    /// Without it a retry waits only the 30 virtual seconds (the tests' runner).
    pub fn with_backoff(mut self, backoff: Backoff) -> Runner {
        self.backoff = Some(backoff);
        self
    }

    /// The hand-on directory, if any.
    pub fn handoff(&self) -> Option<&Handoff> {
        self.handoff.as_ref()
    }

    /// What the run handed on so far.
    pub fn handed_on(&self) -> &HandedOn {
        &self.handed_on
    }

    /// One invocation of `function` with `body` (receive 1; not retried, the caller
    /// holds the message) and, as `--until-idle` would, every message it sends to
    /// another function and all that those cause, until idle (behaviour §11). A
    /// message to `function` itself (its continuation or re-send) is not delivered:
    /// it is handed on as undelivered.
    pub async fn run_one(&mut self, function: Function, body: &str) -> Result<()> {
        self.invoke(function, body, 1).await?;
        self.invoked.push(self.runs.len() - 1);
        self.drain_except(Some(function)).await
    }

    /// Sleep until `p` may be received again (its real back-off).
    pub(super) async fn until_due(&self, p: &Pending) {
        if let Some(t) = p.not_before {
            tokio::time::sleep_until(t.into()).await;
        }
    }

    /// The real time before which a delivery that ended with `outcome` at receive
    /// `receive_count` is not received again.
    pub(super) fn not_before(&self, outcome: &RecordOutcome, n: u32) -> Option<Instant> {
        let d = self.backoff.as_ref()?.after(outcome, n)?;
        Some(Instant::now() + d)
    }

    /// Record (and write) the dead letter `p`, whose last run was `run`.
    pub(super) fn dead_letter(
        &mut self,
        p: Pending,
        run: &Run,
        outcome: &RecordOutcome,
    ) -> Result<()> {
        let error_class = outcome.error_class().unwrap_or_default().to_string();
        let d = DeadLetter {
            message: p.message,
            receives: p.receive_count,
            error_class,
            reason: run.error.clone().unwrap_or_default(),
            at: self.queue.now(),
        };
        self.handed_on.dead.push(d.clone());
        match &self.handoff {
            Some(h) => h.append(DEAD_LETTERS_FILE, &[d.to_json()]),
            None => Ok(()),
        }
    }

    /// Hand on messages the run did not deliver, with why.
    pub(super) fn undelivered(&mut self, messages: Vec<OutMessage>, why: &str) -> Result<()> {
        let records: Vec<Undelivered> = messages
            .into_iter()
            .map(|message| Undelivered {
                message,
                why: why.to_string(),
            })
            .collect();
        self.handed_on.undelivered.extend(records.iter().cloned());
        match &self.handoff {
            Some(h) => h.append(
                UNDELIVERED_FILE,
                &records.iter().map(Undelivered::to_json).collect::<Vec<_>>(),
            ),
            None => Ok(()),
        }
    }

    /// The run stops before it is idle (interrupted, or an error of the runner
    /// itself): hand on the message in flight and every message still waiting.
    /// Returns how many were handed on.
    pub fn hand_on_pending(&mut self, why: &str) -> Result<usize> {
        let mut left: Vec<OutMessage> = self
            .in_flight
            .take()
            .map(|p| p.message)
            .into_iter()
            .collect();
        left.extend(self.queue.take_pending().into_iter().map(|p| p.message));
        let n = left.len();
        self.undelivered(left, why)?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retryable(class: &str) -> RecordOutcome {
        RecordOutcome::Retryable {
            error_class: class.into(),
            error: "e".into(),
            discard_session: false,
            report: None,
        }
    }

    #[test]
    fn the_back_off_doubles_from_its_first_delay_and_spares_crashes_and_permanent_failures() {
        let b = Backoff::default();
        let s = |n| b.after(&retryable("smtp"), n).map(|d| d.as_secs());
        assert_eq!(
            [s(1), s(2), s(3), s(4)],
            [Some(1), Some(2), Some(4), Some(8)]
        );
        assert_eq!(b.after(&retryable("crash"), 1), None);
        let permanent = RecordOutcome::Permanent { error: "x".into() };
        assert_eq!(b.after(&permanent, 1), None);
        let panic = RecordOutcome::Panic { error: "p".into() };
        assert_eq!(b.after(&panic, 2).map(|d| d.as_secs()), Some(2));
    }

    #[test]
    fn a_hand_on_directory_is_checked_at_creation_and_removed_when_empty() {
        let state =
            std::env::temp_dir().join(format!("hk-handoff-{}", uuid::Uuid::new_v4().simple()));
        let h = Handoff::create(&state, "delete-user").unwrap();
        assert!(h.dir().is_dir());
        h.finish();
        assert!(!h.dir().exists(), "an empty directory is removed");
        let h = Handoff::create(&state, "delete-user").unwrap();
        h.append(UNDELIVERED_FILE, &[json!({"receiver": "delete-user"})])
            .unwrap();
        h.finish();
        let text = std::fs::read_to_string(h.undelivered_file()).unwrap();
        assert_eq!(text, "{\"receiver\":\"delete-user\"}\n");
        // A state directory that cannot be created is refused, naming HK_STATE_DIR.
        let file = state.join("a-file");
        std::fs::write(&file, b"").unwrap();
        let e = Handoff::create(&file, "delete-user")
            .unwrap_err()
            .to_string();
        assert!(e.contains("HK_STATE_DIR"), "{e}");
        std::fs::remove_dir_all(&state).unwrap();
    }
}
