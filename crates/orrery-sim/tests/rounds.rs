//! Decisions in periodic rounds (`SimConfig::schedule_period_s`, Volcano's
//! session period): an arrival or a departure waits for the next multiple of
//! the period, and the events until then share one decision.

mod common;

use common::two_hosts;
use orrery_model::{JobSpec, Work};
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

fn run(jobs: &[JobSpec], period: Option<f64>) -> Vec<(f64, f64)> {
    let topo = two_hosts();
    let cfg = SimConfig { seed: 1, schedule_period_s: period, ..Default::default() };
    let mut sim = Simulation::new(&topo, jobs, cfg, false);
    let mut policy = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
    sim.run(policy.as_mut(), &mut |_, _| {});
    assert!(sim.jobs.iter().all(|j| j.status == Status::Finished));
    let s = |ns: Option<u64>| ns.expect("ran") as f64 / 1e9;
    sim.jobs.iter().map(|j| (s(j.first_start_ns), s(j.finish_ns))).collect()
}

#[test]
fn arrivals_wait_for_the_next_round_and_share_it() {
    // Two one-GPU jobs at 0.2 s and 0.7 s on two one-GPU hosts: at each
    // arrival without rounds, both at 1 s with rounds of 1 s.
    let jobs = [
        JobSpec::new("a", "resnet50", 32, 1, Work::Iterations(50), 0.2),
        JobSpec::new("b", "resnet50", 32, 1, Work::Iterations(50), 0.7),
    ];
    let at_once = run(&jobs, None);
    assert!((at_once[0].0 - 0.2).abs() < 1e-9 && (at_once[1].0 - 0.7).abs() < 1e-9, "{at_once:?}");
    let rounds = run(&jobs, Some(1.0));
    assert!(rounds.iter().all(|(start, _)| (start - 1.0).abs() < 1e-9), "{rounds:?}");
    // Alone on its host, each runs as long either way.
    for (a, r) in at_once.iter().zip(&rounds) {
        assert!(((a.1 - a.0) - (r.1 - r.0)).abs() < 1e-6, "{a:?} against {r:?}");
    }
}

#[test]
fn a_job_queued_for_gpus_starts_at_the_round_after_they_free() {
    // A two-worker job holds both GPUs from 0 s (a round falls at 0 s); the
    // next one, arriving at 0.5 s, starts when the first ends without rounds,
    // and at the next multiple of 0.25 s with rounds of 0.25 s.
    let jobs = [
        JobSpec::new("first", "resnet50", 32, 2, Work::Iterations(30), 0.0),
        JobSpec::new("next", "resnet50", 32, 2, Work::Iterations(30), 0.5),
    ];
    let at_once = run(&jobs, None);
    let end = at_once[0].1;
    assert!((at_once[1].0 - end).abs() < 1e-9, "{at_once:?}");
    let rounds = run(&jobs, Some(0.25));
    assert_eq!(rounds[0], at_once[0], "the round at 0 s starts the first job at once");
    let next_round = (end / 0.25).ceil() * 0.25;
    assert!(next_round > end + 1e-6, "the first job ends between rounds ({end} s)");
    assert!((rounds[1].0 - next_round).abs() < 1e-9, "{rounds:?}, round at {next_round} s");
}
