//! CASSINI's tests: scores, shifts, drift and re-alignment, candidates.

use super::*;
use crate::{QueuedJob, RunningJob};
use orrery_model::setups::LeafSpine;
use orrery_model::{Topology, Work};

#[test]
fn cassini_scores_the_circles_it_enforces() {
    // Two jobs of 451 and 475 ms, each sending 40% of its iteration at
    // the link's full 50 Gbit/s. Metronome pads the first to 475 ms (E_T
    // = 10%) and the two interleave perfectly; CASSINI shifts without
    // pacing, so each keeps its period and their phases drift past each
    // other: no rotation is perfect on the circle it enforces.
    use orrery_interleave::unified::{CircleJob, unify};
    use orrery_interleave::{Search, solve};
    use orrery_model::{Arc, Circle, Priority};
    let job = |p: f64| CircleJob {
        name: String::new(),
        priority: Priority::Low,
        circle: Circle { period_ms: p, arcs: vec![Arc { start_ms: 0.0, duration_ms: 0.4 * p, gbps: 50.0 }] },
    };
    let jobs = [job(475.0), job(451.0)];
    let paced = unify(&jobs, &Params::default()).expect("unifies");
    assert!(paced.jobs[1].idle_injected_ms > 0.0);
    assert_eq!(solve(&paced, 50.0, Search::Exhaustive).score, 1.0);
    let raw = unify(&jobs, &circle_params()).expect("unifies");
    assert!(raw.jobs.iter().all(|j| j.idle_injected_ms == 0.0), "{raw:?}");
    let score = solve(&raw, 50.0, Search::Exhaustive).score;
    assert!(score < 0.95, "{score}");
}

/// The jobs as a full score takes them.
pub(super) fn refs(nets: &[Net]) -> Vec<&Net> {
    nets.iter().collect()
}

/// Three racks of one host with two GPUs under one spine.
pub(crate) fn three_racks() -> Topology {
    LeafSpine::with_oversubscription(3, 1, 1, 2, "a100", 50.0, 1.0).build("t").expect("valid")
}

pub(crate) fn running<'a>(id: JobId, spec: &'a JobSpec, hosts: &'a [(HostId, u32)]) -> RunningJob<'a> {
    RunningJob { iterations_done: 1, running_s: 1.0, ..RunningJob::new(id, spec, hosts) }
}

/// CASSINI's pair on hosts 0 and 1 of `t`: A runs, B waits (at 1 s),
/// or, `later`, both run and A's latest iteration began at 5 s (at 6 s).
pub(crate) fn pair_view<'a>(t: &'a Topology, a: &'a JobSpec, b: &'a JobSpec, later: bool) -> ClusterView<'a> {
    const HOSTS: [(HostId, u32); 2] = [(0, 1), (1, 1)];
    if later {
        ClusterView {
            now_s: 6.0,
            topology: t,
            free_gpus: &[0, 0, 2],
            queue: Vec::new(),
            running: vec![RunningJob { iteration_start_s: 5.0, ..running(0, a, &HOSTS) }, running(1, b, &HOSTS)],
        }
    } else {
        ClusterView {
            now_s: 1.0,
            topology: t,
            free_gpus: &[1, 1, 2],
            queue: vec![QueuedJob::new(1, b, 0.0)],
            running: vec![RunningJob { iteration_start_s: 0.0, ..running(0, a, &HOSTS) }],
        }
    }
}

/// Proposes one fixed placement for every queued job.
pub(crate) struct Propose(pub(crate) Vec<(HostId, u32)>);

impl Policy for Propose {
    fn name(&self) -> String {
        "propose".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue.iter().map(|q| Decision::Place { job: q.id, hosts: self.0.clone() }).collect()
    }
}

/// Restarts every running job on these GPUs (Pollux's resize).
struct Resize(Vec<(HostId, u32)>);

impl Policy for Resize {
    fn name(&self) -> String {
        "resize".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.running
            .iter()
            .flat_map(|r| [Decision::Preempt { job: r.id }, Decision::Place { job: r.id, hosts: self.0.clone() }])
            .collect()
    }
}

#[test]
fn a_running_job_restarted_on_a_new_size_is_placed_again() {
    // The inner policy grows A from hosts 0-1 to 0-2 (Pollux's resize,
    // orrery's growth): a preemption and a placement of a job that is
    // running, not waiting. Both must pass; dropping the placement
    // left the job preempted and restarted at its old size in the next
    // round, again and again (20 restarts in one instant for a VGG19 job
    // on 8-GPU hosts).
    let t = three_racks();
    let a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let ha = [(0, 1), (1, 1)];
    let grown = vec![(0, 1), (1, 1), (2, 1)];
    let view = ClusterView {
        now_s: 1.0,
        topology: &t,
        free_gpus: &[0, 0, 1],
        queue: Vec::new(),
        running: vec![running(0, &a, &ha)],
    };
    let expected = [Decision::Preempt { job: 0 }, Decision::Place { job: 0, hosts: grown.clone() }];
    for candidates in [1, 10] {
        let mut cassini = Cassini::new(Box::new(Resize(grown.clone())), 0);
        cassini.candidates = candidates;
        let d = cassini.schedule(&view);
        assert_eq!(d[..2], expected, "{candidates} candidates: {d:?}");
    }
    let mut routed = crate::foresight::policy::Foresight::new(
        Box::new(Resize(grown.clone())),
        crate::foresight::policy::Mode::Routes,
    );
    let d = routed.schedule(&view);
    assert_eq!(d[..2], expected, "{d:?}");
}

#[test]
fn a_candidate_whose_affinity_graph_has_a_loop_is_dropped() {
    // A runs on hosts 0-1 and B on 1-2: they share host 1's links. A
    // newcomer on hosts 2-0 would share host 2's with B and host 0's with
    // A: A – B – C – A is a loop, and no single time-shift per job can
    // satisfy three pairwise rotations in general (CASSINI §4.1).
    let t = three_racks();
    let a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let b = JobSpec::new("b", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let c = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let (ha, hb) = ([(0, 1), (1, 1)], [(1, 1), (2, 1)]);
    let view = ClusterView {
        now_s: 1.0,
        topology: &t,
        free_gpus: &[1, 0, 1],
        queue: vec![QueuedJob::new(2, &c, 0.0)],
        running: vec![running(0, &a, &ha), running(1, &b, &hb)],
    };
    let base = || [net(&view, 0, &a, &ha), net(&view, 1, &b, &hb)].into_iter().flatten().collect::<Vec<_>>();
    let mut looped = base();
    looped.extend(net(&view, 2, &c, &[(2, 1), (0, 1)]));
    assert!(score(&view, &refs(&looped), &mut Solved::default()).times.is_none());
    // On one host (a single worker) it sends nothing over the network: no loop.
    let mut alone = base();
    alone.extend(net(&view, 2, &c, &[(0, 1)]));
    assert!(score(&view, &refs(&alone), &mut Solved::default()).times.is_some());
    // A link whose circles and rate were solved before is not solved
    // again: the looped set's links (A with B, B with C, C with A: the
    // same two VGG19 circles on links of one rate) are one entry, and
    // scoring again gives the same shifts from it.
    let mut solved = Solved::default();
    let first = score(&view, &refs(&looped), &mut solved);
    assert_eq!(solved.len(), 1, "three links of the same two circles");
    let again = score(&view, &refs(&looped), &mut solved);
    assert_eq!(solved.len(), 1);
    let shifts = |s: &Scored| s.shifts.iter().map(|l| (l.link, l.shifts.clone())).collect::<Vec<_>>();
    assert_eq!(shifts(&first), shifts(&again));
    assert_eq!(first.mean_score, score(&view, &refs(&looped), &mut Solved::default()).mean_score);
    // As a policy with only the host's candidate, CASSINI leaves the job waiting.
    let mut cassini = Cassini::new(Box::new(Propose(vec![(2, 1), (0, 1)])), 0);
    cassini.candidates = 1;
    assert!(cassini.schedule(&view).iter().all(|d| !matches!(d, Decision::Place { .. })));
    // orrery's rule: it starts on the host scheduler's choice, unaligned,
    // and stays out of the Affinity graph while it runs.
    let mut orrery = Cassini::new(Box::new(Propose(vec![(2, 1), (0, 1)])), 0);
    orrery.candidates = 1;
    orrery.on_loop = OnLoop::RunUnaligned;
    let d = orrery.schedule(&view);
    assert_eq!(d, [Decision::Place { job: 2, hosts: vec![(2, 1), (0, 1)] }]);
    assert!(orrery.unaligned.contains(&2));
    // Once it has ended, it is forgotten.
    let ended = ClusterView { queue: Vec::new(), ..view };
    assert!(orrery.schedule(&ended).is_empty());
    assert!(orrery.unaligned.is_empty());
}

#[test]
fn a_more_compatible_candidate_that_crosses_racks_loses_to_a_local_one() {
    // Three racks of two 2-GPU hosts under one spine. A VGG19 ring runs
    // on hosts 0 and 1 (rack 0). The host scheduler puts a second VGG19
    // ring beside it on the same two hosts: no fabric link, but it shares
    // both hosts' links with A, and two VGG19 rings (55% of an iteration
    // on the network) cannot interleave fully. Free GPUs on hosts 2
    // (rack 1) and 4 (rack 2) give a candidate that shares no link at
    // all, through the spine: compatibility prefers it, locality does not.
    let t = LeafSpine::with_oversubscription(3, 2, 1, 2, "a100", 50.0, 1.0).build("t").expect("valid");
    let a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
    let c = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
    let ha = [(0, 1), (1, 1)];
    let view = ClusterView {
        now_s: 1.0,
        topology: &t,
        free_gpus: &[1, 1, 1, 0, 1, 0],
        queue: vec![QueuedJob::new(1, &c, 0.0)],
        running: vec![running(0, &a, &ha)],
    };
    let local = net(&view, 1, &c, &ha).expect("placeable");
    let across = net(&view, 1, &c, &[(2, 1), (4, 1)]).expect("placeable");
    assert_eq!((fabric_links(&view, &local), fabric_links(&view, &across)), (0, 4));
    let with_a =
        |n: Net| score(&view, &[&net(&view, 0, &a, &ha).expect("placeable"), &n], &mut Solved::default()).mean_score;
    let (local_score, across_score) = (with_a(local), with_a(across));
    assert!(local_score < 0.99 && across_score == 1.0, "{local_score} {across_score}");
    let decide = |rank: Rank| {
        let mut cassini = Cassini::new(Box::new(Propose(ha.to_vec())), 3);
        cassini.candidates = 30; // every pair of the four free hosts is drawn
        cassini.draw = Candidates::Random;
        cassini.rank = rank;
        cassini.schedule(&view)
    };
    let placed = |d: &[Decision]| match d {
        [Decision::Place { hosts, .. }, ..] => {
            let mut h: Vec<HostId> = hosts.iter().map(|x| x.0).collect();
            h.sort();
            h
        }
        other => panic!("expected a placement, found {other:?}"),
    };
    assert_eq!(placed(&decide(Rank::Compatibility)), [2, 4], "the paper's ranking crosses the spine");
    assert_eq!(placed(&decide(Rank::LocalityFirst)), [0, 1], "orrery's keeps the host scheduler's rack");
}

#[test]
fn the_candidates_are_the_host_schedulers_first_fit_anchored_at_each_rack() {
    // Two racks of two 2-GPU hosts under one spine. A VGG19 ring runs on
    // hosts 0 (rack 0) and 2 (rack 1), one GPU each. The host scheduler
    // proposes a second ring on the same two hosts: it crosses the spine
    // beside A. First fit anchored at rack 0 takes host 1 whole, at rack
    // 1 host 3 whole: one host each, no traffic at all.
    let t = LeafSpine::with_oversubscription(2, 2, 1, 2, "a100", 50.0, 1.0).build("t").expect("valid");
    let a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
    let c = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(1000), 0.0);
    let ha = [(0, 1), (2, 1)];
    let free = [1, 2, 1, 2];
    let view = ClusterView {
        now_s: 1.0,
        topology: &t,
        free_gpus: &free,
        queue: vec![QueuedJob::new(1, &c, 0.0)],
        running: vec![running(0, &a, &ha)],
    };
    let rack_of = crate::baseline::racks(&view);
    let racks = racks_by_free(rack_of, &free);
    assert_eq!(racks.len(), 2, "both racks have 3 free GPUs");
    let hosts_of = |r: usize| (0..4).filter(|&h| rack_of[h] == r).collect::<Vec<HostId>>();
    let anchored: Vec<_> = racks.iter().map(|&r| first_fit_from(&view, rack_of, &free, 2, &hosts_of(r))).collect();
    assert_eq!(anchored, [Some(vec![(1, 2)]), Some(vec![(3, 2)])]);
    // Four GPUs anchored at rack 0: its hosts, fullest first, then the
    // last GPU by first fit over the rest (best fit: host 2, one free).
    assert_eq!(first_fit_from(&view, rack_of, &free, 4, &hosts_of(racks[0])), Some(vec![(1, 2), (0, 1), (2, 1)]));
    let mut cassini = Cassini::new(Box::new(Propose(ha.to_vec())), 3);
    let d = cassini.schedule(&view);
    assert_eq!(d.first(), Some(&Decision::Place { job: 1, hosts: vec![(1, 2)] }), "{d:?}");
    // With one candidate, the host scheduler's crossing placement stays.
    cassini.candidates = 1;
    let d = cassini.schedule(&view);
    assert_eq!(d.first(), Some(&Decision::Place { job: 1, hosts: ha.to_vec() }), "{d:?}");
}

/// Proposes for the i-th queued job the i-th placement.
struct ProposeEach(Vec<Vec<(HostId, u32)>>);

impl Policy for ProposeEach {
    fn name(&self) -> String {
        "propose-each".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        view.queue.iter().zip(&self.0).map(|(q, h)| Decision::Place { job: q.id, hosts: h.clone() }).collect()
    }
}

#[test]
fn jobs_that_arrive_together_are_aligned_to_the_one_that_starts_now() {
    // Two VGG19 rings on hosts 0 and 1, both new: nothing runs yet, so the
    // high-priority one is the reference and starts now; the other is
    // aligned to the shift the shared links want after it.
    let t = three_racks();
    let mut a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    a.priority = orrery_model::Priority::High;
    let b = JobSpec::new("b", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let view = ClusterView {
        now_s: 7.0,
        topology: &t,
        free_gpus: &[2, 2, 2],
        queue: vec![QueuedJob::new(0, &b, 0.0), QueuedJob::new(1, &a, 0.0)],
        running: Vec::new(),
    };
    let each = vec![vec![(0, 1), (1, 1)], vec![(0, 1), (1, 1)]];
    let mut cassini = Cassini::new(Box::new(ProposeEach(each)), 0);
    cassini.candidates = 1;
    let d = cassini.schedule(&view);
    assert_eq!(d.iter().filter(|d| matches!(d, Decision::Place { .. })).count(), 2, "{d:?}");
    let aligned: Vec<(JobId, f64, f64)> = d
        .iter()
        .filter_map(|d| match d {
            Decision::Align { job, period_ms, offset_s } => Some((*job, *period_ms, *offset_s)),
            _ => None,
        })
        .collect();
    assert_eq!(aligned.len(), 1, "{d:?}");
    let (job, period_ms, offset_s) = aligned[0];
    assert_eq!(job, 0, "the low-priority job is aligned, the high-priority one is not");
    // Identical rings interleave: the shift is neither 0 nor a whole period.
    assert!(offset_s > 7.0 && offset_s < 7.0 + period_ms / 1e3, "{offset_s}");
    assert_eq!(cassini.drift.aligned[&0].reference, 1);
}

/// Starts the queued job on shared GPUs of job 0 plus one free GPU on host 2.
struct ShareWithFree;

impl Policy for ShareWithFree {
    fn name(&self) -> String {
        "share".into()
    }
    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        // Two GPUs on host 1, which has one free: random candidates only.
        let mut out = vec![Decision::Place { job: view.queue[0].id, hosts: vec![(1, 2)] }];
        out.push(Decision::Share { job: view.queue[1].id, free: vec![(2, 1)], shared: vec![(0, 0, 1)], sub_batch: 0 });
        out
    }
}

#[test]
fn free_gpus_a_shared_start_takes_are_kept_from_other_candidates() {
    // Hosts 0-2 have one free GPU each; the host scheduler starts C on A's
    // GPU plus host 2's, and proposes for B a place that does not fit. No
    // random candidate for B may take host 2's GPU, whatever the seed.
    let t = three_racks();
    let a = JobSpec::new("a", "vgg19", 32, 1, Work::Iterations(100), 0.0);
    let b = JobSpec::new("b", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let c = JobSpec::new("c", "vgg19", 32, 2, Work::Iterations(100), 0.0);
    let ha = [(0, 1)];
    for seed in 0..20 {
        let view = ClusterView {
            now_s: 1.0,
            topology: &t,
            free_gpus: &[1, 1, 1],
            queue: vec![QueuedJob::new(1, &b, 0.0), QueuedJob::new(2, &c, 0.0)],
            running: vec![running(0, &a, &ha)],
        };
        let d = Cassini::new(Box::new(ShareWithFree), seed).schedule(&view);
        assert!(d.iter().any(|d| matches!(d, Decision::Share { job: 2, .. })), "{d:?}");
        assert!(d.iter().any(|d| matches!(d, Decision::Place { job: 1, .. })), "{d:?}");
        for x in &d {
            if let Decision::Place { hosts, .. } = x {
                assert!(hosts.iter().all(|h| h.0 != 2), "seed {seed}: {d:?}");
            }
        }
    }
}

#[test]
fn candidates_keep_the_size_the_host_scheduler_chose() {
    // A (VGG19, batch 8: mostly communicating) runs on hosts 0 and 1.
    // Pollux gives C, which asked for 4 workers, 2 GPUs on the same hosts,
    // where the rings cannot interleave. A random 2-GPU candidate on host
    // 2 shares nothing and must win; no candidate may change the size.
    let t = three_racks();
    let a = JobSpec::new("a", "vgg19", 8, 2, Work::Iterations(100), 0.0);
    let c = JobSpec::new("c", "vgg19", 8, 4, Work::Iterations(100), 0.0);
    let ha = [(0, 1), (1, 1)];
    let view = ClusterView {
        now_s: 1.0,
        topology: &t,
        free_gpus: &[1, 1, 2],
        queue: vec![QueuedJob::new(1, &c, 0.0)],
        running: vec![running(0, &a, &ha)],
    };
    let mut moved = 0;
    for seed in 0..10 {
        let mut cassini = Cassini::new(Box::new(Propose(vec![(0, 1), (1, 1)])), seed);
        let d = cassini.schedule(&view);
        let Some(Decision::Place { hosts, .. }) = d.first() else { unreachable!("{d:?}") };
        assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 2, "seed {seed}: {hosts:?}");
        moved += usize::from(hosts == &vec![(2, 2)]);
    }
    assert!(moved > 0, "a random candidate beat the host scheduler's in some seed");
}
