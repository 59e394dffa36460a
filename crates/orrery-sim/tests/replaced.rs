//! A job placed again (after a preemption, or resized) is measured afresh
//! on its new placement: fast-forwarded or not, it runs at that
//! placement's speed, and the links carry what its flows and the others'
//! send, each once.

use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Topology, Work};
use orrery_policy::{ClusterView, Decision, Policy};
use orrery_sim::{SimConfig, Simulation};

/// Two racks of three one-GPU hosts under one spine: 50 Gbit/s NICs and
/// uplinks of `uplink_gbps`.
fn two_racks(uplink_gbps: f64) -> Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 3,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a100".into(),
        host_gbps: 50.0,
        uplink_gbps,
    }
    .build("two-racks")
    .expect("valid")
}

/// Places job 0 across the racks. When job 1 arrives, preempts job 0 and
/// places it again inside the first rack, and places job 1 across the
/// racks, on the uplinks job 0 left.
struct MoveInsideTheRack;

impl Policy for MoveInsideTheRack {
    fn name(&self) -> String {
        "move-inside-the-rack".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        let racks = view.topology.racks();
        let (rack0, rack1) = (view.topology.hosts_in_rack(racks[0]), view.topology.hosts_in_rack(racks[3]));
        let queued = |id| view.queue.iter().any(|q| q.id == id);
        if queued(0) && view.running.is_empty() {
            return vec![Decision::Place { job: 0, hosts: vec![(rack0[0], 1), (rack1[0], 1)] }];
        }
        if queued(1) {
            return vec![
                Decision::Preempt { job: 0 },
                Decision::Place { job: 0, hosts: vec![(rack0[0], 1), (rack0[1], 1)] },
                Decision::Place { job: 1, hosts: vec![(rack0[2], 1), (rack1[1], 1)] },
            ];
        }
        Vec::new()
    }
}

/// The Gbit the leaves' uplinks carried in a run (over one second, a
/// link's mean utilisation times its rate is the Gbit it carried).
fn uplink_gbit(sim: &Simulation<'_>) -> f64 {
    orrery_sim::metrics::link_rows(sim, 1_000_000_000)
        .iter()
        .filter(|l| l.from.starts_with("leaf") && l.to.starts_with("spine"))
        .map(|l| l.mean_util * l.gbps)
        .sum()
}

/// What a run gives: job 0's iterations (count, mean ms) and end (s), and
/// the Gbit the leaves' uplinks carried.
struct Outcome {
    iterations: u64,
    mean_ms: f64,
    end_s: f64,
    uplink_gbit: f64,
}

fn run(topo: &Topology, skip: bool, restart_penalty_s: f64) -> Outcome {
    let jobs = [
        JobSpec::new("moved", "vgg19", 32, 2, Work::Iterations(600), 0.0),
        JobSpec::new("across", "vgg19", 32, 2, Work::Iterations(150), 20.0),
    ];
    let cfg = SimConfig { seed: 1, skip, restart_penalty_s, ..Default::default() };
    let mut sim = Simulation::new(topo, &jobs, cfg, false);
    sim.run(&mut MoveInsideTheRack, &mut |_, _| {});
    let moved = &sim.jobs[0];
    assert_eq!(moved.preemptions, 1, "the script moves it once");
    let h = &moved.iteration_ms;
    Outcome {
        iterations: h.len(),
        mean_ms: h.sum() / h.len() as f64,
        end_s: moved.finish_ns.expect("it finishes") as f64 / 1e9,
        uplink_gbit: uplink_gbit(&sim),
    }
}

#[test]
fn a_job_placed_again_is_fast_forwarded_at_its_new_speed_and_on_its_new_links() {
    // One ring's flows leave the uplinks headroom (they run at their NICs'
    // rate, and a job beside them is not held up by them).
    let topo = two_racks(100.0);
    // With and without a restart's wait (the lab's default is 10 s; the
    // wait falls in the first iteration on the new placement).
    for penalty_s in [0.0, 10.0] {
        let detailed = run(&topo, false, penalty_s);
        let skipped = run(&topo, true, penalty_s);
        // The fast-forward draws the iterations the detailed run simulates.
        assert_eq!(detailed.iterations, skipped.iterations);
        assert!(
            (skipped.mean_ms / detailed.mean_ms - 1.0).abs() < 0.005,
            "penalty {penalty_s} s: mean iteration {:.1} ms fast-forwarded against {:.1} ms in detail",
            skipped.mean_ms,
            detailed.mean_ms
        );
        assert!(
            (skipped.end_s / detailed.end_s - 1.0).abs() < 0.005,
            "penalty {penalty_s} s: ends at {:.1} s against {:.1} s",
            skipped.end_s,
            detailed.end_s
        );
        // After the move only job 1 crosses the uplinks: credited to the
        // moved job as well, its traffic would count twice.
        assert!(
            (skipped.uplink_gbit / detailed.uplink_gbit - 1.0).abs() < 0.01,
            "penalty {penalty_s} s: uplinks carried {:.1} Gbit fast-forwarded against {:.1} in detail",
            skipped.uplink_gbit,
            detailed.uplink_gbit
        );
    }
}

/// Places each job on the hosts given when it is queued.
struct Pinned(Vec<Vec<(usize, u32)>>);

impl Policy for Pinned {
    fn name(&self) -> String {
        "pinned".into()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue.iter().map(|q| Decision::Place { job: q.id, hosts: self.0[q.id].clone() }).collect()
    }
}

/// Two rings across the racks, one with short iterations and one with a
/// long all-reduce: on uplinks with headroom their flows overlap without
/// meeting in a bottleneck, so each runs as it would alone and is
/// fast-forwarded, credited per iteration with its own traffic only.
#[test]
fn a_ring_fast_forwarded_beside_another_on_links_with_headroom_is_credited_its_own_traffic() {
    // Both rings' flows together leave the uplinks headroom.
    let topo = two_racks(200.0);
    let racks = topo.racks();
    let (rack0, rack1) = (topo.hosts_in_rack(racks[0]), topo.hosts_in_rack(racks[3]));
    let uplinks = |skip: bool| {
        // The short ring arrives 100 ms in, while the long one's first
        // all-reduce runs: its first iterations begin with the long ring's
        // flows already on the uplinks.
        let jobs = [
            JobSpec::new("short", "resnet50", 32, 2, Work::Iterations(3000), 0.1),
            JobSpec::new("long", "vgg19", 32, 2, Work::Iterations(300), 0.0),
        ];
        let cfg = SimConfig { seed: 1, skip, jitter: 0.02, ..Default::default() };
        let mut sim = Simulation::new(&topo, &jobs, cfg, false);
        let mut pinned = Pinned(vec![vec![(rack0[0], 1), (rack1[0], 1)], vec![(rack0[1], 1), (rack1[1], 1)]]);
        sim.run(&mut pinned, &mut |_, _| {});
        (uplink_gbit(&sim), sim.jobs.iter().map(|j| j.skipped_iterations).sum::<u64>())
    };
    let (detailed, _) = uplinks(false);
    let (fast, skipped) = uplinks(true);
    assert!(skipped > 1000, "the fast-forward ran {skipped} iterations");
    assert!(
        (fast / detailed - 1.0).abs() < 0.01,
        "uplinks carried {fast:.1} Gbit fast-forwarded against {detailed:.1} in detail"
    );
}
