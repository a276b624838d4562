//! The `pat-expiring` Lambda function: wiring only (see ARCHITECTURE.md).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    shared::lambda::run(shared::Function::PatExpiring).await
}
