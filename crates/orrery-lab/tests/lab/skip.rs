//! The fast-forward of undisturbed jobs changes no reported metric by more
//! than 2% (issue 3's tolerance): on contended workloads, on time-shifted
//! (interleaved) jobs, and with jitter.
//!
//! Contended runs are chaotic: whether two rings overlap can hinge on a few
//! nanoseconds of rounding, so a single contended trajectory may drift a few
//! percent either way with or without the skip. There the tolerance applies to
//! metrics summed over seeds (no bias), and per run to everything else.

use orrery_lab::experiment::{Run, parse};
use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Topology, Work};
use orrery_policy::{ClusterView, Decision, Policy};
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
    two_racks_of(1)
}

/// Two racks of four hosts of `gpus_per_host` A100s, 50 Gbit/s everywhere.
fn two_racks_of(gpus_per_host: u32) -> Topology {
    two_racks_with(gpus_per_host, 50.0)
}

/// Two racks of four hosts of `gpus_per_host` A100s at 50 Gbit/s under one
/// spine, the uplinks at `uplink_gbps`.
fn two_racks_with(gpus_per_host: u32, uplink_gbps: f64) -> Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 4,
        spines: 1,
        gpus_per_host,
        gpu_type: "a100".into(),
        host_gbps: 50.0,
        uplink_gbps,
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
        sim.run(&mut Shifted, &mut |_, _| {});
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

/// Rings across the racks' uplink, each on its own pair of hosts: job k on
/// h(k) + h(k+4).
struct Pairs;

impl Policy for Pairs {
    fn name(&self) -> String {
        "pairs".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue.iter().map(|q| Decision::Place { job: q.id, hosts: vec![(q.id, 1), (q.id + 4, 1)] }).collect()
    }
}

#[test]
fn jobs_sharing_a_link_with_headroom_are_fast_forwarded_together() {
    // Two VGG19 rings whose all-reduces overlap on the racks' uplinks. At
    // 100 Gbit/s the two 50 Gbit/s flows fit: the uplink never binds, each
    // ring runs as alone, and both are fast-forwarded although they share
    // it. At 50 Gbit/s it binds when they overlap: they stay detailed.
    let jobs = [
        JobSpec::new("a", "vgg19", 128, 2, Work::Iterations(400), 0.0),
        JobSpec::new("b", "vgg19", 128, 2, Work::Iterations(300), 0.0),
    ];
    let go = |uplink_gbps, skip| {
        let topo = two_racks_with(1, uplink_gbps);
        let cfg = SimConfig { seed: 1, jitter: 0.02, skip, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        sim.run(&mut Pairs, &mut |_, _| {});
        let skipped: u64 = sim.jobs.iter().map(|j| j.skipped_iterations).sum();
        let means: Vec<f64> = sim.jobs.iter().map(|j| j.iteration_ms.sum() / j.iteration_ms.len() as f64).collect();
        (values(&metrics(&sim, |_| true)), skipped, means)
    };
    let ((with, skipped, means), (without, _, detailed)) = (go(100.0, true), go(100.0, false));
    assert_close(&with, &without, "two rings on an uplink with headroom");
    // All but each job's first iterations (its links seen, then two settled
    // iterations) are counted.
    eprintln!("headroom: {skipped} of 700 iterations fast-forwarded");
    assert!(skipped >= 690, "{skipped} of 700 iterations fast-forwarded");
    for (m, d) in means.iter().zip(&detailed) {
        assert!((m - d).abs() <= 1e-6 * d, "mean iteration {m} ms fast-forwarded, {d} ms detailed");
    }
    let ((with, skipped, _), (without, _, _)) = (go(50.0, true), go(50.0, false));
    assert_close(&with, &without, "two rings on an uplink that binds");
    eprintln!("binding: {skipped} of 700 iterations fast-forwarded");
    assert!(skipped < 200, "{skipped} iterations fast-forwarded where the rings contend");
}

#[test]
fn a_newcomer_that_takes_a_links_headroom_wakes_the_jobs_counted_on_it() {
    // Two rings fit on the 100 Gbit/s uplink and are fast-forwarded
    // together; a third arrives after 60 s and overfills it. The two must
    // rejoin the detailed simulation before its flows start, and contend
    // with it as the detailed run says.
    let topo = two_racks_with(1, 100.0);
    let jobs = [
        JobSpec::new("a", "vgg19", 128, 2, Work::Iterations(600), 0.0),
        JobSpec::new("b", "vgg19", 128, 2, Work::Iterations(600), 0.0),
        JobSpec::new("c", "vgg19", 128, 2, Work::Iterations(200), 60.0),
    ];
    let go = |skip| {
        let cfg = SimConfig { seed: 3, jitter: 0.02, skip, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        sim.run(&mut Pairs, &mut |_, _| {});
        let skipped: Vec<u64> = sim.jobs.iter().map(|j| j.skipped_iterations).collect();
        let slowest: Vec<f64> = sim.jobs.iter().map(|j| j.iteration_ms.max() / j.isolated_iter_ms).collect();
        (values(&metrics(&sim, |_| true)), skipped, slowest)
    };
    let ((with, skipped, slowest), (without, _, detailed)) = (go(true), go(false));
    assert_close(&with, &without, "a newcomer on a link with headroom");
    eprintln!("fast-forwarded per job: {skipped:?}; slowest iteration over alone {slowest:?}, detailed {detailed:?}");
    // a and b were counted before c came (VGG19 iterates in about 0.35 s).
    assert!(skipped[0] >= 100 && skipped[1] >= 100, "{skipped:?}");
    // Woken, they met c's flows: the uplink bound (an iteration well over
    // its time alone), as in the detailed run.
    for (s, d) in slowest.iter().zip(&detailed) {
        assert!(*d > 1.05 && (s - d).abs() <= 0.02 * d, "slowest iteration {s}x alone fast-forwarded, {d}x detailed");
    }
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
        sim.run(&mut Colocating, &mut |_, _| {});
        let skipped: u64 = sim.jobs.iter().map(|j| j.skipped_iterations).sum();
        let shared = sim.jobs.iter().filter(|j| j.iteration_ms.max() > 1.15 * j.isolated_iter_ms).count();
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

/// A controller that watches job 0 only and records, at each scheduling
/// round, what the view says of job 1: (time, iterations done, start of
/// its current iteration). Job 0 runs on h0 + h1 (rack 0), job 1 on h4 + h5
/// (rack 1): no link in common; job 2 needs every host, so it waits and every tick asks again.
#[derive(Default)]
struct WatchesJobZero {
    seen: Vec<(u64, u64, u64)>,
    iterations_of: [u64; 3],
}

impl Policy for WatchesJobZero {
    fn name(&self) -> String {
        "watches-job-0".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        if let Some(r) = view.running.iter().find(|r| r.id == 1) {
            let ns = |s: f64| (s * 1e9).round() as u64;
            self.seen.push((ns(view.now_s), r.iterations_done, ns(r.iteration_start_s)));
        }
        let mut out = Vec::new();
        for q in &view.queue {
            match q.id {
                0 => out.push(Decision::Place { job: 0, hosts: vec![(0, 1), (1, 1)] }),
                1 => out.push(Decision::Place { job: 1, hosts: vec![(4, 1), (5, 1)] }),
                _ if view.free_gpus.iter().all(|&f| f == 1) => {
                    out.push(Decision::Place { job: q.id, hosts: (0..8).map(|h| (h, 1)).collect() })
                }
                _ => {}
            }
        }
        out
    }
    fn observes_iterations(&self) -> bool {
        true
    }
    fn watches(&self, job: orrery_policy::JobId) -> bool {
        job == 0
    }
    fn on_iteration(
        &mut self,
        _: &ClusterView<'_>,
        job: orrery_policy::JobId,
        _: orrery_policy::Iteration,
    ) -> Vec<Decision> {
        self.iterations_of[job] += 1;
        Vec::new()
    }
    fn tick_s(&self) -> Option<f64> {
        Some(0.37)
    }
}

#[test]
fn a_controller_sees_every_iteration_of_the_jobs_it_watches_and_exact_views_of_the_others() {
    // Job 1 runs undisturbed and unwatched, so it is fast-forwarded; job 0
    // is watched and never is. With jitter, iterations differ in length, so
    // a view that counted skipped iterations at the last one's length (as it
    // once did) would misplace job 1's phase; the view must match the
    // detailed run to the nanosecond.
    let topo = two_racks();
    let jobs = [
        JobSpec::new("watched", "vgg19", 64, 2, Work::Iterations(300), 0.0),
        JobSpec::new("unwatched", "resnet50", 64, 2, Work::Iterations(300), 0.0),
        JobSpec::new("waits", "bert", 12, 8, Work::Iterations(20), 1.0),
    ];
    let go = |skip| {
        let mut sim =
            Simulation::new(&topo, &jobs, SimConfig { seed: 3, jitter: 0.02, skip, ..Default::default() }, false);
        let mut policy = WatchesJobZero::default();
        sim.run(&mut policy, &mut |_, _| {});
        let skipped: Vec<u64> = sim.jobs.iter().map(|j| j.skipped_iterations).collect();
        (values(&metrics(&sim, |_| true)), skipped, policy)
    };
    let ((with, skipped, policy), (without, _, detailed)) = (go(true), go(false));
    assert_eq!(skipped[0], 0, "the watched job is never fast-forwarded");
    assert!(skipped[1] > 250, "the unwatched job is: {} of 300 iterations", skipped[1]);
    assert_eq!(policy.iterations_of[0], 300, "every iteration of the watched job is seen");
    assert!(policy.seen.len() > 10, "{} views", policy.seen.len());
    assert_eq!(policy.seen, detailed.seen, "views of the fast-forwarded job");
    assert_close(&with, &without, "watching one job");
}

/// Places job 0 on h0 + h1 paced to slots 1.3 times its iteration time
/// (Metronome's TDM pacing), and job 1 across h0 and h4 when it arrives,
/// which shares h0's links with job 0.
struct PacesJobZero;

impl Policy for PacesJobZero {
    fn name(&self) -> String {
        "paces-job-0".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = Vec::new();
        for q in &view.queue {
            let hosts = if q.id == 0 { vec![(0, 1), (1, 1)] } else { vec![(0, 1), (4, 1)] };
            let period_ms = orrery_model::placed::place(view.topology, q.spec, &hosts).expect("fits").shape.period_ms();
            out.push(Decision::Place { job: q.id, hosts });
            if q.id == 0 {
                out.push(Decision::Pace { job: 0, period_ms: 1.3 * period_ms, offset_s: 0.05 });
            }
        }
        out
    }
}

#[test]
fn paced_jobs_are_fast_forwarded_slot_by_slot() {
    // Alone, job 0's iterations each idle until their slot; fast-forwarded,
    // they must come out the same to the nanosecond. Job 1 then arrives on
    // job 0's links, wakes it (possibly while it idles for a slot), and the
    // runs agree within the usual 2%.
    let topo = two_racks_of(2);
    let jobs = [
        JobSpec::new("paced", "vgg19", 64, 2, Work::Iterations(400), 0.0),
        JobSpec::new("later", "vgg16", 64, 2, Work::Iterations(100), 30.0),
    ];
    let go = |skip, max_time_s, record_iterations| {
        let cfg = SimConfig { seed: 5, jitter: 0.02, skip, max_time_s, record_iterations, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        sim.run(&mut PacesJobZero, &mut |_, _| {});
        let j = &sim.jobs[0];
        let each = j.recorded_iteration_ms();
        (values(&metrics(&sim, |_| true)), j.skipped_iterations, j.iteration_ms.clone(), each, j.isolated_iter_ms)
    };
    let ((with, skipped, ..), (without, ..)) = (go(true, None, false), go(false, None, false));
    assert!(skipped > 50, "{skipped} iterations fast-forwarded");
    // Before job 1 arrives (30 s), every iteration is a slot: 1.3 × alone.
    let (_, skipped_alone, fast, ..) = go(true, Some(29.0), false);
    let (_, _, detailed, each, alone_ms) = go(false, Some(29.0), true);
    assert!(each.len() > 20 && skipped_alone > 20, "{} iterations before the second job", each.len());
    assert_eq!(
        (fast.len(), fast.percentiles()),
        (detailed.len(), detailed.percentiles()),
        "iteration times while alone"
    );
    assert!((fast.sum() - detailed.sum()).abs() < 1e-6 * each.len() as f64, "to the nanosecond");
    for &ms in &each[2..] {
        assert!((ms / (1.3 * alone_ms) - 1.0).abs() < 0.08, "{ms} ms against a slot of {}", 1.3 * alone_ms);
    }
    assert_close(&with, &without, "paced job woken by another");
}

#[test]
fn a_job_of_billions_of_iterations_costs_only_the_simulated_time() {
    // Issue 21: a job of 4.3 × 10⁹ iterations hung the run, because the
    // fast-forward drew every remaining iteration up front and `max_time_s`
    // never bounded that. Now it draws stretches as simulated time passes:
    // 60 simulated seconds cost 60 seconds' worth of iterations, and the
    // count matches the detailed run's.
    let topo = two_racks();
    let jobs = [JobSpec::new("huge", "resnet50", 64, 2, Work::Iterations(4_300_000_000), 0.0)];
    let go = |skip| {
        let cfg = SimConfig { seed: 7, jitter: 0.02, skip, max_time_s: Some(60.0), ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        let pins = [("huge".to_string(), vec![(0, 1), (1, 1)])].into();
        sim.run(&mut orrery_policy::baseline::Pinned { pins, label: None }, &mut |_, _| {});
        (sim.jobs[0].iterations_done, sim.jobs[0].skipped_iterations)
    };
    let ((fast, skipped), (detailed, _)) = (go(true), go(false));
    assert!(detailed > 100, "{detailed} iterations in 60 s");
    assert!(skipped > detailed / 2, "{skipped} of {fast} fast-forwarded");
    assert_eq!(fast, detailed);
}

#[test]
fn a_job_without_noise_is_counted_in_one_stretch_to_the_nanosecond() {
    // Without compute noise every fast-forwarded iteration is alike, so the
    // rest of a job is one stretch, counted in O(1) (the full Philly trace
    // fast-forwards 2.9 × 10⁹ iterations). 4.3 × 10⁹ iterations of a job
    // alone end exactly that many periods after it starts, within a few
    // events, and the 60 s the detailed run simulates agree with it.
    let topo = two_racks();
    let n = 4_300_000_000u64;
    let jobs = [JobSpec::new("huge", "resnet50", 64, 2, Work::Iterations(n), 0.0)];
    let go = |skip, max_time_s| {
        let cfg = SimConfig { seed: 7, skip, max_time_s, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        let pins = [("huge".to_string(), vec![(0, 1), (1, 1)])].into();
        sim.run(&mut orrery_policy::baseline::Pinned { pins, label: None }, &mut |_, _| {});
        let j = &sim.jobs[0];
        (j.iterations_done, j.finish_ns, j.iteration_ms.clone(), sim.events_processed, j.isolated_iter_ms)
    };
    let (done, finish, times, events, period_ms) = go(true, None);
    assert_eq!((done, times.len()), (n, n));
    assert!(events < 100, "{events} events");
    let period_ns = (period_ms * 1e6).round() as u64;
    assert_eq!(finish, Some(n * period_ns), "{n} × {period_ns} ns");
    assert_eq!((times.percentiles().p50, times.percentiles().p99), (period_ns as f64 / 1e6, period_ns as f64 / 1e6));
    let (fast, _, fast_times, ..) = go(true, Some(60.0));
    let (detailed, _, detailed_times, ..) = go(false, Some(60.0));
    assert_eq!((fast, fast_times.len()), (detailed, detailed_times.len()));
    let (f, d) = (fast_times.percentiles(), detailed_times.percentiles());
    assert_eq!((f.p50, f.p90, f.p99), (d.p50, d.p90, d.p99));
    assert!((f.mean - d.mean).abs() < 1e-9 * d.mean, "{f:?} vs {d:?}");
}
