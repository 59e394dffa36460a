//! `orrery agent`: the real-clock driver of Plebiscito's auction. Each
//! process runs one node's sans-IO [`Agent`] on a tokio UDP socket: datagrams
//! in, ticks from the wall clock, datagrams out. Peers come from a file of
//! `id address` lines; the node's resources are those of host `id` of the
//! topology. After every change (a decision, a finish, jobs learnt from a
//! peer) the agent rewrites its state file (JSON) atomically, so a test or an
//! operator can check what it committed, and a restart reads it back.
//!
//! `orrery agent --node` is the node agent of `orrery serve` instead
//! ([`crate::live`], [`orrery_serve::node_agent`]).
//!
//! `orrery agent --submit jobs.jsonl --to ADDR` sends jobs to an agent, which
//! starts their auctions. A line is a job in orrery's format (as `orrery
//! trace generate` writes it) or Plebiscito's own `JobRequest`.
//!
//! Every datagram is sealed with the cluster's pre-shared key (`--key`, a
//! file of mode 600; [`orrery_plebiscito::wire`]). An agent drops a datagram
//! whose tag does not verify, whose sender id is not the peer at its source
//! address, or that a client sends as protocol traffic; it merges only the
//! sender's own bids. A restarted agent reads its state file back.

use anyhow::{Context, Result, anyhow, bail};
use clap::Args as ClapArgs;
use orrery_plebiscito::agent::{Agent, Config};
use orrery_plebiscito::daemon::{Capacity, Clock, Daemon, State};
use orrery_plebiscito::utility::{BidPolicy, Demand, JobRequest, Resources, Utility};
use orrery_plebiscito::wire::{self, Body, CLIENT, Envelope, Key, Receipt};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

/// Arguments of `orrery agent`.
#[derive(ClapArgs, Debug)]
pub struct Args {
    /// Run a Plebiscito auction agent.
    #[arg(long, conflicts_with_all = ["submit", "node"], required_unless_present_any = ["submit", "node"])]
    auction: bool,
    /// Run a node agent of `orrery serve`: register this host, heartbeat,
    /// run the jobs placed here and apply their decisions (see --server).
    #[arg(long, conflicts_with = "submit")]
    node: bool,
    #[command(flatten)]
    live: crate::live::NodeArgs,
    /// This node's id (a line of the peers file, and a host of the topology).
    #[arg(long, required_unless_present_any = ["submit", "node"])]
    id: Option<u32>,
    /// File of `id address` lines, one per agent (`#` starts a comment).
    #[arg(long, required_unless_present_any = ["submit", "peer", "node"])]
    peers: Option<PathBuf>,
    /// A peer as `ID=IP:PORT` (repeatable; adds to --peers, including this node).
    #[arg(long, value_name = "ID=ADDR")]
    peer: Vec<String>,
    /// Topology whose hosts give the nodes' GPUs, CPUs, memory and links.
    #[arg(long, default_value = "leaf-spine")]
    topology: String,
    /// Utility of Table I (sgf, lgf, yarn, tetris, tiresias, drf, themis).
    #[arg(long, default_value = "lgf")]
    utility: String,
    /// Bid with alpha = 1 (bandwidth-unaware).
    #[arg(long)]
    unaware: bool,
    /// Quiescence time-out, ms.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    quiescence_ms: u64,
    /// Hard time-out, ms.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    hard_timeout_ms: u64,
    /// Re-send an open auction's bundle this often, ms (UDP may drop datagrams).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=MAX_TIMEOUT_MS))]
    resend_ms: u64,
    /// Where to write this agent's state after each decision (JSON).
    #[arg(long)]
    state: Option<PathBuf>,
    /// Exit after this many seconds without any datagram (default: run forever).
    #[arg(long, value_parser = crate::numbers::non_negative)]
    exit_after_idle_s: Option<f64>,
    /// Send the jobs of this JSON-lines file to an agent instead.
    #[arg(long, value_name = "JOBS")]
    submit: Option<PathBuf>,
    /// With --submit: the agent's address.
    #[arg(long, requires = "submit")]
    to: Option<SocketAddr>,
    /// The cluster's pre-shared key: a file of at least 16 bytes, mode 600
    /// (e.g. `head -c 32 /dev/urandom > key && chmod 600 key`). Every agent
    /// and client of a cluster uses the same file.
    #[arg(long, required_unless_present = "node")]
    key: Option<PathBuf>,
}

/// Runs `orrery agent`.
pub fn run(args: &Args) -> Result<()> {
    if args.node {
        return crate::live::node_agent(&args.live);
    }
    let key_file = args.key.as_ref().ok_or_else(|| anyhow!("--key is required"))?;
    let key = Key::read(key_file).context("--key")?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    match (&args.submit, args.to) {
        (Some(file), Some(to)) => rt.block_on(submit(file, to, &key, &args.topology)),
        (Some(_), None) => bail!("--submit needs --to ADDRESS"),
        _ => rt.block_on(serve(args, &key)),
    }
}

/// Reads a peers file: `id address` per line.
pub fn read_peers(path: &Path) -> Result<BTreeMap<u32, SocketAddr>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    let mut peers = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let mut it = line.split_whitespace();
        let (Some(id), Some(addr), None) = (it.next(), it.next(), it.next()) else {
            bail!("{}: expected `id address`, found {line:?}", at());
        };
        let id: u32 = id.parse().map_err(|_| anyhow!("{}: id: expected a non-negative integer, found {id:?}", at()))?;
        let addr: SocketAddr =
            addr.parse().map_err(|_| anyhow!("{}: address: expected IP:PORT, found {addr:?}", at()))?;
        if addr.port() == 0 || id == CLIENT {
            bail!("{}: expected an id below {} and a port from 1 to 65535, found {line:?}", at(), CLIENT);
        }
        if peers.insert(id, addr).is_some() {
            bail!("{}: id {id} is listed twice", at());
        }
    }
    Ok(peers)
}

/// Parses `--peer ID=IP:PORT`.
fn parse_peer(s: &str) -> Result<(u32, SocketAddr)> {
    let (id, addr) = s.split_once('=').ok_or_else(|| anyhow!("--peer {s:?}: expected ID=IP:PORT"))?;
    let id = id.parse().map_err(|_| anyhow!("--peer {s:?}: id: expected a non-negative integer"))?;
    let addr: SocketAddr = addr.parse().map_err(|_| anyhow!("--peer {s:?}: address: expected IP:PORT"))?;
    if addr.port() == 0 || id == CLIENT {
        bail!("--peer {s:?}: expected an id below {} and a port from 1 to 65535", CLIENT);
    }
    Ok((id, addr))
}

/// The GPU capacity submissions are checked against: a job can ever fit the
/// cluster if each component fits the largest node and all fit the total.
fn capacity(topo: &orrery_model::Topology) -> Capacity {
    Capacity {
        name: topo.name.clone(),
        largest_gpus: topo.hosts.iter().map(|h| f64::from(h.gpus)).fold(0.0, f64::max),
        total_gpus: topo.hosts.iter().map(|h| f64::from(h.gpus)).sum(),
    }
}

fn topology(name: &str) -> Result<orrery_model::Topology> {
    orrery_model::setups::by_name(name).ok_or_else(|| anyhow!("--topology: unknown {name:?}"))
}

async fn submit(file: &Path, to: SocketAddr, key: &Key, topology_name: &str) -> Result<()> {
    let topo = topology(topology_name)?;
    let text = std::fs::read_to_string(file).with_context(|| format!("{}", file.display()))?;
    // Every line is checked before anything is sent.
    let (jobs, names) = requests(&file.display().to_string(), &text, &topo)?;
    let total = jobs.len();
    let (outcome, busy) = send_jobs(jobs, to, key).await?;
    let name = |id: &u64| names.get(id).cloned().unwrap_or_else(|| id.to_string());
    let refused: Vec<String> =
        outcome.iter().filter_map(|(id, o)| o.as_ref().err().map(|e| format!("job {}: {e}", name(id)))).collect();
    eprintln!("{} of {total} jobs accepted by {to} ({busy} busy answers, sent again)", total - refused.len());
    if !refused.is_empty() {
        bail!("{} of {total} jobs were not accepted:\n  {}", refused.len(), refused.join("\n  "));
    }
    Ok(())
}

/// The auction requests of a submitted file. A line is either Plebiscito's
/// own request (it has `arch`: workers, per-worker demand, rates, run time)
/// or a job in orrery's format, the one `orrery trace generate`, `orrery
/// submit` and experiment files use; the latter is turned into a request on
/// `topo` as the simulator's Plebiscito does (its rates from the job's shape
/// on the cluster, its run time alone), with its id kept for messages (a
/// numeric id as it is, another by a 64-bit FNV-1a hash). Returns the
/// requests, in the file's order, and the original id of each job that had
/// one. Every bad line is named. O(lines): orrery's lines go through its
/// JSON-lines reader in one pass, the others blanked to keep line numbers.
fn requests(file: &str, text: &str, topo: &orrery_model::Topology) -> Result<(Vec<JobRequest>, BTreeMap<u64, String>)> {
    enum Line {
        Request(JobRequest),
        Orrery,
    }
    let mut errors: Vec<(usize, String)> = Vec::new();
    let mut lines: Vec<(usize, Line)> = Vec::new();
    let mut orrery_text = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        let at = format!("{file}:{}", i + 1);
        let mut keep = "";
        if !(l.is_empty() || l.starts_with('#')) {
            match serde_json::from_str::<serde_json::Value>(l) {
                Err(e) => errors.push((i, format!("{at}: expected a JSON job object, found {e}"))),
                Ok(v) if v.get("arch").is_some() => match serde_json::from_value::<JobRequest>(v) {
                    Ok(j) => lines.push((i, Line::Request(j))),
                    Err(e) => errors.push((i, format!("{at}: as a Plebiscito request: {e}"))),
                },
                Ok(_) => {
                    lines.push((i, Line::Orrery));
                    keep = l;
                }
            }
        }
        orrery_text.push_str(keep);
        orrery_text.push('\n');
    }
    // The reader keeps its rows in order and names each bad one by line.
    let parsed = orrery_trace::formats::jsonl::parse(file, &orrery_text);
    let bad: std::collections::BTreeSet<usize> = parsed.errors.iter().map(|d| d.line as usize - 1).collect();
    errors.extend(parsed.errors.iter().map(|d| (d.line as usize - 1, d.to_string())));
    let mut specs = parsed.items.into_iter();
    let mut jobs = Vec::new();
    let mut names = BTreeMap::new();
    let mut seen: BTreeMap<u64, usize> = BTreeMap::new();
    let cluster = capacity(topo);
    for (i, line) in lines {
        let at = format!("{file}:{}", i + 1);
        let job = match line {
            Line::Request(j) => j,
            Line::Orrery if bad.contains(&i) => continue,
            Line::Orrery => {
                let Some(spec) = specs.next() else { continue };
                let id = spec.id.parse::<u64>().unwrap_or_else(|_| fnv1a(&spec.id));
                names.insert(id, spec.id.clone());
                let alone = orrery_policy::baseline::isolated_seconds_on(topo, &spec);
                orrery_policy::plebiscito::request(topo, id as usize, &spec, alone)
            }
        };
        if let Err(e) = job.check().map_err(|e| e.to_string()).and_then(|()| cluster.admits(&job)) {
            errors.push((i, format!("{at}: {e}")));
            continue;
        }
        if let Some(first) = seen.insert(job.id, i + 1) {
            let id = names.get(&job.id).cloned().unwrap_or(job.id.to_string());
            errors.push((i, format!("{at}: id {id}: already used on line {first}")));
            continue;
        }
        jobs.push(job);
    }
    if !errors.is_empty() {
        errors.sort_by_key(|e| e.0);
        let list: Vec<String> = errors.into_iter().map(|e| e.1).collect();
        bail!("{} of the file's jobs are not valid; nothing was sent:\n  {}", list.len(), list.join("\n  "));
    }
    Ok((jobs, names))
}

/// FNV-1a, 64 bits: a stable number for a job id that is not one.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The longest time-out or re-send period an auction agent accepts: one day.
const MAX_TIMEOUT_MS: u64 = 86_400_000;
/// Submissions a client has in flight (sent, not yet answered): more than an
/// agent holds open, so that a burst meets the agent's back-pressure.
const SUBMIT_WINDOW: usize = 128;
/// A submission unanswered this long is sent again, ms.
const SUBMIT_RETRY_MS: u64 = 300;
/// Sends of one submission before it counts as unanswered.
const SUBMIT_TRIES: u32 = 8;
/// A busy agent is asked again after this long, ms.
const BUSY_BACKOFF_MS: u64 = 250;
/// Busy answers accepted for one job before the client gives up on it.
const BUSY_TRIES: u32 = 400;

/// Sends jobs with at most [`SUBMIT_WINDOW`] in flight, re-sending those
/// unanswered and, later, those the agent was too busy for. Returns each job's
/// outcome: accepted, or why not (refused, still busy, unanswered), and how
/// many busy answers came back.
async fn send_jobs(
    jobs: Vec<JobRequest>,
    to: SocketAddr,
    key: &Key,
) -> Result<(BTreeMap<u64, Result<(), String>>, u64)> {
    struct Pending {
        job: JobRequest,
        due: Instant,
        sent: u32,
        busy: u32,
    }
    let bind = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let sock = UdpSocket::bind(bind).await?;
    let mut queue: std::collections::VecDeque<JobRequest> = jobs.into_iter().collect();
    let mut flight: BTreeMap<u64, Pending> = BTreeMap::new();
    let mut done: BTreeMap<u64, Result<(), String>> = BTreeMap::new();
    let mut buf = vec![0u8; 65_536];
    let mut busy = 0u64;
    while !queue.is_empty() || !flight.is_empty() {
        while flight.len() < SUBMIT_WINDOW {
            let Some(job) = queue.pop_front() else { break };
            flight.insert(job.id, Pending { job, due: Instant::now(), sent: 0, busy: 0 });
        }
        let now = Instant::now();
        for (&id, p) in flight.iter_mut().filter(|(_, p)| p.due <= now) {
            if p.sent >= SUBMIT_TRIES {
                done.insert(id, Err(format!("no answer after {SUBMIT_TRIES} sends")));
                continue;
            }
            // Sealed afresh for every send: the agent refuses a datagram it
            // has seen (a replay), so a re-send must be a new datagram.
            sock.send_to(&wire::seal(key, &Envelope::now(CLIENT, Body::Submit(p.job.clone()))), to).await?;
            p.sent += 1;
            p.due = now + Duration::from_millis(SUBMIT_RETRY_MS);
        }
        flight.retain(|id, _| !done.contains_key(id));
        let next = flight.values().map(|p| p.due).min().unwrap_or(now);
        let wait = next.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let Ok(Ok((n, _))) = tokio::time::timeout(wait, sock.recv_from(&mut buf)).await else { continue };
        let Ok(Envelope { body: Body::Receipt { job, outcome }, .. }) = wire::open(key, &buf[..n]) else { continue };
        let Some(p) = flight.get_mut(&job) else { continue };
        match outcome {
            Receipt::Accepted => {
                done.insert(job, Ok(()));
            }
            Receipt::Decided(what) => {
                eprintln!("{what}");
                done.insert(job, Ok(()));
            }
            Receipt::Refused(reason) => {
                done.insert(job, Err(format!("refused: {reason}")));
            }
            Receipt::Busy if p.busy + 1 >= BUSY_TRIES => {
                done.insert(job, Err(format!("the agent stayed busy ({BUSY_TRIES} tries)")));
            }
            Receipt::Busy => {
                busy += 1;
                p.busy += 1;
                p.sent = 0;
                p.due = Instant::now() + Duration::from_millis(BUSY_BACKOFF_MS);
            }
        }
        flight.retain(|id, _| !done.contains_key(id));
    }
    Ok((done, busy))
}

async fn serve(args: &Args, key: &Key) -> Result<()> {
    // Logs with levels on stderr; RUST_LOG=debug shows every dropped datagram.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let id = args.id.ok_or_else(|| anyhow!("--id is required"))?;
    let mut peers = match &args.peers {
        Some(file) => read_peers(file)?,
        None => BTreeMap::new(),
    };
    for p in &args.peer {
        let (id, addr) = parse_peer(p)?;
        peers.insert(id, addr);
    }
    let &own = peers.get(&id).ok_or_else(|| anyhow!("--id {id} is not in the peers file"))?;
    let topo = topology(&args.topology)?;
    if let Some((&p, _)) = peers.iter().find(|&(&p, _)| p as usize >= topo.hosts.len()) {
        bail!("peer {p}: topology {} has hosts 0 to {}", topo.name, topo.hosts.len().saturating_sub(1));
    }
    let host = topo
        .hosts
        .get(id as usize)
        .ok_or_else(|| anyhow!("--id {id}: topology {} has {} hosts", topo.name, topo.hosts.len()))?;
    let utility = Utility::parse(&args.utility)
        .ok_or_else(|| anyhow!("--utility: expected one of sgf, lgf, yarn, tetris, tiresias, drf, themis"))?;
    let policy = if args.unaware { BidPolicy::unaware(utility) } else { BidPolicy::aware(utility) };
    let config = Config {
        policy,
        quiescence_us: args.quiescence_ms * 1000,
        hard_timeout_us: args.hard_timeout_ms * 1000,
        resend_us: Some(args.resend_ms.max(1) * 1000),
    };
    let total = Demand { gpus: f64::from(host.gpus), cpus: f64::from(host.cpus), mem_gib: host.memory_gib };
    let map = Arc::new(orrery_policy::plebiscito::cluster_map(&topo));
    let neighbours: Vec<u32> = peers.keys().copied().filter(|&p| p != id).collect();
    let mut agent = Agent::new(id, neighbours, Resources::new(total), map, config);
    // A restart reads back what this agent committed before, never an empty state.
    if let Some(path) = args.state.as_ref().filter(|p| p.exists()) {
        let text = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
        let old: State = serde_json::from_slice(&text)
            .with_context(|| format!("{}: not an agent state file (move it away to start afresh)", path.display()))?;
        if old.id != id {
            bail!("{}: the state of agent {}, not of --id {id}", path.display(), old.id);
        }
        let placed = old.placed.len();
        agent.restore(old.verdicts, old.placed).with_context(|| {
            format!(
                "{}: this state does not fit agent {id} on topology {} (move it away to start afresh)",
                path.display(),
                args.topology
            )
        })?;
        tracing::info!(agent = id, placed, file = %path.display(), "restored placed jobs from the state file");
    }
    let capacity = capacity(&topo);
    let mut daemon = Daemon::new(agent, peers, key.clone(), capacity);
    let sock = UdpSocket::bind(own).await.with_context(|| format!("binding {own}"))?;
    let start = Instant::now();
    let clock = || Clock { mono_us: start.elapsed().as_micros() as u64, wall_us: wire::wall_clock_us() };
    let mut last_heard = Instant::now();
    // Conditions an operator must hear of (not at debug level), at most once a minute.
    let mut last_warning: Option<Instant> = None;
    let mut warn = |what: String| {
        if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            last_warning = Some(Instant::now());
            tracing::warn!(agent = id, "{what}");
        }
    };
    let mut buf = vec![0u8; 65_536];
    write_state(args, &daemon, total)?;
    tracing::info!(agent = id, address = %own, "listening (learning what was decided before accepting submissions)");
    loop {
        let wait = daemon.next_deadline().map_or(50_000, |d| d.saturating_sub(clock().mono_us)).clamp(100, 50_000);
        let mut steps = Vec::new();
        tokio::select! {
            r = sock.recv_from(&mut buf) => match r {
                Ok((n, from)) => {
                    last_heard = Instant::now();
                    let stale = daemon.counters().stale;
                    let step = daemon.on_datagram(clock(), from, &buf[..n]);
                    if daemon.counters().stale > stale {
                        let reason = step.dropped.clone().unwrap_or_default();
                        warn(format!("a datagram from {from} was {reason}; check that NTP runs on every host"));
                    }
                    if let Some(reason) = &step.dropped {
                        // Debug, not warn: a flood must not become a flood of log
                        // lines (the counts are in the state file).
                        tracing::debug!(agent = id, bytes = n, %from, %reason, "dropped a datagram");
                    }
                    steps.push(step);
                }
                // Errors such as an ICMP "port unreachable" from a peer that
                // is gone are not fatal: the auction tolerates lost peers.
                Err(e) => tracing::warn!(agent = id, error = %e, "receive failed"),
            },
            _ = tokio::time::sleep(Duration::from_micros(wait)) => {}
        }
        let was_learning = daemon.is_learning();
        steps.push(daemon.on_tick(clock()));
        let mut changed = false;
        for step in steps {
            changed |= step.changed;
            if step.learnt > 0 {
                tracing::info!(agent = id, learnt = step.learnt, "learnt decided jobs from a peer");
            }
            for (job, verdict, consensus_us, rounds) in step.decided {
                tracing::info!(agent = id, job, ?verdict, consensus_us, rounds, "decided");
            }
            for (to, bytes) in step.datagrams {
                // A peer that is gone makes sends fail on some systems; the
                // auction tolerates lost datagrams, and the failure is counted.
                let ok = sock.send_to(&bytes, to).await.is_ok();
                daemon.record_send(bytes.len(), ok);
            }
        }
        if was_learning && !daemon.is_learning() {
            tracing::info!(agent = id, "learnt from a peer; accepting submissions");
        } else if daemon.is_learning() && start.elapsed() > Duration::from_secs(5) {
            warn("no peer has answered what was decided; submissions are answered busy until one does".into());
        }
        if changed {
            write_state(args, &daemon, total)?;
        }
        if let Some(idle) = args.exit_after_idle_s
            && daemon.agent().is_idle()
            && last_heard.elapsed().as_secs_f64() > idle
        {
            write_state(args, &daemon, total)?;
            return Ok(());
        }
    }
}

fn write_state(args: &Args, daemon: &Daemon, total: Demand) -> Result<()> {
    let Some(path) = &args.state else { return Ok(()) };
    let (agent, c) = (daemon.agent(), daemon.counters());
    let state = State {
        id: agent.id(),
        total,
        free: agent.committed_free().free,
        usage: agent.usage().clone(),
        verdicts: agent.verdicts().iter().map(|(k, v)| (*k, v.clone())).collect(),
        sent: (c.sent, c.sent_bytes, c.largest),
        bad_datagrams: c.bad,
        refused_bids: c.refused_bids,
        counters: c,
        placed: agent.placed().values().cloned().collect(),
    };
    // Write then rename, so a reader never sees half a file.
    orrery_model::files::write_atomic(path, serde_json::to_vec_pretty(&state)?)
        .with_context(|| format!("{}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orrery_jobs_and_plebiscito_requests_are_read_from_one_file() {
        let topo = topology("leaf-spine").expect("topology");
        let generated = r#"{"id":"job-0","model":"vgg16","batch":32,"workers":2,"gpus_per_worker":1,"work":{"iterations":150},"arrival_s":0.0,"priority":"low"}"#;
        let request = r#"{"id":7,"arch":"Ring","workers":2,"worker":{"gpus":1.0,"cpus":0.0,"mem_gib":0.0},"server":{"gpus":0.0,"cpus":0.0,"mem_gib":0.0},"gbps":5.0,"runtime_s":600.0,"weight":1.0}"#;
        let numbered = r#"{"id":"12","model":"resnet50","batch":32,"workers":1,"work":{"iterations":10},"arrival_s":0.0,"priority":"high"}"#;
        let text = format!("# a mix\n{generated}\n\n{request}\n{numbered}\n");
        let (jobs, names) = requests("jobs.jsonl", &text, &topo).expect("valid");
        assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [fnv1a("job-0"), 7, 12]);
        assert_eq!(names[&fnv1a("job-0")], "job-0");
        // VGG16 on two GPUs: its rates come from the zoo's shape, its run time
        // is 150 iterations alone, and a high-priority job weighs twice.
        let vgg = &jobs[0];
        assert!(vgg.gbps > 0.0 && vgg.peak_gbps >= vgg.gbps, "{vgg:?}");
        assert!(vgg.runtime_s > 0.0 && vgg.runtime_s.is_finite());
        assert_eq!((vgg.workers, vgg.worker.gpus, vgg.weight), (2, 1.0, 1.0));
        assert_eq!(jobs[2].weight, 2.0);
        // Bad lines are all named, with their line, and nothing is accepted.
        let bad = format!(
            "{generated}\n{{\"id\":\"x\",\"model\":\"nope\",\"batch\":1,\"workers\":1,\"work\":{{\"iterations\":1}},\"arrival_s\":0}}\n{generated}\nnot json\n"
        );
        let e = requests("jobs.jsonl", &bad, &topo).expect_err("bad lines").to_string();
        assert!(e.starts_with("3 of the file's jobs are not valid; nothing was sent"), "{e}");
        assert!(e.contains("jobs.jsonl:2: field `model`"), "{e}");
        assert!(
            e.contains("jobs.jsonl:3: field `id`: expected an id not used on an earlier line, found \"job-0\""),
            "{e}"
        );
        assert!(e.contains("jobs.jsonl:4: expected a JSON job object"), "{e}");
    }

    #[test]
    fn peers_file_errors_name_the_line() {
        let dir_guard = tempfile::tempdir().expect("temp dir");
        let dir = dir_guard.path().to_path_buf();
        std::fs::create_dir_all(&dir).expect("dir");
        let f = dir.join("peers.txt");
        std::fs::write(&f, "# agents\n0 127.0.0.1:7000\n1 localhost\n").expect("write");
        let e = read_peers(&f).expect_err("bad address").to_string();
        assert!(e.ends_with("peers.txt:3: address: expected IP:PORT, found \"localhost\""), "{e}");
        std::fs::write(&f, "0 127.0.0.1:7000\n0 127.0.0.1:7001\n").expect("write");
        assert!(read_peers(&f).expect_err("duplicate").to_string().contains(":2: id 0 is listed twice"));
        std::fs::write(&f, "0 127.0.0.1:7000  # me\n\n1 127.0.0.1:7001\n").expect("write");
        assert_eq!(read_peers(&f).expect("valid").len(), 2);
        assert_eq!(parse_peer("3=127.0.0.1:9").expect("valid").0, 3);
        assert!(parse_peer("x=1").is_err());
        // Issue 41: an agent on port 0 bound a random port no peer knew.
        std::fs::write(&f, "0 127.0.0.1:0\n").expect("write");
        let e = read_peers(&f).expect_err("port 0").to_string();
        assert!(
            e.ends_with(
                "peers.txt:1: expected an id below 4294967295 and a port from 1 to 65535, found \"0 127.0.0.1:0\""
            ),
            "{e}"
        );
        assert!(parse_peer("3=127.0.0.1:0").is_err());
    }
}
