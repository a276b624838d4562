//! The `hk-check` Lambda function: `hk check` inside the deployed network, invoked
//! directly (no queue, no schedule). Wiring only (see ARCHITECTURE.md).

fn main() -> Result<(), shared::lambda::FunctionError> {
    shared::lambda::run_invoked("hk-check", checks::function::handle)
}
