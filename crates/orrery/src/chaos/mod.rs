//! `orrery bench chaos` (issue 71): the highly available service, a
//! 3-member etcd and node agents running real `orrery worker` jobs, each
//! in a network namespace of its own on one bridge, under a seeded nemesis
//! (partitions, one-way cuts, bridges, paused and killed processes, a
//! host's clock jumping a minute or drifting, a full etcd disk, lost and
//! delayed packets, a crashed training process), with the
//! run's history checked against the service's invariants
//! (`orrery_serve::history`) at the end, as etcd's robustness tests and
//! Jepsen check theirs.
//!
//! What is recorded: every submission a client saw acknowledged, every log
//! read along the way (from the leader through the client, and from each
//! replica's own copy), the final log and job list, and the training
//! processes /proc showed under each agent. After each fault ends, the time
//! until every job that ran before it runs again (an iteration beyond what
//! the first read after the fault showed, or finished) is its recovery;
//! every acknowledged job must finish once the faults are over.

mod cluster;
mod delay;
mod faults;
mod latency;
mod many;
mod nemesis;
mod net;
mod usage;
mod watch;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args as ClapArgs;
use cluster::{Cluster, SERVE_PORT};
use nemesis::{Fault, Member, Planned, Shape, Windows};
use orrery_serve::api::{DriverEvent, JobInfo, JobStatus, LogEntry, Logged};
use orrery_serve::client::Client;
use orrery_serve::history::{History, Violation};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `orrery bench chaos` options.
#[derive(ClapArgs, Debug)]
pub struct ChaosArgs {
    /// Length of the run, s (faults stop 20 s before its end; under 150 s,
    /// every window is about half as long, 12 s at the end).
    #[arg(long, default_value_t = 300.0, value_parser = crate::numbers::seconds_up_to_a_day)]
    seconds: f64,
    /// The nemesis' seed: one seed, one schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fault kinds: `all`, or some of partition, one-way, bridge, pause,
    /// kill, clock, disk-full, loss, delay, drift, crash.
    #[arg(long, default_value = "all")]
    faults: String,
    /// Jobs submitted over the run, at even intervals (ResNet-50 on one
    /// GPU and VGG16 on two, in turn).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    jobs: u64,
    /// After the run, wait at most this long for every acknowledged job to
    /// finish (the faults are over: a job that does not is stuck), s.
    #[arg(long, default_value_t = 180.0, value_parser = crate::numbers::seconds_up_to_a_day)]
    drain_s: f64,
    /// Iterations of each job.
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    iterations: u64,
    /// Keep the run's folder (logs of every process, the workers' CSVs,
    /// report.json) here; a temporary folder otherwise.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Size of each etcd member's data disk (a tmpfs), MiB: the default
    /// holds a 5-minute run's log; a soak of thousands of jobs needs ~1024.
    #[arg(long, default_value_t = cluster::ETCD_DISK_MIB, value_parser = clap::value_parser!(u64).range(128..=16_384))]
    etcd_disk_mib: u64,
    /// The replicas forget a job this long after it ended (`orrery serve
    /// --keep-finished`): a run sees expiries under faults, and a soak's
    /// memory holds the last minutes' jobs, not all of them.
    #[arg(long, default_value = "60s", value_parser = crate::numbers::duration_s)]
    keep_finished: f64,
    /// Run this many seeds, from `--seed` on, each a run of its own with
    /// these flags into `--out`/seed-N, and summarise them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    runs: u64,
    /// With `--runs`: how many at once (each has its own network; a run
    /// uses about a twentieth of a core here).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=32))]
    parallel: u64,
    /// Run nothing: summarise the runs in DIR (its seed-N/report.json).
    #[arg(long, value_name = "DIR", conflicts_with = "runs")]
    summarize: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Set by SIGINT or SIGTERM: the run stops and cleans up (its namespaces,
/// mounts and processes) instead of dying with them left behind.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Sets [`INTERRUPTED`] on SIGINT or SIGTERM.
fn catch_signals() {
    std::thread::spawn(|| {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
                return;
            };
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            INTERRUPTED.store(true, Ordering::SeqCst);
        });
    });
}

/// The cluster's shape: demo's 4 hosts of 2 GPUs, 2 replicas, 3 etcd members.
const SHAPE: Shape = Shape { etcd: 3, replicas: 2, agents: 4 };

/// One fault as it ran.
#[derive(Debug, Serialize)]
pub struct Ran {
    /// When it began, s from the start.
    pub at_s: f64,
    /// How long it lasted, s.
    pub for_s: f64,
    /// Its kind.
    pub kind: &'static str,
    /// What exactly.
    pub fault: Fault,
    /// From its end until every job that ran before it ran again, s;
    /// `None` if that did not happen before the next fault (or the end).
    pub recovery_s: Option<f64>,
    /// Jobs that ran before it.
    pub jobs_running: usize,
}

/// Recovery per kind.
#[derive(Debug, Serialize)]
pub struct Recovery {
    /// Faults of the kind.
    pub faults: usize,
    /// Median recovery, s.
    pub median_s: f64,
    /// Longest, s.
    pub max_s: f64,
    /// Faults after which the jobs did not all run again in time.
    pub not_recovered: usize,
}

/// What the run checked and measured.
#[derive(Debug, Serialize)]
pub struct ChaosReport {
    /// The seed.
    pub seed: u64,
    /// Length, s.
    pub seconds: f64,
    /// Faults, in order.
    pub faults: Vec<Ran>,
    /// Recovery per kind.
    pub recovery: BTreeMap<&'static str, Recovery>,
    /// Submissions acknowledged.
    pub acknowledged: usize,
    /// Jobs present at the end.
    pub present: usize,
    /// Acknowledged jobs that finished (the whole history's `Finished`
    /// entries: some have expired since).
    pub finished: usize,
    /// Jobs the service forgot once they had ended (`--keep-finished`).
    #[serde(default)]
    pub expired: usize,
    /// Committed log entries at the end.
    pub log_entries: usize,
    /// Logs read along the way, each the entries new since the source's
    /// last read (each checked against the final log where it starts).
    pub logs_read: usize,
    /// Training processes started (as /proc showed them).
    pub process_starts: usize,
    /// Processes that exited by themselves and were started again, per member.
    pub restarts: BTreeMap<String, usize>,
    /// Invariants broken, each with its window of history.
    pub violations: Vec<String>,
    /// Acknowledged jobs not finished when the drain ended, with their
    /// state: each a job the faults left stuck (liveness, beside the
    /// history's safety invariants).
    pub unfinished: Vec<String>,
    /// Memory and open files of each etcd member, replica and agent over
    /// the run after the warm-up (its last process's life), sampled every 5 s.
    pub resources: Vec<usage::Usage>,
    /// The agents' report round trips outside the fault windows.
    pub report_round_trips: latency::RoundTrips,
}

/// The replica whose `/v1/readyz` answers 200 (the leader), if one does.
fn leading_replica(rt: &tokio::runtime::Runtime, http: &reqwest::Client, cluster: &Cluster) -> Option<usize> {
    (0..SHAPE.replicas).find(|&i| {
        let url = format!("https://{}:{SERVE_PORT}/v1/readyz", cluster.net.ip(Member::Replica(i)));
        rt.block_on(async { http.get(url).send().await }).is_ok_and(|r| r.status() == 200)
    })
}

/// The jobs the service lists, through `c`, within `limit`.
fn jobs(rt: &tokio::runtime::Runtime, c: &Client, limit: Duration) -> Option<Vec<JobInfo>> {
    rt.block_on(async { tokio::time::timeout(limit, c.jobs(None)).await.ok()?.ok() })
}

/// (status, iterations done) of the running jobs and of each of `also`
/// (asked one by one: a soak's list of every job would be thousands),
/// within `limit`.
fn status_of(
    rt: &tokio::runtime::Runtime,
    c: &Client,
    also: impl Iterator<Item = usize>,
    limit: Duration,
) -> Option<BTreeMap<usize, (JobStatus, u64)>> {
    rt.block_on(async {
        tokio::time::timeout(limit, async {
            let mut out: BTreeMap<usize, (JobStatus, u64)> = BTreeMap::new();
            for j in c.jobs(Some("running")).await.ok()? {
                out.insert(j.id, (j.status, j.iterations_done));
            }
            for id in also.collect::<Vec<_>>() {
                if let std::collections::btree_map::Entry::Vacant(slot) = out.entry(id) {
                    match c.job(&id.to_string()).await {
                        Ok(j) => slot.insert((j.status, j.iterations_done)),
                        // Forgotten (`--keep-finished`): it ended.
                        Err(e) if e.status() == Some(404) => slot.insert((JobStatus::Finished, u64::MAX)),
                        Err(_) => return None,
                    };
                }
            }
            Some(out)
        })
        .await
        .ok()?
    })
}

/// (job, iterations done) of the running jobs.
fn running(jobs: &[JobInfo]) -> BTreeMap<usize, u64> {
    jobs.iter().filter(|j| j.status == JobStatus::Running).map(|j| (j.id, j.iterations_done)).collect()
}

/// Reads what is new in every replica's own copy of the log and in the
/// leader's: from each source the entries after the last seq read from it
/// (`since`, one per source), so a run keeps O(log) entries, not
/// O(log · reads).
fn read_logs(
    rt: &tokio::runtime::Runtime,
    sources: &[&Client],
    since: &mut [u64],
    limit: Duration,
) -> Vec<Vec<LogEntry>> {
    let mut out = Vec::new();
    for (c, since) in sources.iter().zip(since.iter_mut()) {
        let read = rt.block_on(async { tokio::time::timeout(limit, c.decisions(*since)).await.ok()?.ok() });
        if let Some(entries) = read.filter(|e| !e.is_empty()) {
            *since = entries.last().map_or(*since, |e| e.seq);
            out.push(entries);
        }
    }
    out
}

/// A subnet no other run's control network holds (its device `och{N}0`
/// is absent), from one this process's id picks. O(200).
fn free_subnet() -> Option<u8> {
    let first = std::process::id() % 200;
    (0..200).map(|k| ((first + k) % 200) as u8 + 20).find(|n| !Path::new(&format!("/sys/class/net/och{n}0")).exists())
}

/// Runs the benchmark.
pub fn run(args: &ChaosArgs) -> Result<ChaosReport> {
    if let Some(why) = net::unavailable() {
        bail!("orrery bench chaos needs network namespaces and nftables: {why}");
    }
    if let Some(why) = orrery_serve::store::testing::unavailable() {
        bail!("orrery bench chaos needs etcd: {why}");
    }
    let kinds = nemesis::parse_kinds(&args.faults).map_err(|e| anyhow!(e))?;
    let windows = Windows::for_run(args.seconds);
    if args.seconds < windows.warm_up_s + windows.final_quiet_s + windows.fault_s.0 {
        bail!(
            "--seconds {}: a run needs at least {} s",
            args.seconds,
            windows.warm_up_s + windows.final_quiet_s + windows.fault_s.0
        );
    }
    let plan = nemesis::schedule(args.seed, args.seconds, &kinds, SHAPE, windows);
    catch_signals();
    let tmp = tempfile::tempdir()?;
    let dir = args.out.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    // One /24 per run: runs at once do not share addresses or names.
    let subnet = free_subnet().context("every chaos subnet (20–219) is taken: are 200 runs going?")?;
    let mut cluster = Cluster::start(&dir, SHAPE, subnet, args.etcd_disk_mib, args.keep_finished)?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let servers = cluster.servers(SHAPE);
    // Every replica keeps the tokens the store holds; the leader's files
    // are the settled ones.
    let t_up = Instant::now();
    let http = orrery_serve::tls::client_builder(Some(&cluster.ca()))?.timeout(Duration::from_millis(500)).build()?;
    let token_dir = loop {
        cluster.supervise()?;
        if let Some(i) = leading_replica(&rt, &http, &cluster) {
            break dir.join(format!("replica{i}"));
        }
        if t_up.elapsed() > Duration::from_secs(60) {
            bail!("no replica led within 60 s (logs in {})", dir.join("logs").display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let user_token = orrery_serve::auth::read_token(&token_dir.join("user.token"))?;
    cluster.start_agents(SHAPE, &token_dir.join("agent.token"))?;
    let err = |e: orrery_serve::client::ClientError| anyhow!("{e}");
    let ca = cluster.ca();
    // One client per thread: a client's pooled connections are driven by
    // the runtime that opened them, and a thread's runtime runs only while
    // that thread waits on it (shared, a request could hang on a
    // connection whose runtime sleeps).
    let client = || Client::with_ca(&servers, &user_token, Some(&ca)).map_err(err);
    let (users, submitting, reading) = (client()?, client()?, client()?);
    let each: Vec<Client> = (0..SHAPE.replicas)
        .map(|i| {
            let url = format!("https://{}:{SERVE_PORT}", cluster.net.ip(Member::Replica(i)));
            Client::with_ca(&url, &user_token, Some(&ca))
        })
        .collect::<Result<_, _>>()
        .map_err(err)?;
    // Every node up before the clock starts.
    loop {
        cluster.supervise()?;
        let nodes = rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), users.nodes()).await });
        if nodes.is_ok_and(|n| n.is_ok_and(|n| n.iter().filter(|n| n.up).count() == SHAPE.agents)) {
            break;
        }
        if t_up.elapsed() > Duration::from_secs(90) {
            bail!("the agents did not all register within 90 s (logs in {})", dir.join("logs").display());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let sockets: Vec<PathBuf> = (0..SHAPE.agents).map(|i| cluster.socket(i)).collect();
    let (t0, t0_unix_ms) = (Instant::now(), orrery_serve::clock::unix_us() as f64 / 1e3);
    let stop = AtomicBool::new(false);
    let acked: Mutex<Vec<(String, usize)>> = Mutex::new(Vec::new());
    let logs_read: Mutex<Vec<Vec<LogEntry>>> = Mutex::new(Vec::new());
    let submit_until = args.seconds - windows.final_quiet_s;
    let mut seen = Seen::default();
    let processes = std::thread::scope(|scope| -> Result<_> {
        let watcher =
            scope.spawn(|| orrery_serve::history::watch::watch(&sockets, t0, Duration::from_millis(100), &stop));
        // Jobs at even intervals; a submission a fault holds up is sent
        // again (same id) until acknowledged or refused as known.
        let submitter = scope.spawn(|| -> Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            for k in 0..args.jobs {
                let at = 2.0 + (submit_until - 2.0) * k as f64 / args.jobs.max(1) as f64;
                while t0.elapsed().as_secs_f64() < at && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let spec: orrery_model::JobSpec = serde_json::from_value(serde_json::json!({
                    "id": format!("chaos-{k}"), "model": if k % 2 == 0 { "resnet50" } else { "vgg16" },
                    "batch": 32, "workers": 1 + k % 2, "work": {"iterations": args.iterations},
                    "arrival_s": 0, "priority": "low"
                }))?;
                while !stop.load(Ordering::SeqCst) {
                    let r = rt.block_on(async {
                        tokio::time::timeout(Duration::from_secs(10), submitting.submit(&spec)).await
                    });
                    match r {
                        Ok(Ok(s)) => {
                            acked.lock().map_err(|_| anyhow!("lock"))?.push((spec.id.clone(), s.id));
                            break;
                        }
                        Ok(Err(e)) if e.to_string().contains("already") => break,
                        _ => std::thread::sleep(Duration::from_millis(500)),
                    }
                }
            }
            Ok(())
        });
        let reader = scope.spawn(|| {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().ok();
            let sources: Vec<&Client> = each.iter().chain([&reading]).collect();
            let mut since = vec![0; sources.len()];
            while let Some(rt) = rt.as_ref().filter(|_| !stop.load(Ordering::SeqCst)) {
                let logs = read_logs(rt, &sources, &mut since, Duration::from_secs(3));
                if let Ok(mut l) = logs_read.lock() {
                    l.extend(logs);
                }
                for _ in 0..50 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        let outcome = nemesis_loop(args, &plan, &mut cluster, &rt, &users, t0, &mut seen)
            .and_then(|()| drain(args, &mut cluster, &rt, &users, &acked));
        stop.store(true, Ordering::SeqCst);
        let _ = reader.join();
        let submitted = submitter.join().map_err(|_| anyhow!("the submitter panicked"))?;
        let processes = watcher.join().map_err(|_| anyhow!("the watcher panicked"))?;
        outcome?;
        submitted?;
        Ok(processes)
    })?;
    // The final state is the leader's: a standby's copy is up to a follow
    // (250 ms) behind, and a log read before may have seen more than it.
    let until = Instant::now() + Duration::from_secs(10);
    let leader = loop {
        cluster.supervise()?;
        match leading_replica(&rt, &http, &cluster) {
            Some(i) => break &each[i],
            None if Instant::now() >= until => break &users,
            None => std::thread::sleep(Duration::from_millis(100)),
        }
    };
    let present = jobs(&rt, leader, Duration::from_secs(30)).context("the final job list")?;
    let log = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(30), leader.decisions(0)).await })
        .map_err(|_| anyhow!("the final log: timed out"))?
        .map_err(err)?;
    let acked = acked.into_inner().map_err(|_| anyhow!("lock"))?;
    let logs_read = logs_read.into_inner().map_err(|_| anyhow!("lock"))?;
    let history = History {
        acknowledged: acked.clone(),
        present: present.iter().map(|j| (j.spec.id.clone(), j.id, j.spec.workers * j.spec.gpus_per_worker)).collect(),
        log: log.clone(),
        logs_read: logs_read.clone(),
        processes: processes.clone(),
    };
    let violations: Vec<Violation> = orrery_serve::history::check(&history);
    let whole = orrery_serve::history::merged(&history);
    let finished: std::collections::BTreeSet<usize> = whole
        .iter()
        .filter_map(|e| match &e.entry {
            Logged::Event(DriverEvent::Finished { job }) => Some(*job),
            _ => None,
        })
        .collect();
    let expired: usize = whole
        .iter()
        .map(|e| match &e.entry {
            Logged::Event(DriverEvent::Expired { jobs, .. }) => jobs.len(),
            _ => 0,
        })
        .sum();
    let mut by_kind: BTreeMap<&'static str, Vec<Option<f64>>> = BTreeMap::new();
    for r in &seen.ran {
        by_kind.entry(r.kind).or_default().push(r.recovery_s);
    }
    let recovery = by_kind
        .into_iter()
        .map(|(k, v)| {
            let done: Vec<f64> = v.iter().flatten().copied().collect();
            let r = Recovery {
                faults: v.len(),
                median_s: crate::failover::median(&done),
                max_s: done.iter().copied().fold(0.0, f64::max),
                not_recovered: v.len() - done.len(),
            };
            (k, r)
        })
        .collect();
    // A fault's window ends when the loop (every 100 ms) healed it.
    let windows_ms: Vec<(f64, f64)> =
        seen.ran.iter().map(|r| (t0_unix_ms + r.at_s * 1e3, t0_unix_ms + (r.at_s + r.for_s + 0.2) * 1e3)).collect();
    let batches: Vec<latency::Batch> = (0..SHAPE.agents).flat_map(|i| latency::read(&cluster.report_log(i))).collect();
    let report = ChaosReport {
        report_round_trips: latency::outside(&batches, &windows_ms),
        seed: args.seed,
        seconds: args.seconds,
        faults: seen.ran,
        recovery,
        acknowledged: acked.len(),
        present: present.len(),
        finished: acked.iter().filter(|a| finished.contains(&a.1)).count(),
        expired,
        log_entries: log.len(),
        logs_read: logs_read.len(),
        process_starts: processes.iter().filter(|p| p.started).count(),
        restarts: cluster.procs.iter().map(|p| (p.member.to_string(), p.restarts)).collect(),
        resources: seen
            .samples
            .iter()
            .filter_map(|(m, s)| usage::summarize(&m.to_string(), s, windows.warm_up_s))
            .collect(),
        violations: violations.iter().map(ToString::to_string).collect(),
        unfinished: present
            .iter()
            .filter(|j| j.status != JobStatus::Finished && acked.iter().any(|a| a.1 == j.id))
            .map(|j| {
                format!(
                    "{} ({}): {:?}, {} of {} iterations, epoch {}, on {:?}",
                    j.spec.id, j.id, j.status, j.iterations_done, j.target_iterations, j.epoch, j.hosts
                )
            })
            .collect(),
    };
    std::fs::write(dir.join("report.json"), serde_json::to_string_pretty(&report)?)?;
    let samples: Vec<(String, Vec<usage::Sample>)> =
        seen.samples.iter().map(|(m, s)| (m.to_string(), s.clone())).collect();
    usage::figures(&dir, &samples).context("the resource figures")?;
    usage::write_csv(&dir.join("resources.csv"), &samples).context("resources.csv")?;
    let processes: Vec<serde_json::Value> = history
        .processes
        .iter()
        .map(
            |p| serde_json::json!({"at_s": p.at_s, "host": p.host, "job": p.job, "rank": p.rank, "started": p.started}),
        )
        .collect();
    std::fs::write(
        dir.join("history.json"),
        serde_json::to_string(&serde_json::json!({"acknowledged": history.acknowledged, "processes": processes}))?,
    )?;
    std::fs::write(
        dir.join("log.json"),
        serde_json::to_string(&whole.iter().map(|e| &e.entry).collect::<Vec<&Logged>>())?,
    )?;
    cluster.stop();
    Ok(report)
}

/// Waits until every acknowledged job has finished, or
/// `--drain-s` has passed, starting exited processes meanwhile.
fn drain(
    args: &ChaosArgs,
    cluster: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    users: &Client,
    acked: &Mutex<Vec<(String, usize)>>,
) -> Result<()> {
    let until = Instant::now() + Duration::from_secs_f64(args.drain_s);
    loop {
        cluster.supervise()?;
        let ids: Vec<usize> = acked.lock().map_err(|_| anyhow!("lock"))?.iter().map(|a| a.1).collect();
        if let Some(list) = jobs(rt, users, Duration::from_secs(3)) {
            // A job no longer listed ended and expired (the history's
            // check tells one lost from one forgotten).
            let finished = |id: &usize| list.iter().all(|j| j.id != *id || j.status == JobStatus::Finished);
            if ids.iter().all(finished) {
                return Ok(());
            }
        }
        if Instant::now() >= until || INTERRUPTED.load(Ordering::SeqCst) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Appends a line to the run's nemesis.log, stamped with the wall clock
/// (the processes' logs are).
fn note(cluster: &Cluster, line: &str) {
    use std::io::Write;
    let at = orrery_serve::clock::unix_us() as f64 / 1e6;
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(cluster.dir.join("nemesis.log")) {
        let _ = writeln!(f, "{at:.3} {line}");
    }
}

/// What the nemesis loop saw: the faults as they ran, and the processes'
/// resource samples.
#[derive(Default)]
struct Seen {
    ran: Vec<Ran>,
    samples: BTreeMap<Member, Vec<usage::Sample>>,
}

/// The time after a fault, until every job that ran before it runs again.
struct Recovering {
    /// When the fault ended, s from the start.
    healed_s: f64,
    /// (job, iterations done) of the jobs running before it.
    ran_before: BTreeMap<usize, u64>,
    /// Iterations done of every job at the first read after it.
    first_read: Option<BTreeMap<usize, u64>>,
}

/// Runs the schedule: each fault at its time, healed at its end, the
/// recovery after it timed; exited processes started again all along.
fn nemesis_loop(
    args: &ChaosArgs,
    plan: &[Planned],
    cluster: &mut Cluster,
    rt: &tokio::runtime::Runtime,
    users: &Client,
    t0: Instant,
    seen: &mut Seen,
) -> Result<()> {
    let mut next = 0;
    let mut active: Option<usize> = None;
    let mut recovering: Option<Recovering> = None;
    let mut before: BTreeMap<usize, u64> = BTreeMap::new();
    let mut last_read = 0.0;
    let mut last_sample = f64::NEG_INFINITY;
    // When the active fault began, s from the start.
    let mut started_s = 0.0;
    loop {
        let now = t0.elapsed().as_secs_f64();
        if now - last_sample >= 5.0 {
            last_sample = now;
            for p in &cluster.procs {
                if let Some(pid) = p.pid()
                    && let Some((rss_kib, fds)) = usage::read(pid)
                {
                    seen.samples.entry(p.member).or_default().push(usage::Sample { at_s: now, pid, rss_kib, fds });
                }
            }
        }
        if now >= args.seconds {
            return Ok(());
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            bail!("interrupted at {now:.1} s; the cluster is being taken down");
        }
        cluster.supervise()?;
        if let Some(i) = active {
            faults::drift(cluster, &plan[i].fault, now - started_s)?;
        }
        if let Some(i) = active
            && now >= plan[i].at_s + plan[i].for_s
        {
            faults::heal(cluster, &plan[i].fault).with_context(|| format!("healing {:?}", plan[i].fault))?;
            note(cluster, &format!("t={now:.2} s: healed"));
            recovering = Some(Recovering { healed_s: now, ran_before: std::mem::take(&mut before), first_read: None });
            active = None;
        }
        if active.is_none() && next < plan.len() && now >= plan[next].at_s {
            let p = &plan[next];
            let t = Instant::now();
            let r =
                rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), users.jobs(Some("running"))).await });
            let list = match r {
                Ok(Ok(l)) => Some(l),
                Ok(Err(e)) => {
                    note(cluster, &format!("t={now:.2} s: the job list: {e} after {:?}", t.elapsed()));
                    None
                }
                Err(_) => {
                    note(cluster, &format!("t={now:.2} s: the job list did not come within 3 s ({:?})", t.elapsed()));
                    None
                }
            };
            before = list.map(|j| running(&j)).unwrap_or_default();
            // A fault still recovering from stays at None: not in time.
            recovering = None;
            faults::apply(cluster, &p.fault).with_context(|| format!("applying {:?}", p.fault))?;
            note(cluster, &format!("t={now:.2} s: {} {}", p.fault.kind(), serde_json::to_string(&p.fault)?));
            seen.ran.push(Ran {
                at_s: now,
                for_s: p.for_s,
                kind: p.fault.kind(),
                fault: p.fault.clone(),
                recovery_s: None,
                jobs_running: before.len(),
            });
            active = Some(next);
            started_s = now;
            next += 1;
        }
        if let Some(Recovering { healed_s, ran_before, first_read }) = recovering.as_mut()
            && now - last_read >= 0.25
        {
            last_read = now;
            if let Some(status) = status_of(rt, users, ran_before.keys().copied(), Duration::from_secs(2)) {
                match first_read {
                    None => *first_read = Some(status.iter().map(|(&id, &(_, n))| (id, n)).collect()),
                    Some(first) => {
                        let again = ran_before.keys().all(|id| match status.get(id) {
                            Some((JobStatus::Finished, _)) => true,
                            Some((JobStatus::Running, n)) => first.get(id).is_none_or(|f| n > f),
                            _ => false,
                        });
                        if again {
                            if let Some(r) = seen.ran.last_mut() {
                                r.recovery_s = Some(now - *healed_s);
                            }
                            recovering = None;
                        }
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--runs`/`--summarize`: prints the summary (JSON with `--json`), writes
/// it to summary.json, and fails if any run broke an invariant, left a job
/// stuck or ended without a report.
fn many_runs(args: &ChaosArgs) -> Result<()> {
    let summary = match (&args.summarize, &args.out) {
        (Some(dir), _) => many::summarize(dir)?,
        (None, Some(out)) => {
            catch_signals();
            let per_run: Vec<String> = [
                ("--seconds", args.seconds.to_string()),
                ("--faults", args.faults.clone()),
                ("--jobs", args.jobs.to_string()),
                ("--drain-s", args.drain_s.to_string()),
                ("--iterations", args.iterations.to_string()),
                ("--etcd-disk-mib", args.etcd_disk_mib.to_string()),
                ("--keep-finished", format!("{}s", args.keep_finished)),
            ]
            .into_iter()
            .flat_map(|(k, v)| [k.to_string(), v])
            .collect();
            let s = many::run_many(args.seed, args.runs, args.parallel, &per_run, out)?;
            std::fs::write(out.join("summary.json"), serde_json::to_string_pretty(&s)?)?;
            s
        }
        (None, None) => bail!("--runs: give --out DIR for the runs' folders"),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        many::print(&summary);
    }
    if summary.violations > 0 || summary.unfinished > 0 || !summary.without_report.is_empty() {
        bail!(
            "{} invariant(s) broken, {} job(s) stuck, {} run(s) without a report",
            summary.violations,
            summary.unfinished,
            summary.without_report.len()
        );
    }
    Ok(())
}

/// `orrery bench chaos`: runs and prints.
pub fn bench(args: &ChaosArgs) -> Result<()> {
    if args.runs > 1 || args.summarize.is_some() {
        return many_runs(args);
    }
    let r = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "chaos run of {:.0} s, seed {}: {} faults; {} jobs acknowledged, {} present, {} finished, {} expired; {} log entries, {} logs read; {} training processes started",
            r.seconds,
            r.seed,
            r.faults.len(),
            r.acknowledged,
            r.present,
            r.finished,
            r.expired,
            r.log_entries,
            r.logs_read,
            r.process_starts
        );
        println!("{:<10} {:>6} {:>12} {:>10} {:>14}", "fault", "count", "recovery p50", "max", "not recovered");
        for (k, v) in &r.recovery {
            println!("{k:<10} {:>6} {:>11.1}s {:>9.1}s {:>14}", v.faults, v.median_s, v.max_s, v.not_recovered);
        }
        println!("invariants broken: {}", r.violations.len());
        for v in &r.violations {
            println!("  {v}");
        }
        println!("{:<10} {:>8} {:>22} {:>16}", "process", "samples", "resident MiB first/last", "fds first/last");
        for u in &r.resources {
            println!(
                "{:<10} {:>8} {:>13.1} / {:<7.1} {:>8} / {:<6}",
                u.member, u.samples, u.rss_mib_first, u.rss_mib_last, u.fds_first, u.fds_last
            );
        }
        let rt = &r.report_round_trips;
        println!(
            "report round trips outside the faults: {} of {} batches, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {} not answered",
            rt.outside_faults, rt.batches, rt.p50_ms, rt.p99_ms, rt.max_ms, rt.not_ok_outside_faults
        );
        println!("jobs not finished {:.0} s after the run: {}", args.drain_s, r.unfinished.len());
        for u in &r.unfinished {
            println!("  {u}");
        }
    }
    if !r.violations.is_empty() || !r.unfinished.is_empty() {
        bail!("{} invariant(s) broken, {} job(s) stuck after the faults", r.violations.len(), r.unfinished.len());
    }
    Ok(())
}
