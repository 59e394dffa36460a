//! Tests of [`super`] (Castor's sharing rules); the combined policy's
//! parts on the same engine are tested in `crate::combined`.

use super::*;
use crate::{QueuedJob, RunningJob};
use orrery_model::setups::LeafSpine;
use orrery_model::{Topology, Work};

pub(crate) fn cluster() -> Topology {
    LeafSpine {
        racks: 1,
        hosts_per_rack: 2,
        spines: 1,
        gpus_per_host: 4,
        gpu_type: "v100-32gb".into(),
        host_gbps: 100.0,
        uplink_gbps: 100.0,
    }
    .build("two-hosts")
    .expect("valid")
}

pub(crate) fn running<'a>(id: JobId, spec: &'a JobSpec, hosts: &'a [(HostId, u32)], progress: f64) -> RunningJob<'a> {
    RunningJob { progress, ..RunningJob::new(id, spec, hosts) }
}

/// ξ estimates: every pair of classes at `xi`.
pub(crate) fn uniform(xi: f64) -> Colocation {
    let mut c = Colocation::default();
    for a in ["ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation"] {
        for b in ["ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation"] {
            c.table.insert(a, b, xi);
        }
    }
    c
}

pub(crate) fn decide(
    rule: Rule,
    xi: f64,
    running: Vec<RunningJob<'_>>,
    queue: Vec<QueuedJob<'_>>,
    t: &Topology,
) -> Vec<Decision> {
    let free = [0u32, 0];
    let view = ClusterView { now_s: 0.0, topology: t, free_gpus: &free, queue, running };
    let mut p = Colocator::new(rule);
    p.set_colocation(&uniform(xi));
    p.schedule(&view)
}

#[test]
fn castor_shares_only_when_theorem_one_says_it_pays() {
    let t = cluster();
    let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(3600.0), 0.0);
    let b = JobSpec::new("b", "resnet50", 32, 4, Work::Seconds(1800.0), 0.0);
    let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
    let (ha, hb) = ([(0usize, 4u32)], [(1usize, 4u32)]);
    let run = || vec![running(0, &a, &ha, 0.5), running(1, &b, &hb, 0.0)];
    let queue = || vec![QueuedJob::new(2, &new, 0.0)];
    // Light interference: share, with the partner whose pair ends soonest.
    // Both have 1,800 s left alone; ties go to the first.
    let d = decide(Rule::Bsbf, 1.1, run(), queue(), &t);
    assert_eq!(d, vec![Decision::Share { job: 2, free: vec![], shared: vec![(0, 0, 4)], sub_batch: 32 }]);
    // ξ = 2 both ways is time slicing. Beside 1,800 s left, the 600 s
    // newcomer still gains (3,600 s together against 4,200 s after the
    // running job; issue 17): the paper's Theorem 1 shares.
    let d = decide(Rule::Bsbf, 2.0, run(), queue(), &t);
    assert_eq!(d, vec![Decision::Share { job: 2, free: vec![], shared: vec![(0, 0, 4)], sub_batch: 32 }]);
    // Orrery's earlier rule compared with the shorter job first (3,000 s)
    // and waited; it is kept as `castor:shorter-first`.
    let mut shorter_first = Colocator::new(Rule::Bsbf);
    shorter_first.back_to_back = BackToBack::ShorterFirst;
    assert_eq!(shorter_first.name(), "castor:shorter-first");
    shorter_first.set_colocation(&uniform(2.0));
    let view = ClusterView { now_s: 0.0, topology: &t, free_gpus: &[0, 0], queue: queue(), running: run() };
    assert!(shorter_first.schedule(&view).is_empty());
    // Heavier interference than time slicing: no gain, the job waits.
    assert!(decide(Rule::Bsbf, 3.0, run(), queue(), &t).is_empty());
    // First-fit sharing shares regardless, with the first running job.
    let d = decide(Rule::Ffs, 2.0, run(), queue(), &t);
    assert_eq!(d, vec![Decision::Share { job: 2, free: vec![], shared: vec![(0, 0, 4)], sub_batch: 32 }]);
}

#[test]
fn a_long_running_policy_forgets_the_jobs_that_have_left() {
    // Job 0 holds host 0 for the whole run; every 10 s a one-GPU job
    // arrives, starts on host 1 and has ended by the next round. 2,000
    // jobs pass through; the caches keep at most twice Forget's floor,
    // and job 0's time on GPUs survives every pruning.
    let t = cluster();
    let long = JobSpec::new("long", "resnet50", 32, 4, Work::Seconds(1e6), 0.0);
    let home = [(0usize, 4u32)];
    let mut p = Colocator::new(Rule::Bsbf);
    (p.share, p.preempt, p.starvation_guard, p.shrink, p.price_gpu_time) = (false, true, true, true, true);
    let mut most = 0;
    for i in 1..=2_000usize {
        let now_s = 10.0 * i as f64;
        let short = JobSpec::new(format!("s{i}"), "resnet50", 32, 1, Work::Seconds(5.0), now_s);
        let view = ClusterView {
            now_s,
            topology: &t,
            free_gpus: &[0, 4],
            queue: vec![QueuedJob::new(i, &short, 0.0)],
            running: vec![running(0, &long, &home, 0.0)],
        };
        let out = p.schedule(&view);
        assert!(out.iter().any(|d| matches!(d, Decision::Place { job, .. } if *job == i)), "{out:?}");
        most = most.max(p.cached());
    }
    assert!(most > 100, "the caches fill ({most})");
    assert!(most <= 2 * Forget::FLOOR + 8, "bounded: {most}");
    // Held GPUs from the first round (10 s) to the last (20,000 s).
    assert_eq!(p.run_s.get(0), Some(&19_990.0));
}

#[test]
fn high_priority_goes_first_only_when_asked() {
    // 4 free GPUs, a long high-priority job and a short low-priority one.
    let t = cluster();
    let b = JobSpec::new("b", "resnet50", 32, 4, Work::Seconds(1_000.0), 0.0);
    let mut high = JobSpec::new("h", "resnet50", 32, 4, Work::Seconds(36_000.0), 0.0);
    high.priority = orrery_model::Priority::High;
    let low = JobSpec::new("l", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
    let hb = [(1usize, 4u32)];
    let view = ClusterView {
        now_s: 0.0,
        topology: &t,
        free_gpus: &[4, 0],
        queue: vec![QueuedJob::new(2, &high, 0.0), QueuedJob::new(3, &low, 0.0)],
        running: vec![running(1, &b, &hb, 0.0)],
    };
    let mut p = Colocator::new(Rule::Bsbf);
    p.spare_high_priority = true;
    let first = |d: Vec<Decision>| match d.first() {
        Some(Decision::Place { job, .. }) => Some(*job),
        _ => None,
    };
    assert_eq!(first(p.schedule(&view)), Some(3), "shortest first");
    p.high_first = true;
    assert_eq!(first(p.schedule(&view)), Some(2), "its class first");
}

#[test]
fn castor_prefers_the_partner_with_the_smaller_pair_jct() {
    let t = cluster();
    let long = JobSpec::new("long", "resnet50", 32, 4, Work::Seconds(10_000.0), 0.0);
    let short = JobSpec::new("short", "resnet50", 32, 4, Work::Seconds(1_000.0), 0.0);
    let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
    let (h0, h1) = ([(0usize, 4u32)], [(1usize, 4u32)]);
    let d = decide(
        Rule::Bsbf,
        1.1,
        vec![running(0, &long, &h0, 0.0), running(1, &short, &h1, 0.0)],
        vec![QueuedJob::new(2, &new, 0.0)],
        &t,
    );
    assert_eq!(d, vec![Decision::Share { job: 2, free: vec![], shared: vec![(1, 1, 4)], sub_batch: 32 }]);
}

#[test]
fn castor_accumulates_when_the_batch_does_not_fit_beside_the_partner() {
    let t = cluster();
    // BERT at 32 per GPU needs about 22 GiB; beside a ResNet-50 at 128
    // (about 10 GiB) on a 32 GiB V100 it must halve its sub-batch.
    let r50 = JobSpec::new("r", "resnet50", 128, 4, Work::Seconds(5_000.0), 0.0);
    let bert = JobSpec::new("b", "bert", 32, 4, Work::Seconds(600.0), 0.0);
    let h0 = [(0usize, 4u32)];
    let d = decide(Rule::Bsbf, 1.05, vec![running(0, &r50, &h0, 0.0)], vec![QueuedJob::new(1, &bert, 0.0)], &t);
    let Some(Decision::Share { sub_batch, .. }) = d.first() else { panic!("{d:?}") };
    let (rm, bm) = (orrery_model::zoo::model("resnet50").expect("zoo"), orrery_model::zoo::model("bert").expect("zoo"));
    assert!(*sub_batch < 32, "{sub_batch}");
    assert!(memory_mib(rm, 128) + memory_mib(bm, *sub_batch) <= 32.0 * 1024.0);
    assert!(memory_mib(rm, 128) + memory_mib(bm, *sub_batch * 2) > 32.0 * 1024.0);
}

#[test]
fn blocking_stops_at_the_first_job_that_cannot_start() {
    let t = cluster();
    let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(3600.0), 0.0);
    let a2 = JobSpec::new("a2", "resnet50", 32, 2, Work::Seconds(3600.0), 0.0);
    let (h0, h1) = ([(0usize, 2u32)], [(1usize, 4u32)]);
    // Interference far beyond time slicing (ξ = 100): nothing shares. The
    // 8-GPU job is shortest and waits; the 1-GPU job behind it fits the 2
    // free GPUs.
    let big = JobSpec::new("big", "resnet50", 32, 8, Work::Seconds(60.0), 0.0);
    let small = JobSpec::new("small", "resnet50", 32, 1, Work::Seconds(600.0), 0.0);
    let free = [2u32, 0];
    let run = || vec![running(0, &a2, &h0, 0.0), running(1, &a, &h1, 0.0)];
    let queue = || vec![QueuedJob::new(2, &big, 0.0), QueuedJob::new(3, &small, 0.0)];
    let mut backfill = Colocator::new(Rule::Bsbf);
    backfill.set_colocation(&uniform(100.0));
    let v = ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: queue(), running: run() };
    assert_eq!(backfill.schedule(&v), vec![Decision::Place { job: 3, hosts: vec![(0, 1)] }]);
    let mut blocking = by_name_blocking();
    blocking.set_colocation(&uniform(100.0));
    assert!(blocking.schedule(&v).is_empty());
    assert_eq!(blocking.name(), "castor:blocking");
}

fn by_name_blocking() -> Box<dyn Policy> {
    crate::compose::by_name("castor:blocking", 0).expect("catalogued")
}

#[test]
fn lucid_packs_only_light_pairs_of_one_host_and_the_same_size() {
    let t = cluster();
    let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(3600.0), 0.0);
    let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
    let two = JobSpec::new("m", "resnet50", 32, 2, Work::Seconds(600.0), 0.0);
    let h0 = [(0usize, 4u32)];
    let d = decide(Rule::Lucid, 1.2, vec![running(0, &a, &h0, 0.0)], vec![QueuedJob::new(1, &new, 0.0)], &t);
    assert_eq!(d.len(), 1);
    assert!(
        decide(Rule::Lucid, 1.3, vec![running(0, &a, &h0, 0.0)], vec![QueuedJob::new(1, &new, 0.0)], &t).is_empty()
    );
    assert!(
        decide(Rule::Lucid, 1.2, vec![running(0, &a, &h0, 0.0)], vec![QueuedJob::new(1, &two, 0.0)], &t).is_empty()
    );
    // Castor would share the 2-GPU job on half of a's GPUs.
    let d = decide(Rule::Bsbf, 1.2, vec![running(0, &a, &h0, 0.0)], vec![QueuedJob::new(1, &two, 0.0)], &t);
    assert_eq!(d, vec![Decision::Share { job: 1, free: vec![], shared: vec![(0, 0, 2)], sub_batch: 32 }]);
}
