//! Integration tests: one binary, one fresh database per test (see `integration_tests`).

// Deep async state machines (a storage-cleanup run inside the whole-pipeline
// futures) pass the default query depth of 128.
#![recursion_limit = "256"]

mod architecture;
mod assert;
mod common_rules;
mod delete_user;
mod deliver_notification;
mod deployment;
mod emitted;
mod group_deletion;
mod harness;
mod pat_expiring;
mod perf;
mod placeholder_user_cleanup;
mod prune_deletions;
mod reliability;
mod remove_expired_members;
mod schema;
mod shares;
mod storage;
mod system_hooks;

/// The Lambda glue with every function's handler: what a function binary does with
/// its own handler, for tests that drive several functions, none of which needs
/// dependencies of its own (B28's are given with [`handle_event_with`]).
pub async fn handle_event(
    deps: &shared::lambda::Environment,
    event: lambda_runtime::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, shared::lambda::InvokeError> {
    handle_event_with(&shared::handlers::Dispatch::new(), deps, event).await
}

/// [`handle_event`] with the jobs' dependencies in `dispatch`.
pub async fn handle_event_with(
    dispatch: &shared::handlers::Dispatch,
    deps: &shared::lambda::Environment,
    event: lambda_runtime::LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>,
) -> Result<aws_lambda_events::event::sqs::SqsBatchResponse, shared::lambda::InvokeError> {
    shared::lambda::handle_event_with(dispatch, deps, event).await
}
