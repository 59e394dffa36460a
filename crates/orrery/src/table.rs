//! `orrery table`: a markdown table from an experiment's `summary.json`, a
//! table of jobs from its `jobs.csv`, or the results' scoreboard from a
//! scoreboard file (`--scoreboard docs/scoreboard.toml`).

use anyhow::Context;
use orrery_lab::scoreboard::Scoreboard;
use orrery_lab::tables::{Cell, Layout, csv_rows, grid, job_table, table};
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// An experiment's `summary.json` (`orrery run FILE --out DIR` writes
    /// DIR/summary.json), or its `jobs.csv` for a row per job.
    #[arg(required_unless_present = "scoreboard")]
    summary: Option<PathBuf>,
    /// Cells: `[NAME=]PATH[/DIVISOR][%][@AGG][:DECIMALS]`, e.g.
    /// `JCT (h)=metrics.avg_jct_s/3600:1` or `by_priority.high.avg_iter_s`,
    /// averaged over seeds; `comparison.gain_avg_iter` reads the comparison
    /// line; `gain.metrics.avg_iter_s` is the baseline's over the run's,
    /// seed by seed; `@min`, `@median`, `@max` or `@below1` (how many are
    /// below one, "k of n") aggregate the seeds instead of their mean. With
    /// jobs.csv a PATH is one of its columns (`iter_mean_ms`,
    /// `isolated_iter_ms`, `slowdown`).
    #[arg(long = "cell", required = true, value_parser = |s: &str| s.parse::<Cell>().map_err(|e| e.to_string()))]
    cells: Vec<Cell>,
    /// A column per policy and a row per scenario, the cells joined by " / "
    /// (default: a row per scenario and policy, a column per cell).
    #[arg(long, conflicts_with = "grid")]
    wide: bool,
    /// Scenarios named `a=x,b=y` as a grid: a row per value of a, a column
    /// per value of b, each cell the policies' values.
    #[arg(long)]
    grid: bool,
    /// Only these policies, in this order (comma-separated).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// The policy `gain.` cells compare with (default: the summary's
    /// baseline), e.g. `pollux` for pollux+cassini against pollux.
    #[arg(long)]
    baseline: Option<String>,
    /// A scoreboard file (`docs/scoreboard.toml`): one row per paper's
    /// headline, its simulator figures read from the summaries it names.
    #[arg(long, conflicts_with_all = ["summary", "cells", "wide", "grid", "policies", "baseline"])]
    scoreboard: Option<PathBuf>,
    /// With --scoreboard: print the commands that make the runs it reads.
    #[arg(long, requires = "scoreboard")]
    commands: bool,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    if let Some(file) = &args.scoreboard {
        let name = file.display().to_string();
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {name}"))?;
        let board = Scoreboard::parse(&name, &text)?;
        print!("{}", if args.commands { board.commands() } else { board.render(Path::new(""))? });
        return Ok(());
    }
    let Some(summary) = &args.summary else { anyhow::bail!("a summary.json or jobs.csv is needed") };
    let path = summary.display().to_string();
    let text = std::fs::read_to_string(summary).with_context(|| format!("reading {path}"))?;
    let t = if summary.extension().is_some_and(|e| e == "csv") {
        anyhow::ensure!(
            !args.wide && !args.grid,
            "{path}: --wide and --grid are for summary.json; jobs.csv gives a row per job"
        );
        csv_rows(&text).and_then(|rows| job_table(&rows, &args.cells, &args.policies))
    } else {
        let mut summary: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("{path}: not JSON"))?;
        if let (Some(b), Some(map)) = (&args.baseline, summary.as_object_mut()) {
            map.insert("baseline".into(), serde_json::Value::String(b.clone()));
        }
        if args.grid {
            grid(&summary, &args.cells, &args.policies)
        } else {
            let layout = if args.wide { Layout::Wide } else { Layout::Long };
            table(&summary, &args.cells, layout, &args.policies)
        }
    }
    .with_context(|| path.clone())?;
    print!("{t}");
    Ok(())
}
