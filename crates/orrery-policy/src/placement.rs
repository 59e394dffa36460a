//! Placements: which GPUs a job gets once the ordering says it goes next.
//! Combined with an [`crate::order`] by [`crate::compose::Composed`].

use crate::baseline::{FreeIndex, consolidated, place_pods, random_hosts};
use crate::{ClusterView, JobId};
use orrery_model::placed::{Placed, place, transfers};
use orrery_model::{HostId, JobSpec, Segment};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// GPUs per host, in placement order.
pub type Hosts = Vec<(HostId, u32)>;

/// A placement rule.
pub trait Placement {
    /// Short name (`consolidated`, `random`, ...).
    fn name(&self) -> &'static str;

    /// Called once per scheduling round; `leaving` are running jobs the round
    /// preempts (their resources count as free).
    fn prepare(&mut self, _view: &ClusterView<'_>, _leaving: &[JobId]) {}

    /// GPUs for `spec` from `free`, or None when it does not fit now.
    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts>;

    /// Records that `spec` was placed on `hosts` in this round.
    fn commit(&mut self, _view: &ClusterView<'_>, _spec: &JobSpec, _hosts: &[(HostId, u32)]) {}

    /// Why `spec` could not be placed even on an empty cluster, for a rule
    /// that confines a gang (one domain of a level): such a job would wait
    /// forever, and under a blocking order hold every job behind it. None
    /// when an empty cluster would hold it (the default).
    fn never_fits(&self, _view: &ClusterView<'_>, _rack_of: &[usize], _spec: &JobSpec) -> Option<String> {
        None
    }
}

/// Free GPUs the job may use on each host (see [`JobSpec::host_cap`]):
/// `free` itself for most jobs, which take any GPUs a host has (deriving
/// the job's unit once per host and copying was 3.7% and 2% of a
/// 16,384-host simulation), else a capped copy. O(1) or O(H).
pub fn capped<'f>(free: &'f [u32], spec: &JobSpec) -> std::borrow::Cow<'f, [u32]> {
    if !spec.anti_affinity && spec.host_unit() == 1 {
        return std::borrow::Cow::Borrowed(free);
    }
    std::borrow::Cow::Owned(free.iter().map(|&f| spec.host_cap(f)).collect())
}

/// Consolidated first fit: one host if possible, else the fewest racks
/// ([`consolidated`]). The free GPUs are kept indexed ([`FreeIndex`]) and
/// brought in step with each call's by their differences: O(H) compares
/// and O(log H) per host that changed, then O(m log H) for the m hosts
/// taken, where the slice version sorts every host with free GPUs into
/// racks at each call (O(H log H), 4% of a 16,384-host simulation).
#[derive(Debug, Default)]
pub struct Consolidated {
    /// The index and the racks it was built on.
    index: Option<(Vec<usize>, FreeIndex)>,
}

impl Consolidated {
    /// The index of `free`, brought in step with it.
    fn index(&mut self, free: &[u32], rack_of: &[usize]) -> &FreeIndex {
        match &mut self.index {
            Some((racks, index)) if racks.as_slice() == rack_of && index.free().len() == free.len() => index.sync(free),
            kept => *kept = Some((rack_of.to_vec(), FreeIndex::new(free, rack_of))),
        }
        &self.index.as_ref().expect("just set").1
    }
}

impl Placement for Consolidated {
    fn name(&self) -> &'static str {
        "consolidated"
    }

    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        match capped(free, spec) {
            // A job capped per host (anti-affinity, a mesh's TP groups) is
            // placed on its own capped copy.
            std::borrow::Cow::Owned(capped) => consolidated(view, rack_of, &capped, spec.gpus()),
            std::borrow::Cow::Borrowed(free) => self.index(free, rack_of).consolidated(spec.gpus()),
        }
    }
}

/// GPUs from hosts drawn uniformly at random (seeded).
#[derive(Debug)]
pub struct Random {
    rng: ChaCha8Rng,
}

impl Random {
    /// With a seed.
    pub fn new(seed: u64) -> Self {
        Random { rng: ChaCha8Rng::seed_from_u64(seed) }
    }
}

impl Placement for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn place(&mut self, _: &ClusterView<'_>, _: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        random_hosts(&mut self.rng, &capped(free, spec), spec.gpus())
    }
}

/// kube-scheduler's default for GPU pods: pod by pod, Filter on free GPUs,
/// then NodeResourcesFit LeastAllocated (the node with the largest free share
/// of its GPUs after the pod); BalancedAllocation has one resource here and
/// adds nothing. Pods of a job therefore spread out.
#[derive(Debug, Default)]
pub struct Spread;

impl Placement for Spread {
    fn name(&self) -> &'static str {
        "spread"
    }

    fn place(&mut self, view: &ClusterView<'_>, _: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let t = view.topology;
        place_pods(view, spec, free, |n, _, scratch| {
            let cap = f64::from(t.hosts[n].gpus.max(1));
            100.0 * (f64::from(scratch[n]) - f64::from(spec.gpus_per_worker.max(1))) / cap
        })
    }
}

/// Diktyo's NetworkOverhead: pod by pod, the node with the lowest summed
/// latency to the job's pods already placed (its AppGroup dependencies),
/// LeastAllocated breaking ties.
#[derive(Debug, Default)]
pub struct Latency {
    latency: orrery_model::topology::Latencies,
}

impl Placement for Latency {
    fn name(&self) -> &'static str {
        "latency"
    }

    fn prepare(&mut self, view: &ClusterView<'_>, _: &[JobId]) {
        if self.latency.hosts() != view.topology.hosts.len() {
            self.latency = view.topology.latencies_us();
        }
    }

    fn place(&mut self, view: &ClusterView<'_>, _: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let (t, latency) = (view.topology, &self.latency);
        // NetworkOverhead counts the latency to the job's own pods and to
        // those of its AppGroup dependencies (`depends_on`, either way).
        let dependencies = view.dependency_hosts(spec);
        place_pods(view, spec, free, |n, chosen, scratch| {
            let overhead: f64 = chosen.iter().chain(&dependencies).map(|&c| latency.get(n, c)).sum();
            let least = f64::from(scratch[n]) / f64::from(t.hosts[n].gpus.max(1));
            -1000.0 * overhead + least
        })
    }
}

/// Exclusive bandwidth: a job that spans hosts reserves, on each host's NIC,
/// the mean rate its workers there send (bits per iteration over the
/// iteration time alone); a placement is taken only if every host it uses has
/// that much unreserved. Consolidated first fit first, then pod by pod over
/// the hosts with room; otherwise the job waits. Alone, a job's mean rate
/// never exceeds its NIC, so every job fits on an idle cluster.
#[derive(Debug, Default)]
pub struct ExclusiveBandwidth {
    /// Gbit/s reserved on each host's NIC.
    reserved: Vec<f64>,
}

/// Mean Gbit/s each host of a placed job sends to other hosts. O(flows).
pub fn host_demand_gbps(p: &Placed, hosts: usize) -> Vec<f64> {
    let mut bits = vec![0.0; hosts];
    for seg in &p.shape.segments {
        if let Segment::Comm { collective, payload_bytes, group, .. } = *seg {
            for (src, dst, b) in transfers(&p.workers, collective, payload_bytes, group) {
                if src != dst && src < hosts {
                    bits[src] += b;
                }
            }
        }
    }
    let period_s = p.shape.period_ms() / 1e3;
    bits.iter().map(|b| if period_s > 0.0 { b / period_s / 1e9 } else { 0.0 }).collect()
}

impl ExclusiveBandwidth {
    fn fits(&self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) -> bool {
        let Some(p) = place(view.topology, spec, hosts) else { return false };
        let demand = host_demand_gbps(&p, view.topology.hosts.len());
        hosts.iter().all(|&(h, _)| self.reserved[h] + demand[h] <= view.topology.host_nic_gbps(h) + 1e-9)
    }
}

impl Placement for ExclusiveBandwidth {
    fn name(&self) -> &'static str {
        "exclusive"
    }

    fn prepare(&mut self, view: &ClusterView<'_>, leaving: &[JobId]) {
        self.reserved = vec![0.0; view.topology.hosts.len()];
        for r in view.running.iter().filter(|r| !leaving.contains(&r.id)) {
            self.commit(view, r.spec, r.hosts);
        }
    }

    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        if let Some(c) =
            consolidated(view, rack_of, &capped(free, spec), spec.gpus()).filter(|c| self.fits(view, spec, c))
        {
            return Some(c);
        }
        let t = view.topology;
        let reserved = &self.reserved;
        let c = place_pods(view, spec, free, |n, chosen, scratch| {
            // Join the job's own hosts first (no NIC traffic), then the host
            // with the most unreserved bandwidth, then the most free GPUs.
            let joins = if chosen.contains(&n) { 1e6 } else { 0.0 };
            joins + 1e3 * (t.host_nic_gbps(n) - reserved[n]) + f64::from(scratch[n])
        })?;
        self.fits(view, spec, &c).then_some(c)
    }

    fn commit(&mut self, view: &ClusterView<'_>, spec: &JobSpec, hosts: &[(HostId, u32)]) {
        if let Some(p) = place(view.topology, spec, hosts) {
            for (h, d) in host_demand_gbps(&p, view.topology.hosts.len()).into_iter().enumerate() {
                self.reserved[h] += d;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunningJob;
    use orrery_model::Work;
    use orrery_model::setups::LeafSpine;

    #[test]
    fn diktyo_places_a_job_next_to_the_job_it_depends_on() {
        // Two racks of two single-GPU hosts; the loader runs on h3. The
        // trainer depends on it: its one pod goes to h2, in the loader's
        // rack, not to h0 where it would go with nothing to be near.
        let t = LeafSpine {
            racks: 2,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 1,
            gpu_type: "a100".into(),
            host_gbps: 50.0,
            uplink_gbps: 50.0,
        }
        .build("t")
        .expect("valid");
        let loader = JobSpec::new("loader", "resnet50", 32, 1, Work::Iterations(10), 0.0);
        let mut trainer = JobSpec::new("trainer", "resnet50", 32, 1, Work::Iterations(10), 0.0);
        let hosts = [(3usize, 1u32)];
        let place = |trainer: &JobSpec| {
            let view = ClusterView {
                now_s: 1.0,
                topology: &t,
                free_gpus: &[1, 1, 1, 0],
                queue: Vec::new(),
                running: vec![RunningJob::new(0, &loader, &hosts)],
            };
            let mut p = Latency::default();
            p.prepare(&view, &[]);
            p.place(&view, &[0, 0, 1, 1], view.free_gpus, trainer).expect("fits")
        };
        assert_eq!(place(&trainer), vec![(0, 1)]);
        trainer.depends_on = vec!["loader".into()];
        assert_eq!(place(&trainer), vec![(2, 1)]);
    }
}
