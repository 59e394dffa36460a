//! The ledger's tests: placements and GPUs, dependencies, the log's replay, LLM meshes.

use super::*;
use crate::api::IterationReport;

fn demo() -> Ledger {
    Ledger::new(orrery_model::setups::by_name("demo").expect("demo"))
}

fn spec(id: &str) -> JobSpec {
    JobSpec::new(id, "vgg16", 32, 2, Work::Iterations(10), 0.0)
}

fn up(l: &mut Ledger, node: HostId) {
    assert!(
        l.record(&Logged::Event(DriverEvent::NodeUp { node, gpus: 2, session: 1, data_addr: None }), 0.0).is_some()
    );
}

/// What was recorded on a ledger, in order, for a replay.
type Log = Vec<(u64, Logged, f64)>;

/// The demo cluster with hosts `0..up` registered, and its log.
fn recording(up: usize) -> (Ledger, Log) {
    let (mut l, mut log) = (demo(), Log::new());
    for node in 0..up {
        rec(&mut l, &mut log, Logged::Event(DriverEvent::NodeUp { node, gpus: 2, session: 1, data_addr: None }), 0.0);
    }
    (l, log)
}

/// Records `e` at `at` (it must be valid), keeping it in `log`; its seq.
fn rec(l: &mut Ledger, log: &mut Log, e: Logged, at: f64) -> u64 {
    let seq = l.record(&e, at).expect("valid");
    log.push((seq, e, at));
    seq
}

#[test]
fn an_llm_mesh_submitted_as_json_is_placed_in_whole_tp_groups() {
    // The job issue 66 names, at a size the `h100` set-up holds:
    // 64 GPUs, 8 hosts; `workers` left out.
    let text = r#"{"id": "llama", "model": "llama3-70b", "work": {"iterations": 100}, "arrival_s": 0,
                   "parallelism": {"tp": 8, "pp": 4, "dp": 2, "microbatches": 16}}"#;
    let spec: JobSpec = serde_json::from_str(text).expect("the jsonl format");
    assert_eq!(spec.check(), Ok(()));
    let mut l = Ledger::new(orrery_model::setups::by_name("h100").expect("built in"));
    for node in 0..32 {
        let up = Logged::Event(DriverEvent::NodeUp { node, gpus: 8, session: 1, data_addr: None });
        assert!(l.record(&up, 0.0).is_some());
    }
    let id = l.submit(spec, 0.0);
    let mut policy = orrery_policy::by_name("orrery", 1).expect("catalogued");
    let decisions = policy.schedule(&l.view(1.0));
    let hosts = decisions
        .iter()
        .find_map(|d| match d {
            Decision::Place { job, hosts } if *job == id => Some(hosts.clone()),
            _ => None,
        })
        .expect("placed");
    assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 64);
    assert!(hosts.iter().all(|h| h.1 % 8 == 0), "{hosts:?}");
    assert!(l.record(&Logged::Decision(Decision::Place { job: id, hosts }), 1.0).is_some());
}

#[test]
fn gpus_are_never_over_committed_and_down_hosts_take_nothing() {
    let mut l = demo();
    up(&mut l, 0);
    let (a, b) = (l.submit(spec("a"), 0.0), l.submit(spec("b"), 0.0));
    assert!(l.record(&Logged::Decision(Decision::Place { job: a, hosts: vec![(0, 2)] }), 1.0).is_some());
    // Host 0 is full, host 1 has no agent.
    assert!(l.record(&Logged::Decision(Decision::Place { job: b, hosts: vec![(0, 1), (1, 1)] }), 1.0).is_none());
    assert!(l.record(&Logged::Decision(Decision::Place { job: b, hosts: vec![(0, 2)] }), 1.0).is_none());
    // Placing twice, or a shift of a queued job, is invalid too.
    assert!(l.record(&Logged::Decision(Decision::Place { job: a, hosts: vec![(0, 2)] }), 1.0).is_none());
    assert!(l.record(&Logged::Decision(Decision::Shift { job: b, ms: 5.0 }), 1.0).is_none());
    assert_eq!(l.free_gpus(), &[0, 0, 0, 0]);
    assert_eq!(l.next_seq(), 3, "only the valid entries took sequence numbers");
    // A node with a job cannot go down before the job is preempted.
    assert!(l.record(&Logged::Event(DriverEvent::NodeDown { node: 0 }), 2.0).is_none());
    assert!(l.record(&Logged::Decision(Decision::Preempt { job: a }), 2.0).is_some());
    assert!(l.record(&Logged::Event(DriverEvent::NodeDown { node: 0 }), 2.0).is_some());
    assert_eq!(l.waiting(), &[b, a], "back in arrival order (after jobs of the same arrival, as the simulator)");
}

#[test]
fn a_job_is_offered_once_its_dependencies_have_started() {
    let mut l = demo();
    up(&mut l, 0);
    let loader = l.submit(spec("loader"), 0.0);
    let mut trainer = spec("trainer");
    trainer.depends_on = vec!["loader".into()];
    let t = l.submit(trainer, 0.5);
    let queued = |l: &Ledger| l.view(1.0).queue.iter().map(|q| q.id).collect::<Vec<_>>();
    assert_eq!(queued(&l), vec![loader], "the trainer waits for the loader to start");
    l.record(&Logged::Decision(Decision::Place { job: loader, hosts: vec![(0, 1)] }), 1.0).expect("placed");
    assert_eq!(queued(&l), vec![t]);
}

#[test]
fn replaying_the_log_rebuilds_the_state_in_force() {
    let (mut l, mut log) = recording(3);
    let ids: Vec<JobId> = ["a", "b", "c"].iter().map(|n| l.submit(spec(n), 0.5)).collect();
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: ids[0], hosts: vec![(0, 1), (1, 1)] }), 1.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: ids[1], hosts: vec![(0, 1), (1, 1)] }), 1.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Align { job: ids[1], period_ms: 200.0, offset_s: 1.1 }), 1.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Shift { job: ids[0], ms: 12.5 }), 2.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Pace { job: ids[0], period_ms: 210.0, offset_s: 0.9 }), 2.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Throttle { job: ids[1], gbps: Some(10.0) }), 2.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Route { job: ids[1], flow: 0, paths: vec![0] }), 2.0);
    // A note is logged (the measurement behind a decision) and changes nothing.
    let before = l.job_info(ids[1]).expect("b").in_force;
    let text = "cassini: measured collision with a: 35.1 ms".to_string();
    rec(&mut l, &mut log, Logged::Decision(Decision::Note { job: ids[1], text: text.clone() }), 2.0);
    assert_eq!(l.job_info(ids[1]).expect("b").in_force, before);
    assert!(l.record(&Logged::Decision(Decision::Note { job: 99, text }), 2.0).is_none(), "no such job");
    rec(&mut l, &mut log, Logged::Decision(Decision::Pause { job: ids[1] }), 3.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Preempt { job: ids[0] }), 4.0);
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: ids[2], hosts: vec![(2, 2)] }), 4.0);
    rec(&mut l, &mut log, Logged::Event(DriverEvent::Finished { job: ids[2] }), 5.0);
    let mut r = demo();
    for (id, n) in ["a", "b", "c"].into_iter().enumerate() {
        r.restore_job(id, spec(n), 0.5);
    }
    for (seq, e, at) in &log {
        r.replay(*seq, e, *at);
    }
    for id in ids {
        assert_eq!(r.job_info(id), l.job_info(id));
    }
    assert_eq!(r.free_gpus(), l.free_gpus());
    assert_eq!(r.next_seq(), l.next_seq());
    assert_eq!(
        (0..4).map(|h| r.assignments(h)).collect::<Vec<_>>(),
        (0..4).map(|h| l.assignments(h)).collect::<Vec<_>>()
    );
    let b = l.job_info(1).expect("b");
    assert_eq!(b.status, JobStatus::Paused);
    assert_eq!(b.in_force.throttle_gbps, Some(10.0));
    assert_eq!(b.in_force.align.map(|a| a.seq), Some(1));
    assert_eq!(l.job_info(0).expect("a").in_force, InForce::default(), "a preempted job keeps nothing in force");
}

/// Found by `orrery bench chaos` (issue 71): the data addresses the agents
/// registered lived only in the leader's memory, so after a failover the
/// new leader started workers with no peer addresses, and every job placed
/// since failed at start. They are in the log's NodeUp now.
#[test]
fn a_replica_that_replays_the_log_knows_each_nodes_data_address() {
    let addr = |i: u8| Some(std::net::IpAddr::from([10, 0, 0, i]));
    let mut leader = demo();
    let mut log = Vec::new();
    for node in 0..2 {
        let e = Logged::Event(DriverEvent::NodeUp { node, gpus: 2, session: 1, data_addr: addr(node as u8 + 1) });
        log.push((leader.next_seq(), e.clone()));
        assert!(leader.record(&e, 0.0).is_some());
    }
    let job = leader.submit(spec("a"), 0.0);
    let e = Logged::Decision(Decision::Place { job, hosts: vec![(0, 1), (1, 1)] });
    log.push((leader.next_seq(), e.clone()));
    assert!(leader.record(&e, 1.0).is_some());
    let mut standby = demo();
    standby.restore_job(job, spec("a"), 0.0);
    for (seq, e) in &log {
        standby.replay(*seq, e, 1.0);
    }
    let addrs = standby.assignments(1).jobs[0].worker_addrs.clone();
    assert_eq!(addrs, vec![addr(1), addr(2)]);
    assert_eq!(standby.assignments(0), leader.assignments(0));
}

#[test]
fn reports_name_the_current_epoch_and_a_host_of_the_job() {
    let mut l = demo();
    up(&mut l, 0);
    up(&mut l, 1);
    let a = l.submit(spec("a"), 0.0);
    l.record(&Logged::Decision(Decision::Place { job: a, hosts: vec![(0, 1), (1, 1)] }), 1.0).expect("placed");
    let r = |epoch, iteration| IterationReport {
        job: a,
        epoch,
        iteration,
        start_s: 1.5,
        duration_ms: 200.0,
        comm_ms: None,
        delay_ms: None,
        done: false,
    };
    assert!(matches!(l.report(0, &r(0, 1), 2.0), Err(Refused::Conflict(_))), "stale epoch");
    assert!(matches!(l.report(2, &r(1, 1), 2.0), Err(Refused::Conflict(_))), "not its host");
    assert_eq!(l.report(0, &r(1, 1), 2.0), Ok(ReportEffect { advanced: true, finished: false }));
    assert_eq!(l.report(1, &r(1, 1), 2.0), Ok(ReportEffect { advanced: false, finished: false }), "once per iteration");
    assert_eq!(l.report(1, &r(1, 1_000_000), 3.0), Ok(ReportEffect { advanced: true, finished: true }));
    assert_eq!(l.job_info(a).map(|j| j.iterations_done), Some(10), "no more than the job's 10 iterations");
}

#[test]
fn an_align_names_the_iteration_after_next_and_the_aligned_instant_it_starts_at() {
    let mut l = demo();
    up(&mut l, 0);
    up(&mut l, 1);
    let a = l.submit(spec("a"), 0.0);
    l.record(&Logged::Decision(Decision::Place { job: a, hosts: vec![(0, 1), (1, 1)] }), 1.0).expect("placed");
    // Before any report there is no start to predict: the next iteration,
    // each rank rounding its own moment.
    l.record(&Logged::Decision(Decision::Align { job: a, period_ms: 400.0, offset_s: 0.05 }), 1.0).expect("aligned");
    let first = l.job_info(a).expect("a").in_force.align.expect("an align in force");
    assert_eq!((first.at_iteration, first.start_s, first.seq), (1, None, 1));
    // Iteration 1 ran from 1.5 s after a 100-ms wait for its slot.
    let report = IterationReport {
        job: a,
        epoch: 1,
        iteration: 1,
        start_s: 1.5,
        duration_ms: 200.0,
        comm_ms: None,
        delay_ms: Some(100.0),
        done: false,
    };
    assert!(l.report(0, &report, 1.7).is_ok_and(|e| e.advanced));
    let period_s = l.job_info(a).expect("a").period_ms / 1e3;
    assert!(period_s > 0.0);
    l.record(&Logged::Decision(Decision::Align { job: a, period_ms: 400.0, offset_s: 0.05 }), 1.8).expect("aligned");
    let al = l.job_info(a).expect("a").in_force.align.expect("an align in force");
    let start_s = al.start_s.expect("a reported job's align names its instant");
    // Iteration 2 is running; iteration 3 would start at 1.5 s plus two
    // periods (from the start after the wait), and is held to the next
    // instant ≡ 0.05 s (mod 0.4 s).
    assert_eq!((al.at_iteration, al.seq), (3, 2));
    let predicted = 1.5 + 2.0 * period_s;
    let expected = predicted + (0.05 - predicted).rem_euclid(0.4);
    assert!((start_s - expected).abs() < 1e-9, "{al:?}: expected {expected}");
    assert!(start_s >= predicted && start_s < predicted + 0.4);
    assert!(((start_s - 0.05) / 0.4 - ((start_s - 0.05) / 0.4).round()).abs() < 1e-9, "{al:?} in phase");
}

#[test]
fn a_placement_keeps_its_hosts_in_the_decisions_order() {
    // A policy reads the ranks' hosts from this list (rank r on the r-th
    // GPU listed): a pipeline × data-parallel job placed on hosts 1 then 0
    // has its first stage on host 1. Sorted, the live service's policies
    // saw the stages swapped where the simulator's did not.
    let mut l = demo();
    up(&mut l, 0);
    up(&mut l, 1);
    let a = l.submit(spec("a"), 0.0);
    l.record(&Logged::Decision(Decision::Place { job: a, hosts: vec![(1, 1), (0, 1)] }), 1.0).expect("placed");
    let view = l.view(1.0);
    assert_eq!(view.running[0].hosts, &[(1, 1), (0, 1)][..]);
    assert_eq!(&*view.running[0].solo_gpus, &[(0, 1), (1, 1)][..], "one entry per host, sorted");
    assert_eq!(l.job_info(a).expect("a").hosts.iter().map(|h| h.0.as_str()).collect::<Vec<_>>().len(), 2);
}

/// Retention (issue 71): a job that ended expires after the cut-off with
/// every entry about it, and a replay of what the store keeps (the rows of
/// the held jobs, the log without the forgotten entries) rebuilds the same
/// state, the forgotten job's id still taken.
#[test]
fn a_job_that_ended_expires_with_its_entries_and_its_id_is_never_given_again() {
    let (mut l, mut log) = recording(2);
    let ids: Vec<JobId> = ["a", "b", "c"].iter().map(|n| l.submit(spec(n), 0.5)).collect();
    let mut seqs_of_c = Vec::new();
    for &job in &ids {
        let s = rec(&mut l, &mut log, Logged::Event(DriverEvent::Submitted { job }), 0.5);
        if job == ids[2] {
            seqs_of_c.push(s);
        }
    }
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: ids[0], hosts: vec![(0, 1), (1, 1)] }), 1.0);
    seqs_of_c.push(rec(
        &mut l,
        &mut log,
        Logged::Decision(Decision::Place { job: ids[2], hosts: vec![(0, 1), (1, 1)] }),
        1.0,
    ));
    seqs_of_c.push(rec(&mut l, &mut log, Logged::Event(DriverEvent::Finished { job: ids[2] }), 5.0));
    rec(&mut l, &mut log, Logged::Event(DriverEvent::Cancelled { job: ids[1] }), 6.0);

    assert_eq!(l.expiry(4.9, 10), None, "nothing ended by 4.9 s");
    assert_eq!(l.expiry(7.0, 1).expect("b and c ended").jobs, [ids[1]], "at most one, lowest number first");
    let first = l.expiry(5.5, 10).expect("c ended at 5 s");
    assert_eq!(first.jobs, [ids[2]], "a runs; b ended after the cut-off");
    assert_eq!(first.log_seqs, seqs_of_c, "c's submission, placement and end");
    let running = Logged::Event(DriverEvent::Expired { jobs: vec![ids[0]], next_job: 3, superseded: vec![] });
    assert!(l.record(&running, 6.0).is_none(), "a running job does not expire");
    let entry = DriverEvent::Expired { jobs: first.jobs.clone(), next_job: 3, superseded: first.superseded.clone() };
    let expired = rec(&mut l, &mut log, Logged::Event(entry), 6.5);
    assert!(l.jobs().get(ids[2]).is_none() && l.job_by_name(None, "c").is_none());
    assert_eq!(l.free_gpus()[..2], [1, 1], "a still holds its GPUs");
    let second = l.expiry(7.0, 10).expect("b ended at 6 s");
    assert_eq!(second.jobs, [ids[1]]);
    assert_eq!(second.superseded, [expired], "an expiry deletes the Expired entries as old as its cut-off");
    assert!(second.log_seqs.contains(&expired));
    assert_eq!(l.expiry(6.2, 10).map(|e| e.superseded), Some(vec![]), "not one younger than the cut-off");

    // What a restart reads: rows of a and b, the log without c's entries.
    let mut r = demo();
    r.restore_job(ids[0], spec("a"), 0.5);
    r.restore_job(ids[1], spec("b"), 0.5);
    for (seq, e, at) in log.iter().filter(|(s, _, _)| !first.log_seqs.contains(s)) {
        r.replay(*seq, e, *at);
    }
    for id in &ids[..2] {
        assert_eq!(r.job_info(*id), l.job_info(*id));
    }
    assert_eq!(r.free_gpus(), l.free_gpus());
    assert_eq!(r.next_seq(), l.next_seq());
    assert_eq!(r.submit(spec("c"), 8.0), 3, "c's id 2 stays taken after the restart");
    assert_eq!(l.submit(spec("c"), 8.0), 3, "and in the ledger that forgot it");
}

#[test]
fn a_moved_job_starts_once_its_earlier_hosts_show_their_ranks_stopped() {
    let (mut l, mut log) = recording(3);
    let a = l.submit(spec("a"), 0.5);
    let name = |h: HostId| l.topology().hosts[h].name.clone();
    let (h0, h1) = (name(0), name(1));
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: a, hosts: vec![(0, 1), (1, 1)] }), 1.0);
    assert!(l.assignments(0).jobs[0].waiting_on.is_empty(), "a first placement waits for no one");
    // Host 0 falls silent: its job is preempted, then the node goes down.
    let withdrawn = rec(&mut l, &mut log, Logged::Decision(Decision::Preempt { job: a }), 2.0);
    assert_eq!(l.waiting_on(a), vec![h0.clone(), h1.clone()]);
    rec(&mut l, &mut log, Logged::Event(DriverEvent::NodeDown { node: 0 }), 2.0);
    assert_eq!(l.waiting_on(a), vec![h1.clone()], "a node marked down was fenced by its lease");
    // Moved to hosts 1 and 2, ranks renumbered (rank 1 from host 1 to 2):
    // both hold until host 1 shows its old ranks stopped.
    rec(&mut l, &mut log, Logged::Decision(Decision::Place { job: a, hosts: vec![(1, 1), (2, 1)] }), 3.0);
    for h in [1, 2] {
        assert_eq!(l.assignments(h).jobs[0].waiting_on, vec![h1.clone()], "host {h}");
        assert_eq!(l.held_on(h), 1);
    }
    assert_eq!(l.awaiting_handover(), 1);
    // A replica replaying the log holds the same.
    let mut r = demo();
    r.restore_job(a, spec("a"), 0.5);
    for (seq, e, at) in &log {
        r.replay(*seq, e, *at);
    }
    assert_eq!(r.waiting_on(a), vec![h1.clone()]);
    // A poll sent before host 1 applied the withdrawal, one still stopping
    // the job, and one from a host that never ran it end nothing.
    assert!(!l.ranks_stopped(1, withdrawn - 1, &[]));
    assert!(!l.ranks_stopped(1, l.node_version(1), &[a]));
    assert!(!l.ranks_stopped(2, l.node_version(2), &[]));
    assert_eq!(l.held_on(2), 1);
    assert!(l.ranks_stopped(1, withdrawn, &[]));
    assert!(l.assignments(2).jobs[0].waiting_on.is_empty() && l.held_on(2) == 0 && l.held_on(1) == 0);
    assert_eq!(l.awaiting_handover(), 0);
    // Finished: nothing to hand over.
    assert!(l.record(&Logged::Decision(Decision::Preempt { job: a }), 4.0).is_some());
    assert_eq!(l.waiting_on(a).len(), 2);
    assert!(l.record(&Logged::Event(DriverEvent::Cancelled { job: a }), 4.0).is_some());
    assert!(l.waiting_on(a).is_empty());
}
