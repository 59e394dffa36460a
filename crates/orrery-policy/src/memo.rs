//! Values a policy derives from a running job's placement, kept between
//! rounds. A round reads every running job's links or traffic (the loaded
//! links of the bids, the duty cycles sizes are judged beside), and the
//! job's placement, shape and paths cost O(shape + transfers × path) to
//! rebuild; at 4,096 hosts that was a third of a simulation's time. A
//! job's value depends on its spec, which does not change, and its hosts,
//! so it is rebuilt when the hosts change; a value that also depends on
//! something measured (FORESIGHT's profiles on the job's measured
//! stretch) says so through [`PerPlacement::get_if`].

use crate::JobId;
use orrery_model::HostId;
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

/// A hash map for the hot paths keyed by small integers (jobs, links):
/// foldhash instead of SipHash (`orrery`'s rounds at 16,384 hosts look up
/// every running job's kept values, and SipHash showed in their profile).
/// Iteration order carries no meaning, as with `HashMap`.
pub type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// The set of [`FastMap`].
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The hosts a value was derived on, inline for a job on one or two
/// hosts: each round compares every running job's hosts with the kept
/// ones, and a kept `Vec` cost a cache miss per job (8% of an `orrery`
/// simulation at 16,384 hosts was those comparisons).
type KeptHosts = smallvec::SmallVec<[(HostId, u32); 2]>;

/// Per job, a value and the hosts it was derived on.
#[derive(Debug, Clone)]
pub struct PerPlacement<T> {
    values: FastMap<JobId, (KeptHosts, T)>,
}

impl<T> Default for PerPlacement<T> {
    fn default() -> Self {
        PerPlacement { values: FastMap::default() }
    }
}

impl<T> PerPlacement<T> {
    /// The value of `job` on `hosts`, derived by `make` when it has none
    /// on these hosts. O(hosts) when kept.
    pub fn get(&mut self, job: JobId, hosts: &[(HostId, u32)], make: impl FnOnce() -> T) -> &T {
        self.get_if(job, hosts, |_| true, make)
    }

    /// [`Self::get`] with one more condition on the kept value: it is
    /// rebuilt when `fresh` rejects it (say, a measured stretch it was
    /// derived with has changed). O(hosts) when kept.
    pub fn get_if(
        &mut self,
        job: JobId,
        hosts: &[(HostId, u32)],
        fresh: impl FnOnce(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> &T {
        // One lookup: every running job is read once a round.
        match self.values.entry(job) {
            Entry::Occupied(kept) if kept.get().0.as_slice() == hosts && fresh(&kept.get().1) => &kept.into_mut().1,
            Entry::Occupied(mut stale) => {
                stale.insert((KeptHosts::from_slice(hosts), make()));
                &stale.into_mut().1
            }
            Entry::Vacant(new) => &new.insert((KeptHosts::from_slice(hosts), make())).1,
        }
    }

    /// Forgets the jobs not in `live` once the others outnumber them
    /// (`running` is how many run): amortised O(1) per job.
    pub fn forget_unless(&mut self, running: usize, live: impl FnOnce() -> HashSet<JobId>) {
        if self.values.len() > 2 * running + 64 {
            let live = live();
            self.values.retain(|j, _| live.contains(j));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_rebuilt_only_when_the_hosts_change_and_left_jobs_are_forgotten() {
        let mut m: PerPlacement<u32> = PerPlacement::default();
        let mut built = 0;
        let mut get = |m: &mut PerPlacement<u32>, job: JobId, hosts: &[(HostId, u32)]| {
            *m.get(job, hosts, || {
                built += 1;
                hosts.iter().map(|h| h.1).sum()
            })
        };
        assert_eq!(get(&mut m, 1, &[(0, 2)]), 2);
        assert_eq!(get(&mut m, 1, &[(0, 2)]), 2);
        assert_eq!(get(&mut m, 1, &[(0, 2), (3, 2)]), 4); // resized: rebuilt
        for job in 2..100 {
            get(&mut m, job, &[(job, 1)]);
        }
        assert_eq!(built, 100); // job 1 twice, jobs 2-99 once
        // 99 kept for 1 running job: more than 2 · 1 + 64, so the rest go.
        m.forget_unless(1, || HashSet::from([1]));
        assert_eq!(m.values.len(), 1);
        m.forget_unless(1, HashSet::new); // 1 ≤ 66: kept
        assert_eq!(m.values.len(), 1);
    }
}
