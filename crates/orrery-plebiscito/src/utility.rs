//! Plebiscito's utility library (§III-B, Table I, Eqs. 7-11), the jobs it
//! places and each agent's view of the network.
//!
//! A bid is `U = α·f_comp + (1 − α)·f_net` (Eq. 10), warped by `δ` per
//! component the node already offers (Eq. 11). Table I's compute fractions
//! have different scales (SGF is negative, Tiresias is in seconds); each is
//! mapped onto `[0, 1]` here, higher is better, so that `α` weighs like
//! against like. The mapping is stated beside each variant.

use serde::{Deserialize, Serialize};

/// How a job's workers exchange gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Arch {
    /// Ring all-reduce: each worker sends `B` to the next one.
    Ring,
    /// One parameter server: every worker sends `B` to it and gets `B` back.
    ParameterServer,
}

/// What one component needs of a node.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Demand {
    /// GPUs.
    pub gpus: f64,
    /// CPU cores.
    pub cpus: f64,
    /// Memory, GiB.
    pub mem_gib: f64,
}

/// A job to place: `workers` identical components (and a parameter server
/// for [`Arch::ParameterServer`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRequest {
    /// Job id, unique in the cluster.
    pub id: u64,
    /// Communication pattern.
    pub arch: Arch,
    /// Number of workers (Λ, or Λ − 1 with a parameter server).
    pub workers: u16,
    /// Per-worker demand.
    pub worker: Demand,
    /// The parameter server's demand (only with [`Arch::ParameterServer`]).
    pub server: Demand,
    /// Mean rate each worker sends, Gbit/s, averaged over an iteration:
    /// what a placement reserves on its links (constraint 4).
    pub gbps: f64,
    /// Rate each worker sends while it communicates, Gbit/s: `B_{j,λ}` of
    /// Eq. 9. Reserving this peak would make every NIC exclusive, so it only
    /// scores the residual bandwidth. 0 (the default) means `gbps`.
    #[serde(default)]
    pub peak_gbps: f64,
    /// Expected run time, s (Tiresias' `t_j`).
    pub runtime_s: f64,
    /// Priority weight (Tiresias' `W_j`).
    pub weight: f64,
}

impl JobRequest {
    /// Component counts per role: `[workers]`, or `[workers, 1]` with a
    /// parameter server.
    pub fn roles(&self) -> Vec<usize> {
        match self.arch {
            Arch::Ring => vec![usize::from(self.workers)],
            Arch::ParameterServer => vec![usize::from(self.workers), 1],
        }
    }

    /// Demand of one component of `role`.
    pub fn demand(&self, role: usize) -> Demand {
        if role == 0 { self.worker } else { self.server }
    }

    /// Checks what a job says of itself, whoever sent it: at least one
    /// worker, every number finite and not negative, each component asking
    /// for something (GPUs, CPUs or memory). The error names the field.
    pub fn check(&self) -> Result<(), BadRequest> {
        let bad = |field: &'static str, expected: String| BadRequest { job: self.id, field, expected };
        if self.workers == 0 {
            return Err(bad("workers", "at least 1, found 0".into()));
        }
        if usize::from(self.workers) > MAX_COMPONENTS {
            return Err(bad(
                "workers",
                format!(
                    "at most {MAX_COMPONENTS}, so that a bundle with a bid per component fits one UDP datagram; found {}",
                    self.workers
                ),
            ));
        }
        let mut fields = vec![
            ("gbps", self.gbps),
            ("peak_gbps", self.peak_gbps),
            ("runtime_s", self.runtime_s),
            ("weight", self.weight),
        ];
        let roles = [(0, "worker"), (1, "server")].into_iter().take(self.roles().len());
        for (role, name) in roles.clone() {
            let d = self.demand(role);
            fields.extend([(name, d.gpus), (name, d.cpus), (name, d.mem_gib)]);
        }
        for (name, v) in fields {
            if !v.is_finite() || v < 0.0 {
                return Err(bad(name, format!("a finite number at least 0, found {v}")));
            }
        }
        for (role, name) in roles {
            let d = self.demand(role);
            if d.gpus <= 0.0 && d.cpus <= 0.0 && d.mem_gib <= 0.0 {
                return Err(bad(name, "a demand above zero (gpus, cpus or mem_gib)".into()));
            }
        }
        Ok(())
    }
}

/// The most components (workers) a job may have: its bundle carries a bid
/// per component, at most 26 bytes each in postcard (an f64, a u32, a u64
/// and a u16 as varints), and must fit one UDP datagram (65,507 bytes) with
/// the job, the envelope and its MAC: 2,048 × 26 = 53,248 bytes.
pub const MAX_COMPONENTS: usize = 2_048;

/// A field of a job request that is out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("job {job}: {field}: expected {expected}")]
pub struct BadRequest {
    /// The job's id.
    pub job: u64,
    /// The field (`workers`, `gbps`, `worker`, ...).
    pub field: &'static str,
    /// What was expected, and what was found.
    pub expected: String,
}

/// A node's resources (ρ, Eq. 3) and what is left of them (Δ, Eq. 7).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// Capacity.
    pub total: Demand,
    /// Unallocated.
    pub free: Demand,
}

impl Resources {
    /// A node with everything free.
    pub fn new(total: Demand) -> Self {
        Resources { total, free: total }
    }

    /// Whether `d` fits in what is free.
    pub fn fits(&self, d: &Demand) -> bool {
        const EPS: f64 = 1e-9;
        d.gpus <= self.free.gpus + EPS && d.cpus <= self.free.cpus + EPS && d.mem_gib <= self.free.mem_gib + EPS
    }

    /// Takes `d` (`sign = 1`) or gives it back (`sign = −1`).
    pub fn take(&mut self, d: &Demand, sign: f64) {
        self.free.gpus += -sign * d.gpus;
        self.free.cpus += -sign * d.cpus;
        self.free.mem_gib += -sign * d.mem_gib;
    }
}

/// The static network every agent knows: a leaf-spine with each node's NIC
/// and each leaf's uplink, all spines merged into one logical uplink.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterMap {
    /// Leaf of each node.
    pub leaf_of: Vec<u16>,
    /// NIC rate of each node, Gbit/s.
    pub nic_gbps: Vec<f64>,
    /// Aggregate uplink rate of each leaf to all spines, Gbit/s.
    pub uplink_gbps: Vec<f64>,
}

/// Reserved bandwidth on each NIC and leaf uplink, Gbit/s (the active flows
/// `F` behind `Δ_e`, §III-B). Every agent applies the same committed
/// placements, so every agent holds the same usage.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Per node NIC (each direction carries the same load in our patterns).
    pub nic: Vec<f64>,
    /// Per leaf uplink.
    pub uplink: Vec<f64>,
}

impl Usage {
    /// Nothing reserved.
    pub fn empty(map: &ClusterMap) -> Self {
        Usage { nic: vec![0.0; map.nic_gbps.len()], uplink: vec![0.0; map.uplink_gbps.len()] }
    }

    /// Residual NIC bandwidth of a node.
    pub fn nic_residual(&self, map: &ClusterMap, node: usize) -> f64 {
        (map.nic_gbps[node] - self.nic[node]).max(0.0)
    }

    /// Residual uplink bandwidth of a leaf.
    pub fn uplink_residual(&self, map: &ClusterMap, leaf: usize) -> f64 {
        (map.uplink_gbps[leaf] - self.uplink[leaf]).max(0.0)
    }

    /// Adds (`sign = 1`) or removes (`−1`) a placement's traffic.
    pub fn apply(&mut self, load: &LinkLoad, sign: f64) {
        for &(n, g) in &load.nic {
            self.nic[n] = (self.nic[n] + sign * g).max(0.0);
        }
        for &(l, g) in &load.uplink {
            self.uplink[l] = (self.uplink[l] + sign * g).max(0.0);
        }
    }

    /// Whether a placement's traffic fits on top of this usage.
    pub fn fits(&self, map: &ClusterMap, load: &LinkLoad) -> bool {
        const EPS: f64 = 1e-9;
        load.nic.iter().all(|&(n, g)| self.nic[n] + g <= map.nic_gbps[n] + EPS)
            && load.uplink.iter().all(|&(l, g)| self.uplink[l] + g <= map.uplink_gbps[l] + EPS)
    }
}

/// Where a job's components went: per role, `(node, count)` sorted by node.
pub type Placement = Vec<Vec<(u32, usize)>>;

/// The traffic a placement puts on NICs and leaf uplinks, Gbit/s: one entry
/// per link, sorted by index ([`Usage::fits`] checks entries one by one, so a
/// link listed twice would be checked against half its load).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkLoad {
    /// `(node, Gbit/s)`.
    pub nic: Vec<(usize, f64)>,
    /// `(leaf, Gbit/s)`.
    pub uplink: Vec<(usize, f64)>,
}

/// Sorts by link and sums the entries of one link into one. O(e log e).
fn one_entry_per_link(entries: &mut Vec<(usize, f64)>) {
    entries.sort_by_key(|&(link, _)| link);
    entries.dedup_by(|later, kept| {
        let same = later.0 == kept.0;
        if same {
            kept.1 += later.1;
        }
        same
    });
}

/// Traffic of a placed job (constraint 4). Ring: nodes in (leaf, id) order;
/// each node that holds some but not all workers sends and receives `B`, and
/// each leaf the ring spans sends and receives `B` over its uplink when it
/// spans more than one. Parameter server: each worker off the server's node
/// sends `B` to it, over both leaves' uplinks when they differ (a leaf with
/// several such workers carries their sum). O(nodes · log nodes).
pub fn link_load(map: &ClusterMap, job: &JobRequest, placement: &Placement) -> LinkLoad {
    let mut load = link_load_entries(map, job, placement);
    one_entry_per_link(&mut load.nic);
    one_entry_per_link(&mut load.uplink);
    load
}

/// [`link_load`] before entries of one link are summed.
fn link_load_entries(map: &ClusterMap, job: &JobRequest, placement: &Placement) -> LinkLoad {
    let mut load = LinkLoad::default();
    let workers = placement.first().map(Vec::as_slice).unwrap_or(&[]);
    match job.arch {
        Arch::Ring => {
            if workers.len() < 2 {
                return load;
            }
            for &(n, _) in workers {
                load.nic.push((n as usize, job.gbps));
            }
            let mut leaves: Vec<usize> = workers.iter().map(|&(n, _)| usize::from(map.leaf_of[n as usize])).collect();
            leaves.sort_unstable();
            leaves.dedup();
            if leaves.len() > 1 {
                load.uplink = leaves.into_iter().map(|l| (l, job.gbps)).collect();
            }
        }
        Arch::ParameterServer => {
            let Some(&(ps, _)) = placement.get(1).and_then(|r| r.first()) else { return load };
            let ps_leaf = usize::from(map.leaf_of[ps as usize]);
            let mut to_ps = 0.0;
            let mut cross = 0.0;
            for &(n, k) in workers.iter().filter(|&&(n, _)| n != ps) {
                let g = k as f64 * job.gbps;
                load.nic.push((n as usize, g));
                to_ps += g;
                let leaf = usize::from(map.leaf_of[n as usize]);
                if leaf != ps_leaf {
                    load.uplink.push((leaf, g));
                    cross += g;
                }
            }
            if to_ps > 0.0 {
                load.nic.push((ps as usize, to_ps));
            }
            if cross > 0.0 {
                load.uplink.push((ps_leaf, cross));
            }
        }
    }
    load
}

/// Table I: the compute fraction `f_comp` a node offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Utility {
    /// Smallest GPU First: `−(Δ_GPU − ϱ_GPU)`, as `1 − (Δ − ϱ)/ρ` (packs).
    Sgf,
    /// Largest GPU First: `Δ_GPU − ϱ_GPU`, as `(Δ − ϱ)/ρ` (spreads).
    Lgf,
    /// YARN: `min_r (Δ_r − ϱ_r)/ρ_r`, already in `[0, 1]`.
    Yarn,
    /// Tetris: `Σ_r (Δ_r/ρ_r)·ϱ_r` with `ϱ_r` taken relative to `ρ_r` and the
    /// sum divided by `Σ_r ϱ_r/ρ_r`: the demand-weighted free share.
    Tetris,
    /// Tiresias: `W_j·t_j`, the same on every node, as `1/(1 + W·t/3600 s)`
    /// (shorter jobs bid higher; the node is chosen by `f_net` and ties).
    Tiresias,
    /// DRF: `−max_r (u_r + ϱ_r)/ρ_r` with `u_r` the user's allocation, as
    /// `1 − max_r (u_r + ϱ_r)/ρ_r`. The traces name no users, so the job is
    /// the user, and a node knows only the components it offers the job
    /// itself: `u_r` counts those. (Taking `u_r` as everything the node has
    /// allocated would make DRF identical to YARN.)
    Drf,
    /// Themis: `T_sh/T_ind`, the slowdown from sharing the node, taken as
    /// `1 + u_GPU/ρ_GPU` and bid as its inverse `T_ind/T_sh`.
    Themis,
}

impl Utility {
    /// All of Table I, in its order.
    pub const ALL: [Utility; 7] =
        [Utility::Sgf, Utility::Lgf, Utility::Yarn, Utility::Tetris, Utility::Tiresias, Utility::Drf, Utility::Themis];

    /// Lower-case name (`sgf`, `tetris`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Utility::Sgf => "sgf",
            Utility::Lgf => "lgf",
            Utility::Yarn => "yarn",
            Utility::Tetris => "tetris",
            Utility::Tiresias => "tiresias",
            Utility::Drf => "drf",
            Utility::Themis => "themis",
        }
    }

    /// Parses [`Utility::name`].
    pub fn parse(s: &str) -> Option<Utility> {
        Utility::ALL.into_iter().find(|u| u.name() == s)
    }

    /// `f_comp ∈ [0, 1]` for placing one more component of demand `d` on a
    /// node with resources `r` that already offers the job `own` components.
    pub fn compute_fraction(self, r: &Resources, d: &Demand, job: &JobRequest, own: f64) -> f64 {
        let dims = [
            (r.total.gpus, r.free.gpus, d.gpus),
            (r.total.cpus, r.free.cpus, d.cpus),
            (r.total.mem_gib, r.free.mem_gib, d.mem_gib),
        ];
        let present = dims.iter().filter(|(cap, _, _)| *cap > 0.0);
        let gpu_cap = r.total.gpus.max(1e-9);
        let f = match self {
            Utility::Sgf => 1.0 - (r.free.gpus - d.gpus) / gpu_cap,
            Utility::Lgf => (r.free.gpus - d.gpus) / gpu_cap,
            Utility::Yarn => present.map(|&(cap, free, dem)| (free - dem) / cap).fold(f64::INFINITY, f64::min),
            Utility::Tetris => {
                let (mut dot, mut weight) = (0.0, 0.0);
                for &(cap, free, dem) in present {
                    dot += (free / cap) * (dem / cap);
                    weight += dem / cap;
                }
                if weight > 0.0 { dot / weight } else { 1.0 }
            }
            Utility::Tiresias => 1.0 / (1.0 + job.weight.max(0.0) * job.runtime_s.max(0.0) / 3600.0),
            Utility::Drf => {
                1.0 - present.map(|&(cap, _, dem)| (own + 1.0) * dem / cap).fold(f64::NEG_INFINITY, f64::max)
            }
            Utility::Themis => 1.0 / (1.0 + (r.total.gpus - r.free.gpus).max(0.0) / gpu_cap),
        };
        if f.is_finite() { f.clamp(0.0, 1.0) } else { 0.0 }
    }
}

/// How nodes bid: the utility, Eq. 10's `α` and Eq. 11's `δ`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BidPolicy {
    /// Compute fraction.
    pub utility: Utility,
    /// Weight of the compute fraction; `1` is bandwidth-unaware.
    pub alpha: f64,
    /// Warping penalty per component a node already offers (Eq. 11).
    pub delta: f64,
}

impl BidPolicy {
    /// Bandwidth-aware with the paper's default `α = 0.5` and `δ = 0.01`.
    pub fn aware(utility: Utility) -> Self {
        BidPolicy { utility, alpha: 0.5, delta: 0.01 }
    }

    /// The bandwidth-unaware variant (`α = 1`).
    pub fn unaware(utility: Utility) -> Self {
        BidPolicy { utility, alpha: 1.0, delta: 0.01 }
    }
}

/// Everything a node knows when it bids.
#[derive(Debug, Clone, Copy)]
pub struct NodeContext<'a> {
    /// The node.
    pub node: u32,
    /// Its resources, net of what it holds in other auctions.
    pub resources: Resources,
    /// The network.
    pub map: &'a ClusterMap,
    /// Reserved bandwidth.
    pub usage: &'a Usage,
}

/// How many workers' worth of traffic the node's `k`-th component (1-based)
/// of `role` puts on the node's path out of the rack: ring workers after the
/// first talk to a neighbour on the same node; parameter-server workers each
/// send their own; the server receives from every worker.
fn path_streams(job: &JobRequest, role: usize, k: usize) -> f64 {
    match (job.arch, role) {
        (Arch::Ring, _) if k == 1 => 1.0,
        (Arch::Ring, _) => 0.0,
        (Arch::ParameterServer, 0) => k as f64,
        (Arch::ParameterServer, _) => f64::from(job.workers),
    }
}

/// Eq. 9: `min_e Δ_e / B` over the node's NIC and its leaf's uplink, in
/// `[0, 1]`; `1` when the component adds no traffic.
fn network_fraction(ctx: &NodeContext<'_>, demand_gbps: f64) -> f64 {
    if demand_gbps <= 0.0 {
        return 1.0;
    }
    let n = ctx.node as usize;
    let leaf = usize::from(ctx.map.leaf_of[n]);
    let residual = ctx.usage.nic_residual(ctx.map, n).min(ctx.usage.uplink_residual(ctx.map, leaf));
    (residual / demand_gbps).min(1.0)
}

/// The warped utility of the node's `k`-th component (1-based) of `role`,
/// given the resources left after its first `k − 1` (Eqs. 9-11); `None` if
/// the node lacks the resources or its NIC the bandwidth (Algorithm 1, line 4).
pub fn slot_value(ctx: &NodeContext<'_>, job: &JobRequest, role: usize, k: usize, policy: &BidPolicy) -> Option<f64> {
    let demand = job.demand(role);
    let streams = path_streams(job, role, k);
    if !ctx.resources.fits(&demand) || streams * job.gbps > ctx.usage.nic_residual(ctx.map, ctx.node as usize) + 1e-9 {
        return None;
    }
    let f_comp = policy.utility.compute_fraction(&ctx.resources, &demand, job, (k - 1) as f64);
    let f_net = network_fraction(ctx, streams * job.peak_gbps.max(job.gbps));
    let u = policy.alpha * f_comp + (1.0 - policy.alpha) * f_net; // Eq. 10
    Some(u - policy.delta * (k - 1) as f64) // Eq. 11
}

/// The node's bids for `role`: one per component it can host, each
/// [`slot_value`] made non-increasing by a running minimum so that a node's
/// slots win in order (the warping of §V-A restores pseudo-submodularity
/// where colocation would raise the utility). Also returns the resources left
/// after the offers. O(components).
pub fn slot_values(ctx: &NodeContext<'_>, job: &JobRequest, role: usize, policy: &BidPolicy) -> (Vec<f64>, Resources) {
    let count = job.roles().get(role).copied().unwrap_or(0);
    let demand = job.demand(role);
    let mut res = ctx.resources;
    let mut values: Vec<f64> = Vec::new();
    for k in 1..=count {
        let Some(v) = slot_value(&NodeContext { resources: res, ..*ctx }, job, role, k, policy) else { break };
        values.push(values.last().map_or(v, |&prev: &f64| prev.min(v)));
        res.take(&demand, 1.0);
    }
    (values, res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(arch: Arch, workers: u16) -> JobRequest {
        JobRequest {
            id: 1,
            arch,
            workers,
            worker: Demand { gpus: 1.0, cpus: 4.0, mem_gib: 16.0 },
            server: Demand { gpus: 0.0, cpus: 4.0, mem_gib: 16.0 },
            gbps: 10.0,
            peak_gbps: 10.0,
            runtime_s: 3600.0,
            weight: 1.0,
        }
    }

    fn node(gpus_free: f64) -> Resources {
        let total = Demand { gpus: 8.0, cpus: 96.0, mem_gib: 512.0 };
        Resources { total, free: Demand { gpus: gpus_free, ..total } }
    }

    #[test]
    fn table_one_fractions_by_hand() {
        let j = job(Arch::Ring, 2);
        let d = j.worker;
        // 6 of 8 GPUs free, all CPUs and memory free.
        let r = node(6.0);
        assert!((Utility::Sgf.compute_fraction(&r, &d, &j, 0.0) - (1.0 - 5.0 / 8.0)).abs() < 1e-12);
        assert!((Utility::Lgf.compute_fraction(&r, &d, &j, 0.0) - 5.0 / 8.0).abs() < 1e-12);
        // YARN: min(5/8, 92/96, 496/512) = 5/8.
        assert!((Utility::Yarn.compute_fraction(&r, &d, &j, 0.0) - 5.0 / 8.0).abs() < 1e-12);
        // Tetris: (6/8·1/8 + 1·4/96 + 1·16/512) / (1/8 + 4/96 + 16/512).
        let w = [1.0 / 8.0, 4.0 / 96.0, 16.0 / 512.0];
        let tetris = (0.75 * w[0] + w[1] + w[2]) / (w[0] + w[1] + w[2]);
        assert!((Utility::Tetris.compute_fraction(&r, &d, &j, 0.0) - tetris).abs() < 1e-12);
        // DRF, the job as the user: its first component's dominant share is
        // max(1/8, 4/96, 16/512) = 1/8; with two already here, 3/8.
        assert!((Utility::Drf.compute_fraction(&r, &d, &j, 0.0) - 7.0 / 8.0).abs() < 1e-12);
        assert!((Utility::Drf.compute_fraction(&r, &d, &j, 2.0) - 5.0 / 8.0).abs() < 1e-12);
        // Themis: 2 of 8 GPUs busy → slowdown 1.25 → 0.8.
        assert!((Utility::Themis.compute_fraction(&r, &d, &j, 0.0) - 0.8).abs() < 1e-12);
        // Tiresias: W·t = 1 h → 1/2 on every node.
        assert!((Utility::Tiresias.compute_fraction(&r, &d, &j, 0.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn network_fraction_uses_the_bottleneck_and_colocation_is_free() {
        let map = ClusterMap { leaf_of: vec![0, 0, 1], nic_gbps: vec![25.0; 3], uplink_gbps: vec![20.0, 20.0] };
        let mut usage = Usage::empty(&map);
        usage.uplink[0] = 15.0; // 5 Gbps left out of rack 0
        let j = job(Arch::Ring, 3);
        let ctx = NodeContext { node: 0, resources: node(8.0), map: &map, usage: &usage };
        let p = BidPolicy { utility: Utility::Lgf, alpha: 0.0, delta: 0.0 };
        let (v, left) = slot_values(&ctx, &j, 0, &p);
        // First worker: 5 / 10 Gbps; the next two ride inside the node: 1,
        // but the running minimum keeps them at 0.5.
        assert_eq!(v, vec![0.5, 0.5, 0.5]);
        assert_eq!(left.free.gpus, 5.0);
        // With α = 1 the network does not matter: LGF falls per GPU taken.
        let p = BidPolicy { utility: Utility::Lgf, alpha: 1.0, delta: 0.01 };
        let (v, _) = slot_values(&ctx, &j, 0, &p);
        assert!((v[0] - 7.0 / 8.0).abs() < 1e-12 && (v[1] - (6.0 / 8.0 - 0.01)).abs() < 1e-12);
    }

    #[test]
    fn a_node_offers_only_what_fits() {
        let map = ClusterMap { leaf_of: vec![0], nic_gbps: vec![25.0], uplink_gbps: vec![100.0] };
        let mut usage = Usage::empty(&map);
        let j = job(Arch::Ring, 5);
        let ctx = NodeContext { node: 0, resources: node(3.0), map: &map, usage: &usage };
        assert_eq!(slot_values(&ctx, &j, 0, &BidPolicy::aware(Utility::Sgf)).0.len(), 3);
        usage.nic[0] = 20.0; // 5 Gbps left, the job needs 10
        let ctx = NodeContext { node: 0, resources: node(3.0), map: &map, usage: &usage };
        assert!(slot_values(&ctx, &j, 0, &BidPolicy::aware(Utility::Sgf)).0.is_empty());
    }

    #[test]
    fn link_load_of_ring_and_parameter_server() {
        let map = ClusterMap { leaf_of: vec![0, 0, 1], nic_gbps: vec![25.0; 3], uplink_gbps: vec![50.0; 2] };
        let ring = job(Arch::Ring, 4);
        let one_node = link_load(&map, &ring, &vec![vec![(0, 4)]]);
        assert!(one_node.nic.is_empty() && one_node.uplink.is_empty());
        let spread = link_load(&map, &ring, &vec![vec![(0, 2), (2, 2)]]);
        assert_eq!(spread.nic, vec![(0, 10.0), (2, 10.0)]);
        assert_eq!(spread.uplink, vec![(0, 10.0), (1, 10.0)]);
        let ps = job(Arch::ParameterServer, 3);
        // Server on node 0 with one worker; two workers on node 2 in the other rack.
        let l = link_load(&map, &ps, &vec![vec![(0, 1), (2, 2)], vec![(0, 1)]]);
        assert_eq!(l.nic, vec![(0, 20.0), (2, 20.0)]);
        assert_eq!(l.uplink, vec![(0, 20.0), (1, 20.0)]);
    }

    /// Two workers on two nodes of one leaf, the server in another: the leaf
    /// carries their sum once, and that sum is what must fit. With 5 Gbps
    /// left on the leaf, two 5 Gbps workers (10) do not fit; listed apart,
    /// each entry alone would have.
    #[test]
    fn a_leaf_with_two_parameter_server_workers_carries_their_sum() {
        let map = ClusterMap { leaf_of: vec![0, 0, 1], nic_gbps: vec![25.0; 3], uplink_gbps: vec![50.0; 2] };
        let mut ps = job(Arch::ParameterServer, 2);
        ps.gbps = 5.0;
        let l = link_load(&map, &ps, &vec![vec![(0, 1), (1, 1)], vec![(2, 1)]]);
        assert_eq!(l.uplink, vec![(0, 10.0), (1, 10.0)]);
        let mut usage = Usage::empty(&map);
        usage.uplink[0] = 45.0;
        assert!(!usage.fits(&map, &l));
        usage.uplink[0] = 40.0;
        assert!(usage.fits(&map, &l));
    }
}
