//! The jobs the ledger holds, by id. A job that ended is held until it
//! expires (`orrery serve --keep-finished`, as Slurm's `MinJobAge` and
//! Kubernetes' `ttlSecondsAfterFinished`), then forgotten with its rows and
//! log entries, so the service's memory and its store stay bounded by the
//! jobs of the last few minutes, not by every job it ever ran. Ids are never
//! reused: [`HeldJobs::next_id`] only grows.

use super::LiveJob;
use orrery_policy::JobId;
use std::collections::BTreeMap;

/// Held jobs in id order (a B-tree: iteration in id order keeps the
/// policy's view deterministic; lookups O(log held)). Each job is boxed:
/// a B-tree's nodes are often half empty, and a job inline is several
/// hundred bytes.
#[derive(Debug, Clone, Default)]
pub struct HeldJobs {
    by_id: BTreeMap<JobId, Box<LiveJob>>,
    next_id: JobId,
}

impl HeldJobs {
    /// The id the next accepted job gets.
    pub fn next_id(&self) -> JobId {
        self.next_id
    }

    /// Jobs held now (every id below [`Self::next_id`] that has not expired).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no job is held.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The job `id`, if held. O(log held).
    pub fn get(&self, id: JobId) -> Option<&LiveJob> {
        self.by_id.get(&id).map(|j| &**j)
    }

    /// The job `id`, if held. O(log held).
    pub fn get_mut(&mut self, id: JobId) -> Option<&mut LiveJob> {
        self.by_id.get_mut(&id).map(|j| &mut **j)
    }

    /// Held jobs in id order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (JobId, &LiveJob)> {
        self.by_id.iter().map(|(&id, j)| (id, &**j))
    }

    /// Held jobs with ids from `from`, in id order. O(log held + taken).
    pub fn from_id(&self, from: JobId) -> impl Iterator<Item = (JobId, &LiveJob)> {
        self.by_id.range(from..).map(|(&id, j)| (id, &**j))
    }

    /// Holds `job` as `id`; the next id is past it.
    pub(super) fn insert(&mut self, id: JobId, job: LiveJob) {
        self.next_id = self.next_id.max(id + 1);
        self.by_id.insert(id, Box::new(job));
    }

    /// Forgets `id`.
    pub(super) fn remove(&mut self, id: JobId) -> Option<LiveJob> {
        self.by_id.remove(&id).map(|j| *j)
    }

    /// Ids up to `next_id` are taken (an expiry names the next id, so ids
    /// of forgotten jobs stay taken after a restart).
    pub(super) fn reserve_to(&mut self, next_id: JobId) {
        self.next_id = self.next_id.max(next_id);
    }
}

impl std::ops::Index<JobId> for HeldJobs {
    type Output = LiveJob;

    /// Panics if `id` is not held: callers index only ids they found held.
    fn index(&self, id: JobId) -> &LiveJob {
        &self.by_id[&id]
    }
}

impl std::ops::IndexMut<JobId> for HeldJobs {
    fn index_mut(&mut self, id: JobId) -> &mut LiveJob {
        self.by_id.get_mut(&id).expect("a held job")
    }
}

/// What one expiry forgets ([`super::Ledger::expiry`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Expiry {
    /// Jobs that ended at or before the cut-off, in id order.
    pub jobs: Vec<JobId>,
    /// Log entries to delete with them: theirs, and the `Expired` entries
    /// as old as the cut-off.
    pub log_seqs: Vec<u64>,
    /// Those `Expired` entries.
    pub superseded: Vec<u64>,
}

impl super::Ledger {
    /// At most `limit` of the jobs that ended (finished, cancelled,
    /// rejected) at or before `cutoff_s`, lowest numbers first, and the log
    /// entries that go with them; None if there are none. O(held).
    pub fn expiry(&self, cutoff_s: f64, limit: usize) -> Option<Expiry> {
        let jobs: Vec<JobId> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.status.is_over() && j.ended_s.is_some_and(|e| e <= cutoff_s))
            .map(|(id, _)| id)
            .take(limit)
            .collect();
        if jobs.is_empty() {
            return None;
        }
        let superseded: Vec<u64> =
            self.expiries.iter().filter(|&&(_, at_s)| at_s <= cutoff_s).map(|&(seq, _)| seq).collect();
        let mut log_seqs: Vec<u64> = jobs.iter().flat_map(|&id| self.jobs[id].log_seqs.iter().copied()).collect();
        log_seqs.extend(&superseded);
        log_seqs.sort_unstable();
        Some(Expiry { jobs, log_seqs, superseded })
    }

    /// Applies an `Expired` entry: forgets each named job that is held and
    /// over, and the `Expired` entries it supersedes; refused if a named
    /// job is held and not over. O(named · log held + expiries).
    pub(super) fn expire(&mut self, jobs: &[JobId], next_job: JobId, superseded: &[u64]) -> bool {
        if jobs.iter().any(|&id| self.jobs.get(id).is_some_and(|j| !j.status.is_over())) {
            return false;
        }
        for &id in jobs {
            if let Some(j) = self.jobs.remove(id) {
                let name = j.spec.qualified_id();
                if self.by_name.get(&name) == Some(&id) {
                    self.by_name.remove(&name);
                }
            }
        }
        self.jobs.reserve_to(next_job);
        self.expiries.retain(|(seq, _)| !superseded.contains(seq));
        true
    }
}
