//! FORESIGHT in the simulator: on random fragmented placements it is never
//! worse than ECMP (§IV-2: "never cause negative impact"), placement by
//! placement, and with spines to choose from it gains on average.

use orrery_sim::experiment::parse;
use std::path::Path;

#[test]
fn foresight_is_never_worse_than_ecmp_on_random_placements() {
    for spines in [1, 2, 4] {
        // Per-worker batch 8: communication-heavy jobs, so ECMP's collisions
        // matter and a wrong plan would show.
        let toml = format!(
            r#"
name = "f"
seeds = [1, 2, 3, 4, 5]
policies = ["ecmp", "foresight"]
[topology]
builtin = "foresight-{spines}"
[workload]
generator = "fragmented"
fragmentation = 0.6
[workload.mix]
models = ["vgg16", "vgg19", "resnet50", "bert"]
workers = [[4, 1.0], [8, 1.0], [12, 1.0], [16, 1.0]]
iterations = [40, 40]
batch = 8
"#
        );
        let s = parse("f.toml", &toml).expect("valid").run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        let iter_s = |policy: &str, seed: u64| {
            s.runs.iter().find(|r| r.policy == policy && r.seed == seed).map(|r| r.metrics.avg_iter_s).expect("ran")
        };
        for seed in 1..=5 {
            let (ecmp, foresight) = (iter_s("ecmp", seed), iter_s("foresight", seed));
            // 0.5% for the simulator's jitter (1% of compute by default).
            assert!(
                foresight <= ecmp * 1.005,
                "{spines} spines, placement {seed}: foresight {foresight:.4} s vs ECMP {ecmp:.4} s"
            );
            if spines == 1 {
                // Nothing to route and no valid schedule: ECMP exactly.
                assert_eq!(foresight, ecmp, "placement {seed}");
            }
        }
        let mean = s.comparison.iter().find(|c| c.policy == "foresight").expect("compared").gain_avg_iter;
        if spines > 1 {
            assert!(mean > 1.02, "{spines} spines: foresight {mean:.3}x ECMP on average");
        }
    }
}
