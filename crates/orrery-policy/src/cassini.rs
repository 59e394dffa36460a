//! CASSINI as a network augmentation of any host scheduler (CASSINI §4.2,
//! Alg. 2): the host scheduler's placement for each job it starts is one
//! candidate; up to `candidates − 1` more are placements the host
//! scheduler could have made ([`Candidates`]). Every candidate is scored by
//! the mean compatibility of the links it would share (CASSINI Eq. 2 after
//! the best rotation), candidates whose
//! Affinity graph has a loop are dropped, and the best one is placed. Then one
//! time-shift per job comes from the Affinity graph (Alg. 1) and every job that
//! shares a link is aligned to it on a common clock. A job whose iteration runs
//! more than 5% over its time alone is re-aligned (§5.7).
//!
//! **Ranking (orrery's rule, issue 38).** Alg. 2 ranks candidates by
//! compatibility alone, so a random candidate that crosses more racks than
//! the host scheduler's can win, and its cross-rack traffic then loads the
//! oversubscribed uplinks for every later job (on a 3:1 fabric of 1-GPU
//! hosts, `themis+cassini` ran 3-5% longer than `themis`). Here candidates
//! rank first by the fabric links (switch to switch) they cross, then by
//! compatibility: CASSINI chooses among placements no less local than the
//! host scheduler's. [`Rank::Compatibility`] (`+cassini:paper`) is the
//! paper's ranking.
//!
//! **Candidates (orrery's rule, issue 38 item 4).** Alg. 2 takes its
//! candidates from the host scheduler. They used to be drawn at random
//! from the free GPUs for every host scheduler; for one that consolidates
//! (Themis, Pollux, SRTF, ...), a random candidate as local as its choice
//! still scatters the job over hosts the host scheduler would have kept
//! whole, and the next wide job crosses more racks. With the host
//! scheduler's own first fit anchored at each rack in turn
//! ([`Candidates::PerRack`]), `themis+cassini`'s mean JCT on
//! benchmark-network is 4–12% below `themis`' (seeds 1–12, both loads),
//! where with random candidates it was up to 12% above (docs/results.md). A host scheduler that places at random keeps
//! random candidates ([`Candidates::Random`]).
//!
//! **Drift (issue 73).** The 5% rule judges measurements: each job's circle
//! alone (measured compute and all-reduce alone, [`alone`]), its all-reduce
//! against that, and where the two jobs' communication windows fall on the
//! circle. A re-alignment is anchored at the reference's next reported
//! start and repeats with its period alone, never with a contended
//! iteration time ([`Cassini::on_iteration`]).

use crate::baseline::random_hosts;
use crate::memo::{FastMap, PerPlacement};
use crate::{ClusterView, Decision, Iteration, JobId, Policy};
use orrery_interleave::affinity::{AffinityJob, LinkShifts, traverse};
use orrery_interleave::compat::default_search;
use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_interleave::{Search, solve};
use orrery_model::placed::{Placed, place};
use orrery_model::{HostId, JobSpec, LinkId};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

mod alone;
mod drift;
mod graph;
#[cfg(test)]
mod kept_graph_tests;

use drift::{Aligned, Drift};

/// CASSINI on top of a host scheduler.
pub struct Cassini {
    inner: Box<dyn Policy>,
    /// Candidate placements per job (Alg. 2's N, default 10).
    pub candidates: usize,
    /// Where the candidates beyond the host scheduler's choice come from.
    pub draw: Candidates,
    rng: ChaCha8Rng,
    /// The drift rule's state ([`drift::Drift`]).
    drift: Drift,
    /// What happens to a job none of whose candidates is loop-free.
    pub on_loop: OnLoop,
    /// How candidates are ranked.
    pub rank: Rank,
    /// When a new job's time-shift is applied.
    pub timing: Timing,
    /// Jobs started outside the Affinity graph ([`OnLoop::RunUnaligned`]).
    unaligned: HashSet<JobId>,
    /// Each link's solution by what it depends on ([`Solved`]).
    solved: Solved,
    /// The running jobs' placements and links.
    placements: Placements,
    /// The Affinity graph of the running jobs, kept from the last round
    /// that placed a job and brought up to date in the next
    /// ([`graph::Graph::sync`]).
    graph: Option<graph::Graph>,
    /// Rounds whose graph was built anew, and rounds whose kept graph was
    /// brought up to date.
    graph_builds: u64,
    graph_syncs: u64,
    /// False builds the graph anew in every round that places a job and
    /// aligns from a full score of it, as before the graph was kept: the
    /// reference the tests hold the kept graph to.
    keep_graph: bool,
}

/// Links solved, by what the solution depends on: the link's rate and its
/// jobs' priorities and circles, in order ([`link_key`]). A score costs one
/// unification and search per link carrying two jobs, for every candidate
/// of every decision, and most links hold the same jobs from one to the
/// next (issue 43: 2,048 rings across 128 racks took 2 s a decision). The
/// value: the link's score and time-shifts, None when the circles cannot be
/// unified. Cleared past [`SOLVED_MAX`] entries.
type Solved = crate::memo::FastMap<Vec<u64>, Option<(f64, Vec<f64>)>>;

/// Most link solutions kept (a few MB).
const SOLVED_MAX: usize = 20_000;

/// What a link's solution depends on: its rate, then each job's priority and
/// circle (period and arcs), in the order given. O(jobs · arcs).
fn link_key(gbps: f64, jobs: &[&Net], link: LinkId) -> Vec<u64> {
    let mut key = vec![gbps.to_bits()];
    for j in jobs {
        key.push(matches!(j.priority, orrery_model::Priority::High) as u64);
        match j.on_links.as_ref().and_then(|m| m.get(&link)) {
            Some(c) => c.push_bits(&mut key),
            None => j.placed.shape.circle().push_bits(&mut key),
        }
    }
    key
}

/// A job none of whose candidate placements keeps the Affinity graph
/// loop-free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLoop {
    /// CASSINI Alg. 2: every candidate is dropped; the job waits for the
    /// next round.
    Wait,
    /// orrery's rule: it starts on the host scheduler's choice without a
    /// time-shift and stays outside the Affinity graph while it runs (as do
    /// jobs started on shared GPUs, whose place the host scheduler fixed).
    /// An idle GPU costs more than an unaligned job, and one loop would
    /// otherwise keep every later job that touches it waiting.
    RunUnaligned,
}

/// Where a job's candidates beyond the host scheduler's choice come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Candidates {
    /// GPUs drawn at random from the free ones: the candidates of a host
    /// scheduler that places at random (`random+cassini`).
    Random,
    /// Consolidated first fit anchored at each rack in turn, the racks
    /// with the most free GPUs first: the best-fitting host of the rack
    /// when one holds the job, else the rack's hosts, fullest first, and
    /// then first fit over the rest. The placements a consolidating host
    /// scheduler would make had it preferred that rack.
    PerRack,
}

/// How Alg. 2 ranks candidate placements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rank {
    /// CASSINI's: by mean compatibility; the host scheduler's choice wins ties.
    Compatibility,
    /// orrery's: by the fabric links the candidate crosses (fewer first),
    /// then by compatibility, then the host scheduler's choice.
    LocalityFirst,
}

/// When a new job's time-shift is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// CASSINI's: aligned as it is placed, whether or not it would collide.
    AtPlacement,
    /// Measured first (`+cassini:measured`, issue 68): a job on fully
    /// compatible links starts unshifted and is aligned only when its
    /// measured all-reduces collide (the 5% rule); an alignment that did
    /// not shorten its iterations is given up.
    WhenCollided,
}

/// Fabric (switch-to-switch) links a job's traffic crosses: its cross-rack
/// traffic, which oversubscribed uplinks carry. 0 for a job that sends
/// nothing. O(links of the job).
fn fabric_links(view: &ClusterView<'_>, net: &Net) -> usize {
    if !net.sends {
        return 0;
    }
    let hosts = view.topology.hosts.len();
    net.links
        .iter()
        .filter(|&&l| {
            let link = &view.topology.links[l];
            link.from >= hosts && link.to >= hosts
        })
        .count()
}

/// Racks with free GPUs, the most free first (ties: the lower rack id).
/// O(H + R log R).
fn racks_by_free(rack_of: &[usize], free: &[u32]) -> Vec<usize> {
    let mut sums: BTreeMap<usize, u32> = BTreeMap::new();
    for (h, &f) in free.iter().enumerate().filter(|(_, f)| **f > 0) {
        *sums.entry(rack_of[h]).or_default() += f;
    }
    let mut racks: Vec<(u32, usize)> = sums.into_iter().map(|(r, f)| (f, r)).collect();
    racks.sort_by_key(|&(f, r)| (std::cmp::Reverse(f), r));
    racks.into_iter().map(|(_, r)| r).collect()
}

/// Consolidated first fit anchored at the rack of `rack_hosts`
/// ([`Candidates::PerRack`]). None when the rack has no free GPU or the job
/// does not fit. O(r log r) for r hosts in the rack when it holds the job,
/// else O(H log H).
fn first_fit_from(
    view: &ClusterView<'_>,
    rack_of: &[usize],
    free: &[u32],
    gpus: u32,
    rack_hosts: &[HostId],
) -> Option<Vec<(HostId, u32)>> {
    let mut hosts: Vec<HostId> = rack_hosts.iter().copied().filter(|&h| free[h] > 0).collect();
    if let Some(&h) = hosts.iter().filter(|&&h| free[h] >= gpus).min_by_key(|&&h| (free[h], h)) {
        return Some(vec![(h, gpus)]);
    }
    hosts.sort_by_key(|&h| (std::cmp::Reverse(free[h]), h));
    let mut out = Vec::new();
    let left = crate::baseline::take_in_order(free, hosts, gpus, &mut out);
    if out.is_empty() {
        return None;
    }
    if left == 0 {
        return Some(out);
    }
    let mut rest = free.to_vec();
    for &(h, g) in &out {
        rest[h] -= g;
    }
    out.extend(crate::baseline::consolidated(view, rack_of, &rest, left)?);
    Some(out)
}

impl Cassini {
    /// Augments `inner`; `seed` draws the extra candidates.
    pub fn new(inner: Box<dyn Policy>, seed: u64) -> Self {
        Cassini {
            inner,
            candidates: 10,
            draw: Candidates::PerRack,
            rng: ChaCha8Rng::seed_from_u64(seed),
            drift: Drift::default(),
            on_loop: OnLoop::Wait,
            rank: Rank::LocalityFirst,
            timing: Timing::AtPlacement,
            unaligned: HashSet::new(),
            solved: Solved::default(),
            placements: PerPlacement::default(),
            graph: None,
            graph_builds: 0,
            graph_syncs: 0,
            keep_graph: true,
        }
    }
}

/// Connected groups of jobs (indices) through shared links.
fn components(shifts: &[LinkShifts]) -> Vec<Vec<usize>> {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for l in shifts {
        let members: Vec<usize> = l.shifts.iter().map(|x| x.0).collect();
        let (mut joined, rest): (Vec<Vec<usize>>, Vec<Vec<usize>>) =
            groups.into_iter().partition(|g| g.iter().any(|k| members.contains(k)));
        let mut merged: Vec<usize> = joined.drain(..).flatten().chain(members).collect();
        merged.sort_unstable();
        merged.dedup();
        groups = rest;
        groups.push(merged);
    }
    groups
}

/// A job with GPUs: its spec, placement, and what it does on the network.
struct Net {
    id: JobId,
    priority: orrery_model::Priority,
    /// The GPUs it holds per host (a kept graph tells a job placed again
    /// by them).
    hosts: Vec<(HostId, u32)>,
    placed: Rc<Placed>,
    links: Rc<Vec<LinkId>>,
    /// Its iteration time alone and whether it sends over the network,
    /// read once from the shape (O(segments)): every score reads them.
    period_ms: f64,
    sends: bool,
    /// A mesh job's circle on each link ([`Placed::link_circles`]): its
    /// parallel flows add up there. None for a 1-D job.
    on_links: Option<Rc<LinkCircles>>,
}

/// A mesh job's circle per link.
type LinkCircles = HashMap<LinkId, orrery_model::Circle>;

impl Net {
    /// The circle this job draws on `link`. O(arcs).
    fn circle_on(&self, link: LinkId) -> orrery_model::Circle {
        match self.on_links.as_ref().and_then(|m| m.get(&link)) {
            Some(c) => c.clone(),
            None => self.placed.shape.circle(),
        }
    }
}

/// A running job's placement, links, period, whether it sends and its
/// circles per link, kept between rounds while its hosts are
/// ([`PerPlacement`]); None when it cannot be shaped.
type Placements = PerPlacement<Option<(Rc<Placed>, Rc<Vec<LinkId>>, f64, bool, Option<Rc<LinkCircles>>)>>;

fn net(view: &ClusterView<'_>, id: JobId, spec: &JobSpec, hosts: &[(HostId, u32)]) -> Option<Net> {
    let placed = place(view.topology, spec, hosts)?;
    let (links, on_links) = placed.links_and_circles(view.topology, id);
    let on_links = on_links.map(Rc::new);
    Some(Net::new(id, spec.priority, hosts.to_vec(), Rc::new(placed), Rc::new(links), on_links))
}

impl Net {
    fn new(
        id: JobId,
        priority: orrery_model::Priority,
        hosts: Vec<(HostId, u32)>,
        placed: Rc<Placed>,
        links: Rc<Vec<LinkId>>,
        on_links: Option<Rc<LinkCircles>>,
    ) -> Self {
        let (period_ms, sends) = (placed.shape.period_ms(), placed.shape.network_ms() > 0.0);
        Net { id, priority, hosts, placed, links, period_ms, sends, on_links }
    }
}

/// [`net`] of a running job, from `kept` unless its hosts changed. O(hosts)
/// when kept.
fn running_net(view: &ClusterView<'_>, kept: &mut Placements, r: &crate::RunningJob<'_>) -> Option<Net> {
    let (placed, links, period_ms, sends, on_links) = kept
        .of(r, || net(view, r.id, r.spec, r.hosts).map(|n| (n.placed, n.links, n.period_ms, n.sends, n.on_links)))
        .as_ref()?;
    let (placed, links, on_links) = (Rc::clone(placed), Rc::clone(links), on_links.clone());
    Some(Net {
        id: r.id,
        priority: r.spec.priority,
        hosts: r.hosts.to_vec(),
        placed,
        links,
        period_ms: *period_ms,
        sends: *sends,
        on_links,
    })
}

/// A candidate placement with its fabric links and mean compatibility.
struct Ranked {
    fabric: usize,
    score: f64,
    /// The placement's sums with it ([`graph::Graph::with`]).
    stats: graph::Scored,
    hosts: Vec<(HostId, u32)>,
    net: Net,
}

/// Per shared link: the jobs on it and the link's best rotation as time-shifts.
struct Scored {
    mean_score: f64,
    shifts: Vec<LinkShifts>,
    /// One time-shift per job (Alg. 1), None when the graph has a loop.
    times: Option<Vec<f64>>,
}

/// The unified circles CASSINI scores on are those it enforces
/// ([`Params::cassini`]: no idle injection).
pub fn circle_params() -> Params {
    Params::cassini()
}

/// The best rotation of the circles of `jobs` on `link` of `gbps` (score and
/// each job's time-shift, in order), from `solved` when the same circles met
/// on a link of the same rate before; None when they cannot be unified.
fn link_solution<'s>(
    jobs: &[&Net],
    (link, gbps): (LinkId, f64),
    solved: &'s mut Solved,
) -> Option<&'s (f64, Vec<f64>)> {
    // The key is read off the jobs' circles in place; the circles are
    // copied out (with a name each) only to solve a key not seen before:
    // most links of a round were solved in an earlier one, and building
    // them for every lookup was most of a 4,096-host round's full score.
    let key = link_key(gbps, jobs, link);
    if !solved.contains_key(&key) && solved.len() >= SOLVED_MAX {
        solved.clear();
    }
    solved
        .entry(key)
        .or_insert_with(|| {
            let circles: Vec<CircleJob> = jobs
                .iter()
                .map(|j| CircleJob { name: j.id.to_string(), priority: j.priority, circle: j.circle_on(link) })
                .collect();
            let u = unify(&circles, &circle_params()).ok()?;
            let search = match default_search(&u) {
                Search::OptimalCushion if jobs.len() > 4 => Search::Heuristic { restarts: 4, seed: 0 },
                s => s,
            };
            let sol = solve(&u, gbps, search);
            Some((sol.score, sol.shifts_ms(&u)))
        })
        .as_ref()
}

/// Scores a set of jobs: every link carrying two or more of them is solved,
/// or its solution taken from `solved` when the same circles met on a link
/// of the same rate before. O(Σ jobs on shared links) plus a unification
/// and search per link not solved before.
fn score(view: &ClusterView<'_>, jobs: &[&Net], solved: &mut Solved) -> Scored {
    // Each link with the jobs that send on it, ascending: one sorted array
    // of (link, job), not a map of vectors (at 4,096 hosts a round's full
    // score went mostly to allocating them).
    let mut on_link: Vec<(LinkId, usize)> = Vec::new();
    for (k, j) in jobs.iter().enumerate().filter(|(_, j)| j.sends) {
        on_link.extend(j.links.iter().map(|&l| (l, k)));
    }
    on_link.sort_unstable();
    let ks: Vec<usize> = on_link.iter().map(|x| x.1).collect();
    let shared = graph::link_groups(view, &on_link, &ks);
    let (mut total, mut n) = (0.0, 0);
    let mut shifts = Vec::new();
    for &(ks, l) in &shared {
        let nets: Vec<&Net> = ks.iter().map(|&k| jobs[k]).collect();
        let Some((link_score, link_shifts)) = link_solution(&nets, (l, view.topology.links[l].gbps), solved) else {
            continue;
        };
        total += *link_score;
        n += 1;
        shifts.push(LinkShifts { link: l, shifts: ks.iter().zip(link_shifts.iter()).map(|(&k, &t)| (k, t)).collect() });
    }
    let affinity: Vec<AffinityJob> =
        jobs.iter().map(|j| AffinityJob { iter_ms: j.period_ms, priority: j.priority }).collect();
    let times = traverse(&affinity, &shifts).ok();
    Scored { mean_score: if n == 0 { 1.0 } else { total / n as f64 }, shifts, times }
}

impl Policy for Cassini {
    fn name(&self) -> String {
        let paper = if self.rank == Rank::Compatibility { ":paper" } else { "" };
        let measured = if self.timing == Timing::WhenCollided { ":measured" } else { "" };
        format!("{}+cassini{paper}{measured}", self.inner.name())
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let proposed = self.inner.schedule(view);
        let mut free = view.free_gpus.to_vec();
        // Racks and their hosts, O(H), only in a round that places a job.
        let placing = proposed.iter().any(|d| matches!(d, Decision::Place { .. }));
        let rack_of = crate::baseline::racks(view);
        self.drift.forget_ended(view);
        // Jobs outside the Affinity graph are forgotten once they end. O(R + Q).
        if !self.unaligned.is_empty() {
            let present: HashSet<JobId> =
                view.running.iter().map(|r| r.id).chain(view.queue.iter().map(|q| q.id)).collect();
            self.unaligned.retain(|j| present.contains(j));
        }
        // Running jobs by id, O(R), built at the first lookup (a preempted
        // job's GPUs, a resized job's spec, an anchor's iteration start);
        // waiting ones, O(Q), in a round that places a job.
        let running_index = std::cell::OnceCell::new();
        let running_at = |job: JobId| -> Option<usize> {
            let index: &FastMap<JobId, usize> =
                running_index.get_or_init(|| view.running.iter().enumerate().map(|(i, r)| (r.id, i)).collect());
            index.get(&job).copied()
        };
        let queued_at: FastMap<JobId, usize> =
            if placing { view.queue.iter().enumerate().map(|(i, q)| (q.id, i)).collect() } else { FastMap::default() };
        let spec_of = |job: JobId| {
            queued_at.get(&job).map(|&i| view.queue[i].spec).or_else(|| running_at(job).map(|i| view.running[i].spec))
        };
        // The placement so far, in a round that places a job: Alg. 2's
        // candidates are scored against it one region at a time
        // ([`graph::Graph`]). The graph of the last such round is brought
        // up to date (O(running) and O(region) per job that came or went);
        // built anew (O(Σ links of the running jobs)) when there is none,
        // when it disagrees with the view's order, or when freed slots
        // outnumber its jobs (amortised O(1) a placement).
        let mut graph = if placing && self.keep_graph { self.graph.take() } else { None };
        if placing {
            let kept = &mut self.placements;
            kept.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
            let unaligned = &self.unaligned;
            let running = || view.running.iter().filter(|r| !unaligned.contains(&r.id));
            let synced = graph.as_mut().is_some_and(|g| {
                g.slots() <= 2 * g.live() + 64
                    && g.sync(view, running(), |r| running_net(view, kept, r), &mut self.solved)
            });
            if synced {
                self.graph_syncs += 1;
            } else {
                let placed: Vec<Net> = running().filter_map(|r| running_net(view, kept, r)).collect();
                graph = Some(graph::Graph::new(view, placed, &mut self.solved));
                self.graph_builds += 1;
            }
        }
        // A job the host scheduler starts on shared GPUs (Castor) keeps its
        // place; the free GPUs it also takes are reserved first, so that no
        // candidate below moves another job onto them.
        let mut reserved: Vec<Decision> = Vec::new();
        for d in &proposed {
            if let Decision::Share { job, free: taken, .. } = d
                && taken.iter().all(|&(h, g)| free.get(h).is_some_and(|&f| f >= g))
            {
                for &(h, g) in taken {
                    free[h] -= g;
                }
                if self.on_loop == OnLoop::RunUnaligned {
                    self.unaligned.insert(*job);
                }
                reserved.push(d.clone());
            }
        }
        let mut out = reserved;
        for d in proposed {
            if matches!(d, Decision::Share { .. }) {
                continue; // reserved above, or no longer fits
            }
            if let Decision::Preempt { job } = d
                && let Some(i) = running_at(job)
            {
                // Its GPUs are free for the placements that follow.
                for &(h, g) in view.running[i].hosts {
                    free[h] += g;
                }
                if let Some(graph) = graph.as_mut() {
                    graph.remove(view, job, &mut self.solved);
                }
            }
            let (Decision::Place { job, hosts }, Some(graph)) = (&d, graph.as_mut()) else {
                out.push(d);
                continue;
            };
            let (job, hosts) = (*job, hosts.clone());
            // A running job preempted above to restart on a new size (Pollux's
            // resizes, `orrery`'s growth) is placed again like a waiting one.
            let Some(spec) = spec_of(job) else { continue };
            // The host scheduler's choice may use GPUs an earlier job of this
            // round took in another candidate: keep it only if it still fits.
            let fits = hosts.iter().all(|&(h, g)| free.get(h).is_some_and(|&f| f >= g));
            // The host scheduler chose the size (Pollux resizes jobs); keep it.
            let gpus: u32 = hosts.iter().map(|h| h.1).sum();
            let mut candidates = if fits { vec![hosts] } else { Vec::new() };
            let own_choice = candidates.first().cloned();
            // The free GPUs this job may use per host, O(H): only to draw.
            let capped = || crate::placement::capped(&free, spec);
            // A host scheduler's choice that sends nothing over the network
            // (one host) leaves nothing to interleave and no link to spare:
            // with locality first, no candidate can do better, so none is
            // drawn or scored.
            // (Its net is kept for the scoring below, where it comes first.)
            let mut own_net = match self.rank {
                Rank::LocalityFirst => own_choice.as_ref().and_then(|h| net(view, job, spec, h)),
                _ => None,
            };
            let silent = own_net.as_ref().is_some_and(|n| n.links.is_empty());
            match self.draw {
                _ if silent => {}
                Candidates::Random => {
                    let capped = capped();
                    for _ in 1..self.candidates {
                        if let Some(c) = random_hosts(&mut self.rng, &capped, gpus) {
                            candidates.push(c);
                        }
                    }
                }
                Candidates::PerRack if self.candidates > 1 => {
                    let capped = capped();
                    for rack in racks_by_free(rack_of, &capped) {
                        if candidates.len() >= self.candidates {
                            break;
                        }
                        let hosts = view.topology.hosts_in_rack(rack);
                        if let Some(c) = first_fit_from(view, rack_of, &capped, gpus, hosts)
                            && !candidates.contains(&c)
                        {
                            candidates.push(c);
                        }
                    }
                }
                Candidates::PerRack => {}
            }
            // Alg. 2: rank loop-free candidates (by fabric links crossed, then)
            // by mean compatibility; the host scheduler's own choice wins ties.
            let mut best: Option<Ranked> = None;
            for (i, c) in candidates.into_iter().enumerate() {
                let kept = if i == 0 { own_net.take() } else { None };
                let Some(candidate) = kept.or_else(|| net(view, job, spec, &c)) else { continue };
                let fabric = if self.rank == Rank::LocalityFirst { fabric_links(view, &candidate) } else { 0 };
                if best.as_ref().is_some_and(|b| fabric > b.fabric) {
                    continue; // less local than the best so far: not scored
                }
                let s = graph.with(view, &candidate, &mut self.solved);
                let better = |b: &Ranked| fabric < b.fabric || (fabric == b.fabric && s.mean() > b.score + 1e-9);
                if s.loop_free() && best.as_ref().is_none_or(better) {
                    best = Some(Ranked { fabric, score: s.mean(), stats: s, hosts: c, net: candidate });
                }
            }
            let Some(Ranked { hosts, net: chosen, stats, .. }) = best else {
                if self.on_loop == OnLoop::RunUnaligned
                    && let Some(hosts) = own_choice
                {
                    for &(h, g) in &hosts {
                        free[h] -= g;
                    }
                    self.unaligned.insert(job);
                    out.push(Decision::Place { job, hosts });
                }
                continue;
            };
            for &(h, g) in &hosts {
                free[h] -= g;
            }
            graph.insert_scored(chosen, stats);
            out.push(Decision::Place { job, hosts });
        }
        // One time-shift per job (Alg. 1, highest priority as reference). Jobs
        // already running keep their phase; each newly placed job that shares
        // a link is aligned so that its shift relative to its component's
        // anchor is the one the links want: offset = anchor's iteration
        // start + (t_new − t_anchor). The anchor is the reference when it
        // runs; when the reference is new too, the highest-priority running
        // job of the component (its phase is fixed); when every job of the
        // component is new, the reference, which starts now.
        let placed_now: HashSet<JobId> =
            out.iter().filter_map(|d| if let Decision::Place { job, .. } = d { Some(*job) } else { None }).collect();
        // What was measured of a job is of its old placement.
        for &job in &placed_now {
            self.drift.placed_again(job);
        }
        // The graph is kept for the next round that places a job (a round
        // that places none leaves the kept one as it was).
        if graph.is_some() {
            self.graph = graph;
        }
        let Some(graph) = self.graph.as_ref().filter(|_| !placed_now.is_empty()) else {
            return out; // nobody to align
        };
        // Only the regions of the jobs placed now: the time-shifts of a
        // component follow from its links alone, and a region is a union
        // of components (Alg. 1 walks each component from its own
        // reference). The whole graph's sums say whether it has a loop
        // (then no job is aligned, as Alg. 1 fails) and its mean score.
        // O(links of the regions).
        let region = if self.keep_graph {
            graph.region(placed_now.iter().filter_map(|&j| graph.slot(j)))
        } else {
            graph.live_slots()
        };
        let jobs: Vec<&Net> = graph.in_order(region).into_iter().map(|k| graph.net(k)).collect();
        let mut s = score(view, &jobs, &mut self.solved);
        if self.keep_graph {
            let whole = graph.whole();
            s.mean_score = whole.mean();
            if !whole.loop_free() {
                s.times = None;
            }
        }
        let affinity: Vec<AffinityJob> =
            jobs.iter().map(|j| AffinityJob { iter_ms: j.period_ms, priority: j.priority }).collect();
        if let Some(t) = &s.times {
            let components = components(&s.shifts);
            for comp in components {
                let rank = |k: &&usize| (std::cmp::Reverse(jobs[**k].priority), jobs[**k].id);
                // A running job's current iteration began where its latest
                // reported one ended (the live service's view holds the
                // latest reported start, the simulator's the current one).
                let drift = &self.drift;
                let running_start = |k: usize| {
                    let start = running_at(jobs[k].id).map(|i| view.running[i].iteration_start_s)?;
                    Some(drift.current_start_s(jobs[k].id, start))
                };
                let anchor = comp
                    .iter()
                    .filter(|&&k| !placed_now.contains(&jobs[k].id))
                    .min_by_key(rank)
                    .and_then(|&k| running_start(k).map(|start| (k, start)))
                    .or_else(|| comp.iter().min_by_key(rank).map(|&k| (k, view.now_s)));
                let Some((reference, start)) = anchor else { continue };
                for &k in &comp {
                    if !placed_now.contains(&jobs[k].id) || k == reference {
                        continue;
                    }
                    let period_ms = affinity[k].iter_ms;
                    let shift_after_ms = (t[k] - t[reference]).rem_euclid(period_ms);
                    let offset_s = start + shift_after_ms / 1e3;
                    let aligned = Aligned {
                        period_ms,
                        comm_ms: jobs[k].placed.shape.period_ms() - jobs[k].placed.shape.compute_ms(),
                        offset_s,
                        compatible: s.mean_score >= 0.999,
                        reference: jobs[reference].id,
                        shift_after_ms,
                        reference_period_ms: affinity[reference].iter_ms,
                        reference_comm_ms: jobs[reference].placed.shape.period_ms()
                            - jobs[reference].placed.shape.compute_ms(),
                        same_period: (affinity[reference].iter_ms - period_ms).abs() <= 1e-6 * period_ms,
                        shares_link: jobs[k].links.iter().any(|l| jobs[reference].links.contains(l)),
                    };
                    // Measured first (issue 68): a job on fully compatible
                    // links starts unshifted and is aligned by the drift
                    // rule once its all-reduces collide; on a transport that
                    // interleaves rings by itself it never waits.
                    if self.timing == Timing::WhenCollided && aligned.compatible {
                        self.drift.defer(jobs[k].id, aligned);
                    } else {
                        self.drift.align_placed(jobs[k].id, aligned);
                        out.push(Decision::Align { job: jobs[k].id, period_ms, offset_s });
                    }
                }
            }
        }
        out
    }

    fn observes_iterations(&self) -> bool {
        true
    }

    /// The 5% rule watches jobs aligned on fully compatible links (their
    /// compute noise alone can trip it) and, through its measured iteration
    /// time, each such job's reference; every other job's iterations change
    /// nothing here. O(1).
    fn watches(&self, job: JobId) -> bool {
        self.drift.watches(job) || self.inner.watches(job)
    }

    /// The job, the jobs waiting for its next start and its reference
    /// ([`drift::Drift::needs`]), with what the inner policy needs. O(1).
    fn iteration_needs(&self, job: JobId, it: &Iteration) -> crate::IterationNeeds {
        let own = crate::IterationNeeds::Jobs(self.drift.needs(job));
        if self.inner.observes_iterations() { self.inner.iteration_needs(job, it).and(own) } else { own }
    }

    /// §5.7's drift rule ([`drift::Drift::on_iteration`]) after the inner
    /// policy's own. O(window log window) per report, plus O(R) to find
    /// the job's view.
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: Iteration) -> Vec<Decision> {
        let mut out = self.inner.on_iteration(view, job, it);
        out.extend(self.drift.on_iteration(view, job, it));
        out
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

    fn set_flow_sharing(&mut self, sharing: crate::FlowSharing) {
        self.inner.set_flow_sharing(sharing);
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let mut out = self.inner.counters();
        out.push(("cassini_realignments", self.drift.readjustments as f64));
        out.push(("cassini_graph_builds", self.graph_builds as f64));
        out.push(("cassini_graph_syncs", self.graph_syncs as f64));
        if self.timing == Timing::WhenCollided {
            out.push(("cassini_aligned_on_measurement", self.drift.applied_on_measurement as f64));
            out.push(("cassini_given_up_on_measurement", self.drift.given_up_on_measurement as f64));
        }
        out
    }

    fn isolated_network(&self) -> bool {
        self.inner.isolated_network()
    }

    fn gpu_allocation(&self) -> Option<orrery_model::rails::GpuAllocation> {
        self.inner.gpu_allocation()
    }
}

#[cfg(test)]
pub(super) mod tests;
