//! Baselines: FIFO with consolidated first-fit placement, random placement,
//! and "ideal" (FIFO placement, every job alone on the network).

use crate::{ClusterView, Decision, Policy, QueuedJob};
use orrery_model::HostId;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Rack of each host: the leaf switch it is cabled to (hosts without one are
/// their own rack). O(links).
pub fn racks(view: &ClusterView<'_>) -> Vec<usize> {
    let t = view.topology;
    (0..t.hosts.len()).map(|h| t.out_links(h).first().map_or(usize::MAX - h, |&l| t.links[l].to)).collect()
}

/// Consolidated first fit: the fewest racks, then the fewest hosts. Racks are
/// taken in order of most free GPUs; within a rack, hosts with the most free
/// GPUs first. None when the job does not fit. O(H log H).
pub fn consolidated(view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], gpus: u32) -> Option<Vec<(HostId, u32)>> {
    if free.iter().map(|&f| u64::from(f)).sum::<u64>() < u64::from(gpus) {
        return None;
    }
    // A single host that fits, the fullest first (best fit keeps big holes).
    if let Some(h) = (0..free.len()).filter(|&h| free[h] >= gpus).min_by_key(|&h| (free[h], h)) {
        return Some(vec![(h, gpus)]);
    }
    let mut by_rack: std::collections::BTreeMap<usize, Vec<HostId>> = std::collections::BTreeMap::new();
    for h in 0..view.topology.hosts.len() {
        if free[h] > 0 {
            by_rack.entry(rack_of[h]).or_default().push(h);
        }
    }
    let mut rack_list: Vec<(u32, usize, Vec<HostId>)> = by_rack
        .into_iter()
        .map(|(r, mut hs)| {
            hs.sort_by_key(|&h| (std::cmp::Reverse(free[h]), h));
            (hs.iter().map(|&h| free[h]).sum(), r, hs)
        })
        .collect();
    rack_list.sort_by_key(|(f, r, _)| (std::cmp::Reverse(*f), *r));
    let mut left = gpus;
    let mut out = Vec::new();
    for (_, _, hosts) in rack_list {
        for h in hosts {
            let take = free[h].min(left);
            out.push((h, take));
            left -= take;
            if left == 0 {
                return Some(out);
            }
        }
    }
    None
}

/// First-in first-out with consolidated first-fit placement; the head of the
/// queue blocks those behind it. Jobs larger than the cluster are rejected.
#[derive(Debug, Default)]
pub struct Fifo;

impl Policy for Fifo {
    fn name(&self) -> String {
        "fifo".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        fifo_with(view, |view, rack_of, free, job| consolidated(view, rack_of, free, job.spec.gpus()))
    }
}

fn fifo_with(
    view: &ClusterView<'_>,
    mut place: impl FnMut(&ClusterView<'_>, &[usize], &[u32], &QueuedJob<'_>) -> Option<Vec<(HostId, u32)>>,
) -> Vec<Decision> {
    let rack_of = racks(view);
    let mut free = view.free_gpus.to_vec();
    let total = view.topology.gpu_count();
    let mut out = Vec::new();
    for job in &view.queue {
        if job.spec.gpus() > total || job.spec.gpus() == 0 {
            out.push(Decision::Reject {
                job: job.id,
                reason: format!("needs {} GPUs; the cluster has {total}", job.spec.gpus()),
            });
            continue;
        }
        match place(view, &rack_of, &free, job) {
            Some(hosts) => {
                for &(h, g) in &hosts {
                    free[h] -= g;
                }
                out.push(Decision::Place { job: job.id, hosts });
            }
            None => break,
        }
    }
    out
}

/// FIFO order, GPUs taken from hosts chosen uniformly at random (seeded).
#[derive(Debug)]
pub struct RandomPlacement {
    rng: ChaCha8Rng,
}

impl RandomPlacement {
    /// With a seed.
    pub fn new(seed: u64) -> Self {
        RandomPlacement { rng: ChaCha8Rng::seed_from_u64(seed) }
    }
}

impl Policy for RandomPlacement {
    fn name(&self) -> String {
        "random".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let rng = &mut self.rng;
        fifo_with(view, |_, _, free, job| random_hosts(rng, free, job.spec.gpus()))
    }
}

/// `gpus` GPUs from hosts drawn uniformly at random among those with free
/// GPUs, a random number from each; None when they do not fit. O(H).
pub fn random_hosts(rng: &mut ChaCha8Rng, free: &[u32], gpus: u32) -> Option<Vec<(HostId, u32)>> {
    let mut left = gpus;
    if free.iter().map(|&f| u64::from(f)).sum::<u64>() < u64::from(left) {
        return None;
    }
    let mut hosts: Vec<HostId> = (0..free.len()).filter(|&h| free[h] > 0).collect();
    hosts.shuffle(rng);
    let mut out = Vec::new();
    for h in hosts {
        let take = rng.random_range(1..=free[h].min(left));
        out.push((h, take));
        left -= take;
        if left == 0 {
            break;
        }
    }
    // Top up from the chosen hosts if the random takes fell short.
    for (h, g) in out.iter_mut() {
        let more = (free[*h] - *g).min(left);
        *g += more;
        left -= more;
    }
    (left == 0).then_some(out)
}

/// FIFO placement, and the driver gives every job the network to itself.
#[derive(Debug, Default)]
pub struct Ideal;

impl Policy for Ideal {
    fn name(&self) -> String {
        "ideal".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        Fifo.schedule(view)
    }

    fn isolated_network(&self) -> bool {
        true
    }
}

/// A policy by name: `fifo`, `random`, `ideal`, or any of them `+cassini`.
pub fn by_name(name: &str, seed: u64) -> Option<Box<dyn Policy>> {
    if let Some(host) = name.strip_suffix("+cassini") {
        return by_name(host, seed)
            .map(|inner| Box::new(crate::cassini::Cassini::new(inner, seed ^ 0xCA55)) as Box<dyn Policy>);
    }
    match name {
        "fifo" => Some(Box::new(Fifo)),
        "random" => Some(Box::new(RandomPlacement::new(seed))),
        "ideal" => Some(Box::new(Ideal)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Work};

    fn view<'a>(t: &'a orrery_model::Topology, free: &'a [u32], jobs: &'a [JobSpec]) -> ClusterView<'a> {
        ClusterView {
            now_s: 0.0,
            topology: t,
            free_gpus: free,
            queue: jobs.iter().enumerate().map(|(id, spec)| QueuedJob { id, spec, waiting_s: 0.0 }).collect(),
            running: Vec::new(),
        }
    }

    fn job(workers: u32) -> JobSpec {
        JobSpec::new("j", "vgg16", 32, workers, Work::Iterations(10), 0.0)
    }

    #[test]
    fn fifo_consolidates_into_one_rack_and_blocks_at_the_head() {
        // 4 racks × 4 hosts × 8 GPUs.
        let t = LeafSpine::with_oversubscription(4, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let mut free = vec![8u32; 16];
        free[0] = 2; // rack 0 has 26 free, the others 32.
        let jobs = [job(20), job(200), job(1)];
        let d = Fifo.schedule(&view(&t, &free, &jobs));
        // The 20-GPU job fits in one rack (rack 1, hosts 4..8): 8 + 8 + 4.
        assert_eq!(d[0], Decision::Place { job: 0, hosts: vec![(4, 8), (5, 8), (6, 4)] });
        // The 200-GPU job can never fit: rejected, and the 1-GPU job behind it runs.
        assert!(matches!(d[1], Decision::Reject { job: 1, .. }));
        assert_eq!(d[2], Decision::Place { job: 2, hosts: vec![(0, 1)] });
        // Head-of-line blocking: a job that does not fit now stops the queue.
        let jobs = [job(124), job(1)];
        assert!(Fifo.schedule(&view(&t, &free, &jobs)).is_empty());
    }

    #[test]
    fn random_placement_is_seeded_and_gang() {
        let t = LeafSpine::with_oversubscription(2, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let free = vec![8u32; 8];
        let jobs = [job(12)];
        let a = RandomPlacement::new(3).schedule(&view(&t, &free, &jobs));
        let b = RandomPlacement::new(3).schedule(&view(&t, &free, &jobs));
        assert_eq!(a, b);
        let Decision::Place { hosts, .. } = &a[0] else { unreachable!("placed") };
        assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 12);
        assert!(hosts.iter().all(|&(h, g)| g <= free[h]));
    }
}
