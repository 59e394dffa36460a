//! What a run measured and how runs compare: the rows `summary.json`,
//! `jobs.csv`, `links.csv` and `iterations.csv` are written from, the
//! comparison against the baseline and the tables both the terminal and
//! `report.html` print.

use crate::plot::Ring;
use orrery_sim::metrics::{JobRow, LinkRow, Metrics};
use serde::{Deserialize, Serialize};

/// A row of `notes.csv`: why the policy did what it did next to a job (the
/// measurement behind a timing decision, [`orrery_policy::Decision::Note`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoteRow {
    /// Policy of the run.
    pub policy: String,
    /// Scenario of the run.
    pub scenario: String,
    /// Seed of the run.
    pub seed: u64,
    /// When, s.
    pub at_s: f64,
    /// Job id.
    pub job: String,
    /// The note.
    pub text: String,
}

/// A row of `iterations.csv`: one iteration of one job in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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

/// The busiest link of a run, seen up close: exact per-job rates over a
/// window, and the jobs' circles before and after CASSINI's rotation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Busiest {
    /// `from → to`.
    pub link: String,
    /// Capacity, Gbit/s.
    pub gbps: f64,
    /// Window, s.
    pub window_s: (f64, f64),
    /// For a large run, the window was chosen before this time, s (the
    /// first tenth of the run), so that its replay stays short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub horizon_s: Option<f64>,
    /// Job ids, in the order of the rates below.
    pub jobs: Vec<String>,
    /// (t s, rate of each job) after every change in the window.
    #[serde(skip)]
    pub steps: Vec<(f64, Vec<f64>)>,
    /// The jobs' communication arcs on their unified circle, unrotated.
    #[serde(skip)]
    pub before: Vec<Ring>,
    /// The same after the best rotation (exact search up to 4 jobs).
    #[serde(skip)]
    pub after: Vec<Ring>,
    /// Compatibility score before and after.
    pub score: (f64, f64),
    /// Perimeter of the unified circle, ms.
    pub perimeter_ms: f64,
}

/// One policy × seed.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    pub fidelity: String,
    /// Iterations counted analytically by the fast-forward.
    pub skipped_iterations: u64,
    /// Cluster metrics over all jobs.
    pub metrics: Metrics,
    /// Metrics per priority class, when jobs carry priorities.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_priority: Option<ByPriority>,
    /// Metrics per tenant (`[[tenant]]`); a tenant's `gpu_util` is its share
    /// of the cluster's GPU time.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_tenant: std::collections::BTreeMap<String, Metrics>,
    /// Each tenant's GPUs over time against its quota (10-minute windows),
    /// its worst hour and its within-quota jobs' longest wait.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tenant_share: std::collections::BTreeMap<String, orrery_sim::tenants::Share>,
    /// Simulated events.
    pub events: u64,
    /// Wall-clock seconds of the run.
    pub wall_s: f64,
    /// Wall-clock seconds of it in the policy's scheduling decisions.
    #[serde(default)]
    pub decisions_s: f64,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busiest: Option<Busiest>,
    /// The policy's own counters (Plebiscito's auctions, failure rate, ...).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub counters: std::collections::BTreeMap<String, f64>,
    /// The policy's notes (`notes.csv`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<NoteRow>,
}

/// Metrics per priority.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// Jobs that finished and jobs in the workloads, summed over the
    /// seeds: the means above are over the finished ones, so a policy that
    /// turned jobs away or left them waiting is not comparable.
    pub finished: usize,
    /// See `finished`.
    pub jobs: usize,
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
    // Only when some policy did not finish every job: its means are over
    // fewer jobs than the baseline's.
    let partial = comparison.iter().any(|c| c.finished < c.jobs);
    if partial {
        header.push("finished");
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
        if partial {
            row.push(format!("{}/{}", c.finished, c.jobs));
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
            finished: rs.iter().map(|r| r.metrics.finished).sum(),
            jobs: rs.iter().map(|r| r.metrics.jobs).sum(),
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
