//! Runs an experiment's workload on a fabric, driven by the real system: the
//! live service ([`orrery_serve::start`]) with the experiment's policy, one
//! node agent per host ([`orrery_serve::node_agent::run_until`]) whose
//! workers are `orrery worker` processes (or real PyTorch DDP ranks,
//! [`Workers::Ddp`]) inside the host's namespace, and the jobs submitted
//! through the HTTP API at their arrival times.
//!
//! Control traffic (HTTP between agents and the service) runs on the root
//! namespace's loopback, a management network; training traffic only inside
//! the fabric. While it runs, the sending end of every link is read once per
//! `sample_s` for its throughput.

use crate::fabric::{Fabric, FabricOptions, HOST_DEV};
use crate::worker::{LOG_HEADER, log_name};
use anyhow::{Context, Result, bail};
use orrery_model::{JobSpec, Topology};
use orrery_serve::api::JobStatus;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the agents start for each worker.
#[derive(Debug, Clone)]
pub enum Workers {
    /// `orrery worker`: the job's modelled shape, compute as a sleep and a
    /// TCP ring all-reduce of its bytes.
    Emulated,
    /// A PyTorch DDP rank (`python/examples/ddp_train.py` or a script that
    /// writes the same logs): real gradients all-reduced by gloo.
    Ddp(DdpWorkers),
}

/// A DDP training script and how to start it.
#[derive(Debug, Clone)]
pub struct DdpWorkers {
    /// Python interpreter with torch.
    pub python: String,
    /// The training script (it takes `--log-dir` and `--checkpoint-dir`).
    pub script: PathBuf,
    /// More arguments to the script.
    pub args: Vec<String>,
}

/// How to run a workload on the testbed.
#[derive(Debug, Clone)]
pub struct DriveOptions {
    /// What the agents start for each worker.
    pub workers: Workers,
    /// The fabric.
    pub fabric: FabricOptions,
    /// Policy name (`orrery policies`, or `pinned` with pins).
    pub policy: String,
    /// Seed of the policy.
    pub seed: u64,
    /// The `orrery` binary the agents start workers with.
    pub orrery: PathBuf,
    /// Folder for the service's database, sockets and worker logs.
    pub dir: PathBuf,
    /// Give up after this long, s.
    pub time_limit_s: f64,
    /// Link throughput sampling period, s.
    pub sample_s: f64,
    /// TCP congestion control of the workers' connections.
    pub congestion_control: String,
    /// Leave this many first iterations of each job out of its times.
    pub warmup: usize,
    /// The policy models links at this fraction of their rate (payload per
    /// byte on the wire, [`crate::fabric::TCP_GOODPUT`]; 1 models frames as
    /// payload). The fabric is shaped at the full rate.
    pub goodput: f64,
    /// Workers compute this many times the model's time (1: the model).
    pub compute_stretch: f64,
    /// Every other host's clock (odd host indices) runs this much ahead of
    /// the service's, ms.
    pub clock_skew_ms: f64,
    /// Submit each job only when every job submitted before it is over, in
    /// arrival order, whatever its arrival time: each runs alone (times
    /// alone on the testbed).
    pub one_at_a_time: bool,
    /// Capture each host's TCP headers with `tcpdump` into `dir/pcap` and
    /// read the run's retransmissions from them ([`crate::capture`]).
    pub pcap: bool,
}

/// One job as the testbed ran it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MeasuredJob {
    /// Spec id.
    pub id: String,
    /// Final status.
    pub status: String,
    /// Hosts (by name) and GPUs.
    pub hosts: Vec<(String, u32)>,
    /// Iteration time alone on its placement, per the model, ms.
    pub isolated_ms: f64,
    /// Rank 0's iteration times (end to end, slot delays included), ms,
    /// after the warm-up iterations.
    pub iteration_ms: Vec<f64>,
    /// Rank 0's communication time in each of those iterations, ms.
    pub comm_ms: Vec<f64>,
    /// Rank 0's compute and communication in each (start to end, slot
    /// delays excluded), ms.
    pub duration_ms: Vec<f64>,
    /// When rank 0 started each, ms on the service's clock since its epoch.
    pub start_ms: Vec<f64>,
    /// The slot delay before each, ms.
    pub delay_ms: Vec<f64>,
    /// When rank 0 was ready for its first iteration (that iteration's
    /// start less the slot delay before it), ms on the service's clock
    /// since its epoch: processes started and the ring connected. A replay
    /// in the simulator starts the job there ([`crate::compare::replayed`]).
    #[serde(default)]
    pub ready_ms: Option<f64>,
    /// Submission to the end, s.
    pub jct_s: Option<f64>,
}

/// Throughput of one directed link over time.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LinkSeries {
    /// Link index.
    pub link: usize,
    /// Sending node.
    pub from: String,
    /// Receiving node.
    pub to: String,
    /// Shaped rate, bit/s.
    pub rate_bps: u64,
    /// (seconds since the start, utilisation of the shaped rate) per sample.
    pub utilisation: Vec<(f64, f64)>,
}

/// What a testbed run measured.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    /// Policy.
    pub policy: String,
    /// Jobs, in workload order.
    pub jobs: Vec<MeasuredJob>,
    /// Links that carried traffic.
    pub links: Vec<LinkSeries>,
    /// Wall-clock length of the run, s.
    pub wall_s: f64,
    /// Warnings from building the fabric.
    pub warnings: Vec<String>,
    /// The service's decision log (its clock: seconds since its epoch).
    pub decisions: Vec<orrery_serve::api::LogEntry>,
    /// The hosts' TCP counters at the run's end, summed (None when they
    /// could not be read).
    #[serde(default)]
    pub tcp: Option<crate::fabric::TcpCounters>,
    /// The retransmissions in the run's packet captures (None without
    /// `--pcap`, or when they could not be read).
    #[serde(default)]
    pub retransmits: Option<crate::capture::Retransmits>,
}

/// Makes `cc` a congestion control a network namespace may take as its
/// default. A namespace other than the machine's may only choose one of
/// How the kernel's `cc` shares a link among flows over `queueing`, for
/// the policy ([`orrery_policy::FlowSharing`]): BBR over a FIFO (tail-drop,
/// or one priority class) holds flows at unequal shares; per-flow fair
/// queues even any congestion control out.
pub fn flow_sharing(cc: &str, queueing: crate::fabric::Queueing) -> orrery_policy::FlowSharing {
    orrery_policy::FlowSharing::of(cc == "bbr", queueing == crate::fabric::Queueing::Fair)
}

/// `tcp_allowed_congestion_control` (the kernel refuses others with an I/O
/// error), and some kernels allow only `reno bbr` while offering `cubic`.
/// One that is available but not allowed is added to the allowed list, and
/// the returned note says so; the list is not narrowed again afterwards,
/// since runs in parallel share it (another may be setting up its
/// namespaces). An error when the kernel does not offer `cc` at all.
pub(crate) fn allow_congestion_control(cc: &str) -> Result<Option<String>> {
    const ALLOWED: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";
    const AVAILABLE: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
    let read = |path: &str| std::fs::read_to_string(path).with_context(|| format!("reading {path}"));
    let allowed = read(ALLOWED)?;
    if allowed.split_whitespace().any(|a| a == cc) {
        return Ok(None);
    }
    let available = read(AVAILABLE)?;
    if !available.split_whitespace().any(|a| a == cc) {
        bail!(
            "congestion control {cc:?}: this kernel offers {} ({AVAILABLE}); load its module or choose one of them",
            available.trim()
        );
    }
    let wider = format!("{} {cc}", allowed.trim());
    std::fs::write(ALLOWED, &wider).with_context(|| format!("adding {cc:?} to {ALLOWED} (needs root)"))?;
    Ok(Some(format!("added {cc} to the machine's allowed TCP congestion controls (was: {})", allowed.trim())))
}

/// Runs `jobs` (with their `pins`) on `topo` built as a fabric; returns what
/// was measured. The fabric and every process are gone when it returns, also
/// on error, Ctrl-C or SIGTERM (which end it with an error).
pub async fn drive(
    topo: &Topology,
    jobs: &[JobSpec],
    pins: &BTreeMap<String, Vec<(usize, u32)>>,
    opts: &DriveOptions,
    mut progress: impl FnMut(&str),
) -> Result<Measured> {
    if !(opts.sample_s.is_finite() && opts.sample_s >= 0.05) {
        bail!("sample_s: expected at least 0.05 s, found {}", opts.sample_s);
    }
    if !(opts.time_limit_s.is_finite() && opts.time_limit_s > 0.0) {
        bail!("time_limit_s: expected a positive number of seconds, found {}", opts.time_limit_s);
    }
    if opts.dir.exists() {
        std::fs::remove_dir_all(&opts.dir).with_context(|| format!("clearing {}", opts.dir.display()))?;
    }
    let logs = opts.dir.join("workers");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    // `mltcp-CC`: the kernel runs CC and MLTCP's principle paces over it:
    // `orrery worker` its own sockets, a DDP script its collectives
    // (`--pace mltcp`, python/orrery/mltcp.py: gloo's sockets are out of
    // reach, so each all-reduce runs as paced chunks).
    let (kernel_cc, _) = crate::mltcp::split_cc(&opts.congestion_control);
    let fabric = Fabric::up(topo, opts.fabric.clone())?;
    progress(&format!("fabric up: {} namespaces", fabric.netns.len()));
    // Every training connection uses the run's congestion control: `orrery
    // worker` sets it on its sockets, but gloo's (DDP ranks) take their
    // namespace's default, which a new namespace inherits from the machine.
    if let Some(note) = allow_congestion_control(kernel_cc)? {
        progress(&note);
    }
    for h in 0..topo.hosts.len() {
        let ns = fabric.host_netns(h);
        let set = format!("echo {} > /proc/sys/net/ipv4/tcp_congestion_control", shell_quote(kernel_cc));
        crate::fabric::run("ip", &["netns", "exec", ns, "sh", "-c", &set])
            .with_context(|| format!("setting {ns}'s default TCP congestion control to {kernel_cc:?}"))?;
    }
    if !(opts.goodput.is_finite() && opts.goodput > 0.0 && opts.goodput <= 1.0) {
        bail!("goodput: expected a fraction in (0, 1], found {}", opts.goodput);
    }
    let modelled = crate::fabric::derated(topo, opts.goodput).map_err(anyhow::Error::msg)?;
    let capture = if opts.pcap {
        let dir = opts.dir.join("pcap");
        let capture = crate::capture::Capture::start(&fabric, topo.hosts.len(), &dir)?;
        progress(&format!("capturing TCP headers into {}", dir.display()));
        Some(capture)
    } else {
        None
    };
    let config = orrery_serve::core::Config {
        policy: opts.policy.clone(),
        seed: opts.seed,
        topology: modelled.clone(),
        node_timeout_s: 10.0,
        heartbeat_s: 1.0,
        fair_share_half_life_s: None,
        keep_finished_s: f64::INFINITY,
        flow_sharing: flow_sharing(kernel_cc, opts.fabric.queueing),
        pins: pins.clone(),
    };
    let service = orrery_serve::start(orrery_serve::ServeOptions {
        config,
        listen: ([127, 0, 0, 1], 0).into(),
        data_dir: opts.dir.join("service"),
        ha: None,
        tls: None,
    })
    .await?;
    let server = format!("http://{}", service.addr);
    let token = |name: &str| orrery_serve::auth::read_token(&opts.dir.join("service").join(name));
    let (agent_token, user_token) = (token("agent.token")?, token("user.token")?);
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut agents = Vec::new();
    for (h, host) in topo.hosts.iter().enumerate() {
        let agent = orrery_serve::node_agent::AgentOptions {
            server: server.clone(),
            token: agent_token.clone(),
            name: host.name.clone(),
            gpus: host.gpus,
            nic_gbps: modelled.host_nic_gbps(h),
            socket: opts.dir.join(format!("agent-{h}.sock")),
            exec: Some(worker_command(opts, &logs)),
            poll_s: 20.0,
            data_addr: Some(fabric.host_addrs[h].into()),
            netns: Some(fabric.host_netns(h).to_string()),
            shape_dev: Some(HOST_DEV.to_string()),
            data_dev: Some(HOST_DEV.to_string()),
            rate_scale: opts.fabric.scale,
            clock_skew_ms: if h % 2 == 1 { opts.clock_skew_ms } else { 0.0 },
            ca: None,
            report_log: None,
        };
        let mut stop = stop_rx.clone();
        agents.push(tokio::spawn(orrery_serve::node_agent::run_until(agent, async move {
            let _ = stop.wait_for(|s| *s).await;
        })));
    }
    let client = orrery_serve::client::Client::new(&server, &user_token).map_err(|e| anyhow::anyhow!("{e}"))?;
    let outcome = watch(&fabric, topo, jobs, &client, opts, &mut progress).await;
    // Read before the fabric goes: the counters live in its namespaces.
    let tcp = fabric.tcp_counters(topo.hosts.len());
    let pcap_files = capture.map(crate::capture::Capture::stop);
    let _ = stop_tx.send(true);
    for a in agents {
        let _ = a.await;
    }
    service.stop();
    // Read off the runtime's threads, once the agents are gone: a run's
    // captures hold millions of packets.
    let retransmits = match pcap_files {
        Some(files) => Some(
            tokio::task::spawn_blocking(move || crate::capture::retransmits_in(&files))
                .await
                .unwrap_or_else(|e| Err(anyhow::anyhow!("reading the packet captures: {e}"))),
        ),
        None => None,
    };
    let Watched { samples, infos, placements, wall_s, decisions, epoch_unix_ms } = outcome?;
    progress("reading the workers' logs");
    let by_spec: BTreeMap<&str, &orrery_serve::api::JobInfo> = infos.iter().map(|j| (j.spec.id.as_str(), j)).collect();
    let mut measured = Vec::new();
    for spec in jobs {
        let info = by_spec.get(spec.id.as_str());
        let mut rows = match info {
            Some(j) => read_cycles(&logs.join(log_name(j.id as u64, 0)))?,
            None => Vec::new(),
        };
        let ready_ms = rows.first().map(|r| r.start_unix_ms - r.delay_ms - epoch_unix_ms as f64);
        rows.drain(..opts.warmup.min(rows.len()));
        measured.push(MeasuredJob {
            id: spec.id.clone(),
            status: info.map_or("never submitted".into(), |j| j.status.name().to_string()),
            hosts: placements.get(&spec.id).cloned().unwrap_or_default(),
            isolated_ms: info.map_or(0.0, |j| j.period_ms),
            iteration_ms: rows.iter().map(|r| r.cycle_ms).collect(),
            comm_ms: rows.iter().map(|r| r.comm_ms).collect(),
            duration_ms: rows.iter().map(|r| r.duration_ms).collect(),
            start_ms: rows.iter().map(|r| r.start_unix_ms - epoch_unix_ms as f64).collect(),
            delay_ms: rows.iter().map(|r| r.delay_ms).collect(),
            ready_ms,
            jct_s: info.and_then(|j| j.ended_s.map(|e| e - j.submitted_s)),
        });
    }
    Ok(Measured {
        policy: opts.policy.clone(),
        tcp: tcp.map_err(|e| progress(&format!("TCP counters not read: {e}"))).ok(),
        retransmits: retransmits
            .transpose()
            .map_err(|e| progress(&format!("packet captures not read: {e:#}")))
            .ok()
            .flatten(),
        jobs: measured,
        links: link_series(topo, &fabric, &samples),
        wall_s,
        warnings: fabric.warnings.clone(),
        decisions,
    })
}

/// The command an agent starts for each worker (`sh -c`).
fn worker_command(opts: &DriveOptions, logs: &Path) -> String {
    match &opts.workers {
        Workers::Emulated => format!(
            "exec {} worker --scale {} --log-dir {} --cc {} --compute-stretch {}",
            shell_quote(&opts.orrery.display().to_string()),
            opts.fabric.scale,
            shell_quote(&logs.display().to_string()),
            shell_quote(&opts.congestion_control),
            opts.compute_stretch
        ),
        // Checkpoints only when a rank stops (the testbed does not preempt);
        // each run starts from scratch in its own folder.
        Workers::Ddp(d) => {
            let mut cmd = format!(
                "exec {} {} --log-dir {} --checkpoint-dir {} --checkpoint-every 0",
                shell_quote(&d.python),
                shell_quote(&d.script.display().to_string()),
                shell_quote(&logs.display().to_string()),
                shell_quote(&opts.dir.join("checkpoints").display().to_string()),
            );
            if crate::mltcp::split_cc(&opts.congestion_control).1 {
                cmd.push_str(" --pace mltcp");
            }
            for a in &d.args {
                cmd.push(' ');
                cmd.push_str(&shell_quote(a));
            }
            cmd
        }
    }
}

/// What watching a run collected.
struct Watched {
    samples: Samples,
    infos: Vec<orrery_serve::api::JobInfo>,
    placements: Placements,
    wall_s: f64,
    decisions: Vec<orrery_serve::api::LogEntry>,
    epoch_unix_ms: i64,
}

type Samples = Vec<(f64, Vec<u64>)>;
/// Spec id → the hosts it last ran on (finished jobs no longer show them).
type Placements = BTreeMap<String, Vec<(String, u32)>>;

/// Submits at arrival times, samples links, and waits until every job is over.
async fn watch(
    fabric: &Fabric,
    topo: &Topology,
    jobs: &[JobSpec],
    client: &orrery_serve::client::Client,
    opts: &DriveOptions,
    progress: &mut impl FnMut(&str),
) -> Result<Watched> {
    // Every agent up before the first job, as in a simulation.
    let start = Instant::now();
    loop {
        let nodes = client.nodes().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        if nodes.iter().filter(|n| n.up).count() == topo.hosts.len() {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!(
                "only {} of {} agents registered within 30 s",
                nodes.iter().filter(|n| n.up).count(),
                topo.hosts.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    progress(&format!("{} agents up; submitting {} jobs", topo.hosts.len(), jobs.len()));
    let mut order: Vec<&JobSpec> = jobs.iter().collect();
    order.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    let t0 = Instant::now();
    let mut next = 0;
    let mut samples: Samples = vec![(0.0, fabric.link_tx_bytes()?)];
    let mut next_sample = opts.sample_s;
    let mut last_check = 0.0;
    let mut placements = Placements::new();
    // One at a time: a job submitted and not yet seen over.
    let mut running = false;
    let stop = orrery_serve::shutdown_signal();
    tokio::pin!(stop);
    loop {
        let now = t0.elapsed().as_secs_f64();
        while next < order.len() && if opts.one_at_a_time { !running } else { order[next].arrival_s <= now } {
            client.submit(order[next]).await.map_err(|e| anyhow::anyhow!("submitting {}: {e}", order[next].id))?;
            next += 1;
            running = true;
        }
        if now >= next_sample {
            samples.push((now, fabric.link_tx_bytes()?));
            next_sample += opts.sample_s;
        }
        if now - last_check >= 0.25 {
            last_check = now;
            let infos = client.jobs(None).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            for j in infos.iter().filter(|j| !j.hosts.is_empty()) {
                placements.insert(j.spec.id.clone(), j.hosts.clone());
            }
            if running && infos.len() == next && infos.iter().all(|j| j.status.is_over()) {
                running = false;
                if opts.one_at_a_time && next < order.len() {
                    progress(&format!("{next}/{} over", order.len()));
                }
            }
            if next == order.len() && infos.iter().all(|j| j.status.is_over()) {
                samples.push((t0.elapsed().as_secs_f64(), fabric.link_tx_bytes()?));
                let done = infos.iter().filter(|j| j.status == JobStatus::Finished).count();
                progress(&format!("{done}/{} jobs finished in {:.1} s", infos.len(), now));
                let decisions = client.decisions(0).await.map_err(|e| anyhow::anyhow!("{e}"))?;
                let epoch_unix_ms = client.cluster().await.map_err(|e| anyhow::anyhow!("{e}"))?.epoch_unix_ms;
                return Ok(Watched { samples, infos, placements, wall_s: now, decisions, epoch_unix_ms });
            }
        }
        if now > opts.time_limit_s {
            bail!("the jobs did not finish within {} s (raise the time limit, or fewer iterations)", opts.time_limit_s);
        }
        let wake = (opts.sample_s / 2.0).min(0.05);
        tokio::select! {
            _ = &mut stop => bail!("interrupted (SIGINT or SIGTERM): stopping the agents and removing the fabric"),
            _ = tokio::time::sleep(Duration::from_secs_f64(wake)) => {}
        }
    }
}

/// Per-link utilisation between samples, for links that carried anything.
fn link_series(topo: &Topology, fabric: &Fabric, samples: &Samples) -> Vec<LinkSeries> {
    let mut out = Vec::new();
    for (l, link) in topo.links.iter().enumerate() {
        let rate = fabric.link_rates_bps[l];
        let utilisation: Vec<(f64, f64)> = samples
            .windows(2)
            .map(|w| {
                let (t0, a) = (&w[0].0, &w[0].1);
                let (t1, b) = (&w[1].0, &w[1].1);
                let bits = b[l].saturating_sub(a[l]) as f64 * 8.0;
                (*t1, bits / ((t1 - t0).max(1e-9) * rate as f64))
            })
            .collect();
        // Idle links carry only neighbour discovery; leave them out.
        if utilisation.iter().any(|&(_, u)| u > 0.01) {
            out.push(LinkSeries {
                link: l,
                from: topo.node_name(link.from).to_string(),
                to: topo.node_name(link.to).to_string(),
                rate_bps: rate,
                utilisation,
            });
        }
    }
    out
}

/// One row of a worker's log.
#[derive(Debug, Clone, Copy, PartialEq)]
struct LogRow {
    start_unix_ms: f64,
    delay_ms: f64,
    duration_ms: f64,
    comm_ms: f64,
    cycle_ms: f64,
}

/// When the worker of `log` was ready for its first iteration (its start
/// less its slot delay), Unix ms; None without a logged iteration.
pub fn first_ready_unix_ms(log: &Path) -> Result<Option<f64>> {
    Ok(read_cycles(log)?.first().map(|r| r.start_unix_ms - r.delay_ms))
}

/// A worker's iterations from its log, in order. O(rows).
fn read_cycles(path: &Path) -> Result<Vec<LogRow>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut lines = text.lines();
    if lines.next() != Some(LOG_HEADER) {
        bail!("{}: line 1: expected the header {LOG_HEADER}", path.display());
    }
    // A worker stopped while writing leaves its last row without its
    // newline: that row is left out, any other bad row is an error.
    let complete = if text.ends_with('\n') { usize::MAX } else { text.lines().count().saturating_sub(2) };
    let mut out = Vec::new();
    for (i, line) in lines.enumerate() {
        // start_unix_ms, delay_ms, duration_ms, comm_ms, cycle_ms: the last five.
        let mut last: Vec<Option<f64>> =
            line.rsplit(',').take(5).map(|v| v.parse::<f64>().ok().filter(|x| x.is_finite())).collect();
        last.reverse();
        match last[..] {
            [Some(start_unix_ms), Some(delay_ms), Some(duration_ms), Some(comm_ms), Some(cycle_ms)] => {
                out.push(LogRow { start_unix_ms, delay_ms, duration_ms, comm_ms, cycle_ms })
            }
            _ if i >= complete => break,
            _ => bail!(
                "{}: line {}: start_unix_ms, delay_ms, duration_ms, comm_ms and cycle_ms: expected numbers in {line:?}",
                path.display(),
                i + 2
            ),
        }
    }
    Ok(out)
}

/// `text` as one single-quoted shell word.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::{LOG_HEADER, LogRow, flow_sharing, read_cycles};
    use crate::fabric::Queueing;
    use orrery_policy::FlowSharing;

    #[test]
    fn bbr_over_a_fifo_is_the_one_unequal_sharing() {
        assert_eq!(flow_sharing("bbr", Queueing::TailDrop), FlowSharing::Unequal);
        assert_eq!(flow_sharing("bbr", Queueing::Priority), FlowSharing::Unequal, "one class is one FIFO");
        assert_eq!(flow_sharing("bbr", Queueing::Fair), FlowSharing::Equal, "per-flow queues even bbr out");
        for cc in ["reno", "cubic"] {
            assert_eq!(flow_sharing(cc, Queueing::TailDrop), FlowSharing::Equal, "{cc}");
        }
    }

    #[test]
    fn a_row_cut_short_by_a_stop_is_left_out_and_a_bad_row_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("w.csv");
        let rows = "0,0,1,1,1000.0,0.000,200.0,100.0,201.5\n0,0,1,2,1201.5,0.000,200.0,100.0,202.5\n";
        std::fs::write(&path, format!("{LOG_HEADER}\n{rows}0,0,1,3,1404.0,0.000,241.487,210.359,")).expect("write");
        let cycles = |rows: Vec<LogRow>| rows.iter().map(|r| (r.cycle_ms, r.comm_ms)).collect::<Vec<_>>();
        let read = read_cycles(&path).expect("read");
        assert_eq!(cycles(read.clone()), vec![(201.5, 100.0), (202.5, 100.0)]);
        assert_eq!(
            read[1],
            LogRow { start_unix_ms: 1201.5, delay_ms: 0.0, duration_ms: 200.0, comm_ms: 100.0, cycle_ms: 202.5 }
        );
        std::fs::write(&path, format!("{LOG_HEADER}\n0,0,1,1,1000.0,0.000,200.0,100.0,\n{rows}")).expect("write");
        let e = read_cycles(&path).expect_err("a bad row inside the log");
        assert!(e.to_string().contains("line 2: start_unix_ms"), "{e}");
    }
}
