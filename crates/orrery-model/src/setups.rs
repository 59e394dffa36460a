//! Builders for the clusters of the five papers, a generic leaf-spine, and a
//! loader for topology files (TOML or JSON).

use crate::topology::{
    Builder, MAX_GPUS_PER_HOST, MAX_HOSTS, MAX_LINK_GBPS, MAX_SWITCHES, MIN_LINK_GBPS, Ref, Tier, Topology,
    TopologyError,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A two-tier leaf-spine network: every leaf connects to every spine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LeafSpine {
    /// Number of racks (= leaves).
    #[schemars(range(min = 1, max = MAX_HOSTS))]
    pub racks: u32,
    /// Hosts per rack.
    #[schemars(range(min = 1, max = MAX_HOSTS))]
    pub hosts_per_rack: u32,
    /// Number of spines.
    #[schemars(range(min = 1, max = MAX_SWITCHES))]
    pub spines: u32,
    /// GPUs per host.
    #[schemars(range(min = 1, max = MAX_GPUS_PER_HOST))]
    pub gpus_per_host: u32,
    /// GPU type of every host.
    pub gpu_type: String,
    /// Host-to-leaf link rate, Gbit/s.
    #[schemars(range(min = MIN_LINK_GBPS, max = MAX_LINK_GBPS))]
    pub host_gbps: f64,
    /// Leaf-to-spine link rate (each), Gbit/s.
    #[schemars(range(min = MIN_LINK_GBPS, max = MAX_LINK_GBPS))]
    pub uplink_gbps: f64,
}

impl LeafSpine {
    /// Leaf-spine with uplinks sized for a given oversubscription ratio
    /// (`hosts_per_rack · host_gbps / (spines · uplink_gbps)`).
    pub fn with_oversubscription(
        racks: u32,
        hosts_per_rack: u32,
        spines: u32,
        gpus_per_host: u32,
        gpu_type: &str,
        host_gbps: f64,
        ratio: f64,
    ) -> Self {
        let uplink_gbps = f64::from(hosts_per_rack) * host_gbps / (f64::from(spines.max(1)) * ratio);
        LeafSpine { racks, hosts_per_rack, spines, gpus_per_host, gpu_type: gpu_type.into(), host_gbps, uplink_gbps }
    }

    /// Builds it. Hosts are named `h<i>`, leaves `leaf<r>`, spines `spine<s>`;
    /// host `i` sits in rack `i / hosts_per_rack`.
    pub fn build(&self, name: &str) -> Result<Topology, TopologyError> {
        // Sizes are checked before anything is allocated: 65,536 racks of
        // 65,536 hosts must not wrap around to zero hosts.
        let hosts = u128::from(self.racks) * u128::from(self.hosts_per_rack);
        if hosts > crate::topology::MAX_HOSTS as u128 {
            return Err(TopologyError::TooManyHosts { hosts });
        }
        let switches = u128::from(self.racks) + u128::from(self.spines);
        if switches > crate::topology::MAX_SWITCHES as u128 {
            return Err(TopologyError::TooManySwitches { switches });
        }
        for (field, n) in
            [("racks", self.racks), ("hosts_per_rack", self.hosts_per_rack), ("gpus_per_host", self.gpus_per_host)]
        {
            if n == 0 {
                return Err(TopologyError::Zero { field });
            }
        }
        if crate::gpu::gpu_type(&self.gpu_type).is_none() {
            return Err(TopologyError::UnknownGpu(self.gpu_type.clone()));
        }
        let mut b = Builder::new();
        let hosts: Vec<Ref> = (0..self.racks * self.hosts_per_rack)
            .map(|i| b.host(format!("h{i}"), self.gpus_per_host, &self.gpu_type, 0, 0.0))
            .collect();
        let leaves: Vec<Ref> = (0..self.racks).map(|r| b.switch(format!("leaf{r}"), Tier::Leaf)).collect();
        let spines: Vec<Ref> = (0..self.spines).map(|s| b.switch(format!("spine{s}"), Tier::Spine)).collect();
        for (i, &h) in hosts.iter().enumerate() {
            b.cable(h, leaves[i / self.hosts_per_rack as usize], self.host_gbps);
        }
        for &l in &leaves {
            for &s in &spines {
                b.cable(l, s, self.uplink_gbps);
            }
        }
        b.build(name)
    }
}

/// An H100 training cluster: 8 racks of 4 HGX H100 hosts (8 GPUs on
/// NVSwitch, 3.6 Tbit/s NVLink per GPU each way), each GPU with its own
/// 400 Gbit/s NIC (ConnectX-7), 8 spines, 1:1 under the leaves. 256 GPUs.
/// The eight NICs of a host are one 3.2 Tbit/s link to its leaf here:
/// Rail alignment (GPU k on rail switch k) is [`h100_rails`]'s; here a
/// rail fabric's per-GPU rate and non-blocking leaves are.
pub fn h100() -> Result<Topology, TopologyError> {
    LeafSpine::with_oversubscription(8, 4, 8, 8, "h100", 8.0 * 400.0, 1.0).build("h100")
}

/// The H100 cluster of [`h100`] as it is cabled: rail-optimised
/// ([`crate::rails`]), 2 scalable units of 16 hosts, NIC k of every host
/// of a unit on the unit's rail switch k (400 Gbit/s), 8 rail switches a
/// unit under 8 spines at 1:1, as NVIDIA's DGX SuperPOD reference
/// architecture cables its units (there of 32 hosts). 256 GPUs.
pub fn h100_rails() -> Result<Topology, TopologyError> {
    crate::rails::RailLeafSpine {
        units: 2,
        hosts_per_unit: 16,
        gpus_per_host: 8,
        spines: 8,
        gpu_type: "h100".into(),
        nic_gbps: 400.0,
        oversubscription: 1.0,
    }
    .build("h100-rails")
}

/// A GB200 NVL72 cluster: 4 racks, each one NVLink domain of 72 Blackwell
/// GPUs (7.2 Tbit/s NVLink 5 per GPU each way), each GPU with a 400 Gbit/s
/// NIC, the racks under 4 spines at 1:1. 288 GPUs. A rack is one host of
/// 72 GPUs here (its NVLink switch trays are inside the domain).
pub fn gb200_nvl72() -> Result<Topology, TopologyError> {
    LeafSpine::with_oversubscription(4, 1, 4, 72, "gb200", 72.0 * 400.0, 1.0).build("gb200-nvl72")
}

/// A host of a three-tier Clos and the switches above it: its ToR, the
/// aggregation switch the ToR hangs from, and the core (Lingjun's `ASW`,
/// `PSW`, `DSW`).
#[derive(Debug, Clone, PartialEq)]
pub struct ClosHost {
    /// Host name.
    pub name: String,
    /// Its ToR (unique within its aggregation switch).
    pub tor: String,
    /// The aggregation switch.
    pub aggregation: String,
    /// The core switch.
    pub core: String,
}

/// Rates of a three-tier Clos whose file gives only its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosRates {
    /// GPUs per host.
    pub gpus_per_host: u32,
    /// GPU type.
    pub gpu_type: String,
    /// Host-to-ToR rate, Gbit/s (all of a host's NICs).
    pub host_gbps: f64,
    /// Hosts' rate over ToR uplink rate at each ToR.
    pub tor_ratio: f64,
    /// ToRs' uplink rate over aggregation uplink rate at each aggregation switch.
    pub aggregation_ratio: f64,
}

impl Default for ClosRates {
    /// orrery's choice for Lingjun, which publishes no rates: 8 H100-class
    /// GPUs a host with a 400 Gbit/s NIC each (as `h100`), non-blocking
    /// from ToR to aggregation, 4:1 from aggregation to core.
    fn default() -> Self {
        ClosRates {
            gpus_per_host: 8,
            gpu_type: "h100".into(),
            host_gbps: 3200.0,
            tor_ratio: 1.0,
            aggregation_ratio: 4.0,
        }
    }
}

/// A three-tier tree of ToRs under aggregation switches under cores, from
/// its hosts: each ToR's uplink carries its hosts' rate over `tor_ratio`,
/// each aggregation switch's uplink its ToRs' uplinks over
/// `aggregation_ratio`. Switches are named `tor:AGG/TOR`, `agg:AGG`,
/// `core:CORE`. O(hosts).
pub fn clos_tree(name: &str, hosts: &[ClosHost], rates: &ClosRates) -> Result<Topology, TopologyError> {
    use std::collections::BTreeMap;
    let mut b = Builder::new();
    let mut tors: BTreeMap<(String, String), (Ref, u32, String)> = BTreeMap::new();
    let mut aggs: BTreeMap<String, (Ref, f64, String)> = BTreeMap::new();
    let mut cores: BTreeMap<String, Ref> = BTreeMap::new();
    let host_refs: Vec<Ref> =
        hosts.iter().map(|h| b.host(h.name.clone(), rates.gpus_per_host, &rates.gpu_type, 0, 0.0)).collect();
    for (h, r) in hosts.iter().zip(&host_refs) {
        let key = (h.aggregation.clone(), h.tor.clone());
        let tor = match tors.get_mut(&key) {
            Some(t) => {
                t.1 += 1;
                t.0
            }
            None => {
                let t = b.switch(format!("tor:{}/{}", h.aggregation, h.tor), Tier::Leaf);
                tors.insert(key, (t, 1, h.core.clone()));
                t
            }
        };
        b.cable(*r, tor, rates.host_gbps);
        if !cores.contains_key(&h.core) {
            let c = b.switch(format!("core:{}", h.core), Tier::Spine);
            cores.insert(h.core.clone(), c);
        }
    }
    for ((agg, _), (tor, n, core)) in &tors {
        let up = f64::from(*n) * rates.host_gbps / rates.tor_ratio.max(1e-9);
        let entry = match aggs.get_mut(agg) {
            Some(a) => a,
            None => {
                let a = b.switch(format!("agg:{agg}"), Tier::Spine);
                aggs.entry(agg.clone()).or_insert((a, 0.0, core.clone()))
            }
        };
        entry.1 += up;
        b.cable(*tor, entry.0, up);
    }
    for (a, up, core) in aggs.values() {
        b.cable(*a, cores[core], up / rates.aggregation_ratio.max(1e-9));
    }
    b.build(name)
}

/// CASSINI §5.1: 24 servers with one A100 and a 50 Gbps NIC; a Tofino emulates
/// 13 logical switches and 48 bidirectional links at 2:1 oversubscription.
///
/// Figure 10 is not in the text; our reading that satisfies all three counts:
/// 12 ToR switches with 2 servers each (24 host links) and one spine, each ToR
/// joined to it by two 25 Gbps links (24 more links), so 100 Gbps of servers
/// share 50 Gbps of uplink (2:1) and cross-rack flows have two ECMP paths.
pub fn cassini() -> Topology {
    let mut b = Builder::new();
    let spine = b.switch("spine0", Tier::Spine);
    for r in 0..12 {
        let leaf = b.switch(format!("tor{r}"), Tier::Leaf);
        for k in 0..2 {
            let h = b.host(format!("h{}", r * 2 + k), 1, "a100", 32, 256.0);
            b.cable(h, leaf, 50.0);
        }
        b.cable(leaf, spine, 25.0);
        b.cable(leaf, spine, 25.0);
    }
    b.build("cassini").expect("static topology is valid")
}

/// Metronome §IV-A, Fig. 4: three workers with an A30 split by MIG into four
/// GPUs on 25 Gbps links and one T4 worker on a 10 Gbps link, one switch.
pub fn metronome() -> Topology {
    let mut b = Builder::new();
    let sw = b.switch("switch0", Tier::Core);
    for i in 0..3 {
        let h = b.host(format!("worker{i}"), 4, "a30-mig-1g.6gb", 32, 1024.0);
        b.cable(h, sw, 25.0);
    }
    let t4 = b.host("worker3", 1, "t4", 20, 32.0);
    b.cable(t4, sw, 10.0);
    b.build("metronome").expect("static topology is valid")
}

/// FORESIGHT §V: 48 machines in racks of 8 under 1 to 8 spines. Host links
/// and uplinks are 100 Gbps each, so the oversubscription is `8 / spines`.
pub fn foresight(spines: u32) -> Topology {
    LeafSpine {
        racks: 6,
        hosts_per_rack: 8,
        spines: spines.max(1),
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 100.0,
        uplink_gbps: 100.0,
    }
    .build(&format!("foresight-{}spine", spines.max(1)))
    .expect("static topology is valid")
}

/// Plebiscito §V-B: 100 nodes under 5 leaves and 2 spines at 3:1, with 25 or
/// 100 Gbps host links. Nodes carry 8 GPUs of three types in turn (V100, T4,
/// A100: the paper calls the cluster heterogeneous without a breakdown) and 96 cores.
pub fn plebiscito(host_gbps: f64) -> Topology {
    let mut t = LeafSpine::with_oversubscription(5, 20, 2, 8, "v100", host_gbps, 3.0)
        .build(&format!("plebiscito-{host_gbps}g"))
        .expect("static topology is valid");
    for (i, h) in t.hosts.iter_mut().enumerate() {
        h.gpu_type = ["v100", "t4", "a100"][i % 3].to_string();
        h.cpus = 96;
        h.memory_gib = 512.0;
    }
    t
}

/// Castor §6: 16 servers with 8 GPUs each on 200 Gbps InfiniBand through one
/// non-blocking switch (the physical testbed has 4 such servers with A6000s).
pub fn castor() -> Topology {
    let mut b = Builder::new();
    let sw = b.switch("ib0", Tier::Core);
    for i in 0..16 {
        let h = b.host(format!("h{i}"), 8, "a6000", 128, 512.0);
        b.cable(h, sw, 200.0);
    }
    b.build("castor").expect("static topology is valid")
}

/// One machine of a machine list (Philly's `cluster_machine_list`, PAI's spec).
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// Machine id.
    pub name: String,
    /// GPUs.
    pub gpus: u32,
    /// GPU type name.
    pub gpu_type: String,
    /// CPU cores (0 if unknown).
    pub cpus: u32,
    /// Memory in GiB (0 if unknown).
    pub memory_gib: f64,
}

/// A cluster from a machine list. Public traces do not publish the network, so
/// machines are grouped by GPU type into racks of `rack_size` under a two-spine
/// leaf-spine at 2:1, with `host_gbps` NICs. Returns the topology.
pub fn from_machines(name: &str, machines: &[Machine], rack_size: u32, host_gbps: f64) -> Topology {
    let mut sorted: Vec<&Machine> = machines.iter().collect();
    sorted.sort_by(|a, b| a.gpu_type.cmp(&b.gpu_type).then(a.gpus.cmp(&b.gpus)));
    let rack_size = rack_size.max(1) as usize;
    let mut b = Builder::new();
    let spines: Vec<Ref> = (0..2).map(|s| b.switch(format!("spine{s}"), Tier::Spine)).collect();
    let uplink = rack_size as f64 * host_gbps / (2.0 * 2.0);
    for (r, rack) in sorted.chunks(rack_size).enumerate() {
        let leaf = b.switch(format!("leaf{r}"), Tier::Leaf);
        for m in rack {
            let h = b.host(m.name.clone(), m.gpus, &m.gpu_type, m.cpus, m.memory_gib);
            b.cable(h, leaf, host_gbps);
        }
        for &s in &spines {
            b.cable(leaf, s, uplink);
        }
    }
    b.build(name).expect("machine-list topology is valid")
}

/// Names accepted by [`by_name`], with a one-line description each.
pub const NAMED: &[(&str, &str)] = &[
    ("cassini", "CASSINI testbed: 24 x 1 A100, 50 Gbps, 13 logical switches, 2:1"),
    ("metronome", "Metronome testbed: 3 x (A30 as 4 MIG GPUs, 25 Gbps) + 1 x T4 on 10 Gbps"),
    ("foresight-<1..8>", "FORESIGHT: 48 machines, racks of 8, 1-8 spines (default 2)"),
    ("plebiscito-<25|100>", "Plebiscito: 100 nodes x 8 GPUs, 5 leaves, 2 spines, 3:1 (default 25 Gbps)"),
    ("castor", "Castor: 16 servers x 8 A6000, 200 Gbps InfiniBand"),
    ("leaf-spine", "16 hosts x 8 V100 in 4 racks, 2 spines, 100 Gbps hosts, 2:1"),
    ("demo", "`orrery serve`'s built-in cluster: 4 hosts x 2 V100 (h0-h3) in 2 racks, 1 spine, 50 Gbps hosts, 2:1"),
    ("h100", "32 HGX H100 hosts (8 GPUs on NVSwitch, 8 x 400 Gbps) in 8 racks, 8 spines, 1:1"),
    ("h100-rails", "the same 32 hosts rail-optimised: 2 units of 16, NIC k on rail switch k (400 Gbps), 8 spines, 1:1"),
    ("gb200-nvl72", "4 GB200 NVL72 racks (one 72-GPU NVLink domain each, 400 Gbps a GPU), 4 spines, 1:1"),
];

/// A built-in set-up by name (`foresight-4`, `plebiscito-100`, ...); Philly's
/// cluster needs its machine list and is built by the trace crate.
pub fn by_name(name: &str) -> Option<Topology> {
    let n = name.trim().to_ascii_lowercase();
    let suffix = |p: &str| n.strip_prefix(p).map(|s| s.trim_start_matches('-'));
    match n.as_str() {
        "cassini" => Some(cassini()),
        "metronome" => Some(metronome()),
        "castor" => Some(castor()),
        "demo" => LeafSpine::with_oversubscription(2, 2, 1, 2, "v100", 50.0, 2.0).build("demo").ok(),
        "h100" => h100().ok(),
        "h100-rails" => h100_rails().ok(),
        "gb200-nvl72" | "gb200" | "nvl72" => gb200_nvl72().ok(),
        "leaf-spine" | "leafspine" => {
            LeafSpine::with_oversubscription(4, 4, 2, 8, "v100", 100.0, 2.0).build("leaf-spine").ok()
        }
        _ => {
            if let Some(s) = suffix("foresight") {
                let spines = if s.is_empty() { 2 } else { s.parse().ok().filter(|k| (1..=8).contains(k))? };
                Some(foresight(spines))
            } else if let Some(s) = suffix("plebiscito") {
                let g = if s.is_empty() {
                    25.0
                } else {
                    s.trim_end_matches('g').parse().ok().filter(|g| *g == 25.0 || *g == 100.0)?
                };
                Some(plebiscito(g))
            } else {
                None
            }
        }
    }
}

/// The serialised form of a topology file: explicit hosts, switches and cables
/// by name, or a `[leaf_spine]` shorthand.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    /// Name of the cluster.
    #[serde(default)]
    pub name: Option<String>,
    /// A generated leaf-spine.
    #[serde(default)]
    pub leaf_spine: Option<LeafSpine>,
    /// Hosts.
    #[serde(default)]
    pub hosts: Vec<crate::topology::Host>,
    /// Switches.
    #[serde(default)]
    pub switches: Vec<crate::topology::Switch>,
    /// Cables (bidirectional) between named nodes.
    #[serde(default)]
    pub cables: Vec<CableSpec>,
}

/// A cable in a topology file.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CableSpec {
    /// One end (host or switch name).
    pub a: String,
    /// Other end.
    pub b: String,
    /// Capacity in each direction, Gbit/s.
    #[schemars(range(min = MIN_LINK_GBPS, max = MAX_LINK_GBPS))]
    pub gbps: f64,
}

/// Errors loading a topology file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The text is not valid TOML/JSON for a topology.
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser expected and found.
        message: String,
    },
    /// A field on a known line whose value is not accepted.
    #[error("{file}:{line}: {message}")]
    AtLine {
        /// File name.
        file: String,
        /// 1-based line.
        line: usize,
        /// The field and what is wrong with it.
        message: String,
    },
    /// The structure is valid but the content is not.
    #[error("{file}: {message}")]
    Invalid {
        /// File name.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// Line and column (1-based) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    (line, column)
}

/// The dotted name of the key set on `line` of a TOML document (its table
/// header and the key before `=`), if that line sets one. O(lines before).
fn key_at(text: &str, line: usize) -> Option<String> {
    let mut table = String::new();
    for (i, l) in text.lines().enumerate().take(line) {
        let t = l.trim();
        if let Some(h) = t.strip_prefix('[') {
            let h = h.trim_start_matches('[');
            table = h.split(']').next().unwrap_or("").trim().to_string();
        } else if i + 1 == line {
            let (key, _) = t.split_once('=')?;
            let key = key.trim().trim_matches('"');
            if key.is_empty() || key.contains(['{', '[', '"', ' ']) {
                return None;
            }
            return Some(if table.is_empty() { key.to_string() } else { format!("{table}.{key}") });
        }
    }
    None
}

/// The line of a field of a TOML document, by its dotted path as error
/// messages name it (`workload.jobs`, `scenario[2].load`, `sim`): the line of
/// its key, or of the element for an index. `None` for JSON, a path that is
/// not there, or a document that does not parse. O(size of the document).
pub fn line_of(text: &str, path: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    if text.trim_start().starts_with('{') {
        return None;
    }
    let root = DeTable::parse(text).ok()?;
    let mut table: &DeTable = root.get_ref();
    let mut at: Option<usize> = None;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let (name, index) = match part.split_once('[') {
            // `workers[0][1]`: the line of element 0 (an inline array's
            // elements share it).
            Some((n, rest)) => (n, Some(rest.split(']').next()?.parse::<usize>().ok()?)),
            None => (part, None),
        };
        let (key, value) = table.iter().find(|(k, _)| k.get_ref().as_ref() == name)?;
        at = Some(key.span().start);
        let mut value = value;
        if let Some(i) = index {
            let DeValue::Array(items) = value.get_ref() else { return at.map(|o| line_col(text, o).0) };
            value = items.get(i)?;
            at = Some(value.span().start);
        }
        if parts.peek().is_some() {
            let DeValue::Table(t) = value.get_ref() else { break };
            table = t;
        }
    }
    at.map(|o| line_col(text, o).0)
}

/// Deserialises a configuration file: JSON if the text starts with `{`, TOML
/// otherwise; errors carry `file:line:column`. `file` is used in messages only.
pub fn parse_config<T: serde::de::DeserializeOwned>(file: &str, text: &str) -> Result<T, LoadError> {
    if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| LoadError::Syntax {
            file: file.into(),
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    } else {
        toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map_or((0, 0), |s| line_col(text, s.start));
            // Name the field, not only its place: `job = 40` under
            // [workload] says "workload.job: ... expected a sequence".
            let message = match key_at(text, line) {
                Some(key) => format!("{key}: {}", e.message()),
                None => e.message().to_string(),
            };
            LoadError::Syntax { file: file.into(), line, column, message }
        })
    }
}

/// [`parse_config`], then every number against its declared range
/// ([`crate::ranges`]); the error names the file, the line (TOML) and the
/// field. O(size of the document).
pub fn parse_checked<T>(file: &str, text: &str) -> Result<T, LoadError>
where
    T: serde::de::DeserializeOwned + Serialize + JsonSchema + 'static,
{
    let value: T = parse_config(file, text)?;
    crate::ranges::check(&value).map_err(|e| match line_of(text, &e.path) {
        Some(line) => LoadError::AtLine { file: file.into(), line, message: e.to_string() },
        None => LoadError::Invalid { file: file.into(), message: e.to_string() },
    })?;
    Ok(value)
}

/// Parses a topology file (JSON or TOML, see [`parse_checked`]).
pub fn parse_topology(file: &str, text: &str) -> Result<Topology, LoadError> {
    let spec: TopologyFile = parse_checked(file, text)?;
    let invalid = |message: String| LoadError::Invalid { file: file.into(), message };
    let name = spec.name.clone().unwrap_or_else(|| file.to_string());
    if let Some(ls) = &spec.leaf_spine {
        if !spec.hosts.is_empty() || !spec.cables.is_empty() {
            return Err(invalid("give either [leaf_spine] or hosts/switches/cables, not both".into()));
        }
        return ls.build(&name).map_err(|e| invalid(e.to_string()));
    }
    if spec.hosts.is_empty() {
        return Err(invalid("no hosts: expected [[hosts]] entries or a [leaf_spine] table".into()));
    }
    for (i, h) in spec.hosts.iter().enumerate() {
        if crate::gpu::gpu_type(&h.gpu_type).is_none() && h.gpus > 0 {
            return Err(invalid(format!(
                "hosts[{i}] ({}): unknown gpu_type {:?}; expected one of {}",
                h.name,
                h.gpu_type,
                gpu_names()
            )));
        }
    }
    let mut b = Builder::new();
    let mut refs = std::collections::HashMap::new();
    for h in &spec.hosts {
        refs.insert(h.name.clone(), b.host(h.name.clone(), h.gpus, &h.gpu_type, h.cpus, h.memory_gib));
    }
    for s in &spec.switches {
        refs.insert(s.name.clone(), b.switch(s.name.clone(), s.tier));
    }
    for (i, c) in spec.cables.iter().enumerate() {
        let end = |n: &str| {
            refs.get(n).copied().ok_or_else(|| invalid(format!("cables[{i}]: no host or switch named {n:?}")))
        };
        let (a, z) = (end(&c.a)?, end(&c.b)?);
        b.cable(a, z, c.gbps);
    }
    b.build(&name).map_err(|e| invalid(e.to_string()))
}

fn gpu_names() -> String {
    crate::gpu::GPU_TYPES.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cables(t: &Topology) -> usize {
        t.links.len() / 2
    }

    #[test]
    fn generic_leaf_spine_counts_and_oversubscription() {
        // 4 racks × 4 hosts at 100 G, 2 spines sized for 2:1 → 100 G uplinks.
        let ls = LeafSpine::with_oversubscription(4, 4, 2, 8, "v100", 100.0, 2.0);
        assert_eq!(ls.uplink_gbps, 100.0);
        let t = ls.build("t").expect("valid");
        assert_eq!(t.hosts.len(), 16);
        assert_eq!(t.switches.len(), 6);
        assert_eq!(cables(&t), 16 + 4 * 2);
        assert_eq!(t.gpu_count(), 128);
        assert!((t.oversubscription() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn cassini_has_24_servers_13_switches_48_links_at_2_to_1() {
        let t = cassini();
        assert_eq!(t.hosts.len(), 24);
        assert_eq!(t.switches.len(), 13);
        assert_eq!(cables(&t), 48);
        assert!(t.hosts.iter().all(|h| h.gpus == 1 && h.gpu_type == "a100"));
        assert!((t.oversubscription() - 2.0).abs() < 1e-12);
        assert_eq!(t.host_nic_gbps(0), 50.0);
        // Cross-rack: 2 uplinks × 2 downlinks = 4 ECMP paths of 4 hops.
        let p = t.paths(0, 2);
        assert_eq!(p.len(), 4, "2 uplinks up × 2 downlinks");
        assert!(p.iter().all(|p| p.len() == 4));
        // Same rack: one 2-hop path.
        assert_eq!(t.paths(0, 1), vec![vec![0, 3]]);
    }

    #[test]
    fn metronome_is_heterogeneous() {
        let t = metronome();
        assert_eq!(t.hosts.len(), 4);
        assert_eq!(t.gpu_count(), 13);
        let nics: Vec<f64> = (0..4).map(|h| t.host_nic_gbps(h)).collect();
        assert_eq!(nics, vec![25.0, 25.0, 25.0, 10.0]);
        assert_eq!(t.hosts[3].gpu_type, "t4");
    }

    #[test]
    fn foresight_spines_set_oversubscription() {
        for s in 1..=8u32 {
            let t = foresight(s);
            assert_eq!(t.hosts.len(), 48);
            assert_eq!(t.switches.len(), 6 + s as usize);
            assert_eq!(cables(&t), 48 + 6 * s as usize);
            assert!((t.oversubscription() - 8.0 / f64::from(s)).abs() < 1e-12);
            // Cross-rack ECMP candidates = number of spines.
            assert_eq!(t.paths(0, 8).len(), s as usize);
        }
    }

    #[test]
    fn plebiscito_is_100_nodes_at_3_to_1() {
        for g in [25.0, 100.0] {
            let t = plebiscito(g);
            assert_eq!(t.hosts.len(), 100);
            assert_eq!(t.switches.len(), 7);
            assert_eq!(cables(&t), 100 + 10);
            assert!((t.oversubscription() - 3.0).abs() < 1e-12);
            assert_eq!(t.host_nic_gbps(0), g);
            // 20 hosts × g / (2 × uplink) = 3 → uplink = 10g/3.
            let uplink = t.links.iter().find(|l| l.from >= 100 && l.to >= 100).map(|l| l.gbps);
            assert!((uplink.unwrap_or(0.0) - g * 10.0 / 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn castor_is_16_by_8_on_200g() {
        let t = castor();
        assert_eq!(t.hosts.len(), 16);
        assert_eq!(t.gpu_count(), 128);
        assert_eq!(cables(&t), 16);
        assert!(t.links.iter().all(|l| l.gbps == 200.0));
        assert_eq!(t.paths(0, 15).len(), 1);
    }

    #[test]
    fn named_setups_resolve() {
        assert_eq!(by_name("foresight-4").map(|t| t.switches.len()), Some(10));
        assert_eq!(by_name("plebiscito-100").map(|t| t.host_nic_gbps(0)), Some(100.0));
        assert!(by_name("foresight-9").is_none());
        assert!(by_name("nope").is_none());
    }

    #[test]
    fn latencies_count_hops() {
        let t = cassini();
        let m = t.latencies_us();
        assert_eq!(m.get(0, 0), 0.0);
        assert_eq!(m.get(0, 1), 2.0);
        assert_eq!(m.get(0, 23), 4.0);
    }

    /// Every pair's latency against the fastest of its enumerated shortest
    /// paths.
    fn assert_latencies_are_the_fastest_shortest_paths(t: &Topology) {
        let m = t.latencies_us();
        let h = t.hosts.len();
        assert_eq!(m.hosts(), h);
        for a in 0..h {
            for b in 0..h {
                let by_paths = t
                    .paths(a, b)
                    .iter()
                    .map(|p| p.iter().map(|&l| t.links[l].latency_us).sum::<f64>())
                    .fold(if a == b { 0.0 } else { f64::INFINITY }, f64::min);
                assert_eq!(m.get(a, b), by_paths, "{} {a} → {b}", t.name);
            }
        }
    }

    #[test]
    fn latencies_take_the_fastest_of_the_fewest_hop_paths() {
        // FORESIGHT's fabric of 4 spines, with the links into and out of
        // spine 0 made 5 µs slower: a cross-rack pair has 4 paths of 4 hops,
        // and the table must give the fastest, as enumerating them does.
        let mut t = foresight(4);
        let spine0 =
            t.hosts.len() + t.switches.iter().position(|s| s.tier == crate::topology::Tier::Spine).expect("a spine");
        for l in &mut t.links {
            if l.from == spine0 || l.to == spine0 {
                l.latency_us += 5.0;
            }
        }
        assert_latencies_are_the_fastest_shortest_paths(&t);
        let cross_rack = (1..t.hosts.len()).find(|&b| t.paths(0, b).len() > 1).expect("a pair with ECMP paths");
        assert!(t.paths(0, cross_rack).iter().any(|p| p.iter().any(|&l| t.links[l].to == spine0)));
    }

    #[test]
    fn hosts_attached_unlike_their_rack_get_rows_of_their_own() {
        // Host 3's cable is 7 µs slower one way and host 5's the other way:
        // neither sees (or is seen from) the others as its rack-mates are.
        let mut t = foresight(4);
        for l in &mut t.links {
            if l.from == 3 || l.to == 5 {
                l.latency_us += 7.0;
            }
        }
        assert_latencies_are_the_fastest_shortest_paths(&t);
        let m = t.latencies_us();
        assert_eq!(m.get(3, 1) - m.get(2, 1), 7.0);
        assert_eq!(m.get(1, 5) - m.get(1, 4), 7.0);
        assert_latencies_are_the_fastest_shortest_paths(&h100().expect("the h100 set-up"));
    }

    #[test]
    fn toml_file_with_explicit_cables() {
        let text = r#"
name = "two"
[[hosts]]
name = "a"
gpus = 8
gpu_type = "v100"
[[hosts]]
name = "b"
gpus = 8
gpu_type = "v100"
[[switches]]
name = "s"
tier = "core"
[[cables]]
a = "a"
b = "s"
gbps = 100
[[cables]]
a = "b"
b = "s"
gbps = 40
"#;
        let t = parse_topology("two.toml", text).expect("valid");
        assert_eq!(t.hosts.len(), 2);
        assert_eq!(t.host_nic_gbps(1), 40.0);
        assert_eq!(t.paths(0, 1).len(), 1);
    }

    #[test]
    fn json_leaf_spine_shorthand() {
        let text = r#"{"leaf_spine": {"racks": 2, "hosts_per_rack": 2, "spines": 2, "gpus_per_host": 4, "gpu_type": "a100", "host_gbps": 50, "uplink_gbps": 50}}"#;
        let t = parse_topology("ls.json", text).expect("valid");
        assert_eq!(t.hosts.len(), 4);
        assert_eq!(t.gpu_count(), 16);
    }

    #[test]
    fn bad_files_name_the_place() {
        let e = parse_topology("x.toml", "[[hosts]]\nname = \"a\"\ngpus = \"eight\"\n").map(|_| ()).expect_err("bad");
        let msg = e.to_string();
        assert!(msg.starts_with("x.toml:3:"), "{msg}");
        assert!(msg.contains("invalid type"), "{msg}");
        let e = parse_topology("y.toml", "[[hosts]]\nname = \"a\"\ngpus = 1\ngpu_type = \"tpu\"\n")
            .map(|_| ())
            .expect_err("bad");
        assert!(e.to_string().contains("unknown gpu_type \"tpu\""), "{e}");
        let e = parse_topology(
            "z.toml",
            "[[hosts]]\nname = \"a\"\ngpus = 1\ngpu_type = \"t4\"\n[[cables]]\na = \"a\"\nb = \"q\"\ngbps = 1\n",
        )
        .map(|_| ())
        .expect_err("bad");
        assert!(e.to_string().contains("cables[0]: no host or switch named \"q\""), "{e}");
        let e = parse_topology("w.json", "{\"hosts\": 3}").map(|_| ()).expect_err("bad");
        assert!(e.to_string().starts_with("w.json:1:"), "{e}");
        let e = parse_topology("n.toml", "[[hosts]]\nname = \"a\"\ngpus = 1\ngpu_type = \"t4\"\n[[switches]]\nname=\"s\"\ntier=\"leaf\"\n[[cables]]\na = \"a\"\nb = \"s\"\ngbps = -1\n").map(|_| ()).expect_err("bad");
        assert_eq!(e.to_string(), "n.toml:11: cables[0].gbps: expected a number from 0.001 to 1000000, found -1.0");
        // Two hosts, no cable: refused, naming both.
        let two = "[[hosts]]\nname = \"a\"\ngpus = 1\ngpu_type = \"t4\"\n[[hosts]]\nname = \"b\"\ngpus = 1\ngpu_type = \"t4\"\n";
        let e = parse_topology("u.toml", two).map(|_| ()).expect_err("unreachable");
        assert!(e.to_string().contains("host a cannot reach host b"), "{e}");
    }

    #[test]
    fn leaf_spine_sizes_that_cannot_work_are_refused() {
        let ls = |racks, hosts_per_rack, spines, host_gbps| LeafSpine {
            racks,
            hosts_per_rack,
            spines,
            gpus_per_host: 2,
            gpu_type: "v100".into(),
            host_gbps,
            uplink_gbps: 100.0,
        };
        // 65,536 x 65,536 wrapped around to 0 hosts in u32.
        let e = ls(65_536, 65_536, 4, 100.0).build("w").map(|_| ()).expect_err("too many");
        assert_eq!(e.to_string(), "4294967296 hosts; expected at most 16384");
        // Racks joined by no spine.
        let e = ls(4, 2, 0, 100.0).build("s").map(|_| ()).expect_err("no spine");
        assert_eq!(e.to_string(), "host h0 cannot reach host h2: no path of links joins them");
        // One rack needs no spine.
        assert_eq!(ls(1, 4, 0, 100.0).build("r").expect("one rack").hosts.len(), 4);
        let e = ls(2, 2, 1, 1e-300).build("z").map(|_| ()).expect_err("slow");
        assert!(e.to_string().contains("found 1e-300"), "{e}");
        let e = ls(0, 2, 1, 100.0).build("e").map(|_| ()).expect_err("empty");
        assert_eq!(e.to_string(), "racks: expected at least 1, found 0");
        // 2^32 - 1 spines: refused before a switch is allocated.
        let e = ls(2, 2, u32::MAX, 100.0).build("s").map(|_| ()).expect_err("spines");
        assert_eq!(e.to_string(), "4294967297 switches; expected at most 32768");
        let e = LeafSpine { gpu_type: "h900".into(), ..ls(2, 2, 1, 100.0) }.build("g").map(|_| ()).expect_err("gpu");
        assert!(e.to_string().starts_with("GPU type \"h900\" is unknown; expected one of "), "{e}");
    }
}
