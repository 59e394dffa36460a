//! A planned route as the driver takes it: a flow's spines and shares
//! (SolveRouting's output) become indices into the ECMP paths of its host
//! pair, repeated in proportion to the shares (the driver splits a flow
//! equally over the list).
//!
//! The indices are found when a step is handed out, not when it is
//! planned: a 1,024-GPU mesh has ~12,000 cross-rack flows an iteration,
//! and a part of such meshes re-planned on every arrival that touches it
//! threw most of its planned steps away unused (at 4,096 hosts a debug
//! trace had 49 of a part's 97 ms re-plan turning routes into paths,
//! against 48 planning them). Each host pair's path through each spine is
//! remembered, since the same pairs recur in every step of their job.

use super::logical::LogicalNetwork;
use super::routing::Route;
use crate::memo::FastMap;
use orrery_model::{HostId, Topology};

/// Host pairs remembered before the memo is forgotten whole: ~160 bytes
/// each with 16 spines (16 × 8 for the indices, 32 for the entry), so
/// 42 MB at most. A 4,096-host LLM workload's
/// running meshes route a few hundred thousand pairs.
const PAIRS: usize = 1 << 18;

/// Each host pair's path index through each spine, as far as asked.
#[derive(Debug, Default)]
pub struct SpinePaths {
    by_pair: FastMap<(HostId, HostId), Box<[Option<u32>]>>,
}

impl SpinePaths {
    /// Forgets every pair (the fabric changed).
    pub fn clear(&mut self) {
        self.by_pair.clear();
    }

    /// The ECMP path indices `route` pins, each spine's path repeated in
    /// proportion to its share; a spine no path of the pair crosses is left
    /// out. O(spines) for a pair seen before, plus
    /// [`LogicalNetwork::paths_by_spine`] the first time.
    pub fn of(&mut self, net: &LogicalNetwork, t: &Topology, route: &Route) -> Vec<usize> {
        let mut out = Vec::new();
        self.write(net, t, route, &mut out);
        out
    }

    /// [`SpinePaths::of`] into `out` (cleared first), so that a caller
    /// comparing it with the paths in force allocates only for a change.
    pub fn write(&mut self, net: &LogicalNetwork, t: &Topology, route: &Route, out: &mut Vec<usize>) {
        out.clear();
        let (src, dst) = route.ends;
        if self.by_pair.len() >= PAIRS {
            self.by_pair.clear();
        }
        let through = self.by_pair.entry((src, dst)).or_insert_with(|| {
            net.paths_by_spine(t, src, dst).into_iter().map(|i| i.and_then(|i| u32::try_from(i).ok())).collect()
        });
        let path = |s: usize| through.get(s).copied().flatten().map(|i| i as usize);
        match route.spines.as_slice() {
            &[(s, _)] => out.extend(path(s)),
            spines => {
                let shares: Vec<f64> = spines.iter().map(|x| x.1).collect();
                for (&(s, _), n) in spines.iter().zip(repeats(&shares)) {
                    out.extend(path(s).map(|i| std::iter::repeat_n(i, n)).into_iter().flatten());
                }
            }
        }
    }
}

/// Whole repeats in exactly the proportions of `shares` (subflow counts over
/// the flow's subflows, so k / parts each): the smallest denominator up to 64
/// that makes every share whole, else quarters. O(64 · shares).
fn repeats(shares: &[f64]) -> Vec<usize> {
    let whole = |d: usize| shares.iter().all(|x| ((x * d as f64) - (x * d as f64).round()).abs() < 1e-6);
    let d = (1..=64).find(|&d| whole(d)).unwrap_or(4);
    shares.iter().map(|x| ((x * d as f64).round() as usize).max(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::foresight;

    #[test]
    fn route_shares_become_exact_repeats() {
        // Eighths (a 100 Gbit/s flow in 12.5 Gbit/s subflows): 3/8 and 5/8
        // stay 3:5; quarters in quarters; one spine once.
        assert_eq!(repeats(&[0.375, 0.625]), vec![3, 5]);
        assert_eq!(repeats(&[0.25, 0.25, 0.5]), vec![1, 1, 2]);
        assert_eq!(repeats(&[1.0]), vec![1]);
        assert_eq!(repeats(&[1.0 / 3.0, 2.0 / 3.0]), vec![1, 2]);
    }

    #[test]
    fn a_route_pins_the_paths_through_its_spines_in_its_shares() {
        // FORESIGHT's testbed: racks of 8 under 4 spines; hosts 0 and 8 are
        // in different racks, so one path a spine.
        let t = foresight(4);
        let net = LogicalNetwork::of(&t).expect("leaf-spine");
        let by_spine = net.paths_by_spine(&t, 0, 8);
        let at = |s: usize| by_spine[s].expect("a path through every spine");
        let mut memo = SpinePaths::default();
        let route = |spines: Vec<(usize, f64)>| Route { planned: 0, flow: 3, ends: (0, 8), spines: spines.into() };
        assert_eq!(memo.of(&net, &t, &route(vec![(2, 1.0)])), vec![at(2)]);
        // A quarter on spine 1, three quarters on spine 3: 1 and 3 repeats.
        assert_eq!(memo.of(&net, &t, &route(vec![(1, 0.25), (3, 0.75)])), vec![at(1), at(3), at(3), at(3)]);
        // Remembered: asked again, the same.
        assert_eq!(memo.by_pair.len(), 1);
        assert_eq!(memo.of(&net, &t, &route(vec![(2, 1.0)])), vec![at(2)]);
        // A spine the fabric does not have is left out.
        assert_eq!(memo.of(&net, &t, &route(vec![(9, 1.0)])), Vec::<usize>::new());
    }
}
