//! The `delete-placeholder-user` Lambda function: wiring only (see ARCHITECTURE.md).

fn main() -> Result<(), shared::lambda::FunctionError> {
    shared::lambda::run(shared::handlers::DeletePlaceholderUser)
}
