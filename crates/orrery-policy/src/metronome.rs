//! Metronome's scheduler and stop-and-wait controller (Metronome §III-B/C,
//! Alg. 1), on whole jobs placed pod by pod (one pod per worker).
//!
//! For each pod of the job at the head of the queue:
//! * **PreFilter**: latency score Δn of every node — the summed latency to the
//!   pods it depends on that are already placed (its job's other pods); with
//!   none, the mean latency from the node to all nodes.
//! * **Filter**: nodes with a free GPU whose host link can carry the pod's
//!   bandwidth (Eq. 14).
//! * **Score**: 100 when the pod is LowComm, the node has no other
//!   communicating pods, or their summed bandwidth fits the link (early
//!   return); otherwise Eq. 18 on the node's unified circle after the fast
//!   feasible rotation (read as 100 × CASSINI's score, see `orrery_interleave::score`).
//! * **NormalizeScore**: among the best-scoring nodes, Eq. 19 turns Δn into
//!   0–100 (lowest latency best; reversed for LowComm pods) and picks the highest.
//! * **Reserve**: the pod takes the node; the job is placed when all its pods
//!   are (all-or-nothing, Eq. 11–12); otherwise nothing is placed and the queue
//!   waits (FIFO).
//!
//! The controller aligns each newly placed low-priority job to the rotation
//! its busiest node gave it, relative to that node's reference job (the
//! highest-priority, earliest pod, Eq. 16): the high-priority job is never
//! moved. It then watches iterations: when a low-priority job's iteration
//! exceeds A_T = 110% of its slot period more than O_T = 5 times in a window
//! of 10, it is re-aligned (the stop-and-wait pause). The paper compares with
//! the job's ideal iteration time; the slot period is the period it is paced
//! to on the unified circle, which is at least that, so a job paced to a
//! longer slot is not called slow for keeping it.
//!
//! Simplifications: only host links are scored (as Metronome does, Eq. 14);
//! the offline optimal recalculation (§III-C) runs for the newcomer on its
//! chosen node when it is placed (best score, widest cushion), not again for
//! jobs already running; duty-cycle change detection is not modelled;
//! AppGroup dependencies beyond a job's own pods are not read.

use crate::{ClusterView, Decision, JobId, Policy, QueuedJob};
use orrery_interleave::score::{compatibility, demand};
use orrery_interleave::unified::{CircleJob, Params, UnifiedCircle, unify};
use orrery_interleave::{Search, solve};
use orrery_model::placed::place;
use orrery_model::zoo::{Placement, model};
use orrery_model::{Circle, HostId, JobSpec};
use std::collections::HashMap;

/// Metronome's thresholds (§IV-A).
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// A_T: an iteration this many times its time alone is slow.
    pub slow_factor: f64,
    /// O_T: slow iterations in the window that trigger a re-alignment.
    pub slow_count: usize,
    /// Window, iterations.
    pub window: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds { slow_factor: 1.10, slow_count: 5, window: 10 }
    }
}

/// The Metronome policy.
#[derive(Debug)]
pub struct Metronome {
    /// Controller thresholds.
    pub thresholds: Thresholds,
    /// The third stage: cushioned rotations (off: compact ones, Table VII).
    pub third_stage: bool,
    /// The stop-and-wait monitoring (off: Table VIII's "wo").
    pub monitor: bool,
    latency: Vec<Vec<f64>>,
    /// Mean latency from each host to all others (the first pod's PreFilter),
    /// computed with `latency`: O(hosts²) once, not per pod.
    mean_latency: Vec<f64>,
    /// Per paced low-priority job, what the controller watches.
    watched: HashMap<JobId, Watch>,
    /// Re-alignments done by the controller.
    pub readjustments: u64,
}

/// A paced job: its slot period, its shift from its reference job, and its
/// last iteration times.
#[derive(Debug)]
struct Watch {
    period_ms: f64,
    rel_ms: f64,
    reference: JobId,
    recent: Vec<f64>,
}

/// Communicating pods on each node: (job, its circle, its priority).
type NodePods = HashMap<HostId, Vec<(JobId, Circle, orrery_model::Priority)>>;

/// A job's pods placed: GPUs per host, and the node whose rotation sets the
/// job's shift: (node, shift in ms relative to the node's reference job, the
/// job's period on the node's unified circle in ms).
struct JobPlacement {
    hosts: Vec<(HostId, u32)>,
    shift: Option<(HostId, f64, f64)>,
}

/// The circle a job would have spread over `workers` hosts at `gbps`.
fn circle_of(spec: &JobSpec, gpu: &str, gbps: f64) -> Option<Circle> {
    let m = model(&spec.model)?;
    Some(m.shape_on(gpu, spec.batch, &Placement::spread(spec.workers), gbps)?.circle())
}

/// Eq. 19: latency scores normalised to 0–100, lower latency scoring higher.
pub fn normalize(delta: &[f64]) -> Vec<f64> {
    let lo = delta.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = delta.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    delta
        .iter()
        .map(|&d| if hi > lo { 100.0 - (100.0 * (d - lo) / (hi - lo)).floor() } else { 100.0 - (d - lo) })
        .collect()
}

impl Default for Metronome {
    fn default() -> Self {
        Metronome {
            thresholds: Thresholds::default(),
            third_stage: true,
            monitor: true,
            latency: Vec::new(),
            mean_latency: Vec::new(),
            watched: HashMap::new(),
            readjustments: 0,
        }
    }
}

impl Metronome {
    /// Places all pods of `job` or none; returns the hosts and, per host, the
    /// shift (ms) its node's rotation gives the job.
    fn place_job(
        &self,
        view: &ClusterView<'_>,
        job: &QueuedJob<'_>,
        free: &mut [u32],
        node_pods: &mut NodePods,
    ) -> Option<JobPlacement> {
        let t = view.topology;
        let spec = job.spec;
        let per_pod = spec.gpus_per_worker.max(1);
        let fastest = (0..t.hosts.len()).map(|h| t.host_nic_gbps(h)).fold(0.0, f64::max);
        let mut scratch = free.to_vec();
        let mut chosen: Vec<HostId> = Vec::new();
        let mut shift: Option<(HostId, f64, f64, f64)> = None; // (host, score, shift ms, period ms)
        // The job's circle depends only on the host's GPU type and rate:
        // derived once per kind of host, not per host and pod.
        let mut circles: HashMap<(&str, u64), Option<Circle>> = HashMap::new();
        let mut scores: HashMap<HostId, (f64, Option<UnifiedCircle>)> = HashMap::new();
        for _pod in 0..spec.workers {
            // PreFilter: latency to the job's pods placed so far, or the mean.
            let delta: Vec<f64> = (0..t.hosts.len())
                .map(|n| {
                    if chosen.is_empty() {
                        self.mean_latency[n]
                    } else {
                        chosen.iter().map(|&c| self.latency[n][c]).sum()
                    }
                })
                .collect();
            // (node, score, its unified circle with the newcomer last, when rotated)
            let mut best: Vec<(HostId, f64)> = Vec::new();
            for (n, &available) in scratch.iter().enumerate() {
                // Filter: a free GPU, and the pod's declared bandwidth — its
                // peak rate on the fastest NIC — within the link (Eq. 14).
                let nic = t.host_nic_gbps(n);
                let gpu = t.hosts[n].gpu_type.as_str();
                for gbps in [fastest, nic] {
                    circles.entry((gpu, gbps.to_bits())).or_insert_with(|| circle_of(spec, gpu, gbps));
                }
                let Some(declared) = &circles[&(gpu, fastest.to_bits())] else { continue };
                let peak = declared.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max);
                if available < per_pod || peak > nic + 1e-9 || (spec.anti_affinity && chosen.contains(&n)) {
                    continue;
                }
                let Some(circle) = &circles[&(gpu, nic.to_bits())] else { continue };
                // Score (Eq. 18) with the early returns. A node's score
                // depends on its pods and the newcomer's circle, not on which
                // pod of the job is being placed: computed once per job.
                let (score, _) = scores.entry(n).or_insert_with(|| {
                    let bw = circle.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max);
                    let others = node_pods.get(&n).map(Vec::as_slice).unwrap_or_default();
                    let total_bw: f64 =
                        others.iter().map(|o| o.1.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max)).sum::<f64>() + bw;
                    if spec.low_comm || bw == 0.0 || others.is_empty() || total_bw <= nic {
                        (100.0, None)
                    } else {
                        let mut circles: Vec<CircleJob> = others
                            .iter()
                            .map(|(id, c, p)| CircleJob { name: id.to_string(), priority: *p, circle: c.clone() })
                            .collect();
                        circles.push(CircleJob {
                            name: job.id.to_string(),
                            priority: spec.priority,
                            circle: circle.clone(),
                        });
                        match unify(&circles, &Params::default()) {
                            Ok(u) => {
                                let sol = solve(&u, nic, Search::FastFeasible);
                                (100.0 * compatibility(&demand(&u, &sol.rotations), nic), Some(u))
                            }
                            Err(_) => (0.0, None),
                        }
                    }
                });
                best.push((n, *score));
            }
            let max = best.iter().map(|b| b.1).fold(f64::NEG_INFINITY, f64::max);
            let top: Vec<&(HostId, f64)> = best.iter().filter(|b| b.1 >= max - 1e-9).collect();
            // NormalizeScore (Eq. 19) among the best: lowest latency, or highest for LowComm.
            let d: Vec<f64> = top.iter().map(|b| delta[b.0]).collect();
            let norm = normalize(&d);
            let pick = (0..top.len()).max_by(|&a, &b| {
                let (x, y) = if spec.low_comm { (100.0 - norm[a], 100.0 - norm[b]) } else { (norm[a], norm[b]) };
                x.total_cmp(&y).then(top[b].0.cmp(&top[a].0))
            })?;
            let (n, score) = *top[pick];
            let unified = &scores[&n].1;
            scratch[n] -= per_pod;
            chosen.push(n);
            if let Some(u) = unified
                && shift.is_none_or(|s| score < s.1)
            {
                // The controller's offline recalculation (§III-C): on the chosen
                // node, the best score with the widest cushion; the ablation
                // without the third stage packs the newcomer against the others.
                let search = if self.third_stage { Search::OptimalCushion } else { Search::Compact };
                let search = if u.jobs.len() > 4 && self.third_stage { Search::FastFeasible } else { search };
                let shifts = solve(u, t.host_nic_gbps(n), search).shifts_ms(u);
                let me = u.jobs.len() - 1;
                shift = Some((n, score, shifts[me] - shifts[u.reference], u.jobs[me].period_ms));
            }
        }
        // Reserve: all pods placed.
        free.copy_from_slice(&scratch);
        let hosts = crate::baseline::group_pods(&chosen, per_pod);
        let circle = place(t, spec, &hosts).map(|p| p.shape.circle());
        if let Some(c) = circle.filter(|c| !c.arcs.is_empty()) {
            for &(n, _) in &hosts {
                node_pods.entry(n).or_default().push((job.id, c.clone(), spec.priority));
            }
        }
        Some(JobPlacement { hosts, shift: shift.map(|s| (s.0, s.2, s.3)) })
    }
}

impl Policy for Metronome {
    fn name(&self) -> String {
        match (self.third_stage, self.monitor) {
            (true, true) => "metronome".into(),
            (false, true) => "metronome-no-stage3".into(),
            (true, false) => "metronome-no-monitor".into(),
            (false, false) => "metronome-no-stage3-no-monitor".into(),
        }
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        if self.latency.len() != view.topology.hosts.len() {
            self.latency = view.topology.latency_matrix_us();
            let hosts = view.topology.hosts.len() as f64;
            self.mean_latency =
                self.latency.iter().map(|row| row.iter().filter(|v| v.is_finite()).sum::<f64>() / hosts).collect();
        }
        let mut free = view.free_gpus.to_vec();
        // Pods already on each node with their circles (communicating jobs only).
        let mut node_pods: NodePods = HashMap::new();
        for r in &view.running {
            if let Some(c) =
                place(view.topology, r.spec, r.hosts).map(|p| p.shape.circle()).filter(|c| !c.arcs.is_empty())
            {
                for &(n, _) in r.hosts {
                    node_pods.entry(n).or_default().push((r.id, c.clone(), r.spec.priority));
                }
            }
        }
        let mut out = Vec::new();
        for job in &view.queue {
            if job.spec.gpus() > view.topology.gpu_count() {
                out.push(Decision::Reject { job: job.id, reason: "larger than the cluster".into() });
                continue;
            }
            let Some(JobPlacement { hosts, shift }) = self.place_job(view, job, &mut free, &mut node_pods) else {
                break;
            };
            // The reference job of the node whose rotation set the shift: its
            // highest-priority, earliest pod other than the newcomer, with its
            // iteration start; a reference placed earlier in this round
            // starts now.
            let reference = shift
                .and_then(|(n, _, _)| node_pods.get(&n))
                .and_then(|pods| pods.iter().filter(|p| p.0 != job.id).max_by_key(|p| (p.2, std::cmp::Reverse(p.0))))
                .and_then(|p| {
                    let running = view.running.iter().find(|r| r.id == p.0).map(|r| (r.id, r.iteration_start_s));
                    let placed_now = out.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == p.0));
                    running.or(placed_now.then_some((p.0, view.now_s)))
                });
            out.push(Decision::Place { job: job.id, hosts });
            // Pace a low-priority newcomer in the slots of its rotation, relative
            // to the node's reference job, at its period on the unified circle
            // (idle time injected, §III-B); the high-priority job is never
            // moved (Eq. 16).
            if let (Some((_, rel_ms, period_ms)), Some((reference, start_s))) = (shift, reference)
                && job.spec.priority == orrery_model::Priority::Low
                && period_ms > 0.0
            {
                let offset_s = start_s + rel_ms.rem_euclid(period_ms) / 1e3;
                let watch = Watch { period_ms, rel_ms, reference, recent: Vec::new() };
                self.watched.insert(job.id, watch);
                out.push(Decision::Pace { job: job.id, period_ms, offset_s });
            }
        }
        out
    }

    fn observes_iterations(&self) -> bool {
        true
    }

    /// The controller watches the low-priority jobs it paced, and only while
    /// their window holds a slow iteration; others' iterations change
    /// nothing. An undisturbed paced job's iteration lasts its slot period
    /// plus the change in its compute noise since the last one, so to trip
    /// the controller it would need more than O_T noise outliers of 10% of a
    /// period within one window (at 2% jitter, each is a 3.5σ draw): the
    /// driver may fast-forward it. O(window).
    fn watches(&self, job: JobId) -> bool {
        let slow = self.thresholds.slow_factor;
        self.monitor && self.watched.get(&job).is_some_and(|w| w.recent.iter().any(|&ms| ms > slow * w.period_ms))
    }

    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, iteration_ms: f64) -> Vec<Decision> {
        let th = self.thresholds;
        if !self.monitor {
            return Vec::new();
        }
        let Some(w) = self.watched.get_mut(&job) else { return Vec::new() };
        w.recent.push(iteration_ms);
        if w.recent.len() > th.window {
            w.recent.remove(0);
        }
        // More than O_T of the last `window` iterations over A_T × the slot:
        // stop and wait for the slot the reference job's current phase gives.
        let slow = w.recent.iter().filter(|&&ms| ms > th.slow_factor * w.period_ms).count();
        if slow <= th.slow_count {
            return Vec::new();
        }
        w.recent.clear();
        self.readjustments += 1;
        match view.running.iter().find(|r| r.id == w.reference) {
            Some(r) => {
                let offset_s = r.iteration_start_s + w.rel_ms.rem_euclid(w.period_ms) / 1e3;
                vec![Decision::Pace { job, period_ms: w.period_ms, offset_s }]
            }
            None => {
                // The reference is gone: nothing to keep time with.
                self.watched.remove(&job);
                vec![Decision::Pace { job, period_ms: 0.0, offset_s: 0.0 }]
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunningJob;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{Priority, Topology, Work};

    fn cluster() -> Topology {
        // Two racks of two single-GPU hosts, 25 Gbit/s links.
        LeafSpine {
            racks: 2,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 1,
            gpu_type: "a30".into(),
            host_gbps: 25.0,
            uplink_gbps: 25.0,
        }
        .build("t")
        .expect("valid")
    }

    fn placed(decisions: &[Decision], job: JobId) -> Option<Vec<(HostId, u32)>> {
        decisions.iter().find_map(|d| match d {
            Decision::Place { job: j, hosts } if *j == job => Some(hosts.clone()),
            _ => None,
        })
    }

    #[test]
    fn the_pods_of_a_job_land_close_together() {
        // Every node scores 100 (nothing else runs), so Eq. 19 decides: the
        // second pod goes to the host one hop from the first, not three.
        let t = cluster();
        let spec = JobSpec::new("a", "vgg16", 16, 2, Work::Iterations(10), 0.0);
        let view = ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[1, 1, 1, 1],
            queue: vec![QueuedJob::new(0, &spec, 0.0)],
            running: Vec::new(),
        };
        let d = Metronome::default().schedule(&view);
        let hosts = placed(&d, 0).expect("placed");
        let rack = |h: HostId| h / 2;
        assert_eq!(hosts.len(), 2);
        assert_eq!(rack(hosts[0].0), rack(hosts[1].0), "{hosts:?}");
    }

    /// Two racks of two hosts with two A30s each, 25 Gbit/s links.
    fn two_racks_of_two() -> orrery_model::Topology {
        LeafSpine {
            racks: 2,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 2,
            gpu_type: "a30".into(),
            host_gbps: 25.0,
            uplink_gbps: 25.0,
        }
        .build("t")
        .expect("valid")
    }

    #[test]
    fn only_the_low_priority_newcomer_is_aligned() {
        // Two-GPU hosts. A high-priority VGG16 ring holds one GPU on h0 and on
        // h2; h1 and h3 are full, so a low-priority VGG16 ring must share h0's
        // and h2's links. It is placed there and aligned to the rotation the
        // node's circle gives it; the high-priority job is never moved (Eq. 16).
        let t = two_racks_of_two();
        let mut high = JobSpec::new("hi", "vgg16", 64, 2, Work::Iterations(100), 0.0);
        high.priority = Priority::High;
        let low = JobSpec::new("lo", "vgg16", 64, 2, Work::Iterations(100), 0.0);
        let hosts = [(0usize, 1u32), (2, 1)];
        let view = ClusterView {
            now_s: 5.0,
            topology: &t,
            free_gpus: &[1, 0, 1, 0],
            queue: vec![QueuedJob::new(1, &low, 0.0)],
            running: vec![RunningJob {
                iterations_done: 3,
                iteration_start_s: 4.9,
                progress: 0.03,
                service_gpu_s: 1.0,
                running_s: 0.5,
                ..RunningJob::new(0, &high, &hosts)
            }],
        };
        let d = Metronome::default().schedule(&view);
        let mut got = placed(&d, 1).expect("placed");
        got.sort_unstable();
        assert_eq!(got, vec![(0, 1), (2, 1)]);
        let aligned: Vec<(JobId, f64)> = d
            .iter()
            .filter_map(|d| if let Decision::Pace { job, offset_s, .. } = d { Some((*job, *offset_s)) } else { None })
            .collect();
        assert_eq!(aligned.len(), 1, "{d:?}");
        assert_eq!(aligned[0].0, 1, "only the low-priority job moves");
        // Its offset is measured from the reference job's current iteration start.
        assert!(aligned[0].1 >= 4.9);
    }

    #[test]
    fn a_newcomer_is_paced_to_a_reference_placed_in_the_same_round() {
        // The same two rings, both arriving at once: the high-priority one is
        // placed first and starts now (5 s); the low-priority one shares its
        // links and is paced in the slot the rotation gives it after that start.
        let t = two_racks_of_two();
        // Pod anti-affinity: one pod per host, so both rings span h0 and h2.
        let mut high = JobSpec::new("hi", "vgg16", 64, 2, Work::Iterations(100), 0.0);
        high.priority = Priority::High;
        high.anti_affinity = true;
        let mut low = JobSpec::new("lo", "vgg16", 64, 2, Work::Iterations(100), 0.0);
        low.anti_affinity = true;
        let view = ClusterView {
            now_s: 5.0,
            topology: &t,
            free_gpus: &[2, 0, 2, 0],
            queue: vec![QueuedJob::new(0, &high, 0.0), QueuedJob::new(1, &low, 0.0)],
            running: Vec::new(),
        };
        let d = Metronome::default().schedule(&view);
        assert!(placed(&d, 0).is_some() && placed(&d, 1).is_some(), "{d:?}");
        let paced: Vec<(JobId, f64, f64)> = d
            .iter()
            .filter_map(|d| match d {
                Decision::Pace { job, period_ms, offset_s } => Some((*job, *period_ms, *offset_s)),
                _ => None,
            })
            .collect();
        assert_eq!(paced.len(), 1, "{d:?}");
        let (job, period_ms, offset_s) = paced[0];
        assert_eq!(job, 1, "only the low-priority job is paced");
        assert!((5.0..5.0 + period_ms / 1e3).contains(&offset_s), "{offset_s} within one period of now");
    }

    #[test]
    fn eq19_normalisation() {
        // Δ = 10, 20, 30: 100 − ⌊100 · (Δ − 10) / 20⌋.
        assert_eq!(normalize(&[10.0, 20.0, 30.0]), vec![100.0, 50.0, 0.0]);
        // All equal: 100 − (Δ − Δ_min).
        assert_eq!(normalize(&[7.0, 7.0]), vec![100.0, 100.0]);
    }
}
