//! `orrery import`: scenarios made by other tools, as orrery experiments.

use anyhow::Context;
use orrery_lab::psim::{PsimFiles, PsimNetwork, Units, import};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// psim's `nethint-test` files (FORESIGHT's simulator, github.com/FaridZandi/psim):
    /// placement, timing and routing JSON become an experiment with the same
    /// leaf-spine, jobs, per-iteration delays and throttles, and per-flow spine
    /// routes, run with NCCL's ring steps. The network flags are psim's own.
    ///
    /// Example: orrery import psim --placement placement.json --timing timing.json
    /// --routing routing.json --machine-count 16 --ft-server-per-rack 4
    /// --ft-core-count 2 --out psim.toml && orrery run psim.toml --iterations --out out
    Psim(Box<PsimArgs>),
}

#[derive(clap::Args, Debug)]
pub struct PsimArgs {
    /// Placement file (`--placement-file` of psim): jobs, machines, sizes.
    #[arg(long)]
    placement: PathBuf,
    /// Timing file (`--timing-file`): per-iteration deltas and throttle rates.
    #[arg(long)]
    timing: Option<PathBuf>,
    /// Routing file (`--routing-file`): per-flow spines and shares.
    #[arg(long)]
    routing: Option<PathBuf>,
    /// Machines (psim's default).
    #[arg(long, default_value_t = 128)]
    machine_count: usize,
    /// Machines per rack, times `--ft-rack-per-pod` (psim's default).
    #[arg(long, default_value_t = 8)]
    ft_server_per_rack: usize,
    /// Racks per pod: psim's leaf-spine puts server-per-rack × rack-per-pod
    /// machines under a leaf (FORESIGHT's runner passes 1).
    #[arg(long, default_value_t = 1)]
    ft_rack_per_pod: usize,
    /// Spines (psim's default).
    #[arg(long, default_value_t = 4)]
    ft_core_count: usize,
    /// Link bandwidth in psim's units.
    #[arg(long, default_value_t = 100.0)]
    link_bandwidth: f64,
    /// Host-to-leaf capacity as a multiple of the link bandwidth.
    #[arg(long, default_value_t = 1.0)]
    ft_server_tor_link_capacity_mult: f64,
    /// Each leaf-to-spine link's capacity as a multiple of the link bandwidth.
    #[arg(long, default_value_t = 1.0)]
    ft_agg_core_link_capacity_mult: f64,
    /// Milliseconds per psim time unit.
    #[arg(long, default_value_t = 1.0)]
    ms_per_unit: f64,
    /// Gbit/s of psim's link bandwidth.
    #[arg(long, default_value_t = 100.0)]
    link_gbps: f64,
    /// Experiment name (default: the placement file's folder).
    #[arg(long)]
    name: Option<String>,
    /// Write the experiment here (default: stdout).
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    let Command::Psim(a) = cmd;
    let files = PsimFiles { placement: a.placement.clone(), timing: a.timing.clone(), routing: a.routing.clone() };
    let net = PsimNetwork {
        machine_count: a.machine_count,
        ft_server_per_rack: a.ft_server_per_rack,
        ft_rack_per_pod: a.ft_rack_per_pod,
        ft_core_count: a.ft_core_count,
        link_bandwidth: a.link_bandwidth,
        ft_server_tor_link_capacity_mult: a.ft_server_tor_link_capacity_mult,
        ft_agg_core_link_capacity_mult: a.ft_agg_core_link_capacity_mult,
    };
    let units = Units { ms_per_unit: a.ms_per_unit, link_gbps: a.link_gbps };
    let name = a.name.clone().unwrap_or_else(|| {
        let dir = a
            .placement
            .canonicalize()
            .ok()
            .and_then(|p| p.parent().and_then(|d| d.file_name()).map(|d| d.to_os_string()));
        format!("psim-{}", dir.map_or("import".into(), |d| d.to_string_lossy().into_owned()))
    });
    let imported = import(&name, &files, &net, units)?;
    for note in &imported.notes {
        eprintln!("note: {note}");
    }
    match &a.out {
        Some(out) => {
            orrery_model::files::write_atomic(out, imported.toml.as_bytes())
                .with_context(|| format!("writing {}", out.display()))?;
            eprintln!(
                "wrote {}: {} jobs, {} scripted decisions; run it with `orrery run {} --iterations --out DIR`",
                out.display(),
                imported.jobs,
                imported.decisions,
                out.display()
            );
        }
        None => print!("{}", imported.toml),
    }
    Ok(())
}
