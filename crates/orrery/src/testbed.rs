//! `orrery testbed`: orrery topologies as Linux network namespaces with
//! tc-shaped links, driven by the live service and emulated workers.

use anyhow::{Context, Result, bail};
use orrery_testbed::compare;
use orrery_testbed::drive::{DriveOptions, drive};
use orrery_testbed::fabric::{self, Fabric, FabricOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Build a topology as network namespaces and leave it up (needs root).
    Up(UpArgs),
    /// Run an experiment's workload on the testbed, driven by the live
    /// service, agents and emulated workers; writes measured.json per policy.
    Run(ScenarioArgs),
    /// Run an experiment on the testbed and in the simulator at the same
    /// scale; writes compare.md/.csv and figures (iteration-time CDFs, the
    /// busiest link over time) per policy.
    Compare(ScenarioArgs),
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
    /// TCP congestion control of the workers' connections (cubic, reno, bbr).
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
    #[arg(long, default_value_t = orrery_testbed::compare::TCP_GOODPUT, value_parser = crate::numbers::fraction)]
    goodput: f64,
    #[command(flatten)]
    fabric: FabricArgs,
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
}

impl FabricArgs {
    /// The library's options.
    pub fn options(&self) -> FabricOptions {
        FabricOptions { prefix: self.prefix.clone(), scale: self.scale, queue_ms: self.queue_ms }
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

/// Flags of `orrery worker`.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Bytes on the wire are the shape's times this (the testbed's --scale).
    #[arg(long, default_value_t = 0.01, value_parser = crate::numbers::positive)]
    scale: f64,
    /// Write one CSV row per iteration to worker-JOB-RANK.csv in this folder.
    #[arg(long, value_name = "DIR")]
    log_dir: Option<std::path::PathBuf>,
    /// TCP congestion control of its connections (default: the system's).
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
    let policies: Vec<String> = if args.policies.is_empty() { exp.policies.clone() } else { args.policies.clone() };
    for p in &policies {
        if orrery_policy::with_pins(p, seed, &pins).is_none() {
            bail!("--policies: unknown policy {p:?} (see `orrery policies`)");
        }
    }
    let orrery = std::env::current_exe().context("locating the orrery binary for the workers")?;
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let out = std::fs::canonicalize(&args.out)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let mut all_rows = Vec::new();
    for policy in &policies {
        let dir = out.join(policy.replace(['/', '+', ':'], "_"));
        let mut runs = Vec::new();
        for run in 1..=args.runs {
            // One run in `dir`; several in `dir/run-K`.
            let run_dir = if args.runs == 1 { dir.clone() } else { dir.join(format!("run-{run}")) };
            let opts = DriveOptions {
                fabric: args.fabric.options(),
                policy: policy.clone(),
                seed,
                orrery: orrery.clone(),
                dir: run_dir.join("run"),
                time_limit_s: args.time_limit_s,
                sample_s: args.sample_s,
                congestion_control: args.cc.clone(),
                goodput: args.goodput,
                warmup: args.warmup,
                compute_stretch: args.compute_stretch,
                clock_skew_ms: args.clock_skew_ms,
            };
            let of = if args.runs > 1 { format!(", run {run} of {}", args.runs) } else { String::new() };
            eprintln!("{policy}: {} jobs on the testbed ({} at {}x{of})", jobs.len(), topo.name, args.fabric.scale);
            let measured = runtime.block_on(drive(&topo, &jobs, &pins, &opts, |m| eprintln!("  {m}")))?;
            compare::write_atomic(&run_dir.join("measured.json"), &serde_json::to_string_pretty(&measured)?)?;
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
        if !with_sim {
            continue;
        }
        let modelled = compare::derated(&topo, args.goodput).map_err(anyhow::Error::msg)?;
        let simulated = compare::simulate(&modelled, &jobs, &pins, policy, seed, exp.sim.jitter, args.warmup)
            .map_err(anyhow::Error::msg)?;
        let rows = compare::rows(&jobs, &runs, &simulated);
        compare::write_atomic(&dir.join("simulated.json"), &serde_json::to_string(&simulated)?)?;
        // The figures show the first run.
        compare::figures(&dir, &jobs, &runs[0], &simulated).map_err(anyhow::Error::msg)?;
        all_rows.extend(rows);
    }
    if with_sim {
        let md = compare::markdown(&all_rows);
        compare::write_atomic(&out.join("compare.md"), &md)?;
        compare::write_atomic(&out.join("compare.csv"), compare::csv(&all_rows))?;
        print!("{md}");
        println!(
            "\nwrote {}/compare.md, compare.csv and per policy measured.json, iterations.svg, links.svg",
            out.display()
        );
    }
    Ok(())
}
