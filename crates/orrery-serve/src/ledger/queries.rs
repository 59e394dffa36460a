//! What the service's readers see of the ledger: a job's and the nodes'
//! state for the API (`GET /v1/jobs/ID`, `/v1/nodes`), a node's assignments
//! for its agent's long-poll, and the job counts for the metrics.

use super::Ledger;
use crate::api::{Assignment, Assignments, JobInfo, JobStatus, NodeInfo};
use orrery_model::HostId;
use orrery_policy::JobId;
use std::collections::BTreeMap;

impl Ledger {
    /// `GET /v1/jobs/{id}`.
    pub fn job_info(&self, id: JobId) -> Option<JobInfo> {
        let j = self.jobs.get(id)?;
        Some(JobInfo {
            id,
            status: j.status,
            spec: j.spec.clone(),
            submitted_s: j.submitted_s,
            started_s: j.started_s,
            ended_s: j.ended_s,
            hosts: j.hosts.iter().map(|&(h, g)| (self.topology.hosts[h].name.clone(), g)).collect(),
            epoch: j.epoch,
            iterations_done: j.iterations_done,
            target_iterations: j.target_iterations,
            period_ms: if j.status.is_active() { j.measured.or_model(j.period_ms) } else { 0.0 },
            mean_iteration_ms: (j.iter_count > 0).then(|| j.iter_sum_ms / j.iter_count as f64),
            preemptions: j.preemptions,
            reason: j.reason.clone(),
            in_force: j.in_force.clone(),
        })
    }

    /// `GET /v1/nodes`.
    pub fn node_infos(&self, now_s: f64) -> Vec<NodeInfo> {
        let mut jobs_on: Vec<Vec<JobId>> = vec![Vec::new(); self.nodes.len()];
        for (id, j) in self.jobs.iter().filter(|(_, j)| j.status.is_active()) {
            for &(h, _) in &j.hosts {
                if !jobs_on[h].contains(&id) {
                    jobs_on[h].push(id);
                }
            }
        }
        self.nodes
            .iter()
            .enumerate()
            .zip(jobs_on)
            .map(|((h, n), jobs)| NodeInfo {
                host: h,
                name: self.topology.hosts[h].name.clone(),
                topology_gpus: self.topology.hosts[h].gpus,
                gpus: n.capacity,
                free_gpus: self.free[h],
                nic_gbps: self.topology.host_nic_gbps(h),
                up: n.up,
                silent_s: n.up.then(|| (now_s - n.last_seen_s).max(0.0)),
                jobs,
            })
            .collect()
    }

    /// Version of a node's assignments (log sequence of the last change).
    pub fn node_version(&self, host: HostId) -> u64 {
        self.nodes.get(host).map_or(0, |n| n.version)
    }

    /// What the agent of `host` must run. O(jobs).
    pub fn assignments(&self, host: HostId) -> Assignments {
        let jobs = self
            .jobs_on(host)
            .into_iter()
            .map(|id| {
                let j = &self.jobs[id];
                Assignment {
                    job: id,
                    name: j.spec.id.clone(),
                    epoch: j.epoch,
                    status: j.status,
                    gpus: j.hosts.iter().filter(|h| h.0 == host).map(|h| h.1).sum(),
                    ranks: (0..j.workers.len() as u32).filter(|&w| j.workers[w as usize] == host).collect(),
                    workers: j.workers.iter().map(|&h| self.topology.hosts[h].name.clone()).collect(),
                    worker_addrs: j.workers.iter().map(|&h| self.nodes.get(h).and_then(|n| n.data_addr)).collect(),
                    shape: j.shape.clone(),
                    period_ms: j.measured.or_model(j.period_ms),
                    compute_ms: j.compute_ms,
                    iterations_done: j.iterations_done,
                    target_iterations: j.target_iterations,
                    in_force: j.in_force.clone(),
                    waiting_on: self.waiting_on(id),
                }
            })
            .collect();
        Assignments { version: self.node_version(host), session: self.last_session(host), jobs }
    }

    /// Jobs by status.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut out: BTreeMap<String, usize> = JobStatus::ALL.iter().map(|s| (s.name().to_string(), 0)).collect();
        for (_, j) in self.jobs.iter() {
            *out.entry(j.status.name().to_string()).or_default() += 1;
        }
        out
    }
}
