//! Crux (Cao et al., "Crux: GPU-Efficient Communication Scheduling for
//! Deep Learning Training", SIGCOMM'24): a communication scheduler on top of
//! any job scheduler (`POLICY+crux`; `crux` is `fifo+crux`). Each time the
//! running set changes it:
//!
//! 1. **GPU intensity** (§3, Eq. 2): `I_j = W_j / t_j`, with `W_j` the
//!    job's computation per iteration (GPUs × compute time alone; the GPUs
//!    of a cluster are one type or scaled by speed in the compute time) and
//!    `t_j = max_e M_{j,e} / B_e` the time its iteration's traffic needs on
//!    its most loaded link.
//! 2. **Path selection** (§4.1): jobs in decreasing intensity each route
//!    every flow over the equal-cost path whose most loaded link, counting
//!    the higher-intensity jobs already routed, is least loaded
//!    (`Decision::Route`). A pass re-routes only the jobs whose inputs
//!    changed (new, re-placed, or behind a job that left, moved or took
//!    other paths on a link they could use); the others keep what the last
//!    pass chose, which is what routing them again would choose
//!    ([`Crux::pass`]; a test holds the two equal on random rounds).
//! 3. **Priority assignment** (§4.2): `P_j = k_j · I_j` (Eq. 3). The paper
//!    profiles the correction `k_j`; orrery has no profile of it and uses
//!    `k_j = 1`, so the priorities are the intensities.
//! 4. **Priority compression** (§4.3): the jobs, in decreasing priority, are
//!    cut into at most [`Crux::levels`] contiguous groups (the fabric's
//!    priority queues), minimising what merging loses: over every two jobs
//!    that share a link and land in one queue, `P_a · min(t_a, t_b)` for
//!    the higher one `a` (the work its GPUs lose while its traffic shares
//!    the link with `b`'s instead of going first; orrery's reading of the
//!    contention-DAG cut, whose weights the paper does not give in a
//!    closed form). Jobs that share no link may share a queue. Exact by dynamic
//!    programming over the cut points. Each group is a traffic class,
//!    highest first (`Decision::TrafficClass`), which the simulator serves by
//!    strict priority.
//!
//! What it does not do: place jobs, shift or pace them in time, or change a
//! job's class or route while a flow of it is in flight (the simulator
//! applies a route to the flows that start after it). On the live service a
//! node agent marks each job's class on its packets as their IP precedence
//! (`orrery_serve::node_agent::mark_script`); a fabric whose switches queue
//! by it (the testbed's `--fabric priority`) serves the classes by strict
//! priority.

use crate::memo::{FastMap, PerPlacement};
use crate::{ClusterView, Decision, JobId, Policy};
use fixedbitset::FixedBitSet;
use orrery_model::placed::{place, transfers};
use orrery_model::topology::SharedPaths;
use orrery_model::{HostId, JobSpec, LinkId, Segment, Topology};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// Crux over an inner job scheduler.
pub struct Crux {
    inner: Box<dyn Policy>,
    /// Priority queues of the fabric (classes 0 .. levels − 1).
    pub levels: u8,
    /// Class and routes last decided per job.
    classes: HashMap<JobId, u8>,
    routes: HashMap<JobId, BTreeMap<usize, usize>>,
    /// Each running job's traffic and paths, while it keeps its hosts.
    traffic: Kept,
    /// What the last pass decided for each job it routed ([`Routed`]).
    last: HashMap<JobId, Routed>,
    forget: crate::Forget,
    rounds: u64,
    /// Jobs routed by a pass, and carried over from the last one unchanged.
    routed: u64,
    carried: u64,
}

impl Crux {
    /// Priority queues by default: IEEE 802.1p's eight traffic classes.
    pub const LEVELS: u8 = 8;

    /// Crux over `inner`, with [`Crux::LEVELS`] queues.
    pub fn new(inner: Box<dyn Policy>) -> Self {
        Crux {
            inner,
            levels: Self::LEVELS,
            classes: HashMap::new(),
            routes: HashMap::new(),
            traffic: Kept::default(),
            last: HashMap::new(),
            forget: crate::Forget::default(),
            rounds: 0,
            routed: 0,
            carried: 0,
        }
    }
}

/// What one pass decided for a job, and what it decided it from: the next
/// pass reuses it while nothing it read has changed.
struct Routed {
    /// The traffic it was routed on (the same `Rc` while the job keeps its hosts).
    traffic: Rc<Traffic>,
    /// The intensity that ordered path selection, and the intensity and
    /// `t_j` (ms) on the paths chosen: the next pass's order.
    key: f64,
    intensity: f64,
    t_ms: f64,
    /// The bits per iteration its chosen paths put on each link, and
    /// those links as a set.
    mine: Rc<FastMap<LinkId, f64>>,
    links: Rc<SparseLinks>,
}

/// A set of links as its non-zero 64-bit words, by word index: a job's
/// links are numbered close together (a host's, a leaf's uplinks), so a
/// few words hold them.
struct SparseLinks(Vec<(usize, u64)>);

impl SparseLinks {
    /// O(n log n) for n links.
    fn new(links: impl Iterator<Item = LinkId>) -> Self {
        let mut words: Vec<(usize, u64)> = links.map(|l| (l / 64, 1u64 << (l % 64))).collect();
        words.sort_unstable_by_key(|w| w.0);
        let mut out: Vec<(usize, u64)> = Vec::with_capacity(words.len());
        for (i, bit) in words {
            match out.last_mut() {
                Some(last) if last.0 == i => last.1 |= bit,
                _ => out.push((i, bit)),
            }
        }
        SparseLinks(out)
    }

    /// Whether the two share a link: a merge of the words. O(words).
    fn meets(&self, other: &SparseLinks) -> bool {
        let (mut a, mut b) = (self.0.iter().peekable(), other.0.iter().peekable());
        while let (Some(&&(i, x)), Some(&&(j, y))) = (a.peek(), b.peek()) {
            match i.cmp(&j) {
                std::cmp::Ordering::Less => _ = a.next(),
                std::cmp::Ordering::Greater => _ = b.next(),
                std::cmp::Ordering::Equal if x & y != 0 => return true,
                std::cmp::Ordering::Equal => _ = (a.next(), b.next()),
            }
        }
        false
    }
}

/// A job on its hosts: (id, spec, GPUs per host).
type OnHosts<'a> = (JobId, &'a JobSpec, &'a [(HostId, u32)]);

/// One job's traffic for an iteration: its flows by index (Route's unit),
/// each transfer with its equal-cost paths, kept while the job keeps its
/// hosts ([`PerPlacement`]).
struct Traffic {
    job: JobId,
    /// GPU-ms of computation per iteration (`W_j`).
    work: f64,
    /// Flow index → its transfers between hosts, over every collective:
    /// (the pair's equal-cost paths, bits).
    flows: BTreeMap<usize, Vec<(SharedPaths, f64)>>,
    /// Flow index → per path k (0 .. the most paths any of its transfers
    /// has), the bits each link would carry, by link ([`on_path`]).
    by_path: BTreeMap<usize, Vec<Vec<(LinkId, f64)>>>,
    /// Every link any of its candidate paths crosses, ascending.
    candidate_links: Vec<LinkId>,
    /// Iteration time alone, ms.
    period_ms: f64,
}

/// The bits each link carries when every transfer of a flow takes its
/// `k`-th path, by link ascending; a link's bits add up in the transfers'
/// order. O(transfers · hops · log).
fn on_path(transfers: &[(SharedPaths, f64)], k: usize) -> Vec<(LinkId, f64)> {
    let mut all: Vec<(LinkId, f64)> =
        transfers.iter().flat_map(|(p, bits)| path_of(p, k).iter().map(move |&l| (l, *bits))).collect();
    all.sort_by_key(|x| x.0); // stable
    let mut out: Vec<(LinkId, f64)> = Vec::new();
    for (l, bits) in all {
        match out.last_mut() {
            Some(last) if last.0 == l => last.1 += bits,
            _ => out.push((l, bits)),
        }
    }
    out
}

/// A job's [`Traffic`] on a placement; None when it sends nothing.
type Kept = PerPlacement<Option<Rc<Traffic>>>;

fn traffic(topo: &Topology, job: JobId, spec: &JobSpec, hosts: &[(HostId, u32)]) -> Option<Traffic> {
    let placed = place(topo, spec, hosts)?;
    let mut flows: BTreeMap<usize, Vec<(SharedPaths, f64)>> = BTreeMap::new();
    for seg in &placed.shape.segments {
        let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
        for (i, (src, dst, bits)) in
            transfers(&placed.workers, collective, payload_bytes, group).into_iter().enumerate()
        {
            if src != dst && bits > 0.0 {
                flows.entry(i).or_default().push((topo.shared_paths(src, dst), bits));
            }
        }
    }
    let gpus: u32 = hosts.iter().map(|h| h.1).sum();
    let by_path: BTreeMap<usize, Vec<Vec<(LinkId, f64)>>> = flows
        .iter()
        .map(|(&i, tr)| {
            let choices = tr.iter().map(|(p, _)| p.len()).max().unwrap_or(1).max(1);
            (i, (0..choices).map(|k| on_path(tr, k)).collect())
        })
        .collect();
    let mut candidate_links: Vec<LinkId> = by_path.values().flatten().flatten().map(|x| x.0).collect();
    candidate_links.sort_unstable();
    candidate_links.dedup();
    (!flows.is_empty()).then(|| Traffic {
        job,
        work: f64::from(gpus) * placed.shape.compute_ms(),
        flows,
        by_path,
        candidate_links,
        period_ms: placed.shape.period_ms(),
    })
}

/// The links of a transfer's `k`-th path as the simulator reads a route:
/// the pair's `k mod paths`.
fn path_of(paths: &SharedPaths, k: usize) -> &[LinkId] {
    paths.get(k % paths.len().max(1)).map_or(&[][..], Vec::as_slice)
}

/// `t_j`: the time the bits `m` need on their most loaded link, ms.
fn slowest_link_ms<S>(topo: &Topology, m: &HashMap<LinkId, f64, S>) -> f64 {
    m.iter().map(|(&l, &bits)| bits / (topo.links[l].gbps * 1e6)).fold(0.0, f64::max)
}

/// A job's intensity on its chosen paths (`routed`), ECMP's where none is
/// chosen. O(F · T · d).
fn intensity_on_routes(topo: &Topology, t: &Traffic, routed: Option<&BTreeMap<usize, usize>>) -> f64 {
    let mut m: FastMap<LinkId, f64> = FastMap::default();
    for (&i, tr) in &t.flows {
        let k = routed.and_then(|r| r.get(&i).copied());
        for (paths, bits) in tr {
            let k = k.unwrap_or_else(|| orrery_model::topology::ecmp_index(t.job, i, paths.len().max(1)));
            for &l in path_of(paths, k) {
                *m.entry(l).or_default() += bits;
            }
        }
    }
    let t_ms = slowest_link_ms(topo, &m);
    if t_ms > 0.0 { t.work / t_ms } else { f64::INFINITY }
}

/// §4.1 for one job over the `load` (Gbit/s per link) of the jobs ahead of
/// it: each flow takes the path whose busiest link, after adding the flow,
/// is least loaded, then (on ties: a NIC all paths share is often the
/// busiest) the least sum of squared utilisations, which prefers the
/// emptier spine. Returns the bits per iteration on each link and the path
/// chosen for each flow that has a choice. O(F · P · T · d).
fn route(topo: &Topology, t: &Traffic, load: &FastMap<LinkId, f64>) -> (FastMap<LinkId, f64>, BTreeMap<usize, usize>) {
    let mut mine: FastMap<LinkId, f64> = FastMap::default();
    let mut chosen: BTreeMap<usize, usize> = BTreeMap::new();
    for ((&i, paths), by_path) in t.flows.iter().zip(t.by_path.values()) {
        let choices = by_path.len();
        let cost = |k: usize| {
            by_path[k].iter().fold((0.0f64, 0.0f64), |(max, sq), &(l, bits)| {
                let rate = (bits + mine.get(&l).copied().unwrap_or(0.0)) / t.period_ms.max(1e-9) / 1e6;
                let u = (load.get(&l).copied().unwrap_or(0.0) + rate) / topo.links[l].gbps;
                (max.max(u), sq + u * u)
            })
        };
        let k = (0..choices)
            .map(|k| (cost(k), k))
            .min_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1)).then(a.1.cmp(&b.1)))
            .map_or(0, |c| c.1);
        for (p, bits) in paths {
            for &l in path_of(p, k) {
                *mine.entry(l).or_default() += bits;
            }
        }
        if choices > 1 {
            chosen.insert(i, k);
        }
    }
    (mine, chosen)
}

/// §4.3: cut `order` (decreasing priority) into at most `levels`
/// contiguous groups minimising the weight of the contending pairs inside a
/// group; returns each position's group (0 the highest). O(levels · n²).
pub fn compress(weight: &[Vec<f64>], levels: usize) -> Vec<usize> {
    let n = weight.len();
    if n == 0 {
        return Vec::new();
    }
    let levels = levels.clamp(1, n);
    // inside[i][j]: the weight within positions i..j (j exclusive), from
    // the row below: inside[i][j] = inside[i + 1][j] + Σ_{i<b<j} w[i][b].
    // O(n²).
    let mut inside = vec![vec![0.0; n + 1]; n + 1];
    for i in (0..n).rev() {
        let (upper, lower) = inside.split_at_mut(i + 1);
        let (row, below) = (&mut upper[i], lower.first());
        let mut own = 0.0; // Σ_{i<b<j} w[i][b]
        for j in i + 1..=n {
            if j >= i + 2 {
                own += weight[i][j - 1];
            }
            row[j] = below.map_or(0.0, |r| r[j]) + own;
        }
    }
    // best[g][j]: the least weight of positions 0..j in g groups; cut[g][j]
    // where the last group starts.
    let mut best = vec![vec![f64::INFINITY; n + 1]; levels + 1];
    let mut cut = vec![vec![0usize; n + 1]; levels + 1];
    best[0][0] = 0.0;
    for g in 1..=levels {
        for j in 1..=n {
            for i in g - 1..j {
                let c = best[g - 1][i] + inside[i][j];
                if c < best[g][j] {
                    best[g][j] = c;
                    cut[g][j] = i;
                }
            }
        }
    }
    // The fewest groups that reach the least weight.
    let least = (1..=levels).map(|g| best[g][n]).fold(f64::INFINITY, f64::min);
    let groups = (1..=levels).find(|&g| best[g][n] <= least).unwrap_or(levels);
    let mut out = vec![0; n];
    let (mut g, mut j) = (groups, n);
    while g > 0 {
        let i = cut[g][j];
        out[i..j].fill(g - 1);
        j = i;
        g -= 1;
    }
    out
}

impl Crux {
    /// The decisions of one Crux pass over the jobs `running` (id, spec,
    /// hosts): routes and classes that changed.
    ///
    /// Incremental: a job keeps what the last pass chose for it while it
    /// keeps its traffic and the load the jobs ahead of it put on its
    /// candidate links is unchanged (no link of them is `dirty`: touched by
    /// a job that left, moved in the order, or changed its paths ahead of
    /// it), which is exactly what a full pass would choose again. Jobs keep
    /// their order between passes unless a route changed their intensity,
    /// so an arrival re-routes only the jobs behind it whose links it, or a
    /// job it displaced, touched. O(J · L) to find them for J jobs of L
    /// candidate links, plus O(F · P · T · d) per re-routed job of F flows
    /// of T transfers over P paths of d links ([`route`]), plus O(J² · w)
    /// for the pairs that share a link (w words of a job's
    /// [`SparseLinks`]) and the compression's O(levels · J²).
    fn pass(&mut self, topo: &Topology, running: &[OnHosts<'_>]) -> Vec<Decision> {
        let kept = &mut self.traffic;
        kept.forget_unless(running.len(), || running.iter().map(|r| r.0).collect());
        let last = std::mem::take(&mut self.last);
        // (traffic, the intensity that orders path selection, what the
        // last pass decided for it on this traffic).
        let mut jobs: Vec<(Rc<Traffic>, f64, Option<&Routed>)> = running
            .iter()
            .filter_map(|&(id, spec, hosts)| {
                kept.get(id, hosts, || traffic(topo, id, spec, hosts).map(Rc::new)).clone()
            })
            .map(|t| {
                let before =
                    last.get(&t.job).filter(|r| Rc::ptr_eq(&r.traffic, &t) && self.routes.contains_key(&t.job));
                // The intensity on its chosen paths, or ECMP's until chosen.
                let key =
                    before.map_or_else(|| intensity_on_routes(topo, &t, self.routes.get(&t.job)), |r| r.intensity);
                (t, key, before)
            })
            .collect();
        jobs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.job.cmp(&b.0.job)));
        // Links whose load from the jobs ahead may differ from the last
        // pass's: those of jobs gone, re-placed or moved in the order.
        let mut dirty = FixedBitSet::with_capacity(topo.links.len());
        let in_place: FastMap<JobId, bool> = jobs
            .iter()
            .filter_map(|(t, key, before)| Some((t.job, (*before)?.key.to_bits() == key.to_bits())))
            .collect();
        for (job, r) in &last {
            if in_place.get(job) != Some(&true) {
                r.mine.keys().for_each(|&l| dirty.insert(l));
            }
        }
        // §4.1: path selection in decreasing intensity; the load is each
        // routed job's mean rate, bits per iteration over its period.
        let mut load: FastMap<LinkId, f64> = FastMap::default();
        let mut out = Vec::new();
        let mut links_of: Vec<Rc<SparseLinks>> = Vec::with_capacity(jobs.len());
        let mut intensity_of: Vec<(f64, f64)> = Vec::with_capacity(jobs.len());
        for (t, key, before) in &jobs {
            let carried = before.filter(|_| !t.candidate_links.iter().any(|&l| dirty.contains(l)));
            let (mine, links, intensity, t_ms) = match carried {
                Some(r) => {
                    self.carried += 1;
                    (Rc::clone(&r.mine), Rc::clone(&r.links), r.intensity, r.t_ms)
                }
                None => {
                    self.routed += 1;
                    let (mine, chosen) = route(topo, t, &load);
                    let previous = self.routes.get(&t.job);
                    for (&i, &k) in &chosen {
                        if previous.and_then(|r| r.get(&i)) != Some(&k) {
                            out.push(Decision::Route { job: t.job, flow: i, paths: vec![k] });
                        }
                    }
                    self.routes.insert(t.job, chosen);
                    if before.is_none_or(|r| *r.mine != mine) {
                        mine.keys().chain(before.iter().flat_map(|r| r.mine.keys())).for_each(|&l| dirty.insert(l));
                    }
                    // t_j on the chosen paths.
                    let t_ms = slowest_link_ms(topo, &mine);
                    let links = Rc::new(SparseLinks::new(mine.keys().copied()));
                    (Rc::new(mine), links, if t_ms > 0.0 { t.work / t_ms } else { *key }, t_ms)
                }
            };
            for (&l, &bits) in mine.iter() {
                *load.entry(l).or_default() += bits / t.period_ms.max(1e-9) / 1e6;
            }
            self.last.insert(
                t.job,
                Routed { traffic: Rc::clone(t), key: *key, intensity, t_ms, mine, links: Rc::clone(&links) },
            );
            links_of.push(links);
            intensity_of.push((intensity, t_ms));
        }
        // §4.2: P_j = k_j · I_j with k_j = 1; the order of decreasing P.
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by(|&a, &b| intensity_of[b].0.total_cmp(&intensity_of[a].0).then(jobs[a].0.job.cmp(&jobs[b].0.job)));
        // §4.3: the contention weights between positions, then the cut.
        let n = order.len();
        let mut weight = vec![vec![0.0; n]; n];
        for a in 0..n {
            for b in a + 1..n {
                let (ja, jb) = (order[a], order[b]);
                if links_of[ja].meets(&links_of[jb]) {
                    weight[a][b] = intensity_of[ja].0.min(1e300) * intensity_of[ja].1.min(intensity_of[jb].1);
                }
            }
        }
        let groups = compress(&weight, usize::from(self.levels));
        for (pos, &g) in groups.iter().enumerate() {
            let job = jobs[order[pos]].0.job;
            let class = self.levels.saturating_sub(1).saturating_sub(g as u8);
            if self.classes.get(&job).copied().unwrap_or(0) != class {
                out.push(Decision::TrafficClass { job, class });
            }
            self.classes.insert(job, class);
        }
        out
    }
}

impl Policy for Crux {
    fn name(&self) -> String {
        format!("{}+crux", self.inner.name())
    }

    /// The inner scheduler's decisions, then one Crux pass over the jobs
    /// running after them.
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = self.inner.schedule(view);
        let mut gone: Vec<JobId> = Vec::new();
        let mut placed: Vec<(JobId, &JobSpec, crate::placement::Hosts)> = Vec::new();
        for d in &out {
            match d {
                Decision::Preempt { job } => gone.push(*job),
                Decision::Place { job, hosts } => {
                    gone.push(*job);
                    if let Some(spec) = view.spec_of(*job) {
                        placed.push((*job, spec, hosts.clone()));
                    }
                }
                _ => {}
            }
        }
        let mut running: Vec<OnHosts<'_>> =
            view.running.iter().filter(|r| !gone.contains(&r.id)).map(|r| (r.id, r.spec, r.hosts)).collect();
        running.extend(placed.iter().map(|(id, spec, hosts)| (*id, *spec, hosts.as_slice())));
        for &job in &gone {
            // A job placed anew starts from ECMP and the default queue again.
            self.routes.remove(&job);
            self.classes.remove(&job);
        }
        self.rounds += 1;
        out.extend(self.pass(view.topology, &running));
        if let Some(keep) = self.forget.due(view, self.classes.len() + self.routes.len()) {
            self.classes.retain(|j, _| keep.contains(j));
            self.routes.retain(|j, _| keep.contains(j));
            self.forget.pruned(self.classes.len() + self.routes.len());
        }
        out
    }

    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: crate::Iteration) -> Vec<Decision> {
        self.inner.on_iteration(view, job, it)
    }

    fn iteration_needs(&self, job: JobId, it: &crate::Iteration) -> crate::IterationNeeds {
        self.inner.iteration_needs(job, it)
    }

    fn observes_iterations(&self) -> bool {
        self.inner.observes_iterations()
    }

    fn watches(&self, job: JobId) -> bool {
        self.inner.watches(job)
    }

    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        self.inner.queue_order(view)
    }

    fn tick_s(&self) -> Option<f64> {
        self.inner.tick_s()
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let mut c = self.inner.counters();
        c.push(("crux_passes", self.rounds as f64));
        c.push(("crux_jobs_routed", self.routed as f64));
        c.push(("crux_jobs_carried", self.carried as f64));
        c
    }

    fn set_colocation(&mut self, estimate: &orrery_model::colocation::Colocation) {
        self.inner.set_colocation(estimate);
    }

    fn set_flow_sharing(&mut self, sharing: crate::FlowSharing) {
        self.inner.set_flow_sharing(sharing);
    }

    fn isolated_network(&self) -> bool {
        self.inner.isolated_network()
    }

    fn gpu_allocation(&self) -> Option<orrery_model::rails::GpuAllocation> {
        self.inner.gpu_allocation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_selection_spreads_two_jobs_over_the_spines_and_ranks_by_intensity() {
        // 2 racks of 2 hosts (8 H100s each) under 2 spines at 1:1. Two
        // Llama 3 8B meshes at TP 8 x DP 2 across the racks: a on hosts 0
        // and 2, b on 1 and 3; b at one micro-batch (half a's compute for
        // the same DP traffic), so a is the more GPU-intense.
        use orrery_model::mesh::Mesh;
        use orrery_model::setups::LeafSpine;
        let t = LeafSpine::with_oversubscription(2, 2, 2, 8, "h100", 3200.0, 1.0).build("t").expect("valid");
        let mesh = |microbatches| {
            let mut j = JobSpec::new("m", "llama3-8b", 1, 16, orrery_model::Work::Iterations(10), 0.0);
            j.parallelism = Some(Mesh { tp: 8, dp: 2, microbatches, ..Mesh::default() });
            j
        };
        let (a, b) = (mesh(2), mesh(1));
        let (ha, hb) = (vec![(0, 8), (2, 8)], vec![(1, 8), (3, 8)]);
        let mut crux = Crux::new(Box::new(crate::baseline::Pinned::default()));
        let out = crux.pass(&t, &[(0, &a, &ha), (1, &b, &hb)]);
        // a first in the highest queue, b below it.
        assert!(out.contains(&Decision::TrafficClass { job: 0, class: 7 }), "{out:?}");
        assert!(out.contains(&Decision::TrafficClass { job: 1, class: 6 }), "{out:?}");
        // The bits each leaf uplink carries per iteration on the routes
        // chosen: the two spines get equal shares (ECMP's hash need not).
        let mut m = HashMap::new();
        for (job, spec, hosts) in [(0, &a, &ha), (1, &b, &hb)] {
            let tr = traffic(&t, job, spec, hosts).expect("cross-rack traffic");
            for (i, flows) in &tr.flows {
                let k = crux.routes[&job].get(i).copied().unwrap_or(0);
                for (paths, bits) in flows {
                    for &l in path_of(paths, k) {
                        *m.entry(l).or_default() += bits;
                    }
                }
            }
        }
        let up = |leaf: usize| -> Vec<f64> {
            t.out_links(leaf)
                .iter()
                .filter(|&&l| t.links[l].to >= t.hosts.len())
                .map(|l| m.get(l).copied().unwrap_or(0.0))
                .collect()
        };
        for leaf in t.hosts.len()..t.hosts.len() + 2 {
            let loads = up(leaf);
            assert_eq!(loads.len(), 2, "two spines above leaf {leaf}");
            assert!(loads[0] > 0.0 && (loads[0] - loads[1]).abs() < 1e-9 * loads[0], "leaf {leaf}: {loads:?}");
        }
    }

    #[test]
    fn the_incremental_pass_decides_what_a_full_pass_decides() {
        // 8 racks of 4 hosts (8 H100s each) under 3 spines at 2:1: a mesh's
        // 16 flows do not split evenly over 3 spines, so where the others
        // leave room decides its routes (under 4 spines every mesh spread
        // its flows alike whatever the load, and a pass that never
        // re-routed anyone passed). Six seeds of 200 rounds of random
        // arrivals, departures and moves of Llama 3 8B meshes (TP 8 x DP
        // 2-4, 1-4 micro-batches) and VGG19 rings of 2-4 GPUs on hosts in
        // two random racks. Each round the incremental pass and a full one
        // from the same routes and classes (nothing kept from earlier
        // passes) give the same decisions, in the same order. A pass that
        // does not re-route the jobs behind a job that left, moved in the
        // order or changed its routes fails.
        use orrery_model::mesh::Mesh;
        use orrery_model::setups::LeafSpine;
        use rand::seq::SliceRandom;
        use rand::{Rng, SeedableRng};
        let t = LeafSpine::with_oversubscription(8, 4, 3, 8, "h100", 3200.0, 2.0).build("t").expect("valid");
        for seed in 1..=6 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut specs = Vec::new();
            for k in 0..40 {
                let work = orrery_model::Work::Iterations(10);
                if k % 3 == 2 {
                    // A VGG19 ring of one GPU a host: two to four flows, so a
                    // route that moves takes it off a spine.
                    specs.push(JobSpec::new(format!("v{k}"), "vgg19", 64, rng.random_range(2..=4), work, 0.0));
                    continue;
                }
                let mut j = JobSpec::new(format!("m{k}"), "llama3-8b", 1, 16, work, 0.0);
                j.parallelism = Some(Mesh {
                    tp: 8,
                    dp: rng.random_range(2..=4),
                    microbatches: rng.random_range(1..=4),
                    ..Mesh::default()
                });
                specs.push(j);
            }
            let hosts_for = |rng: &mut rand_chacha::ChaCha8Rng, spec: &JobSpec| -> Vec<(HostId, u32)> {
                // Two racks' hosts, as a rack-packing scheduler leaves them.
                let racks = [rng.random_range(0..8), rng.random_range(0..8)];
                let mut all: Vec<HostId> = racks.iter().flat_map(|r| 4 * r..4 * r + 4).collect();
                all.sort_unstable();
                all.dedup();
                all.shuffle(rng);
                let (n, gpus) = spec.parallelism.as_ref().map_or((spec.workers as usize, 1), |m| (m.dp as usize, 8));
                let mut h: Vec<(HostId, u32)> = all[..n].iter().map(|&h| (h, gpus)).collect();
                h.sort_unstable();
                h
            };
            let mut running: Vec<(JobId, Vec<(HostId, u32)>)> = Vec::new();
            let mut incremental = Crux::new(Box::new(crate::baseline::Pinned::default()));
            let mut decisions = 0;
            for round in 0..200 {
                let r = rng.random_range(0..10);
                if running.len() < 3 || (r < 5 && running.len() < specs.len()) {
                    let job = (0..specs.len()).find(|j| running.iter().all(|x| x.0 != *j)).expect("a free job");
                    running.push((job, hosts_for(&mut rng, &specs[job])));
                } else if r < 8 {
                    running.remove(rng.random_range(0..running.len()));
                } else {
                    let k = rng.random_range(0..running.len());
                    running[k].1 = hosts_for(&mut rng, &specs[running[k].0]);
                }
                let view: Vec<OnHosts<'_>> = running.iter().map(|(j, h)| (*j, &specs[*j], h.as_slice())).collect();
                let mut full = Crux::new(Box::new(crate::baseline::Pinned::default()));
                full.routes = incremental.routes.clone();
                full.classes = incremental.classes.clone();
                let got = incremental.pass(&t, &view);
                let want = full.pass(&t, &view);
                assert_eq!(got, want, "seed {seed}, round {round}");
                assert_eq!(incremental.routes, full.routes, "seed {seed}, round {round}");
                decisions += got.len();
            }
            // The rounds exercised both: routes moved, and jobs were carried over.
            let (routed, carried) = (incremental.routed, incremental.carried);
            assert!(
                decisions > 60 && carried > 100 && routed > 100,
                "seed {seed}: {decisions} decisions, {routed} routed, {carried} carried"
            );
        }
    }

    #[test]
    fn compression_keeps_contending_jobs_of_different_intensity_apart() {
        // Four jobs in decreasing priority; 0-1 and 2-3 contend heavily
        // (weights 5 and 4), 1-2 lightly (1).
        let mut w = vec![vec![0.0; 4]; 4];
        w[0][1] = 5.0;
        w[1][2] = 1.0;
        w[2][3] = 4.0;
        // One cut: after 0 leaves 1 + 4 = 5 inside; after 1 leaves 5 + 4 = 9;
        // after 2 leaves 5 + 1 = 6. Best: {0} {1, 2, 3}.
        assert_eq!(compress(&w, 2), vec![0, 1, 1, 1]);
        // Three queues: {0} {1, 2} {3} leaves 1; {0} {1} {2, 3} leaves 4.
        assert_eq!(compress(&w, 3), vec![0, 1, 1, 2]);
        // Enough queues: no contending pair shares one; jobs that contend
        // with no one are not split off for nothing.
        assert_eq!(compress(&w, 8), vec![0, 1, 2, 3]);
        let none = vec![vec![0.0; 3]; 3];
        assert_eq!(compress(&none, 8), vec![0, 0, 0]);
    }

    #[test]
    fn compression_finds_the_least_weight_of_every_cut() {
        // Random upper-triangular weights (a third of the pairs contend
        // not at all), n ≤ 9 jobs, 1-4 queues: the groups returned weigh
        // what the best of all 2^(n-1) ways to cut them into at most that
        // many contiguous groups weighs.
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let within = |w: &[Vec<f64>], group: &[usize]| -> f64 {
            let n = group.len();
            (0..n)
                .flat_map(|a| (a + 1..n).map(move |b| (a, b)))
                .filter(|&(a, b)| group[a] == group[b])
                .map(|(a, b)| w[a][b])
                .sum()
        };
        for _ in 0..300 {
            let n = rng.random_range(1..=9);
            let levels = rng.random_range(1..=4);
            let mut w = vec![vec![0.0; n]; n];
            for (a, row) in w.iter_mut().enumerate() {
                for cell in row.iter_mut().skip(a + 1) {
                    if rng.random_bool(2.0 / 3.0) {
                        *cell = rng.random_range(0.0..10.0);
                    }
                }
            }
            let got = compress(&w, levels);
            assert!(got.windows(2).all(|p| p[1] == p[0] || p[1] == p[0] + 1), "contiguous: {got:?}");
            assert!(got.last().is_none_or(|&g| g < levels), "{got:?} in {levels} queues");
            let best = (0..1u32 << n.saturating_sub(1))
                .filter(|cuts| (cuts.count_ones() as usize) < levels)
                .map(|cuts| {
                    let group: Vec<usize> = (0..n).map(|k| (cuts & ((1u32 << k) - 1)).count_ones() as usize).collect();
                    within(&w, &group)
                })
                .fold(f64::INFINITY, f64::min);
            let weight = within(&w, &got);
            assert!((weight - best).abs() <= 1e-9 * best.max(1.0), "{weight} against the best {best}: {w:?}");
        }
    }
}
