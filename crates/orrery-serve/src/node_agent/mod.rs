//! The node agent (`orrery agent --node`): one per host. It registers the
//! host with the service, heartbeats, long-polls its assignments, starts and
//! stops the jobs' training processes (`--exec`), and serves them on a local
//! Unix socket: a process asks when its next iteration may start and reports
//! each iteration; the agent batches the reports to the service. This file
//! is the agent's side towards the service and the processes' lives; the
//! socket is [`process`].
//!
//! Each worker process gets `ORRERY_AGENT_SOCKET`, `ORRERY_JOB`,
//! `ORRERY_JOB_NAME`, `ORRERY_EPOCH`, `ORRERY_RANK`, `ORRERY_WORLD_SIZE`,
//! `ORRERY_WORKERS` (host of each rank), `ORRERY_PERIOD_MS`,
//! `ORRERY_COMPUTE_MS`, `ORRERY_EPOCH_UNIX_MS`, `ORRERY_WORKER_ADDRS` (the
//! data-network address of each rank's host, empty where unknown),
//! `ORRERY_SHAPE` (the iteration shape as JSON) and `CUDA_VISIBLE_DEVICES`
//! (its share of the local GPUs the agent gave the job: free ones first).
//! For `torch.distributed` (and torchrun's conventions) it also sets `RANK`,
//! `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR` (rank 0's
//! data address, where known) and `MASTER_PORT` (the job's rank-0
//! [`crate::api::worker_port`], distinct per job), and with `--data-dev`
//! `GLOO_SOCKET_IFNAME` and `NCCL_SOCKET_IFNAME`. `ORRERY_AGENT_LEASE`
//! names the lease its group leader's watchdog reads ([`fence`]: a rank
//! stops when its agent is frozen past the service's time-out).
//!
//! With `--netns NS` the processes start inside that network namespace (the
//! testbed's host), while the agent itself speaks to the service from its
//! own. With `--shape-dev DEV` the agent enforces `Throttle` decisions with
//! tc: one htb class per throttled job under DEV's root class `1:1` (the
//! layout `orrery testbed up` makes), fed by u32 filters on the data ports
//! its ring successors on other hosts listen on ([`crate::api::worker_port`]).
//!
//! Local protocol: one JSON object per line each way.
//!
//! * `{"op":"wait","job":J,"rank":R?,"epoch":E?}` → blocks while the job is
//!   paused or not yet placed here, then `{"go":true,"delay_ms":D,
//!   "iteration":K,"epoch":E,"throttle_gbps":G|null,"period_ms":P}`: sleep D
//!   ms, then run iteration K (`route`: the spine paths pinned for this rank's
//!   ring flow, empty for ECMP). `{"stop":"why"}` when the job left this node
//!   (finished, preempted, cancelled) or `E` is stale.
//! * `{"op":"report","job":J,"epoch":E,"iteration":K,"start_unix_ms":T,
//!   "duration_ms":D,"comm_ms":C?,"done":B?}` → `{"ok":true,"done":B}`
//!   (`done`: the job has run all its iterations).
//!
//! The delay is [`orrery_policy::slot::start_delay_ns`] on the cluster clock,
//! with the shifts not yet applied by this process and the Pace in force:
//! the simulator's rule. An Align waits for the iteration it names and holds
//! every rank to the instant the service computed for it
//! ([`crate::api::AlignSlot`]), so ranks that ask at different moments start
//! together. Shifts and aligns are applied once per (job, epoch, rank).

use crate::api::{Assignment, AssignmentsPoll, IterationReport, RegisterRequest, Reports};
use crate::client::{Client, ClientError};
use anyhow::{Context, Result};
use orrery_policy::JobId;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::UnixListener;
use tokio::sync::Notify;

pub mod process;
pub use process::ProcessReport;
use process::serve_socket;

mod classes;
pub use classes::{mark_script, run_nft};
mod fence;
mod handover;
mod ranks;
use handover::stop_and_tell;
pub use ranks::{GRACE, MAX_RANK_RESTARTS, restart_backoff};
use ranks::{Worker, launch, reap, stop_processes, stop_processes_within};

/// How an agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Service URL.
    pub server: String,
    /// Agent token.
    pub token: String,
    /// Host name in the service's topology.
    pub name: String,
    /// GPUs offered (0: the topology's).
    pub gpus: u32,
    /// NIC rate, Gbit/s (0: the topology's).
    pub nic_gbps: f64,
    /// Unix socket for training processes.
    pub socket: PathBuf,
    /// Command started (by `sh -c`) for each worker placed here.
    pub exec: Option<String>,
    /// Longest long-poll, s.
    pub poll_s: f64,
    /// The host's data-network address, given to the service for peers.
    pub data_addr: Option<std::net::IpAddr>,
    /// Network namespace the training processes start in.
    pub netns: Option<String>,
    /// Enforce throttles with tc on this device (in `netns`).
    pub shape_dev: Option<String>,
    /// The data network's device (in `netns`): `GLOO_SOCKET_IFNAME` and
    /// `NCCL_SOCKET_IFNAME` of the training processes.
    pub data_dev: Option<String>,
    /// Rates on the device are the topology's times this (the testbed's scale).
    pub rate_scale: f64,
    /// This host's clock runs this much ahead of the wall clock, ms, on top
    /// of `ORRERY_CLOCK_SKEW_MS` (the testbed's agents share one process);
    /// its processes are started with the sum in `ORRERY_CLOCK_SKEW_MS`.
    pub clock_skew_ms: f64,
    /// The CA that signed an https:// service's certificate (PEM).
    pub ca: Option<std::path::PathBuf>,
    /// A CSV to append each report batch's round trip to (see
    /// [`REPORT_LOG_HEADER`]).
    pub report_log: Option<PathBuf>,
}

/// The columns of [`AgentOptions::report_log`]: when the batch was sent
/// (the wall clock, ms since the Unix epoch), its round trip (ms), the
/// iteration reports in it, and `ok`, `refused` (the service answered
/// with an error) or `failed` (no answer).
pub const REPORT_LOG_HEADER: &str = "unix_ms,round_trip_ms,reports,outcome";

impl AgentOptions {
    /// This host's clock, µs since the Unix epoch.
    fn host_unix_us(&self) -> i64 {
        crate::clock::host_unix_us() + (self.clock_skew_ms * 1e3) as i64
    }
}

/// One worker's progress through the decisions in force.
#[derive(Debug, Default, Clone)]
struct Applied {
    shift_ms: f64,
    align_seq: u64,
}

/// A job that left this node: at which epoch, why, and how many iterations
/// that epoch was to run. Another node's rank can end the job before this
/// node's last report arrives; the report is still the job's last.
#[derive(Debug, Clone)]
struct Left {
    epoch: u64,
    why: String,
    target_iterations: u64,
}

#[derive(Default)]
struct State {
    host: usize,
    session: u64,
    epoch_unix_ms: i64,
    /// How often the service wants a heartbeat, s.
    heartbeat_s: f64,
    /// After how long a silent node is marked down by the service, s.
    timeout_s: f64,
    /// When the last heartbeat the service acknowledged was sent.
    last_ack: Option<std::time::Instant>,
    registered: bool,
    jobs: HashMap<JobId, Assignment>,
    /// Jobs that left this node, for their processes that ask or report later.
    gone: HashMap<JobId, Left>,
    applied: HashMap<(JobId, u64, u32), Applied>,
    /// Last iteration handed out per (job, epoch).
    iteration: HashMap<(JobId, u64), u64>,
    reports: Vec<IterationReport>,
    children: HashMap<(JobId, u64), Vec<Worker>>,
    /// Jobs whose target this agent saw reached.
    done: HashSet<JobId>,
    /// Jobs holding each local GPU (two when Castor shares it).
    gpu_jobs: Vec<Vec<JobId>>,
    /// Throttles installed with tc.
    shaped: HashMap<JobId, Shaped>,
    /// Traffic classes marked with nftables: (epoch, class) per job.
    marked: HashMap<JobId, (u64, u8)>,
    /// This host's clock against the service's (NTP over heartbeats).
    clock: crate::clock::ClockOffset,
    /// The slot delay handed out for (job, epoch, iteration), until its
    /// report carries it to the service.
    handed: HashMap<(JobId, u64, u64), f64>,
    /// (job, epoch) of jobs with ranks on other hosts whose ranks here
    /// stopped (one failed, or the agent fenced itself): never started
    /// again here on that epoch, and the service is asked to start the
    /// whole job again ([`ranks::request_restarts`]); when it answered.
    broken: HashMap<(JobId, u64), Option<std::time::Instant>>,
    /// Jobs whose processes of an epoch that left are being stopped, with
    /// how many stops are in flight: the polls name them until they end
    /// (`ledger::handover`).
    stopping: HashMap<JobId, u32>,
}

/// Delays remembered for iterations not yet reported, at most (a process
/// that asks and never reports cannot grow the map without bound).
const MAX_HANDED: usize = 4096;

impl State {
    /// Local GPU indices for a job placed here: free ones first, then the
    /// least-shared ones (a `Share` puts it on GPUs another job holds).
    fn take_gpus(&mut self, job: JobId, n: u32) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.gpu_jobs.len()).collect();
        order.sort_by_key(|&g| (self.gpu_jobs[g].len(), g));
        let chosen: Vec<usize> = order.into_iter().take(n as usize).collect();
        for &g in &chosen {
            self.gpu_jobs[g].push(job);
        }
        chosen
    }

    fn release_gpus(&mut self, job: JobId) {
        for holders in &mut self.gpu_jobs {
            holders.retain(|&j| j != job);
        }
    }

    /// Is the ranks' lease too short for a rank to start under: has it
    /// lapsed (no heartbeat acknowledged for [`FENCE_AT`] of the service's
    /// time-out, when their watchdog stops them and the agent fences), or
    /// does it run out before the next heartbeat can renew it (less than a
    /// heartbeat's interval and half a second left, or half of it, for
    /// short time-outs)? In steady state a heartbeat is acknowledged every
    /// interval, so nothing is held. O(1).
    fn lease_too_short(&self) -> bool {
        let lease = FENCE_AT * self.timeout_s;
        let margin = (self.heartbeat_s + 0.5).min(lease / 2.0);
        self.timeout_s > 0.0 && self.last_ack.is_some_and(|t| t.elapsed().as_secs_f64() > lease - margin)
    }

    /// While [`State::lease_too_short`], takes the jobs not yet started
    /// here (new, or in a new epoch) out of `new` and returns them; the
    /// ones running stay. O(jobs).
    fn hold_back_while_lapsed(&self, new: &mut HashMap<JobId, Assignment>) -> Vec<JobId> {
        if !self.lease_too_short() {
            return Vec::new();
        }
        let held: Vec<JobId> = new
            .iter()
            .filter(|(id, a)| self.jobs.get(id).is_none_or(|old| old.epoch != a.epoch))
            .map(|(&id, _)| id)
            .collect();
        for id in &held {
            new.remove(id);
        }
        held
    }
}

struct Shared {
    opts: AgentOptions,
    client: Client,
    state: Mutex<State>,
    changed: Notify,
    /// Fences so far (raised each time the agent fences itself): the
    /// assignments' long-poll takes the whole state again after one, and is
    /// cut short by one, so
    /// the jobs the service still places here start again as soon as it
    /// answers (not when a poll sent before the fence times out, up to
    /// `poll_s` later; the service may keep the session when the
    /// heartbeats that queued while it was unreachable arrive in time).
    fenced: tokio::sync::watch::Sender<u64>,
    /// One re-registration at a time.
    registering: tokio::sync::Mutex<()>,
    /// Raised each time a job's processes finish stopping: the assignments'
    /// long-poll is cut short, so the service hears it at once and starts
    /// the job's next placement (`ledger::handover`).
    stops: tokio::sync::watch::Sender<u64>,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere cannot leave the state half-written in a way
        // that matters more than stopping the agent would.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs an agent until Ctrl-C.
pub async fn run(opts: AgentOptions) -> Result<()> {
    run_until(opts, crate::shutdown_signal()).await
}

/// [`run`] until `stop` completes (the testbed runs agents in-process); the
/// training processes and the socket go with it.
pub async fn run_until(opts: AgentOptions, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    let client = Client::with_ca(&opts.server, &opts.token, opts.ca.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))?;
    // Training processes get the socket's path in their environment and may
    // run in another directory: it must be absolute.
    let mut opts = opts;
    opts.socket =
        std::path::absolute(&opts.socket).with_context(|| format!("the socket path {}", opts.socket.display()))?;
    if opts.socket.exists() {
        // A socket that answers belongs to a running agent: one per node.
        if std::os::unix::net::UnixStream::connect(&opts.socket).is_ok() {
            anyhow::bail!(
                "another agent is serving {} (one agent per node; stop it first, or give --socket)",
                opts.socket.display()
            );
        }
        std::fs::remove_file(&opts.socket)
            .with_context(|| format!("removing stale socket {}", opts.socket.display()))?;
    }
    // A lease left by an earlier agent on this socket has lapsed; this
    // agent's first acknowledged heartbeat writes its own. The ranks that
    // agent left go first.
    let _ = std::fs::remove_file(fence::lease_path(&opts.socket));
    fence::stop_leftovers(&opts.socket, GRACE).await;
    // Marks an earlier agent left for jobs that have since gone.
    if opts.shape_dev.is_some()
        && let Err(e) = run_nft(opts.netns.as_deref(), classes::CLEAR_SCRIPT)
    {
        tracing::warn!("traffic classes cannot be marked here: {e}");
    }
    if let Some(dir) = opts.socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let listener =
        UnixListener::bind(&opts.socket).with_context(|| format!("binding socket {}", opts.socket.display()))?;
    // Only this user (and its group) may speak for the jobs on this node.
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&opts.socket, std::fs::Permissions::from_mode(0o660))
            .with_context(|| format!("restricting {}", opts.socket.display()))?;
    }
    let shared = Arc::new(Shared {
        opts,
        client,
        state: Mutex::new(State::default()),
        changed: Notify::new(),
        fenced: tokio::sync::watch::Sender::new(0),
        registering: tokio::sync::Mutex::new(()),
        stops: tokio::sync::watch::Sender::new(0),
    });
    register(&shared).await;
    tracing::info!(socket = %shared.opts.socket.display(), "agent for {} ready", shared.opts.name);
    let tasks = [
        tokio::spawn(heartbeats(shared.clone())),
        tokio::spawn(poll_assignments(shared.clone())),
        tokio::spawn(flush_reports(shared.clone())),
        tokio::spawn(serve_socket(shared.clone(), listener)),
        tokio::spawn(reap(shared.clone())),
        tokio::spawn(fence_watch(shared.clone())),
        tokio::spawn(ranks::request_restarts(shared.clone())),
    ];
    stop.await;
    for t in tasks {
        t.abort();
    }
    let _ = std::fs::remove_file(&shared.opts.socket);
    let children: Vec<_> = shared.lock().children.drain().flat_map(|(_, c)| c).collect();
    stop_processes(children).await;
    // Its processes are gone: the service may re-queue its jobs now rather
    // than after the time-out, and an agent restarted here registers at once.
    let (host, session, registered) = {
        let s = shared.lock();
        (s.host, s.session, s.registered)
    };
    if registered {
        match tokio::time::timeout(Duration::from_secs(5), shared.client.deregister(host, session)).await {
            Ok(Ok(())) => tracing::info!("deregistered"),
            Ok(Err(e)) => tracing::warn!("deregistering: {e}"),
            Err(_) => tracing::warn!("deregistering: no answer in 5 s"),
        }
    }
    Ok(())
}

/// Seconds between registrations the service refused because another
/// agent holds the node.
const REGISTER_RETRY_S: f64 = 2.0;

/// The part of the service's node time-out after which an agent that has had
/// no heartbeat acknowledged fences itself: it stops its training processes
/// (SIGTERM, then SIGKILL at [`FENCE_KILL`] of the time-out), so they are gone
/// before the service, which counts from the later moment it received that
/// heartbeat, marks the node down and places the jobs elsewhere.
const FENCE_AT: f64 = 0.6;
/// The part of the time-out by which fenced processes are killed.
const FENCE_KILL: f64 = 0.9;

/// Registers until the service accepts (retrying every second).
async fn register(shared: &Shared) {
    let req = RegisterRequest {
        name: shared.opts.name.clone(),
        gpus: shared.opts.gpus,
        nic_gbps: shared.opts.nic_gbps,
        data_addr: shared.opts.data_addr,
    };
    loop {
        let sent_boot = fence::boot_centis();
        match shared.client.register(&req).await {
            Ok(r) => {
                // A lease left by an earlier session has lapsed: ranks
                // started under it would be stopped by their own watchdog.
                if let Some(boot) = sent_boot
                    && r.timeout_s > 0.0
                {
                    fence::renew(&fence::lease_path(&shared.opts.socket), boot, r.timeout_s);
                }
                let mut s = shared.lock();
                s.host = r.host;
                s.session = r.session;
                s.epoch_unix_ms = r.epoch_unix_ms;
                s.heartbeat_s = r.heartbeat_s;
                s.timeout_s = r.timeout_s;
                s.last_ack = Some(std::time::Instant::now());
                // Local GPUs by index, for CUDA_VISIBLE_DEVICES (what the
                // service registered, which is the topology's when asked for 0).
                let gpus = if r.gpus > 0 { r.gpus } else { shared.opts.gpus };
                s.gpu_jobs.resize(gpus as usize, Vec::new());
                s.registered = true;
                tracing::info!(host = r.host, session = r.session, "registered");
                return;
            }
            Err(e @ ClientError::Api { status: 401 | 403 | 404 | 422, .. }) => {
                tracing::error!("registration refused: {e}; retrying in 5 s");
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
            // Another live agent holds this node (or it cannot shrink now):
            // one agent per node, so this one waits, starting nothing.
            Err(e @ ClientError::Api { status: 409, .. }) => {
                tracing::error!("registration refused: {e}; retrying in {REGISTER_RETRY_S} s");
                tokio::time::sleep(Duration::from_secs_f64(REGISTER_RETRY_S)).await;
            }
            Err(e) => {
                tracing::warn!("registering: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// A 409 means the service no longer knows this session (the node was
/// marked down, or another agent registered the host): register again; the
/// next assignments say what still runs here. Several tasks may hear the
/// refusal of one session; only the first registers again.
async fn on_stale(shared: &Shared, session: u64, e: &ClientError) -> bool {
    if e.status() == Some(409) {
        let _one = shared.registering.lock().await;
        if shared.lock().session == session {
            tracing::warn!("session refused ({e}); registering again");
            shared.lock().registered = false;
            register(shared).await;
        }
        true
    } else {
        false
    }
}

async fn heartbeats(shared: Arc<Shared>) {
    loop {
        let (host, session, every) = {
            let s = shared.lock();
            (s.host, s.session, s.heartbeat_s)
        };
        let sent = shared.opts.host_unix_us();
        let sent_at = std::time::Instant::now();
        let sent_boot = fence::boot_centis();
        let answer = shared.client.heartbeat(host, session).await;
        if answer.is_ok() {
            let acked = {
                let mut s = shared.lock();
                (s.session == session).then(|| {
                    let lapsed = s.lease_too_short();
                    s.last_ack = Some(s.last_ack.map_or(sent_at, |t| t.max(sent_at)));
                    (s.timeout_s, lapsed)
                })
            };
            // The ranks' own fence moves with the agent's (fence.rs).
            if let (Some((timeout, _)), Some(boot)) = (acked, sent_boot)
                && timeout > 0.0
            {
                fence::renew(&fence::lease_path(&shared.opts.socket), boot, timeout);
            }
            // Back from a lapse: the jobs held back while it lasted start
            // now, under the renewed lease (the assignments are taken whole
            // again, as after a fence). The first answer after a partition
            // can be for a heartbeat sent during it, whose lease is short:
            // then the next one's does this.
            if acked.is_some_and(|(_, lapsed)| lapsed) {
                shared.fenced.send_modify(|n| *n += 1);
            }
        }
        match answer {
            Ok(a) if a.received_unix_us > 0 && a.sent_unix_us > 0 => {
                let received = shared.opts.host_unix_us();
                let e = crate::clock::Exchange {
                    sent,
                    server_received: a.received_unix_us,
                    server_sent: a.sent_unix_us,
                    received,
                };
                let mut s = shared.lock();
                let before = s.clock.estimate();
                s.clock.record(e);
                if before.is_none()
                    && let Some((theta, bound)) = s.clock.estimate()
                {
                    tracing::info!(
                        offset_ms = theta as f64 / 1e3,
                        within_ms = bound as f64 / 1e3,
                        "clock offset to the service"
                    );
                }
            }
            Ok(_) => {}
            Err(e) => {
                if !on_stale(&shared, session, &e).await {
                    tracing::warn!("heartbeat: {e}");
                }
            }
        }
        // As often as the service asks (a fifth of its time-out, at most 1 s).
        tokio::time::sleep(Duration::from_secs_f64(if every > 0.0 { every.clamp(0.05, 1.0) } else { 0.5 })).await;
    }
}

/// Self-fencing: when no heartbeat has been acknowledged for [`FENCE_AT`]
/// of the service's time-out (a partition, or the service gone), the agent
/// stops every training process here, since the service is about to place
/// those jobs elsewhere; no rank may run twice. When the service answers
/// again the assignments say what still runs here, and it starts again
/// (from its checkpoint).
async fn fence_watch(shared: Arc<Shared>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (silent, timeout, busy) = {
            let s = shared.lock();
            (s.last_ack.map(|t| t.elapsed().as_secs_f64()), s.timeout_s, !s.children.is_empty() || !s.jobs.is_empty())
        };
        let Some(silent) = silent else { continue };
        if timeout > 0.0 && busy && silent > FENCE_AT * timeout {
            tracing::error!(
                "no heartbeat acknowledged for {silent:.1} s (the service marks a node down after {timeout} s): \
                 stopping this node's training processes"
            );
            let children: Vec<(JobId, Vec<Worker>)> = {
                let mut s = shared.lock();
                let ids: Vec<(JobId, u64, u64)> =
                    s.jobs.values().map(|a| (a.job, a.epoch, a.target_iterations)).collect();
                let spanning: Vec<(JobId, u64)> = s
                    .jobs
                    .values()
                    .filter(|a| ranks::spans_other_hosts(a, &shared.opts.name))
                    .map(|a| (a.job, a.epoch))
                    .collect();
                for key in spanning {
                    s.broken.entry(key).or_insert(None);
                }
                for (id, epoch, target_iterations) in ids {
                    let why = "fenced: this node lost the service".to_string();
                    s.gone.insert(id, Left { epoch, why, target_iterations });
                    s.release_gpus(id);
                }
                s.jobs.clear();
                shared.fenced.send_modify(|n| *n += 1);
                let keys: Vec<(JobId, u64)> = s.children.keys().copied().collect();
                keys.into_iter().filter_map(|k| s.take_to_stop(k).map(|c| (k.0, c))).collect()
            };
            shared.changed.notify_waiters();
            let grace = Duration::from_secs_f64(((FENCE_KILL - FENCE_AT) * timeout).max(0.1)).min(GRACE);
            stop_and_tell(shared.clone(), children, grace).await;
        }
    }
}

async fn poll_assignments(shared: Arc<Shared>) {
    let mut after = 0u64;
    let mut session = 0u64;
    let mut fences = 0u64;
    let mut fence_seen = shared.fenced.subscribe();
    let mut stops_seen = shared.stops.subscribe();
    let mut held = handover::Held::default();
    loop {
        let fenced = *fence_seen.borrow_and_update();
        let (host, current) = {
            let s = shared.lock();
            (s.host, s.session)
        };
        if current != session || fenced != fences {
            after = 0; // a new session, or fenced: take the whole state again
            session = current;
            fences = fenced;
        }
        stops_seen.borrow_and_update();
        let stopping = shared.lock().stopping_jobs();
        // An assignment held for processes here that have stopped since:
        // take the whole state again, so it starts.
        if held.stopping_here.iter().any(|j| !stopping.contains(j)) {
            after = 0;
            held.stopping_here.clear();
        }
        let poll = AssignmentsPoll { session, after, wait_s: shared.opts.poll_s, stopping, held: held.waiting.len() };
        let answer = tokio::select! {
            a = shared.client.assignments(host, &poll) => a,
            // Fenced while polling: ask again for the whole state.
            _ = fence_seen.changed() => continue,
            // A job's processes stopped: say so at once.
            _ = stops_seen.changed() => continue,
        };
        match answer {
            Ok(a) => {
                after = a.version;
                held = apply_assignments(&shared, a.jobs);
            }
            Err(e) => {
                if !on_stale(&shared, session, &e).await {
                    tracing::warn!("assignments: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

/// Starts what is new, stops what left, updates the rest; what it held
/// back because ranks of the job still stop here or elsewhere.
fn apply_assignments(shared: &Arc<Shared>, jobs: Vec<Assignment>) -> handover::Held {
    let mut s = shared.lock();
    let new: HashMap<JobId, Assignment> = jobs.into_iter().map(|a| (a.job, a)).collect();
    let left: Vec<(JobId, u64, u64)> = s
        .jobs
        .iter()
        .filter(|(id, a)| new.get(id).is_none_or(|n| n.epoch != a.epoch))
        .map(|(&id, a)| (id, a.epoch, a.target_iterations))
        .collect();
    for (id, epoch, target_iterations) in left {
        let why = if s.done.contains(&id) { "finished" } else { "withdrawn (preempted, cancelled or finished)" };
        s.gone.insert(id, Left { epoch, why: why.to_string(), target_iterations });
        if let Some(children) = s.take_to_stop((id, epoch)) {
            tokio::spawn(stop_and_tell(shared.clone(), vec![(id, children)], GRACE));
        }
        s.release_gpus(id);
        tracing::info!(job = id, epoch, "job left this node: {why}");
    }
    // While no heartbeat has been acknowledged past the fence point (a
    // standby's copy can still answer), ranks started now would be stopped
    // at once by their own watchdog, whose lease has lapsed, and nothing
    // would start them again: new jobs wait for the next acknowledged
    // heartbeat, which takes the assignments again. Found by `orrery bench
    // chaos` (issue 71): after a partition, ranks started so died within a
    // second and their jobs held their GPUs for good.
    let mut new = new;
    for id in s.hold_back_while_lapsed(&mut new) {
        tracing::info!(job = id, "not starting the job until a heartbeat is acknowledged");
    }
    // At most one process per rank: a placement starts once every host of
    // the job's earlier ones has stopped their ranks, and this one its own.
    let held = s.hold_back_until_handed_over(&mut new);
    for a in &held.waiting {
        tracing::info!(
            job = a.job,
            epoch = a.epoch,
            "not starting the job until {} stop its earlier ranks",
            a.waiting_on.join(", ")
        );
    }
    for id in &held.stopping_here {
        tracing::info!(job = id, "not starting the job until its processes here have stopped");
    }
    for (id, a) in &new {
        let fresh = s.jobs.get(id).is_none_or(|old| old.epoch != a.epoch);
        if fresh && s.broken.contains_key(&(*id, a.epoch)) {
            tracing::info!(
                job = id,
                epoch = a.epoch,
                "not starting this node's ranks alone (the job's ranks elsewhere ran on without them): \
                 the whole job starts again"
            );
        } else if fresh {
            tracing::info!(job = id, epoch = a.epoch, gpus = a.gpus, ranks = ?a.ranks, "job placed here");
            s.gone.remove(id);
            s.done.remove(id);
            s.release_gpus(*id);
            let gpus = s.take_gpus(*id, a.gpus);
            if let Some(cmd) = shared.opts.exec.clone() {
                let children = launch(&shared.opts, &s, a, &cmd, &gpus);
                s.children.insert((*id, a.epoch), children);
            }
        }
    }
    s.jobs = new;
    let o = &shared.opts;
    let tc = o.shape_dev.as_ref().map(|dev| throttle_commands(&mut s, o.netns.as_deref(), dev, o.rate_scale, &o.name));
    let st = &mut *s;
    let marks = o.shape_dev.as_ref().map(|_| classes::mark_scripts(&mut st.marked, st.jobs.values(), &o.name));
    drop(s);
    shared.changed.notify_waiters();
    for args in tc.into_iter().flatten() {
        run_tc(&args);
    }
    for script in marks.into_iter().flatten() {
        match run_nft(o.netns.as_deref(), &script) {
            Ok(()) => tracing::info!("nft: {}", script.lines().last().unwrap_or_default()),
            Err(e) => tracing::error!("{e}"),
        }
    }
    held
}

/// The htb class of a throttled job on the shaped device (minor ids from
/// 0x100), and the priority of its filters (one per job, so they go together).
fn throttle_class(job: JobId) -> (u32, u32) {
    (0x100 + (job % 0xfe00) as u32, 10 + (job % 60_000) as u32)
}

/// A throttle installed on the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shaped {
    epoch: u64,
    rate_bps: u64,
}

/// tc commands that bring the device's throttle classes in line with the
/// `Throttle`s in force. A job's traffic is the packets to the data ports
/// ([`crate::api::worker_port`]) of its ring successors on other hosts,
/// matched by u32 on the destination port (one filter per successor). The
/// cap is per flow (the policy's unit), so the job's class gets the cap times
/// those flows. O(jobs here · ranks).
fn throttle_commands(s: &mut State, netns: Option<&str>, dev: &str, scale: f64, host: &str) -> Vec<Vec<String>> {
    let ns: Vec<String> = netns.map(|n| vec!["-n".to_string(), n.to_string()]).unwrap_or_default();
    let cmd = |args: &[&str]| -> Vec<String> { ns.iter().cloned().chain(args.iter().map(|a| a.to_string())).collect() };
    let mut want: HashMap<JobId, (Shaped, Vec<u16>)> = HashMap::new();
    for a in s.jobs.values() {
        let Some(g) = a.in_force.throttle_gbps.filter(|g| g.is_finite() && *g > 0.0) else { continue };
        let ports = successor_ports(a, host);
        let rate_bps = (g * 1e9 * scale * ports.len().max(1) as f64).round().max(8_000.0) as u64;
        want.insert(a.job, (Shaped { epoch: a.epoch, rate_bps }, ports));
    }
    let mut out = Vec::new();
    let stale: Vec<JobId> = s
        .shaped
        .iter()
        .filter(|(j, old)| want.get(j).is_none_or(|w| w.0.epoch != old.epoch))
        .map(|(&j, _)| j)
        .collect();
    for job in stale {
        s.shaped.remove(&job);
        let (class, prio) = throttle_class(job);
        out.push(cmd(&["filter", "del", "dev", dev, "parent", "1:", "protocol", "ip", "prio", &prio.to_string()]));
        out.push(cmd(&["class", "del", "dev", dev, "classid", &format!("1:{class:x}")]));
    }
    for (job, (shaped, ports)) in want {
        let old = s.shaped.insert(job, shaped);
        if old == Some(shaped) {
            continue;
        }
        // The filters go in once; a new rate replaces the class alone.
        let ports = if old.is_none() { ports.as_slice() } else { &[] };
        out.extend(throttle_class_commands(netns, dev, job, shaped.rate_bps, ports));
    }
    out
}

/// The data ports ([`crate::api::worker_port`]) of the ring successors, on
/// other hosts, of a job's ranks here: the destination ports of the job's
/// packets that leave this host. O(ranks here).
fn successor_ports(a: &Assignment, host: &str) -> Vec<u16> {
    let n = a.workers.len().max(1);
    a.ranks
        .iter()
        .map(|&r| (r as usize + 1) % n)
        .filter(|&next| a.workers.get(next).is_some_and(|w| w != host))
        .map(|next| crate::api::worker_port(a.job, next as u32))
        .collect()
}

/// tc commands (arguments after `tc`) that cap job `job`'s packets on
/// `dev` (inside `netns`) at `rate_bps` on the wire: its htb class under the
/// device's root class `1:1`, rate and ceiling alike (bursts of a millisecond
/// of the rate: [`throttle_burst_bytes`]), created or replaced,
/// and, for each of `ports`, a u32 filter sending packets to that
/// destination port into the class. The node agent enforces `Throttle`s
/// with exactly these; `orrery testbed throttle` measures them. O(ports).
pub fn throttle_class_commands(
    netns: Option<&str>,
    dev: &str,
    job: JobId,
    rate_bps: u64,
    ports: &[u16],
) -> Vec<Vec<String>> {
    let ns: Vec<String> = netns.map(|n| vec!["-n".to_string(), n.to_string()]).unwrap_or_default();
    let cmd = |args: &[&str]| -> Vec<String> { ns.iter().cloned().chain(args.iter().map(|a| a.to_string())).collect() };
    let (class, prio) = throttle_class(job);
    let (class, rate, prio) = (format!("1:{class:x}"), format!("{rate_bps}bit"), prio.to_string());
    let burst = format!("{}b", throttle_burst_bytes(rate_bps));
    let mut out = vec![cmd(&[
        "class", "replace", "dev", dev, "parent", "1:1", "classid", &class, "htb", "rate", &rate, "ceil", &rate,
        "burst", &burst, "cburst", &burst, "quantum", "60000",
    ])];
    for port in ports {
        let port = port.to_string();
        out.push(cmd(&[
            "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", &prio, "u32", "match", "ip",
            "dport", &port, "0xffff", "classid", &class,
        ]));
    }
    out
}

/// The bytes a throttle's htb class may send at once: a millisecond of its
/// rate, never under two full frames. tc's default burst is one timer tick
/// of the rate (tc-htb(8)); where the kernel's timers fire late, as on a
/// loaded virtual machine, a class that may only send a tick's worth falls
/// behind its rate. `orrery testbed throttle` at 500 Mbit/s on a 2-core VM
/// (2026-12-02): 0.83-0.96 of the payload rate with the default burst in
/// six runs, 0.987-1.000 with this one in five.
fn throttle_burst_bytes(rate_bps: u64) -> u64 {
    (rate_bps / 8 / 1000).max(2 * 1514)
}

fn run_tc(args: &[String]) {
    match std::process::Command::new("tc").args(args).output() {
        Ok(o) if o.status.success() => tracing::info!("tc {}", args.join(" ")),
        Ok(o) => tracing::error!("tc {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => tracing::error!("tc {}: {e}", args.join(" ")),
    }
}

/// Opens the report log for appending, with its header when it is new.
fn open_report_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
    if f.metadata()?.len() == 0 {
        writeln!(f, "{REPORT_LOG_HEADER}")?;
    }
    Ok(f)
}

async fn flush_reports(shared: Arc<Shared>) {
    let mut log =
        shared.opts.report_log.as_deref().and_then(|p| {
            open_report_log(p).inspect_err(|e| tracing::warn!("the report log {}: {e}", p.display())).ok()
        });
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (host, session, reports) = {
            let mut s = shared.lock();
            if s.reports.is_empty() || !s.registered {
                continue;
            }
            (s.host, s.session, std::mem::take(&mut s.reports))
        };
        let (sent_us, t) = (crate::clock::unix_us(), std::time::Instant::now());
        let answer = shared.client.reports(host, &Reports { session, reports: reports.clone() }).await;
        if let Some(f) = log.as_mut() {
            use std::io::Write;
            let outcome = match &answer {
                Ok(_) => "ok",
                Err(crate::client::ClientError::Api { .. }) => "refused",
                Err(_) => "failed",
            };
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if let Err(e) = writeln!(f, "{},{ms:.3},{},{outcome}", sent_us / 1000, reports.len()) {
                tracing::warn!("the report log: {e}; no more lines");
                log = None;
            }
        }
        match answer {
            Ok(r) => {
                for (job, why) in r.refused {
                    tracing::info!(job, "report refused: {why}");
                }
            }
            Err(e) => {
                if !on_stale(&shared, session, &e).await {
                    tracing::warn!("reports: {e}; keeping them for the next try");
                    let mut s = shared.lock();
                    let mut all = reports;
                    all.append(&mut s.reports);
                    s.reports = all;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{MAX_RANK_RESTARTS, State, restart_backoff, throttle_commands};
    use std::time::Duration;

    #[test]
    fn a_failed_process_waits_twice_as_long_each_time_and_at_most_thirty_seconds() {
        let waits: Vec<u64> = (0..MAX_RANK_RESTARTS).map(|n| restart_backoff(n).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16]);
        assert_eq!(restart_backoff(40), Duration::from_secs(30));
    }

    /// Job `id` in epoch 1, running, one rank on one GPU of h0.
    pub(super) fn assignment(id: usize) -> crate::api::Assignment {
        crate::api::Assignment {
            job: id,
            name: format!("j{id}"),
            epoch: 1,
            status: crate::api::JobStatus::Running,
            gpus: 1,
            ranks: vec![0],
            workers: vec!["h0".into()],
            worker_addrs: Vec::new(),
            shape: Default::default(),
            period_ms: 100.0,
            compute_ms: 50.0,
            iterations_done: 0,
            target_iterations: 10,
            in_force: Default::default(),
            waiting_on: Vec::new(),
        }
    }

    #[test]
    fn jobs_get_distinct_gpus_until_they_share() {
        let mut s = State { gpu_jobs: vec![Vec::new(); 4], ..State::default() };
        assert_eq!(s.take_gpus(0, 2), vec![0, 1]);
        assert_eq!(s.take_gpus(1, 1), vec![2]);
        // Four GPUs held by three: a shared job goes to the free one, then the least shared.
        assert_eq!(s.take_gpus(2, 2), vec![3, 0]);
        s.release_gpus(0);
        assert_eq!(s.take_gpus(3, 1), vec![1]);
    }

    /// Found by `orrery bench chaos` (issue 71): after a partition, a
    /// standby's copy answered the assignments while no heartbeat was
    /// acknowledged, and the ranks the agent started were stopped within a
    /// second by their own watchdog (the lease had lapsed); nothing started
    /// them again. Then, with that fixed, ranks started on the answer to a
    /// heartbeat sent during the partition, whose lease ran out 0.3 s later,
    /// before the next answer renewed it. New jobs wait while the lease
    /// has less than a heartbeat's interval and half a second left; the
    /// ones running stay (the fence stops them).
    #[test]
    fn no_job_starts_under_a_lease_about_to_run_out() {
        use crate::api::Assignment;
        use std::collections::HashMap;
        use std::time::{Duration, Instant};
        let job = |id: usize, epoch: u64| Assignment { epoch, ..assignment(id) };
        let assigned = || -> HashMap<usize, Assignment> { [(1, job(1, 1)), (2, job(2, 1)), (3, job(3, 2))].into() };
        // Job 1 runs here; job 3 ran here in epoch 1 and was moved back in epoch 2.
        let mut s = State { timeout_s: 5.0, heartbeat_s: 1.0, ..State::default() };
        s.jobs = [(1, job(1, 1)), (3, job(3, 1))].into();
        let since = |secs: f64| Instant::now().checked_sub(Duration::from_secs_f64(secs));
        // The lease runs 0.6 × 5 = 3 s from a heartbeat's sending; ranks
        // start with more than 1 + 0.5 s of it left.
        s.last_ack = since(1.2);
        let mut new = assigned();
        assert!(!s.lease_too_short());
        assert_eq!(s.hold_back_while_lapsed(&mut new), Vec::<usize>::new());
        assert_eq!(new.len(), 3);
        for ago in [1.8, 2.9, 3.2] {
            s.last_ack = since(ago);
            let mut new = assigned();
            assert!(s.lease_too_short(), "acknowledged {ago} s ago");
            let mut held = s.hold_back_while_lapsed(&mut new);
            held.sort_unstable();
            assert_eq!(held, vec![2, 3]);
            assert_eq!(new.keys().copied().collect::<Vec<_>>(), vec![1]);
        }
        // A short time-out (2 s: a 1.2-s lease, heartbeats every 0.4 s):
        // the margin is half the lease, so a heartbeat on time holds nothing.
        let mut short = State { timeout_s: 2.0, heartbeat_s: 0.4, ..State::default() };
        short.last_ack = since(0.45);
        assert!(!short.lease_too_short());
        short.last_ack = since(0.7);
        assert!(short.lease_too_short());
        // Never acknowledged (not registered yet): nothing to lapse.
        s.last_ack = None;
        assert!(!s.lease_too_short());
    }

    #[test]
    fn throttles_become_one_htb_class_per_job_and_go_away_with_it() {
        use crate::api::{Assignment, InForce};
        let job = |id: usize, throttle: Option<f64>| Assignment {
            gpus: 2,
            ranks: vec![0, 1],
            workers: vec!["h0".into(), "h0".into(), "h1".into()],
            in_force: InForce { throttle_gbps: throttle, ..InForce::default() },
            ..assignment(id)
        };
        let mut s = State::default();
        s.jobs.insert(7, job(7, Some(10.0)));
        s.jobs.insert(8, job(8, None));
        // Ranks 0 and 1 on h0; only rank 1's ring successor (rank 2, on h1,
        // port 20000 + 16·7 + 2) is elsewhere: one flow leaves, capped at
        // 10 Gbit/s x 0.01 = 100 Mbit/s.
        let cmds = throttle_commands(&mut s, Some("orr-h0"), "eth0", 0.01, "h0");
        let text: Vec<String> = cmds.iter().map(|c| c.join(" ")).collect();
        assert_eq!(
            text,
            vec![
                "-n orr-h0 class replace dev eth0 parent 1:1 classid 1:107 htb rate 100000000bit ceil 100000000bit \
                 burst 12500b cburst 12500b quantum 60000",
                "-n orr-h0 filter add dev eth0 parent 1: protocol ip prio 17 u32 match ip dport 20114 0xffff classid 1:107",
            ]
        );
        // Unchanged: nothing to do. Lifted: the filter and the class go.
        assert!(throttle_commands(&mut s, Some("orr-h0"), "eth0", 0.01, "h0").is_empty());
        s.jobs.insert(7, job(7, None));
        let text: Vec<String> =
            throttle_commands(&mut s, None, "eth0", 0.01, "h0").iter().map(|c| c.join(" ")).collect();
        assert_eq!(text, vec!["filter del dev eth0 parent 1: protocol ip prio 17", "class del dev eth0 classid 1:107"]);
    }
}
