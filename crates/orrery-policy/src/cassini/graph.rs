//! The running jobs' Affinity graph, scored one region at a time (issue 43)
//! and kept from one placing round to the next (issue 69, [`Graph::sync`]).
//!
//! Alg. 2 ranks a candidate by the mean compatibility of the shared links of
//! the whole placement and drops it when the Affinity graph has a loop.
//! Scoring the whole graph for every candidate costs O(Σ links of the
//! running jobs) each, so a round that restarts every running job on a new
//! size (Pollux's re-allocation, `orrery`'s growth) cost O(R²): 2.7 s for
//! 2,048 jobs on 4,096 hosts. A candidate changes only the links it would
//! use, and with them only the *region* of jobs connected to it by shared
//! links; every other link keeps its jobs, its rotation and its score. So
//! the graph keeps the whole placement's sums (scores, links scored, and
//! loops as the cyclomatic number E − V + C, zero iff every component is a
//! tree, the test of [`orrery_interleave::affinity::AffinityGraph::loops`])
//! and re-scores only the region, before and after: O(links of the region)
//! per candidate, placement and removal. The result equals a full score
//! ([`super::score`]); the sums are exact integers (the test below checks
//! it).

use super::{Net, Solved, link_solution};
use crate::memo::FastMap;
use crate::{ClusterView, JobId};
use orrery_model::{HostId, LinkId};
use std::rc::Rc;

/// Sums over a set of shared links.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(super) struct Stats {
    /// Sum of the link groups' compatibility scores, in units of 2⁻⁶⁴
    /// ([`fixed`]): integer sums are exact, so the whole placement's sums,
    /// kept across rounds by adding and taking out regions, are the same
    /// whatever the order the regions came and went in.
    total: i128,
    /// Link groups scored (those whose circles unify).
    scored: usize,
    /// E − V + C of the Affinity graph: 0 iff it has no loop.
    cycles: i64,
}

impl Stats {
    /// Mean compatibility (1 with no shared link, as [`super::score`]).
    pub(super) fn mean(&self) -> f64 {
        if self.scored == 0 { 1.0 } else { self.total as f64 / ONE as f64 / self.scored as f64 }
    }

    /// Whether the Affinity graph has no loop.
    pub(super) fn loop_free(&self) -> bool {
        self.cycles == 0
    }

    /// `self` with `region` replaced by `by`.
    fn swap(self, region: Stats, by: Stats) -> Stats {
        Stats {
            total: self.total - region.total + by.total,
            scored: self.scored + by.scored - region.scored,
            cycles: self.cycles - region.cycles + by.cycles,
        }
    }
}

/// 1 in [`Stats::total`]'s units.
const ONE: i128 = 1 << 64;

/// A score in [`Stats::total`]'s units (2⁻⁶⁴ apart; a score is in [0, 1]).
fn fixed(score: f64) -> i128 {
    (score * ONE as f64).round() as i128
}

/// Where a job comes in the full score's list: the jobs that held GPUs
/// when the round began in the view's order (the simulator's view lists
/// them by id), then the jobs placed in the round in the order they were.
type Rank = (u8, u64);

/// The rank of a job that held GPUs when the round began.
fn held(id: JobId) -> Rank {
    (0, id as u64)
}

/// A job's entry in the graph's index, read by [`Graph::sync`]'s walk
/// without leaving the index for most jobs (at 16,384 hosts the walk's
/// reads of each job's slot and hosts were a sixth of a run).
#[derive(Debug, Clone)]
struct Entry {
    slot: usize,
    /// Its hosts when it has at most [`INLINE`] (most jobs); else empty
    /// and read from its [`Net`].
    hosts: [(HostId, u32); INLINE],
    inline: u8,
    /// The driver's serial number of the placement the hosts are of, once
    /// a view has given it ([`crate::RunningJob::placement`]; 0 before).
    placement: u64,
    /// Its rank is not yet its id's ([`held`]): placed in the round so far
    /// (ranked after the jobs held before), or in a graph built anew from
    /// a view (ranked by its place there). The next walk ranks it by id.
    rekey: bool,
}

/// [`Graph::component`] of a job that sends nothing, or has left.
const NO_COMPONENT: usize = usize::MAX;

/// Hosts an [`Entry`] holds in place.
const INLINE: usize = 2;

/// The jobs holding GPUs, each in a slot of its own (a job placed again
/// takes a new one), with its rank in the full score's order, and the
/// links they share.
pub(super) struct Graph {
    slots: Vec<Option<Net>>,
    rank: Vec<Rank>,
    slot_of: std::collections::BTreeMap<JobId, Entry>,
    /// Jobs placed in this round so far.
    placed: u64,
    /// Jobs that send, per link they cross, slots ascending.
    on_link: FastMap<LinkId, Vec<usize>>,
    /// Each sending job's component of the link-sharing graph (named by
    /// one of its slots; [`NO_COMPONENT`] for the others), and each
    /// component's slots: a region is a union of them, read off instead of
    /// searched link by link ([`Graph::region`]).
    component: Vec<usize>,
    members: FastMap<usize, Vec<usize>>,
    whole: Stats,
    /// Sums of regions scored without a candidate, by the region's slots
    /// ([`Regions`]).
    regions: Regions,
}

/// Sums of regions, by their slots ascending. A region is a union of
/// components of the link-sharing graph, so its links carry its jobs and
/// no others, and its sums depend only on which jobs it holds: kept, they
/// stay right for as long as the same set of jobs is a region, and no
/// later region can be the same set with other links (a job placed or
/// taken out joins or leaves the region of every job it shares a link
/// with). A round that restarts every running job on a new size takes
/// each out (its region before and after) and places it again (the region
/// before, and after with it): kept, the region before is the one the
/// previous step left, and half the regions are not scored again.
#[derive(Default)]
struct Regions {
    sums: FastMap<Vec<usize>, (Stats, Option<Rc<Detail>>)>,
    /// Slots held in the keys: past a few times the graph's jobs, every
    /// kept region is forgotten (amortised O(1) per slot kept).
    held: usize,
}

impl Regions {
    fn get(&self, region: &[usize]) -> Option<&(Stats, Option<Rc<Detail>>)> {
        self.sums.get(region)
    }

    /// Forgets every region's [`Detail`], keeping its sums.
    fn forget_details(&mut self) {
        for (_, detail) in self.sums.values_mut() {
            *detail = None;
        }
    }

    fn keep(&mut self, region: Vec<usize>, stats: Stats, detail: Option<Rc<Detail>>, jobs: usize) {
        if self.held > 4 * jobs + 1024 {
            self.sums.clear();
            self.held = 0;
        }
        self.held += region.len();
        self.sums.insert(region, (stats, detail));
    }
}

/// A region's Affinity-graph vertices, kept with its sums so that a
/// candidate is scored from the link vertices it changes
/// ([`Graph::delta`]) instead of from every link of its region.
#[derive(Debug, Default)]
struct Detail {
    /// The region's sums when it was taken, in the ranks of then (a kept
    /// region's [`Regions`] sums may be older: a job placed in a round is
    /// ranked by id from the next, and the graph's sums hold it as they
    /// were added, so details are forgotten when ranks change).
    stats: Stats,
    /// Each set of jobs that shares a link (slots in the full score's
    /// order), with all the links that carry exactly it, by (rate, id)
    /// ascending (the first is its vertex's), and its score ([`fixed`];
    /// none when the circles do not unify).
    groups: FastMap<Vec<usize>, (Vec<LinkId>, Option<i128>)>,
    /// Each job in a scored group, with its component's root (a slot).
    component: FastMap<usize, usize>,
}

/// A candidate scored on the graph ([`Graph::with`]): the whole
/// placement's sums with it, and its region's, to keep once it is placed.
#[derive(Debug, Clone)]
pub(super) struct Scored {
    pub(super) whole: Stats,
    /// The candidate's region with its slot (the next), and its sums.
    region: Option<(Vec<usize>, Stats)>,
    /// Its rank.
    rank: Rank,
}

impl Scored {
    pub(super) fn mean(&self) -> f64 {
        self.whole.mean()
    }

    pub(super) fn loop_free(&self) -> bool {
        self.whole.loop_free()
    }
}

/// Whether a job puts traffic on its links (a full score skips the others).
fn sends(net: &Net) -> bool {
    net.sends
}

impl Graph {
    /// The graph of `jobs`, scored once in full. O(Σ links of the jobs).
    /// `jobs` in the view's order.
    pub(super) fn new(view: &ClusterView<'_>, jobs: Vec<Net>, solved: &mut Solved) -> Self {
        let mut g = Graph {
            slots: Vec::new(),
            rank: Vec::new(),
            slot_of: Default::default(),
            placed: 0,
            on_link: FastMap::default(),
            component: Vec::new(),
            members: FastMap::default(),
            whole: Stats::default(),
            regions: Regions::default(),
        };
        for (i, net) in jobs.into_iter().enumerate() {
            g.push(net, (0, i as u64));
        }
        let all: Vec<usize> = (0..g.slots.len()).collect();
        g.whole = g.stats(view, &all, None, solved).0;
        g
    }

    fn push(&mut self, net: Net, rank: Rank) {
        let slot = self.slots.len();
        self.rank.push(rank);
        self.component.push(NO_COMPONENT);
        if sends(&net) {
            // It joins the components of the jobs on its links into one, the
            // smaller ones moved into the largest. O(its links × jobs a link
            // + slots moved).
            let mut joined: Vec<usize> =
                net.links.iter().filter_map(|l| self.on_link.get(l)).flatten().map(|&o| self.component[o]).collect();
            joined.sort_unstable();
            joined.dedup();
            let target = joined.iter().copied().max_by_key(|c| (self.members[c].len(), *c)).unwrap_or(slot);
            let mut into = self.members.remove(&target).unwrap_or_default();
            for c in joined.into_iter().filter(|&c| c != target) {
                let moved = self.members.remove(&c).unwrap_or_default();
                for &m in &moved {
                    self.component[m] = target;
                }
                into.extend(moved);
            }
            into.push(slot);
            self.component[slot] = target;
            self.members.insert(target, into);
            for &l in net.links.iter() {
                self.on_link.entry(l).or_default().push(slot);
            }
        }
        let mut hosts = [(0, 0); INLINE];
        let inline = if net.hosts.len() <= INLINE {
            hosts[..net.hosts.len()].copy_from_slice(&net.hosts);
            net.hosts.len() as u8
        } else {
            u8::MAX
        };
        self.slot_of.insert(net.id, Entry { slot, hosts, inline, placement: 0, rekey: rank != held(net.id) });
        self.slots.push(Some(net));
    }

    /// The whole placement's sums.
    pub(super) fn whole(&self) -> Stats {
        self.whole
    }

    /// The whole placement's sums were `candidate` placed too. O(links of
    /// its region) plus a solution per link group not solved before.
    /// It comes after every job in the graph, as a job placed now does.
    pub(super) fn with(&mut self, view: &ClusterView<'_>, candidate: &Net, solved: &mut Solved) -> Scored {
        self.ranked_with(view, candidate, (1, self.placed), solved)
    }

    /// [`Self::with`] for a job of rank `rank`.
    fn ranked_with(&mut self, view: &ClusterView<'_>, candidate: &Net, rank: Rank, solved: &mut Solved) -> Scored {
        if !sends(candidate) {
            return Scored { whole: self.whole, region: None, rank };
        }
        let mut region = self.region(candidate.links.iter().filter_map(|l| self.on_link.get(l)).flatten().copied());
        let (before, detail) = self.kept_detail(view, &region, solved);
        let after = match self.delta(view, &detail, (candidate, rank), solved) {
            Some(after) => {
                if cfg!(test) {
                    assert_eq!(after, self.stats(view, &region, Some((candidate, rank)), solved).0, "{region:?}");
                }
                after
            }
            None => self.stats(view, &region, Some((candidate, rank)), solved).0,
        };
        region.push(self.slots.len());
        Scored { whole: self.whole.swap(before, after), region: Some((region, after)), rank }
    }

    /// [`Self::stats`] of `region` without a candidate, kept ([`Regions`]).
    fn kept_stats(&mut self, view: &ClusterView<'_>, region: &[usize], solved: &mut Solved) -> Stats {
        if let Some(&(kept, _)) = self.regions.get(region) {
            return kept;
        }
        let (stats, detail) = self.stats(view, region, None, solved);
        self.regions.keep(region.to_vec(), stats, Some(Rc::new(detail)), self.slots.len());
        stats
    }

    /// [`Self::kept_stats`] with the region's [`Detail`], computed once for
    /// a region kept without it (one placed into, or kept before the ranks
    /// last changed).
    fn kept_detail(&mut self, view: &ClusterView<'_>, region: &[usize], solved: &mut Solved) -> (Stats, Rc<Detail>) {
        if let Some((kept, Some(detail))) = self.regions.get(region) {
            return (*kept, Rc::clone(detail));
        }
        let was = self.regions.get(region).map(|k| k.0);
        let (stats, detail) = self.stats(view, region, None, solved);
        let detail = Rc::new(detail);
        let kept = was.unwrap_or(stats);
        self.regions.keep(region.to_vec(), kept, Some(Rc::clone(&detail)), self.slots.len());
        (kept, detail)
    }

    /// The whole placement's sums over a region (`before`, with its
    /// [`Detail`]) were `candidate` placed in it with rank `rank`, from the
    /// link vertices on the candidate's links alone: every other link keeps
    /// its jobs. On a link the candidate takes, its set S becomes S ∪ {c};
    /// S's vertex stays (at its next link) if S has a link the candidate
    /// does not take, and goes otherwise. The loops' count E − V + C
    /// changes by ΔE − Δ(vertices of link sets) − (components joined): jobs
    /// new to scored vertices add a vertex and a component each, which
    /// cancel. None where a scored vertex of S would go without S ∪ {c}
    /// scored, or stay unscored at its next link: jobs may then part, and
    /// the caller scores the region in full. O(candidate's links × jobs
    /// per link) plus a solution per new vertex not solved before.
    fn delta(
        &self,
        view: &ClusterView<'_>,
        detail: &Detail,
        (candidate, rank): (&Net, Rank),
        solved: &mut Solved,
    ) -> Option<Stats> {
        let extra_slot = self.slots.len();
        let order = |s: usize| if s == extra_slot { (rank, s) } else { (self.rank[s], s) };
        // The candidate's links by the set of jobs on each.
        let mut by_set: FastMap<Vec<usize>, Vec<LinkId>> = FastMap::default();
        for &l in candidate.links.iter() {
            let Some(on) = self.on_link.get(&l).filter(|on| !on.is_empty()) else { continue };
            let mut set = on.clone();
            set.sort_unstable_by_key(|&s| order(s));
            by_set.entry(set).or_default().push(l);
        }
        let gbps = |l: LinkId| view.topology.links[l].gbps;
        let first =
            |links: &[LinkId]| links.iter().copied().min_by(|&a, &b| gbps(a).total_cmp(&gbps(b)).then(a.cmp(&b)));
        let mut after = detail.stats;
        let mut edges: i64 = 0;
        let mut vertices: i64 = 0;
        // Sets that become scored vertices, whose jobs then join one component.
        let mut joined: Vec<Vec<usize>> = Vec::new();
        for (set, taken) in &by_set {
            let n = set.len() as i64;
            // S ∪ {c}, in the full score's order.
            let mut with = set.clone();
            let at = with.partition_point(|&s| order(s) < (rank, extra_slot));
            with.insert(at, extra_slot);
            let rep = first(taken)?;
            let new = self.group_score(view, &with, Some(candidate), rep, solved);
            if let Some(score) = new {
                after.total += score;
                after.scored += 1;
                (edges, vertices) = (edges + n + 1, vertices + 1);
                joined.push(with);
            }
            if set.len() < 2 {
                continue;
            }
            let (links, old) = detail.groups.get(set)?;
            // S's next link: the first the candidate does not take.
            let next = links.iter().copied().find(|l| candidate.links.binary_search(l).is_err());
            let kept = match next {
                None => None,
                Some(l) if l == links[0] => *old,
                Some(l) => self.group_score(view, set, None, l, solved),
            };
            if let Some(score) = old {
                after.total -= score;
                after.scored -= 1;
                (edges, vertices) = (edges - n, vertices - 1);
                if (next.is_none() && new.is_none()) || (next.is_some() && kept.is_none()) {
                    return None;
                }
            }
            if let Some(score) = kept.filter(|_| next.is_some()) {
                after.total += score;
                after.scored += 1;
                (edges, vertices) = (edges + n, vertices + 1);
                if old.is_none() {
                    joined.push(set.clone());
                }
            }
        }
        // Components joined: a union-find over the components' roots and
        // the jobs new to scored vertices.
        let mut parent: FastMap<usize, usize> = FastMap::default();
        fn root(parent: &mut FastMap<usize, usize>, mut x: usize) -> usize {
            while let Some(&p) = parent.get(&x).filter(|&&p| p != x) {
                x = p;
            }
            x
        }
        let mut merges: i64 = 0;
        for set in &joined {
            let node = |s: usize| detail.component.get(&s).copied().unwrap_or(s);
            let r0 = root(&mut parent, node(set[0]));
            for &s in &set[1..] {
                let r = root(&mut parent, node(s));
                if r != r0 {
                    parent.insert(r, r0);
                    merges += 1;
                }
            }
        }
        after.cycles += edges - vertices - merges;
        Some(after)
    }

    /// The score of the link vertex of `set` (slots in the full score's
    /// order, `extra` as the next slot) at link `link`, in [`fixed`] units.
    fn group_score(
        &self,
        view: &ClusterView<'_>,
        set: &[usize],
        extra: Option<&Net>,
        link: LinkId,
        solved: &mut Solved,
    ) -> Option<i128> {
        let extra_slot = self.slots.len();
        let nets: Vec<&Net> = set
            .iter()
            .map(|&s| if s == extra_slot { extra.expect("extra") } else { self.slots[s].as_ref().expect("live") })
            .collect();
        link_solution(&nets, (link, view.topology.links[link].gbps), solved).map(|(score, _)| fixed(*score))
    }

    /// Places `net` (last in the order, as a full score would see it).
    #[cfg(test)]
    pub(super) fn insert(&mut self, view: &ClusterView<'_>, net: Net, solved: &mut Solved) {
        let with = self.with(view, &net, solved);
        self.insert_scored(net, with);
    }

    /// Forgets the kept regions' sums: the graph then scores as if it had
    /// never kept any (the tests compare the two).
    #[cfg(test)]
    pub(super) fn forget_regions(&mut self) {
        self.regions = Regions::default();
    }

    /// [`Self::insert`] with `with`, what [`Self::with`] returned for `net`
    /// on this graph: the chosen candidate is not scored again, and its
    /// region's sums with it are kept. O(links of `net` + its region).
    pub(super) fn insert_scored(&mut self, net: Net, with: Scored) {
        self.whole = with.whole;
        if let Some((region, stats)) = with.region {
            debug_assert_eq!(region.last(), Some(&self.slots.len()));
            self.regions.keep(region, stats, None, self.slots.len() + 1);
        }
        if with.rank.0 == 1 {
            self.placed += 1;
        }
        self.push(net, with.rank);
    }

    /// Takes `job` out (it lost its GPUs this round). O(links of its region).
    pub(super) fn remove(&mut self, view: &ClusterView<'_>, job: JobId, solved: &mut Solved) {
        let Some(slot) = self.slot_of.remove(&job).map(|e| e.slot) else { return };
        let Some(sending) = self.slots[slot].as_ref().map(sends) else { return };
        if sending {
            let region = self.region([slot]);
            let before = self.kept_stats(view, &region, solved);
            let Some(net) = self.slots[slot].take() else { return };
            for l in net.links.iter() {
                if let Some(on) = self.on_link.get_mut(l) {
                    on.retain(|&s| s != slot);
                }
            }
            self.split(slot);
            let rest: Vec<usize> = region.into_iter().filter(|&s| s != slot).collect();
            let (after, detail) = self.stats(view, &rest, None, solved);
            self.whole = self.whole.swap(before, after);
            self.regions.keep(rest, after, Some(Rc::new(detail)), self.slots.len());
        } else {
            self.slots[slot] = None;
        }
    }

    /// The jobs, in order (the full score's list).
    #[cfg(test)]
    pub(super) fn into_jobs(self) -> Vec<Net> {
        self.slots.into_iter().flatten().collect()
    }

    /// The slot of `job`, if it is in the graph.
    pub(super) fn slot(&self, job: JobId) -> Option<usize> {
        self.slot_of.get(&job).map(|e| e.slot)
    }

    /// The job in `slot` (a live one).
    pub(super) fn net(&self, slot: usize) -> &Net {
        self.slots[slot].as_ref().expect("a live slot")
    }

    /// Brings the graph kept from an earlier round to `running`, the jobs
    /// that hold GPUs now in the view's order (`make` derives the ones it
    /// has not seen; None leaves a job out, as a full build does). The
    /// simulator's view lists them by id; so does the graph's walk, and a
    /// merge of the two finds the jobs that left (taken out), those it
    /// does not hold (placed), and those it holds on other hosts (both).
    /// The jobs placed in the last round then rank by id like the rest,
    /// and the graph equals one built anew from `running` (same order, same
    /// sums: [`Stats::total`] is exact). False when the view is not in id
    /// order: the caller builds the graph anew. O(running + log slots) and
    /// O(region) per job that came or went.
    pub(super) fn sync<'r>(
        &mut self,
        view: &ClusterView<'_>,
        running: impl Iterator<Item = &'r crate::RunningJob<'r>>,
        mut make: impl FnMut(&crate::RunningJob<'_>) -> Option<Net>,
        solved: &mut Solved,
    ) -> bool {
        let (mut departed, mut arrived) = (Vec::new(), Vec::new());
        let mut reranked = false;
        let (slots, rank) = (&self.slots, &mut self.rank);
        let mut kept = self.slot_of.iter_mut().peekable();
        let mut last: Option<JobId> = None;
        for r in running {
            if last.is_some_and(|l| l >= r.id) {
                return false;
            }
            last = Some(r.id);
            while let Some((_, e)) = kept.next_if(|(id, _)| **id < r.id) {
                departed.push(e.slot);
            }
            let Some((_, e)) = kept.next_if(|(id, _)| **id == r.id) else {
                arrived.extend(make(r));
                continue;
            };
            // The same placement has the same hosts: an integer compared
            // instead of the job's hosts read (a cache miss a job a round).
            let same = (r.placement != 0 && e.placement == r.placement) || {
                let same = match e.inline {
                    n if usize::from(n) <= INLINE => &e.hosts[..usize::from(n)] == r.hosts,
                    _ => slots[e.slot].as_ref().is_some_and(|n| n.hosts.as_slice() == r.hosts),
                };
                if same {
                    e.placement = r.placement;
                }
                same
            };
            if !same {
                departed.push(e.slot);
                arrived.extend(make(r));
            } else if std::mem::take(&mut e.rekey) {
                rank[e.slot] = held(r.id);
                reranked = true;
            }
        }
        departed.extend(kept.map(|(_, e)| e.slot));
        if reranked {
            self.regions.forget_details();
        }
        for s in departed {
            let id = self.net(s).id;
            self.remove(view, id, solved);
        }
        for net in arrived {
            let with = self.ranked_with(view, &net, held(net.id), solved);
            self.insert_scored(net, with);
        }
        self.placed = 0;
        true
    }

    /// `slots` in the full score's order.
    pub(super) fn in_order(&self, mut slots: Vec<usize>) -> Vec<usize> {
        slots.sort_unstable_by_key(|&s| self.rank[s]);
        slots
    }

    /// Slots, live or freed: a job placed takes a new one, so they grow
    /// by one a placement; the caller builds the graph anew past twice
    /// the live ones ([`Self::live`]).
    pub(super) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// The slots of the jobs in the graph, ascending.
    pub(super) fn live_slots(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&k| self.slots[k].is_some()).collect()
    }

    /// Jobs in the graph.
    pub(super) fn live(&self) -> usize {
        self.slot_of.len()
    }

    /// The jobs connected to `seeds` through shared links, seeds included,
    /// ascending: a union of components of the link-sharing graph, so no
    /// link of theirs carries a job outside. O(links of the region × jobs
    /// per link).
    pub(super) fn region(&self, seeds: impl IntoIterator<Item = usize>) -> Vec<usize> {
        let mut seen = vec![false; self.slots.len()];
        let mut region: Vec<usize> = Vec::new();
        let take = |c: usize, seen: &mut Vec<bool>, region: &mut Vec<usize>| {
            // A component is named by one of its slots: seen, all of it is.
            if !seen[c] {
                for &m in &self.members[&c] {
                    seen[m] = true;
                    region.push(m);
                }
            }
        };
        for s in seeds {
            match self.component[s] {
                NO_COMPONENT => {
                    // A seed that sends nothing (or has left): itself, and
                    // the components of the jobs on its links.
                    if !std::mem::replace(&mut seen[s], true) {
                        region.push(s);
                    }
                    for l in self.slots[s].iter().flat_map(|n| n.links.iter()) {
                        for &o in self.on_link.get(l).map_or(&[][..], Vec::as_slice) {
                            take(self.component[o], &mut seen, &mut region);
                        }
                    }
                }
                c => take(c, &mut seen, &mut region),
            }
        }
        region.sort_unstable();
        if cfg!(test) {
            assert_eq!(region, self.region_by_search(region.clone()), "components kept");
        }
        region
    }

    /// [`Self::region`] searched link by link from `seeds`: what the kept
    /// components must give (the tests compare them).
    fn region_by_search(&self, seeds: Vec<usize>) -> Vec<usize> {
        let mut seen = vec![false; self.slots.len()];
        let mut region: Vec<usize> = Vec::new();
        for s in seeds {
            if !std::mem::replace(&mut seen[s], true) {
                region.push(s);
            }
        }
        let mut next = 0;
        while let Some(&s) = region.get(next) {
            next += 1;
            let Some(net) = self.slots[s].as_ref() else { continue };
            for l in net.links.iter() {
                for &o in self.on_link.get(l).map_or(&[][..], Vec::as_slice) {
                    if !std::mem::replace(&mut seen[o], true) {
                        region.push(o);
                    }
                }
            }
        }
        region.sort_unstable();
        region
    }

    /// `slot` has left (taken off its links): the rest of its component
    /// is searched again, link by link, and may fall into several. O(links
    /// of the component × jobs a link).
    fn split(&mut self, slot: usize) {
        let c = std::mem::replace(&mut self.component[slot], NO_COMPONENT);
        let Some(old) = self.members.remove(&c) else { return };
        for &m in &old {
            self.component[m] = NO_COMPONENT;
        }
        for &start in old.iter().filter(|&&m| m != slot) {
            if self.component[start] != NO_COMPONENT {
                continue;
            }
            self.component[start] = start;
            let mut part = vec![start];
            let mut next = 0;
            while let Some(&m) = part.get(next) {
                next += 1;
                let Some(net) = self.slots[m].as_ref() else { continue };
                for l in net.links.iter() {
                    for &o in self.on_link.get(l).map_or(&[][..], Vec::as_slice) {
                        if self.component[o] == NO_COMPONENT {
                            self.component[o] = start;
                            part.push(o);
                        }
                    }
                }
            }
            self.members.insert(start, part);
        }
    }

    /// Sums over the links of `region` (a union of components), with
    /// `extra` placed last, and the region's [`Detail`]. Links carrying the
    /// same jobs are one vertex of the Affinity graph at the lowest rate
    /// among them, as in a full score.
    fn stats(
        &self,
        view: &ClusterView<'_>,
        region: &[usize],
        extra: Option<(&Net, Rank)>,
        solved: &mut Solved,
    ) -> (Stats, Detail) {
        let extra_slot = self.slots.len();
        let extra = extra.filter(|(c, _)| sends(c));
        // The links of the region's jobs and the candidate's, each once.
        // The region is a union of components, so a link's list in
        // `on_link` holds all its jobs; the candidate's slot is the next one.
        let mut links: Vec<LinkId> = Vec::new();
        for &s in region {
            if let Some(net) = self.slots[s].as_ref().filter(|n| sends(n)) {
                links.extend_from_slice(&net.links);
            }
        }
        if let Some((c, _)) = extra {
            links.extend_from_slice(&c.links);
        }
        links.sort_unstable();
        links.dedup();
        let on_candidate = |l: LinkId| extra.is_some_and(|(c, _)| c.links.binary_search(&l).is_ok());
        let rank_of = |s: usize| if s == extra_slot { extra.map_or(held(0), |e| e.1) } else { self.rank[s] };
        // The Affinity graph's link vertices ([`link_groups`]): each set of
        // jobs (in the full score's order) that shares a link, at the
        // lowest rate among its links, the lowest id among equals. A hash
        // of the sets where a sort of every (link, job) pair of the region
        // cost O(n log n) per candidate. O(Σ jobs per link).
        let gbps = |l: LinkId| view.topology.links[l].gbps;
        let mut groups: FastMap<Vec<usize>, (Vec<LinkId>, Option<i128>)> = FastMap::default();
        let mut set: Vec<usize> = Vec::new();
        for &l in &links {
            set.clear();
            set.extend_from_slice(self.on_link.get(&l).map_or(&[][..], Vec::as_slice));
            if on_candidate(l) {
                set.push(extra_slot);
            }
            if set.len() < 2 {
                continue;
            }
            set.sort_unstable_by_key(|&s| (rank_of(s), s));
            match groups.get_mut(set.as_slice()) {
                Some((on, _)) => on.push(l),
                None => {
                    groups.insert(set.clone(), (vec![l], None));
                }
            }
        }
        let mut stats = Stats::default();
        // Union-find over the jobs of scored groups: C is the number of roots.
        let mut parent: FastMap<usize, usize> = FastMap::default();
        fn root(parent: &mut FastMap<usize, usize>, mut x: usize) -> usize {
            while let Some(&p) = parent.get(&x).filter(|&&p| p != x) {
                let grand = parent.get(&p).copied().unwrap_or(p);
                parent.insert(x, grand);
                x = p;
            }
            x
        }
        let (mut edges, mut groups_scored) = (0i64, 0i64);
        for (ks, (on, score)) in groups.iter_mut() {
            on.sort_unstable_by(|&a, &b| gbps(a).total_cmp(&gbps(b)).then(a.cmp(&b)));
            *score = self.group_score(view, ks, extra.map(|e| e.0), on[0], solved);
            let Some(score) = *score else { continue };
            stats.total += score;
            groups_scored += 1;
            edges += ks.len() as i64;
            for &k in ks.iter() {
                parent.entry(k).or_insert(k);
            }
            let r0 = root(&mut parent, ks[0]);
            for &k in &ks[1..] {
                let r = root(&mut parent, k);
                if r != r0 {
                    parent.insert(r, r0);
                }
            }
        }
        let jobs: Vec<usize> = parent.keys().copied().collect();
        let component: FastMap<usize, usize> = jobs.iter().map(|&j| (j, root(&mut parent, j))).collect();
        let components = component.iter().filter(|&(j, r)| j == r).count() as i64;
        stats.scored = groups_scored as usize;
        stats.cycles = edges - (groups_scored + jobs.len() as i64) + components;
        (stats, Detail { stats, groups, component })
    }
}

/// The Affinity graph's link vertices, from each link with the jobs that
/// send on it as `(link, job)` pairs by link, a link's jobs in the full
/// score's order (`jobs`: the pairs' jobs, in the same order). A link that carries two or more jobs is
/// shared. Links that carry the same set of jobs see the same circles and
/// get the same rotation: one vertex stands for all of them (otherwise two
/// jobs sharing both directions of an uplink would form a spurious loop),
/// at the smallest capacity of the group, the lowest link id among equals.
/// Groups in the order of their jobs. O(pairs + groups log groups).
pub(super) fn link_groups<'p>(
    view: &ClusterView<'_>,
    on_link: &[(LinkId, usize)],
    jobs: &'p [usize],
) -> Vec<(&'p [usize], LinkId)> {
    debug_assert!(on_link.is_sorted_by_key(|x| x.0) && on_link.len() == jobs.len());
    let mut shared: Vec<(&[usize], LinkId)> = Vec::new();
    let mut i = 0;
    while i < on_link.len() {
        let j = i + on_link[i..].partition_point(|x| x.0 == on_link[i].0);
        if j - i > 1 {
            shared.push((&jobs[i..j], on_link[i].0));
        }
        i = j;
    }
    let gbps = |l: LinkId| view.topology.links[l].gbps;
    shared.sort_by(|a, b| a.0.cmp(b.0).then(gbps(a.1).total_cmp(&gbps(b.1))).then(a.1.cmp(&b.1)));
    shared.dedup_by(|later, first| later.0 == first.0);
    shared
}

#[cfg(test)]
mod tests {
    use super::super::{net, score};
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{HostId, JobSpec, Priority, Work};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn scoring_a_region_equals_scoring_the_whole_placement() {
        // 4 racks of 4 two-GPU hosts under 2 spines, 2:1. Rings of 1-4
        // workers on random hosts (in a rack, across racks, on one host),
        // tried, placed (up to 6) and removed at random; after each step the graph's
        // sums must equal a full score of the same jobs in the same order.
        let t = LeafSpine::with_oversubscription(8, 2, 1, 2, "a100", 50.0, 2.0).build("g").expect("valid");
        let models = ["vgg16", "resnet50", "bert", "vgg19", "resnet18", "xlm"];
        let specs: Vec<JobSpec> = (0..60)
            .map(|i| {
                let workers = 1 + (i % 4) as u32;
                let mut s =
                    JobSpec::new(format!("j{i}"), models[i % models.len()], 32, workers, Work::Iterations(100), 0.0);
                if i % 5 == 0 {
                    s.priority = Priority::High;
                }
                s
            })
            .collect();
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &[], queue: Vec::new(), running: Vec::new() };
        let (mut loops, mut partial, mut steps) = (0, 0, 0);
        for seed in 0..8 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let random_hosts = |rng: &mut ChaCha8Rng, workers: u32| -> Vec<(HostId, u32)> {
                let mut hs: Vec<(HostId, u32)> = Vec::new();
                for _ in 0..workers {
                    let h = rng.random_range(0..t.hosts.len());
                    match hs.iter_mut().find(|x| x.0 == h) {
                        Some(x) => x.1 += 1,
                        None => hs.push((h, 1)),
                    }
                }
                hs
            };
            // The placement in the graph's order, and a full score of it.
            let mut placed: Vec<(JobId, Vec<(HostId, u32)>)> =
                (0..4).map(|i| (i, random_hosts(&mut rng, specs[i].workers))).collect();
            let nets = |placed: &[(JobId, Vec<(HostId, u32)>)]| -> Vec<Net> {
                placed.iter().map(|(id, h)| net(&view, *id, &specs[*id], h).expect("placed")).collect()
            };
            let (mut solved, mut full_solved) = (Solved::default(), Solved::default());
            let mut g = Graph::new(&view, nets(&placed), &mut solved);
            // The same graph with no region's sums kept: the kept sums must
            // be the ones scoring again gives, to the bit.
            let mut plain = Graph::new(&view, nets(&placed), &mut solved);
            for step in 0..300 {
                steps += 1;
                let id = 20 + step % 40;
                let hosts = random_hosts(&mut rng, specs[id].workers);
                let candidate = net(&view, id, &specs[id], &hosts).expect("placed");
                let tried = g.with(&view, &candidate, &mut solved);
                plain.forget_regions();
                assert_eq!(tried.whole, plain.with(&view, &candidate, &mut solved).whole, "step {step}");
                let mut with = placed.clone();
                with.push((id, hosts.clone()));
                let want = score(&view, &super::super::tests::refs(&nets(&with)), &mut full_solved);
                assert!(
                    (tried.mean() - want.mean_score).abs() < 1e-9,
                    "step {step}: {} vs {}",
                    tried.mean(),
                    want.mean_score
                );
                assert_eq!(tried.loop_free(), want.times.is_some(), "step {step}");
                loops += usize::from(want.times.is_none());
                partial += usize::from(want.mean_score < 0.999);
                if placed.len() < 4 && !placed.iter().any(|p| p.0 == id) {
                    plain.forget_regions();
                    plain.insert(&view, net(&view, id, &specs[id], &hosts).expect("placed"), &mut solved);
                    g.insert(&view, candidate, &mut solved);
                    placed = with;
                } else if !placed.is_empty() {
                    let victim = placed.remove(rng.random_range(0..placed.len())).0;
                    plain.forget_regions();
                    plain.remove(&view, victim, &mut solved);
                    g.remove(&view, victim, &mut solved);
                }
                assert_eq!(g.whole(), plain.whole(), "step {step}, placed");
                let want = score(&view, &super::super::tests::refs(&nets(&placed)), &mut full_solved);
                assert!((g.whole().mean() - want.mean_score).abs() < 1e-9, "step {step}, placed");
                assert_eq!(g.whole().loop_free(), want.times.is_some(), "step {step}, placed");
            }
            let jobs: Vec<JobId> = g.into_jobs().iter().map(|n| n.id).collect();
            assert_eq!(jobs, placed.iter().map(|p| p.0).collect::<Vec<_>>());
        }
        // The walks saw loops and loop-free graphs, and partial compatibility.
        assert!(loops > steps / 10 && loops < steps * 9 / 10, "{loops} of {steps} candidates with a loop");
        assert!(partial > steps / 10, "{partial} of {steps} partly compatible candidates");
    }
}
