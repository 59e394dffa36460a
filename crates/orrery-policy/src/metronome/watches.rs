//! The controller's watched jobs, indexed both ways: each paced job's
//! [`Watch`], and each reference's paced partners. The closed loop asks,
//! on every reported iteration, whether a job is some watch's reference:
//! O(1) here, where a scan of the watches was O(paced jobs) an iteration
//! (4% of a `metronome` run at 16,384 hosts).

use super::Watch;
use crate::JobId;
use crate::memo::FastMap;
use std::collections::BTreeSet;

/// Watches by job, with the reverse index by reference.
#[derive(Debug, Clone, Default)]
pub(super) struct Watches {
    by_job: FastMap<JobId, Watch>,
    /// Each reference's paced partners.
    partners: FastMap<JobId, BTreeSet<JobId>>,
}

impl Watches {
    pub(super) fn get(&self, job: &JobId) -> Option<&Watch> {
        self.by_job.get(job)
    }

    /// The watch may be changed but not its reference (it is private to
    /// this file's callers by convention: `insert` re-indexes).
    pub(super) fn get_mut(&mut self, job: &JobId) -> Option<&mut Watch> {
        self.by_job.get_mut(job)
    }

    pub(super) fn contains_key(&self, job: &JobId) -> bool {
        self.by_job.contains_key(job)
    }

    /// Watches `job` (replacing its watch, and its place among its old
    /// reference's partners).
    pub(super) fn insert(&mut self, job: JobId, watch: Watch) {
        let reference = watch.reference;
        self.unindex(job);
        self.by_job.insert(job, watch);
        self.partners.entry(reference).or_default().insert(job);
    }

    pub(super) fn remove(&mut self, job: &JobId) {
        self.unindex(*job);
        self.by_job.remove(job);
    }

    /// Keeps the watches of the jobs `keep` holds for. O(watches).
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&JobId) -> bool) {
        let gone: Vec<JobId> = self.by_job.keys().filter(|j| !keep(j)).copied().collect();
        for job in gone {
            self.remove(&job);
        }
    }

    /// Whether `job` is some watch's reference. O(1).
    pub(super) fn is_reference(&self, job: JobId) -> bool {
        self.partners.contains_key(&job)
    }

    /// The jobs paced against `reference`, in order.
    pub(super) fn partners_of(&self, reference: JobId) -> impl Iterator<Item = JobId> + '_ {
        self.partners.get(&reference).into_iter().flatten().copied()
    }

    fn unindex(&mut self, job: JobId) {
        let Some(old) = self.by_job.get(&job).map(|w| w.reference) else { return };
        if let Some(set) = self.partners.get_mut(&old) {
            set.remove(&job);
            if set.is_empty() {
                self.partners.remove(&old);
            }
        }
    }
}

impl std::ops::Index<&JobId> for Watches {
    type Output = Watch;

    fn index(&self, job: &JobId) -> &Watch {
        &self.by_job[job]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch(reference: JobId) -> Watch {
        Watch::new(100.0, 10.0, 100.0, 0.0, reference)
    }

    /// The reverse index answers as a scan of the watches would, through
    /// every way a watch comes and goes.
    #[test]
    fn partners_follow_every_insert_replace_remove_and_retain() {
        let mut w = Watches::default();
        let scan = |w: &Watches, r: JobId| -> Vec<JobId> {
            let mut v: Vec<JobId> = w.by_job.iter().filter(|(_, x)| x.reference == r).map(|(&k, _)| k).collect();
            v.sort_unstable();
            v
        };
        w.insert(3, watch(0));
        w.insert(1, watch(0));
        w.insert(2, watch(5));
        assert_eq!(w.partners_of(0).collect::<Vec<_>>(), vec![1, 3]);
        assert!(w.is_reference(0) && w.is_reference(5) && !w.is_reference(1));
        // Re-paced against another reference: it leaves the old one's list.
        w.insert(3, watch(5));
        assert_eq!(w.partners_of(0).collect::<Vec<_>>(), scan(&w, 0));
        assert_eq!(w.partners_of(5).collect::<Vec<_>>(), vec![2, 3]);
        w.remove(&1);
        assert!(!w.is_reference(0), "no partner left");
        w.retain(|&j| j != 2);
        assert_eq!(w.partners_of(5).collect::<Vec<_>>(), vec![3]);
        assert_eq!(w[&3].reference, 5);
        assert!(!w.contains_key(&2) && w.get(&2).is_none());
    }
}
