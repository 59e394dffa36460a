//! Emulated node agents for `orrery bench serve --nodes N`: N agents in one
//! process, each doing over HTTP what a real agent does, against a real
//! `orrery serve`: register, heartbeat as often as the service asks,
//! long-poll its assignments, and report every iteration of the jobs placed
//! on it (batched every 50 ms, as [`crate::node_agent`] does). Nothing runs:
//! an iteration is a timer at the configured rate.
//!
//! Measured: report round trips (p50/p99), heartbeats refused, nodes the
//! service marked down although every agent was alive (read from the
//! decision log), and durable submissions per second while the fleet runs.

use crate::api::{Assignment, IterationReport, LogEntry, Logged, RegisterRequest, Reports};
use crate::client::{Client, ClientError};
use anyhow::{Context, Result, anyhow};
use orrery_model::JobSpec;
use orrery_policy::JobId;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// The service's base URL.
    pub url: String,
    /// The agent token.
    pub agent_token: String,
    /// The user token.
    pub user_token: String,
    /// Host names to register, one emulated agent each.
    pub hosts: Vec<String>,
    /// Jobs submitted before the measured window (they keep the nodes busy).
    pub load: Vec<JobSpec>,
    /// Jobs submitted during the window, to measure durable submissions.
    pub burst: Vec<JobSpec>,
    /// Submissions in flight during the burst.
    pub concurrency: usize,
    /// Iterations per second each placed job runs (and reports).
    pub iterations_per_s: f64,
    /// Length of the measured window, s.
    pub seconds: f64,
    /// The service's process, for its CPU time (Linux `/proc`).
    pub server_pid: Option<u32>,
}

/// What was measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetReport {
    /// Agents registered.
    pub nodes: usize,
    /// Measured window, s.
    pub seconds: f64,
    /// Jobs running at the end of the window.
    pub jobs_running: usize,
    /// Report requests sent in the window (each carries the iterations done
    /// in the last 50 ms).
    pub report_requests: u64,
    /// Iteration reports sent in the window.
    pub iterations_reported: u64,
    /// Reports the service refused.
    pub reports_refused: u64,
    /// Report round trip, ms.
    pub report_ms_p50: f64,
    /// 99th percentile.
    pub report_ms_p99: f64,
    /// Heartbeats sent and refused.
    pub heartbeats: u64,
    /// Refused (a stale session: the service thought the node down).
    pub heartbeats_refused: u64,
    /// `node_down` entries logged in the window while every agent was alive.
    pub false_downs: usize,
    /// Durable submissions per second during the window, with the fleet's
    /// load on the service.
    pub submissions_per_s: f64,
    /// Submit latency, ms.
    pub submit_ms_p99: f64,
    /// The service's CPU time over the window per second of it (1.0 = one
    /// core busy), when its pid was given.
    pub server_cores: Option<f64>,
    /// The same for this process, the emulated fleet (on one machine the two
    /// share its cores).
    pub fleet_cores: Option<f64>,
}

/// CPU seconds a process has used (user + system), from `/proc/PID/stat`,
/// whose times are in USER_HZ = 100 ticks per second on Linux.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (utime, stime): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some((utime + stime) / 100.0)
}

#[derive(Default)]
struct Counters {
    report_requests: AtomicU64,
    iterations: AtomicU64,
    refused: AtomicU64,
    heartbeats: AtomicU64,
    heartbeats_refused: AtomicU64,
}

/// One emulated agent's jobs: when each next iterates, and its progress.
struct Running {
    epoch: u64,
    next_iteration: u64,
    target: u64,
    next_at: Instant,
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() { 0.0 } else { sorted[((sorted.len() - 1) as f64 * q).round() as usize] }
}

fn api(e: ClientError) -> anyhow::Error {
    anyhow!("{e}")
}

/// Runs the fleet (call in a multi-threaded tokio runtime).
pub async fn run(opts: FleetOptions) -> Result<FleetReport> {
    let agent = Client::new(&opts.url, &opts.agent_token).map_err(api)?;
    let user = Client::new(&opts.url, &opts.user_token).map_err(api)?;
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let latencies = Arc::new(std::sync::Mutex::new(Vec::<f64>::new()));
    // Register every node first (as a cluster's agents would be up before
    // its jobs arrive).
    let mut sessions = Vec::new();
    for name in &opts.hosts {
        let req = RegisterRequest { name: name.clone(), gpus: 0, nic_gbps: 0.0, data_addr: None };
        let r = agent.register(&req).await.map_err(api).with_context(|| format!("registering {name}"))?;
        sessions.push(r);
    }
    let mut tasks = Vec::new();
    for r in sessions {
        let ctx = Ctx {
            client: agent.clone(),
            host: r.host,
            session: r.session,
            every: Duration::from_secs_f64(r.heartbeat_s.clamp(0.05, 1.0)),
            period: Duration::from_secs_f64(1.0 / opts.iterations_per_s.max(0.01)),
            epoch_unix_ms: r.epoch_unix_ms,
            counters: counters.clone(),
            stop: stop.clone(),
            measuring: measuring.clone(),
            latencies: latencies.clone(),
        };
        tasks.push(tokio::spawn(heartbeat_loop(ctx.clone())));
        tasks.push(tokio::spawn(node_loop(ctx)));
    }
    submit_all(&user, &opts.load, opts.concurrency).await?;
    // Let placements reach the agents before the window opens.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first_seq = user.cluster().await.map_err(api)?.last_seq;
    let before = Snapshot::take(&counters);
    let cpu0 = opts.server_pid.and_then(cpu_seconds);
    let own0 = cpu_seconds(std::process::id());
    measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let burst = submit_all(&user, &opts.burst, opts.concurrency).await?;
    let left = Duration::from_secs_f64(opts.seconds).saturating_sub(t0.elapsed());
    tokio::time::sleep(left).await;
    measuring.store(false, Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = opts.server_pid.and_then(cpu_seconds);
    let own1 = cpu_seconds(std::process::id());
    let after = Snapshot::take(&counters);
    stop.store(true, Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    let log: Vec<LogEntry> = user.decisions(first_seq).await.map_err(api)?;
    let false_downs =
        log.iter().filter(|e| matches!(e.entry, Logged::Event(crate::api::DriverEvent::NodeDown { .. }))).count();
    let jobs_running = user.cluster().await.map_err(api)?.jobs.get("running").copied().unwrap_or(0);
    let mut lat = latencies.lock().map(|l| l.clone()).unwrap_or_default();
    lat.sort_by(f64::total_cmp);
    Ok(FleetReport {
        nodes: opts.hosts.len(),
        seconds,
        jobs_running,
        report_requests: after.0 - before.0,
        iterations_reported: after.1 - before.1,
        reports_refused: after.2 - before.2,
        report_ms_p50: percentile(&lat, 0.5),
        report_ms_p99: percentile(&lat, 0.99),
        heartbeats: after.3 - before.3,
        heartbeats_refused: after.4 - before.4,
        false_downs,
        submissions_per_s: if burst.seconds > 0.0 { burst.latencies.len() as f64 / burst.seconds } else { 0.0 },
        submit_ms_p99: percentile(&burst.latencies, 0.99),
        server_cores: cpu0.zip(cpu1).map(|(a, b)| (b - a) / seconds),
        fleet_cores: own0.zip(own1).map(|(a, b)| (b - a) / seconds),
    })
}

struct Snapshot(u64, u64, u64, u64, u64);

impl Snapshot {
    fn take(c: &Counters) -> Snapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Snapshot(l(&c.report_requests), l(&c.iterations), l(&c.refused), l(&c.heartbeats), l(&c.heartbeats_refused))
    }
}

struct Burst {
    seconds: f64,
    latencies: Vec<f64>,
}

/// Submits `jobs` with `concurrency` requests in flight; each is committed
/// before its answer.
async fn submit_all(user: &Client, jobs: &[JobSpec], concurrency: usize) -> Result<Burst> {
    let jobs: Arc<Vec<JobSpec>> = Arc::new(jobs.to_vec());
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (user, jobs, next) = (user.clone(), jobs.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            while let Some(spec) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                let t = Instant::now();
                user.submit(spec).await.map_err(|e| anyhow!("job {}: {e}", spec.id))?;
                lat.push(t.elapsed().as_secs_f64() * 1e3);
            }
            anyhow::Ok(lat)
        }));
    }
    let mut latencies = Vec::new();
    for t in tasks {
        latencies.extend(t.await??);
    }
    latencies.sort_by(f64::total_cmp);
    Ok(Burst { seconds: t0.elapsed().as_secs_f64(), latencies })
}

#[derive(Clone)]
struct Ctx {
    client: Client,
    host: usize,
    session: u64,
    every: Duration,
    period: Duration,
    epoch_unix_ms: i64,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    measuring: Arc<AtomicBool>,
    latencies: Arc<std::sync::Mutex<Vec<f64>>>,
}

async fn heartbeat_loop(c: Ctx) {
    while !c.stop.load(Ordering::Relaxed) {
        let r = c.client.heartbeat(c.host, c.session).await;
        if c.measuring.load(Ordering::Relaxed) {
            c.counters.heartbeats.fetch_add(1, Ordering::Relaxed);
            if r.is_err() {
                c.counters.heartbeats_refused.fetch_add(1, Ordering::Relaxed);
            }
        }
        tokio::time::sleep(c.every).await;
    }
}

/// Long-polls the node's assignments in one task and runs its jobs'
/// iterations in this one, reporting every 50 ms.
async fn node_loop(c: Ctx) {
    let (tx, mut rx) = tokio::sync::watch::channel(Vec::<Assignment>::new());
    let poll = {
        let c = c.clone();
        tokio::spawn(async move {
            let mut poll = crate::api::AssignmentsPoll { session: c.session, wait_s: 20.0, ..Default::default() };
            while !c.stop.load(Ordering::Relaxed) {
                match c.client.assignments(c.host, &poll).await {
                    Ok(a) => {
                        // No processes here: what leaves stops at once.
                        poll.after = a.version;
                        poll.held = a.jobs.iter().filter(|j| !j.waiting_on.is_empty()).count();
                        let _ = tx.send(a.jobs.into_iter().filter(|j| j.waiting_on.is_empty()).collect());
                    }
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        })
    };
    let mut jobs: HashMap<JobId, Running> = HashMap::new();
    let mut pending: Vec<IterationReport> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !c.stop.load(Ordering::Relaxed) {
        tokio::select! {
            _ = tick.tick() => {}
            r = rx.changed() => {
                if r.is_err() { break; }
                let now = Instant::now();
                let assigned = rx.borrow_and_update().clone();
                jobs.retain(|id, run| assigned.iter().any(|a| a.job == *id && a.epoch == run.epoch));
                for a in assigned {
                    // Every node of a job reports each of its iterations,
                    // as the agents of its ranks do.
                    if jobs.contains_key(&a.job) {
                        continue;
                    }
                    jobs.insert(a.job, Running {
                        epoch: a.epoch,
                        next_iteration: a.iterations_done + 1,
                        target: a.target_iterations,
                        next_at: now + c.period,
                    });
                }
                continue;
            }
        }
        let now = Instant::now();
        let now_s = (crate::clock::host_unix_us() as f64 / 1e3 - c.epoch_unix_ms as f64) / 1e3;
        for (&job, run) in jobs.iter_mut() {
            while run.next_at <= now && (run.target == 0 || run.next_iteration <= run.target) {
                let ms = c.period.as_secs_f64() * 1e3;
                pending.push(IterationReport {
                    job,
                    epoch: run.epoch,
                    iteration: run.next_iteration,
                    start_s: now_s - ms / 1e3,
                    duration_ms: ms,
                    comm_ms: None,
                    delay_ms: None,
                    done: false,
                });
                run.next_iteration += 1;
                run.next_at += c.period;
            }
        }
        if pending.is_empty() {
            continue;
        }
        let reports = Reports { session: c.session, reports: std::mem::take(&mut pending) };
        let n = reports.reports.len() as u64;
        let t = Instant::now();
        let r = c.client.reports(c.host, &reports).await;
        if c.measuring.load(Ordering::Relaxed) {
            let ms = t.elapsed().as_secs_f64() * 1e3;
            c.counters.report_requests.fetch_add(1, Ordering::Relaxed);
            c.counters.iterations.fetch_add(n, Ordering::Relaxed);
            match r {
                Ok(a) => {
                    c.counters.refused.fetch_add(a.refused.len() as u64, Ordering::Relaxed);
                }
                Err(_) => {
                    c.counters.refused.fetch_add(n, Ordering::Relaxed);
                }
            }
            if let Ok(mut l) = c.latencies.lock() {
                l.push(ms);
            }
        }
    }
    poll.abort();
}
