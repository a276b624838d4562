//! The `noop-cron` Lambda function: wiring only (see ARCHITECTURE.md).

fn main() -> Result<(), shared::lambda::FunctionError> {
    shared::lambda::run(shared::handlers::NoopCron)
}
