//! Values a policy derives from a running job's placement, kept between
//! rounds. A round reads every running job's links or traffic (the loaded
//! links of the bids, the duty cycles sizes are judged beside), and the
//! job's placement, shape and paths cost O(shape + transfers × path) to
//! rebuild; at 4,096 hosts that was a third of a simulation's time. A
//! job's value depends on its spec, which does not change, and its hosts,
//! so it is rebuilt when the hosts change; a value that also depends on
//! something measured (FORESIGHT's profiles on the job's measured
//! stretch) says so through [`PerPlacement::get_if`].

use crate::{JobId, RunningJob};
use orrery_model::HostId;
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
    /// Per job: the hosts the value was derived on, the driver's serial of
    /// that placement (0: not given) and the value.
    values: ByJob<(KeptHosts, u64, T)>,
}

impl<T> Default for PerPlacement<T> {
    fn default() -> Self {
        PerPlacement { values: ByJob::default() }
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
        self.kept_or_made(job, 0, hosts, fresh, make)
    }

    /// The value of running job `r` on its hosts ([`Self::get`]), known
    /// kept by the driver's serial of its placement while the driver gives
    /// one: O(1) then, where comparing the hosts reads them, a cache miss
    /// a job in a round that reads every running job's value.
    pub fn of(&mut self, r: &RunningJob<'_>, make: impl FnOnce() -> T) -> &T {
        self.kept_or_made(r.id, r.placement, r.hosts, |_| true, make)
    }

    /// The value kept for `job` if it was derived on the placement with
    /// serial `placement` (not 0) or on `hosts`, and `fresh` accepts it;
    /// else `make`'s. O(1) by the serial, O(hosts) by the hosts.
    fn kept_or_made(
        &mut self,
        job: JobId,
        placement: u64,
        hosts: &[(HostId, u32)],
        fresh: impl FnOnce(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> &T {
        let kept = match self.values.get_mut(job) {
            Some((on, serial, value)) => {
                let same = (placement != 0 && *serial == placement) || on.as_slice() == hosts;
                if same {
                    *serial = placement;
                }
                same && fresh(value)
            }
            None => false,
        };
        if !kept {
            self.values.insert(job, (KeptHosts::from_slice(hosts), placement, make()));
        }
        &self.values.get(job).expect("kept or just made").2
    }

    /// Forgets the jobs not in `live` once the others outnumber them
    /// (`running` is how many run): amortised O(1) per job.
    pub fn forget_unless(&mut self, running: usize, live: impl FnOnce() -> HashSet<JobId>) {
        if self.values.len() > 2 * running + 64 {
            let live = live();
            self.values.retain(|j, _| live.contains(&j));
        }
    }
}

/// Per job, a value, in a vector indexed by the job's id. Drivers number
/// jobs from 0 upward (the simulator by trace position, the live service
/// by its ledger), and a round reads the running jobs' values in the
/// view's order, by ascending id in the simulator: the reads then walk
/// the vector forward, which the hardware prefetches, where a hash map's
/// were a cache miss a job. O(1) a lookup; memory O(largest id) slots
/// below [`ByJob::DENSE`], a hash map's above it.
#[derive(Debug, Clone)]
pub struct ByJob<T> {
    dense: Vec<Option<T>>,
    sparse: FastMap<JobId, T>,
    /// Values kept in `dense`.
    in_dense: usize,
}

impl<T> Default for ByJob<T> {
    fn default() -> Self {
        ByJob { dense: Vec::new(), sparse: FastMap::default(), in_dense: 0 }
    }
}

impl<T> ByJob<T> {
    /// Ids from here on are kept in a hash map: 4 Mi slots is as far as
    /// the vector is worth growing.
    pub const DENSE: JobId = 1 << 22;

    /// The value of `job`, if kept. O(1).
    pub fn get(&self, job: JobId) -> Option<&T> {
        if job < Self::DENSE { self.dense.get(job).and_then(Option::as_ref) } else { self.sparse.get(&job) }
    }

    /// The value of `job`, if kept, to change. O(1).
    pub fn get_mut(&mut self, job: JobId) -> Option<&mut T> {
        if job < Self::DENSE { self.dense.get_mut(job).and_then(Option::as_mut) } else { self.sparse.get_mut(&job) }
    }

    /// Keeps `value` for `job`, returning the value it replaces. O(1)
    /// amortised.
    pub fn insert(&mut self, job: JobId, value: T) -> Option<T> {
        if job >= Self::DENSE {
            return self.sparse.insert(job, value);
        }
        if job >= self.dense.len() {
            self.dense.resize_with(job + 1, || None);
        }
        let old = self.dense[job].replace(value);
        self.in_dense += usize::from(old.is_none());
        old
    }

    /// The value of `job`, made by `make` when none is kept. O(1) amortised.
    pub fn get_or_insert_with(&mut self, job: JobId, make: impl FnOnce() -> T) -> &mut T {
        if self.get(job).is_none() {
            self.insert(job, make());
        }
        self.get_mut(job).expect("kept or just made")
    }

    /// Values kept. O(1).
    pub fn len(&self) -> usize {
        self.in_dense + self.sparse.len()
    }

    /// Whether none is kept. O(1).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the values `keep` accepts. O(largest id + values).
    pub fn retain(&mut self, mut keep: impl FnMut(JobId, &mut T) -> bool) {
        for (job, slot) in self.dense.iter_mut().enumerate() {
            if slot.as_mut().is_some_and(|v| !keep(job, v)) {
                *slot = None;
                self.in_dense -= 1;
            }
        }
        self.sparse.retain(|&job, v| keep(job, v));
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

    #[test]
    fn a_running_jobs_value_is_kept_by_its_placement_serial_while_the_driver_gives_one() {
        let spec = orrery_model::JobSpec::new("j", "resnet50", 32, 4, orrery_model::Work::Seconds(1.0), 0.0);
        let (one, two) = ([(0usize, 4u32)], [(1usize, 4u32)]);
        let at = |hosts, placement| RunningJob { placement, ..RunningJob::new(7, &spec, hosts) };
        let mut m: PerPlacement<usize> = PerPlacement::default();
        let mut built = 0;
        let mut of = |m: &mut PerPlacement<usize>, r: &RunningJob<'_>| {
            *m.of(r, || {
                built += 1;
                r.hosts[0].0
            })
        };
        assert_eq!(of(&mut m, &at(&one, 3)), 0);
        // The same serial: kept without reading the hosts (a serial names
        // one placement, so its hosts cannot differ; here they do, to show
        // that they are not read).
        assert_eq!(of(&mut m, &at(&two, 3)), 0);
        // A new serial on the same hosts (placed again there): kept.
        assert_eq!(of(&mut m, &at(&one, 4)), 0);
        // A new serial elsewhere: made again.
        assert_eq!(of(&mut m, &at(&two, 5)), 1);
        // No serial (0): the hosts decide.
        assert_eq!(of(&mut m, &at(&two, 0)), 1);
        assert_eq!(of(&mut m, &at(&one, 0)), 0);
        assert_eq!(built, 3);
    }

    #[test]
    fn values_by_job_count_and_forget_alike_below_and_above_the_dense_range() {
        let mut m: ByJob<u32> = ByJob::default();
        let far = ByJob::<u32>::DENSE + 7;
        assert!(m.is_empty());
        assert_eq!(m.insert(5, 50), None);
        assert_eq!(m.insert(far, 70), None);
        assert_eq!(m.insert(5, 51), Some(50)); // replaced, not counted twice
        assert_eq!(m.len(), 2);
        assert_eq!(*m.get_or_insert_with(2, || 20), 20);
        assert_eq!(*m.get_or_insert_with(2, || 99), 20); // kept: not made again
        assert_eq!((m.get(5), m.get(far), m.get(3), m.get(far + 1)), (Some(&51), Some(&70), None, None));
        *m.get_mut(far).expect("kept above") += 1;
        assert_eq!(m.get(far), Some(&71));
        // Only the dense range's length grew, to the largest dense id.
        assert_eq!(m.dense.len(), 6);
        m.retain(|job, v| {
            *v += 1;
            job != 5
        });
        assert_eq!((m.len(), m.get(5), m.get(2), m.get(far)), (2, None, Some(&21), Some(&72)));
    }
}
