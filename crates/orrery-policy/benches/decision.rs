//! One scheduling decision against cluster size (issue: decisions at
//! cluster scale): a leaf-spine of 2-GPU hosts in racks of 32 under 4 spines,
//! half its GPUs held by 2-worker jobs spread over two hosts each, and one
//! 2-worker VGG16 waiting. A live scheduler pays this on every arrival.
//! Every paper's policy: Metronome, CASSINI (on Themis), Castor, Plebiscito
//! (its auction, run to agreement in-process) and FORESIGHT (on FIFO).
//!
//! `cargo bench -p orrery-policy --bench decision` (one size:
//! `-- 'decision/.*/4096x8'`, both layouts)

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use orrery_model::setups::LeafSpine;
use orrery_model::{HostId, JobSpec, Work};
use orrery_policy::{ClusterView, QueuedJob, RunningJob};
use std::hint::black_box;

const MODELS: [&str; 5] = ["vgg16", "resnet50", "bert", "vgg19", "resnet18"];

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("decision");
    g.sample_size(10);
    // (hosts, GPUs per host): 2-GPU hosts up to 4,096, and the 4,096 hosts
    // of 8 GPUs of experiments/decision-scale-4096.toml (issue 43).
    // `x8-across`: the same 4,096 hosts with every running job's two hosts
    // in different racks (hosts i and i + 2,048), so each ring crosses the
    // spines and FORESIGHT plans all 2,048 of them.
    for &(hosts, per_host, across) in
        &[(64u32, 2u32, false), (256, 2, false), (1024, 2, false), (4096, 2, false), (4096, 8, false), (4096, 8, true)]
    {
        let topo = LeafSpine::with_oversubscription(hosts / 32, 32, 4, per_host, "v100", 100.0, 2.0)
            .build("decision-bench")
            .expect("valid");
        let jobs = (hosts / 2) as usize;
        let half = per_host / 2;
        let running: Vec<JobSpec> = (0..jobs)
            .map(|i| JobSpec::new(format!("r{i}"), MODELS[i % MODELS.len()], 32, 2 * half, Work::Iterations(1000), 0.0))
            .collect();
        // Job i on hosts 2i and 2i+1 (one rack), or i and i + hosts/2 (two
        // racks), half their GPUs each: half the GPUs busy.
        let placed: Vec<[(HostId, u32); 2]> = (0..jobs)
            .map(|i| if across { [(i, half), (i + jobs, half)] } else { [(2 * i, half), (2 * i + 1, half)] })
            .collect();
        let free = vec![per_host - half; hosts as usize];
        let waiting = JobSpec::new("new", "vgg16", 32, 2, Work::Iterations(1000), 0.0);
        let size = format!("{hosts}x{per_host}{}", if across { "-across" } else { "" });
        for policy in ["metronome", "themis+cassini", "orrery", "castor", "plebiscito:tetris", "fifo+foresight"] {
            let mut p = orrery_policy::by_name(policy, 1).expect("catalogued");
            let view = || ClusterView {
                now_s: 10.0,
                topology: &topo,
                free_gpus: &free,
                queue: vec![QueuedJob::new(jobs, &waiting, 1.0)],
                running: running.iter().zip(&placed).enumerate().map(|(i, (s, h))| RunningJob::new(i, s, h)).collect(),
            };
            // The first call builds what a policy keeps between calls (latencies).
            black_box(p.schedule(&view()));
            g.bench_with_input(BenchmarkId::new(policy, &size), &hosts, |b, _| {
                b.iter(|| black_box(p.schedule(&view())));
            });
        }
    }
    g.finish();
}

/// One decision in a 4,096-host H100 cluster (8 GPUs and 3.2 Tbit/s a
/// host, 128 racks of 32 under 8 spines at 2:1) whose first half runs LLM
/// meshes: Llama 3 70B at TP 8 × PP 4 × DP 8 (32 hosts) and Llama 3 8B at
/// TP 8 × DP 4 (4 hosts) in turn, each on consecutive hosts; a Llama 3 8B
/// at TP 8 × DP 8 waits (issue 66's goal: under 10 ms median).
///
/// `cargo bench -p orrery-policy --bench decision -- decision-llm`
fn bench_llm(c: &mut Criterion) {
    use orrery_model::mesh::Mesh;
    let mut g = c.benchmark_group("decision-llm");
    g.sample_size(10);
    let topo =
        LeafSpine::with_oversubscription(128, 32, 8, 8, "h100", 3200.0, 2.0).build("decision-llm").expect("valid");
    let mesh_job = |id: String, model: &str, mesh: Mesh| {
        let mut j = JobSpec::new(id, model, 1, mesh.gpus(), Work::Iterations(1000), 0.0);
        j.parallelism = Some(mesh);
        j
    };
    let (mut running, mut placed, mut next) = (Vec::new(), Vec::new(), 0usize);
    while next < 2048 {
        let (model, mesh) = if running.len() % 2 == 0 {
            ("llama3-70b", Mesh { tp: 8, pp: 4, dp: 8, microbatches: 16, ..Mesh::default() })
        } else {
            ("llama3-8b", Mesh { tp: 8, dp: 4, microbatches: 4, ..Mesh::default() })
        };
        let hosts = (mesh.gpus() / 8) as usize;
        if next + hosts > 2048 {
            break;
        }
        placed.push((next..next + hosts).map(|h| (h, 8)).collect::<Vec<(HostId, u32)>>());
        running.push(mesh_job(format!("r{}", running.len()), model, mesh));
        next += hosts;
    }
    let mut free = vec![0u32; 4096];
    free[next..].iter_mut().for_each(|f| *f = 8);
    // The small mesh, and the generator's largest pre-training meshes
    // (`llm-cluster`: Llama 3 70B at TP 8 × PP 4 × DP 32, Mixtral 8x7B at
    // TP 1 × DP 1,024 with EP 8; 1,024 GPUs each).
    let small = mesh_job("new".into(), "llama3-8b", Mesh { tp: 8, dp: 8, microbatches: 4, ..Mesh::default() });
    let llama =
        mesh_job("new".into(), "llama3-70b", Mesh { tp: 8, pp: 4, dp: 32, microbatches: 16, ..Mesh::default() });
    let mixtral =
        mesh_job("new".into(), "mixtral-8x7b", Mesh { tp: 1, dp: 1024, ep: 8, microbatches: 1, ..Mesh::default() });
    for (label, waiting) in
        [("4096x8-h100", &small), ("4096x8-h100-llama70b-1024", &llama), ("4096x8-h100-mixtral-1024", &mixtral)]
    {
        for policy in ["metronome", "themis+cassini", "orrery", "fifo+foresight"] {
            let mut p = orrery_policy::by_name(policy, 1).expect("catalogued");
            let view = || ClusterView {
                now_s: 10.0,
                topology: &topo,
                free_gpus: &free,
                queue: vec![QueuedJob::new(running.len(), waiting, 1.0)],
                running: running
                    .iter()
                    .zip(&placed)
                    .enumerate()
                    .map(|(i, (s, h))| RunningJob::new(i, s, h.as_slice()))
                    .collect(),
            };
            black_box(p.schedule(&view()));
            g.bench_function(BenchmarkId::new(policy, label), |b| b.iter(|| black_box(p.schedule(&view()))));
        }
    }
    g.finish();
}

/// FORESIGHT's re-plan when an arrival joins parts of the plan: the
/// 4,096 × 8 layout with every running ring across two racks (racks r and
/// r + 64, so the plan is 64 parts of 32 rings), and a 160-GPU VGG16
/// waiting, more than a rack has free, so FIFO's consolidated placement
/// spans racks 0 and 1 and its ring joins two parts: 64 rings and the
/// newcomer are planned again, the other 1,984 keep their plans (issue 69;
/// before, every arrival planned all 2,048).
///
/// `cargo bench -p orrery-policy --bench decision -- decision-foresight`
fn bench_foresight_parts(c: &mut Criterion) {
    let mut g = c.benchmark_group("decision-foresight");
    g.sample_size(10);
    let topo =
        LeafSpine::with_oversubscription(128, 32, 4, 8, "v100", 100.0, 2.0).build("decision-bench").expect("valid");
    let running: Vec<JobSpec> = (0..2048)
        .map(|i| JobSpec::new(format!("r{i}"), MODELS[i % MODELS.len()], 32, 8, Work::Iterations(1000), 0.0))
        .collect();
    let placed: Vec<[(HostId, u32); 2]> = (0..2048).map(|i| [(i, 4), (i + 2048, 4)]).collect();
    let free = vec![4u32; 4096];
    let waiting = JobSpec::new("new", "vgg16", 32, 160, Work::Iterations(1000), 0.0);
    let mut p = orrery_policy::by_name("fifo+foresight", 1).expect("catalogued");
    let view = || ClusterView {
        now_s: 10.0,
        topology: &topo,
        free_gpus: &free,
        queue: vec![QueuedJob::new(2048, &waiting, 1.0)],
        running: running.iter().zip(&placed).enumerate().map(|(i, (s, h))| RunningJob::new(i, s, h)).collect(),
    };
    // The first call plans all 64 parts (the running rings' own arrivals).
    black_box(p.schedule(&view()));
    g.bench_function(BenchmarkId::new("fifo+foresight", "4096x8-across-joins-two-parts"), |b| {
        b.iter(|| black_box(p.schedule(&view())))
    });
    g.finish();
}

criterion_group!(benches, bench, bench_llm, bench_foresight_parts);
criterion_main!(benches);
