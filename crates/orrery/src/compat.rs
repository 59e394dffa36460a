//! `orrery compat`.

use crate::Timings;
use anyhow::Context;
use orrery_interleave::Search;
use orrery_interleave::compat::parse;
use std::io::Read;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Request file (JSON or TOML); `-` or nothing reads standard input.
    ///
    /// {"link_gbps": 50, "precision": 72, "jobs": [
    ///   {"name": "a", "priority": "high", "period_ms": 255,
    ///    "phases": [{"start_ms": 141, "duration_ms": 114, "gbps": 50}]},
    ///   {"name": "b", "model": "vgg19", "batch": 64, "workers": 4, "gpu": "a100"}]}
    file: Option<PathBuf>,
    /// Search: optimal (best score, then widest cushion), exhaustive, fast
    /// (Metronome's first perfect interval) or heuristic. Default: optimal when
    /// the rotations number at most 2·10⁷, else heuristic.
    #[arg(long, value_parser = ["optimal", "exhaustive", "fast", "heuristic"])]
    search: Option<String>,
    /// Draw the circles before and after rotation to this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
}

pub fn run(a: &Args, timings: &mut Timings) -> anyhow::Result<()> {
    let (name, text) = match a.file.as_deref() {
        None => ("<stdin>".to_string(), read_stdin()?),
        Some(p) if p.as_os_str() == "-" => ("<stdin>".to_string(), read_stdin()?),
        Some(p) => {
            (p.display().to_string(), std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?)
        }
    };
    let req = parse(&name, &text).map_err(anyhow::Error::msg)?;
    let search = a.search.as_deref().map(|s| match s {
        "exhaustive" => Search::Exhaustive,
        "fast" => Search::FastFeasible,
        "heuristic" => Search::Heuristic { restarts: 16, seed: 0 },
        _ => Search::OptimalCushion,
    });
    let (u, sol, report) = timings.phase("solve", || req.solve(search)).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if let Some(path) = &a.svg {
        let names: Vec<String> = req.jobs.iter().map(|j| j.name.clone()).collect();
        let title = format!(
            "{} jobs on a {} Gbit/s link: score {:.3} → {:.3}",
            names.len(),
            req.link_gbps,
            report.score_unrotated,
            report.score
        );
        let svg = orrery_interleave::svg::before_after(&u, req.link_gbps, &sol.rotations, &names, &title);
        orrery_model::files::write_atomic(path, svg).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
    Ok(s)
}
