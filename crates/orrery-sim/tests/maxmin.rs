//! Property tests of the max-min network: after any sequence of flow starts,
//! ends and cap changes, rates are feasible and max-min fair.

use orrery_sim::network::Network;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

fn fixed(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        rng_seed: RngSeed::Fixed(0x00bb_ee55),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add { path: Vec<usize>, cap: f64 },
    Remove(usize),
    Cap(usize, f64),
}

fn op(links: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop::collection::btree_set(0..links, 1..=3), 1.0f64..100.0)
            .prop_map(|(p, cap)| Op::Add { path: p.into_iter().collect(), cap: cap.round() }),
        1 => any::<usize>().prop_map(Op::Remove),
        1 => (any::<usize>(), 1.0f64..100.0).prop_map(|(i, c)| Op::Cap(i, c.round())),
    ]
}

proptest! {
    #![proptest_config(fixed(256))]

    #[test]
    fn rates_are_feasible_and_max_min_fair(
        caps in prop::collection::vec(10.0f64..100.0, 2..8),
        ops in prop::collection::vec(op(8), 1..40),
    ) {
        let caps: Vec<f64> = caps.iter().map(|c| c.round()).collect();
        let n = caps.len();
        let mut net = Network::new(caps.clone(), false);
        let mut live: Vec<(usize, Vec<usize>)> = Vec::new();
        for (t, o) in ops.into_iter().enumerate() {
            match o {
                Op::Add { path, cap } => {
                    let path: Vec<usize> = path.into_iter().filter(|&l| l < n).collect();
                    if path.is_empty() { continue; }
                    let (f, _) = net.add(t as u64, path.clone(), 1e15, cap, 0);
                    live.push((f, path));
                }
                Op::Remove(i) if !live.is_empty() => {
                    let (f, _) = live.remove(i % live.len());
                    net.remove(t as u64, f);
                }
                Op::Cap(i, c) if !live.is_empty() => {
                    net.set_cap(t as u64, live[i % live.len()].0, c);
                }
                _ => {}
            }
            // Feasible: no link over capacity, no flow over its cap.
            let mut load = vec![0.0; n];
            for (f, path) in &live {
                let fl = net.flow(*f).expect("live flow");
                prop_assert!(fl.rate_gbps <= fl.cap_gbps + 1e-9);
                for &l in path { load[l] += fl.rate_gbps; }
            }
            for l in 0..n {
                prop_assert!(load[l] <= caps[l] + 1e-6, "link {} carries {} > {}", l, load[l], caps[l]);
            }
            // Max-min: every flow is at its cap, or crosses a saturated link on
            // which no other flow gets more than it does.
            for (f, path) in &live {
                let fl = net.flow(*f).expect("live flow");
                if fl.rate_gbps >= fl.cap_gbps - 1e-6 { continue; }
                let bottleneck = path.iter().any(|&l| {
                    load[l] >= caps[l] - 1e-6
                        && live.iter().filter(|(_, p)| p.contains(&l)).all(|(g, _)| net.flow(*g).map_or(0.0, |x| x.rate_gbps) <= fl.rate_gbps + 1e-6)
                });
                prop_assert!(bottleneck, "flow {} at {} has no bottleneck", f, fl.rate_gbps);
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Change {
    Add { path: Vec<usize>, cap: f64, owner: usize },
    Remove(Vec<usize>),
    Cap(usize, f64),
    Queue { owner: usize, priority: u8 },
}

fn change(links: usize) -> impl Strategy<Value = Change> {
    // Caps in eighths of a Gbit/s add up exactly in any order, so whether
    // a link binds does not hang on the order of its flows.
    let cap = (1.0f64..120.0).prop_map(|c| (c * 8.0).round() / 8.0);
    prop_oneof![
        4 => (prop::collection::btree_set(0..links, 1..=3), cap.clone(), 0..4usize)
            .prop_map(|(p, cap, owner)| Change::Add { path: p.into_iter().collect(), cap, owner }),
        2 => prop::collection::vec(any::<usize>(), 1..4).prop_map(Change::Remove),
        1 => (any::<usize>(), cap).prop_map(|(i, c)| Change::Cap(i, c)),
        1 => (0..4usize, 0..3u8).prop_map(|(owner, priority)| Change::Queue { owner, priority }),
    ]
}

proptest! {
    #![proptest_config(fixed(256))]

    /// Issue 69's incremental max-min: after any changes, each flow's rate
    /// is, bit for bit, the one a network built from scratch with the same
    /// flows gives it (added in one batch, in either order): re-rating only
    /// the binding components a change touches loses nothing.
    #[test]
    fn re_rating_what_a_change_touches_equals_rating_everything_from_scratch(
        caps in prop::collection::vec(20.0f64..200.0, 2..12),
        changes in prop::collection::vec(change(12), 1..60),
    ) {
        let caps: Vec<f64> = caps.iter().map(|c| c.round()).collect();
        let n = caps.len();
        let mut net = Network::new(caps.clone(), false);
        let mut live: Vec<usize> = Vec::new();
        let mut queue = [0u8; 4];
        for (t, c) in changes.into_iter().enumerate() {
            let t = t as u64;
            match c {
                Change::Add { path, cap, owner } => {
                    let path: Vec<usize> = path.into_iter().filter(|&l| l < n).collect();
                    if path.is_empty() { continue; }
                    live.push(net.add(t, path, 1e15, cap, owner).0);
                }
                Change::Remove(picks) if !live.is_empty() => {
                    let mut gone: Vec<usize> = picks.iter().map(|i| live[i % live.len()]).collect();
                    gone.sort_unstable();
                    gone.dedup();
                    live.retain(|f| !gone.contains(f));
                    net.remove_all(t, &gone);
                }
                Change::Cap(i, c) if !live.is_empty() => {
                    net.set_cap(t, live[i % live.len()], c);
                }
                Change::Queue { owner, priority } => {
                    queue[owner] = priority;
                    net.set_priority(t, owner, priority);
                }
                _ => {}
            }
            for reversed in [false, true] {
                let mut order = live.clone();
                if reversed { order.reverse(); }
                let mut fresh = Network::new(caps.clone(), false);
                for (owner, &q) in queue.iter().enumerate() {
                    fresh.set_priority(t, owner, q);
                }
                let batch = order.iter().map(|&f| {
                    let fl = net.flow(f).expect("live flow");
                    (fl.path.clone(), 1e15, fl.cap_gbps, fl.owner)
                }).collect();
                let (ids, _) = fresh.add_all(t, batch);
                for (&f, &g) in order.iter().zip(&ids) {
                    let (a, b) = (net.flow(f).expect("live").rate_gbps, fresh.flow(g).expect("fresh").rate_gbps);
                    prop_assert!(a.to_bits() == b.to_bits(), "flow {}: {} incrementally, {} from scratch", f, a, b);
                }
            }
        }
    }
}
