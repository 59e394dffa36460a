//! Metronome's scheduler pipeline for one job (§III-B): PreFilter
//! (latency to the pods placed), Filter (a free GPU, Eq. 14's declared
//! bandwidth, the dependency-loop rule), Score (Eq. 18) with its early
//! returns, NormalizeScore (Eq. 19) and Reserve (each contended node's
//! offset scheme). Per pod, O(hosts) with the job's circle derived per
//! kind of host and each node's score once per job (memoised across jobs).

use super::{Metronome, Scheme};
use crate::memo::{FastMap, FastSet};
use crate::{ClusterView, JobId, QueuedJob};
use orrery_interleave::score::{compatibility, demand};
use orrery_interleave::unified::{CircleJob, Params, UnifiedCircle, UnifiedJob, unify};
use orrery_interleave::{Search, solve};
use orrery_model::placed::place;
use orrery_model::topology::Latencies;
use orrery_model::zoo::{Placement, model};
use orrery_model::{Circle, HostId, JobSpec};
use std::sync::Arc;

/// A communicating pod: (job, its circle, its priority). The circle is
/// shared by the job's pods and kept across rounds (a round used to copy
/// every running pod's circle: 5-8% of a run at 16,384 hosts).
pub(super) type Pod = (JobId, Arc<Circle>, orrery_model::Priority);

/// Communicating pods on each node, indexed by host and kept between
/// rounds with the hosts they were on: a round clears those and refills
/// from the running jobs, O(pods) with no allocation, where a map of a
/// vector a node cost 16,384 allocations a round at 16,384 hosts.
#[derive(Debug, Default)]
pub(super) struct NodePods {
    pods: Vec<Vec<Pod>>,
    /// The hosts with a pod, each once.
    filled: Vec<HostId>,
}

impl NodePods {
    /// Empties every node of a cluster of `hosts`. O(hosts filled).
    pub(super) fn reset(&mut self, hosts: usize) {
        for &n in &self.filled {
            if let Some(p) = self.pods.get_mut(n) {
                p.clear();
            }
        }
        self.filled.clear();
        self.pods.resize_with(hosts, Vec::new);
    }

    /// The pods on node `n`, in the order they were added.
    pub(super) fn on(&self, n: HostId) -> &[Pod] {
        self.pods.get(n).map_or(&[], Vec::as_slice)
    }

    /// Adds `pod` to node `n` (a host of the cluster [`Self::reset`] was given).
    pub(super) fn push(&mut self, n: HostId, pod: Pod) {
        if n >= self.pods.len() {
            self.pods.resize_with(n + 1, Vec::new);
        }
        if self.pods[n].is_empty() {
            self.filled.push(n);
        }
        self.pods[n].push(pod);
    }
}

/// A newcomer's circle on a kind of host, with the bits of it (and of its
/// priority and LowComm flag) a node's score depends on.
type KindCircle = (Circle, Vec<u64>);

/// A node's score and unified circle ([`score_node`]) by what they are
/// derived from: the newcomer's circle, priority and LowComm flag, and the
/// node's key ([`node_key`]). Jobs of one model arrive again and again and
/// meet the same nodes: at 16,384 hosts the search was 9% of a run.
pub(super) type ScoreMemo = FastMap<Vec<u64>, (f64, Option<UnifiedCircle>)>;

/// Entries of the score memo kept at most (it is emptied beyond): a
/// unified circle is a few kB. At 4,096 entries the search on a miss was
/// most of a job's Filter and Score; 65,536 took a third off the
/// decisions at 16,384 hosts for 64 MiB more (docs/results.md).
pub(super) const SCORE_MEMO_ENTRIES: usize = 65536;

/// A job's pods placed: GPUs per host, and the offset scheme of each node
/// where it contends (Reserve).
pub(super) struct JobPlacement {
    pub(super) hosts: Vec<(HostId, u32)>,
    pub(super) schemes: Vec<(HostId, Scheme)>,
}

/// The circle a job would have spread over `workers` hosts at `gbps`; an
/// LLM's on hosts of `host_gpus` GPUs, each GPU's share of the NIC (its
/// pods are GPUs, whole TP groups to a node).
fn circle_of(spec: &JobSpec, gpu: &str, gbps: f64, host_gpus: u32) -> Option<Circle> {
    if let Some(explicit) = &spec.shape {
        return Some(explicit.iteration(spec.workers, spec.workers, gbps).circle());
    }
    if let Some(arch) = orrery_model::mesh::llm(&spec.model) {
        let g = orrery_model::gpu::gpu_type(gpu)?;
        let per_host = host_gpus.clamp(1, spec.workers.max(1));
        let hosts = vec![per_host; spec.workers.div_ceil(per_host) as usize];
        return Some(orrery_model::placed::mesh_iteration(arch, spec, g, &hosts, (gbps, f64::INFINITY)).circle());
    }
    let m = model(&spec.model)?;
    Some(m.shape_on(gpu, spec.batch, &Placement::spread(spec.workers), gbps)?.circle())
}

/// What a node's Score (Eq. 18) depends on, for the newcomer: its GPU type
/// and rate (the newcomer's circle there) and its pods' circles and
/// priorities, in order (the unified circle's reference is the first of the
/// highest priority). O(pods · arcs).
fn node_key(gpu: &str, nic: f64, pods: &[Pod]) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    gpu.hash(&mut h);
    let mut key = vec![h.finish(), nic.to_bits()];
    for (_, c, p) in pods {
        key.push(matches!(p, orrery_model::Priority::High) as u64);
        c.push_bits(&mut key);
    }
    key
}

/// Score (Eq. 18) of a node holding `others` for the newcomer `spec` whose
/// circle there is `circle`, with the early returns: 100 when the node is
/// not contended (no other communicating pod, or their peaks and the
/// newcomer's fit the NIC), else 100 × the compatibility of the rotations
/// found, with the unified circle for Reserve. O(unify + a FastFeasible
/// search).
fn score_node(spec: &JobSpec, id: JobId, circle: &Circle, others: &[Pod], nic: f64) -> (f64, Option<UnifiedCircle>) {
    if !contended(spec, circle, others, nic) {
        return (100.0, None);
    }
    let mut circles: Vec<CircleJob> = others
        .iter()
        .map(|(id, c, p)| CircleJob { name: id.to_string(), priority: *p, circle: Circle::clone(c) })
        .collect();
    circles.push(CircleJob { name: id.to_string(), priority: spec.priority, circle: circle.clone() });
    match unify(&circles, &Params::default()) {
        Ok(u) => {
            let sol = solve(&u, nic, Search::FastFeasible);
            (100.0 * compatibility(&demand(&u, &sol.rotations), nic), Some(u))
        }
        Err(_) => (0.0, None),
    }
}

/// Whether a node holding `others` is contended for the newcomer `spec`
/// whose circle there is `circle` (Eq. 18's early returns otherwise: no
/// other communicating pod, or their peaks and the newcomer's fit the NIC).
/// O(1) on an empty node, else O((others + 1) · arcs).
fn contended(spec: &JobSpec, circle: &Circle, others: &[Pod], nic: f64) -> bool {
    if spec.low_comm || others.is_empty() {
        return false;
    }
    let bw = circle.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max);
    if bw == 0.0 {
        return false;
    }
    let total_bw: f64 = others.iter().map(|o| o.1.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max)).sum::<f64>() + bw;
    total_bw > nic
}

/// Per latency kind, whether its hosts' mean latencies (`mean`, from
/// [`Latencies::means`]) are equal bit for bit. Two hosts of one kind sum
/// the same latencies in host order but for a 0 at their own place, so
/// their means can differ in the last bit; where the sums are exact (whole
/// microseconds) they do not, and the kind's nodes are alike for a job's
/// first pod too. O(hosts).
pub(super) fn means_alike(latency: &Latencies, mean: &[f64]) -> Vec<bool> {
    let mut first: Vec<Option<u64>> = vec![None; latency.kinds()];
    let mut alike = vec![true; latency.kinds()];
    for (n, m) in mean.iter().enumerate() {
        let k = latency.kind(n);
        match first[k] {
            None => first[k] = Some(m.to_bits()),
            Some(bits) => alike[k] &= bits == m.to_bits(),
        }
    }
    alike
}

/// Eq. 19: latency scores normalised to 0–100, lower latency scoring higher.
pub fn normalize(delta: &[f64]) -> Vec<f64> {
    let lo = delta.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = delta.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    delta.iter().map(|&d| normalized(d, lo, hi)).collect()
}

/// Eq. 19 for one latency `d` among latencies from `lo` to `hi`.
fn normalized(d: f64, lo: f64, hi: f64) -> f64 {
    if hi > lo { 100.0 - (100.0 * (d - lo) / (hi - lo)).floor() } else { 100.0 - (d - lo) }
}

/// A newcomer's place in a node's existing scheme: the jobs of `old` are
/// held at their shifts and the others on the node (not on the scheme) at
/// rotation 0, summed into one fixed background on the node's unified
/// circle `u` (the newcomer last); the newcomer alone is rotated against it
/// by `search`. The background's peak is the largest of the jobs', so the
/// cushion is kept from any job the newcomer contends with. O(jobs · A) plus
/// a two-job search.
pub(super) fn newcomer_on(
    old: &Scheme,
    others: &[Pod],
    u: &UnifiedCircle,
    me: (JobId, orrery_model::Priority),
    nic: f64,
    search: Search,
) -> Scheme {
    let a = u.precision;
    let mut background = vec![0.0; a];
    for (o, uj) in others.iter().zip(&u.jobs) {
        let rel = old.jobs.iter().find(|x| x.0 == o.0).map_or(0.0, |x| x.1);
        let bins = (rel / u.perimeter_ms * a as f64).round() as usize % a;
        orrery_interleave::score::add_rotated(&mut background, &uj.demand, bins);
    }
    let newcomer = u.jobs[u.jobs.len() - 1].clone();
    let peak = u.jobs[..u.jobs.len() - 1].iter().map(|j| j.peak_gbps).fold(0.0, f64::max);
    let fixed = UnifiedJob {
        iterations: 1,
        period_ms: u.perimeter_ms,
        original_period_ms: u.perimeter_ms,
        idle_injected_ms: 0.0,
        demand: background,
        peak_gbps: peak,
    };
    let period_ms = newcomer.period_ms;
    let pair = UnifiedCircle { reference: 0, jobs: vec![fixed, newcomer], ..u.clone() };
    let shift = solve(&pair, nic, search).shifts_ms(&pair)[1];
    let mut jobs = old.jobs.clone();
    jobs.push((me.0, shift.rem_euclid(period_ms), period_ms, me.1));
    Scheme { jobs }
}

/// The kinds of host a job's circle depends on: (GPU type, NIC rate, GPUs).
#[derive(Debug, Default)]
pub(super) struct HostKinds {
    /// Each host's kind.
    kind: Vec<u32>,
    /// (GPU type, NIC Gbit/s, GPUs) of each kind.
    kinds: Vec<(String, f64, u32)>,
    /// The fastest NIC's rate, Gbit/s.
    fastest: f64,
}

impl HostKinds {
    /// O(hosts).
    pub(super) fn of(t: &orrery_model::Topology) -> HostKinds {
        let mut index: FastMap<(&str, u64, u32), u32> = FastMap::default();
        let mut kinds = Vec::new();
        let kind = (0..t.hosts.len())
            .map(|n| {
                let (gpu, nic, gpus) = (t.hosts[n].gpu_type.as_str(), t.host_nic_gbps(n), t.hosts[n].gpus);
                *index.entry((gpu, nic.to_bits(), gpus)).or_insert_with(|| {
                    kinds.push((gpu.to_string(), nic, gpus));
                    kinds.len() as u32 - 1
                })
            })
            .collect();
        let fastest = kinds.iter().map(|k| k.1).fold(0.0, f64::max);
        HostKinds { kind, kinds, fastest }
    }
}

/// Filter (a free GPU, Eq. 14's declared bandwidth, anti-affinity, the
/// dependency-loop rule) and Score (Eq. 18) of one job's pods, node by
/// node, with what they keep between its pods.
struct PodFilter<'a> {
    metronome: &'a Metronome,
    spec: &'a JobSpec,
    job: JobId,
    /// GPUs a pod takes.
    per_pod: u32,
    node_pods: &'a NodePods,
    component: &'a super::Components,
    memo: &'a mut ScoreMemo,
    /// The job's declared peak and its circle (with its key) on each kind of host.
    circles: Vec<(Option<f64>, Option<KindCircle>)>,
    /// Free GPUs once the pods chosen so far are placed.
    scratch: Vec<u32>,
    is_chosen: Vec<bool>,
    /// Each node's score (Eq. 18), an index into `scored`, derived once
    /// per job: it depends on the node's pods and the newcomer's circle,
    /// not on which pod of the job is being placed.
    score_of: Vec<u32>,
    scored: Vec<(f64, Option<UnifiedCircle>)>,
    /// A node's score depends only on its kind (GPU, rate) and on its
    /// pods' circles and priorities in order, not on which node it is:
    /// nodes alike share one unification and search (issue 43: 4,096
    /// nodes holding a handful of kinds of job). O(pods on n) a key.
    alike: FastMap<Vec<u64>, u32>,
    /// The index in `scored` of an uncontended node's score.
    uncontended: Option<u32>,
    /// Components of the Affinity graph the job reaches through the
    /// contended nodes chosen so far.
    joined: FastSet<JobId>,
    /// The jobs already on each contended node chosen so far: a node with
    /// the same jobs is the same vertex of the graph (it sees the same
    /// circles), as both hosts of a two-job ring are.
    chosen_sets: Vec<Vec<JobId>>,
}

impl PodFilter<'_> {
    fn jobs_on(&self, n: HostId) -> Vec<JobId> {
        let mut ids: Vec<JobId> = self.node_pods.on(n).iter().map(|o| o.0).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Whether the next pod may go to node `n`, with the index of its
    /// score in `scored`. O(1) once the node is scored, plus O(pods on n)
    /// for the loop rule on a contended node.
    fn filter(&mut self, n: HostId) -> Option<u32> {
        let Self { metronome, spec, circles, scratch, is_chosen, score_of, scored, node_pods, .. } = self;
        let kinds = &metronome.host_kinds;
        // Filter: a free GPU, and the pod's declared bandwidth — its peak
        // rate on the fastest NIC — within the link (Eq. 14).
        let kind = kinds.kind[n] as usize;
        let nic = kinds.kinds[kind].1;
        let (Some(peak), Some((circle, newcomer))) = &circles[kind] else { return None };
        if scratch[n] < self.per_pod || *peak > nic + 1e-9 || (spec.anti_affinity && is_chosen[n]) {
            return None;
        }
        // Score (Eq. 18) with the early returns.
        if score_of[n] == u32::MAX {
            let others = node_pods.on(n);
            score_of[n] = if contended(spec, circle, others, nic) {
                let key = node_key(&kinds.kinds[kind].0, nic, others);
                let (memo, job) = (&mut *self.memo, self.job);
                *self.alike.entry(key).or_insert_with_key(|key| {
                    let memo_key: Vec<u64> = newcomer.iter().chain(key).copied().collect();
                    let score = memo.entry(memo_key).or_insert_with(|| score_node(spec, job, circle, others, nic));
                    scored.push(score.clone());
                    scored.len() as u32 - 1
                })
            } else {
                // An uncontended node scores 100 without a search: no key
                // to build, nothing for the memo to keep.
                *self.uncontended.get_or_insert_with(|| {
                    scored.push((100.0, None));
                    scored.len() as u32 - 1
                })
            };
        }
        let s = score_of[n];
        // Filter (after Cassini): a node that would close a loop in the
        // Affinity graph is dropped, as no global offset could keep every
        // link's shifts. A contended node that is already a link of the
        // graph adds one edge, to its component; a node that becomes one
        // joins every job on it. O(pods on n).
        if self.metronome.loop_filter
            && self.scored[s as usize].1.is_some()
            && !self.is_chosen[n]
            && !self.chosen_sets.contains(&self.jobs_on(n))
        {
            let label = |j: JobId| self.component.label(j).unwrap_or(j);
            let labels: Vec<JobId> = if let Some(old) = self.metronome.schemes.get(&n) {
                vec![label(old.jobs[0].0)]
            } else {
                self.node_pods.on(n).iter().map(|o| label(o.0)).collect()
            };
            let distinct: FastSet<JobId> = labels.iter().copied().collect();
            if distinct.len() < labels.len() || distinct.iter().any(|l| self.joined.contains(l)) {
                return None;
            }
        }
        Some(s)
    }

    /// Takes node `n` (which passed [`Self::filter`]) for a pod; true when
    /// that joins Affinity graph components, which changes the loop rule's
    /// verdict on other nodes. O(pods on n).
    fn choose(&mut self, n: HostId) -> bool {
        let joins = self.scored[self.score_of[n] as usize].1.is_some() && !self.is_chosen[n];
        if joins {
            let component = self.component;
            self.joined.extend(self.node_pods.on(n).iter().map(|o| component.label(o.0).unwrap_or(o.0)));
            let set = self.jobs_on(n);
            self.chosen_sets.push(set);
        }
        self.scratch[n] -= self.per_pod;
        self.is_chosen[n] = true;
        joins
    }
}

/// PreFilter's Δ: a node's summed latency to the job's pods chosen so
/// far and to the pods of other jobs it depends on, or its mean latency
/// before there are any. Two hosts of one latency kind see the same
/// latency to every other host, so a node neither chosen nor depended on
/// has its kind's sum, kept by kind; a chosen node's own sum is kept by
/// node. O(kinds + chosen nodes) a pod, where a sum per host was O(hosts).
struct Deltas<'a> {
    latency: &'a Latencies,
    mean: &'a [f64],
    /// Per latency kind, whether its hosts' means are one ([`means_alike`]).
    mean_alike: &'a [bool],
    dependencies: Vec<HostId>,
    is_dependency: FastSet<HostId>,
    /// The sum to the chosen pods of a node of each latency kind not chosen.
    by_kind: Vec<f64>,
    /// The sum to the chosen pods of each chosen node.
    by_chosen: FastMap<HostId, f64>,
}

impl<'a> Deltas<'a> {
    fn new(latency: &'a Latencies, mean: &'a [f64], mean_alike: &'a [bool], dependencies: Vec<HostId>) -> Self {
        let is_dependency = dependencies.iter().copied().collect();
        let by_kind = vec![0.0; latency.kinds()];
        Deltas { latency, mean, mean_alike, dependencies, is_dependency, by_kind, by_chosen: FastMap::default() }
    }

    /// Whether Δ is each node's mean latency (nothing placed to be near).
    fn by_mean(&self) -> bool {
        self.by_chosen.is_empty() && self.dependencies.is_empty()
    }

    /// Whether node `n`'s Δ may differ from its latency kind's.
    fn own(&self, n: HostId) -> bool {
        if self.by_mean() {
            return !self.mean_alike[self.latency.kind(n)];
        }
        self.by_chosen.contains_key(&n) || self.is_dependency.contains(&n)
    }

    /// Whether some node's Δ is its own only while Δ is the mean latency.
    fn own_by_mean(&self) -> bool {
        self.by_mean() && self.mean_alike.iter().any(|a| !a)
    }

    /// Δ of node `n`: the same sums, in the same order, as a sum kept per
    /// host. O(dependencies).
    fn of(&self, n: HostId) -> f64 {
        if self.by_mean() {
            return self.mean[n];
        }
        let base = self.by_chosen.get(&n).copied().unwrap_or(self.by_kind[self.latency.kind(n)]);
        self.dependencies.iter().fold(base, |sum, &c| sum + self.latency.get(n, c))
    }

    /// A pod was placed on node `n`. O(kinds + chosen nodes).
    fn add(&mut self, n: HostId) {
        let kind = self.latency.kind(n);
        self.by_chosen.entry(n).or_insert(self.by_kind[kind]);
        for (&m, sum) in &mut self.by_chosen {
            *sum += self.latency.get(m, n);
        }
        for (k, sum) in self.by_kind.iter_mut().enumerate() {
            *sum += self.latency.between(k, kind);
        }
    }
}

/// The nodes the job's next pod may go to, kept between its pods. A
/// node's Filter changes only when it is chosen (its free GPUs,
/// anti-affinity), which gives it a Δ of its own, or when the chosen node
/// joins components of the Affinity graph (the loop rule), which makes
/// them all be filtered again. Nodes of one score and one Δ are kept
/// together in host order, and only the first of them can be picked, so a
/// pod costs O(kinds · scores + own nodes) where a scan was O(hosts).
#[derive(Default)]
struct Candidates {
    /// Per latency kind, its nodes whose Δ is the kind's, by score index,
    /// in host order; those before `next` were chosen.
    alike: Vec<Vec<Alike>>,
    /// Nodes with a Δ of their own, with their score index.
    own: Vec<(HostId, u32)>,
    /// Every node must be filtered again.
    stale: bool,
}

/// Nodes of one latency kind and one score.
struct Alike {
    score: u32,
    nodes: Vec<HostId>,
    next: usize,
}

impl Candidates {
    /// Brings the candidates up to date for the next pod: O(hosts) when
    /// stale, else O(own nodes).
    fn refresh(&mut self, filter: &mut PodFilter<'_>, deltas: &Deltas<'_>) {
        if !std::mem::take(&mut self.stale) {
            self.own.retain_mut(|(n, s)| filter.filter(*n).map(|x| *s = x).is_some());
            return;
        }
        self.alike.clear();
        self.alike.resize_with(deltas.latency.kinds(), Vec::new);
        self.own.clear();
        for n in 0..filter.scratch.len() {
            let Some(score) = filter.filter(n) else { continue };
            if deltas.own(n) {
                self.own.push((n, score));
                continue;
            }
            let groups = &mut self.alike[deltas.latency.kind(n)];
            match groups.iter_mut().find(|g| g.score == score) {
                Some(g) => g.nodes.push(n),
                None => groups.push(Alike { score, nodes: vec![n], next: 0 }),
            }
        }
    }

    /// Every node that can be picked, with its score index: the first of
    /// each group alike, and those with a Δ of their own.
    fn all(&self) -> impl Iterator<Item = (HostId, u32)> + '_ {
        let firsts = self.alike.iter().flatten().filter_map(|g| g.nodes.get(g.next).map(|&n| (n, g.score)));
        firsts.chain(self.own.iter().copied())
    }

    /// Node `n` was picked: it now has a Δ of its own.
    fn take(&mut self, n: HostId, filter: &PodFilter<'_>, deltas: &Deltas<'_>) {
        if self.own.iter().any(|o| o.0 == n) {
            return;
        }
        let s = filter.score_of[n];
        if let Some(g) = self.alike[deltas.latency.kind(n)].iter_mut().find(|g| g.score == s) {
            debug_assert_eq!(g.nodes.get(g.next), Some(&n), "only the first of a group is picked");
            g.next += 1;
        }
        self.own.push((n, s));
    }
}

impl Metronome {
    /// Places all pods of `job` or none; returns the hosts and the offset
    /// scheme of each node where the job contends. `component` labels the
    /// Affinity graph's components (from [`components`]).
    pub(super) fn place_job(
        &self,
        view: &ClusterView<'_>,
        job: &QueuedJob<'_>,
        free: &mut [u32],
        node_pods: &mut NodePods,
        component: &super::Components,
        memo: &mut ScoreMemo,
    ) -> Option<JobPlacement> {
        let t = view.topology;
        let spec = job.spec;
        // A mesh's pods are placed a TP group at a time, so a group never
        // spans nodes (`JobSpec::host_unit`).
        let per_pod = if spec.parallelism.is_some() { spec.host_unit() } else { spec.gpus_per_worker.max(1) };
        let kinds = &self.host_kinds;
        // The job's circle depends only on the host's kind: derived once per
        // kind, on the fastest NIC (its declared bandwidth) and on the
        // host's own, with the declared peak.
        let circles: Vec<(Option<f64>, Option<KindCircle>)> = kinds
            .kinds
            .iter()
            .map(|(gpu, nic, gpus)| {
                let Some(declared) = circle_of(spec, gpu, kinds.fastest, *gpus) else { return (None, None) };
                let peak = declared.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max);
                let own = if *nic == kinds.fastest { Some(declared) } else { circle_of(spec, gpu, *nic, *gpus) };
                // What a node's score takes from the newcomer ([`score_node`]).
                let own = own.map(|c| {
                    let mut key =
                        vec![u64::from(spec.low_comm), matches!(spec.priority, orrery_model::Priority::High) as u64];
                    c.push_bits(&mut key);
                    (c, key)
                });
                (Some(peak), own)
            })
            .collect();
        let mut filter = PodFilter {
            metronome: self,
            spec,
            job: job.id,
            per_pod,
            node_pods,
            component,
            memo,
            circles,
            scratch: free.to_vec(),
            is_chosen: vec![false; t.hosts.len()],
            score_of: vec![u32::MAX; t.hosts.len()],
            scored: Vec::new(),
            alike: FastMap::default(),
            uncontended: None,
            joined: FastSet::default(),
            chosen_sets: Vec::new(),
        };
        // PreFilter: latency to the pods it depends on that are placed (its
        // job's own so far, and its AppGroup dependencies'), or the mean.
        let mut deltas = Deltas::new(&self.latency, &self.mean_latency, &self.mean_alike, view.dependency_hosts(spec));
        let mut candidates = Candidates { stale: true, ..Candidates::default() };
        let mut chosen: Vec<HostId> = Vec::new();
        for _pod in 0..spec.gpus() / per_pod {
            candidates.refresh(&mut filter, &deltas);
            // Score's best, then NormalizeScore (Eq. 19) among the best:
            // lowest latency, or highest for LowComm; the lowest host first.
            let scores = &filter.scored;
            let max = candidates.all().map(|(_, s)| scores[s as usize].0).fold(f64::NEG_INFINITY, f64::max);
            let top: Vec<(HostId, f64)> = candidates
                .all()
                .filter(|&(_, s)| scores[s as usize].0 >= max - 1e-9)
                .map(|(n, _)| (n, deltas.of(n)))
                .collect();
            let lo = top.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
            let hi = top.iter().map(|c| c.1).fold(f64::NEG_INFINITY, f64::max);
            let (n, _) = top.iter().map(|&(n, d)| (n, normalized(d, lo, hi))).max_by(|a, b| {
                let (x, y) = if spec.low_comm { (100.0 - a.1, 100.0 - b.1) } else { (a.1, b.1) };
                x.total_cmp(&y).then(b.0.cmp(&a.0))
            })?;
            candidates.take(n, &filter, &deltas);
            if filter.choose(n) {
                candidates.stale = true;
            }
            if deltas.own_by_mean() {
                // The next pods' Δ are sums over the chosen, alike by latency kind.
                candidates.stale = true;
            }
            deltas.add(n);
            chosen.push(n);
        }
        let PodFilter { scratch, score_of, scored, .. } = filter;
        // Reserve: each contended node's offset scheme. SkipPhaseThree
        // (§III-B) keeps the Score phase's rotations when the best score is
        // not perfect (contention cannot be avoided) or the node holds two
        // jobs (the local optimum is the global one); otherwise the
        // controller's offline recalculation (§III-C) takes the best score
        // with the widest cushion, exactly up to 4 jobs. The ablation
        // without the third stage packs the newcomer against the others.
        let mut schemes: Vec<(HostId, Scheme)> = Vec::new();
        for &n in &chosen {
            let (score, Some(u)) = &scored[score_of[n] as usize] else { continue };
            if schemes.iter().any(|s| s.0 == n) {
                continue;
            }
            let skip_phase_three = *score < 100.0 - 1e-9 || u.jobs.len() == 2 || u.jobs.len() > 4;
            let search = match (self.third_stage, skip_phase_three) {
                (false, _) => Search::Compact,
                (true, true) => Search::FastFeasible,
                (true, false) => Search::OptimalCushion,
            };
            let others = node_pods.on(n);
            let me = (job.id, spec.priority);
            let scheme = match self.schemes.get(&n) {
                // The node is already a link of the Affinity graph: its jobs
                // keep their shifts (they run, paced, and other links may
                // hold them), and only the newcomer is rotated against them.
                Some(old) => newcomer_on(old, others, u, me, t.host_nic_gbps(n), search),
                // A new link: every job on it is rotated (they are in
                // different components, which the global offset rotates whole).
                None => {
                    let shifts = solve(u, t.host_nic_gbps(n), search).shifts_ms(u);
                    let ids = others.iter().map(|o| (o.0, o.2)).chain([me]);
                    let jobs = ids
                        .zip(&u.jobs)
                        .zip(&shifts)
                        .map(|(((id, priority), uj), &t)| {
                            (id, (t - shifts[u.reference]).rem_euclid(uj.period_ms), uj.period_ms, priority)
                        })
                        .collect();
                    Scheme { jobs }
                }
            };
            schemes.push((n, scheme));
        }
        // Reserve: all pods placed.
        free.copy_from_slice(&scratch);
        let hosts = crate::baseline::group_pods(&chosen, per_pod);
        let circle = place(t, spec, &hosts).map(|p| p.shape.circle());
        if let Some(c) = circle.filter(|c| !c.arcs.is_empty()).map(Arc::new) {
            for &(n, _) in &hosts {
                node_pods.push(n, (job.id, c.clone(), spec.priority));
            }
        }
        Some(JobPlacement { hosts, schemes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use proptest::prelude::*;

    proptest! {
        /// Δ kept by latency kind and by chosen node is, bit for bit, the
        /// sum a per-host array kept (each chosen pod's latency added to
        /// every host, then the dependencies'), on racks of different
        /// sizes, with pods chosen again on one host and dependencies
        /// among them.
        #[test]
        fn deltas_by_kind_are_the_sums_kept_per_host(
            racks in 2u32..5,
            hosts_per_rack in 1u32..4,
            picks in proptest::collection::vec(0usize..16, 1..10),
            deps in proptest::collection::vec(0usize..16, 0..4),
        ) {
            let t = LeafSpine {
                racks,
                hosts_per_rack,
                spines: 2,
                gpus_per_host: 8,
                gpu_type: "a100".into(),
                host_gbps: 100.0,
                uplink_gbps: 100.0,
            }
            .build("t")
            .expect("valid");
            let h = t.hosts.len();
            let latency = t.latencies_us();
            let mean = latency.means();
            let deps: Vec<HostId> = deps.iter().map(|d| d % h).collect();
            let alike = means_alike(&latency, &mean);
            let mut deltas = Deltas::new(&latency, &mean, &alike, deps.clone());
            let mut per_host = vec![0.0; h];
            for (i, pick) in picks.iter().enumerate() {
                for n in 0..h {
                    let want = if i == 0 && deps.is_empty() {
                        mean[n]
                    } else {
                        deps.iter().fold(per_host[n], |sum, &c| sum + latency.get(n, c))
                    };
                    prop_assert_eq!(deltas.of(n).to_bits(), want.to_bits(), "host {} after {} pods", n, i);
                }
                let c = pick % h;
                deltas.add(c);
                for (m, sum) in per_host.iter_mut().enumerate() {
                    *sum += latency.get(m, c);
                }
            }
        }
    }
}
