//! Policies that share GPUs between two jobs (Castor §5, §9.1):
//!
//! - `castor`: Algorithm 1, SJF-BSBF (smallest job first, best sharing
//!   benefit first). Jobs by expected remaining time; free GPUs first; when
//!   they do not suffice, every running job with GPUs of its own is a
//!   candidate partner, Algorithm 2 ([`crate::castor::batch_scaling`])
//!   picks the newcomer's sub-batch and says whether sharing beats letting
//!   the partner end first (Theorem 1, κ = t_A·i_A); the candidates that pay
//!   are taken in order of their pair's sum of completion times. A job that
//!   no sharing helps waits. `castor:shorter-first` compares with the
//!   shorter job first instead (orrery's earlier reading; it shares less and
//!   was 43% faster at 2× load, see docs/results.md).
//! - `sjf-ffs`: the same order, but first-fit sharing: any running job's
//!   GPUs, in host order, whenever free GPUs are short (Castor's baseline 7).
//! - `lucid`: a conservative packer after Lucid (ASPLOS '23). orrery's
//!   rules: pack only a job that would otherwise wait (indolent packing),
//!   only within one host (Lucid does not pack distributed jobs, for fear of
//!   network contention), only beside a running job of the same GPU count
//!   whose GPUs are all its own, at the user's batch (no accumulation), and
//!   only when the profiled pair slows each job by at most
//!   [`LUCID_MAX_XI`] (Lucid's "light" affinity classes).
//!
//! Algorithm 1 skips a job it cannot start and tries the next (backfilling);
//! `castor:blocking` stops at it instead, like orrery's `sjf` (head-of-line
//! blocking), to separate what sharing gains from what backfilling costs.
//!
//! None preempts. Per round, for Q waiting and R running jobs on H hosts:
//! O(Q log Q) to sort, then per job O(H) for free GPUs and, when short,
//! O(R log B) for Algorithm 2 over the partners and O(R log R) to rank them.

use crate::baseline::{FreeIndex, consolidated, isolated_seconds, racks};
use crate::castor::{BackToBack, batch_scaling, pair_choice};
use crate::memo::PerPlacement;
use crate::placement::capped;
use crate::{ClusterView, Decision, Forget, JobId, Policy};
use orrery_model::colocation::{Colocation, accumulation_factor, memory_mib};
use orrery_model::gpu::{GpuType, gpu_type};
use orrery_model::{HostId, JobSpec, ModelSpec};
use std::collections::{HashMap, HashSet, VecDeque};

/// A job started this round grows only when that makes it at least this
/// much faster (Pollux's threshold for restarting a job on a new size).
pub const GROW_GAIN: f64 = 1.1;

/// The arrival rate behind [`gpu_second_price`] is measured over the
/// arrivals of this many seconds past.
pub const ARRIVAL_WINDOW_S: f64 = 3600.0;

/// Lucid-style packing allows pairs whose estimated ξ are both at most this.
pub const LUCID_MAX_XI: f64 = 1.25;

/// Which sharing rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Castor's SJF-BSBF (Algorithm 1 with Algorithm 2).
    Bsbf,
    /// Greedy first-fit sharing.
    Ffs,
    /// Lucid-style conservative packing.
    Lucid,
}

/// A GPU-sharing policy.
pub struct Colocator {
    rule: Rule,
    /// Stop at the first job that can start neither alone nor shared.
    pub blocking: bool,
    /// Whether jobs may share GPUs at all (off: the same order and
    /// backfilling on free GPUs only, the combined policy's ablation).
    pub share: bool,
    /// Never share the GPUs of a high-priority job, and never start a
    /// high-priority job on shared GPUs: sharing slows both partners by ξ
    /// (Castor Eq. 3), which Metronome's high-priority jobs must not pay.
    /// Nor preempt one ([`Self::preempt`]).
    pub spare_high_priority: bool,
    /// Consider waiting high-priority jobs before all low-priority ones
    /// (shortest first within each class). Off in `orrery`: on Philly it
    /// put long high-priority jobs ahead of short ones, and the mean JCT of
    /// its core with preemption was 53% longer at load 1.5 (docs/results.md).
    pub high_first: bool,
    /// Where a job that fits in free GPUs goes (None: consolidated first
    /// fit, Castor's own).
    pub placement: Option<Box<dyn crate::placement::Placement>>,
    /// What Theorem 1 compares sharing with (the paper's: the running job first).
    pub back_to_back: BackToBack,
    /// Goodput-aware sizing at the start (orrery's rule after Pollux §4): a
    /// job the free GPUs cannot hold starts now on fewer of them when, by
    /// the zoo's iteration time on that many GPUs and Pollux's statistical
    /// efficiency, it would finish before waiting for the next free GPUs
    /// and running at its request. It keeps that size until it ends. The
    /// same part grows jobs on idle GPUs ([`Self::grow`]).
    pub shrink: bool,
    /// The size a job starts at prices its GPU time (orrery's rule, part
    /// `size`): a low-priority job starts on the k ≤ n workers that
    /// minimise its own time plus the delay its GPU-seconds impose on the
    /// jobs still to be served, `T(k)·(1 + k·N/G)` ([`gpu_second_price`],
    /// [`Self::priced_workers`]). A job whose extra workers are spent on
    /// the network starts smaller while others wait; one that scales
    /// linearly never does. Started smaller, it grows back when nobody
    /// waits ([`Self::regrow`], part of [`Self::shrink`]).
    pub price_gpu_time: bool,
    /// Compare sharing with waiting for the next free GPUs instead
    /// ([`BackToBack::NextFree`], orrery's rule): the wait is read off the
    /// running jobs' remaining times each round.
    pub next_free: bool,
    /// Shortest remaining time first with preemption (orrery's part
    /// `preempt`): a waiting job takes the GPUs of running low-priority
    /// jobs with more time left, when that lets it start ([`Self::victims`]).
    pub preempt: bool,
    /// A running job that has already waited as long as it takes alone is
    /// never a preemption victim again ([`Self::victims`]; orrery's rule).
    /// The time on GPUs is summed by this policy between its rounds, so a
    /// policy built late (a restarted service) counts a job's earlier time
    /// on GPUs as waiting and protects it: the side that preempts less.
    pub starvation_guard: bool,
    /// Add to a share's ξ the time each job's network phase loses to its
    /// partner's traffic on the hosts they share (orrery's rule,
    /// [`shared_nic_xi`]); Castor's ξ counts compute interference only.
    pub nic_interference: bool,
    estimate: Colocation,
    alone: HashMap<JobId, f64>,
    /// Time alone of the whole job on k workers over its time at its
    /// request, per (job, k): Pollux's goodput in units of the job's work.
    stretch: HashMap<(JobId, u32), f64>,
    /// Fraction of an iteration spent crossing the network on k workers,
    /// packed from host 0, per (job, k).
    network_share: HashMap<(JobId, u32), f64>,
    /// Iteration time alone at the request, packed from host 0, ms: the
    /// reference of [`Self::stretch_on`].
    request_ms: HashMap<JobId, f64>,
    /// Per link, the running jobs' traffic on it this round: the sum of
    /// their duty cycles, each weighted by the share of its flows the link
    /// carries ([`link_duty`]). Built by the first size judged in a round
    /// ([`Self::duty`]), not in rounds that judge none; empty unless sizes
    /// are priced ([`Self::price_gpu_time`]).
    link_duty: Option<HashMap<orrery_model::LinkId, f64>>,
    /// Each running job's terms of [`link_duty`], kept while its hosts are.
    duty_terms: PerPlacement<Vec<(orrery_model::LinkId, f64)>>,
    /// The free GPUs indexed for first fit, kept between the sizes judged
    /// and between rounds ([`Self::take_index`]), and the racks it was
    /// built with.
    free_index: Option<FreeIndex>,
    index_racks: Vec<usize>,
    /// Seconds each job has held GPUs so far, summed between rounds.
    run_s: HashMap<JobId, f64>,
    /// When the four caches above drop the jobs that have left.
    forget: Forget,
    /// The previous round's time and the jobs holding GPUs after it.
    last_round: Option<(f64, HashSet<JobId>)>,
    /// Arrival times seen within [`ARRIVAL_WINDOW_S`], oldest first.
    arrivals: VecDeque<f64>,
    /// The first and latest arrival seen (a job arriving later is new).
    first_arrival_s: f64,
    latest_arrival_s: f64,
    shrunk: u64,
    priced: u64,
    regrown: u64,
    grown: u64,
    preempted: u64,
    shares: u64,
    waits: u64,
    benefit_sum: f64,
}

impl Colocator {
    /// A policy with the given rule; ξ estimates come from the driver
    /// ([`Policy::set_colocation`]), time slicing until then.
    pub fn new(rule: Rule) -> Self {
        Colocator {
            rule,
            blocking: false,
            share: true,
            spare_high_priority: false,
            high_first: false,
            placement: None,
            back_to_back: BackToBack::RunningFirst,
            next_free: false,
            shrink: false,
            price_gpu_time: false,
            preempt: false,
            starvation_guard: false,
            nic_interference: false,
            estimate: Colocation::default(),
            alone: HashMap::new(),
            stretch: HashMap::new(),
            network_share: HashMap::new(),
            request_ms: HashMap::new(),
            link_duty: None,
            duty_terms: PerPlacement::default(),
            free_index: None,
            index_racks: Vec::new(),
            run_s: HashMap::new(),
            forget: Forget::default(),
            last_round: None,
            arrivals: VecDeque::new(),
            first_arrival_s: f64::INFINITY,
            latest_arrival_s: f64::NEG_INFINITY,
            shrunk: 0,
            priced: 0,
            regrown: 0,
            grown: 0,
            preempted: 0,
            shares: 0,
            waits: 0,
            benefit_sum: 0.0,
        }
    }

    fn alone_s(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        *self.alone.entry(id).or_insert_with(|| isolated_seconds(view, spec))
    }

    /// How much longer the job takes alone on `k` workers than at its
    /// request, both packed from host 0: `I(k·b)/I(n·b) · T(k)/T(n)`
    /// (Pollux Eq. 1-2: statistical efficiency times throughput). Infinite
    /// when it cannot be shaped. Cached; O(shape) once per (job, k).
    fn stretch(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
        *self.stretch.entry((id, k)).or_insert_with(|| {
            let (t, n) = (view.topology, spec.workers.max(1));
            let period = |w: u32| packed_placement(t, spec, w).map_or(f64::INFINITY, |p| p.shape.period_ms());
            let ratio =
                orrery_model::convergence::iterations_per_reference(&spec.model, n * spec.batch, k * spec.batch);
            ratio * period(k) / period(n)
        })
    }

    /// The fraction of the job's iteration alone on `k` workers, packed
    /// from host 0, that crosses the network (0 on one host): its circle's
    /// duty cycle. Cached; O(shape) once per (job, k).
    fn network_share(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
        *self.network_share.entry((id, k)).or_insert_with(|| {
            packed_placement(view.topology, spec, k.max(1)).map_or(0.0, |p| {
                let period = p.shape.period_ms();
                if period > 0.0 { p.shape.network_ms() / period } else { 0.0 }
            })
        })
    }

    /// How much longer the job takes on `k` workers than at its request
    /// when it must process the same samples: `(n/k)·T(k)/T(n)` with the
    /// zoo's iteration times, [`Self::stretch`] without Pollux's statistical
    /// efficiency. k times this over n is its GPU time on k workers
    /// against its request's: above 1 exactly when its extra workers are
    /// spent on the network. O(1) after [`Self::stretch`].
    #[cfg(test)]
    fn hardware_stretch(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
        let n = spec.workers.max(1);
        let ratio = orrery_model::convergence::iterations_per_reference(&spec.model, n * spec.batch, k * spec.batch);
        self.stretch(view, id, spec, k) / ratio * f64::from(n) / f64::from(k)
    }

    /// [`Self::stretch`] where the job would run: its time for the same
    /// work on `hosts`, beside the traffic the running jobs put on their
    /// links ([`period_on`]), over its time alone at its request packed
    /// from host 0. Packed, k workers of an 8-GPU host's job stay on one host; placed
    /// on the free GPUs of a busy cluster they may span two, whose NICs
    /// other jobs share. Pollux's throughput model is likewise a function
    /// of the placement (§3.2: GPUs and the nodes they span). Infinite when
    /// it cannot be shaped. O(shape).
    fn stretch_on(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, hosts: &[(HostId, u32)]) -> f64 {
        let (n, per) = (spec.workers.max(1), spec.gpus_per_worker.max(1));
        let k = hosts.iter().map(|h| h.1).sum::<u32>() / per;
        let ratio = orrery_model::convergence::iterations_per_reference(&spec.model, n * spec.batch, k * spec.batch);
        let request_ms = self.request_ms(view, id, spec);
        period_on(view, self.duty(view), spec, hosts).map_or(f64::INFINITY, |ms| ratio * ms / request_ms)
    }

    /// This round's traffic per link ([`link_duty`]), built on first use:
    /// O(Σ flows × path length) over the running jobs, once a round.
    fn duty(&mut self, view: &ClusterView<'_>) -> &HashMap<orrery_model::LinkId, f64> {
        let (priced, terms) = (self.price_gpu_time, &mut self.duty_terms);
        self.link_duty.get_or_insert_with(|| if priced { link_duty(view, terms) } else { HashMap::new() })
    }

    /// The job's iteration time alone at its request, packed from host 0,
    /// ms. Cached; O(shape) once per job.
    fn request_ms(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        *self.request_ms.entry(id).or_insert_with(|| {
            packed_placement(view.topology, spec, spec.workers.max(1)).map_or(f64::INFINITY, |p| p.shape.period_ms())
        })
    }

    /// The free GPUs indexed for first fit ([`FreeIndex`]), brought in step
    /// with `free` by their differences: O(H) plus O(log H) per host whose
    /// count changed since the index was last used, where building one is
    /// O(H log H) (sizing every waiting job that way was 7% of a 4,096-host
    /// `orrery` simulation, and growth's index another 8%). Taken out of
    /// the policy so that sizes can be judged while it is held; give it
    /// back with [`Self::keep_index`].
    fn take_index(&mut self, free: &[u32], rack_of: &[usize]) -> FreeIndex {
        match self.free_index.take() {
            Some(mut index) if self.index_racks == rack_of && index.free().len() == free.len() => {
                for (h, &f) in free.iter().enumerate() {
                    if index.free()[h] != f {
                        index.set(h, f);
                    }
                }
                index
            }
            _ => {
                self.index_racks = rack_of.to_vec();
                FreeIndex::new(free, rack_of)
            }
        }
    }

    /// Keeps `index`, taken by [`Self::take_index`], for the next one.
    fn keep_index(&mut self, index: FreeIndex) {
        self.free_index = Some(index);
    }

    /// The index of the GPUs `spec` may use: the kept one unless the job
    /// caps its GPUs per host (anti-affinity), which gets its own.
    fn index_for(&mut self, free: &[u32], rack_of: &[usize], spec: &JobSpec) -> (FreeIndex, bool) {
        if spec.anti_affinity {
            (FreeIndex::new(&capped(free, spec), rack_of), false)
        } else {
            (self.take_index(free, rack_of), true)
        }
    }

    /// Where `q` starts on fewer GPUs than it asks for: at the size that
    /// finishes soonest on the free GPUs, each size judged where the host
    /// scheduler's first fit would put it now ([`Self::stretch_on`]), if
    /// that beats waiting `wait_s` and then taking `t_new` at the request.
    /// O(H) to bring the kept index in step ([`Self::take_index`]), then
    /// O(m log H + shape) per size over m hosts.
    fn shrunk_start(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        free: &[u32],
        q: &crate::QueuedJob<'_>,
        t_new: f64,
        wait_s: f64,
    ) -> Option<Vec<(HostId, u32)>> {
        let (id, spec) = (q.id, q.spec);
        let per = spec.gpus_per_worker.max(1);
        let free_total: u64 = free.iter().map(|&f| u64::from(f)).sum();
        let most = (free_total / u64::from(per)).min(u64::from(spec.workers.max(1) - 1)) as u32;
        // Each size where the host scheduler would put it now.
        let (index, kept) = self.index_for(free, rack_of, spec);
        let best = (1..=most)
            .filter_map(|k| index.consolidated(k * per).map(|h| (k, self.stretch_on(view, id, spec, &h))))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if kept {
            self.keep_index(index);
        }
        let (k, stretch) = best?;
        // An unknown wait (the running jobs never free enough) is no
        // evidence for a size the job keeps for its whole run.
        let pays = wait_s.is_finite() && stretch.is_finite() && t_new * stretch < wait_s + t_new;
        if !pays {
            return None;
        }
        self.place_smaller(view, rack_of, free, spec, k)
    }

    /// `spec` on `k` of its workers, where the host scheduler puts it.
    fn place_smaller(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        free: &[u32],
        spec: &JobSpec,
        k: u32,
    ) -> Option<Vec<(HostId, u32)>> {
        let mut smaller = spec.clone();
        smaller.workers = k;
        let hosts = match self.placement.as_mut() {
            Some(p) => p.place(view, rack_of, free, &smaller),
            None => consolidated(view, rack_of, &capped(free, &smaller), k * spec.gpus_per_worker.max(1)),
        }?;
        if let Some(p) = self.placement.as_mut() {
            p.commit(view, &smaller, &hosts);
        }
        Some(hosts)
    }

    /// Records the jobs that arrived since the last round and forgets
    /// those older than [`ARRIVAL_WINDOW_S`]. A job is new when it arrived
    /// after every job seen so far (preempted jobs come back with their
    /// old arrival time). O(Q) per round, amortised O(1) per arrival.
    fn note_arrivals(&mut self, view: &ClusterView<'_>) {
        let mut new: Vec<f64> =
            view.queue.iter().map(|q| q.spec.arrival_s).filter(|&a| a > self.latest_arrival_s).collect();
        new.sort_by(f64::total_cmp);
        for a in new {
            self.first_arrival_s = self.first_arrival_s.min(a);
            self.latest_arrival_s = a;
            self.arrivals.push_back(a);
        }
        while self.arrivals.front().is_some_and(|&a| a < view.now_s - ARRIVAL_WINDOW_S) {
            self.arrivals.pop_front();
        }
    }

    /// Jobs per second arriving, by the maximum-likelihood estimate of a
    /// Poisson rate: the arrivals within [`ARRIVAL_WINDOW_S`] over the
    /// window, or, before a window has passed since the first arrival, the
    /// arrivals after the first over the time since it. 0 until two have
    /// been seen.
    fn arrival_rate(&self, now_s: f64) -> f64 {
        let n = self.arrivals.len() as f64;
        if now_s - self.first_arrival_s >= ARRIVAL_WINDOW_S {
            n / ARRIVAL_WINDOW_S
        } else if n >= 2.0 && now_s > self.first_arrival_s {
            (n - 1.0) / (now_s - self.first_arrival_s)
        } else {
            0.0
        }
    }

    /// The workers `q` starts on when its GPU time is priced at `price`
    /// per GPU ([`gpu_second_price`]): the k ≤ n minimising
    /// `T(k)·(1 + price·k·g)`, its own time plus the delay to others, with
    /// `T(k)` its time on k workers of g GPUs for the same samples, where
    /// the host scheduler's first fit would put them now and beside the
    /// traffic already there ([`period_on`]), relative to its request where
    /// that would run (packed from host 0, alone, when it cannot start
    /// now). So at a price of 0 a job starts smaller only when that
    /// is faster where it would run: on 8-GPU hosts with 6 GPUs free on
    /// one and 2 on another, an 8-GPU VGG19 job starts on the 6 of one host
    /// rather than span two NICs (`orrery`'s mean JCT on a fabric of 8-GPU
    /// hosts fell by half, docs/results.md). O(H) for the kept index
    /// ([`Self::take_index`]), then O(m log H + shape) per size over m
    /// hosts.
    ///
    /// Pollux's statistical efficiency is left out on purpose: with it,
    /// Philly's compute-bound jobs, whose smaller batches converge in
    /// fewer samples, started small whenever long jobs waited, and the
    /// GPUs they left could not start those jobs (`orrery` on
    /// benchmark.toml at load 1.5: mean JCT 1,563 → 1,786 s,
    /// docs/results.md).
    fn priced_workers(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        free: &[u32],
        q: &crate::QueuedJob<'_>,
        price: f64,
    ) -> u32 {
        let (n, per) = (q.spec.workers.max(1), q.spec.gpus_per_worker.max(1));
        let (index, kept) = self.index_for(free, rack_of, q.spec);
        let packed_ms = self.request_ms(view, q.id, q.spec);
        let duty = self.duty(view);
        let period = |k: u32| index.consolidated(k * per).and_then(|h| period_on(view, duty, q.spec, &h));
        let at_request = period(n);
        let reference = at_request.unwrap_or(packed_ms);
        let cost = |k: u32, stretch: f64| stretch * (1.0 + price * f64::from(k * per));
        let mut best = (n, cost(n, 1.0));
        for k in 1..n {
            if let Some(ms) = period(k) {
                let c = cost(k, f64::from(n) / f64::from(k) * ms / reference);
                if c < best.1 {
                    best = (k, c);
                }
            }
        }
        if kept {
            self.keep_index(index);
        }
        best.0
    }

    /// Running jobs grow on idle GPUs (part `size`), as Pollux re-allocates
    /// running jobs: when nobody waits, a running job restarts on up to
    /// twice its request (Pollux's cap), at the size that finishes it
    /// soonest, if that is at least [`GROW_GAIN`] times faster. So a start
    /// priced small ([`Self::price_gpu_time`]) or shrunk is undone once the
    /// queue empties, and GPUs freed after a round are not left idle. Jobs
    /// that share GPUs, paused ones and those started this round stay.
    /// Only with [`Self::preempt`] on: without it, an arrival waits for the
    /// grown job to end (`orrery-no-preempt` on Philly's short pinned run
    /// at load 2: mean JCT 1,319 → 1,689 s).
    /// The idle GPUs go first to the job a worker speeds up most relative
    /// to its time now ([`Self::gain_per_worker`], Pollux's greedy
    /// marginal), not in the running jobs' order: a small job that doubles
    /// on its own host before a wide one that crosses hosts for 10%. On
    /// four-GPU hosts (twelve seeds) the running list's order took 245 /
    /// 346 s mean JCT at loads 1 / 1.5 against 237 / 337 s, and on Philly
    /// 1,020 against 996 s at load 1 (docs/results.md).
    /// O(R log R) plus O(n) sizes per running job, each shaped once, and
    /// O(m log H) per grown job on m hosts ([`Free`]). On Philly
    /// (benchmark.toml, seeds 1-3) it cut `orrery`'s mean JCT by 2% at
    /// load 1 and 1% at 1.5, where growth only at the start left GPUs idle
    /// that Pollux uses.
    fn regrow(&mut self, view: &ClusterView<'_>, free: &mut Free<'_>, out: &mut Vec<Decision>) {
        let mut grown = Vec::new();
        // (gain per worker, index, workers now); the best use of a GPU first.
        let mut offers: Vec<(f64, usize, u32)> = Vec::new();
        let spare = free.total();
        for (i, r) in view.running.iter().enumerate().filter(|(_, r)| !r.paused && r.xi <= 1.0) {
            let per = r.spec.gpus_per_worker.max(1);
            let held: u32 = r.hosts.iter().map(|h| h.1).sum();
            let solo: u32 = r.solo_gpus.iter().map(|s| s.1).sum();
            let (now, n) = (held / per, r.spec.workers.max(1));
            if solo != held || now >= 2 * n || now == 0 {
                continue;
            }
            let gain = self.gain_per_worker(view, r.id, r.spec, now, (2 * n).min(now + spare / per));
            if gain > 0.0 {
                offers.push((gain, i, now));
            }
        }
        offers.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i, now) in offers {
            let r = &view.running[i];
            let (spec, per) = (r.spec, r.spec.gpus_per_worker.max(1));
            let most = (2 * spec.workers.max(1)).min(now + free.total() / per);
            let stretch_now = self.stretch_on(view, r.id, spec, r.hosts);
            let Some((k, stretch)) = (now + 1..=most)
                .filter_map(|k| free.trial(view, r.hosts, spec, k).map(|h| (k, self.stretch_on(view, r.id, spec, &h))))
                .min_by(|a, b| a.1.total_cmp(&b.1))
            else {
                continue;
            };
            if stretch * GROW_GAIN > stretch_now {
                continue;
            }
            if let Some(hosts) = free.resized(view, r.hosts, spec, k) {
                grown.push(Decision::Preempt { job: r.id });
                grown.push(Decision::Place { job: r.id, hosts });
                self.regrown += 1;
            }
        }
        out.extend(grown);
    }

    /// The most a worker added to a job on `now` workers lowers its time,
    /// relative to its time now, over sizes up to `most`: Pollux's greedy
    /// marginal (each GPU to the job whose 1/speedup it lowers most, §4),
    /// taken over any step so that a jump across a host boundary counts.
    /// O(most − now) sizes, each shaped once.
    fn gain_per_worker(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, now: u32, most: u32) -> f64 {
        let at_now = self.stretch(view, id, spec, now);
        (now + 1..=most)
            .map(|k| (1.0 - self.stretch(view, id, spec, k) / at_now) / f64::from(k - now))
            .fold(0.0, f64::max)
    }

    /// Pollux's other half (part `size`): when GPUs are still free after
    /// this round and no waiting job can use them ([`idle_for_the_queue`]:
    /// all started, or, with preemption, all needing more GPUs than are
    /// free, as a 48-GPU job on Philly does for hours), a job started this round
    /// at its request takes up to twice its workers, at the size that
    /// finishes it soonest by the zoo's iteration time and Pollux's
    /// statistical efficiency ([`Self::stretch`]), if that is at least
    /// [`GROW_GAIN`] times faster (Pollux restarts a job only for 10%). It
    /// keeps that size until it ends or is preempted; a later arrival with
    /// less time left may take its GPUs ([`Self::preempt`]). O(Q) plus
    /// O(n) sizes per started job, each shaped once, and O(m log H) per
    /// grown job on m hosts ([`Free`]).
    fn grow(&mut self, view: &ClusterView<'_>, free: &mut Free<'_>, out: &mut [Decision]) {
        if !idle_for_the_queue(view, out, free.total(), self.preempt) {
            return; // someone still waits for these GPUs
        }
        let queued: HashMap<JobId, &crate::QueuedJob<'_>> = view.queue.iter().map(|q| (q.id, q)).collect();
        for d in out.iter_mut() {
            let Decision::Place { job, hosts } = d else { continue };
            let Some(q) = queued.get(job) else { continue };
            let (spec, per) = (q.spec, q.spec.gpus_per_worker.max(1));
            let n = spec.workers.max(1);
            if hosts.iter().map(|h| h.1).sum::<u32>() != spec.gpus() {
                continue; // started smaller
            }
            let spare = free.total();
            let most = (2 * n).min(n + spare / per);
            let stretch_now = self.stretch_on(view, q.id, spec, hosts);
            let Some((k, stretch)) = (n + 1..=most)
                .filter_map(|k| free.trial(view, hosts, spec, k).map(|h| (k, self.stretch_on(view, q.id, spec, &h))))
                .min_by(|a, b| a.1.total_cmp(&b.1))
            else {
                continue;
            };
            if stretch * GROW_GAIN > stretch_now {
                continue;
            }
            if let Some(bigger) = free.resized(view, hosts, spec, k) {
                *hosts = bigger;
                self.grown += 1;
            }
        }
    }

    /// Entries cached per job, in all.
    fn cached(&self) -> usize {
        self.alone.len() + self.stretch.len() + self.network_share.len() + self.request_ms.len() + self.run_s.len()
    }

    /// Drops the cached times of jobs that have left the view ([`Forget`]).
    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        let Some(live) = self.forget.due(view, self.cached()) else { return };
        self.alone.retain(|j, _| live.contains(j));
        self.stretch.retain(|(j, _), _| live.contains(j));
        self.network_share.retain(|(j, _), _| live.contains(j));
        self.request_ms.retain(|j, _| live.contains(j));
        self.run_s.retain(|j, _| live.contains(j));
        self.forget.pruned(self.cached());
    }

    /// Credits the time since the previous round to each job that held
    /// GPUs through it. O(R).
    fn note_running_time(&mut self, view: &ClusterView<'_>) {
        if let Some((then, holders)) = self.last_round.take() {
            for r in view.running.iter().filter(|r| holders.contains(&r.id)) {
                *self.run_s.entry(r.id).or_insert(0.0) += (view.now_s - then).max(0.0);
            }
        }
    }

    /// Records who holds GPUs after this round's decisions: the running
    /// jobs not preempted and the jobs started. O(R + D).
    fn note_holders(&mut self, view: &ClusterView<'_>, out: &[Decision]) {
        let mut holders: HashSet<JobId> = view.running.iter().map(|r| r.id).collect();
        for d in out {
            match d {
                Decision::Preempt { job } => {
                    holders.remove(job);
                }
                Decision::Place { job, .. } | Decision::Share { job, .. } => {
                    holders.insert(*job);
                }
                _ => {}
            }
        }
        self.last_round = Some((view.now_s, holders));
    }

    /// Seconds the job has spent in the system without GPUs: since its
    /// arrival, less the time it has held GPUs. O(1).
    fn waited_s(&self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        view.now_s - spec.arrival_s - self.run_s.get(&id).copied().unwrap_or(0.0)
    }

    /// The running jobs (indices into `view.running`) that lose their GPUs
    /// this round under shortest-remaining-time-first, most time left
    /// first. Running and waiting jobs are walked by (class, remaining time
    /// alone), a running job first among equals; a job deserves GPUs while
    /// the GPUs not held by unmovable jobs last. Unmovable: high-priority
    /// jobs (Metronome's promise), paused ones, jobs that share a GPU
    /// (their partner's GPUs are not theirs to give) and, with
    /// [`Self::starvation_guard`], jobs that have already waited longer
    /// than their time alone. Running jobs that do
    /// not deserve theirs are preempted, most time left first, only until
    /// the deserving waiting jobs all fit by consolidated first fit, and
    /// only if they then do (else the victims would be placed again at once).
    /// A preempted job keeps its progress and pays the driver's restore
    /// time when placed again. O((Q + R) log(Q + R)) plus one trial
    /// placement of the deserving jobs per victim.
    fn victims(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        order: &[(f64, f64, usize)],
        high: &dyn Fn(&JobSpec) -> bool,
    ) -> Vec<usize> {
        let mut budget: i64 = i64::from(view.topology.gpu_count());
        // (class, remaining s, running?, index)
        let mut contenders: Vec<(u8, f64, bool, usize)> = Vec::new();
        for (i, r) in view.running.iter().enumerate() {
            let held: u32 = r.hosts.iter().map(|h| h.1).sum();
            let solo: u32 = r.solo_gpus.iter().map(|s| s.1).sum();
            let starved = self.starvation_guard && self.waited_s(view, r.id, r.spec) > self.alone_s(view, r.id, r.spec);
            if r.paused || high(r.spec) || solo != held || r.xi > 1.0 || starved {
                budget -= i64::from(held);
            } else {
                let left_s = self.alone_s(view, r.id, r.spec) * (1.0 - r.progress);
                contenders.push((1, left_s, true, i));
            }
        }
        if contenders.is_empty() {
            return Vec::new();
        }
        let first = self.high_first;
        contenders
            .extend(order.iter().map(|&(t, _, qi)| (u8::from(!first || !high(view.queue[qi].spec)), t, false, qi)));
        contenders.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(b.2.cmp(&a.2)));
        let walk = contenders.iter().map(|&(_, _, running, i)| {
            (
                running,
                i,
                if running { view.running[i].hosts.iter().map(|h| h.1).sum() } else { view.queue[i].spec.gpus() },
            )
        });
        let (deserving, losers) = crate::compose::deserving_and_losers(walk, budget);
        if deserving.is_empty() {
            return Vec::new();
        }
        crate::compose::fewest_victims(view, &losers, |free, _| {
            let mut free = free.to_vec();
            deserving.iter().all(|&qi| {
                let spec = view.queue[qi].spec;
                consolidated(view, rack_of, &capped(&free, spec), spec.gpus()).is_some_and(|hosts| {
                    for (h, g) in hosts {
                        free[h] -= g;
                    }
                    true
                })
            })
        })
    }
}

/// A running job that could lend GPUs this round.
struct Candidate {
    id: JobId,
    /// Its GPUs without a partner, per host (shrinks as the round lends them).
    solo: Vec<(HostId, u32)>,
    spec_model: &'static ModelSpec,
    sub_batch: u32,
    gpus: u32,
    /// Remaining time alone, s.
    left_s: f64,
    gpu: &'static GpuType,
    /// Fraction of its iteration on the network where it runs.
    network_share: f64,
}

/// A chosen partner: the candidate, the newcomer's sub-batch, and the
/// pair's sum of completion times.
struct Offer {
    cand: usize,
    sub_batch: u32,
    jct_sum: f64,
    xi: (f64, f64),
    /// The newcomer's time alone at that sub-batch, s.
    t_new_s: f64,
}

impl Policy for Colocator {
    fn name(&self) -> String {
        let name = match self.rule {
            Rule::Bsbf => "castor",
            Rule::Ffs => "sjf-ffs",
            Rule::Lucid => "lucid",
        };
        let order = match self.back_to_back {
            BackToBack::ShorterFirst => ":shorter-first",
            _ if self.next_free => ":next-free",
            _ => "",
        };
        let blocking = if self.blocking { ":blocking" } else { "" };
        format!("{name}{order}{blocking}")
    }

    fn set_colocation(&mut self, estimate: &Colocation) {
        self.estimate = estimate.clone();
    }

    fn counters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("shrunk_starts", self.shrunk as f64),
            ("grown_starts", self.grown as f64),
            ("preemptions", self.preempted as f64),
            ("shared_starts", self.shares as f64),
            ("sharing_refused", self.waits as f64),
            // Castor Eq. 24, estimated when deciding: JCT waiting for free GPUs
            // over JCT sharing.
            ("sharing_benefit", if self.shares > 0 { self.benefit_sum / self.shares as f64 } else { 0.0 }),
            ("priced_starts", self.priced as f64),
            ("regrown", self.regrown as f64),
        ]
    }

    fn schedule(&mut self, view: &ClusterView<'_>) -> Vec<Decision> {
        self.forget_departed(view);
        if self.starvation_guard {
            self.note_running_time(view);
        }
        let rack_of = racks(view);
        self.link_duty = None;
        let mut free = view.free_gpus.to_vec();
        let spare = self.spare_high_priority;
        let high = move |spec: &JobSpec| spare && spec.priority == orrery_model::Priority::High;
        // Line 1: pending jobs by expected remaining time.
        let mut order: Vec<(f64, f64, usize)> = view
            .queue
            .iter()
            .enumerate()
            .map(|(i, q)| (self.alone_s(view, q.id, q.spec) * (1.0 - q.progress), q.spec.arrival_s, i))
            .collect();
        // High-priority jobs may go first (Metronome's priority classes);
        // SJF within each class.
        let first = self.high_first;
        let class = |i: usize| u8::from(!first || !high(view.queue[i].spec));
        order.sort_by(|a, b| class(a.2).cmp(&class(b.2)).then(a.0.total_cmp(&b.0)).then(a.1.total_cmp(&b.1)));
        let mut out = Vec::new();
        let victims = if self.preempt { self.victims(view, &rack_of, &order, &high) } else { Vec::new() };
        for &v in &victims {
            for &(h, g) in view.running[v].hosts {
                free[h] += g;
            }
            self.preempted += 1;
            out.push(Decision::Preempt { job: view.running[v].id });
        }
        let staying =
            || view.running.iter().enumerate().filter(|(i, r)| !r.paused && !victims.contains(i)).map(|p| p.1);
        let mut cands: Vec<Candidate> = Vec::new();
        for r in staying().filter(|r| !high(r.spec)) {
            let (Some(m), Some(&(h0, _))) = (orrery_model::zoo::model(&r.spec.model), r.hosts.first()) else {
                continue;
            };
            let Some(gpu) = gpu_type(&view.topology.hosts[h0].gpu_type) else { continue };
            let left_s = self.alone_s(view, r.id, r.spec) * (1.0 - r.progress) * r.xi.max(1.0);
            let held: u32 = r.hosts.iter().map(|h| h.1).sum();
            let network_share = if self.nic_interference {
                self.network_share(view, r.id, r.spec, held / r.spec.gpus_per_worker.max(1))
            } else {
                0.0
            };
            cands.push(Candidate {
                id: r.id,
                solo: r.solo_gpus.iter().copied().filter(|s| s.1 > 0).collect(),
                spec_model: m,
                sub_batch: r.sub_batch,
                gpus: r.spec.gpus(),
                left_s,
                gpu,
                network_share,
            });
        }
        // When each running job's GPUs free up, soonest first, for the
        // next-free rule: O(R log R) per round.
        let mut ends: Vec<(f64, f64)> = Vec::new();
        if self.next_free || self.shrink {
            for r in staying() {
                let left_s = self.alone_s(view, r.id, r.spec) * (1.0 - r.progress) * r.xi.max(1.0);
                // A GPU two jobs share frees when both have ended: half of
                // it is counted at each one's end.
                let solo: u32 = r.solo_gpus.iter().map(|s| s.1).sum();
                let held: u32 = r.hosts.iter().map(|h| h.1).sum();
                ends.push((left_s, f64::from(solo) + f64::from(held.saturating_sub(solo)) / 2.0));
            }
            ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        if let Some(p) = self.placement.as_mut() {
            let gone: Vec<JobId> = victims.iter().map(|&v| view.running[v].id).collect();
            p.prepare(view, &gone);
        }
        // The price of GPU time: who its GPU-seconds delay. The GPU-seconds
        // the jobs behind each position wait to run, suffix sums: O(Q).
        let arrival_rate = if self.price_gpu_time {
            self.note_arrivals(view);
            self.arrival_rate(view.now_s)
        } else {
            0.0
        };
        let mut backlog_behind = vec![0.0; order.len() + 1];
        if self.price_gpu_time {
            for (pos, &(t, _, qi)) in order.iter().enumerate().rev() {
                backlog_behind[pos] = backlog_behind[pos + 1] + f64::from(view.queue[qi].spec.gpus()) * t;
            }
        }
        let waiting = order.len();
        let total = view.topology.gpu_count();
        // Decisions before the previous job was considered (blocking mode).
        let mut before_previous: Option<usize> = None;
        for (pos, (t_new, _, qi)) in order.into_iter().enumerate() {
            let q = &view.queue[qi];
            if q.spec.gpus() == 0 || q.spec.gpus() > total {
                let reason = format!("needs {} GPUs; the cluster has {total}", q.spec.gpus());
                out.push(Decision::Reject { job: q.id, reason });
                continue;
            }
            if self.blocking && before_previous == Some(out.len()) {
                break; // the previous job could not start
            }
            before_previous = Some(out.len());
            let need = q.spec.gpus();
            if self.price_gpu_time {
                // A high-priority job's GPU time is not priced (Metronome:
                // it is not slowed for others); it still starts smaller when
                // that is faster where it would run.
                let behind = waiting - pos - 1;
                let price = if high(q.spec) {
                    0.0
                } else {
                    gpu_second_price(behind, arrival_rate, backlog_behind[pos + 1], total)
                };
                let k = self.priced_workers(view, &rack_of, &free, q, price);
                if k < q.spec.workers.max(1)
                    && let Some(hosts) = self.place_smaller(view, &rack_of, &free, q.spec, k)
                {
                    for &(h, g) in &hosts {
                        free[h] -= g;
                    }
                    self.priced += 1;
                    out.push(Decision::Place { job: q.id, hosts });
                    continue;
                }
            }
            // Lines 6-7: enough free GPUs.
            if free.iter().map(|&f| u64::from(f)).sum::<u64>() >= u64::from(need)
                && let Some(hosts) = match self.placement.as_mut() {
                    Some(p) => p.place(view, &rack_of, &free, q.spec),
                    None => consolidated(view, &rack_of, &capped(&free, q.spec), need),
                }
            {
                for &(h, g) in &hosts {
                    free[h] -= g;
                }
                if let Some(p) = self.placement.as_mut() {
                    p.commit(view, q.spec, &hosts);
                }
                out.push(Decision::Place { job: q.id, hosts });
                continue;
            }
            if self.shrink {
                let wait_s = next_free_s(&ends, free.iter().sum(), need);
                if let Some(hosts) = self.shrunk_start(view, &rack_of, &free, q, t_new, wait_s) {
                    for &(h, g) in &hosts {
                        free[h] -= g;
                    }
                    self.shrunk += 1;
                    out.push(Decision::Place { job: q.id, hosts });
                    continue;
                }
            }
            if !self.share || high(q.spec) {
                continue;
            }
            let solo_total: u64 = cands.iter().flat_map(|c| &c.solo).map(|s| u64::from(s.1)).sum();
            let Some(model) = orrery_model::zoo::model(&q.spec.model) else { continue };
            if free.iter().map(|&f| u64::from(f)).sum::<u64>() + solo_total < u64::from(need) {
                continue;
            }
            // Lines 10-14: candidate partners, ranked.
            let back_to_back = if self.next_free {
                BackToBack::NextFree { wait_s: next_free_s(&ends, free.iter().sum(), need) }
            } else {
                self.back_to_back
            };
            let network_share =
                if self.nic_interference { self.network_share(view, q.id, q.spec, q.spec.workers) } else { 0.0 };
            let offers = self.offers(&cands, q.spec, model, t_new, back_to_back, network_share);
            if offers.is_empty() {
                self.waits += 1;
                continue;
            }
            // Lines 15-17: take GPUs from the ranked partners until enough;
            // then free GPUs if still short (the job runs on all of them).
            let mut shared: Vec<(JobId, HostId, u32)> = Vec::new();
            let mut left = need;
            let mut sub = q.spec.batch.max(1);
            let mut used: Vec<&Offer> = Vec::new();
            for o in &offers {
                if left == 0 {
                    break;
                }
                let c = &cands[o.cand];
                for &(h, g) in &c.solo {
                    let take = g.min(left).min(q.spec.host_cap(g));
                    if take > 0 {
                        shared.push((c.id, h, take));
                        left -= take;
                    }
                    if left == 0 {
                        break;
                    }
                }
                sub = sub.min(o.sub_batch);
                used.push(o);
            }
            let mut from_free = Vec::new();
            if left > 0 {
                if self.rule == Rule::Lucid {
                    continue;
                }
                for (h, f) in free.iter().enumerate() {
                    let take = (*f).min(left);
                    if take > 0 {
                        from_free.push((h, take));
                        left -= take;
                    }
                    if left == 0 {
                        break;
                    }
                }
                if left > 0 {
                    continue;
                }
            }
            if (shared.iter().map(|s| s.2).sum::<u32>() + from_free.iter().map(|s| s.1).sum::<u32>())
                % q.spec.gpus_per_worker.max(1)
                != 0
            {
                continue;
            }
            // Eq. 24, as estimated now: wait for the partners to finish, then
            // run alone; against the newcomer's end while sharing.
            let wait_s = used.iter().map(|o| cands[o.cand].left_s).fold(0.0, f64::max);
            let coloc_s = used.iter().map(|o| newcomer_end(cands[o.cand].left_s, o.t_new_s, o.xi)).fold(0.0, f64::max);
            self.benefit_sum += (wait_s + t_new) / coloc_s.max(1e-9);
            self.shares += 1;
            for &(h, g) in &from_free {
                free[h] -= g;
            }
            for &(p, h, g) in &shared {
                if let Some(c) = cands.iter_mut().find(|c| c.id == p)
                    && let Some(s) = c.solo.iter_mut().find(|s| s.0 == h)
                {
                    s.1 = s.1.saturating_sub(g);
                }
            }
            out.push(Decision::Share { job: q.id, free: from_free, shared, sub_batch: sub });
        }
        // Not in a round that preempts: GPUs are short, and the victims
        // come back to the queue at once.
        if self.shrink && victims.is_empty() {
            let index = self.take_index(&free, &rack_of);
            let mut spare = Free::new(&rack_of, &mut free, index);
            self.grow(view, &mut spare, &mut out);
            // A running job grows only where a later arrival can take the
            // GPUs back by preempting it.
            if self.preempt && nobody_waits(view, &out) {
                self.regrow(view, &mut spare, &mut out);
            }
            let index = spare.write_back();
            self.keep_index(index);
        }
        if self.starvation_guard {
            self.note_holders(view, &out);
        }
        out
    }
}

/// Seconds until `need` GPUs are free: `free` now, plus each running job's
/// own GPUs when it ends (`ends`, soonest first). Jobs queued ahead of the
/// newcomer may take some of them first, so this is the earliest it could
/// start: counting what they wait for (as EASY backfilling reserves) made
/// `orrery` shrink and share more, and its mean JCT on benchmark-network
/// longer in 3 of 4 (seeds, load) cells. Infinite when the running jobs
/// never free enough. O(R).
fn next_free_s(ends: &[(f64, f64)], free: u32, need: u32) -> f64 {
    let need = f64::from(need);
    let mut have = f64::from(free);
    for &(left_s, gpus) in ends {
        if have >= need {
            break;
        }
        have += gpus;
        if have >= need {
            return left_s;
        }
    }
    if have >= need { 0.0 } else { f64::INFINITY }
}

/// The free GPUs that growth takes from. Growing may place every running
/// job of a round (all of them when nobody waits and half the cluster is
/// idle), so they are indexed ([`FreeIndex`]) and each placement costs
/// O(m log H) for its m hosts instead of O(H log H).
struct Free<'a> {
    rack_of: &'a [usize],
    free: &'a mut [u32],
    /// The same GPUs, indexed.
    index: FreeIndex,
}

impl<'a> Free<'a> {
    /// `index` must hold `free`. O(1).
    fn new(rack_of: &'a [usize], free: &'a mut [u32], index: FreeIndex) -> Free<'a> {
        debug_assert_eq!(index.free(), &free[..]);
        Free { rack_of, free, index }
    }

    /// Free GPUs in all. O(1).
    fn total(&self) -> u32 {
        self.index.total() as u32
    }

    /// `spec` on `k` workers, consolidated on the free GPUs plus the ones it
    /// `holds`; on success the free GPUs get those back and lose the new
    /// hosts. O(m log H) for m hosts held or taken.
    fn resized(
        &mut self,
        view: &ClusterView<'_>,
        holds: &[(HostId, u32)],
        spec: &JobSpec,
        k: u32,
    ) -> Option<Vec<(HostId, u32)>> {
        let hosts = self.trial(view, holds, spec, k)?;
        self.index.give_back(holds);
        self.index.take(&hosts);
        Some(hosts)
    }

    /// Where [`Self::resized`] would put `spec` on `k` workers, without
    /// taking the GPUs. O(m log H).
    fn trial(
        &mut self,
        view: &ClusterView<'_>,
        holds: &[(HostId, u32)],
        spec: &JobSpec,
        k: u32,
    ) -> Option<Vec<(HostId, u32)>> {
        let index = &mut self.index;
        let gpus = k * spec.gpus_per_worker.max(1);
        index.give_back(holds);
        let hosts = if spec.anti_affinity {
            consolidated(view, self.rack_of, &capped(index.free(), spec), gpus)
        } else {
            index.consolidated(gpus)
        };
        index.take(holds);
        hosts
    }

    /// Copies the index's counts back to the round's free GPUs; returns
    /// the index, which holds them.
    fn write_back(self) -> FreeIndex {
        self.free.copy_from_slice(self.index.free());
        self.index
    }
}

/// Whether nobody waiting can use the `free` GPUs left after `out`: every
/// waiting job is started, shared or rejected by `out`, or, when the GPUs
/// can be taken back (`revocable`: with preemption a waiting job with less
/// time left takes a low-priority job's), needs more GPUs than are free in
/// all, so that it waits for running jobs to end whoever holds these. A
/// high-priority job is never preempted, but one grown this way ends
/// sooner too; keeping it at its request while others waited was slower
/// on Philly (1,037 / 1,488 s against 1,024 / 1,442 s, seeds 1–3). O(Q).
fn idle_for_the_queue(view: &ClusterView<'_>, out: &[Decision], free: u32, revocable: bool) -> bool {
    let decided: std::collections::HashSet<JobId> = out
        .iter()
        .filter_map(|d| match d {
            Decision::Place { job, .. } | Decision::Share { job, .. } | Decision::Reject { job, .. } => Some(*job),
            _ => None,
        })
        .collect();
    view.queue.iter().all(|q| decided.contains(&q.id) || (revocable && q.spec.gpus() > free))
}

/// Whether every waiting job is started, shared or rejected by `out`. O(Q).
fn nobody_waits(view: &ClusterView<'_>, out: &[Decision]) -> bool {
    idle_for_the_queue(view, out, 0, false)
}

/// What a GPU-second is worth in delay to other jobs, per GPU: the jobs it
/// delays over the cluster's `gpus`. In a fluid view of a busy cluster,
/// every GPU-second a job takes delays each job still to be served by
/// 1/G s: the `behind` jobs waiting after it, and those that arrive (at
/// `arrival_rate` per second) before the work those jobs wait to run,
/// `backlog_gpu_s`, drains through G GPUs. A job on k GPUs for T s then
/// costs the others `T·k·price` s in all. O(1).
pub fn gpu_second_price(behind: usize, arrival_rate: f64, backlog_gpu_s: f64, gpus: u32) -> f64 {
    let g = f64::from(gpus.max(1));
    (behind as f64 + arrival_rate * backlog_gpu_s / g) / g
}

/// `spec`'s iteration time on `hosts` beside the traffic already there, ms
/// (None when it cannot be shaped): its time alone, plus its network phase
/// stretched by the busiest link it would cross. A link whose running jobs
/// are on it a summed fraction D of the time (their duty cycles, [`link_duty`])
/// halves the job's rate while one of them sends, in the fluid view of
/// [`shared_nic_xi`] (CASSINI's circles: unaligned phases overlap at random),
/// so the network phase takes `D` of itself longer. With `duty` empty, its
/// time alone. O(shape + links crossed).
fn period_on(
    view: &ClusterView<'_>,
    duty: &HashMap<orrery_model::LinkId, f64>,
    spec: &JobSpec,
    hosts: &[(HostId, u32)],
) -> Option<f64> {
    let placed = orrery_model::placed::place(view.topology, spec, hosts)?;
    let (alone, network) = (placed.shape.period_ms(), placed.shape.network_ms());
    if network <= 0.0 || duty.is_empty() {
        return Some(alone);
    }
    let busiest =
        placed.links_on_any_path(view.topology).iter().filter_map(|l| duty.get(l)).fold(0.0_f64, |a, &b| a.max(b));
    Some(alone + network * busiest)
}

/// Per link, the running jobs' traffic on it: each job's duty cycle (the
/// fraction of its iteration alone on the network) times the share of its
/// flows the link carries, a flow split evenly over its equal-cost paths
/// (ECMP, or FORESIGHT's spreading over spines), at most 1 a job. Paused
/// jobs send nothing. O(Σ flows × path length) over the running jobs.
fn link_duty(
    view: &ClusterView<'_>,
    terms: &mut PerPlacement<Vec<(orrery_model::LinkId, f64)>>,
) -> HashMap<orrery_model::LinkId, f64> {
    let mut duty: HashMap<orrery_model::LinkId, f64> = HashMap::new();
    terms.forget_unless(view.running.len(), || view.running.iter().map(|r| r.id).collect());
    for r in view.running.iter().filter(|r| !r.paused) {
        let job = terms.get(r.id, r.hosts, || {
            let Some(placed) = orrery_model::placed::place(view.topology, r.spec, r.hosts) else { return Vec::new() };
            let (period, network) = (placed.shape.period_ms(), placed.shape.network_ms());
            if network <= 0.0 || period <= 0.0 {
                return Vec::new();
            }
            link_shares(view.topology, &placed).into_iter().map(|(l, share)| (l, share * network / period)).collect()
        });
        for &(l, d) in job {
            *duty.entry(l).or_insert(0.0) += d;
        }
    }
    duty
}

/// The share of a placed job's network flows each link carries: every
/// flow of every network phase adds 1/(its equal-cost paths) to each link
/// of each path, capped at 1. O(flows × path length).
fn link_shares(
    topo: &orrery_model::Topology,
    placed: &orrery_model::placed::Placed,
) -> Vec<(orrery_model::LinkId, f64)> {
    let mut share: HashMap<orrery_model::LinkId, f64> = HashMap::new();
    for seg in &placed.shape.segments {
        let orrery_model::Segment::Comm { collective, payload_bytes, .. } = *seg else { continue };
        if seg.network_gbps() <= 0.0 {
            continue;
        }
        for (src, dst, _) in orrery_model::placed::transfers(&placed.workers, collective, payload_bytes) {
            if src == dst {
                continue;
            }
            let paths = topo.shared_paths(src, dst);
            let each = 1.0 / paths.len().max(1) as f64;
            for &l in paths.iter().flatten() {
                *share.entry(l).or_insert(0.0) += each;
            }
        }
    }
    let mut out: Vec<(orrery_model::LinkId, f64)> = share.into_iter().map(|(l, s)| (l, s.min(1.0))).collect();
    out.sort_unstable_by_key(|e| e.0);
    out
}

/// `spec` on `workers` of its workers, packed from host 0, as the zoo
/// shapes it alone. O(shape).
fn packed_placement(t: &orrery_model::Topology, spec: &JobSpec, workers: u32) -> Option<orrery_model::placed::Placed> {
    orrery_model::placed::place(t, spec, &crate::baseline::packed(t, workers * spec.gpus_per_worker.max(1)))
}

/// A share's interference ratios `(ξ_run, ξ_new)` with the time each
/// job's network phase waits for its partner's traffic on the NICs they
/// share. Castor's ξ (Gavel's, here) is a ratio of whole-iteration
/// throughputs measured on one GPU, so it says nothing of the network:
/// Castor §6.1 found no cross-node indicator of ξ on its InfiniBand
/// testbed, where cross-node bandwidth was not the bottleneck. When both
/// jobs cross the network (`network_share` f > 0: the fraction of each
/// one's iteration on the network alone), both rings leave the shared
/// hosts through the same NICs. With unaligned phases the partner is on
/// the network a fraction f_other of the time (its duty cycle), during
/// which fair sharing halves the rate, so the job's network phase takes
/// f·f_other of an iteration longer: `ξ + f·f_other`. With either job on
/// one host nothing is added. On every fabric of docs/results.md this
/// lowered `orrery`'s mean JCT (4:1 with two GPUs a host: 545 → 525 s at
/// load 2). O(1).
pub fn shared_nic_xi((xi_run, xi_new): (f64, f64), (f_run, f_new): (f64, f64)) -> (f64, f64) {
    if f_run > 0.0 && f_new > 0.0 { (xi_run + f_run * f_new, xi_new + f_new * f_run) } else { (xi_run, xi_new) }
}

/// When the newcomer ends if it starts beside a job with `left_s` to go
/// alone, taking `t_new` alone, with ratios `(ξ_run, ξ_new)` (the two cases
/// of Theorem 1's proof). O(1).
fn newcomer_end(left_s: f64, t_new: f64, (xi_run, xi_new): (f64, f64)) -> f64 {
    if xi_new * t_new <= xi_run * left_s {
        xi_new * t_new
    } else {
        xi_run * left_s + (t_new - xi_run * left_s / xi_new)
    }
}

impl Colocator {
    /// The partners worth sharing with, best first.
    /// Only jobs that free GPUs cannot start get here (Lucid's indolence).
    fn offers(
        &self,
        cands: &[Candidate],
        spec: &JobSpec,
        model: &ModelSpec,
        t_new: f64,
        back_to_back: BackToBack,
        network_share: f64,
    ) -> Vec<Offer> {
        let batch = spec.batch.max(1);
        let mut offers: Vec<Offer> = Vec::new();
        for (k, c) in cands.iter().enumerate() {
            let solo: u32 = c.solo.iter().map(|s| s.1).sum();
            if solo == 0 {
                continue;
            }
            let mem = c.gpu.memory_gib * 1024.0 - memory_mib(c.spec_model, c.sub_batch);
            let fits = |b: u32| memory_mib(model, b) <= mem;
            let xi = |b: u32| {
                let (xr, xn) = self.estimate.pair(c.spec_model, c.sub_batch, model, b, c.gpu);
                shared_nic_xi((xr, xn), (c.network_share, network_share))
            };
            let t_at = |b: u32| t_new * accumulation_factor(model, c.gpu, batch, b);
            match self.rule {
                Rule::Bsbf => {
                    let time = |b: u32| fits(b).then(|| t_at(b));
                    if let Some(s) = batch_scaling(batch, c.left_s, time, xi, back_to_back)
                        && s.share
                    {
                        let (xi, t_new_s) = (xi(s.sub_batch), t_at(s.sub_batch));
                        offers.push(Offer { cand: k, sub_batch: s.sub_batch, jct_sum: s.jct_sum, xi, t_new_s });
                    }
                }
                Rule::Ffs => {
                    // The largest power-of-two sub-batch that fits; no
                    // judgement of whether sharing pays.
                    let mut b = batch;
                    while b > 1 && !fits(b) {
                        b = b.div_ceil(2);
                    }
                    if fits(b) {
                        offers.push(Offer { cand: k, sub_batch: b, jct_sum: k as f64, xi: xi(b), t_new_s: t_at(b) });
                    }
                }
                Rule::Lucid => {
                    let one_host = c.solo.len() == 1 && solo == c.gpus;
                    let (xr, xn) = xi(batch);
                    if one_host && c.gpus == spec.gpus() && fits(batch) && xr <= LUCID_MAX_XI && xn <= LUCID_MAX_XI {
                        let (_, sum) = pair_choice(c.left_s, t_new, xr, xn, back_to_back);
                        offers.push(Offer { cand: k, sub_batch: batch, jct_sum: sum, xi: (xr, xn), t_new_s: t_new });
                    }
                }
            }
        }
        // Line 14: by the pair's sum of completion times (FFS: host order).
        offers.sort_by(|a, b| a.jct_sum.total_cmp(&b.jct_sum));
        if self.rule == Rule::Lucid {
            offers.truncate(1);
        }
        offers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{QueuedJob, RunningJob};
    use orrery_model::setups::LeafSpine;
    use orrery_model::{Topology, Work};

    fn cluster() -> Topology {
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

    fn running<'a>(id: JobId, spec: &'a JobSpec, hosts: &'a [(HostId, u32)], progress: f64) -> RunningJob<'a> {
        RunningJob { progress, ..RunningJob::new(id, spec, hosts) }
    }

    /// ξ estimates: every pair of classes at `xi`.
    fn uniform(xi: f64) -> Colocation {
        let mut c = Colocation::default();
        for a in ["ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation"] {
            for b in ["ResNet-18", "ResNet-50", "Transformer", "LM", "Recommendation"] {
                c.table.insert(a, b, xi);
            }
        }
        c
    }

    fn decide(
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
    fn a_share_pays_for_the_network_only_when_both_jobs_cross_it_from_the_shared_hosts() {
        // By hand: each job's network phase waits f·f_other longer.
        let (xr, xn) = shared_nic_xi((1.2, 1.1), (0.5, 0.4));
        assert!((xr - 1.4).abs() < 1e-12 && (xn - 1.3).abs() < 1e-12, "{xr} {xn}");
        assert_eq!(shared_nic_xi((1.2, 1.1), (0.0, 0.4)), (1.2, 1.1));
        let t = cluster();
        // Theorem 1 against the partner (Castor's rule): a 600 s newcomer
        // beside 1,800 s left ends the pair at 1,200·ξ + 1,200 s together
        // against 2·1,800 + 600 = 4,200 s back to back, so it shares while
        // ξ < 2.5. Take ξ = 2.4.
        let (xi, left, new_s) = (2.4, 1800.0, 600.0);
        let mut p = Colocator::new(Rule::Bsbf);
        p.nic_interference = true;
        p.set_colocation(&uniform(xi));
        let new = JobSpec::new("n", "vgg19", 32, 8, Work::Seconds(new_s), 0.0);
        // VGG19 on 8 workers over both hosts spends 35% of an iteration on
        // the network (V100s, 100 Gbit/s NICs), so ξ + f² = 2.52.
        let wide = JobSpec::new("a", "vgg19", 32, 8, Work::Seconds(2.0 * left), 0.0);
        let view0 = ClusterView { now_s: 0.0, topology: &t, free_gpus: &[0, 0], queue: vec![], running: vec![] };
        let f = p.network_share(&view0, 9, &new, 8);
        assert!((f - 0.35).abs() < 0.01, "f = {f}");
        assert_eq!(p.network_share(&view0, 9, &new, 4), 0.0, "one host");
        // Both cross the network from both hosts: 2.52 > 2.5, so it waits.
        let both = [(0usize, 4u32), (1, 4)];
        let view = ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[0, 0],
            queue: vec![QueuedJob::new(2, &new, 0.0)],
            running: vec![running(0, &wide, &both, 0.5)],
        };
        assert!(p.schedule(&view).is_empty());
        // Without the NIC term (Castor's ξ alone) it would share.
        let mut castor = Colocator::new(Rule::Bsbf);
        castor.set_colocation(&uniform(xi));
        assert!(matches!(castor.schedule(&view)[..], [Decision::Share { job: 2, .. }]));
        // A partner on one host sends nothing over the NIC: the same share
        // pays, the newcomer taking its 4 GPUs and the 4 free ones.
        let narrow = JobSpec::new("b", "vgg19", 32, 4, Work::Seconds(2.0 * left), 0.0);
        let one = [(0usize, 4u32)];
        let view = ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[0, 4],
            queue: vec![QueuedJob::new(2, &new, 0.0)],
            running: vec![running(1, &narrow, &one, 0.5)],
        };
        assert_eq!(
            p.schedule(&view),
            vec![Decision::Share { job: 2, free: vec![(1, 4)], shared: vec![(1, 0, 4)], sub_batch: 32 }]
        );
    }

    #[test]
    fn with_next_free_a_share_must_beat_the_gpus_that_free_up_first() {
        // Job a has 1,800 s left on host 0; job c ends in 200 s on host 1. A
        // 600 s newcomer with ξ = 2: Theorem 1 against a (3,600 s together
        // against 1,800 + 2,400 back to back) says share. But c's GPUs free
        // up in 200 s: 1,800 + 200 + 600 = 2,600 s < 3,600 s, so it waits.
        let t = cluster();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(3600.0), 0.0);
        let c = JobSpec::new("c", "resnet50", 32, 4, Work::Seconds(2000.0), 0.0);
        let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
        let (ha, hc) = ([(0usize, 4u32)], [(1usize, 4u32)]);
        let view = |c_progress: f64| ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[0, 0],
            queue: vec![QueuedJob::new(2, &new, 0.0)],
            running: vec![running(0, &a, &ha, 0.5), running(1, &c, &hc, c_progress)],
        };
        let paper = decide(Rule::Bsbf, 2.0, view(0.9).running, view(0.9).queue, &t);
        assert_eq!(paper, vec![Decision::Share { job: 2, free: vec![], shared: vec![(0, 0, 4)], sub_batch: 32 }]);
        let mut next_free = Colocator::new(Rule::Bsbf);
        next_free.next_free = true;
        assert_eq!(next_free.name(), "castor:next-free");
        next_free.set_colocation(&uniform(2.0));
        assert!(next_free.schedule(&view(0.9)).is_empty(), "c's GPUs come back in 200 s");
        // When c has 1,400 s left, sharing pays against waiting too, and c
        // is the better partner for both rules: together 1,200 + 2,000 =
        // 3,200 s against 1,400 + 1,400 + 600 = 3,400 s.
        let later = decide(Rule::Bsbf, 2.0, view(0.3).running, view(0.3).queue, &t);
        assert_eq!(later, vec![Decision::Share { job: 2, free: vec![], shared: vec![(1, 1, 4)], sub_batch: 32 }]);
        assert_eq!(next_free.schedule(&view(0.3)), later);
        assert_eq!(next_free_s(&[(200.0, 4.0), (1800.0, 4.0)], 0, 4), 200.0);
        assert_eq!(next_free_s(&[(200.0, 4.0), (1800.0, 4.0)], 2, 8), 1800.0);
        assert_eq!(next_free_s(&[(200.0, 4.0)], 4, 4), 0.0);
        assert_eq!(next_free_s(&[(200.0, 4.0)], 0, 8), f64::INFINITY);
        // One GPU two jobs share: half of it at each end, whole at the later.
        assert_eq!(next_free_s(&[(200.0, 0.5), (900.0, 0.5)], 0, 1), 900.0);
    }

    #[test]
    fn a_job_starts_smaller_only_when_that_beats_waiting_for_its_gpus() {
        // Host 0 is busy for 36,000 s; host 1 has 2 free GPUs and 2 held by
        // job b. A 600 s ResNet-50 newcomer asks for 4 GPUs. On 2 it needs
        // I(64)/I(128) times the iterations (Pollux's ImageNet profile), each
        // of the 2-GPU iteration time: `stretch` of its time at 4.
        let t = cluster();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(36_000.0), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 2, Work::Seconds(10_000.0), 0.0);
        let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
        let (ha, hb) = ([(0usize, 4u32)], [(1usize, 2u32)]);
        let view = |b_progress: f64| ClusterView {
            now_s: 0.0,
            topology: &t,
            free_gpus: &[0, 2],
            queue: vec![QueuedJob::new(2, &new, 0.0)],
            running: vec![running(0, &a, &ha, 0.0), running(1, &b, &hb, b_progress)],
        };
        let mut p = Colocator::new(Rule::Bsbf);
        p.share = false;
        p.shrink = true;
        let stretch = p.stretch(&view(0.0), 2, &new, 2);
        let ratio = orrery_model::convergence::iterations_per_reference("resnet50", 128, 64);
        // Halving the batch at most doubles the iterations (the same samples).
        assert!(ratio > 1.0 && ratio < 2.0 + 1e-3, "{ratio}");
        assert!(stretch > 1.0 && stretch < 2.5, "{stretch}");
        // b frees its GPUs in 10,000 s: 600 · stretch < 10,000 + 600, start on 2.
        assert_eq!(p.schedule(&view(0.0)), vec![Decision::Place { job: 2, hosts: vec![(1, 2)] }]);
        assert_eq!(p.counters()[0], ("shrunk_starts", 1.0));
        // b ends in 10 s: 600 · stretch > 610, so it waits for 4.
        assert!(p.schedule(&view(0.999)).is_empty());
        // A wait nobody can predict (the running jobs never free 4 GPUs) is
        // no reason to keep a smaller size for the whole run.
        let v = view(0.0);
        assert!(p.shrunk_start(&v, &crate::baseline::racks(&v), &[0, 2], &v.queue[0], 600.0, f64::INFINITY).is_none());
        // Without the rule it always waits.
        p.shrink = false;
        assert!(p.schedule(&view(0.0)).is_empty());
    }

    #[test]
    fn a_waiting_job_preempts_only_the_job_with_more_time_left_and_only_when_it_then_starts() {
        // Two hosts of 4 GPUs, both busy: a (36,000 s alone) on host 0, b
        // (1,000 s) on host 1. A 600 s newcomer asks for 4 GPUs.
        let t = cluster();
        let mut a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(36_000.0), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 4, Work::Seconds(1_000.0), 0.0);
        let short = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 0.0);
        let long = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(50_000.0), 0.0);
        let whole = JobSpec::new("n", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        let (ha, hb) = ([(0usize, 4u32)], [(1usize, 4u32)]);
        let decide = |a: &JobSpec, new: &JobSpec, preempt: bool| {
            let view = ClusterView {
                now_s: 0.0,
                topology: &t,
                free_gpus: &[0, 0],
                queue: vec![QueuedJob::new(2, new, 0.0)],
                running: vec![running(0, a, &ha, 0.0), running(1, &b, &hb, 0.0)],
            };
            let mut p = Colocator::new(Rule::Bsbf);
            p.share = false;
            p.spare_high_priority = true;
            p.preempt = preempt;
            p.schedule(&view)
        };
        // Shortest remaining time first: the newcomer's 600 s beats both, and
        // the job with the most time left (a) gives up its host.
        let place_on = |h: usize| Decision::Place { job: 2, hosts: vec![(h, 4)] };
        assert_eq!(decide(&a, &short, true), vec![Decision::Preempt { job: 0 }, place_on(0)]);
        // Without the part, it waits (Castor's Algorithm 1 never preempts).
        assert!(decide(&a, &short, false).is_empty());
        // A newcomer with more time left than every running job waits.
        assert!(decide(&a, &long, true).is_empty());
        // A high-priority job is never preempted: b (1,000 s > 600 s) is.
        a.priority = orrery_model::Priority::High;
        assert_eq!(decide(&a, &short, true), vec![Decision::Preempt { job: 1 }, place_on(1)]);
        // Preempting b alone cannot make room for 8 GPUs, so nothing is
        // preempted (the victim would only be placed again).
        assert!(decide(&a, &whole, true).is_empty());
    }

    #[test]
    fn a_job_that_has_waited_its_time_alone_is_not_preempted_again() {
        // Host 0 runs a (3,000 s alone); host 1 runs b (2,000 s). At t =
        // 5,000 s a 600 s newcomer asks for 4 GPUs: shortest remaining time
        // first takes a's host, the one with more time left.
        let t = cluster();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(3_000.0), 0.0);
        let b = JobSpec::new("b", "resnet50", 32, 4, Work::Seconds(2_000.0), 4_000.0);
        let new = JobSpec::new("n", "resnet50", 32, 4, Work::Seconds(600.0), 5_000.0);
        let (ha, hb) = ([(0usize, 4u32)], [(1usize, 4u32)]);
        let guarded = || {
            let mut p = Colocator::new(Rule::Bsbf);
            p.share = false;
            p.preempt = true;
            p.starvation_guard = true;
            p
        };
        // a alone on host 0 (a round with nothing to decide), then the
        // newcomer's round at 5,000 s.
        let quiet = |now_s| ClusterView {
            now_s,
            topology: &t,
            free_gpus: &[0, 4],
            queue: vec![],
            running: vec![running(0, &a, &ha, 0.0)],
        };
        let contest = ClusterView {
            now_s: 5_000.0,
            topology: &t,
            free_gpus: &[0, 0],
            queue: vec![QueuedJob::new(2, &new, 0.0)],
            running: vec![running(0, &a, &ha, 0.0), running(1, &b, &hb, 0.5)],
        };
        // Rounds at 1,000 s (a has just started: it arrived at 0 and waited
        // 1,000 s) and 4,000 s see a on host 0, so by 5,000 s it has held
        // GPUs for 4,000 s: it has waited 1,000 s, less than its 3,000 s
        // alone, and is preempted.
        let mut p = guarded();
        assert!(p.schedule(&quiet(1_000.0)).is_empty());
        assert!(p.schedule(&quiet(4_000.0)).is_empty());
        assert_eq!(
            p.schedule(&contest),
            vec![Decision::Preempt { job: 0 }, Decision::Place { job: 2, hosts: vec![(0, 4)] }]
        );
        // A policy that first saw a at 4,000 s knows of no time on GPUs
        // before: a has been in the system 5,000 s and held GPUs 1,000 s, so
        // it has waited 4,000 s, more than its 3,000 s alone. It keeps its
        // host, and b (1,000 s left, more than 600) gives up its own.
        let mut late = guarded();
        assert!(late.schedule(&quiet(4_000.0)).is_empty());
        assert_eq!(
            late.schedule(&contest),
            vec![Decision::Preempt { job: 1 }, Decision::Place { job: 2, hosts: vec![(1, 4)] }]
        );
        // Without the guard, a goes, as above.
        late.starvation_guard = false;
        assert_eq!(late.schedule(&contest)[0], Decision::Preempt { job: 0 });
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
        assert_eq!(p.run_s.get(&0), Some(&19_990.0));
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

    /// CASSINI's testbed wired as benchmark-network: 4 racks of 6 one-A100
    /// hosts, 2 spines, 50 Gbit/s everywhere (3:1).
    fn one_gpu_hosts() -> Topology {
        LeafSpine {
            racks: 4,
            hosts_per_rack: 6,
            spines: 2,
            gpus_per_host: 1,
            gpu_type: "a100".into(),
            host_gbps: 50.0,
            uplink_gbps: 50.0,
        }
        .build("one-gpu-hosts")
        .expect("valid")
    }

    impl Colocator {
        /// A stretch already computed for (job, workers).
        fn stretch_of(&self, job: JobId, k: u32) -> f64 {
            self.stretch.get(&(job, k)).copied().unwrap_or(f64::NAN)
        }
    }

    fn counter(p: &Colocator, name: &str) -> f64 {
        p.counters().into_iter().find(|c| c.0 == name).map_or(f64::NAN, |c| c.1)
    }

    #[test]
    fn a_gpu_second_costs_the_jobs_behind_and_those_arriving_before_the_backlog_drains() {
        // 2 jobs wait behind; 0.01 jobs/s arrive; 4,800 GPU-s wait on 24
        // GPUs, which drain in 200 s, long enough for 2 more arrivals: 4
        // jobs delayed by 1/24 s per GPU-second.
        assert!((gpu_second_price(2, 0.01, 4_800.0, 24) - 4.0 / 24.0).abs() < 1e-12);
        assert_eq!(gpu_second_price(0, 0.5, 0.0, 24), 0.0, "nobody waits: free");
        // The arrival rate: arrivals after the first over the time since it,
        // then the arrivals of the last hour over the hour.
        let t = one_gpu_hosts();
        let spec = |at: f64| JobSpec::new("j", "vgg19", 32, 30, Work::Seconds(1.0), at);
        let specs = [spec(0.0), spec(10.0), spec(20.0), spec(4_000.0)];
        let mut p = Colocator::new(Rule::Bsbf);
        let seen = |p: &mut Colocator, now_s: f64, jobs: &[usize]| {
            let queue = jobs.iter().map(|&i| QueuedJob::new(i as JobId, &specs[i], 0.0)).collect();
            p.note_arrivals(&ClusterView { now_s, topology: &t, free_gpus: &[], queue, running: Vec::new() });
            p.arrival_rate(now_s)
        };
        assert_eq!(seen(&mut p, 0.0, &[0]), 0.0, "one arrival is no rate");
        assert!((seen(&mut p, 20.0, &[0, 1, 2]) - 2.0 / 20.0).abs() < 1e-12);
        // A job seen again (preempted, back in the queue) is not new.
        assert!((seen(&mut p, 40.0, &[1]) - 2.0 / 40.0).abs() < 1e-12);
        assert!((seen(&mut p, 4_000.0, &[3]) - 1.0 / 3_600.0).abs() < 1e-12, "the three at 0-20 s aged out");
    }

    #[test]
    fn a_size_is_judged_where_it_would_run() {
        // Two 8-GPU hosts with one 50 Gbit/s NIC each; two one-host jobs hold
        // 2 GPUs of host 0 and 6 of host 1 (no traffic on the NICs), so 6 + 2
        // are free. Packed, an 8-GPU job runs on one host; placed now, it
        // spans both NICs.
        let t = LeafSpine {
            racks: 1,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 8,
            gpu_type: "a100".into(),
            host_gbps: 50.0,
            uplink_gbps: 100.0,
        }
        .build("two-8-gpu-hosts")
        .expect("valid");
        let (small, large) = (
            JobSpec::new("s", "resnet50", 32, 2, Work::Seconds(600.0), 0.0),
            JobSpec::new("l", "resnet50", 32, 6, Work::Seconds(600.0), 0.0),
        );
        let (on_0, on_1) = ([(0usize, 2u32)], [(1usize, 6u32)]);
        let free = [6u32, 2];
        let ms = |spec: &JobSpec, hosts: &[(HostId, u32)]| {
            let view =
                ClusterView { now_s: 0.0, topology: &t, free_gpus: &free, queue: Vec::new(), running: Vec::new() };
            period_on(&view, &HashMap::new(), spec, hosts).expect("shaped")
        };
        for (model, starts_on) in [("vgg19", vec![(0, 6)]), ("resnet50", vec![(0, 6), (1, 2)])] {
            let spec = JobSpec::new("j", model, 32, 8, Work::Seconds(600.0), 0.0);
            let (across, one_host) = (ms(&spec, &[(0, 6), (1, 2)]), ms(&spec, &[(0, 6)]));
            // The same samples on 6 workers take 8/6 as many iterations.
            let stretch = 8.0 / 6.0 * one_host / across;
            let view = ClusterView {
                now_s: 10.0,
                topology: &t,
                free_gpus: &free,
                queue: vec![QueuedJob::new(2, &spec, 0.0)],
                running: vec![RunningJob::new(0, &small, &on_0), RunningJob::new(1, &large, &on_1)],
            };
            let mut p = Colocator::new(Rule::Bsbf);
            p.share = false;
            p.price_gpu_time = true;
            let d = p.schedule(&view);
            assert_eq!(d.first(), Some(&Decision::Place { job: 2, hosts: starts_on.clone() }), "{model}: {d:?}");
            // VGG19 spends most of an iteration across hosts on the network:
            // 6 GPUs of one host do the same work in 0.62 of the time.
            // ResNet-50 communicates little: on 6 it takes 1.04 times as
            // long, so all 8, across both hosts.
            if model == "vgg19" {
                assert!(stretch < 0.8, "{model}: {stretch}"); // 0.62
            } else {
                assert!(stretch > 1.0, "{model}: {stretch}"); // 1.04
            }
            // Packed from host 0 (the rule before), 8 GPUs fit on one host
            // and no smaller size is faster: the request across both NICs.
            let packed = |k: u32| packed_placement(&t, &spec, k).map(|p| p.shape.period_ms()).expect("shaped");
            assert!(8.0 / 6.0 * packed(6) / packed(8) > 1.0, "{model}");
        }
        // The same free GPUs, but one running job holds 2 + 6 across both
        // hosts, its ring on both NICs. ResNet-50 across them would now
        // share its network phase with that ring: it starts on the 6 of one
        // host.
        let other = JobSpec::new("o", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        let held = [(0usize, 2u32), (1, 6)];
        let spec = JobSpec::new("j", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        let view = ClusterView {
            now_s: 10.0,
            topology: &t,
            free_gpus: &free,
            queue: vec![QueuedJob::new(2, &spec, 0.0)],
            running: vec![RunningJob::new(0, &other, &held)],
        };
        let duty = link_duty(&view, &mut PerPlacement::default());
        let placed = orrery_model::placed::place(&t, &other, &held).expect("shaped");
        let cycle = placed.shape.network_ms() / placed.shape.period_ms();
        // Its ring crosses each NIC once each way: every link of it carries
        // one flow, the whole of its duty cycle.
        assert!(!duty.is_empty() && duty.values().all(|&d| (d - cycle).abs() < 1e-9), "{duty:?} {cycle}");
        let across = period_on(&view, &duty, &spec, &[(0, 6), (1, 2)]).expect("shaped");
        let alone = ms(&spec, &[(0, 6), (1, 2)]);
        let network = orrery_model::placed::place(&t, &spec, &[(0, 6), (1, 2)]).expect("shaped").shape.network_ms();
        assert!((across - (alone + network * cycle)).abs() < 1e-9, "{across} {alone} {network} {cycle}");
        let mut p = Colocator::new(Rule::Bsbf);
        p.share = false;
        p.price_gpu_time = true;
        let d = p.schedule(&view);
        assert_eq!(d.first(), Some(&Decision::Place { job: 2, hosts: vec![(0, 6)] }), "{d:?}");
    }

    #[test]
    fn a_flow_is_split_over_its_equal_cost_paths() {
        // Two racks under two spines: a ring between hosts of different
        // racks has two equal-cost paths each way; each uplink and downlink
        // of the spines carries half of each flow, each NIC all of it.
        let t = LeafSpine::with_oversubscription(2, 1, 2, 1, "a100", 50.0, 1.0).build("t").expect("valid");
        let spec = JobSpec::new("j", "vgg19", 32, 2, Work::Iterations(100), 0.0);
        let placed = orrery_model::placed::place(&t, &spec, &[(0, 1), (1, 1)]).expect("shaped");
        let shares = link_shares(&t, &placed);
        let nics: Vec<f64> =
            shares.iter().filter(|(l, _)| t.links[*l].from < 2 || t.links[*l].to < 2).map(|s| s.1).collect();
        let fabric: Vec<f64> =
            shares.iter().filter(|(l, _)| t.links[*l].from >= 2 && t.links[*l].to >= 2).map(|s| s.1).collect();
        assert_eq!(nics, [1.0; 4], "{shares:?}");
        assert_eq!(fabric, [0.5; 8], "{shares:?}");
    }

    #[test]
    fn a_job_that_spends_its_gpus_on_the_network_starts_smaller_while_others_wait() {
        // VGG19 on 12 one-GPU hosts spends most of each iteration on the
        // 3:1 fabric: on one worker it takes 3.5 times as long for the same
        // samples, 29% of the GPU time. ResNet-50 on one 8-GPU host scales
        // almost linearly (91% of the GPU time on one worker).
        let t = one_gpu_hosts();
        let vgg = JobSpec::new("v", "vgg19", 32, 12, Work::Seconds(600.0), 100.0);
        let free = [1u32; 24];
        let view = |queue| ClusterView { now_s: 100.0, topology: &t, free_gpus: &free, queue, running: Vec::new() };
        let mut p = Colocator::new(Rule::Bsbf);
        let alone = view(vec![QueuedJob::new(0, &vgg, 0.0)]);
        let one = p.hardware_stretch(&alone, 0, &vgg, 1);
        assert!((3.3..3.6).contains(&one), "{one}");
        // cost(12) = 1 + 12·price, cost(1) = 3.46·(1 + price): 1 worker
        // wins above a price of about 0.29.
        assert_eq!(
            p.priced_workers(&alone, &crate::baseline::racks(&alone), alone.free_gpus, &alone.queue[0], 0.0),
            12
        );
        assert_eq!(
            p.priced_workers(&alone, &crate::baseline::racks(&alone), alone.free_gpus, &alone.queue[0], 0.2),
            12
        );
        assert_eq!(p.priced_workers(&alone, &crate::baseline::racks(&alone), alone.free_gpus, &alone.queue[0], 0.5), 1);
        let host = LeafSpine {
            racks: 1,
            hosts_per_rack: 2,
            spines: 1,
            gpus_per_host: 8,
            gpu_type: "a100".into(),
            host_gbps: 100.0,
            uplink_gbps: 100.0,
        }
        .build("two-8-gpu-hosts")
        .expect("valid");
        let resnet = JobSpec::new("r", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        let on_host = ClusterView {
            now_s: 0.0,
            topology: &host,
            free_gpus: &[8, 8],
            queue: vec![QueuedJob::new(1, &resnet, 0.0)],
            running: Vec::new(),
        };
        for price in [0.0, 0.1, 0.5, 1.0] {
            assert_eq!(
                p.priced_workers(
                    &on_host,
                    &crate::baseline::racks(&on_host),
                    on_host.free_gpus,
                    &on_host.queue[0],
                    price
                ),
                8,
                "price {price}"
            );
        }

        // In a round: three 12-GPU jobs of 6,000 s arrived before it, at 0
        // and 50 s, and wait behind it (shortest remaining time first). Their
        // 216,000 GPU-s drain through 24 GPUs in 9,000 s, in which 0.03
        // jobs/s bring 270 more: the price is (3 + 270)/24, and VGG19 starts
        // on one GPU, leaving 23 to the jobs behind.
        // (One worker of 12 GPUs each, so that only VGG19's size is in play.)
        let long =
            |at: f64| JobSpec { gpus_per_worker: 12, ..JobSpec::new("l", "xlm", 32, 1, Work::Seconds(6_000.0), at) };
        let longs = [long(0.0), long(50.0), long(50.0)];
        let mut queue = vec![QueuedJob::new(0, &vgg, 0.0)];
        queue.extend(longs.iter().enumerate().map(|(i, s)| QueuedJob::new(i as JobId + 1, s, 0.0)));
        let busy = view(queue);
        let mut p = Colocator::new(Rule::Bsbf);
        p.share = false;
        p.price_gpu_time = true;
        let d = p.schedule(&busy);
        assert_eq!(d.first(), Some(&Decision::Place { job: 0, hosts: vec![(0, 1)] }), "{d:?}");
        assert_eq!(counter(&p, "priced_starts"), 1.0);
        // Alone, nothing waits behind it: its request.
        let mut p = Colocator::new(Rule::Bsbf);
        p.price_gpu_time = true;
        let d = p.schedule(&view(vec![QueuedJob::new(0, &vgg, 0.0)]));
        let Some(Decision::Place { hosts, .. }) = d.first() else { panic!("{d:?}") };
        assert_eq!(hosts.iter().map(|h| h.1).sum::<u32>(), 12);
        assert_eq!(counter(&p, "priced_starts"), 0.0);
    }

    #[test]
    fn a_job_started_smaller_grows_back_only_when_nobody_waits() {
        // VGG19 asked for 12 workers and runs on one; 23 GPUs are idle.
        let t = one_gpu_hosts();
        let vgg = JobSpec::new("v", "vgg19", 32, 12, Work::Seconds(600.0), 0.0);
        // One worker of 24 GPUs: it cannot start smaller.
        let big = JobSpec { gpus_per_worker: 24, ..JobSpec::new("b", "xlm", 32, 1, Work::Seconds(600.0), 0.0) };
        let held = [(0usize, 1u32)];
        let mut free = [1u32; 24];
        free[0] = 0;
        let view = |queue| ClusterView {
            now_s: 100.0,
            topology: &t,
            free_gpus: &free,
            queue,
            running: vec![running(0, &vgg, &held, 0.1)],
        };
        let mut p = Colocator::new(Rule::Bsbf);
        p.share = false;
        p.shrink = true;
        p.preempt = true;
        p.price_gpu_time = true;
        let d = p.schedule(&view(Vec::new()));
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(d[0], Decision::Preempt { job: 0 });
        let Decision::Place { job: 0, hosts } = &d[1] else { panic!("{d:?}") };
        let k = hosts.iter().map(|h| h.1).sum::<u32>();
        let fastest = (2..=24).min_by(|&a, &b| p.stretch_of(0, a).total_cmp(&p.stretch_of(0, b))).expect("sizes");
        assert_eq!(k, fastest, "the fastest size up to twice its request");
        assert!(k >= 12, "{k}");
        assert_eq!(counter(&p, "regrown"), 1.0);
        // A 24-GPU job waits for the idle GPUs: VGG19 keeps its one.
        assert!(p.schedule(&view(vec![QueuedJob::new(1, &big, 0.0)])).is_empty());
        // Without preemption nobody could take the GPUs back: it stays.
        p.preempt = false;
        assert!(p.schedule(&view(Vec::new())).is_empty());
        // Nor without the part.
        p.preempt = true;
        p.shrink = false;
        p.price_gpu_time = false;
        assert!(p.schedule(&view(Vec::new())).is_empty());
    }

    #[test]
    fn idle_gpus_go_to_the_running_job_they_speed_up_most_per_gpu() {
        // Three hosts of 4 GPUs, nobody waiting, 2 GPUs idle (one on host 1,
        // one on host 2). Job 0, ResNet-50 on 4 workers, fills host 0: on 6
        // it would cross hosts. Job 1, ResNet-50 on 1 worker, sits on host
        // 1: on 2 it doubles its samples on the same host. Jobs 2 and 3
        // already run on twice their request.
        let t = LeafSpine {
            racks: 1,
            hosts_per_rack: 3,
            spines: 1,
            gpus_per_host: 4,
            gpu_type: "a100".into(),
            host_gbps: 50.0,
            uplink_gbps: 50.0,
        }
        .build("three-hosts")
        .expect("valid");
        let wide = JobSpec::new("wide", "resnet50", 32, 4, Work::Seconds(1_000.0), 0.0);
        let small = JobSpec::new("small", "resnet50", 32, 1, Work::Seconds(1_000.0), 0.0);
        let (two, three) = (
            JobSpec::new("two", "resnet50", 32, 1, Work::Seconds(1_000.0), 0.0),
            JobSpec { gpus_per_worker: 3, ..JobSpec::new("three", "resnet50", 32, 1, Work::Seconds(1_000.0), 0.0) },
        );
        let (h0, h1, h1b, h2) = ([(0usize, 4u32)], [(1usize, 1u32)], [(1usize, 2u32)], [(2usize, 3u32)]);
        let mut p = Colocator::new(Rule::Bsbf);
        (p.share, p.shrink, p.preempt, p.price_gpu_time) = (false, true, true, true);
        let view = ClusterView {
            now_s: 100.0,
            topology: &t,
            free_gpus: &[0, 1, 1],
            queue: vec![],
            running: vec![
                running(0, &wide, &h0, 0.1),
                running(1, &small, &h1, 0.1),
                running(2, &two, &h1b, 0.1),
                running(3, &three, &h2, 0.1),
            ],
        };
        let d = p.schedule(&view);
        // Both growths pay Pollux's 10%, but a worker lowers the small job's
        // time by more: it goes first and takes host 1's idle GPU.
        let per_worker = |p: &Colocator, job, now: u32, k: u32| {
            (1.0 - p.stretch_of(job, k) / p.stretch_of(job, now)) / f64::from(k - now)
        };
        assert!(p.stretch_of(0, 6) * GROW_GAIN <= p.stretch_of(0, 4), "the wide job would grow");
        assert!(p.stretch_of(1, 2) * GROW_GAIN <= p.stretch_of(1, 1), "the small job would grow");
        assert!(per_worker(&p, 1, 1, 2) > per_worker(&p, 0, 4, 6));
        assert_eq!(&d[..2], &[Decision::Preempt { job: 1 }, Decision::Place { job: 1, hosts: vec![(1, 2)] }], "{d:?}");
        // The wide job gets what is left, if one more worker still pays.
        assert!(
            d[2..].iter().all(|x| matches!(x, Decision::Preempt { job: 0 } | Decision::Place { job: 0, .. })),
            "{d:?}"
        );
    }

    #[test]
    fn a_job_grows_on_idle_gpus_only_when_that_is_faster_and_no_waiting_job_could_use_them() {
        // Two idle hosts of 4 GPUs; a 2-worker ResNet-50 at 32 a GPU. On 4
        // workers each iteration does twice the samples, and Pollux's
        // ImageNet profile needs fewer iterations at batch 128 than at 64.
        let t = cluster();
        let job = JobSpec::new("j", "resnet50", 32, 2, Work::Seconds(1_000.0), 0.0);
        let huge = JobSpec::new("h", "resnet50", 8_192, 2, Work::Seconds(1_000.0), 0.0);
        let big = JobSpec::new("b", "resnet50", 32, 8, Work::Seconds(1_000.0), 0.0);
        fn view<'a>(t: &'a Topology, queue: Vec<QueuedJob<'a>>) -> ClusterView<'a> {
            ClusterView { now_s: 0.0, topology: t, free_gpus: &[4, 4], queue, running: Vec::new() }
        }
        let mut p = Colocator::new(Rule::Bsbf);
        p.shrink = true;
        let alone = view(&t, vec![QueuedJob::new(0, &job, 0.0)]);
        let stretch = p.stretch(&alone, 0, &job, 4);
        assert!(stretch * GROW_GAIN < 1.0, "4 workers finish sooner: {stretch}");
        assert_eq!(p.schedule(&alone), vec![Decision::Place { job: 0, hosts: vec![(0, 4)] }]);
        assert_eq!(p.counters()[1], ("grown_starts", 1.0));
        // Past the profile's largest batch, more samples an iteration buy
        // no fewer iterations: it stays at its request.
        let alone = view(&t, vec![QueuedJob::new(1, &huge, 0.0)]);
        assert!(p.stretch(&alone, 1, &huge, 4) >= 1.0);
        assert_eq!(p.schedule(&alone), vec![Decision::Place { job: 1, hosts: vec![(0, 2)] }]);
        // A job that still waits (8 GPUs, 6 left free) keeps the idle GPUs
        // for itself: nobody grows.
        let both = view(&t, vec![QueuedJob::new(0, &job, 0.0), QueuedJob::new(2, &big, 0.0)]);
        assert_eq!(p.schedule(&both), vec![Decision::Place { job: 0, hosts: vec![(0, 2)] }]);
        // With preemption the GPUs can be taken back, and the 8-GPU job
        // needs more than the 6 left free: it waits for j to end whoever
        // holds them, and j, grown, ends sooner. So j grows.
        p.preempt = true;
        assert_eq!(p.schedule(&both), vec![Decision::Place { job: 0, hosts: vec![(0, 4)] }]);
        p.preempt = false;
        // Without the part, never.
        p.shrink = false;
        let alone = view(&t, vec![QueuedJob::new(0, &job, 0.0)]);
        assert_eq!(p.schedule(&alone), vec![Decision::Place { job: 0, hosts: vec![(0, 2)] }]);
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
        let (rm, bm) =
            (orrery_model::zoo::model("resnet50").expect("zoo"), orrery_model::zoo::model("bert").expect("zoo"));
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
}
