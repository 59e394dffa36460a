//! The simulator against numbers that can be checked by hand or in the papers.

use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_interleave::{Search, solve};
use orrery_model::setups::LeafSpine;
use orrery_model::topology::{Builder, Tier};
use orrery_model::{JobSpec, Priority, Topology, Work};
use orrery_policy::{ClusterView, Decision, JobId, Policy};
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

/// Places job i on `hosts[i]` as soon as it is queued, then applies `shifts[i]` once.
struct Fixed {
    hosts: Vec<Vec<(usize, u32)>>,
    shifts: Vec<f64>,
}

impl Policy for Fixed {
    fn name(&self) -> String {
        "fixed".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = Vec::new();
        for q in &view.queue {
            out.push(Decision::Place { job: q.id, hosts: self.hosts[q.id].clone() });
            if self.shifts[q.id] > 0.0 {
                out.push(Decision::Shift { job: q.id, ms: self.shifts[q.id] });
            }
        }
        out
    }
}

/// Two racks of two 50 Gbit/s single-A100 hosts under one spine with 50 Gbit/s uplinks.
fn two_racks() -> Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 2,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 50.0,
        uplink_gbps: 50.0,
    }
    .build("two-racks")
    .expect("valid")
}

fn run(topo: &Topology, jobs: &[JobSpec], policy: &mut dyn Policy) -> Simulation<'static> {
    let topo: &'static Topology = Box::leak(Box::new(topo.clone()));
    let cfg = SimConfig { record_iterations: true, ..SimConfig::default() };
    let mut sim = Simulation::new(topo, jobs, cfg, policy.isolated_network());
    sim.run(policy, &mut |_, _| {});
    sim
}

fn p90(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((0.9 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

#[test]
fn a_lone_ring_allreduce_takes_two_n_minus_one_over_n_b_over_r() {
    // VGG16 on 4 hosts of one switch at 50 Gbit/s: 68 ms / 2.2 of compute on an
    // A100 plus 2·3/4 · 553.6 MB · 8 / 50 Gbit/s = 132.864 ms per iteration.
    let mut b = Builder::new();
    let sw = b.switch("s", Tier::Core);
    for i in 0..4 {
        let h = b.host(format!("h{i}"), 1, "a100", 8, 64.0);
        b.cable(h, sw, 50.0);
    }
    let topo = b.build("star").expect("valid");
    let job = JobSpec::new("v", "vgg16", 16, 4, Work::Iterations(5), 0.0);
    let mut p = Fixed { hosts: vec![vec![(0, 1), (1, 1), (2, 1), (3, 1)]], shifts: vec![0.0] };
    let sim = run(&topo, &[job], &mut p);
    let j = &sim.jobs[0];
    assert_eq!(j.status, Status::Finished);
    let expected = 68.0 / 2.2 + 132.864;
    for ms in &j.recorded_iteration_ms() {
        assert!((ms - expected).abs() < 1e-3, "{ms} vs {expected}");
    }
    assert!((j.isolated_iter_ms - expected).abs() < 1e-6);
}

/// CASSINI §2.2: two data-parallel VGG19 jobs whose rings share one link.
fn cassini_pair(batch: u32, interleave: bool) -> (f64, f64, Simulation<'static>) {
    let topo = two_racks();
    // Job A on h0 + h2, job B on h1 + h3: both rings cross leaf0 ⇄ spine ⇄ leaf1.
    let jobs = [
        JobSpec::new("a", "vgg19", batch, 2, Work::Iterations(200), 0.0),
        JobSpec::new("b", "vgg19", batch, 2, Work::Iterations(200), 0.0),
    ];
    let gpu = orrery_model::gpu::gpu_type("a100").expect("a100");
    let shape = orrery_model::zoo::model("vgg19").expect("zoo").shape(
        gpu,
        batch,
        &orrery_model::zoo::Placement::spread(2),
        50.0,
    );
    let circle = shape.circle();
    let duty = circle.duty_cycle();
    let mut shifts = vec![0.0, 0.0];
    if interleave {
        // The shift comes from the interleaving engine, as CASSINI computes it.
        let cj = |name: &str, p| CircleJob { name: name.into(), priority: p, circle: circle.clone() };
        let u = unify(&[cj("a", Priority::High), cj("b", Priority::Low)], &Params::default()).expect("unify");
        let s = solve(&u, 50.0, Search::OptimalCushion);
        assert!((s.score - 1.0).abs() < 1e-9, "VGG19 pairs are fully compatible when duty ≤ 50%: {duty}");
        shifts[1] = s.shifts_ms(&u)[1];
    }
    let mut p = Fixed { hosts: vec![vec![(0, 1), (2, 1)], vec![(1, 1), (3, 1)]], shifts };
    let sim = run(&topo, &jobs, &mut p);
    let all: Vec<f64> = sim.jobs.iter().flat_map(|j| j.recorded_iteration_ms()).collect();
    (p90(&all), duty, sim)
}

#[test]
fn cassini_vgg19_pair_shares_the_link_and_interleaving_recovers_one_plus_duty() {
    for batch in [64, 128] {
        let (together, duty, sim) = cassini_pair(batch, false);
        // Started together, both communicate at once: each flow gets half of
        // the 50 Gbit/s uplink while they overlap, so the Up phase doubles.
        let shape = &sim.jobs[0].shape;
        let expected = shape.compute_ms() + 2.0 * shape.network_ms();
        assert!((together - expected).abs() / expected < 0.01, "batch {batch}: {together} vs {expected}");
        let (apart, _, sim2) = cassini_pair(batch, true);
        let gain = together / apart;
        // Interleaved, each job runs as if alone after the first shifted iteration:
        // the gain is 1 + duty cycle.
        assert!((gain - (1.0 + duty)).abs() < 0.02, "batch {batch}: gain {gain} vs 1 + {duty}");
        assert!(sim2.jobs.iter().all(|j| j.status == Status::Finished));
        if batch == 128 {
            // CASSINI measured 1.26× at a batch the paper does not give; at batch
            // 128 on A100s the zoo's VGG19 has a 26% duty cycle.
            assert!((1.15..=1.35).contains(&gain), "gain {gain}");
        }
    }
}

#[test]
fn same_seed_same_run_to_the_bit() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "vgg19", 64, 2, Work::Iterations(50), 0.0),
        JobSpec::new("b", "resnet50", 64, 2, Work::Iterations(50), 0.3),
    ];
    let go = |seed| {
        let topo: &'static Topology = Box::leak(Box::new(topo.clone()));
        let mut p = Fixed { hosts: vec![vec![(0, 1), (2, 1)], vec![(1, 1), (3, 1)]], shifts: vec![0.0, 0.0] };
        let mut sim = Simulation::new(
            topo,
            &jobs,
            SimConfig { seed, jitter: 0.05, skip: false, record_iterations: true, ..Default::default() },
            false,
        );
        sim.run(&mut p, &mut |_, _| {});
        sim.jobs.iter().map(|j| j.recorded_iteration_ms()).collect::<Vec<_>>()
    };
    assert_eq!(go(7), go(7));
    assert_ne!(go(7), go(8));
}

/// Pauses job 0 after its 3rd iteration and resumes it when job 1 finishes.
struct PauseOne;

impl Policy for PauseOne {
    fn name(&self) -> String {
        "pause".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out: Vec<Decision> =
            view.queue.iter().map(|q| Decision::Place { job: q.id, hosts: vec![(q.id, 1)] }).collect();
        if view.queue.is_empty() && view.running.iter().any(|r| r.paused) && view.running.len() == 1 {
            out.push(Decision::Resume { job: 0 });
        }
        out
    }
    fn observes_iterations(&self) -> bool {
        true
    }
    fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, _it: orrery_policy::Iteration) -> Vec<Decision> {
        let done = view.running.iter().find(|r| r.id == job).map_or(0, |r| r.iterations_done);
        if job == 0 && done == 3 {
            return vec![Decision::Pause { job: 0 }];
        }
        if job == 1 && done == 10 {
            return vec![Decision::Resume { job: 0 }];
        }
        Vec::new()
    }
}

#[test]
fn pause_and_resume_delay_completion_by_the_paused_time() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(6), 0.0),
        JobSpec::new("b", "resnet50", 32, 1, Work::Iterations(10), 0.0),
    ];
    let sim = run(&topo, &jobs, &mut PauseOne);
    let (a, b) = (&sim.jobs[0], &sim.jobs[1]);
    assert_eq!((a.status, b.status), (Status::Finished, Status::Finished));
    assert_eq!(a.pauses, 1);
    // a ran 3 iterations, waited until b's 10th finished, then ran 3 more.
    let it = a.isolated_iter_ms;
    let a_done = a.finish_ns.unwrap_or(0) as f64 / 1e6;
    assert!((a_done - 13.0 * it).abs() < 1e-3, "{a_done} vs {}", 13.0 * it);
}

/// Places job 0 on h0 + h2, then (optionally) splits each of its ring edges
/// over both spines.
struct Routed {
    split: bool,
}

impl Policy for Routed {
    fn name(&self) -> String {
        "routed".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out = Vec::new();
        for q in &view.queue {
            out.push(Decision::Place { job: q.id, hosts: vec![(0, 1), (2, 1)] });
            if self.split {
                for flow in 0..2 {
                    out.push(Decision::Route { job: q.id, flow, paths: vec![0, 1] });
                }
            }
        }
        out
    }
}

#[test]
fn routing_a_flow_over_two_spines_doubles_its_uplink_bandwidth() {
    // Two racks of two 50 Gbit/s hosts; each leaf has two 25 Gbit/s uplinks,
    // one per spine. By ECMP a ring edge takes one spine and runs at 25 Gbit/s
    // (the job's shape alone already counts that); split over both
    // (FORESIGHT's subflows) it gets the NIC's full 50.
    let mut b = Builder::new();
    let spines = [b.switch("s0", Tier::Spine), b.switch("s1", Tier::Spine)];
    for r in 0..2 {
        let leaf = b.switch(format!("leaf{r}"), Tier::Leaf);
        for k in 0..2 {
            let h = b.host(format!("h{}", 2 * r + k), 1, "a100", 8, 64.0);
            b.cable(h, leaf, 50.0);
        }
        for &s in &spines {
            b.cable(leaf, s, 25.0);
        }
    }
    let topo = b.build("two-spines").expect("valid");
    let job = JobSpec::new("v", "vgg19", 64, 2, Work::Iterations(3), 0.0);
    let ecmp = run(&topo, std::slice::from_ref(&job), &mut Routed { split: false });
    let split = run(&topo, std::slice::from_ref(&job), &mut Routed { split: true });
    let shape = &ecmp.jobs[0].shape;
    let (compute, comm) = (shape.compute_ms(), shape.network_ms());
    assert!((ecmp.jobs[0].recorded_iteration_ms()[1] - (compute + comm)).abs() < 1e-3);
    assert!((split.jobs[0].recorded_iteration_ms()[1] - (compute + comm / 2.0)).abs() < 1e-3);
}

/// Starts job 0 on h0, then every later job on job 0's GPU at `sub_batch`
/// (one decision each; the simulator refuses those it must).
struct Share {
    sub_batch: u32,
}

impl Policy for Share {
    fn name(&self) -> String {
        "share".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue
            .iter()
            .map(|q| match q.id {
                0 => Decision::Place { job: 0, hosts: vec![(0, 1)] },
                _ => Decision::Share { job: q.id, free: vec![], shared: vec![(0, 0, 1)], sub_batch: self.sub_batch },
            })
            .collect()
    }
}

/// Runs with `cfg`, every iteration recorded (`recorded_iteration_ms`).
fn run_with(topo: &Topology, jobs: &[JobSpec], policy: &mut dyn Policy, cfg: SimConfig) -> Simulation<'static> {
    let topo: &'static Topology = Box::leak(Box::new(topo.clone()));
    let mut sim = Simulation::new(topo, jobs, SimConfig { record_iterations: true, ..cfg }, false);
    sim.run(policy, &mut |_, _| {});
    sim
}

/// Ground truth: a ResNet-50 beside a Transformer slows 1.25×, the
/// Transformer (BERT's class) beside it 1.5×.
fn measured() -> SimConfig {
    let mut c = SimConfig { record_iterations: true, ..SimConfig::default() };
    c.colocation.table.insert("ResNet-50", "Transformer", 1.25);
    c.colocation.table.insert("Transformer", "ResNet-50", 1.5);
    c
}

#[test]
fn shared_jobs_slow_by_their_measured_interference_ratios_and_recover() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(100), 0.0),
        JobSpec::new("b", "bert", 12, 1, Work::Iterations(5), 0.0),
    ];
    let sim = run_with(&topo, &jobs, &mut Share { sub_batch: 0 }, measured());
    let (a, b) = (&sim.jobs[0], &sim.jobs[1]);
    // Both start at t = 0 (one GPU: compute only): while b runs, a's
    // iterations take 1.25×, b's 1.5×.
    assert!(
        (b.recorded_iteration_ms()[0] - 1.5 * b.isolated_iter_ms).abs() < 1e-3,
        "{} vs {}",
        b.recorded_iteration_ms()[0],
        b.isolated_iter_ms
    );
    assert!((a.recorded_iteration_ms()[0] - 1.25 * a.isolated_iter_ms).abs() < 1e-3);
    // After b finishes, a runs alone again.
    assert!((a.recorded_iteration_ms()[99] - a.isolated_iter_ms).abs() < 1e-3);
    assert_eq!((a.status, b.status), (Status::Finished, Status::Finished));
    assert_eq!(sim.invalid_decisions, 0);
    // The shared GPU was counted once and is free again; b shared its one
    // GPU for its whole run, 5 iterations at 1.5×, and so did a.
    assert_eq!(sim.free_gpus(), &[1, 1, 1, 1]);
    let b_run_s = 5.0 * 1.5 * b.isolated_iter_ms / 1e3;
    assert!((b.shared_gpu_s - b_run_s).abs() < 1e-6 && (a.shared_gpu_s - b_run_s).abs() < 1e-6, "{}", b.shared_gpu_s);
}

#[test]
fn pairs_without_measurements_share_by_time_slicing() {
    // Two identical jobs with no table entry: each waits for the other's
    // compute, ξ = 2.
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(10), 0.0),
        JobSpec::new("b", "resnet50", 32, 1, Work::Iterations(4), 0.0),
    ];
    let sim = run_with(&topo, &jobs, &mut Share { sub_batch: 0 }, SimConfig::default());
    let b = &sim.jobs[1];
    assert!((b.recorded_iteration_ms()[0] - 2.0 * b.isolated_iter_ms).abs() < 1e-3);
}

#[test]
fn a_gpu_holds_two_jobs_at_most_and_both_must_fit_its_memory() {
    use orrery_model::colocation::{accumulation_factor, memory_mib};
    let topo = two_racks();
    // Three jobs for one GPU: the third decision is refused and it waits
    // for a partner to leave.
    let three = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(200), 0.0),
        JobSpec::new("b", "bert", 12, 1, Work::Iterations(4), 0.0),
        JobSpec::new("c", "bert", 12, 1, Work::Iterations(4), 0.0),
    ];
    let sim = run_with(&topo, &three, &mut Share { sub_batch: 0 }, measured());
    assert!(sim.invalid_decisions >= 1);
    assert!(sim.jobs[2].first_start_ns.expect("c ran") > 0, "c waited for a GPU slot");
    assert_eq!(sim.jobs[2].status, Status::Finished);
    // A ResNet-50 at 128 per GPU beside a BERT at 48 overflows a 40 GiB
    // A100; beside a BERT at sub-batch 12 it fits.
    let r50 = orrery_model::zoo::model("resnet50").expect("zoo");
    let bert = orrery_model::zoo::model("bert").expect("zoo");
    assert!(memory_mib(r50, 128) + memory_mib(bert, 48) > 40.0 * 1024.0);
    assert!(memory_mib(r50, 128) + memory_mib(bert, 12) < 40.0 * 1024.0);
    let big = [
        JobSpec::new("a", "resnet50", 128, 1, Work::Iterations(10), 0.0),
        JobSpec::new("b", "bert", 48, 1, Work::Iterations(4), 0.0),
    ];
    let sim = run_with(&topo, &big, &mut Share { sub_batch: 0 }, measured());
    assert!(sim.invalid_decisions >= 1, "the pair does not fit 40 GiB");
    // (This policy only ever shares, so b never starts.)
    assert!(sim.jobs[1].first_start_ns.is_none() && sim.jobs[0].status == Status::Finished);
    // At sub-batch 12 (4 accumulation steps) it fits, and its compute
    // stretches by the accumulation factor on top of ξ.
    let sim = run_with(&topo, &big, &mut Share { sub_batch: 12 }, measured());
    assert_eq!(sim.invalid_decisions, 0);
    let b = &sim.jobs[1];
    let f = accumulation_factor(bert, orrery_model::gpu::gpu_type("a100").expect("gpu"), 48, 12);
    assert!(f > 1.0);
    assert!(
        (b.recorded_iteration_ms()[0] - 1.5 * f * b.isolated_iter_ms).abs() < 1e-3,
        "{} {f}",
        b.recorded_iteration_ms()[0]
    );
}

/// Job 0 on h0 + h2 at t = 0; job 1 on h1 + h3 when it arrives: both rings
/// cross the same uplink.
struct SharedUplink;

impl Policy for SharedUplink {
    fn name(&self) -> String {
        "shared-uplink".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue
            .iter()
            .map(|q| Decision::Place {
                job: q.id,
                hosts: if q.id == 0 { vec![(0, 1), (2, 1)] } else { vec![(1, 1), (3, 1)] },
            })
            .collect()
    }
}

#[test]
fn the_cassini_module_aligns_a_newcomer_out_of_the_running_jobs_way() {
    // CASSINI §2.2 through the policy module: job 1 arrives while job 0 runs,
    // at a phase where their Up phases would overlap. Without CASSINI they
    // share the uplink every iteration; with it, job 1 is aligned once (CASSINI
    // Alg. 2 with the host scheduler's placement as the only candidate) and
    // then both run as if alone.
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "vgg19", 128, 2, Work::Iterations(100), 0.0),
        JobSpec::new("b", "vgg19", 128, 2, Work::Iterations(100), 0.01),
    ];
    let plain = run(&topo, &jobs, &mut SharedUplink);
    let mut cassini = orrery_policy::cassini::Cassini::new(Box::new(SharedUplink), 1);
    cassini.candidates = 1;
    let aligned = run(&topo, &jobs, &mut cassini);
    let alone = plain.jobs[1].isolated_iter_ms;
    let late = |s: &Simulation<'_>| s.jobs[1].recorded_iteration_ms()[10..50].iter().sum::<f64>() / 40.0;
    assert!(late(&plain) > 1.15 * alone, "without CASSINI the rings collide: {} vs {alone}", late(&plain));
    assert!(
        (late(&aligned) - alone).abs() < 1e-3,
        "with CASSINI job 1 runs as if alone: {} vs {alone}",
        late(&aligned)
    );
    assert_eq!(aligned.jobs[1].shifts, 1, "one alignment, no drift re-alignment needed");
}

/// Places job 0; when job 1 arrives, preempts job 0 and places job 1 on its
/// GPU; places job 0 again when the GPU frees up; rejects job 2 (too big).
struct Preempting;

impl Policy for Preempting {
    fn name(&self) -> String {
        "preempting".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let queued = |id| view.queue.iter().any(|q| q.id == id);
        let mut out = Vec::new();
        if queued(2) {
            out.push(Decision::Reject { job: 2, reason: "needs 64 GPUs".into() });
        }
        if queued(1) && view.running.iter().any(|r| r.id == 0) {
            out.push(Decision::Preempt { job: 0 }); // the simulator calls back once the GPU is free
        } else if queued(1) && view.free_gpus[0] > 0 {
            out.push(Decision::Place { job: 1, hosts: vec![(0, 1)] });
        } else if queued(0) && view.free_gpus[0] > 0 {
            out.push(Decision::Place { job: 0, hosts: vec![(0, 1)] });
        }
        out
    }
}

#[test]
fn preempted_jobs_keep_their_progress_and_rejected_jobs_count_as_failures() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(40), 0.0),
        JobSpec::new("b", "resnet50", 32, 1, Work::Iterations(4), 1.0),
        JobSpec::new("c", "resnet50", 32, 64, Work::Iterations(1), 1.0),
    ];
    let sim = run(&topo, &jobs, &mut Preempting);
    let (a, b, c) = (&sim.jobs[0], &sim.jobs[1], &sim.jobs[2]);
    assert_eq!((a.status, b.status, c.status), (Status::Finished, Status::Finished, Status::Rejected));
    assert_eq!(a.preemptions, 1);
    assert_eq!(a.iterations_done, 40, "progress kept across the preemption");
    // a's iteration in flight at t = 1 s is lost; b ran in between.
    let it = a.isolated_iter_ms / 1e3;
    let done_before = (1.0 / it).floor();
    let a_end = a.finish_ns.unwrap_or(0) as f64 / 1e9;
    let expected = 1.0 + 4.0 * b.isolated_iter_ms / 1e3 + (40.0 - done_before) * it;
    assert!((a_end - expected).abs() < 1e-6, "{a_end} vs {expected}");
    let m = orrery_sim::metrics::metrics(&sim, |_| true);
    assert!((m.afr - 1.0 / 3.0).abs() < 1e-12);
}

/// Runs `experiments/NAME` as `orrery run` would, without output files.
fn run_experiment_file(name: &str) -> Vec<orrery_lab::summary::Run> {
    let path = format!("{}/../../experiments/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("experiment file");
    let e = orrery_lab::experiment::parse(&path, &text).expect("valid");
    e.run(std::path::Path::new("."), |_, _, _, _, _| {}).expect("runs").runs
}

#[test]
fn cassini_pair_experiment_file_reproduces_the_gain() {
    // experiments/cassini-pair.toml: the §2.2 pair, pinned, without and with CASSINI.
    let runs = run_experiment_file("cassini-pair.toml");
    let p90 = |policy: &str| runs.iter().find(|r| r.policy == policy).map_or(0.0, |r| r.metrics.p90_iter_s);
    let gain = p90("pinned") / p90("pinned+cassini");
    // CASSINI measured 1.26x; the zoo's VGG19 at batch 128 on A100s has a 26% duty cycle.
    assert!((1.15..=1.35).contains(&gain), "gain {gain}");
}

#[test]
fn two_mesh_jobs_data_parallel_phases_on_shared_uplinks_are_interleaved() {
    // experiments/llm-pair.toml: two Llama 3 8B meshes (TP 8 in a host, DP 4
    // across racks). Each host sends 8 DP flows of 400 Gbit/s; two jobs'
    // 16 host-flows per rack share 2 × 3.2 Tbit/s of uplink, so in step
    // their all-reduces take twice as long. Each GPU's DP ring sends
    // 2·(3/4) of its 1/8 of the 8.03e9 16-bit gradients, 3.0 GB: 60 ms at
    // 400 Gbit/s of a 470 ms iteration alone. CASSINI must see the flows
    // add up on the uplink (`Placed::link_circles`) and shift one job's DP
    // phase off the other's.
    let runs = run_experiment_file("llm-pair.toml");
    let it = |policy: &str| runs.iter().find(|r| r.policy == policy).map_or(0.0, |r| r.metrics.avg_iter_s);
    let (in_step, shifted) = (it("pinned"), it("pinned+cassini"));
    let jobs = &runs.iter().find(|r| r.policy == "pinned").expect("ran").jobs;
    let alone_s = jobs[0].isolated_iter_ms / 1e3;
    // In step the DP phase runs at half rate where the two overlap: at
    // least 8% over alone (measured 10.6%). Shifted: within 1% of alone.
    assert!(in_step > 1.08 * alone_s, "in step {in_step} s vs alone {alone_s} s");
    assert!(shifted < 1.01 * alone_s, "shifted {shifted} s vs alone {alone_s} s");
}

#[test]
fn crux_gives_the_gpu_intense_mesh_the_uplinks_first() {
    // experiments/llm-pair.toml with job b at one micro-batch: the same
    // gradient (the same DP traffic) for half the compute, so b's GPU
    // intensity (Crux Eq. 2: compute over its traffic's time on the busiest
    // link) is about half a's. Started together, their DP phases meet on
    // the uplinks and share them. Crux puts a in the higher strict-priority
    // queue: a runs as if alone, b takes what a leaves.
    let path = format!("{}/../../experiments/llm-pair.toml", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).expect("experiment file");
    let text = text
        .replace(
            "policies = [\"pinned\", \"pinned+cassini\", \"pinned+crux\"]",
            "policies = [\"pinned\", \"pinned+crux\"]",
        )
        .replace("headline = \"pinned+cassini\"", "headline = \"pinned+crux\"")
        .replace(
            "id = \"b\"\nmodel = \"llama3-8b\"\nparallelism = { tp = 8, dp = 4, microbatches = 2 }",
            "id = \"b\"\nmodel = \"llama3-8b\"\nparallelism = { tp = 8, dp = 4, microbatches = 1 }",
        );
    assert!(text.contains("microbatches = 1") && text.contains("headline = \"pinned+crux"), "{text}");
    let e = orrery_lab::experiment::parse(&path, &text).expect("valid");
    let runs = e.run(std::path::Path::new("."), |_, _, _, _, _| {}).expect("runs").runs;
    let job = |policy: &str, id: &str| {
        let run = runs.iter().find(|r| r.policy == policy).expect("ran");
        let j = run.jobs.iter().find(|j| j.id == id).expect("job");
        (j.iter_mean_ms, j.isolated_iter_ms)
    };
    let (a_plain, a_alone) = job("pinned", "a");
    let (a_crux, _) = job("pinned+crux", "a");
    let (b_plain, _) = job("pinned", "b");
    let (b_crux, _) = job("pinned+crux", "b");
    // Sharing fairly, a's iterations are slowed where the two DP phases
    // meet (their periods differ, so they meet now and then: measured 1.6%
    // over alone). First in its queue, a runs exactly as alone (0.1%); b
    // takes the wait (measured 272.8 -> 275.4 ms).
    assert!(a_plain > 1.01 * a_alone, "a sharing fairly: {a_plain} ms vs alone {a_alone} ms");
    assert!(a_crux < 1.001 * a_alone, "a under crux: {a_crux} ms vs alone {a_alone} ms");
    assert!(b_crux > b_plain, "b under crux {b_crux} ms vs sharing fairly {b_plain} ms");
}

/// Places job 0 on hosts 0 and 2 and paces it in slots of `period_ms` from 0.
struct Paced {
    period_ms: f64,
}

impl Policy for Paced {
    fn name(&self) -> String {
        "paced".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue
            .iter()
            .flat_map(|q| {
                [
                    Decision::Place { job: q.id, hosts: vec![(0, 1), (2, 1)] },
                    Decision::Pace { job: q.id, period_ms: self.period_ms, offset_s: 0.0 },
                ]
            })
            .collect()
    }
}

#[test]
fn pacing_pads_short_iterations_to_the_slot_and_lets_late_ones_start_at_once() {
    let topo = two_racks();
    let job = JobSpec::new("v", "vgg19", 64, 2, Work::Iterations(5), 0.0);
    let alone =
        run(&topo, std::slice::from_ref(&job), &mut Fixed { hosts: vec![vec![(0, 1), (2, 1)]], shifts: vec![0.0] })
            .jobs[0]
            .recorded_iteration_ms()[0];
    // Slots 20% longer than the iteration: from the second on (the first
    // starts in slot 0), every iteration idles to its slot.
    let slow = run(&topo, std::slice::from_ref(&job), &mut Paced { period_ms: 1.2 * alone });
    for (i, ms) in slow.jobs[0].recorded_iteration_ms().iter().enumerate().skip(1) {
        assert!((ms - 1.2 * alone).abs() < 1e-3, "iteration {i}: {ms} ms, slot {}", 1.2 * alone);
    }
    // Slots of 0.9a: iterations 1-4 become due 0.1a, 0.2a, 0.3a, 0.4a after
    // a slot began (less than half a slot: late), so each starts at once and
    // the job runs as if unpaced.
    let fast = run(&topo, std::slice::from_ref(&job), &mut Paced { period_ms: 0.9 * alone });
    assert!(
        fast.jobs[0].recorded_iteration_ms().iter().all(|ms| (ms - alone).abs() < 1e-3),
        "{:?}",
        fast.jobs[0].recorded_iteration_ms()
    );
}

#[test]
fn a_background_flow_halves_a_lone_job_flow_and_an_isolated_network_ignores_it() {
    let topo = two_racks();
    let job = JobSpec::new("v", "vgg19", 64, 2, Work::Iterations(3), 0.0);
    // Host 0's uplink (host → leaf) carries an endless 50 Gbit/s flow.
    let uplink = topo.out_links(0)[0];
    let go = |isolated: bool| {
        let topo: &'static Topology = Box::leak(Box::new(topo.clone()));
        let cfg = SimConfig { background: vec![(uplink, 50.0)], record_iterations: true, ..SimConfig::default() };
        let mut sim = Simulation::new(topo, std::slice::from_ref(&job), cfg, isolated);
        sim.run(&mut Fixed { hosts: vec![vec![(0, 1), (2, 1)]], shifts: vec![0.0] }, &mut |_, _| {});
        sim
    };
    let (contended, isolated) = (go(false), go(true));
    let shape = &contended.jobs[0].shape;
    let (compute, comm) = (shape.compute_ms(), shape.network_ms());
    // Max-min: the job's flow out of host 0 gets 25 of 50 Gbit/s; the ring
    // waits for it, so communication takes twice as long.
    assert!((contended.jobs[0].recorded_iteration_ms()[1] - (compute + 2.0 * comm)).abs() < 1e-3);
    assert!((isolated.jobs[0].recorded_iteration_ms()[1] - (compute + comm)).abs() < 1e-3);
    // The simulation still ends when the job does.
    assert_eq!(contended.jobs[0].status, Status::Finished);
    assert!(contended.now_ns() < 10_000_000_000);
}

/// Places job 0 on hosts 0, 8, 16 (three racks) and throttles it; with
/// `spread`, routes each ring flow over every spine, equally.
struct Throttled(Option<f64>, bool);

impl Policy for Throttled {
    fn name(&self) -> String {
        "throttled".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue
            .iter()
            .flat_map(|q| {
                let ring = [0, 8, 16];
                let routes = (0..ring.len()).filter(|_| self.1).map(move |i| {
                    let paths = view.topology.paths(ring[i], ring[(i + 1) % ring.len()]).len();
                    Decision::Route { job: q.id, flow: i, paths: (0..paths).collect() }
                });
                [
                    Decision::Place { job: q.id, hosts: vec![(0, 1), (8, 1), (16, 1)] },
                    Decision::Throttle { job: q.id, gbps: self.0 },
                ]
                .into_iter()
                .chain(routes)
            })
            .collect()
    }
}

#[test]
fn foresight_profiles_are_the_job_alone_at_each_throttle() {
    // FORESIGHT profiles each job alone at several rates; orrery derives them
    // from the shape, which must equal what the simulator runs alone.
    use orrery_policy::foresight::logical::LogicalNetwork;
    use orrery_policy::foresight::profile::profile;
    let job = JobSpec::new("v", "vgg19", 32, 3, Work::Iterations(3), 0.0);
    let hosts = [(0, 1), (8, 1), (16, 1)];
    // FORESIGHT's cluster at 100 Gbit/s, unspread, at three rates. Then
    // under 50 Gbit/s leaf-spine links, where one path caps a flow at half
    // its NIC; spread over both spines (as FORESIGHT's subflows route it) it
    // runs at the NIC's 100, which the spread profile assumes.
    let slow = LeafSpine {
        racks: 3,
        hosts_per_rack: 8,
        spines: 2,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 100.0,
        uplink_gbps: 50.0,
    }
    .build("slow")
    .expect("valid");
    let fast = orrery_model::setups::foresight(2);
    let cases = [
        (&fast, false, None),
        (&fast, false, Some(50.0)),
        (&fast, false, Some(25.0)),
        (&slow, false, None),
        (&slow, true, None),
        (&slow, true, Some(75.0)),
    ];
    for (topo, spread, throttle) in cases {
        let net = LogicalNetwork::of(topo).expect("leaf-spine");
        let sim = run(topo, std::slice::from_ref(&job), &mut Throttled(throttle, spread));
        let p = profile(topo, &net, &job, &hosts, throttle, spread).expect("profile");
        let simulated = sim.jobs[0].recorded_iteration_ms()[1];
        assert!(
            (simulated - p.length_ms).abs() < 1e-3,
            "{}, spread {spread}, {throttle:?}: simulated {simulated} vs profile {}",
            topo.name,
            p.length_ms
        );
        // All three ring flows cross racks.
        assert_eq!(p.flows.len(), 3);
    }
}

/// Preempts whatever runs and places whatever waits, every time it is asked:
/// two jobs swap places forever within one instant.
struct Thrash;

impl Policy for Thrash {
    fn name(&self) -> String {
        "thrash".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let mut out: Vec<Decision> = view.running.iter().map(|r| Decision::Preempt { job: r.id }).collect();
        out.extend(view.queue.iter().take(1).map(|q| Decision::Place { job: q.id, hosts: vec![(0, 1)] }));
        out
    }
}

#[test]
fn a_policy_that_preempts_in_a_cycle_is_cut_off_not_a_stack_overflow() {
    let topo = two_racks();
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(3), 0.0),
        JobSpec::new("b", "resnet50", 32, 1, Work::Iterations(3), 0.0),
    ];
    let topo: &'static Topology = Box::leak(Box::new(topo));
    let mut sim = Simulation::new(
        topo,
        &jobs,
        SimConfig { max_time_s: Some(5.0), record_iterations: true, ..Default::default() },
        false,
    );
    sim.run(&mut Thrash, &mut |_, _| {});
    // Every instant with a waiting job is cut after 16 rounds of swapping.
    assert!(sim.reschedules_cut >= 1);
    assert!(sim.jobs.iter().map(|j| j.preemptions).sum::<u32>() >= 16);
}

/// Places every job on one GPU of host 0, whatever it asked for.
struct OneGpu;

impl Policy for OneGpu {
    fn name(&self) -> String {
        "one-gpu".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue.iter().take(1).map(|q| Decision::Place { job: q.id, hosts: vec![(0, 1)] }).collect()
    }
}

#[test]
fn gpu_time_counts_the_gpus_a_job_held_not_those_it_asked_for() {
    // An elastic placement: 4 workers asked, 1 GPU given (Pollux resizes so).
    let topo = two_racks();
    let jobs = [JobSpec::new("e", "resnet50", 32, 4, Work::Iterations(10), 0.0)];
    let sim = run(&topo, &jobs, &mut OneGpu);
    let j = &sim.jobs[0];
    assert_eq!(j.status, Status::Finished);
    assert!((j.gpu_s - j.run_ns as f64 / 1e9).abs() < 1e-9, "{} vs {}", j.gpu_s, j.run_ns);
    let m = orrery_sim::metrics::metrics(&sim, |_| true);
    assert!(m.gpu_util <= 1.0 && m.gpu_util > 0.0, "{}", m.gpu_util);
}
