//! Machine lists that describe real clusters, turned into topologies.
//!
//! Public traces publish machines but not their network, so
//! [`orrery_model::setups::from_machines`] places them in racks of 16 under a
//! two-spine leaf-spine at 2:1 with 100 Gbps NICs (an assumption, stated in
//! `orrery topo show`).

use crate::diag::{Diagnostic, Parsed};
use crate::formats::for_each_row;
use orrery_model::Topology;
use orrery_model::setups::{Machine, from_machines};

/// Machines per rack used for machine-list clusters.
pub const RACK_SIZE: u32 = 16;
/// NIC rate used for machine-list clusters, Gbit/s.
pub const HOST_GBPS: f64 = 100.0;

/// Philly's `cluster_machine_list`: `machineId, number of GPUs, single GPU mem`
/// (`12GB` → K80 die, `24GB` → P40; the list gives memory only).
pub fn parse_philly(file: &str, text: &str) -> Parsed<Machine> {
    let header = ["machineId", "number of GPUs", "single GPU mem"];
    for_each_row(file, text, b',', true, &header, |row| {
        let name = row.text(0)?;
        let gpus: u32 = row.get(1, "a non-negative integer")?;
        let mem = row.text(2)?;
        let gpu_type = match mem.to_ascii_uppercase().as_str() {
            "12GB" => "k80",
            "24GB" => "p40",
            _ => return Err(row.at.field("single GPU mem", "12GB or 24GB", mem)),
        };
        Ok(Some(Machine { name: name.to_string(), gpus, gpu_type: gpu_type.into(), cpus: 0, memory_gib: 0.0 }))
    })
}

/// Alibaba PAI v2020 `pai_machine_spec.csv` (no header):
/// `machine, gpu_type, cap_cpu, cap_mem (GB), cap_gpu`. CPU-only machines are skipped.
pub fn parse_pai_v2020(file: &str, text: &str) -> Parsed<Machine> {
    let header = ["machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"];
    for_each_row(file, text, b',', false, &header, |row| machine(row, [0, 1, 2, 3, 4], 1.0, 1.0))
}

/// Alibaba v2023 `openb_node_list_all_node.csv`:
/// `sn, cpu_milli, memory_mib, gpu, model`. CPU-only nodes are skipped.
pub fn parse_v2023_nodes(file: &str, text: &str) -> Parsed<Machine> {
    let header = ["sn", "cpu_milli", "memory_mib", "gpu", "model"];
    for_each_row(file, text, b',', true, &header, |row| machine(row, [0, 4, 1, 2, 3], 1000.0, 1024.0))
}

/// Reads one machine row; `cols` = [name, gpu type, cpu, memory, gpus].
fn machine(
    row: &crate::formats::Row<'_>,
    cols: [usize; 5],
    cpu_div: f64,
    mem_div: f64,
) -> Result<Option<Machine>, Diagnostic> {
    let gpus: u32 = row.get(cols[4], "a non-negative integer")?;
    let cpu = row.non_negative(cols[2])?;
    let mem = row.non_negative(cols[3])?;
    if gpus == 0 {
        return Ok(None);
    }
    let raw = row.text(cols[1])?;
    // v2023's G1/G2/G3 are undisclosed; count them as V100-class.
    let gpu_type = match orrery_model::gpu::gpu_type(raw) {
        Some(g) => g.name,
        None if matches!(raw, "G1" | "G2" | "G3") => "v100",
        None => return Err(row.at.field("gpu_type", "a known GPU model", raw)),
    };
    Ok(Some(Machine {
        name: row.text(cols[0])?.to_string(),
        gpus,
        gpu_type: gpu_type.into(),
        cpus: (cpu / cpu_div) as u32,
        memory_gib: mem / mem_div,
    }))
}

/// Alibaba Lingjun's `topo.csv` (Crux's dataset): `ip, DSW, PSW, ASW`, one
/// row per host with the core, aggregation and ToR switch above it. A row
/// with an empty field, or an ip seen before, is a diagnostic.
pub fn parse_lingjun(file: &str, text: &str) -> Parsed<orrery_model::setups::ClosHost> {
    let header = ["ip", "DSW", "PSW", "ASW"];
    let mut seen = std::collections::HashSet::new();
    for_each_row(file, text, b',', true, &header, |row| {
        let ip = row.text(0)?;
        if ip.is_empty() || !seen.insert(ip.to_string()) {
            return Err(row.at.field("ip", "a host id not seen before", ip));
        }
        let [core, aggregation, tor] = [1, 2, 3].map(|i| row.text(i).map(str::to_string));
        let (core, aggregation, tor) = (core?, aggregation?, tor?);
        for (field, v) in [("DSW", &core), ("PSW", &aggregation), ("ASW", &tor)] {
            if v.is_empty() {
                return Err(row.at.field(field, "a switch name", v));
            }
        }
        // Host names: the hashed ip's first 12 hex digits.
        let name = format!("h-{}", &ip[..ip.len().min(12)]);
        Ok(Some(orrery_model::setups::ClosHost { name, tor, aggregation, core }))
    })
}

/// The bundled Lingjun cluster as a topology, at orrery's chosen rates
/// ([`orrery_model::setups::ClosRates::default`]).
pub fn lingjun() -> Topology {
    let parsed = parse_lingjun("lingjun/topo.csv", LINGJUN_TOPOLOGY);
    orrery_model::setups::clos_tree("lingjun", &parsed.items, &orrery_model::setups::ClosRates::default())
        .expect("the bundled Lingjun topology is valid")
}

const LINGJUN_TOPOLOGY: &str = include_str!("../../../data/lingjun/topo.csv");

/// A topology from machines with orrery's rack assumptions.
pub fn topology(name: &str, machines: &[Machine]) -> Topology {
    from_machines(name, machines, RACK_SIZE, HOST_GBPS)
}

const PHILLY_MACHINES: &str = include_str!("../../../data/philly/philly_cluster_machine_list.csv");
const PAI_V2020_MACHINES: &str = include_str!("../../../data/alibaba/pai_v2020_machine_spec.csv");

/// Built-in clusters from bundled machine lists: `philly` (552 machines) and
/// `pai-v2020` (1,814 GPU machines); and `lingjun`, Alibaba's three-tier
/// LLM cluster (847 hosts).
pub fn builtin(name: &str) -> Option<Topology> {
    let parsed = match name.trim().to_ascii_lowercase().as_str() {
        "philly" => parse_philly("philly_cluster_machine_list.csv", PHILLY_MACHINES),
        "pai-v2020" | "pai" => parse_pai_v2020("pai_v2020_machine_spec.csv", PAI_V2020_MACHINES),
        "lingjun" => return Some(lingjun()),
        _ => return None,
    };
    Some(topology(name, &parsed.items))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(path: &str) -> String {
        let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/");
        std::fs::read_to_string(format!("{p}{path}")).expect("bundled data file")
    }

    #[test]
    fn lingjun_is_847_hosts_under_119_tors_3_aggregation_switches_and_a_core() {
        let p = parse_lingjun("lingjun/topo.csv", &data("lingjun/topo.csv"));
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.items.len(), 847);
        let t = lingjun();
        assert_eq!(t.hosts.len(), 847);
        assert_eq!(t.gpu_count(), 847 * 8);
        assert_eq!(t.switches.len(), 119 + 3 + 1);
        // Non-blocking at the ToRs: a ToR's uplink carries its hosts' rate.
        assert!((t.oversubscription() - 1.0).abs() < 1e-9);
        // Hosts under different aggregation switches are 6 hops apart
        // (host, ToR, aggregation, core, aggregation, ToR, host), one path.
        let agg_of = |h: usize| {
            let tor = t.links[t.out_links(h)[0]].to;
            t.node_name(tor).split('/').next().map(str::to_string)
        };
        let (a, b) = (0, (1..847).find(|&h| agg_of(h) != agg_of(0)).expect("another pod"));
        let paths = t.paths(a, b);
        assert_eq!(paths.len(), 1);
        assert_eq!(paths[0].len(), 6);
    }

    #[test]
    fn a_lingjun_row_without_a_switch_or_with_a_seen_ip_is_named() {
        let text = "ip,DSW,PSW,ASW\naa,G6,P8,S1\nbb,G6,,S1\naa,G6,P8,S2\ncc,G6,P8,S2\n";
        let p = parse_lingjun("t.csv", text);
        assert_eq!(p.items.len(), 2);
        let fields: Vec<_> = p.errors.iter().map(|e| (e.line, e.field.clone())).collect();
        assert_eq!(fields, vec![(3, Some("PSW".to_string())), (4, Some("ip".to_string()))]);
    }

    #[test]
    fn philly_machine_list_has_552_machines_and_2490_gpus() {
        let p = parse_philly("philly_cluster_machine_list.csv", &data("philly/philly_cluster_machine_list.csv"));
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        assert_eq!(p.items.len(), 552);
        assert_eq!(p.items.iter().filter(|m| m.gpus == 2).count(), 321);
        assert_eq!(p.items.iter().filter(|m| m.gpus == 8).count(), 231);
        let t = topology("philly", &p.items);
        assert_eq!(t.hosts.len(), 552);
        assert_eq!(t.gpu_count(), 2490);
        // 552 / 16 = 35 racks (the last one partial) + 2 spines.
        assert_eq!(t.switches.len(), 35 + 2);
        assert!((t.oversubscription() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn pai_v2020_machine_spec_has_6742_gpus() {
        let p = parse_pai_v2020("pai_v2020_machine_spec.csv", &data("alibaba/pai_v2020_machine_spec.csv"));
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        assert_eq!(p.items.len(), 1897 - 83);
        assert_eq!(p.items.iter().map(|m| m.gpus).sum::<u32>(), 6742);
    }

    #[test]
    fn malformed_machine_rows_name_line_and_field() {
        let p =
            parse_philly("m.csv", "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,two, 12GB\nm2,8, 16GB\n");
        assert_eq!(p.items.len(), 1);
        assert_eq!(
            p.errors[0].to_string(),
            "m.csv:3: field `number of GPUs`: expected a non-negative integer, found \"two\""
        );
        assert_eq!(p.errors[1].to_string(), "m.csv:4: field `single GPU mem`: expected 12GB or 24GB, found \"16GB\"");
    }

    #[test]
    fn v2023_nodes_when_available() {
        // Not bundled (research-only terms); checked against the shared copy when present.
        let path =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/data/alibaba/v2023_openb_node_list_all_node.csv");
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(_) => "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,262144,0,\nn1,96000,786432,8,V100M32\nn2,64000,262144,2,G2\n".into(),
        };
        let p = parse_v2023_nodes("nodes.csv", &text);
        assert!(p.errors.is_empty(), "{:?}", p.errors.first());
        let gpus: u32 = p.items.iter().map(|m| m.gpus).sum();
        assert!(gpus == 6212 || gpus == 10, "{gpus}");
    }
}
