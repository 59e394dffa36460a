//! FORESIGHT's planning: the parts a change touches, each part's timing
//! (SolveTiming or the baseline's), routes (edge colouring, the repair
//! loop) and the fallback ladder (module docs of [`super`]).

use super::{Foresight, Mode, Part, PartId, PlacedJob, Step, plan_cost, unroute};
use crate::foresight::logical::{LogicalLink, LogicalNetwork};
use crate::foresight::profile::{Profiled, RATES, Stretch, measured_profile, profile};
use crate::foresight::routing::{FlowProfile, Route, Router, RoutingParams, Schedule, schedule, solve_routing};
use crate::foresight::timing::{
    Planned, TimedJob, TimingParams, back_to_back, baseline_timing, sharing_cost, solve_timing,
};
use crate::{ClusterView, Decision, JobId};
use orrery_model::placed::place;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

impl Foresight {
    /// Every cross-rack flow of every job over every spine, equally
    /// (`perfect`): no timing, so nothing to plan in parts. O(flows).
    pub(super) fn plan_perfect(&self, view: &ClusterView<'_>, jobs: &[PlacedJob<'_>]) -> Vec<Decision> {
        let (t, Some(net)) = (view.topology, self.net.as_ref()) else { return Vec::new() };
        let mut out = Vec::new();
        for (id, spec, hosts) in jobs {
            let Some(p) = profile(t, net, spec, hosts, None, true) else { continue };
            for f in &p.flows {
                let paths: Vec<usize> = net.paths_by_spine(t, f.src, f.dst).into_iter().flatten().collect();
                out.push(Decision::Route { job: *id, flow: f.flow, paths });
            }
        }
        out
    }

    /// Re-plans the parts of the plan that changed and returns the
    /// decisions that undo their old plans and start their new ones.
    /// `jobs`: every job that runs once this round applies (the running
    /// ones not preempted, then those placed now); `placed`: the jobs placed
    /// now; `forced`: a part to re-plan whatever changed (a tripped plan).
    /// A part changes when one of its jobs is placed anew or has left, or a
    /// newly placed job's flows use one of its links; its jobs, with the
    /// newly placed ones, are split into parts again and each is planned
    /// alone ([`Foresight::plan_part`]). The other parts keep their plans,
    /// clocks and anchors: they share no link with the change, and a full
    /// re-plan would give them the same steps (the tests check it).
    /// O(running) to find what changed, plus planning the changed parts.
    pub(super) fn replan(
        &mut self,
        view: &ClusterView<'_>,
        jobs: &[PlacedJob<'_>],
        placed: &[JobId],
        forced: Option<PartId>,
    ) -> Vec<Decision> {
        let Some(net) = self.net.clone() else { return Vec::new() };
        let t = view.topology;
        // With subflows a flow may take several spines, so it is profiled
        // at its NIC rate; TS and RO keep one path per flow, as every mode
        // does where the transport shares links unequally (`whole_flows`).
        let spread = !self.whole_flows && matches!(self.mode, Mode::Sub | Mode::Foresight | Mode::Paper | Mode::Routes);
        // The jobs present now against those of the last re-plan (`seen`):
        // a merge of two ascending lists, where hash sets of every job were
        // built and probed each round (a tenth of `fifo+foresight` at
        // 16,384 hosts). The view lists its running jobs by id, so the sort
        // meets them in order, the jobs placed now after them.
        let present = super::ascending(jobs.iter().map(|j| j.0));
        let (gone, unseen) = super::differences(&self.seen, &present);
        // The stretches of jobs that left go; a job placed anew starts from
        // its model (`schedule`). Only a job the plan has seen has one.
        for id in &gone {
            self.stretch.remove(id);
        }
        let stretches = &self.stretch;
        let stretch_of = |id: &JobId| stretches.get(id).copied().unwrap_or(Stretch::MODEL);
        // Each job's unthrottled profile and compute: O(hosts + flows) for
        // a job whose hosts and stretch are unchanged, O(shape + transfers)
        // for the others.
        let kept = &mut self.profiles;
        kept.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
        let mut profiled = |(id, spec, hosts): &PlacedJob<'_>| -> (Option<Arc<FlowProfile>>, f64) {
            let stretch = stretch_of(id);
            let p = kept.get_if(
                *id,
                hosts,
                |p| p.stretch == stretch && p.spread == spread,
                || Profiled {
                    stretch,
                    spread,
                    unthrottled: measured_profile(t, &net, spec, hosts, None, spread, stretch).map(Arc::new),
                    compute_ms: place(t, spec, hosts).map_or(0.0, |p| p.shape.compute_ms()) * stretch.compute,
                },
            );
            (p.unthrottled.clone(), p.compute_ms)
        };
        let placed: crate::memo::FastSet<JobId> = placed.iter().copied().chain(unseen).collect();
        // The parts that changed: those of the jobs that left or are placed
        // now (`part_of_job` names each planned job's part), and those the
        // newly placed jobs' flows meet on a link. O(changes + flows of the
        // newly placed jobs).
        let mut changed: std::collections::BTreeSet<PartId> = forced.into_iter().collect();
        if self.replan_all {
            changed.extend(self.parts.keys().copied());
        }
        changed.extend(gone.iter().chain(&placed).filter_map(|id| self.part_of_job.get(id).copied()));
        self.seen = present;
        let present = &self.seen;
        let here = |id: &JobId| present.binary_search(id).is_ok();
        for job in jobs.iter().filter(|j| placed.contains(&j.0)) {
            if let (Some(p), _) = profiled(job) {
                for f in &p.flows {
                    for link in [LogicalNetwork::up(f.src_leaf), LogicalNetwork::down(f.dst_leaf)] {
                        changed.extend(self.part_of_link.get(&link).copied());
                    }
                }
            }
        }
        // Undo what the changed parts' plans set: it stays set in the
        // driver until undone. A job that has ended, or is preempted this
        // round, has nothing left to undo. Their measurements were against
        // the old plans (a new plan starts afresh).
        let mut replanned: crate::memo::FastSet<JobId> = placed.clone();
        let mut undo: Vec<Decision> = Vec::new();
        // Jobs whose routes in force go, but for those their new first
        // steps set again (after those steps: see `unrouted` below).
        let mut unrouted: Vec<JobId> = Vec::new();
        for pid in &changed {
            self.routers.remove(pid);
            let Some(part) = self.parts.remove(pid) else { continue };
            for link in &part.links {
                self.part_of_link.remove(link);
            }
            for id in part.jobs {
                self.part_of_job.remove(&id);
                self.measured.remove(&id);
                self.cycle.remove(&id);
                self.overruns.remove(&id);
                if !here(&id) {
                    self.steps.remove(&id);
                    continue;
                }
                replanned.insert(id);
                if self.steps.remove(&id).is_none() {
                    continue;
                }
                undo.push(Decision::Throttle { job: id, gbps: None });
                if self.closed_loop && self.mode.times() {
                    // The old plan's starts no longer hold.
                    undo.push(Decision::Timetable { job: id, from_iteration: 0, starts_s: Vec::new() });
                }
                unrouted.push(id);
            }
        }
        for id in &placed {
            self.measured.remove(id);
            self.cycle.remove(id);
            self.overruns.remove(id);
        }
        if let Some(m) = self.measured_first.as_mut() {
            m.forget(|id| !here(id) || placed.contains(id));
        }
        // The jobs to plan, in the order of `jobs` (SolveTiming breaks ties
        // by it), with their profiles. Only jobs with a flow across racks
        // are planned: the others put no demand on a logical link, so
        // SolveTiming never delays them, the shortest throttled profile is
        // the unthrottled one, and routing has nothing of theirs to colour.
        // Their plan would be no-ops after every iteration, and watching
        // them keeps the simulator from fast-forwarding them (issue 43: at
        // 4,096 hosts most jobs fit in a rack).
        let mut to_plan: Vec<(&PlacedJob<'_>, Arc<FlowProfile>, f64)> = Vec::new();
        for job in jobs.iter().filter(|j| replanned.contains(&j.0)) {
            if let (Some(p), compute_ms) = profiled(job)
                && !p.flows.is_empty()
            {
                if let Some(m) = self.measured_first.as_mut() {
                    m.alone_ms.insert(job.0, p.length_ms);
                }
                to_plan.push((job, p, compute_ms));
            }
        }
        // Split them into parts: union-find over the jobs, joined through
        // the links their flows share. O(flows · α).
        let mut parent: Vec<usize> = (0..to_plan.len()).collect();
        fn root(parent: &mut [usize], mut i: usize) -> usize {
            while parent[i] != i {
                parent[i] = parent[parent[i]];
                i = parent[i];
            }
            i
        }
        // The first job on each logical link, indexed by link.
        let mut first_on: Vec<Option<usize>> = vec![None; net.capacity.len()];
        for (i, (_, p, _)) in to_plan.iter().enumerate() {
            for f in &p.flows {
                for link in [LogicalNetwork::up(f.src_leaf), LogicalNetwork::down(f.dst_leaf)] {
                    let Some(on) = first_on.get_mut(link) else { continue };
                    let j = *on.get_or_insert(i);
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut members: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
        for i in 0..to_plan.len() {
            members.entry(root(&mut parent, i)).or_default().push(i);
        }
        let mut links_of: HashMap<usize, Vec<LogicalLink>> = HashMap::new();
        for (link, i) in first_on.iter().enumerate() {
            if let Some(i) = *i {
                links_of.entry(root(&mut parent, i)).or_default().push(link);
            }
        }
        for (r, idx) in members {
            let part: Vec<(&PlacedJob<'_>, &Arc<FlowProfile>, f64)> =
                idx.iter().map(|&i| (to_plan[i].0, &to_plan[i].1, to_plan[i].2)).collect();
            let pid = self.next_part;
            self.next_part += 1;
            let valid_plan = self.plan_part(view, &net, &part, spread, pid);
            let mut links = links_of.remove(&r).unwrap_or_default();
            links.sort_unstable();
            for &link in &links {
                self.part_of_link.insert(link, pid);
            }
            let jobs: Vec<JobId> = part.iter().map(|(j, ..)| j.0).collect();
            for &id in &jobs {
                self.part_of_job.insert(id, pid);
            }
            // Measured first: untimed until a job of it is measured colliding.
            let held = self.measured_first.as_ref().is_some_and(|m| !m.applies_part(&jobs));
            let (planned_at_s, anchor_ms, timing_dropped) = (view.now_s, 0.0, held);
            self.parts.insert(pid, Part { jobs, links, planned_at_s, anchor_ms, valid_plan, timing_dropped, held });
        }
        let ids: Vec<JobId> = to_plan.iter().map(|(j, ..)| j.0).collect();
        let first: Vec<Decision> = ids.into_iter().flat_map(|id| self.next(t, id, None, None)).collect();
        // The routes in force that the re-planned jobs' first steps do not
        // set again are undone: all of them for a job given no step (its
        // part left on ECMP or held). Undoing them all before the new steps
        // sent ~175,000 routes a round at 4,096 hosts, nearly all of them set
        // back to what they were. O(flows in force of these jobs).
        for id in unrouted {
            let handed = self.steps.get(&id).filter(|(steps, k)| *k > 0 && !steps.is_empty());
            let router = self.part_of_job.get(&id).and_then(|p| self.routers.get_mut(p));
            let set: crate::memo::FastSet<usize> = match (handed, router) {
                (Some((steps, _)), Some(router)) => router.routes_of(steps[0].planned).iter().map(|r| r.flow).collect(),
                (Some((steps, _)), None) => steps[0].routes.iter().map(|r| r.flow).collect(),
                (None, _) => Default::default(),
            };
            undo.extend(
                unroute(&self.routes_in_force, id)
                    .into_iter()
                    .filter(|d| !matches!(d, Decision::Route { flow, .. } if set.contains(flow))),
            );
        }
        // Each job's undoing together, in job order, before the new steps
        // (the driver applies a batch in order, and its floating-point
        // state follows that order).
        undo.sort_by_key(|d| match d {
            Decision::Throttle { job, .. } | Decision::Route { job, .. } | Decision::Timetable { job, .. } => *job,
            _ => 0,
        });
        undo.into_iter().chain(first).collect()
    }

    /// Plans part `pid`: its jobs' iterations (SolveTiming) and routes over
    /// the spines, as the mode says, into `steps` (`routes`: into a
    /// [`Router`] that routes them as they come up). Returns whether the
    /// plan is a valid schedule. `part`: each job with its unthrottled
    /// profile (at least one cross-rack flow) and compute per iteration.
    pub(super) fn plan_part(
        &mut self,
        view: &ClusterView<'_>,
        net: &LogicalNetwork,
        part: &[(&PlacedJob<'_>, &Arc<FlowProfile>, f64)],
        spread: bool,
        pid: PartId,
    ) -> bool {
        let t = view.topology;
        let stretch_of = |id: &JobId| self.stretch.get(id).copied().unwrap_or(Stretch::MODEL);
        // The horizon: the whole run of the part's longest job when it fits
        // the cap (so the plan need not repeat), in at most 400,000 bins.
        let run_ms = part
            .iter()
            .map(|((_, spec, _), p, _)| match spec.work {
                orrery_model::Work::Iterations(n) => n as f64 * p.length_ms,
                orrery_model::Work::Seconds(s) => s * 1e3,
            })
            .fold(0.0, f64::max);
        // Throttled profiles only where SolveTiming may choose them: the
        // routes-only ablation runs the baseline's timing (unthrottled).
        let throttles = !matches!(self.mode, Mode::Routes);
        // The unthrottled profiles are borrowed: a 1,024-GPU mesh has ~12,000
        // flows.
        let profiles: Vec<Vec<Cow<'_, FlowProfile>>> = part
            .iter()
            .map(|((id, spec, hosts), base, _)| {
                let nominal = base.flows[0].gbps;
                let mut ps = vec![Cow::Borrowed(&***base)];
                if throttles {
                    ps.extend(RATES[1..].iter().filter_map(|x| {
                        measured_profile(t, net, spec, hosts, Some(nominal * x), spread, stretch_of(id)).map(Cow::Owned)
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
            colors_per_spine: if self.mode == Mode::Ro || self.whole_flows { 1 } else { 4 },
            balance_bad_ranges: false,
        };
        // The solver's view of the links; the baseline's timing needs only
        // the lengths (a part's phases are hundreds of thousands of flows).
        let timed = || -> Vec<TimedJob> {
            profiles.iter().map(|ps| TimedJob { profiles: ps.iter().map(|p| p.timing()).collect() }).collect()
        };
        let lengths =
            || -> Vec<Vec<f64>> { profiles.iter().map(|ps| ps.iter().map(|p| p.length_ms).collect()).collect() };
        let balanced = RoutingParams { balance_bad_ranges: true, ..routing };
        let (plan, routes, valid) = match self.mode {
            Mode::Ts => (solve_timing(&timed(), &net.capacity, &[], &timing), Vec::new(), false),
            Mode::Ro | Mode::Sub => {
                let plan = solve_timing(&timed(), &net.capacity, &[], &timing);
                let routes = solve_routing(&profiles, &plan, &routing).0;
                (plan, routes, false)
            }
            Mode::Routes if net.spines > 1 => {
                // Routed as the steps come up: the same routes, and a
                // decision routes only its jobs' first iterations.
                let plan = back_to_back(&lengths(), &timing);
                let shared = part.iter().map(|(_, p, _)| vec![Arc::clone(p)]).collect();
                self.routers.insert(pid, Router::new(shared, plan.clone(), balanced));
                (plan, Vec::new(), false)
            }
            Mode::Routes | Mode::Perfect => return false, // one spine: nothing to route
            Mode::Foresight | Mode::Paper => {
                let ladder = self.mode == Mode::Foresight;
                match self.foresight_plan(net, &profiles, &timed(), &timing, &routing, ladder) {
                    Some(found) => found,
                    None => return false, // ECMP
                }
            }
        };
        // Steps per job, in plan order, each with its routes (none where
        // the mode routes nothing). O(plan).
        let mut routes = routes;
        routes.resize_with(plan.len(), Vec::new);
        for ((k, x), routes) in plan.iter().enumerate().zip(routes) {
            debug_assert!(routes.iter().all(|r| r.planned == k));
            let id = part[x.job].0.0;
            let step = Step {
                delay_ms: x.delay_ms,
                start_ms: x.start_ms,
                length_ms: profiles[x.job][x.profile].length_ms,
                compute_ms: part[x.job].2,
                throttle: profiles[x.job][x.profile].rate_gbps,
                planned: k,
                routes,
            };
            self.steps.entry(id).or_insert_with(|| (Vec::new(), 0)).0.push(step);
        }
        valid
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
    pub(super) fn foresight_plan(
        &mut self,
        net: &LogicalNetwork,
        profiles: &[Vec<Cow<'_, FlowProfile>>],
        timed: &[TimedJob],
        timing: &TimingParams,
        routing: &RoutingParams,
        ladder: bool,
    ) -> Option<(Vec<Planned>, Vec<Vec<Route>>, bool)> {
        self.outcomes[0] += 1;
        let sharing = |plan: &[Planned]| sharing_cost(timed, &net.capacity, plan, timing.bin_ms);
        let no_delays = baseline_timing(timed, timing);
        let baseline_ms = sharing(&no_delays);
        let pays = |plan: &[Planned]| plan_cost(plan, timed) + sharing(plan) < baseline_ms;
        let found = schedule(profiles, &net.capacity, timing, routing, self.max_rounds);
        match found {
            Some(Schedule { plan, routes, .. }) if pays(&plan) => return Some((plan, routes, true)),
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
        Some((plan, routes, false))
    }
}
