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
//!   states of a deployed stack, and (`health`) its mappings' and alarms' states, the
//!   last run that finished and the next cron run.
//! * `hk tick` sends a cron function's message as its schedule sends it.
//! * `hk pause` / `hk resume` disable and enable a function's schedules, event-source
//!   mappings and missed-run page without a deploy.
//!
//! The parts: `clients` (the AWS clients with `--region`/`--profile`, the up-front
//! credentials and region check, the classification of SDK failures, the queue
//! names), `setup`, `pump`, `replay`, `status` with `health`, `tick` and `pause`.

mod clients;
mod health;
mod pause;
mod pump;
mod replay;
mod setup;
mod status;
mod tick;

pub use clients::{
    batch_size, credentials_advice, dlq_name, one_line, queue_name, sdk_failure, Aws, AwsOptions,
    AwsSetupError, QueueMissing, REGION_ADVICE,
};
pub use health::{alarms, camel, last_done, next_run, DONE_WINDOW};
pub use pause::{mappings, missed_run_alarm, set_paused, PauseChange};
pub use pump::{fire_due_schedules, pump, PumpStats};
pub use replay::{
    read_lines, receiver_of, replay_dlq, replay_file_to_queues, Poll, ReplayReport, HOLD_S,
};
pub use setup::setup;
pub use status::{
    depth, oldest_age, status, summary, Age, Depth, FunctionStatus, Schedule, AGE_PERIOD_S,
    AGE_WINDOW,
};
pub use tick::{fill, tick, Tick, EXECUTION_ID, SCHEDULED_TIME};
