//! The centralised greedy that Theorem 1 compares the auction with: place a
//! job's components one at a time, each on the node whose next component has
//! the highest marginal utility ([`slot_value`], kept non-increasing per node
//! as the agents bid). Placing a component changes only its node's next
//! bid, so the nodes wait in a max-heap: O(N + Λ log N) utility evaluations
//! and heap steps a role for Λ components on N nodes, where a scan of every
//! node per component was O(Λ·N) (a 1,024-worker mesh on 16,384 hosts).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use crate::utility::{
    BidPolicy, ClusterMap, JobRequest, LinkLoad, NodeContext, Placement, Resources, Usage, link_load, slot_value,
};

/// Why the greedy cannot place a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    /// Some component found no node with room (and a bid) for it.
    #[error("{placed} of {wanted} components had a node")]
    NoNode {
        /// Components of the role that had a node.
        placed: usize,
        /// Components of the role.
        wanted: usize,
    },
    /// Every component had a node, but the placement's traffic does not
    /// fit the NICs and uplinks (constraint 4).
    #[error("the placement's traffic does not fit the links")]
    LinksFull,
}

/// Places `job` on `nodes` (free resources per node) or says why not. Ties
/// go to the lower node id.
pub fn greedy(
    nodes: &[Resources],
    map: &ClusterMap,
    usage: &Usage,
    job: &JobRequest,
    policy: &BidPolicy,
) -> Result<(Placement, LinkLoad), Unplaced> {
    let mut res: Vec<Resources> = nodes.to_vec();
    let mut placement = Placement::new();
    for (role, count) in job.roles().into_iter().enumerate() {
        let mut held = vec![0usize; nodes.len()];
        let mut last = vec![f64::INFINITY; nodes.len()];
        // A node's next bid, kept non-increasing: `min` with the last one
        // also turns a NaN bid into the last (infinite before the first).
        let bid = |n: usize, res: &[Resources], held: &[usize], last: &[f64]| {
            let ctx = NodeContext { node: n as u32, resources: res[n], map, usage };
            slot_value(&ctx, job, role, held[n] + 1, policy).map(|v| Bid(v.min(last[n]) + 0.0))
        };
        // (bid, lower id first, the node's stamp); an entry whose stamp is
        // not its node's is stale.
        let mut stamp = vec![0u32; nodes.len()];
        let mut heap: BinaryHeap<(Bid, Reverse<usize>, u32)> =
            (0..nodes.len()).filter_map(|n| Some((bid(n, &res, &held, &last)?, Reverse(n), 0))).collect();
        for _ in 0..count {
            let (v, n) = loop {
                let Some((v, Reverse(n), s)) = heap.pop() else {
                    return Err(Unplaced::NoNode { placed: held.iter().sum::<usize>(), wanted: count });
                };
                if s == stamp[n] {
                    break (v.0, n);
                }
            };
            held[n] += 1;
            last[n] = v;
            res[n].take(&job.demand(role), 1.0);
            stamp[n] += 1;
            if let Some(b) = bid(n, &res, &held, &last) {
                heap.push((b, Reverse(n), stamp[n]));
            }
        }
        placement.push(held.iter().enumerate().filter(|(_, k)| **k > 0).map(|(n, &k)| (n as u32, k)).collect());
    }
    let load = link_load(map, job, &placement);
    if !usage.fits(map, &load) {
        return Err(Unplaced::LinksFull);
    }
    Ok((placement, load))
}

/// A bid ordered as `>` orders it: never NaN (see [`greedy`]), and `+ 0.0`
/// makes −0 and +0 one value, as `>` sees them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Bid(f64);

impl Eq for Bid {}

impl PartialOrd for Bid {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Bid {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// Sum of the (warped, non-increasing) bids a placement's components win:
/// the objective of Eq. 2 as the auction and the greedy value it. Ties
/// between nodes make placements differ while this stays equal.
pub fn total_utility(
    nodes: &[Resources],
    map: &ClusterMap,
    usage: &Usage,
    job: &JobRequest,
    policy: &BidPolicy,
    placement: &Placement,
) -> f64 {
    let mut total = 0.0;
    for (role, counts) in placement.iter().enumerate() {
        for &(n, k) in counts {
            let Some(&res) = nodes.get(n as usize) else { continue };
            let ctx = NodeContext { node: n, resources: res, map, usage };
            total += crate::utility::slot_values(&ctx, job, role, policy).0.iter().take(k).sum::<f64>();
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::utility::{Arch, Demand, Utility};
    use proptest::prelude::*;

    /// The greedy as Theorem 1 states it: every node's next bid compared for
    /// every component, the first highest winning.
    fn by_scan(
        nodes: &[Resources],
        map: &ClusterMap,
        usage: &Usage,
        job: &JobRequest,
        policy: &BidPolicy,
    ) -> Option<Placement> {
        let mut res = nodes.to_vec();
        let mut placement = Placement::new();
        for (role, count) in job.roles().into_iter().enumerate() {
            let (mut held, mut last) = (vec![0usize; nodes.len()], vec![f64::INFINITY; nodes.len()]);
            for _ in 0..count {
                let mut best: Option<(usize, f64)> = None;
                for n in 0..nodes.len() {
                    let ctx = NodeContext { node: n as u32, resources: res[n], map, usage };
                    let Some(v) = slot_value(&ctx, job, role, held[n] + 1, policy) else { continue };
                    let v = v.min(last[n]);
                    if best.is_none_or(|(_, b)| v > b) {
                        best = Some((n, v));
                    }
                }
                let (n, v) = best?;
                held[n] += 1;
                last[n] = v;
                res[n].take(&job.demand(role), 1.0);
            }
            placement.push(held.iter().enumerate().filter(|(_, k)| **k > 0).map(|(n, &k)| (n as u32, k)).collect());
        }
        Some(placement)
    }

    proptest! {
        /// The heap picks what the scan picks, component by component, ties
        /// (many here: nodes alike in racks alike) to the lower id included.
        #[test]
        fn the_heap_places_every_component_where_the_scan_does(
            n in 1usize..48,
            busy in proptest::collection::vec(0u8..9, 48),
            nic_used in proptest::collection::vec(0.0f64..30.0, 48),
            uplink_used in proptest::collection::vec(0.0f64..60.0, 12),
            workers in 1u16..40,
            gpus in 1u8..4,
            gbps in 0u8..30,
            ps in any::<bool>(),
            utility in 0usize..7,
            aware in any::<bool>(),
        ) {
            let map = ClusterMap {
                leaf_of: (0..n).map(|i| (i / 4) as u16).collect(),
                nic_gbps: vec![25.0; n],
                uplink_gbps: vec![50.0; n.div_ceil(4)],
            };
            let nodes: Vec<Resources> = (0..n)
                .map(|i| {
                    let total = Demand { gpus: 8.0, cpus: 96.0, mem_gib: 512.0 };
                    let b = f64::from(busy[i] % 9);
                    Resources { total, free: Demand { gpus: 8.0 - b, cpus: 96.0 - 4.0 * b, mem_gib: 512.0 - 16.0 * b } }
                })
                .collect();
            let mut usage = Usage::empty(&map);
            usage.nic.iter_mut().zip(&nic_used).for_each(|(u, &x)| *u = x);
            usage.uplink.iter_mut().zip(&uplink_used).for_each(|(u, &x)| *u = x);
            let job = JobRequest {
                id: 1,
                arch: if ps { Arch::ParameterServer } else { Arch::Ring },
                workers,
                worker: Demand { gpus: f64::from(gpus), cpus: 4.0, mem_gib: 16.0 },
                server: Demand { gpus: 0.0, cpus: 8.0, mem_gib: 32.0 },
                gbps: f64::from(gbps),
                peak_gbps: 25.0,
                runtime_s: 1800.0,
                weight: 1.0,
            };
            let u = Utility::ALL[utility];
            let policy = if aware { BidPolicy::aware(u) } else { BidPolicy::unaware(u) };
            let scan = by_scan(&nodes, &map, &usage, &job, &policy);
            match greedy(&nodes, &map, &usage, &job, &policy) {
                Ok((p, _)) => prop_assert_eq!(Some(p), scan),
                Err(Unplaced::NoNode { .. }) => prop_assert_eq!(None, scan),
                Err(Unplaced::LinksFull) => prop_assert!(scan.is_some()),
            }
        }
    }
}
