//! Part `rails` (issues 66 and 67): placement on a rail-optimised fabric
//! ([`orrery_model::rails`]). A flow leaves its host on the NIC of its
//! destination GPU's rail (NCCL's PXN), so a job whose GPUs sit at other
//! indices on its hosts than its peers' sends some flows out of NICs that
//! belong to other jobs' GPUs, and meets their traffic there. Which GPUs
//! are free on a host is fixed by what runs on it: giving a job the same
//! indices everywhere helps only where the same indices are free
//! (`GpuAllocation::RailAligned`, which this part also asks the driver
//! for). The placement is the lever: among hosts that fit a partial
//! share, take the ones whose free GPUs put the fewest bits on NICs that
//! other jobs' cross-host flows already use.

use crate::ClusterView;
use crate::memo::FastSet;
use orrery_model::placed::{place, rank_paths, rank_transfers};
use orrery_model::rails::{GpuAllocation, choose_gpus, worker_gpus};
use orrery_model::{HostId, JobSpec, LinkId, Segment, Topology};

/// This round's GPUs and NICs: the jobs holding each GPU of each host (the
/// running jobs' GPUs as the driver reports them, and the ones predicted
/// for placements committed earlier in the round), and the NIC links
/// (host to rail switch and back) that these jobs' cross-host flows use.
/// Empty off a rail fabric.
#[derive(Debug, Default, Clone)]
pub struct Held {
    per_host: Vec<Vec<u8>>,
    nics: FastSet<LinkId>,
}

impl Held {
    /// The running jobs' GPUs and NIC links, but those of `leaving`; a
    /// job's NIC links from `nics_of` (which may keep them per placement,
    /// [`running_nics`] computes them). O(hosts · G + Σ the running jobs'
    /// held GPUs and NIC links).
    pub fn of<'v>(
        view: &'v ClusterView<'v>,
        leaving: &[crate::JobId],
        mut nics_of: impl FnMut(&crate::RunningJob<'v>) -> Vec<LinkId>,
    ) -> Held {
        let topo = view.topology;
        if !topo.rails {
            return Held::default();
        }
        let mut held =
            Held { per_host: topo.hosts.iter().map(|h| vec![0; h.gpus as usize]).collect(), nics: FastSet::default() };
        for r in view.running.iter().filter(|r| !leaving.contains(&r.id)) {
            for &(h, k) in r.held_gpus {
                if let Some(n) = held.per_host.get_mut(h).and_then(|g| g.get_mut(k as usize)) {
                    *n = n.saturating_add(1);
                }
            }
            if !r.paused {
                held.nics.extend(nics_of(r));
            }
        }
        held
    }

    /// Marks the GPUs and NIC links `spec` on `hosts` would take as held.
    /// O(hosts · G² + its flows).
    pub fn commit(&mut self, topo: &Topology, spec: &JobSpec, hosts: &[(HostId, u32)]) {
        if self.per_host.is_empty() {
            return;
        }
        let (sorted, chosen) = self.choose(hosts);
        for (&h, ks) in sorted.iter().zip(&chosen) {
            for &k in ks {
                if let Some(n) = self.per_host.get_mut(h).and_then(|g| g.get_mut(k as usize)) {
                    *n = n.saturating_add(1);
                }
            }
        }
        for (up, down, _) in nic_flows(topo, spec, hosts, (&sorted, &chosen)) {
            self.nics.extend([up, down]);
        }
    }

    /// The GPUs a rail-aligned driver gives `hosts` (GPUs per host): the
    /// hosts sorted and each one's choice.
    fn choose(&self, hosts: &[(HostId, u32)]) -> (Vec<HostId>, Vec<Vec<u32>>) {
        let mut need: Vec<(HostId, u32)> = Vec::new();
        for &(h, g) in hosts {
            match need.iter_mut().find(|x| x.0 == h) {
                Some(x) => x.1 += g,
                None => need.push((h, g)),
            }
        }
        need.sort_unstable();
        let empty: &[u8] = &[];
        let taken: Vec<&[u8]> = need.iter().map(|&(h, _)| self.per_host.get(h).map_or(empty, Vec::as_slice)).collect();
        let want: Vec<u32> = need.iter().map(|x| x.1).collect();
        (need.iter().map(|x| x.0).collect(), choose_gpus(GpuAllocation::RailAligned, &taken, &want))
    }

    /// Bits per iteration of `spec` on `hosts` that would cross a NIC
    /// (out of its host or into the other) that another job's cross-host
    /// flows already use. O(its cross-host flows + hosts · G²).
    pub fn foreign_bits(&self, topo: &Topology, spec: &JobSpec, hosts: &[(HostId, u32)]) -> f64 {
        if self.per_host.is_empty() {
            return 0.0;
        }
        let (sorted, chosen) = self.choose(hosts);
        nic_flows(topo, spec, hosts, (&sorted, &chosen))
            .into_iter()
            .filter(|(up, down, _)| self.nics.contains(up) || self.nics.contains(down))
            .map(|x| x.2)
            .sum()
    }

    /// `first`, a placement's hosts, with each host it fills only in part
    /// swapped for another of the same rack (a rail unit) whose free GPUs
    /// put fewer bits on NICs other jobs use ([`Held::foreign_bits`]), one
    /// host at a time, while that helps. `free` is already capped to what the job may take per host.
    /// O(partial hosts · hosts of the rack · the cost of [`Held::foreign_bits`]).
    pub fn align(
        &self,
        topo: &Topology,
        rack_of: &[usize],
        free: &[u32],
        spec: &JobSpec,
        first: Vec<(HostId, u32)>,
    ) -> Vec<(HostId, u32)> {
        if self.per_host.is_empty() || first.len() < 2 {
            return first;
        }
        let mut best = first;
        let mut cost = self.foreign_bits(topo, spec, &best);
        for i in 0..best.len() {
            if cost <= 0.0 {
                break;
            }
            let (h, g) = best[i];
            if topo.hosts.get(h).is_none_or(|x| g >= x.gpus) {
                continue; // a whole host: its GPUs are all the job's
            }
            let rack = rack_of.get(h).copied();
            let candidates: Vec<HostId> = (0..free.len())
                .filter(|&o| free[o] >= g && rack_of.get(o).copied() == rack && best.iter().all(|x| x.0 != o))
                .collect();
            for o in candidates {
                let mut trial = best.clone();
                trial[i].0 = o;
                let c = self.foreign_bits(topo, spec, &trial);
                if c < cost {
                    (best, cost) = (trial, c);
                }
            }
        }
        best
    }
}

/// The NIC links (out of a host and into the other) that a running job's
/// cross-host flows use, from the GPUs the driver reports it holds; none
/// for a job on one host. O(its flows).
pub fn running_nics(topo: &Topology, r: &crate::RunningJob<'_>) -> Vec<LinkId> {
    if r.hosts.iter().all(|h| h.0 == r.hosts[0].0) {
        return Vec::new();
    }
    let mut sorted: Vec<HostId> = r.held_gpus.iter().map(|x| x.0).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let chosen: Vec<Vec<u32>> = sorted
        .iter()
        .map(|&h| {
            let mut ks: Vec<u32> = r.held_gpus.iter().filter(|x| x.0 == h).map(|x| x.1).collect();
            ks.sort_unstable();
            ks
        })
        .collect();
    let mut out: Vec<LinkId> =
        nic_flows(topo, r.spec, r.hosts, (&sorted, &chosen)).into_iter().flat_map(|(up, down, _)| [up, down]).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The cross-host flows of `spec` on `hosts` whose GPUs per host are
/// `chosen` (hosts `sorted`): each one's NIC out of its host, its NIC into
/// the other, and its bits per iteration. O(flows of its cross-host
/// collectives).
fn nic_flows(
    topo: &Topology,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
    (sorted, chosen): (&[HostId], &[Vec<u32>]),
) -> Vec<(LinkId, LinkId, f64)> {
    let Some(placed) = place(topo, spec, hosts) else { return Vec::new() };
    let gpus = worker_gpus(&placed.workers, &placed.gpus, sorted, chosen);
    let mut out = Vec::new();
    for seg in &placed.shape.segments {
        let Segment::Comm { collective, payload_bytes, group, hosts: 2.., .. } = *seg else { continue };
        for (s, d, bits) in rank_transfers(placed.workers.len(), collective, payload_bytes, group) {
            let paths = rank_paths(topo, &placed.workers, &gpus, s, d);
            if let Some((&up, &down)) = paths.first().and_then(|p| p.first().zip(p.last())) {
                out.push((up, down, bits));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunningJob;
    use orrery_model::rails::RailLeafSpine;

    fn unit_of_four() -> Topology {
        RailLeafSpine::h100_unit(4, 100.0).build("rails").expect("valid")
    }

    /// Llama 3 8B at TP 4 × DP 2: a replica on half a host.
    fn tp4_dp2(id: &str) -> JobSpec {
        let mut j = JobSpec::new(id, "llama3-8b", 1, 8, orrery_model::Work::Iterations(10), 0.0);
        j.parallelism = Some(orrery_model::mesh::Mesh { tp: 4, dp: 2, microbatches: 2, ..Default::default() });
        j
    }

    #[test]
    fn a_half_host_share_goes_where_its_peers_gpus_are_on_the_same_rails() {
        // x holds GPUs 0-3 of hosts 0 and 1 (its DP ring between them);
        // y holds GPUs 4-7 of host 2 and 0-3 of host 3. Free: 4-7 on hosts
        // 0, 1 and 3, 0-3 on host 2.
        let t = unit_of_four();
        let (x, y) = (tp4_dp2("x"), tp4_dp2("y"));
        let (xh, yh) = ([(0usize, 4u32), (1, 4)], [(2usize, 4u32), (3, 4)]);
        let x_gpus: Vec<(HostId, u32)> = [0, 1].iter().flat_map(|&h| (0..4).map(move |k| (h, k))).collect();
        let y_gpus: Vec<(HostId, u32)> = (4..8).map(|k| (2, k)).chain((0..4).map(|k| (3, k))).collect();
        let running = vec![
            RunningJob { held_gpus: &x_gpus, ..RunningJob::new(0, &x, &xh) },
            RunningJob { held_gpus: &y_gpus, ..RunningJob::new(1, &y, &yh) },
        ];
        let free = [4u32, 4, 4, 4];
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: Vec::new(), running };
        let held = Held::of(&view, &[], |r| running_nics(&t, r));
        let z = tp4_dp2("z");
        // On hosts 0 (GPUs 4-7) and 2 (GPUs 0-3) z's ring crosses rails:
        // its flows to host 2 leave host 0 on NICs 0-3, which x's ring to
        // host 1 leaves on. Its flows to host 0 leave host 2 on NICs 4-7 and
        // arrive on host 0's NICs 4-7, which nobody sends on (y's flows
        // arrive at host 2 on those). Half its cross-host bits.
        let misaligned = held.foreign_bits(&t, &z, &[(0, 4), (2, 4)]);
        let placed = place(&t, &z, &[(0, 4), (2, 4)]).expect("placed");
        let all: f64 = placed
            .shape
            .segments
            .iter()
            .filter_map(|s| match *s {
                Segment::Comm { collective, payload_bytes, group, hosts: 2.., .. } => Some(
                    rank_transfers(8, collective, payload_bytes, group)
                        .iter()
                        .filter(|&&(a, b, _)| placed.workers[a] != placed.workers[b])
                        .map(|x| x.2)
                        .sum::<f64>(),
                ),
                _ => None,
            })
            .sum();
        assert!(all > 0.0 && (misaligned - all / 2.0).abs() < 1e-6 * all, "{misaligned} of {all}");
        // Hosts 0 and 1 (both 4-7 free): every flow on its own rail.
        assert_eq!(held.foreign_bits(&t, &z, &[(0, 4), (1, 4)]), 0.0);
        // First fit's hosts 0 and 2 are redone host by host: host 0 is
        // swapped for the first host of the unit that leaves no bit on a
        // loaded NIC, host 3 (with host 2 the ring crosses rails 0-3 and
        // 4-7, but on NICs nobody else sends on).
        let rack_of = crate::baseline::racks(&view);
        let redone = held.align(&t, rack_of, &free, &z, vec![(0, 4), (2, 4)]);
        assert_eq!(redone, [(3, 4), (2, 4)]);
        assert_eq!(held.foreign_bits(&t, &z, &redone), 0.0);
        // Placements committed earlier in the round count. With only a
        // one-host job on GPUs 4-7 of host 2, z fits GPUs 0-3 of hosts 0
        // and 2 and meets nobody; once x is committed on GPUs 0-3 of hosts
        // 0 and 1, z's half of host 0 is 4-7, and its flows to host 2 leave
        // on x's NICs 0-3.
        let mut eval = JobSpec::new("eval", "llama3-8b", 1, 4, orrery_model::Work::Iterations(10), 0.0);
        eval.parallelism = Some(orrery_model::mesh::Mesh { tp: 4, ..Default::default() });
        let (eh, e_gpus) = ([(2usize, 4u32)], [(2usize, 4u32), (2, 5), (2, 6), (2, 7)]);
        let running = vec![RunningJob { held_gpus: &e_gpus, ..RunningJob::new(2, &eval, &eh) }];
        let quiet = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: Vec::new(), running };
        let mut round = Held::of(&quiet, &[], |r| running_nics(&t, r));
        assert_eq!(round.foreign_bits(&t, &z, &[(0, 4), (2, 4)]), 0.0);
        round.commit(&t, &x, &xh);
        assert!((round.foreign_bits(&t, &z, &[(0, 4), (2, 4)]) - all / 2.0).abs() < 1e-6 * all);
    }
}
