//! `depends_on` (Metronome's AppGroup dependencies, Diktyo's
//! TopologicalSort): a job is offered to the policy only once every job it
//! depends on has started, and is refused when one of them is.

mod common;

use common::two_hosts;
use orrery_model::{JobSpec, Work};
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

fn job(id: &str, arrival_s: f64, depends_on: &[&str]) -> JobSpec {
    let mut j = JobSpec::new(id, "resnet50", 32, 1, Work::Iterations(200), arrival_s);
    j.depends_on = depends_on.iter().map(|d| d.to_string()).collect();
    j
}

fn start_s(sim: &Simulation<'_>, i: usize) -> f64 {
    sim.jobs[i].first_start_ns.expect("started") as f64 / 1e9
}

#[test]
fn a_job_waits_for_its_dependencies_to_start_without_blocking_the_queue() {
    // The trainer arrives first but depends on the loader, which arrives at
    // 20 s. Without the rule FIFO starts the trainer at 0 s. With it, the
    // trainer is not offered until the loader starts, and the job arriving
    // at 5 s is not held behind it (a job that is not offered does not
    // block the head of FIFO's queue).
    let topo = two_hosts();
    let jobs = [job("trainer", 0.0, &["loader"]), job("other", 5.0, &[]), job("loader", 20.0, &[])];
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    let mut policy = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
    sim.run(policy.as_mut(), &mut |_, _| {});
    assert!(sim.jobs.iter().all(|j| j.status == Status::Finished));
    assert!((start_s(&sim, 1) - 5.0).abs() < 1e-6, "other starts on arrival: {}", start_s(&sim, 1));
    let (trainer, loader) = (start_s(&sim, 0), start_s(&sim, 2));
    assert!(loader >= 20.0 - 1e-6, "{loader}");
    assert!(trainer >= loader, "the trainer started at {trainer} s, before the loader at {loader} s");
}

#[test]
fn a_job_whose_dependency_is_refused_is_refused() {
    // The loader asks for three GPUs on a two-GPU cluster: FIFO refuses it,
    // and the trainer that depends on it can never start.
    let topo = two_hosts();
    let mut big = job("loader", 0.0, &[]);
    big.workers = 3;
    let jobs = [big, job("trainer", 1.0, &["loader"])];
    let mut sim = Simulation::new(&topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    let mut policy = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
    sim.run(policy.as_mut(), &mut |_, _| {});
    assert_eq!(sim.jobs[0].status, Status::Rejected);
    assert_eq!(sim.jobs[1].status, Status::Rejected);
}
