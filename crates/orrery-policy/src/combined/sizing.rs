//! Goodput-aware sizing (the combined policy's parts `size` and growth,
//! after Pollux §4): a job the free GPUs cannot hold starts on fewer when
//! that finishes sooner than waiting, at the size that prices its
//! GPU-seconds ([`super::prices`]), and grows back into idle GPUs when
//! nobody waits. Methods of the engine ([`Colocator`]) it shares with
//! Castor's scheduler.

use super::duty::{Shaped, packed_placement, period_on};
use super::reserve::Reservation;
use crate::baseline::consolidated;
use crate::castor::colocate::{Colocator, Free, idle_for_the_queue};
use crate::placement::capped;
use crate::{ClusterView, Decision, JobId};
use orrery_model::{HostId, JobSpec};
use std::collections::{HashMap, HashSet};

/// A job started this round grows only when that makes it at least this
/// much faster (Pollux's threshold for restarting a job on a new size).
pub const GROW_GAIN: f64 = 1.1;

impl Colocator {
    /// How much longer the job takes alone on `k` workers than at its
    /// request, both packed from host 0: `I(k·b)/I(n·b) · T(k)/T(n)`
    /// (Pollux Eq. 1-2: statistical efficiency times throughput). Infinite
    /// when it cannot be shaped. Cached; O(shape) once per (job, k).
    pub(crate) fn stretch(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
        *self.stretch.entry((id, k)).or_insert_with(|| {
            let (t, n) = (view.topology, spec.workers.max(1));
            let period = |w: u32| packed_placement(t, spec, w).map_or(f64::INFINITY, |p| p.shape.period_ms());
            let ratio = iterations_ratio(spec, n, k);
            ratio * period(k) / period(n)
        })
    }

    /// The fraction of the job's iteration alone on `k` workers, packed
    /// from host 0, that crosses the network (0 on one host): its circle's
    /// duty cycle. Cached; O(shape) once per (job, k).
    pub(crate) fn network_share(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
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
    pub(crate) fn hardware_stretch(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec, k: u32) -> f64 {
        let n = spec.workers.max(1);
        let ratio = iterations_ratio(spec, n, k);
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
    pub(crate) fn stretch_on(
        &mut self,
        view: &ClusterView<'_>,
        id: JobId,
        spec: &JobSpec,
        hosts: &[(HostId, u32)],
    ) -> f64 {
        let (ratio, request_ms) = self.ratio_and_request(view, id, spec, hosts);
        period_on(view, self.duty(view), spec, hosts).map_or(f64::INFINITY, |ms| ratio * ms / request_ms)
    }

    /// What a stretch on `hosts` is scaled by: the ratio of iterations for
    /// the same work on that many workers ([`iterations_ratio`]) and the
    /// time alone at the request ([`Self::request_ms`]). O(1) when cached.
    fn ratio_and_request(
        &mut self,
        view: &ClusterView<'_>,
        id: JobId,
        spec: &JobSpec,
        hosts: &[(HostId, u32)],
    ) -> (f64, f64) {
        let (n, per) = (spec.workers.max(1), spec.gpus_per_worker.max(1));
        let k = hosts.iter().map(|h| h.1).sum::<u32>() / per;
        (iterations_ratio(spec, n, k), self.request_ms(view, id, spec))
    }

    /// [`Self::stretch_on`] of running job `r` on `hosts` (where it runs, or
    /// where it would grow to), its shape there kept per size
    /// ([`Shaped`]): a round in which nobody waits offers every running
    /// job growth, and judges each where it runs and where first fit would
    /// grow it, mostly the same hosts as in the round before. O(links
    /// crossed) when kept, O(shape) when not.
    pub(crate) fn stretch_kept(
        &mut self,
        view: &ClusterView<'_>,
        r: &crate::RunningJob<'_>,
        hosts: &[(HostId, u32)],
    ) -> f64 {
        let (ratio, request_ms) = self.ratio_and_request(view, r.id, r.spec, hosts);
        let k = hosts.iter().map(|h| h.1).sum::<u32>() / r.spec.gpus_per_worker.max(1);
        let duty = self.link_duty.get(view, self.price_gpu_time);
        // An entry starts on no hosts, where nothing can be shaped.
        let kept = self.shaped.entry((r.id, k)).or_insert_with(|| (Vec::new(), None));
        if kept.0.as_slice() != hosts {
            *kept = (hosts.to_vec(), Shaped::of(view, r.spec, hosts));
        }
        kept.1.as_ref().map_or(f64::INFINITY, |s| ratio * s.period_on(duty) / request_ms)
    }

    /// This round's traffic per link ([`link_duty`]), built on first use:
    /// O(Σ flows × path length) over the running jobs, once a round.
    pub(crate) fn duty(&mut self, view: &ClusterView<'_>) -> &super::duty::LinkDuty {
        self.link_duty.get(view, self.price_gpu_time)
    }

    /// The job's iteration time alone at its request, packed from host 0,
    /// ms. Cached; O(shape) once per job.
    pub(crate) fn request_ms(&mut self, view: &ClusterView<'_>, id: JobId, spec: &JobSpec) -> f64 {
        *self.request_ms.get_or_insert_with(id, || {
            packed_placement(view.topology, spec, spec.workers.max(1)).map_or(f64::INFINITY, |p| p.shape.period_ms())
        })
    }

    /// Where `q` starts on fewer GPUs than it asks for: at the size that
    /// finishes soonest on the free GPUs, each size judged where the host
    /// scheduler's first fit would put it now ([`Self::stretch_on`]), if
    /// that beats waiting `wait_s` and then taking `t_new` at the request,
    /// and, behind a `reservation`, if it does not delay the starved job;
    /// with the time it then takes. O(H) to bring the kept index in step ([`Self::take_index`]), then
    /// O(m log H + shape) per size over m hosts.
    pub(crate) fn shrunk_start(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        free: &[u32],
        q: &crate::QueuedJob<'_>,
        (t_new, wait_s): (f64, f64),
        reservation: Option<&Reservation>,
    ) -> Option<(Vec<(HostId, u32)>, f64)> {
        let (id, spec) = (q.id, q.spec);
        if rigid(spec) {
            return None;
        }
        let per = spec.gpus_per_worker.max(1);
        let free_total: u64 = free.iter().map(|&f| u64::from(f)).sum();
        let most = (free_total / u64::from(per)).min(u64::from(spec.workers.max(1) - 1)) as u32;
        // Each size where the host scheduler would put it now.
        let (index, kept) = self.index_for(free, rack_of, spec);
        let best = (1..=most)
            .filter(|&k| size_allowed(spec, k))
            .filter_map(|k| index.consolidated(k * per).map(|h| (k, self.stretch_on(view, id, spec, &h))))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        if kept {
            self.keep_index(index);
        }
        let (k, stretch) = best?;
        // An unknown wait (the running jobs never free enough) is no
        // evidence for a size the job keeps for its whole run.
        let pays = wait_s.is_finite() && stretch.is_finite() && t_new * stretch < wait_s + t_new;
        // Behind a starved job's reservation, only a start that does not
        // delay it (checked before placing: a placement commits the start).
        let end_s = t_new * stretch;
        if !pays || reservation.is_some_and(|r| !r.allows(k * per, end_s)) {
            return None;
        }
        self.place_smaller(view, rack_of, free, spec, k).map(|hosts| (hosts, end_s))
    }

    /// `spec` on `k` of its workers, where the host scheduler puts it.
    pub(crate) fn place_smaller(
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
    pub(crate) fn priced_workers(
        &mut self,
        view: &ClusterView<'_>,
        rack_of: &[usize],
        free: &[u32],
        q: &crate::QueuedJob<'_>,
        price: f64,
    ) -> u32 {
        let (n, per) = (q.spec.workers.max(1), q.spec.gpus_per_worker.max(1));
        if rigid(q.spec) {
            return n;
        }
        let (index, kept) = self.index_for(free, rack_of, q.spec);
        let packed_ms = self.request_ms(view, q.id, q.spec);
        let duty = self.duty(view);
        let period = |k: u32| index.consolidated(k * per).and_then(|h| period_on(view, duty, q.spec, &h));
        let at_request = period(n);
        let reference = at_request.unwrap_or(packed_ms);
        let cost = |k: u32, stretch: f64| stretch * (1.0 + price * f64::from(k * per));
        let mut best = (n, cost(n, 1.0));
        for k in (1..n).filter(|&k| size_allowed(q.spec, k)) {
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
    pub(crate) fn regrow(&mut self, view: &ClusterView<'_>, free: &mut Free<'_>, out: &mut Vec<Decision>) {
        let mut grown = Vec::new();
        // (gain per worker, index, workers now); the best use of a GPU first.
        let mut offers: Vec<(f64, usize, u32)> = Vec::new();
        if self.shaped.len() > 4 * view.running.len() + 64 {
            let running: HashSet<JobId> = view.running.iter().map(|r| r.id).collect();
            self.shaped.retain(|(id, _), _| running.contains(id));
        }
        let spare = free.total();
        // A job already at twice its workers on this placement is known by
        // its serial, without reading its spec and hosts (a cache miss
        // each, for every running job at every round).
        let mut reached = Vec::new();
        for (i, r) in view.running.iter().enumerate() {
            let at_most = r.placement != 0 && self.at_most.get(r.id) == Some(&r.placement);
            if at_most || r.paused || r.xi > 1.0 || rigid(r.spec) {
                continue;
            }
            let per = r.spec.gpus_per_worker.max(1);
            let held: u32 = r.hosts.iter().map(|h| h.1).sum();
            let (now, n) = (held / per, r.spec.workers.max(1));
            if now >= 2 * n {
                reached.push((r.id, r.placement));
                continue;
            }
            if (r.may_share() && r.solo_gpus.iter().map(|s| s.1).sum::<u32>() != held) || now == 0 {
                continue;
            }
            let gain = self.gain_per_worker(view, r.id, r.spec, now, (2 * n).min(now + spare / per));
            if gain > 0.0 {
                offers.push((gain, i, now));
            }
        }
        for (id, placement) in reached {
            self.at_most.insert(id, placement);
        }
        offers.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, i, now) in offers {
            let r = &view.running[i];
            if rigid(r.spec) {
                continue;
            }
            let (spec, per) = (r.spec, r.spec.gpus_per_worker.max(1));
            let most = (2 * spec.workers.max(1)).min(now + free.total() / per);
            let stretch_now = self.stretch_kept(view, r, r.hosts);
            let Some((stretch, hosts)) = free
                .trials(view, r.hosts, spec, (now + 1..=most).filter(|&k| size_allowed(spec, k)))
                .into_iter()
                .map(|h| (self.stretch_kept(view, r, &h), h))
                .min_by(|a, b| a.0.total_cmp(&b.0))
            else {
                continue;
            };
            if stretch * GROW_GAIN > stretch_now {
                continue;
            }
            free.move_to(r.hosts, &hosts);
            grown.push(Decision::Preempt { job: r.id });
            grown.push(Decision::Place { job: r.id, hosts });
            self.regrown += 1;
        }
        out.extend(grown);
    }

    /// The most a worker added to a job on `now` workers lowers its time,
    /// relative to its time now, over sizes up to `most`: Pollux's greedy
    /// marginal (each GPU to the job whose 1/speedup it lowers most, §4),
    /// taken over any step so that a jump across a host boundary counts.
    /// O(most − now) sizes, each shaped once.
    pub(crate) fn gain_per_worker(
        &mut self,
        view: &ClusterView<'_>,
        id: JobId,
        spec: &JobSpec,
        now: u32,
        most: u32,
    ) -> f64 {
        let at_now = self.stretch(view, id, spec, now);
        (now + 1..=most)
            .filter(|&k| size_allowed(spec, k))
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
    pub(crate) fn grow(&mut self, view: &ClusterView<'_>, free: &mut Free<'_>, out: &mut [Decision]) {
        if !idle_for_the_queue(view, out, free.total(), self.preempt) {
            return; // someone still waits for these GPUs
        }
        let queued: HashMap<JobId, &crate::QueuedJob<'_>> = view.queue.iter().map(|q| (q.id, q)).collect();
        for d in out.iter_mut() {
            let Decision::Place { job, hosts } = d else { continue };
            let Some(q) = queued.get(job) else { continue };
            let (spec, per) = (q.spec, q.spec.gpus_per_worker.max(1));
            let n = spec.workers.max(1);
            if hosts.iter().map(|h| h.1).sum::<u32>() != spec.gpus() || rigid(spec) {
                continue; // started smaller, or a rigid mesh
            }
            let spare = free.total();
            let most = (2 * n).min(n + spare / per);
            let stretch_now = self.stretch_on(view, q.id, spec, hosts);
            let Some((stretch, bigger)) = free
                .trials(view, hosts, spec, (n + 1..=most).filter(|&k| size_allowed(spec, k)))
                .into_iter()
                .map(|h| (self.stretch_on(view, q.id, spec, &h), h))
                .min_by(|a, b| a.0.total_cmp(&b.0))
            else {
                continue;
            };
            if stretch * GROW_GAIN > stretch_now {
                continue;
            }
            free.move_to(hosts, &bigger);
            *hosts = bigger;
            self.grown += 1;
        }
    }
}

/// A job whose size is not the policy's to choose: a device mesh runs on
/// `tp·pp·dp` GPUs unless its user allows other data-parallel widths
/// (`Mesh::dp_min`). O(1).
pub(crate) fn rigid(spec: &JobSpec) -> bool {
    spec.parallelism.is_some_and(|m| m.dp_min == 0 || m.dp_min >= m.dp)
}

/// Whether `spec` may run on `k` of its workers: any count for a
/// data-parallel job; for a mesh, whole `tp·pp` cells at a data-parallel
/// width its user allows (`Mesh::allows_dp`). O(1).
pub(crate) fn size_allowed(spec: &JobSpec, k: u32) -> bool {
    match spec.parallelism {
        None => true,
        Some(m) => {
            let (gpus, cell) = (k * spec.gpus_per_worker.max(1), (m.tp * m.pp).max(1));
            gpus.is_multiple_of(cell) && m.allows_dp(gpus / cell)
        }
    }
}

/// Iterations on `k` workers per iteration on the request's `n`: Pollux's
/// statistical efficiency for a data-parallel job whose batch grows with
/// its workers; 1 for a mesh, whose global batch stays (its pipelines
/// take more or fewer micro-batches). O(profiles).
pub(crate) fn iterations_ratio(spec: &JobSpec, n: u32, k: u32) -> f64 {
    if spec.parallelism.is_some() {
        return 1.0;
    }
    orrery_model::convergence::iterations_per_reference(&spec.model, n * spec.batch, k * spec.batch)
}
