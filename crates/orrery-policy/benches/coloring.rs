//! FORESIGHT's routing step: edge colouring of leaf-to-leaf flows
//! (issue target: 100,000 flows over 64 leaves under 100 ms).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use orrery_policy::foresight::coloring::color_bipartite;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;

fn flows(n: usize, leaves: usize, seed: u64) -> Vec<(usize, usize)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let l = rng.random_range(0..leaves);
            // Cross-rack only: a different destination leaf.
            let r = (l + rng.random_range(1..leaves)) % leaves;
            (l, r)
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("edge_coloring");
    g.sample_size(10);
    for &(n, leaves) in &[(1_000, 8), (10_000, 64), (100_000, 64)] {
        let edges = flows(n, leaves, 7);
        g.bench_with_input(BenchmarkId::from_parameter(format!("{n}_flows_{leaves}_leaves")), &edges, |b, e| {
            b.iter(|| color_bipartite(leaves, leaves, black_box(e)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
