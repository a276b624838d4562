//! Integration tests: one binary, one fresh database per test (see `integration_tests`).

mod b38;
mod b70;
mod common;
mod delete_user;
mod glue;
mod queue_sqs;
mod schema;
