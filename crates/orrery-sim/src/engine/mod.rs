//! The discrete-event engine.
//!
//! Time is an integer number of nanoseconds. Events at equal times run in the
//! order they were scheduled, so a run is reproducible to the bit for a seed.

use crate::network::{FlowId, Network, Path};
use dary_heap::QuaternaryHeap;
use fixedbitset::FixedBitSet;
use orrery_model::{HostId, IterationShape, JobSpec, LinkId, Topology};
use orrery_policy::memo::FastMap;
use orrery_policy::{Decision, JobId, Policy, RunningJob};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::Normal;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

mod decisions;
mod fast_forward;
mod flows;
mod headroom;
mod iteration;
mod view;

/// Nanoseconds per second.
pub const NS: f64 = 1e9;

impl JobState {
    /// Links the job's flows have crossed, sorted.
    pub fn links_used(&self) -> &[LinkId] {
        &self.links_used
    }

    /// Adds the run since it last started, up to `now_ns`, to its run time
    /// and to the GPU-seconds of the GPUs it holds.
    fn count_run_until(&mut self, now_ns: u64) {
        let ran = now_ns - self.last_start_ns;
        self.run_ns += ran;
        let gpus = self.hosts.iter().map(|h| h.1).sum::<u32>();
        self.gpu_s += ran as f64 / NS * f64::from(gpus);
        if ran > 0 {
            self.held.push((self.last_start_ns, now_ns, gpus));
        }
    }
}

/// Rounds of re-scheduling after preemptions in one instant.
pub const RESCHEDULE_ROUNDS: usize = 16;

/// Owner of background flows ([`SimConfig::background`]).
pub const BACKGROUND: usize = usize::MAX;

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
    /// Fast-forward jobs that run undisturbed (see [`Simulation`]).
    pub skip: bool,
    /// Seconds a preempted job spends restoring its checkpoint when it is
    /// placed again, before its first iteration (Tiresias and Pollux charge
    /// tens of seconds; 0 makes preemption free).
    pub restart_penalty_s: f64,
    /// Traffic the scheduler does not control: (link, Gbit/s) flows that never
    /// end (an iPerf3 stream), sharing max-min with jobs; an isolated network
    /// ignores them like any other flow.
    pub background: Vec<(LinkId, f64)>,
    /// Record every rate change on this link in [start, end] seconds
    /// ([`crate::network::Probe`]); for figures.
    pub probe: Option<(LinkId, f64, f64)>,
    /// Ground truth of GPU sharing: the mode and measured ξ the simulator
    /// slows shared jobs by (by default spatial with no measurements, which
    /// falls back to time slicing).
    pub colocation: orrery_model::colocation::Colocation,
    /// Ring collectives as NCCL runs them, step by step with a barrier
    /// between steps ([`orrery_model::IterationShape::ring_steps`]), instead
    /// of one flow per ring edge for the whole collective. Policies still
    /// predict with the whole collective: alone, both take the same time.
    pub ring_steps: bool,
    /// Keep a record of every iteration ([`IterationRecord`], in
    /// `JobState::iterations`); turns the fast-forward off, so that every
    /// iteration is simulated. For runs small enough to want it.
    pub record_iterations: bool,
    /// Tenants' GPU quotas (issue 70): the policy is offered only the jobs
    /// [`orrery_policy::quota::admit`] admits, and a lender's reclaim
    /// preempts borrowers first, as in the live service. Empty: no quotas.
    pub quotas: std::collections::BTreeMap<String, orrery_policy::quota::Quota>,
    /// With quotas: who borrows idle quota next (and gives it back first)
    /// by recent usage over share, usage halving every this many seconds
    /// ([`orrery_policy::quota::FairShare`], Slurm's factor). None: by
    /// borrowed GPUs over weight.
    pub fair_share_half_life_s: Option<f64>,
    /// A transport model in place of the max-min fluid rates (issue 68;
    /// [`crate::transport`]). Turns the fast-forward off: a job's next
    /// iteration is no longer its last one's copy. None: the fluid model.
    pub transport: Option<crate::transport::TransportConfig>,
    /// Which GPUs of a host a placed job is given; on a rail fabric its
    /// flows leave on those GPUs' rails ([`orrery_model::rails`]).
    pub gpus: orrery_model::rails::GpuAllocation,
    /// Decide in periodic rounds, s: an arrival or a departure asks for
    /// the next round (at the next multiple of the period) and every event
    /// until it shares one decision, as Volcano opens a scheduling session
    /// every `schedulePeriod` (1 s by default) and Blox and Gavel decide
    /// per round. None: a decision at every such event, as kube-scheduler
    /// takes each pod when it arrives. A decision sees every running job,
    /// so at a fixed rate of events per host rounds bound the decisions
    /// by simulated time rather than by jobs.
    pub schedule_period_s: Option<f64>,
}

/// One iteration of a job, as the simulator ran it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IterationRecord {
    /// Iteration number of the job, from 0.
    pub iteration: u64,
    /// When it was due (the previous one ended, or the job was placed), s.
    pub due_s: f64,
    /// When it began: due plus the delay a shift, alignment or pace imposed, s.
    pub start_s: f64,
    /// When its last segment ended, s.
    pub end_s: f64,
    /// The delay applied before it, ms.
    pub delay_ms: f64,
    /// The rate cap on its flows, Gbit/s (None: uncapped).
    pub throttle_gbps: Option<f64>,
    /// Its routes: `flow:path,path` per routed ring edge, then
    /// `stepS/flow:path,path` per route given for one step of this iteration
    /// (`;` between them); empty under ECMP.
    pub routes: String,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            jitter: 0.0,
            max_time_s: None,
            skip: true,
            restart_penalty_s: 0.0,
            background: Vec::new(),
            probe: None,
            colocation: orrery_model::colocation::Colocation::default(),
            ring_steps: false,
            record_iterations: false,
            quotas: std::collections::BTreeMap::new(),
            fair_share_half_life_s: None,
            transport: None,
            gpus: orrery_model::rails::GpuAllocation::LowestFree,
            schedule_period_s: None,
        }
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
#[repr(C, align(64))]
pub struct JobState {
    // The fields a view reads of every running job at every decision
    // (`running_job`, `solo_gpus`) come first, in three cache lines with
    // the fast-forward cursor's head (`repr(C)`, aligned to a line): left
    // to the compiler they were spread over eight lines of this 2 kB
    // struct, and reading them was a quarter of a 16,384-host run.
    /// Status.
    pub status: Status,
    /// Whether `hosts` lists each host once, in ascending order: set where
    /// `hosts` is, so that a view need not read them to tell.
    hosts_ascending: bool,
    /// Per-GPU sub-batch it runs at (its batch unless sharing made it
    /// accumulate gradients).
    pub sub_batch: u32,
    /// `spec.gpus()`, kept here: the spec does not change, and it lies
    /// several cache lines further on.
    spec_gpus: u32,
    /// The serial number of its current placement ([`RunningJob::placement`]).
    placement: u64,
    /// Iterations done.
    pub iterations_done: u64,
    iter_start_ns: u64,
    last_start_ns: u64,
    /// Time spent holding GPUs, ns.
    pub run_ns: u64,
    /// `iterations_done` when the job was last placed.
    iters_at_place: u64,
    /// Work in reference iterations (at the requested size), fixed at the
    /// first placement, and what is left of it as of the last release.
    ref_total: f64,
    ref_left: f64,
    /// Iterations at the current size per reference iteration (1 at the
    /// requested size; Pollux's statistical efficiency otherwise).
    ratio: f64,
    /// Compute slow-down from GPU sharing (1 when alone): the largest ξ
    /// over the jobs it shares GPUs with.
    pub xi: f64,
    /// GPUs held per host (empty when not holding any).
    pub hosts: Vec<(HostId, u32)>,
    /// The GPUs the job holds (host, index): kept on a rail fabric only
    /// ([`Simulation::take_gpus`]).
    held_gpus: Vec<(HostId, u32)>,
    /// The GPUs this job shares with others (each GPU holds at most two jobs).
    pub sharing: Vec<Sharing>,
    skip: Option<Skip>,
    // The rest, read when the job itself has an event.
    /// The jobs that must have started before this one is offered to the
    /// policy (its `depends_on`, Diktyo's TopologicalSort and Metronome's
    /// AppGroup dependencies).
    deps: Vec<JobId>,
    /// Some job depends on this one.
    has_dependents: bool,
    /// The specification, fixed when the simulation is built (its GPUs are
    /// copied to `spec_gpus`).
    pub spec: JobSpec,
    /// Hosts of the latest placement (kept after the job ends).
    pub hosts_used: usize,
    /// Host of each worker, in ring order.
    workers: Vec<HostId>,
    /// Each worker's first GPU on its host: kept on a rail fabric only
    /// ([`Simulation::take_gpus`]).
    worker_gpus: Vec<u32>,
    /// The iteration shape for the current placement.
    pub shape: IterationShape,
    /// Iteration time alone, ms, for the current placement.
    pub isolated_iter_ms: f64,
    /// Iterations to run.
    pub target_iterations: u64,
    /// Durations of the iterations, ms (count and mean exact, quantiles
    /// within 0.05%, in memory that does not grow with the iterations).
    pub iteration_ms: crate::durations::Durations,
    segment: usize,
    epoch: u64,
    /// Parts of the current collective still running: its flows, and one
    /// for all its transfers inside hosts.
    pending_flows: usize,
    flows: flows::JobFlows,
    /// The start delay of the current iteration, ns.
    iter_delay_ns: u64,
    /// Every iteration, with `SimConfig::record_iterations`.
    pub iterations: Vec<IterationRecord>,
    pending_shift_ms: f64,
    /// A pending [`Decision::Align`]: (period, offset) in ns.
    pending_align: Option<(u64, u64)>,
    /// TDM slots every iteration starts in: (period, offset), ns.
    pace: Option<(u64, u64)>,
    /// A [`Decision::Timetable`]: iterations done at its first entry, and
    /// the earliest starts, ns.
    timetable: Option<(u64, Vec<u64>)>,
    pause_requested: bool,
    throttle_gbps: Option<f64>,
    rng: ChaCha8Rng,
    /// Arrival, ns.
    pub arrival_ns: u64,
    /// First start, ns.
    pub first_start_ns: Option<u64>,
    /// Finish, ns.
    pub finish_ns: Option<u64>,
    /// GPU-seconds held (an elastic job's GPUs as it ran, not as it asked).
    pub gpu_s: f64,
    /// Each stretch it held GPUs: (from ns, to ns, GPUs), in time order.
    /// One per start (preemptions and pauses end one).
    pub held: Vec<(u64, u64, u32)>,
    /// Preemptions suffered.
    pub preemptions: u32,
    /// Pauses applied.
    pub pauses: u32,
    /// Time-shifts / delays applied.
    pub shifts: u32,
    /// Iterations counted analytically instead of simulated.
    pub skipped_iterations: u64,
    interacted: bool,
    solo_streak: u32,
    /// Whether the policy watches its iterations (then it is never
    /// fast-forwarded); asked after each detailed iteration.
    watched: bool,
    seg_start_ns: u64,
    cur_seg_ns: Vec<u64>,
    last_seg_ns: Vec<u64>,
    cur_flow_ns: Vec<Vec<u64>>,
    last_flow_ns: Vec<Vec<u64>>,
    links_used: Vec<LinkId>,
    links_grew: bool,
    /// Bits this iteration's flows put on each link of `links_used` (its own
    /// traffic, which the fast-forward credits when other jobs' traffic
    /// shared the links' totals).
    own_bits: Vec<f64>,
    /// Its peak demand on each link while placed, sorted by link
    /// ([`headroom::Headroom`]).
    peaks: Vec<(LinkId, f64)>,
    /// Σ [`headroom::Headroom::lost`] over `links_used` when the iteration
    /// began, if every one of them had headroom then.
    lost_at_start: Option<u64>,
    iter_stats_start: Vec<(f64, f64, u64, u64)>,
    per_iter_delta: Vec<(f64, f64, u64)>,
    /// Compute stretch from gradient accumulation (1 at its own batch).
    pub accumulation: f64,
    /// GPU-seconds spent sharing a GPU, summed over its GPUs.
    pub shared_gpu_s: f64,
    /// Times it was started beside a running job.
    pub shares: u32,
    routes: iteration::Routes,
    /// Scripted decisions due when an iteration begins: iteration → (the
    /// communication step a route is for, decision) ([`Simulation::script_iterations`]).
    at_iteration: BTreeMap<u64, Vec<(Option<usize>, Decision)>>,
    /// Routes for one communication step of the current iteration only:
    /// (step, flow) → paths (a per-flow plan such as psim's routing file).
    step_routes: HashMap<(usize, usize), Vec<usize>>,
}

impl JobState {
    /// Each iteration's duration from when it was due to when it ended, ms,
    /// in order: what `iteration_ms` summarises, one by one. Only with
    /// [`SimConfig::record_iterations`] (empty otherwise).
    pub fn recorded_iteration_ms(&self) -> Vec<f64> {
        self.iterations.iter().map(|r| (r.end_s - r.due_s) * 1e3).collect()
    }

    /// The communication segments' time in the iteration that just ended,
    /// ms (None when its segments were not all timed). O(segments).
    fn last_comm_ms(&self) -> Option<f64> {
        let segments = &self.shape.segments;
        (self.last_seg_ns.len() == segments.len()).then(|| {
            let ns: u64 = segments
                .iter()
                .zip(&self.last_seg_ns)
                .filter(|(seg, _)| matches!(seg, orrery_model::Segment::Comm { .. }))
                .map(|(_, &ns)| ns)
                .sum();
            ns as f64 / 1e6
        })
    }
}

/// Some of a job's GPUs that another job also holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Sharing {
    /// The other job.
    pub partner: JobId,
    /// Host of the GPUs.
    pub host: HostId,
    /// How many.
    pub gpus: u32,
    /// This job's interference ratio beside the partner (ground truth).
    pub xi: f64,
    /// Since when, ns.
    pub since_ns: u64,
}

/// A fast-forward in progress: from `t0` the job's iterations are drawn (the
/// same draws the detailed simulation would make), not simulated. The cursor
/// (`t`, `word`, `done`) counts those already over, so the view can give
/// the exact iteration count and start.
///
/// The cursor keeps the RNG's word position, not a copy of its state: a
/// ChaCha8 state is ~330 bytes, and it was copied at every draw to keep
/// the state at `t` while looking one iteration ahead (`memmove` fell from
/// 6.5% to 4% of a 16,384-host run without it). The stream is one: `rng`
/// draws ahead, and the state at `t` is `rng` set back to `word`
/// ([`Skip::rng_at_t`]).
///
/// `repr(C)`, the fields a view reads first: `t`, `done` and `next` (whose
/// tag also tells `Option<Skip>` apart) share the cursor's first cache
/// line. Left to the compiler, the RNG came first and they sat 400 bytes
/// in, one more cache miss for each fast-forwarded job at every view.
#[derive(Debug, Clone)]
#[repr(C)]
struct Skip {
    /// Start of the first iteration not yet counted.
    t: u64,
    /// Iterations counted since `t0` (their durations go into
    /// `JobState::iteration_ms` as they are counted, or at the stretch's
    /// end when read from `ahead`).
    done: u64,
    /// The next iteration's duration and the RNG's word position after it,
    /// once drawn (a view between two iteration ends then costs no draw).
    next: Option<(u64, u128)>,
    /// Duration of the last one counted, ms.
    last_ms: f64,
    t0: u64,
    /// The RNG's word position at `t`.
    word: u128,
    /// The job's RNG: at word `word` when `next` is None, after `next`'s
    /// draw when it is Some, or anywhere when a draw was read from `ahead`
    /// (a draw first sets it back to `word`).
    rng: ChaCha8Rng,
    /// The stretch's iterations as [`Simulation::next_stretch`] drew them to
    /// find its end, from the cursor on: (duration ns, the RNG's word
    /// position after it). The cursor reads them instead of drawing each
    /// iteration a second time, while what they were drawn with
    /// ([`Ahead::key`]) has not changed.
    ahead: Ahead,
}

/// What a fast-forwarded job's iterations are drawn with that can change
/// while it is fast-forwarded: its slots, and the bits of its ξ and
/// accumulation.
type DrawKey = (Option<(u64, u64)>, u64, u64);

/// A stretch's iterations drawn ahead, and how far the cursor has read and
/// recorded them. Iterations counted from here reach `JobState::iteration_ms`
/// at the stretch's end, in their order (the same additions as one at a
/// time, so the same bits), with the histogram's lines read once a stretch
/// rather than once a view.
#[derive(Debug, Clone, Default)]
struct Ahead {
    /// Each iteration's duration (ns, the low [`Ahead::DURATION_BITS`]) and
    /// the RNG's word position after it, as an offset from `base` (the high
    /// bits): 8 bytes a draw, 8 kB a stretch. A draw that does not fit ends
    /// what is kept, and the cursor draws the rest itself.
    drawn: Vec<u64>,
    /// The RNG's word position at the stretch's start.
    base: u128,
    /// The entry of the iteration starting at the cursor's `t`.
    pos: usize,
    /// Entries before this one are in `iteration_ms`.
    recorded: usize,
    /// What they were drawn with: the job's slots, ξ and accumulation.
    key: DrawKey,
}

impl Ahead {
    /// Durations up to 2⁴⁰ ns (18 minutes) an iteration; word offsets up to
    /// 2²⁴ (16.7 M words) a stretch.
    const DURATION_BITS: u32 = 40;
    const DURATION_MASK: u64 = (1 << Self::DURATION_BITS) - 1;

    /// Empties it for a new stretch whose RNG starts at word `base`, drawn
    /// with `key`.
    fn start(&mut self, base: u128, key: DrawKey) {
        self.drawn.clear();
        (self.base, self.pos, self.recorded, self.key) = (base, 0, 0, key);
    }

    /// Keeps a draw of `d` ns after which the RNG stands at `word`; false
    /// (nothing kept) when it does not fit in 8 bytes.
    fn keep(&mut self, d: u64, word: u128) -> bool {
        let offset = word.checked_sub(self.base).and_then(|o| u64::try_from(o).ok());
        match offset {
            Some(o) if d <= Self::DURATION_MASK && o < 1 << (64 - Self::DURATION_BITS) => {
                self.drawn.push(o << Self::DURATION_BITS | d);
                true
            }
            _ => false,
        }
    }

    /// Adds the entries the cursor has read since the last call to
    /// `iteration_ms`, in their order. O(those entries).
    fn record_into(&mut self, iteration_ms: &mut crate::durations::Durations) {
        for i in self.recorded..self.pos {
            iteration_ms.add(self.duration(i) as f64 / 1e6);
        }
        self.recorded = self.pos;
    }

    /// Records what the cursor has read and drops the rest: the cursor
    /// draws from here on.
    fn forget(&mut self, iteration_ms: &mut crate::durations::Durations) {
        self.record_into(iteration_ms);
        self.drawn.clear();
        (self.pos, self.recorded) = (0, 0);
    }

    /// Entry `i`'s duration, ns.
    fn duration(&self, i: usize) -> u64 {
        self.drawn[i] & Self::DURATION_MASK
    }

    /// Entry `i` as (duration ns, the RNG's word position after it).
    fn get(&self, i: usize) -> Option<(u64, u128)> {
        let p = *self.drawn.get(i)?;
        Some((p & Self::DURATION_MASK, self.base + u128::from(p >> Self::DURATION_BITS)))
    }
}

impl Skip {
    fn new(t: u64, rng: ChaCha8Rng) -> Self {
        let word = rng.get_word_pos();
        Skip { t0: t, t, word, rng, done: 0, last_ms: 0.0, next: None, ahead: Ahead::default() }
    }

    /// Sets the RNG back to `t` if it drew ahead. O(1): a position compared,
    /// and one ChaCha block regenerated when it moves.
    fn rewind(&mut self) {
        if self.rng.get_word_pos() != self.word {
            self.rng.set_word_pos(self.word);
        }
    }

    /// The job's RNG where the detailed simulation would have it at `t` (a
    /// copy of the state, set back if it drew ahead).
    fn rng_at_t(&self) -> ChaCha8Rng {
        let mut rng = self.rng.clone();
        if rng.get_word_pos() != self.word {
            rng.set_word_pos(self.word);
        }
        rng
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival(JobId),
    /// The end of a fast-forwarded job's stretch of iterations (job, epoch).
    SkipStretch(JobId, u64),
    IterationStart(JobId, u64),
    ComputeDone(JobId, u64),
    FlowDone(FlowId, u64),
    /// The last of a collective's transfers inside a host ends (job, epoch).
    HostTransfersDone(JobId, u64),
    /// Flows that end at one instant, rescheduled together: their (flow,
    /// version) pairs in `Simulation::done_groups` at this index.
    FlowsDone(u32),
    /// The policy's periodic wake-up ([`Policy::tick_s`]).
    Tick,
    /// A scheduling round falls due ([`SimConfig::schedule_period_s`]).
    Round,
    /// The transport model's next step ([`SimConfig::transport`]).
    TransportStep,
    /// A scripted decision falls due (its index in `Simulation::script`).
    Scripted(usize),
    /// The probe's window opens: fast-forwarded jobs on the probed link
    /// rejoin the detailed simulation, so the probe sees their flows.
    ProbeStart,
}

/// The simulator.
pub struct Simulation<'a> {
    topo: &'a Topology,
    cfg: SimConfig,
    /// Tenants' decayed usage, with [`SimConfig::fair_share_half_life_s`].
    fair: Option<orrery_policy::quota::FairShare>,
    now: u64,
    seq: u64,
    /// Events by (time, sequence): the sequence is unique, so any correct
    /// priority queue pops them in one order. A 4-ary heap: a pop sifts
    /// down half a binary heap's levels, comparing four children in each.
    events: QuaternaryHeap<Reverse<(u64, u64, Event)>>,
    /// Scripted decisions ([`Simulation::script`]).
    scripted: Vec<Decision>,
    /// Jobs, indexed by [`JobId`].
    pub jobs: Vec<JobState>,
    free: Vec<u32>,
    /// Jobs holding each GPU of each host, on a rail fabric (empty elsewhere).
    gpu_holders: Vec<Vec<u8>>,
    waiting: Vec<JobId>,
    /// The network.
    pub net: Network,
    /// Owner job, its epoch, and the flow's index in its collective, by
    /// flow id (the network's slab ids are dense: a vector, not a map).
    flow_job: Vec<Option<(JobId, u64, usize)>>,
    /// The flows ending at one instant, as the event loop gathers them.
    ended_buf: Vec<flows::Ended>,
    /// The members of each [`Event::FlowsDone`] in the queue, and the
    /// groups free for reuse (their allocations kept).
    done_groups: Vec<Vec<(FlowId, u64)>>,
    free_groups: Vec<u32>,
    /// (finish, flow, version) of the flows being rescheduled.
    due_buf: Vec<(u64, FlowId, u64)>,
    /// Whether flows ending at one instant share one event; off only in
    /// the test that holds the groups to one event a flow.
    group_ends: bool,
    /// Equal-cost paths by (source, destination, destination rail; 0 off
    /// a rail fabric).
    ///
    /// Each path kept once, shared by the flows on it ([`Path`]). O(1) a
    /// lookup (foldhash: every flow of every collective looks one up).
    paths: FastMap<(HostId, HostId, usize), Vec<Path>>,
    /// Wall-clock seconds of each policy call.
    pub decision_s: Vec<f64>,
    /// Events processed.
    pub events_processed: u64,
    /// Decisions the simulator could not apply (e.g. placing on busy GPUs).
    pub invalid_decisions: u64,
    /// The policy's notes ([`Decision::Note`]): (time s, job, text).
    pub notes: Vec<(f64, JobId, String)>,
    /// Instants where the policy kept preempting after [`RESCHEDULE_ROUNDS`] rounds.
    pub reschedules_cut: u64,
    normal: Normal<f64>,
    /// The fast-forwarded jobs on each link: one on a link that may bind,
    /// any number on one with headroom.
    skip_owners: FastMap<LinkId, Vec<JobId>>,
    /// The running jobs' peak demands per link.
    headroom: headroom::Headroom,
    /// Jobs being fast-forwarded, each with when its cursor next has an
    /// iteration to count ([`fast_forward::Due`]).
    skip_due: fast_forward::Due,
    /// Whether a stretch keeps its draws for the cursor ([`Skip::ahead`]);
    /// off only in the test that holds them to draws made one by one.
    keep_draws: bool,
    /// Jobs placed and perhaps still running or paused, a bit per job id
    /// (entries of jobs that ended or were preempted are pruned before each
    /// view): a view walks them in id order over N/64 words and the
    /// running jobs' bits, with no pointer to chase per job (the B-tree set
    /// it replaced was 2% of a 16,384-host run).
    active: FixedBitSet,
    /// Jobs that gave their GPUs back (ended or were preempted) since
    /// `active` was last pruned: a prune looks at these only.
    released: Vec<JobId>,
    /// The allocation of the last view's running jobs, empty, for the next
    /// ([`Simulation::view`]).
    spare_running: Vec<RunningJob<'static>>,
    /// Placements made so far: each job placed takes the next number.
    placements: u64,
    /// Jobs whose arrival has happened.
    arrived: usize,
    observes: bool,
    /// The transport model, when not fluid, and whether its next step is
    /// in the event queue.
    transport: Option<crate::transport::Transport>,
    transport_due: bool,
    /// With [`SimConfig::schedule_period_s`]: the period, ns, and whether
    /// a round is in the event queue.
    round_ns: Option<u64>,
    round_due: bool,
}

impl<'a> Simulation<'a> {
    /// A simulation of `jobs` on `topo`; `isolated` gives every flow its cap.
    pub fn new(topo: &'a Topology, jobs: &[JobSpec], mut cfg: SimConfig, isolated: bool) -> Self {
        let capacity: Vec<f64> = topo.links.iter().map(|l| l.gbps).collect();
        // An isolated network has nothing to contend for: no transport.
        let transport = cfg
            .transport
            .clone()
            .filter(|_| !isolated)
            .map(|t| crate::transport::Transport::new(t, topo.links.len(), cfg.seed));
        if transport.is_some() {
            cfg.skip = false;
        }
        let mut sim = Simulation {
            topo,
            now: 0,
            seq: 0,
            events: QuaternaryHeap::new(),
            scripted: Vec::new(),
            jobs: Vec::with_capacity(jobs.len()),
            free: topo.hosts.iter().map(|h| h.gpus).collect(),
            gpu_holders: if topo.rails {
                topo.hosts.iter().map(|h| vec![0; h.gpus as usize]).collect()
            } else {
                Vec::new()
            },
            waiting: Vec::new(),
            headroom: headroom::Headroom::new(capacity.clone()),
            net: Network::new(capacity, isolated),
            flow_job: Vec::new(),
            ended_buf: Vec::new(),
            done_groups: Vec::new(),
            free_groups: Vec::new(),
            due_buf: Vec::new(),
            group_ends: true,
            paths: FastMap::default(),
            decision_s: Vec::new(),
            events_processed: 0,
            invalid_decisions: 0,
            notes: Vec::new(),
            reschedules_cut: 0,
            skip_owners: FastMap::default(),
            skip_due: fast_forward::Due::default(),
            keep_draws: true,
            active: FixedBitSet::with_capacity(jobs.len()),
            spare_running: Vec::new(),
            placements: 0,
            released: Vec::new(),
            arrived: 0,
            observes: true,
            transport_due: false,
            round_ns: cfg
                .schedule_period_s
                .filter(|s| s.is_finite() && *s > 0.0)
                .map(|s| (s * NS).round().max(1.0) as u64),
            round_due: false,
            normal: Normal::new(0.0, cfg.jitter.max(0.0)).unwrap_or_else(|_| Normal::new(0.0, 0.0).expect("valid")),
            fair: cfg.fair_share_half_life_s.map(orrery_policy::quota::FairShare::new),
            cfg,
            transport,
        };
        sim.net.externally_rated = sim.transport.is_some();
        for (i, spec) in jobs.iter().enumerate() {
            let arrival_ns = (spec.arrival_s.max(0.0) * NS).round() as u64;
            let rng = ChaCha8Rng::seed_from_u64(sim.cfg.seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
            sim.jobs.push(JobState {
                deps: Vec::new(),
                has_dependents: false,
                spec: spec.clone(),
                spec_gpus: spec.gpus(),
                status: Status::Future,
                hosts: Vec::new(),
                hosts_ascending: true,
                placement: 0,
                hosts_used: 0,
                workers: Vec::new(),
                worker_gpus: Vec::new(),
                held_gpus: Vec::new(),
                shape: IterationShape::default(),
                isolated_iter_ms: 0.0,
                target_iterations: 0,
                ref_total: 0.0,
                ref_left: 0.0,
                ratio: 1.0,
                iters_at_place: 0,
                iterations_done: 0,
                iteration_ms: crate::durations::Durations::new(),
                segment: 0,
                epoch: 0,
                pending_flows: 0,
                flows: flows::JobFlows::default(),
                iter_start_ns: 0,
                iter_delay_ns: 0,
                iterations: Vec::new(),
                pending_shift_ms: 0.0,
                pending_align: None,
                pace: None,
                timetable: None,
                pause_requested: false,
                throttle_gbps: None,
                rng,
                arrival_ns,
                first_start_ns: None,
                finish_ns: None,
                run_ns: 0,
                gpu_s: 0.0,
                held: Vec::new(),
                last_start_ns: 0,
                preemptions: 0,
                pauses: 0,
                shifts: 0,
                skipped_iterations: 0,
                interacted: false,
                solo_streak: 0,
                watched: true,
                seg_start_ns: 0,
                cur_seg_ns: Vec::new(),
                last_seg_ns: Vec::new(),
                cur_flow_ns: Vec::new(),
                last_flow_ns: Vec::new(),
                links_used: Vec::new(),
                links_grew: false,
                own_bits: Vec::new(),
                peaks: Vec::new(),
                lost_at_start: None,
                iter_stats_start: Vec::new(),
                per_iter_delta: Vec::new(),
                skip: None,
                xi: 1.0,
                sharing: Vec::new(),
                sub_batch: spec.batch,
                accumulation: 1.0,
                shared_gpu_s: 0.0,
                shares: 0,
                routes: iteration::Routes::default(),
                at_iteration: BTreeMap::new(),
                step_routes: HashMap::new(),
            });
            sim.push(arrival_ns, Event::Arrival(i));
        }
        // Dependencies by id (an experiment refuses unknown ones and cycles;
        // here an unknown id is ignored).
        let index: HashMap<&str, JobId> = jobs.iter().enumerate().map(|(i, j)| (j.id.as_str(), i)).collect();
        for (i, spec) in jobs.iter().enumerate() {
            let deps: Vec<JobId> =
                spec.depends_on.iter().filter_map(|d| index.get(d.as_str()).copied()).filter(|&d| d != i).collect();
            for &d in &deps {
                sim.jobs[d].has_dependents = true;
            }
            sim.jobs[i].deps = deps;
        }
        if let Some((link, start, end)) = sim.cfg.probe {
            let start_ns = (start.max(0.0) * NS) as u64;
            sim.net.probe =
                Some(crate::network::Probe { link, start_ns, end_ns: (end.max(0.0) * NS) as u64, trace: Vec::new() });
            sim.push(start_ns, Event::ProbeStart);
        }
        for (l, gbps) in sim.cfg.background.clone() {
            if l < topo.links.len() && gbps > 0.0 {
                sim.net.add(0, vec![l], f64::INFINITY, gbps, BACKGROUND);
                sim.headroom.add_permanent(l, gbps);
            }
        }
        sim.wake_transport();
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

    /// Free GPUs per host.
    pub fn free_gpus(&self) -> &[u32] {
        &self.free
    }

    fn push(&mut self, t: u64, e: Event) {
        self.seq += 1;
        self.events.push(Reverse((t, self.seq, e)));
    }

    /// Decisions to apply at given times, whatever the policy decides (a
    /// schedule made elsewhere, replayed): (seconds, decision). Each is
    /// applied as a policy's would be, and one the driver cannot apply is
    /// counted in `invalid_decisions`. Call before [`Simulation::run`].
    /// O(log events) each.
    pub fn script(&mut self, decisions: Vec<(f64, Decision)>) {
        for (at_s, d) in decisions {
            let k = self.scripted.len();
            self.scripted.push(d);
            self.push((at_s.max(0.0) * NS).round() as u64, Event::Scripted(k));
        }
    }

    /// Decisions due when a job begins a given iteration (a per-iteration
    /// plan made elsewhere, such as FORESIGHT's deltas, throttles and routes):
    /// (job, iteration from 0, step, decision). A shift delays that
    /// iteration; a throttle holds from it on; a route holds from it on, or,
    /// with a `step` (the iteration's communication segments counted from
    /// 0), only for that step of that iteration. Other kinds are counted in
    /// `invalid_decisions`. A job is not fast-forwarded while any are due.
    /// Call before [`Simulation::run`]. O(log iterations) each.
    pub fn script_iterations(&mut self, decisions: Vec<(JobId, u64, Option<usize>, Decision)>) {
        for (job, iteration, step, d) in decisions {
            match self.jobs.get_mut(job) {
                Some(j) => j.at_iteration.entry(iteration).or_default().push((step, d)),
                None => self.invalid_decisions += 1,
            }
        }
    }

    /// Applies the scripted decisions due as `job` begins its next iteration.
    fn apply_iteration_script(&mut self, job: JobId) {
        let j = &mut self.jobs[job];
        j.step_routes.clear();
        let Some(due) = j.at_iteration.remove(&j.iterations_done) else { return };
        for (step, d) in due {
            match (step, d) {
                (None, Decision::Shift { ms, .. }) if ms.is_finite() && ms >= 0.0 => {
                    j.pending_shift_ms += ms;
                    j.shifts += 1;
                }
                (None, Decision::Throttle { gbps, .. }) => j.throttle_gbps = gbps.filter(|g| *g > 0.0),
                (None, Decision::Route { flow, paths, .. }) => j.routes.set(flow, paths),
                (Some(step), Decision::Route { flow, paths, .. }) => {
                    j.step_routes.insert((step, flow), paths);
                }
                _ => self.invalid_decisions += 1,
            }
        }
    }

    /// Runs to the end (all jobs done or rejected, no events left, or the time limit).
    /// `progress` is called every 4,096 events with (now in s, finished jobs).
    /// A `dyn` callback, so that the event loop is compiled once, here, at
    /// this crate's optimisation level, not once per caller.
    pub fn run(&mut self, policy: &mut dyn Policy, progress: &mut dyn FnMut(f64, usize)) {
        self.observes = policy.observes_iterations();
        let tick_ns = policy.tick_s().filter(|s| s.is_finite() && *s > 0.0).map(|s| (s * NS).round().max(1.0) as u64);
        if let Some(p) = tick_ns {
            self.push(p, Event::Tick);
        }
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
                    self.arrived += 1;
                    self.jobs[j].status = Status::Queued;
                    self.waiting.push(j);
                    self.schedule(policy);
                }
                Event::SkipStretch(j, epoch) if self.jobs[j].epoch == epoch => self.stretch_end(j, policy),
                Event::IterationStart(j, epoch) if self.jobs[j].epoch == epoch => {
                    self.jobs[j].seg_start_ns = self.now;
                    self.run_segment(j, policy)
                }
                Event::ComputeDone(j, epoch) if self.jobs[j].epoch == epoch => {
                    self.end_segment(j);
                    self.run_segment(j, policy);
                }
                Event::FlowDone(..) | Event::FlowsDone(_) | Event::HostTransfersDone(..) => self.ends_at(t, e, policy),
                Event::Scripted(k) => {
                    let d = self.scripted[k].clone();
                    if self.apply_once(vec![d]) {
                        self.schedule(policy);
                    }
                }
                Event::ProbeStart => {
                    let probed = self.net.probe.as_ref().map(|p| p.link);
                    let mut on_link = self.skip_due.jobs_by_id();
                    on_link.retain(|&j| probed.is_some_and(|l| self.jobs[j].links_used.contains(&l)));
                    for j in on_link {
                        self.materialise(j);
                    }
                }
                Event::TransportStep => self.transport_step(),
                Event::Round => {
                    self.round_due = false;
                    self.decide_and_apply(policy);
                }
                Event::Tick => {
                    // Tick while any job can still change state; then stop, or
                    // the event queue would never drain.
                    self.prune_active();
                    let live = self.arrived < self.jobs.len() || !self.waiting.is_empty() || !self.active.is_clear();
                    if let (true, Some(p)) = (live, tick_ns) {
                        self.schedule(policy);
                        self.push(self.now + p, Event::Tick);
                    }
                }
                _ => {}
            }
        }
        for j in self.skip_due.jobs_by_id() {
            self.materialise(j);
        }
        self.net.compact_series(self.now);
        self.net.close(self.now);
        for j in &mut self.jobs {
            if matches!(j.status, Status::Running | Status::Paused) {
                j.count_run_until(self.now);
            }
        }
    }

    /// Something the policy may act on happened: decide now, or, in
    /// periodic rounds, at the next round (one in the queue at a time).
    fn schedule(&mut self, policy: &mut dyn Policy) {
        match self.round_ns {
            None => self.decide_and_apply(policy),
            Some(_) if self.round_due => {}
            Some(p) => {
                self.round_due = true;
                self.push(self.now.div_ceil(p) * p, Event::Round);
            }
        }
    }

    fn decide_and_apply(&mut self, policy: &mut dyn Policy) {
        if let Some(d) = self.decide(policy) {
            self.apply(d, policy);
        }
    }
}
