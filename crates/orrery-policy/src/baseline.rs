//! Baselines: FIFO with consolidated first-fit placement, random placement,
//! and "ideal" (FIFO placement, every job alone on the network).

use crate::{ClusterView, Decision, Policy, QueuedJob};
use orrery_model::HostId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rack of each host: the leaf switch it is cabled to (hosts without one are
/// their own rack). O(links).
pub fn racks(view: &ClusterView<'_>) -> Vec<usize> {
    let t = view.topology;
    (0..t.hosts.len()).map(|h| t.out_links(h).first().map_or(usize::MAX - h, |&l| t.links[l].to)).collect()
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
    let mut left = gpus;
    let mut out = Vec::new();
    for (_, _, hosts) in rack_list {
        for h in hosts {
            let take = free[h].min(left);
            out.push((h, take));
            left -= take;
            if left == 0 {
                return Some(out);
            }
        }
    }
    None
}

/// First-in first-out with consolidated first-fit placement; the head of the
/// queue blocks those behind it. Jobs larger than the cluster are rejected.
#[derive(Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> String {
        "fifo".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        fifo_with(view, |view, rack_of, free, job| consolidated(view, rack_of, free, job.spec.gpus()))
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
        match place(view, &rack_of, &free, job) {
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

fn fifo_with(
    view: &ClusterView<'_>,
    place: impl FnMut(&ClusterView<'_>, &[usize], &[u32], &QueuedJob<'_>) -> Option<Vec<(HostId, u32)>>,
) -> Vec<Decision> {
    in_order_with(view, &[], place)
}

/// Run time of a queued job alone on a consolidated placement, seconds
/// (the zoo's shape on the hosts of the cluster's first host type).
pub fn isolated_seconds(view: &ClusterView<'_>, spec: &orrery_model::JobSpec) -> f64 {
    match spec.work {
        orrery_model::Work::Seconds(s) => s,
        orrery_model::Work::Iterations(n) => {
            let t = view.topology;
            let per_host = t.hosts.iter().map(|h| h.gpus).max().unwrap_or(1).max(1);
            let mut left = spec.gpus().max(1);
            let mut hosts = Vec::new();
            let mut h = 0;
            while left > 0 && h < t.hosts.len() {
                let g = left.min(per_host);
                hosts.push((h, g));
                left -= g;
                h += 1;
            }
            orrery_model::placed::place(t, spec, &hosts).map_or(f64::INFINITY, |p| n as f64 * p.shape.period_ms() / 1e3)
        }
    }
}

/// Shortest-job-first or smallest-service-first (GPUs × run time alone),
/// non-preemptive, with consolidated placement and head-of-line blocking.
#[derive(Debug, Clone, Copy)]
pub struct ShortestFirst {
    /// Weigh run time by GPUs (SSF) or not (SJF).
    pub by_service: bool,
}

impl Policy for ShortestFirst {
    fn name(&self) -> String {
        if self.by_service { "ssf".into() } else { "sjf".into() }
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let key = |i: usize| {
            let spec = view.queue[i].spec;
            let t = isolated_seconds(view, spec);
            if self.by_service { t * f64::from(spec.gpus()) } else { t }
        };
        let mut order: Vec<usize> = (0..view.queue.len()).collect();
        // Ties keep arrival order (the sort is stable).
        order.sort_by(|&a, &b| key(a).total_cmp(&key(b)));
        in_order_with(view, &order, |view, rack_of, free, job| consolidated(view, rack_of, free, job.spec.gpus()))
    }
}

/// FIFO order, GPUs taken from hosts chosen uniformly at random (seeded).
#[derive(Debug)]
pub struct RandomPlacement {
    rng: ChaCha8Rng,
}

impl RandomPlacement {
    /// With a seed.
    pub fn new(seed: u64) -> Self {
        RandomPlacement { rng: ChaCha8Rng::seed_from_u64(seed) }
    }
}

impl Policy for RandomPlacement {
    fn name(&self) -> String {
        "random".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let rng = &mut self.rng;
        fifo_with(view, |_, _, free, job| random_hosts(rng, free, job.spec.gpus()))
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
            .filter(|&n| scratch[n] >= per_pod)
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

/// Kubernetes' default scheduler for GPU pods: Filter on free GPUs, then
/// NodeResourcesFit LeastAllocated (the node with the largest free share of
/// its GPUs after the pod); BalancedAllocation has one resource here and adds
/// nothing. Pods of a job therefore spread out. FIFO order.
#[derive(Debug, Default)]
pub struct K8sDefault;

impl Policy for K8sDefault {
    fn name(&self) -> String {
        "k8s-default".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let t = view.topology;
        fifo_with(view, |view, _, free, job| {
            place_pods(view, job.spec, free, |n, _, scratch| {
                let cap = f64::from(t.hosts[n].gpus.max(1));
                100.0 * (f64::from(scratch[n]) - f64::from(job.spec.gpus_per_worker.max(1))) / cap
            })
        })
    }
}

/// Diktyo (network-aware kube-scheduler plugins): NetworkOverhead scores a
/// node by the latency to the pods it depends on that are already placed —
/// here its job's other pods — lowest first, LeastAllocated breaking ties.
/// Jobs go in arrival order (TopologicalSort only reorders AppGroup members).
#[derive(Debug, Default)]
pub struct Diktyo {
    latency: Vec<Vec<f64>>,
}

impl Policy for Diktyo {
    fn name(&self) -> String {
        "diktyo".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let t = view.topology;
        if self.latency.len() != t.hosts.len() {
            self.latency = t.latency_matrix_us();
        }
        let latency = &self.latency;
        fifo_with(view, |view, _, free, job| {
            place_pods(view, job.spec, free, |n, chosen, scratch| {
                let overhead: f64 = chosen.iter().map(|&c| latency[n][c]).sum();
                let least = f64::from(scratch[n]) / f64::from(t.hosts[n].gpus.max(1));
                -1000.0 * overhead + least
            })
        })
    }
}

/// Places each job on the hosts an experiment pins it to (by job id), in
/// arrival order, when they are free; for reproducing a paper's set-up.
#[derive(Debug, Default, Clone)]
pub struct Pinned {
    /// Job id → GPUs per host.
    pub pins: std::collections::BTreeMap<String, Vec<(HostId, u32)>>,
}

impl Policy for Pinned {
    fn name(&self) -> String {
        "pinned".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let pins = &self.pins;
        fifo_with(view, |_, _, free, job| {
            let hosts = pins.get(&job.spec.id)?;
            hosts.iter().all(|&(h, g)| free.get(h).is_some_and(|&f| f >= g)).then(|| hosts.clone())
        })
    }
}

/// FIFO placement, and the driver gives every job the network to itself.
#[derive(Debug, Default)]
pub struct Ideal;

impl Policy for Ideal {
    fn name(&self) -> String {
        "ideal".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        Fifo.schedule(view)
    }

    fn isolated_network(&self) -> bool {
        true
    }
}

/// Every policy name with one line about it (`orrery policies`).
pub const CATALOGUE: &[(&str, &str)] = &[
    ("fifo", "arrival order, head-of-line blocking; consolidated first fit (one host, else fewest racks)"),
    ("sjf", "shortest run time alone first, non-preemptive; consolidated first fit"),
    ("ssf", "smallest GPU service (GPUs x run time alone) first, non-preemptive; consolidated first fit"),
    ("random", "arrival order; GPUs from hosts drawn at random (seeded)"),
    ("ideal", "FIFO placement; every job has the network to itself"),
    ("k8s-default", "kube-scheduler: pod by pod, free GPUs, LeastAllocated (pods of a job spread out); FIFO"),
    ("diktyo", "Diktyo: pod by pod, lowest latency to the job's placed pods, then LeastAllocated; FIFO"),
    (
        "metronome",
        "Metronome: filter/score (Eq. 18)/normalize (Eq. 19)/reserve per pod, priority-aware alignment, A_T/O_T",
    ),
    ("pinned", "experiment files only: each job on the hosts `[workload] pins` gives it, in arrival order"),
    (
        "HOST+cassini",
        "CASSINI Alg. 2 on any of the above: ranks 10 candidate placements by link compatibility, aligns time-shifts",
    ),
];

/// A policy by name: one of [`CATALOGUE`], or any of them `+cassini`.
pub fn by_name(name: &str, seed: u64) -> Option<Box<dyn Policy>> {
    if let Some(host) = name.strip_suffix("+cassini") {
        return by_name(host, seed)
            .map(|inner| Box::new(crate::cassini::Cassini::new(inner, seed ^ 0xCA55)) as Box<dyn Policy>);
    }
    match name {
        "fifo" => Some(Box::new(Fifo)),
        "sjf" => Some(Box::new(ShortestFirst { by_service: false })),
        "ssf" => Some(Box::new(ShortestFirst { by_service: true })),
        "random" => Some(Box::new(RandomPlacement::new(seed))),
        "ideal" => Some(Box::new(Ideal)),
        "k8s-default" => Some(Box::new(K8sDefault)),
        "diktyo" => Some(Box::new(Diktyo::default())),
        "metronome" => Some(Box::new(crate::metronome::Metronome::default())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Work};

    fn view<'a>(t: &'a orrery_model::Topology, free: &'a [u32], jobs: &'a [JobSpec]) -> ClusterView<'a> {
        ClusterView {
            now_s: 0.0,
            topology: t,
            free_gpus: free,
            queue: jobs.iter().enumerate().map(|(id, spec)| QueuedJob { id, spec, waiting_s: 0.0 }).collect(),
            running: Vec::new(),
        }
    }

    fn job(workers: u32) -> JobSpec {
        JobSpec::new("j", "vgg16", 32, workers, Work::Iterations(10), 0.0)
    }

    #[test]
    fn fifo_consolidates_into_one_rack_and_blocks_at_the_head() {
        // 4 racks × 4 hosts × 8 GPUs.
        let t = LeafSpine::with_oversubscription(4, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let mut free = vec![8u32; 16];
        free[0] = 2; // rack 0 has 26 free, the others 32.
        let jobs = [job(20), job(200), job(1)];
        let d = Fifo.schedule(&view(&t, &free, &jobs));
        // The 20-GPU job fits in one rack (rack 1, hosts 4..8): 8 + 8 + 4.
        assert_eq!(d[0], Decision::Place { job: 0, hosts: vec![(4, 8), (5, 8), (6, 4)] });
        // The 200-GPU job can never fit: rejected, and the 1-GPU job behind it runs.
        assert!(matches!(d[1], Decision::Reject { job: 1, .. }));
        assert_eq!(d[2], Decision::Place { job: 2, hosts: vec![(0, 1)] });
        // Head-of-line blocking: a job that does not fit now stops the queue.
        let jobs = [job(124), job(1)];
        assert!(Fifo.schedule(&view(&t, &free, &jobs)).is_empty());
    }

    #[test]
    fn sjf_and_ssf_order_by_run_time_and_service() {
        let t = LeafSpine::with_oversubscription(1, 2, 1, 8, "v100", 100.0, 1.0).build("t").expect("valid");
        let free = vec![8u32; 2];
        // Job 0: 8 GPUs, 100 iterations; job 1: 1 GPU, 300 iterations; job 2: 1 GPU, 10 iterations.
        let jobs = [
            JobSpec::new("a", "vgg16", 32, 8, Work::Iterations(100), 0.0),
            JobSpec::new("b", "vgg16", 32, 1, Work::Iterations(300), 0.0),
            JobSpec::new("c", "vgg16", 32, 1, Work::Iterations(10), 0.0),
        ];
        let order = |p: &mut dyn Policy| -> Vec<usize> {
            p.schedule(&view(&t, &free, &jobs))
                .iter()
                .filter_map(|d| if let Decision::Place { job, .. } = d { Some(*job) } else { None })
                .collect()
        };
        // By run time: c (10 it.), a (100 it. on one host, compute-bound), b (300 it.).
        assert_eq!(order(&mut ShortestFirst { by_service: false }), vec![2, 0, 1]);
        // By GPU service: c (1 GPU x 10), b (1 x 300), a (8 x 100).
        assert_eq!(order(&mut ShortestFirst { by_service: true }), vec![2, 1, 0]);
        assert!(by_name("ssf+cassini", 0).is_some_and(|p| p.name() == "ssf+cassini"));
        assert!(by_name("lottery", 0).is_none());
        // Every catalogued name (but the experiment-only `pinned` and the
        // `HOST+` pattern) builds.
        for (name, _) in CATALOGUE.iter().filter(|c| c.0 != "pinned" && !c.0.starts_with("HOST")) {
            assert!(by_name(name, 0).is_some(), "{name}");
        }
    }

    #[test]
    fn k8s_default_spreads_pods_and_diktyo_keeps_them_close() {
        // 2 racks x 2 hosts x 4 GPUs; host 0 has 1 GPU used.
        let t = LeafSpine::with_oversubscription(2, 2, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid");
        let free = vec![3u32, 4, 4, 4];
        let jobs = [job(2)];
        let hosts = |p: &mut dyn Policy| match &p.schedule(&view(&t, &free, &jobs))[0] {
            Decision::Place { hosts, .. } => hosts.clone(),
            other => unreachable!("{other:?}"),
        };
        // LeastAllocated: each pod to the emptiest node: hosts 1 then 2.
        assert_eq!(hosts(&mut K8sDefault), vec![(1, 1), (2, 1)]);
        // NetworkOverhead: the second pod joins the first (latency 0).
        assert_eq!(hosts(&mut Diktyo::default()), vec![(1, 2)]);
    }

    #[test]
    fn random_placement_is_seeded_and_gang() {
        let t = LeafSpine::with_oversubscription(2, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let free = vec![8u32; 8];
        let jobs = [job(12)];
        let a = RandomPlacement::new(3).schedule(&view(&t, &free, &jobs));
        let b = RandomPlacement::new(3).schedule(&view(&t, &free, &jobs));
        assert_eq!(a, b);
        let Decision::Place { hosts, .. } = &a[0] else { unreachable!("placed") };
        assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 12);
        assert!(hosts.iter().all(|&(h, g)| g <= free[h]));
    }
}
