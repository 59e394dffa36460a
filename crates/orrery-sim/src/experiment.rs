//! Experiments as files: a topology, a workload, policies, seeds and limits;
//! running them and writing `summary.json`, `jobs.csv` and `links.csv`.
//!
//! ```toml
//! name = "default"
//! seeds = [1]
//! policies = ["fifo", "random", "ideal"]
//! [topology]
//! builtin = "leaf-spine"          # or file = "cluster.toml", or [topology.leaf_spine]
//! [workload]
//! generator = "poisson"            # or "snapshot"; or trace = "data/philly/muri_trace1.csv"
//! jobs = 60
//! load = 0.8
//! [sim]
//! jitter = 0.02
//! ```

use crate::engine::{SimConfig, Simulation};
use crate::metrics::{JobRow, LinkRow, Metrics, job_rows, link_rows, metrics_of};
use orrery_model::setups::{LeafSpine, by_name, parse_topology};
use orrery_model::{JobSpec, Priority, Topology};
use orrery_trace::generate::{Mix, ShapeContext, poisson, snapshot};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// An experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name, for reports.
    pub name: String,
    /// Seeds; each policy runs once per seed.
    #[serde(default = "one_seed")]
    pub seeds: Vec<u64>,
    /// Policies to compare (see `orrery run --help`).
    pub policies: Vec<String>,
    /// The cluster.
    pub topology: TopologySpec,
    /// The jobs.
    pub workload: WorkloadSpec,
    /// Simulation knobs.
    #[serde(default)]
    pub sim: SimOptions,
}

fn one_seed() -> Vec<u64> {
    vec![1]
}

/// Where the cluster comes from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologySpec {
    /// A built-in set-up (`orrery topo list`).
    pub builtin: Option<String>,
    /// A topology file, relative to the experiment file.
    pub file: Option<PathBuf>,
    /// A generated leaf-spine.
    pub leaf_spine: Option<LeafSpine>,
}

/// Where the jobs come from.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// `poisson` or `snapshot` (jobs from the zoo, CASSINI's mix by default).
    pub generator: Option<String>,
    /// A trace file, relative to the experiment file.
    pub trace: Option<PathBuf>,
    /// Trace format (sniffed when absent).
    pub format: Option<orrery_trace::Format>,
    /// Number of jobs to generate, or the first N of the trace.
    pub jobs: Option<usize>,
    /// Target load for `poisson`.
    pub load: Option<f64>,
    /// Generated job mix.
    pub mix: Option<Mix>,
    /// Jobs listed in the file (`[[workload.job]]`), instead of a generator or trace.
    #[serde(default, rename = "job")]
    pub listed: Vec<JobSpec>,
    /// For the `pinned` policy: job id → [[host, GPUs], ...].
    #[serde(default)]
    pub pins: std::collections::BTreeMap<String, Vec<(usize, u32)>>,
}

/// Simulation knobs of an experiment.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimOptions {
    /// Relative standard deviation of compute times.
    pub jitter: f64,
    /// Stop at this simulated time, s.
    pub max_time_s: Option<f64>,
    /// Fast-forward undisturbed jobs (default on; `orrery run --no-skip` turns it off).
    pub skip: bool,
    /// Checkpoint-restore time of a preempted job when it restarts, s.
    pub restart_penalty_s: f64,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { jitter: 0.0, max_time_s: None, skip: true, restart_penalty_s: 10.0 }
    }
}

/// One policy × seed.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Policy name.
    pub policy: String,
    /// Scenario: the workload and topology.
    pub scenario: String,
    /// Seed.
    pub seed: u64,
    /// Which fidelity was used: `iteration` (every iteration simulated) or
    /// `iteration+skip` (undisturbed jobs fast-forwarded).
    pub fidelity: &'static str,
    /// Iterations counted analytically by the fast-forward.
    pub skipped_iterations: u64,
    /// Cluster metrics over all jobs.
    pub metrics: Metrics,
    /// Metrics per priority class, when jobs carry priorities.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by_priority: Option<ByPriority>,
    /// Simulated events.
    pub events: u64,
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
    /// Decisions the simulator could not apply.
    pub invalid_decisions: u64,
    /// Per-job rows.
    #[serde(skip)]
    pub jobs: Vec<JobRow>,
    /// Per-link rows.
    #[serde(skip)]
    pub links: Vec<LinkRow>,
    /// Iteration times of all jobs, s (for plots).
    #[serde(skip)]
    pub iteration_s: Vec<f64>,
}

/// Metrics per priority.
#[derive(Debug, Clone, Serialize)]
pub struct ByPriority {
    /// High-priority jobs.
    pub high: Metrics,
    /// Low-priority jobs.
    pub low: Metrics,
}

/// `summary.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Experiment name.
    pub experiment: String,
    /// First seed.
    pub seed: u64,
    /// Runs.
    pub runs: Vec<Run>,
}

/// The built-in default experiment: 16 hosts of 4 A100s with 50 Gbit/s NICs
/// (CASSINI's NIC rate) in 4 racks under 2 spines at 2:1, and a Poisson
/// workload of 60 jobs from CASSINI's mix at load 0.8, comparing FIFO,
/// random placement and the ideal network.
pub const DEFAULT: &str = r#"
name = "default"
seeds = [1]
policies = ["fifo", "random", "ideal"]
[topology.leaf_spine]
racks = 4
hosts_per_rack = 4
spines = 2
gpus_per_host = 4
gpu_type = "a100"
host_gbps = 50.0
uplink_gbps = 50.0
[workload]
generator = "poisson"
jobs = 60
load = 0.8
[sim]
jitter = 0.02
"#;

/// Parses an experiment; messages carry `file:line:column`.
pub fn parse(file: &str, text: &str) -> Result<Experiment, String> {
    let e: Experiment = orrery_model::setups::parse_config(file, text).map_err(|e| e.to_string())?;
    let names = || orrery_policy::CATALOGUE.iter().map(|c| c.0).collect::<Vec<_>>().join(", ");
    if e.policies.is_empty() {
        return Err(format!("{file}: policies: expected at least one of {}", names()));
    }
    if let Some(p) = e.policies.iter().find(|p| policy(p, 0, &e.workload.pins).is_none()) {
        return Err(format!(
            "{file}: policies: unknown policy {p:?}; expected one of {} (see `orrery policies`)",
            names()
        ));
    }
    if e.seeds.is_empty() {
        return Err(format!("{file}: seeds: expected at least one seed"));
    }
    if !(e.sim.jitter >= 0.0 && e.sim.jitter < 1.0) {
        return Err(format!("{file}: sim.jitter: expected a fraction in [0, 1), found {}", e.sim.jitter));
    }
    Ok(e)
}

/// A policy by name: those of `orrery policies`, plus `pinned` (and
/// `pinned+cassini`) built from the experiment's pins.
fn policy(
    name: &str,
    seed: u64,
    pins: &std::collections::BTreeMap<String, Vec<(usize, u32)>>,
) -> Option<Box<dyn orrery_policy::Policy>> {
    let pinned = || Box::new(orrery_policy::baseline::Pinned { pins: pins.clone() }) as Box<dyn orrery_policy::Policy>;
    match name {
        "pinned" => Some(pinned()),
        "pinned+cassini" => {
            let mut c = orrery_policy::cassini::Cassini::new(pinned(), seed);
            c.candidates = 1; // the pins are the placement
            Some(Box::new(c))
        }
        _ => orrery_policy::by_name(name, seed),
    }
}

impl Experiment {
    /// Builds the topology; `base` resolves relative paths.
    pub fn topology(&self, base: &Path) -> Result<Topology, String> {
        let t = &self.topology;
        match (&t.builtin, &t.file, &t.leaf_spine) {
            (Some(name), None, None) => by_name(name)
                .or_else(|| orrery_trace::machines::builtin(name))
                .ok_or_else(|| format!("topology.builtin: unknown set-up {name:?} (see `orrery topo list`)")),
            (None, Some(file), None) => {
                let path = base.join(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|e| format!("topology.file: {}: {e}", path.display()))?;
                parse_topology(&path.display().to_string(), &text).map_err(|e| e.to_string())
            }
            (None, None, Some(ls)) => ls.build(&self.name).map_err(|e| e.to_string()),
            _ => Err("topology: expected exactly one of builtin, file, leaf_spine".into()),
        }
    }

    /// Builds the jobs for a seed.
    pub fn jobs(&self, base: &Path, topo: &Topology, seed: u64) -> Result<Vec<JobSpec>, String> {
        let w = &self.workload;
        let mix = w.mix.clone().unwrap_or_default();
        if !w.listed.is_empty() {
            if w.generator.is_some() || w.trace.is_some() {
                return Err("workload: give [[workload.job]] entries or a generator or a trace, not several".into());
            }
            for (i, j) in w.listed.iter().enumerate() {
                if orrery_model::zoo::model(&j.model).is_none() || j.workers == 0 || j.batch == 0 {
                    return Err(format!(
                        "workload.job[{i}] ({}): expected a zoo model and at least one worker and sample",
                        j.id
                    ));
                }
            }
            return Ok(w.listed.clone());
        }
        match (&w.generator, &w.trace) {
            (Some(g), None) => {
                let n = w.jobs.unwrap_or(60);
                match g.as_str() {
                    "poisson" => {
                        let host = topo.hosts.iter().max_by_key(|h| h.gpus).ok_or("topology has no hosts")?;
                        let ctx = ShapeContext {
                            gpu: host.gpu_type.clone(),
                            gpus_per_host: host.gpus,
                            link_gbps: topo.host_nic_gbps(0),
                        };
                        poisson(n, w.load.unwrap_or(0.8), topo.gpu_count(), &mix, &ctx, seed)
                            .map_err(|e| format!("workload: {e}"))
                    }
                    "snapshot" => snapshot(n, &mix, seed).map_err(|e| format!("workload: {e}")),
                    other => Err(format!("workload.generator: expected poisson or snapshot, found {other:?}")),
                }
            }
            (None, Some(trace)) => {
                let path = base.join(trace);
                let (_, parsed) = orrery_trace::read_file(&path, w.format, seed);
                if let Some(e) = parsed.errors.first() {
                    return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
                }
                let mut jobs = parsed.items;
                if let Some(n) = w.jobs {
                    jobs.truncate(n);
                }
                Ok(jobs)
            }
            _ => Err("workload: expected exactly one of generator, trace".into()),
        }
    }

    /// Runs every policy for every seed. `progress(run, runs, sim_s, finished, jobs)`.
    pub fn run(
        &self,
        base: &Path,
        mut progress: impl FnMut(usize, usize, f64, usize, usize),
    ) -> Result<Summary, String> {
        let topo = self.topology(base)?;
        let total = self.seeds.len() * self.policies.len();
        let mut runs = Vec::new();
        for &seed in &self.seeds {
            let jobs = self.jobs(base, &topo, seed)?;
            for name in &self.policies {
                let mut policy =
                    policy(name, seed, &self.workload.pins).ok_or_else(|| format!("unknown policy {name}"))?;
                let cfg = SimConfig {
                    seed,
                    jitter: self.sim.jitter,
                    max_time_s: self.sim.max_time_s,
                    skip: self.sim.skip,
                    restart_penalty_s: self.sim.restart_penalty_s,
                };
                let start = std::time::Instant::now();
                let mut sim = Simulation::new(&topo, &jobs, cfg, policy.isolated_network());
                let k = runs.len();
                sim.run(policy.as_mut(), |t, done| progress(k, total, t, done, jobs.len()));
                let wall_s = start.elapsed().as_secs_f64();
                let mut job_table = job_rows(&sim);
                let has_high = jobs.iter().any(|j| j.priority == Priority::High);
                let by_priority = has_high.then(|| ByPriority {
                    high: metrics_of(&sim, &job_table, |p| p == Priority::High),
                    low: metrics_of(&sim, &job_table, |p| p == Priority::Low),
                });
                let m = metrics_of(&sim, &job_table, |_| true);
                let makespan_ns = (m.makespan_s * 1e9) as u64;
                let mut link_table = link_rows(&sim, makespan_ns);
                for r in &mut job_table {
                    (r.policy, r.seed) = (policy.name(), seed);
                }
                for r in &mut link_table {
                    (r.policy, r.seed) = (policy.name(), seed);
                }
                runs.push(Run {
                    policy: policy.name(),
                    scenario: format!("{} on {}", self.workload_name(), topo.name),
                    seed,
                    fidelity: if self.sim.skip { "iteration+skip" } else { "iteration" },
                    skipped_iterations: sim.jobs.iter().map(|j| j.skipped_iterations).sum(),
                    metrics: m,
                    by_priority,
                    events: sim.events_processed,
                    wall_s,
                    invalid_decisions: sim.invalid_decisions,
                    jobs: job_table,
                    links: link_table,
                    iteration_s: sim.jobs.iter().flat_map(|j| j.iteration_ms.iter().map(|ms| ms / 1e3)).collect(),
                });
            }
        }
        Ok(Summary { experiment: self.name.clone(), seed: self.seeds[0], runs })
    }

    fn workload_name(&self) -> String {
        let w = &self.workload;
        match (&w.generator, &w.trace) {
            (Some(g), _) => format!("{g} x{}", w.jobs.unwrap_or(60)),
            (_, Some(t)) => t.display().to_string(),
            _ if !w.listed.is_empty() => format!("{} listed jobs", w.listed.len()),
            _ => "workload".into(),
        }
    }
}

/// Writes `summary.json`, `jobs.csv` and `links.csv` into `dir`.
pub fn write(summary: &Summary, dir: &Path) -> Result<(), String> {
    let err = |p: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", p.display());
    std::fs::create_dir_all(dir).map_err(|e| err(dir, &e))?;
    let p = dir.join("summary.json");
    let json = serde_json::to_string_pretty(summary).map_err(|e| err(&p, &e))?;
    std::fs::write(&p, json + "\n").map_err(|e| err(&p, &e))?;
    let p = dir.join("jobs.csv");
    let mut w = csv::Writer::from_path(&p).map_err(|e| err(&p, &e))?;
    for row in summary.runs.iter().flat_map(|r| &r.jobs) {
        w.serialize(row).map_err(|e| err(&p, &e))?;
    }
    w.flush().map_err(|e| err(&p, &e))?;
    let p = dir.join("links.csv");
    let mut w = csv::Writer::from_path(&p).map_err(|e| err(&p, &e))?;
    for row in summary.runs.iter().flat_map(|r| &r.links) {
        w.serialize(row).map_err(|e| err(&p, &e))?;
    }
    w.flush().map_err(|e| err(&p, &e))?;
    let label = |r: &Run| {
        if summary.runs.iter().filter(|x| x.policy == r.policy).count() > 1 {
            format!("{} (seed {})", r.policy, r.seed)
        } else {
            r.policy.clone()
        }
    };
    let jct: Vec<(String, Vec<f64>)> =
        summary.runs.iter().map(|r| (label(r), r.jobs.iter().filter_map(|j| j.jct_s).collect())).collect();
    let iters: Vec<(String, Vec<f64>)> = summary.runs.iter().map(|r| (label(r), r.iteration_s.clone())).collect();
    for (name, svg) in [
        (
            "jct_cdf.svg",
            crate::plot::cdf_svg(&format!("{}: job completion time", summary.experiment), "JCT (s, log scale)", &jct),
        ),
        (
            "iteration_cdf.svg",
            crate::plot::cdf_svg(
                &format!("{}: iteration time", summary.experiment),
                "iteration time (s, log scale)",
                &iters,
            ),
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, svg).map_err(|e| err(&p, &e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_experiment_parses() {
        let e = parse("default", DEFAULT).expect("valid");
        assert_eq!(e.policies, vec!["fifo", "random", "ideal"]);
        assert_eq!(e.topology(Path::new(".")).map(|t| t.gpu_count()), Ok(64));
    }

    #[test]
    fn bad_experiments_name_the_field() {
        let e = parse("x.toml", "name = \"x\"\npolicies = [\"magic\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect_err("bad policy");
        assert!(e.contains("unknown policy \"magic\""), "{e}");
        let e = parse(
            "y.toml",
            "name = \"y\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\njobs = \"ten\"\n",
        )
        .expect_err("bad type");
        assert!(e.starts_with("y.toml:6:"), "{e}");
        let e = parse("z.toml", "name = \"z\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"nope\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect("parses")
            .topology(Path::new("."))
            .expect_err("unknown topology");
        assert!(e.contains("unknown set-up \"nope\""), "{e}");
    }
}
