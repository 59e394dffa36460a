//! CASSINI's drift rule (§5.7) on measurements (issue 73): how each
//! aligned job was aligned, what its iterations measured, when it has
//! drifted (a collision, or its communication off its slot), and the slot
//! it is re-aligned to, at its reference's next report. The placement side
//! (candidates, scores, the Affinity graph) is in the module above; it
//! hands each newly aligned job here ([`Drift::align_placed`]).

use super::alone;
use crate::{ClusterView, Decision, Iteration, JobId};
use std::collections::{HashMap, HashSet, VecDeque};

/// How a job was aligned, to re-align it the same way later.
#[derive(Debug, Clone, Copy)]
pub(super) struct Aligned {
    /// Its iteration time alone, ms (the model's).
    pub(super) period_ms: f64,
    /// Its communication alone (every collective), ms (the model's).
    pub(super) comm_ms: f64,
    /// The offset given, s.
    pub(super) offset_s: f64,
    /// Whether its links were fully compatible, so contention means drift.
    pub(super) compatible: bool,
    /// The job whose phase it keeps and its time-shift after it, ms.
    pub(super) reference: JobId,
    pub(super) shift_after_ms: f64,
    /// The reference's modelled period and communication alone, ms: its
    /// circle until measured.
    pub(super) reference_period_ms: f64,
    pub(super) reference_comm_ms: f64,
    /// Whether the reference has the same modelled period: then the offset
    /// repeats with the reference's own iterations.
    pub(super) same_period: bool,
    /// Whether it shares a link with the reference (a component's anchor
    /// may be two links away, where their windows may overlap freely).
    pub(super) shares_link: bool,
}

impl Aligned {
    /// From the reference's communication start to this job's on their
    /// circles, ms: the time-shift between iteration starts plus the two
    /// computes before the communication (CASSINI's circles put each job's
    /// communication after its compute). O(1).
    pub(super) fn comm_gap_ms(&self) -> f64 {
        self.shift_after_ms + (self.period_ms - self.comm_ms) - (self.reference_period_ms - self.reference_comm_ms)
    }
}

/// How far an aligned job has drifted into another's communication, ms, for
/// CASSINI's 5% drift rule (§5.7), judged against its circle alone
/// ([`alone::Observed`]). Drift is another job's communication in this
/// one's, so when the driver measured the iteration's communication only
/// that counts: a compute phase that runs long (a busy CPU, a model a few
/// percent slower than profiled) is not drift, and re-aligning for it costs
/// a wait of up to a period each time. The all-reduce is judged against the
/// job's own all-reduce alone, measured: on real TCP a ring's all-reduce
/// takes 10-20% longer than the fluid model's even alone (per-step
/// barriers, slow start; docs/results.md), 4-5% of a VGG19 period, and
/// against the model the rule fired on noise at every chance.
///
/// Without a measured communication it is the paper's rule on the job's
/// own iteration against its own usual one. O(window log window).
fn overrun_ms(a: &Aligned, it: Iteration, own: &alone::Observed) -> f64 {
    match it.comm_ms {
        Some(comm) if a.comm_ms > 0.0 => comm - own.comm_alone_ms(a.comm_ms),
        _ => it.own_ms() - own.period_alone_ms(a.period_ms, a.comm_ms),
    }
}

/// A running job's name for a note, or `#id` once it has ended. O(R).
fn name_of(view: &ClusterView<'_>, job: JobId) -> String {
    view.running.iter().find(|r| r.id == job).map_or_else(|| format!("#{job}"), |r| r.spec.id.clone())
}

/// The collision counted for one iteration, ms: the larger of the two
/// windows' overlap at their lengths alone ([`Windows::overlap_ms`]) and
/// the all-reduce's overrun ([`overrun_ms`]); where the windows are
/// measured, the overrun counts only as far as the reference's
/// communication, as it ran, was in this job's
/// ([`Windows::overlap_as_ran_ms`]). A host that slows both
/// rings (on the testbed's two cores, each job's all-reduce runs while the
/// other's four ranks compute: 15-25% over alone on a busy day, 5-10% of
/// the period) lengthens the all-reduces of interleaved jobs with no other
/// ring in them, and counted whole that overrun is read as drift (once in
/// the 29 re-alignments traced on the DDP pair beside a CPU-bound process
/// and a build, docs/results.md, "A noisy host"). A collision lengthens
/// both windows into each other, so it is counted whole: in the fluid
/// model two rings sharing a link for `T` ms overrun by `T/2` each and
/// overlap by `T`. Where the windows are not measured (other periods, no
/// shared link, no measured communication) the overrun is all there is.
/// O(1).
fn collision_ms(overrun_ms: f64, windows: Option<&Windows>) -> f64 {
    match windows {
        Some(w) => overrun_ms.min(w.overlap_as_ran_ms()).max(w.overlap_ms()),
        None => overrun_ms.max(0.0),
    }
}

/// The two jobs' latest communication windows on the reference's circle
/// alone: each window's start, measured, its length alone and its length
/// as it ran.
struct Windows {
    /// This job's communication start after the reference's, ms (signed).
    after_ms: f64,
    /// The reference's period alone, ms.
    period_ms: f64,
    /// The reference's and this job's communication alone, ms.
    theirs_ms: f64,
    mine_ms: f64,
    /// The reference's and this job's latest communication as it ran, ms.
    theirs_ran_ms: f64,
    mine_ran_ms: f64,
}

impl Windows {
    /// None until both have reported a measured communication, when the
    /// two have different periods or share no link, or when the
    /// reference's latest report is over two of its periods away from this
    /// job's. O(window log window).
    fn measured(a: &Aligned, own: &alone::Observed, reference: &alone::Observed) -> Option<Windows> {
        if !a.same_period || !a.shares_link {
            return None;
        }
        let (mine, mine_ran_ms) = own.last_comm?;
        let (theirs, theirs_ran_ms) = reference.last_comm?;
        let period_ms = reference.period_alone_ms(a.reference_period_ms, a.reference_comm_ms);
        let after_ms = (mine - theirs) * 1e3;
        if period_ms <= 0.0 || after_ms.abs() > 2.0 * period_ms {
            return None;
        }
        let (theirs_ms, mine_ms) = (reference.comm_alone_ms(a.reference_comm_ms), own.comm_alone_ms(a.comm_ms));
        Some(Windows { after_ms, period_ms, theirs_ms, mine_ms, theirs_ran_ms, mine_ran_ms })
    }

    /// How much the two windows overlap at their lengths alone, ms. A pair
    /// drifting toward each other is caught before the collision doubles
    /// an all-reduce. O(1).
    fn overlap_ms(&self) -> f64 {
        self.overlap_at(self.theirs_ms, self.mine_ms)
    }

    /// How much the two windows overlapped as they ran, ms: the part of
    /// this job's communication the reference's was in. O(1).
    fn overlap_as_ran_ms(&self) -> f64 {
        self.overlap_at(self.theirs_ran_ms, self.mine_ran_ms)
    }

    /// The overlap on the reference's circle of its window `theirs_ms`
    /// long and this job's `mine_ms` long, ms. O(1).
    fn overlap_at(&self, theirs_ms: f64, mine_ms: f64) -> f64 {
        // The reference's window is [0, theirs_ms); this job's starts `gap` later.
        let gap = self.after_ms.rem_euclid(self.period_ms);
        (theirs_ms - gap).max(0.0) + (gap + mine_ms - self.period_ms).max(0.0)
    }

    /// How far this job's communication started from its slot `slot_ms`
    /// after the reference's ([`Aligned::comm_gap_ms`]), ms (late > 0),
    /// when that is more than half the clearance on that side of the slot:
    /// the circle alone leaves some clearance between the two windows,
    /// split by the slot; half of a side is the tolerance, and never under
    /// 5% of the period (the paper's bar), so a few ms of compute jitter
    /// never re-align.
    ///
    /// The windows need not overlap yet. On real TCP two jobs' periods
    /// differ even on the same model (on the testbed's small DDP pair one
    /// ring's all-reduce ran 174 ms for the other's 148 for tens of
    /// iterations after they had collided: reno's window halved), so one
    /// drifts through the other by tens of ms an iteration; waiting for
    /// three collided iterations left 14-19% of all-reduces collided (issue
    /// 73, CI). The slot is also wider than its measured window: at 5 ms
    /// clearance both rings' all-reduces ran 15% long. Off its slot, the
    /// job is re-aligned before they meet. O(1).
    fn off_slot_ms(&self, slot_ms: f64) -> Option<f64> {
        let period = self.period_ms;
        let target = slot_ms.rem_euclid(period);
        // Clearance after the reference's window, and after this job's.
        let early_side = target - self.theirs_ms;
        let late_side = period - target - self.mine_ms;
        let error = ((self.after_ms - target) + period / 2.0).rem_euclid(period) - period / 2.0;
        let tolerance = |side: f64| (side / 2.0).max(0.05 * period);
        let off = if error >= 0.0 { error > tolerance(late_side) } else { -error > tolerance(early_side) };
        off.then_some(error)
    }
}

/// Judged iterations whose median collision decides a re-alignment: one
/// all-reduce slowed by TCP's noise (±10% on the testbed's DDP pair, 4% of
/// a period) is not a drift; two of three are.
const EVIDENCE: usize = 3;

/// A collision this large (a share of the period) re-aligns at once: two
/// rings in step, each all-reduce about doubled.
pub(super) const HARD_COLLISION: f64 = 0.25;

/// A job that collides again within this many judged iterations of its
/// re-alignment, where its communication window is clear of the
/// reference's, was not helped by its phase after the reference (a third
/// job on another of its links, placed later, meets it wherever it is, or
/// the jitter is that large): it is then left alone for
/// [`RELAPSE_HOLD`] iterations before it is judged again, the paper-era
/// rhythm of one re-alignment in ten. Judging such jobs at every iteration
/// re-aligned them 3x as often in CASSINI's Poisson experiment under
/// random placement and cost 9% in mean JCT; a growing hold-off (3, 6,
/// 12, 24 iterations) left Table 2's snapshot 3 drifting, 7% slower.
pub(super) const QUICK_RELAPSE: u32 = 6;

/// Iterations a relapsed job is not judged after its re-alignment.
pub(super) const RELAPSE_HOLD: u32 = 10;

/// Iterations not judged after a re-alignment: the one it arrives in and
/// the one that waits, or [`RELAPSE_HOLD`] after a relapse. O(1).
fn settle_iterations(relapses: u32) -> u32 {
    if relapses > 0 { RELAPSE_HOLD } else { 2 }
}

/// The drift rule's state, per job.
#[derive(Default)]
pub(super) struct Drift {
    /// Alignment given to each job.
    pub(super) aligned: HashMap<JobId, Aligned>,
    /// What each job's reported iterations measured: its circle alone and
    /// where its latest iteration ended ([`alone::Observed`]).
    pub(super) observed: HashMap<JobId, alone::Observed>,
    /// Iterations of a just-aligned job not to judge (they include the
    /// wait for the alignment, or ran while it was being made).
    pub(super) unmeasured: HashMap<JobId, u32>,
    /// Per aligned job, the collision measured in its latest judged
    /// iterations, ms (at most [`EVIDENCE`]; emptied at each alignment).
    evidence: HashMap<JobId, VecDeque<f64>>,
    /// Per aligned job: judged iterations since its latest alignment, and
    /// re-alignments in a row that did not last ([`QUICK_RELAPSE`]).
    judged: HashMap<JobId, u32>,
    pub(super) relapses: HashMap<JobId, u32>,
    /// Per reference, the jobs to re-align at its next report: their slot
    /// is anchored at the start it then reports, measured, not
    /// extrapolated over iterations a collision may have stretched.
    pending: HashMap<JobId, Vec<JobId>>,
    /// Re-alignments done by the 5% rule.
    pub(super) readjustments: u64,
    /// Per job waiting in `pending`, what called for its re-alignment: the
    /// note written beside it when it is made.
    why: HashMap<JobId, String>,
    /// Per job, how many watched jobs keep its phase with its measured
    /// iteration time (compatible, same period): it must be watched too.
    referenced: HashMap<JobId, u32>,
    /// Jobs whose slot waits for a measured collision (`+cassini:measured`,
    /// issue 68): placed unshifted, aligned only once their all-reduces
    /// collide by the 5% rule; never re-aligned for being off a slot they
    /// were never given.
    deferred: HashSet<JobId>,
    /// Per job aligned on a measurement: the median of its last
    /// iterations before, ms, and its judged iterations since, ms (weighed
    /// at [`EVIDENCE`]).
    trial: HashMap<JobId, (f64, Vec<f64>)>,
    /// Jobs whose measured alignment did not pay (their iterations after
    /// it no shorter than before): left alone until placed again.
    given_up: HashSet<JobId>,
    /// Each deferred job's latest iteration times, its own (ms, at most
    /// [`EVIDENCE`]).
    recent: HashMap<JobId, VecDeque<f64>>,
    /// Alignments made on a measured collision, and given up for no gain.
    pub(super) applied_on_measurement: u64,
    pub(super) given_up_on_measurement: u64,
}

use crate::estimate::upper_median as median;

impl Drift {
    /// Drops ended jobs' measurements once they outnumber the running
    /// jobs': amortised O(1) per running job.
    pub(super) fn forget_ended(&mut self, view: &ClusterView<'_>) {
        if self.observed.len() + self.pending.len() + self.evidence.len() + self.judged.len() + self.recent.len()
            > 5 * view.running.len() + 64
        {
            let running: HashSet<JobId> = view.running.iter().map(|r| r.id).collect();
            self.observed.retain(|j, _| running.contains(j));
            self.pending.retain(|j, _| running.contains(j));
            self.evidence.retain(|j, _| running.contains(j));
            self.judged.retain(|j, _| running.contains(j));
            self.relapses.retain(|j, _| running.contains(j));
            self.deferred.retain(|j| running.contains(j));
            self.trial.retain(|j, _| running.contains(j));
            self.given_up.retain(|j| running.contains(j));
            self.recent.retain(|j, _| running.contains(j));
            self.why.retain(|j, _| running.contains(j));
        }
    }

    /// Forgets what was measured of `job`: it is placed again. O(1).
    pub(super) fn placed_again(&mut self, job: JobId) {
        self.observed.remove(&job);
        self.deferred.remove(&job);
        self.trial.remove(&job);
        self.given_up.remove(&job);
        self.recent.remove(&job);
    }

    /// Records `job`'s slot at its placement without applying it: it is
    /// aligned when its measured all-reduces show a collision
    /// ([`Drift::on_iteration`]). O(1).
    pub(super) fn defer(&mut self, job: JobId, a: Aligned) {
        self.align_placed(job, a);
        self.deferred.insert(job);
    }

    /// Where a running job's current iteration began: where its latest
    /// reported one ended when that is later than the view's `start_s`
    /// (the live service's view holds the latest reported start, the
    /// simulator's the current one). O(1).
    pub(super) fn current_start_s(&self, job: JobId, start_s: f64) -> f64 {
        let end = self.observed.get(&job).and_then(|o| o.last_end_s);
        end.filter(|&e| e > start_s + 1e-6).unwrap_or(start_s)
    }

    /// Records `job` aligned at its placement: its next iteration includes
    /// the wait, so it is not judged; the first re-alignment after a
    /// placement is never a relapse (live, the placement's slot is a guess
    /// made before either job's ranks are up). O(1).
    pub(super) fn align_placed(&mut self, job: JobId, a: Aligned) {
        self.record(job, a);
        self.unmeasured.insert(job, 1);
        self.evidence.remove(&job);
        self.judged.insert(job, QUICK_RELAPSE);
        self.relapses.remove(&job);
    }

    /// Whether the rule watches `job`: aligned on fully compatible links
    /// (its compute noise alone can trip it), or the reference of such a
    /// job. O(1).
    pub(super) fn watches(&self, job: JobId) -> bool {
        self.aligned.get(&job).is_some_and(|a| a.compatible) || self.referenced.get(&job).is_some_and(|&n| n > 0)
    }

    /// `job`'s slot after its reference's latest reported iteration, which
    /// ended where its current one began: there plus the reference's
    /// measured compute is its next communication start, and `job` starts
    /// so that its own communication (after its measured compute) follows
    /// at the circles' gap; the slot repeats with the reference's period
    /// clear of collisions ([`alone::Observed::period_clear_ms`]).
    ///
    /// An `Align` only waits, so a job due just after its slot would wait
    /// almost a whole period (on the testbed's DDP pair, 557-734 ms a
    /// re-alignment). When `job`'s next start, predicted from where its
    /// current iteration began and its clear period, is late by less than
    /// half a period, and the reference keeps no other job's phase nor
    /// follows one, the reference waits that lateness instead (a `Shift`):
    /// the same relative phase at the smaller wait. O(window log window).
    fn realign_after_reference(&mut self, job: JobId) -> Option<Decision> {
        let a = *self.aligned.get(&job)?;
        let reference = self.observed.get(&a.reference)?;
        let anchor_s = reference.last_end_s?;
        let period_ms = reference.period_clear_ms(a.reference_period_ms, a.reference_comm_ms);
        let reference_compute = reference.compute_ms(a.reference_period_ms - a.reference_comm_ms);
        let own_model = a.period_ms - a.comm_ms;
        let own = self.observed.get(&job);
        let own_compute = own.map_or(own_model, |o| o.compute_ms(own_model));
        let offset_s = anchor_s + (reference_compute + a.comm_gap_ms() - own_compute) / 1e3;
        // Not judged until the new phase has been run (at least the
        // iteration it arrives in and the one that waits).
        let settle = self.unmeasured.get(&job).copied().unwrap_or(0).max(2);
        self.unmeasured.insert(job, settle);
        self.evidence.remove(&job);
        let next_start_s = own.and_then(|o| Some(o.last_end_s? + o.period_clear_ms(a.period_ms, a.comm_ms) / 1e3));
        let movable = self.referenced.get(&a.reference) == Some(&1) && !self.aligned.contains_key(&a.reference);
        if let Some(next_s) = next_start_s.filter(|_| movable && period_ms > 0.0) {
            let late_ms = ((next_s - offset_s) * 1e3).rem_euclid(period_ms);
            if late_ms < period_ms / 2.0 {
                return Some(Decision::Shift { job: a.reference, ms: late_ms });
            }
        }
        Some(Decision::Align { job, period_ms, offset_s })
    }

    /// Records how `job` was aligned, keeping `referenced` in step.
    pub(super) fn record(&mut self, job: JobId, a: Aligned) {
        let uses = |a: &Aligned| a.compatible && a.same_period;
        if let Some(old) = self.aligned.insert(job, a).filter(uses)
            && let Some(n) = self.referenced.get_mut(&old.reference)
        {
            *n = n.saturating_sub(1);
        }
        if uses(&a) {
            *self.referenced.entry(a.reference).or_insert(0) += 1;
        }
    }

    /// The running jobs [`Drift::on_iteration`] reads for `job`'s report:
    /// the job, those waiting for its next start, and its reference. O(1).
    pub(super) fn needs(&self, job: JobId) -> Vec<JobId> {
        let mut jobs = vec![job];
        jobs.extend(self.pending.get(&job).into_iter().flatten().copied());
        jobs.extend(self.aligned.get(&job).map(|a| a.reference));
        jobs.sort_unstable();
        jobs.dedup();
        jobs
    }

    /// §5.7's drift rule, on measurements (issue 73). Every report updates
    /// the job's circle alone and where its iteration ended
    /// ([`alone::Observed`]). An aligned job on fully compatible links is
    /// judged at every iteration that did not include an alignment's wait,
    /// not on a timer: its collision is its all-reduce over its all-reduce
    /// alone, as far as the reference's window overlapped it, or the two
    /// windows' overlap on the measured circle if larger
    /// ([`collision_ms`]). It is re-aligned when the median of its
    /// last [`EVIDENCE`] collisions exceeds 5% of its period (the paper's
    /// bar), or one exceeds [`HARD_COLLISION`] of it, or when its
    /// communication started off its slot after the reference's by over
    /// half the clearance on that side ([`Windows::off_slot_ms`]): the windows are
    /// about to meet.
    ///
    /// The new slot is taken at the reference's next report: the end of
    /// that iteration is its next start, measured, and the slot repeats with
    /// the reference's period clear of collisions. A slot extrapolated from an older
    /// start with a measured period missed by the collisions in between (on
    /// the testbed's DDP pair, 206 ms early after three contended
    /// iterations of the reference) and kept the pair colliding. A job
    /// whose reference has ended, or has a different period (its iterations
    /// may not be watched), is aligned at once as before.
    ///
    /// O(window log window) per report, plus O(R) to find the job's view.
    pub(super) fn on_iteration(&mut self, view: &ClusterView<'_>, job: JobId, it: Iteration) -> Vec<Decision> {
        let mut out = Vec::new();
        // Both drivers give the reported iteration's start, its wait
        // included, and its time from there: it ended at their sum.
        let start_s = view.running.iter().find(|r| r.id == job).map(|r| r.iteration_start_s);
        let end_s = start_s.map_or(view.now_s, |s| s + it.ms / 1e3);
        self.observed.entry(job).or_default().observe(end_s, it.own_ms(), it.comm_ms);
        // Jobs waiting for this one's next start are aligned to it now.
        if let Some(waiting) = self.pending.remove(&job) {
            for k in waiting {
                let why = self.why.remove(&k);
                if view.running.iter().any(|r| r.id == k)
                    && let Some(d) = self.realign_after_reference(k)
                {
                    out.push(d);
                    out.extend(why.map(|text| Decision::Note { job: k, text }));
                }
            }
        }
        let skip = self.unmeasured.entry(job).or_insert(0);
        let left = *skip;
        *skip = skip.saturating_sub(1);
        let Some(a) = self.aligned.get(&job).copied().filter(|a| a.compatible) else { return out };
        // Past the two iterations a re-alignment takes to arrive, a relapsed
        // job's hold keeps collisions from counting, not its slot: a job off
        // its slot is re-aligned whatever collides with it.
        let holding = left > 0 && left <= RELAPSE_HOLD - 2 && self.relapses.get(&job).is_some_and(|&r| r > 0);
        if (left > 0 && !holding) || self.pending.get(&a.reference).is_some_and(|w| w.contains(&job)) {
            return out;
        }
        if self.given_up.contains(&job) {
            return out;
        }
        // Only a deferred job's alignment is weighed against its iterations
        // before: no other job keeps them.
        let deferred = self.deferred.contains(&job);
        if deferred {
            let recent = self.recent.entry(job).or_default();
            if recent.len() == EVIDENCE {
                recent.pop_front();
            }
            recent.push_back(it.own_ms());
        }
        // An alignment made on a measurement is weighed once its phase has
        // run EVIDENCE iterations: no shorter than before, it is given up.
        if let Some((before, after)) = self.trial.get_mut(&job) {
            after.push(it.own_ms());
            if after.len() == EVIDENCE {
                let (before, now) = (*before, median(after.iter().copied()));
                self.trial.remove(&job);
                if now >= 0.99 * before {
                    self.given_up.insert(job);
                    self.given_up_on_measurement += 1;
                    out.push(Decision::Note {
                        job,
                        text: format!(
                            "cassini: aligned, its iterations took {now:.1} ms (median of {EVIDENCE}) against \
                             {before:.1} ms before: no gain, left unaligned"
                        ),
                    });
                    return out;
                }
            }
        }
        let own = &self.observed[&job];
        let windows = self.observed.get(&a.reference).and_then(|r| Windows::measured(&a, own, r));
        // A deferred job was never given a slot to be off.
        let off_slot_ms = windows.as_ref().and_then(|w| w.off_slot_ms(a.comm_gap_ms())).filter(|_| !deferred);
        let off_slot = off_slot_ms.is_some();
        if holding && !off_slot {
            return out;
        }
        *self.judged.entry(job).or_insert(0) += 1;
        let overlap = windows.as_ref().map(Windows::overlap_ms);
        let collision = collision_ms(overrun_ms(&a, it, own), windows.as_ref());
        let seen = self.evidence.entry(job).or_default();
        if seen.len() == EVIDENCE {
            seen.pop_front();
        }
        seen.push_back(collision);
        let mut sorted: Vec<f64> = seen.iter().copied().collect();
        sorted.sort_by(f64::total_cmp);
        let persistent = sorted.len() == EVIDENCE && sorted[EVIDENCE / 2] > 0.05 * a.period_ms;
        if !persistent && !off_slot && collision <= HARD_COLLISION * a.period_ms {
            return out;
        }
        let median_collision = if persistent { sorted[EVIDENCE / 2] } else { collision };
        seen.clear();
        let over =
            if persistent { format!("median of its last {EVIDENCE} iterations") } else { "one iteration".into() };
        if deferred {
            self.deferred.remove(&job);
            self.applied_on_measurement += 1;
            // What the alignment must beat: the job's last iterations as
            // they ran, the one that called for it included. After one
            // collision over 25% among clear ones this is the clear ones'
            // time: on a transport that parts rings by itself (bbr on the
            // testbed) the collision passes and an alignment that keeps
            // the job at that time gained nothing; weighed against the
            // collided iteration instead it was kept, and re-aligned 5-6
            // times a run where given up it made 1-3 decisions.
            let before = median(self.recent.get(&job).into_iter().flatten().copied());
            self.trial.insert(job, (before, Vec::new()));
            let reference = name_of(view, a.reference);
            out.push(Decision::Note {
                job,
                text: format!(
                    "cassini: measured collision with {reference}: {median_collision:.1} ms ({over}), {:.0}% of \
                     its {:.1} ms period (the rule: 5% persistent, {:.0}% at once); aligning it to its slot",
                    100.0 * median_collision / a.period_ms,
                    a.period_ms,
                    100.0 * HARD_COLLISION
                ),
            });
        } else {
            self.readjustments += 1;
        }
        // What called for it, for the decision log (issue 68: which
        // measurement triggered a timing decision); a deferred job's
        // alignment has its note above.
        let why = (!deferred).then(|| match off_slot_ms {
            Some(error) => format!(
                "cassini: re-aligned: its communication started {error:+.1} ms from its slot after {}'s, over half \
                 the clearance on that side (or 5% of its {:.1} ms period)",
                name_of(view, a.reference),
                a.period_ms
            ),
            None => format!(
                "cassini: re-aligned: a collision with {} of {median_collision:.1} ms ({over}), {:.0}% of its {:.1} \
                 ms period (the rule: 5% persistent, {:.0}% at once)",
                name_of(view, a.reference),
                100.0 * median_collision / a.period_ms,
                a.period_ms,
                100.0 * HARD_COLLISION
            ),
        });
        // A relapse is a collision the reference's phase does not explain
        // (their windows apart): re-aligning after the reference again will
        // not help. One it explains is re-aligned at once.
        let explained = off_slot || overlap.is_some_and(|o| o > 0.05 * a.period_ms);
        let judged = self.judged.insert(job, 0).unwrap_or(QUICK_RELAPSE);
        let relapses = self.relapses.entry(job).or_insert(0);
        *relapses = if judged < QUICK_RELAPSE && !explained { *relapses + 1 } else { 0 };
        let settle = settle_iterations(*relapses);
        let reference = view.running.iter().find(|r| r.id == a.reference);
        let watched = a.same_period && self.observed.get(&a.reference).is_some_and(|o| o.last_end_s.is_some());
        match reference {
            Some(_) if watched => {
                self.unmeasured.insert(job, settle);
                self.pending.entry(a.reference).or_default().push(job);
                self.why.extend(why.map(|text| (job, text)));
            }
            Some(r) => {
                // Jobs of different periods: the offset repeats with the
                // job's own modelled period from the reference's start.
                self.unmeasured.insert(job, settle);
                let offset_s = r.iteration_start_s + a.shift_after_ms / 1e3;
                out.push(Decision::Align { job, period_ms: a.period_ms, offset_s });
                out.extend(why.map(|text| Decision::Note { job, text }));
            }
            None => {
                self.unmeasured.insert(job, settle);
                out.push(Decision::Align { job, period_ms: a.period_ms, offset_s: a.offset_s });
                out.extend(why.map(|text| Decision::Note { job, text }));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
