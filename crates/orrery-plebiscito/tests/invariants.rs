//! Plebiscito's guarantees as properties under an adversarial simulated
//! transport (§V): nothing is assigned twice, connected nodes agree, an
//! aborted auction releases everything, rounds stay within O(Λ·N·D)
//! (Theorem 3), and on a reliable network the auction places exactly as the
//! centralised greedy (Theorem 1's argument).

use orrery_plebiscito::agent::{Agent, Config, Verdict};
use orrery_plebiscito::central::greedy;
use orrery_plebiscito::simnet::{NetConfig, Partition, SimNet, diameter, overlay};
use orrery_plebiscito::utility::{
    Arch, BidPolicy, ClusterMap, Demand, JobRequest, NodeContext, Resources, Usage, Utility, slot_values,
};
use proptest::prelude::*;
use std::sync::Arc;

/// `n` nodes in racks of 4 with 25 Gbps NICs and 50 Gbps of uplink per rack
/// (2:1), 8 GPUs, 96 cores and 512 GiB each, some GPUs already busy.
fn cluster(n: usize, busy: &[u8]) -> (Arc<ClusterMap>, Vec<Resources>) {
    let racks = n.div_ceil(4);
    let map = ClusterMap {
        leaf_of: (0..n).map(|i| (i / 4) as u16).collect(),
        nic_gbps: vec![25.0; n],
        uplink_gbps: vec![50.0; racks],
    };
    let res = (0..n)
        .map(|i| {
            let total = Demand { gpus: 8.0, cpus: 96.0, mem_gib: 512.0 };
            let b = f64::from(busy.get(i).copied().unwrap_or(0) % 9);
            Resources { total, free: Demand { gpus: 8.0 - b, cpus: 96.0 - 4.0 * b, mem_gib: 512.0 - 16.0 * b } }
        })
        .collect();
    (Arc::new(map), res)
}

fn agents(map: &Arc<ClusterMap>, res: &[Resources], adj: &[Vec<u32>], config: Config) -> Vec<Agent> {
    (0..res.len()).map(|i| Agent::new(i as u32, adj[i].clone(), res[i], map.clone(), config)).collect()
}

fn job(id: u64, arch: Arch, workers: u16, gpus: f64, gbps: f64) -> JobRequest {
    JobRequest {
        id,
        arch,
        workers,
        worker: Demand { gpus, cpus: 4.0, mem_gib: 16.0 },
        server: Demand { gpus: 0.0, cpus: 8.0, mem_gib: 32.0 },
        gbps,
        peak_gbps: 25.0,
        runtime_s: 1800.0,
        weight: 1.0,
    }
}

/// Every agent's committed resources are within capacity and match the jobs
/// it says are placed on it; every agent's link usage fits.
fn assert_nothing_assigned_twice(net: &SimNet, map: &ClusterMap, initial: &[Resources]) {
    for a in net.agents() {
        let r = a.committed_free();
        assert!(
            r.free.gpus >= -1e-9 && r.free.cpus >= -1e-9 && r.free.mem_gib >= -1e-9,
            "node {} over-committed",
            a.id()
        );
        let mut used = 0.0;
        for (req, p) in a.placed().values() {
            for (role, nodes) in p.iter().enumerate() {
                used += nodes
                    .iter()
                    .filter(|(n, _)| *n == a.id())
                    .map(|(_, k)| *k as f64 * req.demand(role).gpus)
                    .sum::<f64>();
            }
        }
        let init = initial[a.id() as usize].free.gpus;
        assert!(
            (init - r.free.gpus - used).abs() < 1e-9,
            "node {}: {used} GPUs placed, {} taken",
            a.id(),
            init - r.free.gpus
        );
        let u = a.usage();
        for (i, &g) in u.nic.iter().enumerate() {
            assert!(g <= map.nic_gbps[i] + 1e-9, "NIC {i} over-reserved: {g}");
        }
        for (l, &g) in u.uplink.iter().enumerate() {
            assert!(g <= map.uplink_gbps[l] + 1e-9, "uplink {l} over-reserved: {g}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Loss, duplication and reordering with re-sending: connected nodes all
    /// reach the same verdict for every job, and nothing is assigned twice.
    #[test]
    fn agreement_and_no_double_assignment_under_a_lossy_network(
        n in 6usize..24,
        busy in proptest::collection::vec(0u8..9, 24),
        jobs in proptest::collection::vec((2u16..12, 1u8..4, 1u8..20, any::<bool>()), 1..6),
        loss in 0.0f64..0.2,
        duplicate in 0.0f64..0.3,
        seed in any::<u64>(),
        utility in 0usize..7,
    ) {
        let (map, res) = cluster(n, &busy);
        let adj = overlay(n, 4, seed);
        let mut config = Config::new(BidPolicy::aware(Utility::ALL[utility]));
        config.resend_us = Some(50_000);
        let net_config = NetConfig { latency_us: (50, 5_000), loss, duplicate, partition: None, seed };
        let mut net = SimNet::new(agents(&map, &res, &adj, config), net_config);
        for (i, &(w, g, b, ps)) in jobs.iter().enumerate() {
            let arch = if ps { Arch::ParameterServer } else { Arch::Ring };
            net.submit((i % n) as u32, job(i as u64, arch, w, f64::from(g), f64::from(b)));
            for (_, r) in net.settle() {
                prop_assert_eq!(r.verdicts.len(), n);
                prop_assert!(r.agreed().is_some(), "nodes disagree: {:?}", r.verdicts);
                prop_assert!(!matches!(r.agreed(), Some(Verdict::Aborted)));
            }
        }
        assert_nothing_assigned_twice(&net, &map, &res);
        let first = net.agents()[0].usage().clone();
        for a in net.agents() {
            prop_assert_eq!(a.usage(), &first, "agents disagree on reserved bandwidth");
        }
    }

    /// On a reliable network the auction places every job exactly where the
    /// centralised greedy with the same utility does, and converges within
    /// Theorem 3's O(Λ·N·D) rounds.
    #[test]
    fn reliable_auction_equals_the_centralised_greedy(
        n in 4usize..40,
        busy in proptest::collection::vec(0u8..9, 40),
        uplink_used in proptest::collection::vec(0.0f64..45.0, 10),
        workers in 2u16..17,
        gpus in 1u8..3,
        gbps in 1u8..25,
        seed in any::<u64>(),
        utility in 0usize..7,
        aware in any::<bool>(),
    ) {
        let (map, res) = cluster(n, &busy);
        let mut usage = Usage::empty(&map);
        for (l, u) in usage.uplink.iter_mut().enumerate() {
            *u = uplink_used[l % uplink_used.len()];
        }
        let u = Utility::ALL[utility];
        let policy = if aware { BidPolicy::aware(u) } else { BidPolicy::unaware(u) };
        let adj = overlay(n, 3, seed);
        let mut all = agents(&map, &res, &adj, Config::new(policy));
        for a in &mut all {
            a.set_usage(usage.clone());
        }
        let mut net = SimNet::new(all, NetConfig::reliable(seed));
        let j = job(1, Arch::Ring, workers, f64::from(gpus), f64::from(gbps));
        net.submit((seed % n as u64) as u32, j.clone());
        let reports = net.settle();
        let r = &reports[0].1;
        let verdict = r.agreed().cloned();
        let central = greedy(&res, &map, &usage, &j, &policy);
        // Equal bids from different nodes are broken by time stamp in the
        // auction and by node id in the greedy; compare only without ties.
        let tie = has_tie(&res, &map, &usage, &j, &policy);
        // With ties, either may pick other nodes of equal value, and one
        // choice may fit the links where the other does not.
        prop_assert!(verdict.is_some(), "nodes disagree: {:?}", r.verdicts);
        if !tie {
            match (&verdict, &central) {
                (Some(Verdict::Placed(p)), Ok((c, _))) => prop_assert_eq!(p, c),
                (Some(Verdict::Failed(_)), Err(_)) => {}
                other => prop_assert!(false, "auction and greedy differ: {:?}", other),
            }
        }
        let d = diameter(&adj).expect("overlay is connected");
        let bound = usize::from(workers) * n * d;
        prop_assert!(r.rounds as usize <= bound, "{} rounds > Λ·N·D = {}", r.rounds, bound);
    }
}

/// Whether bids of two different nodes tie in value (recomputed as the agents bid).
fn has_tie(res: &[Resources], map: &ClusterMap, usage: &Usage, j: &JobRequest, policy: &BidPolicy) -> bool {
    let mut bids: Vec<(f64, usize)> = Vec::new();
    for (n, r) in res.iter().enumerate() {
        let ctx = NodeContext { node: n as u32, resources: *r, map, usage };
        bids.extend(slot_values(&ctx, j, 0, policy).0.into_iter().map(|v| (v, n)));
    }
    bids.sort_by(|a, b| a.0.total_cmp(&b.0));
    bids.windows(2).any(|w| (w[0].0 - w[1].0).abs() < 1e-12 && w[0].1 != w[1].1)
}

/// A hard time-out shorter than the time to consensus aborts the auction at
/// every node and leaves every resource and link as it was.
#[test]
fn an_aborted_auction_releases_everything() {
    let n = 12;
    let (map, res) = cluster(n, &[0, 3, 5, 1, 7, 2, 0, 0, 4, 6, 1, 2]);
    let adj = overlay(n, 3, 7);
    let mut config = Config::new(BidPolicy::aware(Utility::Tetris));
    config.hard_timeout_us = 30_000;
    config.quiescence_us = 500_000;
    // 10-20 ms per hop: bundles are still changing when the 30 ms run out.
    let slow = NetConfig { latency_us: (10_000, 20_000), loss: 0.0, duplicate: 0.0, partition: None, seed: 3 };
    let mut net = SimNet::new(agents(&map, &res, &adj, config), slow);
    net.submit(0, job(9, Arch::Ring, 12, 2.0, 5.0));
    let reports = net.settle();
    let r = &reports[0].1;
    assert_eq!(r.agreed(), Some(&Verdict::Aborted), "{:?}", r.verdicts);
    for a in net.agents() {
        assert_eq!(a.free(), res[a.id() as usize], "node {} still holds resources", a.id());
        assert_eq!(a.usage(), &Usage::empty(&map));
        assert!(a.is_idle());
    }
}

/// A partition that outlasts the hard time-out: the auction aborts or fails
/// on each side, nothing stays held, and after it heals the next job is
/// placed with every node agreeing.
#[test]
fn a_partition_then_recovery() {
    let n = 16;
    let (map, res) = cluster(n, &[]);
    let adj = overlay(n, 4, 11);
    let mut config = Config::new(BidPolicy::aware(Utility::Sgf));
    config.resend_us = Some(50_000);
    config.quiescence_us = 200_000;
    config.hard_timeout_us = 1_000_000;
    let side: Vec<bool> = (0..n).map(|i| i < 8).collect();
    let net_config = NetConfig {
        latency_us: (100, 2_000),
        loss: 0.0,
        duplicate: 0.0,
        partition: Some(Partition { from_us: 0, until_us: 1_500_000, side }),
        seed: 5,
    };
    let mut net = SimNet::new(agents(&map, &res, &adj, config), net_config);
    // Needs 80 GPUs, more than one side's 64: neither side can place it.
    net.submit(0, job(1, Arch::Ring, 10, 8.0, 5.0));
    let r = net.settle().remove(0).1;
    assert!(r.verdicts.values().all(|v| !matches!(v, Verdict::Placed(_))), "{:?}", r.verdicts);
    for a in net.agents() {
        assert_eq!(a.free(), res[a.id() as usize]);
    }
    net.run_until(2_000_000);
    net.submit(3, job(2, Arch::Ring, 10, 8.0, 5.0));
    let r = net.settle().remove(0).1;
    assert!(matches!(r.agreed(), Some(Verdict::Placed(_))), "{:?}", r.verdicts);
}

/// A message for a 16-component job stays small (the paper's are 500-600 B of JSON).
#[test]
fn messages_are_compact() {
    let n = 32;
    let (map, res) = cluster(n, &[]);
    let adj = overlay(n, 4, 1);
    let mut net =
        SimNet::new(agents(&map, &res, &adj, Config::new(BidPolicy::aware(Utility::Lgf))), NetConfig::reliable(1));
    net.submit(0, job(1, Arch::Ring, 16, 1.0, 5.0));
    let r = net.settle().remove(0).1;
    assert!(matches!(r.agreed(), Some(Verdict::Placed(_))));
    assert!(r.max_message_bytes < 600, "largest message {} B", r.max_message_bytes);
    assert!(r.messages > 0 && r.bytes / r.messages < 600);
}

/// Gang semantics: a job that needs more GPUs than the cluster has fails
/// everywhere and holds nothing.
#[test]
fn gang_all_or_nothing() {
    let n = 4;
    let (map, res) = cluster(n, &[]);
    let adj = overlay(n, 2, 1);
    let mut net =
        SimNet::new(agents(&map, &res, &adj, Config::new(BidPolicy::aware(Utility::Yarn))), NetConfig::reliable(2));
    net.submit(1, job(1, Arch::Ring, 5, 8.0, 1.0));
    let r = net.settle().remove(0).1;
    assert!(matches!(r.agreed(), Some(Verdict::Failed(_))), "{:?}", r.verdicts);
    for a in net.agents() {
        assert_eq!(a.free(), res[a.id() as usize]);
        assert!(a.placed().is_empty());
    }
    // Four 8-GPU workers fit exactly; then a finished job frees them again.
    net.submit(1, job(2, Arch::Ring, 4, 8.0, 1.0));
    let r = net.settle().remove(0).1;
    assert_eq!(r.agreed(), Some(&Verdict::Placed(vec![vec![(0, 1), (1, 1), (2, 1), (3, 1)]])));
    net.finish(2);
    for a in net.agents() {
        assert_eq!(a.committed_free(), res[a.id() as usize]);
        assert_eq!(a.usage(), &Usage::empty(&map));
    }
}

/// Fig. 7's study on small clusters: every agent agrees, the placement is
/// worth exactly the greedy's, rounds stay within Λ·N·D, messages stay small.
#[test]
fn scaling_rows_hold_the_guarantees() {
    let rows = orrery_plebiscito::scale::run(&[4, 16, 64], 16, 6, BidPolicy::aware(Utility::Lgf), 3);
    for r in &rows {
        assert!(r.agreed, "{r:?}");
        assert!((r.utility_vs_greedy - 1.0).abs() < 1e-9, "{r:?}");
        assert!(r.rounds as usize <= r.rounds_bound && r.rounds > 0, "{r:?}");
        assert!(r.bytes_per_message < 600.0, "{r:?}");
        assert_eq!(r.central_messages, 2 * r.agents as u64);
    }
    // More agents, more messages.
    assert!(rows.windows(2).all(|w| w[1].messages > w[0].messages));
}

/// A restarted agent learns what its peers decided, but never commits a
/// placement beyond what its node has left, and never overrides what it knows.
#[test]
fn learning_from_peers_never_commits_beyond_the_node() {
    let (map, res) = cluster(4, &[]);
    let config = Config::new(BidPolicy::aware(Utility::Lgf));
    let mut a = Agent::new(1, vec![0, 2, 3], res[1], map, config);
    let four = |id| job(id, Arch::Ring, 2, 4.0, 1.0);
    // Job 1: two 4-GPU workers on node 1 (8 GPUs, all of it). Job 2: two more on node 1.
    let p1 = vec![vec![(1u32, 2usize)]];
    let p2 = vec![vec![(1u32, 2usize)]];
    let learnt = a.learn(
        vec![(1, Verdict::Placed(p1.clone())), (2, Verdict::Placed(p2.clone()))],
        vec![(four(1), p1), (four(2), p2)],
    );
    assert_eq!(learnt, 2);
    assert_eq!(a.committed_free().free.gpus, 0.0, "job 1 committed, job 2 (8 more GPUs) refused");
    assert_eq!(a.placed().len(), 1);
    // What it already knows is not overridden.
    assert_eq!(a.learn(vec![(1, Verdict::Aborted)], Vec::new()), 0);
    assert_eq!(a.verdicts().get(&1).map(|v| matches!(v, Verdict::Placed(_))), Some(true));
}

/// Issue 41: a key holder's SyncReply naming a node outside the cluster
/// panicked the agent, and a count of 2^63 spun it at 100% CPU; a state file
/// from another topology or over-committed left negative free GPUs. Each is
/// refused before anything is applied.
#[test]
fn what_peers_and_state_files_say_is_checked_against_the_cluster() {
    let (map, res) = cluster(4, &[]);
    let config = Config::new(BidPolicy::aware(Utility::Lgf));
    let mut a = Agent::new(1, vec![0, 2, 3], res[1], map.clone(), config);
    let two = |id| job(id, Arch::Ring, 2, 1.0, 1.0);
    let outside = vec![vec![(1u32, 1usize), (99u32, 1usize)]];
    let huge = vec![vec![(1u32, 1usize << 63), (2u32, 1usize << 63)]];
    let short = vec![vec![(1u32, 1usize)]];
    let learnt = a.learn(
        vec![
            (1, Verdict::Placed(outside.clone())),
            (2, Verdict::Placed(huge.clone())),
            (3, Verdict::Placed(short.clone())),
        ],
        vec![(two(1), outside.clone()), (two(2), huge.clone()), (two(3), short.clone())],
    );
    // Verdicts 2 and 3 are learnt (their nodes exist), none is committed:
    // 2^63 + 2^63 overflows and a single component is not the job's two.
    assert_eq!(learnt, 2);
    assert!(a.placed().is_empty());
    assert_eq!(a.committed_free().free.gpus, 8.0);
    // State files: another topology's node, an over-commitment, a bad job.
    let mut b = Agent::new(1, vec![0, 2, 3], res[1], map, config);
    let e = b.restore(vec![], vec![(two(4), outside)]).expect_err("node 99");
    assert_eq!(e.to_string(), "job 4: its placement names a node outside the cluster or not exactly its components");
    let greedy = |id| job(id, Arch::Ring, 2, 8.0, 1.0);
    let e = b
        .restore(vec![], vec![(greedy(5), vec![vec![(1, 1), (2, 1)]]), (greedy(6), vec![vec![(1, 1), (3, 1)]])])
        .expect_err("16 GPUs on an 8-GPU node");
    assert_eq!(e.to_string(), "job 0: the placements take more GPUs, CPUs or memory than this node has");
    let mut bad = two(7);
    bad.gbps = f64::NAN;
    assert!(b.restore(vec![], vec![(bad, vec![vec![(1, 1), (2, 1)]])]).is_err());
    // Nothing of a refused state was applied; a fitting one is.
    assert_eq!(b.committed_free().free.gpus, 8.0);
    b.restore(vec![(8, Verdict::Placed(vec![vec![(1, 1), (2, 1)]]))], vec![(greedy(8), vec![vec![(1, 1), (2, 1)]])])
        .expect("fits");
    assert_eq!(b.committed_free().free.gpus, 0.0);
}

/// Issue 41: a job of about 3,900 components made a bundle larger than a
/// UDP datagram; the send failed unseen and two agents placed it twice. A
/// job is refused past `MAX_COMPONENTS`, and the largest bundle a job within
/// it can make, every bid at its widest encoding, fits one datagram.
#[test]
fn the_largest_bundle_fits_one_datagram() {
    use orrery_plebiscito::agent::Msg;
    use orrery_plebiscito::bundle::Bid;
    use orrery_plebiscito::utility::MAX_COMPONENTS;
    use orrery_plebiscito::wire::{Body, Envelope, Key, seal};
    let max = MAX_COMPONENTS as u16;
    let mut too_many = job(1, Arch::Ring, max + 1, 0.0001, 1.0);
    let e = too_many.check().expect_err("over the limit");
    assert!(e.to_string().starts_with("job 1: workers: expected at most 2048, so that a bundle"), "{e}");
    too_many.workers = max;
    too_many.check().expect("at the limit");
    let widest = Bid { value: f64::MAX, node: u32::MAX - 1, stamp: u64::MAX, slot: u16::MAX };
    let job = JobRequest { id: u64::MAX, ..too_many };
    let body = Body::Protocol(Msg::Bundle { job, bids: vec![vec![widest; MAX_COMPONENTS]], depth: u32::MAX });
    let key = Key::new(vec![7; 32]).expect("key");
    let bytes = seal(&key, &Envelope { sender: u32::MAX - 1, sent_us: u64::MAX, nonce: u64::MAX, body });
    assert!(bytes.len() <= 65_507, "{} bytes", bytes.len());
}

/// Concurrent auctions do not starve each other. Two nodes with 4 GPUs
/// each; two 4-worker jobs submitted at once to node 0 (FIFO links). Both
/// nodes offer all their GPUs to job 1, the first they hear of, and have
/// none left to offer job 2. Job 1 is won 1 + 3 (or 3 + 1), so each node
/// loses offers it held; offered again to job 2, they place it too. An
/// agent that bid only on first hearing failed job 2 ("1 of 4 components
/// had a bidder"). Every node agrees and nothing is committed twice.
#[test]
fn concurrent_auctions_fill_what_is_free() {
    let map = Arc::new(ClusterMap { leaf_of: vec![0, 0], nic_gbps: vec![25.0, 10.0], uplink_gbps: vec![50.0] });
    let total = Demand { gpus: 4.0, cpus: 96.0, mem_gib: 512.0 };
    let res = vec![Resources::new(total); 2];
    let adj = overlay(2, 1, 1);
    let mut config = Config::new(BidPolicy::aware(Utility::Lgf));
    config.resend_us = Some(50_000);
    config.quiescence_us = 200_000;
    config.hard_timeout_us = 5_000_000;
    let fifo = NetConfig { latency_us: (100, 100), ..NetConfig::reliable(4) };
    let mut net = SimNet::new(agents(&map, &res, &adj, config), fifo);
    for id in 1..=2u64 {
        net.submit(0, job(id, Arch::Ring, 4, 1.0, 2.0));
    }
    let reports = net.settle();
    assert_eq!(reports.len(), 2);
    assert!(reports.iter().all(|(_, r)| r.agreed().is_some()), "nodes disagree: {reports:?}");
    let placed = reports.iter().filter(|(_, r)| matches!(r.agreed(), Some(Verdict::Placed(_)))).count();
    assert_eq!(placed, 2, "{reports:?}");
    assert_nothing_assigned_twice(&net, &map, &res);
    assert!(net.agents().iter().all(|a| a.committed_free().free.gpus.abs() < 1e-9));
}
