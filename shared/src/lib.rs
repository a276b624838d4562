//! Domain logic, SQL and Lambda glue shared by every housekeeping function.
//!
//! Each Lambda binary under `functions/` is a few lines that call [`lambda::run`];
//! the operator CLI `hk` drives the same handlers through its local runner (`engine::local::Runner`). See
//! ARCHITECTURE.md for the map and the invariants.
#![warn(missing_docs)]

pub mod aws;
pub mod batches;
pub mod catalogue;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod function;
pub mod gitlab;
pub mod handlers;
pub mod job;
pub mod lambda;
pub mod locks;
pub mod messages;
pub mod metrics;
pub mod notify;
pub mod preflight;
pub mod queue;
pub mod random;
pub mod runtime;
pub mod statements;
pub mod storage;
pub mod telemetry;
pub mod workers;

pub use error::{Error, Result};
pub use function::Function;
