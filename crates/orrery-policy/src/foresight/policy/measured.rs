//! FORESIGHT measured first (`…:measured`, issue 68 item 3): a part's
//! plan is made but held, nothing of it applied (no delay, timetable,
//! throttle or route: the jobs run on ECMP), until one of its jobs runs
//! [`OVERRUN`] over its time alone [`OVERRUN_STREAK`] iterations running.
//! The part is then planned again and applied, and its next
//! [`TRIAL_ITERATIONS`] are weighed against the collided ones: no shorter
//! at the median, and the plan is held again, for good on those hosts (as
//! soon as half of them are no shorter: the median then cannot be).
//! Routes are held with the timing because they can lose too: on the
//! testbed under bbr FORESIGHT's subflows ran 2.3× slower than ECMP
//! (docs/results.md). Each step comes with a `Note` naming the
//! measurement, as CASSINI's and Metronome's measured-first rules do.

use super::{Foresight, OVERRUN, OVERRUN_STREAK, PlacedJob};
use crate::{ClusterView, Decision, JobId};
use std::collections::{HashMap, HashSet};

/// A job's iterations under its part's new timing that are weighed, by
/// their median, against the collided ones that brought the timing in.
const TRIAL_ITERATIONS: usize = 10;

/// What measured first keeps, per job on its present hosts.
#[derive(Debug, Clone, Default)]
pub(super) struct MeasuredFirst {
    /// Per planned job: its iteration alone (the unthrottled profile), ms.
    pub(super) alone_ms: HashMap<JobId, f64>,
    /// Per job not yet measured colliding: its collided iterations in a
    /// row (waits included), ms.
    slow: HashMap<JobId, Vec<f64>>,
    /// Jobs measured colliding, with the collided iterations that showed
    /// it and the ones since, under timing.
    collided: HashMap<JobId, (Vec<f64>, Vec<f64>)>,
    /// Jobs whose timing did not pay: timed no more on their hosts.
    given_up: HashSet<JobId>,
    /// Parts timed on a measurement; timings given up on one.
    timed: u64,
    dropped: u64,
}

impl MeasuredFirst {
    /// Whether a part of these jobs is applied when planned: one of them
    /// has been measured colliding and none has given up. O(jobs).
    pub(super) fn applies_part(&self, jobs: &[JobId]) -> bool {
        jobs.iter().any(|j| self.collided.contains_key(j)) && !jobs.iter().any(|j| self.given_up.contains(j))
    }

    /// Whether a part of these jobs is on trial: timed on a measurement,
    /// its trial not over. Overruns of the plan do not drop it then (under
    /// DCQCN a plan made mid-run overran its lengths while the rates
    /// recovered from the collisions; judged by the trial alone for good,
    /// such plans were kept and ran slower than ECMP, docs/results.md).
    /// O(jobs).
    pub(super) fn on_trial(&self, jobs: &[JobId]) -> bool {
        jobs.iter().any(|j| self.collided.get(j).is_some_and(|(_, after)| after.len() < TRIAL_ITERATIONS))
    }

    /// Forgets the jobs `gone` says (ended, or placed again: what was
    /// measured was on their old hosts). O(jobs kept).
    pub(super) fn forget(&mut self, gone: impl Fn(&JobId) -> bool) {
        self.alone_ms.retain(|id, _| !gone(id));
        self.slow.retain(|id, _| !gone(id));
        self.collided.retain(|id, _| !gone(id));
        self.given_up.retain(|id| !gone(id));
    }

    /// Its counters.
    pub(super) fn counters(&self) -> [(&'static str, f64); 2] {
        [("timed_on_measurement", self.timed as f64), ("given_up_on_measurement", self.dropped as f64)]
    }
}

/// The median of a few iteration times, ms. O(n log n).
fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

impl Foresight {
    /// Times a part only once its jobs are measured colliding (named
    /// `…:measured`; the module docs).
    pub fn measured(mut self) -> Self {
        self.measured_first = Some(MeasuredFirst::default());
        self.label.push_str(":measured");
        self
    }

    /// Measured first, after each of `job`'s iterations: while its part is
    /// untimed, counts its collided iterations (over [`OVERRUN`] of its
    /// time alone, waits left out) and, at [`OVERRUN_STREAK`] in a row,
    /// plans the part again with its timing; once timed on a measurement,
    /// weighs the [`TRIAL_ITERATIONS`] after against the collided ones
    /// (medians, waits included) and drops the timing if they are no
    /// shorter. Returns the decisions and whether the part was planned
    /// again (its jobs' first steps are then among them). O(1) a report,
    /// plus the re-plan or the drop.
    pub(super) fn measure_first(
        &mut self,
        view: &ClusterView<'_>,
        job: JobId,
        it: crate::Iteration,
    ) -> (Vec<Decision>, bool) {
        let none = (Vec::new(), false);
        let Some(&pid) = self.part_of_job.get(&job) else { return none };
        let applied = !self.parts[&pid].held;
        let Some(m) = self.measured_first.as_mut() else { return none };
        let Some(&alone) = m.alone_ms.get(&job) else { return none };
        // A part one of whose jobs gave up is held for good: the others'
        // collisions are what it holds them to.
        if self.parts[&pid].jobs.iter().any(|j| m.given_up.contains(j)) {
            return none;
        }
        if let Some((before, after)) = m.collided.get_mut(&job) {
            if !applied || after.len() >= TRIAL_ITERATIONS {
                return none;
            }
            after.push(it.ms);
            let was = median(before);
            // The trial's median (its upper one) is shorter only if more
            // than half its iterations are: once half are not, the plan is
            // held at once, as it would be at the trial's end.
            let lost = after.iter().filter(|&&ms| ms >= was).count() >= TRIAL_ITERATIONS - TRIAL_ITERATIONS / 2;
            if after.len() < TRIAL_ITERATIONS && !lost {
                return none;
            }
            let is = median(after);
            if !lost {
                let text = format!(
                    "foresight: planned, its iterations' median went from {was:.1} to {is:.1} ms; keeping the plan"
                );
                return (vec![Decision::Note { job, text }], false);
            }
            m.given_up.insert(job);
            m.dropped += 1;
            let text = format!(
                "foresight: planned, its iterations' median went from {was:.1} to {is:.1} ms over {} of {TRIAL_ITERATIONS} \
                 trial iterations, no shorter; holding the plan (ECMP)",
                after.len()
            );
            let mut out = vec![Decision::Note { job, text }];
            out.extend(self.hold(view, pid));
            return (out, false);
        }
        if applied {
            return none;
        }
        let slow = m.slow.entry(job).or_default();
        if it.own_ms() > (1.0 + OVERRUN) * alone {
            slow.push(it.ms);
        } else {
            slow.clear();
        }
        if slow.len() < OVERRUN_STREAK as usize {
            return none;
        }
        let before = std::mem::take(slow);
        let text = format!(
            "foresight: measured {} iterations in a row over {:.0}% of its {alone:.1} ms alone (median {:.1} ms); \
             applying its part's plan",
            before.len(),
            (1.0 + OVERRUN) * 100.0,
            median(&before)
        );
        m.collided.insert(job, (before, Vec::new()));
        m.timed += 1;
        let jobs: Vec<PlacedJob<'_>> = view.running.iter().map(|r| (r.id, r.spec, r.hosts)).collect();
        let mut out = vec![Decision::Note { job, text }];
        out.extend(self.replan(view, &jobs, &[], Some(pid)));
        (out, true)
    }

    /// Holds part `pid`'s plan: its timing dropped and its routes undone
    /// (its jobs back on ECMP). O(its jobs' pinned flows).
    fn hold(&mut self, view: &ClusterView<'_>, pid: super::PartId) -> Vec<Decision> {
        let mut out = self.drop_timing(view, &[pid]);
        let Some(part) = self.parts.get_mut(&pid) else { return out };
        part.held = true;
        for id in &part.jobs {
            out.extend(super::unroute(&self.routes_in_force, *id));
        }
        out
    }
}
