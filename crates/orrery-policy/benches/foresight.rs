//! FORESIGHT's whole plan for the 48-machine set-up (issue target: under
//! 1 s): profiles at four rates, SolveTiming, SolveRouting and up to 8
//! repair rounds, then the fallback plans, for every job of a fragmented
//! placement (`experiments/foresight-spines.toml`: racks of 8, jobs of 4-16
//! machines, fragmentation 0.5, per-worker batch 8).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use orrery_model::setups::foresight;
use orrery_policy::baseline::Pinned;
use orrery_policy::foresight::policy::{Foresight, Mode};
use orrery_policy::{ClusterView, Policy, QueuedJob};
use orrery_trace::generate::{Mix, fragmented};
use std::hint::black_box;

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("foresight_plan");
    g.sample_size(10);
    let models = ["vgg16", "vgg19", "resnet50", "bert", "gpt2", "wideresnet101"];
    let mix = Mix {
        models: models.iter().map(|m| m.to_string()).collect(),
        workers: (4..=16).map(|n| (n, 1.0)).collect(),
        iterations: (300, 300),
        batch: Some(8),
        ..Mix::default()
    };
    let rack_of: Vec<usize> = (0..48).map(|h| h / 8).collect();
    for spines in [2, 4] {
        let topology = foresight(spines);
        for seed in [2, 3] {
            let (jobs, pins) = fragmented(&rack_of, 100, 0.5, &mix, seed).expect("a placement");
            let free = vec![1u32; 48];
            let name = format!("{spines}_spines_placement_{seed}");
            g.bench_function(BenchmarkId::from_parameter(name), |b| {
                b.iter(|| {
                    let pinned = Pinned { pins: pins.clone(), label: None };
                    let mut policy = Foresight::new(Box::new(pinned), Mode::Foresight);
                    let queue = jobs.iter().enumerate().map(|(i, j)| QueuedJob::new(i, j, 0.0)).collect();
                    let view =
                        ClusterView { now_s: 0.0, topology: &topology, free_gpus: &free, queue, running: Vec::new() };
                    black_box(policy.schedule(&view))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
