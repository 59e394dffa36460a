//! Measured periods: a robust estimate of how long a job's iterations really
//! take, from the iterations it reports. Timing decisions (Metronome's slots,
//! CASSINI's re-alignments, the live ledger's `period_ms`) use it instead of
//! the modelled iteration time alone. On real TCP, iterations run a few
//! percent longer than modelled, and a schedule timed with the model drifts
//! out of phase (docs/results.md, "The testbed").
//!
//! The estimate is a windowed median with Hampel's outlier rule. It keeps
//! the last `window` samples. It drops those farther than [`REJECT_MADS`]
//! scaled median absolute deviations (1.4826 · MAD, σ for normal noise) from
//! their median. It returns the median of the rest. A median ignores a
//! collision or a late report that stretches one iteration. A mean would
//! carry them for the whole window. Samples that include a wait the
//! scheduler imposed are not the job's own time, and the caller leaves them
//! out ([`PeriodEstimate::observe`]). With no jitter every sample is the
//! modelled time, so the simulator's results are those of the model.

use std::collections::VecDeque;

/// Samples farther than this many scaled MADs from the median are outliers
/// (Hampel's rule; 3 keeps 99.7% of normal noise).
pub const REJECT_MADS: f64 = 3.0;

/// MAD of a normal distribution times this is its σ.
const MAD_TO_SIGMA: f64 = 1.4826;

/// A robust running estimate of an iteration period, ms.
#[derive(Debug, Clone)]
pub struct PeriodEstimate {
    samples: VecDeque<f64>,
    window: usize,
    min_samples: usize,
}

impl Default for PeriodEstimate {
    fn default() -> Self {
        PeriodEstimate::new(16, 3)
    }
}

impl PeriodEstimate {
    /// Keeps the last `window` samples (at least 1) and gives no estimate
    /// from fewer than `min_samples` (at least 1).
    pub fn new(window: usize, min_samples: usize) -> Self {
        let window = window.max(1);
        PeriodEstimate { samples: VecDeque::with_capacity(window), window, min_samples: min_samples.clamp(1, window) }
    }

    /// Records one measured period, ms. A sample that is not a positive
    /// finite number, or that includes a wait the scheduler imposed
    /// (`imposed_wait`), is ignored; returns whether it was kept. O(1).
    pub fn observe(&mut self, ms: f64, imposed_wait: bool) -> bool {
        if imposed_wait || !(ms.is_finite() && ms > 0.0) {
            return false;
        }
        if self.samples.len() == self.window {
            self.samples.pop_front();
        }
        self.samples.push_back(ms);
        true
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.samples.len()
    }

    /// Whether it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// Forgets every sample (the job's placement or shape changed).
    pub fn clear(&mut self) {
        self.samples.clear();
    }

    /// The estimate, ms: the median of the samples within [`REJECT_MADS`]
    /// scaled MADs of their median; None with fewer than `min_samples`.
    /// O(w log w) for a window of w.
    pub fn period_ms(&self) -> Option<f64> {
        if self.samples.len() < self.min_samples {
            return None;
        }
        let mut v: Vec<f64> = self.samples.iter().copied().collect();
        let med = median(&mut v);
        let mut dev: Vec<f64> = v.iter().map(|x| (x - med).abs()).collect();
        let limit = REJECT_MADS * MAD_TO_SIGMA * median(&mut dev);
        let mut kept: Vec<f64> = v.into_iter().filter(|x| (x - med).abs() <= limit).collect();
        Some(if kept.is_empty() { med } else { median(&mut kept) })
    }

    /// The estimate, or `model_ms` while there are too few samples.
    pub fn or_model(&self, model_ms: f64) -> f64 {
        self.period_ms().unwrap_or(model_ms)
    }
}

/// The median of a few values, the upper one of an even count (0 for
/// none): what the measured-first rules weigh a window by (CASSINI's drift
/// rule, Metronome's gate). O(n log n).
pub(crate) fn upper_median(values: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Median of a non-empty slice (sorted in place; the mean of the middle two
/// for an even length).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

#[cfg(test)]
mod tests {
    use super::PeriodEstimate;

    #[test]
    fn without_noise_the_estimate_is_the_sample() {
        let mut e = PeriodEstimate::default();
        assert_eq!(e.period_ms(), None);
        assert_eq!(e.or_model(483.2), 483.2);
        for _ in 0..3 {
            e.observe(483.2, false);
        }
        assert_eq!(e.period_ms(), Some(483.2));
    }

    #[test]
    fn a_collision_does_not_move_it_and_a_mean_would() {
        // Twelve iterations of 500 ms ± 2, then one stretched to 700 ms by a
        // collision: the median of the 13 is one of the 500s; the mean
        // would be 515.4 ms.
        let mut e = PeriodEstimate::new(16, 3);
        let noise = [0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1.5, -1.5, 0.0, 1.0, -1.0];
        for d in noise {
            e.observe(500.0 + d, false);
        }
        e.observe(700.0, false);
        let p = e.period_ms().expect("an estimate");
        assert!((p - 500.0).abs() <= 0.5, "{p}");
    }

    #[test]
    fn imposed_waits_and_garbage_are_left_out() {
        let mut e = PeriodEstimate::new(4, 1);
        assert!(!e.observe(900.0, true));
        assert!(!e.observe(f64::NAN, false));
        assert!(!e.observe(-3.0, false));
        assert!(e.observe(480.0, false));
        assert_eq!(e.period_ms(), Some(480.0));
    }

    #[test]
    fn it_follows_a_change_within_a_window() {
        // A job that slows from 450 to 500 ms: after half a window plus one
        // the median is the new time.
        let mut e = PeriodEstimate::new(8, 3);
        for _ in 0..8 {
            e.observe(450.0, false);
        }
        for _ in 0..5 {
            e.observe(500.0, false);
        }
        assert_eq!(e.period_ms(), Some(500.0));
        assert_eq!(e.len(), 8);
    }

    #[test]
    fn outliers_beyond_three_mads_are_dropped() {
        // 100, 101, 102, 103, 104, 150, 160: median 103, MAD 2 (|dev| of
        // 3,2,1,0,1,47,57 → median 2), limit 3 × 1.4826 × 2 = 8.9: the two
        // large ones go, and the median of the five left is 102.
        let mut e = PeriodEstimate::new(8, 3);
        for x in [100.0, 101.0, 102.0, 103.0, 104.0, 150.0, 160.0] {
            e.observe(x, false);
        }
        assert_eq!(e.period_ms(), Some(102.0));
    }
}
