//! The centralised greedy that Theorem 1 compares the auction with: place a
//! job's components one at a time, each on the node whose next component has
//! the highest marginal utility ([`slot_value`], kept non-increasing per node
//! as the agents bid). O(Λ·N) utility evaluations for Λ components on N nodes.

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
            let Some((n, v)) = best else {
                return Err(Unplaced::NoNode { placed: held.iter().sum::<usize>(), wanted: count });
            };
            held[n] += 1;
            last[n] = v;
            res[n].take(&job.demand(role), 1.0);
        }
        placement.push(held.iter().enumerate().filter(|(_, k)| **k > 0).map(|(n, &k)| (n as u32, k)).collect());
    }
    let load = link_load(map, job, &placement);
    if !usage.fits(map, &load) {
        return Err(Unplaced::LinksFull);
    }
    Ok((placement, load))
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
