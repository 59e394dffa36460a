//! The fast-forward of undisturbed jobs changes no reported metric by more
//! than 2% (issue 3's tolerance): on contended workloads, on time-shifted
//! (interleaved) jobs, and with jitter.
//!
//! Contended runs are chaotic: whether two rings overlap can hinge on a few
//! nanoseconds of rounding, so a single contended trajectory may drift a few
//! percent either way with or without the skip. There the tolerance applies to
//! metrics summed over seeds (no bias), and per run to everything else.

use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Topology, Work};
use orrery_policy::{ClusterView, Decision, Policy};
use orrery_sim::experiment::{Run, parse};
use orrery_sim::metrics::{Metrics, metrics};
use orrery_sim::{SimConfig, Simulation};
use std::path::Path;

fn runs(toml: &str, skip: bool) -> Vec<Run> {
    let mut e = parse("test", toml).expect("valid experiment");
    e.sim.skip = skip;
    e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs").runs
}

fn values(m: &Metrics) -> Vec<(String, f64)> {
    let v = serde_json::to_value(m).expect("json");
    v.as_object()
        .expect("object")
        .iter()
        .filter(|(k, _)| !k.starts_with("decision_ms")) // wall-clock, not simulated
        .map(|(k, x)| (k.clone(), x.as_f64().unwrap_or(0.0)))
        .collect()
}

/// Every metric within 2% (relative), or within a small floor when both are tiny.
fn assert_close(a: &[(String, f64)], b: &[(String, f64)], what: &str) {
    for ((k, x), (_, y)) in a.iter().zip(b) {
        let floor = match k.as_str() {
            "excess_gbit" => 1.0,
            "congested_link_s" => 0.1,
            _ => 1e-9,
        };
        let ok = (x - y).abs() <= 0.02 * x.abs().max(y.abs()) || (x - y).abs() <= floor;
        assert!(ok, "{what}: {k} {x} (skip) vs {y} (no skip)");
    }
}

const TWO_RACKS: &str = r#"
[topology.leaf_spine]
racks = 2
hosts_per_rack = 4
spines = 1
gpus_per_host = 1
gpu_type = "a100"
host_gbps = 50.0
uplink_gbps = 50.0
"#;

const CONTENDED: &str = "[workload]\ngenerator = \"poisson\"\njobs = 24\nload = 0.9\n[workload.mix]\nmodels = [\"vgg19\", \"resnet50\", \"bert\"]\nworkers = [[2, 1.0], [3, 1.0]]\niterations = [200, 400]\n";

#[test]
fn contended_fifo_each_run() {
    // One GPU per host, so every job is a ring across hosts; FIFO's fewest-racks
    // placement still leaves some rings across the two racks' shared uplinks.
    let toml = format!("name = \"fifo\"\npolicies = [\"fifo\"]\nseeds = [1, 2, 3]\n{TWO_RACKS}\n{CONTENDED}");
    let (with, without) = (runs(&toml, true), runs(&toml, false));
    for (a, b) in with.iter().zip(&without) {
        assert_close(&values(&a.metrics), &values(&b.metrics), &format!("fifo seed {}", a.seed));
    }
    assert!(with.iter().any(|r| r.skipped_iterations > 0), "the fast-forward must have been used");
    assert!(without.iter().any(|r| r.metrics.excess_gbit > 0.0), "the scenario must be contended");
}

#[test]
fn contended_random_placement_summed_over_seeds() {
    let toml =
        format!("name = \"random\"\npolicies = [\"random\"]\nseeds = [1, 2, 3, 4, 5, 6]\n{TWO_RACKS}\n{CONTENDED}");
    let (with, without) = (runs(&toml, true), runs(&toml, false));
    let sum = |rs: &[Run]| {
        let mut total = values(&rs[0].metrics);
        for r in &rs[1..] {
            for ((_, t), (_, x)) in total.iter_mut().zip(values(&r.metrics)) {
                *t += x;
            }
        }
        total
    };
    assert_close(&sum(&with), &sum(&without), "random, summed over 6 seeds");
    assert!(with.iter().all(|r| r.skipped_iterations > 0));
    assert!(without.iter().all(|r| r.metrics.congested_link_s > 1.0), "the scenario must be contended");
}

#[test]
fn snapshot_with_jitter_each_run() {
    let toml = format!(
        "name = \"snapshot\"\npolicies = [\"fifo\", \"ideal\"]\n{TWO_RACKS}\n[workload]\ngenerator = \"snapshot\"\njobs = 6\n[workload.mix]\nmodels = [\"vgg16\", \"vgg19\"]\nworkers = [[2, 1.0]]\niterations = [300, 600]\n[sim]\njitter = 0.02\n"
    );
    let (with, without) = (runs(&toml, true), runs(&toml, false));
    for (a, b) in with.iter().zip(&without) {
        assert_close(&values(&a.metrics), &values(&b.metrics), &format!("snapshot {}", a.policy));
    }
    assert!(with.iter().any(|r| r.skipped_iterations > 0));
}

/// Places two VGG19 rings across the same uplink and shifts the second by
/// half an iteration, so their Up phases interleave (CASSINI §2.2).
struct Shifted;

impl Policy for Shifted {
    fn name(&self) -> String {
        "shifted".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = Vec::new();
        for q in &view.queue {
            let hosts = if q.id == 0 { vec![(0, 1), (4, 1)] } else { vec![(1, 1), (5, 1)] };
            out.push(Decision::Place { job: q.id, hosts });
            if q.id == 1 {
                out.push(Decision::Shift { job: 1, ms: 175.0 });
            }
        }
        out
    }
}

/// The cluster of `TWO_RACKS`: two racks of four single-A100 hosts, 50 Gbit/s everywhere.
fn two_racks() -> Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 4,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 50.0,
        uplink_gbps: 50.0,
    }
    .build("two-racks")
    .expect("valid")
}

#[test]
fn time_shifted_interleaved_pair_each_run() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "vgg19", 128, 2, Work::Iterations(400), 0.0),
        JobSpec::new("b", "vgg19", 128, 2, Work::Iterations(300), 0.0),
    ];
    let go = |skip| {
        let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, skip, ..Default::default() }, false);
        sim.run(&mut Shifted, |_, _| {});
        let skipped: u64 = sim.jobs.iter().map(|j| j.skipped_iterations).sum();
        (values(&metrics(&sim, |_| true)), skipped)
    };
    let ((with, skipped), (without, _)) = (go(true), go(false));
    assert_close(&with, &without, "time-shifted pair");
    // Interleaved, the rings never overlap, so each counts as undisturbed and
    // is fast-forwarded — until the other's next collective needs the shared
    // uplink and wakes it up. The fast-forward is exercised, but saves little
    // here: groups of interleaved jobs are not skipped as a whole.
    assert!(skipped > 0, "{skipped} iterations fast-forwarded");
}

/// Job 0 on h0 + h4; every later job colocated on job 0's GPUs when they are
/// free of a partner, else placed on h1 + h5.
struct Colocating;

impl Policy for Colocating {
    fn name(&self) -> String {
        "colocating".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = Vec::new();
        for q in &view.queue {
            if q.id == 0 {
                out.push(Decision::Place { job: 0, hosts: vec![(0, 1), (4, 1)] });
            } else if view.running.iter().any(|r| r.id == 0) && view.running.len() == 1 {
                out.push(Decision::Share { job: q.id, free: vec![], shared: vec![(0, 0, 1), (0, 4, 1)], sub_batch: 0 });
                break;
            } else if view.free_gpus[1] > 0 && view.free_gpus[5] > 0 {
                out.push(Decision::Place { job: q.id, hosts: vec![(1, 1), (5, 1)] });
                break;
            }
        }
        out
    }
}

#[test]
fn gpu_shared_jobs_each_run() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "vgg19", 64, 2, Work::Iterations(600), 0.0),
        JobSpec::new("b", "resnet50", 64, 2, Work::Iterations(200), 20.0),
        JobSpec::new("c", "vgg16", 64, 2, Work::Iterations(200), 40.0),
        JobSpec::new("d", "bert", 12, 2, Work::Iterations(100), 60.0),
    ];
    let go = |skip| {
        let mut sim =
            Simulation::new(&topo, &jobs, SimConfig { seed: 2, jitter: 0.01, skip, ..Default::default() }, false);
        sim.run(&mut Colocating, |_, _| {});
        let skipped: u64 = sim.jobs.iter().map(|j| j.skipped_iterations).sum();
        let shared =
            sim.jobs.iter().filter(|j| j.iteration_ms.iter().any(|&ms| ms > 1.15 * j.isolated_iter_ms)).count();
        (values(&metrics(&sim, |_| true)), skipped, shared, sim.invalid_decisions)
    };
    let ((with, skipped, shared, invalid), (without, _, _, _)) = (go(true), go(false));
    assert_close(&with, &without, "GPU-shared");
    assert!(skipped > 0 && shared >= 2 && invalid == 0, "skipped {skipped}, shared {shared}, invalid {invalid}");
}

#[test]
fn preempted_fast_forwarded_jobs_are_credited_once() {
    // Themis' leases preempt jobs that may be fast-forwarding; their traffic
    // is credited to links in bulk when they stop, and a job running alone on
    // those links must not take that bulk for its own per-iteration traffic
    // (it did: links reported 260% utilisation). CASSINI's testbed, jobs of
    // 1-12 GPUs.
    let toml = r#"
name = "themis"
policies = ["themis"]
seeds = [1]
[topology]
builtin = "cassini"
[workload]
generator = "poisson"
jobs = 24
load = 0.9
[workload.mix]
models = ["vgg11", "vgg16", "vgg19", "resnet50", "wideresnet101", "bert", "roberta", "xlm", "camembert", "gpt1", "gpt2", "gpt3", "dlrm"]
workers = [[1, 1.0], [2, 1.0], [3, 1.0], [4, 1.0], [5, 1.0], [6, 1.0], [7, 1.0], [8, 1.0], [9, 1.0], [10, 1.0], [11, 1.0], [12, 1.0]]
iterations = [200, 1000]
[sim]
jitter = 0.01
"#;
    let (with, without) = (runs(toml, true), runs(toml, false));
    assert!(with[0].jobs.iter().any(|j| j.preemptions > 0), "the scenario must preempt");
    assert!(with[0].skipped_iterations > 0);
    for r in [&with[0], &without[0]] {
        for l in &r.links {
            assert!(l.mean_util <= 1.0 + 1e-6, "{} → {}: {:.2}", l.from, l.to, l.mean_util);
        }
    }
    assert_close(&values(&with[0].metrics), &values(&without[0].metrics), "themis");
}
