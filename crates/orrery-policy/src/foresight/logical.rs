//! FORESIGHT's logical network (§III, "Simplifying the Network"): every spine
//! of a leaf-spine merged into one logical spine, so each leaf has one up and
//! one down logical link whose capacity is the sum of its uplinks. Timing is
//! decided against these links; routing then spreads flows over the real
//! spines.

use orrery_model::{HostId, Topology};

/// A logical link: the up or down link of a leaf.
pub type LogicalLink = usize;

/// The logical view of a two-tier leaf-spine.
#[derive(Debug, Clone, PartialEq)]
pub struct LogicalNetwork {
    /// Leaf (rack) index of each host.
    pub leaf_of_host: Vec<usize>,
    /// Number of leaves.
    pub leaves: usize,
    /// Number of spines.
    pub spines: usize,
    /// Capacity of each logical link, Gbit/s: `2·leaf` is up, `2·leaf + 1` down.
    pub capacity: Vec<f64>,
    /// Node id of each spine, in discovery order (a colour's spine).
    pub spine_nodes: Vec<usize>,
    /// Capacity of one leaf–spine link (the smallest), Gbit/s.
    pub spine_link_gbps: f64,
}

impl LogicalNetwork {
    /// The logical network of a two-tier topology in which every host is
    /// cabled to one leaf and leaves to spines. None if a host has no leaf.
    /// O(links).
    pub fn of(t: &Topology) -> Option<Self> {
        let h = t.hosts.len();
        let mut leaf_ids: Vec<usize> = Vec::new();
        let mut leaf_of_host = Vec::with_capacity(h);
        for host in 0..h {
            let &l = t.out_links(host).first()?;
            let sw = t.links[l].to;
            let k = match leaf_ids.iter().position(|&x| x == sw) {
                Some(k) => k,
                None => {
                    leaf_ids.push(sw);
                    leaf_ids.len() - 1
                }
            };
            leaf_of_host.push(k);
        }
        let mut capacity = vec![0.0; 2 * leaf_ids.len()];
        let mut spines: Vec<usize> = Vec::new();
        let mut spine_link_gbps = f64::INFINITY;
        for l in &t.links {
            if let Some(k) = leaf_ids.iter().position(|&x| x == l.from)
                && l.to >= h
            {
                capacity[2 * k] += l.gbps;
                spine_link_gbps = spine_link_gbps.min(l.gbps);
                if !spines.contains(&l.to) {
                    spines.push(l.to);
                }
            }
            if let Some(k) = leaf_ids.iter().position(|&x| x == l.to)
                && l.from >= h
            {
                capacity[2 * k + 1] += l.gbps;
            }
        }
        Some(LogicalNetwork {
            leaf_of_host,
            leaves: leaf_ids.len(),
            spines: spines.len(),
            capacity,
            spine_link_gbps: if spines.is_empty() { 0.0 } else { spine_link_gbps },
            spine_nodes: spines,
        })
    }

    /// Up link of a leaf.
    pub fn up(leaf: usize) -> LogicalLink {
        2 * leaf
    }

    /// Down link of a leaf.
    pub fn down(leaf: usize) -> LogicalLink {
        2 * leaf + 1
    }

    /// Logical links a flow from `src` to `dst` crosses: none inside a rack,
    /// else the source leaf's up and the destination leaf's down.
    pub fn links(&self, src: HostId, dst: HostId) -> Vec<LogicalLink> {
        let (a, b) = (self.leaf_of_host[src], self.leaf_of_host[dst]);
        if a == b { Vec::new() } else { vec![Self::up(a), Self::down(b)] }
    }

    /// For each spine, the index in `t.paths(src, dst)` of the first path
    /// through it (for `Decision::Route`); None inside a rack or where no
    /// path crosses that spine. One pass over the pair's paths:
    /// O(paths · hops · spines), cached by the caller per host pair (a
    /// 1,024-GPU mesh routes the same pairs in every planned iteration).
    pub fn paths_by_spine(&self, t: &Topology, src: HostId, dst: HostId) -> Vec<Option<usize>> {
        let mut out = vec![None; self.spines];
        for (i, path) in t.shared_paths(src, dst).iter().enumerate() {
            for &l in path {
                if let Some(s) = self.spine_nodes.iter().position(|&n| n == t.links[l].to)
                    && out[s].is_none()
                {
                    out[s] = Some(i);
                }
            }
        }
        out
    }

    /// FORESIGHT's fragmentation (§II): the share of a set of flows that
    /// cross racks.
    pub fn fragmentation(&self, flows: &[(HostId, HostId)]) -> f64 {
        if flows.is_empty() {
            return 0.0;
        }
        let cross = flows.iter().filter(|&&(s, d)| self.leaf_of_host[s] != self.leaf_of_host[d]).count();
        cross as f64 / flows.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::foresight;

    #[test]
    fn foresight_testbed_merges_its_spines() {
        // 48 machines in racks of 8 under 4 spines, 100 Gbit/s links.
        let n = LogicalNetwork::of(&foresight(4)).expect("leaf-spine");
        assert_eq!((n.leaves, n.spines), (6, 4));
        assert_eq!(n.leaf_of_host[0], n.leaf_of_host[7]);
        assert_ne!(n.leaf_of_host[7], n.leaf_of_host[8]);
        // Each leaf: 4 uplinks of 100 = 400 up and 400 down (8 hosts of 100: 2:1).
        assert!(n.capacity.iter().all(|&c| (c - 400.0).abs() < 1e-9), "{:?}", n.capacity);
        assert!(n.links(0, 7).is_empty());
        assert_eq!(n.links(0, 8), vec![LogicalNetwork::up(0), LogicalNetwork::down(1)]);
        assert_eq!(n.fragmentation(&[(0, 1), (0, 8), (9, 1), (2, 3)]), 0.5);
    }

    #[test]
    fn each_spine_names_the_path_that_crosses_it() {
        let t = foresight(4);
        let n = LogicalNetwork::of(&t).expect("leaf-spine");
        let by_spine = n.paths_by_spine(&t, 0, 8);
        let paths = t.shared_paths(0, 8);
        assert_eq!(paths.len(), 4, "one path a spine between two racks");
        for (s, i) in by_spine.iter().enumerate() {
            let i = i.expect("every spine joins two leaves");
            assert!(paths[i].iter().any(|&l| t.links[l].to == n.spine_nodes[s]), "spine {s}");
        }
        // Inside a rack no path crosses a spine.
        assert_eq!(n.paths_by_spine(&t, 0, 7), vec![None; 4]);
    }
}
