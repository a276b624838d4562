//! `hk grants --role <name>`: print the GRANT statements the functions' role needs on
//! the target database, derived as `hk check`'s privileges check derives them
//! (`hk::check::grants`), connected as the functions connect.

use std::process::ExitCode;

use anyhow::Result;

/// `hk grants`' arguments.
#[derive(clap::Args)]
pub(crate) struct GrantsArgs {
    /// The role the functions connect as (it need not exist yet).
    #[arg(long)]
    role: String,
    /// Grant SELECT, INSERT and UPDATE on the columns the statements name instead of
    /// the whole table, where they name some (DELETE and row locks stay table-level).
    #[arg(long)]
    columns: bool,
}

/// Print the script (exit 0), or fail (2) when a statement does not prepare there.
pub(crate) async fn cmd_grants(a: GrantsArgs) -> Result<ExitCode> {
    let target = hk::check::target::from_lookup(|k| std::env::var(k).ok()).await?;
    let g = hk::check::grants::grants(&target.connector, &a.role, a.columns).await?;
    print!("{}", g.script());
    Ok(ExitCode::SUCCESS)
}
