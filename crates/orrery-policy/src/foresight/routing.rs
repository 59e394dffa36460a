//! SolveRouting and the repair loop (FORESIGHT Alg. 1, lines 23–47).
//!
//! Given a timing plan, every planned iteration's cross-rack flows become
//! intervals in time. Overlapping intervals merge into ranges (flows cannot
//! change path mid-transfer, so everything that overlaps must be routed
//! together). Each range's flows are edges of a leaf-to-leaf bipartite
//! multigraph coloured with [`Colorer`]; a colour is a spine.
//!
//! With subflows, a flow of rate r is split into ⌈r / (C/m)⌉ edges, where C
//! is a spine link's capacity and each spine counts as m colours. After
//! colouring, subflows on the same spine are consolidated, and the flow is
//! split over spines in proportion. A range that needs more colours than
//! spines × m is bad. It goes back to the timing solver, which first stretches
//! communication there and then assumes less capacity ([`solve_timing`]),
//! until no range is bad or a round cap is hit. If the cap is hit,
//! [`schedule`] reports failure and FORESIGHT falls back (see
//! `RoutingParams::balance_bad_ranges` and the policy).
//!
//! Cost per round: O(F log A + P log P) to merge F flow intervals of P
//! planned iterations, A of them under way at once ([`Starts`]), plus the
//! colouring, O(E · (V + Δ/64)) per range. A range is bad by its Δ alone
//! (the colouring uses exactly Δ colours), found in O(E): without
//! `balance_bad_ranges` (the repair loop) such a range is not coloured.

use super::coloring::Colorer;
use super::logical::{LogicalLink, LogicalNetwork};
use super::starts::{Flows, Starts, split};
use super::timing::{BadRange, Phase, Planned, Profile, TimedJob, TimingParams, solve_timing};
use orrery_model::HostId;
use std::borrow::Borrow;

/// A cross-rack flow of a profiled iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimedFlow {
    /// Flow index within its collective's transfers (what `Decision::Route`
    /// names; for a ring, worker `flow` to the next, for an all-to-all one of
    /// n·(n − 1) pairs, so never an index into the workers).
    pub flow: usize,
    /// Source host.
    pub src: HostId,
    /// Destination host.
    pub dst: HostId,
    /// Source leaf.
    pub src_leaf: usize,
    /// Destination leaf.
    pub dst_leaf: usize,
    /// Start, ms from the iteration's start.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// Rate, Gbit/s.
    pub gbps: f64,
}

/// A job's profile at one rate, as flows (the timing view is derived).
#[derive(Debug, Clone, PartialEq)]
pub struct FlowProfile {
    /// Throttle, Gbit/s (None: unthrottled).
    pub rate_gbps: Option<f64>,
    /// Iteration length alone, ms.
    pub length_ms: f64,
    /// Cross-rack flows.
    pub flows: Vec<TimedFlow>,
}

impl FlowProfile {
    /// The logical-link demand the timing solver sees: each flow on its
    /// source leaf's up link and its destination leaf's down link.
    /// Flows over the same logical link in the same window merge into one
    /// phase (a ring's flows start together), so the solver checks each link
    /// once per window, in the order the windows first appear. O(flows)
    /// (a mesh job has thousands: a DP ring per TP rank, pipeline sends per
    /// chunk).
    pub fn timing(&self) -> Profile {
        let mut phases: Vec<Phase> = Vec::new();
        let mut index: std::collections::HashMap<(LogicalLink, u64, u64), usize> = std::collections::HashMap::new();
        for f in &self.flows {
            for link in [LogicalNetwork::up(f.src_leaf), LogicalNetwork::down(f.dst_leaf)] {
                let key = (link, f.start_ms.to_bits(), f.end_ms.to_bits());
                match index.get(&key) {
                    Some(&i) => phases[i].gbps += f.gbps,
                    None => {
                        index.insert(key, phases.len());
                        phases.push(Phase { start_ms: f.start_ms, end_ms: f.end_ms, link, gbps: f.gbps });
                    }
                }
            }
        }
        Profile { rate_gbps: self.rate_gbps, length_ms: self.length_ms, phases }
    }
}

impl Flows for FlowProfile {
    fn count(&self) -> usize {
        self.flows.len()
    }

    fn start_ms(&self, i: usize) -> f64 {
        self.flows[i].start_ms
    }

    fn leaves(&self) -> usize {
        self.flows.iter().map(|f| f.src_leaf.max(f.dst_leaf) + 1).max().unwrap_or(0)
    }
}

/// A route's spines and shares.
pub type Spines = smallvec::SmallVec<[(usize, f64); 4]>;

/// The route of one flow of one planned iteration: (spine, share of the flow).
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Index into the plan.
    pub planned: usize,
    /// Flow index within the job.
    pub flow: usize,
    /// The flow's source and destination hosts (its paths are theirs).
    pub ends: (HostId, HostId),
    /// Spines and the share of the flow each carries (shares sum to 1).
    /// Inline up to four: a 400 Gbit/s flow over 400 Gbit/s spine links
    /// is four subflows of a quarter (`colors_per_spine` 4), which often
    /// land on four spines, and a 1,024-GPU mesh's plan holds ~100,000
    /// routes (one allocation each was a quarter of its re-plan).
    pub spines: Spines,
}

/// Routing settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RoutingParams {
    /// Spines.
    pub spines: usize,
    /// Capacity of one leaf–spine link, Gbit/s.
    pub spine_link_gbps: f64,
    /// Colours per spine: 1 routes whole flows; more allows subflows of
    /// 1/m of a spine link.
    pub colors_per_spine: usize,
    /// Route the flows of a range that needs more colours than there are
    /// anyway, folding its Δ colours onto the spines (colour c on spine
    /// c mod spines), so each spine link carries at most ⌈Δ / spines⌉ of
    /// them: balanced, though oversubscribed. False leaves such ranges to
    /// ECMP. Orrery's addition, for FORESIGHT's fallback plans and the
    /// `routes` ablation.
    pub balance_bad_ranges: bool,
}

/// Routes every planned iteration's flows; returns each planned iteration's
/// routes (indexed as `plan`, in the order routing reached them) and the bad
/// ranges (those needing more colours than there are).
/// `profiles[j][k]` is job j's profile k, owned or borrowed (a policy's
/// unthrottled profiles are shared, not copied).
pub fn solve_routing<P: Borrow<FlowProfile>>(
    profiles: &[Vec<P>],
    plan: &[Planned],
    p: &RoutingParams,
) -> (Vec<Vec<Route>>, Vec<(f64, f64)>) {
    let borrowed: Vec<Vec<&FlowProfile>> = profiles.iter().map(|ps| ps.iter().map(Borrow::borrow).collect()).collect();
    Router::new(borrowed, plan.to_vec(), *p).finish()
}

/// SolveRouting one range at a time, as far as asked. Ranges are coloured
/// each on its own, so routing them in time order as the plan's iterations
/// come up gives the routes [`solve_routing`] gives all at once (a test
/// holds them equal). A plan with no repair loop (`routes`, orrery's) is
/// routed so: a decision routes the ranges up to the end of each job's
/// first iteration, not its whole horizon (a 4,096-host LLM part has
/// 650,000 flow intervals in 20 s; routing them all was three quarters of
/// its re-plan), and the flows come in order of start from a merge that
/// goes only as far as routing does ([`Starts`]; sorting them all was
/// a third of what was left).
#[derive(Debug)]
pub struct Router<P> {
    profiles: Vec<Vec<P>>,
    plan: Vec<Planned>,
    params: RoutingParams,
    /// The flows not routed yet, in order of start.
    starts: Starts,
    /// The range being routed, as the keys of its flows.
    range: Vec<u128>,
    /// Per planned iteration, its routes so far.
    routes: Vec<Vec<Route>>,
    bad: Vec<(f64, f64)>,
    leaves: usize,
    colorer: Colorer,
    /// A range's edges, where each flow's begin, and their colours.
    edges: Vec<(usize, usize)>,
    first: Vec<usize>,
    colors: Vec<u32>,
}

impl<P: Borrow<FlowProfile>> Router<P> {
    /// Sorts each distinct profile's flows by start ([`Starts::new`]).
    /// O(P + Σ f log f) for P planned iterations over profiles of f flows.
    pub fn new(profiles: Vec<Vec<P>>, plan: Vec<Planned>, params: RoutingParams) -> Self {
        let (starts, leaves) = Starts::new(&plan, |k| profiles[plan[k].job][plan[k].profile].borrow());
        // Each iteration's routes are allocated when routing first reaches
        // it: most of a horizon is never routed before the next re-plan.
        let routes = plan.iter().map(|_| Vec::new()).collect();
        Router {
            profiles,
            plan,
            params,
            starts,
            range: Vec::new(),
            routes,
            bad: Vec::new(),
            leaves,
            colorer: Colorer::default(),
            edges: Vec::new(),
            first: Vec::new(),
            colors: Vec::new(),
        }
    }

    /// Planned iteration k's routes, routing the ranges up to its last flow
    /// first. O(edges of those ranges · (V + Δ/64)).
    pub fn routes_of(&mut self, k: usize) -> &[Route] {
        while self.starts.pending(k) {
            self.route_range();
        }
        self.routes.get(k).map_or(&[], Vec::as_slice)
    }

    /// Every range routed: each planned iteration's routes and the bad ranges.
    pub fn finish(mut self) -> (Vec<Vec<Route>>, Vec<(f64, f64)>) {
        while !self.starts.is_empty() {
            self.route_range();
        }
        (self.routes, self.bad)
    }

    /// Routes the next range: MergeRanges from the first interval not
    /// routed, then the colouring (module docs).
    fn route_range(&mut self) {
        let (profiles, plan, p) = (&self.profiles, &self.plan, &self.params);
        let profile = |k: usize| -> &FlowProfile { profiles[plan[k].job][plan[k].profile].borrow() };
        let flow = |key: u128| -> &TimedFlow {
            let (k, i) = split(key);
            &profile(k).flows[i]
        };
        let start_of = |key: u128| plan[split(key).0].start_ms + flow(key).start_ms;
        let end_of = |key: u128| plan[split(key).0].start_ms + flow(key).end_ms;
        // MergeRanges: extend while the next flow starts before the range ends.
        let range = &mut self.range;
        range.clear();
        let Some(key) = self.starts.pop(plan, profile) else { return };
        let (start, mut end) = (start_of(key), end_of(key));
        range.push(key);
        while let Some(key) = self.starts.peek(plan, profile).filter(|&key| start_of(key) < end) {
            end = end.max(end_of(key));
            range.push(key);
            self.starts.pop(plan, profile);
        }
        let range = &self.range;
        let m = p.colors_per_spine.max(1);
        let unit = p.spine_link_gbps / m as f64;
        // Subflows: ⌈rate / unit⌉ edges per flow (one edge without subflows).
        // A flow's edges are contiguous: flow n owns edges[first[n]..first[n + 1]].
        let (edges, first, colors) = (&mut self.edges, &mut self.first, &mut self.colors);
        edges.clear();
        first.clear();
        for &iv in range {
            first.push(edges.len());
            let f = flow(iv);
            let parts = if m == 1 { 1 } else { ((f.gbps / unit) - 1e-9).ceil().max(1.0) as usize };
            edges.extend(std::iter::repeat_n((f.src_leaf, f.dst_leaf), parts));
        }
        first.push(edges.len());
        // Every edge names a leaf below `leaves`, so the colouring exists;
        // were it refused, the range is bad rather than routed blind. A
        // range needing more colours than there are is only marked bad
        // unless it is to be balanced: its colouring is not used.
        let colours = u32::try_from(p.spines * m).unwrap_or(u32::MAX);
        let most = if p.balance_bad_ranges { u32::MAX } else { colours };
        let Some(used) = self.colorer.color_within(self.leaves, self.leaves, edges, most, colors) else {
            self.bad.push((start, end));
            return;
        };
        let uncolourable = used > colours;
        if uncolourable {
            self.bad.push((start, end));
        }
        if uncolourable && !p.balance_bad_ranges {
            return;
        }
        // Consolidate subflows by spine. Colour c is on spine c mod spines,
        // so a flow's subflows (parallel edges, all coloured differently)
        // spread over several spines, and each spine still has m colours of
        // 1/m of its link.
        for (n, &iv) in range.iter().enumerate() {
            let mut spines = Spines::new();
            let parts = &colors[first[n]..first[n + 1]];
            for s in parts.iter().map(|&c| c as usize % p.spines) {
                match spines.iter_mut().find(|x| x.0 == s) {
                    Some(x) => x.1 += 1.0,
                    None => spines.push((s, 1.0)),
                }
            }
            for x in &mut spines {
                x.1 /= parts.len() as f64;
            }
            let (k, _) = split(iv);
            let f = flow(iv);
            let routes = &mut self.routes[k];
            if routes.capacity() == 0 {
                routes.reserve_exact(profile(k).flows.len());
            }
            routes.push(Route { planned: k, flow: f.flow, ends: (f.src, f.dst), spines });
        }
    }
}

/// A complete FORESIGHT schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// Timing of every iteration in the horizon.
    pub plan: Vec<Planned>,
    /// Route of every cross-rack flow, per planned iteration.
    pub routes: Vec<Vec<Route>>,
    /// Repair rounds used.
    pub rounds: u32,
}

/// Alg. 1's Schedule: timing, then routing, feeding bad ranges back until
/// none is left or `max_rounds` is reached (then None: fall back to ECMP).
pub fn schedule<P: Borrow<FlowProfile>>(
    profiles: &[Vec<P>],
    capacity: &[f64],
    timing: &TimingParams,
    routing: &RoutingParams,
    max_rounds: u32,
) -> Option<Schedule> {
    let jobs: Vec<TimedJob> =
        profiles.iter().map(|ps| TimedJob { profiles: ps.iter().map(|p| p.borrow().timing()).collect() }).collect();
    let mut bad: Vec<BadRange> = Vec::new();
    for round in 1..=max_rounds.max(1) {
        let plan = solve_timing(&jobs, capacity, &bad, timing);
        let (routes, fresh) = solve_routing(profiles, &plan, routing);
        if fresh.is_empty() {
            return Some(Schedule { plan, routes, rounds: round });
        }
        for (s, e) in fresh {
            match bad.iter_mut().find(|b| b.start_ms < e && b.end_ms > s) {
                Some(b) => {
                    b.rounds += 1;
                    b.start_ms = b.start_ms.min(s);
                    b.end_ms = b.end_ms.max(e);
                }
                None => bad.push(BadRange { start_ms: s, end_ms: e, rounds: 1 }),
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(flow: usize, src: usize, dst: usize, start: f64, end: f64, gbps: f64) -> TimedFlow {
        TimedFlow { flow, src, dst, src_leaf: src, dst_leaf: dst, start_ms: start, end_ms: end, gbps }
    }

    fn one(length: f64, flows: Vec<TimedFlow>) -> Vec<FlowProfile> {
        vec![FlowProfile { rate_gbps: None, length_ms: length, flows }]
    }

    /// Every planned iteration's routes in plan order.
    fn flat((routes, bad): (Vec<Vec<Route>>, Vec<(f64, f64)>)) -> (Vec<Route>, Vec<(f64, f64)>) {
        (routes.into_iter().flatten().collect(), bad)
    }

    fn at(job: usize, start: f64) -> Planned {
        Planned { job, iteration: 0, start_ms: start, delay_ms: 0.0, profile: 0 }
    }

    #[test]
    fn overlapping_flows_from_one_leaf_take_different_spines() {
        let profiles =
            vec![one(100.0, vec![flow(0, 0, 1, 0.0, 50.0, 100.0)]), one(100.0, vec![flow(0, 0, 2, 0.0, 50.0, 100.0)])];
        let p = RoutingParams { spines: 2, spine_link_gbps: 100.0, colors_per_spine: 1, balance_bad_ranges: false };
        let (routes, bad) = flat(solve_routing(&profiles, &[at(0, 0.0), at(1, 10.0)], &p));
        assert!(bad.is_empty());
        assert_eq!(routes.len(), 2);
        assert_ne!(routes[0].spines, routes[1].spines);
        // Apart in time they form two ranges and may share a spine.
        let (routes, bad) = flat(solve_routing(&profiles, &[at(0, 0.0), at(1, 60.0)], &p));
        assert!(bad.is_empty());
        assert_eq!(routes[0].spines.as_slice(), &[(0, 1.0)]);
        assert_eq!(routes[1].spines.as_slice(), &[(0, 1.0)]);
    }

    #[test]
    fn subflows_route_three_two_thirds_flows_over_two_spines() {
        // FORESIGHT §III: 3 flows of 2/3 of a link leaving one leaf over 2 spines.
        let profiles: Vec<Vec<FlowProfile>> =
            (0..3).map(|k| one(100.0, vec![flow(0, 0, k + 1, 0.0, 50.0, 200.0 / 3.0)])).collect();
        let plan = [at(0, 0.0), at(1, 0.0), at(2, 0.0)];
        let whole = RoutingParams { spines: 2, spine_link_gbps: 100.0, colors_per_spine: 1, balance_bad_ranges: false };
        let (_, bad) = solve_routing(&profiles, &plan, &whole);
        assert_eq!(bad, vec![(0.0, 50.0)], "three whole flows need three spines");
        let sub = RoutingParams { colors_per_spine: 3, ..whole };
        let (routes, bad) = flat(solve_routing(&profiles, &plan, &sub));
        assert!(bad.is_empty());
        // Each flow: 2 subflows of 1/3; per spine at most 3 thirds = the link.
        let mut per_spine = [0.0f64; 2];
        for r in &routes {
            assert!((r.spines.iter().map(|s| s.1).sum::<f64>() - 1.0).abs() < 1e-9);
            for &(s, share) in &r.spines {
                per_spine[s] += share * 200.0 / 3.0;
            }
        }
        assert!(per_spine.iter().all(|&g| g <= 100.0 + 1e-9), "{per_spine:?}");
    }

    #[test]
    fn a_flows_subflows_spread_over_the_spines() {
        // One 100 Gbit/s flow, 4 spines of 100, 4 colours per spine: four
        // subflows of 25, coloured 0-3 (parallel edges differ), one per spine.
        let profiles = vec![one(100.0, vec![flow(0, 0, 1, 0.0, 50.0, 100.0)])];
        let p = RoutingParams { spines: 4, spine_link_gbps: 100.0, colors_per_spine: 4, balance_bad_ranges: false };
        let (routes, bad) = flat(solve_routing(&profiles, &[at(0, 0.0)], &p));
        assert!(bad.is_empty());
        let mut spines = routes[0].spines.to_vec();
        spines.sort_by_key(|s| s.0);
        assert_eq!(spines, vec![(0, 0.25), (1, 0.25), (2, 0.25), (3, 0.25)]);
    }

    #[test]
    fn an_uncolourable_range_is_balanced_when_asked() {
        // Six whole flows leave leaf 0 at once over 2 spines: Δ = 6 colours,
        // a bad range. Left to ECMP it has no routes; balanced, each spine's
        // up link carries three.
        let profiles: Vec<Vec<FlowProfile>> =
            (0..6).map(|k| one(100.0, vec![flow(0, 0, k + 1, 0.0, 50.0, 100.0)])).collect();
        let plan: Vec<Planned> = (0..6).map(|j| at(j, 0.0)).collect();
        let p = RoutingParams { spines: 2, spine_link_gbps: 100.0, colors_per_spine: 1, balance_bad_ranges: false };
        let (routes, bad) = flat(solve_routing(&profiles, &plan, &p));
        assert_eq!((routes.len(), bad.len()), (0, 1));
        let (routes, bad) = flat(solve_routing(&profiles, &plan, &RoutingParams { balance_bad_ranges: true, ..p }));
        assert_eq!((routes.len(), bad.len()), (6, 1));
        let on = |spine: usize| routes.iter().filter(|r| r.spines.as_slice() == [(spine, 1.0)]).count();
        assert_eq!((on(0), on(1)), (3, 3));
    }

    #[test]
    fn the_repair_loop_delays_what_routing_cannot_colour() {
        // Each job sends two whole 50 Gbit/s flows out of leaf 0 for 40 ms
        // after 60 ms of compute. On the logical up link (2 spines: 200 Gbit/s)
        // both jobs fit at once, so timing alone overlaps them; but whole flows
        // need a spine each, and four flows out of leaf 0 need four colours.
        let job = || one(100.0, vec![flow(0, 0, 1, 60.0, 100.0, 50.0), flow(1, 0, 2, 60.0, 100.0, 50.0)]);
        let profiles = vec![job(), job()];
        let capacity = [200.0; 6];
        let timing = TimingParams { horizon_ms: 300.0, ..TimingParams::default() };
        let routing =
            RoutingParams { spines: 2, spine_link_gbps: 100.0, colors_per_spine: 1, balance_bad_ranges: false };
        let first = solve_timing(
            &profiles
                .iter()
                .map(|ps| TimedJob { profiles: ps.iter().map(FlowProfile::timing).collect() })
                .collect::<Vec<_>>(),
            &capacity,
            &[],
            &timing,
        );
        assert!(!solve_routing(&profiles, &first, &routing).1.is_empty(), "timing alone leaves a bad range");
        let s = schedule(&profiles, &capacity, &timing, &routing, 8).expect("a valid schedule");
        assert!(s.rounds > 1);
        assert!(solve_routing(&profiles, &s.plan, &routing).1.is_empty());
        // With subflows of half a spine link the same timing routes at once.
        let sub = RoutingParams { colors_per_spine: 2, ..routing };
        assert!(solve_routing(&profiles, &first, &sub).1.is_empty());
        // One spine cannot carry a job's two simultaneous whole flows: no
        // schedule, FORESIGHT falls back to ECMP.
        let one_spine = RoutingParams { spines: 1, ..routing };
        assert!(schedule(&profiles, &[100.0; 6], &timing, &one_spine, 4).is_none());
    }

    #[test]
    fn a_jobs_flows_on_one_logical_link_are_checked_together() {
        // Two 60 Gbit/s flows out of leaf 0 at once: one up-link phase of 120.
        let p = &one(100.0, vec![flow(0, 0, 1, 60.0, 100.0, 60.0), flow(1, 0, 2, 60.0, 100.0, 60.0)])[0];
        let t = p.timing();
        let up: Vec<&crate::foresight::timing::Phase> =
            t.phases.iter().filter(|ph| ph.link == LogicalNetwork::up(0)).collect();
        assert_eq!(up.len(), 1);
        assert_eq!(up[0].gbps, 120.0);
        // Down links of leaves 1 and 2 stay separate.
        assert_eq!(t.phases.len(), 3);
    }

    proptest::proptest! {
        /// Routed range by range as planned iterations are asked for, in
        /// any order, a plan gets the routes and bad ranges it gets routed
        /// all at once; each iteration's routes are there when asked.
        #[test]
        fn routing_range_by_range_is_routing_at_once(
            jobs in proptest::collection::vec(
                (20.0f64..120.0, proptest::collection::vec((0usize..4, 0usize..4, 0.0f64..0.9, 0.05f64..0.5, 10.0f64..100.0), 1..5)),
                1..4,
            ),
            asks in proptest::collection::vec(0usize..64, 0..12),
            balance in proptest::bool::ANY,
        ) {
            let profiles: Vec<Vec<FlowProfile>> = jobs
                .iter()
                .map(|(length, flows)| {
                    let flows = flows
                        .iter()
                        .enumerate()
                        .map(|(n, &(a, b, at, len, gbps))| flow(n, a, 4 + b, at * length, (at + len).min(1.0) * length, gbps))
                        .collect();
                    one(*length, flows)
                })
                .collect();
            let timing = TimingParams { horizon_ms: 400.0, ..TimingParams::default() };
            let plan = crate::foresight::timing::baseline_timing(
                &profiles.iter().map(|ps| TimedJob { profiles: ps.iter().map(FlowProfile::timing).collect() }).collect::<Vec<_>>(),
                &timing,
            );
            let p = RoutingParams { spines: 2, spine_link_gbps: 100.0, colors_per_spine: 2, balance_bad_ranges: balance };
            let at_once = solve_routing(&profiles, &plan, &p);
            // Skipping an uncolourable range's colouring when it is not to
            // be balanced finds the same bad ranges.
            let other = solve_routing(&profiles, &plan, &RoutingParams { balance_bad_ranges: !balance, ..p });
            proptest::prop_assert_eq!(&other.1, &at_once.1);
            let mut router = Router::new(profiles.iter().map(|ps| ps.iter().collect::<Vec<_>>()).collect(), plan.clone(), p);
            for k in asks.into_iter().filter(|&k| k < plan.len()) {
                proptest::prop_assert_eq!(router.routes_of(k), at_once.0[k].as_slice());
            }
            proptest::prop_assert_eq!(router.finish(), at_once);
        }
    }
}
