//! Tests of [`super`]: each names the behaviour it checks.

use super::*;
use crate::{QueuedJob, RunningJob};
use orrery_model::setups::LeafSpine;
use orrery_model::{JobSpec, Priority, Topology, Work};

fn cluster() -> Topology {
    // Two racks of two single-GPU hosts, 25 Gbit/s links.
    LeafSpine {
        racks: 2,
        hosts_per_rack: 2,
        spines: 1,
        gpus_per_host: 1,
        gpu_type: "a30".into(),
        host_gbps: 25.0,
        uplink_gbps: 25.0,
    }
    .build("t")
    .expect("valid")
}

fn placed(decisions: &[Decision], job: JobId) -> Option<Vec<(HostId, u32)>> {
    decisions.iter().find_map(|d| match d {
        Decision::Place { job: j, hosts } if *j == job => Some(hosts.clone()),
        _ => None,
    })
}

#[test]
fn the_pods_of_a_job_land_close_together() {
    // Every node scores 100 (nothing else runs), so Eq. 19 decides: the
    // second pod goes to the host one hop from the first, not three.
    let t = cluster();
    let spec = JobSpec::new("a", "vgg16", 16, 2, Work::Iterations(10), 0.0);
    let view = ClusterView {
        now_s: 0.0,
        topology: &t,
        free_gpus: &[1, 1, 1, 1],
        queue: vec![QueuedJob::new(0, &spec, 0.0)],
        running: Vec::new(),
    };
    let d = Metronome::default().schedule(&view);
    let hosts = placed(&d, 0).expect("placed");
    let rack = |h: HostId| h / 2;
    assert_eq!(hosts.len(), 2);
    assert_eq!(rack(hosts[0].0), rack(hosts[1].0), "{hosts:?}");
}

/// Two racks of two hosts with two A30s each, 25 Gbit/s links.
fn two_racks_of_two() -> orrery_model::Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 2,
        spines: 1,
        gpus_per_host: 2,
        gpu_type: "a30".into(),
        host_gbps: 25.0,
        uplink_gbps: 25.0,
    }
    .build("t")
    .expect("valid")
}

#[test]
fn only_the_low_priority_newcomer_is_aligned() {
    // Two-GPU hosts. A high-priority VGG16 ring holds one GPU on h0 and on
    // h2; h1 and h3 are full, so a low-priority VGG16 ring must share h0's
    // and h2's links. It is placed there and aligned to the rotation the
    // node's circle gives it; the high-priority job is never moved (Eq. 16).
    let t = two_racks_of_two();
    let mut high = JobSpec::new("hi", "vgg16", 64, 2, Work::Iterations(100), 0.0);
    high.priority = Priority::High;
    let low = JobSpec::new("lo", "vgg16", 64, 2, Work::Iterations(100), 0.0);
    let hosts = [(0usize, 1u32), (2, 1)];
    let view = ClusterView {
        now_s: 5.0,
        topology: &t,
        free_gpus: &[1, 0, 1, 0],
        queue: vec![QueuedJob::new(1, &low, 0.0)],
        running: vec![RunningJob {
            iterations_done: 3,
            iteration_start_s: 4.9,
            progress: 0.03,
            service_gpu_s: 1.0,
            running_s: 0.5,
            ..RunningJob::new(0, &high, &hosts)
        }],
    };
    let d = Metronome::default().schedule(&view);
    let mut got = placed(&d, 1).expect("placed");
    got.sort_unstable();
    assert_eq!(got, vec![(0, 1), (2, 1)]);
    let aligned: Vec<(JobId, f64)> = d
        .iter()
        .filter_map(|d| if let Decision::Pace { job, offset_s, .. } = d { Some((*job, *offset_s)) } else { None })
        .collect();
    assert_eq!(aligned.len(), 1, "{d:?}");
    assert_eq!(aligned[0].0, 1, "only the low-priority job moves");
    // Its offset is measured from the reference job's current iteration start.
    assert!(aligned[0].1 >= 4.9);
}

const PAIR_HOSTS: [(HostId, u32); 2] = [(0, 1), (2, 1)];

/// The two rings of `only_the_low_priority_newcomer_is_aligned`, each
/// `iterations` long: "hi" (high priority) and "lo".
fn ring_pair(iterations: u64) -> (Topology, JobSpec, JobSpec) {
    let mut high = JobSpec::new("hi", "vgg16", 64, 2, Work::Iterations(iterations), 0.0);
    high.priority = Priority::High;
    let low = JobSpec::new("lo", "vgg16", 64, 2, Work::Iterations(iterations), 0.0);
    (two_racks_of_two(), high, low)
}

/// "lo" arrives at 5 s while "hi" runs (its iteration began at 4.9 s) on
/// the same hosts: the slot period Metronome paces "lo" at.
fn pace_low(m: &mut Metronome, t: &Topology, high: &JobSpec, low: &JobSpec) -> f64 {
    let view = ClusterView {
        now_s: 5.0,
        topology: t,
        free_gpus: &[1, 0, 1, 0],
        queue: vec![QueuedJob::new(1, low, 0.0)],
        running: vec![RunningJob { iteration_start_s: 4.9, ..RunningJob::new(0, high, &PAIR_HOSTS) }],
    };
    let d = m.schedule(&view);
    match d.iter().find(|d| matches!(d, Decision::Pace { job: 1, .. })) {
        Some(&Decision::Pace { period_ms, .. }) => period_ms,
        _ => panic!("paced: {d:?}"),
    }
}

/// `ring_pair` paced; then the low-priority one runs `factor` over its
/// slot for twelve iterations. The slot period, and the controller's
/// answers to the first six and the next six.
fn slow_after_pacing(m: &mut Metronome, factor: f64) -> (f64, Vec<Decision>, Vec<Decision>) {
    let (t, high, low) = ring_pair(100);
    let hosts = PAIR_HOSTS;
    let period_ms = pace_low(m, &t, &high, &low);
    let running_high = RunningJob { iteration_start_s: 4.9, ..RunningJob::new(0, &high, &hosts) };
    let view = ClusterView {
        now_s: 20.0,
        topology: &t,
        free_gpus: &[0, 0, 0, 0],
        queue: Vec::new(),
        running: vec![running_high, RunningJob { iteration_start_s: 19.5, ..RunningJob::new(1, &low, &hosts) }],
    };
    let mut answers = [Vec::new(), Vec::new()];
    for answer in &mut answers {
        for _ in 0..6 {
            *answer = m.on_iteration(&view, 1, Iteration::of(factor * period_ms));
        }
    }
    let [first, second] = answers;
    (period_ms, first, second)
}

/// `ring_pair` paced; then "hi" runs
/// `stretch` times its modelled period for `iterations` iterations,
/// from its 30th. The slot period, and every Pace the policy sends meanwhile
/// (slot period, offset).
fn reference_runs_long(m: &mut Metronome, stretch: f64, iterations: u64) -> (f64, Vec<(f64, f64)>) {
    let (t, high, low) = ring_pair(1000);
    let hosts = PAIR_HOSTS;
    let period_ms = pace_low(m, &t, &high, &low);
    let mut paces = Vec::new();
    for i in 0..iterations {
        // Iteration 30 + i of a reference that started at 4.9 s.
        let start_s = 4.9 + (30 + i) as f64 * stretch * period_ms / 1e3;
        let hi =
            RunningJob { iteration_start_s: start_s, iterations_done: 30 + i, ..RunningJob::new(0, &high, &hosts) };
        let lo = RunningJob { iteration_start_s: start_s, ..RunningJob::new(1, &low, &hosts) };
        let view = ClusterView {
            now_s: start_s + 0.4,
            topology: &t,
            free_gpus: &[0, 0, 0, 0],
            queue: Vec::new(),
            running: vec![hi, lo],
        };
        for d in m.on_iteration(&view, 0, Iteration::of(stretch * period_ms)) {
            if let Decision::Pace { job: 1, period_ms, offset_s } = d {
                paces.push((period_ms, offset_s));
            }
        }
    }
    (period_ms, paces)
}

#[test]
fn slots_follow_the_reference_s_measured_period_and_phase() {
    // "hi" really runs 4% over its modelled period, from its 30th
    // iteration on: 30 × 4% = 1.2 periods later than the slots say.
    let mut m = Metronome::default();
    let (model_ms, paces) = reference_runs_long(&mut m, 1.04, 20);
    assert_eq!(paces.len(), 2, "{paces:?}");
    let start = |i: f64| 4.9 + i * 1.04 * model_ms / 1e3;
    // First, with no estimate yet, only the phase: the slot keeps its
    // period and is re-anchored at the reference's next start, the end
    // of iteration 30 (0.2 of a period off, over the 5% tolerance).
    let (period_ms, offset_s) = paces[0];
    assert_eq!(period_ms, model_ms);
    assert!((start(31.0)..start(31.0) + period_ms / 1e3).contains(&offset_s), "{offset_s}");
    // After three measured iterations (the estimate's minimum) the
    // period too: 1.04 × the model's, anchored at the end of that
    // iteration plus the shift scaled alike; then they hold.
    let (period_ms, offset_s) = paces[1];
    assert!((period_ms / model_ms - 1.04).abs() < 1e-9, "{period_ms} against {model_ms}");
    assert!((start(33.0)..start(33.0) + period_ms / 1e3).contains(&offset_s), "{offset_s}");
    assert_eq!(m.retimings, 2);
    // The paper's open loop keeps the modelled slot.
    let mut open = Metronome { closed_loop: false, ..Metronome::default() };
    assert!(reference_runs_long(&mut open, 1.04, 20).1.is_empty());
    assert_eq!(open.name(), "metronome:open-loop");
    // A reference on time changes nothing.
    let mut on_time = Metronome::default();
    assert!(reference_runs_long(&mut on_time, 1.0, 20).1.is_empty());
}

#[test]
fn a_partner_held_in_step_by_its_slots_is_moved_out_of_the_reference_s_communication() {
    // The pair collides: "hi" takes its period P plus lo's offset `rel`
    // on the circle in every iteration, so there is no estimate and the
    // slots keep P. Anchored at hi's latest start T, lo's next slot
    // would be T + rel + P: hi's next start, in step again. Anchored
    // at hi's next start T + P + rel, lo's slot is `rel` after it.
    let mut m = Metronome::default();
    let (t, high, low) = ring_pair(1000);
    let hosts = PAIR_HOSTS;
    let model_ms = pace_low(&mut m, &t, &high, &low);
    let rel_ms = m.watched[&1].rel_ms;
    assert!(rel_ms > 0.05 * model_ms && rel_ms < 0.95 * model_ms, "lo's slot is inside hi's period: {rel_ms}");
    let collided_ms = model_ms + rel_ms;
    let start_s = 30.0;
    let hi = RunningJob { iteration_start_s: start_s, iterations_done: 30, ..RunningJob::new(0, &high, &hosts) };
    let lo = RunningJob { iteration_start_s: start_s, ..RunningJob::new(1, &low, &hosts) };
    let now_s = start_s + collided_ms / 1e3;
    let view = ClusterView { now_s, topology: &t, free_gpus: &[0, 0, 0, 0], queue: Vec::new(), running: vec![hi, lo] };
    let out = m.on_iteration(&view, 0, Iteration::of(collided_ms));
    let Some(&Decision::Pace { period_ms, offset_s, .. }) =
        out.iter().find(|d| matches!(d, Decision::Pace { job: 1, .. }))
    else {
        panic!("lo re-anchored: {out:?}")
    };
    assert_eq!(period_ms, model_ms);
    let phase_ms = ((offset_s - now_s) * 1e3).rem_euclid(period_ms);
    assert!((phase_ms - rel_ms).abs() < 1e-6, "lo's slot {phase_ms:.1} ms after hi's next start, not {rel_ms:.1}");
}

#[test]
fn a_job_that_stays_slow_after_a_pause_is_re_profiled_at_its_measured_period() {
    // 30% over its slot: the first time the controller pauses it (same
    // slot); when it trips again within two windows, its duty cycle has
    // changed, and it is re-profiled and paced at the period it now
    // takes (§III-C).
    let mut m = Metronome::default();
    let (period_ms, first, second) = slow_after_pacing(&mut m, 1.3);
    assert!(matches!(first.as_slice(), [Decision::Pace { job: 1, period_ms: p, .. }] if *p == period_ms), "{first:?}");
    assert_eq!((m.readjustments, m.reprofiles), (1, 1));
    let Some(&Decision::Pace { period_ms: p, .. }) = second.iter().find(|d| matches!(d, Decision::Pace { job: 1, .. }))
    else {
        panic!("re-paced: {second:?}")
    };
    let slow = 1.3 * period_ms;
    assert!((p - slow).abs() < 0.05 * slow, "paced at {p} ms, measured {slow} ms");
    // orrery's `metronome:pause-only` pauses it again at its slot.
    let mut m = Metronome { reprofile: false, ..Metronome::default() };
    assert_eq!(m.name(), "metronome:pause-only");
    let (_, _, second) = slow_after_pacing(&mut m, 1.3);
    assert!(matches!(second.as_slice(), [Decision::Pace { job: 1, period_ms: p, .. }] if *p == period_ms));
    assert_eq!((m.readjustments, m.reprofiles), (2, 0));
}

#[test]
fn a_recalculation_that_would_pace_slower_than_measured_is_not_adopted() {
    // 25% over its slot: the unified circle of the re-profiled pair
    // would pace it at more than 5% over what it takes now, so the
    // controller keeps the scheme and pauses it at its slot again.
    let mut m = Metronome::default();
    let (period_ms, _, second) = slow_after_pacing(&mut m, 1.25);
    assert_eq!((m.readjustments, m.reprofiles), (2, 0));
    assert!(
        matches!(second.as_slice(), [Decision::Pace { job: 1, period_ms: p, .. }] if *p == period_ms),
        "{second:?}"
    );
}

#[test]
fn a_newcomer_is_paced_to_a_reference_placed_in_the_same_round() {
    // The same two rings, both arriving at once: the high-priority one is
    // placed first and starts now (5 s); the low-priority one shares its
    // links and is paced in the slot the rotation gives it after that start.
    let t = two_racks_of_two();
    // Pod anti-affinity: one pod per host, so both rings span h0 and h2.
    let mut high = JobSpec::new("hi", "vgg16", 64, 2, Work::Iterations(100), 0.0);
    high.priority = Priority::High;
    high.anti_affinity = true;
    let mut low = JobSpec::new("lo", "vgg16", 64, 2, Work::Iterations(100), 0.0);
    low.anti_affinity = true;
    let view = ClusterView {
        now_s: 5.0,
        topology: &t,
        free_gpus: &[2, 0, 2, 0],
        queue: vec![QueuedJob::new(0, &high, 0.0), QueuedJob::new(1, &low, 0.0)],
        running: Vec::new(),
    };
    let d = Metronome::default().schedule(&view);
    assert!(placed(&d, 0).is_some() && placed(&d, 1).is_some(), "{d:?}");
    let paced: Vec<(JobId, f64, f64)> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Pace { job, period_ms, offset_s } => Some((*job, *period_ms, *offset_s)),
            _ => None,
        })
        .collect();
    assert_eq!(paced.len(), 1, "{d:?}");
    let (job, period_ms, offset_s) = paced[0];
    assert_eq!(job, 1, "only the low-priority job is paced");
    assert!((5.0..5.0 + period_ms / 1e3).contains(&offset_s), "{offset_s} within one period of now");
}

/// Two racks of three hosts with two A30s each, 25 Gbit/s links.
fn two_racks_of_three() -> Topology {
    LeafSpine {
        racks: 2,
        hosts_per_rack: 3,
        spines: 1,
        gpus_per_host: 2,
        gpu_type: "a30".into(),
        host_gbps: 25.0,
        uplink_gbps: 25.0,
    }
    .build("t")
    .expect("valid")
}

/// A VGG16 ring of two pods, one per host.
fn ring(name: &str, priority: Priority) -> JobSpec {
    let mut spec = JobSpec::new(name, "vgg16", 64, 2, Work::Iterations(100), 0.0);
    spec.priority = priority;
    spec.anti_affinity = true;
    spec
}

/// GPUs per host of a placed job.
type Hosts = Vec<(HostId, u32)>;

/// Submits `specs` one per round to Metronome `m`; before round `i`,
/// `blocked[i]` GPUs of each host are held by jobs that do not
/// communicate. Every placed job runs on, its iteration starting when it
/// was placed. Returns the policy and each job's hosts (None: it waits).
fn rounds(mut m: Metronome, t: &Topology, specs: &[JobSpec], blocked: &[Vec<u32>]) -> (Metronome, Vec<Option<Hosts>>) {
    let mut placed: Vec<Option<Hosts>> = vec![None; specs.len()];
    for (i, spec) in specs.iter().enumerate() {
        let mut free = vec![2u32; t.hosts.len()];
        for hosts in placed.iter().flatten() {
            for &(h, g) in hosts {
                free[h] -= g;
            }
        }
        for (f, b) in free.iter_mut().zip(&blocked[i]) {
            *f = f.saturating_sub(*b);
        }
        let running: Vec<RunningJob<'_>> = placed
            .iter()
            .enumerate()
            .filter_map(|(k, h)| h.as_ref().map(|h| (k, h)))
            .map(|(k, h)| RunningJob { iteration_start_s: k as f64, ..RunningJob::new(k, &specs[k], h) })
            .collect();
        let view = ClusterView {
            now_s: i as f64,
            topology: t,
            free_gpus: &free,
            queue: vec![QueuedJob::new(i, spec, 0.0)],
            running,
        };
        let d = m.schedule(&view);
        placed[i] = self::placed(&d, i);
    }
    (m, placed)
}

/// Theorem 1 on Metronome's state: on every node of the Affinity graph,
/// every two jobs whose slots the controller enforces (the component's
/// reference, and the low-priority jobs paced from it) keep the node's
/// relative shift, modulo their common period. Returns the pairs checked.
fn check_theorem_1(m: &Metronome) -> usize {
    let component = Components::of(m.schemes.iter());
    let mut checked = 0;
    for scheme in m.schemes.values() {
        let label = component.label(scheme.jobs[0].0).expect("on a scheme");
        let members = scheme.jobs.iter().map(|j| j.0);
        let all = component.members(label).0;
        let prio =
            |j: JobId| m.schemes.values().flat_map(|s| &s.jobs).find(|x| x.0 == j).map(|x| x.3).expect("on a scheme");
        let root = *all.iter().max_by_key(|&&j| (prio(j), std::cmp::Reverse(j))).expect("a member");
        // (job, its shift from the reference, its shift on this node, period)
        let enforced: Vec<(JobId, f64, f64, f64)> = members
            .zip(&scheme.jobs)
            .filter_map(|(j, x)| {
                let g = if j == root { 0.0 } else { m.watched.get(&j).filter(|w| w.reference == root)?.rel_ms };
                Some((j, g, x.1, x.2))
            })
            .collect();
        for (i, a) in enumerate_pairs(&enforced) {
            let b = &enforced[i];
            if (a.3 - b.3).abs() > 1e-9 * a.3 {
                continue;
            }
            let d = ((a.1 - a.2) - (b.1 - b.2)).rem_euclid(a.3);
            assert!(d < 1e-6 || a.3 - d < 1e-6, "jobs {} and {} are {d} ms off their node's shift", a.0, b.0);
            checked += 1;
        }
    }
    checked
}

fn enumerate_pairs<T>(v: &[T]) -> Vec<(usize, &T)> {
    (0..v.len()).flat_map(|x| (x + 1..v.len()).map(move |y| (y, &v[x]))).collect()
}

#[test]
fn a_newcomer_across_two_nodes_aligns_both_of_their_jobs() {
    // X (high) holds a GPU on h0 and h3, Y (low) one on h1 and h4; the
    // other GPU of h3 and h4 and both of h2 and h5 are held by jobs that
    // do not communicate. The newcomer J must share h0 with X and h1
    // with Y: the Affinity graph is X–h0–J–h1–Y. From X, the reference,
    // J is paced by h0's scheme, and Y, though it already ran, is paced
    // anew by h1's, relative to J (one node's rotation would leave Y
    // where it was, contending with J on h1).
    let t = two_racks_of_three();
    let specs = [ring("x", Priority::High), ring("y", Priority::Low), ring("j", Priority::Low)];
    let blocked = [vec![1, 2, 2, 1, 2, 2], vec![2, 1, 2, 2, 1, 2], vec![0, 0, 2, 1, 1, 2]];
    let (m, placed) = rounds(Metronome::default(), &t, &specs, &blocked);
    assert_eq!(placed[0], Some(vec![(0, 1), (3, 1)]));
    assert_eq!(placed[1], Some(vec![(1, 1), (4, 1)]));
    assert_eq!(placed[2], Some(vec![(0, 1), (1, 1)]));
    assert_eq!(m.schemes.len(), 2, "h0 and h1 are contended: {:?}", m.schemes);
    assert!(m.watched.contains_key(&2) && m.watched.contains_key(&1), "J and Y are paced");
    assert_eq!(m.watched[&1].reference, 0, "Y keeps time with X now");
    assert_eq!(check_theorem_1(&m), 2);
}

#[test]
fn a_node_that_would_close_a_loop_is_filtered() {
    // X (high) on h0 and h1, Y (low) on h1 and h2: h1 links them. A
    // newcomer on h0 (with X) and h2 (with Y) would close the loop
    // X–h0–J–h2–Y–h1–X: after h0, h2 is filtered and the second pod goes
    // to the other rack's free host h5, though h2 is closer.
    let t = two_racks_of_three();
    let specs = [ring("x", Priority::High), ring("y", Priority::Low), ring("j", Priority::Low)];
    let blocked = [vec![1, 1, 2, 2, 2, 2], vec![2, 0, 1, 2, 2, 2], vec![0, 0, 0, 2, 2, 1]];
    let (m, placed) = rounds(Metronome::default(), &t, &specs, &blocked);
    assert_eq!(placed[0], Some(vec![(0, 1), (1, 1)]));
    assert_eq!(placed[1], Some(vec![(1, 1), (2, 1)]));
    assert!(m.schemes.contains_key(&1), "h1 is contended: {:?}", m.schemes);
    let j = placed[2].clone().expect("placed");
    assert!(!(j.contains(&(0, 1)) && j.contains(&(2, 1))), "{j:?} closes a loop");
    assert!(j.contains(&(5, 1)), "{j:?}");
    // orrery's variant without the rule takes the closer host.
    let m = Metronome { loop_filter: false, ..Metronome::default() };
    assert_eq!(m.name(), "metronome:place-on-loops");
    let (_, placed) = rounds(m, &t, &specs, &blocked);
    assert_eq!(placed[2], Some(vec![(0, 1), (2, 1)]));
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 48,
        rng_seed: proptest::test_runner::RngSeed::Fixed(17),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]
    /// Random arrivals of rings on six two-GPU hosts, some GPUs held by
    /// jobs that do not communicate: after the last round, every node
    /// keeps its relative shifts (Theorem 1). (Over these 48 cases, 1–4
    /// nodes are contended and 1–4 pairs checked in all but two.)
    #[test]
    fn every_node_keeps_its_shifts(
        priorities in proptest::collection::vec(proptest::bool::weighted(0.3), 2..7),
        blocked in proptest::collection::vec(proptest::collection::vec(0u32..=2, 6), 7),
    ) {
        let t = two_racks_of_three();
        let specs: Vec<JobSpec> = priorities
            .iter()
            .enumerate()
            .map(|(i, &high)| ring(&format!("j{i}"), if high { Priority::High } else { Priority::Low }))
            .collect();
        let (m, _) = rounds(Metronome::default(), &t, &specs, &blocked);
        check_theorem_1(&m);
    }
}

#[test]
fn eq19_normalisation() {
    // Δ = 10, 20, 30: 100 − ⌊100 · (Δ − 10) / 20⌋.
    assert_eq!(normalize(&[10.0, 20.0, 30.0]), vec![100.0, 50.0, 0.0]);
    // All equal: 100 − (Δ − Δ_min).
    assert_eq!(normalize(&[7.0, 7.0]), vec![100.0, 100.0]);
}

#[test]
fn the_driver_builds_the_view_only_of_what_an_iteration_touches() {
    // `ring_pair` paced: "lo" (1) keeps time with "hi" (0). A third job is
    // neither paced nor a reference: its iterations need nothing. The paced
    // job needs itself and its reference; the reference itself and its
    // partner; an iteration that trips the controller (more than O_T = 5
    // of the last 10 over A_T = 1.10 × the slot) needs the whole view, as
    // re-profiling re-places the job among its nodes' others.
    let mut m = Metronome::default();
    let (t, high, low) = ring_pair(100);
    let period_ms = pace_low(&mut m, &t, &high, &low);
    let quick = Iteration::of(period_ms);
    let slow = Iteration::of(1.5 * period_ms);
    assert_eq!(m.iteration_needs(7, &quick), IterationNeeds::Nothing);
    assert_eq!(m.iteration_needs(1, &quick), IterationNeeds::Jobs(vec![1, 0]));
    assert_eq!(m.iteration_needs(0, &quick), IterationNeeds::Jobs(vec![0, 1]));
    let hosts = PAIR_HOSTS;
    let view = ClusterView {
        now_s: 20.0,
        topology: &t,
        free_gpus: &[0, 0, 0, 0],
        queue: Vec::new(),
        running: vec![RunningJob::new(0, &high, &hosts), RunningJob::new(1, &low, &hosts)],
    };
    for k in 0..5 {
        assert_eq!(m.iteration_needs(1, &slow), IterationNeeds::Jobs(vec![1, 0]), "slow iteration {k} of 5 allowed");
        assert!(m.on_iteration(&view, 1, slow).is_empty());
    }
    assert_eq!(m.iteration_needs(1, &quick), IterationNeeds::Jobs(vec![1, 0]), "five slow do not trip it");
    assert_eq!(m.iteration_needs(1, &slow), IterationNeeds::All, "the sixth does");
    assert!(!m.on_iteration(&view, 1, slow).is_empty(), "and the controller acts on it");
}

/// `metronome:measured` (issue 68): "lo" placed beside "hi" is not paced;
/// its iterations, reported in a view where both run, come back with
/// what the policy decided on each.
fn measured_pair() -> (Metronome, Topology, JobSpec, JobSpec, f64) {
    let (t, high, low) = ring_pair(1000);
    let period_ms = pace_low(&mut Metronome::default(), &t, &high, &low);
    let mut m = Metronome { measured: true, ..Metronome::default() };
    let view = ClusterView {
        now_s: 5.0,
        topology: &t,
        free_gpus: &[1, 0, 1, 0],
        queue: vec![QueuedJob::new(1, &low, 0.0)],
        running: vec![RunningJob { iteration_start_s: 4.9, ..RunningJob::new(0, &high, &PAIR_HOSTS) }],
    };
    let d = m.schedule(&view);
    assert!(placed(&d, 1).is_some(), "{d:?}");
    assert!(!d.iter().any(|d| matches!(d, Decision::Pace { .. })), "not paced before a measurement: {d:?}");
    (m, t, high, low, period_ms)
}

/// Reports `times` of "lo" one by one; every decision, by iteration.
fn report(m: &mut Metronome, t: &Topology, high: &JobSpec, low: &JobSpec, times: &[f64]) -> Vec<Vec<Decision>> {
    let view = ClusterView {
        now_s: 20.0,
        topology: t,
        free_gpus: &[0, 0, 0, 0],
        queue: Vec::new(),
        running: vec![
            RunningJob { iteration_start_s: 19.9, ..RunningJob::new(0, high, &PAIR_HOSTS) },
            RunningJob { iteration_start_s: 19.5, ..RunningJob::new(1, low, &PAIR_HOSTS) },
        ],
    };
    times.iter().map(|&ms| m.on_iteration(&view, 1, Iteration::of(ms))).collect()
}

#[test]
fn measured_first_paces_a_job_only_once_it_is_measured_slow() {
    let (mut m, t, high, low, period_ms) = measured_pair();
    assert_eq!(m.name(), "metronome:measured");
    assert!(m.watches(1), "a deferred job's every iteration is needed");
    // Twenty iterations at its slot period, five of each ten 30% over:
    // never more than O_T = 5 slow in a window, nothing is decided.
    let calm: Vec<f64> = (0..20).map(|i| if i % 2 == 1 { 1.3 * period_ms } else { period_ms }).collect();
    assert!(report(&mut m, &t, &high, &low, &calm).iter().all(|d| d.is_empty()));
    // A sixth slow iteration in the window trips the controller's rule:
    // "lo" is paced in its slot, with a note of the measurement.
    let out = report(&mut m, &t, &high, &low, &[1.3 * period_ms]).remove(0);
    assert!(
        matches!(out.as_slice(), [Decision::Note { job: 1, text }, Decision::Pace { job: 1, period_ms: p, .. }]
            if *p == period_ms && text.contains("measured 6 of its last 10 iterations over 110%")),
        "{out:?}"
    );
    assert_eq!(m.applied_on_measurement, 1);
    // Paced, it runs its slot: 1.0 against the 1.3 median before, kept.
    let paced = report(&mut m, &t, &high, &low, &[period_ms; 10]);
    assert!(paced.iter().all(|d| d.is_empty()), "{paced:?}");
    assert_eq!(m.given_up_on_measurement, 0);
    // From then on the stop-and-wait controller watches it as any paced job.
    let slow = report(&mut m, &t, &high, &low, &[1.3 * period_ms; 6]);
    assert!(matches!(slow[5].as_slice(), [Decision::Pace { job: 1, .. }]), "{slow:?}");
    assert_eq!(m.readjustments, 1);
}

#[test]
fn measured_first_removes_a_pace_that_does_not_shorten_the_iterations() {
    // On a transport where the rings part by themselves, the pace only
    // adds waiting: "lo" runs 30% over its slot before and after.
    let (mut m, t, high, low, period_ms) = measured_pair();
    let before = report(&mut m, &t, &high, &low, &[1.3 * period_ms; 6]);
    assert!(matches!(before[5].as_slice(), [Decision::Note { .. }, Decision::Pace { job: 1, .. }]), "{before:?}");
    let after = report(&mut m, &t, &high, &low, &[1.3 * period_ms; 10]);
    assert!(after[..9].iter().all(|d| d.is_empty()), "the controller waits out the trial: {after:?}");
    assert!(
        matches!(after[9].as_slice(), [Decision::Pace { job: 1, period_ms: p, .. }, Decision::Note { job: 1, text }]
            if *p <= 0.0 && text.contains("no gain, pace removed")),
        "{:?}",
        after[9]
    );
    assert_eq!(m.given_up_on_measurement, 1);
    // Given up: left alone, and its iterations are no longer needed.
    assert!(!m.watches(1));
    assert!(report(&mut m, &t, &high, &low, &[2.0 * period_ms; 12]).iter().all(|d| d.is_empty()));
}
