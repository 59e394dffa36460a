//! An orrery topology built out of Linux network namespaces on this machine.
//!
//! Every node (host or switch) becomes a namespace `PREFIX-NAME`; every cable
//! (a pair of directed links) a veth pair with a /30 of `10.64.0.0/10`. A host
//! has one interface, `eth0`, with its end of the cable as its address and a
//! default route to its leaf. A switch forwards: its interfaces are `p0`,
//! `p1`, ... in cable order, it holds a /32 route to every host whose next
//! hops are the first links of all the topology's shortest paths (equal-cost
//! multipath, hashed on the 5-tuple: `fib_multipath_hash_policy = 1`), and one
//! routing table per path index that a `Route` decision can pin a flow to: a
//! packet with TOS `path_tos(i)` follows path `i` of [`Topology::paths`].
//!
//! Every directed link is shaped at the sending end: an htb root class `1:1`
//! at the link's rate times `scale`, a default leaf `1:10` with a bfifo of
//! `queue_ms` of that rate (never below 128 KiB, so one GSO burst fits), and
//! room for per-job classes under `1:1` (node agents add them for
//! `Throttle`s). Traffic never leaves the namespaces: no interface is in the
//! root namespace and no route leads out.
//!
//! That queue is one tail-drop FIFO per link, where TCP's flows compete as
//! their congestion controls make them. [`Queueing::Fair`] (issue 68) gives
//! each pair of hosts whose paths cross a link a class of its own under
//! `1:1` instead, with an equal guaranteed rate, the link's rate as ceiling
//! and its own FIFO: htb serves the backlogged classes in turn and lends
//! them the idle classes' rate in equal parts, so the link is shared per
//! flow, as DCQCN's fair convergence shares CASSINI's RDMA testbed (this
//! kernel has no sfq, fq or fq_codel). A host pair carries one flow of a
//! ring; a job's throttle class still takes its port first (filter
//! priority 17 before the pairs' 20).
//!
//! [`Queueing::Priority`] (issue 67: Crux's priorities, "as HTB classes,
//! since this kernel has no prio qdisc") gives every link eight classes
//! served by strict priority, chosen by the IP precedence a host's node
//! agent marks on a job's packets for its `TrafficClass` (nftables in the
//! host's namespace); the switches classify, the hosts mark, as a fabric
//! whose switches map DSCP to priority queues.
//!
//! Everything is made with `ip` and `tc` from iproute2, one batch per
//! namespace. [`Fabric`] removes its namespaces when dropped (deleting a
//! namespace deletes its veths and qdiscs), and [`down`] removes any left
//! behind by prefix.

use orrery_model::{NodeId, Topology};
use std::collections::BTreeMap;
use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

/// Errors building or tearing down a fabric.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// Not running as root (or without CAP_NET_ADMIN).
    #[error("the testbed needs root (CAP_NET_ADMIN) to make network namespaces; run it with sudo")]
    NotRoot,
    /// The topology cannot be built as namespaces.
    #[error("topology {topology}: {why}")]
    Topology {
        /// Its name.
        topology: String,
        /// What is wrong.
        why: String,
    },
    /// A bad option.
    #[error("{field}: expected {expected}, found {found}")]
    Option {
        /// The option.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// What it was.
        found: String,
    },
    /// `ip` or `tc` failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed.
        stderr: String,
    },
}

/// How to build a fabric.
#[derive(Debug, Clone)]
pub struct FabricOptions {
    /// Namespace name prefix (letters and digits, at most 8).
    pub prefix: String,
    /// Link rates are the topology's times this (e.g. 0.01: 50 Gbit/s → 500 Mbit/s).
    pub scale: f64,
    /// Queue of each link, in ms of its (scaled) rate.
    pub queue_ms: f64,
    /// How each link's queue is shared between flows.
    pub queueing: Queueing,
}

impl FabricOptions {
    /// The simulator's model of this fabric's transport (issue 68), at the
    /// model's rates: `cc` (reno, cubic or bbr) over this queueing; the
    /// wire's 1,500-byte segments, dropped one at a time, and each
    /// queue's `queue_ms` (at least 128 KiB), scaled by 1/`scale` as the
    /// workers scale their bytes; a 150 µs round trip with empty queues
    /// (52 µs measured between two hosts' namespaces with 1-byte messages,
    /// plus a 1,500-byte segment's 24 µs at 500 Mbit/s on each of 4 hops).
    pub fn transport_model(&self, cc: &str, link_gbps: f64) -> Result<orrery_sim::transport::TransportConfig, String> {
        use orrery_sim::transport::{Control, Queueing as Q, TransportConfig};
        let control = Control::ALL
            .iter()
            .find(|(name, _)| *name == cc)
            .map(|&(_, c)| c)
            .ok_or_else(|| format!("--cc {cc}: the simulator models reno, cubic, bbr, dcqcn and mltcp-reno"))?;
        let rate_bytes_per_ms = link_gbps * self.scale * 1e9 / 8.0 / 1e3;
        let floor_ms = if rate_bytes_per_ms > 0.0 { 131_072.0 / rate_bytes_per_ms } else { 0.0 };
        Ok(TransportConfig {
            control,
            queueing: match self.queueing {
                Queueing::TailDrop => Q::TailDrop,
                Queueing::Fair => Q::Fair,
                Queueing::Priority => Q::Priority,
            },
            base_rtt_us: 150.0,
            buffer_ms: self.queue_ms.max(floor_ms),
            mss_bytes: 1500.0 / self.scale,
            burst_bytes: 1500.0 / self.scale,
            step_us: 100.0,
            rto_ms: 200.0,
        })
    }
}

impl Default for FabricOptions {
    fn default() -> Self {
        FabricOptions { prefix: "orr".into(), scale: 0.01, queue_ms: 2.0, queueing: Queueing::TailDrop }
    }
}

/// How a shaped link queues the flows that cross it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Queueing {
    /// One FIFO of `queue_ms` per link, dropping at its tail: TCP's flows
    /// take what their congestion controls win.
    #[default]
    TailDrop,
    /// A class and a FIFO of `queue_ms` per pair of hosts whose paths cross
    /// the link, served in turn (htb): each flow gets an equal share.
    Fair,
    /// A switch's strict-priority queues (Crux's, §4.3): eight classes per
    /// link, chosen by the packet's IP precedence ([`class_tos`]), each
    /// with its own FIFO; htb lends the link to the highest backlogged
    /// class first.
    Priority,
}

impl std::str::FromStr for Queueing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "tail-drop" => Ok(Queueing::TailDrop),
            "fair" => Ok(Queueing::Fair),
            "priority" => Ok(Queueing::Priority),
            _ => Err(format!("expected tail-drop, fair or priority, found {s:?}")),
        }
    }
}

impl std::fmt::Display for Queueing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queueing::TailDrop => "tail-drop",
            Queueing::Fair => "fair",
            Queueing::Priority => "priority",
        })
    }
}

/// Under [`Queueing::Fair`], the ordered host pairs whose shortest paths
/// cross each link (every ECMP candidate counts: the hash may pick any).
/// O(hosts² · paths · hops).
fn pairs_crossing(topo: &Topology) -> Vec<Vec<(usize, usize)>> {
    let hosts = topo.hosts.len();
    let mut crossing: Vec<Vec<(usize, usize)>> = vec![Vec::new(); topo.links.len()];
    for src in 0..hosts {
        for dst in (0..hosts).filter(|&d| d != src) {
            let mut links: Vec<usize> = topo.shared_paths(src, dst).iter().flatten().copied().collect();
            links.sort_unstable();
            links.dedup();
            for l in links {
                crossing[l].push((src, dst));
            }
        }
    }
    crossing
}

/// The tc lines that share a link's device `dev` (shaped at `rate` bit/s,
/// its FIFOs `queue` bytes) fairly between the host pairs `ends` (source
/// and destination addresses) whose paths cross it: a class each under
/// `1:1` with an equal guaranteed rate and the link's rate as ceiling, its
/// own FIFO, and a u32 filter on the pair's addresses. O(pairs).
fn fair_lines(dev: &str, rate: u64, queue: u64, ends: &[(Ipv4Addr, Ipv4Addr)]) -> Vec<String> {
    let share = (rate / ends.len().max(1) as u64).max(8_000);
    let mut lines = Vec::with_capacity(3 * ends.len());
    for (k, (from, to)) in ends.iter().enumerate() {
        let class = pair_class(k);
        lines.push(format!(
            "class add dev {dev} parent 1:1 classid {class} htb rate {share}bit ceil {rate}bit quantum 60000"
        ));
        lines.push(format!("qdisc add dev {dev} parent {class} bfifo limit {queue}"));
        lines.push(format!(
            "filter add dev {dev} parent 1: protocol ip prio 20 u32 match ip src {from}/32 match ip dst {to}/32 \
             classid {class}"
        ));
    }
    lines
}

/// The htb class of the `k`th host pair on a link under [`Queueing::Fair`]
/// (minor ids from 0x1000: the node agents' throttle classes sit below).
fn pair_class(k: usize) -> String {
    format!("1:{:x}", 0x1000 + k)
}

/// Traffic classes of a [`Queueing::Priority`] link (IEEE 802.1p's eight;
/// `Decision::TrafficClass`'s 0 ..= 7, 7 the highest).
pub const TRAFFIC_CLASSES: u8 = 8;

/// The TOS bits that put a packet in traffic class `class`: the IP
/// precedence (bits 5–7), beside the path pin's bits 2–4 ([`path_tos`]),
/// which the switches' routing rules match alone (the kernel masks a
/// legacy `tos` rule to those bits).
pub fn class_tos(class: u8) -> u8 {
    (class.min(TRAFFIC_CLASSES - 1)) << 5
}

/// The htb class of traffic class `class` on a [`Queueing::Priority`] link:
/// class 0 is the default leaf `1:10`, class k the leaf `1:1k`.
fn priority_class(class: u8) -> String {
    format!("1:{:x}", 0x10 + class as u32)
}

/// The tc lines that make a link's device `dev` (shaped at `rate` bit/s,
/// its FIFOs `queue` bytes) a strict-priority switch port: the default leaf
/// `1:10` and a leaf per traffic class 1..=7, each guaranteed a thousandth
/// of the rate (htb needs a rate; a class is never starved outright),
/// ceiling the link's rate, htb priority 7 − class (htb lends spare rate to
/// its lowest `prio` first), its own FIFO, and a u32 filter on the IP
/// precedence. Class 0 replaces the default leaf's lines. O(classes).
fn priority_lines(dev: &str, rate: u64, queue: u64) -> Vec<String> {
    let floor = (rate / 1000).max(8_000);
    let mut lines = Vec::with_capacity(3 * TRAFFIC_CLASSES as usize);
    for class in 0..TRAFFIC_CLASSES {
        let id = priority_class(class);
        let prio = TRAFFIC_CLASSES - 1 - class;
        lines.push(format!(
            "class add dev {dev} parent 1:1 classid {id} htb rate {floor}bit ceil {rate}bit prio {prio} quantum 60000"
        ));
        lines.push(format!("qdisc add dev {dev} parent {id} handle {:x}: bfifo limit {queue}", 0x10 + class as u32));
        if class > 0 {
            lines.push(format!(
                "filter add dev {dev} parent 1: protocol ip prio 20 u32 match ip tos {:#04x} 0xe0 classid {id}",
                class_tos(class)
            ));
        }
    }
    lines
}

/// One end of a cable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    /// Namespace.
    pub netns: String,
    /// Interface name inside it.
    pub dev: String,
    /// Address.
    pub addr: Ipv4Addr,
}

/// A fabric that is up. Dropping it tears it down.
#[derive(Debug)]
pub struct Fabric {
    /// Options it was built with.
    pub options: FabricOptions,
    /// Namespace of each node (hosts first, as in the topology).
    pub netns: Vec<String>,
    /// Sending end of each directed link (by [`orrery_model::LinkId`]).
    pub link_ports: Vec<Port>,
    /// Each host's data-network address.
    pub host_addrs: Vec<Ipv4Addr>,
    /// Each directed link's shaped rate, bit/s.
    pub link_rates_bps: Vec<u64>,
    /// Path indices with a pinning table (`path_tos(i)` for i below this).
    pub pinned_paths: usize,
    /// Warnings met while building (pins that cannot be honoured).
    pub warnings: Vec<String>,
    /// The opposite link of each link's cable.
    reverse: Vec<usize>,
    up: bool,
}

/// Most path indices a `Route` can pin (the TOS values the kernel's routing
/// rules match: bits 2–4).
pub const MAX_PINNED_PATHS: usize = 7;

/// The TOS that pins a flow to path `i` of its ECMP set.
pub fn path_tos(i: usize) -> u8 {
    ((i as u8 % MAX_PINNED_PATHS as u8) + 1) << 2
}

/// The host interface name.
pub const HOST_DEV: &str = "eth0";

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Runs a command, failing with its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, FabricError> {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output().map_err(|e| FabricError::Command {
        command: format!("{program} {}", args.join(" ")),
        stderr: e.to_string(),
    })?;
    if !out.status.success() {
        return Err(FabricError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `program [-n NS] -batch -` on these lines.
fn batch(program: &str, netns: Option<&str>, lines: &[String]) -> Result<(), FabricError> {
    if lines.is_empty() {
        return Ok(());
    }
    let mut args: Vec<&str> = Vec::new();
    if let Some(ns) = netns {
        args.extend(["-n", ns]);
    }
    args.extend(["-batch", "-"]);
    let command = || format!("{program} {} ({} lines; first: {})", args.join(" "), lines.len(), lines[0]);
    let mut child = Command::new(program)
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| FabricError::Command { command: command(), stderr: e.to_string() })?;
    if let Some(mut stdin) = child.stdin.take() {
        let text = lines.join("\n") + "\n";
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| FabricError::Command { command: command(), stderr: e.to_string() })?;
    }
    let out =
        child.wait_with_output().map_err(|e| FabricError::Command { command: command(), stderr: e.to_string() })?;
    if !out.status.success() {
        return Err(FabricError::Command {
            command: command(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// Addresses of cable `c`: (lower node's end, higher node's end) of its /30.
fn cable_addrs(c: usize) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::new(10, 64, 0, 0)) + 4 * c as u32;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

/// Namespace names are `PREFIX-NODE`, with anything but letters, digits,
/// `-` and `_` in the node's name replaced.
fn netns_name(prefix: &str, node: &str) -> String {
    let clean: String =
        node.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    format!("{prefix}-{clean}")
}

fn check_options(o: &FabricOptions) -> Result<(), FabricError> {
    if o.prefix.is_empty() || o.prefix.len() > 8 || !o.prefix.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(FabricError::Option {
            field: "prefix",
            expected: "1 to 8 letters or digits",
            found: format!("{:?}", o.prefix),
        });
    }
    if !(o.scale.is_finite() && o.scale > 0.0 && o.scale <= 1.0) {
        return Err(FabricError::Option { field: "scale", expected: "a factor in (0, 1]", found: o.scale.to_string() });
    }
    if !(o.queue_ms.is_finite() && o.queue_ms > 0.0 && o.queue_ms <= 1000.0) {
        return Err(FabricError::Option {
            field: "queue_ms",
            expected: "milliseconds in (0, 1000]",
            found: o.queue_ms.to_string(),
        });
    }
    Ok(())
}

/// Cables: pairs of opposite directed links, as (lower node, higher node,
/// link lower→higher, link higher→lower), in link order. O(L log L).
fn cables(topo: &Topology) -> Result<Vec<(NodeId, NodeId, usize, usize)>, FabricError> {
    let mut open: BTreeMap<(NodeId, NodeId), Vec<usize>> = BTreeMap::new();
    let mut out = Vec::new();
    for (l, link) in topo.links.iter().enumerate() {
        let reverse =
            open.get_mut(&(link.to, link.from)).and_then(|v| if v.is_empty() { None } else { Some(v.remove(0)) });
        match reverse {
            Some(r) => {
                let (a, b) = if link.from < link.to { (link.from, link.to) } else { (link.to, link.from) };
                let (ab, ba) = if link.from < link.to { (l, r) } else { (r, l) };
                out.push((a, b, ab, ba));
            }
            None => open.entry((link.from, link.to)).or_default().push(l),
        }
    }
    if let Some(((from, to), _)) = open.iter().find(|(_, v)| !v.is_empty()) {
        return Err(FabricError::Topology {
            topology: topo.name.clone(),
            why: format!(
                "link {} → {} has no link back; a cable is two directed links",
                topo.node_name(*from),
                topo.node_name(*to)
            ),
        });
    }
    out.sort_by_key(|c| c.2.min(c.3));
    Ok(out)
}

impl Fabric {
    /// Builds the topology as namespaces. Needs root. On error, whatever was
    /// made is removed. O(hosts² · paths) routes; meant for tens of hosts.
    pub fn up(topo: &Topology, options: FabricOptions) -> Result<Fabric, FabricError> {
        check_options(&options)?;
        if !is_root() {
            return Err(FabricError::NotRoot);
        }
        let cables = cables(topo)?;
        let hosts = topo.hosts.len();
        let nodes = topo.node_count();
        let netns: Vec<String> = (0..nodes).map(|n| netns_name(&options.prefix, topo.node_name(n))).collect();
        // Ports: per node, per cable end, in cable order.
        let mut next_port = vec![0usize; nodes];
        let mut link_ports: Vec<Option<Port>> = vec![None; topo.links.len()];
        let mut host_addrs: Vec<Option<Ipv4Addr>> = vec![None; hosts];
        let mut host_gateway: Vec<Option<Ipv4Addr>> = vec![None; hosts];
        let mut root_lines = Vec::new();
        let mut reverse = vec![0; topo.links.len()];
        for (c, &(a, b, ab, ba)) in cables.iter().enumerate() {
            (reverse[ab], reverse[ba]) = (ba, ab);
            let (addr_a, addr_b) = cable_addrs(c);
            let mut name_of = |n: NodeId| -> Result<String, FabricError> {
                if n < hosts {
                    if host_addrs[n].is_some() {
                        return Err(FabricError::Topology {
                            topology: topo.name.clone(),
                            why: format!(
                                "host {} has more than one cable; the testbed gives each host one NIC",
                                topo.node_name(n)
                            ),
                        });
                    }
                    Ok(HOST_DEV.to_string())
                } else {
                    next_port[n] += 1;
                    Ok(format!("p{}", next_port[n] - 1))
                }
            };
            let (dev_a, dev_b) = (name_of(a)?, name_of(b)?);
            if a < hosts && b < hosts {
                return Err(FabricError::Topology {
                    topology: topo.name.clone(),
                    why: format!(
                        "hosts {} and {} are cabled directly; the testbed needs a switch between hosts",
                        topo.node_name(a),
                        topo.node_name(b)
                    ),
                });
            }
            if a < hosts {
                host_addrs[a] = Some(addr_a);
                host_gateway[a] = Some(addr_b);
            }
            root_lines
                .push(format!("link add {dev_a} netns {} type veth peer name {dev_b} netns {}", netns[a], netns[b]));
            link_ports[ab] = Some(Port { netns: netns[a].clone(), dev: dev_a, addr: addr_a });
            link_ports[ba] = Some(Port { netns: netns[b].clone(), dev: dev_b, addr: addr_b });
        }
        let Some(link_ports) = link_ports.into_iter().collect::<Option<Vec<Port>>>() else {
            return Err(FabricError::Topology {
                topology: topo.name.clone(),
                why: "a link is not part of a cable".into(),
            });
        };
        let Some(host_addrs) = host_addrs.into_iter().collect::<Option<Vec<Ipv4Addr>>>() else {
            let h = (0..hosts).find(|&h| topo.out_links(h).is_empty()).unwrap_or(0);
            return Err(FabricError::Topology {
                topology: topo.name.clone(),
                why: format!("host {} has no cable", topo.node_name(h)),
            });
        };
        let link_rates_bps: Vec<u64> =
            topo.links.iter().map(|l| (l.gbps * 1e9 * options.scale).round().max(8_000.0) as u64).collect();
        let mut fabric = Fabric {
            options,
            netns,
            link_ports,
            host_addrs,
            link_rates_bps,
            pinned_paths: 0,
            warnings: Vec::new(),
            reverse,
            up: true,
        };
        // From here on, dropping `fabric` removes what exists.
        for ns in &fabric.netns {
            run("ip", &["netns", "add", ns])?;
        }
        batch("ip", None, &root_lines)?;
        fabric.configure(topo, &host_gateway)?;
        Ok(fabric)
    }

    fn configure(&mut self, topo: &Topology, host_gateway: &[Option<Ipv4Addr>]) -> Result<(), FabricError> {
        let hosts = topo.hosts.len();
        let mut ip_lines: Vec<Vec<String>> = vec![vec!["link set lo up".to_string()]; topo.node_count()];
        let mut tc_lines: Vec<Vec<String>> = vec![Vec::new(); topo.node_count()];
        let crossing = if self.options.queueing == Queueing::Fair { pairs_crossing(topo) } else { Vec::new() };
        for (l, port) in self.link_ports.iter().enumerate() {
            let n = topo.links[l].from;
            ip_lines[n].push(format!("addr add {}/30 dev {}", port.addr, port.dev));
            ip_lines[n].push(format!("link set {} up", port.dev));
            let rate = self.link_rates_bps[l];
            let queue = ((rate as f64 / 8.0 * self.options.queue_ms / 1e3) as u64).max(128 * 1024);
            let dev = &port.dev;
            tc_lines[n].push(format!("qdisc add dev {dev} root handle 1: htb default 10"));
            tc_lines[n].push(format!(
                "class add dev {dev} parent 1: classid 1:1 htb rate {rate}bit ceil {rate}bit quantum 60000"
            ));
            if self.options.queueing == Queueing::Priority {
                tc_lines[n].extend(priority_lines(dev, rate, queue));
            } else {
                tc_lines[n].push(format!(
                    "class add dev {dev} parent 1:1 classid 1:10 htb rate {rate}bit ceil {rate}bit quantum 60000"
                ));
                tc_lines[n].push(format!("qdisc add dev {dev} parent 1:10 handle 10: bfifo limit {queue}"));
            }
            if let Some(pairs) = crossing.get(l) {
                let ends: Vec<(Ipv4Addr, Ipv4Addr)> =
                    pairs.iter().map(|&(a, b)| (self.host_addrs[a], self.host_addrs[b])).collect();
                tc_lines[n].extend(fair_lines(dev, rate, queue, &ends));
            }
        }
        for (h, gw) in host_gateway.iter().enumerate().take(hosts) {
            if let Some(gw) = gw {
                ip_lines[h].push(format!("route add default via {gw} dev {HOST_DEV}"));
            }
        }
        // Switch routes: /32 to every host over the first links of its shortest paths.
        // The far end of link l: the sending port of its cable's other link.
        let peer = |l: usize| -> (&str, Ipv4Addr) { (&self.link_ports[l].dev, self.link_ports[self.reverse[l]].addr) };
        for (s, lines) in ip_lines.iter_mut().enumerate().skip(hosts) {
            for h in 0..hosts {
                let mut first: Vec<usize> = topo.shared_paths(s, h).iter().filter_map(|p| p.first().copied()).collect();
                first.sort_unstable();
                first.dedup();
                let dst = self.host_addrs[h];
                match first.as_slice() {
                    [] => {}
                    [l] => {
                        let (dev, via) = peer(*l);
                        lines.push(format!("route add {dst}/32 via {via} dev {dev}"));
                    }
                    many => {
                        let hops: Vec<String> = many
                            .iter()
                            .map(|&l| {
                                let (dev, via) = peer(l);
                                format!("nexthop via {via} dev {dev} weight 1")
                            })
                            .collect();
                        lines.push(format!("route add {dst}/32 {}", hops.join(" ")));
                    }
                }
            }
        }
        // Pinning tables: path i of (src, dst) at each switch it crosses.
        let mut tables: BTreeMap<(NodeId, usize, usize), usize> = BTreeMap::new();
        for src in 0..hosts {
            for dst in 0..hosts {
                let paths = topo.shared_paths(src, dst);
                if paths.len() < 2 {
                    continue;
                }
                for (i, path) in paths.iter().enumerate().take(MAX_PINNED_PATHS) {
                    self.pinned_paths = self.pinned_paths.max(i + 1);
                    for &l in path.iter().skip(1) {
                        let at = topo.links[l].from;
                        match tables.insert((at, i, dst), l) {
                            Some(other) if other != l => self.warnings.push(format!(
                                "path {i} to {} leaves {} by different links for different sources; pins follow the last",
                                topo.node_name(dst),
                                topo.node_name(at)
                            )),
                            _ => {}
                        }
                    }
                }
            }
        }
        for (&(at, i, dst), &l) in &tables {
            let (dev, via) = peer(l);
            ip_lines[at].push(format!("route add {}/32 via {via} dev {dev} table {}", self.host_addrs[dst], 100 + i));
        }
        for lines in ip_lines.iter_mut().skip(hosts) {
            for i in 0..self.pinned_paths {
                lines.push(format!("rule add tos {:#04x} table {} pref {}", path_tos(i), 100 + i, 100 + i));
            }
        }
        for (n, ns) in self.netns.iter().enumerate() {
            if n >= hosts {
                for key in
                    ["net.ipv4.ip_forward=1", "net.ipv4.fib_multipath_hash_policy=1", "net.ipv4.conf.all.rp_filter=0"]
                {
                    run("ip", &["netns", "exec", ns, "sysctl", "-q", "-w", key])?;
                }
            }
            batch("ip", Some(ns), &ip_lines[n])?;
            batch("tc", Some(ns), &tc_lines[n])?;
        }
        Ok(())
    }

    /// The namespace of host `h`.
    pub fn host_netns(&self, h: usize) -> &str {
        &self.netns[h]
    }

    /// Bytes each directed link has sent so far (its sending end's counter),
    /// read once per namespace. O(links).
    pub fn link_tx_bytes(&self) -> Result<Vec<u64>, FabricError> {
        let mut by_ns: BTreeMap<&str, BTreeMap<String, u64>> = BTreeMap::new();
        for ns in self.link_ports.iter().map(|p| p.netns.as_str()) {
            if by_ns.contains_key(ns) {
                continue;
            }
            let text = run("ip", &["-n", ns, "-s", "-j", "link", "show"])?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| FabricError::Command {
                command: format!("ip -n {ns} -s -j link show"),
                stderr: e.to_string(),
            })?;
            let mut devs = BTreeMap::new();
            for iface in v.as_array().into_iter().flatten() {
                let name = iface["ifname"].as_str().unwrap_or_default().to_string();
                let bytes = iface["stats64"]["tx"]["bytes"].as_u64().unwrap_or(0);
                devs.insert(name, bytes);
            }
            by_ns.insert(ns, devs);
        }
        Ok(self
            .link_ports
            .iter()
            .map(|p| by_ns.get(p.netns.as_str()).and_then(|d| d.get(&p.dev)).copied().unwrap_or(0))
            .collect())
    }

    /// The TCP counters of every host's namespace, summed: retransmission
    /// timeouts (`TcpExt: TCPTimeouts`) and segments sent again (`Tcp:
    /// RetransSegs`) since the namespace was made. O(hosts).
    pub fn tcp_counters(&self, hosts: usize) -> Result<TcpCounters, FabricError> {
        let mut sum = TcpCounters::default();
        for h in 0..hosts.min(self.netns.len()) {
            let ns = self.host_netns(h);
            let netstat = run("ip", &["netns", "exec", ns, "cat", "/proc/net/netstat", "/proc/net/snmp"])?;
            sum.timeouts += proc_counter(&netstat, "TcpExt:", "TCPTimeouts").unwrap_or(0);
            sum.retransmitted_segments += proc_counter(&netstat, "Tcp:", "RetransSegs").unwrap_or(0);
        }
        Ok(sum)
    }

    /// Leaves the fabric up after this value is gone (`orrery testbed up`);
    /// [`down`] removes it later.
    pub fn keep(mut self) {
        self.up = false;
    }

    /// Removes the namespaces (and with them every veth and qdisc).
    pub fn down(&mut self) -> Vec<String> {
        if !self.up {
            return Vec::new();
        }
        self.up = false;
        let mut errors = Vec::new();
        for ns in &self.netns {
            if let Err(e) = run("ip", &["netns", "del", ns])
                && !e.to_string().contains("No such file")
            {
                errors.push(e.to_string());
            }
        }
        errors
    }
}

/// TCP counters of the hosts' namespaces ([`Fabric::tcp_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TcpCounters {
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Segments sent again.
    pub retransmitted_segments: u64,
}

/// The value of counter `name` in `/proc/net/netstat` or `/proc/net/snmp`
/// text, whose sections are a line of names and a line of values, each
/// starting with `section` (`TcpExt:`, `Tcp:`). None when absent.
fn proc_counter(text: &str, section: &str, name: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(section));
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let at = names.split_whitespace().position(|n| n == name);
        if let Some(v) = at.and_then(|k| values.split_whitespace().nth(k)) {
            return v.parse().ok();
        }
    }
    None
}

impl Drop for Fabric {
    fn drop(&mut self) {
        for e in self.down() {
            eprintln!("testbed: {e}");
        }
    }
}

/// Removes every namespace named `PREFIX-*` (what a killed run left).
/// Returns their names.
pub fn down(prefix: &str) -> Result<Vec<String>, FabricError> {
    check_options(&FabricOptions { prefix: prefix.to_string(), ..FabricOptions::default() })?;
    if !is_root() {
        return Err(FabricError::NotRoot);
    }
    let list = run("ip", &["netns", "list"])?;
    let mut removed = Vec::new();
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if name.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('-')) {
            run("ip", &["netns", "del", name])?;
            removed.push(name.to_string());
        }
    }
    Ok(removed)
}

/// Why namespaces cannot be made here, if they cannot: not root, or the
/// kernel refuses (e.g. inside a container without CAP_SYS_ADMIN).
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("not running as root".into());
    }
    // One name per call: two threads of one process probing at once (the
    // testbed's tests run side by side) must not collide ("File exists").
    static PROBES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let probe = format!("orrprobe-{}-{n}", std::process::id());
    match run("ip", &["netns", "add", &probe]) {
        Ok(_) => {
            let _ = run("ip", &["netns", "del", &probe]);
            None
        }
        Err(e) => Some(e.to_string()),
    }
}

/// TCP's payload per byte on the wire at MTU 1500 with timestamps: 1,448
/// bytes of every 1,514-byte Ethernet frame (the 4-byte FCS, preamble and
/// gap are not shaped by tc). The model's rates are payload rates; the
/// testbed shapes frames, so a transfer takes 1/0.956 of the model's time.
pub const TCP_GOODPUT: f64 = 1448.0 / 1514.0;

/// `topo` with every link's rate times `goodput`: what a transfer's payload
/// gets. The service's policy and the simulator see it, so that their model
/// of an iteration counts the headers the testbed sends.
pub fn derated(topo: &Topology, goodput: f64) -> Result<Topology, orrery_model::topology::TopologyError> {
    let mut links = topo.links.clone();
    for l in &mut links {
        l.gbps *= goodput;
    }
    Topology::new(topo.name.clone(), topo.hosts.clone(), topo.switches.clone(), links)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_counters_are_read_by_name_from_their_section() {
        // /proc/net/netstat's and /proc/net/snmp's layout: a line of names,
        // then a line of values, per section. `Tcp:` must not match
        // `TcpExt:`'s lines, nor a name of one section another's column.
        let text = "TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes\nTcpExt: 0 7 3\n\
                    IpExt: InNoRoutes TCPTimeouts\nIpExt: 5 99\n\
                    Tcp: RtoAlgorithm RtoMin RetransSegs\nTcp: 1 200 1342\n";
        assert_eq!(proc_counter(text, "TcpExt:", "TCPTimeouts"), Some(7));
        assert_eq!(proc_counter(text, "Tcp:", "RetransSegs"), Some(1342));
        assert_eq!(proc_counter(text, "Tcp:", "TCPTimeouts"), None);
        assert_eq!(proc_counter(text, "Udp:", "InDatagrams"), None);
    }

    #[test]
    fn cables_pair_opposite_links_and_get_their_own_subnet() {
        let topo = orrery_model::setups::by_name("demo").expect("demo topology");
        let c = cables(&topo).expect("cables");
        // 4 host cables, 2 leaf-spine cables.
        assert_eq!(c.len(), 6);
        for &(a, b, ab, ba) in &c {
            assert!(a < b);
            assert_eq!((topo.links[ab].from, topo.links[ab].to), (a, b));
            assert_eq!((topo.links[ba].from, topo.links[ba].to), (b, a));
        }
        assert_eq!(cable_addrs(0), (Ipv4Addr::new(10, 64, 0, 1), Ipv4Addr::new(10, 64, 0, 2)));
        assert_eq!(cable_addrs(64), (Ipv4Addr::new(10, 64, 1, 1), Ipv4Addr::new(10, 64, 1, 2)));
    }

    #[test]
    fn a_fair_link_has_a_class_per_host_pair_whose_paths_cross_it() {
        // demo: hosts 0, 1 under leaf 0 and 2, 3 under leaf 1, one spine.
        let topo = orrery_model::setups::by_name("demo").expect("demo topology");
        let crossing = pairs_crossing(&topo);
        let leaf0 = topo.links[topo.out_links(0)[0]].to;
        // Host 0's uplink carries its flows to the three others.
        assert_eq!(crossing[topo.out_links(0)[0]], vec![(0, 1), (0, 2), (0, 3)]);
        // Leaf 0's uplink carries rack 0's flows to rack 1: four pairs.
        let up = topo.out_links(leaf0).iter().copied().find(|&l| topo.links[l].to >= 4).expect("an uplink");
        assert_eq!(crossing[up], vec![(0, 2), (0, 3), (1, 2), (1, 3)]);
        // Four classes at a quarter of the rate each, the rate as ceiling.
        let ends = [(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2)); 4];
        let lines = fair_lines("p2", 1_000_000, 131_072, &ends);
        assert_eq!(lines.len(), 12);
        assert_eq!(
            lines[0],
            "class add dev p2 parent 1:1 classid 1:1000 htb rate 250000bit ceil 1000000bit quantum 60000"
        );
        assert_eq!(lines[1], "qdisc add dev p2 parent 1:1000 bfifo limit 131072");
        assert_eq!(
            lines[2],
            "filter add dev p2 parent 1: protocol ip prio 20 u32 match ip src 10.0.0.1/32 match ip dst 10.0.0.2/32 classid 1:1000"
        );
        assert!(lines[9].contains("classid 1:1003"));
        assert_eq!("fair".parse::<Queueing>(), Ok(Queueing::Fair));
        assert_eq!(Queueing::TailDrop.to_string(), "tail-drop");
        assert!("fq".parse::<Queueing>().expect_err("refused").contains("tail-drop, fair or priority"));
    }

    #[test]
    fn a_priority_link_has_eight_classes_chosen_by_ip_precedence() {
        assert_eq!("priority".parse::<Queueing>(), Ok(Queueing::Priority));
        let lines = priority_lines("p0", 500_000_000, 131_072);
        // Per class: its leaf, its FIFO and (but class 0, the default) its filter.
        assert_eq!(lines.len(), 3 * 8 - 1);
        assert_eq!(
            lines[0],
            "class add dev p0 parent 1:1 classid 1:10 htb rate 500000bit ceil 500000000bit prio 7 quantum 60000"
        );
        assert_eq!(lines[1], "qdisc add dev p0 parent 1:10 handle 10: bfifo limit 131072");
        let top = &lines[lines.len() - 3..];
        assert!(top[0].contains("classid 1:17 htb") && top[0].contains("prio 0 "), "{top:?}");
        assert_eq!(top[2], "filter add dev p0 parent 1: protocol ip prio 20 u32 match ip tos 0xe0 0xe0 classid 1:17");
        // The precedence bits leave the path pin's alone.
        for (class, path) in [(7, 6), (1, 0), (3, 4)] {
            assert_eq!(class_tos(class) & path_tos(path), 0);
            assert_eq!((class_tos(class) | path_tos(path)) & 0x1c, path_tos(path));
        }
        assert_eq!(class_tos(9), 0xe0, "classes above 7 are 7");
    }

    #[test]
    fn options_are_checked() {
        let bad = FabricOptions { prefix: "a-b".into(), ..FabricOptions::default() };
        assert!(check_options(&bad).expect_err("refused").to_string().contains("prefix"));
        let bad = FabricOptions { scale: 0.0, ..FabricOptions::default() };
        assert!(check_options(&bad).expect_err("refused").to_string().contains("scale"));
        assert_eq!(path_tos(0), 0x04);
        assert_eq!(path_tos(6), 0x1c);
        assert_eq!(netns_name("orr", "leaf 0"), "orr-leaf_0");
    }
}
