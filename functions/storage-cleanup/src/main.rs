//! The `storage-cleanup` Lambda function: wiring only (see ARCHITECTURE.md).

fn main() -> Result<(), shared::lambda::FunctionError> {
    shared::lambda::run(shared::handlers::StorageCleanup)
}
