//! `hk demo`: a throwaway database, the demo data, every batch until idle, and a
//! summary.

use super::run::summarize;
use super::ui::{num, observe, progress, render, table};
use super::*;
use comfy_table::Cell;
use engine::local::{Run, Runner};
use shared::db::Connector;
use shared::Function;

pub(crate) async fn cmd_demo(now: Option<String>, keep_db: bool, json: bool) -> Result<ExitCode> {
    let now = parse_now(now.as_deref())?;
    let mut cluster = None;
    let url = match std::env::var("DATABASE_URL") {
        Ok(u) => u,
        Err(_) => {
            let c = engine::pg::Cluster {
                base: std::env::temp_dir().join(format!("hk-demo-{}", std::process::id())),
                port: engine::pg::free_port()?,
            };
            let bin = demo_server_bin()?;
            eprintln!(
                "starting a throwaway PostgreSQL in {} on port {}",
                c.base.display(),
                c.port
            );
            let pb = progress(json, "starting a throwaway PostgreSQL");
            c.up_on(&bin, &[])?;
            pb.finish_and_clear();
            let url = c.url();
            mark_throwaway(&url, "hk demo").await?;
            cluster = Some(c);
            url
        }
    };
    let result = demo(&url, now, json).await;
    if let Some(c) = cluster {
        if keep_db && json {
            eprintln!("hk: the demo database is still running: DATABASE_URL={url}  (stop it with HK_PG_BASE={} hk db down)", c.base.display());
        } else if keep_db {
            println!("\nthe demo database is still running: DATABASE_URL={url}  (stop it with HK_PG_BASE={} hk db down)", c.base.display());
        } else {
            c.down()?;
        }
    }
    result
}

/// The server binaries of the demo's own cluster: PostgreSQL 16 or later, installed
/// with the checkout's scripts/pg-versions.sh when nobody chose the binaries and the
/// ones found are older (Debian 12's 15), else a one-line refusal saying how to get 16.
fn demo_server_bin() -> Result<std::path::PathBuf> {
    let found = engine::pg::pg_bin_found()
        .and_then(|(bin, source)| Ok((bin.clone(), source, engine::pg::server_major(&bin)?)))
        .map_err(|e| format!("{e:#}"));
    let npm = std::process::Command::new("npm")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    match engine::pg::demo_server(found, engine::pg::pg_versions_script(), npm) {
        engine::pg::DemoServer::Use(bin) => Ok(bin),
        engine::pg::DemoServer::Refuse(why) => Err(anyhow!(why)),
        engine::pg::DemoServer::Install(script) => {
            eprintln!(
                "hk: no PostgreSQL {} or later found; installing PostgreSQL 16 with {} 16 \
                 (npm registry, into .pg16/; once)",
                engine::pg::MIN_MAJOR,
                script.display()
            );
            engine::pg::install_pg16(&script)
        }
    }
}

pub(crate) async fn demo(url: &str, now: DateTime<Utc>, json: bool) -> Result<ExitCode> {
    let pb = progress(json, "migrating and seeding the demo data");
    migrate(url).await?;
    let connector = Connector::from_url(url)?;
    {
        let mut c = connector.connect("hk").await?;
        lab::demo::seed(&mut c, now.date_naive()).await?;
    }
    let before = lab::demo::table_counts(&connector.connect("hk").await?).await?;
    let mut all: Vec<Run> = Vec::new();
    let mut code = 0;
    let notifier = local_notifier().await?;
    let observer = std::sync::Arc::new(std::sync::Mutex::new(observe(&pb)));
    // What a batch cannot deliver is handed on, as in `hk run` (behaviour §11).
    let handoff = engine::local::Handoff::create(&engine::local::state_dir(), "demo")?;
    let (mut handed_on, mut failed) = (0, None);
    for f in Function::ALL.iter().filter(|f| f.cron().is_some()) {
        let o = observer.clone();
        let mut runner = Runner::new(connector.clone(), Default::default(), now)
            .with_notifier(notifier.clone())
            .with_handoff(handoff.clone())
            .with_backoff(engine::local::Backoff::from_env()?)
            .with_observer(move |r| (o.lock().expect("the progress observer"))(r));
        let body = runner.cron_message(*f).to_body();
        let result = super::run::deliver(&mut runner, *f, &body, true).await;
        let h = runner.handed_on();
        handed_on += h.dead.len() + h.undelivered.len();
        code = engine::local::worse_exit_code(code, runner.exit_code(false));
        all.extend(runner.runs);
        if let Err(e) = result {
            failed = Some(e);
            break;
        }
    }
    handoff.finish();
    if handed_on > 0 {
        eprintln!(
            "hk: {handed_on} message(s) handed on to {} (dead letters and undelivered messages; \
             `hk replay file <file> --until-idle` delivers them again)",
            handoff.dir().display()
        );
    }
    if let Some(e) = failed {
        return Err(e);
    }
    let after = lab::demo::table_counts(&connector.connect("hk").await?).await?;
    pb.finish_and_clear();
    if json {
        let tables: Vec<Value> = before
            .iter()
            .zip(after.iter())
            .map(|((t, b), (_, a))| serde_json::json!({"table": t, "before": b, "after": a}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "now": shared::clock::rfc3339(now),
                "exit_code": code,
                "functions": summarize(&all),
                "tables": tables,
                "emails": notifier.delivery.mailer.describe(),
            })
        );
        return Ok(exit::run_code(&all, code));
    }
    println!(
        "hk demo at {} (virtual time; every batch run until idle)\n",
        shared::clock::rfc3339(now)
    );
    let mut t = table(
        &[
            "function",
            "runs",
            "success",
            "retryable",
            "permanent",
            "results",
        ],
        &[1, 2, 3, 4],
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
        t.add_row(vec![
            Cell::new(&f),
            num(g("runs")),
            num(g("success")),
            num(g("retryable")),
            num(g("permanent")),
            Cell::new(results.join(" ")),
        ]);
    }
    println!("{}", render(&t));
    let mut t = table(&["table", "before", "after"], &[1, 2]);
    for ((name, b), (_, a)) in before.iter().zip(after.iter()) {
        t.add_row(vec![Cell::new(name), num(b), num(a)]);
    }
    println!("\n{}", render(&t));
    println!(
        "\nemails: {}; web hooks to local or private addresses are refused",
        notifier.delivery.mailer.describe()
    );
    Ok(exit::run_code(&all, code))
}
