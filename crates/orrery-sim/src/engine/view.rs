//! The policy's view of the simulation at a decision (the waiting jobs
//! ready to start and the running and paused ones) and the decision itself.

use super::{NS, Simulation, Status};
use orrery_policy::{ClusterView, Decision, JobId, Policy, QueuedJob, RunningJob};
use std::time::Instant;

impl Simulation<'_> {
    /// The policy's view: O(waiting + active jobs), each list allocated once
    /// at its final size (a filtered `collect` would grow it step by step);
    /// the running jobs' list in `spare`'s allocation, the last view's
    /// (kept by [`Simulation::decide`]): a new one of a thousand jobs was
    /// fresh pages for the kernel to zero at every decision (3.5% of a
    /// 16,384-host run).
    pub(super) fn view(&self, spare: Vec<RunningJob<'static>>) -> (Vec<QueuedJob<'_>>, Vec<RunningJob<'_>>) {
        let mut queue = Vec::with_capacity(self.waiting.len());
        let mut running: Vec<RunningJob<'_>> = retyped(spare);
        running.reserve(self.active.count_ones(..));
        queue.extend(self.waiting.iter().filter(|&&id| self.ready(id)).map(|&id| {
            let j = &self.jobs[id];
            QueuedJob {
                id,
                spec: &j.spec,
                waiting_s: (self.now - j.arrival_ns) as f64 / NS,
                progress: if j.ref_total > 0.0 { 1.0 - j.ref_left / j.ref_total } else { 0.0 },
                service_gpu_s: j.run_ns as f64 / NS * f64::from(j.spec.gpus()),
            }
        }));
        running.extend(self.active.ones().filter_map(|id| self.running_job(id)));
        (queue, running)
    }

    /// The view of these jobs among the running and paused ones, in the
    /// given order. O(ids).
    pub(super) fn running_view(&self, ids: &[JobId]) -> Vec<RunningJob<'_>> {
        ids.iter().filter_map(|&id| self.jobs.get(id).and_then(|_| self.running_job(id))).collect()
    }

    /// A running or paused job as the policy sees it (None otherwise). O(1)
    /// for a job on whole GPUs.
    pub(super) fn running_job(&self, id: JobId) -> Option<RunningJob<'_>> {
        let j = &self.jobs[id];
        if !matches!(j.status, Status::Running | Status::Paused) {
            return None;
        }
        let done = j.iterations_done + j.skip.as_ref().map_or(0, |s| s.done);
        let running_s = (self.now - j.last_start_ns) as f64 / NS;
        Some(RunningJob {
            id,
            spec: &j.spec,
            hosts: &j.hosts,
            iterations_done: done,
            paused: j.status == Status::Paused,
            iteration_start_s: j.skip.as_ref().map_or(j.iter_start_ns, |s| s.t) as f64 / NS,
            progress: if j.ref_total > 0.0 {
                let run = done.saturating_sub(j.iters_at_place) as f64 / j.ratio;
                (1.0 - (j.ref_left - run) / j.ref_total).clamp(0.0, 1.0)
            } else {
                0.0
            },
            service_gpu_s: (j.run_ns as f64 / NS + running_s) * f64::from(j.spec_gpus),
            running_s,
            solo_gpus: self.solo_gpus(id),
            sub_batch: j.sub_batch,
            xi: j.xi,
            held_gpus: &j.held_gpus,
            placement: j.placement,
        })
    }

    /// Drops the jobs that are no longer running or paused from `active`:
    /// only a job that gave its GPUs back can have left it (one placed again
    /// since stays). O(released); a walk of every active job
    /// at each view was 5% of a 16,384-host run.
    pub(super) fn prune_active(&mut self) {
        let jobs = &self.jobs;
        for j in self.released.drain(..) {
            if !matches!(jobs[j].status, Status::Running | Status::Paused) {
                self.active.set(j, false);
            }
        }
        debug_assert!(self.active.ones().all(|j| matches!(jobs[j].status, Status::Running | Status::Paused)));
    }

    /// A waiting job is offered to the policy once every job it depends on
    /// has started. O(dependencies).
    pub(super) fn ready(&self, job: JobId) -> bool {
        self.jobs[job].deps.iter().all(|&d| self.jobs[d].first_start_ns.is_some())
    }

    /// The policy's decisions for the waiting jobs (None when none is ready).
    /// A job one of whose dependencies was refused is refused too.
    pub(super) fn decide(&mut self, policy: &mut dyn Policy) -> Option<Vec<Decision>> {
        let orphans: Vec<JobId> = self
            .waiting
            .iter()
            .copied()
            .filter(|&w| self.jobs[w].deps.iter().any(|&d| self.jobs[d].status == Status::Rejected))
            .collect();
        for job in orphans {
            self.waiting.retain(|&w| w != job);
            self.jobs[job].status = Status::Rejected;
            self.jobs[job].finish_ns = Some(self.now);
        }
        if !self.waiting.iter().any(|&w| self.ready(w)) {
            return None;
        }
        self.advance_skips();
        self.prune_active();
        // The usage record steps out while the view borrows the jobs.
        let mut fair = self.fair.take();
        let decisions = {
            let spare = std::mem::take(&mut self.spare_running);
            let (queue, running) = self.view(spare);
            let mut view =
                ClusterView { now_s: self.now as f64 / NS, topology: self.topo, free_gpus: &self.free, queue, running };
            // Tenants' quotas first (issue 70), in the policy's order: the
            // policy sees the admitted jobs; a lender's reclaim is applied
            // before it is asked.
            let reclaim = if self.cfg.quotas.is_empty() {
                Vec::new()
            } else {
                let order = policy.queue_order(&view);
                let adm = orrery_policy::quota::admit_view(&self.cfg.quotas, &view, &order, fair.as_mut());
                orrery_policy::quota::filter_or_reclaim(adm, &mut view.queue)
            };
            let decided = if reclaim.is_empty() {
                let t = Instant::now();
                let mut d = policy.schedule(&view);
                let took = t.elapsed().as_secs_f64();
                orrery_policy::quota::bound_growth(&self.cfg.quotas, &view, &mut d);
                (d, Some(took))
            } else {
                (reclaim, None)
            };
            (decided, retyped(view.running))
        };
        let ((decisions, took), spare) = decisions;
        self.spare_running = spare;
        self.decision_s.extend(took);
        self.fair = fair;
        Some(decisions)
    }
}

/// `v`'s allocation as an empty vector of another type of the same size and
/// alignment (a view's running jobs kept from one decision to the next
/// across their borrow): the standard library collects a mapped
/// `vec::IntoIter` in place when the layouts agree. O(len) to drop the
/// items.
fn retyped<T, U>(mut v: Vec<T>) -> Vec<U> {
    v.clear();
    v.into_iter().filter_map(|_| None).collect()
}

#[cfg(test)]
mod retyped_tests {
    use super::retyped;

    #[test]
    fn a_retyped_vector_keeps_its_allocation_and_drops_its_items() {
        // As the view's running jobs: the same type, borrowing for a
        // shorter time.
        let names: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let v: Vec<(usize, &str)> = names.iter().enumerate().map(|(i, n)| (i, n.as_str())).collect();
        let (ptr, cap) = (v.as_ptr() as usize, v.capacity());
        let w: Vec<(usize, &'static str)> = retyped(v);
        assert!(w.is_empty());
        assert_eq!((w.as_ptr() as usize, w.capacity()), (ptr, cap));
    }
}
