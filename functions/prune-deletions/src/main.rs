//! The `prune-deletions` Lambda function: wiring only (see ARCHITECTURE.md).

fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run(shared::handlers::PruneDeletions)
}
