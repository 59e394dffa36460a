//! LLM jobs as device meshes in the simulator (issue 66): the job described
//! by its model and `parallelism` alone, and its collectives on the links
//! they belong on.

use orrery_model::mesh::Mesh;
use orrery_model::placed::{place, transfers};
use orrery_model::setups;
use orrery_model::{JobSpec, Segment, Work};
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

fn llama70b(iterations: u64) -> JobSpec {
    let json = r#"{"id": "llama", "model": "llama3-70b", "work": {"iterations": 0}, "arrival_s": 0,
                   "parallelism": {"tp": 8, "pp": 4, "dp": 2, "microbatches": 16}}"#;
    let mut job: JobSpec = serde_json::from_str(json).expect("the issue's job format");
    job.work = Work::Iterations(iterations);
    job
}

#[test]
fn a_mesh_job_given_by_model_and_parallelism_has_its_gpus_and_passes_the_checks() {
    let job = llama70b(10);
    assert_eq!(job.workers, 64, "tp·pp·dp filled in");
    assert_eq!(job.check(), Ok(()));
    let mut wrong = job.clone();
    wrong.workers = 32;
    assert_eq!(wrong.check().map_err(|b| b.field), Err("workers".to_string()));
    wrong = job.clone();
    wrong.parallelism = Some(Mesh { tp: 3, pp: 4, dp: 2, ..Mesh::default() });
    wrong.workers = 24;
    let bad = wrong.check().expect_err("tp 3 does not divide 64 heads");
    assert_eq!(bad.field, "parallelism");
    assert!(bad.expected.contains("64 attention heads"), "{}", bad.expected);
}

#[test]
fn tensor_parallel_flows_stay_in_their_host_and_data_parallel_rings_cross_hosts() {
    let topo = setups::h100().expect("builds");
    let job = llama70b(10);
    let hosts: Vec<_> = (0..8).map(|h| (h, 8)).collect();
    let placed = place(&topo, &job, &hosts).expect("placed");
    let mut kinds = 0;
    for seg in &placed.shape.segments {
        let Segment::Comm { collective, payload_bytes, group, hosts, .. } = *seg else { continue };
        let flows = transfers(&placed.workers, collective, payload_bytes, group);
        match group.stride {
            // TP: 8 rings of 8 inside each host.
            1 => {
                assert_eq!(hosts, 1);
                assert_eq!(flows.len(), 64);
                assert!(flows.iter().all(|(a, b, _)| a == b));
            }
            // DP: ranks 8 apart, the other replica's host; 64 flows.
            8 => {
                assert_eq!(flows.len(), 64);
                assert!(flows.iter().all(|(a, b, _)| a != b && a.abs_diff(*b) == 1));
            }
            // PP: stages 16 ranks (two hosts) apart, both directions.
            16 => {
                assert_eq!(flows.len(), 16 * (2 * 3));
                assert!(flows.iter().all(|(a, b, _)| a.abs_diff(*b) == 2));
            }
            s => panic!("unexpected group stride {s}"),
        }
        kinds |= 1 << group.stride.trailing_zeros();
    }
    assert_eq!(kinds, 0b11001, "TP, DP and PP segments all present");
}

#[test]
fn a_mesh_job_alone_runs_at_its_shapes_period() {
    let topo = setups::h100().expect("builds");
    let job = llama70b(5);
    let hosts: Vec<_> = (0..8).map(|h| (h, 8)).collect();
    let period_ms = place(&topo, &job, &hosts).expect("placed").shape.period_ms();
    let jobs = [job];
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    let mut policy = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
    sim.run(policy.as_mut(), &mut |_, _| {});
    assert_eq!(sim.jobs[0].status, Status::Finished);
    let run_ms = (sim.jobs[0].finish_ns.expect("finished") - sim.jobs[0].first_start_ns.expect("started")) as f64 / 1e6;
    // Alone, every flow gets its rate: 5 iterations of the shape, within 1%
    // (the simulator's compute noise is off by default).
    assert!((run_ms / (5.0 * period_ms) - 1.0).abs() < 0.01, "{run_ms} ms vs 5 × {period_ms} ms");
}

/// Places job 0 on `hosts`, once.
struct PlaceOn(Vec<(usize, u32)>);

impl orrery_policy::Policy for PlaceOn {
    fn name(&self) -> String {
        "place-on".into()
    }
    fn schedule(&mut self, view: &orrery_policy::ClusterView<'_>) -> Vec<orrery_policy::Decision> {
        view.queue.iter().map(|q| orrery_policy::Decision::Place { job: q.id, hosts: self.0.clone() }).collect()
    }
}

#[test]
fn an_elastic_mesh_on_half_its_replicas_runs_the_same_iterations_each_longer() {
    // Llama 3 70B at TP 8 x PP 4 x DP 2 (16 micro-batches), dp_min 1: on
    // 32 GPUs it is one replica at 32 micro-batches for the same global
    // batch, so the same 5 iterations, each nearly twice the compute.
    let topo = setups::h100().expect("builds");
    let mut job = llama70b(5);
    job.parallelism = Some(Mesh { tp: 8, pp: 4, dp: 2, microbatches: 16, dp_min: 1, ..Mesh::default() });
    assert_eq!(job.check(), Ok(()));
    let full: Vec<_> = (0..8).map(|h| (h, 8)).collect();
    let half: Vec<_> = (0..4).map(|h| (h, 8)).collect();
    let at = |hosts: &[(usize, u32)]| place(&topo, &job, hosts).expect("placed").shape.period_ms();
    let (full_ms, half_ms) = (at(&full), at(&half));
    // Twice the micro-batches: compute doubles, the bubble (3 of 16 or 32
    // micro-batches' time) does not, no DP all-reduce on one replica.
    assert!((1.7..2.0).contains(&(half_ms / full_ms)), "{half_ms} ms vs {full_ms} ms");
    let jobs = [job.clone()];
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    sim.run(&mut PlaceOn(half.clone()), &mut |_, _| {});
    assert_eq!(sim.jobs[0].status, Status::Finished);
    assert_eq!(sim.jobs[0].iterations_done, 5);
    let run_ms = (sim.jobs[0].finish_ns.expect("finished") - sim.jobs[0].first_start_ns.expect("started")) as f64 / 1e6;
    assert!((run_ms / (5.0 * half_ms) - 1.0).abs() < 0.01, "{run_ms} ms vs 5 × {half_ms} ms");
    // 24 GPUs is not a whole pipeline cell (TP 8 x PP 4): refused, the job waits.
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    sim.run(&mut PlaceOn((0..3).map(|h| (h, 8)).collect()), &mut |_, _| {});
    assert_eq!(sim.jobs[0].status, Status::Queued);
    assert!(sim.invalid_decisions > 0);
}

#[test]
fn on_rails_each_data_parallel_and_pipeline_flow_stays_on_its_gpus_rail() {
    // The same mesh on h100-rails' first 8 hosts (one unit): every rank's
    // peers in DP and PP sit at its own GPU index on another host, so each
    // flow leaves on its own GPU's NIC, crosses that rail's switch and
    // nothing else; TP stays inside the host.
    let topo = setups::h100_rails().expect("builds");
    let job = llama70b(10);
    let hosts: Vec<_> = (0..8).map(|h| (h, 8)).collect();
    let placed = place(&topo, &job, &hosts).expect("placed");
    let mut crossing = std::collections::BTreeSet::new();
    for seg in &placed.shape.segments {
        let Segment::Comm { collective, payload_bytes, group, .. } = *seg else { continue };
        for (s, d, _) in orrery_model::placed::rank_transfers(placed.workers.len(), collective, payload_bytes, group) {
            let (a, b) = (placed.workers[s], placed.workers[d]);
            let paths = orrery_model::placed::rank_paths(&topo, &placed.workers, &placed.gpus, s, d);
            if a == b {
                assert!(paths.is_empty(), "TP on NVLink");
                continue;
            }
            crossing.insert((s, d));
            let k = placed.gpus[s] as usize;
            assert_eq!(placed.gpus[d] as usize, k, "peers at one index");
            assert_eq!(paths.len(), 1);
            let path = &paths[0];
            assert_eq!(path.len(), 2, "one rail switch");
            assert_eq!(path[0], topo.out_links(a)[k], "out on its own NIC");
            assert_eq!(topo.links[path[1]].to, b);
            assert_eq!(topo.node_name(topo.links[path[0]].to), format!("su0-rail{k}"));
        }
    }
    // Pairs of ranks talking across hosts: DP 64 (each rank to its replica
    // peer, 8 ranks and one host away),
    // PP 16 ranks a boundary both ways at 3 boundaries.
    assert_eq!(crossing.len(), 64 + 16 * 2 * 3);
}
