//! Rotation search cost for 2, 3, 4 and 8 jobs at 72 steps:
//! `cargo bench -p orrery-interleave`.

use criterion::{Criterion, criterion_group, criterion_main};
use orrery_interleave::search::optimal_cushion;
use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_interleave::{Search, solve};
use orrery_model::zoo::{Placement, model};
use orrery_model::{Circle, Priority};
use std::hint::black_box;

/// Data-parallel zoo models on 50 Gbit/s links (CASSINI's testbed), batch
/// sizes picked so that iteration times are close to multiples of each other.
fn jobs(n: usize) -> Vec<CircleJob> {
    let gpu = orrery_model::gpu::gpu_type("a100").expect("a100");
    let names = ["vgg16", "vgg19", "resnet50", "wideresnet101", "bert", "roberta", "camembert", "xlm"];
    names
        .iter()
        .cycle()
        .take(n)
        .enumerate()
        .map(|(i, name)| {
            let m = model(name).expect("zoo model");
            let c: Circle = m.shape(gpu, m.default_batch, &Placement::spread(4), 50.0).circle();
            CircleJob {
                name: format!("{name}-{i}"),
                priority: if i == 0 { Priority::High } else { Priority::Low },
                circle: c,
            }
        })
        .collect()
}

fn searches(c: &mut Criterion) {
    let params = Params::default();
    for n in [2, 3, 4, 8] {
        let u = unify(&jobs(n), &params).expect("unify");
        let mut g = c.benchmark_group(format!("{n}_jobs"));
        g.sample_size(10);
        if n <= 4 {
            g.bench_function("exhaustive", |b| b.iter(|| solve(black_box(&u), 50.0, Search::Exhaustive)));
            g.bench_function("optimal_cushion_middles", |b| {
                b.iter(|| solve(black_box(&u), 50.0, Search::OptimalCushion))
            });
            g.bench_function("optimal_cushion_all", |b| b.iter(|| optimal_cushion(black_box(&u), 50.0, false)));
            g.bench_function("fast_feasible", |b| b.iter(|| solve(black_box(&u), 50.0, Search::FastFeasible)));
        }
        g.bench_function("heuristic_16_restarts", |b| {
            b.iter(|| solve(black_box(&u), 50.0, Search::Heuristic { restarts: 16, seed: 1 }))
        });
        g.finish();
    }
}

/// The hard case for branch and bound: four identical jobs at the full link
/// rate for 60% of their iteration. No rotation is perfect, so the excess
/// bound prunes little.
fn contended(c: &mut Criterion) {
    let job = |i: usize| CircleJob {
        name: format!("j{i}"),
        priority: if i == 0 { Priority::High } else { Priority::Low },
        circle: Circle {
            period_ms: 100.0,
            arcs: vec![orrery_model::Arc { start_ms: 0.0, duration_ms: 60.0, gbps: 50.0 }],
        },
    };
    let u = unify(&(0..4).map(job).collect::<Vec<_>>(), &Params::default()).expect("unify");
    let mut g = c.benchmark_group("4_jobs_contended");
    g.sample_size(10);
    g.bench_function("optimal_cushion", |b| b.iter(|| solve(black_box(&u), 50.0, Search::OptimalCushion)));
    g.bench_function("heuristic_16_restarts", |b| {
        b.iter(|| solve(black_box(&u), 50.0, Search::Heuristic { restarts: 16, seed: 1 }))
    });
    g.finish();
}

criterion_group!(benches, searches, contended);
criterion_main!(benches);
