//! `hk grants --role <name>`: print the GRANT statements the functions' role needs on
//! the target database, derived as `hk check`'s privileges check derives them
//! (`hk::check::grants`), connected as the functions connect; with `--read-only`,
//! those of the role a `--read-only` copy connects as (`engine::shadow::grants`).

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
    #[arg(long, conflicts_with = "read_only")]
    columns: bool,
    /// Instead: the grants of the role a `--read-only` copy connects as (docs/shadow.md):
    /// SELECT on the columns the copy reads and on their sequences, nothing else.
    #[arg(long)]
    read_only: bool,
}

/// Print the script (exit 0), or fail (2) when a statement does not prepare there.
pub(crate) async fn cmd_grants(a: GrantsArgs) -> Result<ExitCode> {
    let target = hk::check::target::from_lookup(|k| std::env::var(k).ok()).await?;
    if a.read_only {
        println!(
            "-- The grants role {} needs to take `hk run … --read-only`'s copy of this\n\
             -- database: SELECT on the columns the catalogue's statements read (with\n\
             -- their keys) and on their sequences. No write, no other table or column.\n\
             -- Re-run `hk grants --read-only` after each GitLab upgrade.",
            a.role
        );
        for g in engine::shadow::grants::read_only_grants(&target.connector, &a.role).await? {
            println!("{g}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let g = hk::check::grants::grants(&target.connector, &a.role, a.columns).await?;
    print!("{}", g.script());
    Ok(ExitCode::SUCCESS)
}
