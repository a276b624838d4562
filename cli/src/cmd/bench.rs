//! `hk bench`: the benchmarks, written to docs/benchmarks.md.

use super::ui::progress;
use super::*;

#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// b38, b38-baseline, b38-groups, b38-one-date, b28, keyset, queue-calls, footprint,
    /// or all; several joined by commas run on the same data sets (`b38,b38-baseline`).
    pub(crate) name: String,
    /// small, full, or a number of expired memberships.
    #[arg(long, default_value = "small")]
    pub(crate) scale: String,
    /// Print the rows as JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// The document the table is written to, with the command.
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub(crate) doc: PathBuf,
    /// Where the function binaries are (footprint).
    #[arg(long, default_value = "target/release")]
    pub(crate) bin_dir: PathBuf,
    /// The moto endpoint for queue-calls and b28.
    #[arg(long, env = "MOTO_ENDPOINT")]
    pub(crate) moto: Option<String>,
    /// Keep the bench databases for inspection (they are dropped otherwise).
    #[arg(long)]
    pub(crate) keep: bool,
    /// b28: send the notices to moto's SQS (--moto) instead of the in-process queue
    /// (moto slows as its queues fill: small data sets only)
    #[arg(long)]
    pub(crate) b28_on_moto: bool,
}

pub(crate) async fn cmd_bench(a: BenchArgs) -> Result<ExitCode> {
    let scale = lab::bench::Scale::parse(&a.scale)?;
    let opts = lab::bench::Options {
        database_url: database_url()?,
        moto_endpoint: a.moto.clone(),
        bin_dir: a.bin_dir.clone(),
        now: parse_now(Some("2025-03-10T00:10:00Z"))?,
        keep: a.keep,
        b28_on_moto: a.b28_on_moto,
    };
    let pb = progress(a.json, format!("bench {} at scale {}", a.name, a.scale));
    let measured = async {
        let context = lab::bench::context(&scale, &opts).await?;
        let rows = lab::bench::run(&a.name, &scale, &opts).await?;
        anyhow::Ok((context, rows))
    }
    .await;
    pb.finish_and_clear();
    let (context, rows) = measured?;
    let command = format!(
        "hk {}",
        std::env::args().skip(1).collect::<Vec<_>>().join(" ")
    );
    if a.json {
        println!(
            "{}",
            serde_json::json!({"command": command, "context": context, "rows": rows})
        );
    } else {
        println!(
            "{command}\n{context}\n\n{}",
            lab::bench::render_markdown(&rows)
        );
    }
    lab::bench::write_doc(
        &a.doc,
        // One block per scale and bench; footprint's also per binary directory (the
        // native build and the Lambda build are both worth keeping).
        &if matches!(a.name.as_str(), "footprint" | "all") {
            format!("{}:{}:{}", scale.label, a.name, a.bin_dir.display())
        } else {
            format!("{}:{}", scale.label, a.name)
        },
        &command,
        &context,
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}
