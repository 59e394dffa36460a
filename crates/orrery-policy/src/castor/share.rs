//! What makes a `Decision::Share` valid, for both drivers (the simulator's
//! engine and the live ledger): Castor's rules that a GPU holds at most two
//! jobs and that the pair fits the GPU's memory (§3.2, §8).

use crate::JobId;
use orrery_model::{HostId, JobSpec, Topology};
use std::collections::BTreeMap;

/// What a driver knows of the running jobs a newcomer would share with.
pub trait Partners {
    /// Whether `job` is running (not queued, paused or over).
    fn is_running(&self, job: JobId) -> bool;
    /// GPUs `job` holds alone on `host`.
    fn solo_on(&self, job: JobId, host: HostId) -> u32;
    /// `job`'s spec and the per-GPU sub-batch it runs at.
    fn spec_and_sub_batch(&self, job: JobId) -> Option<(&JobSpec, u32)>;
}

/// A valid share: the newcomer's sub-batch, its GPUs per host (free plus
/// shared), and the GPUs taken from each (partner, host).
#[derive(Debug, Clone, PartialEq)]
pub struct Share {
    /// Per-GPU sub-batch (the job's batch when 0 was asked).
    pub sub_batch: u32,
    /// GPUs per host, in host order: the placement to check and take.
    pub hosts: Vec<(HostId, u32)>,
    /// GPUs taken from each partner on each host, in (partner, host) order.
    pub taken: BTreeMap<(JobId, HostId), u32>,
}

/// GPU memory on `host`, MiB (16 GiB when its GPU type is unknown).
pub fn gpu_memory_mib(topology: &Topology, host: HostId) -> f64 {
    topology.hosts.get(host).and_then(|h| orrery_model::gpu::gpu_type(&h.gpu_type)).map_or(16.0, |g| g.memory_gib)
        * 1024.0
}

/// Checks queued `job` (`spec`) sharing `shared` GPUs of running jobs plus
/// `free` GPUs at `sub_batch`: every partner runs and holds the GPUs alone
/// there (no GPU gets a third job), and each pair fits the GPU's memory
/// (`colocation::memory_mib` at both sub-batches). Whether the GPUs add up
/// to a placement is the driver's `Place` check. None when invalid.
/// O(P · S) for P (partner, host) pairs of S sharings each.
pub fn check(
    topology: &Topology,
    job: JobId,
    spec: &JobSpec,
    free: &[(HostId, u32)],
    shared: &[(JobId, HostId, u32)],
    sub_batch: u32,
    partners: &impl Partners,
) -> Option<Share> {
    let model = orrery_model::zoo::model(&spec.model)?;
    let batch = spec.batch.max(1);
    let sub = if sub_batch == 0 { batch } else { sub_batch };
    if sub > batch || shared.is_empty() {
        return None;
    }
    let mut taken: BTreeMap<(JobId, HostId), u32> = BTreeMap::new();
    for &(p, h, g) in shared {
        *taken.entry((p, h)).or_default() += g;
    }
    for (&(p, h), &g) in &taken {
        if p == job || g == 0 || !partners.is_running(p) || partners.solo_on(p, h) < g {
            return None;
        }
        let (pspec, psub) = partners.spec_and_sub_batch(p)?;
        let pm = orrery_model::zoo::model(&pspec.model)?;
        let need = orrery_model::colocation::memory_mib(model, sub) + orrery_model::colocation::memory_mib(pm, psub);
        if need > gpu_memory_mib(topology, h) {
            return None;
        }
    }
    let mut per_host: BTreeMap<HostId, u32> = BTreeMap::new();
    for (h, g) in free.iter().copied().chain(taken.iter().map(|(&(_, h), &g)| (h, g))) {
        *per_host.entry(h).or_default() += g;
    }
    Some(Share { sub_batch: sub, hosts: per_host.into_iter().collect(), taken })
}
