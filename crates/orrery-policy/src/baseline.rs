//! Building blocks shared by the policies (racks, consolidated first fit
//! and its index [`FreeIndex`],
//! random hosts, pod-by-pod placement, run time alone) and the `pinned`
//! policy of experiment files. The named baselines are compositions of
//! [`crate::order`] and [`crate::placement`] ([`crate::compose`]).

use crate::{ClusterView, Decision, Policy, QueuedJob};
use orrery_model::HostId;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::BTreeSet;

/// Rack of each host: the leaf switch it is cabled to (hosts without one are
/// their own rack), as the topology keeps it. O(1).
pub fn racks<'a>(view: &ClusterView<'a>) -> &'a [usize] {
    view.topology.racks()
}

/// Consolidated first fit: the fewest racks, then the fewest hosts. Racks are
/// taken in order of most free GPUs; within a rack, hosts with the most free
/// GPUs first. None when the job does not fit. O(H log H).
pub fn consolidated(view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], gpus: u32) -> Option<Vec<(HostId, u32)>> {
    if free.iter().map(|&f| u64::from(f)).sum::<u64>() < u64::from(gpus) {
        return None;
    }
    // A single host that fits, the fullest first (best fit keeps big holes).
    if let Some(h) = (0..free.len()).filter(|&h| free[h] >= gpus).min_by_key(|&h| (free[h], h)) {
        return Some(vec![(h, gpus)]);
    }
    let mut by_rack: std::collections::BTreeMap<usize, Vec<HostId>> = std::collections::BTreeMap::new();
    for h in 0..view.topology.hosts.len() {
        if free[h] > 0 {
            by_rack.entry(rack_of[h]).or_default().push(h);
        }
    }
    let mut rack_list: Vec<(u32, usize, Vec<HostId>)> = by_rack
        .into_iter()
        .map(|(r, mut hs)| {
            hs.sort_by_key(|&h| (std::cmp::Reverse(free[h]), h));
            (hs.iter().map(|&h| free[h]).sum(), r, hs)
        })
        .collect();
    rack_list.sort_by_key(|(f, r, _)| (std::cmp::Reverse(*f), *r));
    let mut out = Vec::new();
    let left = take_in_order(free, rack_list.into_iter().flat_map(|(_, _, hosts)| hosts), gpus, &mut out);
    (left == 0 && !out.is_empty()).then_some(out)
}

/// Takes `gpus` from `hosts` in the order given, each host's free GPUs up
/// to what is left, appending (host, GPUs) to `out`; returns what is left
/// (0 when they sufficed). O(hosts taken).
pub fn take_in_order(
    free: &[u32],
    hosts: impl IntoIterator<Item = HostId>,
    gpus: u32,
    out: &mut Vec<(HostId, u32)>,
) -> u32 {
    let mut left = gpus;
    for h in hosts {
        if left == 0 {
            break;
        }
        let take = free[h].min(left);
        out.push((h, take));
        left -= take;
    }
    left
}

/// The free GPUs of every host, indexed so that [`consolidated`]'s choice
/// costs what it takes: O(log H) for one host, O(m log H) for a placement
/// over m hosts, and O(log H) per host whose count changes, where the slice
/// version scans and sorts all H hosts (O(H log H)). Built once per round,
/// O(H log H), for rounds that place many jobs, such as growing every
/// running job when nobody waits ([`crate::castor::colocate`]).
#[derive(Debug, Clone)]
pub struct FreeIndex {
    free: Vec<u32>,
    total: u64,
    /// Dense rack number of each host.
    rack: Vec<usize>,
    /// Hosts with free GPUs by (free, host): the best single-host fit.
    by_free: BTreeSet<(u32, HostId)>,
    /// Free GPUs per rack, over its hosts.
    rack_free: Vec<u32>,
    /// Racks with free GPUs, most first (ties: the lower rack id first).
    racks: BTreeSet<(Reverse<u32>, usize, usize)>,
    /// Per dense rack: its id in [`racks`].
    rack_id: Vec<usize>,
    /// Per dense rack: its hosts with free GPUs, most first.
    in_rack: Vec<BTreeSet<(Reverse<u32>, HostId)>>,
}

impl FreeIndex {
    /// The index of `free` (GPUs per host) with the racks of `rack_of`
    /// ([`racks`]). O(H log H).
    pub fn new(free: &[u32], rack_of: &[usize]) -> FreeIndex {
        let mut ids: Vec<usize> = rack_of.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let rack: Vec<usize> = rack_of.iter().map(|r| ids.binary_search(r).unwrap_or(0)).collect();
        let mut index = FreeIndex {
            free: vec![0; free.len()],
            total: 0,
            rack,
            by_free: BTreeSet::new(),
            rack_free: vec![0; ids.len()],
            racks: BTreeSet::new(),
            in_rack: vec![BTreeSet::new(); ids.len()],
            rack_id: ids,
        };
        for (h, &f) in free.iter().enumerate() {
            index.set(h, f);
        }
        index
    }

    /// Free GPUs per host.
    pub fn free(&self) -> &[u32] {
        &self.free
    }

    /// Free GPUs in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Brings the index in step with `free` (as long as its own) by their
    /// differences: O(H) compares and O(log H) per host that changed,
    /// where building it anew is O(H log H).
    pub fn sync(&mut self, free: &[u32]) {
        for (h, &f) in free.iter().enumerate() {
            if self.free[h] != f {
                self.set(h, f);
            }
        }
    }

    /// Sets host `h`'s free GPUs. O(log H).
    pub fn set(&mut self, h: HostId, to: u32) {
        let (was, r) = (self.free[h], self.rack[h]);
        if was == to {
            return;
        }
        if was > 0 {
            self.by_free.remove(&(was, h));
            self.in_rack[r].remove(&(Reverse(was), h));
        }
        if to > 0 {
            self.by_free.insert((to, h));
            self.in_rack[r].insert((Reverse(to), h));
        }
        let (rack_was, id) = (self.rack_free[r], self.rack_id[r]);
        let rack_to = rack_was - was + to;
        if rack_was > 0 {
            self.racks.remove(&(Reverse(rack_was), id, r));
        }
        if rack_to > 0 {
            self.racks.insert((Reverse(rack_to), id, r));
        }
        self.rack_free[r] = rack_to;
        self.total = self.total - u64::from(was) + u64::from(to);
        self.free[h] = to;
    }

    /// Returns `hosts`' GPUs to the free ones. O(m log H).
    pub fn give_back(&mut self, hosts: &[(HostId, u32)]) {
        for &(h, g) in hosts {
            self.set(h, self.free[h] + g);
        }
    }

    /// Takes `hosts`' GPUs from the free ones. O(m log H).
    pub fn take(&mut self, hosts: &[(HostId, u32)]) {
        for &(h, g) in hosts {
            self.set(h, self.free[h] - g);
        }
    }

    /// [`consolidated`] on these free GPUs: the same hosts, in the same
    /// order. O(log H) when one host fits, else O(m log H) for the m hosts
    /// taken.
    pub fn consolidated(&self, gpus: u32) -> Option<Vec<(HostId, u32)>> {
        if self.total < u64::from(gpus) {
            return None;
        }
        if gpus == 0 {
            // Every host fits; the slice version takes the emptiest, lowest.
            return Some(vec![((0..self.free.len()).min_by_key(|&h| (self.free[h], h))?, 0)]);
        }
        if let Some(&(_, h)) = self.by_free.range((gpus, 0)..).next() {
            return Some(vec![(h, gpus)]);
        }
        let mut out = Vec::new();
        let hosts = self.racks.iter().flat_map(|&(_, _, r)| self.in_rack[r].iter().map(|&(_, h)| h));
        (take_in_order(&self.free, hosts, gpus, &mut out) == 0).then_some(out)
    }
}

/// Walks the queue in `order` (arrival order when empty), placing each job
/// with `place`; the first job that does not fit blocks those behind it.
/// Jobs larger than the cluster are rejected.
fn in_order_with(
    view: &ClusterView<'_>,
    order: &[usize],
    mut place: impl FnMut(&ClusterView<'_>, &[usize], &[u32], &QueuedJob<'_>) -> Option<Vec<(HostId, u32)>>,
) -> Vec<Decision> {
    let rack_of = racks(view);
    let mut free = view.free_gpus.to_vec();
    let total = view.topology.gpu_count();
    let mut out = Vec::new();
    let queue: Vec<&QueuedJob<'_>> =
        if order.is_empty() { view.queue.iter().collect() } else { order.iter().map(|&i| &view.queue[i]).collect() };
    for job in queue {
        if job.spec.gpus() > total || job.spec.gpus() == 0 {
            out.push(Decision::Reject {
                job: job.id,
                reason: format!("needs {} GPUs; the cluster has {total}", job.spec.gpus()),
            });
            continue;
        }
        match place(view, rack_of, &free, job) {
            Some(hosts) => {
                for &(h, g) in &hosts {
                    free[h] -= g;
                }
                out.push(Decision::Place { job: job.id, hosts });
            }
            None => break,
        }
    }
    out
}

/// `gpus` GPUs packed onto the first hosts, as full as the largest host:
/// the reference placement for run times alone. O(hosts).
pub fn packed(t: &orrery_model::Topology, gpus: u32) -> Vec<(HostId, u32)> {
    let per_host = t.hosts.iter().map(|h| h.gpus).max().unwrap_or(1).max(1);
    let mut left = gpus;
    (0..t.hosts.len())
        .map_while(|h| {
            (left > 0).then(|| {
                let g = left.min(per_host);
                left -= g;
                (h, g)
            })
        })
        .collect()
}

/// Run time of a queued job alone on a consolidated placement, seconds
/// (the zoo's shape on the hosts of the cluster's first host type).
pub fn isolated_seconds(view: &ClusterView<'_>, spec: &orrery_model::JobSpec) -> f64 {
    isolated_seconds_on(view.topology, spec)
}

/// [`isolated_seconds`] on a topology: the job alone, packed from host 0.
pub fn isolated_seconds_on(t: &orrery_model::Topology, spec: &orrery_model::JobSpec) -> f64 {
    match spec.work {
        orrery_model::Work::Seconds(s) => s,
        orrery_model::Work::Iterations(n) => orrery_model::placed::place(t, spec, &packed(t, spec.gpus().max(1)))
            .map_or(f64::INFINITY, |p| n as f64 * p.shape.period_ms() / 1e3),
    }
}

/// `gpus` GPUs from hosts drawn uniformly at random among those with free
/// GPUs, a random number from each; None when they do not fit. O(H).
pub fn random_hosts(rng: &mut ChaCha8Rng, free: &[u32], gpus: u32) -> Option<Vec<(HostId, u32)>> {
    let mut left = gpus;
    if free.iter().map(|&f| u64::from(f)).sum::<u64>() < u64::from(left) {
        return None;
    }
    let mut hosts: Vec<HostId> = (0..free.len()).filter(|&h| free[h] > 0).collect();
    hosts.shuffle(rng);
    let mut out = Vec::new();
    for h in hosts {
        let take = rng.random_range(1..=free[h].min(left));
        out.push((h, take));
        left -= take;
        if left == 0 {
            break;
        }
    }
    // Top up from the chosen hosts if the random takes fell short.
    for (h, g) in out.iter_mut() {
        let more = (free[*h] - *g).min(left);
        *g += more;
        left -= more;
    }
    (left == 0).then_some(out)
}

/// Places a job pod by pod (one pod per worker) like kube-scheduler: for
/// each pod, the feasible node with the highest `score(node, chosen so far,
/// free GPUs)` (ties: lowest index); all pods or none. O(workers · H).
pub fn place_pods(
    view: &ClusterView<'_>,
    spec: &orrery_model::JobSpec,
    free: &[u32],
    mut score: impl FnMut(HostId, &[HostId], &[u32]) -> f64,
) -> Option<Vec<(HostId, u32)>> {
    let per_pod = spec.gpus_per_worker.max(1);
    let mut scratch = free.to_vec();
    let mut chosen: Vec<HostId> = Vec::new();
    for _ in 0..spec.workers {
        let n = (0..view.topology.hosts.len())
            .filter(|&n| scratch[n] >= per_pod && !(spec.anti_affinity && chosen.contains(&n)))
            .map(|n| (n, score(n, &chosen, &scratch)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))?
            .0;
        scratch[n] -= per_pod;
        chosen.push(n);
    }
    Some(group_pods(&chosen, per_pod))
}

/// GPUs per host for pods placed on `nodes` (one entry per pod), in order of
/// first use.
pub fn group_pods(nodes: &[HostId], per_pod: u32) -> Vec<(HostId, u32)> {
    let mut hosts: Vec<(HostId, u32)> = Vec::new();
    for &n in nodes {
        match hosts.iter_mut().find(|h| h.0 == n) {
            Some(h) => h.1 += per_pod,
            None => hosts.push((n, per_pod)),
        }
    }
    hosts
}

/// Places each job on the hosts an experiment pins it to (by job id), in
/// arrival order, when they are free; for reproducing a paper's set-up.
#[derive(Debug, Default, Clone)]
pub struct Pinned {
    /// Job id → GPUs per host.
    pub pins: std::collections::BTreeMap<String, Vec<(HostId, u32)>>,
    /// Name in results (default `pinned`; FORESIGHT's baseline calls it `ecmp`).
    pub label: Option<String>,
}

impl Policy for Pinned {
    fn name(&self) -> String {
        self.label.clone().unwrap_or_else(|| "pinned".into())
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let pins = &self.pins;
        in_order_with(view, &[], |_, _, free, job| {
            let hosts = pins.get(&job.spec.id)?;
            hosts.iter().all(|&(h, g)| free.get(h).is_some_and(|&f| f >= g)).then(|| hosts.clone())
        })
    }
}

/// `pinned:in-step`: the pinned placement with every job's first iteration
/// held to one common start, [`IN_STEP_LEAD_S`] after the first placement
/// (a one-entry `Timetable`), and free after it. Unshifted rings that start
/// together stay in step, the condition the fluid model and CASSINI's RDMA
/// testbed share (§2.2); on real TCP rings that start a few milliseconds
/// apart often drift apart and interleave by themselves, so this is the
/// testbed's controlled unshifted baseline (issue 36).
///
/// `pinned:apart` holds each later job's first iteration a further half of
/// its modelled iteration after the one before: rings started half a
/// period apart (issue 73: a shift must converge from any start).
#[derive(Debug, Default, Clone)]
pub struct InStep {
    /// The placement.
    pub pinned: Pinned,
    /// The common first start, seconds since the start.
    start_s: Option<f64>,
    /// Each later job's first start after the one before, as a fraction of
    /// its modelled iteration (0: in step).
    pub stagger: f64,
    /// First starts handed out so far, and the latest, s.
    started: usize,
    latest_s: f64,
}

/// How long after the first placement the jobs of `pinned:in-step` start
/// together, s: long enough for every rank to start (a PyTorch DDP rank
/// takes about 10 s to import torch and join its group on the testbed).
pub const IN_STEP_LEAD_S: f64 = 20.0;

impl InStep {
    /// In step on `pinned`'s placement.
    pub fn new(pinned: Pinned) -> Self {
        InStep { pinned, ..InStep::default() }
    }

    /// Rings started half a modelled iteration apart, in arrival order.
    pub fn apart(pinned: Pinned) -> Self {
        InStep { stagger: 0.5, ..InStep::new(pinned) }
    }
}

impl Policy for InStep {
    fn name(&self) -> String {
        if self.stagger > 0.0 { "pinned:apart".into() } else { "pinned:in-step".into() }
    }

    /// O(placed jobs) on top of `pinned`'s.
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let placed = self.pinned.schedule(view);
        let mut out = Vec::with_capacity(2 * placed.len());
        for d in placed {
            if let Decision::Place { job, ref hosts } = d {
                let first_s = *self.start_s.get_or_insert(view.now_s + IN_STEP_LEAD_S);
                let period_s = view
                    .queue
                    .iter()
                    .find(|q| q.id == job)
                    .and_then(|q| orrery_model::placed::place(view.topology, q.spec, hosts))
                    .map_or(0.0, |p| p.shape.period_ms() / 1e3);
                let start_s = if self.started == 0 { first_s } else { self.latest_s + self.stagger * period_s };
                self.started += 1;
                self.latest_s = start_s;
                out.push(d);
                out.push(Decision::Timetable { job, from_iteration: 0, starts_s: vec![start_s] });
            } else {
                out.push(d);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use proptest::prelude::*;

    proptest! {
        /// The index chooses what the slice version chooses, host for host,
        /// through a sequence of placements and returns: 4 racks of 4 hosts
        /// of 8 GPUs with random free counts.
        #[test]
        fn the_free_index_places_as_consolidated_does(
            free in proptest::collection::vec(0u32..=8, 16),
            steps in proptest::collection::vec((1u32..=40, any::<bool>()), 1..30),
        ) {
            let topo = LeafSpine {
                racks: 4,
                hosts_per_rack: 4,
                spines: 2,
                gpus_per_host: 8,
                gpu_type: "a100".into(),
                host_gbps: 100.0,
                uplink_gbps: 100.0,
            }
            .build("index")
            .expect("valid");
            let view = ClusterView { now_s: 0.0, topology: &topo, free_gpus: &free, queue: vec![], running: vec![] };
            let rack_of = racks(&view);
            let mut index = FreeIndex::new(&free, rack_of);
            let mut slice = free.clone();
            let mut placed: Vec<Vec<(HostId, u32)>> = Vec::new();
            for (gpus, give_back) in steps {
                if give_back && let Some(hosts) = placed.pop() {
                    index.give_back(&hosts);
                    for (h, g) in hosts {
                        slice[h] += g;
                    }
                }
                let want = consolidated(&view, rack_of, &slice, gpus);
                prop_assert_eq!(&index.consolidated(gpus), &want);
                if let Some(hosts) = want {
                    index.take(&hosts);
                    for &(h, g) in &hosts {
                        slice[h] -= g;
                    }
                    placed.push(hosts);
                }
                prop_assert_eq!(index.free(), &slice[..]);
                prop_assert_eq!(index.total(), slice.iter().map(|&f| u64::from(f)).sum::<u64>());
            }
        }
    }
}
