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

use orrery_model::colocation::Colocation;
use orrery_model::setups::{LeafSpine, by_name, parse_topology};
use orrery_model::{JobSpec, Priority, Topology};
use orrery_sim::engine::{SimConfig, Simulation};
use orrery_sim::metrics::{JobRow, LinkRow, Metrics, job_rows, link_rows, metrics_of};
use orrery_trace::generate::{Mix, ShapeContext, poisson, snapshot};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What went wrong with an experiment: its file, its cluster, its
/// workload, a run, or its output. Each message names the file, field or
/// scenario it is about.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// The file does not parse, or a value is out of range or refers to
    /// something missing (`f.toml:7: workload.jobs: expected at most ...`).
    #[error("{0}")]
    Invalid(String),
    /// The cluster cannot be built: an unknown set-up, an unreadable or bad
    /// topology file, a bad leaf-spine or congested link.
    #[error("{0}")]
    Topology(String),
    /// A scenario's jobs cannot be made (a missing trace, a bad row) or
    /// cannot run on its cluster (a job larger than the cluster, a
    /// dependency cycle, a pin to a missing host).
    #[error("{0}")]
    Workload(String),
    /// A run panicked: a bug in orrery, named with the run that hit it so
    /// it can be reproduced (`orrery run FILE --policies P`).
    #[error(
        "scenario {scenario}, policy {policy}, seed {seed}: orrery panicked ({message}); please report this with the experiment file"
    )]
    Panicked {
        /// The scenario.
        scenario: String,
        /// The policy.
        policy: String,
        /// The seed.
        seed: u64,
        /// The panic's message.
        message: String,
    },
    /// An output file or folder could not be written.
    #[error("{path}: {source}")]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An output table could not be serialised.
    #[error("{path}: {message}")]
    Serialise {
        /// The file.
        path: PathBuf,
        /// The serialiser's message.
        message: String,
    },
    /// A figure could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] crate::plot::PlotError),
}

/// An experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    /// Name, for reports.
    pub name: String,
    /// What the experiment is, the first lines of its report (default: the
    /// file's leading `#` comment).
    #[serde(default)]
    pub description: Option<String>,
    /// The number the paper reports for this set-up, in the paper's words,
    /// shown beside orrery's headline.
    #[serde(default)]
    pub paper: Option<String>,
    /// The policy the report's headline measures against the baseline
    /// (default: the one with the best mean JCT gain, ideal networks aside).
    #[serde(default)]
    pub headline: Option<String>,
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
    /// Named variations of the workload (`[[scenario]]`); every policy runs
    /// in each. Without any, the workload runs as given.
    #[serde(default, rename = "scenario")]
    pub scenarios: Vec<Scenario>,
    /// The policy the comparison table measures the others against (default:
    /// the first).
    pub baseline: Option<String>,
    /// GPU sharing: how jobs on one GPU interfere (`[colocation]`, Castor).
    #[serde(default)]
    pub colocation: ColocationSpec,
    /// Also replay each (scenario, policy)'s first seed with a probe on its
    /// busiest link, for the report's figures (set by `orrery run --out`).
    #[serde(skip)]
    pub detail: bool,
    /// Record every iteration of every run for `iterations.csv` (set by
    /// `orrery run --iterations`); every iteration is then simulated.
    #[serde(skip)]
    pub iterations: bool,
}

/// A row of `iterations.csv`: one iteration of one job in one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationRow {
    /// Policy of the run.
    pub policy: String,
    /// Scenario of the run.
    pub scenario: String,
    /// Seed of the run.
    pub seed: u64,
    /// Job id.
    pub job: String,
    /// Iteration number of the job, from 0.
    pub iteration: u64,
    /// When it was due, s.
    pub due_s: f64,
    /// When it began (after its delay), s.
    pub start_s: f64,
    /// When it ended, s.
    pub end_s: f64,
    /// The delay a shift, alignment or pace imposed, ms.
    pub delay_ms: f64,
    /// The rate cap on its flows, Gbit/s (empty: uncapped).
    pub throttle_gbps: Option<f64>,
    /// `flow:path,path` per routed ring edge, `;` between them (empty: ECMP).
    pub routes: String,
}

/// Where the policies' interference ratios come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum XiSource {
    /// The measured ξ the simulator also applies.
    #[default]
    True,
    /// The boosted trees' predictions (Castor §6.4).
    Predicted,
}

/// `[colocation]`: the ground truth of GPU sharing and what policies know of it.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ColocationSpec {
    /// Spatial (MPS; ξ measured by Gavel) or temporal (time slicing).
    pub mode: orrery_model::colocation::SharingMode,
    /// ξ the policies see: `true` or `predicted`.
    pub xi: XiSource,
    /// GPU type whose measurements are read.
    pub gpu: String,
}

impl Default for ColocationSpec {
    fn default() -> Self {
        ColocationSpec { mode: orrery_model::colocation::SharingMode::Spatial, xi: XiSource::True, gpu: "v100".into() }
    }
}

impl ColocationSpec {
    /// (ground truth for the simulator, estimate for the policies) from
    /// Gavel's samples. The predictor is trained on 80% of Gavel's pairs
    /// (split seed 1).
    fn build(&self, samples: &[orrery_trace::interference::Sample]) -> Result<(Colocation, Colocation), String> {
        let truth = orrery_trace::interference::xi_table(samples, &self.gpu, None)
            .map_err(|e| format!("colocation.gpu: {e}"))?;
        let seen = match self.xi {
            XiSource::True => truth.clone(),
            XiSource::Predicted => orrery_trace::interference::xi_table(samples, &self.gpu, Some(1))
                .map_err(|e| format!("colocation.xi = \"predicted\": {e}"))?,
        };
        Ok((Colocation { mode: self.mode, table: truth }, Colocation { mode: self.mode, table: seen }))
    }
}

/// A named variation of the experiment's workload: a load, a job count, or
/// its own listed jobs and pins (`S1`..`S5`, `load=0.9`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Label in `summary.json` and the tables.
    pub name: String,
    /// Replaces `workload.load`.
    pub load: Option<f64>,
    /// Replaces `workload.jobs`.
    pub jobs: Option<usize>,
    /// Replaces the workload by these jobs (`[[scenario.job]]`).
    #[serde(default, rename = "job")]
    pub listed: Vec<JobSpec>,
    /// Replaces `workload.pins`.
    #[serde(default)]
    pub pins: std::collections::BTreeMap<String, Vec<(usize, u32)>>,
    /// Replaces `workload.decision` (`[[scenario.decision]]`).
    #[serde(default, rename = "decision")]
    pub decisions: Vec<serde_json::Value>,
    /// Host links congested in this scenario, on top of the topology's.
    #[serde(default)]
    pub congested: Vec<Congestion>,
    /// Replaces `workload.fragmentation`.
    pub fragmentation: Option<f64>,
    /// Replaces the experiment's topology.
    pub topology: Option<TopologySpec>,
    /// Replaces `workload.mix` (job sizes, batch: FORESIGHT's Fig. 7 grids).
    pub mix: Option<Mix>,
    /// Replaces `colocation.xi` (Castor's ablation: `xi=predicted`).
    pub xi: Option<XiSource>,
    /// Replaces `colocation.mode` (spatial or temporal sharing).
    pub sharing: Option<orrery_model::colocation::SharingMode>,
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
    /// Congested host links (`[[topology.congested]]`).
    #[serde(default)]
    pub congested: Vec<Congestion>,
}

/// A host link congested by traffic the scheduler does not control
/// (Metronome §IV-A's iPerf3 node): in both directions an endless flow of
/// `share` of the link's capacity competes max-min with the jobs (so a lone
/// job flow gets half the link), and the link gains `latency_us`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Congestion {
    /// Host name.
    pub host: String,
    /// Rate of the competing flow as a fraction of the link (default 1: iPerf3 at full speed).
    #[serde(default = "full")]
    pub share: f64,
    /// Added one-way latency, µs (default 1,000).
    #[serde(default = "one_ms")]
    pub latency_us: f64,
}

fn full() -> f64 {
    1.0
}

fn one_ms() -> f64 {
    1000.0
}

/// Applies congestion to a topology's host links: their added latency, and
/// the background flows for [`SimConfig::background`].
pub(crate) fn congest(mut t: Topology, congested: &[Congestion]) -> Result<(Topology, Vec<(usize, f64)>), String> {
    let mut background = Vec::new();
    for (i, c) in congested.iter().enumerate() {
        let Some(h) = t.hosts.iter().position(|h| h.name == c.host) else {
            return Err(format!("congested[{i}].host: no host named {:?} in {}", c.host, t.name));
        };
        if !(c.share > 0.0 && c.share <= 1.0 && c.latency_us >= 0.0 && c.latency_us.is_finite()) {
            return Err(format!("congested[{i}]: expected 0 < share <= 1 and latency_us >= 0"));
        }
        for (k, l) in t.links.iter_mut().enumerate().filter(|(_, l)| l.from == h || l.to == h) {
            background.push((k, c.share * l.gbps));
            l.latency_us += c.latency_us;
        }
    }
    Ok((t, background))
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
    /// For `generator = "fragmented"`: the share of ring flows that cross
    /// racks (FORESIGHT §II; default 0.5).
    pub fragmentation: Option<f64>,
    /// For `generator = "components"`: mean gap between arrivals, s.
    pub interarrival_s: Option<f64>,
    /// For `generator = "pollux-sample"`: a submission series
    /// (`cluster_throughput.csv` of Lucid's Venus data) whose busiest 8 hours
    /// re-draw the arrivals (Castor's Venus workload).
    pub arrivals: Option<PathBuf>,
    /// For `generator = "pollux-sample"`: the share of jobs marked high
    /// priority (Metronome's class), drawn per seed; default 0.
    pub high_priority: Option<f64>,
    /// For the `pinned` policy: job id → [[host, GPUs], ...].
    #[serde(default)]
    pub pins: std::collections::BTreeMap<String, Vec<(usize, u32)>>,
    /// Decisions applied at given times whatever the policy decides
    /// (`[[workload.decision]]`: `at_s`, `job` by id, and a decision's
    /// fields, e.g. `kind = "shift"`, `ms = 30`); docs/guide/simulation.md, "Scripted decisions", lists the kinds.
    #[serde(default, rename = "decision")]
    pub decisions: Vec<serde_json::Value>,
}

/// The decision kinds a script may give: those that act on a running job.
/// Placements come from pins (`pinned`), not scripts.
const SCRIPTABLE: [&str; 8] = ["shift", "align", "pace", "pause", "resume", "throttle", "route", "preempt"];

/// A workload's scripted decisions, resolved to job indices.
#[derive(Debug, Clone, Default)]
pub struct Script {
    /// (seconds, decision): applied at that time.
    pub at_time: Vec<(f64, orrery_policy::Decision)>,
    /// (job, iteration from 0, communication step, decision): applied as the
    /// job begins that iteration ([`Simulation::script_iterations`]).
    pub at_iteration: Vec<(usize, u64, Option<usize>, orrery_policy::Decision)>,
}

impl Script {
    /// Hands both lists to a simulation before it runs.
    pub fn apply(&self, sim: &mut Simulation<'_>) {
        sim.script(self.at_time.clone());
        sim.script_iterations(self.at_iteration.clone());
    }
}

/// Kinds a decision due at an iteration may be: FORESIGHT's per-iteration
/// delay, rate and routes.
const PER_ITERATION: [&str; 3] = ["shift", "throttle", "route"];

/// A workload's scripted decisions for its jobs: `at_s` (a time) or
/// `at_iteration` (as the job begins that iteration, from 0; a route may
/// then name the iteration's communication `step` it is for) and the job's
/// id become a trigger and the job's index; the rest must be one of the
/// decisions in [`SCRIPTABLE`] with its fields. Errors name the entry and
/// the field. O(decisions + jobs).
pub(crate) fn scripted(decisions: &[serde_json::Value], jobs: &[JobSpec]) -> Result<Script, String> {
    let index: std::collections::HashMap<&str, usize> =
        jobs.iter().enumerate().map(|(k, j)| (j.id.as_str(), k)).collect();
    let mut out = Script::default();
    for (i, d) in decisions.iter().enumerate() {
        let at = |field: &str, expected: &str| format!("workload.decision[{i}]: {field}: expected {expected}");
        let mut fields = d.as_object().cloned().ok_or_else(|| at("", "a table"))?;
        let at_s = fields.remove("at_s");
        let at_iteration = fields.remove("at_iteration");
        let step = fields.remove("step");
        let id =
            fields.remove("job").and_then(|v| v.as_str().map(str::to_string)).ok_or_else(|| at("job", "a job id"))?;
        let &job = index
            .get(id.as_str())
            .ok_or_else(|| format!("{}, found {id:?}", at("job", "the id of a job of the workload")))?;
        let kind = fields.get("kind").and_then(|v| v.as_str()).unwrap_or("").to_string();
        if !SCRIPTABLE.contains(&kind.as_str()) {
            return Err(format!("{}, found {kind:?}", at("kind", &SCRIPTABLE.join(", "))));
        }
        fields.insert("job".into(), job.into());
        let decision = serde_json::from_value(serde_json::Value::Object(fields))
            .map_err(|e| format!("workload.decision[{i}] ({kind}): {e}"))?;
        match (at_s, at_iteration) {
            (Some(t), None) => {
                let t = t.as_f64().filter(|t| t.is_finite() && *t >= 0.0);
                let t = t.ok_or_else(|| at("at_s", "a time in seconds, 0 or more"))?;
                if step.is_some() {
                    return Err(at("step", "only with at_iteration"));
                }
                out.at_time.push((t, decision));
            }
            (None, Some(k)) => {
                let k = k.as_u64().ok_or_else(|| at("at_iteration", "an iteration number, 0 or more"))?;
                if !PER_ITERATION.contains(&kind.as_str()) {
                    return Err(format!(
                        "{}, found {kind:?}",
                        at("kind", "shift, throttle or route with at_iteration")
                    ));
                }
                let step = match step {
                    None => None,
                    Some(v) if kind == "route" => Some(
                        v.as_u64().map(|s| s as usize).ok_or_else(|| at("step", "a communication step, 0 or more"))?,
                    ),
                    Some(_) => return Err(at("step", "only on a route")),
                };
                out.at_iteration.push((job, k, step, decision));
            }
            (Some(_), Some(_)) => return Err(at("at_s", "either at_s or at_iteration, not both")),
            (None, None) => return Err(at("at_s", "a time in seconds (or at_iteration, an iteration)")),
        }
    }
    Ok(out)
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
    /// How ring collectives run: `flows` (one flow per ring edge for the
    /// whole collective, the default) or `steps` (NCCL's 2(n−1) steps with a
    /// barrier between them).
    pub all_reduce: AllReduce,
}

/// How the simulator runs a ring collective (`[sim] all_reduce`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllReduce {
    /// One flow per ring edge carries the whole collective.
    #[default]
    Flows,
    /// NCCL's ring steps, each a barrier.
    Steps,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions { jitter: 0.0, max_time_s: None, skip: true, restart_penalty_s: 10.0, all_reduce: AllReduce::Flows }
    }
}

/// One policy × seed.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Policy name.
    pub policy: String,
    /// Scenario: its name, or the workload's load or source.
    pub scenario: String,
    /// The workload and topology it ran on.
    pub setup: String,
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
    /// Instants where the policy still preempted after 16 re-scheduling rounds.
    pub reschedules_cut: u64,
    /// Per-job rows.
    #[serde(skip)]
    pub jobs: Vec<JobRow>,
    /// Per-link rows.
    #[serde(skip)]
    pub links: Vec<LinkRow>,
    /// Per-iteration rows (with `Experiment::iterations`).
    #[serde(skip)]
    pub iterations: Vec<IterationRow>,
    /// Iteration times of all jobs, s, as 2,000 quantiles (for plots).
    #[serde(skip)]
    pub iteration_s: Vec<f64>,
    /// The busiest link up close (with `Experiment::detail`, first seed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busiest: Option<crate::report::Busiest>,
    /// The policy's own counters (Plebiscito's auctions, failure rate, ...).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counters: std::collections::BTreeMap<String, f64>,
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
    /// What the experiment is.
    pub description: Option<String>,
    /// The paper's number for this set-up, in the paper's words.
    pub paper: Option<String>,
    /// The policy the report's headline measures (None: the best by mean JCT).
    pub headline: Option<String>,
    /// First seed.
    pub seed: u64,
    /// Runs.
    pub runs: Vec<Run>,
    /// The policy the comparison measures against.
    pub baseline: String,
    /// Per scenario and policy, the means over seeds and the gains over the baseline.
    pub comparison: Vec<Comparison>,
}

/// One line of the comparison table: a policy in a scenario, averaged over
/// seeds, with the baseline's value divided by its own (> 1: better).
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Scenario.
    pub scenario: String,
    /// Policy.
    pub policy: String,
    /// Seeds averaged.
    pub seeds: usize,
    /// Mean iteration time, s.
    pub avg_iter_s: f64,
    /// 99th percentile iteration time, s.
    pub p99_iter_s: f64,
    /// Mean JCT, s.
    pub avg_jct_s: f64,
    /// Makespan, s.
    pub makespan_s: f64,
    /// Mean iteration time of high-priority jobs, s.
    pub high_iter_s: Option<f64>,
    /// Mean iteration time of low-priority jobs, s.
    pub low_iter_s: Option<f64>,
    /// Baseline's mean iteration time / this one's.
    pub gain_avg_iter: f64,
    /// Baseline's p99 iteration time / this one's.
    pub gain_p99_iter: f64,
    /// Baseline's mean JCT / this one's.
    pub gain_avg_jct: f64,
    /// Baseline's high-priority mean iteration time / this one's.
    pub gain_high_iter: Option<f64>,
}

/// The comparison as a table of formatted cells: a header row, then one row
/// per line; the priority columns only when some run has high-priority jobs.
/// Shared by the terminal and `report.html`.
pub fn comparison_table(comparison: &[Comparison]) -> Vec<Vec<String>> {
    let prio = comparison.iter().any(|c| c.high_iter_s.is_some());
    let mut header: Vec<&str> =
        vec!["scenario", "policy", "seeds", "avg it (s)", "x", "p99 it (s)", "x", "avg JCT (s)", "x", "makespan (s)"];
    if prio {
        header.extend(["high it (s)", "x", "low it (s)"]);
    }
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for c in comparison {
        let mut row = vec![
            c.scenario.clone(),
            c.policy.clone(),
            c.seeds.to_string(),
            format!("{:.3}", c.avg_iter_s),
            format!("{:.2}", c.gain_avg_iter),
            format!("{:.3}", c.p99_iter_s),
            format!("{:.2}", c.gain_p99_iter),
            format!("{:.0}", c.avg_jct_s),
            format!("{:.2}", c.gain_avg_jct),
            format!("{:.0}", c.makespan_s),
        ];
        if prio {
            row.extend([opt(c.high_iter_s, 3), opt(c.gain_high_iter, 2), opt(c.low_iter_s, 3)]);
        }
        rows.push(row);
    }
    rows
}

/// Per scenario, the first seed's jobs side by side (FORESIGHT Table I,
/// CASSINI Table 2): each job's iteration time alone (on the first policy's
/// placement), then its mean iteration time under each policy, ms. The jobs
/// are the same under every policy: workloads are drawn per seed.
pub fn job_tables(summary: &Summary) -> Vec<(String, Vec<Vec<String>>)> {
    let mut scenarios: Vec<&str> = Vec::new();
    for r in &summary.runs {
        if !scenarios.contains(&r.scenario.as_str()) {
            scenarios.push(&r.scenario);
        }
    }
    scenarios
        .into_iter()
        .map(|sc| {
            let runs: Vec<&Run> = summary.runs.iter().filter(|r| r.scenario == sc && r.seed == summary.seed).collect();
            let mut rows = vec![
                ["job", "model", "alone (ms)"]
                    .into_iter()
                    .map(String::from)
                    .chain(runs.iter().map(|r| format!("{} (ms)", r.policy)))
                    .collect::<Vec<_>>(),
            ];
            if let Some(first) = runs.first() {
                for (k, j) in first.jobs.iter().enumerate() {
                    let mut row = vec![j.id.clone(), j.model.clone(), format!("{:.0}", j.isolated_iter_ms)];
                    row.extend(
                        runs.iter().map(|r| r.jobs.get(k).map_or("-".into(), |x| format!("{:.0}", x.iter_mean_ms))),
                    );
                    rows.push(row);
                }
            }
            (sc.to_string(), rows)
        })
        .collect()
}

/// Averages runs over seeds per (scenario, policy) and divides the
/// baseline's numbers by each policy's. O(runs²) (runs are few).
pub fn compare(runs: &[Run], baseline: &str) -> Vec<Comparison> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in runs {
        let k = (r.scenario.clone(), r.policy.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mean = |xs: &[f64]| if xs.is_empty() { f64::NAN } else { xs.iter().sum::<f64>() / xs.len() as f64 };
    let line = |scenario: &str, policy: &str| {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.scenario == scenario && r.policy == policy).collect();
        let of = |f: &dyn Fn(&Run) -> f64| mean(&rs.iter().map(|r| f(r)).collect::<Vec<_>>());
        let prio = |high: bool| -> Option<f64> {
            let xs: Vec<f64> = rs
                .iter()
                .filter_map(|r| r.by_priority.as_ref())
                .map(|b| if high { b.high.avg_iter_s } else { b.low.avg_iter_s })
                .filter(|x| x.is_finite())
                .collect();
            (!xs.is_empty()).then(|| mean(&xs))
        };
        Comparison {
            scenario: scenario.to_string(),
            policy: policy.to_string(),
            seeds: rs.len(),
            avg_iter_s: of(&|r| r.metrics.avg_iter_s),
            p99_iter_s: of(&|r| r.metrics.p99_iter_s),
            avg_jct_s: of(&|r| r.metrics.avg_jct_s),
            makespan_s: of(&|r| r.metrics.makespan_s),
            high_iter_s: prio(true),
            low_iter_s: prio(false),
            gain_avg_iter: f64::NAN,
            gain_p99_iter: f64::NAN,
            gain_avg_jct: f64::NAN,
            gain_high_iter: None,
        }
    };
    let mut out: Vec<Comparison> = keys.iter().map(|(s, p)| line(s, p)).collect();
    for i in 0..out.len() {
        let Some(b) = out.iter().find(|c| c.scenario == out[i].scenario && c.policy == baseline).cloned() else {
            continue;
        };
        let c = &mut out[i];
        c.gain_avg_iter = b.avg_iter_s / c.avg_iter_s;
        c.gain_p99_iter = b.p99_iter_s / c.p99_iter_s;
        c.gain_avg_jct = b.avg_jct_s / c.avg_jct_s;
        c.gain_high_iter = b.high_iter_s.zip(c.high_iter_s).map(|(b, c)| b / c);
    }
    out
}

/// The built-in default experiment: 16 hosts of 4 A100s with 50 Gbit/s NICs
/// (CASSINI's NIC rate) in 4 racks under 2 spines at 2:1, and a Poisson
/// workload of 60 jobs from CASSINI's mix at load 0.8, comparing FIFO,
/// random placement and the ideal network.
pub const DEFAULT: &str = r#"
name = "default"
description = "orrery's built-in default: 16 hosts of 4 A100s with 50 Gbit/s NICs in 4 racks under 2 spines at 2:1 oversubscription, and 60 jobs from CASSINI's model mix arriving as a Poisson process at 80% load. FIFO with packed placement, random placement, and FIFO on an ideal (non-blocking) network show what the network costs. Try `orrery run experiments/cassini-poisson.toml` for a paper's experiment."
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
pub fn parse(file: &str, text: &str) -> Result<Experiment, ExperimentError> {
    let e: Experiment = orrery_model::setups::parse_config(file, text).map_err(|e| {
        let msg = e.to_string();
        if msg.contains(": workload.job: ") {
            format!(
                "{msg} (workload.job is a list of [[workload.job]] tables; for a number of generated jobs use `jobs`)"
            )
        } else {
            msg
        }
    })
    .map_err(ExperimentError::Invalid)?;
    let mut e = check(file, e).map_err(|msg| ExperimentError::Invalid(with_line(file, text, &msg)))?;
    if e.description.is_none() {
        e.description = leading_comment(text);
    }
    Ok(e)
}

/// The `#` comment lines at the top of a file, as one paragraph.
fn leading_comment(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim())
        .collect();
    let joined = lines.join(" ").trim().to_string();
    (!joined.is_empty()).then_some(joined)
}

/// Adds the line of the field an error names: `f.toml: workload.jobs: ...`
/// becomes `f.toml:7: workload.jobs: ...`.
fn with_line(file: &str, text: &str, msg: &str) -> String {
    let Some(rest) = msg.strip_prefix(&format!("{file}: ")) else { return msg.to_string() };
    let path: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || "._[]".contains(*c)).collect();
    match orrery_model::setups::line_of(text, &path) {
        Some(line) if !path.is_empty() => format!("{file}:{line}: {rest}"),
        _ => msg.to_string(),
    }
}

/// The checks serde cannot make, each error naming the file and field.
fn check(file: &str, e: Experiment) -> Result<Experiment, String> {
    let names = || orrery_policy::CATALOGUE.iter().map(|c| c.0).collect::<Vec<_>>().join(", ");
    if e.policies.is_empty() {
        return Err(format!("{file}: policies: expected at least one of {}", names()));
    }
    if let Some(p) = e.policies.iter().find(|p| policy(p, 0, &Default::default()).is_none()) {
        return Err(format!(
            "{file}: policies: unknown policy {p:?}; expected one of {} (see `orrery policies`)",
            names()
        ));
    }
    for (i, sc) in e.scenarios.iter().enumerate() {
        if sc.load.is_some_and(|l| !(l > 0.0 && l.is_finite())) {
            return Err(format!("{file}: scenario[{i}] ({}): load: expected a positive number", sc.name));
        }
        if e.scenarios[..i].iter().any(|o| o.name == sc.name) {
            return Err(format!("{file}: scenario[{i}]: name {:?} is used twice", sc.name));
        }
    }
    if let Some(b) = e.baseline.as_ref().filter(|b| !e.policies.contains(b)) {
        return Err(format!("{file}: baseline: {b:?} is not one of the policies"));
    }
    if let Some(h) = e.headline.as_ref().filter(|h| !e.policies.contains(h)) {
        return Err(format!("{file}: headline: {h:?} is not one of the policies"));
    }
    if e.seeds.is_empty() {
        return Err(format!("{file}: seeds: expected at least one seed"));
    }
    if !(e.sim.jitter >= 0.0 && e.sim.jitter < 1.0) {
        return Err(format!("{file}: sim.jitter: expected a fraction in [0, 1), found {}", e.sim.jitter));
    }
    // Numbers that size work or memory, checked before anything is allocated
    // (issue 21: `jobs = 9223372036854775807` aborted with "capacity overflow").
    let w = &e.workload;
    if w.high_priority.is_some() && w.generator.as_deref() != Some("pollux-sample") {
        return Err(format!("{file}: workload.high_priority: only read with generator = \"pollux-sample\""));
    }
    if let Some(n) = w.jobs.filter(|&n| n == 0 || n > MAX_JOBS) {
        return Err(format!("{file}: workload.jobs: expected 1 to {MAX_JOBS}, found {n}"));
    }

    let above_0 = |x: Option<f64>| x.is_none_or(|x| x.is_finite() && x > 0.0);
    let at_least_0 = |x: Option<f64>| x.is_none_or(|x| x.is_finite() && x >= 0.0);
    let (max_time, penalty) = (e.sim.max_time_s, Some(e.sim.restart_penalty_s));
    for (field, value, ok, expected) in [
        ("workload.load", w.load, above_0(w.load), "a finite number above 0"),
        ("workload.interarrival_s", w.interarrival_s, above_0(w.interarrival_s), "a finite number above 0"),
        (
            "workload.fragmentation",
            w.fragmentation,
            w.fragmentation.is_none_or(|f| (0.0..=1.0).contains(&f)),
            "a number from 0 to 1",
        ),
        (
            "workload.high_priority",
            w.high_priority,
            w.high_priority.is_none_or(|f| (0.0..=1.0).contains(&f)),
            "a number from 0 to 1",
        ),
        (
            "sim.max_time_s",
            max_time,
            max_time.is_none_or(|x| x.is_finite() && x > 0.0 && x <= 2.0 * orrery_model::job::MAX_ARRIVAL_S),
            "seconds above 0 and at most 8e9",
        ),
        ("sim.restart_penalty_s", penalty, at_least_0(penalty), "a finite number of at least 0"),
    ] {
        if !ok {
            return Err(format!("{file}: {field}: expected {expected}, found {}", value.unwrap_or(f64::NAN)));
        }
    }
    Ok(e)
}

/// A trace error as a message about the workload: a field's path goes
/// under `workload.` (`workload.mix.models: ...`).
fn in_workload(e: orrery_trace::TraceError) -> String {
    match e {
        orrery_trace::TraceError::Field { field, problem } => format!("workload.{field}: {problem}"),
        other => format!("workload: {other}"),
    }
}

/// The most jobs one workload may ask for (the full Philly trace has 82,247).
pub const MAX_JOBS: usize = 1_000_000;

/// A policy by name, with the experiment's pins ([`orrery_policy::with_pins`]).
fn policy(
    name: &str,
    seed: u64,
    pins: &std::collections::BTreeMap<String, Vec<(usize, u32)>>,
) -> Option<Box<dyn orrery_policy::Policy>> {
    orrery_policy::with_pins(name, seed, pins)
}

impl Experiment {
    /// Builds the topology; `base` resolves relative paths.
    pub fn topology(&self, base: &Path) -> Result<Topology, ExperimentError> {
        self.topology_with_background(base).map(|t| t.0)
    }

    /// The topology and the background flows of its congested links.
    pub fn topology_with_background(&self, base: &Path) -> Result<(Topology, Vec<(usize, f64)>), ExperimentError> {
        self.cluster(base).map_err(ExperimentError::Topology)
    }

    fn cluster(&self, base: &Path) -> Result<(Topology, Vec<(usize, f64)>), String> {
        let t = &self.topology;
        let topo = match (&t.builtin, &t.file, &t.leaf_spine) {
            (Some(name), None, None) => by_name(name)
                .or_else(|| orrery_trace::machines::builtin(name))
                .ok_or_else(|| format!("topology.builtin: unknown set-up {name:?} (see `orrery topo list`)")),
            (None, Some(file), None) => {
                let path = base.join(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|e| format!("topology.file: {}: {e}", path.display()))?;
                parse_topology(&path.display().to_string(), &text).map_err(|e| e.to_string())
            }
            (None, None, Some(ls)) => ls.build(&self.name).map_err(|e| format!("topology.leaf_spine: {e}")),
            _ => Err("topology: expected exactly one of builtin, file, leaf_spine".into()),
        }?;
        congest(topo, &t.congested).map_err(|e| format!("topology.{e}"))
    }

    /// The jobs for a seed and the hosts each is pinned to (the file's pins,
    /// or those a `fragmented` placement draws).
    pub fn jobs_and_pins(
        &self,
        base: &Path,
        topo: &Topology,
        seed: u64,
    ) -> Result<(Vec<JobSpec>, Pins), ExperimentError> {
        workload_jobs(&self.workload, base, topo, seed).map_err(ExperimentError::Workload)
    }

    /// The cluster, jobs and pins of one scenario (by name; `None` for an
    /// experiment without scenarios), with its own topology if it brings one.
    /// Scenarios that congest links are refused: only the simulator adds
    /// their background traffic.
    pub fn scenario(
        &self,
        name: Option<&str>,
        base: &Path,
        seed: u64,
    ) -> Result<(Topology, Vec<JobSpec>, Pins), ExperimentError> {
        let invalid = ExperimentError::Invalid;
        let names: Vec<&str> = self.scenarios.iter().map(|s| s.name.as_str()).collect();
        let sc = match (name, self.scenarios.is_empty()) {
            (None, true) => None,
            (None, false) => return Err(invalid(format!("scenario: expected one of {}", names.join(", ")))),
            (Some(n), _) => Some(
                self.scenarios
                    .iter()
                    .find(|s| s.name == n)
                    .ok_or_else(|| invalid(format!("scenario: {n:?} is not one of [{}]", names.join(", "))))?,
            ),
        };
        if let Some(sc) = sc.filter(|sc| !sc.congested.is_empty()) {
            return Err(invalid(format!(
                "scenario {}: it congests links with background traffic, which only the simulator adds",
                sc.name
            )));
        }
        let topo = match sc.and_then(|sc| sc.topology.as_ref()) {
            Some(t) => Experiment { topology: t.clone(), ..self.clone() }.topology(base)?,
            None => self.topology(base)?,
        };
        let workload = match sc {
            Some(sc) => self
                .workloads()
                .into_iter()
                .find(|w| w.0 == sc.name)
                .map(|w| w.1)
                .ok_or_else(|| invalid(format!("scenario {}: no workload", sc.name)))?,
            None => self.workload.clone(),
        };
        let (jobs, pins) = workload_jobs(&workload, base, &topo, seed).map_err(ExperimentError::Workload)?;
        Ok((topo, jobs, pins))
    }

    /// Builds the jobs for a seed.
    pub fn jobs(&self, base: &Path, topo: &Topology, seed: u64) -> Result<Vec<JobSpec>, ExperimentError> {
        self.jobs_and_pins(base, topo, seed).map(|w| w.0)
    }

    /// The workload of each scenario, with its label.
    pub fn workloads(&self) -> Vec<(String, WorkloadSpec)> {
        if self.scenarios.is_empty() {
            return vec![(workload_label(&self.workload), self.workload.clone())];
        }
        self.scenarios
            .iter()
            .map(|sc| {
                let mut w = self.workload.clone();
                if !sc.listed.is_empty() {
                    (w.listed, w.generator, w.trace) = (sc.listed.clone(), None, None);
                }
                if !sc.pins.is_empty() {
                    w.pins = sc.pins.clone();
                }
                if !sc.decisions.is_empty() {
                    w.decisions = sc.decisions.clone();
                }
                w.load = sc.load.or(w.load);
                w.fragmentation = sc.fragmentation.or(w.fragmentation);
                w.jobs = sc.jobs.or(w.jobs);
                if sc.mix.is_some() {
                    w.mix = sc.mix.clone();
                }
                (sc.name.clone(), w)
            })
            .collect()
    }
    /// The same experiment under other policies (`orrery run --policies`).
    /// The baseline stays if it is among them; otherwise the first is the
    /// baseline. Checked as a file's policies are.
    pub fn with_policies(mut self, file: &str, policies: Vec<String>) -> Result<Experiment, ExperimentError> {
        if self.baseline.as_ref().is_some_and(|b| !policies.contains(b)) {
            self.baseline = None;
        }
        if self.headline.as_ref().is_some_and(|h| !policies.contains(h)) {
            self.headline = None;
        }
        self.policies = policies;
        check(&format!("{file} (--policies)"), self).map_err(ExperimentError::Invalid)
    }

    /// The same experiment with `workload.jobs` set (`orrery run --jobs`):
    /// the first `jobs` of a trace, or that many generated. Checked as a
    /// file's value is.
    pub fn with_jobs(mut self, file: &str, jobs: usize) -> Result<Experiment, ExperimentError> {
        self.workload.jobs = Some(jobs);
        check(&format!("{file} (--jobs)"), self).map_err(ExperimentError::Invalid)
    }

    /// Runs every policy for every seed. `progress(run, runs, sim_s, finished, jobs)`.
    pub fn run(
        &self,
        base: &Path,
        progress: impl FnMut(usize, usize, f64, usize, usize) + Send,
    ) -> Result<Summary, ExperimentError> {
        use ExperimentError::{Invalid, Panicked, Topology as Cluster, Workload};
        let progress = Mutex::new(progress);
        let (topo, base_background) = self.topology_with_background(base)?;
        let total = self.seeds.len() * self.policies.len();
        let mut runs = Vec::new();
        let workloads = self.workloads();
        let total = total * workloads.len();
        // Gavel's measured interference, parsed once (1.2 MB of JSON).
        let gavel = orrery_trace::interference::gavel_samples(orrery_trace::interference::GAVEL_THROUGHPUTS)
            .map_err(|e| Invalid(format!("colocation: Gavel's measurements: {e}")))?;
        let base_topo = topo;
        for (k, (scenario, workload)) in workloads.iter().enumerate() {
            let congested = self.scenarios.get(k).map(|s| s.congested.as_slice()).unwrap_or_default();
            // A scenario may bring its own cluster (FORESIGHT's spine counts).
            let own = match self.scenarios.get(k).and_then(|s| s.topology.as_ref()) {
                Some(t) => {
                    let e = Experiment { topology: t.clone(), ..self.clone() };
                    Some(e.cluster(base).map_err(|e| Cluster(format!("scenario {scenario}: {e}")))?.0)
                }
                None => None,
            };
            let (topo, mut background) = congest(own.unwrap_or_else(|| base_topo.clone()), congested)
                .map_err(|e| Cluster(format!("scenario {scenario}: {e}")))?;
            background.extend_from_slice(&base_background);
            let mut sharing = self.colocation.clone();
            if let Some(sc) = self.scenarios.get(k) {
                sharing.xi = sc.xi.unwrap_or(sharing.xi);
                sharing.mode = sc.sharing.unwrap_or(sharing.mode);
            }
            let (truth, estimate) = sharing.build(&gavel).map_err(|e| Invalid(format!("scenario {scenario}: {e}")))?;
            for &seed in &self.seeds {
                let (jobs, pins) = workload_jobs(workload, base, &topo, seed)
                    .map_err(|e| Workload(format!("scenario {scenario}: {e}")))?;
                // A pinned policy places only the jobs with a pin; the rest
                // would wait forever.
                if let Some(p) = self.policies.iter().find(|p| orrery_policy::PINNED_NAMES.contains(&p.as_str()))
                    && let Some(j) = jobs.iter().find(|j| !pins.contains_key(&j.id))
                {
                    return Err(Workload(format!(
                        "scenario {scenario}: workload.pins: policy {p:?} places each job where its pin says; job {:?} has no pin",
                        j.id
                    )));
                }
                let script =
                    scripted(&workload.decisions, &jobs).map_err(|e| Invalid(format!("scenario {scenario}: {e}")))?;
                // The policies run side by side, one per core; each run is
                // seeded on its own, so the results do not depend on it.
                let first_k = runs.len();
                let next = AtomicUsize::new(0);
                let results: Mutex<Vec<Option<Result<Run, ExperimentError>>>> =
                    Mutex::new((0..self.policies.len()).map(|_| None).collect());
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(self.policies.len());
                let unknown = |name: &str| Invalid(format!("policies: unknown policy {name:?}"));
                let one = |i: usize| -> Result<Run, ExperimentError> {
                    let name = &self.policies[i];
                    let mut policy = policy(name, seed, &pins).ok_or_else(|| unknown(name))?;
                    policy.set_colocation(&estimate);
                    let cfg = SimConfig {
                        seed,
                        jitter: self.sim.jitter,
                        max_time_s: self.sim.max_time_s,
                        skip: self.sim.skip,
                        restart_penalty_s: self.sim.restart_penalty_s,
                        background: background.clone(),
                        probe: None,
                        colocation: truth.clone(),
                        ring_steps: self.sim.all_reduce == AllReduce::Steps,
                        record_iterations: self.iterations,
                    };
                    let start = std::time::Instant::now();
                    let mut sim = Simulation::new(&topo, &jobs, cfg.clone(), policy.isolated_network());
                    script.apply(&mut sim);
                    let k = first_k + i;
                    sim.run(policy.as_mut(), &mut |t, done| {
                        if let Ok(mut p) = progress.lock() {
                            p(k, total, t, done, jobs.len());
                        }
                    });
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
                        (r.policy, r.seed, r.scenario) = (policy.name(), seed, scenario.clone());
                    }
                    for r in &mut link_table {
                        (r.policy, r.seed, r.scenario) = (policy.name(), seed, scenario.clone());
                    }
                    let mut run = Run {
                        policy: policy.name(),
                        scenario: scenario.clone(),
                        setup: format!("{} on {}", workload_source(workload), topo.name),
                        seed,
                        fidelity: if self.sim.skip { "iteration+skip" } else { "iteration" },
                        skipped_iterations: sim.jobs.iter().map(|j| j.skipped_iterations).sum(),
                        metrics: m,
                        by_priority,
                        events: sim.events_processed,
                        wall_s,
                        invalid_decisions: sim.invalid_decisions,
                        reschedules_cut: sim.reschedules_cut,
                        jobs: job_table,
                        links: link_table,
                        iterations: sim
                            .jobs
                            .iter()
                            .flat_map(|j| {
                                j.iterations.iter().map(|r| IterationRow {
                                    policy: policy.name(),
                                    scenario: scenario.clone(),
                                    seed,
                                    job: j.spec.id.clone(),
                                    iteration: r.iteration,
                                    due_s: r.due_s,
                                    start_s: r.start_s,
                                    end_s: r.end_s,
                                    delay_ms: r.delay_ms,
                                    throttle_gbps: r.throttle_gbps,
                                    routes: r.routes.clone(),
                                })
                            })
                            .collect(),
                        iteration_s: {
                            let mut all = orrery_sim::durations::Durations::new();
                            sim.jobs.iter().for_each(|j| all.merge(&j.iteration_ms));
                            all.sample(2000).into_iter().map(|ms| ms / 1e3).collect()
                        },
                        busiest: None,
                        counters: policy.counters().into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                    };
                    if self.detail && seed == self.seeds[0] {
                        let mut fresh = self::policy(name, seed, &pins).ok_or_else(|| unknown(name))?;
                        fresh.set_colocation(&estimate);
                        run.busiest = crate::report::busiest(&topo, &jobs, &run, fresh, &cfg, &script);
                    }
                    Ok(run)
                };
                std::thread::scope(|s| {
                    for _ in 0..threads {
                        s.spawn(|| {
                            loop {
                                let i = next.fetch_add(1, Ordering::Relaxed);
                                if i >= self.policies.len() {
                                    break;
                                }
                                // A panic is a bug; it becomes an error naming
                                // the run instead of tearing the scope down.
                                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(i)))
                                    .unwrap_or_else(|payload| {
                                        let message = payload
                                            .downcast_ref::<&str>()
                                            .map(|s| s.to_string())
                                            .or_else(|| payload.downcast_ref::<String>().cloned())
                                            .unwrap_or_else(|| "no message".into());
                                        Err(Panicked {
                                            scenario: scenario.clone(),
                                            policy: self.policies[i].clone(),
                                            seed,
                                            message,
                                        })
                                    });
                                if let Ok(mut all) = results.lock() {
                                    all[i] = Some(r);
                                }
                            }
                        });
                    }
                });
                let lost = || Invalid(format!("scenario {scenario}, seed {seed}: a run's result was lost"));
                for r in results.into_inner().map_err(|_| lost())? {
                    runs.push(r.ok_or_else(lost)??);
                }
            }
        }
        let baseline = self.baseline.clone().unwrap_or_else(|| self.policies[0].clone());
        // The baseline is named as the policy reports itself.
        let baseline = policy(&baseline, 0, &self.workload.pins).map_or(baseline, |p| p.name());
        let comparison = compare(&runs, &baseline);
        let headline =
            self.headline.as_ref().map(|h| policy(h, 0, &self.workload.pins).map_or(h.clone(), |p| p.name()));
        Ok(Summary {
            experiment: self.name.clone(),
            description: self.description.clone(),
            paper: self.paper.clone(),
            headline,
            seed: self.seeds[0],
            runs,
            baseline,
            comparison,
        })
    }
}

/// Where a workload's jobs come from, for reports.
fn workload_source(w: &WorkloadSpec) -> String {
    match (&w.generator, &w.trace) {
        (Some(g), _) => format!("{g} x{}", w.jobs.unwrap_or(60)),
        (_, Some(t)) => t.display().to_string(),
        _ if !w.listed.is_empty() => format!("{} listed jobs", w.listed.len()),
        _ => "workload".into(),
    }
}

/// The scenario label of a workload without named scenarios: `load=0.8` for
/// generated arrivals, else its source.
fn workload_label(w: &WorkloadSpec) -> String {
    match (&w.generator, w.load) {
        (Some(g), Some(l)) if g == "poisson" || g == "pollux-sample" => format!("load={l}"),
        (Some(g), None) if g == "poisson" => "load=0.8".into(),
        _ => workload_source(w),
    }
}

/// The jobs of a workload for a seed; `base` resolves relative paths.
/// Job id → GPUs per host.
pub type Pins = std::collections::BTreeMap<String, Vec<(usize, u32)>>;

/// The jobs of a workload for a seed and their pins (the file's, or those a
/// `fragmented` placement draws); `base` resolves relative paths.
fn workload_jobs(w: &WorkloadSpec, base: &Path, topo: &Topology, seed: u64) -> Result<(Vec<JobSpec>, Pins), String> {
    let (jobs, pins) = generate_workload(w, base, topo, seed)?;
    check_workload(&jobs, &pins, topo).map_err(|e| format!("workload: {e}"))?;
    Ok((jobs, pins))
}

/// What no run could do anything sensible with, whatever the policy: a
/// duplicate job id, an arrival that is not a finite time, a job that can
/// never fit the cluster (more GPUs than it has, or a worker larger than its
/// largest host), a dependency on itself, on a missing job or in a cycle, a
/// pin to a missing host or job, or beyond a host's GPUs. O(jobs + deps).
pub(crate) fn check_workload(jobs: &[JobSpec], pins: &Pins, topo: &Topology) -> Result<(), String> {
    let total = u64::from(topo.gpu_count());
    let largest = topo.hosts.iter().map(|h| h.gpus).max().unwrap_or(0);
    let mut index: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(jobs.len());
    for (i, j) in jobs.iter().enumerate() {
        if let Some(first) = index.insert(j.id.as_str(), i) {
            return Err(format!("job id {:?} is used twice (jobs {} and {})", j.id, first + 1, i + 1));
        }
        // The limits every reader applies (sizes, times, iterations, model).
        if let Err(b) = j.check() {
            return Err(format!("job {}: {}: expected {}, found {}", j.id, b.field, b.expected, b.found));
        }
        let wanted = u64::from(j.workers) * u64::from(j.gpus_per_worker);
        if wanted > total {
            return Err(format!("job {} asks for {wanted} GPUs; the cluster {} has {total}", j.id, topo.name));
        }
        if j.gpus_per_worker > largest {
            return Err(format!(
                "job {}: a worker asks for {} GPUs; the largest host of {} has {largest}",
                j.id, j.gpus_per_worker, topo.name
            ));
        }
        // A job counted in iterations runs at most MAX_TIME_S alone, as one
        // counted in seconds does: jobs that share links are simulated
        // iteration by iteration, so 4·10⁹ iterations would never end.
        // Only long jobs are placed to find their period (a million
        // iterations stay under ten years unless one lasts over 5 minutes).
        if let orrery_model::Work::Iterations(n) = j.work
            && n >= 1_000_000
        {
            let alone = orrery_policy::baseline::isolated_seconds_on(topo, j);
            if alone > orrery_model::job::MAX_TIME_S {
                return Err(format!(
                    "job {}: work.iterations: {n} iterations of {:.1} ms run {:.0} years alone on {}; expected at most {:.0} years",
                    j.id,
                    alone / n as f64 * 1e3,
                    alone / (365.25 * 86_400.0),
                    topo.name,
                    orrery_model::job::MAX_TIME_S / (365.25 * 86_400.0)
                ));
            }
        }
    }
    // Dependencies: named, not the job itself, and no cycle (Kahn's order).
    let mut waiting_on = vec![0usize; jobs.len()];
    let mut unlocks: Vec<Vec<usize>> = vec![Vec::new(); jobs.len()];
    for (i, j) in jobs.iter().enumerate() {
        for d in &j.depends_on {
            let &k = index.get(d.as_str()).ok_or_else(|| format!("job {}: depends_on {d:?}: no such job", j.id))?;
            if k == i {
                return Err(format!("job {}: depends_on itself", j.id));
            }
            waiting_on[i] += 1;
            unlocks[k].push(i);
        }
    }
    let mut ready: Vec<usize> = (0..jobs.len()).filter(|&i| waiting_on[i] == 0).collect();
    let mut ordered = 0;
    while let Some(k) = ready.pop() {
        ordered += 1;
        for &i in &unlocks[k] {
            waiting_on[i] -= 1;
            if waiting_on[i] == 0 {
                ready.push(i);
            }
        }
    }
    if ordered < jobs.len() {
        let stuck: Vec<&str> = (0..jobs.len()).filter(|&i| waiting_on[i] > 0).map(|i| jobs[i].id.as_str()).collect();
        return Err(format!("depends_on: jobs {} can never start: their dependencies form a cycle", stuck.join(", ")));
    }
    for (job, hosts) in pins {
        if !index.contains_key(job.as_str()) {
            return Err(format!("pins: {job:?}: no such job"));
        }
        for &(h, gpus) in hosts {
            let host = topo.hosts.get(h).ok_or_else(|| {
                format!("pins: {job}: host {h}: {} has hosts 0 to {}", topo.name, topo.hosts.len().saturating_sub(1))
            })?;
            if gpus > host.gpus {
                return Err(format!("pins: {job}: host {h}: {gpus} GPUs; it has {}", host.gpus));
            }
        }
    }
    Ok(())
}

fn generate_workload(
    w: &WorkloadSpec,
    base: &Path,
    topo: &Topology,
    seed: u64,
) -> Result<(Vec<JobSpec>, Pins), String> {
    if w.generator.as_deref() == Some("fragmented") {
        let rack_of: Vec<usize> = orrery_policy::foresight::logical::LogicalNetwork::of(topo)
            .ok_or("workload.generator fragmented: expected a leaf-spine topology")?
            .leaf_of_host;
        let mix = w.mix.clone().unwrap_or_default();
        let target = w.fragmentation.unwrap_or(0.5);
        return orrery_trace::generate::fragmented(&rack_of, w.jobs.unwrap_or(usize::MAX), target, &mix, seed)
            .map_err(in_workload);
    }
    if w.generator.as_deref() == Some("pollux-sample") {
        // Castor §9.1: `jobs` (240) × `load` jobs of Pollux's Philly sample.
        let n = (w.jobs.unwrap_or(240) as f64 * w.load.unwrap_or(1.0)).round() as usize;
        let population = orrery_trace::castor::pollux_population().map_err(in_workload)?;
        let mut jobs = orrery_trace::castor::sample_jobs(&population, n, seed).map_err(in_workload)?;
        if let Some(series) = &w.arrivals {
            let path = base.join(series);
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("workload.arrivals: {}: {e}", path.display()))?;
            let parsed = orrery_trace::castor::venus_series(&path.display().to_string(), &text);
            if let Some(e) = parsed.errors.first() {
                return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
            }
            let bins = orrery_trace::castor::busiest_window(&parsed.items, 8.0 * 3600.0);
            orrery_trace::castor::shape_arrivals(&mut jobs, &bins, seed)
                .map_err(|e| format!("workload.arrivals: {e}"))?;
        }
        if let Some(fraction) = w.high_priority {
            orrery_trace::castor::mark_high_priority(&mut jobs, fraction, seed).map_err(in_workload)?;
        }
        return Ok((jobs, w.pins.clone()));
    }
    if w.generator.as_deref() == Some("components") {
        let trace = w.trace.as_ref().ok_or("workload.generator components: expected a pod list in workload.trace")?;
        let path = base.join(trace);
        let (_, parsed) = orrery_trace::read_file(&path, w.format, seed);
        if let Some(e) = parsed.errors.first() {
            return Err(format!("{e} ({} bad rows in all)", parsed.errors.len()));
        }
        let mix = w.mix.clone().unwrap_or_default();
        let jobs = orrery_trace::generate::components(
            &parsed.items,
            w.jobs.unwrap_or(60),
            w.interarrival_s.unwrap_or(15.0),
            &mix,
            seed,
        )
        .map_err(in_workload)?;
        return Ok((jobs, w.pins.clone()));
    }
    workload_jobs_only(w, base, topo, seed).map(|j| (j, w.pins.clone()))
}

/// The jobs of a workload for a seed; `base` resolves relative paths.
fn workload_jobs_only(w: &WorkloadSpec, base: &Path, topo: &Topology, seed: u64) -> Result<Vec<JobSpec>, String> {
    let mix = w.mix.clone().unwrap_or_default();
    if !w.listed.is_empty() {
        if w.generator.is_some() || w.trace.is_some() {
            return Err("workload: give [[workload.job]] entries or a generator or a trace, not several".into());
        }
        for (i, j) in w.listed.iter().enumerate() {
            if let Err(b) = orrery_trace::formats::jsonl::validate(j) {
                return Err(format!(
                    "workload.job[{i}] ({}): {}: expected {}, found {}",
                    j.id, b.field, b.expected, b.found
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
                    poisson(n, w.load.unwrap_or(0.8), topo.gpu_count(), &mix, &ctx, seed).map_err(in_workload)
                }
                "snapshot" => snapshot(n, &mix, seed).map_err(in_workload),
                other => Err(format!(
                    "workload.generator: expected poisson, snapshot, fragmented, components or pollux-sample, found {other:?}"
                )),
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

/// Writes `summary.json`, `jobs.csv`, `links.csv`, the figures and
/// `report.html` into `dir`, each file atomically (written aside and renamed).
pub fn write(summary: &Summary, dir: &Path) -> Result<(), ExperimentError> {
    let write = |path: PathBuf, bytes: &[u8]| {
        orrery_model::files::write_atomic(&path, bytes).map_err(|source| ExperimentError::Write { path, source })
    };
    std::fs::create_dir_all(dir).map_err(|source| ExperimentError::Write { path: dir.to_path_buf(), source })?;
    let p = dir.join("summary.json");
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| ExperimentError::Serialise { path: p.clone(), message: e.to_string() })?;
    write(p, (json + "\n").as_bytes())?;
    fn csv_of<'a, T: Serialize + 'a>(
        path: &Path,
        rows: impl Iterator<Item = &'a T>,
    ) -> Result<Vec<u8>, ExperimentError> {
        let bad =
            |e: &dyn std::fmt::Display| ExperimentError::Serialise { path: path.to_path_buf(), message: e.to_string() };
        let mut w = csv::Writer::from_writer(Vec::new());
        for row in rows {
            w.serialize(row).map_err(|e| bad(&e))?;
        }
        w.into_inner().map_err(|e| bad(&e))
    }
    let p = dir.join("jobs.csv");
    write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.jobs))?)?;
    let p = dir.join("links.csv");
    write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.links))?)?;
    if summary.runs.iter().any(|r| !r.iterations.is_empty()) {
        let p = dir.join("iterations.csv");
        write(p.clone(), &csv_of(&p, summary.runs.iter().flat_map(|r| &r.iterations))?)?;
    }
    let figures = crate::report::figures(summary, dir)?;
    write(dir.join("report.html"), crate::report::html(summary, &figures).as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_experiment_parses() {
        let e = parse("default", DEFAULT).expect("valid");
        assert_eq!(e.policies, vec!["fifo", "random", "ideal"]);
        assert_eq!(e.topology(Path::new(".")).map(|t| t.gpu_count()).ok(), Some(64));
    }

    #[test]
    fn a_share_of_pollux_sample_jobs_is_high_priority() {
        let file = |share: &str| {
            format!(
                "name = \"hp\"\npolicies = [\"castor\"]\n[topology]\nbuiltin = \"castor\"\n\
                 [workload]\ngenerator = \"pollux-sample\"\njobs = 400\nhigh_priority = {share}\n"
            )
        };
        let e = parse("hp.toml", &file("0.15")).expect("valid");
        let high = |seed| {
            let (_, jobs, _) = e.scenario(None, Path::new("."), seed).expect("jobs");
            let n = jobs.iter().filter(|j| j.priority == orrery_model::Priority::High).count();
            (n, jobs.len())
        };
        // 400 Bernoulli(0.15) draws: mean 60, standard deviation 7.1.
        let (n, total) = high(1);
        assert_eq!(total, 400);
        assert!((39..=81).contains(&n), "{n} of 400 high priority");
        assert_ne!(high(1), high(2), "drawn per seed");
        let Err(err) = parse("hp.toml", &file("1.5")).map_err(|e| e.to_string()) else { panic!("out of range") };
        assert_eq!(err, "hp.toml:8: workload.high_priority: expected a number from 0 to 1, found 1.5");
        let other = file("0.1").replace("pollux-sample", "poisson");
        let Err(err) = parse("hp.toml", &other).map_err(|e| e.to_string()) else { panic!("not read by poisson") };
        assert!(err.contains("workload.high_priority: only read with generator = \"pollux-sample\""), "{err}");
    }

    #[test]
    fn every_shipped_experiment_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).expect("experiments/") {
            let p = entry.expect("entry").path();
            if p.extension().is_some_and(|e| e == "toml") {
                let text = std::fs::read_to_string(&p).expect("read");
                // `kind = "auction-scale"` files are `orrery scale`'s, not simulations.
                if text.contains("kind = \"auction-scale\"") {
                    continue;
                }
                let e = parse(&p.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
                // Every scenario's jobs pass the workload checks for the first seed.
                let names: Vec<Option<&str>> = if e.scenarios.is_empty() {
                    vec![None]
                } else {
                    e.scenarios.iter().filter(|s| s.congested.is_empty()).map(|s| Some(s.name.as_str())).collect()
                };
                for name in names {
                    match e.scenario(name, &dir, e.seeds.first().copied().unwrap_or(1)) {
                        Ok(_) => {}
                        // Experiments on ../shared/data skip where it is absent.
                        Err(msg) if msg.to_string().contains("No such file") => eprintln!("skipped: {msg}"),
                        Err(msg) => panic!("{}: {name:?}: {msg}", p.display()),
                    }
                }
                n += 1;
            }
        }
        assert!(n >= 20, "{n} experiments");
    }

    #[test]
    fn workloads_no_run_could_serve_are_refused_with_the_reason() {
        let topo = orrery_model::setups::cassini(); // 24 hosts of 1 A100
        let job =
            |id: &str, workers: u32| JobSpec::new(id, "vgg16", 32, workers, orrery_model::Work::Iterations(10), 0.0);
        let check = |jobs: &[JobSpec], pins: &Pins| check_workload(jobs, pins, &topo).expect_err("refused").to_string();
        let none = Pins::new();
        assert_eq!(check(&[job("a", 1), job("a", 2)], &none), "job id \"a\" is used twice (jobs 1 and 2)");
        assert_eq!(check(&[job("big", 25)], &none), "job big asks for 25 GPUs; the cluster cassini has 24");
        let mut wide = job("wide", 1);
        wide.gpus_per_worker = 2;
        assert_eq!(check(&[wide], &none), "job wide: a worker asks for 2 GPUs; the largest host of cassini has 1");
        let mut endless = job("endless", 1);
        endless.work = orrery_model::Work::Iterations(u64::MAX);
        assert_eq!(
            check(&[endless], &none),
            "job endless: work: expected 1 to 10000000000 iterations, found 18446744073709551615"
        );
        let mut forever = job("forever", 1);
        forever.work = orrery_model::Work::Seconds(1e300);
        assert_eq!(
            check(&[forever], &none),
            "job forever: work: expected 0 to 3.15576e8 s of run time (ten years), found 1e300"
        );
        // The issue's hang: 2³² − 1 iterations of a job that shares links.
        let mut ages = job("ages", 2);
        ages.work = orrery_model::Work::Iterations(4_294_967_295);
        let e = check(&[ages], &none);
        assert!(
            e.starts_with("job ages: work.iterations: 4294967295 iterations of ")
                && e.ends_with("expected at most 10 years"),
            "{e}"
        );
        let mut long = job("long", 2);
        long.work = orrery_model::Work::Iterations(1_000_000);
        assert!(check_workload(&[long], &none, &topo).is_ok());
        let mut late = job("late", 1);
        late.arrival_s = f64::NAN;
        assert_eq!(check(&[late], &none), "job late: arrival_s: expected seconds from 0 to 4e9, found NaN");
        let dep =
            |id: &str, on: &[&str]| JobSpec { depends_on: on.iter().map(|s| s.to_string()).collect(), ..job(id, 1) };
        assert_eq!(check(&[dep("a", &["a"])], &none), "job a: depends_on itself");
        assert_eq!(check(&[dep("a", &["zz"])], &none), "job a: depends_on \"zz\": no such job");
        assert_eq!(
            check(&[dep("a", &["c"]), dep("b", &["a"]), dep("c", &["b"]), dep("d", &[]), dep("e", &["d"])], &none),
            "depends_on: jobs a, b, c can never start: their dependencies form a cycle"
        );
        assert!(check_workload(&[dep("a", &[]), dep("b", &["a"]), dep("c", &["a", "b"])], &none, &topo).is_ok());
        let pins: Pins = [("a".to_string(), vec![(99, 1)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: a: host 99: cassini has hosts 0 to 23");
        let pins: Pins = [("a".to_string(), vec![(0, 2)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: a: host 0: 2 GPUs; it has 1");
        let pins: Pins = [("q".to_string(), vec![(0, 1)])].into_iter().collect();
        assert_eq!(check(&[job("a", 1)], &pins), "pins: \"q\": no such job");
    }

    #[test]
    fn other_policies_keep_the_baseline_when_they_can() {
        let text = "name = \"x\"\npolicies = [\"fifo\", \"sjf\"]\nbaseline = \"sjf\"\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n";
        let e = parse("x.toml", text).expect("valid");
        let kept = e.clone().with_policies("x.toml", vec!["random".into(), "sjf".into()]).expect("valid");
        assert_eq!((kept.policies.len(), kept.baseline.as_deref()), (2, Some("sjf")));
        let first = e.clone().with_policies("x.toml", vec!["random".into(), "ideal".into()]).expect("valid");
        assert_eq!(first.baseline, None, "the first policy is the baseline");
        let bad = e.with_policies("x.toml", vec!["magic".into()]).expect_err("unknown").to_string();
        assert!(bad.starts_with("x.toml (--policies): policies: unknown policy \"magic\""), "{bad}");
    }

    #[test]
    fn a_pinned_policy_needs_a_pin_for_every_job() {
        // Issue 41: `pinned` without pins placed nothing, so 0 of 2 jobs
        // finished, and the run exited 0.
        let text = "name = \"p\"\npolicies = [\"pinned\"]\n[topology]\nbuiltin = \"cassini\"\n\
                    [workload]\ngenerator = \"snapshot\"\njobs = 2\n";
        let e = parse("p.toml", text).expect("parses").run(Path::new("."), |_, _, _, _, _| {}).expect_err("no pins");
        assert_eq!(
            e.to_string(),
            "scenario snapshot x2: workload.pins: policy \"pinned\" places each job where its pin says; job \"job-0\" has no pin"
        );
    }

    #[test]
    fn bad_experiments_name_the_field() {
        let e = parse("x.toml", "name = \"x\"\npolicies = [\"magic\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect_err("bad policy").to_string();
        assert!(e.contains("unknown policy \"magic\""), "{e}");
        let e = parse(
            "y.toml",
            "name = \"y\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\njobs = \"ten\"\n",
        )
        .expect_err("bad type")
        .to_string();
        assert!(e.starts_with("y.toml:6:"), "{e}");
        let e = parse("z.toml", "name = \"z\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"nope\"\n[workload]\ngenerator = \"poisson\"\n")
            .expect("parses")
            .topology(Path::new("."))
            .expect_err("unknown topology").to_string();
        assert!(e.contains("unknown set-up \"nope\""), "{e}");
        // Issue 21: sizes and times are range-checked before anything runs.
        let head = "name = \"w\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n";
        for (body, expected) in [
            (
                "[workload]\ngenerator = \"poisson\"\njobs = 9223372036854775807\n",
                "w.toml:7: workload.jobs: expected 1 to 1000000, found 9223372036854775807",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\nload = -0.5\n",
                "w.toml:7: workload.load: expected a finite number above 0, found -0.5",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\nload = nan\n",
                "w.toml:7: workload.load: expected a finite number above 0, found NaN",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nmax_time_s = -1.0\n",
                "w.toml:8: sim.max_time_s: expected seconds above 0 and at most 8e9, found -1",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nmax_time_s = 0\n",
                "w.toml:8: sim.max_time_s: expected seconds above 0 and at most 8e9, found 0",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\njobs = 0\n",
                "w.toml:7: workload.jobs: expected 1 to 1000000, found 0",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[sim]\nrestart_penalty_s = inf\n",
                "w.toml:8: sim.restart_penalty_s: expected a finite number of at least 0, found inf",
            ),
            (
                "[workload]\ngenerator = \"poisson\"\n[[scenario]]\nname = \"a\"\n[[scenario]]\nname = \"b\"\nload = -2\n",
                "w.toml:9: scenario[1] (b): load: expected a positive number",
            ),
        ] {
            assert_eq!(parse("w.toml", &format!("{head}{body}")).expect_err(body).to_string(), expected);
        }
        let e = parse("j.toml", &format!("{head}[workload]\ngenerator = \"poisson\"\njob = 40\n"))
            .expect_err("job = 40")
            .to_string();
        assert!(
            e.starts_with("j.toml:7:7: workload.job: invalid type: integer `40`, expected a sequence")
                && e.ends_with("for a number of generated jobs use `jobs`)"),
            "{e}"
        );
        let text = "name = \"w\"\nseeds = []\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\n";
        assert_eq!(
            parse("w.toml", text).expect_err("no seeds").to_string(),
            "w.toml:2: seeds: expected at least one seed"
        );
    }

    #[test]
    fn every_iteration_is_written_with_the_delay_it_was_given() {
        // CASSINI's §2.2 pair: under `pinned+cassini` the second job is
        // aligned once, so exactly one of its iterations starts late; under
        // `pinned` none does. Each iteration is due when the previous ends.
        let mut e = parse("cassini-pair", include_str!("../../../experiments/cassini-pair.toml")).expect("valid");
        e.iterations = true;
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        for run in &summary.runs {
            assert_eq!(run.iterations.len(), 2 * 500, "{}", run.policy);
            for job in ["a", "b"] {
                let rows: Vec<&IterationRow> = run.iterations.iter().filter(|r| r.job == job).collect();
                for w in rows.windows(2) {
                    assert_eq!(w[1].iteration, w[0].iteration + 1);
                    assert!((w[1].due_s - w[0].end_s).abs() < 1e-9, "{job}: {:?} then {:?}", w[0], w[1]);
                }
                for r in &rows {
                    assert!(r.due_s <= r.start_s && r.start_s < r.end_s, "{r:?}");
                    assert!((r.delay_ms - (r.start_s - r.due_s) * 1e3).abs() < 1e-6, "{r:?}");
                    assert!(r.throttle_gbps.is_none() && r.routes.is_empty());
                }
                let delayed = rows.iter().filter(|r| r.delay_ms > 0.0).count();
                let want = usize::from(run.policy == "pinned+cassini" && job == "b");
                assert_eq!(delayed, want, "{} {job}", run.policy);
            }
        }
        let dir_guard = tempfile::tempdir().expect("temp dir");
        let dir = dir_guard.path().to_path_buf();
        write(&summary, &dir).expect("written");
        let csv = std::fs::read_to_string(dir.join("iterations.csv")).expect("iterations.csv");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            csv.starts_with("policy,scenario,seed,job,iteration,due_s,start_s,end_s,delay_ms,throttle_gbps,routes\n")
        );
        assert_eq!(csv.lines().count(), 1 + 2 * 1000);
    }

    #[test]
    fn decisions_due_at_an_iteration_take_only_per_iteration_kinds() {
        let jobs = vec![JobSpec::new("a", "resnet50", 32, 2, orrery_model::Work::Iterations(10), 0.0)];
        let one = |v: serde_json::Value| scripted(&[v], &jobs);
        let route =
            serde_json::json!({"at_iteration": 3, "job": "a", "kind": "route", "flow": 1, "step": 2, "paths": [0]});
        let s = one(route).expect("a route for step 2 of iteration 3");
        assert!(s.at_time.is_empty());
        assert_eq!((s.at_iteration[0].0, s.at_iteration[0].1, s.at_iteration[0].2), (0, 3, Some(2)));
        let err = |v: serde_json::Value| one(v).expect_err("refused").to_string();
        assert_eq!(
            err(serde_json::json!({"at_iteration": 3, "job": "a", "kind": "pause"})),
            "workload.decision[0]: kind: expected shift, throttle or route with at_iteration, found \"pause\""
        );
        assert_eq!(
            err(serde_json::json!({"at_iteration": 1, "job": "a", "kind": "shift", "ms": 5, "step": 0})),
            "workload.decision[0]: step: expected only on a route"
        );
        assert_eq!(
            err(serde_json::json!({"at_s": 1.0, "at_iteration": 1, "job": "a", "kind": "shift", "ms": 5})),
            "workload.decision[0]: at_s: expected either at_s or at_iteration, not both"
        );
        assert_eq!(
            err(serde_json::json!({"at_iteration": -1, "job": "a", "kind": "shift", "ms": 5})),
            "workload.decision[0]: at_iteration: expected an iteration number, 0 or more"
        );
    }

    #[test]
    fn a_job_with_a_measured_shape_runs_it() {
        // 4 workers on the 4 hosts of one rack at 50 Gbit/s; 100 ms of
        // compute and a 100 MB ring all-reduce in 2 layers. Each worker puts
        // 2·3/4 · 100 MB = 150 MB = 1.2 Gbit on the wire: 24 ms at 50 Gbit/s.
        // Alone the iteration takes 100 + 24 = 124 ms.
        let text = "name = \"m\"\npolicies = [\"fifo\"]\n[topology.leaf_spine]\nracks = 1\nhosts_per_rack = 4\nspines = 1\ngpus_per_host = 1\ngpu_type = \"a100\"\nhost_gbps = 50.0\nuplink_gbps = 50.0\n[[workload.job]]\nid = \"measured\"\nmodel = \"my-net\"\nworkers = 4\nwork = { iterations = 20 }\narrival_s = 0.0\n[workload.job.shape]\ncompute_ms = 100.0\n[[workload.job.shape.collective]]\nkind = \"ring_all_reduce\"\nbytes = 1e8\nlayers = 2\n";
        let e = parse("m.toml", text).expect("valid");
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        let m = &summary.runs[0].metrics;
        assert_eq!(m.finished, 1);
        assert!((m.avg_iter_s - 0.124).abs() < 1e-6, "iteration {} s", m.avg_iter_s);
        // A label that is not a zoo model needs a shape; a bad shape is named.
        let no_shape = text.split("[workload.job.shape]").next().expect("head");
        let err = parse("m.toml", no_shape)
            .expect("parses")
            .run(Path::new("."), |_, _, _, _, _| {})
            .expect_err("no model")
            .to_string();
        assert!(err.contains("workload.job[0] (measured): model: expected a model of the zoo"), "{err}");
        let bad = parse("m.toml", &text.replace("bytes = 1e8", "bytes = -1.0")).expect("parses");
        let err = bad.run(Path::new("."), |_, _, _, _, _| {}).expect_err("negative bytes").to_string();
        assert!(
            err.contains("shape.collective.bytes: expected a size in bytes, 0 or more, found collective[0]: -1.0"),
            "{err}"
        );
    }

    #[test]
    fn scenarios_vary_the_workload_and_bad_ones_are_named() {
        let base = "name = \"s\"\npolicies = [\"fifo\", \"themis\"]\nbaseline = \"themis\"\n[topology]\nbuiltin = \"metronome\"\n[workload]\ngenerator = \"poisson\"\njobs = 4\n[workload.mix]\nmodels = [\"vgg16\", \"resnet50\"]\nworkers = [[2, 0.5], [4, 0.5]]\niterations = [50, 100]\n";
        let e = parse("s.toml", &format!("{base}[[scenario]]\nname = \"load=0.5\"\nload = 0.5\n[[scenario]]\nname = \"S4\"\n[[scenario.congested]]\nhost = \"worker0\"\n[[scenario.job]]\nid = \"a\"\nmodel = \"bert\"\nbatch = 8\nworkers = 2\nwork = {{ iterations = 3 }}\narrival_s = 0.0\n"))
            .expect("valid");
        let w = e.workloads();
        assert_eq!(w.iter().map(|x| x.0.as_str()).collect::<Vec<_>>(), vec!["load=0.5", "S4"]);
        assert_eq!(w[0].1.load, Some(0.5));
        assert_eq!((w[1].1.listed.len(), w[1].1.generator.as_deref()), (1, None));
        let summary = e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        assert_eq!(summary.runs.len(), 4);
        assert_eq!(summary.baseline, "themis");
        assert!(summary.comparison.iter().all(|c| c.policy != "themis" || (c.gain_avg_iter - 1.0).abs() < 1e-12));
        // One job table per scenario: job, model, alone, then one column per policy.
        let tables = job_tables(&summary);
        assert_eq!(tables.iter().map(|t| t.0.as_str()).collect::<Vec<_>>(), vec!["load=0.5", "S4"]);
        assert_eq!(tables[1].1[0].len(), 5);
        assert_eq!(tables[1].1[1][..2], ["a".to_string(), "bert".to_string()]);
        // Errors name the scenario and the field.
        let dup = parse("d.toml", &format!("{base}[[scenario]]\nname = \"x\"\n[[scenario]]\nname = \"x\"\n"))
            .expect_err("dup")
            .to_string();
        assert!(dup.contains("scenario[1]") && dup.contains("used twice"), "{dup}");
        let load =
            parse("l.toml", &format!("{base}[[scenario]]\nname = \"x\"\nload = -1\n")).expect_err("load").to_string();
        assert!(load.contains("scenario[0] (x): load"), "{load}");
        let host =
            parse("h.toml", &format!("{base}[[scenario]]\nname = \"x\"\n[[scenario.congested]]\nhost = \"nope\"\n"))
                .expect("parses")
                .run(Path::new("."), |_, _, _, _, _| {})
                .expect_err("unknown host")
                .to_string();
        assert!(host.contains("scenario x") && host.contains("no host named \"nope\""), "{host}");
        let b = parse("b.toml", &base.replace("baseline = \"themis\"", "baseline = \"sjf\""))
            .expect_err("baseline")
            .to_string();
        assert!(b.contains("baseline: \"sjf\" is not one of the policies"), "{b}");
    }
}
