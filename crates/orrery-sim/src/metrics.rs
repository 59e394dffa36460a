//! Metrics of a finished simulation (units in the names; see docs/guide/simulation.md).

use crate::engine::{NS, Simulation, Status};
use orrery_model::Priority;
use orrery_trace::inspect::Percentiles;
use serde::{Deserialize, Serialize};

/// Cluster metrics, the `metrics` object of `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    /// Jobs in the workload.
    pub jobs: usize,
    /// Jobs that finished.
    pub finished: usize,
    /// Mean job completion time (finish − arrival) over finished jobs, s.
    pub avg_jct_s: f64,
    /// 99th percentile JCT, s.
    pub p99_jct_s: f64,
    /// Last finish − first arrival, s.
    pub makespan_s: f64,
    /// Mean queueing delay (first start − arrival), s.
    pub avg_queue_s: f64,
    /// Mean time finished jobs spent waiting, re-queued time after a
    /// preemption included (JCT − time holding GPUs; Castor §9.2), s.
    pub avg_wait_s: f64,
    /// Mean JCT of finished jobs with more than 8 GPUs ("large", Castor
    /// Tables 5-6), s (0 when there are none).
    pub avg_jct_large_s: f64,
    /// Mean JCT of finished jobs with at most 8 GPUs, s.
    pub avg_jct_small_s: f64,
    /// `avg_wait_s` of the large jobs, s.
    pub avg_wait_large_s: f64,
    /// `avg_wait_s` of the small jobs, s.
    pub avg_wait_small_s: f64,
    /// The longest wait of a finished job over its run time alone (its
    /// iterations at its iteration time alone): issue 67's bound of 10.
    #[serde(default)]
    pub max_wait_over_alone: f64,
    /// Mean over finished jobs of their run time alone (iterations at the
    /// iteration time alone), s: the mean JCT of a cluster that starts
    /// every job on arrival, on the GPUs it asked for, with the network to
    /// itself. No policy that runs jobs at their request and no faster
    /// than alone has a lower mean JCT.
    #[serde(default)]
    pub avg_alone_s: f64,
    /// Mean iteration time over all iterations of all jobs, s.
    pub avg_iter_s: f64,
    /// 90th percentile iteration time, s.
    pub p90_iter_s: f64,
    /// 99th percentile iteration time, s.
    pub p99_iter_s: f64,
    /// Mean over finished jobs of run time / (iterations × isolated iteration time).
    pub avg_slowdown: f64,
    /// Mean utilisation of the links that carried traffic, over the makespan.
    pub avg_link_util: f64,
    /// Metronome's Γ (Eq. 5) over the links that carried traffic.
    pub bw_util_gamma: f64,
    /// Σ over links of seconds with demand above capacity.
    pub congested_link_s: f64,
    /// Σ over links of ∫ max(0, demand − capacity) dt, Gbit (ECN-mark proxy).
    pub excess_gbit: f64,
    /// GPU-seconds held by at least one job / (GPUs × makespan).
    pub gpu_util: f64,
    /// Share of GPU time with two jobs on the GPU (Castor's sharing).
    pub gpu_shared: f64,
    /// Share of GPU time with no job (1 − `gpu_util`).
    pub gpu_idle: f64,
    /// Allocation failure rate: rejected jobs / jobs.
    pub afr: f64,
    /// Retransmission timeouts the transport model's connections took over
    /// the whole run (0, and not written, under the fluid model).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub transport_timeouts: u64,
    /// Median wall-clock time of a policy call, ms.
    pub decision_ms_p50: f64,
    /// 99th percentile wall-clock time of a policy call, ms.
    pub decision_ms_p99: f64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// Per-job row of `jobs.csv`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRow {
    /// Policy of the run (filled in by the experiment).
    pub policy: String,
    /// Seed of the run.
    pub seed: u64,
    /// Scenario of the run.
    pub scenario: String,
    /// Job id from the workload.
    pub id: String,
    /// Model.
    pub model: String,
    /// GPUs.
    pub gpus: u32,
    /// Priority.
    pub priority: Priority,
    /// Final status.
    pub status: Status,
    /// Arrival, s.
    pub arrival_s: f64,
    /// Queueing delay, s (empty if never started).
    pub queue_s: Option<f64>,
    /// JCT, s (empty if not finished).
    pub jct_s: Option<f64>,
    /// Iterations done.
    pub iterations: u64,
    /// Iteration time alone on its placement, ms.
    pub isolated_iter_ms: f64,
    /// Mean iteration time, ms.
    pub iter_mean_ms: f64,
    /// Median iteration time, ms.
    pub iter_p50_ms: f64,
    /// 90th percentile iteration time, ms.
    pub iter_p90_ms: f64,
    /// 99th percentile iteration time, ms.
    pub iter_p99_ms: f64,
    /// Run time / (iterations × isolated iteration time).
    pub slowdown: Option<f64>,
    /// Hosts used.
    pub hosts: usize,
    /// Time-shifts applied.
    pub shifts: u32,
    /// Pauses.
    pub pauses: u32,
    /// Preemptions.
    pub preemptions: u32,
    /// GPU-seconds it shared a GPU with another job.
    pub shared_gpu_s: f64,
    /// Its tenant (`[[tenant]]`), empty for none.
    pub tenant: String,
}

/// Per-link row of `links.csv` (links that carried traffic).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkRow {
    /// Policy of the run (filled in by the experiment).
    pub policy: String,
    /// Seed of the run.
    pub seed: u64,
    /// Scenario of the run.
    pub scenario: String,
    /// Link index.
    pub link: usize,
    /// Sending node.
    pub from: String,
    /// Receiving node.
    pub to: String,
    /// Capacity, Gbit/s.
    pub gbps: f64,
    /// Mean utilisation over the makespan.
    pub mean_util: f64,
    /// Seconds with demand above capacity.
    pub congested_s: f64,
    /// Excess over capacity, Gbit.
    pub excess_gbit: f64,
    /// Utilisation per time bucket, `;`-separated.
    pub util_series: String,
    /// Bucket width, s.
    pub bucket_s: f64,
}

/// Carried bits over capacity × makespan.
fn mean_util(bits: f64, gbps: f64, makespan_ns: u64) -> f64 {
    if makespan_ns > 0 { bits / (gbps * makespan_ns as f64) } else { 0.0 }
}

/// Per-job rows.
pub fn job_rows(sim: &Simulation<'_>) -> Vec<JobRow> {
    sim.jobs
        .iter()
        .map(|j| {
            let p = j.iteration_ms.percentiles();
            let run_alone = j.iterations_done as f64 * j.isolated_iter_ms / 1e3;
            JobRow {
                policy: String::new(),
                seed: 0,
                scenario: String::new(),
                id: j.spec.id.clone(),
                model: j.spec.model.clone(),
                gpus: j.spec.gpus(),
                priority: j.spec.priority,
                status: j.status,
                arrival_s: j.arrival_ns as f64 / NS,
                queue_s: j.first_start_ns.map(|s| (s - j.arrival_ns) as f64 / NS),
                jct_s: (j.status == Status::Finished)
                    .then(|| j.finish_ns.map_or(0.0, |f| (f - j.arrival_ns) as f64 / NS)),
                iterations: j.iterations_done,
                isolated_iter_ms: j.isolated_iter_ms,
                iter_mean_ms: p.mean,
                iter_p50_ms: p.p50,
                iter_p90_ms: p.p90,
                iter_p99_ms: p.p99,
                slowdown: (j.status == Status::Finished && run_alone > 0.0).then(|| j.run_ns as f64 / NS / run_alone),
                hosts: j.hosts_used,
                shifts: j.shifts,
                pauses: j.pauses,
                preemptions: j.preemptions,
                shared_gpu_s: j.shared_gpu_s,
                tenant: j.spec.tenant.clone().unwrap_or_default(),
            }
        })
        .collect()
}

/// Per-link rows for links that carried traffic.
pub fn link_rows(sim: &Simulation<'_>, makespan_ns: u64) -> Vec<LinkRow> {
    let t = &sim.net;
    let topo_links = sim_topology_links(sim);
    t.stats
        .iter()
        .enumerate()
        .filter(|(_, s)| s.bits > 0.0)
        .map(|(l, s)| {
            let (from, to, gbps) = topo_links[l].clone();
            let series = s
                .series
                .iter()
                .map(|b| format!("{:.4}", b / (gbps * t.bucket_ns as f64)))
                .collect::<Vec<_>>()
                .join(";");
            LinkRow {
                policy: String::new(),
                seed: 0,
                scenario: String::new(),
                link: l,
                from,
                to,
                gbps,
                mean_util: mean_util(s.bits, gbps, makespan_ns),
                congested_s: s.congested_ns as f64 / NS,
                excess_gbit: s.excess_bits / 1e9,
                util_series: series,
                bucket_s: t.bucket_ns as f64 / NS,
            }
        })
        .collect()
}

fn sim_topology_links(sim: &Simulation<'_>) -> Vec<(String, String, f64)> {
    let topo = sim.topology();
    topo.links.iter().map(|l| (topo.node_name(l.from).to_string(), topo.node_name(l.to).to_string(), l.gbps)).collect()
}

/// Cluster metrics over the jobs selected by `keep` (all jobs, or one priority).
pub fn metrics(sim: &Simulation<'_>, keep: impl Fn(Priority) -> bool) -> Metrics {
    metrics_of(sim, &job_rows(sim), keep)
}

/// [`metrics`] from per-job rows already built (one pass for several priority classes).
pub fn metrics_of(sim: &Simulation<'_>, rows: &[JobRow], keep: impl Fn(Priority) -> bool) -> Metrics {
    metrics_where(sim, rows, |r, _| keep(r.priority))
}

/// The metrics of one tenant's jobs (`JobSpec::tenant`). Its `gpu_util` is
/// the tenant's GPU-seconds over the whole cluster's in the makespan: its
/// share of the cluster.
pub fn tenant_metrics(sim: &Simulation<'_>, rows: &[JobRow], tenant: &str) -> Metrics {
    metrics_where(sim, rows, |_, j| j.spec.tenant.as_deref() == Some(tenant))
}

/// [`metrics_of`] over the jobs `keep` picks by row and state.
fn metrics_where(
    sim: &Simulation<'_>,
    rows: &[JobRow],
    keep: impl Fn(&JobRow, &crate::engine::JobState) -> bool,
) -> Metrics {
    let chosen: Vec<(&JobRow, &crate::engine::JobState)> =
        rows.iter().zip(&sim.jobs).filter(|(r, j)| keep(r, j)).collect();
    let first_arrival = chosen.iter().map(|(r, _)| r.arrival_s).fold(f64::INFINITY, f64::min);
    let last_finish = sim.jobs.iter().filter_map(|j| j.finish_ns).max().unwrap_or(sim.now_ns()) as f64 / NS;
    let makespan_s = if first_arrival.is_finite() { (last_finish - first_arrival).max(0.0) } else { 0.0 };
    let mut jct: Vec<f64> = chosen.iter().filter_map(|(r, _)| r.jct_s).collect();
    let jct_p = Percentiles::of(&mut jct);
    let queue: Vec<f64> = chosen.iter().filter_map(|(r, _)| r.queue_s).collect();
    let mut iters = crate::durations::Durations::new();
    for (_, j) in &chosen {
        iters.merge(&j.iteration_ms);
    }
    let it = iters.percentiles();
    let it = Percentiles { p50: it.p50 / 1e3, p90: it.p90 / 1e3, p99: it.p99 / 1e3, mean: it.mean / 1e3 };
    let slow: Vec<f64> = chosen.iter().filter_map(|(r, _)| r.slowdown).collect();
    // Links that carried traffic: (capacity, mean utilisation, congested s, excess Gbit).
    let makespan_ns = (makespan_s * NS) as u64;
    let links: Vec<(f64, f64, f64, f64)> = sim
        .net
        .stats
        .iter()
        .zip(&sim.topology().links)
        .filter(|(s, _)| s.bits > 0.0)
        .map(|(s, l)| (l.gbps, mean_util(s.bits, l.gbps, makespan_ns), s.congested_ns as f64 / NS, s.excess_bits / 1e9))
        .collect();
    let b_max = links.iter().map(|l| l.0).fold(0.0, f64::max);
    let gpus = f64::from(sim.topology().gpu_count());
    // Each shared GPU-second is counted by both jobs of the pair.
    let shared_s: f64 = chosen.iter().map(|(_, j)| j.shared_gpu_s).sum::<f64>() / 2.0;
    let gpu_s: f64 = chosen.iter().map(|(_, j)| j.gpu_s).sum::<f64>() - shared_s;
    let gpu_time = gpus * makespan_s;
    let finished: Vec<(u32, f64, f64)> = chosen
        .iter()
        .filter_map(|(r, j)| r.jct_s.map(|jct| (r.gpus, jct, (jct - j.run_ns as f64 / NS).max(0.0))))
        .collect();
    let max_wait_over_alone = chosen
        .iter()
        .filter_map(|(r, j)| {
            let alone_s = r.iterations as f64 * r.isolated_iter_ms / 1e3;
            let wait_s = (r.jct_s? - j.run_ns as f64 / NS).max(0.0);
            (alone_s > 0.0).then_some(wait_s / alone_s)
        })
        .fold(0.0, f64::max);
    let alone: Vec<f64> = chosen
        .iter()
        .filter(|(r, _)| r.jct_s.is_some())
        .map(|(r, _)| r.iterations as f64 * r.isolated_iter_ms / 1e3)
        .collect();
    let split = |large: bool, pick: fn(&(u32, f64, f64)) -> f64| {
        let v: Vec<f64> = finished.iter().filter(|f| (f.0 > 8) == large).map(pick).collect();
        if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
    };
    let mut dec: Vec<f64> = sim.decision_s.iter().map(|s| s * 1e3).collect();
    let dec_p = Percentiles::of(&mut dec);
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    Metrics {
        jobs: chosen.len(),
        finished: chosen.iter().filter(|(r, _)| r.status == Status::Finished).count(),
        avg_jct_s: jct_p.mean,
        p99_jct_s: jct_p.p99,
        makespan_s,
        avg_queue_s: mean(&queue),
        avg_wait_s: mean(&finished.iter().map(|f| f.2).collect::<Vec<_>>()),
        avg_jct_large_s: split(true, |f| f.1),
        avg_jct_small_s: split(false, |f| f.1),
        avg_wait_large_s: split(true, |f| f.2),
        avg_wait_small_s: split(false, |f| f.2),
        max_wait_over_alone,
        avg_alone_s: mean(&alone),
        avg_iter_s: it.mean,
        p90_iter_s: it.p90,
        p99_iter_s: it.p99,
        avg_slowdown: mean(&slow),
        avg_link_util: mean(&links.iter().map(|l| l.1).collect::<Vec<_>>()),
        // Metronome Eq. 5: Σ_l B_l · ξ_l / B_max / |L|.
        bw_util_gamma: if links.is_empty() || b_max <= 0.0 {
            0.0
        } else {
            links.iter().map(|l| l.0 * l.1 / b_max).sum::<f64>() / links.len() as f64
        },
        congested_link_s: links.iter().map(|l| l.2).sum(),
        excess_gbit: links.iter().map(|l| l.3).sum(),
        gpu_util: if gpu_time > 0.0 { gpu_s / gpu_time } else { 0.0 },
        gpu_shared: if gpu_time > 0.0 { shared_s / gpu_time } else { 0.0 },
        gpu_idle: if gpu_time > 0.0 { (1.0 - gpu_s / gpu_time).max(0.0) } else { 0.0 },
        afr: if chosen.is_empty() {
            0.0
        } else {
            chosen.iter().filter(|(r, _)| r.status == Status::Rejected).count() as f64 / chosen.len() as f64
        },
        transport_timeouts: sim.transport_timeouts().unwrap_or(0),
        decision_ms_p50: dec_p.p50,
        decision_ms_p99: dec_p.p99,
    }
}
