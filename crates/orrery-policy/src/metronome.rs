//! Metronome's scheduler and stop-and-wait controller (Metronome §III-B/C,
//! Alg. 1), on whole jobs placed pod by pod (one pod per worker).
//!
//! For each pod of the job at the head of the queue:
//! * **PreFilter**: latency score Δn of every node — the summed latency to the
//!   pods it depends on that are already placed (its job's other pods, and
//!   the pods of jobs linked to it by `depends_on`, the AppGroup); with none,
//!   the mean latency from the node to all nodes.
//! * **Filter**: nodes with a free GPU whose host link can carry the pod's
//!   bandwidth (Eq. 14), and that close no dependency loop in the Affinity
//!   graph (after CASSINI; `metronome:place-on-loops` drops this rule).
//! * **Score**: 100 when the pod is LowComm, the node has no other
//!   communicating pods, or their summed bandwidth fits the link (early
//!   return); otherwise Eq. 18 on the node's unified circle after the fast
//!   feasible rotation (read as 100 × CASSINI's score, see `orrery_interleave::score`).
//! * **NormalizeScore**: among the best-scoring nodes, Eq. 19 turns Δn into
//!   0–100 (lowest latency best; reversed for LowComm pods) and picks the highest.
//! * **Reserve**: the pod takes the node; the job is placed when all its pods
//!   are (all-or-nothing, Eq. 11–12); otherwise nothing is placed and the queue
//!   waits (FIFO). Each contended node's offset scheme goes to the
//!   controller, with SkipPhaseThree's three cases.
//!
//! The controller's global offset (§III-C) walks the Affinity graph of the
//! schemes from the component's highest-priority job (Eq. 16) and paces each
//! low-priority job whose shift changed: the high-priority jobs are never
//! moved. It then watches iterations: when a low-priority job's iteration
//! exceeds A_T = 110% of its slot period more than O_T = 5 times in a window
//! of 10, it is re-aligned (the stop-and-wait pause). The paper compares with
//! the job's ideal iteration time; the slot period is the period it is paced
//! to on the unified circle, which is at least that, so a job paced to a
//! longer slot is not called slow for keeping it. A job that trips again
//! within two windows of a pause has changed its duty cycle: it is
//! re-profiled at its mean iteration since the pause and rotated anew on its
//! nodes, if that paces it at most 5% slower than it runs ("when
//! necessary"; `metronome:pause-only` never re-profiles).
//!
//! Simplifications: only host links are scored (as Metronome does, Eq. 14);
//! a node already in the graph keeps its jobs' shifts and the offline
//! recalculation rotates only the newcomer there (running jobs are not
//! re-optimised); a re-profiled job's circle is its modelled one with the
//! communication stretched to the measured iteration.

use crate::estimate::{PeriodEstimate, upper_median};
use crate::memo::{FastMap, FastSet, PerPlacement};
use crate::{ClusterView, Decision, Iteration, IterationNeeds, JobId, Policy};
use components::Components;
use orrery_interleave::Search;
use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_model::placed::place;
use orrery_model::topology::Latencies;
use orrery_model::{Circle, HostId};
pub use pipeline::normalize;
use pipeline::{HostKinds, JobPlacement, NodePods, Pod, SCORE_MEMO_ENTRIES, ScoreMemo, newcomer_on};
use std::collections::BTreeMap;
use std::sync::Arc;
use watches::Watches;

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

impl Thresholds {
    /// Whether a window of iteration times trips the controller: more than
    /// O_T of them over A_T × the slot period. O(window).
    fn trip<'a>(&self, window: impl IntoIterator<Item = &'a f64>, period_ms: f64) -> bool {
        window.into_iter().filter(|&&ms| ms > self.slow_factor * period_ms).count() > self.slow_count
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
    /// The Filter's dependency-loop rule (off: `metronome:place-on-loops`,
    /// orrery's variant, which places where the loop closes and lets the
    /// global offset's first path set the shifts).
    pub loop_filter: bool,
    /// Duty-cycle change detection: a job that trips the controller again
    /// soon after a pause is re-profiled (off: `metronome:pause-only`,
    /// orrery's variant, which only ever pauses).
    pub reprofile: bool,
    latency: Latencies,
    /// Mean latency from each host to all others (the first pod's PreFilter),
    /// computed with `latency`: O(hosts²) once, not per pod.
    mean_latency: Vec<f64>,
    /// Per latency kind, whether its hosts' means are one
    /// ([`pipeline::means_alike`]).
    mean_alike: Vec<bool>,
    /// Each host's kind (GPU type, NIC rate, GPUs): a job's circle depends
    /// only on it. Computed with `latency`.
    host_kinds: HostKinds,
    /// Per paced low-priority job, what the controller watches.
    watched: Watches,
    /// Each contended node's offset scheme, as Reserve sent it to the
    /// controller: the edges of the Affinity graph (§III-C, "Global offset").
    schemes: BTreeMap<HostId, Scheme>,
    /// The Affinity graph's components, kept across rounds while `schemes`
    /// keeps its edges (`components_stale` otherwise).
    component: Components,
    components_stale: bool,
    /// Scores of nodes (Eq. 18) across jobs and rounds.
    score_memo: ScoreMemo,
    /// A round's communicating pods on each node, kept for its allocations.
    node_pods: NodePods,
    /// Re-alignments done by the controller.
    pub readjustments: u64,
    /// Jobs re-profiled after a change of duty cycle.
    pub reprofiles: u64,
    /// Closed-loop slots: the slots follow each reference's measured
    /// period and phase (off: `metronome:open-loop`, the model's period).
    pub closed_loop: bool,
    /// Measured first (`metronome:measured`, issue 68): a low-priority job
    /// the global offset would pace runs unpaced until the controller's own
    /// rule (more than O_T of a window over A_T × its slot) measures it
    /// slow; its pace is then weighed over the next window and removed when
    /// its iterations are no shorter than before.
    pub measured: bool,
    /// Paces applied on a measurement.
    pub applied_on_measurement: u64,
    /// Paces applied on a measurement and removed for no gain.
    pub given_up_on_measurement: u64,
    /// Each reference job's measured period.
    tracks: FastMap<JobId, PeriodEstimate>,
    /// Slots re-timed to a reference's measured period or phase.
    pub retimings: u64,
    /// Each running job's circle on its placement (None: it does not
    /// communicate), kept while the placement holds: a round derives only
    /// the newcomers' (issue 43: 2,048 running jobs' shapes a round at
    /// 4,096 hosts), and knows a kept one by the driver's placement serial
    /// without reading the job's hosts.
    running_circles: PerPlacement<Option<Arc<Circle>>>,
}

/// A re-profiled job is paced at most this factor over its measured
/// iteration, or the recalculation is not adopted.
const REPROFILE_TOLERANCE: f64 = 1.05;

/// A paced job: its slot period, its shift from its reference job, and its
/// last iteration times.
#[derive(Debug, Clone)]
struct Watch {
    /// The slot period in force, ms: `model_period_ms` scaled to the
    /// reference's measured period.
    period_ms: f64,
    /// Its shift from the reference in force, ms (scaled alike).
    rel_ms: f64,
    /// Slot period and shift on the unified circle (the model).
    model_period_ms: f64,
    model_rel_ms: f64,
    /// The reference's modelled iteration time alone on its placement, ms
    /// (a high-priority reference is never paced: it runs at this).
    ref_model_ms: f64,
    /// The offset of the Pace in force, s.
    offset_s: f64,
    reference: JobId,
    recent: Vec<f64>,
    /// Iterations seen since the watch began.
    seen: u64,
    /// `seen` at the last re-alignment.
    realigned_at: Option<u64>,
    /// Sum of the iteration times since the last re-alignment.
    since_ms: f64,
    /// Whether its pace is in force (`metronome:measured` defers it).
    gate: Gate,
}

/// Where a watched job's pace stands under `metronome:measured`.
#[derive(Debug, Clone, PartialEq)]
enum Gate {
    /// Paced (always, without `measured`).
    Paced,
    /// Not paced until its iterations are measured slow.
    Deferred,
    /// Paced on a measurement: the median of its window before, ms, and its
    /// iterations since (weighed when they fill a window).
    Trial { before_ms: f64, after: Vec<f64> },
    /// Its pace gained nothing and was removed: left alone until placed again.
    GivenUp,
}

impl Watch {
    fn new(period_ms: f64, rel_ms: f64, ref_model_ms: f64, offset_s: f64, reference: JobId) -> Self {
        Watch {
            period_ms,
            rel_ms,
            model_period_ms: period_ms,
            model_rel_ms: rel_ms,
            ref_model_ms,
            offset_s,
            reference,
            recent: Vec::new(),
            seen: 0,
            realigned_at: None,
            since_ms: 0.0,
            gate: Gate::Paced,
        }
    }
}

/// A slot period more than this fraction off the one the reference's
/// measured period gives is re-paced (1%: 4.8 ms on a 483 ms slot; the
/// testbed's real iterations run 3-5% over the model).
const PERIOD_TOLERANCE: f64 = 0.01;

/// Slots whose phase is more than this fraction of the period off the
/// reference's next start are re-anchored (5%: 24 ms on a 483 ms slot,
/// above the wander of a start under 1% compute jitter, σ ≈ 5 ms).
const PHASE_TOLERANCE: f64 = 0.05;

/// One node's offset scheme: each communicating job on it with its shift
/// (ms) relative to the node's reference job and its period (ms) on the
/// node's unified circle, and its priority.
#[derive(Debug, Clone)]
struct Scheme {
    jobs: Vec<(JobId, f64, f64, orrery_model::Priority)>,
}

impl Default for Metronome {
    fn default() -> Self {
        Metronome {
            thresholds: Thresholds::default(),
            third_stage: true,
            monitor: true,
            loop_filter: true,
            reprofile: true,
            latency: Latencies::default(),
            mean_latency: Vec::new(),
            mean_alike: Vec::new(),
            host_kinds: HostKinds::default(),
            watched: Watches::default(),
            schemes: BTreeMap::new(),
            component: Components::default(),
            components_stale: true,
            score_memo: ScoreMemo::default(),
            node_pods: NodePods::default(),
            readjustments: 0,
            reprofiles: 0,
            closed_loop: true,
            measured: false,
            applied_on_measurement: 0,
            given_up_on_measurement: 0,
            tracks: FastMap::default(),
            retimings: 0,
            running_circles: PerPlacement::default(),
        }
    }
}

impl Metronome {
    /// Duty-cycle change detection (§III-C, "Continuous regulation"): a
    /// job whose iterations now take `measured_ms` is re-profiled. Its
    /// circle keeps its compute and its bytes; its communication arcs
    /// stretch (at a proportionally lower rate) to fill the measured
    /// iteration, as congestion elsewhere or a new batch size would make
    /// them. On every node of the graph that holds it, it is rotated anew
    /// against the others held at their shifts, and the global offset paces
    /// whatever changed. None when nothing can be re-profiled (no longer
    /// iteration, no communication, the job is on no scheme, or the new
    /// rotation would pace it slower than it runs: then the caller pauses it
    /// as before). O(paced jobs) to keep the controller's state for a
    /// rollback, and O(jobs on its nodes · A + a two-job search per node +
    /// the global offset).
    fn recalculate(&mut self, view: &ClusterView<'_>, job: JobId, measured_ms: f64) -> Option<Vec<Decision>> {
        let t = view.topology;
        let r = view.running.iter().find(|r| r.id == job)?;
        let circle = place(t, r.spec, r.hosts).map(|p| p.shape.circle())?;
        let comm: f64 = circle.arcs.iter().map(|a| a.duration_ms).sum();
        let extra = measured_ms - circle.period_ms;
        if comm <= 0.0 || extra <= 0.0 {
            return None;
        }
        let f = 1.0 + extra / comm;
        let mut moved = 0.0;
        let arcs = circle
            .arcs
            .iter()
            .map(|a| {
                let arc = orrery_model::Arc {
                    start_ms: a.start_ms + moved,
                    duration_ms: a.duration_ms * f,
                    gbps: a.gbps / f,
                };
                moved += a.duration_ms * (f - 1.0);
                arc
            })
            .collect();
        let stretched = Circle { period_ms: circle.period_ms + extra, arcs };
        // Re-profiling keeps every scheme's jobs (the job is rotated anew
        // among the same ones), so it keeps the graph's components.
        if std::mem::take(&mut self.components_stale) {
            self.component = Components::of(self.schemes.iter());
        }
        // The nodes of the graph that hold the job, in node order.
        let holds = |n: &HostId| self.schemes.get(n).is_some_and(|s| s.jobs.iter().any(|j| j.0 == job));
        let mut nodes: Vec<HostId> = self
            .component
            .label(job)
            .map_or_else(Vec::new, |l| self.component.members(l).1.iter().copied().filter(holds).collect());
        nodes.sort_unstable();
        if nodes.is_empty() {
            return None;
        }
        // Kept to roll back a recalculation that is not adopted.
        let saved_schemes: Vec<(HostId, Scheme)> = nodes.iter().map(|&n| (n, self.schemes[&n].clone())).collect();
        let saved_watched = self.watched.clone();
        for n in nodes {
            let mut old = self.schemes[&n].clone();
            old.jobs.retain(|j| j.0 != job);
            let others: Vec<Pod> = view
                .running
                .iter()
                .filter(|o| o.id != job && o.hosts.iter().any(|h| h.0 == n))
                .filter_map(|o| {
                    let c = place(t, o.spec, o.hosts).map(|p| p.shape.circle()).filter(|c| !c.arcs.is_empty())?;
                    Some((o.id, Arc::new(c), o.spec.priority))
                })
                .collect();
            let circles: Vec<CircleJob> = others
                .iter()
                .map(|(id, c, p)| CircleJob { name: id.to_string(), priority: *p, circle: Circle::clone(c) })
                .chain([CircleJob { name: job.to_string(), priority: r.spec.priority, circle: stretched.clone() }])
                .collect();
            let (Ok(u), false) = (unify(&circles, &Params::default()), others.is_empty()) else { continue };
            let search = match (self.third_stage, u.jobs.len()) {
                (false, _) => Search::Compact,
                (true, 2) | (true, 5..) => Search::FastFeasible,
                (true, _) => Search::OptimalCushion,
            };
            // (A scheme holds two jobs or more: `old` keeps at least one.)
            let scheme = newcomer_on(&old, &others, &u, (job, r.spec.priority), t.host_nic_gbps(n), search);
            self.schemes.insert(n, scheme);
        }
        self.watched.remove(&job);
        let component = std::mem::take(&mut self.component);
        // (The re-profiled job was paced: it stays so.)
        let paces = self.global_offset(view, job, &[], &component, false);
        self.component = component;
        // "When necessary" (§III-C): the new rotation is adopted only if it
        // paces the job no slower than it already runs. The unified circle
        // rounds periods up, and a job paced at a longer period than its
        // measured one would pay for the recalculation twice.
        let slower = paces.iter().any(|d| {
            matches!(d, Decision::Pace { job: j, period_ms, .. } if *j == job && *period_ms > measured_ms * REPROFILE_TOLERANCE)
        });
        // A recalculation that did not re-pace the job (its slot did not
        // change) would leave it unwatched: keep the old state and pause.
        if slower || !self.watched.contains_key(&job) {
            self.schemes.extend(saved_schemes);
            self.watched = saved_watched;
            return None;
        }
        Some(paces)
    }

    /// The controller's global offset (§III-C): a BFS over the Affinity
    /// graph from the highest-priority job of `job`'s component (the
    /// reference, Eq. 16, earliest on ties) gives every job of the component
    /// one shift that keeps every node's scheme (CASSINI Alg. 1, Theorem 1).
    /// Each low-priority job whose shift, period or reference changed is
    /// paced in the slots it gives, from the reference's current iteration
    /// start (now, for a reference placed in this round, listed in `out`);
    /// the high-priority jobs are never moved. A job is paced at its period
    /// on the unified circle of the node through which the BFS reaches it.
    /// `component` holds the graph's components. O(edges of the component
    /// · log). A job
    /// watched for the first time is deferred instead when `defer_new`
    /// (`metronome:measured`), and a deferred one stays so.
    fn global_offset(
        &mut self,
        view: &ClusterView<'_>,
        job: JobId,
        out: &[Decision],
        component: &Components,
        defer_new: bool,
    ) -> Vec<Decision> {
        let Some(label) = component.label(job) else { return Vec::new() };
        let (members, nodes) = component.members(label);
        let mut members = members.to_vec();
        members.sort_unstable();
        // The component's schemes in node order, as the BFS takes them.
        let mut nodes = nodes.to_vec();
        nodes.sort_unstable();
        let mut on: FastMap<JobId, Vec<&Scheme>> = FastMap::default();
        for scheme in nodes.iter().filter_map(|n| self.schemes.get(n)) {
            for x in &scheme.jobs {
                on.entry(x.0).or_default().push(scheme);
            }
        }
        // (job's entry on its first node)
        let entry = |j: JobId| on.get(&j).and_then(|s| s[0].jobs.iter().find(|x| x.0 == j));
        let priority = |j: JobId| entry(j).map_or(orrery_model::Priority::Low, |x| x.3);
        let Some(&reference) = members.iter().max_by_key(|&&j| (priority(j), std::cmp::Reverse(j))) else {
            return Vec::new();
        };
        // BFS (CASSINI Alg. 1, line 23): t_k = (t_j − w(j, n) + w(n, k))
        // mod the period of k on n, the period k is paced at. The Filter
        // keeps the graph free of loops, except nodes that hold the same
        // jobs or keep the shifts another node set (Reserve): the first
        // path reaches each job, and every other agrees.
        let mut shift: FastMap<JobId, (f64, f64)> = FastMap::default();
        let root_period = entry(reference).map_or(0.0, |x| x.2);
        shift.insert(reference, (0.0, root_period));
        // The reference's own iteration time, running or placed now.
        let placed_now = out.iter().find_map(|d| match d {
            Decision::Place { job, hosts } if *job == reference => {
                view.queue.iter().find(|q| q.id == reference).map(|q| (q.spec, hosts.as_slice()))
            }
            _ => None,
        });
        let ref_alone_ms = view
            .running
            .iter()
            .find(|r| r.id == reference)
            .map(|r| (r.spec, r.hosts))
            .or(placed_now)
            .and_then(|(spec, hosts)| place(view.topology, spec, hosts))
            .map_or(0.0, |p| p.shape.period_ms());
        let mut queue = std::collections::VecDeque::from([reference]);
        while let Some(j) = queue.pop_front() {
            let t_j = shift[&j].0;
            for scheme in on.get(&j).into_iter().flatten() {
                let Some(&(_, w_j, ..)) = scheme.jobs.iter().find(|x| x.0 == j) else { continue };
                for &(k, w_k, period_ms, _) in &scheme.jobs {
                    if let std::collections::hash_map::Entry::Vacant(e) = shift.entry(k) {
                        e.insert(((t_j - w_j + w_k).rem_euclid(period_ms), period_ms));
                        queue.push_back(k);
                    }
                }
            }
        }
        let start_s = match view.running.iter().find(|r| r.id == reference) {
            Some(r) => r.iteration_start_s,
            None if out.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == reference)) => view.now_s,
            None => return Vec::new(),
        };
        let mut paces = Vec::new();
        for &k in &members {
            let Some(&(rel_ms, period_ms)) = shift.get(&k) else { continue };
            if k == reference || priority(k) != orrery_model::Priority::Low || period_ms <= 0.0 {
                continue;
            }
            let old = self.watched.get(&k);
            let same = old.is_some_and(|w| {
                w.reference == reference
                    && (w.model_period_ms - period_ms).abs() <= 1e-9 * period_ms
                    && (w.model_rel_ms - rel_ms).abs() <= 1e-6
            });
            let old_gate = old.map(|w| w.gate.clone());
            if same || old_gate == Some(Gate::GivenUp) {
                continue;
            }
            let offset_s = start_s + rel_ms / 1e3;
            let mut watch = Watch::new(period_ms, rel_ms, ref_alone_ms, offset_s, reference);
            // Measured first: a job not yet paced stays unpaced until its
            // iterations say it collides (`control`).
            if old_gate == Some(Gate::Deferred) || (old_gate.is_none() && defer_new) {
                watch.gate = Gate::Deferred;
                self.watched.insert(k, watch);
                continue;
            }
            self.watched.insert(k, watch);
            paces.push(Decision::Pace { job: k, period_ms, offset_s });
        }
        paces
    }
}

impl Policy for Metronome {
    fn name(&self) -> String {
        let base = match (self.third_stage, self.monitor) {
            (true, true) => "metronome",
            (false, true) => "metronome-no-stage3",
            (true, false) => "metronome-no-monitor",
            (false, false) => "metronome-no-stage3-no-monitor",
        };
        let loops = if self.loop_filter { "" } else { ":place-on-loops" };
        let pauses = if self.reprofile { "" } else { ":pause-only" };
        let open = if self.closed_loop { "" } else { ":open-loop" };
        let measured = if self.measured { ":measured" } else { "" };
        format!("{base}{loops}{pauses}{open}{measured}")
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        if self.latency.hosts() != view.topology.hosts.len() {
            self.latency = view.topology.latencies_us();
            self.mean_latency = self.latency.means();
            self.mean_alike = pipeline::means_alike(&self.latency, &self.mean_latency);
            self.host_kinds = HostKinds::of(view.topology);
        }
        let mut free = view.free_gpus.to_vec();
        // Pods already on each node with their circles (communicating jobs only).
        // O(R) lookups, a shape derived per newly placed job.
        let mut node_pods = std::mem::take(&mut self.node_pods);
        node_pods.reset(view.topology.hosts.len());
        let live: FastSet<JobId> = view.running.iter().map(|r| r.id).collect();
        self.running_circles.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
        for r in &view.running {
            let circle = self.running_circles.of(r, || {
                place(view.topology, r.spec, r.hosts)
                    .map(|p| p.shape.circle())
                    .filter(|c| !c.arcs.is_empty())
                    .map(Arc::new)
            });
            if let Some(c) = circle {
                for &(n, _) in r.hosts {
                    node_pods.push(n, (r.id, c.clone(), r.spec.priority));
                }
            }
        }
        // Jobs that ended leave the Affinity graph; the shifts of the others
        // on each link still hold. O(scheme entries + R).
        for scheme in self.schemes.values_mut() {
            let before = scheme.jobs.len();
            scheme.jobs.retain(|j| live.contains(&j.0));
            self.components_stale |= scheme.jobs.len() != before;
        }
        self.schemes.retain(|_, s| s.jobs.len() >= 2);
        self.watched.retain(|j| live.contains(j));
        let mut out = Vec::new();
        // The Affinity graph's components, derived again only when its
        // edges changed: O(scheme entries) then.
        let mut component = std::mem::take(&mut self.component);
        let mut memo = std::mem::take(&mut self.score_memo);
        if memo.len() > SCORE_MEMO_ENTRIES {
            memo.clear();
        }
        if std::mem::take(&mut self.components_stale) {
            component = Components::of(self.schemes.iter());
        }
        for job in &view.queue {
            if job.spec.gpus() > view.topology.gpu_count() {
                out.push(Decision::Reject { job: job.id, reason: "larger than the cluster".into() });
                continue;
            }
            let Some(JobPlacement { hosts, schemes }) =
                self.place_job(view, job, &mut free, &mut node_pods, &component, &mut memo)
            else {
                break;
            };
            out.push(Decision::Place { job: job.id, hosts });
            if !schemes.is_empty() {
                // Edges added: the components they touch are joined.
                for (n, scheme) in schemes {
                    component.join(n, &scheme);
                    self.schemes.insert(n, scheme);
                }
                let paces = self.global_offset(view, job.id, &out, &component, self.measured);
                out.extend(paces);
            }
        }
        self.component = component;
        self.score_memo = memo;
        self.node_pods = node_pods;
        out
    }

    fn observes_iterations(&self) -> bool {
        true
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("metronome_readjustments", self.readjustments as f64),
            ("metronome_reprofiles", self.reprofiles as f64),
            ("metronome_retimings", self.retimings as f64),
            ("metronome_applied_on_measurement", self.applied_on_measurement as f64),
            ("metronome_given_up_on_measurement", self.given_up_on_measurement as f64),
        ]
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
        self.monitor
            && self.watched.get(&job).is_some_and(|w| match w.gate {
                Gate::Deferred | Gate::Trial { .. } => true,
                Gate::GivenUp => false,
                Gate::Paced => w.recent.iter().any(|&ms| ms > slow * w.period_ms),
            })
    }

    /// A paced job (the controller's window), a reference of paced jobs
    /// (the closed loop's estimate) and a former reference whose estimate
    /// is still to drop; `on_iteration` does nothing for any other job. It
    /// looks at the job, its reference and a reference's partners, unless
    /// this iteration trips the controller, which may re-place the job
    /// among the others on its nodes (re-profiling): then at everything.
    /// O(window + paced jobs), as `follow_reference` is.
    fn iteration_needs(&self, job: JobId, it: &Iteration) -> IterationNeeds {
        let paced = if self.monitor { self.watched.get(&job).filter(|w| w.gate != Gate::GivenUp) } else { None };
        let is_reference = self.closed_loop && self.watched.is_reference(job);
        let stale = self.closed_loop && self.tracks.contains_key(&job);
        if paced.is_none() && !is_reference && !stale {
            return IterationNeeds::Nothing;
        }
        if let Some(w) = paced {
            // `control`'s window after this iteration.
            let th = self.thresholds;
            let drop = usize::from(w.recent.len() + 1 > th.window);
            if th.trip(w.recent[drop..].iter().chain([&it.ms]), w.period_ms) {
                return IterationNeeds::All;
            }
        }
        let mut jobs = vec![job];
        jobs.extend(paced.map(|w| w.reference));
        if is_reference {
            jobs.extend(self.watched.partners_of(job));
        }
        IterationNeeds::Jobs(jobs)
    }

    /// The reference's measured period re-times its partners' slots
    /// (closed loop), then the stop-and-wait controller watches the paced
    /// job.
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: Iteration) -> Vec<Decision> {
        let mut out = if self.closed_loop { self.follow_reference(view, job, it) } else { Vec::new() };
        out.extend(self.control(view, job, it.ms));
        out
    }
}

impl Metronome {
    /// Closed loop (issue 36), after an iteration of `job`, when it is the
    /// reference of paced jobs. Its measured iteration time
    /// ([`PeriodEstimate`]; slow iterations and any it waited in left out)
    /// over its modelled one scales each partner's slot period and shift on
    /// the unified circle when that moves the period by more than
    /// [`PERIOD_TOLERANCE`]. A partner paced at the reference's own period
    /// is also re-anchored at the reference's next start (the end of the
    /// iteration just reported: the reference is never paced) when its
    /// phase is more than [`PHASE_TOLERANCE`] off; before there is an estimate
    /// (every iteration slow: the slots put the partner into the
    /// reference's communication) only that phase follows. In the
    /// simulator without jitter the reference runs its modelled period and
    /// nothing changes. O(paced jobs) per iteration, plus the estimate's
    /// O(w log w).
    fn follow_reference(&mut self, view: &ClusterView<'_>, job: JobId, it: Iteration) -> Vec<Decision> {
        if !self.watched.is_reference(job) {
            self.tracks.remove(&job);
            return Vec::new();
        }
        let Some(r) = view.running.iter().find(|r| r.id == job) else { return Vec::new() };
        let model_ms =
            self.watched.partners_of(job).next().and_then(|k| self.watched.get(&k)).map_or(0.0, |w| w.ref_model_ms);
        // A slow iteration (over A_T × the model: a collision, the
        // start-up) is not the reference's own period, nor one that
        // includes a wait it was given; following them would stretch the
        // slots into more collisions.
        let slow = it.ms > self.thresholds.slow_factor * model_ms;
        let track = self.tracks.entry(job).or_default();
        track.observe(it.ms, slow || it.waited_ms > 0.0);
        // Without an estimate yet (every iteration slow: the slots put the
        // partners into the reference's communication), the slots keep
        // their period and only their phase follows the reference.
        let measured_ms = track.period_ms();
        // Where the reference's next iteration starts. Not its latest
        // start: while the slots keep the model's period P and the pair
        // collides, the reference takes P + C (C: the partner's offset on
        // the circle, its all-reduce), and a slot C after its latest start,
        // plus P, lands on its next start: the partner is held in step, in
        // the collision it is paced to avoid (on the testbed, 3 of 5 runs
        // of Metronome's S2 and 1 of 5 of its DDP pair).
        let next_start_s = r.iteration_start_s + it.own_ms() / 1e3;
        // (Partners still running: one that ended since the last round is
        // still watched until then.)
        let partners: Vec<JobId> =
            self.watched.partners_of(job).filter(|&k| view.running.iter().any(|r| r.id == k)).collect();
        let mut out = Vec::new();
        for k in partners {
            let Some(w) = self.watched.get_mut(&k) else { continue };
            if w.ref_model_ms <= 0.0 {
                continue;
            }
            let scale = measured_ms.map_or(w.period_ms / w.model_period_ms, |m| m / w.ref_model_ms);
            let period_ms = w.model_period_ms * scale;
            // A job paced at the reference's own period keeps a phase to
            // it: where the slots in force put the reference's start,
            // against where it was. (Paced at another period, the two drift
            // by design, and the stop-and-wait controller re-aligns.)
            let same_period = (w.model_period_ms - w.ref_model_ms).abs() <= PERIOD_TOLERANCE * w.ref_model_ms;
            let error_ms = if same_period {
                let implied_s = w.offset_s - w.rel_ms.rem_euclid(w.period_ms) / 1e3;
                let e = ((next_start_s - implied_s) * 1e3).rem_euclid(w.period_ms);
                e.min(w.period_ms - e)
            } else {
                0.0
            };
            if (period_ms - w.period_ms).abs() <= PERIOD_TOLERANCE * w.period_ms
                && error_ms <= PHASE_TOLERANCE * w.period_ms
            {
                continue;
            }
            w.period_ms = period_ms;
            w.rel_ms = w.model_rel_ms * scale;
            w.offset_s = next_start_s + w.rel_ms.rem_euclid(period_ms) / 1e3;
            // A job not paced (deferred, given up) keeps its slot for later.
            if matches!(w.gate, Gate::Paced | Gate::Trial { .. }) {
                self.retimings += 1;
                out.push(Decision::Pace { job: k, period_ms, offset_s: w.offset_s });
            }
        }
        out
    }

    /// The stop-and-wait controller (§III-C) on a paced job's iteration.
    fn control(&mut self, view: &ClusterView<'_>, job: JobId, iteration_ms: f64) -> Vec<Decision> {
        let th = self.thresholds;
        if !self.monitor {
            return Vec::new();
        }
        let Some(w) = self.watched.get_mut(&job) else { return Vec::new() };
        if w.gate == Gate::GivenUp {
            return Vec::new();
        }
        w.recent.push(iteration_ms);
        w.seen += 1;
        w.since_ms += iteration_ms;
        if w.recent.len() > th.window {
            w.recent.remove(0);
        }
        if w.gate == Gate::Deferred {
            return self.apply_when_slow(view, job);
        }
        // A pace applied on a measurement is weighed over the next window,
        // in which the controller does not act.
        if let Gate::Trial { before_ms, after } = &mut w.gate {
            after.push(iteration_ms);
            if after.len() == th.window {
                let (before_ms, now_ms) = (*before_ms, upper_median(after.iter().copied()));
                w.recent.clear();
                if now_ms >= 0.99 * before_ms {
                    w.gate = Gate::GivenUp;
                    self.given_up_on_measurement += 1;
                    return vec![
                        Decision::Pace { job, period_ms: 0.0, offset_s: 0.0 },
                        Decision::Note {
                            job,
                            text: format!(
                                "metronome: paced, its iterations took {now_ms:.1} ms (median of {}) against \
                                 {before_ms:.1} ms before: no gain, pace removed",
                                th.window
                            ),
                        },
                    ];
                }
                w.gate = Gate::Paced;
            }
            return Vec::new();
        }
        // More than O_T of the last `window` iterations over A_T × the slot:
        // stop and wait for the slot the reference job's current phase gives.
        if !th.trip(&w.recent, w.period_ms) {
            return Vec::new();
        }
        // Tripping again within two windows of the last re-alignment means
        // the pause did not help: the job's traffic pattern changed.
        let again = w.realigned_at.is_some_and(|at| w.seen - at <= 2 * th.window as u64);
        w.recent.clear();
        // The measured iteration: the mean since the last re-alignment (the
        // window that tripped is by its choice the slowest stretch).
        let measured_ms = w.since_ms / (w.seen - w.realigned_at.unwrap_or(0)) as f64;
        w.since_ms = 0.0;
        w.realigned_at = Some(w.seen);
        if again
            && self.reprofile
            && let Some(paces) = self.recalculate(view, job, measured_ms)
        {
            self.reprofiles += 1;
            return paces;
        }
        let Some(w) = self.watched.get_mut(&job) else { return Vec::new() };
        self.readjustments += 1;
        match view.running.iter().find(|r| r.id == w.reference) {
            Some(r) => {
                w.offset_s = r.iteration_start_s + w.rel_ms.rem_euclid(w.period_ms) / 1e3;
                vec![Decision::Pace { job, period_ms: w.period_ms, offset_s: w.offset_s }]
            }
            None => {
                // The reference is gone: nothing to keep time with.
                self.watched.remove(&job);
                vec![Decision::Pace { job, period_ms: 0.0, offset_s: 0.0 }]
            }
        }
    }
}

impl Metronome {
    /// `metronome:measured`: a deferred job's window, judged by the
    /// controller's own rule (more than O_T iterations over A_T × its
    /// slot). Slow, it is paced in its slot from its reference's current
    /// start, with a note of the measurement, and its pace goes on trial
    /// against the window's median. O(window log window).
    fn apply_when_slow(&mut self, view: &ClusterView<'_>, job: JobId) -> Vec<Decision> {
        let th = self.thresholds;
        let Some(w) = self.watched.get_mut(&job) else { return Vec::new() };
        if !th.trip(&w.recent, w.period_ms) {
            return Vec::new();
        }
        let Some(r) = view.running.iter().find(|r| r.id == w.reference) else { return Vec::new() };
        let slow = w.recent.iter().filter(|&&ms| ms > th.slow_factor * w.period_ms).count();
        let before_ms = upper_median(w.recent.iter().copied());
        w.gate = Gate::Trial { before_ms, after: Vec::new() };
        w.recent.clear();
        w.since_ms = 0.0;
        w.realigned_at = Some(w.seen);
        w.offset_s = r.iteration_start_s + w.rel_ms.rem_euclid(w.period_ms) / 1e3;
        self.applied_on_measurement += 1;
        vec![
            Decision::Note {
                job,
                text: format!(
                    "metronome: measured {slow} of its last {} iterations over {:.0}% of its {:.1} ms slot (median \
                     {before_ms:.1} ms) beside {}; pacing it",
                    th.window,
                    100.0 * th.slow_factor,
                    w.period_ms,
                    r.spec.id
                ),
            },
            Decision::Pace { job, period_ms: w.period_ms, offset_s: w.offset_s },
        ]
    }
}

mod components;
mod pipeline;
#[cfg(test)]
mod tests;
mod watches;
