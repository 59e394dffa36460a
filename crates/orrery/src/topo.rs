//! `orrery topo`.

use anyhow::Context;
use orrery_model::Topology;
use orrery_model::setups::{NAMED, by_name, parse_topology};
use std::collections::BTreeMap;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// List the built-in set-ups.
    List,
    /// Describe a set-up (built-in name, `philly`, `pai-v2020`, or a TOML/JSON file).
    ///
    /// A file lists `[[hosts]]` (name, gpus, gpu_type, cpus, memory_gib),
    /// `[[switches]]` (name, tier = leaf|spine|core) and `[[cables]]` (a, b,
    /// gbps), or holds a `[leaf_spine]` table (racks, hosts_per_rack, spines,
    /// gpus_per_host, gpu_type, host_gbps, uplink_gbps).
    Show {
        /// Built-in name or file path.
        name: String,
        /// Print the whole topology as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Resolves a built-in name or loads a file.
pub fn load(name: &str) -> anyhow::Result<Topology> {
    if let Some(t) = by_name(name).or_else(|| orrery_trace::machines::builtin(name)) {
        return Ok(t);
    }
    let path = std::path::Path::new(name);
    if !path.exists() {
        let names: Vec<&str> = NAMED.iter().map(|n| n.0).chain(["philly", "pai-v2020", "lingjun"]).collect();
        anyhow::bail!("{name:?} is neither a built-in topology ({}) nor a file", names.join(", "));
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {name}"))?;
    Ok(parse_topology(name, &text)?)
}

pub fn run(cmd: &Command) -> anyhow::Result<()> {
    match cmd {
        Command::List => {
            for (n, d) in NAMED {
                println!("{n:<22} {d}");
            }
            println!(
                "{:<22} Philly's 552 machines (bundled machine list), racks of 16, 100 Gbps, 2:1 (assumed)",
                "philly"
            );
            println!(
                "{:<22} Alibaba PAI v2020's 1,814 GPU machines, racks of 16, 100 Gbps, 2:1 (assumed)",
                "pai-v2020"
            );
            println!(
                "{:<22} Alibaba Lingjun's three-tier Clos (Crux's dataset): 847 hosts x 8 H100-class GPUs, 119 ToRs, 3 aggregation, 1 core; 1:1 to aggregation, 4:1 to core (assumed)",
                "lingjun"
            );
            Ok(())
        }
        Command::Show { name, json } => {
            let t = load(name)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&t)?);
            } else {
                describe(&t);
            }
            Ok(())
        }
    }
}

fn describe(t: &Topology) {
    let mut gpus: BTreeMap<&str, (usize, u32)> = BTreeMap::new();
    for h in &t.hosts {
        let e = gpus.entry(h.gpu_type.as_str()).or_default();
        e.0 += 1;
        e.1 += h.gpus;
    }
    let mut tiers: BTreeMap<String, usize> = BTreeMap::new();
    for s in &t.switches {
        *tiers.entry(format!("{:?}", s.tier).to_lowercase()).or_default() += 1;
    }
    let mut caps: BTreeMap<String, usize> = BTreeMap::new();
    for l in &t.links {
        let kind = if l.from < t.hosts.len() || l.to < t.hosts.len() { "host" } else { "switch" };
        *caps.entry(format!("{kind} links at {} Gbit/s", l.gbps)).or_default() += 1;
    }
    println!("topology {}", t.name);
    println!("  hosts      {} ({} GPUs)", t.hosts.len(), t.gpu_count());
    for (g, (h, n)) in &gpus {
        println!("             {h} hosts with {n} {g} GPUs");
    }
    let tiers: Vec<String> = tiers.iter().map(|(k, v)| format!("{v} {k}")).collect();
    println!("  switches   {} ({})", t.switches.len(), tiers.join(", "));
    println!("  cables     {} ({} directed links)", t.links.len() / 2, t.links.len());
    for (k, v) in &caps {
        println!("             {v} directed {k}");
    }
    println!("  oversubscription {:.2}:1", t.oversubscription());
    if t.hosts.len() >= 2 {
        let last = t.hosts.len() - 1;
        let p = t.paths(0, last);
        println!(
            "  paths {} -> {}: {} equal-cost, {} hops",
            t.hosts[0].name,
            t.hosts[last].name,
            p.len(),
            p.first().map_or(0, Vec::len)
        );
    }
}
