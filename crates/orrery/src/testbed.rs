//! `orrery testbed`: orrery topologies as Linux network namespaces with
//! tc-shaped links, driven by the live service and emulated workers (or real
//! PyTorch DDP ranks with `--ddp`).

use anyhow::{Context, Result, bail};
use orrery_testbed::compare;
use orrery_testbed::drive::{DdpWorkers, DriveOptions, Workers, drive};
use orrery_testbed::fabric::{self, Fabric, FabricOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Build a topology as network namespaces and leave it up (needs root).
    Up(UpArgs),
    /// Run an experiment's workload on the testbed, driven by the live
    /// service, agents and emulated workers; writes measured.json per policy.
    Run(Box<ScenarioArgs>),
    /// Run an experiment on the testbed and in the simulator at the same
    /// scale; writes compare.md/.csv and figures (iteration-time CDFs, the
    /// busiest link over time) per policy.
    Compare(Box<ScenarioArgs>),
    /// Measure the node agent's tc throttles on real TCP: two hosts, one
    /// job's class at each cap, one TCP transfer each, against the payload
    /// the cap allows (1448/1514 of it), and an unthrottled control.
    Throttle(ThrottleArgs),
    /// Measure how a shaped link shares itself between TCP flows: one flow
    /// per congestion control, all across one uplink at once, each against
    /// its fair share (try `--fabric fair` against the default tail-drop).
    Share(ShareArgs),
    /// Remove every namespace a testbed with this prefix made.
    Down {
        /// Namespace prefix.
        #[arg(long, default_value = "orr")]
        prefix: String,
    },
}

/// Flags of `orrery testbed up`.
#[derive(clap::Args, Debug)]
pub struct UpArgs {
    /// Built-in topology name or file (`orrery topo list`).
    #[arg(long, default_value = "demo")]
    topology: String,
    #[command(flatten)]
    fabric: FabricArgs,
}

/// Flags of `orrery testbed throttle`.
#[derive(clap::Args, Debug)]
pub struct ThrottleArgs {
    /// Per-flow caps, Gbit/s at the model's scale (the links run at 100).
    #[arg(long, value_delimiter = ',', default_value = "10,25,50,75", value_parser = crate::numbers::positive)]
    gbps: Vec<f64>,
    #[command(flatten)]
    transfers: TransferArgs,
}

/// The transfers `orrery testbed throttle` and `share` measure, and where
/// their rows go.
#[derive(clap::Args, Debug)]
pub struct TransferArgs {
    /// Length of each transfer, s.
    #[arg(long, default_value_t = 4.0, value_parser = crate::numbers::positive)]
    seconds: f64,
    /// Left out at the start of each transfer, s.
    #[arg(long, default_value_t = 1.0, value_parser = crate::numbers::non_negative)]
    warmup_s: f64,
    /// Also write the rows as JSON to this file.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    #[command(flatten)]
    fabric: FabricArgs,
}

impl TransferArgs {
    /// Writes `rows` as JSON to `--out`, when given.
    fn write(&self, rows: &impl serde::Serialize) -> Result<()> {
        if let Some(out) = &self.out {
            let json = serde_json::to_vec_pretty(rows)?;
            orrery_model::files::write_atomic(out, &json).with_context(|| format!("writing {}", out.display()))?;
        }
        Ok(())
    }
}

/// Flags of `orrery testbed share`.
#[derive(clap::Args, Debug)]
pub struct ShareArgs {
    /// One flow per congestion control, all at once (2 to 8).
    #[arg(long, value_delimiter = ',', default_value = "bbr,cubic")]
    cc: Vec<String>,
    /// Traffic class of each flow, marked as the node agent marks a job's
    /// `TrafficClass` (try `--fabric priority --classes 7,0`; default: all 0).
    #[arg(long, value_delimiter = ',')]
    classes: Vec<u8>,
    #[command(flatten)]
    transfers: TransferArgs,
}

/// Flags of `orrery testbed run` and `compare`.
#[derive(clap::Args, Debug)]
pub struct ScenarioArgs {
    /// Experiment file (`experiments/*.toml`): topology, workload, policies.
    experiment: PathBuf,
    /// The experiment's scenario to run (by name), when it has several.
    #[arg(long)]
    scenario: Option<String>,
    /// Only these of its policies (comma-separated; default: all).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Run every job for this many iterations instead of the file's work.
    #[arg(long)]
    iterations: Option<u64>,
    /// Leave each job's first iterations out of its times, on both sides
    /// (start-up: connecting the ring, first alignments).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Seed (default: the experiment's first).
    #[arg(long)]
    seed: Option<u64>,
    /// Output folder.
    #[arg(long, default_value = "out/testbed")]
    out: PathBuf,
    /// Run each policy this many times; the testbed's figures are the
    /// median over the runs, with their range (real TCP varies from run to
    /// run; the simulator runs once).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    runs: u32,
    /// Give up on a policy's run after this many seconds.
    #[arg(long, default_value_t = 600.0, value_parser = crate::numbers::positive)]
    time_limit_s: f64,
    /// Sample link counters this often, s.
    #[arg(long, default_value_t = 0.5, value_parser = crate::numbers::positive)]
    sample_s: f64,
    /// TCP congestion control of the workers' connections (cubic, reno,
    /// bbr); `mltcp-CC` (e.g. mltcp-reno) runs CC in the kernel with
    /// MLTCP's pacer over it: in `orrery worker` on its sockets, in a
    /// --ddp script on its all-reduces (`--pace mltcp`, paced chunks).
    #[arg(long, default_value = "cubic")]
    cc: String,
    /// Workers compute this many times the model's time: real iterations
    /// longer than modelled, as closed-loop timing must absorb.
    #[arg(long, default_value_t = 1.0, value_parser = crate::numbers::positive)]
    compute_stretch: f64,
    /// Every other host's clock (h1, h3, ...) runs this much ahead of the
    /// service's, ms: agents must measure the offset.
    #[arg(long, default_value_t = 0.0)]
    clock_skew_ms: f64,
    /// The policy and the simulator model links at this fraction of their
    /// rate: TCP payload per byte on the wire (1448/1514 at MTU 1500); 1
    /// models the shaped rate as payload.
    #[arg(long, default_value_t = orrery_testbed::fabric::TCP_GOODPUT, value_parser = crate::numbers::fraction)]
    goodput: f64,
    /// Run every job as real PyTorch DDP ranks (`--ddp-script`, gloo) instead
    /// of `orrery worker`. The first job runs alone first; its measured
    /// compute and all-reduce become every job's shape (shape.json), for the
    /// policy and the simulator alike.
    #[arg(long)]
    ddp: bool,
    /// Python with torch for --ddp (default: /usr/bin/python3 or python3,
    /// the first that imports torch).
    #[arg(long, value_name = "PATH")]
    python: Option<String>,
    /// The DDP training script (it writes orrery worker's logs with --log-dir).
    #[arg(long, default_value = "python/examples/ddp_train.py", value_name = "PATH")]
    ddp_script: PathBuf,
    /// Arguments to the DDP script, one string (for `ddp_train.py` the
    /// default is a 16 MiB gradient, compute held to 450 ms; for another
    /// script, none).
    #[arg(long, allow_hyphen_values = true)]
    ddp_args: Option<String>,
    /// Iterations of the run alone that measures the DDP shape (after the warm-up).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(3..))]
    calibration_iterations: u64,
    /// After each policy's runs, run every job again by itself on each set
    /// of hosts it was given (one job at a time, `pinned`): each job's
    /// slowdown is then measured against its own time alone on real TCP.
    #[arg(long)]
    alone: bool,
    /// Iterations of each run alone (after the warm-up).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(3..))]
    alone_iterations: u64,
    /// Run nothing on the testbed: read the runs an earlier `compare` saved
    /// in --out (each run's measured.json, and with --ddp the shape.json)
    /// and compare them with the simulator again, including its replay of
    /// each run from the run's measured starts. The other flags must be the
    /// ones the runs were made with; times alone (`--alone`) are not read
    /// back.
    #[arg(long)]
    replay: bool,
    /// The simulator models the testbed's transport (`--cc` over
    /// `--fabric`'s queueing at its scale, orrery_sim::transport) instead
    /// of max-min rates.
    #[arg(long)]
    sim_transport: bool,
    /// Capture each host's TCP headers during each run (`tcpdump`, which
    /// must be installed) into the run's folder (`run/pcap/NAMESPACE.pcap`)
    /// and report the retransmissions they show: how many the timer fired,
    /// and whether each re-sent a range already re-sent once (a lost
    /// retransmission); kept in measured.json
    #[arg(long)]
    pcap: bool,
    #[command(flatten)]
    fabric: FabricArgs,
}

/// The Python that runs `--ddp` workers: `--python`, else the first of
/// Debian's /usr/bin/python3 and `python3` that imports torch.
fn torch_python(given: Option<&str>) -> Result<String> {
    let tried: Vec<&str> = match given {
        Some(p) => vec![p],
        None => vec!["/usr/bin/python3", "python3"],
    };
    for py in &tried {
        let ok = std::process::Command::new(py)
            .args(["-c", "import torch.distributed as d; assert d.is_gloo_available()"])
            .output();
        if ok.is_ok_and(|o| o.status.success()) {
            return Ok(py.to_string());
        }
    }
    bail!("--ddp: none of {tried:?} imports torch with gloo (install Debian's python3-torch, or pass --python)")
}

/// How the fabric is built.
#[derive(clap::Args, Debug, Clone)]
pub struct FabricArgs {
    /// Link rates are the topology's times this (50 Gbit/s at 0.01 is 500 Mbit/s).
    #[arg(long, default_value_t = 0.01, value_parser = crate::numbers::positive)]
    pub scale: f64,
    /// Each link's queue, in ms of its scaled rate (at least 128 KiB).
    #[arg(long, default_value_t = 2.0, value_parser = crate::numbers::non_negative)]
    pub queue_ms: f64,
    /// Namespace prefix (namespaces are PREFIX-NODE).
    #[arg(long, default_value = "orr")]
    pub prefix: String,
    /// How each link queues its flows: `tail-drop` (one FIFO, TCP's flows
    /// take what their congestion controls win), `fair` (a class and a
    /// FIFO per host pair, served in turn: equal shares per flow, as RDMA's
    /// DCQCN converges to) or `priority` (eight strict-priority classes by
    /// IP precedence, which the node agents mark for Crux's `TrafficClass`).
    #[arg(long, default_value = "tail-drop")]
    pub fabric: orrery_testbed::fabric::Queueing,
}

impl FabricArgs {
    /// The library's options.
    pub fn options(&self) -> FabricOptions {
        FabricOptions { prefix: self.prefix.clone(), scale: self.scale, queue_ms: self.queue_ms, queueing: self.fabric }
    }
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Up(args) => {
            let topo = crate::topo::load(&args.topology)?;
            let f = Fabric::up(&topo, args.fabric.options())?;
            println!(
                "testbed {} up: {} namespaces, links at {}x their rate ({} pinnable paths)",
                topo.name,
                f.netns.len(),
                args.fabric.scale,
                f.pinned_paths
            );
            for w in &f.warnings {
                println!("warning: {w}");
            }
            println!("{:<10} {:<16} {:<14}", "host", "namespace", "address");
            for (h, host) in topo.hosts.iter().enumerate() {
                println!("{:<10} {:<16} {:<14}", host.name, f.host_netns(h), f.host_addrs[h]);
            }
            println!(
                "\nagents: orrery agent --node --name H --gpus N --nic-gbps R --netns NS --data-addr IP --shape-dev eth0 --rate-scale {}",
                args.fabric.scale
            );
            println!("remove: orrery testbed down --prefix {}", args.fabric.prefix);
            f.keep();
            Ok(())
        }
        Command::Throttle(args) => throttle(args),
        Command::Share(args) => share(args),
        Command::Run(args) => scenario(args, false),
        Command::Compare(args) => scenario(args, true),
        Command::Down { prefix } => {
            let removed = fabric::down(prefix)?;
            println!("removed {} namespaces{}", removed.len(), if removed.is_empty() { "" } else { ":" });
            for n in removed {
                println!("  {n}");
            }
            Ok(())
        }
    }
}

/// `orrery testbed throttle`: the table, and the JSON with `--out`.
fn throttle(args: &ThrottleArgs) -> Result<()> {
    use orrery_testbed::throttle::{ThrottleOptions, check};
    let opts = ThrottleOptions {
        gbps: args.gbps.clone(),
        seconds: args.transfers.seconds,
        warmup_s: args.transfers.warmup_s,
        fabric: args.transfers.fabric.options(),
    };
    let rows = check(&opts)?;
    println!(
        "| cap asked (Gbit/s, model) | on the wire (Mbit/s) | payload expected (Mbit/s) | measured (Mbit/s) | measured / expected |"
    );
    println!("|---|---:|---:|---:|---:|");
    for r in &rows {
        let asked = r.asked_gbps.map_or("none (the link)".to_string(), |g| format!("{g}"));
        println!("| {asked} | {:.1} | {:.1} | {:.1} | {:.3} |", r.wire_mbps, r.expected_mbps, r.measured_mbps, r.ratio);
    }
    args.transfers.write(&rows)
}

/// `orrery testbed share`: the table, and the JSON with `--out`.
fn share(args: &ShareArgs) -> Result<()> {
    use orrery_testbed::share::{ShareOptions, check};
    let opts = ShareOptions {
        congestion_controls: args.cc.clone(),
        classes: args.classes.clone(),
        seconds: args.transfers.seconds,
        warmup_s: args.transfers.warmup_s,
        fabric: args.transfers.fabric.options(),
    };
    let rows = check(&opts)?;
    println!("fabric: {}", opts.fabric.queueing);
    println!("| flow | congestion control | class | measured (Mbit/s) | fair share (Mbit/s) | measured / fair |");
    println!("|---:|---|---:|---:|---:|---:|");
    for (i, r) in rows.iter().enumerate() {
        println!(
            "| {i} | {} | {} | {:.1} | {:.1} | {:.3} |",
            r.congestion_control, r.class, r.measured_mbps, r.fair_mbps, r.share
        );
    }
    args.transfers.write(&rows)
}

/// Flags of `orrery worker`.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Bytes on the wire are the shape's times this (the testbed's --scale).
    #[arg(long, default_value_t = 0.01, value_parser = crate::numbers::positive)]
    scale: f64,
    /// Write one CSV row per iteration to worker-JOB-RANK.csv in this folder.
    #[arg(long, value_name = "DIR")]
    log_dir: Option<std::path::PathBuf>,
    /// TCP congestion control of its connections (default: the system's);
    /// `mltcp-CC` paces each connection over CC by MLTCP's principle.
    #[arg(long)]
    cc: Option<String>,
    /// Compute takes this many times the model's (real iterations that run
    /// longer than modelled, for tests of closed-loop timing).
    #[arg(long, default_value_t = 1.0, value_parser = crate::numbers::positive)]
    compute_stretch: f64,
}

/// `orrery worker`.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let env = orrery_testbed::worker::WorkerEnv::from_env()?;
    let opts = orrery_testbed::worker::WorkerOptions {
        scale: args.scale,
        log_dir: args.log_dir.clone(),
        congestion_control: args.cc.clone(),
        compute_stretch: args.compute_stretch,
    };
    let s = orrery_testbed::worker::run(&env, &opts)?;
    eprintln!("orrery worker: job {} rank {}: {} iterations, {}", env.job, env.rank, s.iterations, s.stopped);
    Ok(())
}

/// `orrery testbed run|compare`: each policy on the testbed (and, comparing,
/// in the simulator), one after the other.
fn scenario(args: &ScenarioArgs, with_sim: bool) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let text =
        std::fs::read_to_string(&args.experiment).with_context(|| format!("reading {}", args.experiment.display()))?;
    let file = args.experiment.display().to_string();
    let exp = orrery_lab::experiment::parse(&file, &text).map_err(anyhow::Error::msg)?;
    let base = args.experiment.parent().unwrap_or(Path::new("."));
    let seed = args.seed.unwrap_or(exp.seeds[0]);
    let (topo, mut jobs, pins) = exp.scenario(args.scenario.as_deref(), base, seed).map_err(anyhow::Error::msg)?;
    if let Some(n) = args.iterations {
        if n <= args.warmup as u64 {
            bail!("--iterations: expected more than the {} warm-up iterations, found {n}", args.warmup);
        }
        for j in &mut jobs {
            j.work = orrery_model::Work::Iterations(n);
        }
    }
    if args.replay && !with_sim {
        bail!("--replay: only `orrery testbed compare` replays saved runs");
    }
    let policies: Vec<String> = if args.policies.is_empty() { exp.policies.clone() } else { args.policies.clone() };
    for p in &policies {
        if orrery_policy::with_pins(p, seed, &pins).is_none() {
            bail!("--policies: unknown policy {p:?} (see `orrery policies`)");
        }
    }
    let orrery = std::env::current_exe().context("locating the orrery binary for the workers")?;
    let workers = if args.ddp && !args.replay {
        let script = std::fs::canonicalize(&args.ddp_script)
            .with_context(|| format!("--ddp-script: {} does not exist", args.ddp_script.display()))?;
        let python = torch_python(args.python.as_deref())?;
        let given = match (&args.ddp_args, script.file_name().is_some_and(|n| n == "ddp_train.py")) {
            (Some(a), _) => a.as_str(),
            (None, true) => "--width 1024 --layers 4 --min-compute-ms 450",
            (None, false) => "",
        };
        Workers::Ddp(DdpWorkers { python, script, args: given.split_whitespace().map(String::from).collect() })
    } else {
        Workers::Emulated
    };
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let out = std::fs::canonicalize(&args.out)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let options = |policy: &str, dir: PathBuf| DriveOptions {
        workers: workers.clone(),
        fabric: args.fabric.options(),
        policy: policy.to_string(),
        seed,
        orrery: orrery.clone(),
        dir,
        time_limit_s: args.time_limit_s,
        sample_s: args.sample_s,
        congestion_control: args.cc.clone(),
        goodput: args.goodput,
        warmup: args.warmup,
        compute_stretch: args.compute_stretch,
        clock_skew_ms: args.clock_skew_ms,
        one_at_a_time: false,
        pcap: args.pcap,
    };
    // DDP: the first job alone on its placement measures every job's shape.
    let mut comm_alone_ms = None;
    if args.ddp && args.replay {
        let path = out.join("shape.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("--replay: reading {}", path.display()))?;
        let value: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("--replay: {}", path.display()))?;
        // A pipeline's shape.json carries its mesh; a DDP job's, its fitted shape.
        let (spec, comm_ms) = if value.get("mesh").is_some() {
            let shape: orrery_testbed::ddp::PipelineShape =
                serde_json::from_value(value).with_context(|| format!("--replay: {}", path.display()))?;
            (shape.spec, shape.first_stage.dp_ms)
        } else {
            let shape: orrery_testbed::ddp::DdpShape =
                serde_json::from_value(value).with_context(|| format!("--replay: {}", path.display()))?;
            (shape.spec(), shape.comm_ms)
        };
        for j in &mut jobs {
            j.shape = Some(spec.clone());
        }
        comm_alone_ms = Some(comm_ms);
    } else if args.ddp {
        let mut first = jobs[0].clone();
        first.work = orrery_model::Work::Iterations(args.warmup as u64 + args.calibration_iterations);
        first.arrival_s = 0.0;
        let alone_pins: std::collections::BTreeMap<_, _> =
            pins.iter().filter(|(id, _)| **id == first.id).map(|(k, v)| (k.clone(), v.clone())).collect();
        let policy = if alone_pins.is_empty() { policies[0].clone() } else { "pinned".to_string() };
        eprintln!("{}: measuring its DDP shape alone ({policy})", first.id);
        let opts = options(&policy, out.join("alone").join("run"));
        let alone =
            runtime.block_on(drive(&topo, std::slice::from_ref(&first), &alone_pins, &opts, |m| eprintln!("  {m}")))?;
        let job = &alone.jobs[0];
        let logs = out.join("alone/run/workers");
        let modelled = orrery_testbed::fabric::derated(&topo, args.goodput).map_err(anyhow::Error::msg)?;
        let (spec, comm_ms) = match orrery_testbed::ddp::logged_pipeline(&logs)? {
            Some(mesh) => {
                let shape = pipeline_alone(&modelled, &first, &alone_pins, &policy, mesh, job, &logs, args)?;
                compare::write_atomic(&out.join("shape.json"), &serde_json::to_string_pretty(&shape)?)?;
                (shape.spec, shape.first_stage.dp_ms)
            }
            None => {
                let bytes = orrery_testbed::ddp::logged_gradient_bytes(&logs)?;
                let gbps = job
                    .hosts
                    .iter()
                    .filter_map(|(name, _)| modelled.hosts.iter().position(|h| &h.name == name))
                    .map(|h| modelled.host_nic_gbps(h))
                    .fold(f64::INFINITY, f64::min);
                if !gbps.is_finite() {
                    bail!("{}: its run alone was never placed ({})", first.id, job.status);
                }
                let shape = orrery_testbed::ddp::measured_shape(job, bytes, first.workers, gbps)?;
                compare::write_atomic(&out.join("shape.json"), &serde_json::to_string_pretty(&shape)?)?;
                eprintln!(
                    "  alone: {:.1} ms an iteration, compute {:.1} ms, all-reduce {:.1} ms of a {:.1} MB gradient \
                     (the model's payload: {:.2}× the exact ring's at scale {})",
                    shape.alone_ms,
                    shape.compute_ms,
                    shape.comm_ms,
                    shape.gradient_bytes / 1e6,
                    shape.model_bytes * args.fabric.scale / shape.gradient_bytes,
                    args.fabric.scale
                );
                (shape.spec(), shape.comm_ms)
            }
        };
        for j in &mut jobs {
            j.shape = Some(spec.clone());
        }
        comm_alone_ms = Some(comm_ms);
    }
    let mut all_rows = Vec::new();
    let mut summaries = Vec::new();
    let mut alone = compare::Alone::new();
    for policy in &policies {
        let dir = out.join(policy.replace(['/', '+', ':'], "_"));
        let mut runs = Vec::new();
        for run in 1..=args.runs {
            // One run in `dir`; several in `dir/run-K`.
            let run_dir = if args.runs == 1 { dir.clone() } else { dir.join(format!("run-{run}")) };
            if args.replay {
                runs.push(saved_run(&run_dir, &jobs)?);
                continue;
            }
            let opts = options(policy, run_dir.join("run"));
            let of = if args.runs > 1 { format!(", run {run} of {}", args.runs) } else { String::new() };
            eprintln!("{policy}: {} jobs on the testbed ({} at {}x{of})", jobs.len(), topo.name, args.fabric.scale);
            let measured = runtime.block_on(drive(&topo, &jobs, &pins, &opts, |m| eprintln!("  {m}")))?;
            compare::write_atomic(&run_dir.join("measured.json"), &serde_json::to_string_pretty(&measured)?)?;
            if let Some(r) = &measured.retransmits {
                eprintln!("  {}", retransmits_line(r));
            }
            if !with_sim {
                for j in &measured.jobs {
                    let (mean, p99) = compare::mean_p99(&j.iteration_ms);
                    println!(
                        "{policy:<16} {:<10} {:<10} mean {mean:>8.1} ms  p99 {p99:>8.1} ms  ({} iterations{of})",
                        j.id,
                        j.status,
                        j.iteration_ms.len()
                    );
                }
            }
            runs.push(measured);
        }
        if args.alone && !args.replay {
            let opts = DriveOptions { one_at_a_time: true, ..options("pinned", dir.join("alone").join("run")) };
            let iterations = args.warmup as u64 + args.alone_iterations;
            let measured = runtime.block_on(measure_alone(&topo, &jobs, &runs, iterations, &opts, &mut alone))?;
            if let Some(m) = measured {
                compare::write_atomic(&dir.join("alone").join("measured.json"), &serde_json::to_string_pretty(&m)?)?;
            }
        }
        if !with_sim {
            continue;
        }
        let modelled = orrery_testbed::fabric::derated(&topo, args.goodput).map_err(anyhow::Error::msg)?;
        let transport = match args.sim_transport {
            true => {
                let gbps = topo.links.first().map_or(0.0, |l| l.gbps);
                Some(args.fabric.options().transport_model(&args.cc, gbps).map_err(anyhow::Error::msg)?)
            }
            false => None,
        };
        let cfg = orrery_sim::SimConfig { seed, jitter: exp.sim.jitter, transport, ..Default::default() };
        let simulated =
            compare::simulate(&modelled, &jobs, &pins, policy, cfg.clone(), args.warmup).map_err(anyhow::Error::msg)?;
        // The simulator again from each run's own starts: O(runs) more
        // simulations of the same few jobs.
        let replays = runs
            .iter()
            .map(|m| {
                let started = compare::replayed(&jobs, m);
                compare::simulate(&modelled, &started, &pins, policy, cfg.clone(), args.warmup)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(anyhow::Error::msg)?;
        let rows = compare::rows(&jobs, &runs, &simulated, &replays, comm_alone_ms, &alone);
        summaries.push(compare::summary(&jobs, &runs, &simulated, &replays, &alone));
        compare::write_atomic(&dir.join("simulated.json"), &serde_json::to_string(&simulated)?)?;
        // The figures show the first run.
        compare::figures(&dir, &jobs, &runs[0], &simulated).map_err(anyhow::Error::msg)?;
        all_rows.extend(rows);
    }
    if with_sim {
        let md = format!("{}\n{}", compare::summary_markdown(&summaries), compare::markdown(&all_rows));
        compare::write_atomic(&out.join("compare.md"), &md)?;
        compare::write_atomic(&out.join("summary.json"), &serde_json::to_string_pretty(&summaries)?)?;
        compare::write_atomic(&out.join("compare.csv"), compare::csv(&all_rows))?;
        print!("{md}");
        println!(
            "\nwrote {}/compare.md, compare.csv, summary.json and per policy measured.json, iterations.svg, links.svg",
            out.display()
        );
    }
    Ok(())
}

/// A run an earlier `compare` saved in `run_dir` (its measured.json). Runs
/// saved before `ready_ms` was recorded get it from the workers' logs
/// (`run/workers/worker-K-0.csv`, K the job's place in the workload: the
/// service numbers jobs as they are submitted, from 0), in Unix ms: a
/// replay needs only the offsets between a run's jobs.
fn saved_run(run_dir: &Path, jobs: &[orrery_model::JobSpec]) -> Result<orrery_testbed::drive::Measured> {
    let path = run_dir.join("measured.json");
    let text = std::fs::read_to_string(&path).with_context(|| format!("--replay: reading {}", path.display()))?;
    let mut m: orrery_testbed::drive::Measured =
        serde_json::from_str(&text).with_context(|| format!("--replay: {}", path.display()))?;
    if m.jobs.iter().all(|j| j.ready_ms.is_none()) {
        for j in &mut m.jobs {
            let Some(k) = jobs.iter().position(|s| s.id == j.id) else { continue };
            let log = run_dir.join("run/workers").join(orrery_testbed::worker::log_name(k as u64, 0));
            j.ready_ms = orrery_testbed::drive::first_ready_unix_ms(&log)?;
        }
    }
    Ok(m)
}

/// Runs, one at a time and pinned, every job on each set of hosts `runs`
/// gave it that `alone` has no time for yet, and adds their mean iteration
/// times to `alone`. Returns that run's measurements (None when every
/// placement was already measured).
async fn measure_alone(
    topo: &orrery_model::Topology,
    jobs: &[orrery_model::JobSpec],
    runs: &[orrery_testbed::drive::Measured],
    iterations: u64,
    opts: &DriveOptions,
    alone: &mut compare::Alone,
) -> Result<Option<orrery_testbed::drive::Measured>> {
    let mut todo: Vec<(String, orrery_model::JobSpec)> = Vec::new();
    let mut pins = std::collections::BTreeMap::new();
    for m in runs {
        for j in m.jobs.iter().filter(|j| !j.hosts.is_empty()) {
            let key = compare::placement_key(&j.id, &j.hosts);
            if alone.contains_key(&key) || todo.iter().any(|(k, _)| *k == key) {
                continue;
            }
            let Some(spec) = jobs.iter().find(|s| s.id == j.id) else { continue };
            let mut pin = Vec::new();
            for (name, gpus) in &j.hosts {
                let h = topo.hosts.iter().position(|h| &h.name == name);
                pin.push((h.with_context(|| format!("{}: host {name} is not in the topology", j.id))?, *gpus));
            }
            let mut one = spec.clone();
            one.id = format!("{}-alone-{}", spec.id, todo.len());
            one.arrival_s = todo.len() as f64;
            one.work = orrery_model::Work::Iterations(iterations);
            one.workers = pin.iter().map(|p| p.1).sum();
            pins.insert(one.id.clone(), pin);
            todo.push((key, one));
        }
    }
    if todo.is_empty() {
        return Ok(None);
    }
    eprintln!("{} placements alone, one at a time", todo.len());
    let specs: Vec<orrery_model::JobSpec> = todo.iter().map(|(_, s)| s.clone()).collect();
    let measured = drive(topo, &specs, &pins, opts, |m| eprintln!("  {m}")).await?;
    for ((key, spec), m) in todo.iter().zip(&measured.jobs) {
        let (mean, _) = compare::mean_p99(&m.iteration_ms);
        if mean.is_finite() {
            alone.insert(key.clone(), mean);
        } else {
            eprintln!("  {}: no iteration measured alone ({})", spec.id, m.status);
        }
    }
    Ok(Some(measured))
}

/// A pipeline × data-parallel job's run alone held against its model: the
/// mesh's structural shape ([`orrery_testbed::ddp::PipelineMesh::spec`]),
/// simulated alone on the same placement, against the iterations and
/// phases its ranks measured.
#[allow(clippy::too_many_arguments)]
fn pipeline_alone(
    modelled: &orrery_model::Topology,
    first: &orrery_model::JobSpec,
    pins: &std::collections::BTreeMap<String, Vec<(usize, u32)>>,
    policy: &str,
    mesh: orrery_testbed::ddp::PipelineMesh,
    job: &orrery_testbed::drive::MeasuredJob,
    logs: &std::path::Path,
    args: &ScenarioArgs,
) -> Result<orrery_testbed::ddp::PipelineShape> {
    use orrery_testbed::ddp;
    if mesh.pp * mesh.dp != first.workers {
        bail!("{}: the script ran {} × {} ranks, the job has {} workers", first.id, mesh.pp, mesh.dp, first.workers);
    }
    let spec = mesh.spec(args.fabric.scale);
    let mut modelled_job = first.clone();
    modelled_job.shape = Some(spec.clone());
    let cfg = orrery_sim::SimConfig { seed: 1, ..Default::default() };
    let simulated = compare::simulate(modelled, std::slice::from_ref(&modelled_job), pins, policy, cfg, args.warmup)
        .map_err(anyhow::Error::msg)?;
    let predicted_ms = compare::median(&simulated.iteration_ms[0]);
    // The script names its files by the service's job id; the run alone has one job.
    let ranks = |rank: u32| -> Result<std::path::PathBuf> {
        let suffix = format!("-{rank}.csv");
        let mut found: Vec<_> = std::fs::read_dir(logs)
            .with_context(|| format!("reading {}", logs.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("phases-")))
            .filter(|p| p.to_string_lossy().ends_with(&suffix))
            .collect();
        found.sort();
        found.into_iter().next().with_context(|| format!("{}: no phases-JOB{suffix} from rank {rank}", logs.display()))
    };
    let shape = ddp::PipelineShape {
        mesh,
        spec,
        first_stage: ddp::phases(&ranks(0)?, args.warmup)?,
        last_stage: ddp::phases(&ranks((mesh.pp - 1) * mesh.dp)?, args.warmup)?,
        measured_ms: compare::median(job.iteration_ms.get(args.warmup..).unwrap_or(&[])),
        predicted_ms,
    };
    let (f, l) = (&shape.first_stage, &shape.last_stage);
    eprintln!(
        "  alone: {:.1} ms an iteration (the model's {:.1} ms, {:+.1}%); first stage: compute {:.1}, pipeline waits {:.1}, \
         all-reduce {:.1} ms; last stage: {:.1}, {:.1}, {:.1} ms",
        shape.measured_ms,
        shape.predicted_ms,
        shape.error() * 100.0,
        f.compute_ms,
        f.p2p_ms,
        f.dp_ms,
        l.compute_ms,
        l.p2p_ms,
        l.dp_ms
    );
    Ok(shape)
}

/// One line of a run's captured retransmissions (`--pcap`).
fn retransmits_line(r: &orrery_testbed::capture::Retransmits) -> String {
    let lost = r.timed_out.iter().filter(|t| t.lost_retransmission()).count();
    let share = if r.bytes > 0 { 100.0 * r.bytes_resent as f64 / r.bytes as f64 } else { 0.0 };
    let mut line = format!(
        "capture: {} timeouts ({lost} after a lost retransmission, {} after a first loss), {} fast retransmissions, {share:.2}% of bytes sent again",
        r.timed_out.len(),
        r.timed_out.len() - lost,
        r.fast
    );
    for t in &r.timed_out {
        line.push_str(&format!(
            "\n    timeout: {} after {:.0} ms silent, {} bytes{}",
            t.connection,
            t.silent_ms,
            t.bytes,
            match t.lost_copy {
                Some(c) => format!(
                    ", its range re-sent before as {} bytes {:.1} ms after the transmission before, and lost",
                    c.bytes, c.after_ms
                ),
                None => String::new(),
            }
        ));
    }
    line
}
