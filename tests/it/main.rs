//! Integration tests: one binary, one fresh database per test (see `integration_tests`).

mod architecture;
mod b28;
mod b38;
mod b43;
mod b51;
mod b51_large;
mod b70;
mod chaos;
mod cold_start;
mod common;
mod delete_user;
mod deliver_notification;
mod deploy;
mod emitted;
mod faults;
mod fuzz;
mod glue;
mod harness;
mod hostile;
mod item_alarms;
mod lock_order;
mod observability;
mod perf;
mod queue_sqs;
mod rotation;
mod schema;
mod secrets;
mod ssrf;
mod template;

/// The Lambda glue with every function's handler: what a function binary does with
/// its own handler, for tests that drive several functions through one `Deps`.
pub async fn handle_event(
    deps: &shared::lambda::Deps,
    event: lambda_runtime::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, shared::lambda::InvokeError> {
    shared::lambda::handle_event_with(&shared::handlers::Dispatch, deps, event).await
}
