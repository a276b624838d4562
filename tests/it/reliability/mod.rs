//! Reliability across the functions: whatever the input, the timing or the failure,
//! nothing is lost, nothing is done twice and nothing leaks.
//!
//! * `chaos`: every batch until idle under duplicated, reordered and crashed deliveries
//!   ends in the clean run's state.
//! * `faults`: fault injection at named points, overlapping runs, replayed and forged
//!   messages.
//! * `fuzz` and `hostile`: hostile input to the parser, the Lambda glue and the handlers.
//! * `glue`: the Lambda glue on real SQS event JSON.
//! * `cold_start`: the schema check when a function starts; `release_gate`: the
//!   GitLab release check before it; `log_level`: metrics at every log level;
//!   `round_trips`: the round trips of that check.
//! * `lock_order`: no deadlock between functions over the same users.
//! * `messages`: the envelope's and the payloads' rules, keys and wire shapes.
//! * `outputs`: every `done` line's fields, status and metrics, and B28's hook body
//!   and bot notices.
//! * `rotation`: secrets rotated under a warm function.
//! * `observability`: the metric and log lines every function writes (what a run
//!   emits is collected by `crate::emitted`).
//! * `secrets`: no secret in any log line or message.
//! * `stored_values`: values GitLab's columns accept but no form writes are data.

mod aws_tls;
mod chaos;
mod cold_start;
mod faults;
mod fuzz;
mod glue;
mod hostile;
mod lock_order;
mod log_level;
mod messages;
mod observability;
mod outputs;
mod release_gate;
mod rotation;
mod round_trips;
mod secrets;
mod stored_values;
