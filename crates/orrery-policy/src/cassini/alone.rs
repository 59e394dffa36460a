//! The circle a job has alone, measured from the iterations it reports, and
//! where its latest iteration ended: what CASSINI aligns with (issue 73).
//!
//! A time-shift is only right on the circles it was computed on: each job's
//! iteration *alone* (CASSINI §3: compute, then communication at the link's
//! rate). An iteration measured while two jobs collide is longer by the
//! collision, and a phase extrapolated with it lands a re-aligned job back
//! onto its partner's communication. On the testbed's real DDP pair a
//! reference extrapolated over three of its contended iterations (836, 827
//! and 785 ms) with a measured 748 ms put the partner 206 ms early, into
//! the reference's all-reduce (docs/results.md, "the shift on real DDP
//! jobs"). So the period is rebuilt from its parts:
//!
//! * **compute** (own time less communication): contention does not touch
//!   it, so every iteration measures it (a windowed median,
//!   [`PeriodEstimate`]);
//! * **communication alone**: a collision only lengthens an all-reduce, so
//!   the job's fastest recent all-reduces are the ones it ran alone: the
//!   median of those within [`ALONE_BAND`] of the fastest in the window. A
//!   job whose fastest all-reduce still took over [`NEVER_ALONE`] times the
//!   model's has not run alone since it was placed (two rings in step the
//!   whole time): the model's communication stands until it has.
//!
//! Without a measured communication (a driver that reports iteration times
//! only), the job's own iteration time is all there is: its windowed median.

use crate::estimate::{PeriodEstimate, upper_median};
use std::collections::VecDeque;

/// All-reduces kept per job (the fastest of them is taken as alone).
pub(super) const COMM_WINDOW: usize = 32;

/// An all-reduce within this fraction of the window's fastest counts as
/// alone. A collision of two equal rings doubles an all-reduce; real TCP's
/// noise alone is a few percent (docs/results.md, the testbed).
pub(super) const ALONE_BAND: f64 = 0.15;

/// A fastest all-reduce over this many times the model's was never alone.
/// Real TCP runs 10–20% over the fluid model alone (per-step barriers,
/// slow start); a collision of two rings 2x, and two DDP rings in step on
/// the testbed 1.4-1.8x (at 1.5 a pair started in step took its partly
/// collided all-reduces as alone, and a 963 ms period for 793).
pub(super) const NEVER_ALONE: f64 = 1.3;

/// An all-reduce over this many times its time alone collided: a second
/// ring in it doubles it (the testbed tests' bar).
pub(super) const COLLIDED: f64 = 1.4;

/// What CASSINI has measured of one job on its current placement.
#[derive(Debug, Clone)]
pub(super) struct Observed {
    /// Compute per iteration, ms (own time less communication).
    compute: PeriodEstimate,
    /// Own iteration time, ms, for drivers that do not measure communication.
    own: PeriodEstimate,
    /// The latest [`COMM_WINDOW`] all-reduces, ms.
    comm: VecDeque<f64>,
    /// Where its latest reported iteration ended (its current one began),
    /// cluster-clock s.
    pub(super) last_end_s: Option<f64>,
    /// Its latest reported iteration's communication start, cluster-clock s,
    /// and how long that iteration's communication took, ms.
    pub(super) last_comm: Option<(f64, f64)>,
}

impl Default for Observed {
    fn default() -> Self {
        Observed {
            compute: PeriodEstimate::new(16, 1),
            own: PeriodEstimate::new(16, 1),
            comm: VecDeque::with_capacity(COMM_WINDOW),
            last_end_s: None,
            last_comm: None,
        }
    }
}

impl Observed {
    /// Records one iteration that ended at `end_s` (cluster clock): `own_ms`
    /// of its own time (waits left out) and `comm_ms` of communication when
    /// the driver measured it. O(1).
    pub(super) fn observe(&mut self, end_s: f64, own_ms: f64, comm_ms: Option<f64>) {
        if end_s.is_finite() {
            self.last_end_s = Some(end_s);
        }
        self.own.observe(own_ms, false);
        match comm_ms.filter(|c| c.is_finite() && *c >= 0.0) {
            Some(comm) => {
                self.compute.observe((own_ms - comm).max(0.0), false);
                if self.comm.len() == COMM_WINDOW {
                    self.comm.pop_front();
                }
                self.comm.push_back(comm);
                self.last_comm = end_s.is_finite().then_some((end_s - comm / 1e3, comm));
            }
            None => self.last_comm = None,
        }
    }

    /// Whether the driver reports this job's communication.
    pub(super) fn measures_comm(&self) -> bool {
        !self.comm.is_empty()
    }

    /// Its compute per iteration, ms, or `model_ms` until measured. O(w log w).
    pub(super) fn compute_ms(&self, model_ms: f64) -> f64 {
        self.compute.or_model(model_ms)
    }

    /// Its fastest recent all-reduce, ms, or None when none is measured or
    /// it has never run alone (even the fastest over [`NEVER_ALONE`] times
    /// the model's `model_ms`). O(window).
    fn fastest_alone_ms(&self, model_ms: f64) -> Option<f64> {
        let fastest = self.comm.iter().copied().min_by(f64::total_cmp)?;
        (model_ms <= 0.0 || fastest <= NEVER_ALONE * model_ms).then_some(fastest)
    }

    /// Its communication alone, ms (the module doc's rule), or `model_ms`
    /// until it has run alone. O(window log window).
    pub(super) fn comm_alone_ms(&self, model_ms: f64) -> f64 {
        let Some(fastest) = self.fastest_alone_ms(model_ms) else { return model_ms };
        let mut alone: Vec<f64> = self.comm.iter().copied().filter(|&c| c <= (1.0 + ALONE_BAND) * fastest).collect();
        alone.sort_by(f64::total_cmp);
        alone[alone.len() / 2]
    }

    /// Its iteration as it runs when nothing collides with it, ms: measured
    /// compute plus the median of its recent all-reduces under [`COLLIDED`]
    /// times its all-reduce alone; without a measured communication, its
    /// own iteration time, and while it has never run alone its period
    /// alone, as [`Observed::period_alone_ms`].
    ///
    /// This, not the period alone, is how fast its phase moves: a slot
    /// extrapolated a period or two ahead lands where its iterations will
    /// really be. On real TCP the typical clear all-reduce runs over the
    /// fastest ones (on the testbed's DDP pair under a busy CPU, 155-165 ms
    /// against 150 alone), and the period alone put a partner 8-16 ms early
    /// for each period extrapolated: a third to half of its slot's
    /// tolerance. Collided all-reduces stay out, as for the period alone
    /// (issue 73). O(window log window).
    pub(super) fn period_clear_ms(&self, model_period_ms: f64, model_comm_ms: f64) -> f64 {
        if !self.measures_comm() {
            return self.own.or_model(model_period_ms);
        }
        // Never alone (the module doc's rule): nothing measured is clear.
        if self.fastest_alone_ms(model_comm_ms).is_none() {
            return self.period_alone_ms(model_period_ms, model_comm_ms);
        }
        let alone = self.comm_alone_ms(model_comm_ms);
        let clear = upper_median(self.comm.iter().copied().filter(|&c| c <= COLLIDED * alone));
        let comm = if clear > 0.0 { clear } else { alone };
        self.compute_ms(model_period_ms - model_comm_ms) + comm
    }

    /// Its iteration alone, ms: measured compute plus communication alone;
    /// without a measured communication, its own iteration time; the
    /// model's (`model_period_ms`, `model_comm_ms` of it communication)
    /// until measured.
    pub(super) fn period_alone_ms(&self, model_period_ms: f64, model_comm_ms: f64) -> f64 {
        if self.measures_comm() {
            self.compute_ms(model_period_ms - model_comm_ms) + self.comm_alone_ms(model_comm_ms)
        } else {
            self.own.or_model(model_period_ms)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Observed;

    #[test]
    fn a_contended_history_gives_the_period_alone() {
        // Issue 73's run 3 by hand: a DDP ring of 450 ms compute and a
        // 341 ms all-reduce alone (791 ms) runs four iterations alone, then
        // twelve in step with its partner, each all-reduce stretched to
        // 487-597 ms by the collision (iterations of 937-1,047 ms, the
        // periods the service's log showed). Its period alone is still
        // 450 + 341 = 791 ms, not the contended ~990 ms a median of its
        // iterations gives.
        let mut o = Observed::default();
        let mut end = 0.0;
        let mut iterations = Vec::new();
        for k in 0..16 {
            let comm = if k < 4 { 341.0 + [0.0, 3.0, -2.0, 1.0][k] } else { 487.0 + 10.0 * (k - 4) as f64 };
            let own = 450.0 + [0.0, 2.0, -2.0, 1.0][k % 4] + comm;
            end += own / 1e3;
            o.observe(end, own, Some(comm));
            iterations.push(own);
        }
        iterations.sort_by(f64::total_cmp);
        let contended = iterations[8];
        assert!(contended > 930.0, "the median iteration is contended: {contended}");
        let p = o.period_alone_ms(800.0, 340.0);
        assert!((p - 791.5).abs() < 2.0, "period alone {p} ms, expected 450.5 + 341 ms");
        // Its last iteration's communication began at its end less 597 ms.
        let (start, comm) = o.last_comm.expect("measured");
        assert!((comm - 597.0).abs() < 1e-9 && (o.last_end_s.expect("an end") - start - 0.597).abs() < 1e-9);
    }

    #[test]
    fn a_job_never_alone_keeps_the_models_communication() {
        // Every all-reduce collided (2x the model's 300 ms): nothing was
        // measured alone, so the model's 300 ms stands, with the measured
        // compute (510 ms against the model's 500).
        let mut o = Observed::default();
        for k in 0..10 {
            o.observe(k as f64, 510.0 + 600.0 + k as f64, Some(600.0 + k as f64));
        }
        assert!((o.period_alone_ms(800.0, 300.0) - 810.0).abs() < 1e-9, "{}", o.period_alone_ms(800.0, 300.0));
        // Real TCP alone, 15% over the model with noise: taken as measured.
        let mut o = Observed::default();
        for (k, c) in [345.0, 350.0, 342.0, 690.0, 700.0, 348.0].into_iter().enumerate() {
            o.observe(k as f64, 500.0 + c, Some(c));
        }
        assert_eq!(o.comm_alone_ms(300.0), 348.0);
    }

    #[test]
    fn the_clear_period_is_the_typical_uncollided_iteration() {
        // A DDP ring on real TCP beside a busy CPU: 250 ms of compute,
        // all-reduces of 146-195 ms when clear and two collided ones (290,
        // 300 ms). Alone: the median of the fastest band (146-167.9 ms,
        // seven of them) is 152 ms. Clear: the upper median of the twelve
        // under 1.4 x 152 = 212.8 ms is 166 ms, 14 ms more a period.
        let mut o = Observed::default();
        let comms = [146.0, 148.0, 150.0, 152.0, 154.0, 162.0, 166.0, 170.0, 175.0, 182.0, 190.0, 195.0, 290.0, 300.0];
        for (k, c) in comms.into_iter().enumerate() {
            o.observe(k as f64, 250.0 + c, Some(c));
        }
        assert_eq!(o.comm_alone_ms(150.0), 152.0);
        assert_eq!(o.period_alone_ms(400.0, 150.0), 402.0);
        assert_eq!(o.period_clear_ms(400.0, 150.0), 416.0);
        // Never alone (every all-reduce 1.35x the model's 150 ms, two
        // rings in step from the start): the model's all-reduce, not the
        // in-step one, as for the period alone.
        let mut o = Observed::default();
        for k in 0..8 {
            o.observe(k as f64, 250.0 + 202.5, Some(202.5));
        }
        assert_eq!(o.period_clear_ms(400.0, 150.0), 400.0);
        // Without a measured communication both are its own time.
        let mut o = Observed::default();
        o.observe(1.0, 820.0, None);
        assert_eq!(o.period_clear_ms(800.0, 300.0), 820.0);
    }

    #[test]
    fn without_communication_measured_the_own_time_counts() {
        let mut o = Observed::default();
        assert_eq!(o.period_alone_ms(800.0, 300.0), 800.0, "the model's until measured");
        for ms in [820.0, 818.0, 822.0] {
            o.observe(1.0, ms, None);
        }
        assert_eq!(o.period_alone_ms(800.0, 300.0), 820.0);
        assert!(o.last_comm.is_none());
    }
}
