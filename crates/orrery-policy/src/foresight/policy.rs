//! FORESIGHT as a policy over any placement (`X+foresight` and the
//! ablations). When the set of running jobs changes, it profiles each job
//! alone at several throttle rates and plans timing and routes for a horizon.
//! Then, after each iteration, it tells the job its next delay
//! (`Decision::Shift`), rate (`Decision::Throttle`) and spines
//! (`Decision::Route`). Beyond the horizon the plan repeats.
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

use super::logical::LogicalNetwork;
use super::routing::{FlowProfile, Route, RoutingParams, Schedule, TimedFlow, schedule, solve_routing};
use super::timing::{Planned, TimedJob, TimingParams, baseline_timing, sharing_cost, solve_timing};
use crate::estimate::PeriodEstimate;
use crate::memo::PerPlacement;
use crate::{ClusterView, Decision, JobId, Policy};
use orrery_model::placed::{place, transfers};
use orrery_model::{HostId, JobSpec, Segment, Topology};
use std::collections::HashMap;

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

/// Throttle rates profiled, as fractions of the job's unthrottled rate.
pub const RATES: [f64; 4] = [1.0, 0.75, 0.5, 0.25];

/// A job's iteration alone on its placement at `throttle` Gbit/s per flow
/// (None: unthrottled), as cross-rack flows in time. With `spread`, the
/// job's flows are routed as subflows over several spines, so they run at
/// the hosts' NIC rate; without, each takes one path and runs at that
/// path's slowest link (ECMP, or whole-flow routing), as the job's shape
/// assumes. O(segments · flows).
pub fn profile(
    t: &Topology,
    net: &LogicalNetwork,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
    throttle: Option<f64>,
    spread: bool,
) -> Option<FlowProfile> {
    measured_profile(t, net, spec, hosts, throttle, spread, Stretch::MODEL)
}

/// A job's unthrottled profile and compute per iteration on its hosts, as
/// a plan needs them, with what they were derived with.
#[derive(Debug, Clone)]
struct Profiled {
    stretch: Stretch,
    spread: bool,
    unthrottled: Option<FlowProfile>,
    compute_ms: f64,
}

/// How a job's measured iteration departs from its model on its placement:
/// its compute and its communication, each as measured over modelled time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stretch {
    /// Measured compute over the model's.
    pub compute: f64,
    /// Measured communication over the model's: the job's flows are taken
    /// to run at the modelled rate divided by this.
    pub comm: f64,
}

impl Stretch {
    /// The model as it is.
    pub const MODEL: Stretch = Stretch { compute: 1.0, comm: 1.0 };

    /// Whether `self` and `other` differ by more than [`REPLAN_TOLERANCE`]
    /// in either part.
    fn differs(self, other: Stretch) -> bool {
        (self.compute / other.compute - 1.0).abs() > REPLAN_TOLERANCE
            || (self.comm / other.comm - 1.0).abs() > REPLAN_TOLERANCE
    }
}

/// [`profile`] with the job's compute and communication stretched to what
/// was measured (issue 36: timing re-planned from measured times). A
/// stretched communication is a slower line rate (on real TCP a ring's
/// per-step barriers and slow start lower its mean rate), and a throttle
/// caps that rate. O(segments · flows).
pub fn measured_profile(
    t: &Topology,
    net: &LogicalNetwork,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
    throttle: Option<f64>,
    spread: bool,
    stretch: Stretch,
) -> Option<FlowProfile> {
    let placed = place(t, spec, hosts)?;
    let nic = hosts.iter().map(|&(h, _)| t.host_nic_gbps(h)).fold(f64::INFINITY, f64::min);
    let mut now = 0.0;
    let mut flows = Vec::new();
    for seg in &placed.shape.segments {
        match *seg {
            Segment::Compute { ms } => now += ms * stretch.compute,
            Segment::Comm { collective, payload_bytes, gbps, hosts: h, .. } => {
                if h <= 1 {
                    now += seg.duration_ms() * stretch.comm;
                    continue;
                }
                let line = if spread && nic.is_finite() { nic.max(gbps) } else { gbps } / stretch.comm;
                let rate = throttle.map_or(line, |r| r.min(line));
                let mut end = now;
                for (i, (src, dst, bits)) in
                    transfers(&placed.workers, collective, payload_bytes).into_iter().enumerate()
                {
                    if src == dst || bits <= 0.0 {
                        continue;
                    }
                    let ms = bits / (rate * 1e6);
                    end = f64::max(end, now + ms);
                    let (a, b) = (net.leaf_of_host[src], net.leaf_of_host[dst]);
                    if a != b {
                        flows.push(TimedFlow {
                            flow: i,
                            src,
                            dst,
                            src_leaf: a,
                            dst_leaf: b,
                            start_ms: now,
                            end_ms: now + ms,
                            gbps: rate,
                        });
                    }
                }
                now = end;
            }
        }
    }
    Some(FlowProfile { rate_gbps: throttle, length_ms: now, flows })
}

/// What a plan adds to the jobs' time: every delay, plus the extra length of
/// throttled iterations over their unthrottled profile, ms.
fn plan_cost(plan: &[super::timing::Planned], jobs: &[TimedJob]) -> f64 {
    plan.iter()
        .map(|x| x.delay_ms + jobs[x.job].profiles[x.profile].length_ms - jobs[x.job].profiles[0].length_ms)
        .sum()
}

/// Whole repeats in exactly the proportions of `shares` (subflow counts over
/// the flow's subflows, so k / parts each): the smallest denominator up to 64
/// that makes every share whole, else quarters. O(64 · shares).
fn repeats(shares: &[f64]) -> Vec<usize> {
    let whole = |d: usize| shares.iter().all(|x| ((x * d as f64) - (x * d as f64).round()).abs() < 1e-6);
    let d = (1..=64).find(|&d| whole(d)).unwrap_or(4);
    shares.iter().map(|x| ((x * d as f64).round() as usize).max(1)).collect()
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

/// A job's measured compute or communication that differs from the plan's
/// by more than this fraction makes a tripped plan re-planned rather than
/// dropped (2%: the simulator's compute jitter moves a windowed median by
/// well under it, so its plans stay the model's).
const REPLAN_TOLERANCE: f64 = 0.02;

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

/// A job with its placement: (id, spec, GPUs per host).
type PlacedJob<'a> = (JobId, &'a JobSpec, Vec<(HostId, u32)>);

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
    /// (flow, ECMP path indices, repeated in proportion to the share).
    routes: Vec<(usize, Vec<usize>)>,
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
    /// Per job: its planned steps and the next one to apply.
    steps: HashMap<JobId, (Vec<Step>, usize)>,
    /// When the current plan was made, s.
    planned_at_s: f64,
    /// Closed loop (issue 36): the plan's first pass is handed out ahead as
    /// a `Timetable`, anchored at the jobs' measured start-up (off:
    /// `+foresight:open-loop`, a `Shift` per iteration after each report).
    pub closed_loop: bool,
    /// How far the whole plan has moved later, ms: when a job starts a
    /// planned iteration late (real jobs start and run later than planned),
    /// every job's later starts move with it, so that their relative phases,
    /// which are what the plan is for, hold.
    anchor_ms: f64,
    /// Times the closed loop moved the plan.
    retimings: u64,
    /// Whether the plan in force is a valid schedule (rung 1 of the
    /// ladder): no contention is planned, so a job runs its planned length.
    valid_plan: bool,
    /// Per job, its consecutive iterations over their planned length.
    overruns: HashMap<JobId, u32>,
    /// The closed loop found the plan in force does not hold (a job ran
    /// over its planned length [`OVERRUN_STREAK`] times running): its
    /// delays, timetables and throttles are dropped, its routes kept, until
    /// the next plan.
    timing_dropped: bool,
    /// Plans whose timing was dropped.
    drops: u64,
    /// Per job, its measured compute and communication per iteration over
    /// the planned ones (robust windowed estimates of the ratios), when the
    /// driver reports communication.
    measured: HashMap<JobId, (PeriodEstimate, PeriodEstimate)>,
    /// Per job, the stretch of the model its plan used (absent: the model).
    stretch: HashMap<JobId, Stretch>,
    /// Per job, its unthrottled profile and compute per iteration on its
    /// hosts, with the stretch and spreading they were derived with: a
    /// plan is re-made whenever the running set changes, and rebuilding
    /// every job's profile was 15% of a 4,096-host `orrery` simulation.
    profiles: PerPlacement<Profiled>,
    /// Per job, its measured iteration under the plan in force, waits
    /// included: what a re-made plan must beat.
    cycle: HashMap<JobId, PeriodEstimate>,
    /// Whether a plan that trips is re-made from measured times before its
    /// timing is dropped (`…:replan`; off by default: on the testbed the
    /// re-made plan held and ran 10% slower than dropping its timing,
    /// docs/results.md).
    pub replan: bool,
    /// Plans re-made from measured times after the one in force tripped.
    replans: u64,
    /// Plans tried; no valid schedule; a valid one that does not pay (its
    /// delays cost more than the sharing they avoid); the unrepaired plan
    /// used; routes only, with the baseline's timing.
    outcomes: [u64; 5],
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
            steps: HashMap::new(),
            planned_at_s: 0.0,
            closed_loop: true,
            anchor_ms: 0.0,
            retimings: 0,
            valid_plan: false,
            overruns: HashMap::new(),
            timing_dropped: false,
            drops: 0,
            measured: HashMap::new(),
            stretch: HashMap::new(),
            profiles: PerPlacement::default(),
            cycle: HashMap::new(),
            replan: false,
            replans: 0,
            outcomes: [0; 5],
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

    /// Plans the running jobs (plus those being placed now) and returns the
    /// decisions for their first planned iteration.
    fn plan(&mut self, view: &ClusterView<'_>, jobs: &[PlacedJob<'_>]) -> Vec<Decision> {
        // What the previous plan set stays set in the driver until undone;
        // a job that has ended, or is preempted this round, has nothing
        // left to undo.
        let planned: std::collections::HashSet<JobId> = jobs.iter().map(|j| j.0).collect();
        let running: std::collections::HashSet<JobId> =
            view.running.iter().map(|r| r.id).filter(|id| planned.contains(id)).collect();
        let mut undo: Vec<Decision> = Vec::new();
        for (&id, (steps, _)) in self.steps.iter().filter(|(id, _)| running.contains(id)) {
            undo.push(Decision::Throttle { job: id, gbps: None });
            if self.closed_loop && self.mode.times() {
                // The old plan's starts no longer hold.
                undo.push(Decision::Timetable { job: id, from_iteration: 0, starts_s: Vec::new() });
            }
            let mut flows: Vec<usize> = steps.iter().flat_map(|s| s.routes.iter().map(|r| r.0)).collect();
            flows.sort_unstable();
            flows.dedup();
            undo.extend(flows.into_iter().map(|flow| Decision::Route { job: id, flow, paths: Vec::new() }));
        }
        undo.sort_by_key(|d| match d {
            Decision::Throttle { job, .. } | Decision::Route { job, .. } | Decision::Timetable { job, .. } => *job,
            _ => 0,
        });
        self.steps.clear();
        // Iterations are measured against the plan they ran (a new plan
        // starts afresh); the stretches of jobs that left it go, and a job
        // placed anew starts from its model (`schedule`).
        self.measured.clear();
        self.cycle.clear();
        self.stretch.retain(|id, _| planned.contains(id));
        (self.valid_plan, self.timing_dropped) = (false, false);
        self.overruns.clear();
        let t = view.topology;
        let Some(net) = self.net.clone() else { return Vec::new() };
        if self.mode == Mode::Perfect {
            // Every cross-rack flow over every spine, equally.
            let mut out = Vec::new();
            for (id, spec, hosts) in jobs {
                let Some(p) = profile(t, &net, spec, hosts, None, true) else { continue };
                for f in &p.flows {
                    let paths: Vec<usize> =
                        (0..net.spines).filter_map(|s| net.path_through(t, f.src, f.dst, s)).collect();
                    out.push(Decision::Route { job: *id, flow: f.flow, paths });
                }
            }
            return out;
        }
        // With subflows a flow may take several spines, so it is profiled
        // at its NIC rate; TS and RO keep one path per flow.
        let spread = matches!(self.mode, Mode::Sub | Mode::Foresight | Mode::Paper | Mode::Routes);
        let stretches = self.stretch.clone();
        let stretch_of = |id: &JobId| stretches.get(id).copied().unwrap_or(Stretch::MODEL);
        // O(hosts + flows) per job whose hosts and stretch are unchanged,
        // O(shape + transfers) for the others.
        let kept = &mut self.profiles;
        kept.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
        let (unthrottled, compute_ms): (Vec<Option<FlowProfile>>, Vec<f64>) = jobs
            .iter()
            .map(|(id, spec, hosts)| {
                let stretch = stretch_of(id);
                let p = kept.get_if(
                    *id,
                    hosts,
                    |p| p.stretch == stretch && p.spread == spread,
                    || Profiled {
                        stretch,
                        spread,
                        unthrottled: measured_profile(t, &net, spec, hosts, None, spread, stretch),
                        compute_ms: place(t, spec, hosts).map_or(0.0, |p| p.shape.compute_ms()) * stretch.compute,
                    },
                );
                (p.unthrottled.clone(), p.compute_ms)
            })
            .unzip();
        // The horizon: the whole run of the longest job when it fits the cap
        // (so the plan need not repeat), in at most 400,000 bins.
        let run_ms = jobs
            .iter()
            .zip(&unthrottled)
            .filter_map(|((_, spec, _), p)| {
                let len = p.as_ref()?.length_ms;
                Some(match spec.work {
                    orrery_model::Work::Iterations(n) => n as f64 * len,
                    orrery_model::Work::Seconds(s) => s * 1e3,
                })
            })
            .fold(0.0, f64::max);
        // Only jobs with a flow across racks are planned: the others put no
        // demand on a logical link, so SolveTiming never delays them, the
        // shortest throttled profile is the unthrottled one, and routing has
        // nothing of theirs to colour. Their plan would be no-ops after
        // every iteration, and watching them keeps the simulator from
        // fast-forwarding them (issue 43: at 4,096 hosts most jobs fit in a
        // rack). O(jobs) to filter.
        let (jobs, (unthrottled, compute_ms)): (Vec<&PlacedJob<'_>>, (Vec<FlowProfile>, Vec<f64>)) = jobs
            .iter()
            .zip(unthrottled.into_iter().zip(compute_ms))
            .filter_map(|(j, (p, c))| p.filter(|p| !p.flows.is_empty()).map(|p| (j, (p, c))))
            .unzip();
        // Throttled profiles only where SolveTiming may choose them: the
        // routes-only ablation runs the baseline's timing (unthrottled).
        let throttles = !matches!(self.mode, Mode::Routes);
        let profiles: Vec<Vec<FlowProfile>> = jobs
            .iter()
            .zip(unthrottled)
            .map(|((id, spec, hosts), base)| {
                let nominal = base.flows[0].gbps;
                let mut ps = vec![base];
                if throttles {
                    ps.extend(RATES[1..].iter().filter_map(|x| {
                        measured_profile(t, &net, spec, hosts, Some(nominal * x), spread, stretch_of(id))
                    }));
                }
                ps
            })
            .collect();
        let horizon_ms = run_ms.clamp(1.0, self.horizon_ms);
        let timing = TimingParams {
            horizon_ms,
            bin_ms: (horizon_ms / 400_000.0).max(1.0),
            // TS, RO and SUB have no repair loop: an iteration waits only
            // when that is cheaper than overlapping. FORESIGHT keeps the
            // paper's rule (wait until it fits) for its repairable plan.
            waits_only_if_cheaper: !matches!(self.mode, Mode::Foresight | Mode::Paper),
            ..TimingParams::default()
        };
        let routing = RoutingParams {
            spines: net.spines,
            spine_link_gbps: net.spine_link_gbps,
            colors_per_spine: if self.mode == Mode::Ro { 1 } else { 4 },
            balance_bad_ranges: false,
        };
        let timed: Vec<TimedJob> =
            profiles.iter().map(|ps| TimedJob { profiles: ps.iter().map(FlowProfile::timing).collect() }).collect();
        let balanced = RoutingParams { balance_bad_ranges: true, ..routing };
        let (plan, routes) = match self.mode {
            Mode::Ts => (solve_timing(&timed, &net.capacity, &[], &timing), Vec::new()),
            Mode::Ro | Mode::Sub => {
                let plan = solve_timing(&timed, &net.capacity, &[], &timing);
                let routes = solve_routing(&profiles, &plan, &routing).0;
                (plan, routes)
            }
            Mode::Routes if net.spines > 1 => {
                let plan = baseline_timing(&timed, &timing);
                let routes = solve_routing(&profiles, &plan, &balanced).0;
                (plan, routes)
            }
            Mode::Routes => return undo, // one spine: nothing to route
            Mode::Foresight | Mode::Paper => {
                let ladder = self.mode == Mode::Foresight;
                match self.foresight_plan(&net, &profiles, &timed, &timing, &routing, ladder) {
                    Some(found) => found,
                    None => return undo, // ECMP
                }
            }
            Mode::Perfect => unreachable!("handled above"),
        };
        // Steps per job, in plan order. O(plan + routes).
        let mut routes_of: Vec<Vec<&Route>> = vec![Vec::new(); plan.len()];
        for r in &routes {
            routes_of[r.planned].push(r);
        }
        for (k, x) in plan.iter().enumerate() {
            let id = jobs[x.job].0;
            let mut step_routes = Vec::new();
            for r in &routes_of[k] {
                let (src, dst) = r.ends;
                // Path indices repeated in proportion to the shares (the
                // driver splits a flow equally over the list).
                let shares: Vec<f64> = r.spines.iter().map(|x| x.1).collect();
                let mut paths = Vec::new();
                for (&(s, _), n) in r.spines.iter().zip(repeats(&shares)) {
                    if let Some(i) = net.path_through(t, src, dst, s) {
                        paths.extend(std::iter::repeat_n(i, n));
                    }
                }
                step_routes.push((r.flow, paths));
            }
            let step = Step {
                delay_ms: x.delay_ms,
                start_ms: x.start_ms,
                length_ms: profiles[x.job][x.profile].length_ms,
                compute_ms: compute_ms[x.job],
                throttle: profiles[x.job][x.profile].rate_gbps,
                routes: step_routes,
            };
            self.steps.entry(id).or_insert_with(|| (Vec::new(), 0)).0.push(step);
        }
        let ids: Vec<JobId> = jobs.iter().map(|j| j.0).collect();
        self.planned_at_s = view.now_s;
        self.anchor_ms = 0.0;
        let first: Vec<Decision> = ids.into_iter().flat_map(|id| self.next(id, None, None)).collect();
        undo.into_iter().chain(first).collect()
    }

    /// FORESIGHT's plan and routes, down its fallback ladder; None: ECMP.
    /// Each rung must cost less than the baseline's timing: its delays and
    /// throttling plus the sharing it leaves on the logical links, against
    /// the sharing of the plan with no delays ([`sharing_cost`], with
    /// balanced routes a leaf's spines act as one logical link).
    /// 1. The repair loop's valid schedule (§IV: FORESIGHT never makes jobs
    ///    slower).
    /// 2. Else the unrepaired plan (timing that waits only when cheaper).
    /// 3. Else the baseline's timing.
    ///
    /// Rungs 2 and 3 route by the subflow colouring, folded onto the spines
    /// where it needs more colours than there are. With one spine, rung 3 is
    /// ECMP. Without `ladder` (the paper's rule) only rung 1 is tried.
    fn foresight_plan(
        &mut self,
        net: &LogicalNetwork,
        profiles: &[Vec<FlowProfile>],
        timed: &[TimedJob],
        timing: &TimingParams,
        routing: &RoutingParams,
        ladder: bool,
    ) -> Option<(Vec<Planned>, Vec<Route>)> {
        self.outcomes[0] += 1;
        let sharing = |plan: &[Planned]| sharing_cost(timed, &net.capacity, plan, timing.bin_ms);
        let no_delays = baseline_timing(timed, timing);
        let baseline_ms = sharing(&no_delays);
        let pays = |plan: &[Planned]| plan_cost(plan, timed) + sharing(plan) < baseline_ms;
        let found = schedule(profiles, &net.capacity, timing, routing, self.max_rounds);
        match found {
            Some(Schedule { plan, routes, .. }) if pays(&plan) => {
                self.valid_plan = true;
                return Some((plan, routes));
            }
            _ => self.outcomes[if found.is_some() { 2 } else { 1 }] += 1,
        }
        if !ladder {
            return None; // §IV: no valid schedule that pays, so ECMP
        }
        // The unrepaired plan delays but does not throttle: a throttle holds
        // a flow below the capacity others leave free when they are not where
        // the plan expects them, and only a valid (contention-free) schedule
        // makes them so.
        let lenient = TimingParams { waits_only_if_cheaper: true, ..*timing };
        let unthrottled: Vec<TimedJob> =
            timed.iter().map(|j| TimedJob { profiles: j.profiles.iter().take(1).cloned().collect() }).collect();
        let plan = solve_timing(&unthrottled, &net.capacity, &[], &lenient);
        let plan = if pays(&plan) {
            self.outcomes[3] += 1;
            plan
        } else if net.spines <= 1 {
            return None; // nothing to route: ECMP
        } else {
            self.outcomes[4] += 1;
            no_delays
        };
        let routes = solve_routing(profiles, &plan, &RoutingParams { balance_bad_ranges: true, ..*routing }).0;
        Some((plan, routes))
    }

    /// Decisions for a job's next planned iteration (cycling the plan).
    /// `now_s` is when that iteration is due (None: at the plan, when a
    /// running job's next iteration is still to come). In the plan's first
    /// pass an iteration starts at its planned time: a job ahead of the plan
    /// waits for it, one behind starts at once, so errors of the model do
    /// not pile up as delays. Past the horizon the delays are relative.
    /// `done`: iterations the job has done, so its next iteration begins
    /// with that many done (the timetable's first entry).
    fn next(&mut self, job: JobId, now_s: Option<f64>, done: Option<u64>) -> Vec<Decision> {
        let planned_at_s = self.planned_at_s;
        let (closed_loop, anchor_ms) = (self.closed_loop, self.anchor_ms);
        let times = self.mode.times() && !self.timing_dropped;
        let Some((steps, k)) = self.steps.get_mut(&job) else { return Vec::new() };
        if steps.is_empty() {
            return Vec::new();
        }
        // Past the end the plan repeats, skipping the first iteration (its
        // delay staggers the start-up, which happens once).
        let i = if *k < steps.len() || steps.len() == 1 { *k % steps.len() } else { 1 + (*k - 1) % (steps.len() - 1) };
        let step = &steps[i];
        let delay_ms = match now_s {
            _ if !times => 0.0,
            Some(now) if *k > 0 && *k < steps.len() => (planned_at_s * 1e3 + step.start_ms - now * 1e3).max(0.0),
            _ => step.delay_ms,
        };
        let mut out = vec![Decision::Throttle { job, gbps: step.throttle.filter(|_| times) }];
        for (flow, paths) in &step.routes {
            out.push(Decision::Route { job, flow: *flow, paths: paths.clone() });
        }
        // Closed loop, in the first pass: this step and the next ones as a
        // timetable (the driver holds each iteration to its start even when
        // this decision reaches it late).
        let timed = closed_loop && times && now_s.is_some() && done.is_some() && *k > 0 && *k < steps.len();
        if timed {
            let starts_s: Vec<f64> = steps[*k..steps.len().min(*k + TIMETABLE_AHEAD)]
                .iter()
                .map(|st| planned_at_s + (anchor_ms + st.start_ms) / 1e3)
                .collect();
            let from_iteration = done.unwrap_or(0);
            out.push(Decision::Timetable { job, from_iteration, starts_s });
        } else if closed_loop && times && *k == steps.len() && steps.len() > 1 {
            // The first pass is over: relative delays from here on.
            out.push(Decision::Timetable { job, from_iteration: 0, starts_s: Vec::new() });
        }
        *k += 1;
        if !timed && delay_ms > 0.0 {
            out.push(Decision::Shift { job, ms: delay_ms });
        }
        out
    }

    /// Closed loop, after the iteration that ran a step of the first pass:
    /// when one of its first [`START_UP_STEPS`] started more than
    /// [`LATE_TOLERANCE`] of its length after its planned time, the whole
    /// plan moves later by as much (`anchor_ms`). Under a valid plan, a job
    /// whose own time (waits left out) runs [`OVERRUN`] over the step's
    /// length [`OVERRUN_STREAK`] times running shows that the network does
    /// not run the plan (on the testbed, real TCP's all-reduce took 1.2× the
    /// model and every planned start was missed): returns true, and the
    /// caller re-plans from measured times or drops the plan's timing. The
    /// job's compute and communication are measured on the way. O(1).
    fn measure(&mut self, job: JobId, started_s: Option<f64>, it: crate::Iteration) -> bool {
        let Some((steps, k)) = self.steps.get(&job) else { return false };
        // The iteration that ended ran step k − 1 (within the first pass).
        let Some(step) = k.checked_sub(1).and_then(|i| steps.get(i)) else { return false };
        if *k > steps.len() || step.length_ms <= 0.0 {
            return false;
        }
        let planned_comm_ms = step.length_ms - step.compute_ms;
        if let Some(comm) = it.comm_ms.filter(|c| self.replan && c.is_finite() && *c >= 0.0)
            && step.compute_ms > 0.0
            && planned_comm_ms > 0.0
        {
            let (compute, network) = self.measured.entry(job).or_default();
            compute.observe((it.own_ms() - comm) / step.compute_ms, false);
            network.observe(comm / planned_comm_ms, false);
        }
        if self.replan {
            self.cycle.entry(job).or_default().observe(it.ms, false);
        }
        let mut tripped = false;
        if self.valid_plan && !self.timing_dropped {
            let streak = self.overruns.entry(job).or_insert(0);
            *streak = if it.own_ms() > (1.0 + OVERRUN) * step.length_ms { *streak + 1 } else { 0 };
            tripped = *streak >= OVERRUN_STREAK;
        }
        if let Some(start_s) = started_s.filter(|_| *k <= START_UP_STEPS) {
            let planned_s = self.planned_at_s + (self.anchor_ms + step.start_ms) / 1e3;
            let late_ms = (start_s - planned_s) * 1e3;
            if late_ms > LATE_TOLERANCE * step.length_ms {
                self.anchor_ms += late_ms;
                self.retimings += 1;
            }
        }
        tripped
    }

    /// Each running job's measured stretch of its model: the plan's stretch
    /// times the measured over planned compute and communication, where
    /// they have been measured; within [`REPLAN_TOLERANCE`] of the model it
    /// is the model. O(running).
    fn measured_stretches(&self, view: &ClusterView<'_>) -> HashMap<JobId, Stretch> {
        let mut out = HashMap::new();
        for r in &view.running {
            let Some((compute, network)) = self.measured.get(&r.id) else { continue };
            let (Some(compute), Some(comm)) = (compute.period_ms(), network.period_ms()) else { continue };
            let planned = self.stretch.get(&r.id).copied().unwrap_or(Stretch::MODEL);
            let s = Stretch { compute: planned.compute * compute, comm: planned.comm * comm };
            if s.differs(Stretch::MODEL) {
                out.insert(r.id, s);
            }
        }
        out
    }

    /// The plan in force tripped (`measure`). With `replan` (`…:replan`),
    /// when some job's measured stretch is not the one the plan used, the
    /// running jobs are planned again with their measured times (issue 36),
    /// and the re-made plan is kept only if it is faster than what the jobs
    /// measured under the plan that tripped (the mean of its planned
    /// iterations, delays included, summed over the jobs, against their
    /// measured iterations, waits included). Otherwise, or when the
    /// measurements are what the plan used, the plan's timing is dropped for
    /// its routes. Why re-planning is not the default: on the testbed the
    /// plan re-made for TCP's slower all-reduce held (its jobs ran their
    /// planned lengths) and still ran 10% slower than dropping the timing
    /// (244 against 221 ms), because real TCP shares a link better than the
    /// fluid model in which a plan's cost is counted.
    fn plan_tripped(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let measured = self.measured_stretches(view);
        let planned = |id: &JobId| self.stretch.get(id).copied().unwrap_or(Stretch::MODEL);
        let changed = view.running.iter().any(|r| {
            self.steps.contains_key(&r.id)
                && measured.get(&r.id).copied().unwrap_or(Stretch::MODEL).differs(planned(&r.id))
        });
        if !(self.replan && changed) {
            return self.drop_timing(view);
        }
        self.replans += 1;
        self.stretch = measured;
        let before: HashMap<JobId, f64> =
            self.cycle.iter().filter_map(|(&id, e)| e.period_ms().map(|ms| (id, ms))).collect();
        let jobs: Vec<PlacedJob<'_>> = view.running.iter().map(|r| (r.id, r.spec, r.hosts.to_vec())).collect();
        let mut out = self.plan(view, &jobs);
        if !self.mode.times() || !self.valid_plan {
            return out; // the re-made plan times nothing that could lose
        }
        let (mut planned_ms, mut measured_ms) = (0.0, 0.0);
        for (id, (steps, _)) in &self.steps {
            if let Some(&ms) = before.get(id).filter(|_| !steps.is_empty()) {
                planned_ms += steps.iter().map(|st| st.delay_ms + st.length_ms).sum::<f64>() / steps.len() as f64;
                measured_ms += ms;
            }
        }
        if planned_ms < measured_ms {
            return out;
        }
        // Its routes stay; its timing goes before any of it is applied.
        out.retain(|d| !times_an_iteration(d));
        out.extend(self.drop_timing(view));
        out
    }

    /// Drops the timing of the plan in force, keeping its routes: every
    /// planned job's timetable and throttle go at once (those still
    /// running: an ended job has nothing to undo). O(jobs).
    fn drop_timing(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        self.timing_dropped = true;
        self.drops += 1;
        let mut jobs: Vec<JobId> =
            self.steps.keys().copied().filter(|j| view.running.iter().any(|r| r.id == *j)).collect();
        jobs.sort_unstable();
        jobs.into_iter()
            .flat_map(|j| {
                [
                    Decision::Timetable { job: j, from_iteration: 0, starts_s: Vec::new() },
                    Decision::Throttle { job: j, gbps: None },
                ]
            })
            .collect()
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
        let mut jobs: Vec<PlacedJob<'_>> = view
            .running
            .iter()
            .filter(|r| !preempted.contains(&r.id))
            .map(|r| (r.id, r.spec, r.hosts.to_vec()))
            .collect();
        for (id, hosts) in placed {
            self.measured.remove(&id);
            self.stretch.remove(&id);
            if let Some(spec) = view.spec_of(id) {
                jobs.push((id, spec, hosts));
            }
        }
        out.extend(self.plan(view, &jobs));
        out
    }

    fn observes_iterations(&self) -> bool {
        true
    }

    /// A job with a plan gets its next step's delay, throttle and routes
    /// after every iteration. O(1).
    fn watches(&self, job: JobId) -> bool {
        self.steps.get(&job).is_some_and(|(steps, _)| !steps.is_empty()) || self.inner.watches(job)
    }

    /// The inner policy's controller first (a CASSINI re-alignment), then
    /// the job's next planned step.
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: crate::Iteration) -> Vec<Decision> {
        let mut out =
            if self.inner.observes_iterations() { self.inner.on_iteration(view, job, it) } else { Vec::new() };
        if self.closed_loop {
            let started_s = view.running.iter().find(|r| r.id == job).map(|r| r.iteration_start_s);
            if self.measure(job, started_s, it) {
                let replans = self.replans;
                out.extend(self.plan_tripped(view));
                if self.replans > replans {
                    // The new plan's first decisions for every job, this
                    // one's included, are in `out`.
                    return out;
                }
            }
        }
        // Its next iteration begins with this many iterations done.
        let done = view.running.iter().find(|r| r.id == job).map(|r| r.iterations_done);
        out.extend(self.next(job, Some(view.now_s), done));
        out
    }

    fn tick_s(&self) -> Option<f64> {
        self.inner.tick_s()
    }

    fn set_colocation(&mut self, estimate: &orrery_model::colocation::Colocation) {
        self.inner.set_colocation(estimate);
    }

    fn isolated_network(&self) -> bool {
        self.inner.isolated_network()
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
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::Work;
    use orrery_model::setups::LeafSpine;

    /// Two racks of two hosts (100 Gbit/s NICs) under `spines` spines whose
    /// links run at half a NIC (50 Gbit/s).
    fn two_racks_of_two(spines: u32, gpus_per_host: u32, gpu: &str) -> Topology {
        LeafSpine {
            racks: 2,
            hosts_per_rack: 2,
            spines,
            gpus_per_host,
            gpu_type: gpu.into(),
            host_gbps: 100.0,
            uplink_gbps: 50.0,
        }
        .build("t")
        .expect("valid")
    }

    #[test]
    fn the_unrepaired_plan_delays_but_never_throttles() {
        // Fig. 6's set-up (2:1, batch 8, fragmentation 0.8), on two
        // placements where throttles in the unrepaired plan cost 29% and 41%
        // against routes alone: SUB's lenient timing throttles there;
        // FORESIGHT's unrepaired plan, the same timing without throttles,
        // must not.
        use crate::baseline::Pinned;
        use orrery_trace::generate::{Mix, fragmented};
        let topology = orrery_model::setups::foresight(4);
        let mix = Mix {
            models: ["vgg16", "vgg19", "resnet50", "bert", "gpt2", "wideresnet101"].map(String::from).to_vec(),
            workers: (4..=16).map(|n| (n, 1.0)).collect(),
            iterations: (200, 200),
            batch: Some(8),
            ..Mix::default()
        };
        let rack_of: Vec<usize> = (0..48).map(|h| h / 8).collect();
        let (mut unrepaired, mut sub_throttles) = (0, 0);
        for seed in [10, 19] {
            let (jobs, pins) = fragmented(&rack_of, 100, 0.8, &mix, seed).expect("a placement");
            let free = vec![1u32; 48];
            for mode in [Mode::Sub, Mode::Foresight] {
                let mut f = Foresight::new(Box::new(Pinned { pins: pins.clone(), label: None }), mode);
                let queue = jobs.iter().enumerate().map(|(i, j)| crate::QueuedJob::new(i, j, 0.0)).collect();
                let view =
                    ClusterView { now_s: 0.0, topology: &topology, free_gpus: &free, queue, running: Vec::new() };
                f.schedule(&view);
                let throttles = f.steps.values().flat_map(|(s, _)| s).filter(|s| s.throttle.is_some()).count();
                match mode {
                    Mode::Sub => sub_throttles += throttles,
                    _ if f.outcomes[3] == 1 => {
                        unrepaired += 1;
                        assert_eq!(throttles, 0, "placement {seed}");
                    }
                    _ => {}
                }
            }
        }
        assert!(sub_throttles > 0 && unrepaired > 0, "{sub_throttles} throttles, {unrepaired} unrepaired plans");
    }

    #[test]
    fn all_to_all_flows_are_routed_between_their_own_hosts() {
        // DLRM's embedding all-to-all over 4 hosts in 2 racks has 4·3 = 12
        // flows a collective: flow 5 is host 1 → host 3, not ring worker 5
        // (there are 4). Issue 41: the policy took a flow's ends from the
        // ring (`workers[flow]`) and panicked past the 4th. Every route
        // decision must name paths that exist between some pair of the job's
        // hosts in different racks, over each mode that routes.
        use crate::baseline::Pinned;
        let t = two_racks_of_two(2, 1, "v100");
        let spec = JobSpec::new("dlrm", "dlrm", 1, 4, Work::Iterations(50), 0.0);
        let hosts = vec![(0usize, 1u32), (1, 1), (2, 1), (3, 1)];
        let net = LogicalNetwork::of(&t).expect("leaf-spine");
        let p = profile(&t, &net, &spec, &hosts, None, true).expect("profile");
        // 8 of the 12 all-to-all pairs cross racks, twice an iteration; and
        // the 2 cross-rack ring edges of the dense all-reduce.
        assert_eq!(p.flows.iter().filter(|f| f.flow >= 4).count(), 2 * 6, "{:?}", p.flows);
        assert!(p.flows.iter().all(|f| net.leaf_of_host[f.src] != net.leaf_of_host[f.dst]));
        let pins: std::collections::BTreeMap<String, Vec<(HostId, u32)>> =
            [("dlrm".to_string(), hosts.clone())].into_iter().collect();
        for mode in [Mode::Ro, Mode::Sub, Mode::Foresight, Mode::Routes, Mode::Perfect] {
            let mut f = Foresight::new(Box::new(Pinned { pins: pins.clone(), label: None }), mode);
            let free = vec![1u32; 4];
            let queue = vec![crate::QueuedJob::new(0, &spec, 0.0)];
            let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue, running: Vec::new() };
            let out = f.schedule(&view);
            // The first iteration's decisions, then every planned step's.
            let mut routes: Vec<(usize, Vec<usize>)> = out
                .iter()
                .filter_map(|d| match d {
                    Decision::Route { flow, paths, .. } if !paths.is_empty() => Some((*flow, paths.clone())),
                    _ => None,
                })
                .collect();
            routes.extend(f.steps.values().flat_map(|(s, _)| s).flat_map(|s| s.routes.iter().cloned()));
            // Whole flows (RO) need 4 colours where 2 spines give 2: ECMP.
            if mode != Mode::Ro {
                assert!(routes.iter().any(|r| r.0 >= 4), "{mode:?}: no all-to-all flow routed: {out:?}");
            }
            for (flow, paths) in routes {
                // Cross-rack pairs have one path per spine.
                assert!(!paths.is_empty() && paths.iter().all(|&k| k < 2), "{mode:?}: flow {flow} over {paths:?}");
            }
        }
    }

    /// Two racks of two 2-GPU hosts under two spines (uplinks at half a
    /// NIC) and two VGG19 rings pinned on them: job 0, "inside", on hosts 0
    /// and 1 (rack 0); job 1, "across", on hosts 0 and 2 (both racks).
    fn two_rings(mode: Mode) -> (Foresight, Topology, [JobSpec; 2]) {
        use crate::baseline::Pinned;
        let t = two_racks_of_two(2, 2, "a100");
        let inside = JobSpec::new("inside", "vgg19", 32, 2, Work::Iterations(200), 0.0);
        let across = JobSpec::new("across", "vgg19", 32, 2, Work::Iterations(200), 0.0);
        let pins: std::collections::BTreeMap<String, Vec<(HostId, u32)>> = [
            ("inside".to_string(), vec![(0usize, 1u32), (1, 1)]),
            ("across".to_string(), vec![(0usize, 1u32), (2, 1)]),
        ]
        .into_iter()
        .collect();
        (Foresight::new(Box::new(Pinned { pins, label: None }), mode), t, [inside, across])
    }

    #[test]
    fn a_job_inside_one_rack_is_not_planned_or_watched() {
        // Its flows never reach a logical link: SolveTiming cannot delay it
        // and routing has nothing to colour. Planning it only held it to
        // modelled starts and kept the simulator from fast-forwarding it.
        for mode in [Mode::Ts, Mode::Foresight, Mode::Routes] {
            let (mut f, t, specs) = two_rings(mode);
            let free = vec![2u32; 4];
            let queue = specs.iter().enumerate().map(|(i, s)| crate::QueuedJob::new(i, s, 0.0)).collect();
            let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue, running: Vec::new() };
            let out = f.schedule(&view);
            assert_eq!(out.iter().filter(|d| matches!(d, Decision::Place { .. })).count(), 2, "{mode:?}: {out:?}");
            assert!(!f.watches(0), "{mode:?}: the ring inside rack 0 is watched");
            assert!(f.watches(1), "{mode:?}: the ring across the racks is not watched");
            assert!(
                out.iter().all(|d| !matches!(d, Decision::Throttle { job: 0, .. } | Decision::Shift { job: 0, .. })),
                "{mode:?}: {out:?}"
            );
        }
    }

    #[test]
    fn a_job_preempted_in_the_round_leaves_the_plan_with_nothing_to_undo() {
        // A long 8-GPU ring holds all four hosts; a short 2-GPU job arrives
        // and shortest-remaining-time-first preempts the ring. Routes,
        // throttles or timetables for the ring would reach a job that holds
        // no GPUs once the round applies (the simulator counted hundreds
        // of such invalid decisions a run under `orrery`).
        for mode in [Mode::Foresight, Mode::Routes] {
            let t = two_racks_of_two(2, 2, "a100");
            let ring = JobSpec::new("ring", "vgg19", 32, 8, Work::Iterations(100_000), 0.0);
            let short = JobSpec::new("short", "vgg19", 32, 2, Work::Iterations(10), 0.0);
            let inner = crate::compose::by_name("srtf", 1).expect("srtf");
            let mut f = Foresight::new(inner, mode);
            let all = vec![2u32; 4];
            let queue = vec![crate::QueuedJob::new(0, &ring, 0.0)];
            let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &all, queue, running: Vec::new() };
            let first = f.schedule(&view);
            assert!(first.iter().any(|d| matches!(d, Decision::Route { job: 0, .. })), "{mode:?}: {first:?}");
            let hosts: Vec<(HostId, u32)> = (0..4).map(|h| (h, 2)).collect();
            let view = ClusterView {
                now_s: 1.0,
                topology: &t,
                free_gpus: &[0, 0, 0, 0],
                queue: vec![crate::QueuedJob::new(1, &short, 1.0)],
                running: vec![crate::RunningJob::new(0, &ring, &hosts)],
            };
            let out = f.schedule(&view);
            assert!(out.contains(&Decision::Preempt { job: 0 }), "{mode:?}: {out:?}");
            assert!(out.iter().any(|d| matches!(d, Decision::Place { job: 1, .. })), "{mode:?}: {out:?}");
            let about_ring = |d: &&Decision| match d {
                Decision::Route { job, .. } | Decision::Throttle { job, .. } | Decision::Timetable { job, .. } => {
                    *job == 0
                }
                _ => false,
            };
            assert_eq!(out.iter().filter(about_ring).count(), 0, "{mode:?}: {out:?}");
        }
    }

    #[test]
    fn routes_alone_never_hold_an_iteration() {
        // `routes` is space without time: after any iteration, early or late
        // against the plan, the job gets routes and no Shift or Timetable,
        // closed loop or open.
        for open in [false, true] {
            let (f, t, specs) = two_rings(Mode::Routes);
            let mut f = if open { f.open_loop() } else { f };
            let free = vec![2u32; 4];
            let queue = specs.iter().enumerate().map(|(i, s)| crate::QueuedJob::new(i, s, 0.0)).collect();
            let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue, running: Vec::new() };
            f.schedule(&view);
            let hosts = [(0usize, 1u32), (2, 1)];
            for (k, now_s) in [0.05, 0.3, 0.4, 2.0].into_iter().enumerate() {
                let mut r = crate::RunningJob::new(1, &specs[1], &hosts);
                r.iterations_done = k as u64 + 1;
                r.iteration_start_s = now_s;
                let view = ClusterView { now_s, topology: &t, free_gpus: &free, queue: Vec::new(), running: vec![r] };
                let out = f.on_iteration(&view, 1, crate::Iteration::of(100.0));
                assert!(out.iter().any(|d| matches!(d, Decision::Route { .. })), "open {open}: {out:?}");
                assert!(
                    out.iter().all(|d| !matches!(d, Decision::Shift { .. } | Decision::Timetable { .. })),
                    "open {open}, iteration {k}: {out:?}"
                );
            }
        }
    }

    /// A two-worker ring's GPUs per host.
    type RingHosts = [(HostId, u32); 2];

    /// Two VGG19 rings across the same two racks under one spine whose
    /// uplinks run at half a NIC, pinned one worker per rack, and FORESIGHT
    /// (`replan`: `…:replan`) having planned them (a valid schedule, in
    /// turn). Returns the policy, the topology, the specs and their hosts.
    fn two_planned_rings(replan: bool) -> (Foresight, Topology, Vec<JobSpec>, [RingHosts; 2]) {
        use crate::baseline::Pinned;
        let t = two_racks_of_two(1, 1, "a100");
        let specs: Vec<JobSpec> =
            ["a", "b"].iter().map(|n| JobSpec::new(*n, "vgg19", 32, 2, Work::Iterations(300), 0.0)).collect();
        let hosts = [[(0usize, 1u32), (2, 1)], [(1, 1), (3, 1)]];
        let pins: std::collections::BTreeMap<String, Vec<(HostId, u32)>> =
            specs.iter().zip(&hosts).map(|(s, h)| (s.id.clone(), h.to_vec())).collect();
        let f = Foresight::new(Box::new(Pinned { pins, label: None }), Mode::Foresight);
        let mut f = if replan { f.replanning() } else { f };
        let free = vec![1u32; 4];
        let queue = specs.iter().enumerate().map(|(i, s)| crate::QueuedJob::new(i, s, 0.0)).collect();
        f.schedule(&ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue, running: Vec::new() });
        assert!(f.valid_plan, "the set-up must give a valid schedule: {:?}", f.outcomes);
        (f, t, specs, hosts)
    }

    #[test]
    fn a_valid_plan_the_network_does_not_run_is_dropped_for_its_routes() {
        // Two VGG19 rings across the same two racks under one spine whose
        // uplinks run at half a NIC: FORESIGHT plans them in turn (a valid
        // schedule). Iterations at their planned length keep the plan; five
        // running 10% over it (real TCP's all-reduce ran 1.2× the model on
        // the testbed) drop its timing: both jobs' timetables go, and no
        // later decision delays or throttles them.
        for stretch in [1.0, 1.1] {
            let (mut f, t, specs, hosts) = two_planned_rings(false);
            let free = vec![1u32; 4];
            let length_ms = f.steps[&0].0[0].length_ms;
            let mut timed_after_drop = 0;
            let mut cleared = Vec::new();
            for k in 1..=12u64 {
                let mut r = crate::RunningJob::new(0, &specs[0], &hosts[0]);
                r.iterations_done = k;
                let now_s = k as f64 * length_ms * stretch / 1e3;
                r.iteration_start_s = now_s - length_ms * stretch / 1e3;
                let b = crate::RunningJob::new(1, &specs[1], &hosts[1]);
                let view =
                    ClusterView { now_s, topology: &t, free_gpus: &free, queue: Vec::new(), running: vec![r, b] };
                let out = f.on_iteration(&view, 0, crate::Iteration::of(length_ms * stretch));
                for d in &out {
                    match d {
                        Decision::Timetable { job, starts_s, .. } if starts_s.is_empty() => cleared.push(*job),
                        Decision::Timetable { .. } | Decision::Shift { .. } if f.timing_dropped => {
                            timed_after_drop += 1
                        }
                        Decision::Throttle { gbps: Some(_), .. } if f.timing_dropped => timed_after_drop += 1,
                        _ => {}
                    }
                }
            }
            if stretch == 1.0 {
                assert!(!f.timing_dropped && f.drops == 0, "a plan that holds is kept");
            } else {
                assert!(f.timing_dropped && f.drops == 1, "five overruns drop the plan's timing");
                assert!(cleared.contains(&0) && cleared.contains(&1), "both timetables cleared: {cleared:?}");
                assert_eq!(timed_after_drop, 0);
                assert!(f.counters().contains(&("plan_timing_dropped", 1.0)));
            }
        }
    }

    #[test]
    fn a_plan_whose_all_reduce_runs_long_is_re_planned_from_measured_times() {
        // The same two rings under one spine. Each iteration's compute runs
        // at the model and its all-reduce at 1.2x (real TCP on the testbed):
        // five overruns in a row, and FORESIGHT plans again with the
        // measured times. The new plan's iterations are the measured ones
        // (compute + 1.2 x the planned communication). It is kept when it
        // beats what the jobs measured under the old plan (here they also
        // waited half an iteration each time for starts they had missed),
        // and iterations of its length then hold it. When the jobs ran
        // without waiting, the new plan (which runs the rings in turn, with
        // delays) cannot beat them: its timing is dropped, its routes kept.
        let (_, t, specs, hosts) = two_planned_rings(true);
        let compute = place(&t, &specs[0], &hosts[0]).expect("placed").shape.compute_ms();
        let free = vec![1u32; 4];
        // Both rings with k iterations done, the latest begun at now_s.
        let view_at = |k: u64, now_s: f64| {
            let mut a = crate::RunningJob::new(0, &specs[0], &hosts[0]);
            a.iterations_done = k;
            a.iteration_start_s = now_s;
            let mut b = crate::RunningJob::new(1, &specs[1], &hosts[1]);
            b.iterations_done = k;
            b.iteration_start_s = now_s;
            ClusterView { now_s, topology: &t, free_gpus: &free, queue: Vec::new(), running: vec![a, b] }
        };
        for waited in [true, false] {
            let (mut f, ..) = two_planned_rings(true);
            assert_eq!(f.name(), "foresight:replan");
            // The plan's iteration: its compute, then its communication.
            let planned_ms = f.steps[&0].0[0].length_ms;
            let comm = planned_ms - compute;
            assert!(comm > 0.0, "{planned_ms} vs {compute}");
            let slow = compute + 1.2 * comm;
            let wait = if waited { 0.5 * slow } else { 0.0 };
            let measured = |comm_ms: f64, waited_ms: f64| crate::Iteration {
                ms: compute + comm_ms + waited_ms,
                waited_ms,
                comm_ms: Some(comm_ms),
            };
            let mut now_s = 0.0;
            let mut tripped = Vec::new();
            for k in 1..=5u64 {
                now_s += (slow + wait) / 1e3;
                let view = view_at(k, now_s);
                for job in [0, 1] {
                    let out = f.on_iteration(&view, job, measured(1.2 * comm, wait));
                    if f.replans == 1 && tripped.is_empty() {
                        tripped = out;
                    }
                }
            }
            assert_eq!(f.replans, 1, "waited {waited}: re-planned at the fifth overrun");
            let s = f.stretch[&0];
            assert!((s.compute - 1.0).abs() < 1e-9 && (s.comm - 1.2).abs() < 1e-9, "{s:?}");
            let replanned_ms = f.steps[&0].0[0].length_ms;
            assert!((replanned_ms - slow).abs() < 1e-6 * slow, "{replanned_ms} vs {slow}");
            assert!(
                tripped.iter().any(|d| matches!(d, Decision::Route { job: 1, .. })),
                "both jobs' routes: {tripped:?}"
            );
            if !waited {
                assert_eq!((f.drops, f.timing_dropped), (1, true), "the re-made plan cannot beat free-running jobs");
                assert_eq!(tripped.iter().filter(|d| times_an_iteration(d)).count(), 0, "{tripped:?}");
                continue;
            }
            assert_eq!((f.drops, f.timing_dropped), (0, false), "re-planned and kept");
            // Iterations of the measured length hold the new plan.
            for k in 6..=20u64 {
                now_s += replanned_ms / 1e3;
                let view = view_at(k, now_s);
                for job in [0, 1] {
                    f.on_iteration(&view, job, measured(1.2 * comm, 0.0));
                }
            }
            assert_eq!((f.replans, f.drops), (1, 0));
            assert!(f.counters().contains(&("plan_replans", 1.0)));
        }
    }

    #[test]
    fn route_shares_become_exact_repeats() {
        // Eighths (a 100 Gbit/s flow in 12.5 Gbit/s subflows): 3/8 and 5/8
        // stay 3:5; quarters in quarters; one spine once.
        assert_eq!(repeats(&[0.375, 0.625]), vec![3, 5]);
        assert_eq!(repeats(&[0.25, 0.25, 0.5]), vec![1, 1, 2]);
        assert_eq!(repeats(&[1.0]), vec![1]);
        assert_eq!(repeats(&[1.0 / 3.0, 2.0 / 3.0]), vec![1, 2]);
    }

    #[test]
    fn spread_flows_are_profiled_at_the_nic_rate() {
        // 100 Gbit/s NICs under 50 Gbit/s leaf-spine links (the rack-of-4
        // heatmap's cluster). One path caps a cross-rack flow at 50; spread
        // over the spines as subflows it runs at 100, so its transfers take
        // half as long.
        let t = two_racks_of_two(4, 1, "a100");
        let net = LogicalNetwork::of(&t).expect("leaf-spine");
        let spec = JobSpec::new("j", "vgg19", 1, 2, Work::Iterations(10), 0.0);
        let hosts = vec![(0usize, 1u32), (2, 1)];
        let one = profile(&t, &net, &spec, &hosts, None, false).expect("profile");
        let spread = profile(&t, &net, &spec, &hosts, None, true).expect("profile");
        assert!(one.flows.iter().all(|f| f.gbps == 50.0));
        assert!(spread.flows.iter().all(|f| f.gbps == 100.0));
        let comm = |p: &FlowProfile| p.flows.iter().map(|f| f.end_ms - f.start_ms).sum::<f64>();
        assert!((comm(&one) / comm(&spread) - 2.0).abs() < 1e-9, "{} vs {}", comm(&one), comm(&spread));
        assert!(spread.length_ms < one.length_ms);
        // A throttle still caps the spread rate.
        let throttled = profile(&t, &net, &spec, &hosts, Some(25.0), true).expect("profile");
        assert!(throttled.flows.iter().all(|f| f.gbps == 25.0));
    }
}
