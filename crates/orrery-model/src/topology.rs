//! Cluster topology: hosts, switches, directed links with capacities, shortest
//! paths with their equal-cost (ECMP) candidate sets, and a latency matrix.
//!
//! Nodes share one index space: hosts first (`0..hosts.len()`), then switches.
//! Every physical cable is two directed [`Link`]s, one per direction, because
//! the papers' congestion is per direction (an all-reduce ring sends one way).

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};

/// Index of a node (host or switch) in [`Topology::nodes`].
pub type NodeId = usize;
/// Index of a host; equal to its [`NodeId`].
pub type HostId = usize;
/// Index of a directed link in [`Topology::links`].
pub type LinkId = usize;

/// Paths returned by [`Topology::paths`] are capped at this many per pair.
pub const MAX_ECMP_PATHS: usize = 64;

/// One-way latencies between hosts ([`Topology::latencies_us`]): a table
/// over kinds of host attachment, read in O(1).
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    /// Each host's kind.
    kind: Vec<u32>,
    kinds: usize,
    /// Row-major, kinds × kinds, µs.
    us: Vec<f64>,
}

impl Latencies {
    /// Hosts covered.
    pub fn hosts(&self) -> usize {
        self.kind.len()
    }

    /// Latency from `a` to `b`, µs (0 when they are the same host).
    pub fn get(&self, a: HostId, b: HostId) -> f64 {
        if a == b { 0.0 } else { self.us[self.kind[a] as usize * self.kinds + self.kind[b] as usize] }
    }

    /// Kinds of attachment: two hosts of one kind see the same latency to
    /// every host other than themselves.
    pub fn kinds(&self) -> usize {
        self.kinds
    }

    /// The kind of attachment of `host`.
    pub fn kind(&self, host: HostId) -> usize {
        self.kind[host] as usize
    }

    /// Latency from a host of kind `a` to another host of kind `b`, µs.
    pub fn between(&self, a: usize, b: usize) -> f64 {
        self.us[a * self.kinds + b]
    }

    /// Each host's mean latency to every host it reaches (itself counted
    /// as 0), over all hosts, summed in host order. O(hosts²) time, once
    /// per topology.
    pub fn means(&self) -> Vec<f64> {
        let h = self.hosts();
        (0..h).map(|a| (0..h).map(|b| self.get(a, b)).filter(|v| v.is_finite()).sum::<f64>() / h as f64).collect()
    }
}

/// Which of `n` equal-cost paths ECMP gives flow `flow` of job `job`: a fixed
/// hash of the flow's identity, so a connection keeps its path. The simulator
/// routes with it and network-aware policies predict routes with it.
pub fn ecmp_index(job: usize, flow: usize, n: usize) -> usize {
    let h = (job as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (flow as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F);
    (h % n.max(1) as u64) as usize
}

/// A server with GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Host {
    /// Unique name.
    pub name: String,
    /// Number of GPUs (0: a host for CPU work only).
    #[schemars(range(min = 0, max = MAX_GPUS_PER_HOST))]
    pub gpus: u32,
    /// GPU type name (see [`crate::gpu`]).
    pub gpu_type: String,
    /// CPU cores.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_CPUS_PER_HOST))]
    pub cpus: u32,
    /// Memory in GiB.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_MEMORY_GIB_PER_HOST))]
    pub memory_gib: f64,
}

/// Role of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Top-of-rack / leaf.
    Leaf,
    /// Spine / aggregation.
    Spine,
    /// A single switch that every host hangs off.
    Core,
}

/// A switch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Switch {
    /// Unique name.
    pub name: String,
    /// Role.
    pub tier: Tier,
}

/// A directed link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Sending node.
    pub from: NodeId,
    /// Receiving node.
    pub to: NodeId,
    /// Capacity in Gbit/s.
    pub gbps: f64,
    /// Propagation plus switching latency in microseconds.
    pub latency_us: f64,
}

/// A cluster network. Serialisable for reports; built only through
/// [`Topology::new`] (or [`Builder`], or a topology file), which validate it
/// and index its links.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Topology {
    /// Name of the set-up.
    pub name: String,
    /// Hosts; host `i` is node `i`.
    pub hosts: Vec<Host>,
    /// Switches; switch `j` is node `hosts.len() + j`.
    pub switches: Vec<Switch>,
    /// Directed links.
    pub links: Vec<Link>,
    /// Rail-optimised (issue 66, [`crate::rails`]): a host's links out are
    /// its NICs in GPU order, and a flow leaves on the NIC of its
    /// destination GPU's rail, as NCCL sends it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rails: bool,
    /// Outgoing links per node, built by [`Topology::new`].
    #[serde(skip)]
    out: Vec<Vec<LinkId>>,
    /// Incoming links per node, built by [`Topology::new`].
    #[serde(skip)]
    into: Vec<Vec<LinkId>>,
    /// Each host's rack ([`Topology::racks`]), built by [`Topology::new`].
    #[serde(skip)]
    rack_of: Vec<usize>,
    /// Each rack's hosts, ascending, built by [`Topology::new`].
    #[serde(skip)]
    in_rack: std::collections::HashMap<usize, Vec<HostId>>,
    /// Σ GPUs over the hosts, built by [`Topology::new`] ([`Topology::gpu_count`]).
    #[serde(skip)]
    gpus: u32,
    /// ECMP sets already enumerated (policies ask for the same ring edges
    /// at every decision).
    #[serde(skip)]
    path_cache: PathCache,
}

/// Entries the path cache holds before it starts over (a 4,096-host
/// cluster's ring neighbours fit many times over).
const PATH_CACHE_ENTRIES: usize = 1 << 20;

/// A shared, thread-safe memo of [`Topology::shared_paths`]. It is not part
/// of a topology's value: clones start empty and it never affects equality.
#[derive(Default)]
struct PathCache(std::sync::RwLock<HashMap<(NodeId, NodeId), SharedPaths, PairHash>>);

/// A hasher for pairs of node indices: a multiply and a rotate per word
/// (the Fx hash of rustc). The default SipHash took a third of a path
/// lookup, which decisions make once per flow (`cargo bench -p
/// orrery-policy --bench decision -- decision-llm`). Keys are indices,
/// not input an adversary chooses.
#[derive(Default, Clone, Copy)]
struct PairHash;

impl std::hash::BuildHasher for PairHash {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

/// See [`PairHash`].
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// An ECMP path set shared between callers.
pub type SharedPaths = std::sync::Arc<[Vec<LinkId>]>;

impl Clone for PathCache {
    fn clone(&self) -> Self {
        PathCache::default()
    }
}

impl PartialEq for PathCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for PathCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PathCache")
    }
}

/// Errors building a topology.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TopologyError {
    /// A link names a node that does not exist.
    #[error("link {link}: node {node} does not exist (the topology has {nodes} nodes)")]
    NoSuchNode {
        /// Index of the link.
        link: usize,
        /// The bad node index.
        node: usize,
        /// Number of nodes.
        nodes: usize,
    },
    /// A link has a capacity outside [`MIN_LINK_GBPS`, `MAX_LINK_GBPS`].
    #[error("link {link}: capacity must be from {MIN_LINK_GBPS} to {MAX_LINK_GBPS} Gbit/s, found {gbps:?}")]
    BadCapacity {
        /// Index of the link.
        link: usize,
        /// The capacity found.
        gbps: f64,
    },
    /// Two nodes share a name.
    #[error("duplicate node name {0:?}")]
    DuplicateName(String),
    /// More hosts than orrery handles (or a product of sizes that overflows).
    #[error("{hosts} hosts; expected at most {MAX_HOSTS}")]
    TooManyHosts {
        /// Hosts asked for.
        hosts: u128,
    },
    /// A host with more GPUs than orrery handles.
    #[error("host {host}: {gpus} GPUs; expected at most {MAX_GPUS_PER_HOST}")]
    TooManyGpus {
        /// The host.
        host: String,
        /// GPUs asked for.
        gpus: u32,
    },
    /// No host at all.
    #[error("the topology has no hosts")]
    NoHosts,
    /// A number of a host outside its declared range ([`crate::ranges`]).
    #[error("hosts[{host}] ({name}).{range}")]
    OutOfRange {
        /// Index of the host.
        host: usize,
        /// Its name.
        name: String,
        /// The field, its range and what was there.
        range: crate::ranges::OutOfRange,
    },
    /// More switches than orrery handles.
    #[error("{switches} switches; expected at most {MAX_SWITCHES}")]
    TooManySwitches {
        /// Switches asked for.
        switches: u128,
    },
    /// A GPU type that is not in orrery's table (`orrery zoo` lists them).
    #[error("GPU type {0:?} is unknown; expected one of {known}", known = crate::gpu::names().join(", "))]
    UnknownGpu(String),
    /// A size that must be at least 1.
    #[error("{field}: expected at least 1, found 0")]
    Zero {
        /// The field.
        field: &'static str,
    },
    /// A host that cannot send to another: no path of links joins them.
    #[error("host {from} cannot reach host {to}: no path of links joins them")]
    Unreachable {
        /// The sending host.
        from: String,
        /// The host it cannot reach.
        to: String,
    },
}

/// Most hosts a topology may have. Path and latency tables grow with the
/// square of the hosts (Metronome's latency matrix: 2 GiB at this size).
pub const MAX_HOSTS: usize = 16_384;
/// Most switches a topology may have (a leaf per host and as many spines).
pub const MAX_SWITCHES: usize = 2 * MAX_HOSTS;
/// Most GPUs on one host.
pub const MAX_GPUS_PER_HOST: u32 = 1024;
/// Slowest link accepted, Gbit/s (1 Mbit/s).
pub const MIN_LINK_GBPS: f64 = 1e-3;
/// Fastest link accepted, Gbit/s (1 Pbit/s).
pub const MAX_LINK_GBPS: f64 = 1e6;
/// Most CPU cores on one host.
pub const MAX_CPUS_PER_HOST: u32 = 65_536;
/// Most memory on one host, GiB (a pebibyte).
pub const MAX_MEMORY_GIB_PER_HOST: f64 = 1_048_576.0;

impl Topology {
    /// Builds a topology and checks it: links name existing nodes, capacities
    /// are positive, names are unique.
    pub fn new(
        name: impl Into<String>,
        hosts: Vec<Host>,
        switches: Vec<Switch>,
        links: Vec<Link>,
    ) -> Result<Self, TopologyError> {
        let mut t = Topology {
            name: name.into(),
            hosts,
            switches,
            links,
            rails: false,
            out: Vec::new(),
            into: Vec::new(),
            rack_of: Vec::new(),
            in_rack: Default::default(),
            gpus: 0,
            path_cache: PathCache::default(),
        };
        t.validate()?;
        t.index();
        t.check_connected()?;
        Ok(t)
    }

    /// Every host reaches every other: all hosts are reached from host 0
    /// along links, and host 0 from all of them. O(nodes + links).
    fn check_connected(&self) -> Result<(), TopologyError> {
        if self.hosts.is_empty() {
            return Err(TopologyError::NoHosts);
        }
        for forward in [true, false] {
            let mut seen = vec![false; self.node_count()];
            seen[0] = true;
            let mut stack = vec![0];
            while let Some(n) = stack.pop() {
                let links = if forward { &self.out[n] } else { &self.into[n] };
                for &l in links {
                    let m = if forward { self.links[l].to } else { self.links[l].from };
                    if !seen[m] {
                        seen[m] = true;
                        stack.push(m);
                    }
                }
            }
            if let Some(h) = (0..self.hosts.len()).find(|&h| !seen[h]) {
                let (a, b) = (self.hosts[0].name.clone(), self.hosts[h].name.clone());
                let (from, to) = if forward { (a, b) } else { (b, a) };
                return Err(TopologyError::Unreachable { from, to });
            }
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), TopologyError> {
        if self.hosts.len() > MAX_HOSTS {
            return Err(TopologyError::TooManyHosts { hosts: self.hosts.len() as u128 });
        }
        if let Some(h) = self.hosts.iter().find(|h| h.gpus > MAX_GPUS_PER_HOST) {
            return Err(TopologyError::TooManyGpus { host: h.name.clone(), gpus: h.gpus });
        }
        for (i, h) in self.hosts.iter().enumerate() {
            crate::ranges::check(h).map_err(|e| TopologyError::OutOfRange {
                host: i,
                name: h.name.clone(),
                range: e,
            })?;
        }
        let nodes = self.node_count();
        for (i, l) in self.links.iter().enumerate() {
            for node in [l.from, l.to] {
                if node >= nodes {
                    return Err(TopologyError::NoSuchNode { link: i, node, nodes });
                }
            }
            if !(MIN_LINK_GBPS..=MAX_LINK_GBPS).contains(&l.gbps) {
                return Err(TopologyError::BadCapacity { link: i, gbps: l.gbps });
            }
        }
        let mut seen = HashMap::new();
        for n in 0..nodes {
            if seen.insert(self.node_name(n), n).is_some() {
                return Err(TopologyError::DuplicateName(self.node_name(n).to_string()));
            }
        }
        Ok(())
    }

    fn index(&mut self) {
        self.out = vec![Vec::new(); self.node_count()];
        self.into = vec![Vec::new(); self.node_count()];
        for (i, l) in self.links.iter().enumerate() {
            self.out[l.from].push(i);
            self.into[l.to].push(i);
        }
        let first_hop = |h: usize| self.out[h].first().map_or(usize::MAX - h, |&l| self.links[l].to);
        self.rack_of = (0..self.hosts.len()).map(first_hop).collect();
        self.in_rack.clear();
        for (h, &r) in self.rack_of.iter().enumerate() {
            self.in_rack.entry(r).or_default().push(h);
        }
        self.gpus = self.hosts.iter().map(|h| h.gpus).fold(0, u32::saturating_add);
    }

    /// The hosts of `rack` ([`Topology::racks`]), ascending.
    pub fn hosts_in_rack(&self, rack: usize) -> &[HostId] {
        self.in_rack.get(&rack).map_or(&[], Vec::as_slice)
    }

    /// Rack of each host: the switch its first link leads to (its leaf);
    /// a host without links is a rack of its own (`usize::MAX − host`).
    /// Kept from [`Topology::new`]: placements read it every round, and
    /// building it there was O(hosts) a round.
    pub fn racks(&self) -> &[usize] {
        &self.rack_of
    }

    /// Number of hosts plus switches.
    pub fn node_count(&self) -> usize {
        self.hosts.len() + self.switches.len()
    }

    /// Name of node `n`.
    pub fn node_name(&self, n: NodeId) -> &str {
        if n < self.hosts.len() { &self.hosts[n].name } else { &self.switches[n - self.hosts.len()].name }
    }

    /// Node id of a name.
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        (0..self.node_count()).find(|&n| self.node_name(n) == name)
    }

    /// Total GPUs. O(1): kept from [`Topology::new`] (policies ask at every
    /// decision; the sum over 16,384 hosts was 2% of a run).
    pub fn gpu_count(&self) -> u32 {
        self.gpus
    }

    /// Directed links leaving node `n`.
    pub fn out_links(&self, n: NodeId) -> &[LinkId] {
        &self.out[n]
    }

    /// Directed links entering node `n`.
    pub fn in_links(&self, n: NodeId) -> &[LinkId] {
        &self.into[n]
    }

    /// Capacity of host `h`'s NIC, in Gbit/s: its first link out, or on a
    /// rail-optimised fabric all its rail NICs together.
    pub fn host_nic_gbps(&self, h: HostId) -> f64 {
        if self.rails {
            return self.out[h].iter().map(|&l| self.links[l].gbps).sum();
        }
        self.out[h].first().map_or(0.0, |&l| self.links[l].gbps)
    }

    /// All shortest (fewest hops) paths from `src` to `dst` as link lists: the
    /// ECMP candidate set. At most [`MAX_ECMP_PATHS`], in a deterministic order.
    /// Empty when `src == dst` or `dst` is unreachable.
    ///
    /// Cost: see [`Topology::shared_paths`], plus the copy.
    pub fn paths(&self, src: NodeId, dst: NodeId) -> Vec<Vec<LinkId>> {
        self.shared_paths(src, dst).to_vec()
    }

    /// [`Topology::paths`] without the copy. Later calls for a pair are a
    /// hash lookup under a read lock, O(1). The first call between two
    /// hosts with one link up and one link down each is the paths between
    /// their switches with those two links added, O(paths · hops) once the
    /// switch pair is known: a search of the fabric happens once per pair
    /// of switches, not once per pair of hosts (at 16,384 hosts, a search
    /// over some 70,000 links for each new pair a candidate placement met
    /// was most of CASSINI's routing). Otherwise one BFS, O(V + E), plus
    /// O(paths · hops) to enumerate.
    pub fn shared_paths(&self, src: NodeId, dst: NodeId) -> SharedPaths {
        let cache = |g: std::sync::RwLockReadGuard<'_, HashMap<(NodeId, NodeId), SharedPaths, PairHash>>| {
            g.get(&(src, dst)).cloned()
        };
        if let Some(p) = self.path_cache.0.read().ok().and_then(cache) {
            return p;
        }
        let paths: SharedPaths = match self.single_homed(src, dst) {
            Some((up, down)) => self.paths_around(up, down).into(),
            None => self.enumerate_paths(src, dst).into(),
        };
        if let Ok(mut map) = self.path_cache.0.write() {
            if map.len() >= PATH_CACHE_ENTRIES {
                map.clear();
            }
            map.insert((src, dst), paths.clone());
        }
        paths
    }

    /// Every path that starts with link `up` (host to switch) and ends with
    /// link `down` (switch to host): the paths between the two switches,
    /// cached, with `up` before and `down` after. O(paths · hops).
    pub(crate) fn paths_around(&self, up: LinkId, down: LinkId) -> Vec<Vec<LinkId>> {
        let (from, to) = (self.links[up].to, self.links[down].from);
        if from == to {
            return vec![vec![up, down]];
        }
        self.shared_paths(from, to)
            .iter()
            .map(|mid| std::iter::once(up).chain(mid.iter().copied()).chain([down]).collect())
            .collect()
    }

    /// `src`'s only link out and `dst`'s only link in, when `src` and `dst`
    /// are distinct hosts that each hang from a switch by one link (every
    /// path between them is then those two links around a path between
    /// the switches, in the same order a search from `src` finds them).
    fn single_homed(&self, src: NodeId, dst: NodeId) -> Option<(LinkId, LinkId)> {
        let hosts = self.hosts.len();
        if src == dst || src >= hosts || dst >= hosts {
            return None;
        }
        let (&[up], &[down]) = (self.out[src].as_slice(), self.into[dst].as_slice()) else { return None };
        (self.links[up].to >= hosts && self.links[down].from >= hosts).then_some((up, down))
    }

    fn enumerate_paths(&self, src: NodeId, dst: NodeId) -> Vec<Vec<LinkId>> {
        if src == dst || src >= self.node_count() || dst >= self.node_count() {
            return Vec::new();
        }
        // Distances to dst over reversed links.
        let n = self.node_count();
        let into = &self.into;
        let mut dist = vec![usize::MAX; n];
        dist[dst] = 0;
        let mut q = VecDeque::from([dst]);
        'search: while let Some(v) = q.pop_front() {
            for &l in &into[v] {
                let u = self.links[l].from;
                // Paths never transit through a host other than the endpoints.
                if dist[u] == usize::MAX && (u == src || u >= self.hosts.len()) {
                    dist[u] = dist[v] + 1;
                    if u == src {
                        // Every node nearer dst than src is found by now,
                        // and only those lie on a shortest path from src.
                        break 'search;
                    }
                    q.push_back(u);
                }
            }
        }
        if dist[src] == usize::MAX {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut stack: Vec<LinkId> = Vec::new();
        self.enumerate(src, dst, &dist, &mut stack, &mut out);
        out
    }

    /// The rate a lone flow from `src` to `dst` gets: the smallest link
    /// capacity on any of its ECMP paths (they are usually alike), Gbit/s;
    /// infinite when there is no path. O(V + E).
    pub fn bottleneck_gbps(&self, src: HostId, dst: HostId) -> f64 {
        self.shared_paths(src, dst)
            .iter()
            .map(|p| p.iter().map(|&l| self.links[l].gbps).fold(f64::INFINITY, f64::min))
            .fold(f64::INFINITY, f64::min)
    }

    fn enumerate(&self, at: NodeId, dst: NodeId, dist: &[usize], stack: &mut Vec<LinkId>, out: &mut Vec<Vec<LinkId>>) {
        if out.len() >= MAX_ECMP_PATHS {
            return;
        }
        if at == dst {
            out.push(stack.clone());
            return;
        }
        for &l in &self.out[at] {
            let next = self.links[l].to;
            if dist[next] != usize::MAX && dist[next] + 1 == dist[at] {
                stack.push(l);
                self.enumerate(next, dst, dist, stack, out);
                stack.pop();
            }
        }
    }

    /// One-way latency between every pair of hosts along a shortest (fewest
    /// hops) path, in microseconds (0 from a host to itself, infinite if
    /// unreachable); where ECMP paths differ in latency, the lowest.
    ///
    /// Hosts attached alike (the same links, with the same latencies, to
    /// the same switches: a rack's hosts under one leaf) see every other
    /// host at the same latency, so the table keeps one row per kind of
    /// attachment: one breadth-first search per kind, relaxing latencies in
    /// BFS order over the shortest-path DAG. O(kinds · (V + E)) time and
    /// O(hosts + kinds²) memory; at 16,384 hosts in racks of 32 that is
    /// 512 searches and 2 MiB, where a full matrix took 2 GiB.
    pub fn latencies_us(&self) -> Latencies {
        let (h, n) = (self.hosts.len(), self.node_count());
        // A host's kind: its links out and in, as (other end, latency).
        // A host linked straight to another host is a kind of its own,
        // since paths never transit through hosts.
        let mut links_in: Vec<Vec<(usize, u64)>> = vec![Vec::new(); h];
        for l in &self.links {
            if l.to < h {
                links_in[l.to].push((l.from, l.latency_us.to_bits()));
            }
        }
        // (links out, links in) → kind.
        type Ends = Vec<(usize, u64)>;
        let mut kinds: HashMap<(Ends, Ends), u32> = HashMap::new();
        let mut members: Vec<Vec<HostId>> = Vec::new();
        let mut kind = Vec::with_capacity(h);
        for (a, ins) in links_in.iter_mut().enumerate() {
            let mut outs: Vec<(usize, u64)> =
                self.out[a].iter().map(|&l| (self.links[l].to, self.links[l].latency_us.to_bits())).collect();
            let alone = outs.iter().chain(ins.iter()).any(|&(v, _)| v < h);
            outs.sort_unstable();
            ins.sort_unstable();
            let key = if alone { (vec![(a, u64::MAX)], Vec::new()) } else { (outs, std::mem::take(ins)) };
            let next = members.len() as u32;
            let k = *kinds.entry(key).or_insert(next);
            if k == next {
                members.push(Vec::new());
            }
            members[k as usize].push(a);
            kind.push(k);
        }
        let kinds = members.len();
        let mut us = vec![f64::INFINITY; kinds * kinds];
        let mut hops = vec![usize::MAX; n];
        let mut lat = vec![f64::INFINITY; n];
        let mut order = Vec::with_capacity(n);
        for (ka, of_a) in members.iter().enumerate() {
            let a = of_a[0];
            hops.fill(usize::MAX);
            lat.fill(f64::INFINITY);
            order.clear();
            hops[a] = 0;
            lat[a] = 0.0;
            order.push(a);
            let mut next = 0;
            while next < order.len() {
                let u = order[next];
                next += 1;
                // Paths never transit through a host other than the endpoints.
                if u != a && u < h {
                    continue;
                }
                for &l in &self.out[u] {
                    let (v, d) = (self.links[l].to, self.links[l].latency_us);
                    if hops[v] == usize::MAX {
                        hops[v] = hops[u] + 1;
                        order.push(v);
                    }
                    if hops[v] == hops[u] + 1 {
                        lat[v] = lat[v].min(lat[u] + d);
                    }
                }
            }
            // Any host of kind b other than a stands for all of them.
            for (kb, of_b) in members.iter().enumerate() {
                if let Some(&b) = of_b.iter().find(|&&b| b != a) {
                    us[ka * kinds + kb] = lat[b];
                }
            }
        }
        Latencies { kind, kinds, us }
    }

    /// Ratio of host bandwidth to uplink bandwidth at the most oversubscribed
    /// leaf (1.0 when there are no uplinks, e.g. a single switch).
    pub fn oversubscription(&self) -> f64 {
        let h = self.hosts.len();
        let mut worst: f64 = 1.0;
        for (j, sw) in self.switches.iter().enumerate() {
            if sw.tier != Tier::Leaf {
                continue;
            }
            let node = h + j;
            let (mut down, mut up) = (0.0, 0.0);
            for &l in &self.out[node] {
                let link = &self.links[l];
                if link.to < h { down += link.gbps } else { up += link.gbps }
            }
            if up > 0.0 {
                worst = worst.max(down / up);
            }
        }
        worst
    }
}

/// Incrementally builds a topology; cables are added in both directions.
#[derive(Debug, Default)]
pub struct Builder {
    hosts: Vec<Host>,
    switches: Vec<Switch>,
    cables: Vec<(Ref, Ref, f64)>,
    latency_us: f64,
    rails: bool,
}

/// A node reference before the final indices are known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ref {
    /// The i-th host added.
    Host(usize),
    /// The j-th switch added.
    Switch(usize),
}

impl Builder {
    /// An empty builder with 1 µs per hop.
    pub fn new() -> Self {
        Builder { latency_us: 1.0, ..Default::default() }
    }

    /// Adds a host.
    pub fn host(&mut self, name: impl Into<String>, gpus: u32, gpu_type: &str, cpus: u32, memory_gib: f64) -> Ref {
        self.hosts.push(Host { name: name.into(), gpus, gpu_type: gpu_type.to_string(), cpus, memory_gib });
        Ref::Host(self.hosts.len() - 1)
    }

    /// Adds a switch.
    pub fn switch(&mut self, name: impl Into<String>, tier: Tier) -> Ref {
        self.switches.push(Switch { name: name.into(), tier });
        Ref::Switch(self.switches.len() - 1)
    }

    /// Adds a cable: two directed links of `gbps` each.
    pub fn cable(&mut self, a: Ref, b: Ref, gbps: f64) {
        self.cables.push((a, b, gbps));
    }

    /// Makes the fabric rail-optimised ([`Topology::rails`]): each host's
    /// cables, in the order added, are its NICs for its GPUs in order.
    pub fn rails(&mut self) {
        self.rails = true;
    }

    /// Finishes the topology.
    pub fn build(self, name: &str) -> Result<Topology, TopologyError> {
        let h = self.hosts.len();
        let id = |r: Ref| match r {
            Ref::Host(i) => i,
            Ref::Switch(j) => h + j,
        };
        let mut links = Vec::with_capacity(self.cables.len() * 2);
        for (a, b, gbps) in self.cables {
            links.push(Link { from: id(a), to: id(b), gbps, latency_us: self.latency_us });
            links.push(Link { from: id(b), to: id(a), gbps, latency_us: self.latency_us });
        }
        let mut t = Topology::new(name, self.hosts, self.switches, links)?;
        t.rails = self.rails;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::setups;

    /// Every shortest path from `src` to `dst` (hosts other than the two
    /// not transited), searched from both ends with no cache and no
    /// shortcut: a link u → v is on one when src's distance to u, one hop
    /// and v's distance to dst add up to the shortest. Depth-first over
    /// each node's links in order, as [`Topology::paths`] promises.
    fn oracle(t: &Topology, src: NodeId, dst: NodeId) -> Vec<Vec<LinkId>> {
        let h = t.hosts.len();
        let search = |from: NodeId, forward: bool| {
            let mut dist = vec![usize::MAX; t.node_count()];
            dist[from] = 0;
            let mut q = VecDeque::from([from]);
            while let Some(v) = q.pop_front() {
                let links = if forward { &t.out[v] } else { &t.into[v] };
                for &l in links {
                    let u = if forward { t.links[l].to } else { t.links[l].from };
                    if dist[u] == usize::MAX && (u == src || u == dst || u >= h) {
                        dist[u] = dist[v] + 1;
                        if u != src && u != dst {
                            q.push_back(u);
                        }
                    }
                }
            }
            dist
        };
        let (from_src, to_dst) = (search(src, true), search(dst, false));
        let shortest = to_dst[src];
        let mut out = Vec::new();
        if src == dst || shortest == usize::MAX {
            return out;
        }
        fn walk(
            t: &Topology,
            at: NodeId,
            dst: NodeId,
            on: &dyn Fn(LinkId) -> bool,
            stack: &mut Vec<LinkId>,
            out: &mut Vec<Vec<LinkId>>,
        ) {
            if out.len() >= MAX_ECMP_PATHS {
                return;
            }
            if at == dst {
                out.push(stack.clone());
                return;
            }
            for &l in &t.out[at] {
                if on(l) {
                    stack.push(l);
                    walk(t, t.links[l].to, dst, on, stack, out);
                    stack.pop();
                }
            }
        }
        let on = |l: LinkId| {
            let (u, v) = (t.links[l].from, t.links[l].to);
            from_src[u] != usize::MAX && to_dst[v] != usize::MAX && from_src[u] + 1 + to_dst[v] == shortest
        };
        walk(t, src, dst, &on, &mut Vec::new(), &mut out);
        out
    }

    #[test]
    fn every_host_pair_gets_the_shortest_paths_a_search_from_both_ends_finds() {
        // Leaf-spine at 2:1 and 1:1, heterogeneous, Castor's, Plebiscito's,
        // an NVL72 domain, a rail fabric (hosts with 8 links each: no
        // shortcut), a three-tier Clos, and a file with a dual-homed host
        // and two hosts cabled to each other.
        let clos: Vec<setups::ClosHost> = (0..48)
            .map(|i| setups::ClosHost {
                name: format!("h{i}"),
                tor: format!("S{}", i / 4 % 4),
                aggregation: format!("P{}", i / 16),
                core: "G".into(),
            })
            .collect();
        let file = r#"
name = "odd"
hosts = [{ name = "a", gpus = 8, gpu_type = "v100" }, { name = "b", gpus = 8, gpu_type = "v100" },
         { name = "c", gpus = 8, gpu_type = "v100" }, { name = "d", gpus = 8, gpu_type = "v100" }]
switches = [{ name = "s", tier = "leaf" }, { name = "t", tier = "leaf" }, { name = "u", tier = "spine" }]
cables = [{ a = "a", b = "s", gbps = 100 }, { a = "a", b = "t", gbps = 100 }, { a = "b", b = "t", gbps = 100 },
          { a = "c", b = "d", gbps = 100 }, { a = "d", b = "s", gbps = 100 },
          { a = "s", b = "u", gbps = 100 }, { a = "t", b = "u", gbps = 100 }]
"#;
        let fabrics = [
            setups::cassini(),
            setups::metronome(),
            setups::castor(),
            setups::foresight(4),
            setups::plebiscito(25.0),
            setups::h100().expect("h100"),
            setups::h100_rails().expect("h100 rails"),
            setups::gb200_nvl72().expect("nvl72"),
            setups::clos_tree("clos", &clos, &setups::ClosRates::default()).expect("clos"),
            setups::parse_topology("odd.toml", file).expect("odd"),
        ];
        let mut shortcut = 0;
        for t in &fabrics {
            let n = t.hosts.len().min(40);
            for a in 0..n {
                for b in 0..n {
                    assert_eq!(t.shared_paths(a, b).to_vec(), oracle(t, a, b), "{}: host {a} to host {b}", t.name);
                    shortcut += usize::from(t.single_homed(a, b).is_some());
                }
            }
        }
        // The shortcut is taken (and so checked) on most pairs.
        assert!(shortcut > 5_000, "{shortcut}");
    }
}
