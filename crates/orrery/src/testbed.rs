//! `orrery testbed`: orrery topologies as Linux network namespaces with
//! tc-shaped links, driven by the live service and emulated workers.

use anyhow::Result;
use orrery_testbed::fabric::{self, Fabric, FabricOptions};

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Build a topology as network namespaces and leave it up (needs root).
    Up(UpArgs),
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

/// How the fabric is built.
#[derive(clap::Args, Debug, Clone)]
pub struct FabricArgs {
    /// Link rates are the topology's times this (50 Gbit/s at 0.01 is 500 Mbit/s).
    #[arg(long, default_value_t = 0.01)]
    pub scale: f64,
    /// Each link's queue, in ms of its scaled rate (at least 128 KiB).
    #[arg(long, default_value_t = 2.0)]
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
    #[arg(long, default_value_t = 0.01)]
    scale: f64,
    /// Append one CSV row per iteration to this file.
    #[arg(long, value_name = "FILE")]
    log: Option<std::path::PathBuf>,
}

/// `orrery worker`.
pub fn worker(args: &WorkerArgs) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
    let env = orrery_testbed::worker::WorkerEnv::from_env()?;
    let opts = orrery_testbed::worker::WorkerOptions { scale: args.scale, log: args.log.clone() };
    let s = orrery_testbed::worker::run(&env, &opts)?;
    eprintln!("orrery worker: job {} rank {}: {} iterations, {}", env.job, env.rank, s.iterations, s.stopped);
    Ok(())
}
