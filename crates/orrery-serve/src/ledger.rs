//! The live cluster's state, with no I/O and no clock: jobs, hosts, GPUs and
//! the decisions in force. Every change comes in as a value with its time,
//! so the same code applies a decision as it is made and replays the log on
//! restart (the state after a restart is the fold of the log).
//!
//! What each decision does here (its live meaning; the agents and training
//! processes act on what the ledger holds, see the crate doc):
//!
//! | decision | validity | effect |
//! |---|---|---|
//! | `Place` | job queued; GPUs a positive multiple of a worker's, free on up hosts | job running on them, epoch + 1, iterations to run fixed (as the simulator) |
//! | `Share` | job queued; partners running with solo GPUs there; the pair fits GPU memory | as `Place`, the shared GPUs counted once (Castor) |
//! | `Reject` | job queued | rejected for good |
//! | `Preempt` | job running or paused | back in the queue by arrival, GPUs freed, decisions in force dropped, epoch + 1 |
//! | `Shift` | job active, ms finite ≥ 0 | added to `shift_ms_total`; the agent waits the new part before the next iteration |
//! | `Align` | job active, period > 0 | one-shot phase for the next iteration (a new `seq`) |
//! | `Pace` | job active | slot for every iteration (`period_ms ≤ 0` removes it) |
//! | `Timetable` | job active, starts finite, at most `slot::MAX_TIMETABLE` | earliest start of each listed iteration (empty removes it) |
//! | `Pause` / `Resume` | running / paused | the agent holds / releases the next iteration |
//! | `Throttle` | job active | cap for the agent (tc) or the training process |
//! | `Route` | job active | recorded per flow (applied where the fabric can pin flows) |
//!
//! An invalid decision changes nothing and is not logged (it is counted).

use crate::api::{AlignSlot, DriverEvent, InForce, JobStatus, Logged, PaceSlot};
use orrery_model::{HostId, JobSpec, Topology, Work};
use orrery_policy::{ClusterView, Decision, JobId, QueuedJob, RunningJob};
use std::collections::{BTreeMap, HashMap};

mod handover;
mod held;
mod queries;
pub use held::HeldJobs;

/// GPUs a job shares with another on one host (Castor).
#[derive(Debug, Clone, PartialEq)]
struct Sharing {
    partner: JobId,
    host: HostId,
    gpus: u32,
}

/// A job and what the driver knows of it.
#[derive(Debug, Clone)]
pub struct LiveJob {
    /// The specification.
    pub spec: JobSpec,
    /// Status.
    pub status: JobStatus,
    /// Cluster-clock seconds it was accepted.
    pub submitted_s: f64,
    /// First start.
    pub started_s: Option<f64>,
    /// End.
    pub ended_s: Option<f64>,
    /// GPUs held per host.
    pub hosts: Vec<(HostId, u32)>,
    sharing: Vec<Sharing>,
    /// Per-GPU sub-batch (its batch unless it accumulates).
    pub sub_batch: u32,
    /// Host of each worker in ring order.
    pub workers: Vec<HostId>,
    /// Placement epoch.
    pub epoch: u64,
    /// Iterations reported.
    pub iterations_done: u64,
    /// Iterations in all.
    pub target_iterations: u64,
    /// Iteration time alone on its placement, ms.
    pub period_ms: f64,
    /// Compute part of it, ms.
    pub compute_ms: f64,
    /// Its iteration shape alone on the placement.
    pub shape: orrery_model::IterationShape,
    /// Start of the last reported iteration, the wait for its slot
    /// included (as the simulator's), cluster-clock s: that start plus the
    /// iteration's time with the wait is where it ended.
    pub iteration_start_s: f64,
    /// The same iteration's start after that wait, cluster-clock s: where
    /// the next iterations' starts are predicted from (`Align`).
    ran_from_s: f64,
    /// Iterations and their summed time on the current placement.
    iter_count: u64,
    iter_sum_ms: f64,
    /// Its own iteration time on this placement, measured (slot delays left
    /// out): what `period_ms` reports once it has three iterations.
    measured: orrery_policy::estimate::PeriodEstimate,
    /// When it was last placed.
    placed_s: f64,
    /// Seconds it ran on earlier placements.
    run_s: f64,
    /// Times preempted.
    pub preemptions: u32,
    /// Why rejected or last preempted.
    pub reason: Option<String>,
    /// Decisions in force.
    pub in_force: InForce,
    /// The held jobs its spec's `depends_on` named when it was accepted
    /// (one that expired since has ended, so it started).
    depends_on: Vec<JobId>,
    /// Sequence numbers of the log entries about it (deleted with it when
    /// it expires). A few per placement.
    log_seqs: Vec<u64>,
    /// Up hosts of earlier placements still stopping its ranks (not
    /// logged; [`handover`]).
    handovers: Vec<handover::Handover>,
}

impl LiveJob {
    /// The iteration a decision every rank must apply at the same
    /// iteration names: the next one before any report on this placement
    /// (a decision made with the placement reaches the ranks as they
    /// start), else two after the last reported (`done + 1` is running,
    /// and a rank that reported may already have begun it). O(1).
    fn iteration_all_ranks_apply_at(&self) -> u64 {
        self.iterations_done + if self.iter_count == 0 { 1 } else { 2 }
    }

    fn new(spec: JobSpec, submitted_s: f64) -> Self {
        let sub_batch = spec.batch;
        LiveJob {
            spec,
            status: JobStatus::Queued,
            submitted_s,
            started_s: None,
            ended_s: None,
            hosts: Vec::new(),
            sharing: Vec::new(),
            sub_batch,
            workers: Vec::new(),
            epoch: 0,
            iterations_done: 0,
            target_iterations: 0,
            period_ms: 0.0,
            compute_ms: 0.0,
            shape: orrery_model::IterationShape::default(),
            iteration_start_s: 0.0,
            ran_from_s: 0.0,
            iter_count: 0,
            iter_sum_ms: 0.0,
            measured: Default::default(),
            placed_s: 0.0,
            run_s: 0.0,
            preemptions: 0,
            reason: None,
            in_force: InForce::default(),
            depends_on: Vec::new(),
            log_seqs: Vec::new(),
            handovers: Vec::new(),
        }
    }
}

/// A host as the driver sees it.
#[derive(Debug, Clone, Default)]
struct Node {
    /// GPUs its agent registered (0 while down).
    capacity: u32,
    up: bool,
    session: u64,
    /// Cluster-clock seconds of its last heartbeat.
    last_seen_s: f64,
    /// Log sequence of the last change touching it (the agents' long-poll version).
    version: u64,
    /// Data-network address its agent gave (not logged: agents give it again
    /// when they re-register).
    data_addr: Option<std::net::IpAddr>,
}

/// Why a registration, heartbeat or report was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    /// No such host or job.
    #[error("{0}")]
    NotFound(String),
    /// Valid request that conflicts with the state (stale session or epoch, ...).
    #[error("{0}")]
    Conflict(String),
    /// A field out of range.
    #[error("{field}: expected {expected}, found {found}")]
    Field {
        /// Field.
        field: &'static str,
        /// What it must be.
        expected: String,
        /// What it was.
        found: String,
    },
}

/// What a report did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ReportEffect {
    /// The job's iteration count advanced (the controller should see it).
    pub advanced: bool,
    /// The job finished with it.
    pub finished: bool,
}

/// The live cluster.
#[derive(Debug, Clone)]
pub struct Ledger {
    topology: Topology,
    jobs: HeldJobs,
    /// Jobs by qualified id (`TENANT/ID`, [`JobSpec::qualified_id`]).
    by_name: HashMap<String, JobId>,
    /// Tenants and their tokens (the fold of the log's admin events).
    tenants: crate::tenants::Tenants,
    /// Queued jobs in arrival order.
    waiting: Vec<JobId>,
    nodes: Vec<Node>,
    /// Free GPUs per host (0 on hosts that are down).
    free: Vec<u32>,
    /// Next log sequence number.
    next_seq: u64,
    /// (seq, cluster-clock s) of the `Expired` entries in the log: an
    /// expiry deletes those as old as the jobs it forgets.
    expiries: Vec<(u64, f64)>,
    /// Jobs with handovers ([`handover`]).
    moving: std::collections::BTreeSet<JobId>,
}

impl Ledger {
    /// An empty cluster on `topology`; `next_seq` continues a log.
    pub fn new(topology: Topology) -> Self {
        let n = topology.hosts.len();
        Ledger {
            topology,
            jobs: HeldJobs::default(),
            by_name: HashMap::new(),
            tenants: crate::tenants::Tenants::default(),
            waiting: Vec::new(),
            nodes: vec![Node::default(); n],
            free: vec![0; n],
            next_seq: 1,
            expiries: Vec::new(),
            moving: Default::default(),
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Jobs held, by id (those that ended expire: [`HeldJobs`]).
    pub fn jobs(&self) -> &HeldJobs {
        &self.jobs
    }

    /// The job called `name` (its spec id) among `tenant`'s jobs (None:
    /// the untenanted ones, or any tenant's as `TENANT/ID`). A tenant's
    /// lookup finds only its own jobs: an untenanted job whose id reads
    /// `TENANT/ID` (the Kubernetes controller's are `NAMESPACE/NAME`) is
    /// not that tenant's.
    pub fn job_by_name(&self, tenant: Option<&str>, name: &str) -> Option<JobId> {
        self.by_name
            .get(&orrery_model::job::qualified(tenant, name))
            .copied()
            .filter(|&k| tenant.is_none() || self.jobs[k].spec.tenant.as_deref() == tenant)
    }

    /// Tenants and their tokens.
    pub fn tenants(&self) -> &crate::tenants::Tenants {
        &self.tenants
    }

    /// Sequence number the next log entry gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Queued jobs.
    pub fn waiting(&self) -> &[JobId] {
        &self.waiting
    }

    /// Free GPUs per host.
    pub fn free_gpus(&self) -> &[u32] {
        &self.free
    }

    /// Adds a job accepted at `now_s` (its `arrival_s` becomes `now_s`); the
    /// caller has validated the spec and checked the name is new.
    /// O(log held + dependencies · log held).
    pub fn submit(&mut self, mut spec: JobSpec, now_s: f64) -> JobId {
        spec.arrival_s = now_s;
        let id = self.jobs.next_id();
        self.hold(id, spec);
        id
    }

    fn hold(&mut self, id: JobId, spec: JobSpec) {
        let depends_on = spec.depends_on.iter().filter_map(|d| self.job_by_name(spec.tenant.as_deref(), d)).collect();
        self.by_name.insert(spec.qualified_id(), id);
        let submitted_s = spec.arrival_s;
        self.jobs.insert(id, LiveJob { depends_on, ..LiveJob::new(spec, submitted_s) });
        self.waiting.push(id);
    }

    /// Restores job `id` from the store (as submitted; the log replays the
    /// rest). Ids come in increasing order, with gaps where jobs expired.
    pub fn restore_job(&mut self, id: JobId, mut spec: JobSpec, submitted_s: f64) {
        spec.arrival_s = submitted_s;
        self.hold(id, spec);
    }

    /// Sets a restored job's progress (the store keeps it beside the log).
    pub fn restore_progress(&mut self, job: JobId, iterations_done: u64) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.iterations_done = iterations_done;
        }
    }

    /// The view a policy sees at `now_s`. O(jobs held + queued · their
    /// dependencies · log held + hosts).
    pub fn view(&self, now_s: f64) -> ClusterView<'_> {
        // A job is offered once every job it depends on has started; one
        // no longer held expired, so it ended (the service accepts a job
        // only when the jobs it depends on are held).
        let ready = |id: JobId| {
            self.jobs[id].depends_on.iter().all(|&d| self.jobs.get(d).is_none_or(|k| k.started_s.is_some()))
        };
        let queue = self
            .waiting
            .iter()
            .filter(|&&id| ready(id))
            .map(|&id| {
                let j = &self.jobs[id];
                QueuedJob {
                    id,
                    spec: &j.spec,
                    waiting_s: (now_s - j.submitted_s).max(0.0),
                    progress: progress(j),
                    service_gpu_s: j.run_s * f64::from(j.spec.gpus()),
                }
            })
            .collect();
        let running = self
            .jobs
            .iter()
            .filter(|(_, j)| j.status.is_active())
            .map(|(id, j)| {
                let running_s = (now_s - j.placed_s).max(0.0);
                RunningJob {
                    id,
                    spec: &j.spec,
                    hosts: &j.hosts,
                    iterations_done: j.iterations_done,
                    paused: j.status == JobStatus::Paused,
                    iteration_start_s: j.iteration_start_s,
                    progress: progress(j),
                    service_gpu_s: (j.run_s + running_s) * f64::from(j.spec.gpus()),
                    running_s,
                    solo_gpus: self.solo_gpus(id).into(),
                    sub_batch: j.sub_batch,
                    xi: measured_xi(j),
                    // The agents choose a job's local GPUs themselves.
                    held_gpus: &[],
                    placement: 0,
                }
            })
            .collect();
        ClusterView { now_s, topology: &self.topology, free_gpus: &self.free, queue, running }
    }

    /// Applies an entry at `at_s` and gives it the next log sequence number,
    /// marking the hosts it touches (before and after) as changed so their
    /// agents' long-polls wake. None when it is invalid: then nothing changed
    /// and it must not be logged.
    pub fn record(&mut self, entry: &Logged, at_s: f64) -> Option<u64> {
        let before = self.hosts_touched(entry);
        let valid = match entry {
            Logged::Decision(d) => self.apply_decision(d, at_s),
            Logged::Event(e) => self.apply_event(e, at_s),
            Logged::Admin(e) => self.tenants.apply(e),
        };
        if !valid {
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        for h in before.into_iter().chain(self.hosts_touched(entry)) {
            self.nodes[h].version = seq;
        }
        if let Some(j) = entry_job(entry).and_then(|job| self.jobs.get_mut(job)) {
            j.log_seqs.push(seq);
        }
        if matches!(entry, Logged::Event(DriverEvent::Expired { .. })) {
            self.expiries.push((seq, at_s));
        }
        Some(seq)
    }

    /// Replays one committed entry on restart; the log only holds entries
    /// that were valid when recorded, and the fold reaches the same state.
    pub fn replay(&mut self, seq: u64, entry: &Logged, at_s: f64) {
        self.next_seq = seq;
        self.record(entry, at_s);
        self.next_seq = seq + 1;
    }

    fn hosts_touched(&self, entry: &Logged) -> Vec<HostId> {
        let job = match entry {
            Logged::Decision(d) => decision_job(d),
            Logged::Event(DriverEvent::Finished { job } | DriverEvent::Cancelled { job }) => *job,
            Logged::Event(DriverEvent::Submitted { .. } | DriverEvent::Expired { .. }) | Logged::Admin(_) => {
                return Vec::new();
            }
            Logged::Event(DriverEvent::NodeUp { node, .. } | DriverEvent::NodeDown { node }) => {
                return if *node < self.nodes.len() { vec![*node] } else { Vec::new() };
            }
        };
        let mut hosts: Vec<HostId> = match entry {
            Logged::Decision(Decision::Place { hosts, .. }) => hosts.iter().map(|h| h.0).collect(),
            Logged::Decision(Decision::Share { free, shared, .. }) => {
                free.iter().map(|h| h.0).chain(shared.iter().map(|s| s.1)).collect()
            }
            _ => Vec::new(),
        };
        if let Some(j) = self.jobs.get(job) {
            hosts.extend(j.hosts.iter().map(|h| h.0));
        }
        hosts.retain(|&h| h < self.nodes.len());
        hosts.sort_unstable();
        hosts.dedup();
        hosts
    }

    fn apply_decision(&mut self, d: &Decision, now_s: f64) -> bool {
        let active = |s: &Self, job: JobId| s.jobs.get(job).is_some_and(|j| j.status.is_active());
        match d {
            // Logged for the reader; nothing changes.
            Decision::Note { job, .. } => self.jobs.get(*job).is_some(),
            Decision::Place { job, hosts } => self.place(*job, hosts.clone(), now_s),
            Decision::Share { job, free, shared, sub_batch } => self.share(*job, free, shared, *sub_batch, now_s),
            Decision::Reject { job, reason } => {
                let Some(j) = self.jobs.get_mut(*job).filter(|j| j.status == JobStatus::Queued) else {
                    return false;
                };
                j.status = JobStatus::Rejected;
                j.reason = Some(reason.clone());
                j.ended_s = Some(now_s);
                self.waiting.retain(|w| w != job);
                true
            }
            Decision::Preempt { job } => {
                if !active(self, *job) {
                    return false;
                }
                self.release(*job, now_s);
                let j = &mut self.jobs[*job];
                j.status = JobStatus::Queued;
                j.preemptions += 1;
                let arrival = j.submitted_s;
                let pos =
                    self.waiting.iter().position(|&w| self.jobs[w].submitted_s > arrival).unwrap_or(self.waiting.len());
                self.waiting.insert(pos, *job);
                true
            }
            Decision::Shift { job, ms } => {
                if !active(self, *job) || !ms.is_finite() || *ms < 0.0 {
                    return false;
                }
                let j = &mut self.jobs[*job];
                j.in_force.shift_ms_total += ms;
                j.in_force.shift_at_iteration = j.iteration_all_ranks_apply_at();
                true
            }
            Decision::Align { job, period_ms, offset_s } => {
                if !(active(self, *job) && *period_ms > 0.0 && period_ms.is_finite() && offset_s.is_finite()) {
                    return false;
                }
                let j = &mut self.jobs[*job];
                let offset_s = offset_s.max(0.0);
                // Iteration `done + 1` is running; `done + 2` starts about
                // two of its periods after the last reported start.
                let at_iteration = j.iteration_all_ranks_apply_at();
                // Nothing to predict from before a report on this placement.
                let start_s = (j.iter_count > 0).then(|| {
                    let predicted_s = (j.ran_from_s + 2.0 * j.period_ms / 1e3).max(now_s);
                    orrery_policy::slot::aligned_start_s(predicted_s, *period_ms, offset_s)
                });
                let seq = j.in_force.align.map_or(1, |a| a.seq + 1);
                j.in_force.align = Some(AlignSlot { period_ms: *period_ms, offset_s, seq, at_iteration, start_s });
                true
            }
            Decision::Pace { job, period_ms, offset_s } => {
                if !active(self, *job) || !offset_s.is_finite() {
                    return false;
                }
                self.jobs[*job].in_force.pace = (*period_ms > 0.0 && period_ms.is_finite())
                    .then(|| PaceSlot { period_ms: *period_ms, offset_s: offset_s.max(0.0) });
                true
            }
            Decision::Timetable { job, from_iteration, starts_s } => {
                if !active(self, *job) || !orrery_policy::slot::timetable_is_valid(starts_s) {
                    return false;
                }
                self.jobs[*job].in_force.timetable =
                    (!starts_s.is_empty()).then(|| (*from_iteration, starts_s.iter().map(|t| t.max(0.0)).collect()));
                true
            }
            Decision::Pause { job } => {
                let Some(j) = self.jobs.get_mut(*job).filter(|j| j.status == JobStatus::Running) else {
                    return false;
                };
                j.status = JobStatus::Paused;
                j.in_force.paused = true;
                true
            }
            Decision::Resume { job } => {
                let Some(j) = self.jobs.get_mut(*job).filter(|j| j.status == JobStatus::Paused) else {
                    return false;
                };
                j.status = JobStatus::Running;
                j.in_force.paused = false;
                true
            }
            Decision::Throttle { job, gbps } => {
                if !active(self, *job) || gbps.is_some_and(|g| !g.is_finite()) {
                    return false;
                }
                self.jobs[*job].in_force.throttle_gbps = gbps.filter(|g| *g > 0.0);
                true
            }
            Decision::TrafficClass { job, class } => {
                if !active(self, *job) {
                    return false;
                }
                self.jobs[*job].in_force.traffic_class = *class;
                true
            }
            Decision::Route { job, flow, paths } => {
                if !active(self, *job) {
                    return false;
                }
                let routes = &mut self.jobs[*job].in_force.routes;
                if paths.is_empty() {
                    routes.remove(flow);
                } else {
                    routes.insert(*flow, paths.clone());
                }
                true
            }
        }
    }

    fn apply_event(&mut self, e: &DriverEvent, now_s: f64) -> bool {
        match *e {
            DriverEvent::Expired { ref jobs, next_job, ref superseded } => self.expire(jobs, next_job, superseded),
            DriverEvent::Finished { job } | DriverEvent::Cancelled { job } => {
                let Some(status) = self.jobs.get(job).map(|j| j.status).filter(|s| !s.is_over()) else {
                    return false;
                };
                let finished = matches!(e, DriverEvent::Finished { .. });
                if finished && !status.is_active() {
                    return false;
                }
                if status.is_active() {
                    self.release(job, now_s);
                } else {
                    self.waiting.retain(|&w| w != job);
                }
                self.end_handovers(job);
                let j = &mut self.jobs[job];
                j.status = if finished { JobStatus::Finished } else { JobStatus::Cancelled };
                j.ended_s = Some(now_s);
                true
            }
            DriverEvent::NodeUp { node, gpus, session, data_addr } => {
                let Some(n) = self.nodes.get_mut(node) else { return false };
                let cap = self.topology.hosts[node].gpus;
                if gpus > cap {
                    return false;
                }
                let held = n.capacity - self.free[node].min(n.capacity);
                if gpus < held {
                    return false;
                }
                n.capacity = gpus;
                n.up = true;
                n.session = session;
                n.last_seen_s = now_s;
                n.data_addr = data_addr;
                self.free[node] = gpus - held;
                true
            }
            DriverEvent::Submitted { job } => self.jobs.get(job).is_some(),
            DriverEvent::NodeDown { node } => {
                let Some(n) = self.nodes.get(node) else { return false };
                if !n.up || self.jobs.iter().any(|(_, j)| j.status.is_active() && j.hosts.iter().any(|h| h.0 == node)) {
                    // The driver preempts the node's jobs (logged) first.
                    return false;
                }
                let n = &mut self.nodes[node];
                n.up = false;
                n.capacity = 0;
                self.free[node] = 0;
                self.node_handed_over(node);
                true
            }
        }
    }

    /// Starts queued `job` on `hosts`; false if invalid. O(hosts · paths).
    fn place(&mut self, job: JobId, hosts: Vec<(HostId, u32)>, now_s: f64) -> bool {
        let Some(j) = self.jobs.get(job).filter(|j| j.status == JobStatus::Queued) else { return false };
        let mut need: BTreeMap<HostId, u32> = BTreeMap::new();
        for &(h, g) in &hosts {
            *need.entry(h).or_default() += g;
        }
        let gpus: u32 = need.values().sum();
        let per_worker = j.spec.gpus_per_worker.max(1);
        if gpus == 0
            || !gpus.is_multiple_of(per_worker)
            || need.iter().any(|(&h, &g)| h >= self.free.len() || !self.nodes[h].up || self.free[h] < g)
        {
            return false;
        }
        let Some(placed) = orrery_model::placed::place(&self.topology, &j.spec, &hosts) else { return false };
        let period = placed.shape.period_ms();
        let compute = placed.shape.compute_ms();
        // Elastic sizes (Pollux) convert the work, as the simulator does.
        let (k0, k) = (j.spec.workers.max(1), gpus / per_worker);
        let ratio = if k == k0 {
            1.0
        } else {
            orrery_model::convergence::iterations_per_reference(
                &j.spec.model,
                k0.saturating_mul(j.spec.batch),
                k.saturating_mul(j.spec.batch),
            )
        };
        for (&h, &g) in &need {
            self.free[h] -= g;
        }
        self.waiting.retain(|&w| w != job);
        let j = &mut self.jobs[job];
        let total = match j.spec.work {
            Work::Iterations(n) => n.max(1) as f64,
            Work::Seconds(s) => ((s * 1e3 / period.max(1e-9)).round()).max(1.0),
        };
        let left = (total - j.iterations_done as f64 / ratio.max(1e-9)).max(1.0);
        j.target_iterations = j.iterations_done + (left * ratio - 1e-9).ceil().max(1.0) as u64;
        // In the decision's order, as the simulator keeps them: a policy
        // derives the ranks' hosts from this list (a pipeline's stages and
        // a stage's replicas), so sorting it would move ranks.
        j.hosts = hosts;
        j.workers = placed.workers;
        j.period_ms = period;
        j.measured.clear();
        j.compute_ms = compute;
        j.shape = placed.shape;
        j.status = JobStatus::Running;
        j.started_s.get_or_insert(now_s);
        j.placed_s = now_s;
        j.iteration_start_s = now_s;
        j.ran_from_s = now_s;
        j.iter_count = 0;
        j.iter_sum_ms = 0.0;
        j.epoch += 1;
        j.in_force = InForce::default();
        true
    }

    /// Castor's sharing, checked by `orrery_policy::castor::share::check` (the
    /// simulator's rules). O(P · S).
    fn share(
        &mut self,
        job: JobId,
        free: &[(HostId, u32)],
        shared: &[(JobId, HostId, u32)],
        sub_batch: u32,
        now_s: f64,
    ) -> bool {
        let Some(j) = self.jobs.get(job).filter(|j| j.status == JobStatus::Queued) else { return false };
        let Some(orrery_policy::castor::share::Share { sub_batch: sub, hosts, taken: take }) =
            orrery_policy::castor::share::check(&self.topology, job, &j.spec, free, shared, sub_batch, self)
        else {
            return false;
        };
        // Lend the shared GPUs to the placement check; `place` takes them back.
        for (&(_, h), &g) in &take {
            self.free[h] += g;
        }
        if !self.place(job, hosts, now_s) {
            for (&(_, h), &g) in &take {
                self.free[h] -= g;
            }
            return false;
        }
        for (&(p, h), &g) in &take {
            self.jobs[job].sharing.push(Sharing { partner: p, host: h, gpus: g });
            self.jobs[p].sharing.push(Sharing { partner: job, host: h, gpus: g });
        }
        self.jobs[job].sub_batch = sub;
        true
    }

    /// Frees a job's GPUs (partners keep the shared ones) and drops its
    /// decisions in force; epoch + 1.
    fn release(&mut self, job: JobId, now_s: f64) {
        self.hand_over(job);
        let sharing = std::mem::take(&mut self.jobs[job].sharing);
        let mut kept: HashMap<HostId, u32> = HashMap::new();
        for s in &sharing {
            *kept.entry(s.host).or_default() += s.gpus;
            let pj = &mut self.jobs[s.partner];
            if let Some(k) = pj.sharing.iter().position(|x| x.partner == job && x.host == s.host && x.gpus == s.gpus) {
                pj.sharing.swap_remove(k);
            }
        }
        let j = &mut self.jobs[job];
        for &(h, g) in &j.hosts {
            self.free[h] += g - kept.get(&h).copied().unwrap_or(0).min(g);
        }
        j.run_s += (now_s - j.placed_s).max(0.0);
        j.hosts.clear();
        j.workers.clear();
        j.sub_batch = j.spec.batch;
        j.in_force = InForce::default();
        j.epoch += 1;
    }

    /// GPUs of `job` per host that no other job shares.
    /// One entry per host, sorted, as the simulator's. O(hosts log hosts).
    fn solo_gpus(&self, job: JobId) -> Vec<(HostId, u32)> {
        let j = &self.jobs[job];
        if j.sharing.is_empty() && j.hosts.windows(2).all(|w| w[0].0 < w[1].0) {
            return j.hosts.clone();
        }
        let mut per_host: BTreeMap<HostId, u32> = BTreeMap::new();
        for &(h, g) in &j.hosts {
            *per_host.entry(h).or_default() += g;
        }
        per_host
            .into_iter()
            .map(|(h, g)| (h, g - j.sharing.iter().filter(|s| s.host == h).map(|s| s.gpus).sum::<u32>().min(g)))
            .collect()
    }

    /// A registration: the host by name, checked against the topology. A
    /// host whose agent was heard within `live_s` of `now_s` is refused: one
    /// agent per node, so no rank of a job runs under two agents (issue 39).
    pub fn check_register(
        &self,
        name: &str,
        gpus: u32,
        nic_gbps: f64,
        now_s: f64,
        live_s: f64,
    ) -> Result<HostId, Refused> {
        let host = self
            .topology
            .hosts
            .iter()
            .position(|h| h.name == name)
            .ok_or_else(|| Refused::NotFound(format!("no host {name:?} in topology {}", self.topology.name)))?;
        let cap = self.topology.hosts[host].gpus;
        if gpus == 0 || gpus > cap {
            return Err(Refused::Field {
                field: "gpus",
                expected: format!("1..={cap} (host {name} has {cap} GPUs in the topology)"),
                found: gpus.to_string(),
            });
        }
        if !(nic_gbps.is_finite() && nic_gbps > 0.0) {
            return Err(Refused::Field {
                field: "nic_gbps",
                expected: "a positive rate in Gbit/s".into(),
                found: nic_gbps.to_string(),
            });
        }
        let n = &self.nodes[host];
        let heard = now_s - n.last_seen_s;
        if n.up && heard < live_s {
            return Err(Refused::Conflict(format!(
                "host {name} is held by a live agent (session {}, heard {heard:.1} s ago); a second agent \
                 cannot register it. It is free once that agent stops or has been silent for {live_s} s",
                n.session
            )));
        }
        let held = n.capacity - self.free[host].min(n.capacity);
        if n.up && gpus < held {
            return Err(Refused::Conflict(format!(
                "host {name} is up with {held} GPUs in use; cannot register only {gpus}"
            )));
        }
        Ok(host)
    }

    /// Highest session ever given to `host` (a new one must be higher).
    pub fn last_session(&self, host: HostId) -> u64 {
        self.nodes.get(host).map_or(0, |n| n.session)
    }

    /// Whether `session` is `host`'s current one, its node up.
    pub fn session_is_current(&self, host: HostId, session: u64) -> Result<(), Refused> {
        self.check_session(host, session)
    }

    /// A heartbeat; refused when the session is not the node's current one.
    pub fn heartbeat(&mut self, host: HostId, session: u64, now_s: f64) -> Result<(), Refused> {
        self.check_session(host, session)?;
        self.nodes[host].last_seen_s = now_s;
        Ok(())
    }

    /// Marks every up node seen now (after a restart, agents get a full
    /// time-out to reach the new server).
    pub fn touch_all(&mut self, now_s: f64) {
        for n in &mut self.nodes {
            n.last_seen_s = now_s;
        }
    }

    fn check_session(&self, host: HostId, session: u64) -> Result<(), Refused> {
        let n = self.nodes.get(host).ok_or_else(|| Refused::NotFound(format!("no host {host}")))?;
        if !n.up {
            return Err(Refused::Conflict(format!("host {host} is down; register again")));
        }
        if n.session != session {
            return Err(Refused::Conflict(format!(
                "session {session} is stale (host {host} is on session {}); register again",
                n.session
            )));
        }
        Ok(())
    }

    /// Up nodes silent since before `deadline_s`.
    pub fn silent_nodes(&self, deadline_s: f64) -> Vec<HostId> {
        (0..self.nodes.len()).filter(|&h| self.nodes[h].up && self.nodes[h].last_seen_s < deadline_s).collect()
    }

    /// Active jobs with GPUs on `host`.
    pub fn jobs_on(&self, host: HostId) -> Vec<JobId> {
        self.jobs
            .iter()
            .filter(|(_, j)| j.status.is_active() && j.hosts.iter().any(|h| h.0 == host))
            .map(|(id, _)| id)
            .collect()
    }

    /// Number of nodes up.
    pub fn nodes_up(&self) -> usize {
        self.nodes.iter().filter(|n| n.up).count()
    }

    /// An iteration report from `host` (session checked by the caller). The
    /// report must name the job's current epoch and a host it runs on.
    pub fn report(
        &mut self,
        host: HostId,
        r: &crate::api::IterationReport,
        now_s: f64,
    ) -> Result<ReportEffect, Refused> {
        let j = self.jobs.get_mut(r.job).ok_or_else(|| Refused::NotFound(format!("no job {}", r.job)))?;
        if !j.status.is_active() {
            return Err(Refused::Conflict(format!("job {} is {}", r.job, j.status.name())));
        }
        if r.epoch != j.epoch {
            return Err(Refused::Conflict(format!(
                "job {} is on placement epoch {}, the report names {}",
                r.job, j.epoch, r.epoch
            )));
        }
        if !j.hosts.iter().any(|h| h.0 == host) {
            return Err(Refused::Conflict(format!("job {} does not run on host {host}", r.job)));
        }
        if !(r.duration_ms.is_finite() && r.duration_ms >= 0.0 && r.start_s.is_finite()) {
            return Err(Refused::Field {
                field: "duration_ms",
                expected: "a non-negative number of ms and a finite start_s".into(),
                found: format!("{} at {}", r.duration_ms, r.start_s),
            });
        }
        if let Some(d) = r.delay_ms
            && !(d.is_finite() && d >= 0.0)
        {
            return Err(Refused::Field {
                field: "delay_ms",
                expected: "a non-negative number of ms".into(),
                found: d.to_string(),
            });
        }
        let mut effect = ReportEffect::default();
        if r.iteration > j.iterations_done {
            // A report cannot claim more than the job has to run.
            j.iterations_done =
                if j.target_iterations > 0 { r.iteration.min(j.target_iterations) } else { r.iteration };
            // The worker timed its start after the slot's wait.
            j.iteration_start_s = (r.start_s - r.delay_ms.unwrap_or(0.0) / 1e3).min(now_s);
            j.ran_from_s = r.start_s.min(now_s);
            j.iter_count += 1;
            j.iter_sum_ms += r.duration_ms;
            j.measured.observe(r.duration_ms, false);
            effect.advanced = true;
        }
        effect.finished = r.done || (j.target_iterations > 0 && j.iterations_done >= j.target_iterations);
        Ok(effect)
    }
}

impl orrery_policy::castor::share::Partners for Ledger {
    fn is_running(&self, job: JobId) -> bool {
        self.jobs.get(job).is_some_and(|j| j.status == JobStatus::Running)
    }

    fn solo_on(&self, job: JobId, host: HostId) -> u32 {
        self.solo_gpus(job).iter().filter(|x| x.0 == host).map(|x| x.1).sum()
    }

    fn spec_and_sub_batch(&self, job: JobId) -> Option<(&JobSpec, u32)> {
        self.jobs.get(job).map(|j| (&j.spec, j.sub_batch))
    }
}

/// The job an entry is about, if it is about one (its seq is deleted when
/// that job expires).
pub fn entry_job(entry: &Logged) -> Option<JobId> {
    match entry {
        Logged::Decision(d) => Some(decision_job(d)),
        Logged::Event(
            DriverEvent::Finished { job } | DriverEvent::Cancelled { job } | DriverEvent::Submitted { job },
        ) => Some(*job),
        Logged::Event(DriverEvent::NodeUp { .. } | DriverEvent::NodeDown { .. } | DriverEvent::Expired { .. })
        | Logged::Admin(_) => None,
    }
}

/// The job a decision is about.
pub fn decision_job(d: &Decision) -> JobId {
    match *d {
        Decision::Place { job, .. }
        | Decision::Reject { job, .. }
        | Decision::Preempt { job }
        | Decision::Shift { job, .. }
        | Decision::Align { job, .. }
        | Decision::Pace { job, .. }
        | Decision::Timetable { job, .. }
        | Decision::Pause { job }
        | Decision::Resume { job }
        | Decision::Throttle { job, .. }
        | Decision::Route { job, .. }
        | Decision::TrafficClass { job, .. }
        | Decision::Share { job, .. }
        | Decision::Note { job, .. } => job,
    }
}

/// The decision's kind, as its JSON tag.
pub fn decision_kind(d: &Decision) -> &'static str {
    match d {
        Decision::Place { .. } => "place",
        Decision::Reject { .. } => "reject",
        Decision::Preempt { .. } => "preempt",
        Decision::Shift { .. } => "shift",
        Decision::Align { .. } => "align",
        Decision::Pace { .. } => "pace",
        Decision::Timetable { .. } => "timetable",
        Decision::Pause { .. } => "pause",
        Decision::Resume { .. } => "resume",
        Decision::Throttle { .. } => "throttle",
        Decision::Route { .. } => "route",
        Decision::TrafficClass { .. } => "traffic_class",
        Decision::Share { .. } => "share",
        Decision::Note { .. } => "note",
    }
}

fn progress(j: &LiveJob) -> f64 {
    if j.target_iterations > 0 { (j.iterations_done as f64 / j.target_iterations as f64).clamp(0.0, 1.0) } else { 0.0 }
}

/// The slow-down a sharing job shows: its mean iteration over its time alone
/// (live, ξ is measured, not known); 1 when it shares no GPU.
fn measured_xi(j: &LiveJob) -> f64 {
    if j.sharing.is_empty() || j.iter_count == 0 || j.period_ms <= 0.0 {
        1.0
    } else {
        (j.iter_sum_ms / j.iter_count as f64 / j.period_ms).max(1.0)
    }
}

#[cfg(test)]
mod tests;
