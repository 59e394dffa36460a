//! The core thread: the one place that owns the ledger, the policy and the
//! database. Requests arrive as closures on a channel; the thread runs every
//! closure waiting, calls the policy once if anything changed (or its tick is
//! due), writes everything in one transaction (group commit) and only then
//! answers the requests and wakes the agents' long-polls. So a job is
//! acknowledged only after it is committed, and a decision reaches an agent
//! only after it is committed.
//!
//! A failed commit stops the process (crash-only): the in-memory state is
//! then ahead of the disk, and a restart rebuilds it from the disk.

use crate::api::{DriverEvent, IterationReport, LogEntry, Logged, Registered, Submitted};
use crate::auth::Caller;
use crate::ledger::{Ledger, Refused, decision_kind};
use crate::metrics::{DecisionLabels, Metrics};
use crate::store::{Batch, JobRow, Store};
use crate::tenants::{AdminEvent, Tenant};
use anyhow::{Context, Result, bail};
use orrery_model::{JobSpec, Topology};
use orrery_policy::{Decision, JobId, Policy};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// Rounds of re-asking the policy in one instant after it preempted (as the simulator).
const RESCHEDULE_ROUNDS: usize = 16;
/// At most this many requests per group commit.
const MAX_BATCH: usize = 4096;
/// How often the leader looks for jobs to expire ([`Config::keep_finished_s`]).
const EXPIRE_EVERY: Duration = Duration::from_secs(5);
/// At most this many jobs expire at once: the `Expired` entry stays a few
/// tens of KB (etcd refuses requests past 1.5 MiB), and a backlog (a store
/// written before retention) clears over a few passes.
const MAX_EXPIRED: usize = 4096;

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Policy name (any of `orrery policies`).
    pub policy: String,
    /// Seed of the policy's randomness.
    pub seed: u64,
    /// The cluster.
    pub topology: Topology,
    /// A node silent this long is marked down, s.
    pub node_timeout_s: f64,
    /// Agents heartbeat this often, s.
    pub heartbeat_s: f64,
    /// Hosts each job (by spec id) is pinned to, for the `pinned` policies
    /// (`orrery_policy::with_pins`); empty otherwise.
    pub pins: std::collections::BTreeMap<String, Vec<(orrery_model::HostId, u32)>>,
    /// Tenants borrow idle quota (and give it back) by recent usage over
    /// share, usage halving every this many seconds (Slurm's fair-share
    /// factor, [`orrery_policy::quota::FairShare`]); None: by borrowed GPUs
    /// over weight (Kueue). The usage is the leader's soft state: a
    /// restart or a failover starts it afresh.
    pub fair_share_half_life_s: Option<f64>,
    /// A job that ended is held this long, then expires: its rows and log
    /// entries are deleted (`orrery serve --keep-finished`, as Slurm's
    /// `MinJobAge`); infinite keeps every job.
    pub keep_finished_s: f64,
    /// How the hosts' transport shares a link among flows
    /// ([`orrery_policy::Policy::set_flow_sharing`]; `orrery serve
    /// --flow-sharing`): unequal where they run BBR over tail-drop switches.
    pub flow_sharing: orrery_policy::FlowSharing,
}

/// A request for the core thread: runs there, returns what to do once the
/// batch it belongs to is committed.
type Job = Box<dyn FnOnce(&mut Core) -> Box<dyn FnOnce() + Send> + Send>;

/// The state the core thread owns.
pub struct Core {
    /// The live cluster.
    pub ledger: Ledger,
    /// The database.
    pub store: Store,
    policy: Box<dyn Policy>,
    /// Tenants' decayed usage, with [`Config::fair_share_half_life_s`].
    fair: Option<orrery_policy::quota::FairShare>,
    /// Service configuration.
    pub config: Config,
    /// Unix ms of cluster-clock zero.
    pub epoch_unix_ms: i64,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    batch: Batch,
    /// Something changed that the policy should see (arrival, end, node).
    dirty: bool,
    /// Raised when an agent's poll ends a handover (`ledger::handover`):
    /// held assignments on other hosts may start, so their long-polls wake.
    pub handed_over: watch::Sender<u64>,
}

/// Why a request failed, for the HTTP layer.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// 404.
    NotFound(String),
    /// 409.
    Conflict(String),
    /// 422 with the field.
    Field {
        /// Field.
        field: String,
        /// What it must be.
        expected: String,
        /// What it was.
        found: String,
    },
    /// 500.
    Internal(String),
}

impl From<Refused> for Failure {
    fn from(r: Refused) -> Self {
        match r {
            Refused::NotFound(m) => Failure::NotFound(m),
            Refused::Conflict(m) => Failure::Conflict(m),
            Refused::Field { field, expected, found } => Failure::Field { field: field.into(), expected, found },
        }
    }
}

/// Unix time now on this host's clock, ms ([`crate::clock::host_unix_us`]).
pub fn unix_ms() -> i64 {
    crate::clock::host_unix_us().div_euclid(1000)
}

impl Core {
    /// Cluster-clock seconds now.
    pub fn now_s(&self) -> f64 {
        (unix_ms() - self.epoch_unix_ms) as f64 / 1e3
    }

    /// Accepts a job from `by` (idempotent on its spec id within its
    /// tenant), logged with who asked. Committed before the caller hears.
    /// Ids are keyed as `TENANT/ID` ([`JobSpec::qualified_id`]): two
    /// tenants never collide (a tenant's name has no '/'); an untenanted
    /// `a/x` and tenant `a`'s `x` do, and the second is refused as taken.
    pub fn submit(&mut self, spec: JobSpec, by: &Caller) -> Result<Submitted, Failure> {
        if let Err(b) = orrery_trace::formats::jsonl::validate(&spec) {
            return Err(Failure::Field { field: b.field, expected: b.expected, found: b.found });
        }
        // An untenanted `TENANT/ID` would be tenant TENANT's job ID.
        if spec.tenant.is_none()
            && let Some((prefix, _)) = spec.id.split_once('/')
            && self.ledger.tenants().get(prefix).is_some()
        {
            return Err(Failure::Field {
                field: "id".into(),
                expected: "an id whose part before '/' is no tenant's name (TENANT/ID names tenant TENANT's job ID)"
                    .into(),
                found: format!("{:?}", spec.id),
            });
        }
        if let Some(t) = &spec.tenant
            && self.ledger.tenants().get(t).is_none()
        {
            return Err(Failure::Field {
                field: "tenant".into(),
                expected: "a tenant of GET /v1/tenants (orrery tenant list)".into(),
                found: format!("{t:?}"),
            });
        }
        if let Some(id) = self.ledger.job_by_name(spec.tenant.as_deref(), &spec.id) {
            // Idempotent: the same spec again is the same job, checked below.
            let mut old = self.ledger.jobs()[id].spec.clone();
            old.arrival_s = spec.arrival_s;
            return if old == spec {
                Ok(Submitted { id, existing: true })
            } else {
                Err(Failure::Conflict(format!("job id {:?} is taken by job {id} with a different spec", spec.id)))
            };
        }
        self.check_at_the_door(&spec)?;
        let now = self.now_s();
        let id = self.ledger.submit(spec, now);
        let j = &self.ledger.jobs()[id];
        self.batch.jobs.push(JobRow { id, spec: j.spec.clone(), submitted_s: now, iterations_done: 0 });
        self.record(Logged::Event(DriverEvent::Submitted { job: id }), &by.source());
        self.metrics.submissions.inc();
        self.dirty = true;
        Ok(Submitted { id, existing: false })
    }

    /// Makes or changes a tenant (the administrators'), logged.
    pub fn set_tenant(&mut self, tenant: Tenant) -> Result<(), Failure> {
        if let Err(expected) = crate::tenants::check_name(&tenant.name) {
            return Err(Failure::Field { field: "name".into(), expected, found: format!("{:?}", tenant.name) });
        }
        // `NAME/ID` is tenant NAME's job ID: no untenanted job may already
        // be called that (the Kubernetes controller's are `NAMESPACE/NAME`).
        // O(jobs held), on a new tenant only.
        let prefix = format!("{}/", tenant.name);
        if self.ledger.tenants().get(&tenant.name).is_none()
            && let Some((_, j)) =
                self.ledger.jobs().iter().find(|(_, j)| j.spec.tenant.is_none() && j.spec.id.starts_with(&prefix))
        {
            return Err(Failure::Field {
                field: "name".into(),
                expected: format!(
                    "a name no untenanted job's id begins with (TENANT/ID names a tenant's job; job {:?} exists)",
                    j.spec.id
                ),
                found: format!("{:?}", tenant.name),
            });
        }
        self.record(Logged::Admin(AdminEvent::TenantSet(tenant)), "admin")
            .map(|_| ())
            .ok_or_else(|| Failure::Internal("the tenant was refused".into()))
    }

    /// Issues a token to `tenant`, valid until `expires_unix_ms`: the
    /// secret (shown once: only its hash is kept) and its public record.
    pub fn issue_token(
        &mut self,
        tenant: &str,
        expires_unix_ms: Option<i64>,
    ) -> Result<(String, crate::tenants::TokenInfo), Failure> {
        if self.ledger.tenants().get(tenant).is_none() {
            return Err(Failure::NotFound(format!("no tenant {tenant:?}")));
        }
        let secret = crate::tenants::new_secret().map_err(|e| Failure::Internal(format!("{e:#}")))?;
        let sha256 = crate::tenants::hash(&secret);
        let token = crate::tenants::token_id(&sha256);
        let event = AdminEvent::TokenIssued { token: token.clone(), tenant: tenant.into(), sha256, expires_unix_ms };
        self.record(Logged::Admin(event), "admin")
            .ok_or_else(|| Failure::Conflict("a token with that id exists; ask again".into()))?;
        let info = self.ledger.tenants().token(&token).cloned().ok_or_else(|| Failure::Internal("lost".into()))?;
        Ok((secret, info))
    }

    /// Revokes a token by id.
    pub fn revoke_token(&mut self, token: &str) -> Result<crate::tenants::TokenInfo, Failure> {
        match self.ledger.tenants().token(token) {
            None => return Err(Failure::NotFound(format!("no token {token:?}"))),
            Some(t) if t.revoked => return Err(Failure::Conflict(format!("token {token} is already revoked"))),
            Some(_) => {}
        }
        self.record(Logged::Admin(AdminEvent::TokenRevoked { token: token.into() }), "admin");
        self.ledger.tenants().token(token).cloned().ok_or_else(|| Failure::Internal("lost".into()))
    }

    /// What only the service can check: a job must fit the cluster's GPUs,
    /// and it may depend only on jobs already submitted, other than itself
    /// (so the dependencies can form no cycle: each job's are older).
    fn check_at_the_door(&self, spec: &JobSpec) -> Result<(), Failure> {
        let total: u64 = self.ledger.topology().hosts.iter().map(|h| u64::from(h.gpus)).sum();
        let gpus = u64::from(spec.workers) * u64::from(spec.gpus_per_worker.max(1));
        if gpus > total {
            return Err(Failure::Field {
                field: "workers".into(),
                expected: format!(
                    "workers × gpus_per_worker at most {total}, the GPUs of topology {}",
                    self.ledger.topology().name
                ),
                found: format!("{} × {} = {gpus}", spec.workers, spec.gpus_per_worker.max(1)),
            });
        }
        for d in &spec.depends_on {
            if *d == spec.id {
                return Err(Failure::Field {
                    field: "depends_on".into(),
                    expected: "ids of other jobs".into(),
                    found: format!("{d:?}, the job itself"),
                });
            }
            if self.ledger.job_by_name(spec.tenant.as_deref(), d).is_none() {
                return Err(Failure::Field {
                    field: "depends_on".into(),
                    expected: "ids of jobs already submitted (submit the jobs it depends on first)".into(),
                    found: format!("{d:?}, which no job submitted has"),
                });
            }
        }
        Ok(())
    }

    /// Cancels a job that has not ended, logged with who asked.
    pub fn cancel(&mut self, job: JobId, by: &Caller) -> Result<(), Failure> {
        let status = self.ledger.jobs().get(job).map(|j| j.status).ok_or(Failure::NotFound(format!("no job {job}")))?;
        if status.is_over() {
            return Err(Failure::Conflict(format!("job {job} is already {}", status.name())));
        }
        self.record(Logged::Event(DriverEvent::Cancelled { job }), &by.source());
        Ok(())
    }

    /// An agent registers its host: a new session (older ones are refused).
    pub fn register(&mut self, req: &crate::api::RegisterRequest) -> Result<Registered, Failure> {
        let mut req = req.clone();
        if let Some(h) = self.ledger.topology().hosts.iter().position(|h| h.name == req.name) {
            // 0 asks for the topology's value.
            if req.gpus == 0 {
                req.gpus = self.ledger.topology().hosts[h].gpus;
            }
            if req.nic_gbps == 0.0 {
                req.nic_gbps = self.ledger.topology().host_nic_gbps(h);
            }
        }
        let now = self.now_s();
        let host = self.ledger.check_register(&req.name, req.gpus, req.nic_gbps, now, self.config.node_timeout_s)?;
        let nic = self.ledger.topology().host_nic_gbps(host);
        if (nic - req.nic_gbps).abs() > 1e-6 * nic.max(1.0) {
            tracing::warn!(host = %req.name, "agent reports a {} Gbit/s NIC; the topology's {nic} Gbit/s is what the policy sees", req.nic_gbps);
        }
        let session = self.ledger.last_session(host) + 1;
        // The agent of the last session is gone, and its training processes
        // with it (no rank outlives its agent): a job with ranks on other
        // hosts cannot go on without them, and starts again as a whole. A
        // job only here goes on where it stopped when the new agent starts it.
        for job in self.ledger.jobs_on(host) {
            if self.ledger.jobs().get(job).is_some_and(|j| j.workers.iter().any(|&w| w != host)) {
                self.record(Logged::Decision(Decision::Preempt { job }), "driver");
            }
        }
        let up = DriverEvent::NodeUp { node: host, gpus: req.gpus, session, data_addr: req.data_addr };
        if self.record(Logged::Event(up), "driver").is_none() {
            return Err(Failure::Conflict(format!("host {} cannot take {} GPUs now", req.name, req.gpus)));
        }
        Ok(Registered {
            host,
            session,
            epoch_unix_ms: self.epoch_unix_ms,
            heartbeat_s: self.config.heartbeat_s,
            timeout_s: self.config.node_timeout_s,
            gpus: req.gpus,
        })
    }

    /// An agent leaves (it stopped its processes first): the node's jobs are
    /// re-queued and it is marked down now, not after the time-out, so an
    /// agent restarted on the node registers at once.
    pub fn deregister(&mut self, host: usize, session: u64) -> Result<(), Failure> {
        self.ledger.session_is_current(host, session)?;
        self.node_down(host);
        Ok(())
    }

    fn node_down(&mut self, host: usize) {
        for job in self.ledger.jobs_on(host) {
            self.record(Logged::Decision(Decision::Preempt { job }), "driver");
        }
        self.record(Logged::Event(DriverEvent::NodeDown { node: host }), "driver");
    }

    /// An agent stopped its ranks of `job` on placement `epoch` (one
    /// failed, or it fenced itself), and the job has ranks on other hosts,
    /// which cannot go on without them: the whole job starts again, as
    /// torchrun restarts its whole worker group. The driver preempts it
    /// (logged) and the policy places it again, on a new epoch, from the
    /// iterations reported. Whether it was preempted: a job no longer on
    /// that epoch here is left as it is.
    pub fn restart_job(&mut self, host: usize, session: u64, job: JobId, epoch: u64) -> Result<bool, Failure> {
        self.ledger.session_is_current(host, session)?;
        let here = self
            .ledger
            .jobs()
            .get(job)
            .is_some_and(|j| j.status.is_active() && j.epoch == epoch && j.hosts.iter().any(|h| h.0 == host));
        if !here {
            return Ok(false);
        }
        tracing::info!(job, epoch, host, "a node's ranks of the job stopped: the whole job starts again");
        Ok(self.record(Logged::Decision(Decision::Preempt { job }), "driver").is_some())
    }

    /// A heartbeat.
    pub fn heartbeat(&mut self, host: usize, session: u64) -> Result<(), Failure> {
        let now = self.now_s();
        Ok(self.ledger.heartbeat(host, session, now)?)
    }

    /// Iteration reports from an agent: refused ones are listed with why.
    pub fn reports(
        &mut self,
        host: usize,
        session: u64,
        reports: &[IterationReport],
    ) -> Result<crate::api::ReportsAccepted, Failure> {
        let now = self.now_s();
        self.ledger.heartbeat(host, session, now)?;
        let mut out = crate::api::ReportsAccepted { accepted: 0, refused: Vec::new() };
        for r in reports {
            match self.ledger.report(host, r, now) {
                Ok(effect) => {
                    out.accepted += 1;
                    self.metrics.reports.inc();
                    if effect.advanced {
                        self.batch.progress.push((r.job, self.ledger.jobs()[r.job].iterations_done));
                        // The simulator's iteration time: the slot delay
                        // before it included.
                        let waited_ms = r.delay_ms.unwrap_or(0.0);
                        let it = orrery_policy::Iteration {
                            ms: r.duration_ms + waited_ms,
                            waited_ms,
                            comm_ms: r.comm_ms.filter(|c| c.is_finite() && *c >= 0.0),
                        };
                        // The whole view whenever the policy needs any of it
                        // (the ledger builds no partial one).
                        if self.policy.observes_iterations()
                            && self.policy.iteration_needs(r.job, &it) != orrery_policy::IterationNeeds::Nothing
                        {
                            let t = Instant::now();
                            let decisions = {
                                let view = self.ledger.view(now);
                                self.policy.on_iteration(&view, r.job, it)
                            };
                            self.metrics.decision_seconds.observe(t.elapsed().as_secs_f64());
                            self.apply(decisions);
                        }
                    }
                    if effect.finished {
                        self.record(Logged::Event(DriverEvent::Finished { job: r.job }), "driver");
                    }
                }
                Err(e) => out.refused.push((r.job, e.to_string())),
            }
        }
        Ok(out)
    }

    /// Records a valid entry in the ledger and the batch; None if invalid.
    fn record(&mut self, entry: Logged, source: &str) -> Option<u64> {
        let at_s = self.now_s();
        let Some(seq) = self.ledger.record(&entry, at_s) else {
            if source == "policy" {
                self.metrics.invalid_decisions.inc();
            }
            return None;
        };
        let kind = match &entry {
            Logged::Decision(d) => decision_kind(d),
            Logged::Event(DriverEvent::Finished { .. }) => "finished",
            Logged::Event(DriverEvent::Cancelled { .. }) => "cancelled",
            Logged::Event(DriverEvent::NodeUp { .. }) => "node_up",
            Logged::Event(DriverEvent::NodeDown { .. }) => "node_down",
            Logged::Event(DriverEvent::Submitted { .. }) => "submitted",
            Logged::Event(DriverEvent::Expired { .. }) => "expired",
            Logged::Admin(AdminEvent::TenantSet(_)) => "tenant_set",
            Logged::Admin(AdminEvent::TokenIssued { .. }) => "token_issued",
            Logged::Admin(AdminEvent::TokenRevoked { .. }) => "token_revoked",
        };
        let expiry = matches!(entry, Logged::Event(DriverEvent::Expired { .. }));
        if !expiry && matches!(entry, Logged::Event(_) | Logged::Decision(Decision::Preempt { .. })) {
            self.dirty = true;
        }
        // A tenant's token is one label, not one per token.
        let label = if source.contains('/') { "tenant" } else { source };
        self.metrics.decisions.get_or_create(&DecisionLabels { kind: kind.into(), source: label.into() }).inc();
        self.batch.log.push(LogEntry { seq, at_s, source: source.into(), entry });
        Some(seq)
    }

    /// Applies a policy's decisions; true when one freed GPUs (a preemption).
    fn apply(&mut self, decisions: Vec<Decision>) -> bool {
        let mut freed = false;
        for d in decisions {
            let preempt = matches!(d, Decision::Preempt { .. });
            if self.record(Logged::Decision(d), "policy").is_some() && preempt {
                freed = true;
            }
        }
        freed
    }

    /// One scheduling round: admission by the tenants' quotas
    /// ([`orrery_policy::quota`]), then the policy on the admitted queue,
    /// again while it (or a quota's reclaim) preempts.
    fn schedule(&mut self) {
        for _ in 0..=RESCHEDULE_ROUNDS {
            let now = self.now_s();
            let t = Instant::now();
            let quotas = self.ledger.tenants().quotas();
            let (reclaim, decisions) = {
                let mut view = self.ledger.view(now);
                // The policy's order matters only to admission by quota.
                let order = if quotas.is_empty() { Vec::new() } else { self.policy.queue_order(&view) };
                let adm = orrery_policy::quota::admit_view(&quotas, &view, &order, self.fair.as_mut());
                if adm.reclaim.is_empty() {
                    let mut admitted = adm.admitted.iter();
                    view.queue.retain(|_| admitted.next().copied().unwrap_or(true));
                    let mut d = self.policy.schedule(&view);
                    orrery_policy::quota::bound_growth(&quotas, &view, &mut d);
                    (Vec::new(), d)
                } else {
                    (adm.reclaim, Vec::new())
                }
            };
            if !reclaim.is_empty() {
                // The borrowers' GPUs go back before the policy places the
                // lender's job (their jobs re-queue and resume later).
                for (job, tenant) in reclaim {
                    tracing::info!(job, tenant = %tenant, "quota: reclaiming a borrowed job's GPUs");
                    self.record(Logged::Decision(Decision::Preempt { job }), "quota");
                }
                continue;
            }
            self.metrics.decision_seconds.observe(t.elapsed().as_secs_f64());
            if !self.apply(decisions) {
                return;
            }
        }
    }

    /// Forgets the jobs that ended more than [`Config::keep_finished_s`]
    /// ago: one `Expired` entry, and their rows and entries deleted in the
    /// same commit. O(held).
    fn expire(&mut self) {
        if !self.config.keep_finished_s.is_finite() {
            return;
        }
        let Some(e) = self.ledger.expiry(self.now_s() - self.config.keep_finished_s, MAX_EXPIRED) else {
            return;
        };
        let next_job = self.ledger.jobs().next_id();
        let n = e.jobs.len();
        let expired = DriverEvent::Expired { jobs: e.jobs.clone(), next_job, superseded: e.superseded };
        if self.record(Logged::Event(expired), "driver").is_some() {
            self.batch.forget_jobs.extend(e.jobs);
            self.batch.forget_log.extend(e.log_seqs);
            self.metrics.expired.inc_by(n as u64);
        }
    }

    /// A follower replays what the leader committed since it last read;
    /// true if anything was new.
    fn follow(&mut self) -> Result<bool> {
        let Store::Etcd(store) = &self.store else { return Ok(false) };
        let new = store.follow(self.ledger.jobs().next_id(), self.ledger.next_seq() - 1)?;
        if new.is_empty() {
            return Ok(false);
        }
        for j in new.jobs {
            self.ledger.restore_job(j.id, j.spec, j.submitted_s);
        }
        for e in &new.log {
            self.ledger.replay(e.seq, &e.entry, e.at_s);
        }
        for (id, done) in new.progress {
            self.ledger.restore_progress(id, done);
        }
        let now = self.now_s();
        self.ledger.touch_all(now);
        Ok(true)
    }

    /// Nodes silent past the time-out: their jobs are preempted (logged as
    /// the driver's), then the node is marked down.
    fn check_liveness(&mut self) {
        let now = self.now_s();
        for host in self.ledger.silent_nodes(now - self.config.node_timeout_s) {
            let name = self.ledger.topology().hosts[host].name.clone();
            tracing::warn!(host = %name, "node silent for {:.1} s: down, its jobs re-queued", self.config.node_timeout_s);
            self.node_down(host);
        }
    }
}

/// The handle the HTTP layer holds.
#[derive(Clone)]
pub struct Handle {
    tx: Sender<Job>,
    /// Last committed log sequence (changes wake long-polls).
    pub committed: watch::Receiver<u64>,
    /// Counts committed batches of any kind (submissions and progress too;
    /// the dashboard's long-poll wakes on it).
    pub version: watch::Receiver<u64>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Raised when a held assignment may start ([`Core::handed_over`]).
    pub handed_over: watch::Receiver<u64>,
}

/// The core thread stopped (a commit failed, or shut down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable;

impl Handle {
    /// Runs `f` on the core thread; the answer comes once the batch it
    /// joined is committed.
    pub async fn call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Core) -> R + Send + 'static,
    ) -> Result<R, Unavailable> {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |core| {
            let r = f(core);
            Box::new(move || {
                let _ = tx.send(r);
            })
        });
        self.tx.send(job).map_err(|_| Unavailable)?;
        rx.await.map_err(|_| Unavailable)
    }
}

/// How often a standby's copy reads what the leader committed.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// Rebuilds the state from the store and starts the core thread.
pub fn start(config: Config, store: Store) -> Result<(Handle, std::thread::JoinHandle<()>)> {
    spawn(config, store, false)
}

/// A standby's read-only copy of the leader's state: rebuilt from etcd, then
/// every [`FOLLOW_EVERY`] it replays what the leader committed since
/// ([`crate::store::EtcdStore::follow`]). It answers reads; it never
/// calls the policy, checks liveness or writes (a request that would write
/// is a bug of the caller: its batch is dropped). Node liveness is the
/// leader's: the copy shows a node up from its NodeUp to its NodeDown.
pub fn start_follower(config: Config, store: Store) -> Result<(Handle, std::thread::JoinHandle<()>)> {
    spawn(config, store, true)
}

fn spawn(config: Config, mut store: Store, follower: bool) -> Result<(Handle, std::thread::JoinHandle<()>)> {
    let loaded = store.load()?;
    let topo_name = config.topology.name.clone();
    if let Some(t) = &loaded.topology
        && *t != topo_name
    {
        bail!(
            "{}: this store belongs to topology {t:?}, not {topo_name:?} (use --data for another directory, \
             or another etcd prefix)",
            store.describe()
        );
    }
    let epoch_unix_ms = match loaded.epoch_unix_ms {
        Some(e) => e,
        None if follower => bail!("{}: nothing to follow yet (no leader has written)", store.describe()),
        None => {
            let e = unix_ms();
            store.init(e, &topo_name)?;
            e
        }
    };
    let mut ledger = Ledger::new(config.topology.clone());
    for j in &loaded.jobs {
        ledger.restore_job(j.id, j.spec.clone(), j.submitted_s);
    }
    for e in &loaded.log {
        ledger.replay(e.seq, &e.entry, e.at_s);
    }
    for j in &loaded.jobs {
        ledger.restore_progress(j.id, j.iterations_done);
    }
    // An expiry the store committed in part (etcd's several transactions,
    // cut by a crash) left rows of jobs the log forgot: the leader's first
    // commit deletes them.
    let mut leftover = Batch::default();
    if !follower {
        leftover.forget_jobs = loaded.jobs.iter().map(|j| j.id).filter(|&id| ledger.jobs().get(id).is_none()).collect();
        leftover.forget_log = loaded
            .log
            .iter()
            .filter(|e| crate::ledger::entry_job(&e.entry).is_some_and(|j| ledger.jobs().get(j).is_none()))
            .map(|e| e.seq)
            .collect();
    }
    let now_s = (unix_ms() - epoch_unix_ms) as f64 / 1e3;
    ledger.touch_all(now_s);
    tracing::info!(jobs = loaded.jobs.len(), log = loaded.log.len(), "state rebuilt from {}", store.describe());
    let metrics = Arc::new(Metrics::default());
    let (tx, rx) = std::sync::mpsc::channel::<Job>();
    let (seq_tx, seq_rx) = watch::channel(ledger.next_seq() - 1);
    let (version_tx, version_rx) = watch::channel(0u64);
    let (handed_over, handed_over_rx) = watch::channel(0u64);
    // The policy is built on the core thread (policies need not be Send).
    let name = config.policy.clone();
    orrery_policy::with_pins(&name, config.seed, &config.pins)
        .with_context(|| format!("unknown policy {name:?} (see `orrery policies`)"))?;
    let m = metrics.clone();
    let thread = std::thread::Builder::new().name("orrery-core".into()).spawn(move || {
        let Some(mut policy) = orrery_policy::with_pins(&config.policy, config.seed, &config.pins) else { return };
        policy.set_colocation(&orrery_model::colocation::Colocation::default());
        policy.set_flow_sharing(config.flow_sharing);
        let core = Core {
            ledger,
            store,
            policy,
            fair: config.fair_share_half_life_s.map(orrery_policy::quota::FairShare::new),
            config,
            epoch_unix_ms,
            metrics: m,
            batch: leftover,
            dirty: true,
            handed_over,
        };
        if follower {
            follow(core, rx, seq_tx, version_tx);
        } else {
            run(core, rx, seq_tx, version_tx);
        }
    })?;
    Ok((Handle { tx, committed: seq_rx, version: version_rx, metrics, handed_over: handed_over_rx }, thread))
}

/// The follower's loop: answer reads at once, replay what is new every
/// [`FOLLOW_EVERY`]; ends when every handle is gone.
fn follow(mut core: Core, rx: Receiver<Job>, seq_tx: watch::Sender<u64>, version_tx: watch::Sender<u64>) {
    let mut next = Instant::now();
    loop {
        match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Ok(job) => {
                let deliver = job(&mut core);
                if !core.batch.is_empty() {
                    tracing::error!("a request tried to write on a standby's copy; dropped");
                    core.batch = Batch::default();
                }
                deliver();
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        next = Instant::now() + FOLLOW_EVERY;
        match core.follow() {
            Ok(true) => {
                seq_tx.send_replace(core.ledger.next_seq() - 1);
                version_tx.send_modify(|v| *v += 1);
            }
            Ok(false) => {}
            Err(e) => tracing::warn!("following the leader: {e:#}"),
        }
    }
}

fn run(mut core: Core, rx: Receiver<Job>, seq_tx: watch::Sender<u64>, version_tx: watch::Sender<u64>) {
    let tick = core.policy.tick_s().filter(|t| *t > 0.0).map(Duration::from_secs_f64);
    let liveness = Duration::from_secs_f64((core.config.node_timeout_s / 4.0).clamp(0.05, 1.0));
    let mut next_tick = tick.map(|t| Instant::now() + t);
    let mut next_liveness = Instant::now() + liveness;
    let mut next_expiry = Instant::now() + EXPIRE_EVERY;
    let mut delivers: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    loop {
        let wake = next_tick.map_or(next_liveness, |t| t.min(next_liveness));
        let first = match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let mut n = 0;
        if let Some(job) = first {
            delivers.push(job(&mut core));
            n += 1;
            while n < MAX_BATCH {
                let Ok(job) = rx.try_recv() else { break };
                delivers.push(job(&mut core));
                n += 1;
            }
        }
        let now = Instant::now();
        if now >= next_liveness {
            core.check_liveness();
            next_liveness = now + liveness;
        }
        if now >= next_expiry {
            core.expire();
            next_expiry = now + EXPIRE_EVERY;
        }
        let tick_due = next_tick.is_some_and(|t| now >= t);
        if tick_due {
            next_tick = tick.map(|t| now + t);
        }
        if core.dirty || tick_due {
            core.dirty = false;
            core.schedule();
        }
        if !core.batch.is_empty() {
            let batch = std::mem::take(&mut core.batch);
            match core.store.write(&batch) {
                Ok(took) => core.metrics.commit_seconds.observe(took.as_secs_f64()),
                Err(e) => {
                    tracing::error!("commit failed, stopping (a restart recovers from the store): {e:#}");
                    std::process::exit(70);
                }
            }
            if let Some(last) = batch.log.last() {
                seq_tx.send_replace(last.seq);
            }
            version_tx.send_modify(|v| *v += 1);
        }
        if n > 0 {
            core.metrics.batch_size.observe(n as f64);
        }
        for d in delivers.drain(..) {
            d();
        }
    }
}
