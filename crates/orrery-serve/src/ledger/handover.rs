//! At most one of each rank: a job's new placement starts only once the
//! ranks of its earlier ones have stopped.
//!
//! When a job leaves its hosts (preempted, its node down, restarted as a
//! whole, moved) the agents stop its ranks asynchronously: SIGTERM, up to
//! the agent's `GRACE` to checkpoint, SIGKILL. Its next placement
//! renumbers the ranks over new hosts, so without a barrier a new host can
//! start rank r while an old one still runs rank r (found by the history
//! checker, `tests/live/faults.rs`: "rank in two places"). As a
//! StatefulSet keeps at most one pod per ordinal, each host that ran an
//! earlier placement and is up holds a **handover** entry; the job's
//! assignments carry the hosts still stopping (`Assignment::waiting_on`)
//! and agents start nothing while it is non-empty. An entry ends when its
//! host's agent polls having applied the assignments that withdrew the job
//! (`after` ≥ the entry's log sequence) and names no stop of the job still
//! in flight, or when its node is marked down (its lease's fence, at
//! `FENCE_KILL` of the time-out, has stopped the ranks by then).
//!
//! The entries are derived from the log (a replica's replay sets the same
//! ones) and cleared by the agents' polls, which are not logged: a replica
//! that takes over holds moved jobs until each host's first poll to it.

use super::Ledger;
use orrery_model::HostId;
use orrery_policy::JobId;

/// A host that ran an earlier placement of a job and has not yet shown its
/// ranks there stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Handover {
    pub(super) host: HostId,
    /// Sequence of the log entry that withdrew the job from the host.
    pub(super) since_seq: u64,
}

impl Ledger {
    /// The job leaves its hosts with the entry being recorded: each up host
    /// holds a handover until it shows the ranks stopped. O(hosts of the job).
    pub(super) fn hand_over(&mut self, job: JobId) {
        let since_seq = self.next_seq;
        let Some(j) = self.jobs.get(job) else { return };
        let mut hosts: Vec<HostId> =
            j.hosts.iter().map(|h| h.0).filter(|&h| self.nodes.get(h).is_some_and(|n| n.up)).collect();
        hosts.sort_unstable();
        hosts.dedup();
        let j = &mut self.jobs[job];
        for host in hosts {
            match j.handovers.iter_mut().find(|o| o.host == host) {
                Some(o) => o.since_seq = since_seq,
                None => j.handovers.push(Handover { host, since_seq }),
            }
        }
        if !j.handovers.is_empty() {
            self.moving.insert(job);
        }
    }

    /// A job that ended never starts again: nothing to wait for. O(log jobs moving).
    pub(super) fn end_handovers(&mut self, job: JobId) {
        if let Some(j) = self.jobs.get_mut(job) {
            j.handovers.clear();
        }
        self.moving.remove(&job);
    }

    /// `node` is marked down: its ranks were stopped by their lease's fence.
    /// O(jobs moving).
    pub(super) fn node_handed_over(&mut self, node: HostId) {
        let moving: Vec<JobId> = self.moving.iter().copied().collect();
        for job in moving {
            self.drop_handovers(job, |o| o.host == node);
        }
    }

    /// An agent's poll: it has applied the assignments of version `applied`
    /// and still stops the ranks of the jobs in `stopping`. Ends the
    /// handovers it shows done; true if any ended (held assignments
    /// elsewhere may start). O(jobs moving · their hosts).
    pub fn ranks_stopped(&mut self, host: HostId, applied: u64, stopping: &[JobId]) -> bool {
        let moving: Vec<JobId> = self.moving.iter().copied().filter(|j| !stopping.contains(j)).collect();
        let mut ended = false;
        for job in moving {
            ended |= self.drop_handovers(job, |o| o.host == host && o.since_seq <= applied);
        }
        ended
    }

    fn drop_handovers(&mut self, job: JobId, done: impl Fn(&Handover) -> bool) -> bool {
        let Some(j) = self.jobs.get_mut(job) else {
            self.moving.remove(&job); // expired
            return false;
        };
        let before = j.handovers.len();
        j.handovers.retain(|o| !done(o));
        let ended = j.handovers.len() < before;
        if j.handovers.is_empty() {
            self.moving.remove(&job);
        }
        ended
    }

    /// Hosts still stopping an earlier placement of `job`, by name (its
    /// assignments are held while there are any). O(handovers).
    pub fn waiting_on(&self, job: JobId) -> Vec<String> {
        self.jobs
            .get(job)
            .map(|j| j.handovers.iter().map(|o| self.topology.hosts[o.host].name.clone()).collect())
            .unwrap_or_default()
    }

    /// Placed jobs whose assignments are held. O(jobs moving).
    pub fn awaiting_handover(&self) -> usize {
        self.moving.iter().filter(|&&job| self.jobs.get(job).is_some_and(|j| j.status.is_active())).count()
    }

    /// How many of `host`'s assignments are held. O(jobs moving · their hosts).
    pub fn held_on(&self, host: HostId) -> usize {
        self.moving
            .iter()
            .filter(|&&job| {
                self.jobs.get(job).is_some_and(|j| j.status.is_active() && j.hosts.iter().any(|h| h.0 == host))
            })
            .count()
    }
}
