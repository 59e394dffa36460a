//! FORESIGHT in the simulator: on random fragmented placements it is never
//! worse than ECMP (it falls back when no contention-free schedule exists).

use orrery_sim::experiment::parse;
use std::path::Path;

#[test]
fn foresight_is_never_worse_than_ecmp_on_random_placements() {
    for spines in [1, 2, 4] {
        let toml = format!(
            r#"
name = "f"
seeds = [1, 2, 3]
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
"#
        );
        let s = parse("f.toml", &toml).expect("valid").run(Path::new("."), |_, _, _, _, _| {}).expect("runs");
        for c in s.comparison.iter().filter(|c| c.policy == "foresight") {
            assert!(
                c.gain_avg_iter >= 0.98,
                "{spines} spines: foresight {:.3}x ECMP's mean iteration",
                c.gain_avg_iter
            );
        }
    }
}
