//! The scheduling API shared by both drivers, and the baseline policies.
//!
//! A policy never reads a clock or a socket: it gets a read-only
//! [`ClusterView`] and returns [`Decision`]s (ARCHITECTURE.md). The simulator and the
//! service apply them.
//!
//! Architecture invariant: depends only on `orrery-model` and
//! `orrery-interleave`; no I/O, no clock;
//! randomness from a seed given at construction.

pub mod baseline;
pub mod cassini;
pub mod castor;
pub mod combined;
pub mod compose;
pub mod crux;
pub mod estimate;
pub mod foresight;
pub mod memo;
pub mod metronome;
pub mod order;
pub mod placement;
pub mod plebiscito;
pub mod pollux;
pub mod quota;
pub mod slot;
pub mod slurm_block;
pub mod topology_aware;

pub use compose::{CATALOGUE, PINNED_NAMES, by_name, with_pins};

use orrery_model::{HostId, JobSpec, Topology};
use serde::{Deserialize, Serialize};

/// Index of a job in the driver's job table (stable for the whole run).
pub type JobId = usize;

/// When a policy drops what it caches per job for the jobs that have left
/// its view (ended or cancelled). A long-running service sees jobs come and
/// go for months; a cache keyed by job would otherwise grow with every job
/// ever submitted. Pruned once its entries have doubled since the last
/// pruning (at least [`Forget::FLOOR`]), each pruning costs O(entries +
/// Q + R), amortised O(1) per entry added.
#[derive(Debug, Default, Clone)]
pub struct Forget {
    kept: usize,
}

impl Forget {
    /// Entries below which a cache is never pruned.
    pub const FLOOR: usize = 256;

    /// The jobs `view` holds (queued or running) when caches of `entries`
    /// are due for pruning, else None; report what is left with
    /// [`Forget::pruned`].
    pub fn due(&self, view: &ClusterView<'_>, entries: usize) -> Option<std::collections::HashSet<JobId>> {
        (entries > 2 * self.kept.max(Self::FLOOR / 2))
            .then(|| view.queue.iter().map(|q| q.id).chain(view.running.iter().map(|r| r.id)).collect())
    }

    /// Records the entries left after pruning.
    pub fn pruned(&mut self, entries: usize) {
        self.kept = entries;
    }
}

/// A job waiting for GPUs.
#[derive(Debug, Clone, Copy)]
pub struct QueuedJob<'a> {
    /// Driver's id.
    pub id: JobId,
    /// The specification.
    pub spec: &'a JobSpec,
    /// Seconds since the job arrived.
    pub waiting_s: f64,
    /// Fraction of its work done before it was preempted (0 for a new job).
    pub progress: f64,
    /// GPU-seconds it has run so far (Tiresias' attained service).
    pub service_gpu_s: f64,
}

impl<'a> QueuedJob<'a> {
    /// A job that has not run yet.
    pub fn new(id: JobId, spec: &'a JobSpec, waiting_s: f64) -> Self {
        QueuedJob { id, spec, waiting_s, progress: 0.0, service_gpu_s: 0.0 }
    }
}

/// A job holding GPUs.
#[derive(Debug, Clone)]
pub struct RunningJob<'a> {
    /// Driver's id.
    pub id: JobId,
    /// The specification.
    pub spec: &'a JobSpec,
    /// GPUs held on each host.
    pub hosts: &'a [(HostId, u32)],
    /// Iterations done (may lag for a job the simulator fast-forwards).
    pub iterations_done: u64,
    /// Whether the job is paused.
    pub paused: bool,
    /// When its current iteration started, seconds since the start (its
    /// phase), the wait for its slot included. The live service knows only
    /// reported iterations: there it is the latest reported one's start
    /// (in `on_iteration`, in both drivers, the start of the iteration
    /// reported, so that start plus `Iteration::ms` is its end).
    pub iteration_start_s: f64,
    /// Fraction of its work done.
    pub progress: f64,
    /// GPU-seconds it has run so far, this placement included.
    pub service_gpu_s: f64,
    /// Seconds since it was (last) placed.
    pub running_s: f64,
    /// GPUs on each host that no other job shares (all of `hosts` unless
    /// it shares GPUs): borrowed from `hosts` in that common case, so a
    /// view costs no allocation per job.
    pub solo_gpus: std::borrow::Cow<'a, [(HostId, u32)]>,
    /// Per-GPU sub-batch it runs at (its batch unless it accumulates).
    pub sub_batch: u32,
    /// Its current interference slow-down (1 when it shares no GPU).
    pub xi: f64,
    /// The GPUs it holds, (host, index on the host), where the driver
    /// hands out GPU indices (the simulator on a rail-optimised fabric);
    /// empty elsewhere.
    pub held_gpus: &'a [(HostId, u32)],
    /// The driver's serial number of this placement of the job, unique
    /// among all the placements it made (0: not given). A policy that keeps
    /// what it derived from a job's hosts compares this instead of the
    /// hosts while it is given: an integer in the view rather than a read
    /// of each job's hosts at every round.
    pub placement: u64,
}

impl<'a> RunningJob<'a> {
    /// Whether some of its GPUs may be shared with another job: its solo
    /// GPUs are not its hosts themselves, the same slice (the simulator
    /// lends that when the job shares none; the live service copies, so
    /// there every job may share). O(1), without reading either list.
    pub fn may_share(&self) -> bool {
        !matches!(&self.solo_gpus, std::borrow::Cow::Borrowed(s) if std::ptr::eq(*s, self.hosts))
    }

    /// A job that has just started alone on `hosts` at its own batch.
    pub fn new(id: JobId, spec: &'a JobSpec, hosts: &'a [(HostId, u32)]) -> Self {
        RunningJob {
            id,
            spec,
            hosts,
            iterations_done: 0,
            paused: false,
            iteration_start_s: 0.0,
            progress: 0.0,
            service_gpu_s: 0.0,
            running_s: 0.0,
            solo_gpus: std::borrow::Cow::Borrowed(hosts),
            sub_batch: spec.batch,
            xi: 1.0,
            held_gpus: &[],
            placement: 0,
        }
    }
}

/// What a policy sees.
#[derive(Debug, Clone)]
pub struct ClusterView<'a> {
    /// Seconds since the start.
    pub now_s: f64,
    /// The cluster.
    pub topology: &'a Topology,
    /// Free GPUs per host.
    pub free_gpus: &'a [u32],
    /// Waiting jobs in arrival order.
    pub queue: Vec<QueuedJob<'a>>,
    /// Running jobs.
    pub running: Vec<RunningJob<'a>>,
}

impl<'a> ClusterView<'a> {
    /// The spec of a job a decision of this round may place: a waiting job,
    /// or a running one the round preempts to restart it on a new size
    /// (Pollux's resizes, `orrery`'s growth). A layer that re-places the
    /// inner policy's placements must find both. O(Q + R).
    pub fn spec_of(&self, job: JobId) -> Option<&'a JobSpec> {
        self.queue
            .iter()
            .find(|q| q.id == job)
            .map(|q| q.spec)
            .or_else(|| self.running.iter().find(|r| r.id == job).map(|r| r.spec))
    }

    /// The hosts of the running jobs that `spec` depends on or that depend
    /// on it (`depends_on`, Metronome's AppGroup dependencies), one entry
    /// per pod: Metronome's PreFilter and Diktyo's NetworkOverhead sum the
    /// latency from a candidate node to each. O(running · dependencies).
    pub fn dependency_hosts(&self, spec: &JobSpec) -> Vec<HostId> {
        let mut hosts = Vec::new();
        for r in &self.running {
            if spec.depends_on.contains(&r.spec.id) || r.spec.depends_on.contains(&spec.id) {
                let per_pod = r.spec.gpus_per_worker.max(1);
                for &(h, g) in r.hosts {
                    hosts.extend(std::iter::repeat_n(h, (g / per_pod).max(1) as usize));
                }
            }
        }
        hosts
    }
}

/// What a policy asks the driver to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// Start a queued job on these GPUs (gang: all or nothing).
    Place {
        /// Job.
        job: JobId,
        /// GPUs to take on each host.
        hosts: Vec<(HostId, u32)>,
    },
    /// Refuse a queued job for good.
    Reject {
        /// Job.
        job: JobId,
        /// Why.
        reason: String,
    },
    /// Stop a running job and put it back in the queue (progress is kept).
    Preempt {
        /// Job.
        job: JobId,
    },
    /// Delay the start of the job's next iteration by this many ms (a
    /// CASSINI time-shift or a FORESIGHT per-iteration delay).
    Shift {
        /// Job.
        job: JobId,
        /// Delay, ms.
        ms: f64,
    },
    /// Start the job's next iteration at the first time `t ≥ now` with
    /// `t ≡ offset_s (mod period_ms)`: CASSINI's agent aligning a job to its
    /// time-shift on a common clock (§4.2).
    Align {
        /// Job.
        job: JobId,
        /// The job's iteration time, ms.
        period_ms: f64,
        /// A time, in seconds since the start, at which an iteration should begin.
        offset_s: f64,
    },
    /// Start *every* iteration of the job at the first `t ≥ now` with
    /// `t ≡ offset_s (mod period_ms)` — a TDM slot (Metronome's idle-time
    /// injection, §III-B): an iteration due less than half a period before
    /// its slot idles until it; one due after its slot began (late by less
    /// than half a period) starts at once. `period_ms ≤ 0` removes the pacing.
    Pace {
        /// Job.
        job: JobId,
        /// Slot period, ms (the job's period on the unified circle).
        period_ms: f64,
        /// A time, in seconds since the start, at which a slot begins.
        offset_s: f64,
    },
    /// Start the job's coming iterations no earlier than these times: the
    /// iteration it begins with `from_iteration` iterations done starts at
    /// `starts_s[0]` (seconds since the start) or later, the next at
    /// `starts_s[1]` or later, and so on; one due after its time starts at
    /// once. FORESIGHT's per-iteration plan handed out ahead, so that a
    /// driver whose decisions reach a job one iteration late (the live
    /// service) still holds it to the plan. Replaces the job's previous
    /// timetable; an empty one removes it.
    Timetable {
        /// Job.
        job: JobId,
        /// Iterations done when the first listed one begins.
        from_iteration: u64,
        /// Earliest starts, seconds since the start.
        starts_s: Vec<f64>,
    },
    /// Stop a running job after its current iteration until resumed.
    Pause {
        /// Job.
        job: JobId,
    },
    /// Resume a paused job.
    Resume {
        /// Job.
        job: JobId,
    },
    /// Cap the rate of each of the job's flows, Gbit/s (None removes the cap).
    Throttle {
        /// Job.
        job: JobId,
        /// Cap.
        gbps: Option<f64>,
    },
    /// Put every flow of the job in switch queue `class` under strict
    /// priority (a higher class is served first; 0, the default, last):
    /// Crux's priorities compressed to the fabric's levels (§4.3).
    TrafficClass {
        /// Job.
        job: JobId,
        /// Queue, 0 (default) up to the fabric's levels minus one.
        class: u8,
    },
    /// Route flow `flow` of each of the job's collectives (for a ring, the
    /// edge from worker `flow` to the next) over these of its equal-cost
    /// paths, split equally into subflows (FORESIGHT §III); empty restores ECMP.
    Route {
        /// Job.
        job: JobId,
        /// Flow index within a collective.
        flow: usize,
        /// Indices into the ECMP candidate set of `Topology::paths`.
        paths: Vec<usize>,
    },
    /// Start a queued job on GPUs that running jobs hold, and possibly some
    /// free ones (Castor's GPU sharing; a GPU holds at most two jobs and
    /// both must fit its memory). While they share, each job's compute is
    /// slowed by its interference ratio ξ, which the driver knows (the
    /// policy only estimates it).
    Share {
        /// The queued job.
        job: JobId,
        /// Free GPUs to take on each host.
        free: Vec<(HostId, u32)>,
        /// GPUs to share: (running job, host, GPUs of that job on that host).
        shared: Vec<(JobId, HostId, u32)>,
        /// Per-GPU sub-batch; the job's batch is reached by accumulating
        /// gradients over ⌈batch / sub_batch⌉ steps (0: its batch).
        sub_batch: u32,
    },
    /// Why the policy did what it does next to a job: the measurement
    /// behind a timing decision (issue 68). Drivers log it and change
    /// nothing.
    Note {
        /// Job.
        job: JobId,
        /// What was measured and what follows from it.
        text: String,
    },
}

/// How the fabric's transport shares a link among the flows that cross it,
/// as the driver knows it (issue 68). FORESIGHT splits a flow into subflows
/// over several spines (§III), and a ring step then lasts as long as its
/// slowest subflow: that pays only where each subflow gets its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowSharing {
    /// Flows on a link converge to equal shares: the fluid model's max-min
    /// rates, DCQCN, loss-based TCP (reno, cubic) over one FIFO, and any
    /// transport over per-flow fair queues.
    #[default]
    Equal,
    /// Flows on a link hold unequal shares for many round trips: BBR v1
    /// over one FIFO (Hock et al., ICNP'17: BBR flows of one round trip do
    /// not converge to fairness; the testbed's four bbr flows on one uplink
    /// took 0.20–1.44 of their fair shares, docs/results.md).
    Unequal,
}

impl FlowSharing {
    /// How a transport shares a link, from what every driver knows of it:
    /// whether its congestion control is BBR v1 and whether each flow has a
    /// queue of its own there. BBR's flows sharing a FIFO (tail-drop, or
    /// one priority class) keep unequal shares; per-flow fair queues even
    /// any congestion control out, and loss-based ones and DCQCN converge
    /// by themselves. The one home of that rule: the simulator's
    /// `[network]` and the testbed's `--cc` / `--fabric` both ask it.
    pub fn of(bbr: bool, queue_per_flow: bool) -> Self {
        if bbr && !queue_per_flow { FlowSharing::Unequal } else { FlowSharing::Equal }
    }
}

impl std::str::FromStr for FlowSharing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "equal" => Ok(FlowSharing::Equal),
            "unequal" => Ok(FlowSharing::Unequal),
            _ => Err(format!("expected `equal` or `unequal` (BBR over tail-drop switches), found {s:?}")),
        }
    }
}

/// What a policy's `on_iteration` needs of an iteration
/// ([`Policy::iteration_needs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IterationNeeds {
    /// Nothing: the call would decide nothing and change no state.
    Nothing,
    /// These running jobs in the view (others absent, the queue empty).
    Jobs(Vec<JobId>),
    /// The whole view.
    All,
}

impl IterationNeeds {
    /// What two policies' calls need together (a wrapper and the policy it
    /// wraps): the union of their jobs, each once. O(jobs²) for the few
    /// jobs a report names.
    pub fn and(self, other: IterationNeeds) -> IterationNeeds {
        match (self, other) {
            (IterationNeeds::All, _) | (_, IterationNeeds::All) => IterationNeeds::All,
            (IterationNeeds::Nothing, n) | (n, IterationNeeds::Nothing) => n,
            (IterationNeeds::Jobs(mut a), IterationNeeds::Jobs(b)) => {
                for j in b {
                    if !a.contains(&j) {
                        a.push(j);
                    }
                }
                IterationNeeds::Jobs(a)
            }
        }
    }
}

/// One iteration's times, as both drivers measure it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Iteration {
    /// From the end of the job's previous iteration to the end of this one,
    /// ms: the slot delay before it included (the simulator's iteration time).
    pub ms: f64,
    /// The part of `ms` the job waited for its slot (shifts, alignment,
    /// pacing, a timetable), ms; the rest is the job's own time.
    pub waited_ms: f64,
    /// The part of its own time the job spent communicating, ms, when the
    /// driver measured it: the simulator always does, a live worker when it
    /// reports its collectives' time (`orrery worker`, `orrery.torch_hook`).
    pub comm_ms: Option<f64>,
}

impl Iteration {
    /// An iteration of `ms` with no wait and no communication time measured.
    pub fn of(ms: f64) -> Self {
        Iteration { ms, waited_ms: 0.0, comm_ms: None }
    }

    /// The job's own time: `ms` without the wait, ms.
    pub fn own_ms(&self) -> f64 {
        (self.ms - self.waited_ms).max(0.0)
    }
}

/// A scheduling policy.
pub trait Policy {
    /// Name used in reports.
    fn name(&self) -> String;

    /// Called when jobs arrive or finish and GPUs may have freed up.
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision>;

    /// The queue's indices, `0..view.queue.len()`, in the order this policy
    /// serves waiting jobs. Admission by tenant quota
    /// ([`quota::admit_view`]) takes jobs in this order, so a policy's
    /// order holds within each tenant's quota too (issue 70). Default:
    /// the queue's own order (arrival).
    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        (0..view.queue.len()).collect()
    }

    /// Controller hook: called after each iteration of a running job with its
    /// times, when [`Policy::observes_iterations`] is true; may return
    /// decisions (drift re-alignment, pauses, ...).
    fn on_iteration(&mut self, _view: &ClusterView<'_>, _job: JobId, _it: Iteration) -> Vec<Decision> {
        Vec::new()
    }

    /// What `on_iteration` for this iteration of `job` needs to see, for a
    /// policy that [observes iterations](Policy::observes_iterations): a
    /// driver skips the call on [`IterationNeeds::Nothing`] and builds only
    /// the named running jobs' views on [`IterationNeeds::Jobs`] (the view
    /// of every job is O(jobs), once per iteration of every job). Metronome
    /// hears only its paced jobs and their references and looks at them
    /// alone unless its controller re-places a job.
    fn iteration_needs(&self, _job: JobId, _it: &Iteration) -> IterationNeeds {
        IterationNeeds::All
    }

    /// Whether the policy needs to see every iteration (a controller). When
    /// false, `on_iteration` is not called and the simulator may fast-forward
    /// jobs that run undisturbed.
    fn observes_iterations(&self) -> bool {
        false
    }

    /// Whether the policy needs each iteration of `job` now, for a policy
    /// that [observes iterations](Policy::observes_iterations). False means
    /// that, while the job runs undisturbed (alone on its links, no pending
    /// shift, pace or alignment), `on_iteration` would decide nothing for it
    /// and no state of the policy would depend on its iteration times, so a
    /// driver may fast-forward it. Asked after each iteration; O(1) in the
    /// policies here.
    fn watches(&self, _job: JobId) -> bool {
        self.observes_iterations()
    }

    /// Period, in seconds, at which the driver calls [`Policy::schedule`]
    /// even when no job arrives or finishes (Tiresias' queue demotions,
    /// Themis' lease rounds). None: only on arrivals and completions.
    fn tick_s(&self) -> Option<f64> {
        None
    }

    /// Named counters the policy keeps (auctions run, allocation failure
    /// rate, ...), reported with each run.
    fn counters(&self) -> Vec<(&'static str, f64)> {
        Vec::new()
    }

    /// The driver's knowledge of GPU sharing (mode, ξ true or predicted),
    /// given once before the run to policies that colocate jobs.
    fn set_colocation(&mut self, _estimate: &orrery_model::colocation::Colocation) {}

    /// How the driver's transport shares a link among flows
    /// ([`FlowSharing`]), given once before the run (the simulator's
    /// `[network] transport` and `queueing`; the live service's
    /// `transport`). Policies that route subflows read it; wrappers pass
    /// it on.
    fn set_flow_sharing(&mut self, _sharing: FlowSharing) {}

    /// Whether the driver should give every job the network to itself (the
    /// "ideal" baseline of CASSINI §5 and Metronome §IV-A).
    fn isolated_network(&self) -> bool {
        false
    }

    /// Which GPUs of a host the policy's jobs are given, where the policy
    /// has a say ([`orrery_model::rails`]; the simulator's `[sim] gpus`
    /// overrides it). None: the driver's default, the lowest free.
    fn gpu_allocation(&self) -> Option<orrery_model::rails::GpuAllocation> {
        None
    }
}

#[cfg(test)]
mod iteration_needs_tests {
    use super::IterationNeeds::{All, Jobs, Nothing};

    #[test]
    fn and_is_the_union_with_all_dominating_and_nothing_neutral() {
        assert_eq!(Nothing.and(Nothing), Nothing);
        assert_eq!(Nothing.and(Jobs(vec![3])), Jobs(vec![3]));
        assert_eq!(Jobs(vec![3]).and(Nothing), Jobs(vec![3]));
        assert_eq!(Jobs(vec![3, 1]).and(Jobs(vec![1, 4])), Jobs(vec![3, 1, 4]), "each job once");
        assert_eq!(Jobs(vec![3]).and(All), All);
        assert_eq!(All.and(Nothing), All);
    }
}

#[cfg(test)]
mod flow_sharing_tests {
    use super::FlowSharing;

    #[test]
    fn only_bbr_sharing_a_fifo_shares_unequally() {
        assert_eq!(FlowSharing::of(true, false), FlowSharing::Unequal);
        assert_eq!(FlowSharing::of(true, true), FlowSharing::Equal, "per-flow queues even bbr out");
        assert_eq!(FlowSharing::of(false, false), FlowSharing::Equal, "loss-based TCP and DCQCN converge");
        assert_eq!(FlowSharing::of(false, true), FlowSharing::Equal);
        assert_eq!("unequal".parse::<FlowSharing>(), Ok(FlowSharing::Unequal));
        assert!("fair".parse::<FlowSharing>().expect_err("not a sharing").contains("\"fair\""));
    }
}
