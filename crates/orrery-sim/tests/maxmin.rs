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
