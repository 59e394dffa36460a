//! The longest wait over time alone (`max_wait_over_alone`, issue 67's bound
//! of ten) and the mean time alone (`avg_alone_s`, the mean JCT no policy
//! running jobs at their request beats): a job queued behind another for
//! its whole run.

mod common;

use common::two_hosts;
use orrery_model::{JobSpec, Work};
use orrery_sim::engine::Status;
use orrery_sim::{SimConfig, Simulation};

/// Two two-worker jobs on two one-GPU hosts under FIFO: one of 200
/// iterations at 0 s, one of 100 at 1 s, which waits for the first.
fn long_then_short_under_fifo(topo: &orrery_model::Topology) -> Simulation<'_> {
    let jobs = [
        JobSpec::new("long", "resnet50", 32, 2, Work::Iterations(200), 0.0),
        JobSpec::new("short", "resnet50", 32, 2, Work::Iterations(100), 1.0),
    ];
    let mut sim = Simulation::new(topo, &jobs, SimConfig { seed: 1, ..Default::default() }, false);
    let mut policy = orrery_policy::compose::by_name("fifo", 1).expect("a policy");
    sim.run(policy.as_mut(), &mut |_, _| {});
    sim
}

#[test]
fn the_longest_wait_is_the_queued_jobs_wait_over_its_time_alone() {
    // Two one-GPU hosts. A two-worker job of 200 iterations arrives at 0 s,
    // one of 100 at 1 s: FIFO starts the second when the first ends, so it
    // waits the first's run less 1 s.
    let topo = two_hosts();
    let sim = long_then_short_under_fifo(&topo);
    assert!(sim.jobs.iter().all(|j| j.status == Status::Finished));
    let (long, short) = (&sim.jobs[0], &sim.jobs[1]);
    let s = |ns: u64| ns as f64 / 1e9;
    let waited = s(short.finish_ns.expect("finished")) - 1.0 - s(short.run_ns);
    assert!((waited - (s(long.finish_ns.expect("finished")) - 1.0)).abs() < 1e-6, "{waited}");
    let alone = 100.0 * short.isolated_iter_ms / 1e3;
    let m = orrery_sim::metrics::metrics(&sim, |_| true);
    assert!(
        (m.max_wait_over_alone - waited / alone).abs() < 1e-9,
        "{} against {}",
        m.max_wait_over_alone,
        waited / alone
    );
    // The long job runs twice the short one's time alone: (2·alone − 1) / alone.
    let expected = (2.0 * alone - 1.0) / alone;
    assert!((m.max_wait_over_alone - expected).abs() < 0.01, "{} against {expected}", m.max_wait_over_alone);
}

#[test]
fn the_mean_time_alone_bounds_the_mean_jct_and_differs_from_it_by_the_mean_wait() {
    // Each job runs its time alone (a two-worker ring on the two hosts), so
    // the mean JCT is the mean time alone plus half the short job's wait,
    // and the bound is (200 + 100) / 2 iterations alone.
    let topo = two_hosts();
    let sim = long_then_short_under_fifo(&topo);
    let m = orrery_sim::metrics::metrics(&sim, |_| true);
    let iso_s = sim.jobs[0].isolated_iter_ms / 1e3;
    assert!((m.avg_alone_s - 150.0 * iso_s).abs() < 1e-9, "{} against {}", m.avg_alone_s, 150.0 * iso_s);
    let short = &sim.jobs[1];
    let waited = (short.finish_ns.expect("finished") - short.run_ns) as f64 / 1e9 - 1.0;
    assert!(m.avg_jct_s >= m.avg_alone_s);
    assert!(
        (m.avg_jct_s - (m.avg_alone_s + waited / 2.0)).abs() < 1e-6,
        "{} against {}",
        m.avg_jct_s,
        m.avg_alone_s + waited / 2.0
    );
}
