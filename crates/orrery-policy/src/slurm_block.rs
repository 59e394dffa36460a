//! Slurm's topology/block plugin as an LLM cluster configures it (issue 67's
//! `slurm-block` baseline): `slurm-block` and `slurm-block:SEGMENT`.
//!
//! * **Blocks.** A base block is a rack (the hosts under one leaf switch, or
//!   one NVL72 rack); `topology.conf`'s `BlockSizes` aggregate 2, 4, 8, …
//!   adjacent base blocks into the blocks of the levels above, as NVIDIA's
//!   Topograph infers them (a doubling sequence). orrery's last level holds
//!   every base block, so no job is refused for its size; Slurm's would be.
//! * **A job without `--segment`** is placed inside one block of the lowest
//!   level whose free GPUs hold it; among that level's blocks the fullest
//!   that fits (best fit), and inside it the emptiest base blocks first
//!   (the job touches as few base blocks as it can), the fullest hosts of
//!   each first. If no block of any level holds it, it waits.
//! * **`--segment=N`** (`slurm-block:N`, N hosts): the job is cut into
//!   segments of N hosts' worth of GPUs, each inside one base block (not
//!   necessarily on whole hosts: orrery shares hosts between jobs); the segments of
//!   one job stay inside one block of the lowest level that holds them all.
//!   A job whose GPUs are not a multiple of a segment is one segment.
//!
//! What it does not do: look at links or traffic, time communication, or
//! `--exclusive=topo` (a job's base blocks stay open to other jobs here).

use crate::placement::{Hosts, Placement, capped};
use crate::{ClusterView, JobSpec};
use orrery_model::HostId;
use std::collections::BTreeMap;

/// The names with a segment, 1 to 18 hosts (an NVL72 rack's 18 trays).
const SEGMENT_NAMES: [&str; 18] = [
    "slurm-block:1",
    "slurm-block:2",
    "slurm-block:3",
    "slurm-block:4",
    "slurm-block:5",
    "slurm-block:6",
    "slurm-block:7",
    "slurm-block:8",
    "slurm-block:9",
    "slurm-block:10",
    "slurm-block:11",
    "slurm-block:12",
    "slurm-block:13",
    "slurm-block:14",
    "slurm-block:15",
    "slurm-block:16",
    "slurm-block:17",
    "slurm-block:18",
];

/// Slurm topology/block placement.
#[derive(Debug, Clone)]
pub struct SlurmBlock {
    /// `--segment`, in hosts (None: the job is one segment).
    pub segment_hosts: Option<u32>,
    name: &'static str,
}

impl SlurmBlock {
    /// `slurm-block` or `slurm-block:N` (N in 1..=18 hosts per segment).
    pub fn by_name(name: &str) -> Option<SlurmBlock> {
        if name == "slurm-block" {
            return Some(SlurmBlock { segment_hosts: None, name: "slurm-block" });
        }
        let n: usize = name.strip_prefix("slurm-block:")?.parse().ok()?;
        let name = SEGMENT_NAMES.get(n.checked_sub(1)?)?;
        Some(SlurmBlock { segment_hosts: Some(n as u32), name })
    }
}

/// The hosts of each base block (rack), in rack order. O(H).
fn base_blocks(rack_of: &[usize], hosts: usize) -> Vec<Vec<HostId>> {
    let mut by_rack: BTreeMap<usize, Vec<HostId>> = BTreeMap::new();
    for h in 0..hosts {
        by_rack.entry(rack_of.get(h).copied().unwrap_or(h)).or_default().push(h);
    }
    by_rack.into_values().collect()
}

/// The job's GPUs taken inside the base blocks `blocks` (one block of a
/// level), or None. Without segments: the emptiest base blocks first, the
/// fullest hosts of each first. With segments of `seg` GPUs: each segment
/// into the fullest base block that still holds it. O(H log H).
fn fill(blocks: &[Vec<HostId>], free: &[u32], gpus: u32, seg: Option<u32>) -> Option<Hosts> {
    let mut left: Vec<u32> = free.to_vec();
    let total = |hosts: &[HostId], left: &[u32]| hosts.iter().map(|&h| u64::from(left[h])).sum::<u64>();
    let mut out: Hosts = Vec::new();
    let take = |hosts: &[HostId], want: u32, left: &mut Vec<u32>, out: &mut Hosts| {
        let mut order = hosts.to_vec();
        order.sort_by_key(|&h| (left[h], h));
        let mut need = want;
        for h in order {
            let t = left[h].min(need);
            if t > 0 {
                left[h] -= t;
                need -= t;
                match out.iter_mut().find(|x| x.0 == h) {
                    Some(x) => x.1 += t,
                    None => out.push((h, t)),
                }
            }
        }
        need
    };
    match seg {
        Some(seg) if seg > 0 && gpus.is_multiple_of(seg) && gpus > seg => {
            for _ in 0..gpus / seg {
                let block =
                    blocks.iter().filter(|b| total(b, &left) >= u64::from(seg)).min_by_key(|b| total(b, &left))?;
                take(block, seg, &mut left, &mut out);
            }
            Some(out)
        }
        _ => {
            let mut order: Vec<&Vec<HostId>> = blocks.iter().collect();
            order.sort_by_key(|b| std::cmp::Reverse(total(b, &left)));
            let mut need = gpus;
            for b in order {
                if need == 0 {
                    break;
                }
                need = take(b, need, &mut left, &mut out);
            }
            (need == 0).then_some(out)
        }
    }
}

impl Placement for SlurmBlock {
    fn name(&self) -> &'static str {
        self.name
    }

    /// Levels 0, 1, … (blocks of 1, 2, 4, … base blocks), best fit at the
    /// lowest level that holds the job. O(log B · H log H) for B base blocks.
    fn place(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], spec: &JobSpec) -> Option<Hosts> {
        let free = capped(free, spec);
        let gpus = spec.gpus();
        let base = base_blocks(rack_of, free.len());
        // A segment's GPUs: N hosts of the cluster's most common size.
        let per_host = view.topology.hosts.iter().map(|h| h.gpus).max().unwrap_or(1);
        let seg = self.segment_hosts.map(|n| n * per_host);
        let free_of = |blocks: &[Vec<HostId>]| blocks.iter().flatten().map(|&h| u64::from(free[h])).sum::<u64>();
        let mut size = 1;
        loop {
            let mut fits: Vec<(u64, usize, Hosts)> = base
                .chunks(size)
                .enumerate()
                .filter(|(_, blocks)| free_of(blocks) >= u64::from(gpus))
                .filter_map(|(i, blocks)| fill(blocks, &free, gpus, seg).map(|h| (free_of(blocks), i, h)))
                .collect();
            if !fits.is_empty() {
                fits.sort_by_key(|f| (f.0, f.1));
                return fits.into_iter().next().map(|f| f.2);
            }
            if size >= base.len() {
                return None;
            }
            size *= 2;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{Topology, Work};

    /// 4 racks of 2 hosts of 8 GPUs.
    fn topo() -> Topology {
        LeafSpine::with_oversubscription(4, 2, 1, 8, "h100", 3200.0, 1.0).build("t").expect("valid")
    }

    fn place(name: &str, free: &[u32], gpus: u32) -> Option<Hosts> {
        let t = topo();
        let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: free, queue: Vec::new(), running: Vec::new() };
        let rack_of = crate::baseline::racks(&view);
        let spec = JobSpec::new("j", "llama3-8b", 1, gpus, Work::Iterations(1), 0.0);
        SlurmBlock::by_name(name).expect("a slurm-block name").place(&view, rack_of, free, &spec)
    }

    fn racks(hosts: &Hosts) -> Vec<usize> {
        let mut r: Vec<usize> = hosts.iter().map(|&(h, _)| h / 2).collect();
        r.sort_unstable();
        r.dedup();
        r
    }

    #[test]
    fn a_job_takes_one_block_of_the_lowest_level_that_holds_it() {
        // Free per rack: 14, 8, 16, 4.
        let free = [6, 8, 4, 4, 8, 8, 4, 0];
        // 8 GPUs: a base block holds it; rack 1 (8 free) is the best fit.
        assert_eq!(racks(&place("slurm-block", &free, 8).expect("fits")), vec![1]);
        // 18: no rack holds it; of the level-1 blocks {0,1} (22 free) and
        // {2,3} (20 free), the fuller {2,3}; never racks 1 and 2 (not one block).
        let p = place("slurm-block", &free, 18).expect("fits");
        assert_eq!(racks(&p), vec![2, 3]);
        assert_eq!(p.iter().map(|h| h.1).sum::<u32>(), 18);
        // 21: only {0,1} at level 1.
        assert_eq!(racks(&place("slurm-block", &free, 21).expect("fits")), vec![0, 1]);
        // 23: level 2, the whole cluster (42 free), in the emptiest racks first.
        let p = place("slurm-block", &free, 23).expect("fits");
        assert_eq!(racks(&p), vec![0, 2]);
        // 43: more than the cluster has.
        assert_eq!(place("slurm-block", &free, 43), None);
    }

    #[test]
    fn segments_stay_inside_one_base_block_each() {
        // Free per rack: 14, 8, 16, 4. Segments of 1 host (8 GPUs).
        let free = [6, 8, 4, 4, 8, 8, 4, 0];
        // 16 GPUs = 2 segments of 8: rack 2 holds both (16 free), the
        // lowest level that holds them.
        let p = place("slurm-block:1", &free, 16).expect("fits");
        assert_eq!(racks(&p), vec![2]);
        // 24 = 3 segments. Level 1: {0,1} holds one in rack 0 (14) and one
        // in rack 1 (8), not a third; {2,3} holds two in rack 2, none in 3.
        // Level 2: each into the fullest rack that still holds 8: rack 1
        // (8), rack 0 (14), rack 2 (16).
        let p = place("slurm-block:1", &free, 24).expect("fits");
        assert_eq!(racks(&p), vec![0, 1, 2]);
        for r in racks(&p) {
            let in_rack: u32 = p.iter().filter(|&&(h, _)| h / 2 == r).map(|h| h.1).sum();
            assert_eq!(in_rack % 8, 0, "rack {r} holds part of a segment: {p:?}");
        }
    }

    #[test]
    fn names_parse() {
        assert!(SlurmBlock::by_name("slurm-block").is_some());
        assert_eq!(SlurmBlock::by_name("slurm-block:2").and_then(|s| s.segment_hosts), Some(2));
        assert!(SlurmBlock::by_name("slurm-block:0").is_none());
        assert!(SlurmBlock::by_name("slurm-block:x").is_none());
    }
}
