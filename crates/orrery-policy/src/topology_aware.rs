//! Topology-aware gang placement as Kubernetes and Kueue do it (issue 67's
//! baselines): `tas-required:LEVEL` and `tas-preferred:LEVEL`, LEVEL `host`
//! or `rack`.
//!
//! * **Required** (Kubernetes 1.36 Workload API TAS; Kueue's
//!   `podset-required-topology`): the whole gang inside one domain of the
//!   level, or it waits. Candidate placements are the domains that can hold
//!   it; the score is NodeResourcesFit's MostAllocated, so the fullest
//!   domain that fits wins (best fit), and inside it the fullest hosts are
//!   taken first.
//! * **Preferred** (Kueue's `podset-preferred-topology`): one domain when
//!   one fits; otherwise as few domains as possible, the ones with the most
//!   free GPUs first, and never a wait when the cluster has the GPUs.
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
}

impl Level {
    /// `host` or `rack`.
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "host" | "hostname" | "node" => Some(Level::Host),
            "rack" | "leaf" => Some(Level::Rack),
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
            (false, Level::Host) => "tas-preferred:host",
            (false, Level::Rack) => "tas-preferred:rack",
        };
        Some(TopologyAware { level, required, name })
    }
}

/// The hosts of each domain of `level` with free GPUs, fullest first within
/// a domain (MostAllocated), in domain order. O(H log H).
fn domains(level: Level, rack_of: &[usize], free: &[u32]) -> BTreeMap<usize, Vec<HostId>> {
    let mut out: BTreeMap<usize, Vec<HostId>> = BTreeMap::new();
    for h in (0..free.len()).filter(|&h| free[h] > 0) {
        let d = match level {
            Level::Host => h,
            Level::Rack => rack_of.get(h).copied().unwrap_or(h),
        };
        out.entry(d).or_default().push(h);
    }
    for hosts in out.values_mut() {
        hosts.sort_by_key(|&h| (free[h], h));
    }
    out
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
    fn place(&mut self, _view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let free = capped(free, spec);
        let gpus = spec.gpus();
        let domains = domains(self.level, rack_of, &free);
        let total = |hosts: &[HostId]| hosts.iter().map(|&h| u64::from(free[h])).sum::<u64>();
        // One domain: the fullest that fits (least free, lowest index on ties).
        let one = domains
            .iter()
            .filter(|(_, hosts)| total(hosts) >= u64::from(gpus))
            .min_by_key(|(d, hosts)| (total(hosts), **d));
        if let Some((_, hosts)) = one {
            return take(&free, hosts, gpus);
        }
        if self.required {
            return None;
        }
        // Fewest domains: the emptiest first.
        let mut order: Vec<(&usize, &Vec<HostId>)> = domains.iter().collect();
        order.sort_by_key(|(d, hosts)| (std::cmp::Reverse(total(hosts)), **d));
        let hosts: Vec<HostId> = order.into_iter().flat_map(|(_, hosts)| hosts.iter().copied()).collect();
        take(&free, &hosts, gpus)
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
        TopologyAware::by_name(name).expect("a TAS name").place(&view, &rack_of, free, &spec)
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
    fn names_parse_and_others_do_not() {
        assert!(TopologyAware::by_name("tas-required:rack").is_some());
        assert!(TopologyAware::by_name("tas-preferred:host").is_some());
        assert!(TopologyAware::by_name("tas-required:zone").is_none());
        assert!(TopologyAware::by_name("tas:rack").is_none());
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
            for policy in ["orrery", "fifo", "themis+cassini", "tas-preferred:rack", "fifo+foresight", "metronome"] {
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
