//! Topology-aware gang placement as Kubernetes, Kueue and Volcano do it
//! (issue 67's baselines): `tas-required:LEVEL` and `tas-preferred:LEVEL`,
//! LEVEL `host`, `rack` or `pod`, and `hypernode:TIER`.
//!
//! * **Required** (Kubernetes 1.36 Workload API TAS; Kueue's
//!   `podset-required-topology`): the whole gang inside one domain of the
//!   level, or it waits. Candidate placements are the domains that can hold
//!   it; the score is NodeResourcesFit's MostAllocated, so the fullest
//!   domain that fits wins (best fit), and inside it the fullest hosts are
//!   taken first. A gang larger than every domain of the level is turned
//!   away with the reason (Kueue marks it inadmissible and admits the
//!   workloads behind it); waiting, it would hold FIFO's queue for ever.
//! * **Preferred** (Kueue's `podset-preferred-topology`): one domain when
//!   one fits; otherwise as few domains as possible, the ones with the most
//!   free GPUs first, and never a wait when the cluster has the GPUs.
//! * **HyperNodes** (Volcano's network topology aware scheduling,
//!   `highestTierAllowed: TIER`): the whole gang inside one HyperNode of the
//!   lowest tier that holds it, up to TIER (tier 1 a rack, tier 2 a pod),
//!   best fit within the tier; else it waits, or is turned away when no
//!   HyperNode of the tier could ever hold it.
//!
//! What they do not do: look at links, time communication, or know a
//! mesh's groups; a rack is all the level above a host on a leaf-spine.

use crate::placement::{Hosts, Placement, capped};
use crate::{ClusterView, JobSpec};
use orrery_model::HostId;
use std::collections::BTreeMap;

/// A topology level a gang can be kept inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// One host (`kubernetes.io/hostname`).
    Host,
    /// One rack: the hosts under one leaf switch.
    Rack,
    /// One pod: the racks under one aggregation switch (a three-tier
    /// Clos); on a leaf-spine, whose leaves reach every spine, the cluster.
    Pod,
}

impl Level {
    /// `host` or `rack`.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "host" | "hostname" | "node" => Some(Level::Host),
            "rack" | "leaf" => Some(Level::Rack),
            "pod" | "block" => Some(Level::Pod),
            _ => None,
        }
    }
}

/// Kueue / Kubernetes topology-aware placement of a whole gang.
#[derive(Debug, Clone)]
pub struct TopologyAware {
    /// The level of the domain.
    pub level: Level,
    /// Required (wait for one domain) or preferred (fewest domains).
    pub required: bool,
    name: &'static str,
}

impl TopologyAware {
    /// `tas-required:LEVEL` or `tas-preferred:LEVEL`.
    pub fn by_name(name: &str) -> Option<TopologyAware> {
        let (kind, level) = name.split_once(':')?;
        let required = match kind {
            "tas-required" => true,
            "tas-preferred" => false,
            _ => return None,
        };
        let level = Level::parse(level)?;
        let name = match (required, level) {
            (true, Level::Host) => "tas-required:host",
            (true, Level::Rack) => "tas-required:rack",
            (true, Level::Pod) => "tas-required:pod",
            (false, Level::Host) => "tas-preferred:host",
            (false, Level::Rack) => "tas-preferred:rack",
            (false, Level::Pod) => "tas-preferred:pod",
        };
        Some(TopologyAware { level, required, name })
    }
}

/// The domain of `level` each host is in: itself, its leaf switch, or the
/// one switch above its leaf (every host in one domain when a leaf has
/// several, as on a leaf-spine). O(H + links out of the leaves).
fn domain_of(view: &ClusterView<'_>, level: Level, rack_of: &[usize]) -> Vec<usize> {
    let t = view.topology;
    let rack = |h: usize| rack_of.get(h).copied().unwrap_or(h);
    match level {
        Level::Host => (0..t.hosts.len()).collect(),
        Level::Rack => (0..t.hosts.len()).map(rack).collect(),
        Level::Pod => (0..t.hosts.len())
            .map(|h| {
                let leaf = rack(h);
                let above: Vec<usize> = if leaf < t.node_count() {
                    t.out_links(leaf).iter().map(|&l| t.links[l].to).filter(|&n| n >= t.hosts.len()).collect()
                } else {
                    Vec::new()
                };
                match above.as_slice() {
                    [one] => *one,
                    _ => usize::MAX,
                }
            })
            .collect(),
    }
}

/// The hosts of each domain with free GPUs, fullest first within a domain
/// (MostAllocated), in domain order. O(H log H).
fn domains(domain_of: &[usize], free: &[u32]) -> BTreeMap<usize, Vec<HostId>> {
    let mut out: BTreeMap<usize, Vec<HostId>> = BTreeMap::new();
    for h in (0..free.len()).filter(|&h| free[h] > 0) {
        out.entry(domain_of.get(h).copied().unwrap_or(h)).or_default().push(h);
    }
    for hosts in out.values_mut() {
        hosts.sort_by_key(|&h| (free[h], h));
    }
    out
}

/// The whole gang in the fullest domain that holds it (least free, lowest
/// index on ties). O(H).
fn best_fit(domains: &BTreeMap<usize, Vec<HostId>>, free: &[u32], gpus: u32) -> Option<Hosts> {
    let total = |hosts: &[HostId]| hosts.iter().map(|&h| u64::from(free[h])).sum::<u64>();
    let (_, hosts) = domains
        .iter()
        .filter(|(_, hosts)| total(hosts) >= u64::from(gpus))
        .min_by_key(|(d, hosts)| (total(hosts), **d))?;
    take(free, hosts, gpus)
}

/// Volcano's network-topology-aware gang placement: one HyperNode of the
/// lowest tier that holds the gang, up to `highest` (1: rack, 2: pod).
#[derive(Debug, Clone)]
pub struct HyperNode {
    /// `highestTierAllowed`.
    pub highest: u8,
    name: &'static str,
}

impl HyperNode {
    /// `hypernode:1` or `hypernode:2`.
    pub fn by_name(name: &str) -> Option<HyperNode> {
        match name {
            "hypernode:1" => Some(HyperNode { highest: 1, name: "hypernode:1" }),
            "hypernode:2" => Some(HyperNode { highest: 2, name: "hypernode:2" }),
            _ => None,
        }
    }
}

impl Placement for HyperNode {
    fn name(&self) -> &'static str {
        self.name
    }

    /// O(tiers · H log H).
    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let free = capped(free, spec);
        [Level::Rack, Level::Pod]
            .into_iter()
            .take(usize::from(self.highest))
            .find_map(|level| best_fit(&domains(&domain_of(view, level, rack_of), &free), &free, spec.gpus()))
    }

    /// A gang larger than every HyperNode of the highest tier allowed.
    /// O(H).
    fn never_fits(&self, view: &ClusterView<'_>, rack_of: &[usize], spec: &JobSpec) -> Option<String> {
        let level = if self.highest >= 2 { Level::Pod } else { Level::Rack };
        let largest = largest_domain(view, level, rack_of, spec);
        (u64::from(spec.gpus()) > largest).then(|| {
            format!(
                "needs {} GPUs inside one tier-{} HyperNode ({}); the largest has {largest} ({}: highestTierAllowed)",
                spec.gpus(),
                self.highest,
                level.noun(),
                self.name
            )
        })
    }
}

/// The most GPUs one domain of `level` can give `spec` on an empty cluster
/// (each host's GPUs under [`JobSpec::host_cap`]). O(H).
fn largest_domain(view: &ClusterView<'_>, level: Level, rack_of: &[usize], spec: &JobSpec) -> u64 {
    let mut per_domain: BTreeMap<usize, u64> = BTreeMap::new();
    for (h, d) in domain_of(view, level, rack_of).into_iter().enumerate() {
        *per_domain.entry(d).or_default() += u64::from(spec.host_cap(view.topology.hosts[h].gpus));
    }
    per_domain.into_values().max().unwrap_or(0)
}

impl Level {
    /// The level's name in a sentence.
    fn noun(self) -> &'static str {
        match self {
            Level::Host => "host",
            Level::Rack => "rack",
            Level::Pod => "pod",
        }
    }
}

/// `gpus` from `hosts` in order. O(hosts taken).
fn take(free: &[u32], hosts: &[HostId], gpus: u32) -> Option<Hosts> {
    let mut out = Vec::new();
    let left = crate::baseline::take_in_order(free, hosts.iter().copied(), gpus, &mut out);
    (left == 0).then_some(out)
}

impl Placement for TopologyAware {
    fn name(&self) -> &'static str {
        self.name
    }

    /// O(H log H).
    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let free = capped(free, spec);
        let gpus = spec.gpus();
        let domains = domains(&domain_of(view, self.level, rack_of), &free);
        if let Some(hosts) = best_fit(&domains, &free, gpus) {
            return Some(hosts);
        }
        if self.required {
            return None;
        }
        let total = |hosts: &[HostId]| hosts.iter().map(|&h| u64::from(free[h])).sum::<u64>();
        // Fewest domains: the emptiest first.
        let mut order: Vec<(&usize, &Vec<HostId>)> = domains.iter().collect();
        order.sort_by_key(|(d, hosts)| (std::cmp::Reverse(total(hosts)), **d));
        let hosts: Vec<HostId> = order.into_iter().flat_map(|(_, hosts)| hosts.iter().copied()).collect();
        take(&free, &hosts, gpus)
    }

    /// Required: a gang larger than every domain of the level (Kueue marks
    /// it inadmissible). Preferred spreads instead: never. O(H).
    fn never_fits(&self, view: &ClusterView<'_>, rack_of: &[usize], spec: &JobSpec) -> Option<String> {
        if !self.required {
            return None;
        }
        let largest = largest_domain(view, self.level, rack_of, spec);
        (u64::from(spec.gpus()) > largest).then(|| {
            format!(
                "needs {} GPUs inside one {noun}; the largest {noun} has {largest} ({}: the whole gang in one domain)",
                spec.gpus(),
                self.name,
                noun = self.level.noun()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{Topology, Work};

    /// 3 racks of 2 hosts of 8 GPUs.
    fn topo() -> Topology {
        LeafSpine::with_oversubscription(3, 2, 1, 8, "h100", 3200.0, 1.0).build("t").expect("valid")
    }

    fn place(name: &str, free: &[u32], gpus: u32) -> Option<Hosts> {
        let t = topo();
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: free, queue: Vec::new(), running: Vec::new() };
        let rack_of = crate::baseline::racks(&view);
        let spec = JobSpec::new("j", "llama3-8b", 1, gpus, Work::Iterations(1), 0.0);
        TopologyAware::by_name(name).expect("a TAS name").place(&view, rack_of, free, &spec)
    }

    fn racks(hosts: &Hosts) -> Vec<usize> {
        let mut r: Vec<usize> = hosts.iter().map(|&(h, _)| h / 2).collect();
        r.dedup();
        r
    }

    #[test]
    fn a_required_rack_gang_never_spans_racks_and_waits_when_none_fits() {
        // Free: rack 0 has 6 + 8, rack 1 has 4 + 4, rack 2 has 8 + 8.
        let free = [6, 8, 4, 4, 8, 8];
        // 8 GPUs: rack 1 holds exactly 8 and is the fullest that fits.
        let p = place("tas-required:rack", &free, 8).expect("fits");
        assert_eq!(racks(&p), vec![1]);
        assert_eq!(p.iter().map(|h| h.1).sum::<u32>(), 8);
        // 14: only rack 0 (14 free) or rack 2 (16); the fuller, rack 0.
        assert_eq!(racks(&place("tas-required:rack", &free, 14).expect("fits")), vec![0]);
        // 17 fits no rack: it waits, though the cluster has 38 free.
        assert_eq!(place("tas-required:rack", &free, 17), None);
    }

    #[test]
    fn a_gang_no_domain_can_ever_hold_is_turned_away_and_the_queue_moves_on() {
        // Racks of 2 hosts of 8 GPUs: 16 GPUs a rack, 48 in the cluster.
        // A 24-GPU gang under `fifo/tas-required:rack` can never run; the
        // 8-GPU job behind it is placed in the same round, not held.
        let t = topo();
        let free = [8; 6];
        let big = JobSpec::new("big", "llama3-8b", 1, 24, Work::Iterations(1), 0.0);
        let small = JobSpec::new("small", "llama3-8b", 1, 8, Work::Iterations(1), 1.0);
        let view = ClusterView {
            now_s: 2.0,
            topology: &t,
            free_gpus: &free,
            queue: vec![crate::QueuedJob::new(0, &big, 0.0), crate::QueuedJob::new(1, &small, 1.0)],
            running: Vec::new(),
        };
        for name in ["tas-required:rack", "hypernode:1"] {
            let mut policy = crate::compose::by_name(name, 1).expect("a policy");
            let d = policy.schedule(&view);
            let reason = d.iter().find_map(|d| match d {
                crate::Decision::Reject { job: 0, reason } => Some(reason.clone()),
                _ => None,
            });
            let reason = reason.unwrap_or_else(|| panic!("{name}: the 24-GPU gang is turned away: {d:?}"));
            assert!(reason.contains("needs 24 GPUs") && reason.contains("has 16"), "{name}: {reason}");
            assert!(d.iter().any(|d| matches!(d, crate::Decision::Place { job: 1, .. })), "{name}: {d:?}");
        }
        // Where a domain could hold it once others leave, it waits: 16
        // GPUs with one host of each rack busy.
        let rack_of = crate::baseline::racks(&view);
        let tas = TopologyAware::by_name("tas-required:rack").expect("a TAS name");
        let spec = JobSpec::new("j", "llama3-8b", 1, 16, Work::Iterations(1), 0.0);
        assert_eq!(tas.never_fits(&view, rack_of, &spec), None);
        // Preferred spreads instead; hypernode:2 takes the pod.
        assert_eq!(
            TopologyAware::by_name("tas-preferred:rack").expect("a name").never_fits(&view, rack_of, &big),
            None
        );
        assert_eq!(HyperNode::by_name("hypernode:2").expect("a tier").never_fits(&view, rack_of, &big), None);
    }

    #[test]
    fn a_preferred_rack_gang_takes_the_fewest_racks_when_none_holds_it() {
        let free = [6, 8, 4, 4, 8, 8];
        // 17: rack 2 (16) then rack 0 (14): two racks, not three.
        let p = place("tas-preferred:rack", &free, 17).expect("the cluster has the GPUs");
        assert_eq!(racks(&p), vec![2, 0]);
        assert_eq!(p.iter().map(|h| h.1).sum::<u32>(), 17);
        // One rack when one holds it, as required does.
        assert_eq!(racks(&place("tas-preferred:rack", &free, 8).expect("fits")), vec![1]);
    }

    #[test]
    fn a_required_host_gang_takes_the_fullest_host_that_fits() {
        let free = [6, 8, 4, 4, 8, 8];
        assert_eq!(place("tas-required:host", &free, 5), Some(vec![(0, 5)]));
        assert_eq!(place("tas-required:host", &free, 9), None);
    }

    #[test]
    fn a_hypernode_gang_takes_the_lowest_tier_that_holds_it() {
        // One leaf-spine pod: tier 1 a rack, tier 2 the cluster.
        let free = [6, 8, 4, 4, 8, 8];
        let t = topo();
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: Vec::new(), running: Vec::new() };
        let rack_of = crate::baseline::racks(&view);
        let spec = |gpus| JobSpec::new("j", "llama3-8b", 1, gpus, Work::Iterations(1), 0.0);
        let mut one = HyperNode::by_name("hypernode:1").expect("a tier");
        let mut two = HyperNode::by_name("hypernode:2").expect("a tier");
        // 8 GPUs fit rack 1 (tier 1) under both.
        assert_eq!(racks(&one.place(&view, rack_of, &free, &spec(8)).expect("fits")), vec![1]);
        assert_eq!(racks(&two.place(&view, rack_of, &free, &spec(8)).expect("fits")), vec![1]);
        // 20 fit no rack: tier 1 waits, tier 2 takes the pod.
        assert_eq!(one.place(&view, rack_of, &free, &spec(20)), None);
        let p = two.place(&view, rack_of, &free, &spec(20)).expect("the pod holds it");
        assert_eq!(p.iter().map(|h| h.1).sum::<u32>(), 20);
    }

    #[test]
    fn a_required_pod_on_lingjun_stays_under_one_aggregation_switch() {
        let t = orrery_trace_free_lingjun();
        let free: Vec<u32> = vec![8; t.hosts.len()];
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: Vec::new(), running: Vec::new() };
        let rack_of = crate::baseline::racks(&view);
        let pods = domain_of(&view, Level::Pod, rack_of);
        let spec = JobSpec::new("j", "llama3-8b", 1, 200, Work::Iterations(1), 0.0);
        let hosts = TopologyAware::by_name("tas-required:pod")
            .expect("a TAS name")
            .place(&view, rack_of, &free, &spec)
            .expect("a pod (256 GPUs) holds 200");
        let used: std::collections::BTreeSet<usize> = hosts.iter().map(|&(h, _)| pods[h]).collect();
        assert_eq!(used.len(), 1, "{used:?}");
        // The three aggregation switches are three pods.
        assert_eq!(pods.iter().collect::<std::collections::BTreeSet<_>>().len(), 3);
    }

    /// A three-tier tree like Lingjun's: 3 aggregation switches of 8 ToRs
    /// of 4 hosts (orrery-policy does not read trace files).
    fn orrery_trace_free_lingjun() -> Topology {
        let hosts: Vec<orrery_model::setups::ClosHost> = (0..96)
            .map(|i| orrery_model::setups::ClosHost {
                name: format!("h{i}"),
                tor: format!("S{}", i / 4 % 8),
                aggregation: format!("P{}", i / 32),
                core: "G".into(),
            })
            .collect();
        orrery_model::setups::clos_tree("tree", &hosts, &orrery_model::setups::ClosRates::default()).expect("valid")
    }

    #[test]
    fn names_parse_and_others_do_not() {
        assert!(TopologyAware::by_name("tas-required:rack").is_some());
        assert!(TopologyAware::by_name("tas-preferred:host").is_some());
        assert!(TopologyAware::by_name("tas-required:zone").is_none());
        assert!(TopologyAware::by_name("tas:rack").is_none());
        assert!(TopologyAware::by_name("tas-required:pod").is_some());
        assert!(HyperNode::by_name("hypernode:2").is_some());
        assert!(HyperNode::by_name("hypernode:3").is_none());
    }
}

/// Mesh jobs under every policy that places through `JobSpec::host_cap`
/// (issue 67: "a TP group never crosses an NVLink domain under orrery").
#[cfg(test)]
mod mesh_tests {
    use crate::{ClusterView, Decision, QueuedJob};
    use orrery_model::mesh::Mesh;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Work};

    #[test]
    fn no_policy_that_places_by_host_cap_splits_a_tp_group_across_hosts() {
        // 2 racks of 2 hosts of 8 GPUs; free 6, 8, 2, 8. A Llama 3 8B at
        // TP 8 x DP 2 takes the two hosts with 8 free, never 6 + 2 of two
        // others; at TP 4 x DP 3 it takes whole fours (4 of the 6).
        let t = LeafSpine::with_oversubscription(2, 2, 1, 8, "h100", 3200.0, 1.0).build("t").expect("valid");
        let free = [6, 8, 2, 8];
        for (tp, dp) in [(8, 2), (4, 3)] {
            let mut job = JobSpec::new("m", "llama3-8b", 1, tp * dp, Work::Iterations(10), 0.0);
            job.parallelism = Some(Mesh { tp, dp, ..Mesh::default() });
            assert_eq!(job.check(), Ok(()));
            for policy in
                ["orrery", "fifo", "themis+cassini", "tas-preferred:rack", "slurm-block", "fifo+foresight", "metronome"]
            {
                let mut p = crate::by_name(policy, 1).expect("catalogued");
                let view = ClusterView {
                    now_s: 0.0,
                    topology: &t,
                    free_gpus: &free,
                    queue: vec![QueuedJob::new(0, &job, 1.0)],
                    running: Vec::new(),
                };
                let hosts = p
                    .schedule(&view)
                    .into_iter()
                    .find_map(|d| match d {
                        Decision::Place { job: 0, hosts } => Some(hosts),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{policy} places the TP {tp} mesh"));
                assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), tp * dp, "{policy}");
                assert!(hosts.iter().all(|&(_, g)| g % tp == 0), "{policy} split a TP {tp} group: {hosts:?}");
            }
        }
    }
}
