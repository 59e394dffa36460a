//! Shortest remaining time first with preemption (the combined policy's
//! part `preempt`) and its starvation guard: a waiting job takes the GPUs
//! of running low-priority jobs with more time left when that lets it
//! start, and a job that has waited as long as it takes alone is never a
//! victim again; the job starved most (part `reserve`,
//! [`crate::combined::reserve`]) is found here and walked first. Methods
//! of the engine ([`Colocator`]).

use crate::baseline::consolidated;
use crate::castor::colocate::Colocator;
use crate::memo::FastSet;
use crate::order::{deserving_and_losers, fewest_victims};
use crate::placement::capped;
use crate::{ClusterView, Decision, JobId, RunningJob};
use orrery_model::JobSpec;

impl Colocator {
    /// Credits the time since the previous round to each job that held
    /// GPUs through it. O(R).
    pub(crate) fn note_running_time(&mut self, view: &ClusterView<'_>) {
        if let Some((then, holders)) = self.last_round.take() {
            for r in view.running.iter().filter(|r| holders.contains(&r.id)) {
                *self.run_s.get_or_insert_with(r.id, || 0.0) += (view.now_s - then).max(0.0);
            }
        }
    }

    /// Records who holds GPUs after this round's decisions: the running
    /// jobs not preempted and the jobs started. O(R + D).
    pub(crate) fn note_holders(&mut self, view: &ClusterView<'_>, out: &[Decision]) {
        // Sized once: grown insert by insert, its rehashes were 1.5% of a
        // 16,384-host run under `orrery`.
        let mut holders: FastSet<JobId> =
            FastSet::with_capacity_and_hasher(view.running.len() + out.len(), Default::default());
        holders.extend(view.running.iter().map(|r| r.id));
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
    pub(crate) fn waited_s(&self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        view.now_s - spec.arrival_s - self.run_s.get(id).copied().unwrap_or(0.0)
    }

    /// The running jobs (indices into `view.running`) that lose their GPUs
    /// this round under shortest-remaining-time-first, most time left
    /// first. Running and waiting jobs are walked by (class, remaining time
    /// alone), a running job first among equals, the waiting job
    /// `promoted` by part `reserve` before all; a job deserves GPUs while
    /// the GPUs not held by unmovable jobs last. Unmovable: high-priority
    /// jobs (Metronome's promise), paused ones, jobs that share a GPU
    /// (their partner's GPUs are not theirs to give) and, with
    /// [`Self::starvation_guard`], jobs that have already waited longer
    /// than their time alone. Running jobs that do
    /// not deserve theirs are preempted, most time left first, only until
    /// the deserving waiting jobs all fit by consolidated first fit, and
    /// only if they then do (else the victims would be placed again at once).
    /// A preempted job keeps its progress and pays the driver's restore
    /// time when placed again. None, without the walk, when nobody waits (a
    /// round at a departure often has an empty queue) or all jobs fit
    /// ([`everyone_fits`]): O(R + Q + H); else [`Self::victims_by_walk`].
    pub(crate) fn victims(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        order: &[(f64, f64, usize)],
        high: &dyn Fn(&JobSpec) -> bool,
        promoted: Option<usize>,
    ) -> Vec<usize> {
        if order.is_empty() || everyone_fits(view, order) {
            return Vec::new();
        }
        self.victims_by_walk(view, rack_of, order, high, promoted)
    }

    /// [`Self::victims`] without its shortcut: the walk itself.
    /// O((Q + R) log(Q + R)) plus one trial placement of the deserving
    /// jobs per victim.
    pub(crate) fn victims_by_walk(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        order: &[(f64, f64, usize)],
        high: &dyn Fn(&JobSpec) -> bool,
        promoted: Option<usize>,
    ) -> Vec<usize> {
        let total = i64::from(view.topology.gpu_count());
        let mut budget: i64 = total;
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
                contenders.push((2, left_s, true, i));
            }
        }
        if contenders.is_empty() {
            return Vec::new();
        }
        let first = self.high_first;
        // The starved job promoted by part `reserve` first (Tiresias'
        // starvation promotion), then high priority when it goes first.
        let class = |qi: usize| match () {
            _ if promoted == Some(qi) => 0,
            _ if first && high(view.queue[qi].spec) => 1,
            _ => 2,
        };
        contenders.extend(order.iter().map(|&(t, _, qi)| (class(qi), t, false, qi)));
        contenders.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)).then(b.2.cmp(&a.2)));
        let walk = contenders.iter().map(|&(_, _, running, i)| {
            (
                running,
                i,
                if running { view.running[i].hosts.iter().map(|h| h.1).sum() } else { view.queue[i].spec.gpus() },
            )
        });
        let (deserving, losers) = deserving_and_losers(walk, budget);
        if deserving.is_empty() {
            return Vec::new();
        }
        fewest_victims(view, &losers, |free, _| {
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

    /// The waiting job (index into `view.queue`) starved most: waited at
    /// least [`Self::reserve_after`] times its time alone, the largest
    /// ratio first, then the earliest arrival. O(Q).
    pub(crate) fn most_starved(&mut self, view: &ClusterView<'_>) -> Option<usize> {
        let after = self.reserve_after?;
        let total = view.topology.gpu_count();
        let mut best: Option<(f64, f64, usize)> = None;
        for (i, q) in view.queue.iter().enumerate() {
            if q.spec.gpus() == 0 || q.spec.gpus() > total {
                continue;
            }
            let alone = self.alone_s(view, q.id, q.spec).max(1e-9);
            let ratio = self.waited_s(view, q.id, q.spec) / alone;
            let better = match best {
                None => true,
                Some((r, arrival, _)) => ratio > r || (ratio == r && q.spec.arrival_s < arrival),
            };
            if ratio >= after && better {
                best = Some((ratio, q.spec.arrival_s, i));
            }
        }
        best.map(|b| b.2)
    }
}

/// Whether the GPUs held by all running jobs and asked by the waiting ones
/// in `order` fit in the cluster. Then every job deserves GPUs in
/// [`Colocator::victims_by_walk`], whichever jobs are unmovable (the walk
/// never runs out of budget), and there are no victims, without the sort
/// and the trial placements: the common round on a cluster with GPUs to
/// spare (every arrival of a 16,384-host run, where the walk was a fifth of
/// `orrery`'s time). Where no job shares a GPU (each one's solo GPUs are its
/// hosts, the same slice), the GPUs held are those not free, since a driver
/// counts no held GPU free: O(R + H) over the view's own arrays, where
/// summing every job's hosts is a cache miss a job (done only when some job
/// shares). O(R + Q + H).
pub(crate) fn everyone_fits(view: &ClusterView<'_>, order: &[(f64, f64, usize)]) -> bool {
    let total = i64::from(view.topology.gpu_count());
    let held: i64 = if view.running.iter().any(RunningJob::may_share) {
        view.running.iter().map(|r| i64::from(r.hosts.iter().map(|h| h.1).sum::<u32>())).sum()
    } else {
        total - view.free_gpus.iter().map(|&f| i64::from(f)).sum::<i64>()
    };
    let asked: i64 = order.iter().map(|&(_, _, qi)| i64::from(view.queue[qi].spec.gpus())).sum();
    held + asked <= total
}
