//! `orrery worker`: an emulated data-parallel worker. It runs its job's
//! iteration shape on its placement: compute as a sleep of the shape's
//! compute time, network communication as a real TCP ring collective of the
//! shape's bytes times `scale` (the fabric's link scale, so each transfer
//! takes as long as on the real cluster) with its ring neighbours, and
//! communication that stays inside its host as a sleep of its time.
//!
//! A ring all-reduce among n workers is 2(n−1) steps; in each, a worker sends
//! a chunk of B/n bytes to its successor and receives one from its
//! predecessor, and the next step waits for both (the barrier per step of
//! NCCL's ring). An all-gather is the n−1 steps of its second half.
//! Point-to-point and all-to-all segments are emulated by a sleep of their
//! time alone (said once on stderr): the testbed's workloads are data
//! parallel.
//!
//! It speaks the node agent's protocol (`orrery_serve::node_agent`): before
//! every iteration it waits for its slot (shift, align, pace, pause), and it
//! reports every iteration. Workers of one job find each other through the
//! service: the agent passes every rank's data address (`ORRERY_WORKER_ADDRS`)
//! and rank r listens on [`orrery_serve::api::worker_port`]`(job, r)` (the agent's tc throttle
//! matches that port). When a `Route` pins its ring flow, it opens one
//! connection per pinned path with that path's TOS
//! ([`crate::fabric::path_tos`]) and splits each chunk equally among them.

use anyhow::{Context, Result, anyhow, bail};
use orrery_model::{Collective, IterationShape, Segment};
use orrery_serve::api::worker_port;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a worker waits for a peer (to listen, or to send a step).
const PEER_TIMEOUT: Duration = Duration::from_secs(120);

/// What the agent tells a worker process through its environment.
#[derive(Debug, Clone)]
pub struct WorkerEnv {
    /// The agent's Unix socket.
    pub socket: PathBuf,
    /// Job id.
    pub job: u64,
    /// Placement epoch.
    pub epoch: u64,
    /// This worker's rank.
    pub rank: u32,
    /// Data address of every rank's host.
    pub addrs: Vec<IpAddr>,
    /// The iteration shape.
    pub shape: IterationShape,
}

fn var(name: &str) -> Result<String> {
    std::env::var(name)
        .with_context(|| format!("{name} is not set: `orrery worker` runs under `orrery agent --node --exec`"))
}

fn parsed<T: std::str::FromStr>(name: &str) -> Result<T>
where
    T::Err: std::fmt::Display,
{
    let v = var(name)?;
    v.parse().map_err(|e| anyhow!("{name}: expected a number, found {v:?} ({e})"))
}

impl WorkerEnv {
    /// Reads `ORRERY_*` from the environment.
    pub fn from_env() -> Result<WorkerEnv> {
        let addrs_text = var("ORRERY_WORKER_ADDRS")?;
        let mut addrs = Vec::new();
        for (rank, a) in addrs_text.split(',').enumerate() {
            addrs.push(a.parse::<IpAddr>().map_err(|_| {
                anyhow!(
                    "ORRERY_WORKER_ADDRS: rank {rank} has no data address ({a:?}); start its agent with --data-addr"
                )
            })?);
        }
        let shape_text = var("ORRERY_SHAPE")?;
        let shape: IterationShape = serde_json::from_str(&shape_text)
            .with_context(|| format!("ORRERY_SHAPE: not an iteration shape: {shape_text}"))?;
        let env = WorkerEnv {
            socket: PathBuf::from(var("ORRERY_AGENT_SOCKET")?),
            job: parsed("ORRERY_JOB")?,
            epoch: parsed("ORRERY_EPOCH")?,
            rank: parsed("ORRERY_RANK")?,
            addrs,
            shape,
        };
        let world: usize = parsed("ORRERY_WORLD_SIZE")?;
        if world != env.addrs.len() || env.rank as usize >= world {
            bail!("ORRERY_WORLD_SIZE {world}, ORRERY_RANK {} and {} addresses disagree", env.rank, env.addrs.len());
        }
        Ok(env)
    }
}

/// Columns of a worker's log: `delay_ms` is the slot delay before the
/// iteration, `duration_ms` its compute and communication, `cycle_ms` the
/// time since the previous iteration ended (the simulator's iteration time).
pub const LOG_HEADER: &str = "job,rank,epoch,iteration,start_unix_ms,delay_ms,duration_ms,comm_ms,cycle_ms";

/// File name of a worker's log.
pub fn log_name(job: u64, rank: u32) -> String {
    format!("worker-{job}-{rank}.csv")
}

/// Worker knobs.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Bytes on the wire are the shape's times this (the fabric's link scale).
    pub scale: f64,
    /// Write one CSV row per iteration to `worker-JOB-RANK.csv` in this folder.
    pub log_dir: Option<PathBuf>,
    /// TCP congestion control of its connections (None: the system's);
    /// `mltcp-CC` is the kernel's CC with MLTCP's pacer over it
    /// ([`crate::mltcp`]).
    pub congestion_control: Option<String>,
    /// Compute sleeps this many times the shape's time (1: the model).
    pub compute_stretch: f64,
}

/// The agent's local protocol, blocking.
struct Agent {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Agent {
    fn connect(path: &Path) -> Result<Agent> {
        let writer =
            UnixStream::connect(path).with_context(|| format!("connecting to the agent at {}", path.display()))?;
        Ok(Agent { reader: BufReader::new(writer.try_clone()?), writer })
    }

    fn call(&mut self, request: &Value) -> Result<Value> {
        let mut line = request.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).context("writing to the agent")?;
        let mut answer = String::new();
        if self.reader.read_line(&mut answer).context("reading from the agent")? == 0 {
            bail!("the agent closed the socket");
        }
        serde_json::from_str(&answer).with_context(|| format!("the agent answered {answer:?}"))
    }
}

/// The ring: a listener fed by reader threads, and the connections to the
/// successor.
struct Ring {
    /// The kernel's congestion control for its connections (None: the system's).
    congestion_control: Option<String>,
    /// Whether MLTCP's pacer holds each connection's rate.
    mltcp: bool,
    next: SocketAddr,
    /// Current connections to the successor and the paths they are pinned
    /// to, and each connection's pacer (used under MLTCP only).
    out: Vec<TcpStream>,
    pacers: Vec<crate::mltcp::Pacer>,
    out_route: Option<Vec<usize>>,
    /// (step, bytes) from every incoming connection.
    arrivals: mpsc::Receiver<(u64, u64)>,
    received: HashMap<u64, u64>,
    step: u64,
    zeros: Vec<u8>,
}

fn listen(port: u16) -> Result<TcpListener> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        let addr: SocketAddr = ([0, 0, 0, 0], port).into();
        match s.bind(&addr.into()).and_then(|()| s.listen(64)) {
            Ok(()) => return Ok(s.into()),
            // The previous epoch's worker may still be going away.
            Err(e) if Instant::now() < deadline => {
                tracing::debug!("port {port}: {e}; retrying");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e).with_context(|| format!("listening on port {port}")),
        }
    }
}

/// Reads frames (step u64, length u64, then the bytes) until the peer closes.
fn read_frames(mut conn: TcpStream, arrivals: mpsc::Sender<(u64, u64)>) {
    let mut header = [0u8; 16];
    let mut buf = vec![0u8; 256 * 1024];
    while conn.read_exact(&mut header).is_ok() {
        let step = u64::from_le_bytes(header[..8].try_into().unwrap_or_default());
        let mut left = u64::from_le_bytes(header[8..].try_into().unwrap_or_default());
        let len = left;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            match conn.read(&mut buf[..want]) {
                Ok(0) | Err(_) => return,
                Ok(n) => left -= n as u64,
            }
        }
        if arrivals.send((step, len)).is_err() {
            return;
        }
    }
}

impl Ring {
    fn new(env: &WorkerEnv, congestion_control: Option<String>) -> Result<Ring> {
        let n = env.addrs.len();
        let next_rank = (env.rank as usize + 1) % n;
        let next = SocketAddr::new(env.addrs[next_rank], worker_port(env.job as usize, next_rank as u32));
        let listener = listen(worker_port(env.job as usize, env.rank))?;
        let (tx, arrivals) = mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_nodelay(true);
                let tx = tx.clone();
                std::thread::spawn(move || read_frames(conn, tx));
            }
        });
        let (kernel_cc, mltcp) = match congestion_control.as_deref().map(crate::mltcp::split_cc) {
            Some((cc, mltcp)) => (Some(cc.to_string()), mltcp),
            None => (None, false),
        };
        Ok(Ring {
            congestion_control: kernel_cc,
            mltcp,
            next,
            out: Vec::new(),
            pacers: Vec::new(),
            out_route: None,
            arrivals,
            received: HashMap::new(),
            step: 0,
            zeros: vec![0u8; 1 << 20],
        })
    }

    fn connect(&self, tos: u32) -> Result<TcpStream> {
        let deadline = Instant::now() + PEER_TIMEOUT;
        loop {
            let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
            s.set_tos_v4(tos)?;
            if let Some(cc) = &self.congestion_control {
                s.set_tcp_congestion(cc.as_bytes()).with_context(|| format!("TCP congestion control {cc:?}"))?;
            }
            s.set_tcp_nodelay(true)?;
            if self.mltcp {
                s.set_send_buffer_size(crate::mltcp::SEND_BUFFER)?;
            }
            match s.connect_timeout(&self.next.into(), Duration::from_secs(2)) {
                Ok(()) => return Ok(s.into()),
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("connecting to {}: {e}; retrying", self.next);
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(e).with_context(|| format!("connecting to the ring successor at {}", self.next)),
            }
        }
    }

    /// Makes the connections follow `route` (empty: one connection, ECMP).
    fn follow(&mut self, route: &[usize]) -> Result<()> {
        if self.out_route.as_deref() == Some(route) {
            return Ok(());
        }
        self.out.clear();
        if route.is_empty() {
            self.out.push(self.connect(0)?);
        } else {
            for &p in route {
                self.out.push(self.connect(u32::from(crate::fabric::path_tos(p)))?);
            }
        }
        self.out_route = Some(route.to_vec());
        self.pacers = vec![crate::mltcp::Pacer::default(); self.out.len()];
        Ok(())
    }

    /// A new iteration that sends `bytes` in all to the successor: each
    /// connection's pacer counts its share from 0.
    fn begin_iteration(&mut self, bytes: u64) {
        let k = self.pacers.len().max(1) as u64;
        for p in &mut self.pacers {
            p.begin_iteration(bytes / k);
        }
    }

    /// One ring step: send `bytes` to the successor (split over the
    /// connections), receive as many from the predecessor.
    fn step(&mut self, bytes: u64) -> Result<()> {
        self.step += 1;
        let step = self.step;
        let k = self.out.len().max(1) as u64;
        let zeros = &self.zeros;
        let mltcp = self.mltcp;
        let send = |conn: &mut TcpStream, pacer: &mut crate::mltcp::Pacer, len: u64| -> std::io::Result<()> {
            let mut header = [0u8; 16];
            header[..8].copy_from_slice(&step.to_le_bytes());
            header[8..].copy_from_slice(&len.to_le_bytes());
            conn.write_all(&header)?;
            let piece = if mltcp { crate::mltcp::PIECE } else { zeros.len() };
            let mut left = len;
            while left > 0 {
                let n = left.min(piece as u64) as usize;
                if mltcp {
                    let wait = pacer.wait(Instant::now());
                    if !wait.is_zero() {
                        std::thread::sleep(wait);
                    }
                    let began = Instant::now();
                    conn.write_all(&zeros[..n])?;
                    pacer.wrote(n, began, Instant::now());
                } else {
                    conn.write_all(&zeros[..n])?;
                }
                left -= n as u64;
            }
            Ok(())
        };
        if self.out.len() == 1 {
            send(&mut self.out[0], &mut self.pacers[0], bytes).context("sending to the ring successor")?;
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = self
                    .out
                    .iter_mut()
                    .zip(self.pacers.iter_mut())
                    .enumerate()
                    .map(|(i, (c, pacer))| {
                        let part = bytes / k + u64::from((i as u64) < bytes % k);
                        s.spawn(move || send(c, pacer, part))
                    })
                    .collect();
                handles
                    .into_iter()
                    .try_for_each(|h| h.join().map_err(|_| anyhow!("a sender panicked"))?.map_err(anyhow::Error::from))
            })
            .context("sending to the ring successor")?;
        }
        let deadline = Instant::now() + PEER_TIMEOUT;
        // A frame must arrive even for 0 bytes: then the step is a barrier.
        while self.received.get(&step).is_none_or(|&got| got < bytes) {
            let left = deadline.saturating_duration_since(Instant::now());
            let (s, n) = self
                .arrivals
                .recv_timeout(left)
                .map_err(|_| anyhow!("step {step}: the ring predecessor sent nothing for {PEER_TIMEOUT:?}"))?;
            *self.received.entry(s).or_default() += n;
        }
        self.received.remove(&step);
        Ok(())
    }
}

/// Steps of a ring collective among `n` workers (0: not a ring).
fn ring_steps(collective: Collective, n: usize) -> usize {
    match collective {
        Collective::RingAllReduce => 2 * (n - 1),
        Collective::AllGather => n - 1,
        _ => 0,
    }
}

/// Bytes a worker sends in each ring step of a collective of
/// `payload_bytes` at `scale`.
fn ring_chunk(payload_bytes: f64, scale: f64, n: usize) -> u64 {
    (payload_bytes * scale / n as f64).round().max(0.0) as u64
}

/// This host's clock, ms (the agent converts to the service's).
fn unix_ms() -> f64 {
    orrery_serve::clock::host_unix_us() as f64 / 1e3
}

/// What one worker did.
#[derive(Debug, Clone, Default)]
pub struct WorkerSummary {
    /// Iterations run.
    pub iterations: u64,
    /// Why it stopped.
    pub stopped: String,
}

/// Runs the worker until the agent says the job is done or gone.
pub fn run(env: &WorkerEnv, opts: &WorkerOptions) -> Result<WorkerSummary> {
    if !(opts.scale.is_finite() && opts.scale > 0.0) {
        bail!("--scale: expected a positive factor, found {}", opts.scale);
    }
    if !(opts.compute_stretch.is_finite() && opts.compute_stretch > 0.0) {
        bail!("--compute-stretch: expected a positive factor, found {}", opts.compute_stretch);
    }
    let n = env.addrs.len();
    let mut agent = Agent::connect(&env.socket)?;
    let needs_ring = n > 1
        && env.shape.segments.iter().any(|s| {
            matches!(s, Segment::Comm { hosts, collective: Collective::RingAllReduce | Collective::AllGather, .. } if *hosts > 1)
        });
    let mut ring = if needs_ring { Some(Ring::new(env, opts.congestion_control.clone())?) } else { None };
    // The bytes an iteration sends to the ring successor (MLTCP's pacer
    // measures r against them).
    let ring_bytes: u64 = env
        .shape
        .segments
        .iter()
        .map(|seg| match *seg {
            Segment::Comm { collective, payload_bytes, hosts, .. } if hosts > 1 => {
                ring_steps(collective, n) as u64 * ring_chunk(payload_bytes, opts.scale, n)
            }
            _ => 0,
        })
        .sum();
    // Connect the ring and pass one empty step around it before the first
    // slot, so that the first iteration does not include process start-up.
    if let Some(r) = ring.as_mut() {
        r.follow(&[])?;
        r.step(0)?;
    }
    if env.shape.segments.iter().any(|s| matches!(s, Segment::Comm { hosts, collective: Collective::PointToPoint | Collective::AllToAll, .. } if *hosts > 1)) {
        eprintln!("orrery worker: job {}: point-to-point and all-to-all segments are emulated by sleeping their time alone", env.job);
    }
    let mut log = match &opts.log_dir {
        Some(dir) => {
            let path = dir.join(log_name(env.job, env.rank));
            let fresh = !path.exists();
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))?;
            if fresh {
                writeln!(f, "{LOG_HEADER}")?;
            }
            Some(f)
        }
        None => None,
    };
    // The simulator's iteration time runs from the end of one iteration to
    // the end of the next: slot delays included.
    let mut last_end = Instant::now();
    let mut summary = WorkerSummary::default();
    loop {
        let slot =
            agent.call(&json!({"op": "wait", "job": env.job.to_string(), "rank": env.rank, "epoch": env.epoch}))?;
        if let Some(why) = slot.get("stop") {
            summary.stopped = why.as_str().unwrap_or("stopped").to_string();
            return Ok(summary);
        }
        if let Some(e) = slot.get("error") {
            bail!("the agent refused: {e}");
        }
        let delay_ms = slot["delay_ms"].as_f64().unwrap_or(0.0).max(0.0);
        let iteration = slot["iteration"].as_u64().unwrap_or(summary.iterations + 1);
        let route: Vec<usize> = slot["route"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v.as_u64().map(|x| x as usize)).collect())
            .unwrap_or_default();
        if delay_ms > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(delay_ms / 1e3));
        }
        if let Some(r) = ring.as_mut() {
            r.follow(&route)?;
            r.begin_iteration(ring_bytes);
        }
        let start = unix_ms();
        let t0 = Instant::now();
        let mut comm_ms = 0.0;
        for seg in &env.shape.segments {
            match *seg {
                Segment::Compute { ms } => {
                    std::thread::sleep(Duration::from_secs_f64(ms.max(0.0) * opts.compute_stretch / 1e3))
                }
                Segment::Comm { collective, payload_bytes, hosts, .. } => {
                    let c0 = Instant::now();
                    let steps = ring_steps(collective, n);
                    match ring.as_mut() {
                        Some(r) if hosts > 1 && steps > 0 => {
                            let chunk = ring_chunk(payload_bytes, opts.scale, n);
                            for _ in 0..steps {
                                r.step(chunk)?;
                            }
                        }
                        _ => std::thread::sleep(Duration::from_secs_f64(seg.duration_ms().max(0.0) / 1e3)),
                    }
                    if hosts > 1 {
                        comm_ms += c0.elapsed().as_secs_f64() * 1e3;
                    }
                }
            }
        }
        let duration_ms = t0.elapsed().as_secs_f64() * 1e3;
        let cycle_ms = last_end.elapsed().as_secs_f64() * 1e3;
        last_end = Instant::now();
        summary.iterations += 1;
        if let Some(f) = log.as_mut() {
            // One write per row, so that a worker stopped meanwhile leaves
            // whole rows (and at most a last one without its newline).
            let row = format!(
                "{},{},{},{iteration},{start:.3},{delay_ms:.3},{duration_ms:.3},{comm_ms:.3},{cycle_ms:.3}\n",
                env.job, env.rank, env.epoch
            );
            f.write_all(row.as_bytes())?;
        }
        let answer = agent.call(&json!({
            "op": "report", "job": env.job.to_string(), "epoch": env.epoch, "iteration": iteration,
            "start_unix_ms": start, "duration_ms": duration_ms, "comm_ms": comm_ms,
        }))?;
        if answer["done"].as_bool() == Some(true) {
            summary.stopped = "done".into();
            return Ok(summary);
        }
    }
}
