//! Reader and shape throughput: `cargo bench -p orrery-trace`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use orrery_model::zoo::{Placement, ZOO};
use orrery_trace::{Format, parse};
use std::hint::black_box;

const PHILLY: &str = include_str!("../../../data/philly/philly_jobs_pollux.csv");
const MURI: &str = include_str!("../../../data/philly/muri_trace1.csv");

fn readers(c: &mut Criterion) {
    let mut g = c.benchmark_group("read");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(PHILLY.len() as u64));
    g.bench_function("philly_82247_jobs", |b| {
        b.iter(|| parse("philly.csv", black_box(PHILLY), Some(Format::Philly), 0))
    });
    g.throughput(Throughput::Bytes(MURI.len() as u64));
    g.bench_function("muri_1494_jobs", |b| b.iter(|| parse("muri.csv", black_box(MURI), Some(Format::Muri), 0)));
    g.finish();
}

fn shapes(c: &mut Criterion) {
    let gpu = orrery_model::gpu::gpu_type("v100").expect("v100");
    let placement = Placement::spread(8);
    c.bench_function("shape_and_circle_whole_zoo", |b| {
        b.iter(|| {
            for m in ZOO {
                black_box(m.shape(gpu, m.default_batch, &placement, 100.0).circle());
            }
        })
    });
}

criterion_group!(benches, readers, shapes);
criterion_main!(benches);
