//! The same scenario on real TCP and in the flow-level simulator, side by
//! side: per job, mean and p99 iteration time measured and simulated with
//! their ratio; per busy link, utilisation over time from both; and the
//! iteration-time CDFs.
//!
//! Both sides use one definition of an iteration's time: from the end of the
//! previous iteration to the end of this one, slot delays included (the
//! simulator's `iteration_ms`), without the same number of warm-up
//! iterations on both sides.

use crate::drive::{LinkSeries, Measured};
use orrery_lab::plot::{Figure, Series};
use orrery_model::{JobSpec, Topology};
use orrery_sim::{SimConfig, Simulation};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The simulator's view of the same run.
#[derive(Debug, Clone, Serialize)]
pub struct Simulated {
    /// Per job (workload order): iteration times after the warm-up, ms.
    pub iteration_ms: Vec<Vec<f64>>,
    /// Per job: the iteration time alone on its placement, ms.
    pub isolated_ms: Vec<f64>,
    /// Per link that carried traffic: (link, (end of bucket s, utilisation)).
    pub links: Vec<(usize, Vec<(f64, f64)>)>,
    /// Retransmission timeouts of the transport model (None: fluid).
    pub timeouts: Option<u64>,
}

/// What went wrong holding the simulator against the testbed.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A policy name the catalogue does not have.
    #[error("unknown policy {0:?} (see `orrery policies`)")]
    UnknownPolicy(String),
    /// A figure could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] orrery_lab::plot::PlotError),
}

/// Simulates `jobs` on `topo` under `policy` (with the experiment's pins)
/// with `cfg`'s seed, compute jitter and transport, every iteration
/// recorded. Deterministic for a seed.
pub fn simulate(
    topo: &Topology,
    jobs: &[JobSpec],
    pins: &BTreeMap<String, Vec<(usize, u32)>>,
    policy: &str,
    cfg: SimConfig,
    warmup: usize,
) -> Result<Simulated, CompareError> {
    let mut p = orrery_policy::with_pins(policy, cfg.seed, pins)
        .ok_or_else(|| CompareError::UnknownPolicy(policy.to_string()))?;
    let cfg = SimConfig { skip: false, record_iterations: true, ..cfg };
    let mut sim = Simulation::new(topo, jobs, cfg, p.isolated_network());
    sim.run(p.as_mut(), &mut |_, _| {});
    let iteration_ms = sim.jobs.iter().map(|j| j.recorded_iteration_ms().into_iter().skip(warmup).collect()).collect();
    let isolated_ms = sim.jobs.iter().map(|j| j.isolated_iter_ms).collect();
    let bucket_s = sim.net.bucket_ns as f64 / 1e9;
    let links = sim
        .net
        .stats
        .iter()
        .enumerate()
        .filter(|(_, s)| s.bits > 0.0)
        .map(|(l, s)| {
            let bits_per_bucket = topo.links[l].gbps * 1e9 * bucket_s;
            let series =
                s.series.iter().enumerate().map(|(k, b)| ((k + 1) as f64 * bucket_s, b / bits_per_bucket)).collect();
            (l, series)
        })
        .collect();
    Ok(Simulated { iteration_ms, isolated_ms, links, timeouts: sim.transport_timeouts() })
}

/// Mean and p99 (nearest rank) of a sample; (NaN, NaN) when empty.
pub fn mean_p99(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    let rank = ((0.99 * v.len() as f64).ceil() as usize).clamp(1, v.len());
    (mean, v[rank - 1])
}

/// One row of the comparison.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Policy.
    pub policy: String,
    /// Job id.
    pub job: String,
    /// Hosts on the testbed.
    pub hosts: String,
    /// Iteration time alone, per the model, ms.
    pub isolated_ms: f64,
    /// Iterations measured per run (without the warm-up).
    pub measured_n: usize,
    /// Measured mean, ms: the median over the runs of each run's mean.
    pub measured_mean_ms: f64,
    /// Measured p99, ms: the median over the runs.
    pub measured_p99_ms: f64,
    /// Each run's mean, ms, in run order.
    pub run_means_ms: Vec<f64>,
    /// Simulated mean, ms.
    pub simulated_mean_ms: f64,
    /// Simulated p99, ms.
    pub simulated_p99_ms: f64,
    /// measured / simulated mean.
    pub mean_ratio: f64,
    /// measured / simulated p99.
    pub p99_ratio: f64,
    /// The simulator's mean when it replays each run from the run's
    /// measured starts ([`replayed`]): the median over the runs, ms.
    pub replayed_mean_ms: f64,
    /// Each run's mean over its replay's: the median over the runs.
    pub replay_ratio: f64,
    /// Fraction of the measured iterations (all runs) whose communication
    /// took over [`COLLIDED`] times its time alone: collided with another
    /// job's. NaN when the time alone is not known (emulated workers).
    pub collided: f64,
    /// Mean iteration time alone on the testbed on the same hosts
    /// (`--alone`), ms: the median over the runs' placements. NaN when not
    /// measured.
    pub alone_testbed_ms: f64,
    /// The testbed's slowdown over its own time alone: the median over the
    /// runs of each run's mean / the time alone on that run's hosts.
    pub slowdown: f64,
}

/// Times alone on the testbed, by [`placement_key`]: mean iteration, ms.
pub type Alone = BTreeMap<String, f64>;

/// A job on a set of hosts: the key of its time alone there.
pub fn placement_key(job: &str, hosts: &[(String, u32)]) -> String {
    let hosts: Vec<String> = hosts.iter().map(|(h, g)| format!("{h}:{g}")).collect();
    format!("{job}@{}", hosts.join(","))
}

/// A run's slowdown of one job over its time alone on the same hosts
/// (None when that was not measured or the job has no iterations).
fn run_slowdown(j: &crate::drive::MeasuredJob, alone: &Alone) -> Option<f64> {
    let a = *alone.get(&placement_key(&j.id, &j.hosts))?;
    let (mean, _) = mean_p99(&j.iteration_ms);
    (mean.is_finite() && a > 0.0).then(|| mean / a)
}

/// An iteration's communication over this many times its time alone
/// collided: sharing a link with one other flow doubles it, noise on an
/// uncontended run stays well under.
pub const COLLIDED: f64 = 1.4;

/// Median of a list (NaN when empty; the mean of the middle two for an even
/// length).
pub fn median(xs: &[f64]) -> f64 {
    let mut v: Vec<f64> = xs.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The rows of one policy's runs (one `Measured` per run; the simulator is
/// deterministic and runs once): the testbed's mean and p99 are the
/// medians over the runs. `comm_alone_ms`: every job's communication time
/// alone, where measured (DDP jobs).
/// `alone`: times alone on the testbed, where measured. `replays`: the
/// simulator's replay of each run from its measured starts
/// ([`replayed`]), one per run (or none).
pub fn rows(
    jobs: &[JobSpec],
    runs: &[Measured],
    simulated: &Simulated,
    replays: &[Simulated],
    comm_alone_ms: Option<f64>,
    alone: &Alone,
) -> Vec<Row> {
    let policy = runs.first().map(|m| m.policy.clone()).unwrap_or_default();
    jobs.iter()
        .enumerate()
        .map(|(i, spec)| {
            let per_run: Vec<(f64, f64, usize)> = runs
                .iter()
                .filter_map(|m| m.jobs.iter().find(|j| j.id == spec.id))
                .map(|j| {
                    let (mean, p99) = mean_p99(&j.iteration_ms);
                    (mean, p99, j.iteration_ms.len())
                })
                .collect();
            let run_means_ms: Vec<f64> = per_run.iter().map(|r| r.0).collect();
            let mm = median(&run_means_ms);
            let mp = median(&per_run.iter().map(|r| r.1).collect::<Vec<_>>());
            let m = runs.first().and_then(|m| m.jobs.iter().find(|j| j.id == spec.id));
            let (sm, sp) = mean_p99(simulated.iteration_ms.get(i).map(Vec::as_slice).unwrap_or_default());
            let comms: Vec<f64> = runs
                .iter()
                .filter_map(|m| m.jobs.iter().find(|j| j.id == spec.id))
                .flat_map(|j| j.comm_ms.iter().copied())
                .collect();
            let collided = match comm_alone_ms {
                Some(alone) if !comms.is_empty() => {
                    comms.iter().filter(|&&c| c > COLLIDED * alone).count() as f64 / comms.len() as f64
                }
                _ => f64::NAN,
            };
            let of_job = || runs.iter().filter_map(|m| m.jobs.iter().find(|j| j.id == spec.id));
            let alone_ms: Vec<f64> =
                of_job().filter_map(|j| alone.get(&placement_key(&j.id, &j.hosts)).copied()).collect();
            let slowdowns: Vec<f64> = of_job().filter_map(|j| run_slowdown(j, alone)).collect();
            let replay_means: Vec<f64> = replays
                .iter()
                .map(|r| mean_p99(r.iteration_ms.get(i).map(Vec::as_slice).unwrap_or_default()).0)
                .collect();
            let replay_ratios: Vec<f64> = runs
                .iter()
                .zip(&replay_means)
                .filter_map(|(m, &sim)| {
                    m.jobs.iter().find(|j| j.id == spec.id).map(|j| mean_p99(&j.iteration_ms).0 / sim)
                })
                .filter(|x| x.is_finite())
                .collect();
            Row {
                replayed_mean_ms: median(&replay_means),
                replay_ratio: median(&replay_ratios),
                alone_testbed_ms: median(&alone_ms),
                slowdown: median(&slowdowns),
                policy: policy.clone(),
                job: spec.id.clone(),
                hosts: m
                    .map(|j| j.hosts.iter().map(|(h, g)| format!("{h}:{g}")).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default(),
                isolated_ms: simulated.isolated_ms.get(i).copied().unwrap_or(f64::NAN),
                measured_n: per_run.iter().map(|r| r.2).min().unwrap_or(0),
                measured_mean_ms: mm,
                measured_p99_ms: mp,
                run_means_ms,
                simulated_mean_ms: sm,
                simulated_p99_ms: sp,
                mean_ratio: mm / sm,
                p99_ratio: mp / sp,
                collided,
            }
        })
        .collect()
}

/// One policy over all its jobs, per run: what CASSINI's Fig. 11 plots.
#[derive(Debug, Clone, Serialize)]
pub struct PolicySummary {
    /// Policy.
    pub policy: String,
    /// Per run: the mean over jobs of each job's mean iteration time, ms.
    pub run_mean_iter_ms: Vec<f64>,
    /// Per run: p99 of all jobs' iterations pooled, ms.
    pub run_p99_iter_ms: Vec<f64>,
    /// Per run: the mean over jobs of their slowdown over their time alone
    /// on the testbed (empty without `--alone`).
    pub run_slowdown: Vec<f64>,
    /// The simulator's mean over jobs of each job's mean iteration, ms.
    pub sim_mean_iter_ms: f64,
    /// The simulator's p99 of all iterations pooled, ms.
    pub sim_p99_iter_ms: f64,
    /// The simulator's mean over jobs of their mean / their time alone.
    pub sim_slowdown: f64,
    /// Per run: the simulator's mean over jobs when it replays the run
    /// from its measured starts ([`replayed`]), ms (empty without replays).
    #[serde(default)]
    pub replay_mean_iter_ms: Vec<f64>,
    /// Per run: the hosts' TCP retransmission timeouts (empty where they
    /// were not read).
    #[serde(default)]
    pub run_tcp_timeouts: Vec<u64>,
    /// Per captured run (`--pcap`): how many of the timeouts in its packet
    /// captures followed a lost retransmission (empty without captures).
    #[serde(default)]
    pub run_lost_retransmissions: Vec<u64>,
    /// The simulator's retransmission timeouts: its transport model's, per
    /// replay where replayed (else the one run's); empty under the fluid
    /// model.
    #[serde(default)]
    pub sim_timeouts: Vec<u64>,
}

/// Mean of the finite values (NaN when none).
fn mean_finite(xs: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

/// The summary of one policy's runs. Jobs with no measured iteration (never
/// placed, or shorter than the warm-up) are left out of that run's means.
pub fn summary(
    jobs: &[JobSpec],
    runs: &[Measured],
    simulated: &Simulated,
    replays: &[Simulated],
    alone: &Alone,
) -> PolicySummary {
    let in_workload = |id: &str| jobs.iter().any(|s| s.id == id);
    let per_run = |f: &dyn Fn(&crate::drive::MeasuredJob) -> Option<f64>| -> Vec<f64> {
        runs.iter().map(|m| mean_finite(m.jobs.iter().filter(|j| in_workload(&j.id)).filter_map(f))).collect()
    };
    let run_mean_iter_ms = per_run(&|j| Some(mean_p99(&j.iteration_ms).0));
    let mut run_slowdown = per_run(&|j| run_slowdown(j, alone));
    if run_slowdown.iter().all(|x| x.is_nan()) {
        run_slowdown.clear();
    }
    let run_p99_iter_ms = runs
        .iter()
        .map(|m| mean_p99(&m.jobs.iter().flat_map(|j| j.iteration_ms.iter().copied()).collect::<Vec<_>>()).1)
        .collect();
    let sim_means: Vec<f64> = simulated.iteration_ms.iter().map(|v| mean_p99(v).0).collect();
    let pooled: Vec<f64> = simulated.iteration_ms.iter().flatten().copied().collect();
    PolicySummary {
        policy: runs.first().map(|m| m.policy.clone()).unwrap_or_default(),
        run_mean_iter_ms,
        run_p99_iter_ms,
        run_slowdown,
        sim_mean_iter_ms: mean_finite(sim_means.iter().copied()),
        sim_p99_iter_ms: mean_p99(&pooled).1,
        sim_slowdown: mean_finite(sim_means.iter().zip(&simulated.isolated_ms).map(|(m, a)| m / a)),
        replay_mean_iter_ms: replays
            .iter()
            .map(|r| mean_finite(r.iteration_ms.iter().map(|v| mean_p99(v).0)))
            .collect(),
        run_tcp_timeouts: runs.iter().filter_map(|m| m.tcp.map(|t| t.timeouts)).collect(),
        run_lost_retransmissions: runs
            .iter()
            .filter_map(|m| m.retransmits.as_ref())
            .map(|r| r.timed_out.iter().filter(|t| t.lost_retransmission()).count() as u64)
            .collect(),
        sim_timeouts: if replays.is_empty() { std::slice::from_ref(simulated) } else { replays }
            .iter()
            .filter_map(|r| r.timeouts)
            .collect(),
    }
}

/// The jobs as one testbed run started them, for the simulator to replay:
/// each job whose rank 0 logged its first iteration arrives when it was
/// ready on the testbed ([`crate::drive::MeasuredJob::ready_ms`]), counted
/// from the first job ready and placed at the workload's first arrival.
/// The file's arrivals say when jobs are submitted; on the testbed a job's
/// first iteration starts once its processes are up and its ring is
/// connected, 0.1–1.2 s later and differently per job. That offset decides
/// an unshifted pair's contention in the fluid model, which keeps it for
/// ever: of two rings with all-reduce C alone, the one ahead by δ has the
/// link alone for δ, then they share it, and each all-reduce takes 2C − δ.
/// O(jobs × measured jobs), a handful each.
pub fn replayed(jobs: &[JobSpec], run: &Measured) -> Vec<JobSpec> {
    let ready = |spec: &JobSpec| run.jobs.iter().find(|j| j.id == spec.id).and_then(|j| j.ready_ms);
    let first_ready = jobs.iter().filter_map(ready).fold(f64::INFINITY, f64::min);
    let first_arrival = jobs.iter().map(|j| j.arrival_s).fold(f64::INFINITY, f64::min);
    jobs.iter()
        .map(|spec| {
            let mut spec = spec.clone();
            if let Some(r) = ready(&spec) {
                spec.arrival_s = first_arrival + (r - first_ready) / 1000.0;
            }
            spec
        })
        .collect()
}

/// The policies' summaries as a Markdown table: the testbed's median over
/// the runs with their range, and the simulator's.
pub fn summary_markdown(summaries: &[PolicySummary]) -> String {
    let cell = |xs: &[f64], digits: usize| -> String {
        let m = median(xs);
        if xs.is_empty() || m.is_nan() {
            return "–".into();
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if xs.len() > 1 { format!("{m:.digits$} ({lo:.digits$}–{hi:.digits$})") } else { format!("{m:.digits$}") }
    };
    let mut s = String::from(
        "| policy | testbed mean it (ms) | sim mean it (ms) | testbed / sim | sim from each run's starts (ms) | testbed / that | testbed p99 it (ms) | sim p99 it (ms) | testbed slowdown over alone on the testbed | sim slowdown over alone | TCP timeouts per run: testbed | sim |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n",
    );
    let counts = |xs: &[u64]| -> String {
        if xs.is_empty() { "–".into() } else { xs.iter().map(u64::to_string).collect::<Vec<_>>().join(", ") }
    };
    for p in summaries {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.3} | {} | {} | {} | {:.1} | {} | {:.3} | {} | {} |",
            p.policy,
            cell(&p.run_mean_iter_ms, 1),
            p.sim_mean_iter_ms,
            median(&p.run_mean_iter_ms) / p.sim_mean_iter_ms,
            cell(&p.replay_mean_iter_ms, 1),
            cell(&p.run_mean_iter_ms.iter().zip(&p.replay_mean_iter_ms).map(|(t, s)| t / s).collect::<Vec<_>>(), 3),
            cell(&p.run_p99_iter_ms, 1),
            p.sim_p99_iter_ms,
            cell(&p.run_slowdown, 3),
            p.sim_slowdown,
            if p.run_lost_retransmissions.is_empty() {
                counts(&p.run_tcp_timeouts)
            } else {
                format!(
                    "{} (after a lost retransmission: {})",
                    counts(&p.run_tcp_timeouts),
                    counts(&p.run_lost_retransmissions)
                )
            },
            counts(&p.sim_timeouts)
        );
    }
    s
}

/// The comparison as a Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let runs = rows.iter().map(|r| r.run_means_ms.len()).max().unwrap_or(0);
    let mut s = String::new();
    if runs > 1 {
        let _ = writeln!(s, "Testbed: median over {runs} runs, with the range of the runs' means.\n");
    }
    s.push_str(
        "| policy | job | hosts | alone ms (model) | alone ms (testbed) | testbed mean ms | slowdown | sim mean ms | ratio | sim from each run's starts, ms | ratio | testbed p99 ms | sim p99 ms | ratio | collided | iterations |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in rows {
        let lo = r.run_means_ms.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.run_means_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mean = if r.run_means_ms.len() > 1 {
            format!("{:.1} ({lo:.1}–{hi:.1})", r.measured_mean_ms)
        } else {
            format!("{:.1}", r.measured_mean_ms)
        };
        let collided = if r.collided.is_nan() { "–".to_string() } else { format!("{:.0}%", 100.0 * r.collided) };
        let or_dash = |x: f64, digits: usize| if x.is_nan() { "–".to_string() } else { format!("{x:.digits$}") };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} | {} | {mean} | {} | {:.1} | {:.3} | {} | {} | {:.1} | {:.1} | {:.3} | {collided} | {} |",
            r.policy,
            r.job,
            r.hosts,
            r.isolated_ms,
            or_dash(r.alone_testbed_ms, 1),
            or_dash(r.slowdown, 3),
            r.simulated_mean_ms,
            r.mean_ratio,
            or_dash(r.replayed_mean_ms, 1),
            or_dash(r.replay_ratio, 3),
            r.measured_p99_ms,
            r.simulated_p99_ms,
            r.p99_ratio,
            r.measured_n
        );
    }
    s
}

/// The comparison as CSV.
pub fn csv(rows: &[Row]) -> String {
    let mut s = String::from(
        "policy,job,hosts,isolated_ms,measured_n,measured_mean_ms,measured_p99_ms,simulated_mean_ms,simulated_p99_ms,mean_ratio,p99_ratio,collided,run_means_ms,alone_testbed_ms,slowdown,replayed_mean_ms,replay_ratio\n",
    );
    for r in rows {
        let runs: Vec<String> = r.run_means_ms.iter().map(|m| format!("{m:.3}")).collect();
        let _ = writeln!(
            s,
            "{},{},{},{:.3},{},{:.3},{:.3},{:.3},{:.3},{:.4},{:.4},{:.4},{},{:.3},{:.4},{:.3},{:.4}",
            r.policy,
            r.job,
            r.hosts,
            r.isolated_ms,
            r.measured_n,
            r.measured_mean_ms,
            r.measured_p99_ms,
            r.simulated_mean_ms,
            r.simulated_p99_ms,
            r.mean_ratio,
            r.p99_ratio,
            r.collided,
            runs.join(";"),
            r.alone_testbed_ms,
            r.slowdown,
            r.replayed_mean_ms,
            r.replay_ratio
        );
    }
    s
}

pub use orrery_model::files::write_atomic;

/// The figures of one policy's run into `dir`: `iterations` (CDF of iteration
/// times, testbed and simulator per job) and `links` (utilisation of the
/// busiest link over time, both). Returns the stems written.
pub fn figures(
    dir: &Path,
    jobs: &[JobSpec],
    measured: &Measured,
    simulated: &Simulated,
) -> Result<Vec<String>, CompareError> {
    let mut series = Vec::new();
    for (i, spec) in jobs.iter().enumerate() {
        if let Some(m) = measured.jobs.iter().find(|j| j.id == spec.id) {
            series.push(Series::new(format!("{} testbed", spec.id), m.iteration_ms.clone()));
        }
        series.push(Series::new(
            format!("{} simulator", spec.id),
            simulated.iteration_ms.get(i).cloned().unwrap_or_default(),
        ));
    }
    let cdf = Figure::Cdf {
        title: format!("Iteration time, testbed (real TCP) vs simulator: {}", measured.policy),
        x_label: "iteration time (ms)".into(),
        series,
    };
    cdf.save(dir, "iterations")?;
    let mut written = vec!["iterations".to_string()];
    if let Some(busiest) = busiest(&measured.links) {
        let sim = simulated.links.iter().find(|(l, _)| *l == busiest.link).map(|(_, s)| s.clone()).unwrap_or_default();
        let lines = Figure::Lines {
            title: format!("Link {} → {}: utilisation, {}", busiest.from, busiest.to, measured.policy),
            y_label: "utilisation of the link".into(),
            series: vec![
                Series::new("testbed (tx counter)", busiest.utilisation.clone()),
                Series::new("simulator", sim),
            ],
        };
        lines.save(dir, "links")?;
        written.push("links".into());
    }
    Ok(written)
}

/// The link that carried the most on the testbed.
pub fn busiest(links: &[LinkSeries]) -> Option<&LinkSeries> {
    links.iter().max_by(|a, b| {
        let sum = |l: &LinkSeries| l.utilisation.iter().map(|x| x.1).sum::<f64>();
        sum(a).total_cmp(&sum(b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_summary_takes_each_run_against_the_time_alone_on_its_own_hosts() {
        // Job a ran on h0+h1 in run 1 and on h2+h3 in run 2, 300 ms alone on
        // each pair; job b never ran in run 2. By hand: run 1's mean over
        // jobs is (330 + 200) / 2 = 265 ms and its slowdown (1.1 + 1.0) / 2;
        // run 2 has a alone: 360 ms, 1.2.
        let job = |id: &str, hosts: &[&str], ms: &[f64]| crate::drive::MeasuredJob {
            id: id.into(),
            status: "finished".into(),
            hosts: hosts.iter().map(|h| (h.to_string(), 1)).collect(),
            isolated_ms: 0.0,
            iteration_ms: ms.to_vec(),
            comm_ms: Vec::new(),
            duration_ms: Vec::new(),
            start_ms: Vec::new(),
            ready_ms: None,
            delay_ms: Vec::new(),
            jct_s: None,
        };
        let run = |jobs| Measured {
            policy: "p".into(),
            jobs,
            links: Vec::new(),
            wall_s: 1.0,
            warnings: Vec::new(),
            decisions: Vec::new(),
            tcp: None,
            retransmits: None,
        };
        let runs = [
            run(vec![job("a", &["h0", "h1"], &[320.0, 340.0]), job("b", &["h4", "h5"], &[200.0])]),
            run(vec![job("a", &["h2", "h3"], &[360.0]), job("b", &[], &[])]),
        ];
        let mut alone = Alone::new();
        alone.insert(placement_key("a", &[("h0".into(), 1), ("h1".into(), 1)]), 300.0);
        alone.insert(placement_key("a", &[("h2".into(), 1), ("h3".into(), 1)]), 300.0);
        alone.insert(placement_key("b", &[("h4".into(), 1), ("h5".into(), 1)]), 200.0);
        let specs = [
            JobSpec::new("a", "vgg19", 16, 2, orrery_model::Work::Iterations(10), 0.0),
            JobSpec::new("b", "vgg16", 16, 2, orrery_model::Work::Iterations(10), 0.0),
        ];
        let sim = Simulated {
            iteration_ms: vec![vec![400.0, 400.0], vec![250.0]],
            isolated_ms: vec![400.0, 200.0],
            links: Vec::new(),
            timeouts: None,
        };
        let s = summary(&specs, &runs, &sim, &[], &alone);
        assert_eq!(s.run_mean_iter_ms, vec![265.0, 360.0]);
        assert!((s.run_slowdown[0] - 1.05).abs() < 1e-12 && (s.run_slowdown[1] - 1.2).abs() < 1e-12);
        assert_eq!((s.sim_mean_iter_ms, s.sim_slowdown), (325.0, 1.125));
        let rows = rows(&specs, &runs, &sim, &[], None, &alone);
        assert_eq!(rows[0].alone_testbed_ms, 300.0);
        assert!((rows[0].slowdown - 1.15).abs() < 1e-12, "median of 1.1 and 1.2: {}", rows[0].slowdown);
        // Without times alone there is no slowdown, and the table says so.
        let bare = summary(&specs, &runs, &sim, &[], &Alone::new());
        assert!(bare.run_slowdown.is_empty());
        assert!(summary_markdown(&[bare]).contains("| – |"));
        // The hosts' timeouts per run beside the transport model's.
        let counted: Vec<Measured> = runs
            .iter()
            .zip([1, 9])
            .map(|(m, t)| Measured {
                tcp: Some(crate::fabric::TcpCounters { timeouts: t, retransmitted_segments: 0 }),
                retransmits: None,
                ..m.clone()
            })
            .collect();
        let modelled = Simulated { timeouts: Some(2), ..sim.clone() };
        let s = summary(&specs, &counted, &modelled, &[], &alone);
        assert_eq!((s.run_tcp_timeouts.as_slice(), s.sim_timeouts.as_slice()), (&[1, 9][..], &[2][..]));
        assert!(summary_markdown(&[s]).ends_with("| 1, 9 | 2 |\n"), "{}", summary_markdown(&[]));
        // With packet captures, how many followed a lost retransmission.
        let timed_out = |lost: bool| crate::capture::TimedOut {
            t_s: 0.0,
            connection: "a:1>b:2".into(),
            silent_ms: 205.0,
            bytes: 1448,
            lost_copy: lost.then_some(crate::capture::LostCopy { bytes: 52_128, after_ms: 2.1 }),
        };
        let captured: Vec<Measured> = counted
            .iter()
            .zip([vec![timed_out(true)], vec![timed_out(false), timed_out(true), timed_out(false)]])
            .map(|(m, t)| Measured {
                retransmits: Some(crate::capture::Retransmits { timed_out: t, ..Default::default() }),
                ..m.clone()
            })
            .collect();
        let s = summary(&specs, &captured, &modelled, &[], &alone);
        assert_eq!(s.run_lost_retransmissions, [1, 1]);
        let table = summary_markdown(&[s]);
        assert!(table.ends_with("| 1, 9 (after a lost retransmission: 1, 1) | 2 |\n"), "{table}");
    }

    #[test]
    fn a_replay_starts_each_job_when_it_was_ready_on_the_testbed() {
        // b's ranks were ready 1,155 ms before a's; c logged no iteration
        // and keeps the file's arrival.
        let job = |id: &str, ready_ms: Option<f64>| crate::drive::MeasuredJob {
            id: id.into(),
            status: "finished".into(),
            hosts: Vec::new(),
            isolated_ms: 0.0,
            iteration_ms: Vec::new(),
            comm_ms: Vec::new(),
            duration_ms: Vec::new(),
            start_ms: Vec::new(),
            ready_ms,
            delay_ms: Vec::new(),
            jct_s: None,
        };
        let run = Measured {
            policy: "k8s-default".into(),
            jobs: vec![job("a", Some(5_000.0)), job("b", Some(3_845.0)), job("c", None)],
            links: Vec::new(),
            wall_s: 1.0,
            warnings: Vec::new(),
            decisions: Vec::new(),
            tcp: None,
            retransmits: None,
        };
        let spec = |id: &str, at: f64| JobSpec::new(id, "vgg19", 16, 2, orrery_model::Work::Iterations(10), at);
        let specs = [spec("a", 0.0), spec("b", 0.01), spec("c", 2.0)];
        let arrivals: Vec<f64> = replayed(&specs, &run).iter().map(|j| j.arrival_s).collect();
        assert!((arrivals[0] - 1.155).abs() < 1e-9 && arrivals[1] == 0.0 && arrivals[2] == 2.0, "{arrivals:?}");
    }

    #[test]
    fn two_rings_started_apart_keep_their_offset_in_the_fluid_model() {
        // CASSINI §2.2's two VGG19 rings on one uplink, unshifted. Started
        // together each all-reduce takes 2C (half the link throughout);
        // started δ apart, the first has the link alone for δ and both then
        // share it, so each takes 2C − δ, iteration after iteration: the
        // premise of replaying a run from its measured starts.
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let text = std::fs::read_to_string(base.join("cassini-pair.toml")).expect("experiment file");
        let exp = orrery_lab::experiment::parse("cassini-pair.toml", &text).expect("experiment");
        let topo = exp.topology(&base).expect("topology");
        let (mut jobs, pins) = exp.jobs_and_pins(&base, &topo, 1).expect("jobs");
        for j in &mut jobs {
            j.work = orrery_model::Work::Iterations(30);
            j.arrival_s = 0.0;
        }
        let mean = |s: &Simulated| s.iteration_ms.iter().map(|v| mean_p99(v).0).sum::<f64>() / 2.0;
        let together = simulate(&topo, &jobs, &pins, "pinned", SimConfig { seed: 1, ..SimConfig::default() }, 2)
            .expect("together");
        let comm_ms = mean(&together) - together.isolated_ms[0];
        assert!(comm_ms > 60.0, "C = {comm_ms} ms: the rings must overlap for a test of δ = 40 ms");
        jobs[1].arrival_s = 0.040;
        let apart =
            simulate(&topo, &jobs, &pins, "pinned", SimConfig { seed: 1, ..SimConfig::default() }, 2).expect("apart");
        assert!((mean(&apart) - (mean(&together) - 40.0)).abs() < 1.0, "{} vs {} − 40", mean(&apart), mean(&together));
    }

    #[test]
    fn the_median_of_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn mean_and_nearest_rank_p99() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(mean_p99(&xs), (50.5, 99.0));
        assert_eq!(mean_p99(&[3.0]), (3.0, 3.0));
        assert!(mean_p99(&[]).0.is_nan());
    }

    #[test]
    fn the_simulator_side_of_cassinis_pair_shows_the_shift() {
        // CASSINI §2.2: two VGG19 rings on one 50 Gbit/s uplink. Shifted, the
        // second job's communication interleaves with the first's.
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments");
        let path = base.join("cassini-pair.toml");
        let text = std::fs::read_to_string(&path).expect("experiment file");
        let exp = orrery_lab::experiment::parse("cassini-pair.toml", &text).expect("experiment");
        let topo = exp.topology(&base).expect("topology");
        let (mut jobs, pins) = exp.jobs_and_pins(&base, &topo, 1).expect("jobs");
        for j in &mut jobs {
            j.work = orrery_model::Work::Iterations(40);
        }
        let plain =
            simulate(&topo, &jobs, &pins, "pinned", SimConfig { seed: 1, ..SimConfig::default() }, 1).expect("pinned");
        let shifted = simulate(&topo, &jobs, &pins, "pinned+cassini", SimConfig { seed: 1, ..SimConfig::default() }, 1)
            .expect("shifted");
        let mean = |s: &Simulated| s.iteration_ms.iter().map(|v| mean_p99(v).0).sum::<f64>() / 2.0;
        assert!(mean(&shifted) < mean(&plain) * 0.95, "{} vs {}", mean(&shifted), mean(&plain));
        assert!(!plain.links.is_empty());
    }
}
