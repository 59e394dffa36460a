//! Queue orderings: which job gets GPUs first, and whether a running job may
//! lose its GPUs to a waiting one. Combined with a [`crate::placement`] by
//! [`crate::compose::Composed`].
//!
//! Keys are compared lexicographically, smaller first. An ordering that
//! preempts gives running jobs a key too; a running job keeps its GPUs unless
//! waiting jobs with smaller keys need them.

use crate::baseline::isolated_seconds;
use crate::memo::ByJob;
use crate::{ClusterView, Forget, JobId, QueuedJob, RunningJob};
use std::collections::HashMap;

/// Priority key: (primary, tie-break), smaller first.
pub type Key = (f64, f64);

/// A queue ordering.
pub trait Order {
    /// Short name (`fifo`, `tiresias`, ...).
    fn name(&self) -> &'static str;

    /// Key of a waiting job.
    fn queued_key(&mut self, view: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key;

    /// Key of a running job that may be preempted now; None keeps its GPUs.
    fn running_key(&mut self, _view: &ClusterView<'_>, _job: &RunningJob<'_>) -> Option<Key> {
        None
    }

    /// Whether a waiting job that does not fit stops those behind it
    /// (head-of-line blocking) instead of letting them backfill.
    fn blocking(&self) -> bool {
        true
    }

    /// Period of scheduling rounds without arrivals or completions, s.
    fn tick_s(&self) -> Option<f64> {
        None
    }

    /// Drops what it keeps per job for the jobs no longer in `view` (at
    /// the start of a round; [`crate::Forget`]'s amortised O(1)).
    fn forget_departed(&mut self, _view: &ClusterView<'_>) {}
}

/// Run time alone on a consolidated placement, cached per job (computing it
/// derives an iteration shape), for the jobs in the view: a trace's
/// departed jobs are forgotten, so the cache stays the size of the queue
/// and the running jobs.
#[derive(Debug, Default)]
struct Alone {
    seconds: ByJob<f64>,
    forget: Forget,
}

impl Alone {
    fn seconds(&mut self, view: &ClusterView<'_>, id: JobId, spec: &orrery_model::JobSpec) -> f64 {
        *self.seconds.get_or_insert_with(id, || isolated_seconds(view, spec))
    }

    /// Forgets the jobs that left `view` (a time alone depends on the job
    /// and the topology only: one that comes back gets the same).
    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        let Some(live) = self.forget.due(view, self.seconds.len()) else { return };
        self.seconds.retain(|j, _| live.contains(&j));
        self.forget.pruned(self.seconds.len());
    }
}

/// First come, first served.
#[derive(Debug, Default)]
pub struct Fifo;

impl Order for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }

    fn queued_key(&mut self, _: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key {
        (job.spec.arrival_s, 0.0)
    }
}

/// Shortest job first (run time alone) or smallest service first (GPUs × run
/// time alone); non-preemptive, head-of-line blocking.
#[derive(Debug, Default)]
pub struct ShortestFirst {
    /// SSF when true, SJF otherwise.
    pub by_service: bool,
    alone: Alone,
}

impl ShortestFirst {
    /// SJF (`false`) or SSF (`true`).
    pub fn new(by_service: bool) -> Self {
        ShortestFirst { by_service, alone: Alone::default() }
    }
}

impl Order for ShortestFirst {
    fn name(&self) -> &'static str {
        if self.by_service { "ssf" } else { "sjf" }
    }

    fn queued_key(&mut self, view: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key {
        let t = self.alone.seconds(view, job.id, job.spec);
        let k = if self.by_service { t * f64::from(job.spec.gpus()) } else { t };
        (k, job.spec.arrival_s)
    }

    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        self.alone.forget_departed(view);
    }
}

/// Shortest remaining time first: remaining run time alone; a shorter
/// arrival preempts the running job with the most time left. Backfills.
#[derive(Debug, Default)]
pub struct Srtf {
    alone: Alone,
}

impl Order for Srtf {
    fn name(&self) -> &'static str {
        "srtf"
    }

    fn queued_key(&mut self, view: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key {
        (self.alone.seconds(view, job.id, job.spec) * (1.0 - job.progress), job.spec.arrival_s)
    }

    fn running_key(&mut self, view: &ClusterView<'_>, job: &RunningJob<'_>) -> Option<Key> {
        // A running job wins ties (−1 as tie-break) so equal jobs do not swap.
        Some((self.alone.seconds(view, job.id, job.spec) * (1.0 - job.progress), -1.0))
    }

    fn blocking(&self) -> bool {
        false
    }

    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        self.alone.forget_departed(view);
    }
}

/// Tiresias' discretised two-dimensional least-attained-service (2D-LAS,
/// Tiresias §4.2): a job's attained service is GPUs × time run; it is demoted
/// from queue k to k+1 when that crosses `thresholds[k]`; queues are served
/// in order, FIFO within a queue, and a waiting job in a higher queue preempts
/// running jobs in lower ones. A job that has waited more than `starve_factor`
/// times its run time is promoted to the first queue, its attained service
/// counted afresh from there (Tiresias' STARVE_LIMIT; without the reset two
/// starving jobs preempt each other back and forth forever).
///
/// Simplifications: attained service comes from the driver (exact, not
/// sampled); no placement-aware profiling (Tiresias' consolidation decision
/// is left to the placement).
#[derive(Debug)]
pub struct Tiresias {
    /// Demotion thresholds, GPU-seconds (Tiresias' default K = 2 queues).
    pub thresholds: Vec<f64>,
    /// Promotion after waiting this many times the run time (STARVE_LIMIT).
    pub starve_factor: f64,
    /// Seconds between demotion checks.
    pub tick: f64,
    /// Attained service of each promoted job when it was promoted.
    promoted_at: HashMap<JobId, f64>,
}

impl Default for Tiresias {
    fn default() -> Self {
        Tiresias { thresholds: vec![3600.0], starve_factor: 2.0, tick: 30.0, promoted_at: HashMap::new() }
    }
}

impl Tiresias {
    /// Queue of a job that has had `service_gpu_s`: the number of thresholds crossed.
    pub fn level(&self, service_gpu_s: f64) -> usize {
        self.thresholds.iter().take_while(|&&t| service_gpu_s >= t).count()
    }
}

impl Order for Tiresias {
    fn name(&self) -> &'static str {
        "tiresias"
    }

    fn queued_key(&mut self, view: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key {
        let run_s = job.service_gpu_s / f64::from(job.spec.gpus().max(1));
        let waited_s = (view.now_s - job.spec.arrival_s - run_s).max(0.0);
        let base = self.promoted_at.get(&job.id).copied().unwrap_or(0.0);
        let mut level = self.level(job.service_gpu_s - base);
        if level > 0 && run_s > 0.0 && waited_s >= self.starve_factor * run_s {
            self.promoted_at.insert(job.id, job.service_gpu_s);
            level = 0;
        }
        (level as f64, job.spec.arrival_s)
    }

    fn running_key(&mut self, _: &ClusterView<'_>, job: &RunningJob<'_>) -> Option<Key> {
        // Half a level ahead of waiting jobs of its own queue: Tiresias only
        // preempts across queues.
        let base = self.promoted_at.get(&job.id).copied().unwrap_or(0.0);
        Some((self.level(job.service_gpu_s - base) as f64 - 0.5, job.spec.arrival_s))
    }

    fn blocking(&self) -> bool {
        false
    }

    fn tick_s(&self) -> Option<f64> {
        Some(self.tick)
    }
}

/// Themis' finish-time fairness (Themis §3): ρ = T_shared / T_alone, where
/// T_alone is the run time alone and T_shared the time since arrival plus the
/// run time left. GPUs are leased for `lease_s`; when a lease ends, the job's
/// GPUs go back to auction and the jobs with the worst ρ win them.
///
/// Simplifications: the auction is a greedy by ρ (worst first) instead of
/// Themis' partial-allocation mechanism over bids from per-app agents, with
/// every job bidding (fairness knob f = 0); T_shared ignores network
/// slow-down, which Themis' agents do not model either.
#[derive(Debug)]
pub struct Themis {
    /// Lease length, s (Themis: 10 min).
    pub lease_s: f64,
    alone: Alone,
    /// Per running job, by id: (job, when it was placed, when its current
    /// lease began). A job not in the view has none kept: one placed again
    /// starts a new lease, as a kept one would.
    leases: Vec<(JobId, f64, f64)>,
    /// Where the next lookup looks first: a round asks for the running jobs
    /// in the view's order, by id in the simulator, so each is usually the
    /// entry after the last (a walk of the list, where a hash lookup per
    /// job was a cache miss, 7% of a 16,384-host simulation).
    cursor: usize,
    forget_leases: Forget,
}

impl Default for Themis {
    fn default() -> Self {
        Themis {
            lease_s: 600.0,
            alone: Alone::default(),
            leases: Vec::new(),
            cursor: 0,
            forget_leases: Forget::default(),
        }
    }
}

impl Themis {
    /// The index of `id`'s lease, made (placed at `placed_at`) if it has
    /// none. A round's lookups in id order walk the list once from its
    /// start (amortised O(1) each, departed jobs' entries stepped over);
    /// one out of order is a binary search. O(n) to insert a new one.
    fn lease_of(&mut self, id: JobId, placed_at: f64) -> usize {
        let in_order = self.cursor == 0 || self.leases.get(self.cursor - 1).is_some_and(|l| l.0 < id);
        let k = if in_order {
            let mut k = self.cursor;
            while self.leases.get(k).is_some_and(|l| l.0 < id) {
                k += 1;
            }
            k
        } else {
            self.leases.partition_point(|l| l.0 < id)
        };
        if self.leases.get(k).is_none_or(|l| l.0 != id) {
            self.leases.insert(k, (id, placed_at, placed_at));
        }
        self.cursor = k + 1;
        k
    }

    fn rho(&mut self, view: &ClusterView<'_>, id: JobId, spec: &orrery_model::JobSpec, progress: f64) -> f64 {
        let alone = self.alone.seconds(view, id, spec).max(1e-9);
        let shared = (view.now_s - spec.arrival_s).max(0.0) + alone * (1.0 - progress);
        shared / alone
    }
}

impl Order for Themis {
    fn name(&self) -> &'static str {
        "themis"
    }

    fn queued_key(&mut self, view: &ClusterView<'_>, job: &QueuedJob<'_>) -> Key {
        (-self.rho(view, job.id, job.spec, job.progress), job.spec.arrival_s)
    }

    fn running_key(&mut self, view: &ClusterView<'_>, job: &RunningJob<'_>) -> Option<Key> {
        let placed_at = view.now_s - job.running_s;
        let k = self.lease_of(job.id, placed_at);
        let lease = &mut self.leases[k];
        if (lease.1 - placed_at).abs() > 1e-6 {
            *lease = (job.id, placed_at, placed_at); // placed again since: a new lease
        }
        if view.now_s - lease.2 < self.lease_s {
            return None;
        }
        // The lease ends: the GPUs are auctioned now. A job that keeps them
        // holds a new lease; one that loses is preempted and re-placed later.
        lease.2 = view.now_s;
        Some((-self.rho(view, job.id, job.spec, job.progress), -1.0))
    }

    fn blocking(&self) -> bool {
        false
    }

    fn tick_s(&self) -> Option<f64> {
        // Leases end at different times; look every minute.
        Some(60.0)
    }

    fn forget_departed(&mut self, view: &ClusterView<'_>) {
        self.alone.forget_departed(view);
        self.cursor = 0;
        let Some(live) = self.forget_leases.due(view, self.leases.len()) else { return };
        self.leases.retain(|l| live.contains(&l.0));
        self.forget_leases.pruned(self.leases.len());
    }
}

/// Jobs walked in key order, best first, as (running?, index, GPUs): the
/// waiting jobs that deserve GPUs (in order) and the running jobs that lose
/// theirs (worst first). A job deserves GPUs while `budget`, the GPUs not
/// held by jobs that cannot be preempted, lasts. O(n).
pub(crate) fn deserving_and_losers(
    walk: impl IntoIterator<Item = (bool, usize, u32)>,
    mut budget: i64,
) -> (Vec<usize>, Vec<usize>) {
    let (mut deserving, mut losers) = (Vec::new(), Vec::new());
    for (running, i, gpus) in walk {
        let gpus = i64::from(gpus);
        if gpus <= budget {
            budget -= gpus;
            if !running {
                deserving.push(i);
            }
        } else if running {
            losers.push(i);
        }
    }
    losers.reverse();
    (deserving, losers)
}

/// The fewest of `losers` (indices into `view.running`, in the order they
/// go) whose GPUs let the deserving jobs in: `fits(free, victims)` says
/// whether they fit in `free` once `victims` leave. None when even all of
/// them do not suffice (the victims would be placed again at once and
/// preempted again in the next round). One `fits` per victim.
pub(crate) fn fewest_victims(
    view: &ClusterView<'_>,
    losers: &[usize],
    mut fits: impl FnMut(&[u32], &[usize]) -> bool,
) -> Vec<usize> {
    let mut free = view.free_gpus.to_vec();
    let mut out = Vec::new();
    for &v in losers {
        if fits(&free, &out) {
            return out;
        }
        for &(h, g) in view.running[v].hosts {
            free[h] += g;
        }
        out.push(v);
    }
    if fits(&free, &out) { out } else { Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::setups::LeafSpine;
    use orrery_model::{JobSpec, Work};

    /// Themis' leases kept in a list walked in id order give every job the
    /// key a lookup by id gives, whatever order a round asks in: two
    /// policies, one asked in id order and one in reverse, over rounds in
    /// which leases end, jobs leave and one is placed again.
    #[test]
    fn themis_leases_do_not_depend_on_the_order_jobs_are_asked_in() {
        let topo = LeafSpine::with_oversubscription(2, 4, 1, 4, "v100", 100.0, 1.0).build("t").expect("valid");
        let specs: Vec<JobSpec> =
            (0..40).map(|i| JobSpec::new("j", "vgg16", 32, 1, Work::Iterations(1_000_000), i as f64)).collect();
        let hosts = [(0usize, 1u32)];
        let (mut ascending, mut descending) = (Themis::default(), Themis::default());
        let mut auctioned = 0;
        // Each round some jobs are away (preempted or not yet arrived), and
        // job 5 is placed again at 900 s.
        for (round, now_s) in [0.0, 300.0, 650.0, 900.0, 1300.0, 1900.0, 2600.0].into_iter().enumerate() {
            let running: Vec<RunningJob<'_>> = (0..specs.len())
                .filter(|&id| id % 7 != round % 7 && id < 20 + 3 * round)
                .map(|id| {
                    let placed_s = if id == 5 && round >= 3 { 900.0 } else { specs[id].arrival_s };
                    RunningJob { running_s: now_s - placed_s.min(now_s), ..RunningJob::new(id, &specs[id], &hosts) }
                })
                .collect();
            let view = ClusterView { now_s, topology: &topo, free_gpus: &[], queue: Vec::new(), running };
            ascending.forget_departed(&view);
            descending.forget_departed(&view);
            let up: Vec<Option<Key>> = view.running.iter().map(|r| ascending.running_key(&view, r)).collect();
            let mut down: Vec<Option<Key>> =
                view.running.iter().rev().map(|r| descending.running_key(&view, r)).collect();
            down.reverse();
            assert_eq!(up, down, "round {round} at {now_s} s");
            auctioned += up.iter().filter(|k| k.is_some()).count();
        }
        assert!(auctioned > 20, "leases ended {auctioned} times");
    }
}
