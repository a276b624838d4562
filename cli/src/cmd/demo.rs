//! `hk demo`: a throwaway database, the demo data, every batch until idle, and a
//! summary.

use super::run::summarize;
use super::*;
use hk::local::{Run, Runner};
use shared::db::Connector;
use shared::Function;

pub(crate) async fn cmd_demo(now: Option<String>, keep_db: bool) -> Result<ExitCode> {
    let now = parse_now(now.as_deref())?;
    let mut cluster = None;
    let url = match std::env::var("DATABASE_URL") {
        Ok(u) => u,
        Err(_) => {
            let c = hk::pg::Cluster {
                base: std::env::temp_dir().join(format!("hk-demo-{}", std::process::id())),
                port: hk::pg::free_port()?,
            };
            eprintln!(
                "starting a throwaway PostgreSQL in {} on port {}",
                c.base.display(),
                c.port
            );
            c.up()?;
            let url = c.url();
            mark_throwaway(&url, "hk demo").await?;
            cluster = Some(c);
            url
        }
    };
    let result = demo(&url, now).await;
    if let Some(c) = cluster {
        if keep_db {
            println!("\nthe demo database is still running: DATABASE_URL={url}  (stop it with HK_PG_BASE={} hk db down)", c.base.display());
        } else {
            c.down()?;
            let _ = std::fs::remove_dir_all(&c.base);
        }
    }
    result
}

pub(crate) async fn demo(url: &str, now: DateTime<Utc>) -> Result<ExitCode> {
    migrate(url).await?;
    let connector = Connector::from_url(url)?;
    {
        let mut c = connector.connect("hk").await?;
        hk::demo::seed(&mut c, now.date_naive()).await?;
    }
    let before = hk::demo::table_counts(&connector.connect("hk").await?).await?;
    let mut all: Vec<Run> = Vec::new();
    let mut code = 0;
    let notifier = local_notifier().await?;
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let mut runner =
            Runner::new(connector.clone(), Default::default(), now).with_notifier(notifier.clone());
        let body = runner.cron_message(*f).to_body();
        runner.run_until_idle(*f, &body).await?;
        code = code.max(runner.exit_code(false));
        all.extend(runner.runs);
    }
    let after = hk::demo::table_counts(&connector.connect("hk").await?).await?;
    println!(
        "hk demo at {} (virtual time; every batch run until idle)\n",
        shared::clock::rfc3339(now)
    );
    println!(
        "{:<26} {:>6} {:>9} {:>9} {:>9}  results",
        "function", "runs", "success", "retryable", "permanent"
    );
    for (f, m) in summarize(&all) {
        let g = |k: &str| m.get(k).copied().unwrap_or(0);
        let results: Vec<String> = m
            .iter()
            .filter(|(k, _)| {
                !["runs", "success", "retryable", "permanent", "hop"].contains(&k.as_str())
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "{f:<26} {:>6} {:>9} {:>9} {:>9}  {}",
            g("runs"),
            g("success"),
            g("retryable"),
            g("permanent"),
            results.join(" ")
        );
    }
    println!("\n{:<32} {:>8} {:>8}", "table", "before", "after");
    for ((t, b), (_, a)) in before.iter().zip(after.iter()) {
        println!("{t:<32} {b:>8} {a:>8}");
    }
    if let Some(d) = &notifier.delivery {
        println!(
            "\nemails: {}; web hooks to local or private addresses are refused",
            d.mailer.describe()
        );
    }
    Ok(ExitCode::from(code as u8))
}
