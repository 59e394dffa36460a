//! `orrery run` on an experiment with `kind = "auction-scale"`: Plebiscito's
//! scaling study (Fig. 7), one job on clusters of growing size, auction
//! against the centralised greedy. Writes `summary.json` and two log-log
//! figures with `--out`.

use anyhow::{Context, Result, anyhow};
use orrery_lab::plot::{Figure, Series};
use orrery_plebiscito::scale::{ScaleRow, run as run_scale};
use orrery_plebiscito::utility::{BidPolicy, Utility};
use serde::Deserialize;
use std::path::Path;

/// The experiment file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleSpec {
    /// Must be `auction-scale`.
    pub kind: String,
    /// Experiment name.
    pub name: String,
    /// Cluster sizes (agents).
    pub agents: Vec<usize>,
    /// Components of the job.
    #[serde(default = "sixteen")]
    pub workers: u16,
    /// Overlay degree.
    #[serde(default = "six")]
    pub degree: usize,
    /// Utility of Table I.
    #[serde(default = "lgf")]
    pub utility: String,
    /// Seed of the overlay, the busy GPUs and the latencies.
    #[serde(default = "one")]
    pub seed: u64,
}

fn sixteen() -> u16 {
    16
}
fn six() -> usize {
    6
}
fn lgf() -> String {
    "lgf".into()
}
fn one() -> u64 {
    1
}

/// Whether a TOML text is a scaling experiment.
pub fn is_scale(text: &str) -> bool {
    text.parse::<toml::Table>().is_ok_and(|t| t.get("kind").and_then(|k| k.as_str()) == Some("auction-scale"))
}

/// Runs it, prints the table and writes `--out`.
pub fn run(file: &str, text: &str, out: Option<&Path>) -> Result<()> {
    let spec: ScaleSpec = toml::from_str(text).map_err(|e| anyhow!("{file}: {e}"))?;
    if spec.kind != "auction-scale" {
        return Err(anyhow!("{file}: kind: expected \"auction-scale\""));
    }
    if spec.agents.is_empty() || spec.agents.contains(&0) || spec.workers == 0 {
        return Err(anyhow!("{file}: agents: expected a list of positive sizes, and workers ≥ 1"));
    }
    let utility = Utility::parse(&spec.utility)
        .ok_or_else(|| anyhow!("{file}: utility: expected sgf, lgf, yarn, tetris, tiresias, drf or themis"))?;
    let rows = run_scale(&spec.agents, spec.workers, spec.degree, BidPolicy::aware(utility), spec.seed);
    println!("\nexperiment {}: one {}-component job, overlay degree {}", spec.name, spec.workers, spec.degree);
    println!(
        "{:>6} {:>3} {:>9} {:>7} {:>7} {:>9} {:>12} {:>10} {:>7} {:>8} {:>10} {:>11}",
        "agents",
        "D",
        "messages",
        "B/msg",
        "rounds",
        "Λ·N·D",
        "consensus ms",
        "wall ms",
        "agreed",
        "U/greedy",
        "central msg",
        "central ms"
    );
    for r in &rows {
        println!(
            "{:>6} {:>3} {:>9} {:>7.0} {:>7} {:>9} {:>12.3} {:>10.1} {:>7} {:>8.4} {:>10} {:>11.3}",
            r.agents,
            r.diameter,
            r.messages,
            r.bytes_per_message,
            r.rounds,
            r.rounds_bound,
            r.consensus_ms,
            r.wall_ms,
            r.agreed,
            r.utility_vs_greedy,
            r.central_messages,
            r.central_ms
        );
    }
    if let Some(dir) = out {
        write(dir, &spec, &rows)?;
    }
    Ok(())
}

fn write(dir: &Path, spec: &ScaleSpec, rows: &[ScaleRow]) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
    let summary =
        serde_json::json!({ "experiment": spec.name, "workers": spec.workers, "degree": spec.degree, "rows": rows });
    let p = dir.join("summary.json");
    orrery_model::files::write_atomic(&p, serde_json::to_vec_pretty(&summary)?)
        .with_context(|| format!("{}", p.display()))?;
    let pts = |f: &dyn Fn(&ScaleRow) -> f64| rows.iter().map(|r| (r.agents as f64, f(r))).collect::<Vec<_>>();
    let time = Figure::LogLog {
        title: format!("Time to place a {}-component job (Fig. 7a)", spec.workers),
        x_label: "agents".into(),
        y_label: "ms".into(),
        series: vec![
            Series::new("auction: simulated consensus", pts(&|r| r.consensus_ms)),
            Series::new("auction: wall-clock to simulate", pts(&|r| r.wall_ms)),
            Series::new("centralised greedy: compute + RTT", pts(&|r| r.central_ms)),
        ],
    };
    time.save(dir, "scale-time")?;
    let msgs = Figure::LogLog {
        title: "Messages to place the job (Fig. 7b)".into(),
        x_label: "agents".into(),
        y_label: "messages".into(),
        series: vec![
            Series::new("auction", pts(&|r| r.messages as f64)),
            Series::new("centralised (2N)", pts(&|r| r.central_messages as f64)),
        ],
    };
    msgs.save(dir, "scale-messages")?;
    println!("wrote {}", dir.display());
    Ok(())
}
