//! The seeded mapping that gives a model to jobs whose trace does not name one.
//!
//! We follow Pollux (OSDI'21 §5.1): jobs are bucketed by GPU-time and each
//! bucket has a set of applications. Within a bucket the model is drawn
//! uniformly with a ChaCha8 generator seeded by `(seed, job index)`, so a job's
//! model does not depend on which other rows were accepted.
//!
//! | GPU-hours | models | share in Pollux's 8 workloads (counted from `data/profiles/pollux/workloads`) |
//! |---|---|---|
//! | < 1 | resnet18-cifar, ncf | 78% (998 of 1,280 jobs) |
//! | 1–10 | deepspeech2, yolov3 | 13% |
//! | 10–100 | bert | 7% |
//! | ≥ 100 | resnet50 (ImageNet) | 2% |

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The buckets: (upper bound in GPU-hours, candidate models).
pub const BUCKETS: &[(f64, &[&str])] = &[
    (1.0, &["resnet18-cifar", "ncf"]),
    (10.0, &["deepspeech2", "yolov3"]),
    (100.0, &["bert"]),
    (f64::INFINITY, &["resnet50"]),
];

/// The model for job number `index` that used `gpu_seconds` of GPU time.
pub fn model_for(gpu_seconds: f64, index: u64, seed: u64) -> &'static str {
    let hours = gpu_seconds / 3600.0;
    let models = BUCKETS.iter().find(|(bound, _)| hours < *bound).map_or(BUCKETS[BUCKETS.len() - 1].1, |b| b.1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    models[rng.random_range(0..models.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_follow_gpu_hours() {
        assert!(["resnet18-cifar", "ncf"].contains(&model_for(1800.0, 0, 1)));
        assert!(["deepspeech2", "yolov3"].contains(&model_for(5.0 * 3600.0, 0, 1)));
        assert_eq!(model_for(50.0 * 3600.0, 0, 1), "bert");
        assert_eq!(model_for(500.0 * 3600.0, 0, 1), "resnet50");
    }

    #[test]
    fn deterministic_per_seed_and_both_models_appear() {
        let a: Vec<_> = (0..100).map(|i| model_for(60.0, i, 7)).collect();
        let b: Vec<_> = (0..100).map(|i| model_for(60.0, i, 7)).collect();
        assert_eq!(a, b);
        let cifar = a.iter().filter(|m| **m == "resnet18-cifar").count();
        assert!((30..=70).contains(&cifar), "{cifar} of 100");
        let c: Vec<_> = (0..100).map(|i| model_for(60.0, i, 8)).collect();
        assert_ne!(a, c);
    }

    #[test]
    fn every_mapped_model_is_in_the_zoo() {
        for (_, models) in BUCKETS {
            for m in *models {
                assert!(orrery_model::zoo::model(m).is_some(), "{m}");
            }
        }
    }
}
