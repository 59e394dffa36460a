//! The agent's side of the service's handover (`ledger::handover`): at most
//! one process per rank of a job. The agent's polls name the jobs whose
//! processes of a withdrawn placement it is still stopping, a poll goes as
//! soon as such a stop ends, and an assignment that names hosts still
//! stopping the job's earlier ranks (`Assignment::waiting_on`) is not
//! started until a later answer names none.

use super::{Shared, State, Worker, stop_processes_within};
use crate::api::Assignment;
use orrery_policy::JobId;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

impl State {
    /// Takes the processes of `key` out to be stopped, the job counted as
    /// stopping until [`stop_and_tell`] ends. O(1).
    pub(super) fn take_to_stop(&mut self, key: (JobId, u64)) -> Option<Vec<Worker>> {
        let children = self.children.remove(&key)?;
        *self.stopping.entry(key.0).or_default() += 1;
        Some(children)
    }

    /// The jobs whose earlier ranks still run here, sorted: those being
    /// stopped, and any process of an epoch not assigned (none, if every
    /// withdrawal went through [`State::take_to_stop`]). O(jobs here).
    pub(super) fn stopping_jobs(&self) -> Vec<JobId> {
        let mut out: Vec<JobId> = self.stopping.keys().copied().collect();
        out.extend(
            self.children
                .keys()
                .filter(|(job, epoch)| self.jobs.get(job).is_none_or(|a| a.epoch != *epoch))
                .map(|k| k.0),
        );
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Takes the assignments not yet started here (new, or in a new epoch)
    /// that must wait out of `new`: those naming other hosts (or this one)
    /// still stopping the job's earlier ranks, and those whose processes
    /// here are still being stopped (a fence's, when the service kept the
    /// node and the job's epoch). The ones running stay. O(jobs).
    pub(super) fn hold_back_until_handed_over(&self, new: &mut HashMap<JobId, Assignment>) -> Held {
        let fresh = |id: &JobId, a: &Assignment| self.jobs.get(id).is_none_or(|old| old.epoch != a.epoch);
        let (mut waiting, mut here) = (Vec::new(), Vec::new());
        for (id, a) in new.iter() {
            if !fresh(id, a) {
                continue;
            }
            if !a.waiting_on.is_empty() {
                waiting.push(*id);
            } else if self.stopping.contains_key(id) {
                here.push(*id);
            }
        }
        let mut held = Held { waiting: waiting.iter().filter_map(|id| new.remove(id)).collect(), stopping_here: here };
        for id in &held.stopping_here {
            new.remove(id);
        }
        held.waiting.sort_by_key(|a| a.job);
        held.stopping_here.sort_unstable();
        held
    }
}

/// What [`State::hold_back_until_handed_over`] held.
#[derive(Debug, Default)]
pub(super) struct Held {
    /// Assignments waiting for hosts named in `waiting_on`.
    pub(super) waiting: Vec<Assignment>,
    /// Jobs whose processes here are still being stopped: the agent takes
    /// the whole state again once a stop ends.
    pub(super) stopping_here: Vec<JobId>,
}

/// Stops `children` (SIGKILL after `grace`), then counts their jobs no
/// longer stopping and cuts the assignments' long-poll short, so the
/// service hears it at once.
pub(super) async fn stop_and_tell(shared: Arc<Shared>, children: Vec<(JobId, Vec<Worker>)>, grace: Duration) {
    let (jobs, workers): (Vec<JobId>, Vec<Vec<Worker>>) = children.into_iter().unzip();
    stop_processes_within(workers.into_iter().flatten().collect(), grace).await;
    {
        let mut s = shared.lock();
        for job in jobs {
            if let Some(n) = s.stopping.get_mut(&job) {
                *n -= 1;
                if *n == 0 {
                    s.stopping.remove(&job);
                }
            }
        }
    }
    shared.stops.send_modify(|n| *n += 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, epoch: u64, waiting_on: &[&str]) -> Assignment {
        Assignment {
            epoch,
            waiting_on: waiting_on.iter().map(|h| h.to_string()).collect(),
            ..super::super::tests::assignment(id)
        }
    }

    #[test]
    fn a_placement_waiting_for_a_stop_is_not_started_and_a_running_one_stays() {
        // Job 1 runs here in epoch 1; job 2 ran here in epoch 1 and comes
        // back in epoch 3 while h1 still stops its ranks of epoch 1; job 3
        // is new and waits for no one.
        // Job 4 was fenced here and comes back on the same epoch while its
        // processes are still being stopped.
        let mut s = State { jobs: [(1, job(1, 1, &[])), (2, job(2, 1, &[]))].into(), ..State::default() };
        s.stopping.insert(4, 1);
        let mut new: HashMap<JobId, Assignment> =
            [(1, job(1, 1, &["h9"])), (2, job(2, 3, &["h1"])), (3, job(3, 1, &[])), (4, job(4, 1, &[]))].into();
        let held = s.hold_back_until_handed_over(&mut new);
        assert_eq!(held.waiting.iter().map(|a| (a.job, a.epoch)).collect::<Vec<_>>(), vec![(2, 3)]);
        assert_eq!(held.stopping_here, vec![4]);
        let mut kept: Vec<JobId> = new.keys().copied().collect();
        kept.sort_unstable();
        assert_eq!(kept, vec![1, 3]);
    }

    #[test]
    fn a_job_is_stopping_from_its_withdrawal_until_its_processes_are_gone() {
        let mut s = State { jobs: [(1, job(1, 2, &[]))].into(), ..State::default() };
        s.children.insert((1, 1), Vec::new()); // epoch 1's processes, not yet taken
        s.children.insert((1, 2), Vec::new());
        s.children.insert((4, 1), Vec::new());
        assert_eq!(s.stopping_jobs(), vec![1, 4], "processes of epochs not assigned");
        assert!(s.take_to_stop((4, 1)).is_some());
        assert!(s.take_to_stop((1, 1)).is_some());
        assert!(s.take_to_stop((1, 1)).is_none(), "taken once");
        assert_eq!(s.stopping_jobs(), vec![1, 4], "counted while their stops are in flight");
        assert_eq!(s.stopping.get(&1), Some(&1));
        assert!(!s.children.contains_key(&(1, 1)) && s.children.contains_key(&(1, 2)));
    }
}
