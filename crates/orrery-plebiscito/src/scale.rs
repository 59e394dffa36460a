//! Plebiscito §VII-C, Fig. 7: one job on ever more agents. For each cluster
//! size, the auction runs on [`SimNet`] and is measured in messages, bytes,
//! rounds, simulated time to consensus and the real time this machine takes
//! to simulate it; beside it, the centralised greedy with the same utility:
//! its messages (`2N`: gather every node's state, send the decision) and its
//! measured compute time plus one round trip.

use crate::agent::{Agent, Config, Verdict};
use crate::central::{greedy, total_utility};
use crate::simnet::{NetConfig, SimNet, diameter, overlay};
use crate::utility::{Arch, BidPolicy, ClusterMap, Demand, JobRequest, Resources, Usage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

/// One cluster size.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// Agents (N).
    pub agents: usize,
    /// Overlay diameter (D).
    pub diameter: usize,
    /// Auction messages.
    pub messages: u64,
    /// Mean message size, bytes.
    pub bytes_per_message: f64,
    /// Longest causal chain of bundle changes.
    pub rounds: u32,
    /// Theorem 3's bound Λ·N·D.
    pub rounds_bound: usize,
    /// Simulated time from submission to the last bundle change, ms.
    pub consensus_ms: f64,
    /// Real time to simulate the auction to its decision on this machine, ms.
    pub wall_ms: f64,
    /// Whether every agent placed the job, identically.
    pub agreed: bool,
    /// Total utility of the auction's placement over the greedy's (Theorem
    /// 1: 1 when the auction reproduces the greedy; ties may pick other
    /// nodes of equal value).
    pub utility_vs_greedy: f64,
    /// Centralised messages (2N).
    pub central_messages: u64,
    /// Centralised greedy compute time on this machine, ms.
    pub central_compute_ms: f64,
    /// Centralised time to a decision: compute plus one round trip, ms.
    pub central_ms: f64,
}

/// The cluster of a scaling run: `n` nodes in racks of 16 with 8 GPUs, 96
/// cores and 512 GiB each, 0-7 GPUs already busy (seeded), 25 Gbps NICs and
/// 3:1 uplinks.
pub fn cluster(n: usize, seed: u64) -> (Arc<ClusterMap>, Vec<Resources>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let racks = n.div_ceil(16).max(1);
    let map = ClusterMap {
        leaf_of: (0..n).map(|i| (i / 16) as u16).collect(),
        nic_gbps: vec![25.0; n],
        uplink_gbps: vec![16.0 * 25.0 / 3.0; racks],
    };
    let res = (0..n)
        .map(|_| {
            let total = Demand { gpus: 8.0, cpus: 96.0, mem_gib: 512.0 };
            let busy = f64::from(rng.random_range(0..8u8));
            Resources {
                total,
                free: Demand { gpus: 8.0 - busy, cpus: 96.0 - 8.0 * busy, mem_gib: 512.0 - 32.0 * busy },
            }
        })
        .collect();
    (Arc::new(map), res)
}

/// Runs one `workers`-component ring job on each cluster size. `degree` is
/// the overlay degree; latencies are [`NetConfig::reliable`]'s.
pub fn run(sizes: &[usize], workers: u16, degree: usize, policy: BidPolicy, seed: u64) -> Vec<ScaleRow> {
    sizes
        .iter()
        .map(|&n| {
            let (map, res) = cluster(n, seed ^ n as u64);
            let adj = overlay(n, degree, seed);
            let d = diameter(&adj).unwrap_or(0);
            let job = JobRequest {
                id: 1,
                arch: Arch::Ring,
                workers,
                worker: Demand { gpus: 1.0, cpus: 4.0, mem_gib: 16.0 },
                server: Demand::default(),
                gbps: 5.0,
                peak_gbps: 25.0,
                runtime_s: 3600.0,
                weight: 1.0,
            };
            let net_config = NetConfig::reliable(seed);
            let rtt_ms = (net_config.latency_us.0 + net_config.latency_us.1) as f64 / 1e3;
            let agents: Vec<Agent> = (0..n)
                .map(|i| Agent::new(i as u32, adj[i].clone(), res[i], map.clone(), Config::new(policy)))
                .collect();
            let mut net = SimNet::new(agents, net_config);
            let t = Instant::now();
            net.submit(0, job.clone());
            let report = net.settle().into_iter().next().map(|r| r.1).unwrap_or_default();
            let wall_ms = t.elapsed().as_secs_f64() * 1e3;
            let usage = Usage::empty(&map);
            let t = Instant::now();
            let central = greedy(&res, &map, &usage, &job, &policy);
            let central_compute_ms = t.elapsed().as_secs_f64() * 1e3;
            let placed = match report.agreed() {
                Some(Verdict::Placed(p)) => Some(p.clone()),
                _ => None,
            };
            ScaleRow {
                agents: n,
                diameter: d,
                messages: report.messages,
                bytes_per_message: report.bytes as f64 / report.messages.max(1) as f64,
                rounds: report.rounds,
                rounds_bound: usize::from(workers) * n * d,
                consensus_ms: report.consensus_us as f64 / 1e3,
                wall_ms,
                agreed: placed.is_some() && report.verdicts.len() == n,
                utility_vs_greedy: match (&placed, &central) {
                    (Some(p), Ok((c, _))) => {
                        total_utility(&res, &map, &usage, &job, &policy, p)
                            / total_utility(&res, &map, &usage, &job, &policy, c)
                    }
                    _ => 0.0,
                },
                central_messages: 2 * n as u64,
                central_compute_ms,
                central_ms: central_compute_ms + rtt_ms,
            }
        })
        .collect()
}
