//! `orrery bench failover`: the high-availability service (issue 40) under
//! submission load while its leader is killed again and again.
//!
//! It starts a 3-member etcd on loopback (Debian's `etcd`), two or three
//! replicas of `orrery serve --store etcd://...` as child processes, and
//! registers the hosts of a leaf-spine. Submitter threads send the first jobs
//! of a trace through the client that follows the leader; meanwhile the
//! leader is SIGKILLed `--kills` times (and restarted as a standby), and one
//! etcd member is killed halfway. It then checks what an operator relies on
//! and reports it: the time from each kill until another replica leads
//! (answers `/v1/readyz`, its state rebuilt), every acknowledged job present
//! exactly once with its id, each log read before a kill (the leader's and
//! each standby's copy) a prefix of the final log, no GPU held twice, and no running job preempted.

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use orrery_policy::Decision;
use orrery_serve::api::{DriverEvent, LogEntry, Logged, RegisterRequest};
use orrery_serve::client::Client;
use orrery_serve::history::{History, count};
use orrery_serve::store::testing::{EtcdCluster, unavailable};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `orrery bench failover` options.
#[derive(ClapArgs, Debug)]
pub struct FailoverArgs {
    /// SIGKILLs of the leader.
    #[arg(long, default_value_t = 10)]
    kills: usize,
    /// Replicas of the service (2 or 3).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=3))]
    replicas: u8,
    /// Jobs to submit, the first of the trace.
    #[arg(long, default_value_t = 2000)]
    jobs: usize,
    /// Submitting threads.
    #[arg(long, default_value_t = 8)]
    threads: usize,
    /// The leader's lease, s.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i64).range(2..=60))]
    lease_s: i64,
    /// Time between a new leader and the next kill, ms.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Jobs come from this trace (any format `orrery trace` reads).
    #[arg(long, default_value = "data/philly/philly_jobs_pollux.csv")]
    trace: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// What the run measured and checked.
#[derive(Debug, Serialize)]
pub struct FailoverReport {
    /// Leader kills.
    pub kills: usize,
    /// From each kill until another replica led, s.
    pub takeover_s: Vec<f64>,
    /// Median of `takeover_s`.
    pub takeover_s_median: f64,
    /// Max of `takeover_s`.
    pub takeover_s_max: f64,
    /// Submissions acknowledged.
    pub acknowledged: usize,
    /// Jobs the final leader has.
    pub jobs_present: usize,
    /// Acknowledged jobs missing or with another id.
    pub lost_or_renumbered: usize,
    /// Spec ids present more than once.
    pub duplicates: usize,
    /// Logs read before a kill (the leader's, and each standby's copy) that
    /// are not a prefix of the final log.
    pub logs_not_a_prefix: usize,
    /// Of the logs read before kills, how many were standbys' copies.
    pub standby_logs: usize,
    /// Placements that took a GPU already held.
    pub gpus_held_twice: usize,
    /// Preemptions and nodes marked down in the log (none happen when
    /// failovers leave running jobs alone).
    pub preemptions: usize,
    /// Committed log entries at the end.
    pub log_entries: usize,
    /// Placements among them.
    pub placements: usize,
    /// Acknowledged submissions per second over the whole run, failovers included.
    pub submissions_per_s: f64,
    /// etcd members killed during the run (one of three).
    pub etcd_members_killed: usize,
}

/// A replica process, killed when dropped.
struct Replica {
    child: Option<Child>,
    port: u16,
    args: Vec<String>,
}

impl Replica {
    fn start(exe: &Path, store: &str, dir: &Path, lease_s: i64) -> Result<Replica> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let args = [
            "serve",
            "--policy",
            "fifo",
            "--topology",
            "leaf-spine",
            "--node-timeout-s",
            "600",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data",
            &dir.display().to_string(),
            "--store",
            store,
            "--lease-s",
            &lease_s.to_string(),
        ]
        .map(String::from)
        .to_vec();
        let mut r = Replica { child: None, port, args };
        r.restart(exe)?;
        Ok(r)
    }

    fn restart(&mut self, exe: &Path) -> Result<()> {
        self.kill();
        let mut child = Command::new(exe)
            .args(&self.args)
            .env("RUST_LOG", "error")
            .stdout(Stdio::piped())
            .spawn()
            .context("starting a replica")?;
        let mut out = std::io::BufReader::new(child.stdout.take().context("replica stdout")?);
        let mut first = String::new();
        out.read_line(&mut first)?;
        if !first.starts_with("orrery replica listening") {
            bail!("the replica did not start: {first:?}");
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        self.child = Some(child);
        Ok(())
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The replica answering `/v1/readyz` with 200, waiting up to `limit`.
fn leader(rt: &tokio::runtime::Runtime, replicas: &[Replica], limit: Duration) -> Result<usize> {
    let http = orrery_serve::tls::client_builder(None)?.timeout(Duration::from_millis(300)).build()?;
    let t = Instant::now();
    loop {
        for (i, r) in replicas.iter().enumerate() {
            let ok = rt.block_on(async { http.get(format!("{}/v1/readyz", r.url())).send().await });
            if ok.is_ok_and(|r| r.status() == 200) {
                return Ok(i);
            }
        }
        if t.elapsed() > limit {
            bail!("no replica led within {:.0} s", limit.as_secs_f64());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The upper median (0 for none). O(n log n).
pub(crate) fn median(xs: &[f64]) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() { 0.0 } else { v[v.len() / 2] }
}

/// Runs the benchmark.
pub fn run(args: &FailoverArgs) -> Result<FailoverReport> {
    if let Some(why) = unavailable() {
        bail!("orrery bench failover needs etcd: {why}");
    }
    let exe = std::env::current_exe()?;
    let mut etcd = EtcdCluster::start(3)?;
    let store = etcd.url("bench-failover");
    let dirs: Vec<tempfile::TempDir> = (0..args.replicas).map(|_| tempfile::tempdir()).collect::<Result<_, _>>()?;
    let mut replicas: Vec<Replica> =
        dirs.iter().map(|d| Replica::start(&exe, &store, d.path(), args.lease_s)).collect::<Result<_>>()?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let limit = Duration::from_secs(30);
    let first = leader(&rt, &replicas, limit)?;
    let servers: Vec<String> = replicas.iter().map(Replica::url).collect();
    let servers = servers.join(",");
    let token = |f: &str| orrery_serve::auth::read_token(&dirs[first].path().join(f));
    let err = |e: orrery_serve::client::ClientError| anyhow::anyhow!("{e}");
    let agents = Client::new(&servers, &token("agent.token")?).map_err(err)?;
    let user_token = token("user.token")?;
    let users = Client::new(&servers, &user_token).map_err(err)?;
    let topo = orrery_model::setups::by_name("leaf-spine").context("leaf-spine")?;
    for (h, host) in topo.hosts.iter().enumerate() {
        let req = RegisterRequest {
            name: host.name.clone(),
            gpus: host.gpus,
            nic_gbps: topo.host_nic_gbps(h),
            data_addr: None,
        };
        rt.block_on(agents.register(&req)).map_err(err)?;
    }
    let (_, parsed) = orrery_trace::formats::read_file(&args.trace, None, 1);
    let mut jobs: Vec<orrery_model::JobSpec> = parsed.items.into_iter().take(args.jobs).collect();
    if jobs.is_empty() {
        bail!("{}: no jobs read", args.trace.display());
    }
    for j in &mut jobs {
        j.arrival_s = 0.0;
        j.depends_on.clear();
    }
    let acked: std::sync::Mutex<BTreeMap<String, usize>> = std::sync::Mutex::new(BTreeMap::new());
    let conflicts = std::sync::atomic::AtomicUsize::new(0);
    let mut logs_before: Vec<Vec<LogEntry>> = Vec::new();
    let mut takeover_s = Vec::new();
    let mut etcd_members_killed = 0;
    let mut standby_logs = 0;
    let t0 = Instant::now();
    let per_thread = jobs.len().div_ceil(args.threads.max(1));
    let outcome: Result<()> = std::thread::scope(|scope| {
        let mut submitters = Vec::new();
        for chunk in jobs.chunks(per_thread) {
            let (acked, users, conflicts) = (&acked, &users, &conflicts);
            submitters.push(scope.spawn(move || -> Result<()> {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
                for spec in chunk {
                    let s = rt.block_on(users.submit(spec)).map_err(|e| anyhow::anyhow!("{}: {e}", spec.id))?;
                    let mut a = acked.lock().map_err(|_| anyhow::anyhow!("lock"))?;
                    if a.insert(spec.id.clone(), s.id).is_some_and(|old| old != s.id) {
                        conflicts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                Ok(())
            }));
        }
        let mut lead = first;
        for kill in 0..args.kills {
            std::thread::sleep(Duration::from_millis(args.interval_ms));
            if kill == args.kills / 2 {
                etcd.kill(2);
                etcd_members_killed += 1;
            }
            logs_before.push(rt.block_on(users.decisions(0)).map_err(err)?);
            // And each standby's own copy of the log.
            for (i, r) in replicas.iter().enumerate().filter(|(i, r)| *i != lead && r.child.is_some()) {
                let standby = Client::new(&r.url(), &user_token).map_err(err)?;
                match rt.block_on(standby.decisions(0)) {
                    Ok(log) => {
                        logs_before.push(log);
                        standby_logs += 1;
                    }
                    Err(e) => eprintln!("replica {i}'s log: {e}"),
                }
            }
            let t = Instant::now();
            replicas[lead].kill();
            lead = leader(&rt, &replicas, limit)?;
            takeover_s.push(t.elapsed().as_secs_f64());
            for r in replicas.iter_mut().filter(|r| r.child.is_none()) {
                r.restart(&exe)?;
            }
        }
        for s in submitters {
            s.join().map_err(|_| anyhow::anyhow!("a submitter panicked"))??;
        }
        Ok(())
    });
    outcome?;
    let seconds = t0.elapsed().as_secs_f64();
    let acked = acked.into_inner().map_err(|_| anyhow::anyhow!("lock"))?;
    let present = rt.block_on(users.jobs(None)).map_err(err)?;
    let log = rt.block_on(users.decisions(0)).map_err(err)?;
    // The history's invariants (orrery_serve::history): every acknowledged
    // job present once with its number, every log read a prefix of the
    // final one, no GPU held twice.
    let history = History {
        acknowledged: acked.iter().map(|(name, id)| (name.clone(), *id)).collect(),
        present: present.iter().map(|j| (j.spec.id.clone(), j.id, j.spec.workers * j.spec.gpus_per_worker)).collect(),
        log: log.clone(),
        logs_read: logs_before.clone(),
        processes: Vec::new(),
    };
    let violations = orrery_serve::history::check(&history);
    for v in violations.iter().filter(|v| v.invariant != "never ran") {
        eprintln!("{v}");
    }
    let lost_or_renumbered = count(&violations, "lost") + conflicts.load(std::sync::atomic::Ordering::Relaxed);
    let preemptions = log
        .iter()
        .filter(|e| {
            matches!(e.entry, Logged::Decision(Decision::Preempt { .. }) | Logged::Event(DriverEvent::NodeDown { .. }))
        })
        .count();
    Ok(FailoverReport {
        kills: args.kills,
        takeover_s_median: median(&takeover_s),
        takeover_s_max: takeover_s.iter().copied().fold(0.0, f64::max),
        takeover_s,
        acknowledged: acked.len(),
        jobs_present: present.len(),
        lost_or_renumbered,
        duplicates: count(&violations, "duplicated"),
        logs_not_a_prefix: count(&violations, "not a prefix"),
        standby_logs,
        gpus_held_twice: count(&violations, "gpu held twice") + count(&violations, "placed twice"),
        preemptions,
        log_entries: log.len(),
        placements: log.iter().filter(|e| matches!(e.entry, Logged::Decision(Decision::Place { .. }))).count(),
        submissions_per_s: acked.len() as f64 / seconds,
        etcd_members_killed,
    })
}

/// `orrery bench failover`: runs and prints.
pub fn bench(args: &FailoverArgs) -> Result<()> {
    let r = run(args)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    println!(
        "{} SIGKILLs of the leader ({} replicas on a 3-member etcd, lease {} s, {} submitting threads)",
        r.kills, args.replicas, args.lease_s, args.threads
    );
    println!(
        "  new leader deciding  {:>7.2} s median {:>7.2} s max   (each: {})",
        r.takeover_s_median,
        r.takeover_s_max,
        r.takeover_s.iter().map(|t| format!("{t:.2}")).collect::<Vec<_>>().join(" ")
    );
    println!(
        "  acknowledged jobs    {:>7}   present {}, lost or renumbered {}, duplicated {}",
        r.acknowledged, r.jobs_present, r.lost_or_renumbered, r.duplicates
    );
    println!(
        "  committed log        {:>7}   entries ({} placements); of {} logs read before kills ({} from standbys' copies), not a prefix: {}",
        r.log_entries,
        r.placements,
        r.kills + r.standby_logs,
        r.standby_logs,
        r.logs_not_a_prefix
    );
    println!("  GPUs held twice      {:>7}   preemptions or nodes down: {}", r.gpus_held_twice, r.preemptions);
    println!(
        "  submissions          {:>7.0} /s acknowledged over the run, failovers included; etcd members killed: {}",
        r.submissions_per_s, r.etcd_members_killed
    );
    Ok(())
}
