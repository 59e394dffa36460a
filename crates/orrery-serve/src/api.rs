//! The JSON the service speaks: what `/v1` endpoints take and return, shared
//! by the server, the node agents and the CLI client so the two ends cannot
//! disagree.

use orrery_model::{HostId, JobSpec};
use orrery_policy::{Decision, JobId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Job numbers whose worker ports are distinct: 798 × 16 ports from 20000
/// end at 32767, below Linux's ephemeral range (32768–60999 by default), as
/// Kubernetes keeps its NodePorts (30000–32767) below it.
pub const WORKER_PORT_JOBS: u64 = 798;

/// The TCP port rank `rank` of job `job` listens on for its ring predecessor
/// on its host's data address: 20000 + 16·(job mod 798) + (rank mod 16).
/// Ranks on one host are consecutive in the ring, so they differ mod 16 while
/// a host has at most 16 workers of a job. The data-plane convention of
/// `orrery worker`; node agents match a job's traffic by it for throttles.
///
/// Below the ephemeral range, no outgoing connection of the host (an
/// agent's keep-alive to the service, etcd's clients) can hold the port a
/// rank must listen on; inside it, a rank fails with `Address already in
/// use` until that connection closes, minutes later. Two jobs on one host
/// whose numbers differ by a multiple of 798 still share ports.
pub fn worker_port(job: JobId, rank: u32) -> u16 {
    (20_000 + (job as u64 % WORKER_PORT_JOBS) * 16 + u64::from(rank % 16)) as u16
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    /// Waiting for GPUs.
    Queued,
    /// Holding GPUs.
    Running,
    /// Holding GPUs, stopped after an iteration until resumed.
    Paused,
    /// Ran all its iterations.
    Finished,
    /// Cancelled by a user.
    Cancelled,
    /// Refused for good by the policy.
    Rejected,
}

impl JobStatus {
    /// Every status, in the order reports list them.
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Paused,
        JobStatus::Finished,
        JobStatus::Cancelled,
        JobStatus::Rejected,
    ];

    /// The snake-case name.
    pub fn name(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Paused => "paused",
            JobStatus::Finished => "finished",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Rejected => "rejected",
        }
    }

    /// Whether the job holds GPUs.
    pub fn is_active(self) -> bool {
        matches!(self, JobStatus::Running | JobStatus::Paused)
    }

    /// Whether the job will never run again.
    pub fn is_over(self) -> bool {
        matches!(self, JobStatus::Finished | JobStatus::Cancelled | JobStatus::Rejected)
    }
}

/// A pending `Align`, applied once by every rank of the job at the same
/// iteration. Once the job has reported an iteration, the service names the
/// instant too: iteration `at_iteration` starts no earlier than `start_s`.
/// Ranks that wait for their iterations at different moments (a pipeline's
/// stages, up to a backward pass apart) would otherwise each round their own
/// moment up to the next aligned instant, and one could wait a whole period
/// more than another. Before any report there is nothing to predict the
/// start from, and each rank rounds its own moment (`start_s` None).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AlignSlot {
    /// The job's iteration time, ms.
    pub period_ms: f64,
    /// A time on the cluster clock (s) at which an iteration should begin.
    pub offset_s: f64,
    /// Increases with each `Align`, so an agent applies each one once.
    pub seq: u64,
    /// The iteration it applies to: the next one before any report, else
    /// two after the last reported (iteration `done + 1` is running), so
    /// every rank learns of it before reaching it.
    #[serde(default)]
    pub at_iteration: u64,
    /// The first instant `≡ offset_s (mod period_ms)` at or after that
    /// iteration's start as predicted from the job's reports, or the one
    /// just before within `slot::ALIGN_GRACE` of the period, cluster-clock
    /// s ([`orrery_policy::slot::aligned_start_s`]).
    #[serde(default)]
    pub start_s: Option<f64>,
}

/// A `Pace` in force (every iteration starts in its slot).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PaceSlot {
    /// Slot period, ms.
    pub period_ms: f64,
    /// A time on the cluster clock (s) at which a slot begins.
    pub offset_s: f64,
}

/// The timing and network decisions in force for a job: what its agent and
/// training process must apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InForce {
    /// Sum of every `Shift` since the job was placed, ms; an agent applies
    /// the part it has not applied yet before iteration
    /// `shift_at_iteration` or the first after it.
    pub shift_ms_total: f64,
    /// The iteration the last `Shift` applies to, chosen as an `Align`'s
    /// ([`AlignSlot::at_iteration`]): every rank waits it before the same
    /// iteration. A pipeline's stage that took it one iteration after
    /// another stage would add it twice, each stage held once by its own
    /// wait and once by the other's.
    #[serde(default)]
    pub shift_at_iteration: u64,
    /// The last `Align`, if any.
    pub align: Option<AlignSlot>,
    /// The `Pace` in force.
    pub pace: Option<PaceSlot>,
    /// The `Timetable` in force: iterations done at its first entry, and
    /// the earliest start of each listed iteration, cluster-clock s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timetable: Option<(u64, Vec<f64>)>,
    /// Paused after its current iteration.
    pub paused: bool,
    /// Cap on each of the job's flows, Gbit/s.
    pub throttle_gbps: Option<f64>,
    /// Spine routes by flow index (indices into the ECMP set); recorded for
    /// fabrics that can pin flows (the testbed).
    pub routes: BTreeMap<usize, Vec<usize>>,
    /// Switch queue of the job's flows (`Decision::TrafficClass`, strict
    /// priority, 0 the default); an agent shaping its device marks it on
    /// the job's packets as their IP precedence (`node_agent::mark_script`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub traffic_class: u8,
}

fn is_zero(c: &u8) -> bool {
    *c == 0
}

/// A job as `GET /v1/jobs/{id}` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobInfo {
    /// The service's id.
    pub id: JobId,
    /// Status.
    pub status: JobStatus,
    /// The specification (its `arrival_s` is when the service accepted it).
    pub spec: JobSpec,
    /// Cluster-clock seconds it was accepted.
    pub submitted_s: f64,
    /// When it first started.
    pub started_s: Option<f64>,
    /// When it finished, was cancelled or rejected.
    pub ended_s: Option<f64>,
    /// GPUs on each host (by name).
    pub hosts: Vec<(String, u32)>,
    /// Placement epoch: raised each time it is placed or loses its placement.
    pub epoch: u64,
    /// Iterations reported done.
    pub iterations_done: u64,
    /// Iterations it runs in all (0 until first placed).
    pub target_iterations: u64,
    /// Its iteration time on its placement, ms (0 when not placed): the
    /// measured one (a windowed median of its reported durations, slot
    /// delays left out; `orrery_policy::estimate`) once it has run three
    /// iterations there, the model's alone before.
    pub period_ms: f64,
    /// Mean reported iteration time on its current placement, ms.
    pub mean_iteration_ms: Option<f64>,
    /// Times it was preempted.
    pub preemptions: u32,
    /// Why it was rejected or preempted last.
    pub reason: Option<String>,
    /// Decisions in force.
    pub in_force: InForce,
}

/// A node as `GET /v1/nodes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Host index in the topology.
    pub host: HostId,
    /// Host name.
    pub name: String,
    /// GPUs the topology gives it.
    pub topology_gpus: u32,
    /// GPUs its agent registered (0 while no agent is up).
    pub gpus: u32,
    /// Free GPUs.
    pub free_gpus: u32,
    /// NIC rate in the topology, Gbit/s.
    pub nic_gbps: f64,
    /// Whether an agent is registered and heartbeating.
    pub up: bool,
    /// Seconds since its last heartbeat.
    pub silent_s: Option<f64>,
    /// Jobs holding GPUs on it.
    pub jobs: Vec<JobId>,
}

/// `GET /v1/cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Topology name.
    pub topology: String,
    /// Policy name.
    pub policy: String,
    /// Cluster-clock seconds now.
    pub now_s: f64,
    /// Unix time (ms) of cluster-clock zero.
    pub epoch_unix_ms: i64,
    /// Jobs by status.
    pub jobs: BTreeMap<String, usize>,
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// Sequence number of the last logged decision.
    pub last_seq: u64,
}

/// `POST /v1/jobs` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Submitted {
    /// The service's id.
    pub id: JobId,
    /// True when a job of the same spec id was already accepted (the
    /// submission is idempotent on `spec.id`).
    pub existing: bool,
}

/// What the driver itself logs beside policy decisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DriverEvent {
    /// The job ran all its iterations (or its training process said so).
    Finished {
        /// Job.
        job: JobId,
    },
    /// A user cancelled the job.
    Cancelled {
        /// Job.
        job: JobId,
    },
    /// An agent registered: the host's GPUs become usable.
    NodeUp {
        /// Host.
        node: HostId,
        /// GPUs it registered.
        gpus: u32,
        /// Its session: reports from older sessions are refused.
        session: u64,
        /// Its address on the data network (`--data-addr`), where a job's
        /// workers reach each other. Committed with the registration, so a
        /// replica that takes over hands it to the workers it starts.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data_addr: Option<std::net::IpAddr>,
    },
    /// The host's agent went silent: its jobs were preempted before this.
    NodeDown {
        /// Host.
        node: HostId,
    },
    /// The job was accepted (its entry's `source` says by whom: the audit
    /// trail of issue 70).
    Submitted {
        /// Job.
        job: JobId,
    },
    /// Jobs that ended at least `orrery serve --keep-finished` ago were
    /// forgotten: their rows and log entries are deleted with this entry,
    /// so they are no longer held. This entry is deleted in turn by an
    /// expiry `--keep-finished` later, which names it in `superseded`: a
    /// reader of the log has that long to see it.
    Expired {
        /// The jobs, each finished, cancelled or rejected.
        jobs: Vec<JobId>,
        /// The id the next accepted job gets: ids of forgotten jobs are
        /// never given again, even after a restart.
        next_job: JobId,
        /// Seqs of the earlier `Expired` entries deleted with this one.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        superseded: Vec<u64>,
    },
}

/// One entry of the decision log: a policy's decision or a driver event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Logged {
    /// A policy decision (or a preemption by the driver).
    Decision(Decision),
    /// A driver event.
    Event(DriverEvent),
    /// An administrators' change.
    Admin(crate::tenants::AdminEvent),
}

/// A committed log entry (`GET /v1/decisions?since=SEQ`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Sequence number, from 1, never reused.
    pub seq: u64,
    /// Cluster-clock seconds.
    pub at_s: f64,
    /// `policy` or `driver`, or who asked for it: `admin` (the
    /// administrators' token), `TENANT/TOKEN-ID` (a tenant's token).
    pub source: String,
    /// The decision or event.
    pub entry: Logged,
}

/// `POST /v1/nodes/register`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegisterRequest {
    /// Host name in the topology.
    pub name: String,
    /// GPUs this agent offers (at most the topology's); 0 offers the
    /// topology's (agents of a DaemonSet, whose nodes the topology was read from).
    #[schemars(range(min = 0, max = orrery_model::topology::MAX_GPUS_PER_HOST))]
    pub gpus: u32,
    /// NIC rate this agent measured or was told, Gbit/s (checked against the
    /// topology); 0 takes the topology's.
    #[schemars(range(min = 0, max = orrery_model::topology::MAX_LINK_GBPS))]
    pub nic_gbps: f64,
    /// The host's address on the data network (where its workers listen), if
    /// the agent knows it: workers of a job find each other with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_addr: Option<std::net::IpAddr>,
}

/// Answer to a registration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Registered {
    /// Host index.
    pub host: HostId,
    /// Session to echo in heartbeats and reports.
    pub session: u64,
    /// Unix time (ms) of cluster-clock zero: slots and offsets are on this clock.
    pub epoch_unix_ms: i64,
    /// Send a heartbeat at least this often, s.
    pub heartbeat_s: f64,
    /// Silent longer than this, the node is marked down, s.
    pub timeout_s: f64,
    /// GPUs registered (the request's, or the topology's when it asked for 0).
    #[serde(default)]
    pub gpus: u32,
}

/// `POST /v1/nodes/{host}/heartbeat` answer: when the service received the
/// heartbeat and answered it, µs on its clock (NTP's t1 and t2; the agent's
/// clock offset, [`crate::clock`]).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct HeartbeatAnswer {
    /// Accepted.
    pub ok: bool,
    /// t1, µs since the Unix epoch (service clock).
    #[serde(default)]
    pub received_unix_us: i64,
    /// t2, µs since the Unix epoch (service clock).
    #[serde(default)]
    pub sent_unix_us: i64,
}

/// `POST /v1/nodes/{host}/heartbeat` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    /// The session registration gave.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub session: u64,
}

/// `POST /v1/nodes/{host}/restarts` body: this node's ranks of `job` on
/// placement `epoch` stopped (one failed, or the agent fenced itself) while
/// its ranks on other hosts may run on without them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestartRequest {
    /// The session registration gave.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub session: u64,
    /// The job.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub job: JobId,
    /// Its placement epoch the ranks ran on.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub epoch: u64,
}

/// A job placed on a node, as its agent sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignment {
    /// Job.
    pub job: JobId,
    /// The spec's id.
    pub name: String,
    /// Placement epoch, echoed in reports.
    pub epoch: u64,
    /// Status (running or paused).
    pub status: JobStatus,
    /// GPUs on this node.
    pub gpus: u32,
    /// Worker ranks on this node (ring order).
    pub ranks: Vec<u32>,
    /// Every worker's host name, in ring order.
    pub workers: Vec<String>,
    /// Every worker's data-network address, in ring order (`None` where the
    /// host's agent did not give one).
    #[serde(default)]
    pub worker_addrs: Vec<Option<std::net::IpAddr>>,
    /// What one iteration does on this placement, alone: the segments an
    /// emulated worker runs (`orrery worker`).
    #[serde(default)]
    pub shape: orrery_model::IterationShape,
    /// Iteration time, ms: measured once the job has run three iterations
    /// on this placement, the model's alone before (as `JobInfo::period_ms`).
    pub period_ms: f64,
    /// Compute part of an iteration alone, ms.
    pub compute_ms: f64,
    /// Iterations done so far and in all.
    pub iterations_done: u64,
    /// Iterations in all.
    pub target_iterations: u64,
    /// Decisions in force.
    pub in_force: InForce,
    /// Hosts still stopping the job's ranks of an earlier placement: the
    /// agent starts nothing of it until this is empty (at most one process
    /// per rank; `ledger::handover`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_on: Vec<String>,
}

/// What an agent's long-poll of its assignments says of its node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssignmentsPoll {
    /// The session registration gave.
    pub session: u64,
    /// The version of the assignments the node has applied (0: none).
    pub after: u64,
    /// Seconds to wait for a change.
    pub wait_s: f64,
    /// Jobs whose ranks of an earlier placement it is still stopping.
    pub stopping: Vec<JobId>,
    /// Assignments its last answer held (`Assignment::waiting_on`).
    pub held: usize,
}

/// `GET /v1/nodes/{host}/assignments` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assignments {
    /// Log sequence of the last change to this node; pass as `after`.
    pub version: u64,
    /// The node's session.
    pub session: u64,
    /// Jobs on the node.
    pub jobs: Vec<Assignment>,
}

/// One iteration a training process reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IterationReport {
    /// Job.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub job: JobId,
    /// Placement epoch the agent was given.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub epoch: u64,
    /// Iterations done, this one included (from 1).
    #[schemars(range(min = 1, max = orrery_model::job::MAX_ITERATIONS))]
    pub iteration: u64,
    /// Cluster-clock seconds the iteration started (a day before its zero
    /// at the earliest: an agent's clock may be behind the service's).
    #[schemars(range(min = -86_400.0, max = 2.0 * orrery_model::job::MAX_ARRIVAL_S))]
    pub start_s: f64,
    /// Its duration, ms.
    #[schemars(range(min = 0, max = MAX_REPORTED_MS))]
    pub duration_ms: f64,
    /// Its communication phase, ms, when the loop marks it.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_REPORTED_MS))]
    pub comm_ms: Option<f64>,
    /// The slot delay the agent gave before it, ms (not in `duration_ms`).
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_REPORTED_MS))]
    pub delay_ms: Option<f64>,
    /// The training process ended its work with this iteration.
    #[serde(default)]
    pub done: bool,
}

/// The longest iteration, phase or delay a report may give, ms: a day.
pub const MAX_REPORTED_MS: f64 = 86_400_000.0;

/// `POST /v1/nodes/{host}/reports` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Reports {
    /// The node's session.
    #[schemars(range(min = 0, max = u64::MAX))]
    pub session: u64,
    /// Reports, oldest first.
    pub reports: Vec<IterationReport>,
}

/// Answer to reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportsAccepted {
    /// Reports accepted.
    pub accepted: usize,
    /// Refused reports: (job, why).
    pub refused: Vec<(JobId, String)>,
}

/// Every error the API returns, as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    /// What went wrong.
    pub error: String,
    /// The field at fault, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What the field must be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::worker_port;

    #[test]
    fn worker_ports_differ_for_ranks_of_a_host_and_stay_in_range() {
        assert_eq!(worker_port(0, 0), 20_000);
        assert_eq!(worker_port(1, 3), 20_019);
        assert_ne!(worker_port(7, 0), worker_port(7, 1));
        assert_eq!(worker_port(797, 15), 32_767);
        assert_eq!(worker_port(798, 0), worker_port(0, 0));
    }

    /// No worker port is one the kernel may give an outgoing connection.
    #[test]
    fn worker_ports_lie_below_the_kernels_ephemeral_ports() {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
        let first: u16 = range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32_768);
        let highest = (0..super::WORKER_PORT_JOBS as usize).map(|j| worker_port(j, 15)).max();
        assert!(highest < Some(first), "worker ports reach {highest:?}; the ephemeral range starts at {first}");
    }
}
