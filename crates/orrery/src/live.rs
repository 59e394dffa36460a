//! The live commands: `orrery serve`, the client commands (`submit`, `jobs`,
//! `nodes`, `cancel`) and `orrery agent --node`. All the work is in
//! `orrery_serve`; this module parses flags and prints.

use anyhow::{Context, Result, bail};
use clap::Args as ClapArgs;
use orrery_serve::client::Client;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Arguments of `orrery serve`.
#[derive(ClapArgs, Debug)]
pub struct ServeArgs {
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1:7400")]
    listen: SocketAddr,
    /// Directory for the database (orrery.db) and the token files.
    #[arg(long, default_value = "orrery-data")]
    data: PathBuf,
    /// Scheduling policy: any name `orrery policies` lists.
    #[arg(long, default_value = "themis+cassini")]
    policy: String,
    /// Cluster: a built-in set-up (`orrery topo list`) or a TOML/JSON file.
    #[arg(long, default_value = "demo")]
    topology: String,
    /// A node whose agent is silent this long is marked down and its jobs re-queued, s.
    #[arg(long, default_value_t = 10.0, value_parser = crate::numbers::positive)]
    node_timeout_s: f64,
    /// Seed of the policy's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the state lives: `sqlite` (orrery.db in --data, one service),
    /// or `etcd://HOST:PORT[,HOST:PORT...][/PREFIX]` to run as one replica of
    /// a highly available service: one replica leads, the others stand by
    /// and take over when its lease lapses.
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// With --store etcd://: the URL clients and other replicas reach this
    /// replica at (default http://LISTEN).
    #[arg(long)]
    advertise: Option<String>,
    /// With --store etcd://: the leader's lease, s; a dead leader is replaced
    /// about this long after its last renewal.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(i64).range(2..=60))]
    lease_s: i64,
    /// With --store etcd://: the leader compacts etcd's history to what it
    /// was one interval ago, every this many seconds (kube-apiserver's
    /// default is 5 minutes); 0 never does (then compact etcd yourself,
    /// e.g. with its `--auto-compaction-retention`).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    etcd_compaction_interval_s: u64,
    /// Tenants borrow idle quota, and give it back, by their recent usage
    /// over their share (Slurm's fair-share factor), past usage halving
    /// every this long (`30m`, `1h`, `7d`); without it, by borrowed GPUs
    /// over weight (Kueue's fair sharing).
    #[arg(long, value_name = "HALF_LIFE", value_parser = crate::numbers::duration_s)]
    fair_share: Option<f64>,
    /// A job that ended (finished, cancelled or rejected) is kept this
    /// long (`300s`, `1h`, `7d`), then forgotten with its log entries:
    /// `orrery jobs` no longer lists it, its id may be submitted again, and
    /// the service's memory and store hold only recent jobs (Slurm's
    /// MinJobAge, Kubernetes' ttlSecondsAfterFinished).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = crate::numbers::duration_s)]
    keep_finished: f64,
    /// How the hosts' transport shares a link among flows: `unequal` where
    /// they run BBR over tail-drop switches (FORESIGHT then routes whole
    /// flows, not subflows over several spines), `equal` otherwise.
    #[arg(long, default_value = "equal", value_parser = |s: &str| s.parse::<orrery_policy::FlowSharing>())]
    flow_sharing: orrery_policy::FlowSharing,
    #[command(flatten)]
    tls: TlsArgs,
}

/// How a server of orrery's speaks: HTTPS with a certificate, or plain
/// HTTP on loopback (beyond it only when asked for).
#[derive(ClapArgs, Debug, Clone)]
pub struct TlsArgs {
    /// Serve HTTPS with this PEM certificate chain (with --tls-key;
    /// `orrery certs` makes one for a test cluster).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The certificate's PEM private key.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plain HTTP on an address other than loopback: tokens and
    /// decisions then cross the network in clear.
    #[arg(long)]
    insecure_http: bool,
}

impl TlsArgs {
    /// The server identity for the listeners `listen` (each named by its
    /// flag), or None for plain HTTP, which is refused beyond loopback
    /// without --insecure-http.
    pub fn server_config(
        &self,
        listen: &[(&str, SocketAddr)],
    ) -> Result<Option<std::sync::Arc<orrery_serve::tls::ServerConfig>>> {
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            return Ok(Some(orrery_serve::tls::server_config(cert, key).context("--tls-cert/--tls-key")?));
        }
        for (flag, addr) in listen {
            if !addr.ip().is_loopback() && !self.insecure_http {
                bail!(
                    "{flag} {addr}: plain HTTP beyond loopback would send tokens in clear; serve HTTPS \
                     (--tls-cert/--tls-key; `orrery certs` makes them for a test cluster) or pass --insecure-http"
                );
            }
        }
        Ok(None)
    }
}

/// Where the client commands find the service.
#[derive(ClapArgs, Debug)]
pub struct ClientArgs {
    /// Service URL.
    #[arg(long, env = "ORRERY_SERVER", default_value = "http://127.0.0.1:7400")]
    server: String,
    /// File holding a token: the administrators' user.token (made by `orrery
    /// serve` in its data directory) or a tenant's (`orrery tenant token`).
    #[arg(long, env = "ORRERY_TOKEN_FILE", default_value = "orrery-data/user.token")]
    token: PathBuf,
    /// The CA that signed the service's certificate (PEM), for an https://
    /// service with a certificate of its own cluster's CA.
    #[arg(long, env = "ORRERY_CA_FILE", value_name = "FILE")]
    ca: Option<PathBuf>,
}

/// Node-agent flags of `orrery agent --node`.
#[derive(ClapArgs, Debug)]
pub struct NodeArgs {
    /// Service URL.
    #[arg(long, env = "ORRERY_SERVER", default_value = "http://127.0.0.1:7400")]
    server: String,
    /// File holding the agent token (agent.token in the service's data directory).
    #[arg(long, value_name = "FILE", default_value = "orrery-data/agent.token")]
    token: PathBuf,
    /// The CA that signed an https:// service's certificate (PEM).
    #[arg(long, env = "ORRERY_CA_FILE", value_name = "FILE")]
    ca: Option<PathBuf>,
    /// This host's name in the service's topology (h0, h1, ... in the demo).
    #[arg(long)]
    name: Option<String>,
    /// GPUs this node offers (default: the topology's).
    #[arg(long)]
    gpus: Option<u32>,
    /// NIC rate, Gbit/s (default: the topology's).
    #[arg(long, value_parser = crate::numbers::positive)]
    nic_gbps: Option<f64>,
    /// Unix socket for training processes (default: orrery-data/agent-NAME.sock).
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Command to start for each worker placed here (run by `sh -c`, with
    /// ORRERY_AGENT_SOCKET, ORRERY_JOB, ORRERY_EPOCH, ORRERY_RANK, ... set).
    #[arg(long)]
    exec: Option<String>,
    /// This host's address on the data network; workers of a job reach each
    /// other there (`orrery testbed up` prints each host's).
    #[arg(long, value_name = "IP")]
    data_addr: Option<std::net::IpAddr>,
    /// Start the training processes inside this network namespace (a host
    /// of `orrery testbed up`).
    #[arg(long, value_name = "NS")]
    netns: Option<String>,
    /// Enforce throttles with tc on this device (in --netns), e.g. eth0 on a
    /// testbed host.
    #[arg(long, value_name = "DEV")]
    shape_dev: Option<String>,
    /// The data network's device (in --netns), given to training processes
    /// as GLOO_SOCKET_IFNAME and NCCL_SOCKET_IFNAME (default: --shape-dev).
    #[arg(long, value_name = "DEV")]
    data_dev: Option<String>,
    /// The device's rates are the topology's times this (the testbed's --scale).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR", value_parser = crate::numbers::positive)]
    rate_scale: f64,
    /// Append the round trip of every batch of iteration reports sent to
    /// the service to this CSV (`unix_ms,round_trip_ms,reports,outcome`):
    /// the agent's view of the control plane's latency.
    #[arg(long, value_name = "FILE")]
    report_log: Option<PathBuf>,
}

pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

pub(crate) fn init_logs() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}

/// `orrery serve`.
pub fn serve(args: &ServeArgs) -> Result<()> {
    init_logs();
    if orrery_policy::by_name(&args.policy, args.seed).is_none() {
        bail!("--policy: unknown policy {:?} (see `orrery policies`)", args.policy);
    }
    let topology = crate::topo::load(&args.topology)?;
    let config = orrery_serve::core::Config {
        policy: args.policy.clone(),
        seed: args.seed,
        topology: topology.clone(),
        node_timeout_s: args.node_timeout_s,
        heartbeat_s: (args.node_timeout_s / 5.0).min(1.0),
        fair_share_half_life_s: args.fair_share,
        keep_finished_s: args.keep_finished,
        flow_sharing: args.flow_sharing,
        pins: Default::default(),
    };
    let ha = match args.store.as_str() {
        "sqlite" => None,
        url => Some(orrery_serve::HaOptions {
            etcd: url.parse().context("--store")?,
            advertise: args.advertise.clone().unwrap_or_else(|| {
                let scheme = if args.tls.tls_cert.is_some() { "https" } else { "http" };
                format!("{scheme}://{}", args.listen)
            }),
            lease_s: args.lease_s,
            compact_every_s: args.etcd_compaction_interval_s,
        }),
    };
    if ha.is_none() && args.advertise.is_some() {
        bail!("--advertise: only a replica on etcd (--store etcd://...) advertises itself");
    }
    let tls = args.tls.server_config(&[("--listen", args.listen)])?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let opts = orrery_serve::ServeOptions { config, listen: args.listen, data_dir: args.data.clone(), ha, tls };
    if opts.ha.is_some() {
        return serve_replica(args, opts);
    }
    runtime()?.block_on(async {
        let running = orrery_serve::start(opts).await?;
        let url = format!("{scheme}://{}", running.addr);
        let d = args.data.display();
        let host = &topology.hosts[0];
        // The banner is best effort: a closed stdout must not stop the service.
        let banner = format!(
            "orrery serving {url} (policy {}, topology {}: {} hosts)\n\
             \x20 database  {d}/orrery.db (SQLite, WAL, synchronous=FULL)\n\
             \x20 tokens    {d}/user.token (submit, read), {d}/agent.token (node agents)\n\
             start an agent per host:\n\
             \x20 orrery agent --node --server {url} --token {d}/agent.token --name {} --gpus {} --nic-gbps {}\n\
             submit jobs (JSON lines, as `orrery trace`):\n\
             \x20 orrery submit --server {url} --token {d}/user.token examples/live/vgg-a.jsonl\n\
             \x20 orrery jobs / orrery nodes / orrery cancel ID\n",
            args.policy,
            topology.name,
            topology.hosts.len(),
            host.name,
            host.gpus,
            topology.host_nic_gbps(0)
        );
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(banner.as_bytes());
            let _ = out.flush();
        }
        tokio::select! {
            r = running.wait() => r,
            _ = orrery_serve::shutdown_signal() => { tracing::info!("stopping"); Ok(()) }
        }
    })
}

/// `orrery serve --store etcd://...`: one replica of a highly available service.
fn serve_replica(args: &ServeArgs, opts: orrery_serve::ServeOptions) -> Result<()> {
    let ha = opts.ha.clone().context("a replica needs --store etcd://")?;
    runtime()?.block_on(async {
        let mut replica = orrery_serve::start_replica(opts).await?;
        let d = args.data.display();
        let banner = format!(
            "orrery replica listening on http://{} (advertised as {}; policy {}, topology {})\n\
             \x20 store     etcd {} (prefix {}), leader lease {} s\n\
             \x20 tokens    {d}/user.token, {d}/agent.token (shared by every replica through etcd)\n\
             \x20 standby until elected: /v1/readyz answers 503, other requests name the leader\n\
             clients and agents take every replica: --server URL1,URL2,URL3\n",
            replica.addr,
            ha.advertise,
            args.policy,
            args.topology,
            ha.etcd.endpoints.join(","),
            ha.etcd.prefix,
            ha.lease_s
        );
        {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(banner.as_bytes());
            let _ = out.flush();
        }
        tokio::select! {
            r = replica.wait() => r,
            _ = orrery_serve::shutdown_signal() => {
                tracing::info!("stopping; a leader resigns");
                replica.resign().await;
                Ok(())
            }
        }
    })
}

pub(crate) fn client(args: &ClientArgs) -> Result<Client> {
    let token = orrery_serve::auth::read_token(&args.token)
        .with_context(|| "the user token (start `orrery serve` first, or pass --token FILE)")?;
    Client::with_ca(&args.server, &token, args.ca.as_deref()).map_err(|e| anyhow::anyhow!("{e}"))
}

/// `orrery submit JOBS.jsonl`: every valid line is submitted; bad lines are
/// reported with their line and field and submitted lines are not lost.
pub fn submit(args: &ClientArgs, file: &Path) -> Result<()> {
    let text = if file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())?
    } else {
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?
    };
    let parsed = orrery_trace::formats::jsonl::parse(&file.display().to_string(), &text);
    for e in &parsed.errors {
        eprintln!("{e}");
    }
    let c = client(args)?;
    let unreachable = std::sync::Arc::new(std::sync::OnceLock::<String>::new());
    let results = runtime()?.block_on(async {
        use std::sync::Arc;
        let sem = Arc::new(tokio::sync::Semaphore::new(32));
        let mut out = Vec::new();
        // The service takes a dependency only on a job it already has, so a
        // file's jobs go in waves: each after the jobs of the file it
        // depends on (requests within a wave run 32 at a time).
        for wave in dependency_waves(parsed.items) {
            let mut tasks = Vec::new();
            for spec in wave {
                let (c, sem, unreachable) = (c.clone(), sem.clone(), unreachable.clone());
                tasks.push(tokio::spawn(async move {
                    let _permit = sem.acquire().await;
                    // Once the service cannot be reached, the rest are not tried.
                    if unreachable.get().is_some() {
                        return (spec.id, None);
                    }
                    let r = c.submit(&spec).await;
                    if let Err(e) = &r
                        && e.is_unreachable()
                    {
                        let _ = unreachable.set(e.to_string());
                    }
                    (spec.id, Some(r))
                }));
            }
            for t in tasks {
                out.push(t.await?);
            }
        }
        anyhow::Ok(out)
    })?;
    let mut failed = parsed.errors.len();
    let mut out = std::io::stdout().lock();
    for (name, r) in results {
        match r {
            Some(Ok(s)) if s.existing => writeln!(out, "{name}\tjob {}\t(already submitted)", s.id)?,
            Some(Ok(s)) => writeln!(out, "{name}\tjob {}", s.id)?,
            Some(Err(e)) if e.is_unreachable() => failed += 1,
            Some(Err(e)) => {
                failed += 1;
                eprintln!("{name}: {e}");
            }
            None => failed += 1,
        }
    }
    if let Some(why) = unreachable.get() {
        bail!("cannot reach the service at {}: {why}; {failed} job(s) not submitted", args.server);
    }
    if failed > 0 {
        bail!("{failed} job(s) not submitted");
    }
    Ok(())
}

/// Jobs in submission waves: a job comes in the wave after the last of the
/// file's jobs it depends on (dependencies outside the file are the
/// service's to check). Jobs in a cycle, or depending on one, go last, where
/// the service refuses them by name. O(jobs × dependencies × waves).
fn dependency_waves(jobs: Vec<orrery_model::JobSpec>) -> Vec<Vec<orrery_model::JobSpec>> {
    let in_file: std::collections::HashSet<String> = jobs.iter().map(|j| j.id.clone()).collect();
    let mut placed: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut left = jobs;
    let mut waves = Vec::new();
    while !left.is_empty() {
        let (ready, rest): (Vec<_>, Vec<_>) =
            left.into_iter().partition(|j| j.depends_on.iter().all(|d| !in_file.contains(d) || placed.contains(d)));
        if ready.is_empty() {
            waves.push(rest);
            break;
        }
        placed.extend(ready.iter().map(|j| j.id.clone()));
        waves.push(ready);
        left = rest;
    }
    waves
}

/// `orrery jobs`.
pub fn jobs(args: &ClientArgs, status: Option<&str>, json: bool) -> Result<()> {
    let c = client(args)?;
    let jobs = runtime()?.block_on(c.jobs(status)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&jobs)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "{:>5}  {:<20} {:<10} {:<12} {:>5} {:>12} {:>9} {:>9}  {:<18} in force",
        "id", "name", "status", "model", "gpus", "iterations", "period ms", "mean ms", "hosts"
    )?;
    for j in jobs {
        let hosts: Vec<String> = j.hosts.iter().map(|(h, g)| format!("{h}:{g}")).collect();
        // The target is known once placed (for a time-bound job), or from
        // the spec; the period only while placed; the mean over the current
        // placement's reports since the service started.
        let target = match (j.target_iterations, j.spec.work) {
            (0, orrery_model::Work::Iterations(n)) => n.to_string(),
            (0, _) => "-".into(),
            (n, _) => n.to_string(),
        };
        let dash = |x: Option<f64>| x.filter(|v| *v > 0.0).map_or("-".into(), |v| format!("{v:.1}"));
        writeln!(
            out,
            "{:>5}  {:<20} {:<10} {:<12} {:>5} {:>12} {:>9} {:>9}  {:<18} {}",
            j.id,
            j.spec.id,
            j.status.name(),
            j.spec.model,
            j.spec.gpus(),
            format!("{}/{target}", j.iterations_done),
            dash(Some(j.period_ms)),
            dash(j.mean_iteration_ms),
            if hosts.is_empty() { "-".into() } else { hosts.join(",") },
            in_force(&j.in_force)
        )?;
    }
    Ok(())
}

/// The decisions in force, briefly.
fn in_force(f: &orrery_serve::api::InForce) -> String {
    let mut parts = Vec::new();
    if f.shift_ms_total > 0.0 {
        parts.push(format!("shift {:.1} ms", f.shift_ms_total));
    }
    if let Some(a) = f.align {
        parts.push(format!("align {:.1} ms @ {:.3} s", a.period_ms, a.offset_s));
    }
    if let Some(p) = f.pace {
        parts.push(format!("pace {:.1} ms @ {:.3} s", p.period_ms, p.offset_s));
    }
    if f.paused {
        parts.push("paused".into());
    }
    if let Some(g) = f.throttle_gbps {
        parts.push(format!("throttle {g} Gb/s"));
    }
    if !f.routes.is_empty() {
        parts.push(format!("{} routes", f.routes.len()));
    }
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

/// `orrery decisions`: the committed log.
pub fn decisions(args: &ClientArgs, since: u64, json: bool) -> Result<()> {
    let c = client(args)?;
    let log = runtime()?.block_on(c.decisions(since)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    for e in log {
        if json {
            writeln!(out, "{}", serde_json::to_string(&e)?)?;
        } else {
            writeln!(out, "{:>6} {:>10.3} s  {:<7} {}", e.seq, e.at_s, e.source, serde_json::to_string(&e.entry)?)?;
        }
    }
    Ok(())
}

/// `orrery nodes`.
pub fn nodes(args: &ClientArgs) -> Result<()> {
    let c = client(args)?;
    let nodes = runtime()?.block_on(c.nodes()).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!(
        "{:>4}  {:<10} {:<5} {:>9} {:>5} {:>9} {:>9}  jobs",
        "host", "name", "up", "gpus", "free", "nic Gb/s", "silent s"
    );
    for n in nodes {
        let jobs: Vec<String> = n.jobs.iter().map(ToString::to_string).collect();
        println!(
            "{:>4}  {:<10} {:<5} {:>9} {:>5} {:>9} {:>9}  {}",
            n.host,
            n.name,
            if n.up { "up" } else { "down" },
            format!("{}/{}", n.gpus, n.topology_gpus),
            n.free_gpus,
            n.nic_gbps,
            n.silent_s.map_or("-".into(), |s| format!("{s:.1}")),
            jobs.join(",")
        );
    }
    Ok(())
}

/// `orrery cancel ID`.
pub fn cancel(args: &ClientArgs, id: &str) -> Result<()> {
    let c = client(args)?;
    let j = runtime()?.block_on(c.cancel(id)).map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("job {} ({}) {}", j.id, j.spec.id, j.status.name());
    Ok(())
}

/// `orrery agent --node`.
pub fn node_agent(args: &NodeArgs) -> Result<()> {
    init_logs();
    let Some(name) = args.name.clone() else {
        bail!("--node needs --name HOST (its name in the service's topology)");
    };
    // Without --gpus or --nic-gbps the agent offers what the topology says
    // (a DaemonSet's agents, whose nodes the topology was read from).
    let (gpus, nic_gbps) = (args.gpus.unwrap_or(0), args.nic_gbps.unwrap_or(0.0));
    if args.gpus == Some(0) {
        bail!("--gpus: expected at least 1 (or leave it out to offer the topology's)");
    }
    let token = orrery_serve::auth::read_token(&args.token)?;
    let socket = args.socket.clone().unwrap_or_else(|| PathBuf::from(format!("orrery-data/agent-{name}.sock")));
    let opts = orrery_serve::node_agent::AgentOptions {
        server: args.server.clone(),
        token,
        name,
        gpus,
        nic_gbps,
        socket,
        exec: args.exec.clone(),
        poll_s: 20.0,
        data_addr: args.data_addr,
        netns: args.netns.clone(),
        shape_dev: args.shape_dev.clone(),
        data_dev: args.data_dev.clone().or_else(|| args.shape_dev.clone()),
        rate_scale: args.rate_scale,
        clock_skew_ms: 0.0,
        ca: args.ca.clone(),
        report_log: args.report_log.clone(),
    };
    runtime()?.block_on(orrery_serve::node_agent::run(opts))
}

/// Arguments of `orrery bench serve`.
#[derive(ClapArgs, Debug)]
pub struct BenchServeArgs {
    /// Jobs to submit, the first of the trace.
    #[arg(long, default_value_t = 5000)]
    jobs: usize,
    /// Submissions in flight.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Policy.
    #[arg(long, default_value = "fifo")]
    policy: String,
    /// Cluster; every host is registered first.
    #[arg(long, default_value = "leaf-spine")]
    topology: String,
    /// Jobs come from this trace (any format `orrery trace` reads).
    #[arg(long, default_value = "data/philly/philly_jobs_pollux.csv")]
    trace: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Where the service commits: `sqlite` (one file, synchronous=FULL),
    /// `etcd` (a 3-member etcd started on loopback for the run; needs
    /// Debian's etcd-server) or `etcd://HOST:PORT[,...][/PREFIX]` (an
    /// existing one).
    #[arg(long, default_value = "sqlite")]
    store: String,
    /// Emulate this many node agents against a real `orrery serve` (started
    /// as a child process on a leaf-spine of at least that many hosts, 8
    /// GPUs each): they register, heartbeat, long-poll and report every
    /// iteration of their jobs. 0: the submission benchmark alone.
    #[arg(long, default_value_t = 0)]
    nodes: usize,
    /// With --nodes: the measured window, s.
    #[arg(long, default_value_t = 20.0, value_parser = crate::numbers::positive)]
    seconds: f64,
    /// With --nodes: iterations per second each job runs and reports.
    #[arg(long, default_value_t = 5.0, value_parser = crate::numbers::positive)]
    iterations_per_s: f64,
    /// Serve and submit over HTTPS (a test CA's certificate): what TLS costs.
    #[arg(long)]
    tls: bool,
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Hosts per rack of the `--nodes` fleet's leaf-spine.
const FLEET_RACK: usize = 25;

/// `orrery bench serve --nodes N`: a real `orrery serve` (this binary, as a
/// child) against N emulated agents in this process.
fn bench_fleet(args: &BenchServeArgs, trace_jobs: Vec<orrery_model::JobSpec>) -> Result<()> {
    let n = args.nodes;
    let dir = std::env::temp_dir().join(format!("orrery-fleet-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let racks = n.div_ceil(FLEET_RACK);
    let per_rack = n.div_ceil(racks);
    let topo_file = dir.join("fleet.toml");
    std::fs::write(
        &topo_file,
        format!(
            "name = \"fleet-{n}\"\n[leaf_spine]\nracks = {racks}\nhosts_per_rack = {per_rack}\nspines = 4\n\
             gpus_per_host = 8\ngpu_type = \"v100\"\nhost_gbps = 100.0\nuplink_gbps = 400.0\n"
        ),
    )?;
    let topo = crate::topo::load(&topo_file.display().to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--policy", &args.policy, "--topology"])
        .arg(&topo_file)
        .arg("--data")
        .arg(dir.join("data"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting orrery serve")?;
    let result = (|| {
        let mut first = String::new();
        let stdout = child.stdout.take().context("serve's stdout")?;
        let mut out = std::io::BufReader::new(stdout);
        std::io::BufRead::read_line(&mut out, &mut first)?;
        if !first.starts_with("orrery serving") {
            bail!("orrery serve did not start: {first:?}");
        }
        std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
        let read = |f: &str| orrery_serve::auth::read_token(&dir.join("data").join(f));
        // Jobs from the trace, each running until the run ends: enough to
        // fill about 90% of the GPUs, then `--jobs` more during the window.
        let capacity: u32 = topo.hosts.iter().take(n).map(|h| h.gpus).sum();
        let mut specs = trace_jobs.into_iter().cycle().enumerate().map(|(i, mut s)| {
            s.id = format!("fleet-{i}-{}", s.id);
            s.work = orrery_model::Work::Iterations(10_000_000);
            s.arrival_s = 0.0;
            s.depends_on.clear();
            s
        });
        let (mut load, mut gpus) = (Vec::new(), 0u32);
        while gpus < capacity * 9 / 10 {
            let Some(s) = specs.next() else { break };
            gpus += s.gpus();
            load.push(s);
        }
        let burst: Vec<_> = specs.take(args.jobs).collect();
        let opts = orrery_serve::fleet::FleetOptions {
            url: format!("http://127.0.0.1:{port}"),
            agent_token: read("agent.token")?,
            user_token: read("user.token")?,
            hosts: topo.hosts.iter().take(n).map(|h| h.name.clone()).collect(),
            load,
            burst,
            concurrency: args.concurrency,
            iterations_per_s: args.iterations_per_s,
            seconds: args.seconds,
            server_pid: Some(child.id()),
        };
        runtime()?.block_on(orrery_serve::fleet::run(opts))
    })();
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let r = result?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} emulated agents against orrery serve ({}) for {:.1} s, {} jobs running, {} iterations/s each",
            r.nodes, args.policy, r.seconds, r.jobs_running, args.iterations_per_s
        );
        println!(
            "  iteration reports    {:>9.0} /s   ({} requests, {} refused)",
            r.iterations_reported as f64 / r.seconds,
            r.report_requests,
            r.reports_refused
        );
        println!("  report latency       {:>9.2} ms p50 {:>9.2} ms p99", r.report_ms_p50, r.report_ms_p99);
        println!(
            "  heartbeats           {:>9.0} /s   ({} refused)",
            r.heartbeats as f64 / r.seconds,
            r.heartbeats_refused
        );
        println!("  nodes marked down    {:>9}      (every agent was alive)", r.false_downs);
        println!(
            "  durable submissions  {:>9.0} /s   ({:.2} ms p99, during the load)",
            r.submissions_per_s, r.submit_ms_p99
        );
        if let Some(c) = r.server_cores {
            println!("  service CPU          {:>9.2} cores", c);
        }
        if let Some(c) = r.fleet_cores {
            println!("  emulated fleet CPU   {:>9.2} cores (this process; {} cores on this machine)", c, cores());
        }
    }
    Ok(())
}

/// `orrery bench serve`.
pub fn bench_serve(args: &BenchServeArgs) -> Result<()> {
    let (_, parsed) = orrery_trace::formats::read_file(&args.trace, None, 1);
    if parsed.items.is_empty() {
        bail!("{}: no jobs read ({} bad rows)", args.trace.display(), parsed.errors.len());
    }
    if args.nodes > 0 {
        return bench_fleet(args, parsed.items);
    }
    let jobs: Vec<_> = parsed.items.into_iter().take(args.jobs).collect();
    let dir = std::env::temp_dir().join(format!("orrery-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // `etcd`: a throwaway 3-member cluster on loopback, stopped when dropped.
    let mut local_etcd = None;
    let (ha, committed_to) = match args.store.as_str() {
        "sqlite" => (None, "SQLite (WAL, synchronous=FULL)".to_string()),
        other => {
            let url = if other == "etcd" {
                if let Some(why) = orrery_serve::store::testing::unavailable() {
                    bail!("--store etcd: {why}");
                }
                let cluster = orrery_serve::store::testing::EtcdCluster::start(3)?;
                let url = cluster.url("bench");
                local_etcd = Some(cluster);
                url
            } else {
                other.to_string()
            };
            let etcd: orrery_serve::etcd::EtcdUrl = url.parse().context("--store")?;
            let what = format!("a quorum of etcd {}", etcd.endpoints.join(","));
            (
                Some(orrery_serve::HaOptions {
                    etcd,
                    advertise: "http://127.0.0.1".into(),
                    lease_s: 3,
                    compact_every_s: 300,
                }),
                what,
            )
        }
    };
    let opts = orrery_serve::bench::BenchOptions {
        jobs,
        concurrency: args.concurrency,
        policy: args.policy.clone(),
        topology: crate::topo::load(&args.topology)?,
        data_dir: dir.clone(),
        ha,
        tls: args.tls,
    };
    let report = runtime()?.block_on(orrery_serve::bench::run(opts));
    let _ = std::fs::remove_dir_all(&dir);
    drop(local_etcd);
    let r = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "{} jobs from {} in {:.2} s over HTTP on loopback, each committed to {committed_to} before its answer",
            r.jobs,
            args.trace.display(),
            r.seconds
        );
        println!("  durable submissions  {:>9.0} /s   ({} in flight)", r.submissions_per_s, args.concurrency);
        println!("  submit latency       {:>9.2} ms p50 {:>9.2} ms p99", r.latency_ms_p50, r.latency_ms_p99);
        println!(
            "  policy decisions     {:>9} logged ({} placements, policy {})",
            r.decisions, r.placements, args.policy
        );
        println!("  policy call          {:>9.3} ms mean over {} calls", r.policy_call_ms_mean, r.policy_calls);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::dependency_waves;

    #[test]
    fn a_files_jobs_are_submitted_after_the_jobs_they_depend_on() {
        let spec = |id: &str, deps: &[&str]| -> orrery_model::JobSpec {
            let line = serde_json::json!({"id": id, "model": "resnet50", "workers": 1, "arrival_s": 0,
                                          "work": {"iterations": 1}, "depends_on": deps});
            serde_json::from_value(line).expect("a job spec")
        };
        let jobs =
            vec![spec("c", &["b"]), spec("b", &["a"]), spec("a", &[]), spec("d", &["elsewhere"]), spec("e", &["e"])];
        let waves: Vec<Vec<String>> =
            dependency_waves(jobs).into_iter().map(|w| w.into_iter().map(|j| j.id).collect()).collect();
        assert_eq!(waves, [vec!["a", "d"], vec!["b"], vec!["c"], vec!["e"]]);
    }
}
