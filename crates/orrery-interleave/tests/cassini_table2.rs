//! CASSINI Table 2 recomputed from the model zoo. The numbers differ from the
//! paper's (see the reproduction notes in docs/guide/interleaving.md); these tests hold what can be
//! checked by hand.

use orrery_interleave::cassini::{TABLE2, snapshot};
use orrery_model::gpu::gpu_type;
use orrery_model::zoo::{Placement, model};

#[test]
fn rotation_never_lowers_the_score_and_the_reference_stays_put() {
    for s in TABLE2 {
        let r = snapshot(s);
        assert!(r.score >= r.score_unrotated - 1e-12, "snapshot {}", s.id);
        assert_eq!(r.jobs[0].shift_ms, 0.0, "snapshot {}", s.id);
        for j in &r.jobs {
            assert!((0.0..j.period_ms).contains(&j.shift_ms), "snapshot {}: {j:?}", s.id);
        }
    }
}

#[test]
fn two_identical_roberta_jobs_score_two_minus_twice_their_duty_cycle() {
    // Snapshot 4: two RoBERTa (batch 12) jobs. Each sends at the full 50 Gbit/s
    // for a fraction d of its iteration; with d > 1/2 the best rotation still
    // overlaps them for (2d − 1) of the circle, where demand is 2C, so the
    // excess is (2d − 1)·C per angle and the score 1 − (2d − 1) = 2 − 2d.
    let a100 = gpu_type("a100").expect("a100");
    let shape = model("roberta").expect("zoo").shape(a100, 12, &Placement::spread(8), 50.0);
    let d = shape.circle().duty_cycle();
    assert!(d > 0.5, "duty {d}");
    let r = snapshot(&TABLE2[3]);
    // One 5° bin of rounding on each side.
    assert!((r.score - (2.0 - 2.0 * d)).abs() <= 2.0 / 72.0, "score {} vs 2 − 2·{d}", r.score);
}
