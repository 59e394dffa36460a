//! Castor (GPU colocation): the pair theorem. Two jobs that would take `t1`
//! and `t2` alone can share GPUs; while both run, job `i` is slowed by its
//! interference ratio `ξ_i` (Castor §3.2). Theorem 1: to minimise the sum
//! of their completion times, the second job either starts together with the
//! first or after it ends; a partial overlap is never better.
//!
//! Algorithms 1 (SJF-BSBF) and 2 (batch scaling) build on this and are not
//! here yet (issue #6).

/// Sum of completion times when job 2 starts `offset` after job 1 (both
/// submitted at 0) and they share while both run. O(1).
///
/// Job 1 runs alone for `offset` (capped at `t1`). Then both run: job `i`
/// has `w_i` of work left and progresses at `1/ξ_i`; the first to finish
/// does so after `min(ξ_i·w_i)`, and the other finishes its rest alone.
pub fn pair_jct_sum(t1: f64, t2: f64, xi1: f64, xi2: f64, offset: f64) -> f64 {
    let d = offset.clamp(0.0, t1);
    let (w1, w2) = (t1 - d, t2);
    if w1 <= 0.0 {
        return t1 + (t1 + t2);
    }
    let (f1, f2) = (xi1 * w1, xi2 * w2);
    if f1 <= f2 {
        // Job 1 ends at d + f1; job 2 has done f1/ξ2 and finishes the rest alone.
        let end1 = d + f1;
        let end2 = end1 + (w2 - f1 / xi2);
        end1 + end2
    } else {
        let end2 = d + f2;
        let end1 = end2 + (w1 - f2 / xi1);
        end1 + end2
    }
}

/// Theorem 1's choice for a pair: `(start together, sum)` — `true` when
/// starting both at once gives a smaller sum of completion times than
/// running the shorter first and the other after it.
pub fn pair_choice(t1: f64, t2: f64, xi1: f64, xi2: f64) -> (bool, f64) {
    let together = pair_jct_sum(t1, t2, xi1, xi2, 0.0);
    let sequential = 2.0 * t1.min(t2) + t1.max(t2);
    if together < sequential { (true, together) } else { (false, sequential) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_two_cases_by_hand() {
        // No interference: sharing wins, both end at their own length.
        assert_eq!(pair_jct_sum(1.0, 2.0, 1.0, 1.0, 0.0), 3.0);
        assert_eq!(pair_choice(1.0, 2.0, 1.0, 1.0), (true, 3.0));
        // Time slicing (ξ = 2 for both): job 1 ends at 2, job 2 at 2 + 1 = 3;
        // 5 against 1 + 3 = 4 back to back.
        assert_eq!(pair_jct_sum(1.0, 2.0, 2.0, 2.0, 0.0), 5.0);
        assert_eq!(pair_choice(1.0, 2.0, 2.0, 2.0), (false, 4.0));
        // Starting job 2 after job 1 is the sequential schedule.
        assert_eq!(pair_jct_sum(1.0, 2.0, 2.0, 2.0, 1.0), 4.0);
    }

    proptest! {
        /// Theorem 1: over every start offset, the best sum is at offset 0
        /// or at the end of job 1.
        #[test]
        fn partial_overlap_never_wins(
            t1 in 0.1f64..10.0, t2 in 0.1f64..10.0, xi1 in 1.0f64..3.0, xi2 in 1.0f64..3.0,
        ) {
            let ends = pair_jct_sum(t1, t2, xi1, xi2, 0.0).min(pair_jct_sum(t1, t2, xi1, xi2, t1));
            for k in 0..=50 {
                let d = t1 * f64::from(k) / 50.0;
                prop_assert!(pair_jct_sum(t1, t2, xi1, xi2, d) >= ends - 1e-9);
            }
        }
    }
}
