//! `hk parity <plan.json>`: compare a plan's decisions with the database after
//! GitLab's own cron ran (read only; docs/parity.md). Exit 0 at full agreement
//! (rows changed meanwhile listed, not counted against it), 4 when a decision
//! disagrees or an id was reused, or the plan is empty or stopped early, 1 or 2 when the comparison could not run.

use super::exit::DISAGREED;
use super::*;
use hk::parity::{compare, Kind, PlanFile, Report};

/// `hk parity`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ParityArgs {
    /// The plan: what `hk run <function> --dry-run --until-idle --json` printed.
    plan: PathBuf,
    /// Print one JSON object `{"parity": …}` instead of the tables.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn cmd_parity(a: ParityArgs) -> Result<ExitCode> {
    let text = std::fs::read_to_string(&a.plan)
        .with_context(|| format!("cannot read {}", a.plan.display()))?;
    let plan = PlanFile::parse(&text).map_err(|e| {
        anyhow::Error::from(shared::error::Error::Config(format!(
            "{}: {e}",
            a.plan.display()
        )))
    })?;
    let config = local_config()?;
    let mut client = connector(&config).await?.connect("hk-parity").await?;
    let report = compare(&mut client, &plan).await?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        print_report(&plan, &report);
    }
    Ok(if report.agrees() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(DISAGREED)
    })
}

fn print_report(plan: &PlanFile, r: &Report) {
    println!(
        "parity of the plan of {} (its clock {}) with the database: {} decisions",
        plan.function.as_deref().unwrap_or("?"),
        shared::clock::rfc3339(plan.now),
        plan.decisions.len()
    );
    for why in &r.problems {
        println!("NOT in agreement: {why}");
    }
    println!(
        "{:<26} {:<18} {:<28} {:>7} {:>9} {:>17} {:>9}",
        "function", "decision", "rule", "agreed", "disagreed", "changed_meanwhile", "id_reused"
    );
    for ((f, d, rule), c) in &r.by_rule {
        println!(
            "{f:<26} {d:<18} {rule:<28} {:>7} {:>9} {:>17} {:>9}",
            c[0], c[1], c[2], c[3]
        );
    }
    for f in &r.findings {
        let p = &f.planned;
        println!(
            "{}: {} {} {} {}: {}",
            f.kind.name().to_uppercase(),
            p.function,
            p.table,
            p.id,
            p.identity
                .as_ref()
                .map(|i| Value::Object(i.clone()).to_string())
                .unwrap_or_default(),
            f.what
        );
    }
    let (dis, reused, meanwhile) = (
        r.count(Kind::Disagreed),
        r.count(Kind::IdReused),
        r.count(Kind::ChangedMeanwhile),
    );
    if r.agrees() {
        println!(
            "full agreement ({} agreed, {meanwhile} changed meanwhile)",
            r.count(Kind::Agreed)
        );
    } else {
        println!(
            "NOT in agreement: {dis} disagreed, {reused} id(s) reused, {meanwhile} changed meanwhile{} (exit {DISAGREED})",
            if r.problems.is_empty() { String::new() } else { format!(", {} problem(s) with the plan above", r.problems.len()) }
        );
    }
}
