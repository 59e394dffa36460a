//! Rail-optimised fabrics in the simulator (issue 66, item 2): which GPUs
//! of a host a job holds decides which NICs its flows leave on.

use orrery_model::rails::{GpuAllocation, RailLeafSpine};
use orrery_model::{JobSpec, Segment, Topology, Work};
use orrery_policy::baseline::Pinned;
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

/// One unit of three hosts, eight GPUs each, one 100 Gbit/s NIC per GPU on
/// its rail switch, one spine.
fn unit_of_three() -> Topology {
    RailLeafSpine::h100_unit(3, 100.0).build("rails").expect("valid")
}

/// Llama 3 8B at TP 4 × DP 2: two replicas of four GPUs, each TP rank's
/// gradient ring with its peer four ranks on, on the other host.
fn tp4_dp2(id: &str, iterations: u64) -> JobSpec {
    let json = format!(
        r#"{{"id": "{id}", "model": "llama3-8b", "work": {{"iterations": {iterations}}}, "arrival_s": 0,
            "parallelism": {{"tp": 4, "dp": 2, "microbatches": 2}}}}"#
    );
    let mut job: JobSpec = serde_json::from_str(&json).expect("a mesh job");
    job.work = Work::Iterations(iterations);
    job
}

/// Runs `a` on hosts 0 and 1 and `b` on hosts 0 and 2, four GPUs on each,
/// started together; returns each job's mean iteration over its time alone.
fn slowdowns(gpus: GpuAllocation) -> [f64; 2] {
    let topo = unit_of_three();
    let jobs = [tp4_dp2("a", 20), tp4_dp2("b", 20)];
    let pins = [("a".to_string(), vec![(0, 4), (1, 4)]), ("b".to_string(), vec![(0, 4), (2, 4)])];
    let mut policy = Pinned { pins: pins.into_iter().collect(), label: None };
    let cfg = SimConfig { seed: 1, gpus, ..Default::default() };
    let mut sim = Simulation::new(&topo, &jobs, cfg, false);
    sim.run(&mut policy, &mut |_, _| {});
    [0, 1].map(|j| {
        let job = &sim.jobs[j];
        assert_eq!(job.status, Status::Finished);
        job.iteration_ms.sum() / job.iteration_ms.len() as f64 / job.isolated_iter_ms
    })
}

#[test]
fn ranks_on_other_gpus_than_their_peers_send_over_another_jobs_nics() {
    // Lowest free: a holds GPUs 0-3 of hosts 0 and 1; b gets 4-7 of host 0
    // and 0-3 of host 2. b's flows to host 2 go to rails 0-3, so they leave
    // host 0 on NICs 0-3, the ones a's ring to host 1 leaves on: the two
    // rings split those four NICs and both all-reduces take twice as long.
    // Started together, they meet every iteration: each takes 1 + its
    // cross-host share of the iteration.
    let placed = orrery_model::placed::place(&unit_of_three(), &tp4_dp2("a", 1), &[(0, 4), (1, 4)]).expect("placed");
    let cross_ms: f64 = placed
        .shape
        .segments
        .iter()
        .filter(|s| matches!(s, Segment::Comm { hosts, .. } if *hosts > 1))
        .map(Segment::duration_ms)
        .sum();
    let expected = 1.0 + cross_ms / placed.shape.period_ms();
    assert!(expected > 1.2, "a DP all-reduce worth meeting: {expected}");
    let [a, b] = slowdowns(GpuAllocation::LowestFree);
    for s in [a, b] {
        assert!((s / expected - 1.0).abs() < 0.01, "lowest free: {s:.4} against {expected:.4}");
    }
    // Rail-aligned: b gets 4-7 on both hosts, sends on rails 4-7 only, and
    // neither job meets the other on any link.
    let [a, b] = slowdowns(GpuAllocation::RailAligned);
    assert!((a - 1.0).abs() < 1e-6 && (b - 1.0).abs() < 1e-6, "rail-aligned: {a}, {b}");
}
