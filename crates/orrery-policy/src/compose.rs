//! Policies composed by name: queue ordering × placement × network
//! augmentation, e.g. `themis`, `tiresias/random`, `themis+cassini`,
//! `k8s-default`, `metronome` (`orrery policies` lists them).
//!
//! A scheduling round ([`Composed::schedule`]), for Q waiting and R running
//! jobs: O((Q + R) log(Q + R)) to order them, then one placement per waiting
//! job, plus one trial placement of the deserving jobs per preempted job.

use crate::baseline::racks;
use crate::order::{self, Key, Order};
use crate::order::{deserving_and_losers, fewest_victims};
use crate::placement::{self, Placement};
use crate::{ClusterView, Decision, JobId, Policy};

/// An ordering with a placement.
pub struct Composed {
    order: Box<dyn Order>,
    placement: Box<dyn Placement>,
    /// Name reported in results.
    name: String,
    /// Give every job the network to itself (the "ideal" baseline).
    isolated: bool,
    /// Preemptions decided.
    pub preemptions: u64,
}

impl Composed {
    /// `order` with `placement`, reported as `name`.
    pub fn new(order: Box<dyn Order>, placement: Box<dyn Placement>, name: impl Into<String>) -> Self {
        Composed { order, placement, name: name.into(), isolated: false, preemptions: 0 }
    }

    /// Which running jobs lose their GPUs this round, worst first: walk all
    /// jobs by key; a job "deserves" GPUs while the GPUs not held by
    /// non-preemptible jobs last; running jobs that do not deserve theirs are
    /// preempted, worst first, only as long as the deserving waiting jobs do
    /// not all fit yet.
    fn victims(&mut self, view: &ClusterView<'_>, rack_of: &[usize], queued: &[(Key, usize)]) -> Vec<JobId> {
        let mut contenders: Vec<(Key, bool, usize)> = Vec::new(); // (key, running?, index)
        for (i, r) in view.running.iter().enumerate() {
            if let Some(k) = (!r.paused).then(|| self.order.running_key(view, r)).flatten() {
                contenders.push((k, true, i));
            }
        }
        if contenders.is_empty() {
            return Vec::new();
        }
        // The GPUs the jobs that keep theirs do not hold, counted only when
        // some running job may lose its GPUs (most rounds have none, and
        // each job's spec is a cache miss away).
        let mut budget = i64::from(view.topology.gpu_count());
        let mut contending = contenders.iter().map(|c| c.2).peekable();
        for (i, r) in view.running.iter().enumerate() {
            if contending.next_if_eq(&i).is_none() {
                budget -= i64::from(r.spec.gpus());
            }
        }
        contenders.extend(queued.iter().map(|&(k, i)| (k, false, i)));
        // Ties: running jobs first (no swaps between equals).
        contenders.sort_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1)).then(b.1.cmp(&a.1)));
        let walk = contenders.iter().map(|&(_, running, i)| {
            (running, i, if running { view.running[i].spec.gpus() } else { view.queue[i].spec.gpus() })
        });
        let (deserving, losers) = deserving_and_losers(walk, budget);
        // Preempt only if that lets the deserving jobs in: when they still do
        // not fit (fragmentation), the victims would be placed again at once
        // and preempted again in the next round, forever.
        let victims = fewest_victims(view, &losers, |free, victims| {
            let leaving: Vec<JobId> = victims.iter().map(|&v| view.running[v].id).collect();
            self.placement.prepare(view, &leaving);
            self.all_fit(view, rack_of, free, &deserving)
        });
        victims.into_iter().map(|v| view.running[v].id).collect()
    }

    /// Whether the waiting jobs `queue_idx` all fit in `free`, in order.
    fn all_fit(&mut self, view: &ClusterView<'_>, rack_of: &[usize], free: &[u32], queue_idx: &[usize]) -> bool {
        let mut free = free.to_vec();
        queue_idx.iter().all(|&i| match self.placement.place(view, rack_of, &free, view.queue[i].spec) {
            Some(hosts) => {
                for (h, g) in hosts {
                    free[h] -= g;
                }
                true
            }
            None => false,
        })
    }
}

impl Policy for Composed {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        self.order.forget_departed(view);
        let total = view.topology.gpu_count();
        let rack_of = racks(view);
        let mut out = Vec::new();
        let mut queued: Vec<(Key, usize)> = Vec::new();
        for (i, q) in view.queue.iter().enumerate() {
            if q.spec.gpus() == 0 || q.spec.gpus() > total {
                let reason = format!("needs {} GPUs; the cluster has {total}", q.spec.gpus());
                out.push(Decision::Reject { job: q.id, reason });
            } else {
                queued.push((self.order.queued_key(view, q), i));
            }
        }
        // Stable: equal keys keep arrival order.
        queued.sort_by(|a, b| a.0.0.total_cmp(&b.0.0).then(a.0.1.total_cmp(&b.0.1)));
        let victims = if queued.is_empty() { Vec::new() } else { self.victims(view, rack_of, &queued) };
        let mut free = view.free_gpus.to_vec();
        for &v in &victims {
            if let Some(r) = view.running.iter().find(|r| r.id == v) {
                for &(h, g) in r.hosts {
                    free[h] += g;
                }
            }
            self.preemptions += 1;
            out.push(Decision::Preempt { job: v });
        }
        self.placement.prepare(view, &victims);
        for (_, i) in queued {
            let spec = view.queue[i].spec;
            match self.placement.place(view, rack_of, &free, spec) {
                Some(hosts) => {
                    for &(h, g) in &hosts {
                        free[h] -= g;
                    }
                    self.placement.commit(view, spec, &hosts);
                    out.push(Decision::Place { job: view.queue[i].id, hosts });
                }
                // A gang its placement can never hold is turned away, as
                // Kueue marks it inadmissible, rather than held at the
                // head of the queue forever.
                None => match self.placement.never_fits(view, rack_of, spec) {
                    Some(reason) => out.push(Decision::Reject { job: view.queue[i].id, reason }),
                    None if self.order.blocking() => break,
                    None => {}
                },
            }
        }
        out
    }

    /// By the ordering's keys, ties in arrival order. O(Q log Q).
    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        let keys: Vec<Key> = view.queue.iter().map(|q| self.order.queued_key(view, q)).collect();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| keys[a].0.total_cmp(&keys[b].0).then(keys[a].1.total_cmp(&keys[b].1)));
        order
    }

    fn tick_s(&self) -> Option<f64> {
        self.order.tick_s()
    }

    fn isolated_network(&self) -> bool {
        self.isolated
    }
}

/// Orderings by name.
pub const ORDERS: &[(&str, &str)] = &[
    ("fifo", "arrival order; the head of the queue blocks the rest"),
    ("sjf", "shortest run time alone first; non-preemptive, head-of-line blocking"),
    ("ssf", "smallest GPU service (GPUs x run time alone) first; non-preemptive, head-of-line blocking"),
    ("srtf", "shortest remaining time alone first; preemptive, backfills"),
    ("tiresias", "Tiresias 2D-LAS: 2 queues split at 3,600 GPU-s of attained service, FIFO within, preempts across"),
    ("themis", "Themis finish-time fairness: 10-min leases, released GPUs go to the worst T_shared/T_alone first"),
];

/// Placements by name.
pub const PLACEMENTS: &[(&str, &str)] = &[
    ("consolidated", "one host if possible, else the fewest racks (default)"),
    ("random", "hosts drawn at random (seeded)"),
    ("spread", "kube-scheduler LeastAllocated, pod by pod"),
    (
        "latency",
        "Diktyo NetworkOverhead: lowest latency to the job's placed pods and its dependencies' pods, pod by pod",
    ),
    ("exclusive", "reserve each host's mean send rate on its NIC; wait when it does not fit"),
    ("bidding", "Plebiscito's bandwidth-aware SGF bids (Eq. 9, alpha = 0.5), placed by the central greedy"),
    (
        "tas-required:LEVEL",
        "Kubernetes/Kueue TAS, LEVEL host, rack or pod: the whole gang in the fullest domain that holds it, or it waits (rejected if none ever could)",
    ),
    ("tas-preferred:LEVEL", "Kueue TAS preferred: one domain if one holds it, else the fewest, emptiest first"),
    (
        "hypernode:TIER",
        "Volcano HyperNodes, highestTierAllowed TIER (1 rack, 2 pod): the lowest tier that holds the gang",
    ),
    (
        "slurm-block[:SEGMENT]",
        "Slurm topology/block: one block of 1, 2, 4, ... racks, the lowest level that holds the job; --segment=SEGMENT hosts each in one rack",
    ),
];

/// Every policy name with one line about it (`orrery policies`).
pub const CATALOGUE: &[(&str, &str)] = &[
    ("fifo", "arrival order, head-of-line blocking; consolidated first fit (one host, else fewest racks)"),
    ("sjf", "shortest run time alone first, non-preemptive; consolidated"),
    ("ssf", "smallest GPU service (GPUs x run time alone) first, non-preemptive; consolidated"),
    ("srtf", "shortest remaining time first, preemptive; consolidated"),
    ("tiresias", "Tiresias 2D-LAS (2 queues, 3,600 GPU-s), preempts across queues; consolidated"),
    ("themis", "Themis finish-time fairness with 10-min leases; consolidated"),
    ("random", "= fifo/random: arrival order; GPUs from hosts drawn at random (seeded)"),
    ("ideal", "fifo placement; every job has the network to itself"),
    ("k8s-default", "= fifo/spread: kube-scheduler, pod by pod, LeastAllocated (pods of a job spread out)"),
    ("diktyo", "= fifo/latency: Diktyo, pod by pod, lowest latency to the job's placed pods, then LeastAllocated"),
    ("exclusive-bw", "= fifo/exclusive: a job reserves its mean rate on its hosts' NICs; waits when it does not fit"),
    (
        "tas-required:rack",
        "= fifo/tas-required:rack: Kubernetes 1.36 / Kueue TAS, every gang inside one rack or waiting; larger than a rack: rejected",
    ),
    (
        "tas-preferred:rack",
        "= fifo/tas-preferred:rack: Kueue TAS preferred, one rack if one holds the gang, else the fewest",
    ),
    (
        "hypernode:1",
        "= fifo/hypernode:1: Volcano HyperNodes up to tier 1: every gang inside one rack or waiting; larger than a rack: rejected",
    ),
    (
        "slurm-block",
        "= fifo/slurm-block: Slurm topology/block, each job inside one block of 1, 2, 4, ... racks, the smallest that holds it",
    ),
    (
        "crux",
        "= fifo+crux: Crux (SIGCOMM'24) over FIFO's consolidated placement: paths and 8 strict-priority classes by GPU intensity",
    ),
    (
        "metronome",
        "Metronome: filter/score (Eq. 18)/normalize (Eq. 19)/reserve per pod, priority-aware alignment, A_T/O_T",
    ),
    ("pollux", "Pollux: elastic GPUs by goodput (throughput x statistical efficiency), re-allocated every 60 s"),
    (
        "castor",
        "Castor SJF-BSBF: shortest first; shares a running job's GPUs when Theorem 1 says it pays (Algorithms 1-2)",
    ),
    ("castor:blocking", "castor that stops at the first job it cannot start (head-of-line blocking, as sjf)"),
    (
        "castor:shorter-first",
        "castor whose Theorem 1 compares sharing with the shorter job first (orrery's earlier rule), not the running job first",
    ),
    (
        "castor:next-free",
        "castor whose Theorem 1 compares sharing with waiting for the next free GPUs (running jobs' remaining times), not for the partner (orrery's rule)",
    ),
    ("sjf-ffs", "SJF with first-fit GPU sharing whenever free GPUs are short (Castor's baseline)"),
    ("lucid", "Lucid-style packing: same-size single-host pairs with light interference, only when a job would wait"),
    ("metronome-no-stage3", "Metronome ablation (Table VII): compact rotations, no cushion"),
    ("metronome-no-monitor", "Metronome ablation (Table VIII): no stop-and-wait monitoring"),
    (
        "metronome:place-on-loops",
        "metronome without the Filter's dependency-loop rule (orrery's variant): a pod may close a loop in the Affinity graph, whose first path then sets the shifts",
    ),
    (
        "metronome:pause-only",
        "metronome whose controller only pauses (orrery's variant): no re-profiling of a job that stays slow after a pause",
    ),
    (
        "metronome:measured",
        "metronome measured first (issue 68): a job it would pace runs unpaced until its controller's rule measures it slow (over 110% of its slot more than 5 times in 10), and its pace is removed when the next 10 iterations are no shorter",
    ),
    (
        "metronome:open-loop",
        "metronome whose slots keep the modelled period (the paper's rule): they do not follow the reference job's measured period and phase",
    ),
    ("pinned", "experiment files only: each job on the hosts `[workload] pins` gives it, in arrival order"),
    (
        "pinned:in-step",
        "pinned, with every job's first iteration held to one common start 20 s after the first placement (unshifted rings in step, as the fluid model assumes)",
    ),
    (
        "pinned:apart",
        "pinned, with each later job's first iteration held half its modelled iteration after the one before (rings started half a period apart)",
    ),
    ("pinned:in-step+cassini", "CASSINI's shift over rings started in step: it must move one of them half a period"),
    (
        "pinned:in-step+cassini:measured",
        "the same, measured first: a ring is aligned only once its all-reduces are measured to collide (issue 68)",
    ),
    ("pinned+cassini:measured", "pinned+cassini, measured first (aligned only on a measured collision)"),
    ("pinned:apart+cassini:measured", "pinned:apart+cassini, measured first: rings that do not collide are left alone"),
    ("pinned+crux", "Crux's paths and priority classes over the experiment's pins"),
    ("pinned:in-step+crux", "Crux over rings started in step (pinned:in-step)"),
    (
        "pinned:apart+cassini",
        "CASSINI's shift over rings started half a period apart: a shift must converge from any start",
    ),
    (
        "plebiscito:UTILITY[:unaware]",
        "Plebiscito: one agent per host bids in a max-consensus auction (sgf, lgf, yarn, tetris, tiresias, drf, themis); :unaware sets alpha = 1",
    ),
    (
        "orrery[-no-PART...]",
        "the five papers in one, each part only where it pays: shortest remaining time first with preemption (never of high priority), Pollux's goodput sizing (smaller when that beats waiting for the next free GPUs or when its GPU time, priced by the jobs it delays, is spent on the network; up to twice the request on idle GPUs, for running jobs too) and Castor's sharing when it beats that wait (never sharing with high priority), Plebiscito's bids where first fit would cross a loaded link, CASSINI shifts with Metronome's priorities, FORESIGHT's routes; parts share, bandwidth, interleave, routes, size, preempt",
    ),
    ("ORDER/PLACEMENT", "any ordering with any placement (see below), e.g. tiresias/random"),
    (
        "POLICY+foresight",
        "FORESIGHT on any placement: per-iteration delays and throttles, spines by edge colouring, repair loop, then orrery's fallback ladder; +foresight-paper is the paper's rule alone (no valid schedule: ECMP); ablations +ts, +ro, +sub, +routes, +perfect; +MODE:open-loop times the plan with the model and a Shift per iteration (the paper's open loop) instead of a timetable on the measured time base; +MODE:replan re-makes a plan its jobs overrun from their measured compute and communication instead of dropping its timing; +MODE:measured times a part only once its jobs are measured colliding, and drops the timing when it does not shorten them",
    ),
    (
        "POLICY+crux",
        "Crux on any of the above: GPU intensity (compute over the iteration's time on its busiest link) orders path selection (least loaded equal-cost path per flow) and priorities, compressed to 8 switch queues (strict priority)",
    ),
    (
        "POLICY+cassini",
        "CASSINI Alg. 2 on any of the above: ranks 10 candidate placements (the host scheduler's, and its first fit anchored at each other rack; random hosts under a random host scheduler) by the fabric links they cross, then link compatibility (+cassini:paper: compatibility only), aligns time-shifts (+cassini:measured: only once a job's all-reduces are measured to collide, and gives up an alignment that did not pay)",
    ),
];

fn order(name: &str) -> Option<Box<dyn Order>> {
    Some(match name {
        "fifo" => Box::new(order::Fifo),
        "sjf" => Box::new(order::ShortestFirst::new(false)),
        "ssf" => Box::new(order::ShortestFirst::new(true)),
        "srtf" => Box::new(order::Srtf::default()),
        "tiresias" => Box::new(order::Tiresias::default()),
        "themis" => Box::new(order::Themis::default()),
        _ => return None,
    })
}

fn placement(name: &str, seed: u64) -> Option<Box<dyn Placement>> {
    Some(match name {
        "consolidated" => Box::new(placement::Consolidated::default()),
        "random" => Box::new(placement::Random::new(seed)),
        "spread" => Box::new(placement::Spread),
        "latency" => Box::new(placement::Latency::default()),
        "exclusive" => Box::new(placement::ExclusiveBandwidth::default()),
        "bidding" => Box::new(crate::plebiscito::Bidding::aware(orrery_plebiscito::utility::Utility::Sgf)),
        tas if tas.starts_with("tas-") => Box::new(crate::topology_aware::TopologyAware::by_name(tas)?),
        hn if hn.starts_with("hypernode:") => Box::new(crate::topology_aware::HyperNode::by_name(hn)?),
        sb if sb.starts_with("slurm-block") => Box::new(crate::slurm_block::SlurmBlock::by_name(sb)?),
        _ => return None,
    })
}

/// A policy by name: one of [`CATALOGUE`], `ORDER/PLACEMENT`, or any of them
/// with `+cassini`. `seed` drives random placements and CASSINI's candidates.
pub fn by_name(name: &str, seed: u64) -> Option<Box<dyn Policy>> {
    for mode in [
        crate::foresight::policy::Mode::Ts,
        crate::foresight::policy::Mode::Ro,
        crate::foresight::policy::Mode::Sub,
        crate::foresight::policy::Mode::Foresight,
        crate::foresight::policy::Mode::Paper,
        crate::foresight::policy::Mode::Routes,
        crate::foresight::policy::Mode::Perfect,
    ] {
        if let Some(host) = name.strip_suffix(&format!("+{}", mode.name())) {
            return by_name(host, seed)
                .map(|inner| Box::new(crate::foresight::policy::Foresight::new(inner, mode)) as Box<dyn Policy>);
        }
        if let Some(host) = name.strip_suffix(&format!("+{}:open-loop", mode.name())) {
            return by_name(host, seed).map(|inner| {
                Box::new(crate::foresight::policy::Foresight::new(inner, mode).open_loop()) as Box<dyn Policy>
            });
        }
        if let Some(host) = name.strip_suffix(&format!("+{}:replan", mode.name())) {
            return by_name(host, seed).map(|inner| {
                Box::new(crate::foresight::policy::Foresight::new(inner, mode).replanning()) as Box<dyn Policy>
            });
        }
        if let Some(host) = name.strip_suffix(&format!("+{}:measured", mode.name())) {
            return by_name(host, seed).map(|inner| {
                Box::new(crate::foresight::policy::Foresight::new(inner, mode).measured()) as Box<dyn Policy>
            });
        }
    }
    if name == "crux" {
        return by_name("fifo+crux", seed);
    }
    if let Some(host) = name.strip_suffix("+crux") {
        return by_name(host, seed).map(|inner| Box::new(crate::crux::Crux::new(inner)) as Box<dyn Policy>);
    }
    if let Some(parts) = crate::combined::Parts::parse(name) {
        return Some(Box::new(crate::combined::Combined::new(parts, seed)));
    }
    if name.starts_with("plebiscito:") {
        return crate::plebiscito::Plebiscito::by_name(name, seed).map(|p| Box::new(p) as Box<dyn Policy>);
    }
    {
        use crate::cassini::{Rank, Timing};
        for (suffix, rank, timing) in [
            ("+cassini:paper", Rank::Compatibility, Timing::AtPlacement),
            ("+cassini:measured", Rank::LocalityFirst, Timing::WhenCollided),
            ("+cassini", Rank::LocalityFirst, Timing::AtPlacement),
        ] {
            if let Some(host) = name.strip_suffix(suffix) {
                return by_name(host, seed).map(|inner| {
                    let mut cassini = crate::cassini::Cassini::new(inner, seed ^ 0xCA55);
                    cassini.rank = rank;
                    cassini.timing = timing;
                    // The host scheduler's candidates: random ones for a host
                    // scheduler that places at random.
                    if host == "random" || host.ends_with("/random") {
                        cassini.draw = crate::cassini::Candidates::Random;
                    }
                    Box::new(cassini) as Box<dyn Policy>
                });
            }
        }
    }
    let (o, p) = match name {
        "metronome" => return Some(Box::new(crate::metronome::Metronome::default())),
        "pollux" => return Some(Box::new(crate::pollux::Pollux::default())),
        "castor" => {
            return Some(Box::new(crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Bsbf)));
        }
        "castor:blocking" => {
            let mut c = crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Bsbf);
            c.blocking = true;
            return Some(Box::new(c));
        }
        "castor:shorter-first" => {
            let mut c = crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Bsbf);
            c.back_to_back = crate::castor::BackToBack::ShorterFirst;
            return Some(Box::new(c));
        }
        "castor:next-free" => {
            let mut c = crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Bsbf);
            c.next_free = true;
            return Some(Box::new(c));
        }
        "sjf-ffs" => {
            return Some(Box::new(crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Ffs)));
        }
        "lucid" => {
            return Some(Box::new(crate::castor::colocate::Colocator::new(crate::castor::colocate::Rule::Lucid)));
        }
        "metronome-no-stage3" => {
            let mut m = crate::metronome::Metronome::default();
            m.third_stage = false;
            return Some(Box::new(m));
        }
        "metronome-no-monitor" => {
            let mut m = crate::metronome::Metronome::default();
            m.monitor = false;
            return Some(Box::new(m));
        }
        "metronome:place-on-loops" => {
            let mut m = crate::metronome::Metronome::default();
            m.loop_filter = false;
            return Some(Box::new(m));
        }
        "metronome:pause-only" => {
            let mut m = crate::metronome::Metronome::default();
            m.reprofile = false;
            return Some(Box::new(m));
        }
        "metronome:measured" => {
            let mut m = crate::metronome::Metronome::default();
            m.measured = true;
            return Some(Box::new(m));
        }
        "metronome:open-loop" => {
            let mut m = crate::metronome::Metronome::default();
            m.closed_loop = false;
            return Some(Box::new(m));
        }
        "random" => ("fifo", "random"),
        "k8s-default" => ("fifo", "spread"),
        "diktyo" => ("fifo", "latency"),
        "exclusive-bw" => ("fifo", "exclusive"),
        tas if tas.starts_with("tas-required:")
            || tas.starts_with("tas-preferred:")
            || tas.starts_with("hypernode:")
            || tas.starts_with("slurm-block") =>
        {
            ("fifo", tas)
        }
        "ideal" => {
            let mut c = Composed::new(order("fifo")?, placement("consolidated", seed)?, "ideal");
            c.isolated = true;
            return Some(Box::new(c));
        }
        _ => name.split_once('/').unwrap_or((name, "consolidated")),
    };
    Some(Box::new(Composed::new(order(o)?, placement(p, seed)?, name)))
}

/// The names [`with_pins`] places on the experiment's pins: a job without a
/// pin never starts under them. Kept beside its match (a test holds them in step).
pub const PINNED_NAMES: [&str; 22] = [
    "pinned",
    "pinned:in-step",
    "pinned:apart",
    "pinned:in-step+cassini",
    "pinned:apart+cassini",
    "pinned:in-step+cassini:measured",
    "pinned:apart+cassini:measured",
    "pinned+cassini:measured",
    "ecmp",
    "ts",
    "ro",
    "sub",
    "foresight",
    "foresight-paper",
    "foresight:open-loop",
    "foresight:replan",
    "foresight:measured",
    "routes",
    "perfect",
    "pinned+cassini",
    "pinned+crux",
    "pinned:in-step+crux",
];

/// A policy by name: those of [`by_name`], plus `pinned` (and
/// `pinned+cassini`) and FORESIGHT's modes over a placement given as pins
/// (job id → GPUs per host), as experiments reproduce a paper's set-up.
pub fn with_pins(
    name: &str,
    seed: u64,
    pins: &std::collections::BTreeMap<String, Vec<(usize, u32)>>,
) -> Option<Box<dyn crate::Policy>> {
    let pinned = || Box::new(crate::baseline::Pinned { pins: pins.clone(), label: None }) as Box<dyn crate::Policy>;
    use crate::foresight::policy::{Foresight, Mode};
    let mode = |m| Some(Box::new(Foresight::new(pinned(), m)) as Box<dyn crate::Policy>);
    match name {
        "pinned" => Some(pinned()),
        "pinned:in-step" => {
            Some(Box::new(crate::baseline::InStep::new(crate::baseline::Pinned { pins: pins.clone(), label: None })))
        }
        "pinned:apart" => {
            Some(Box::new(crate::baseline::InStep::apart(crate::baseline::Pinned { pins: pins.clone(), label: None })))
        }
        "pinned:in-step+cassini"
        | "pinned:apart+cassini"
        | "pinned:in-step+cassini:measured"
        | "pinned:apart+cassini:measured" => {
            let plain = crate::baseline::Pinned { pins: pins.clone(), label: None };
            let start = if name.starts_with("pinned:apart") {
                crate::baseline::InStep::apart(plain)
            } else {
                crate::baseline::InStep::new(plain)
            };
            let mut c = crate::cassini::Cassini::new(Box::new(start), seed);
            c.candidates = 1; // the pins are the placement
            if name.ends_with(":measured") {
                c.timing = crate::cassini::Timing::WhenCollided;
            }
            Some(Box::new(c))
        }
        // FORESIGHT's names over the experiment's placement (Fig. 5).
        "ecmp" => Some(Box::new(crate::baseline::Pinned { pins: pins.clone(), label: Some("ecmp".into()) })),
        "ts" => mode(Mode::Ts),
        "ro" => mode(Mode::Ro),
        "sub" => mode(Mode::Sub),
        "foresight" => mode(Mode::Foresight),
        "foresight-paper" => mode(Mode::Paper),
        "foresight:open-loop" => Some(Box::new(Foresight::new(pinned(), Mode::Foresight).open_loop())),
        "foresight:replan" => Some(Box::new(Foresight::new(pinned(), Mode::Foresight).replanning())),
        "foresight:measured" => Some(Box::new(Foresight::new(pinned(), Mode::Foresight).measured())),
        "routes" => mode(Mode::Routes),
        "perfect" => mode(Mode::Perfect),
        "pinned+crux" => Some(Box::new(crate::crux::Crux::new(pinned()))),
        "pinned:in-step+crux" => {
            Some(Box::new(crate::crux::Crux::new(Box::new(crate::baseline::InStep::new(crate::baseline::Pinned {
                pins: pins.clone(),
                label: None,
            })))))
        }
        "pinned+cassini" | "pinned+cassini:measured" => {
            let mut c = crate::cassini::Cassini::new(pinned(), seed);
            c.candidates = 1; // the pins are the placement
            if name.ends_with(":measured") {
                c.timing = crate::cassini::Timing::WhenCollided;
            }
            Some(Box::new(c))
        }
        _ => by_name(name, seed),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn pinned_names_are_exactly_the_names_with_pins_adds() {
        let pins = Default::default();
        for name in PINNED_NAMES {
            assert!(with_pins(name, 0, &pins).is_some() && by_name(name, 0).is_none(), "{name}");
        }
    }

    use super::*;
    use crate::QueuedJob;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Work};

    fn view<'a>(t: &'a orrery_model::Topology, free: &'a [u32], jobs: &'a [JobSpec]) -> ClusterView<'a> {
        ClusterView {
            now_s: 0.0,
            topology: t,
            free_gpus: free,
            queue: jobs.iter().enumerate().map(|(id, spec)| QueuedJob::new(id, spec, 0.0)).collect(),
            running: Vec::new(),
        }
    }

    fn job(workers: u32) -> JobSpec {
        JobSpec::new("j", "vgg16", 32, workers, Work::Iterations(10), 0.0)
    }

    #[test]
    fn fifo_consolidates_into_one_rack_and_blocks_at_the_head() {
        // 4 racks × 4 hosts × 8 GPUs.
        let t = LeafSpine::with_oversubscription(4, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let mut free = vec![8u32; 16];
        free[0] = 2; // rack 0 has 26 free, the others 32.
        let jobs = [job(20), job(200), job(1)];
        let mut fifo = by_name("fifo", 0).expect("fifo");
        let d = fifo.schedule(&view(&t, &free, &jobs));
        // The 20-GPU job fits in one rack (rack 1, hosts 4..8): 8 + 8 + 4.
        // The 200-GPU job can never fit: rejected (first), and the 1-GPU job behind it runs.
        assert!(matches!(d[0], Decision::Reject { job: 1, .. }));
        assert_eq!(d[1], Decision::Place { job: 0, hosts: vec![(4, 8), (5, 8), (6, 4)] });
        assert_eq!(d[2], Decision::Place { job: 2, hosts: vec![(0, 1)] });
        // Head-of-line blocking: a job that does not fit now stops the queue.
        let jobs = [job(124), job(1)];
        assert!(fifo.schedule(&view(&t, &free, &jobs)).is_empty());
    }

    #[test]
    fn sjf_and_ssf_order_by_run_time_and_service() {
        let t = LeafSpine::with_oversubscription(1, 2, 1, 8, "v100", 100.0, 1.0).build("t").expect("valid");
        let free = vec![8u32; 2];
        // Job 0: 8 GPUs, 100 iterations; job 1: 1 GPU, 300 iterations; job 2: 1 GPU, 10 iterations.
        let jobs = [
            JobSpec::new("a", "vgg16", 32, 8, Work::Iterations(100), 0.0),
            JobSpec::new("b", "vgg16", 32, 1, Work::Iterations(300), 0.0),
            JobSpec::new("c", "vgg16", 32, 1, Work::Iterations(10), 0.0),
        ];
        let order = |p: &mut dyn Policy| -> Vec<usize> {
            p.schedule(&view(&t, &free, &jobs))
                .iter()
                .filter_map(|d| if let Decision::Place { job, .. } = d { Some(*job) } else { None })
                .collect()
        };
        // By run time: c (10 it.), a (100 it. on one host, compute-bound), b (300 it.).
        assert_eq!(order(by_name("sjf", 0).expect("sjf").as_mut()), vec![2, 0, 1]);
        // By GPU service: c (1 GPU x 10), b (1 x 300), a (8 x 100).
        assert_eq!(order(by_name("ssf", 0).expect("ssf").as_mut()), vec![2, 1, 0]);
        // The order admission by quota takes the queue in is the same.
        assert_eq!(by_name("sjf", 0).expect("sjf").queue_order(&view(&t, &free, &jobs)), [2, 0, 1]);
        assert_eq!(by_name("fifo", 0).expect("fifo").queue_order(&view(&t, &free, &jobs)), [0, 1, 2]);
        assert!(by_name("ssf+cassini", 0).is_some_and(|p| p.name() == "ssf+cassini"));
        assert!(by_name("lottery", 0).is_none());
        // Every catalogued name (but the experiment-only pinned ones and the
        // `HOST+` pattern) builds.
        for (name, _) in CATALOGUE.iter().filter(|c| !PINNED_NAMES.contains(&c.0) && !c.0.contains(char::is_uppercase))
        {
            assert!(by_name(name, 0).is_some(), "{name}");
        }
    }

    #[test]
    fn k8s_default_spreads_pods_and_diktyo_keeps_them_close() {
        // 2 racks x 2 hosts x 4 GPUs; host 0 has 1 GPU used.
        let t = LeafSpine::with_oversubscription(2, 2, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid");
        let free = vec![3u32, 4, 4, 4];
        let jobs = [job(2)];
        let hosts = |p: &mut dyn Policy| match &p.schedule(&view(&t, &free, &jobs))[0] {
            Decision::Place { hosts, .. } => hosts.clone(),
            other => unreachable!("{other:?}"),
        };
        // LeastAllocated: each pod to the emptiest node: hosts 1 then 2.
        assert_eq!(hosts(by_name("k8s-default", 0).expect("k8s").as_mut()), vec![(1, 1), (2, 1)]);
        // NetworkOverhead: the second pod joins the first (latency 0).
        assert_eq!(hosts(by_name("diktyo", 0).expect("diktyo").as_mut()), vec![(1, 2)]);
    }

    #[test]
    fn random_placement_is_seeded_and_gang() {
        let t = LeafSpine::with_oversubscription(2, 4, 2, 8, "v100", 100.0, 2.0).build("t").expect("valid");
        let free = vec![8u32; 8];
        let jobs = [job(12)];
        let a = by_name("random", 3).expect("random").schedule(&view(&t, &free, &jobs));
        let b = by_name("random", 3).expect("random").schedule(&view(&t, &free, &jobs));
        assert_eq!(a, b);
        let Decision::Place { hosts, .. } = &a[0] else { unreachable!("placed") };
        assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 12);
        assert!(hosts.iter().all(|&(h, g)| g <= free[h]));
    }

    fn running<'a>(
        id: usize,
        spec: &'a JobSpec,
        hosts: &'a [(usize, u32)],
        progress: f64,
        running_s: f64,
    ) -> crate::RunningJob<'a> {
        crate::RunningJob {
            progress,
            service_gpu_s: running_s * f64::from(spec.gpus()),
            running_s,
            ..crate::RunningJob::new(id, spec, hosts)
        }
    }

    /// One host of 4 GPUs, job 0 running on all of them, job 1 waiting for all of them.
    fn contended<'a>(
        t: &'a orrery_model::Topology,
        a: &'a JobSpec,
        b: &'a JobSpec,
        progress: f64,
        running_s: f64,
        now_s: f64,
    ) -> ClusterView<'a> {
        static HOSTS: [(usize, u32); 1] = [(0, 4)];
        ClusterView {
            now_s,
            topology: t,
            free_gpus: &[0],
            queue: vec![QueuedJob::new(1, b, now_s - b.arrival_s)],
            running: vec![running(0, a, &HOSTS, progress, running_s)],
        }
    }

    fn one_host() -> orrery_model::Topology {
        LeafSpine::with_oversubscription(1, 1, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid")
    }

    #[test]
    fn tiresias_preempts_across_queues_only() {
        let t = one_host();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Iterations(100_000), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(100), 0.0);
        let mut p = by_name("tiresias", 0).expect("tiresias");
        // 1,000 s on 4 GPUs = 4,000 GPU-s > 3,600: demoted to queue 1; the
        // newcomer in queue 0 takes its GPUs.
        let d = p.schedule(&contended(&t, &a, &b, 0.1, 1000.0, 1000.0));
        assert_eq!(d, vec![Decision::Preempt { job: 0 }, Decision::Place { job: 1, hosts: vec![(0, 4)] }]);
        // 800 s = 3,200 GPU-s: both in queue 0, the running job keeps its GPUs.
        assert!(p.schedule(&contended(&t, &a, &b, 0.1, 800.0, 800.0)).is_empty());
        assert_eq!(order::Tiresias::default().level(3599.0), 0);
        assert_eq!(p.tick_s(), Some(30.0));
    }

    #[test]
    fn tiresias_promotes_a_starving_job_once_and_it_is_not_preempted_back() {
        let t = one_host();
        // Both jobs have 4,000 GPU-s (queue 1). b has run 1,000 s and waited
        // 3,000 s ≥ 2 × 1,000: it starves, is promoted to queue 0 and takes
        // a's GPUs.
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Iterations(100_000), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(100_000), 0.0);
        let mut p = by_name("tiresias", 0).expect("tiresias");
        let mut v = contended(&t, &a, &b, 0.1, 1000.0, 4000.0);
        v.queue[0].service_gpu_s = 4000.0;
        let d = p.schedule(&v);
        assert_eq!(d, vec![Decision::Preempt { job: 0 }, Decision::Place { job: 1, hosts: vec![(0, 4)] }]);
        // Now b runs (queue 0 again: its service counts from the promotion)
        // and a waits, itself starving: a is promoted but cannot preempt b
        // (before, it did, and the two swapped forever in one instant).
        static B_HOSTS: [(usize, u32); 1] = [(0, 4)];
        let mut run_b = running(1, &b, &B_HOSTS, 0.1, 1000.0);
        run_b.service_gpu_s = 4000.0;
        let mut queued_a = QueuedJob::new(0, &a, 4000.0);
        queued_a.service_gpu_s = 4000.0;
        let v =
            ClusterView { now_s: 4000.0, topology: &t, free_gpus: &[0], queue: vec![queued_a], running: vec![run_b] };
        assert!(p.schedule(&v).is_empty());
    }

    #[test]
    fn preemption_happens_only_if_it_lets_the_deserving_job_in() {
        // Two hosts of 4 GPUs; a demoted 2-GPU job on each host leaves 2 free
        // on each. A queue-0 job of 8 GPUs would need both gone; a 4-GPU job
        // of queue 0 fits after preempting one of them.
        let t = LeafSpine::with_oversubscription(1, 2, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid");
        let a = JobSpec::new("a", "resnet50", 32, 2, Work::Iterations(100_000), 0.0);
        let c = JobSpec::new("c", "resnet50", 32, 2, Work::Iterations(100_000), 0.0);
        static HA: [(usize, u32); 1] = [(0, 2)];
        static HC: [(usize, u32); 1] = [(1, 2)];
        let eight = JobSpec::new("e", "resnet50", 32, 8, Work::Iterations(10), 100.0);
        let mut p = by_name("tiresias", 0).expect("tiresias");
        // 1,000 s on 2 GPUs each: 2,000 GPU-s, still queue 0: nothing happens.
        let v = |spec: &'static JobSpec, run_s: f64| ClusterView {
            now_s: 3000.0,
            topology: &t,
            free_gpus: &[2, 2],
            queue: vec![QueuedJob::new(2, spec, 10.0)],
            running: vec![running(0, &a, &HA, 0.1, run_s), running(1, &c, &HC, 0.1, run_s)],
        };
        let eight: &'static JobSpec = Box::leak(Box::new(eight));
        // 2,000 s on 2 GPUs: 4,000 GPU-s, queue 1: both are preempted for the
        // 8-GPU job, which then fits.
        let d = p.schedule(&v(eight, 2000.0));
        assert_eq!(d.iter().filter(|d| matches!(d, Decision::Preempt { .. })).count(), 2, "{d:?}");
        // Three workers with anti-affinity need three hosts; there are two.
        // Preempting a frees enough GPUs but still no placement, so a keeps
        // running (before, a was preempted, placed again, preempted again...).
        let x = JobSpec::new("x", "resnet50", 32, 2, Work::Iterations(100_000), 0.0);
        let mut w = JobSpec::new("w", "resnet50", 32, 3, Work::Iterations(10), 100.0);
        w.anti_affinity = true;
        static HX: [(usize, u32); 1] = [(0, 2)];
        let mut loser = running(0, &a, &HA, 0.1, 2000.0);
        loser.service_gpu_s = 4000.0;
        let view = ClusterView {
            now_s: 3000.0,
            topology: &t,
            free_gpus: &[0, 2],
            queue: vec![QueuedJob::new(3, &w, 10.0)],
            running: vec![loser, running(1, &c, &HC, 0.1, 10.0), running(2, &x, &HX, 0.1, 10.0)],
        };
        assert!(p.schedule(&view).is_empty(), "{:?}", p.schedule(&view));
    }

    #[test]
    fn srtf_preempts_only_for_a_shorter_job() {
        let t = one_host();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Iterations(1000), 0.0);
        let short = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(100), 5.0);
        let long = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(600), 5.0);
        let mut p = by_name("srtf", 0).expect("srtf");
        // Half done: 500 iterations left; 100 is shorter, 600 is not.
        let d = p.schedule(&contended(&t, &a, &short, 0.5, 10.0, 10.0));
        assert_eq!(d[0], Decision::Preempt { job: 0 });
        let mut p = by_name("srtf", 0).expect("srtf");
        assert!(p.schedule(&contended(&t, &a, &long, 0.5, 10.0, 10.0)).is_empty());
    }

    #[test]
    fn themis_waits_for_the_lease_then_serves_the_worst_finish_time_fairness() {
        let t = one_host();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Iterations(100_000), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(100), 0.0);
        let mut p = by_name("themis", 0).expect("themis");
        // b has waited 300 s for a job of a few seconds: rho is huge, but a's
        // lease (placed at 0) runs until 600 s.
        assert!(p.schedule(&contended(&t, &a, &b, 0.01, 300.0, 300.0)).is_empty());
        let d = p.schedule(&contended(&t, &a, &b, 0.01, 700.0, 700.0));
        assert_eq!(d, vec![Decision::Preempt { job: 0 }, Decision::Place { job: 1, hosts: vec![(0, 4)] }]);
        // A newcomer with rho ~ 1 does not beat a job that has waited long: with
        // b arriving now and a far behind its time alone, a keeps the GPUs (and a new lease).
        let late = JobSpec::new("b", "resnet50", 32, 4, Work::Iterations(100), 1400.0);
        let mut p = by_name("themis", 0).expect("themis");
        assert!(p.schedule(&contended(&t, &a, &late, 0.01, 1400.0, 1400.0)).is_empty());
    }

    #[test]
    fn exclusive_bandwidth_queues_a_job_whose_rate_does_not_fit() {
        // 4 hosts of one GPU on 10 Gbit/s NICs; VGG19 rings are network-bound.
        let t = LeafSpine::with_oversubscription(1, 4, 1, 1, "v100", 10.0, 1.0).build("t").expect("valid");
        let a = JobSpec::new("a", "vgg19", 32, 2, Work::Iterations(100), 0.0);
        let b = JobSpec::new("b", "vgg19", 32, 2, Work::Iterations(100), 0.0);
        let p = orrery_model::placed::place(&t, &a, &[(0, 1), (1, 1)]).expect("placed");
        let demand = placement::host_demand_gbps(&p, 4);
        assert!(demand[0] > 5.0 && demand[0] < 10.0, "VGG19 sends {:.2} Gbit/s on average", demand[0]);
        let hosts_a = [(0usize, 1u32), (1, 1)];
        let view = ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[0, 0, 1, 1],
            queue: vec![QueuedJob::new(1, &b, 0.0)],
            running: vec![running(0, &a, &hosts_a, 0.0, 1.0)],
        };
        // Hosts 2 and 3 are unreserved: b goes there.
        let mut p = by_name("exclusive-bw", 0).expect("exclusive");
        assert_eq!(p.schedule(&view), vec![Decision::Place { job: 1, hosts: vec![(2, 1), (3, 1)] }]);
        // With a spread over hosts 0 and 2 (1 and 3 free), b would need host 0
        // or 2's NIC, or hosts 1 and 3... which are free: it runs on 1 and 3.
        let hosts_a = [(0usize, 1u32), (2, 1)];
        let view = ClusterView { free_gpus: &[0, 1, 0, 1], running: vec![running(0, &a, &hosts_a, 0.0, 1.0)], ..view };
        assert_eq!(p.schedule(&view), vec![Decision::Place { job: 1, hosts: vec![(1, 1), (3, 1)] }]);
        // With only hosts 0 and 2 half used by a and b needing 2 GPUs where a's
        // NICs are reserved: b waits.
        let t2 = LeafSpine::with_oversubscription(1, 2, 1, 2, "v100", 10.0, 1.0).build("t").expect("valid");
        let hosts_a = [(0usize, 1u32), (1, 1)];
        let view = ClusterView {
            now_s: 0.0,
            topology: &t2,
            free_gpus: &[1, 1],
            queue: vec![QueuedJob::new(1, &b, 0.0)],
            running: vec![running(0, &a, &hosts_a, 0.0, 1.0)],
        };
        assert!(p.schedule(&view).is_empty());
        // fifo/consolidated has no such scruple.
        let mut fifo = by_name("fifo", 0).expect("fifo");
        assert_eq!(fifo.schedule(&view).len(), 1);
    }
}
