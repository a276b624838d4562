//! `hk db up|down`, `hk migrate` and `hk seed`: the throwaway cluster, the schema
//! subset and the demo data set.

use super::*;

#[derive(Subcommand)]
pub(crate) enum DbAction {
    /// initdb + start; prints DATABASE_URL.
    Up,
    /// Stop the cluster.
    Down,
}

pub(crate) async fn cmd_db(action: DbAction) -> Result<ExitCode> {
    let c = hk::pg::Cluster::default_location();
    match action {
        DbAction::Up => {
            c.up()?;
            mark_throwaway(&c.url(), "hk db up").await?;
            println!("DATABASE_URL={}", c.url());
        }
        DbAction::Down => c.down()?,
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cmd_migrate() -> Result<ExitCode> {
    let applied = migrate(&database_url()?).await?;
    println!("migrations applied: {applied:?}");
    Ok(ExitCode::SUCCESS)
}

pub(crate) async fn cmd_seed(set: &str, now: Option<&str>) -> Result<ExitCode> {
    if set != "demo" {
        bail!("unknown data set `{set}` (known: demo)");
    }
    let now = parse_now(now)?;
    let mut c = Connector::from_url(&database_url()?)?.connect("hk").await?;
    hk::demo::seed(&mut c, now.date_naive()).await?;
    println!("demo data loaded (dates relative to {})", now.date_naive());
    Ok(ExitCode::SUCCESS)
}
