//! `orrery table`: a markdown table from an experiment's `summary.json`.

use anyhow::Context;
use orrery_lab::tables::{Cell, Layout, table};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// An experiment's `summary.json` (`orrery run FILE --out DIR` writes DIR/summary.json).
    summary: PathBuf,
    /// Cells: paths into a run, PATH[/DIVISOR][:DECIMALS], e.g.
    /// `metrics.avg_jct_s/3600:1` (hours) or `by_priority.high.avg_iter_s`;
    /// averaged over seeds.
    #[arg(long = "cell", required = true, value_parser = |s: &str| s.parse::<Cell>().map_err(|e| e.to_string()))]
    cells: Vec<Cell>,
    /// A column per policy and a row per scenario, the cells joined by " / "
    /// (default: a row per scenario and policy, a column per cell).
    #[arg(long)]
    wide: bool,
    /// Only these policies, in this order (comma-separated).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.summary).with_context(|| format!("reading {}", args.summary.display()))?;
    let summary: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", args.summary.display()))?;
    let layout = if args.wide { Layout::Wide } else { Layout::Long };
    let t = table(&summary, &args.cells, layout, &args.policies).with_context(|| args.summary.display().to_string())?;
    print!("{t}");
    Ok(())
}
