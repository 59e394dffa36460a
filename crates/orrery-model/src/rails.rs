//! Rail-optimised fabrics (issue 66, item 2). In an H100 or GB200 cluster
//! each GPU has a NIC of its own, and NIC k of every host in a scalable
//! unit is cabled to the unit's rail switch k; the rail switches hang from
//! spines. Traffic between GPUs of the same index on two hosts of a unit
//! crosses one switch; other traffic crosses the spines, unless NCCL's
//! PXN first moves it over NVLink to the GPU on the destination's rail
//! (NCCL 2.12 and later do, by default). orrery routes as PXN does: a flow
//! leaves its host on the NIC of its destination GPU's rail. A job whose
//! ranks sit on the same GPU indices on every host (rail-aligned) sends
//! each flow from its own GPU's NIC; one whose ranks do not sends some
//! flows from NICs that belong to other GPUs, and other jobs' traffic.

use crate::topology::{Builder, HostId, LinkId, Tier, Topology, TopologyError};
use serde::{Deserialize, Serialize};

/// Which GPUs of a host a job is given (`[sim] gpus`); on a rail fabric
/// that decides which NICs its flows leave on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GpuAllocation {
    /// The lowest free indices on each host, as Slurm hands out GRES and
    /// Kubernetes' device plugin does on an NVSwitch host (every GPU alike).
    #[default]
    LowestFree,
    /// The same indices on every host of the job where they are free: the
    /// block of GPUs at the offset free on the most of its hosts, lowest
    /// free elsewhere. Its ranks then send on their own rails.
    RailAligned,
}

/// Chooses `want[i]` GPU indices on each of a job's hosts, given which
/// are taken (`taken[i][k]`: jobs holding GPU k of host i). Each host's
/// choice is sorted. Where fewer are free than wanted (GPU sharing), the
/// least held are taken. O(hosts · G²) for [`GpuAllocation::RailAligned`],
/// O(hosts · G log G) otherwise, G the GPUs of a host.
pub fn choose_gpus(how: GpuAllocation, taken: &[&[u8]], want: &[u32]) -> Vec<Vec<u32>> {
    let lowest = |held: &[u8], g: u32| -> Vec<u32> {
        let mut order: Vec<u32> = (0..held.len() as u32).collect();
        order.sort_by_key(|&k| (held[k as usize], k));
        let mut out: Vec<u32> = order.into_iter().take(g as usize).collect();
        out.sort_unstable();
        out
    };
    let block_free = |held: &[u8], o: usize, g: usize| o + g <= held.len() && held[o..o + g].iter().all(|&n| n == 0);
    let offset = match how {
        GpuAllocation::LowestFree => None,
        GpuAllocation::RailAligned => {
            let most = taken.iter().map(|h| h.len()).max().unwrap_or(0);
            (0..most).max_by_key(|&o| {
                let fits = taken.iter().zip(want).filter(|&(h, &g)| block_free(h, o, g as usize)).count();
                (fits, std::cmp::Reverse(o))
            })
        }
    };
    taken
        .iter()
        .zip(want)
        .map(|(&held, &g)| match offset {
            Some(o) if block_free(held, o, g as usize) => (o as u32..o as u32 + g).collect(),
            _ => lowest(held, g),
        })
        .collect()
}

/// A rail-optimised leaf-spine: `units` scalable units of `hosts_per_unit`
/// hosts, one rail switch per GPU index in each unit, every rail switch
/// cabled to every spine.
#[derive(Debug, Clone, PartialEq)]
pub struct RailLeafSpine {
    /// Scalable units (groups of hosts sharing rail switches).
    pub units: u32,
    /// Hosts per unit.
    pub hosts_per_unit: u32,
    /// GPUs per host, each with its own NIC: the rails of a unit.
    pub gpus_per_host: u32,
    /// Spine switches.
    pub spines: u32,
    /// GPU type.
    pub gpu_type: String,
    /// Each NIC's rate, Gbit/s.
    pub nic_gbps: f64,
    /// A rail switch's host-facing rate over its spine-facing rate.
    pub oversubscription: f64,
}

impl RailLeafSpine {
    /// One unit of `hosts` HGX H100 hosts (eight GPUs, each with a NIC of
    /// `nic_gbps`) under one spine at 1:1: the smallest rail fabric.
    pub fn h100_unit(hosts: u32, nic_gbps: f64) -> RailLeafSpine {
        RailLeafSpine {
            units: 1,
            hosts_per_unit: hosts,
            gpus_per_host: 8,
            spines: 1,
            gpu_type: "h100".into(),
            nic_gbps,
            oversubscription: 1.0,
        }
    }

    /// Builds it: hosts `h0…`, rail switches `su{u}-rail{k}`, spines
    /// `spine{s}`. Host NIC k is its k-th cable, so [`Topology::rail_of`]
    /// maps GPU k to it. O(units · gpus_per_host · spines + hosts · gpus_per_host).
    pub fn build(&self, name: &str) -> Result<Topology, TopologyError> {
        for (field, n) in [
            ("units", self.units),
            ("hosts_per_unit", self.hosts_per_unit),
            ("gpus_per_host", self.gpus_per_host),
            ("spines", self.spines),
        ] {
            if n == 0 {
                return Err(TopologyError::Zero { field });
            }
        }
        let mut b = Builder::new();
        b.rails();
        let up =
            f64::from(self.hosts_per_unit) * self.nic_gbps / self.oversubscription.max(1e-9) / f64::from(self.spines);
        let spines: Vec<_> = (0..self.spines).map(|s| b.switch(format!("spine{s}"), Tier::Spine)).collect();
        for u in 0..self.units {
            let rails: Vec<_> =
                (0..self.gpus_per_host).map(|k| b.switch(format!("su{u}-rail{k}"), Tier::Leaf)).collect();
            for i in 0..self.hosts_per_unit {
                let h = b.host(format!("h{}", u * self.hosts_per_unit + i), self.gpus_per_host, &self.gpu_type, 0, 0.0);
                for &r in &rails {
                    b.cable(h, r, self.nic_gbps);
                }
            }
            for &r in &rails {
                for &s in &spines {
                    b.cable(r, s, up);
                }
            }
        }
        b.build(name)
    }
}

/// Each worker's GPU once a job's GPUs on its hosts are chosen: worker
/// `w`, on host `workers[w]`, is the job's `aligned[w]`-th GPU there
/// ([`crate::placed::place`] numbers them so), which is that host's
/// `aligned[w]`-th chosen index. `hosts` is sorted and `chosen[i]` is
/// host `hosts[i]`'s choice. O(workers · log hosts).
pub fn worker_gpus(workers: &[HostId], aligned: &[u32], hosts: &[HostId], chosen: &[Vec<u32>]) -> Vec<u32> {
    (0..workers.len())
        .map(|w| {
            let pos = hosts.binary_search(&workers[w]).ok();
            pos.and_then(|p| chosen[p].get(aligned[w] as usize).copied()).unwrap_or(aligned[w])
        })
        .collect()
}

impl Topology {
    /// The rail (index of the NIC among host `h`'s links out) GPU `gpu`
    /// of `h` is cabled to: ⌊gpu · nics / gpus⌋, so GPU k is on rail k when
    /// every GPU has a NIC. 0 off a rail fabric. O(1).
    pub fn rail_of(&self, h: HostId, gpu: u32) -> usize {
        let nics = self.out_links(h).len();
        let gpus = self.hosts.get(h).map_or(1, |x| x.gpus.max(1)) as usize;
        if !self.rails || nics == 0 {
            return 0;
        }
        (gpu as usize * nics / gpus).min(nics - 1)
    }

    /// Every fewest-hop path of a flow from host `src` to host `dst` on
    /// `rail` (the destination GPU's, [`Topology::rail_of`]): out on
    /// `src`'s NIC of that rail, across the fewest switch hops to `dst`'s
    /// rail switch (none inside a unit), in on `dst`'s NIC of that rail.
    /// Empty when `src == dst` or either host has no such NIC.
    /// O(path enumeration between the two rail switches, memoised).
    pub fn rail_paths(&self, src: HostId, dst: HostId, rail: usize) -> Vec<Vec<LinkId>> {
        if src == dst {
            return Vec::new();
        }
        let (Some(&up), Some(&dst_nic)) = (self.out_links(src).get(rail), self.out_links(dst).get(rail)) else {
            return Vec::new();
        };
        let to = self.links[dst_nic].to;
        let Some(&down) = self.in_links(dst).iter().find(|&&l| self.links[l].from == to) else { return Vec::new() };
        self.paths_around(up, down)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two units of 4 hosts, 8 GPUs each on 8 rails of 400 Gbit/s, 4 spines, 1:1.
    fn two_units() -> Topology {
        RailLeafSpine {
            units: 2,
            hosts_per_unit: 4,
            gpus_per_host: 8,
            spines: 4,
            gpu_type: "h100".into(),
            nic_gbps: 400.0,
            oversubscription: 1.0,
        }
        .build("rails")
        .expect("valid")
    }

    #[test]
    fn a_rail_fabric_gives_each_gpu_its_own_nic_and_its_unit_one_switch_per_rail() {
        let t = two_units();
        assert!(t.rails);
        assert_eq!((t.hosts.len(), t.switches.len()), (8, 4 + 2 * 8));
        // The host's NIC is its eight rails together.
        assert_eq!(t.host_nic_gbps(0), 8.0 * 400.0);
        for k in 0..8 {
            let nic = t.out_links(3)[t.rail_of(3, k)];
            assert_eq!(t.node_name(t.links[nic].to), format!("su0-rail{k}"));
        }
        // Each rail switch: 4 hosts × 400 down, 4 spines × 400 up: 1:1.
        assert_eq!(t.oversubscription(), 1.0);
    }

    #[test]
    fn inside_a_unit_a_rail_crosses_one_switch_and_between_units_the_spines() {
        let t = two_units();
        let name = |p: &[LinkId]| p.iter().map(|&l| t.node_name(t.links[l].to).to_string()).collect::<Vec<_>>();
        // h1 → h2 on rail 5: out on h1's NIC 5, in on h2's NIC 5.
        let inside = t.rail_paths(1, 2, 5);
        assert_eq!(inside.len(), 1);
        assert_eq!(name(&inside[0]), ["su0-rail5", "h2"]);
        assert_eq!(t.links[inside[0][0]].from, 1);
        // h1 → h6 (unit 1) on rail 2: one path per spine, 4 hops.
        let across = t.rail_paths(1, 6, 2);
        assert_eq!(across.len(), 4);
        for (s, p) in across.iter().enumerate() {
            assert_eq!(name(p), ["su0-rail2", &format!("spine{s}"), "su1-rail2", "h6"]);
        }
        assert!(t.rail_paths(1, 1, 0).is_empty());
        assert!(t.rail_paths(1, 2, 8).is_empty(), "no ninth rail");
    }

    #[test]
    fn rail_aligned_gives_a_job_the_same_gpus_on_every_host_where_they_are_free() {
        // Host 0 has GPUs 0-3 taken, host 1 GPUs 4-7, host 2 nothing.
        let (h0, h1, h2) = ([1u8, 1, 1, 1, 0, 0, 0, 0], [0u8, 0, 0, 0, 1, 1, 1, 1], [0u8; 8]);
        let taken: [&[u8]; 3] = [&h0, &h1, &h2];
        let lowest = choose_gpus(GpuAllocation::LowestFree, &taken, &[4, 4, 4]);
        assert_eq!(lowest, [vec![4, 5, 6, 7], vec![0, 1, 2, 3], vec![0, 1, 2, 3]]);
        // Offsets 0 and 4 each fit two hosts: the lower, 0, wins; host 0 gets its lowest free.
        let aligned = choose_gpus(GpuAllocation::RailAligned, &taken, &[4, 4, 4]);
        assert_eq!(aligned, [vec![4, 5, 6, 7], vec![0, 1, 2, 3], vec![0, 1, 2, 3]]);
        // On hosts 0 and 2 only, offset 4 fits both.
        let aligned = choose_gpus(GpuAllocation::RailAligned, &[&h0, &h2], &[4, 4]);
        assert_eq!(aligned, [vec![4, 5, 6, 7], vec![4, 5, 6, 7]]);
        assert_eq!(choose_gpus(GpuAllocation::LowestFree, &[&h0, &h2], &[4, 4])[1], [0, 1, 2, 3]);
        // Two GPUs on a host whose free ones are 4-7 (sharing past them: the least held).
        let full = [1u8, 2, 1, 1, 1, 1, 1, 1];
        assert_eq!(choose_gpus(GpuAllocation::LowestFree, &[&full], &[2]), [vec![0, 2]]);
    }

    #[test]
    fn off_a_rail_fabric_every_gpu_is_on_the_hosts_one_nic() {
        let t =
            crate::setups::LeafSpine::with_oversubscription(2, 2, 1, 8, "a100", 100.0, 1.0).build("t").expect("valid");
        assert!(!t.rails);
        assert_eq!((t.rail_of(0, 7), t.host_nic_gbps(0)), (0, 100.0));
    }
}
