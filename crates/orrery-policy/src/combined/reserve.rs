//! The starved job's reservation (the combined policy's part `reserve`).
//! Shortest remaining time first with backfilling starves gangs: a job
//! that needs half the cluster waits while shorter jobs take the GPUs that
//! free up one by one, and on benchmark-network at load 1.5 such jobs
//! waited up to 16 times their time alone. A waiting job that has waited
//! [`STARVED_AFTER`] times its time alone is *starved*; the one starved
//! most (waited over alone) is tried first and walked first by
//! preemption's SRTF (`preempt.rs`, Tiresias' starvation promotion). When
//! it still cannot start it holds a reservation: the GPUs it needs at the
//! *shadow time*, when enough running jobs will have ended (their
//! remaining times alone, as the next-free rule reads them). A job behind
//! it may still start when it ends before the shadow time or takes only
//! GPUs the reservation leaves over (EASY backfilling: Lifka 1995, Mu'alem
//! and Feitelson 2001; Slurm's `sched/backfill` keeps the same promise for
//! its top job). Shortest remaining time first stays the queue order for
//! everyone else.

use crate::{Decision, JobId};

/// Waited this many times its time alone, a job is starved. Chosen on
/// benchmark-network's seeds 13–24, where gangs waited up to 16 times: at
/// 6 the mean JCT stays within 2% of the rule's absence on every seed set
/// and fabric, where lower thresholds cost 3–14% at load 1.5
/// (docs/results.md, "The longest waits").
pub const STARVED_AFTER: f64 = 6.0;

/// The reservation of a round: the starved job, when its GPUs will be
/// there, and how many GPUs more than it needs will be free by then.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Reservation {
    pub(crate) job: JobId,
    /// Seconds from now until the reserved job's GPUs are free.
    pub(crate) shadow_s: f64,
    /// GPUs free at the shadow time beyond the reserved job's need: a job
    /// that runs past the shadow time may take up to these.
    pub(crate) extra: u32,
}

/// When `need` GPUs are free, `free` being free now and each running job
/// freeing its own at its end (`ends`: seconds left, GPUs; soonest first),
/// and how many are free then: (seconds from now, GPUs). None when the
/// running jobs never free enough. O(R).
pub(crate) fn shadow(ends: &[(f64, f64)], free: u32, need: u32) -> Option<(f64, f64)> {
    let mut have = f64::from(free);
    let mut shadow_s = 0.0;
    for &(left_s, gpus) in ends {
        if have >= f64::from(need) {
            break;
        }
        have += gpus;
        shadow_s = left_s;
    }
    (have >= f64::from(need)).then_some((shadow_s, have))
}

impl Reservation {
    /// The reservation for a job needing `need` GPUs ([`shadow`]). O(R).
    pub(crate) fn at_shadow(job: JobId, ends: &[(f64, f64)], free: u32, need: u32) -> Option<Reservation> {
        shadow(ends, free, need).map(|(shadow_s, have)| Reservation {
            job,
            shadow_s,
            extra: (have - f64::from(need)).floor() as u32,
        })
    }

    /// The reservation of job `id`, needing `need` GPUs, unless `out`
    /// already starts, shares or rejects it; `free` GPUs are free now.
    /// O(D + R).
    pub(crate) fn if_waiting(
        out: &[Decision],
        ends: &[(f64, f64)],
        free: u64,
        id: JobId,
        need: u32,
    ) -> Option<Reservation> {
        let decided = out.iter().any(|d| {
            matches!(d, Decision::Place { job, .. } | Decision::Share { job, .. } | Decision::Reject { job, .. } if *job == id)
        });
        if decided { None } else { Reservation::at_shadow(id, ends, u32::try_from(free).unwrap_or(u32::MAX), need) }
    }

    /// Whether a job that takes `gpus` free GPUs and ends `end_s` from now
    /// may start without delaying the reserved job. O(1).
    pub(crate) fn allows(&self, gpus: u32, end_s: f64) -> bool {
        end_s <= self.shadow_s || gpus <= self.extra
    }

    /// Notes such a start: one that runs past the shadow time uses up that
    /// many of the GPUs left over. O(1).
    pub(crate) fn take(&mut self, gpus: u32, end_s: f64) {
        if end_s > self.shadow_s {
            self.extra = self.extra.saturating_sub(gpus);
        }
    }

    /// [`Self::allows`], then [`Self::take`] if it does. O(1).
    pub(crate) fn admits(&mut self, gpus: u32, end_s: f64) -> bool {
        let allowed = self.allows(gpus, end_s);
        if allowed {
            self.take(gpus, end_s);
        }
        allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ClusterView;
    use crate::castor::colocate::tests::{cluster, running};
    use crate::castor::colocate::{Colocator, Rule};
    use crate::{Policy, QueuedJob};
    use orrery_model::{JobSpec, Work};

    /// Two hosts of 4 GPUs at 4,000 s: job 0 holds host 0 with 1,000 s
    /// left, job 1 two GPUs of host 1 with 100 s left, two GPUs free. Job 5
    /// is an 8-GPU gang of 600 s that arrived at 0: it has waited 4,000 s,
    /// more than 6 × 600, and needs every GPU, all free at 1,000 s (the
    /// shadow), none left over.
    fn starved_gang(queue: &[(usize, &JobSpec)], reserve: bool, preempt: bool) -> Vec<Decision> {
        let t = cluster();
        let a = JobSpec::new("a", "resnet50", 32, 4, Work::Seconds(2_000.0), 3_000.0);
        let b = JobSpec::new("b", "resnet50", 32, 2, Work::Seconds(1_000.0), 3_000.0);
        let (ha, hb) = ([(0usize, 4u32)], [(1usize, 2u32)]);
        let view = ClusterView {
            now_s: 4_000.0,
            topology: &t,
            free_gpus: &[0, 2],
            queue: queue.iter().map(|&(id, spec)| QueuedJob::new(id, spec, 0.0)).collect(),
            running: vec![running(0, &a, &ha, 0.5), running(1, &b, &hb, 0.9)],
        };
        let mut p = Colocator::new(Rule::Bsbf);
        p.share = false;
        p.preempt = preempt;
        p.reserve_after = reserve.then_some(STARVED_AFTER);
        p.schedule(&view)
    }

    #[test]
    fn behind_a_starved_gang_only_jobs_that_end_before_its_gpus_free_up_start() {
        let gang = JobSpec::new("gang", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        let long = JobSpec::new("long", "resnet50", 32, 2, Work::Seconds(2_000.0), 3_990.0);
        let short = JobSpec::new("short", "resnet50", 32, 2, Work::Seconds(50.0), 3_995.0);
        // Without the rule the 2,000-s job takes the two free GPUs and
        // holds them past 1,000 s, when the gang could have started.
        assert_eq!(
            starved_gang(&[(5, &gang), (6, &long)], false, false),
            vec![Decision::Place { job: 6, hosts: vec![(1, 2)] }]
        );
        assert_eq!(starved_gang(&[(5, &gang), (6, &long)], true, false), vec![]);
        // A 50-s job ends long before: it backfills, the long one waits.
        assert_eq!(
            starved_gang(&[(5, &gang), (6, &long), (7, &short)], true, false),
            vec![Decision::Place { job: 7, hosts: vec![(1, 2)] }]
        );
    }

    #[test]
    fn a_starved_gang_preempts_as_a_shorter_job_would() {
        // Shortest remaining time first keeps both running jobs: job 1 has
        // less left than the gang, and job 0's four GPUs alone do not fit
        // it. Promoted, the gang takes both, most time left first.
        let gang = JobSpec::new("gang", "resnet50", 32, 8, Work::Seconds(600.0), 0.0);
        assert_eq!(starved_gang(&[(5, &gang)], false, true), vec![]);
        assert_eq!(
            starved_gang(&[(5, &gang)], true, true),
            vec![
                Decision::Preempt { job: 0 },
                Decision::Preempt { job: 1 },
                Decision::Place { job: 5, hosts: vec![(0, 4), (1, 4)] },
            ]
        );
        // Not yet starved (waited 3,500 s < 6 × 600 s at its arrival of 500 s): no promotion.
        let fresh = JobSpec::new("gang", "resnet50", 32, 8, Work::Seconds(600.0), 500.0);
        assert_eq!(starved_gang(&[(5, &fresh)], true, true), vec![]);
    }

    #[test]
    fn the_shadow_is_when_enough_gpus_have_freed_and_the_rest_is_left_over() {
        // 2 free; jobs free 4 GPUs in 10 s, 4 in 30 s, 8 in 50 s. A job that
        // needs 9 has them at 30 s (2 + 4 + 4 = 10), one spare.
        let ends = [(10.0, 4.0), (30.0, 4.0), (50.0, 8.0)];
        assert_eq!(Reservation::at_shadow(7, &ends, 2, 9), Some(Reservation { job: 7, shadow_s: 30.0, extra: 1 }));
        // Enough free now: the shadow is now and every spare GPU is extra.
        assert_eq!(Reservation::at_shadow(7, &ends, 12, 9), Some(Reservation { job: 7, shadow_s: 0.0, extra: 3 }));
        // Never enough.
        assert_eq!(Reservation::at_shadow(7, &ends, 2, 19), None);
    }

    #[test]
    fn a_job_behind_starts_if_it_ends_before_the_shadow_or_fits_in_what_is_left_over() {
        let mut r = Reservation { job: 1, shadow_s: 30.0, extra: 3 };
        // Ends before the shadow: any size, nothing used up.
        assert!(r.admits(12, 29.0));
        assert_eq!(r.extra, 3);
        // Runs past it: only within the spare GPUs, which it uses up.
        assert!(r.admits(2, 100.0));
        assert!(!r.admits(2, 100.0));
        assert!(r.admits(1, 100.0));
        assert!(!r.admits(1, 100.0));
    }
}
