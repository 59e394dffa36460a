//! `orrery`: a network-aware scheduler for shared GPU clusters.
//!
//! This binary is thin: it parses arguments, calls the library crates and
//! prints. Exit codes: 0 success, 1 bad input (with file:line:field messages on
//! stderr), 2 usage errors (from clap).

mod agent;
mod chaos;
mod compat;
mod cost;
mod failover;
mod import;
mod k8s;
mod live;
mod numbers;
mod run;
mod scale;
mod schema;
mod table;
mod tenant;
mod testbed;
mod topo;
mod trace;
mod zoo;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use std::time::Instant;

/// mimalloc for every allocation: glibc's malloc, free and realloc were
/// 18% of a `metronome` simulation at 1,024 hosts (`perf record`), and
/// mimalloc took 6% of its instructions off (docs/results.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// orrery treats the network as a first-class resource when scheduling
/// distributed training jobs on shared GPU clusters. It unifies CASSINI,
/// Metronome, Castor, FORESIGHT and Plebiscito.
#[derive(Parser, Debug)]
#[command(name = "orrery", version, about, long_about = None, after_help = EXAMPLES)]
struct Cli {
    /// Print how long each phase took.
    #[arg(long, global = true)]
    timings: bool,
    #[command(subcommand)]
    command: Command,
}

const EXAMPLES: &str = "Examples:
  orrery run                                   the built-in experiment: FIFO vs random vs ideal
  orrery run experiments/cassini-pair.toml --out out/cassini-pair
  orrery run experiments/benchmark.toml --shard 0/4 --out shards   (and 1/4, 2/4, 3/4 elsewhere)
  orrery merge shards --out out/benchmark      the four shards as one run's outputs
  orrery zoo                                   every model with its derived iteration shape
  orrery zoo vgg16 --gpu a100 --workers 4 --gbps 50
  orrery zoo --calibration                     the zoo held against measured profiles
  orrery topo list                             built-in cluster set-ups
  orrery topo show cassini
  orrery trace inspect data/philly/philly_jobs_pollux.csv
  orrery compat experiments/compat/cassini-fig5.json --svg fig5.svg
  orrery agent --auction --id 0 --peers peers.txt --key cluster.key --state agent-0.json
  orrery serve                                 the live scheduler on 127.0.0.1:7400 (demo cluster)
  orrery agent --node --name h0 --gpus 2 --nic-gbps 50
  orrery submit examples/live/vgg-a.jsonl      then: orrery jobs, orrery nodes, orrery decisions";

#[derive(Subcommand, Debug)]
enum Command {
    /// Simulate an experiment (a TOML file, or the built-in default) and
    /// compare its policies; with --out writes summary.json, jobs.csv, links.csv, figures and report.html.
    #[command(after_long_help = run::EXAMPLE)]
    Run(run::Args),
    /// Combine the shard files of `orrery run FILE --shard K/N` into the
    /// summary, tables, figures and report one unsharded run writes.
    Merge(run::MergeArgs),
    /// Models of the zoo: public facts and the iteration shape derived for a
    /// GPU type, batch, worker count and link rate.
    Zoo(zoo::Args),
    /// Cluster topologies: the papers' set-ups, machine lists, or TOML/JSON files.
    #[command(subcommand)]
    Topo(topo::Command),
    /// Job traces: read, check and summarise public traces and orrery's JSONL.
    #[command(subcommand)]
    Trace(trace::Command),
    /// The scheduling policies `orrery run` knows, one line each.
    Policies,
    /// A markdown table from an experiment's summary.json (the tables of docs/results.md).
    Table(table::Args),
    /// The JSON Schema of an input orrery reads (a job, an experiment, a
    /// topology, an API body), with the range of every number.
    Schema(schema::Args),
    /// A scenario from another tool as an orrery experiment (`orrery import psim`).
    #[command(subcommand)]
    Import(import::Command),
    /// Compatibility of jobs sharing one link: the best rotation of each job's
    /// circle, its time-shift, the score and the cushion (CASSINI §3, Metronome §III).
    Compat(compat::Args),
    /// A Plebiscito node agent bidding over real UDP (`--auction`), or a
    /// client that submits jobs to one (`--submit`).
    Agent(Box<agent::Args>),
    /// The live scheduler: HTTP API, SQLite store, node agents, any policy.
    Serve(Box<live::ServeArgs>),
    /// Submit the jobs of a JSON-lines file (`-` for stdin) to `orrery serve`.
    Submit {
        /// Jobs, one JobSpec per line.
        file: std::path::PathBuf,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Jobs of `orrery serve`.
    Jobs {
        /// Only jobs of this status (queued, running, paused, finished, cancelled, rejected).
        #[arg(long)]
        status: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Nodes of `orrery serve`.
    Nodes {
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// orrery in a Kubernetes cluster: the CRDs, and the service with its
    /// scheduler extender and controller (`deploy/`).
    #[command(subcommand)]
    K8s(k8s::Command),
    /// A real-network testbed: namespaces, tc-shaped links, emulated workers.
    #[command(subcommand)]
    Testbed(testbed::Command),
    /// An emulated data-parallel worker (started by `orrery agent --node
    /// --exec`): sleeps the shape's compute and runs its communication as a
    /// real TCP ring all-reduce with the job's other workers.
    Worker(testbed::WorkerArgs),
    /// Benchmarks: `orrery bench serve` (durable submissions per second), `failover`, `scale` (simulation cost against hosts).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// The committed decision log of `orrery serve` (policy decisions and driver events).
    Decisions {
        /// Only entries after this sequence number.
        #[arg(long, default_value_t = 0)]
        since: u64,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Cancel a job of `orrery serve` (its number or spec id).
    Cancel {
        /// Job.
        id: String,
        #[command(flatten)]
        client: live::ClientArgs,
    },
    /// Tenants of `orrery serve` and their tokens (the administrators'
    /// user.token; a tenant's token lists only its own).
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// A CA and a certificate for `orrery serve --tls-cert/--tls-key` on a
    /// test cluster (clients and agents take the CA: `--ca`).
    Certs {
        /// Folder for ca.pem, server.pem and server-key.pem.
        #[arg(long, default_value = "orrery-data/tls")]
        out: std::path::PathBuf,
        /// DNS names and IP addresses the service is reached at, beside
        /// localhost and 127.0.0.1 (comma-separated).
        #[arg(long, value_delimiter = ',')]
        names: Vec<String>,
    },
}

/// `orrery bench` subcommands.
#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Submissions per second to a live service on loopback, each durably committed.
    Serve(live::BenchServeArgs),
    /// The highly available service (`serve --store etcd://`) under load while its leader is killed.
    Failover(failover::FailoverArgs),
    /// The service, etcd and node agents in network namespaces under a
    /// seeded nemesis (partitions, pauses, kills, clock skew, a full disk,
    /// packet loss), the run's history checked (issue 71). Root, nftables, etcd.
    Chaos(chaos::ChaosArgs),
    /// Simulation cost as the cluster grows: wall time, events per second, peak memory and decision
    /// times from 256 to 16,384 hosts under each policy, with the fitted exponent.
    Scale(cost::ScaleArgs),
}

/// Records phase durations for `--timings`.
pub struct Timings {
    enabled: bool,
    start: Instant,
    phases: Vec<(&'static str, f64)>,
}

impl Timings {
    fn new(enabled: bool) -> Self {
        Timings { enabled, start: Instant::now(), phases: Vec::new() }
    }

    /// Runs `f` as a named phase.
    pub fn phase<T>(&mut self, name: &'static str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let out = f();
        self.phases.push((name, t.elapsed().as_secs_f64()));
        out
    }

    /// Records a phase timed elsewhere.
    pub fn record(&mut self, name: &'static str, seconds: f64) {
        self.phases.push((name, seconds));
    }

    /// Whether `--timings` was given.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn report(&self) {
        if !self.enabled {
            return;
        }
        eprintln!("timings:");
        for (name, s) in &self.phases {
            eprintln!("  {name:<12} {:>10.3} ms", s * 1e3);
        }
        eprintln!("  {:<12} {:>10.3} ms", "total", self.start.elapsed().as_secs_f64() * 1e3);
        if let Some(kib) = peak_memory_kib() {
            eprintln!("  {:<12} {:>10.1} MiB (peak resident memory)", "memory", kib as f64 / 1024.0);
        }
    }
}

/// The process's peak resident memory, KiB (`VmHWM` of /proc/self/status;
/// None off Linux).
fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut timings = Timings::new(cli.timings);
    let result = match cli.command {
        Command::Run(args) => run::run(&args, &mut timings),
        Command::Merge(args) => run::merge(&args, &mut timings),
        Command::Zoo(args) => zoo::run(&args),
        Command::Topo(cmd) => topo::run(&cmd),
        Command::Trace(cmd) => trace::run(&cmd, &mut timings),
        Command::Compat(args) => compat::run(&args, &mut timings),
        Command::Agent(args) => agent::run(&args),
        Command::Serve(args) => live::serve(&args),
        Command::Submit { file, client } => live::submit(&client, &file),
        Command::Jobs { status, json, client } => live::jobs(&client, status.as_deref(), json),
        Command::Nodes { client } => live::nodes(&client),
        Command::Cancel { id, client } => live::cancel(&client, &id),
        Command::Tenant(cmd) => tenant::run(&cmd),
        Command::Certs { out, names } => tenant::certs(&out, &names),
        Command::Decisions { since, json, client } => live::decisions(&client, since, json),
        Command::Bench(BenchCommand::Serve(args)) => live::bench_serve(&args),
        Command::Bench(BenchCommand::Failover(args)) => failover::bench(&args),
        Command::Bench(BenchCommand::Chaos(args)) => chaos::bench(&args),
        Command::Bench(BenchCommand::Scale(args)) => cost::run(&args),
        Command::Testbed(cmd) => testbed::run(&cmd),
        Command::K8s(cmd) => k8s::run(&cmd),
        Command::Worker(args) => testbed::worker(&args),
        Command::Table(args) => table::run(&args),
        Command::Schema(args) => schema::run(&args),
        Command::Import(cmd) => import::run(&cmd),
        Command::Policies => {
            for (name, what) in orrery_policy::CATALOGUE {
                println!("{name:<16} {what}");
            }
            println!("\norderings:");
            for (name, what) in orrery_policy::compose::ORDERS {
                println!("  {name:<14} {what}");
            }
            println!("placements:");
            for (name, what) in orrery_policy::compose::PLACEMENTS {
                println!("  {name:<14} {what}");
            }
            Ok(())
        }
    };
    timings.report();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`orrery decisions | head`): not an error.
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}
