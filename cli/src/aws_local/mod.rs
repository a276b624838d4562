//! `hk local` and `hk replay`: local AWS emulation around `cargo lambda watch`, and
//! recovery by replaying messages.
//!
//! * `hk local setup` creates every function's queue and DLQ (redrive after 5
//!   receives) and the schedule group in an SQS/Scheduler endpoint (moto), and writes
//!   the env file for `cargo lambda watch --env-file`.
//! * `hk local pump` is the event-source-mapping stand-in: it polls the queues, posts
//!   SQS events to the functions served by `cargo lambda watch`, deletes what
//!   succeeded, leaves reported failures to the queue's redrive into the DLQ, and fires
//!   due one-time schedules (moto never fires them).
//! * `hk replay dlq|file` moves messages back: DLQ → source queue (receive,
//!   SendMessageBatch, delete), a JSON-lines file → a queue, or a file → the local
//!   runner.
//!
//! * `hk status` reads queue depths, oldest-message ages (CloudWatch) and schedule
//!   states of a deployed stack.
//!
//! The parts: `clients` (the AWS clients and the queue names), `setup`, `pump`,
//! `replay` and `status`.

mod clients;
mod pump;
mod replay;
mod setup;
mod status;

pub use clients::{batch_size, dlq_name, queue_name, Aws};
pub use pump::{fire_due_schedules, pump, PumpStats};
pub use replay::{
    read_lines, receiver_of, replay_dlq, replay_file_to_queues, Poll, ReplayReport, HOLD_S,
};
pub use setup::setup;
pub use status::{
    depth, oldest_age, status, summary, Age, Depth, FunctionStatus, Schedule, AGE_PERIOD_S,
    AGE_WINDOW,
};
