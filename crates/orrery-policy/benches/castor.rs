//! One scheduling round of Castor's SJF-BSBF on a full cluster: every GPU
//! busy, so each queued job runs Algorithm 2 against every running job
//! (O(Q · R log B) per round, the hot path when the queue is long).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use orrery_model::colocation::Colocation;
use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Work};
use orrery_policy::castor::colocate::{Colocator, Rule};
use orrery_policy::{ClusterView, Policy, QueuedJob, RunningJob};
use std::hint::black_box;

const MODELS: [&str; 4] = ["resnet50", "bert", "resnet18-cifar", "deepspeech2"];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("castor_round");
    g.sample_size(10);
    // 16 hosts × 8 GPUs, one 1-GPU job per GPU.
    let topo = LeafSpine {
        racks: 2,
        hosts_per_rack: 8,
        spines: 1,
        gpus_per_host: 8,
        gpu_type: "a6000".into(),
        host_gbps: 200.0,
        uplink_gbps: 800.0,
    }
    .build("castor-bench")
    .expect("valid");
    let running: Vec<JobSpec> = (0..128)
        .map(|i| JobSpec::new(format!("r{i}"), MODELS[i % 4], 32, 1, Work::Seconds(3600.0 + i as f64), 0.0))
        .collect();
    let hosts: Vec<[(usize, u32); 1]> = (0..128).map(|i| [(i / 8, 1u32)]).collect();
    let mut estimate = Colocation::default();
    for a in ["ResNet-18", "ResNet-50", "Transformer", "LM"] {
        for b in ["ResNet-18", "ResNet-50", "Transformer", "LM"] {
            estimate.table.insert(a, b, 1.2);
        }
    }
    for &queued in &[10usize, 100, 500] {
        let waiting: Vec<JobSpec> = (0..queued)
            .map(|i| JobSpec::new(format!("q{i}"), MODELS[i % 4], 64, 1 + (i % 4) as u32, Work::Seconds(600.0), 0.0))
            .collect();
        let free = vec![0u32; 16];
        g.bench_with_input(BenchmarkId::from_parameter(format!("{queued}_queued_128_running")), &queued, |b, _| {
            b.iter(|| {
                let view = ClusterView {
                    now_s: 0.0,
                    topology: &topo,
                    free_gpus: &free,
                    queue: waiting.iter().enumerate().map(|(i, s)| QueuedJob::new(1000 + i, s, 0.0)).collect(),
                    running: running
                        .iter()
                        .zip(&hosts)
                        .enumerate()
                        .map(|(i, (s, h))| RunningJob::new(i, s, h))
                        .collect(),
                };
                let mut p = Colocator::new(Rule::Bsbf);
                p.set_colocation(&estimate);
                black_box(p.schedule(&view))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
