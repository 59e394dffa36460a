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
//! The same engine ([`Colocator`]) runs the combined policy (`orrery`),
//! whose parts switch on orrery's own rules: their code is in
//! [`crate::combined`] (sizing and growth, GPU-second prices, link duty,
//! preemption), as methods of this engine where they need its state.
//!
//! None preempts. Per round, for Q waiting and R running jobs on H hosts:
//! O(Q log Q) to sort, then per job O(H) for free GPUs and, when short,
//! O(R log B) for Algorithm 2 over the partners and O(R log R) to rank them.

use crate::baseline::{FreeIndex, consolidated, isolated_seconds, racks};
use crate::castor::{BackToBack, batch_scaling, pair_choice};
use crate::combined::duty::shared_nic_xi;
use crate::combined::prices::{Arrivals, gpu_second_price};
use crate::combined::reserve::{Reservation, shadow};
use crate::memo::{ByJob, FastMap, FastSet};
use crate::placement::capped;
use crate::{ClusterView, Decision, Forget, JobId, Policy, RunningJob};
use orrery_model::colocation::{Colocation, accumulation_factor, memory_mib};
use orrery_model::gpu::{GpuType, gpu_type};
use orrery_model::{HostId, JobSpec, ModelSpec};

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
    pub(crate) rule: Rule,
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
    /// A waiting job that has waited this many times its time alone is
    /// tried first, may preempt, and when it still cannot start holds an
    /// EASY-backfilling reservation (orrery's part `reserve`,
    /// [`crate::combined::reserve`]). None: no such rule.
    pub reserve_after: Option<f64>,
    /// Add to a share's ξ the time each job's network phase loses to its
    /// partner's traffic on the hosts they share (orrery's rule,
    /// [`shared_nic_xi`]); Castor's ξ counts compute interference only.
    pub nic_interference: bool,
    pub(crate) estimate: Colocation,
    pub(crate) alone: ByJob<f64>,
    /// Time alone of the whole job on k workers over its time at its
    /// request, per (job, k): Pollux's goodput in units of the job's work.
    pub(crate) stretch: FastMap<(JobId, u32), f64>,
    /// Fraction of an iteration spent crossing the network on k workers,
    /// packed from host 0, per (job, k).
    pub(crate) network_share: FastMap<(JobId, u32), f64>,
    /// Iteration time alone at the request, packed from host 0, ms: the
    /// reference of [`Self::stretch_on`].
    pub(crate) request_ms: ByJob<f64>,
    /// Per link, the running jobs' traffic on it this round: the sum of
    /// their duty cycles, each weighted by the share of its flows the link
    /// carries ([`link_duty`](crate::combined::duty::link_duty)). Built by
    /// the first size judged in a round ([`Self::duty`]), not in rounds
    /// that judge none, in the last round's allocation; empty unless sizes
    /// are priced ([`Self::price_gpu_time`]).
    pub(crate) link_duty: crate::combined::duty::RoundDuty,
    /// Per running job and size (workers), the hosts it was last judged
    /// on at that size and its shape there ([`Self::stretch_kept`]).
    pub(crate) shaped: crate::combined::duty::KeptShapes,
    /// Per running job, the serial of a placement on which it already has
    /// twice its workers, the most growth gives it ([`Self::regrow`] skips
    /// it without reading its hosts).
    pub(crate) at_most: ByJob<u64>,
    /// The free GPUs indexed for first fit, kept between the sizes judged
    /// and between rounds ([`Self::take_index`]), and the racks it was
    /// built with.
    pub(crate) free_index: Option<FreeIndex>,
    pub(crate) index_racks: Vec<usize>,
    /// Seconds each job has held GPUs so far, summed between rounds.
    pub(crate) run_s: ByJob<f64>,
    /// When the four caches above drop the jobs that have left.
    pub(crate) forget: Forget,
    /// The previous round's time and the jobs holding GPUs after it.
    pub(crate) last_round: Option<(f64, FastSet<JobId>)>,
    /// The arrivals behind the price of a GPU-second.
    pub(crate) arrivals: Arrivals,
    pub(crate) shrunk: u64,
    pub(crate) priced: u64,
    pub(crate) regrown: u64,
    pub(crate) grown: u64,
    pub(crate) preempted: u64,
    pub(crate) shares: u64,
    pub(crate) waits: u64,
    pub(crate) benefit_sum: f64,
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
            reserve_after: None,
            nic_interference: false,
            estimate: Colocation::default(),
            alone: ByJob::default(),
            stretch: FastMap::default(),
            network_share: FastMap::default(),
            request_ms: ByJob::default(),
            link_duty: Default::default(),
            shaped: Default::default(),
            at_most: ByJob::default(),
            free_index: None,
            index_racks: Vec::new(),
            run_s: ByJob::default(),
            forget: Forget::default(),
            last_round: None,
            arrivals: Arrivals::default(),
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

    pub(crate) fn alone_s(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        *self.alone.get_or_insert_with(id, || isolated_seconds(view, spec))
    }

    /// The free GPUs indexed for first fit ([`FreeIndex`]), brought in step
    /// with `free` by their differences: O(H) plus O(log H) per host whose
    /// count changed since the index was last used, where building one is
    /// O(H log H) (sizing every waiting job that way was 7% of a 4,096-host
    /// `orrery` simulation, and growth's index another 8%). Taken out of
    /// the policy so that sizes can be judged while it is held; give it
    /// back with [`Self::keep_index`].
    pub(crate) fn take_index(&mut self, free: &[u32], rack_of: &[usize]) -> FreeIndex {
        match self.free_index.take() {
            Some(mut index) if self.index_racks == rack_of && index.free().len() == free.len() => {
                index.sync(free);
                index
            }
            _ => {
                self.index_racks = rack_of.to_vec();
                FreeIndex::new(free, rack_of)
            }
        }
    }

    /// Keeps `index`, taken by [`Self::take_index`], for the next one.
    pub(crate) fn keep_index(&mut self, index: FreeIndex) {
        self.free_index = Some(index);
    }

    /// The index of the GPUs `spec` may use: the kept one unless the job
    /// caps its GPUs per host (anti-affinity, a mesh's TP groups), which
    /// gets its own.
    pub(crate) fn index_for(&mut self, free: &[u32], rack_of: &[usize], spec: &JobSpec) -> (FreeIndex, bool) {
        if spec.anti_affinity || spec.host_unit() > 1 {
            (FreeIndex::new(&capped(free, spec), rack_of), false)
        } else {
            (self.take_index(free, rack_of), true)
        }
    }

    /// Entries cached per job, in all.
    fn cached(&self) -> usize {
        self.alone.len() + self.stretch.len() + self.network_share.len() + self.request_ms.len() + self.run_s.len()
    }

    /// Drops the cached times of jobs that have left the view ([`Forget`]).
    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        let Some(live) = self.forget.due(view, self.cached()) else { return };
        self.alone.retain(|j, _| live.contains(&j));
        self.stretch.retain(|(j, _), _| live.contains(j));
        self.network_share.retain(|(j, _), _| live.contains(j));
        self.request_ms.retain(|j, _| live.contains(&j));
        self.run_s.retain(|j, _| live.contains(&j));
        self.forget.pruned(self.cached());
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

/// The running jobs that stay this round: not paused and not among the
/// victims preempted in it. O(R·V).
fn staying<'v>(view: &'v ClusterView<'_>, victims: &'v [usize]) -> impl Iterator<Item = &'v RunningJob<'v>> {
    view.running.iter().enumerate().filter(|(i, r)| !r.paused && !victims.contains(i)).map(|(_, r)| r)
}

impl Colocator {
    /// The running jobs that stay this round and could lend GPUs (not
    /// high-priority ones when those are spared), with the GPUs they hold
    /// alone in all. O(R).
    fn candidates(&mut self, view: &ClusterView<'_>, victims: &[usize]) -> (Vec<Candidate>, u64) {
        let spare = self.spare_high_priority;
        let mut cands: Vec<Candidate> = Vec::new();
        for r in staying(view, victims) {
            if spare && r.spec.priority == orrery_model::Priority::High {
                continue;
            }
            let (Some(m), Some(&(h0, _))) = (orrery_model::zoo::model(&r.spec.model), r.hosts.first()) else {
                continue;
            };
            let Some(gpu) = gpu_type(&view.topology.hosts[h0].gpu_type) else { continue };
            let left_s = self.left_s(view, r);
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
        let solo_total = cands.iter().flat_map(|c| &c.solo).map(|s| u64::from(s.1)).sum();
        (cands, solo_total)
    }

    /// A running job's time left at its current slowdown, s.
    fn left_s(&mut self, view: &ClusterView<'_>, r: &RunningJob<'_>) -> f64 {
        self.alone_s(view, r.id, r.spec) * (1.0 - r.progress) * r.xi.max(1.0)
    }

    /// When each running job that stays this round frees its GPUs, soonest
    /// first, for the next-free rule: (seconds, GPUs). O(R log R).
    fn ends(&mut self, view: &ClusterView<'_>, victims: &[usize]) -> Vec<(f64, f64)> {
        let mut ends: Vec<(f64, f64)> = Vec::new();
        for r in staying(view, victims) {
            let left_s = self.left_s(view, r);
            // A GPU two jobs share frees when both have ended: half of
            // it is counted at each one's end.
            let solo: u32 = r.solo_gpus.iter().map(|s| s.1).sum();
            let held: u32 = r.hosts.iter().map(|h| h.1).sum();
            ends.push((left_s, f64::from(solo) + f64::from(held.saturating_sub(solo)) / 2.0));
        }
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        ends
    }

    /// Castor Alg. 1, line 1: pending jobs by expected remaining time
    /// (time alone × work left), high-priority jobs first when they go
    /// first (Metronome's priority classes); (remaining s, arrival s, queue
    /// index). O(Q log Q).
    fn pending_order(&mut self, view: &ClusterView<'_>) -> Vec<(f64, f64, usize)> {
        let mut order: Vec<(f64, f64, usize)> = view
            .queue
            .iter()
            .enumerate()
            .map(|(i, q)| (self.alone_s(view, q.id, q.spec) * (1.0 - q.progress), q.spec.arrival_s, i))
            .collect();
        let (spare, first) = (self.spare_high_priority, self.high_first);
        let class = |i: usize| {
            let high = spare && view.queue[i].spec.priority == orrery_model::Priority::High;
            u8::from(!first || !high)
        };
        order.sort_by(|a, b| class(a.2).cmp(&class(b.2)).then(a.0.total_cmp(&b.0)).then(a.1.total_cmp(&b.1)));
        order
    }
}

impl Policy for Colocator {
    fn queue_order(&mut self, view: &ClusterView<'_>) -> Vec<usize> {
        self.pending_order(view).into_iter().map(|o| o.2).collect()
    }

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
        let counts_waits = self.starvation_guard || self.reserve_after.is_some();
        if counts_waits {
            self.note_running_time(view);
        }
        let rack_of = racks(view);
        self.link_duty.new_round();
        let mut free = view.free_gpus.to_vec();
        // Free GPUs in all, kept with `free`: each queued job reads it
        // (O(1) instead of a sum over every host).
        let mut free_total: u64 = free.iter().map(|&f| u64::from(f)).sum();
        let spare = self.spare_high_priority;
        let high = move |spec: &JobSpec| spare && spec.priority == orrery_model::Priority::High;
        let mut order = self.pending_order(view);
        // Part `reserve`: the job starved most goes first and may preempt;
        // if it still cannot start it holds a reservation from the next
        // job on.
        let starved_qi = self.most_starved(view);
        let starved = starved_qi.map(|qi| {
            if let Some(pos) = order.iter().position(|o| o.2 == qi) {
                let first = order.remove(pos);
                order.insert(0, first);
            }
            (view.queue[qi].id, view.queue[qi].spec.gpus())
        });
        let mut reservation: Option<Reservation> = None;
        let mut out = Vec::new();
        let victims = if self.preempt { self.victims(view, rack_of, &order, &high, starved_qi) } else { Vec::new() };
        for &v in &victims {
            for &(h, g) in view.running[v].hosts {
                free[h] += g;
                free_total += u64::from(g);
            }
            self.preempted += 1;
            out.push(Decision::Preempt { job: view.running[v].id });
        }
        // The running jobs that could lend GPUs, and when each one's GPUs
        // free up: O(R) and O(R log R), built when a queued job first needs
        // them (most rounds place their queue on free GPUs, or have none).
        let mut cands: Option<(Vec<Candidate>, u64)> = None;
        let mut ends: Option<Vec<(f64, f64)>> = None;
        if let Some(p) = self.placement.as_mut() {
            let gone: Vec<JobId> = victims.iter().map(|&v| view.running[v].id).collect();
            p.prepare(view, &gone);
        }
        // The price of GPU time: who its GPU-seconds delay. The GPU-seconds
        // the jobs behind each position wait to run, suffix sums: O(Q).
        let arrival_rate = if self.price_gpu_time {
            self.arrivals.note(view);
            self.arrivals.rate(view.now_s)
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
        // O(H): only when a job waits.
        let total = if order.is_empty() { 0 } else { view.topology.gpu_count() };
        // Decisions before the previous job was considered (blocking mode).
        let mut before_previous: Option<usize> = None;
        for (pos, (t_new, _, qi)) in order.into_iter().enumerate() {
            if pos == 1
                && let Some((id, need)) = starved
            {
                let ends = ends.get_or_insert_with(|| self.ends(view, &victims));
                reservation = Reservation::if_waiting(&out, ends, free_total, id, need);
            }
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
                let k = self.priced_workers(view, rack_of, &free, q, price);
                let gpus = k * q.spec.gpus_per_worker.max(1);
                // Checked before placing: a placement commits the start.
                let end_s = t_new * f64::from(need) / f64::from(gpus.max(1));
                if k < q.spec.workers.max(1)
                    && reservation.as_ref().is_none_or(|r| r.allows(gpus, end_s))
                    && let Some(hosts) = self.place_smaller(view, rack_of, &free, q.spec, k)
                {
                    if let Some(r) = reservation.as_mut() {
                        r.take(gpus, end_s);
                    }
                    for &(h, g) in &hosts {
                        free[h] -= g;
                        free_total -= u64::from(g);
                    }
                    self.priced += 1;
                    out.push(Decision::Place { job: q.id, hosts });
                    continue;
                }
            }
            // Lines 6-7: enough free GPUs.
            if free_total >= u64::from(need)
                && let Some(hosts) = match self.placement.as_mut() {
                    Some(p) => p.place(view, rack_of, &free, q.spec),
                    None => consolidated(view, rack_of, &capped(&free, q.spec), need),
                }
                && reservation.as_mut().is_none_or(|r| r.admits(need, t_new))
            {
                for &(h, g) in &hosts {
                    free[h] -= g;
                    free_total -= u64::from(g);
                }
                if let Some(p) = self.placement.as_mut() {
                    p.commit(view, q.spec, &hosts);
                }
                out.push(Decision::Place { job: q.id, hosts });
                continue;
            }
            if self.shrink {
                let ends = ends.get_or_insert_with(|| self.ends(view, &victims));
                let wait_s = next_free_s(ends, u32::try_from(free_total).unwrap_or(u32::MAX), need);
                if let Some((hosts, end_s)) =
                    self.shrunk_start(view, rack_of, &free, q, (t_new, wait_s), reservation.as_ref())
                {
                    if let Some(r) = reservation.as_mut() {
                        r.take(hosts.iter().map(|h| h.1).sum(), end_s);
                    }
                    for &(h, g) in &hosts {
                        free[h] -= g;
                        free_total -= u64::from(g);
                    }
                    self.shrunk += 1;
                    out.push(Decision::Place { job: q.id, hosts });
                    continue;
                }
            }
            if !self.share || high(q.spec) {
                continue;
            }
            let Some(model) = orrery_model::zoo::model(&q.spec.model) else { continue };
            // GPUs the running candidates hold alone, kept as shares take them.
            let (cands, solo_total) = cands.get_or_insert_with(|| self.candidates(view, &victims));
            if free_total + *solo_total < u64::from(need) {
                continue;
            }
            // Lines 10-14: candidate partners, ranked.
            let back_to_back = if self.next_free {
                let ends = ends.get_or_insert_with(|| self.ends(view, &victims));
                BackToBack::NextFree { wait_s: next_free_s(ends, u32::try_from(free_total).unwrap_or(u32::MAX), need) }
            } else {
                self.back_to_back
            };
            let network_share =
                if self.nic_interference { self.network_share(view, q.id, q.spec, q.spec.workers) } else { 0.0 };
            let offers = self.offers(cands, q.spec, model, t_new, back_to_back, network_share);
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
            // Behind a reservation: partners whose GPUs it counts on are not
            // slowed, and free GPUs are taken as by any other start.
            if let Some(r) = reservation.as_mut()
                && (used.iter().any(|o| cands[o.cand].left_s <= r.shadow_s)
                    || !r.admits(from_free.iter().map(|f| f.1).sum(), coloc_s))
            {
                continue;
            }
            self.benefit_sum += (wait_s + t_new) / coloc_s.max(1e-9);
            self.shares += 1;
            for &(h, g) in &from_free {
                free[h] -= g;
                free_total -= u64::from(g);
            }
            for &(p, h, g) in &shared {
                if let Some(c) = cands.iter_mut().find(|c| c.id == p)
                    && let Some(s) = c.solo.iter_mut().find(|s| s.0 == h)
                {
                    *solo_total -= u64::from(s.1.min(g));
                    s.1 = s.1.saturating_sub(g);
                }
            }
            out.push(Decision::Share { job: q.id, free: from_free, shared, sub_batch: sub });
        }
        // Not in a round that preempts: GPUs are short, and the victims
        // come back to the queue at once.
        if reservation.is_none()
            && let Some((id, need)) = starved
        {
            let ends = ends.get_or_insert_with(|| self.ends(view, &victims));
            reservation = Reservation::if_waiting(&out, ends, free_total, id, need);
        }
        // Nor while a reservation waits for GPUs that growth would take.
        if self.shrink && victims.is_empty() && reservation.is_none() {
            let index = self.take_index(&free, rack_of);
            let mut spare = Free::new(rack_of, &mut free, index);
            self.grow(view, &mut spare, &mut out);
            // A running job grows only where a later arrival can take the
            // GPUs back by preempting it.
            if self.preempt && nobody_waits(view, &out) {
                self.regrow(view, &mut spare, &mut out);
            }
            let index = spare.write_back();
            self.keep_index(index);
        }
        if counts_waits {
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
pub(crate) fn next_free_s(ends: &[(f64, f64)], free: u32, need: u32) -> f64 {
    shadow(ends, free, need).map_or(f64::INFINITY, |s| s.0)
}

/// The free GPUs that growth takes from. Growing may place every running
/// job of a round (all of them when nobody waits and half the cluster is
/// idle), so they are indexed ([`FreeIndex`]) and each placement costs
/// O(m log H) for its m hosts instead of O(H log H).
pub(crate) struct Free<'a> {
    pub(crate) rack_of: &'a [usize],
    pub(crate) free: &'a mut [u32],
    /// The same GPUs, indexed.
    pub(crate) index: FreeIndex,
}

impl<'a> Free<'a> {
    /// `index` must hold `free`. O(1).
    pub(crate) fn new(rack_of: &'a [usize], free: &'a mut [u32], index: FreeIndex) -> Free<'a> {
        debug_assert_eq!(index.free(), &free[..]);
        Free { rack_of, free, index }
    }

    /// Free GPUs in all. O(1).
    pub(crate) fn total(&self) -> u32 {
        self.index.total() as u32
    }

    /// Where `spec` would go on each of the `sizes` (workers), consolidated
    /// on the free GPUs plus the ones it `holds`, without taking them: the
    /// hosts of each size that fits, in the order given. The held GPUs
    /// are given back once for all the sizes. O(m log H) per size for m
    /// hosts held or taken.
    pub(crate) fn trials(
        &mut self,
        view: &ClusterView<'_>,
        holds: &[(HostId, u32)],
        spec: &JobSpec,
        sizes: impl Iterator<Item = u32>,
    ) -> Vec<Vec<(HostId, u32)>> {
        let index = &mut self.index;
        index.give_back(holds);
        let fits = sizes
            .filter_map(|k| {
                let gpus = k * spec.gpus_per_worker.max(1);
                if spec.anti_affinity {
                    consolidated(view, self.rack_of, &capped(index.free(), spec), gpus)
                } else {
                    index.consolidated(gpus)
                }
            })
            .collect();
        index.take(holds);
        fits
    }

    /// Moves a job from the GPUs it `holds` to `hosts` (one of
    /// [`Self::trials`]' answers, with no change to the free GPUs since).
    /// O(m log H).
    pub(crate) fn move_to(&mut self, holds: &[(HostId, u32)], hosts: &[(HostId, u32)]) {
        self.index.give_back(holds);
        self.index.take(hosts);
    }

    /// Copies the index's counts back to the round's free GPUs; returns
    /// the index, which holds them.
    pub(crate) fn write_back(self) -> FreeIndex {
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
pub(crate) fn idle_for_the_queue(view: &ClusterView<'_>, out: &[Decision], free: u32, revocable: bool) -> bool {
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
pub(crate) mod tests;
