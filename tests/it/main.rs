//! Integration tests: one binary, one fresh database per test (see `integration_tests`).

mod b28;
mod b38;
mod b43;
mod b51;
mod b51_large;
mod b70;
mod chaos;
mod common;
mod delete_user;
mod deliver_notification;
mod faults;
mod fuzz;
mod glue;
mod hostile;
mod lock_order;
mod perf;
mod queue_sqs;
mod schema;
mod secrets;
mod ssrf;
mod template;
