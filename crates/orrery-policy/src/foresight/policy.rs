//! FORESIGHT as a policy over any placement (`X+foresight` and the
//! ablations). When the set of running jobs changes, it profiles each job
//! alone at several throttle rates and plans timing and routes for a horizon.
//! Then, after each iteration, it tells the job its next delay
//! (`Decision::Shift`), rate (`Decision::Throttle`) and spines
//! (`Decision::Route`). Beyond the horizon the plan repeats.
//!
//! The plan is kept in parts: jobs whose cross-rack flows share a logical
//! link, directly or through each other. Parts share no link, so each is
//! planned alone, and an arrival or a departure re-plans only the parts it
//! touches (issue 69): at 4,096 hosts with every ring across racks, a
//! decision that planned all 2,048 rings (2.4 s) plans the few it touches.
//!
//! Modes (FORESIGHT Fig. 5):
//! - `ts`: timing only; routes stay ECMP.
//! - `ro`: routes whole flows by edge colouring, no repair; uncolourable
//!   ranges keep ECMP.
//! - `sub`: the same with subflows.
//! - `foresight`: subflows and the repair loop. Without a valid schedule
//!   that pays (or one found in `max_rounds`), the unrepaired plan, then the
//!   baseline's timing; both with the subflow colouring folded onto the
//!   spines where it needs too many colours. With one spine: ECMP.
//! - `foresight-paper`: the paper's rule alone: the repair loop's valid
//!   schedule when it pays, otherwise ECMP. `foresight` minus orrery's ladder.
//! - `routes`: FORESIGHT's routes without its timing (orrery's ablation).
//! - `perfect`: no timing; every cross-rack flow is spread evenly over all
//!   spines, a fluid, fully balanced network.
//!
//! Profiles come from the job's shape on its placement, which is what the
//! simulator runs alone. A throttle stretches only the communication, so it
//! is not a uniform stretch.

use super::logical::{LogicalLink, LogicalNetwork};
use super::paths::SpinePaths;
use super::profile::{Profiled, Stretch};
use super::routing::{FlowProfile, Route, Router};
use super::timing::TimedJob;
use crate::estimate::PeriodEstimate;
use crate::memo::{FastMap, PerPlacement};
use crate::{ClusterView, Decision, JobId, Policy};
use orrery_model::{HostId, JobSpec};
use std::collections::HashMap;
use std::sync::Arc;

/// Which parts of FORESIGHT run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Timing schedule only (TS).
    Ts,
    /// Timing and whole-flow routing (RO).
    Ro,
    /// Timing and routing with subflows (SUB).
    Sub,
    /// Timing, subflow routing and the repair loop, then orrery's fallback
    /// ladder (see [`Foresight::foresight_plan`]).
    Foresight,
    /// The paper's rule: the repair loop's valid schedule when it pays,
    /// otherwise ECMP with no delays (§IV), without orrery's ladder.
    Paper,
    /// FORESIGHT's routes (the subflow colouring, folded onto the spines
    /// where it needs too many colours) under the baseline's timing: no
    /// delays or throttles. Orrery's ablation: space without time.
    Routes,
    /// Every cross-rack flow split evenly over all spines.
    Perfect,
}

impl Mode {
    /// Whether the mode times iterations (delays, throttles, timetables).
    /// `routes` and `perfect` are space without time: every iteration starts
    /// when the previous one ends, as without FORESIGHT. Holding their jobs
    /// to a plan of modelled iteration times made a job that ran ahead wait
    /// for it (high-priority slowdown 1.028 under `orrery` on Philly, load
    /// 2, against 1.004 without).
    pub fn times(self) -> bool {
        !matches!(self, Mode::Routes | Mode::Perfect)
    }

    /// The name in results.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Ts => "ts",
            Mode::Ro => "ro",
            Mode::Sub => "sub",
            Mode::Foresight => "foresight",
            Mode::Paper => "foresight-paper",
            Mode::Routes => "routes",
            Mode::Perfect => "perfect",
        }
    }
}

/// What a plan adds to the jobs' time: every delay, plus the extra length of
/// throttled iterations over their unthrottled profile, ms.
fn plan_cost(plan: &[super::timing::Planned], jobs: &[TimedJob]) -> f64 {
    plan.iter()
        .map(|x| x.delay_ms + jobs[x.job].profiles[x.profile].length_ms - jobs[x.job].profiles[0].length_ms)
        .sum()
}

/// Steps of the plan a timetable hands out ahead.
const TIMETABLE_AHEAD: usize = 8;

/// The plan moves for a job that starts late only in its first steps:
/// start-up (launching processes, connecting rings) is what the model
/// leaves out; a job late later met contention, and the plan's slack lets
/// it catch up (moving every job for it would make them all wait).
const START_UP_STEPS: usize = 3;

/// A job that starts a planned iteration later than this fraction of its
/// length moves the plan (2%: 2.5 ms on the testbed's 123 ms VGG16 rings,
/// above the ms a real start wanders).
const LATE_TOLERANCE: f64 = 0.02;

/// A job running a valid (contention-free) plan is over its planned
/// length when its own time exceeds it by this fraction (5%: 2.5σ of the
/// simulator's 2% compute jitter; the testbed's real all-reduce ran 1.2×
/// the model, its iterations ~1.1×).
const OVERRUN: f64 = 0.05;

/// Consecutive overruns of one job after which the plan is taken not to
/// hold on this network, and its timing is dropped for its routes.
const OVERRUN_STREAK: u32 = 5;

/// `ids` ascending, each once. O(n) when they come in order (the simulator's
/// view lists its running jobs by id; a few placed now may follow), O(n log n)
/// at worst.
fn ascending(ids: impl Iterator<Item = JobId>) -> Vec<JobId> {
    let mut v: Vec<JobId> = ids.collect();
    v.sort(); // a run-detecting merge sort: one pass over a sorted list
    v.dedup();
    v
}

/// The ids of ascending `before` not in ascending `after` (gone), and
/// those of `after` not in `before` (new). O(before + after), one merge.
fn differences(before: &[JobId], after: &[JobId]) -> (Vec<JobId>, Vec<JobId>) {
    let (mut gone, mut new) = (Vec::new(), Vec::new());
    let (mut i, mut k) = (0, 0);
    loop {
        match (before.get(i), after.get(k)) {
            (Some(b), Some(a)) if b == a => (i, k) = (i + 1, k + 1),
            (Some(b), Some(a)) if b < a => {
                gone.push(*b);
                i += 1;
            }
            (Some(b), None) => {
                gone.push(*b);
                i += 1;
            }
            (_, Some(a)) => {
                new.push(*a);
                k += 1;
            }
            (None, None) => break,
        }
    }
    (gone, new)
}

/// Whether a decision is part of a plan's timing: a delay, a throttle or a
/// timetable of starts (undoing one, an empty timetable or no throttle, is
/// not). O(1).
fn times_an_iteration(d: &Decision) -> bool {
    match d {
        Decision::Shift { .. } | Decision::Throttle { gbps: Some(_), .. } => true,
        Decision::Timetable { starts_s, .. } => !starts_s.is_empty(),
        _ => false,
    }
}

/// Routes this policy has left pinned in the driver: per job, each flow's
/// paths ([`Foresight::net_routes`] keeps them).
type RoutesInForce = FastMap<JobId, FastMap<usize, Vec<usize>>>;

/// Decisions that undo the routes `in_force` holds for `job`, one per flow,
/// in flow order. A flow a plan routed that the driver no longer holds
/// needs nothing undone: the batch's netting would drop it. O(f log f) for
/// the f flows pinned (going over the plan's steps instead was O(steps ·
/// routes): 11 steps of ~12,000 routes for a 1,024-GPU mesh).
fn unroute(in_force: &RoutesInForce, job: JobId) -> Vec<Decision> {
    let mut flows: Vec<usize> = in_force.get(&job).map(|h| h.keys().copied().collect()).unwrap_or_default();
    flows.sort_unstable();
    flows.into_iter().map(|flow| Decision::Route { job, flow, paths: Vec::new() }).collect()
}

/// A job with its placement: (id, spec, GPUs per host), borrowed from the
/// view or the round's placements (a round lists every running job: a copy
/// of each one's hosts was a quarter of `fifo+foresight`'s run at 16,384
/// hosts).
type PlacedJob<'a> = (JobId, &'a JobSpec, &'a [(HostId, u32)]);

/// What a job does at each planned iteration: delay, throttle, routes.
#[derive(Debug, Clone, PartialEq)]
struct Step {
    delay_ms: f64,
    /// Planned start, ms after the plan was made.
    start_ms: f64,
    /// The iteration's modelled length at its rate, delay excluded, ms.
    length_ms: f64,
    /// Its compute within that, ms.
    compute_ms: f64,
    throttle: Option<f64>,
    /// Its index in its part's plan.
    planned: usize,
    /// Its flows' spines and shares, made paths when the step is handed
    /// out ([`SpinePaths`]); empty where its part's [`Router`] holds them.
    routes: Vec<Route>,
}

/// A part's id.
type PartId = u64;

/// One part of the plan: planned jobs whose cross-rack flows share logical
/// links, directly or through each other (a connected component of jobs
/// and the leaves' up and down links). Parts share no link, so SolveTiming,
/// routing and the fallback ladder decide each alone, and an arrival or a
/// departure re-plans only the parts it touches (issue 69), each with its
/// own clock, anchor and fate.
#[derive(Debug, Clone, PartialEq)]
struct Part {
    /// Its jobs, planned or not (a part left on ECMP is still one: a job
    /// that arrives on its links is planned with them).
    jobs: Vec<JobId>,
    /// The logical links its jobs' flows use.
    links: Vec<LogicalLink>,
    /// When its plan was made, s.
    planned_at_s: f64,
    /// How far its plan has moved later, ms: when a job starts a planned
    /// iteration late (real jobs start and run later than planned), every
    /// job's later starts move with it, so that their relative phases,
    /// which are what the plan is for, hold.
    anchor_ms: f64,
    /// Whether its plan is a valid schedule (rung 1 of the ladder): no
    /// contention is planned, so a job runs its planned length.
    valid_plan: bool,
    /// The closed loop found its plan does not hold (a job ran over its
    /// planned length [`OVERRUN_STREAK`] times running): its delays,
    /// timetables and throttles are dropped, its routes kept, until it is
    /// planned again.
    timing_dropped: bool,
    /// Measured first (`…:measured`): nothing of its plan is applied, no
    /// timing and no routes, until a job of it is measured colliding; and
    /// again for good once its plan is given up (ECMP, as before it).
    held: bool,
}

/// FORESIGHT on top of a placement policy.
pub struct Foresight {
    inner: Box<dyn Policy>,
    /// Which parts run.
    pub mode: Mode,
    /// Longest schedule, ms (FORESIGHT: the LCM of iteration lengths,
    /// capped); the plan covers the run of the longest job up to this, and
    /// repeats without its first iteration's start-up delays after it.
    pub horizon_ms: f64,
    /// Repair rounds before falling back.
    pub max_rounds: u32,
    net: Option<LogicalNetwork>,
    /// Each host pair's path through each spine, for the steps handed out.
    spine_paths: SpinePaths,
    /// Per job: its planned steps and the next one to apply.
    steps: crate::memo::FastMap<JobId, (Vec<Step>, usize)>,
    /// The plan's parts (jobs whose flows share logical links), each
    /// planned, timed and dropped on its own.
    parts: crate::memo::FastMap<PartId, Part>,
    /// The part each planned job belongs to.
    part_of_job: crate::memo::FastMap<JobId, PartId>,
    /// The part whose flows use each logical link.
    part_of_link: crate::memo::FastMap<LogicalLink, PartId>,
    /// The routing of parts routed as their steps come up (`routes`: no
    /// repair loop needs every range at once), by part.
    routers: HashMap<PartId, Router<Arc<FlowProfile>>>,
    /// The next part's id.
    next_part: PartId,
    /// The jobs the plan has taken in (planned in a part, or found to have
    /// no flow across racks) on their present hosts, ascending: the jobs of
    /// the last re-plan. A running job it has not seen (a standby's first
    /// round) is planned as if placed now.
    seen: Vec<JobId>,
    /// Every arrival re-plans every part, as before issue 69 (the tests
    /// hold the partial re-plans to it).
    replan_all: bool,
    /// Closed loop (issue 36): the plan's first pass is handed out ahead as
    /// a `Timetable`, anchored at the jobs' measured start-up (off:
    /// `+foresight:open-loop`, a `Shift` per iteration after each report).
    pub closed_loop: bool,
    /// Times the closed loop moved a part's plan.
    retimings: u64,
    /// Per job, its consecutive iterations over their planned length.
    overruns: crate::memo::FastMap<JobId, u32>,
    /// Plans whose timing was dropped.
    drops: u64,
    /// Per job, its measured compute and communication per iteration over
    /// the planned ones (robust windowed estimates of the ratios), when the
    /// driver reports communication.
    measured: crate::memo::FastMap<JobId, (PeriodEstimate, PeriodEstimate)>,
    /// Per job, the stretch of the model its plan used (absent: the model).
    stretch: crate::memo::FastMap<JobId, Stretch>,
    /// Per job, its unthrottled profile and compute per iteration on its
    /// hosts, with the stretch and spreading they were derived with: a
    /// plan is re-made whenever the running set changes, and rebuilding
    /// every job's profile was 15% of a 4,096-host `orrery` simulation.
    profiles: PerPlacement<Profiled>,
    /// Per job, its measured iteration under the plan in force, waits
    /// included: what a re-made plan must beat.
    cycle: crate::memo::FastMap<JobId, PeriodEstimate>,
    /// Whether a plan that trips is re-made from measured times before its
    /// timing is dropped (`…:replan`; off by default: on the testbed the
    /// re-made plan held and ran 10% slower than dropping its timing,
    /// docs/results.md).
    pub replan: bool,
    /// Plans re-made from measured times after the one in force tripped.
    replans: u64,
    /// Measured first (`…:measured`, issue 68; [`measured::MeasuredFirst`]).
    measured_first: Option<measured::MeasuredFirst>,
    /// Plans tried; no valid schedule; a valid one that does not pay (its
    /// delays cost more than the sharing they avoid); the unrepaired plan
    /// used; routes only, with the baseline's timing.
    outcomes: [u64; 5],
    /// Per job, the paths of each flow its routes pin in the driver, as
    /// the decisions handed out so far left them: a batch's routes that
    /// change nothing are not sent ([`Foresight::net_routes`]).
    routes_in_force: RoutesInForce,
    /// The flows of a step handed out so far, kept for its allocation
    /// ([`Foresight::next`]).
    flows_seen: crate::memo::FastSet<usize>,
    /// Route whole flows, never subflows, whatever the mode (set by
    /// [`Policy::set_flow_sharing`] where the transport shares a link
    /// unequally among flows).
    whole_flows: bool,
    /// Name in results.
    label: String,
}

impl Foresight {
    /// `mode` over `inner`'s placements.
    pub fn new(inner: Box<dyn Policy>, mode: Mode) -> Self {
        // Over pinned placements (the papers' set-ups) the mode is the name.
        let label = if inner.name() == "pinned" {
            mode.name().to_string()
        } else {
            format!("{}+{}", inner.name(), mode.name())
        };
        Foresight {
            inner,
            mode,
            horizon_ms: 20_000.0,
            max_rounds: 8,
            net: None,
            spine_paths: SpinePaths::default(),
            steps: Default::default(),
            parts: Default::default(),
            part_of_job: Default::default(),
            part_of_link: Default::default(),
            routers: HashMap::new(),
            next_part: 0,
            seen: Default::default(),
            replan_all: false,
            closed_loop: true,
            retimings: 0,
            overruns: Default::default(),
            drops: 0,
            measured: Default::default(),
            stretch: Default::default(),
            profiles: PerPlacement::default(),
            cycle: Default::default(),
            replan: false,
            replans: 0,
            measured_first: None,
            outcomes: [0; 5],
            routes_in_force: FastMap::default(),
            flows_seen: Default::default(),
            whole_flows: false,
            label,
        }
    }

    /// The paper's open loop: a `Shift` per iteration timed with the
    /// modelled iteration times (named `…:open-loop`).
    pub fn open_loop(mut self) -> Self {
        self.closed_loop = false;
        self.label.push_str(":open-loop");
        self
    }

    /// Re-makes a plan that trips from the jobs' measured times (named
    /// `…:replan`; see [`Foresight::plan_tripped`]).
    pub fn replanning(mut self) -> Self {
        self.replan = true;
        self.label.push_str(":replan");
        self
    }
}

impl Policy for Foresight {
    fn name(&self) -> String {
        self.label.clone()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        if self.net.as_ref().is_none_or(|n| n.leaf_of_host.len() != view.topology.hosts.len()) {
            self.net = LogicalNetwork::of(view.topology);
            self.profiles = PerPlacement::default(); // derived on the old fabric
            self.spine_paths.clear();
        }
        let mut out = self.inner.schedule(view);
        let placed: Vec<(JobId, Vec<(HostId, u32)>)> = out
            .iter()
            .filter_map(|d| if let Decision::Place { job, hosts } = d { Some((*job, hosts.clone())) } else { None })
            .collect();
        if placed.is_empty() {
            return out;
        }
        // Jobs the inner policy preempts this round leave the plan: they
        // hold no GPUs and no flows once the round applies.
        let preempted: Vec<JobId> =
            out.iter().filter_map(|d| if let Decision::Preempt { job } = d { Some(*job) } else { None }).collect();
        // What this policy's routes left in force is forgotten for the jobs
        // placed now, preempted or gone: their next routes are all sent.
        let running = ascending(view.running.iter().map(|r| r.id));
        self.routes_in_force.retain(|id, _| {
            running.binary_search(id).is_ok() && !preempted.contains(id) && !placed.iter().any(|(p, _)| p == id)
        });
        let mut jobs: Vec<PlacedJob<'_>> =
            view.running.iter().filter(|r| !preempted.contains(&r.id)).map(|r| (r.id, r.spec, r.hosts)).collect();
        let mut new = Vec::with_capacity(placed.len());
        for (id, hosts) in &placed {
            self.measured.remove(id);
            self.stretch.remove(id);
            if let Some(spec) = view.spec_of(*id) {
                jobs.push((*id, spec, hosts.as_slice()));
                new.push(*id);
            }
        }
        if self.mode == Mode::Perfect {
            out.extend(self.plan_perfect(view, &jobs));
        } else {
            out.extend(self.replan(view, &jobs, &new, None));
        }
        self.net_routes(out)
    }

    fn observes_iterations(&self) -> bool {
        true
    }

    /// Only the job itself, unless something could re-plan or drop a part
    /// (which reads every running job): the measured-first gate, or this
    /// iteration tripping the job's plan; and what the inner policy's
    /// controller needs. The
    /// simulator then builds a view of one job for it, not of the whole
    /// cluster (a view per planned iteration was a fifth of
    /// `fifo+foresight`'s run at 16,384 hosts). O(1).
    fn iteration_needs(&self, job: JobId, it: &crate::Iteration) -> crate::IterationNeeds {
        let own = if self.measured_first.is_some() || (self.closed_loop && self.would_trip(job, it)) {
            crate::IterationNeeds::All
        } else {
            crate::IterationNeeds::Jobs(vec![job])
        };
        if self.inner.observes_iterations() { self.inner.iteration_needs(job, it).and(own) } else { own }
    }

    /// A job with a plan gets its next step's delay, throttle and routes
    /// after every iteration. O(1).
    fn watches(&self, job: JobId) -> bool {
        self.steps.get(&job).is_some_and(|(steps, _)| !steps.is_empty()) || self.inner.watches(job)
    }

    /// [`Foresight::after_iteration`], its routes netted against those in
    /// force.
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: crate::Iteration) -> Vec<Decision> {
        let out = self.after_iteration(view, job, it);
        self.net_routes(out)
    }

    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        self.inner.queue_order(view)
    }

    fn tick_s(&self) -> Option<f64> {
        self.inner.tick_s()
    }

    fn set_colocation(&mut self, estimate: &orrery_model::colocation::Colocation) {
        self.inner.set_colocation(estimate);
    }

    /// Under a transport that shares a link unequally among flows, routes
    /// whole flows: each ring step waits for its slowest subflow, and on
    /// the testbed under bbr FORESIGHT's subflows ran 2.2× slower than
    /// ECMP where whole flows ran as fast (docs/results.md).
    fn set_flow_sharing(&mut self, sharing: crate::FlowSharing) {
        self.whole_flows = sharing == crate::FlowSharing::Unequal;
    }

    fn isolated_network(&self) -> bool {
        self.inner.isolated_network()
    }

    fn gpu_allocation(&self) -> Option<orrery_model::rails::GpuAllocation> {
        self.inner.gpu_allocation()
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let mut out = self.inner.counters();
        if !matches!(self.mode, Mode::Foresight | Mode::Paper) {
            return out;
        }
        let [plans, invalid, costlier, unrepaired, routes_only] = self.outcomes.map(|x| x as f64);
        out.extend([
            ("plans", plans),
            ("no_valid_schedule", invalid),
            ("valid_but_not_paying", costlier),
            ("unrepaired_plan_used", unrepaired),
            ("routes_only", routes_only),
        ]);
        if self.closed_loop {
            out.push(("plan_retimings", self.retimings as f64));
            out.push(("plan_timing_dropped", self.drops as f64));
        }
        if self.replan {
            out.push(("plan_replans", self.replans as f64));
        }
        if let Some(m) = &self.measured_first {
            out.extend(m.counters());
        }
        out
    }
}

mod closed_loop;
mod measured;
mod plan;
#[cfg(test)]
mod tests;
