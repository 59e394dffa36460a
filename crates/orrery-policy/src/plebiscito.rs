//! `plebiscito:<utility>[:unaware]`: every queued job is placed by a
//! max-consensus auction between one agent per host (Plebiscito §IV), run
//! message by message on [`orrery_plebiscito::simnet`] with datacentre
//! latencies. The agents start each scheduling round from the cluster view:
//! free GPUs, the CPUs and memory the running jobs hold, and the bandwidth
//! their placements reserve.
//!
//! A job's reservation is the mean rate one of its workers sends when every
//! worker sits on its own host (the figure `exclusive` reserves); Eq. 9's
//! `B` is the rate it sends while communicating (the NIC rate). A job whose auction fails waits and is auctioned again only
//! after a job has left. The auction's own time (consensus plus the 500 ms
//! quiescence) is reported, not charged to the job's start.

use crate::placement::host_demand_gbps;
use crate::{ClusterView, Decision, JobId, Policy};
use orrery_model::{JobSpec, Topology};
use orrery_plebiscito::agent::{Agent, Config, Verdict};
use orrery_plebiscito::simnet::{NetConfig, SimNet, overlay};
use orrery_plebiscito::utility::{
    Arch, BidPolicy, ClusterMap, Demand, JobRequest, Placement, Resources, Usage, Utility, link_load,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Overlay degree of the agents (each talks to about this many peers).
const DEGREE: usize = 6;

/// The Plebiscito policy.
pub struct Plebiscito {
    policy: BidPolicy,
    seed: u64,
    map: Option<Arc<ClusterMap>>,
    /// Bumped whenever a job leaves: failed jobs are retried on a new epoch.
    epoch: u64,
    tried: BTreeMap<JobId, u64>,
    running: BTreeSet<JobId>,
    /// Jobs whose first auction did not place them.
    failed_first: BTreeSet<JobId>,
    seen: BTreeSet<JobId>,
    auctions: u64,
    messages: u64,
    bytes: u64,
    consensus_us: Vec<u64>,
    rounds_max: u32,
    /// Each job's request, built once: its rates come from its shape.
    requests: BTreeMap<JobId, JobRequest>,
}

impl Plebiscito {
    /// A policy bidding with `policy`; `seed` draws the agents' overlay and
    /// message latencies.
    pub fn new(policy: BidPolicy, seed: u64) -> Self {
        Plebiscito {
            policy,
            seed,
            map: None,
            epoch: 0,
            tried: BTreeMap::new(),
            running: BTreeSet::new(),
            failed_first: BTreeSet::new(),
            seen: BTreeSet::new(),
            auctions: 0,
            messages: 0,
            bytes: 0,
            consensus_us: Vec::new(),
            rounds_max: 0,
            requests: BTreeMap::new(),
        }
    }

    /// Parses `plebiscito:<utility>` or `plebiscito:<utility>:unaware`.
    pub fn by_name(name: &str, seed: u64) -> Option<Self> {
        let rest = name.strip_prefix("plebiscito:")?;
        let (u, unaware) = match rest.strip_suffix(":unaware") {
            Some(u) => (u, true),
            None => (rest, false),
        };
        let u = Utility::parse(u)?;
        Some(Plebiscito::new(if unaware { BidPolicy::unaware(u) } else { BidPolicy::aware(u) }, seed))
    }
}

/// The network the agents know: each host's leaf and NIC, each leaf's
/// uplinks summed over the spines. Hosts outside a leaf-spine share one leaf
/// with unlimited uplink.
pub fn cluster_map(t: &Topology) -> ClusterMap {
    let nic_gbps = (0..t.hosts.len()).map(|h| t.host_nic_gbps(h)).collect();
    match crate::foresight::logical::LogicalNetwork::of(t) {
        Some(l) => ClusterMap {
            leaf_of: l.leaf_of_host.iter().map(|&x| x as u16).collect(),
            nic_gbps,
            uplink_gbps: (0..l.leaves).map(|leaf| l.capacity[2 * leaf]).collect(),
        },
        None => ClusterMap { leaf_of: vec![0; t.hosts.len()], nic_gbps, uplink_gbps: vec![f64::INFINITY] },
    }
}

/// The auction's view of a job: workers on a ring, per-worker GPUs, CPUs and
/// memory, and `B` from the job's shape.
pub fn request(t: &Topology, id: JobId, spec: &JobSpec, isolated_s: f64) -> JobRequest {
    let spread: Vec<(usize, u32)> =
        (0..t.hosts.len().min(spec.workers as usize)).map(|h| (h, spec.gpus_per_worker)).collect();
    let (gbps, peak_gbps) = orrery_model::placed::place(t, spec, &spread).map_or((0.0, 0.0), |p| {
        let mean = host_demand_gbps(&p, t.hosts.len()).into_iter().fold(0.0, f64::max);
        let peak = p
            .shape
            .segments
            .iter()
            .filter_map(|s| match *s {
                orrery_model::Segment::Comm { hosts, gbps, .. } if hosts > 1 => Some(gbps),
                _ => None,
            })
            .fold(0.0, f64::max);
        (mean, peak)
    });
    JobRequest {
        id: id as u64,
        arch: Arch::Ring,
        workers: spec.workers.min(u32::from(u16::MAX)) as u16,
        worker: Demand {
            gpus: f64::from(spec.gpus_per_worker),
            cpus: spec.cpus_per_worker,
            mem_gib: spec.memory_gib_per_worker,
        },
        server: Demand::default(),
        gbps,
        peak_gbps,
        runtime_s: isolated_s,
        weight: if spec.priority == orrery_model::Priority::High { 2.0 } else { 1.0 },
    }
}

/// What the agents start a round from: each host's resources (GPUs as the
/// view has them free, CPUs and memory less what running workers hold) and
/// the bandwidth the running jobs reserve on NICs and uplinks. O(R·W) for R
/// running jobs of W workers.
pub fn cluster_state(
    view: &ClusterView<'_>,
    map: &ClusterMap,
    mut request_of: impl FnMut(&crate::RunningJob<'_>) -> JobRequest,
) -> (Vec<Resources>, Usage) {
    let t = view.topology;
    let mut res: Vec<Resources> = t
        .hosts
        .iter()
        .map(|h| Resources::new(Demand { gpus: f64::from(h.gpus), cpus: f64::from(h.cpus), mem_gib: h.memory_gib }))
        .collect();
    let mut usage = Usage::empty(map);
    for r in &view.running {
        hold(&mut res, &mut usage, map, &request_of(r), r.spec, r.hosts, 1.0);
    }
    for (h, r) in res.iter_mut().enumerate() {
        r.free.gpus = f64::from(view.free_gpus[h]);
    }
    (res, usage)
}

/// Takes (`sign` 1) or gives back (−1) what a job placed on `hosts` holds:
/// each worker's CPUs and memory on its host (its GPUs are counted by the
/// caller) and its traffic on NICs and uplinks. O(W) for W workers.
fn hold(
    res: &mut [Resources],
    usage: &mut Usage,
    map: &ClusterMap,
    req: &JobRequest,
    spec: &JobSpec,
    hosts: &[(orrery_model::HostId, u32)],
    sign: f64,
) {
    let per = spec.gpus_per_worker.max(1);
    let workers: Vec<(u32, usize)> = hosts.iter().map(|&(h, g)| (h as u32, (g / per) as usize)).collect();
    for &(h, k) in &workers {
        for _ in 0..k {
            res[h as usize].take(&Demand { gpus: 0.0, ..req.worker }, sign);
        }
    }
    let placement: Placement = vec![workers];
    usage.apply(&link_load(map, req, &placement), sign);
}

/// A running job's request, built once per job (its rates come from its shape).
fn cached_request(
    requests: &mut BTreeMap<JobId, JobRequest>,
    view: &ClusterView<'_>,
    id: JobId,
    spec: &JobSpec,
) -> JobRequest {
    requests
        .entry(id)
        .or_insert_with(|| request(view.topology, id, spec, crate::baseline::isolated_seconds(view, spec)))
        .clone()
}

/// Plebiscito's bandwidth-aware utility as a centralised placement
/// ([`orrery_plebiscito::central::greedy`]: each component on the node with the
/// highest marginal bid). Its Theorem 1 bounds the auction's outcome by this
/// greedy's, so a central scheduler gets the auction's placements without
/// its messages. Per job: O(Λ·N) bids for Λ workers on N hosts.
pub struct Bidding {
    policy: BidPolicy,
    map: Option<Arc<ClusterMap>>,
    res: Vec<Resources>,
    usage: Option<Usage>,
    requests: BTreeMap<JobId, JobRequest>,
}

impl Bidding {
    /// Bids with `utility`, bandwidth-aware (α = 0.5, δ = 0.01).
    pub fn aware(utility: Utility) -> Self {
        Bidding {
            policy: BidPolicy::aware(utility),
            map: None,
            res: Vec::new(),
            usage: None,
            requests: BTreeMap::new(),
        }
    }
}

impl crate::placement::Placement for Bidding {
    fn name(&self) -> &'static str {
        "bidding"
    }

    fn prepare(&mut self, view: &ClusterView<'_>, leaving: &[JobId]) {
        let t = view.topology;
        let map = self.map.get_or_insert_with(|| Arc::new(cluster_map(t))).clone();
        let requests = &mut self.requests;
        let (mut res, mut usage) = cluster_state(view, &map, |r| cached_request(requests, view, r.id, r.spec));
        // Jobs the round preempts hold nothing.
        for r in view.running.iter().filter(|r| leaving.contains(&r.id)) {
            hold(&mut res, &mut usage, &map, &self.requests[&r.id], r.spec, r.hosts, -1.0);
        }
        self.res = res;
        self.usage = Some(usage);
    }

    fn place(
        &mut self,
        view: &ClusterView<'_>,
        _: &[usize],
        free: &[u32],
        spec: &JobSpec,
    ) -> Option<crate::placement::Hosts> {
        let (Some(map), Some(usage)) = (&self.map, &self.usage) else { return None };
        let req = request(view.topology, 0, spec, 0.0);
        let per = spec.gpus_per_worker.max(1);
        let mut nodes = self.res.clone();
        for (node, &f) in nodes.iter_mut().zip(free) {
            // GPUs the job may take on this host, in whole workers.
            node.free.gpus = f64::from(spec.host_cap(f) / per * per);
        }
        let (placement, _) = orrery_plebiscito::central::greedy(&nodes, map, usage, &req, &self.policy).ok()?;
        Some(placement[0].iter().map(|&(n, k)| (n as usize, k as u32 * per)).collect())
    }

    fn commit(&mut self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(orrery_model::HostId, u32)]) {
        let (Some(map), Some(usage)) = (&self.map, &mut self.usage) else { return };
        hold(&mut self.res, usage, map, &request(view.topology, 0, spec, 0.0), spec, hosts, 1.0);
    }
}

impl Plebiscito {
    /// The job's request, from the cache (a job's shape is derived once).
    fn request(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> JobRequest {
        cached_request(&mut self.requests, view, id, spec)
    }
}

impl Policy for Plebiscito {
    fn name(&self) -> String {
        let aware = if self.policy.alpha < 1.0 { "" } else { ":unaware" };
        format!("plebiscito:{}{aware}", self.policy.utility.name())
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let t = view.topology;
        let now_running: BTreeSet<JobId> = view.running.iter().map(|r| r.id).collect();
        if self.running.iter().any(|id| !now_running.contains(id)) {
            self.epoch += 1;
        }
        self.running = now_running;
        let todo: Vec<_> = view.queue.iter().filter(|q| self.tried.get(&q.id) != Some(&self.epoch)).collect();
        if todo.is_empty() {
            return Vec::new();
        }
        let map = self.map.get_or_insert_with(|| Arc::new(cluster_map(t))).clone();
        let requests = &mut self.requests;
        let (res, usage) = cluster_state(view, &map, |r| cached_request(requests, view, r.id, r.spec));
        let n = res.len();
        let adj = overlay(n, DEGREE, self.seed);
        let agents: Vec<Agent> = (0..n)
            .map(|i| {
                let mut a = Agent::new(i as u32, adj[i].clone(), res[i], map.clone(), Config::new(self.policy));
                a.set_usage(usage.clone());
                a
            })
            .collect();
        let net_seed = self.seed ^ self.auctions.wrapping_mul(0x9E37_79B9);
        let mut net = SimNet::new(agents, NetConfig::reliable(net_seed));
        let mut out = Vec::new();
        for q in todo {
            let first = self.seen.insert(q.id);
            let req = self.request(view, q.id, q.spec);
            // A component no node could ever hold would wait forever.
            if !res.iter().any(|r| Resources::new(r.total).fits(&req.worker)) {
                self.seen.insert(q.id);
                self.failed_first.insert(q.id);
                let w = req.worker;
                let reason = format!(
                    "a component needs {} GPUs, {} cores and {} GiB; no node has that much",
                    w.gpus, w.cpus, w.mem_gib
                );
                out.push(Decision::Reject { job: q.id, reason });
                continue;
            }
            net.submit((q.id % n) as u32, req);
            self.auctions += 1;
            let mut placed = None;
            for (_, r) in net.settle() {
                self.messages += r.messages;
                self.bytes += r.bytes;
                self.consensus_us.push(r.consensus_us);
                self.rounds_max = self.rounds_max.max(r.rounds);
                if let Some(Verdict::Placed(p)) = r.agreed() {
                    placed = Some(p.clone());
                }
            }
            match placed {
                Some(p) => {
                    let per = q.spec.gpus_per_worker.max(1);
                    let hosts = p[0].iter().map(|&(node, k)| (node as usize, k as u32 * per)).collect();
                    out.push(Decision::Place { job: q.id, hosts });
                    // So that its departure, even before the next round, reopens waiting jobs.
                    self.running.insert(q.id);
                }
                None => {
                    if first {
                        self.failed_first.insert(q.id);
                    }
                    self.tried.insert(q.id, self.epoch);
                }
            }
        }
        out
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        let mut c = self.consensus_us.clone();
        c.sort_unstable();
        let p50 = c.get(c.len() / 2).copied().unwrap_or(0) as f64 / 1e3;
        let jobs = self.seen.len().max(1) as f64;
        vec![
            ("auctions", self.auctions as f64),
            ("allocation_failure_rate", self.failed_first.len() as f64 / jobs),
            ("messages_per_auction", self.messages as f64 / self.auctions.max(1) as f64),
            ("bytes_per_message", self.bytes as f64 / self.messages.max(1) as f64),
            ("consensus_ms_p50", p50),
            ("rounds_max", f64::from(self.rounds_max)),
        ]
    }
}

/// The policy names this module answers to.
pub fn names() -> Vec<String> {
    Utility::ALL
        .iter()
        .flat_map(|u| [format!("plebiscito:{}", u.name()), format!("plebiscito:{}:unaware", u.name())])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QueuedJob, RunningJob};
    use orrery_model::Work;

    fn running<'a>(spec: &'a JobSpec, hosts: &'a [[(usize, u32); 2]]) -> Vec<RunningJob<'a>> {
        hosts.iter().enumerate().map(|(i, h)| RunningJob::new(100 + i, spec, &h[..])).collect()
    }

    #[test]
    fn bandwidth_aware_bids_avoid_a_rack_whose_uplink_is_reserved() {
        // plebiscito-25: 5 racks of 20 hosts, 166.7 Gbps of uplink per rack.
        let t = orrery_model::setups::plebiscito(25.0);
        let mut spec = JobSpec::new("new", "vgg16", 32, 2, Work::Iterations(100), 0.0);
        spec.gpus_per_worker = 4;
        let b = request(&t, 0, &spec, 0.0).gbps;
        let mut hog = spec.clone();
        hog.gpus_per_worker = 1;
        let b_hog = request(&t, 0, &hog, 0.0).gbps;
        let uplink = cluster_map(&t).uplink_gbps[0];
        // Running two-worker jobs from rack 0 to rack 2 reserve all but less
        // than one job's B of rack 0's uplink; hosts 19 and up carry none.
        let hogs = ((uplink - 0.5 * b) / b_hog).ceil() as usize;
        assert!(b > 0.0 && hogs < 19, "B = {b}, {b_hog} Gbps needs {hogs} hogs");
        let pairs: Vec<[(usize, u32); 2]> = (0..hogs).map(|i| [(i, 1), (40 + i, 1)]).collect();
        // Only racks 0 and 1 have room: 4 GPUs per host, one worker each.
        let free: Vec<u32> = (0..t.hosts.len()).map(|h| if h < 40 { 4 } else { 0 }).collect();
        // Job 19 is auctioned first at host 19, in rack 0.
        let queued = [QueuedJob::new(19, &spec, 0.0)];
        let view = ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &free,
            queue: queued.to_vec(),
            running: running(&hog, &pairs),
        };
        let place = |name: &str| {
            let mut p = Plebiscito::by_name(name, 1).expect("name parses");
            let d = p.schedule(&view);
            let Some(Decision::Place { hosts, .. }) = d.first() else { panic!("{name}: {d:?}") };
            assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 8, "{name}");
            assert_eq!(p.counters()[..2], [("auctions", 1.0), ("allocation_failure_rate", 0.0)]);
            hosts.clone()
        };
        // Aware: rack 0's nodes bid f_net < 1, so rack 1 wins both workers.
        let aware = place("plebiscito:lgf");
        assert!(aware.iter().all(|&(h, _)| (20..40).contains(&h)), "{aware:?}");
        // Unaware (α = 1): every node bids the same, the earliest bidders
        // win, and the initiator (host 19) is one of them.
        let unaware = place("plebiscito:lgf:unaware");
        assert!(unaware.iter().any(|&(h, _)| h < 20), "{unaware:?}");
        // The same bids placed centrally (the combined policy's placement):
        // rack 1 again, and committing it reserves its rate on the NICs it
        // uses, which the next job of the round bids against.
        use crate::placement::Placement as _;
        let mut bids = Bidding::aware(Utility::Lgf);
        bids.prepare(&view, &[]);
        let nic_before = bids.usage.as_ref().expect("prepared").nic.clone();
        let first = bids.place(&view, &[], &free, &spec).expect("fits");
        assert!(first.iter().all(|&(h, g)| (20..40).contains(&h) && g == 4), "{first:?}");
        bids.commit(&view, &spec, &first);
        let nic = &bids.usage.as_ref().expect("prepared").nic;
        for &(h, _) in &first {
            assert!(
                (nic[h] - nic_before[h] - b).abs() < 1e-9,
                "host {h}: {} -> {} Gbps, B = {b}",
                nic_before[h],
                nic[h]
            );
        }
    }

    #[test]
    fn a_waiting_job_is_retried_when_a_job_it_placed_has_left() {
        let t = orrery_model::setups::plebiscito(100.0);
        let mut small = JobSpec::new("small", "resnet50", 32, 1, Work::Iterations(10), 0.0);
        small.gpus_per_worker = 8;
        let mut big = JobSpec::new("big", "resnet50", 32, 2, Work::Iterations(10), 0.0);
        big.gpus_per_worker = 8;
        let mut free = vec![0u32; t.hosts.len()];
        free[0] = 8;
        let mut p = Plebiscito::by_name("plebiscito:sgf", 1).expect("name");
        let queue = [QueuedJob::new(1, &small, 0.0), QueuedJob::new(2, &big, 0.0)];
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: queue.to_vec(), running: vec![] };
        let d = p.schedule(&view);
        assert!(matches!(d.as_slice(), [Decision::Place { job: 1, .. }]), "{d:?}");
        // Job 1 finished before the next round: its GPUs and host 1's are free.
        free[1] = 8;
        let queue = [QueuedJob::new(2, &big, 10.0)];
        let view = ClusterView { now_s: 10.0, topology: &t, free_gpus: &free, queue: queue.to_vec(), running: vec![] };
        let d = p.schedule(&view);
        assert!(matches!(d.as_slice(), [Decision::Place { job: 2, .. }]), "{d:?}");
        assert_eq!(p.counters()[1], ("allocation_failure_rate", 0.5));
    }

    #[test]
    fn a_component_larger_than_any_node_is_rejected() {
        // Alibaba's 8-GPU pods can ask for 120 cores; plebiscito nodes have 96.
        let t = orrery_model::setups::plebiscito(25.0);
        let mut spec = JobSpec::new("fat", "bert", 32, 4, Work::Iterations(10), 0.0);
        spec.gpus_per_worker = 8;
        spec.cpus_per_worker = 120.2;
        let free: Vec<u32> = t.hosts.iter().map(|h| h.gpus).collect();
        let queue = [QueuedJob::new(7, &spec, 0.0)];
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: queue.to_vec(), running: vec![] };
        let mut p = Plebiscito::by_name("plebiscito:yarn", 1).expect("name");
        let d = p.schedule(&view);
        assert!(matches!(&d[..], [Decision::Reject { job: 7, reason }] if reason.contains("120.2 cores")), "{d:?}");
    }

    #[test]
    fn names_round_trip() {
        for n in names() {
            assert_eq!(Plebiscito::by_name(&n, 0).map(|p| p.name()), Some(n));
        }
        assert!(Plebiscito::by_name("plebiscito:nope", 0).is_none());
    }
}
