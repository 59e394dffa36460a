//! The discrete-event engine.
//!
//! Time is an integer number of nanoseconds. Events at equal times run in the
//! order they were scheduled, so a run is reproducible to the bit for a seed.

use crate::network::{FlowId, Network};
use orrery_model::zoo::{INTRA_HOST_GBPS, Placement, model};
use orrery_model::{Collective, HostId, IterationShape, JobSpec, LinkId, Segment, Topology, Work};
use orrery_policy::{ClusterView, Decision, JobId, Policy, QueuedJob, RunningJob};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Instant;

/// Nanoseconds per second.
pub const NS: f64 = 1e9;

/// Simulation knobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// Seed of all randomness (jitter).
    pub seed: u64,
    /// Relative standard deviation of compute-segment durations (phase drift).
    pub jitter: f64,
    /// Stop at this simulated time, seconds (None: when all jobs are done).
    pub max_time_s: Option<f64>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig { seed: 1, jitter: 0.0, max_time_s: None }
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not arrived yet.
    Future,
    /// Waiting for GPUs.
    Queued,
    /// Holding GPUs and iterating.
    Running,
    /// Holding GPUs, stopped between iterations.
    Paused,
    /// Done.
    Finished,
    /// Refused by the policy.
    Rejected,
}

/// A job inside the simulator.
#[derive(Debug, Clone)]
pub struct JobState {
    /// The specification.
    pub spec: JobSpec,
    /// Status.
    pub status: Status,
    /// GPUs held per host (empty when not holding any).
    pub hosts: Vec<(HostId, u32)>,
    /// Hosts of the latest placement (kept after the job ends).
    pub hosts_used: usize,
    /// Host of each worker, in ring order.
    workers: Vec<HostId>,
    /// The iteration shape for the current placement.
    pub shape: IterationShape,
    /// Iteration time alone, ms, for the current placement.
    pub isolated_iter_ms: f64,
    /// Iterations to run.
    pub target_iterations: u64,
    /// Iterations done.
    pub iterations_done: u64,
    /// Durations of the iterations, ms.
    pub iteration_ms: Vec<f64>,
    segment: usize,
    epoch: u64,
    pending_flows: usize,
    flows: Vec<FlowId>,
    iter_start_ns: u64,
    pending_shift_ms: f64,
    pause_requested: bool,
    throttle_gbps: Option<f64>,
    rng: ChaCha8Rng,
    /// Arrival, ns.
    pub arrival_ns: u64,
    /// First start, ns.
    pub first_start_ns: Option<u64>,
    /// Finish, ns.
    pub finish_ns: Option<u64>,
    /// Time spent holding GPUs, ns.
    pub run_ns: u64,
    last_start_ns: u64,
    /// Preemptions suffered.
    pub preemptions: u32,
    /// Pauses applied.
    pub pauses: u32,
    /// Time-shifts / delays applied.
    pub shifts: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(JobId),
    IterationStart(JobId, u64),
    ComputeDone(JobId, u64),
    FlowDone(FlowId, u64),
}

/// The simulator.
pub struct Simulation<'a> {
    topo: &'a Topology,
    cfg: SimConfig,
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    /// Jobs, indexed by [`JobId`].
    pub jobs: Vec<JobState>,
    free: Vec<u32>,
    waiting: Vec<JobId>,
    /// The network.
    pub net: Network,
    flow_job: HashMap<FlowId, (JobId, u64)>,
    paths: HashMap<(HostId, HostId), Vec<Vec<LinkId>>>,
    /// Wall-clock seconds of each policy call.
    pub decision_s: Vec<f64>,
    /// Events processed.
    pub events_processed: u64,
    /// Decisions the simulator could not apply (e.g. placing on busy GPUs).
    pub invalid_decisions: u64,
    normal: Normal<f64>,
}

impl<'a> Simulation<'a> {
    /// A simulation of `jobs` on `topo`; `isolated` gives every flow its cap.
    pub fn new(topo: &'a Topology, jobs: &[JobSpec], cfg: SimConfig, isolated: bool) -> Self {
        let capacity = topo.links.iter().map(|l| l.gbps).collect();
        let mut sim = Simulation {
            topo,
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            jobs: Vec::with_capacity(jobs.len()),
            free: topo.hosts.iter().map(|h| h.gpus).collect(),
            waiting: Vec::new(),
            net: Network::new(capacity, isolated),
            flow_job: HashMap::new(),
            paths: HashMap::new(),
            decision_s: Vec::new(),
            events_processed: 0,
            invalid_decisions: 0,
            normal: Normal::new(0.0, cfg.jitter.max(0.0)).unwrap_or_else(|_| Normal::new(0.0, 0.0).expect("valid")),
            cfg,
        };
        for (i, spec) in jobs.iter().enumerate() {
            let arrival_ns = (spec.arrival_s.max(0.0) * NS).round() as u64;
            let rng = ChaCha8Rng::seed_from_u64(sim.cfg.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            sim.jobs.push(JobState {
                spec: spec.clone(),
                status: Status::Future,
                hosts: Vec::new(),
                hosts_used: 0,
                workers: Vec::new(),
                shape: IterationShape::default(),
                isolated_iter_ms: 0.0,
                target_iterations: 0,
                iterations_done: 0,
                iteration_ms: Vec::new(),
                segment: 0,
                epoch: 0,
                pending_flows: 0,
                flows: Vec::new(),
                iter_start_ns: 0,
                pending_shift_ms: 0.0,
                pause_requested: false,
                throttle_gbps: None,
                rng,
                arrival_ns,
                first_start_ns: None,
                finish_ns: None,
                run_ns: 0,
                last_start_ns: 0,
                preemptions: 0,
                pauses: 0,
                shifts: 0,
            });
            sim.push(arrival_ns, Event::Arrival(i));
        }
        sim
    }

    /// Current simulated time, ns.
    pub fn now_ns(&self) -> u64 {
        self.now
    }

    /// The cluster.
    pub fn topology(&self) -> &Topology {
        self.topo
    }

    fn push(&mut self, t: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    /// Runs to the end (all jobs done or rejected, no events left, or the time limit).
    /// `progress` is called every 4,096 events with (now in s, finished jobs).
    pub fn run(&mut self, policy: &mut dyn Policy, mut progress: impl FnMut(f64, usize)) {
        let limit = self.cfg.max_time_s.map(|s| (s * NS) as u64);
        while let Some(Reverse((t, _, e))) = self.events.pop() {
            if limit.is_some_and(|l| t > l) {
                self.now = limit.unwrap_or(t);
                break;
            }
            self.now = t;
            self.events_processed += 1;
            if self.events_processed.is_multiple_of(4096) {
                self.net.compact_series(self.now);
                progress(self.now as f64 / NS, self.jobs.iter().filter(|j| j.status == Status::Finished).count());
            }
            match e {
                Event::Arrival(j) => {
                    self.jobs[j].status = Status::Queued;
                    self.waiting.push(j);
                    self.schedule(policy);
                }
                Event::IterationStart(j, epoch) if self.jobs[j].epoch == epoch => self.run_segment(j, policy),
                Event::ComputeDone(j, epoch) if self.jobs[j].epoch == epoch => {
                    self.jobs[j].segment += 1;
                    self.run_segment(j, policy);
                }
                Event::FlowDone(f, version) => self.flow_done(f, version, policy),
                _ => {}
            }
        }
        self.net.compact_series(self.now);
        self.net.close(self.now);
        for j in &mut self.jobs {
            if matches!(j.status, Status::Running | Status::Paused) {
                j.run_ns += self.now - j.last_start_ns;
            }
        }
    }

    fn view(&self) -> (Vec<QueuedJob<'_>>, Vec<RunningJob<'_>>) {
        let queue = self
            .waiting
            .iter()
            .map(|&id| QueuedJob {
                id,
                spec: &self.jobs[id].spec,
                waiting_s: (self.now - self.jobs[id].arrival_ns) as f64 / NS,
            })
            .collect();
        let running = self
            .jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| matches!(j.status, Status::Running | Status::Paused))
            .map(|(id, j)| RunningJob {
                id,
                spec: &j.spec,
                hosts: &j.hosts,
                iterations_done: j.iterations_done,
                paused: j.status == Status::Paused,
            })
            .collect();
        (queue, running)
    }

    fn schedule(&mut self, policy: &mut dyn Policy) {
        if self.waiting.is_empty() {
            return;
        }
        let decisions = {
            let (queue, running) = self.view();
            let view =
                ClusterView { now_s: self.now as f64 / NS, topology: self.topo, free_gpus: &self.free, queue, running };
            let t = Instant::now();
            let d = policy.schedule(&view);
            self.decision_s.push(t.elapsed().as_secs_f64());
            d
        };
        self.apply(decisions, policy);
    }

    fn apply(&mut self, decisions: Vec<Decision>, policy: &mut dyn Policy) {
        let mut freed = false;
        for d in decisions {
            match d {
                Decision::Place { job, hosts } => {
                    if !self.place(job, hosts) {
                        self.invalid_decisions += 1;
                    }
                }
                Decision::Reject { job, .. } if self.jobs.get(job).is_some_and(|j| j.status == Status::Queued) => {
                    self.waiting.retain(|&w| w != job);
                    self.jobs[job].status = Status::Rejected;
                    self.jobs[job].finish_ns = Some(self.now);
                }
                Decision::Preempt { job } if self.is_active(job) => {
                    self.release(job);
                    let j = &mut self.jobs[job];
                    j.status = Status::Queued;
                    j.preemptions += 1;
                    let arrival = j.arrival_ns;
                    let pos = self
                        .waiting
                        .iter()
                        .position(|&w| self.jobs[w].arrival_ns > arrival)
                        .unwrap_or(self.waiting.len());
                    self.waiting.insert(pos, job);
                    freed = true;
                }
                Decision::Shift { job, ms } if self.is_active(job) && ms.is_finite() && ms >= 0.0 => {
                    self.jobs[job].pending_shift_ms += ms;
                    self.jobs[job].shifts += 1;
                }
                Decision::Pause { job } if self.jobs.get(job).is_some_and(|j| j.status == Status::Running) => {
                    self.jobs[job].pause_requested = true;
                }
                Decision::Resume { job } if self.jobs.get(job).is_some_and(|j| j.status == Status::Paused) => {
                    self.jobs[job].status = Status::Running;
                    self.start_iteration(job);
                }
                Decision::Throttle { job, gbps } if self.is_active(job) => {
                    self.jobs[job].throttle_gbps = gbps.filter(|g| *g > 0.0);
                    let flows = self.jobs[job].flows.clone();
                    for f in flows {
                        let base =
                            self.net.flow(f).map(|fl| if fl.path.is_empty() { INTRA_HOST_GBPS } else { self.nic(job) });
                        if let Some(base) = base {
                            let cap = gbps.map_or(base, |g| g.min(base));
                            let changed = self.net.set_cap(self.now, f, cap);
                            self.reschedule(&changed);
                        }
                    }
                }
                _ => self.invalid_decisions += 1,
            }
        }
        if freed {
            self.schedule(policy);
        }
    }

    fn is_active(&self, job: JobId) -> bool {
        self.jobs.get(job).is_some_and(|j| matches!(j.status, Status::Running | Status::Paused))
    }

    fn nic(&self, job: JobId) -> f64 {
        self.jobs[job].hosts.iter().map(|&(h, _)| self.topo.host_nic_gbps(h)).fold(f64::INFINITY, f64::min)
    }

    /// Starts a queued job on the given GPUs; false if the decision is invalid.
    fn place(&mut self, job: JobId, hosts: Vec<(HostId, u32)>) -> bool {
        let Some(j) = self.jobs.get(job) else { return false };
        if j.status != Status::Queued {
            return false;
        }
        let gpus: u32 = hosts.iter().map(|h| h.1).sum();
        let mut need: HashMap<HostId, u32> = HashMap::new();
        for &(h, g) in &hosts {
            *need.entry(h).or_default() += g;
        }
        if gpus != j.spec.gpus() || need.iter().any(|(&h, &g)| h >= self.free.len() || self.free[h] < g) {
            return false;
        }
        let Some(m) = model(&j.spec.model) else { return false };
        let per_worker = j.spec.gpus_per_worker.max(1);
        let mut workers = Vec::new();
        let mut per_host = Vec::new();
        for &(h, g) in &hosts {
            let w = g.div_ceil(per_worker);
            workers.extend(std::iter::repeat_n(h, w as usize));
            if w > 0 {
                per_host.push(w);
            }
        }
        let gpu = orrery_model::gpu::gpu_type(&self.topo.hosts[hosts[0].0].gpu_type)
            .or_else(|| orrery_model::gpu::gpu_type("v100"))
            .expect("v100 is in the catalogue");
        let nic = hosts.iter().map(|&(h, _)| self.topo.host_nic_gbps(h)).fold(f64::INFINITY, f64::min);
        let shape = m.shape(gpu, j.spec.batch, &Placement { gpus_per_host: per_host }, nic);
        let period = shape.period_ms();
        for (&h, &g) in &need {
            self.free[h] -= g;
        }
        self.waiting.retain(|&w| w != job);
        let now = self.now;
        let j = &mut self.jobs[job];
        j.target_iterations = match j.spec.work {
            Work::Iterations(n) => n.max(1),
            Work::Seconds(s) => ((s * 1e3 / period.max(1e-9)).round() as u64).max(1),
        };
        j.hosts_used = need.len();
        j.hosts = hosts;
        j.workers = workers;
        j.shape = shape;
        j.isolated_iter_ms = period;
        j.status = Status::Running;
        j.first_start_ns.get_or_insert(now);
        j.last_start_ns = now;
        j.epoch += 1;
        self.start_iteration(job);
        true
    }

    /// Releases a job's GPUs and flows and invalidates its pending events.
    fn release(&mut self, job: JobId) {
        let flows = std::mem::take(&mut self.jobs[job].flows);
        for f in flows {
            self.flow_job.remove(&f);
            let changed = self.net.remove(self.now, f);
            self.reschedule(&changed);
        }
        let j = &mut self.jobs[job];
        for &(h, g) in &j.hosts {
            self.free[h] += g;
        }
        j.hosts.clear();
        j.epoch += 1;
        j.pending_flows = 0;
        j.run_ns += self.now - j.last_start_ns;
    }

    fn start_iteration(&mut self, job: JobId) {
        let now = self.now;
        let j = &mut self.jobs[job];
        j.iter_start_ns = now;
        j.segment = 0;
        let shift = std::mem::take(&mut j.pending_shift_ms);
        let epoch = j.epoch;
        self.push(now + (shift * 1e6).round() as u64, Event::IterationStart(job, epoch));
    }

    /// Runs segments from the current one until one takes time.
    fn run_segment(&mut self, job: JobId, policy: &mut dyn Policy) {
        loop {
            let j = &self.jobs[job];
            let Some(seg) = j.shape.segments.get(j.segment).cloned() else {
                self.finish_iteration(job, policy);
                return;
            };
            match seg {
                Segment::Compute { ms } => {
                    let noise = if self.cfg.jitter > 0.0 { self.normal.sample(&mut self.jobs[job].rng) } else { 0.0 };
                    let dur = (ms * (1.0 + noise).max(0.1) * 1e6).round() as u64;
                    let epoch = self.jobs[job].epoch;
                    self.push(self.now + dur, Event::ComputeDone(job, epoch));
                    return;
                }
                Segment::Comm { collective, payload_bytes, gbps, .. } => {
                    let started = self.start_collective(job, collective, payload_bytes, gbps);
                    if started > 0 {
                        return;
                    }
                    self.jobs[job].segment += 1;
                }
            }
        }
    }

    /// (src, dst, bits) of every flow of a collective over the job's workers.
    fn transfers(workers: &[HostId], collective: Collective, payload_bytes: f64) -> Vec<(HostId, HostId, f64)> {
        let n = workers.len();
        if n < 2 {
            return Vec::new();
        }
        let per_worker_bits = collective.wire_bytes_per_worker(payload_bytes, n as u32) * 8.0;
        match collective {
            // Ring: worker i sends to worker i + 1 (ring order = placement order).
            Collective::RingAllReduce | Collective::AllGather => {
                (0..n).map(|i| (workers[i], workers[(i + 1) % n], per_worker_bits)).collect()
            }
            // Every stage boundary transfers at once (one GPipe tick).
            Collective::PointToPoint => (0..n - 1).map(|i| (workers[i], workers[i + 1], payload_bytes * 8.0)).collect(),
            Collective::AllToAll => {
                let each = per_worker_bits / (n - 1) as f64;
                (0..n)
                    .flat_map(|i| (0..n).filter(move |&k| k != i).map(move |k| (workers[i], workers[k], each)))
                    .collect()
            }
        }
    }

    fn start_collective(&mut self, job: JobId, collective: Collective, payload_bytes: f64, gbps: f64) -> usize {
        let transfers = Self::transfers(&self.jobs[job].workers, collective, payload_bytes);
        let throttle = self.jobs[job].throttle_gbps;
        let epoch = self.jobs[job].epoch;
        let mut started = 0;
        for (i, (src, dst, bits)) in transfers.into_iter().enumerate() {
            if bits <= 0.0 {
                continue;
            }
            let (path, cap) = if src == dst {
                (Vec::new(), INTRA_HOST_GBPS)
            } else {
                let paths = self.paths.entry((src, dst)).or_insert_with(|| self.topo.paths(src, dst));
                if paths.is_empty() {
                    continue;
                }
                // ECMP: a deterministic hash of the flow's identity picks the path.
                let h =
                    (job as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
                (paths[(h % paths.len() as u64) as usize].clone(), throttle.map_or(gbps, |t| t.min(gbps)))
            };
            let (f, changed) = self.net.add(self.now, path, bits, cap, job);
            self.flow_job.insert(f, (job, epoch));
            self.jobs[job].flows.push(f);
            self.reschedule(&changed);
            started += 1;
        }
        self.jobs[job].pending_flows = started;
        started
    }

    fn reschedule(&mut self, flows: &[FlowId]) {
        for &f in flows {
            if let (Some(t), Some(v)) = (self.net.finish_time(f), self.net.flow(f).map(|fl| fl.version)) {
                self.push(t.max(self.now), Event::FlowDone(f, v));
            }
        }
    }

    fn flow_done(&mut self, f: FlowId, version: u64, policy: &mut dyn Policy) {
        if self.net.flow(f).is_none_or(|fl| fl.version != version) {
            return;
        }
        let Some((job, epoch)) = self.flow_job.remove(&f) else { return };
        let changed = self.net.remove(self.now, f);
        self.reschedule(&changed);
        let j = &mut self.jobs[job];
        j.flows.retain(|&x| x != f);
        if j.epoch != epoch {
            return;
        }
        j.pending_flows = j.pending_flows.saturating_sub(1);
        if j.pending_flows == 0 {
            j.segment += 1;
            self.run_segment(job, policy);
        }
    }

    fn finish_iteration(&mut self, job: JobId, policy: &mut dyn Policy) {
        let now = self.now;
        let ms = (now - self.jobs[job].iter_start_ns) as f64 / 1e6;
        {
            let j = &mut self.jobs[job];
            j.iteration_ms.push(ms);
            j.iterations_done += 1;
        }
        let decisions = {
            let (queue, running) = self.view();
            let view =
                ClusterView { now_s: now as f64 / NS, topology: self.topo, free_gpus: &self.free, queue, running };
            policy.on_iteration(&view, job, ms)
        };
        if !decisions.is_empty() {
            self.apply(decisions, policy);
        }
        let j = &mut self.jobs[job];
        if j.status != Status::Running {
            return;
        }
        if j.iterations_done >= j.target_iterations {
            self.release(job);
            let j = &mut self.jobs[job];
            j.status = Status::Finished;
            j.finish_ns = Some(now);
            self.schedule(policy);
        } else if std::mem::take(&mut j.pause_requested) {
            j.status = Status::Paused;
            j.pauses += 1;
        } else {
            self.start_iteration(job);
        }
    }
}
