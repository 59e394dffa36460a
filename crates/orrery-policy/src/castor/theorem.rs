//! Castor (GPU colocation): the pair theorem. Two jobs that would take `t1`
//! and `t2` alone can share GPUs; while both run, job `i` is slowed by its
//! interference ratio `ξ_i` (Castor §3.2). Theorem 1: to minimise the sum
//! of their completion times, the second job either starts together with the
//! first or after it ends; a partial overlap is never better.
//!
//! Algorithm 2 (batch scaling) searches the new job's sub-batch on top of
//! it; Algorithm 1 (SJF-BSBF), the scheduler that uses both, is
//! [`crate::castor::colocate`] with `Rule::Bsbf` (policy `castor`).

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

/// What Theorem 1 compares sharing with.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum BackToBack {
    /// The paper's κ = t_A·i_A: the running job (1) ends, then the newcomer
    /// (2) starts, since scheduling is not preemptive: sum 2·t1 + t2.
    #[default]
    RunningFirst,
    /// The shorter job first, whichever it is: sum 2·min + max. Orrery's
    /// earlier rule (policy `castor:shorter-first`); it counts on an order
    /// that is not available when the running job is the longer one.
    ShorterFirst,
    /// orrery's: the newcomer otherwise starts on the next free GPUs, which
    /// the scheduler expects after `wait_s` (running jobs' remaining times;
    /// at most the partner's, whose end frees its GPUs): sum
    /// `t1 + min(wait, t1) + t2`. Sharing slows both jobs by ξ; it pays
    /// only when waiting for *any* GPUs costs more, not just waiting for
    /// this partner (issue 38).
    NextFree {
        /// Seconds until enough GPUs are free for the newcomer.
        wait_s: f64,
    },
}

/// Theorem 1's choice for a pair: `(start together, sum)` — `true` when
/// starting the newcomer (job 2) now, beside the running job 1, gives a
/// smaller sum of completion times than running them back to back.
pub fn pair_choice(t1: f64, t2: f64, xi1: f64, xi2: f64, back_to_back: BackToBack) -> (bool, f64) {
    let together = pair_jct_sum(t1, t2, xi1, xi2, 0.0);
    let sequential = match back_to_back {
        BackToBack::RunningFirst => 2.0 * t1 + t2,
        BackToBack::ShorterFirst => 2.0 * t1.min(t2) + t1.max(t2),
        BackToBack::NextFree { wait_s } => t1 + wait_s.clamp(0.0, t1) + t2,
    };
    if together < sequential { (true, together) } else { (false, sequential) }
}

/// Algorithm 2's answer: whether the new job should share, with which
/// per-GPU sub-batch (its batch reached by gradient accumulation), and the
/// pair's sum of completion times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scaling {
    /// Share the GPUs (SF).
    pub share: bool,
    /// Sub-batch per GPU (b̄).
    pub sub_batch: u32,
    /// Sum of the pair's completion times, s (t̄).
    pub jct_sum: f64,
}

/// Algorithm 2 (Batch Size Scaling with Best Sharing Benefit): for the new
/// job's sub-batch `b = B, B/2, …, 1`, Theorem 1 decides between sharing and
/// running back to back, and the best pair sum wins (ties to the larger
/// sub-batch). `run_left_s` is the running job's remaining time alone;
/// `new_time_s(b)` the new job's time alone at sub-batch `b` (None when `b`
/// does not fit the GPU memory left beside the running job); `xi(b)` the
/// pair's interference ratios (running, new). The running job's batch is
/// not changed. O(log B) calls.
pub fn batch_scaling(
    batch: u32,
    run_left_s: f64,
    new_time_s: impl Fn(u32) -> Option<f64>,
    xi: impl Fn(u32) -> (f64, f64),
    back_to_back: BackToBack,
) -> Option<Scaling> {
    let mut best: Option<Scaling> = None;
    let mut b = batch.max(1);
    loop {
        if let Some(t_new) = new_time_s(b) {
            let (xi_run, xi_new) = xi(b);
            let (share, sum) = pair_choice(run_left_s, t_new, xi_run, xi_new, back_to_back);
            if best.is_none_or(|x| sum < x.jct_sum) {
                best = Some(Scaling { share, sub_batch: b, jct_sum: sum });
            }
        }
        if b == 1 {
            return best;
        }
        b /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_two_cases_by_hand() {
        // No interference: sharing wins, both end at their own length.
        assert_eq!(pair_jct_sum(1.0, 2.0, 1.0, 1.0, 0.0), 3.0);
        assert_eq!(pair_choice(1.0, 2.0, 1.0, 1.0, BackToBack::RunningFirst), (true, 3.0));
        // Time slicing (ξ = 2 for both): job 1 ends at 2, job 2 at 2 + 1 = 3;
        // 5 against 1 + 3 = 4 back to back.
        assert_eq!(pair_jct_sum(1.0, 2.0, 2.0, 2.0, 0.0), 5.0);
        assert_eq!(pair_choice(1.0, 2.0, 2.0, 2.0, BackToBack::RunningFirst), (false, 4.0));
        // Starting job 2 after job 1 is the sequential schedule.
        assert_eq!(pair_jct_sum(1.0, 2.0, 2.0, 2.0, 1.0), 4.0);
    }

    #[test]
    fn sharing_must_beat_the_next_free_gpus_not_only_the_partner() {
        // The issue-17 pair (1,800 s left, a 600 s newcomer, ξ = 2): together
        // 3,600. Against the partner ending first (4,200) it shares; when
        // other GPUs free up in 300 s, waiting gives 1,800 + 300 + 600 =
        // 2,700, so it waits. With 1,300 s to wait, 3,700 > 3,600: it shares.
        assert_eq!(pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::RunningFirst), (true, 3600.0));
        assert_eq!(pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::NextFree { wait_s: 300.0 }), (false, 2700.0));
        assert_eq!(pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::NextFree { wait_s: 1300.0 }), (true, 3600.0));
        // A wait past the partner's end is the paper's rule (its GPUs free up).
        assert_eq!(
            pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::NextFree { wait_s: 1e9 }),
            pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::RunningFirst)
        );
    }

    #[test]
    fn a_short_newcomer_shares_with_a_long_running_job_under_time_slicing() {
        // Issue 17's case: 1,800 s left on the running job, a 600 s
        // newcomer, ξ = 2 both ways. Together: the newcomer ends at 1,200 s
        // and the running job at 1,200 + (1,800 − 600) = 2,400 s, sum 3,600.
        // The paper's back to back (the running job first, κ = t_A·i_A):
        // 1,800 + 2,400 = 4,200, so it shares. Shorter first would be
        // 600 + 2,400 = 3,000, an order not on offer while the long job runs.
        assert_eq!(pair_jct_sum(1800.0, 600.0, 2.0, 2.0, 0.0), 3600.0);
        assert_eq!(pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::RunningFirst), (true, 3600.0));
        assert_eq!(pair_choice(1800.0, 600.0, 2.0, 2.0, BackToBack::ShorterFirst), (false, 3000.0));
        // A newcomer nearly as long as the running job does not gain:
        // together 3,400 + 3,500 = 6,900 against 1,800 + 3,500 = 5,300.
        assert_eq!(pair_choice(1800.0, 1700.0, 2.0, 2.0, BackToBack::RunningFirst), (false, 5300.0));
    }

    #[test]
    fn batch_scaling_trades_memory_for_accumulation() {
        // The new job's batch 64 does not fit beside the running job; 32 and
        // below do, each halving costing 10% more time alone (accumulation).
        let new_time = |b: u32| (b <= 32).then(|| 100.0 * (1.0 + 0.1 * (64.0 / f64::from(b)).log2()));
        // Light interference: sharing pays, at the largest sub-batch that fits.
        let s = batch_scaling(64, 200.0, new_time, |_| (1.2, 1.2), BackToBack::RunningFirst).expect("some batch fits");
        assert_eq!((s.share, s.sub_batch), (true, 32));
        let t_new = 110.0;
        assert!((s.jct_sum - pair_jct_sum(200.0, t_new, 1.2, 1.2, 0.0)).abs() < 1e-9);
        // Heavy interference at large sub-batches only: a smaller one wins.
        let xi = |b: u32| if b >= 16 { (2.0, 2.0) } else { (1.05, 1.05) };
        let s = batch_scaling(64, 200.0, new_time, xi, BackToBack::RunningFirst).expect("fits");
        assert_eq!((s.share, s.sub_batch), (true, 8));
        // Time slicing everywhere: run back to back (SF false), full batch
        // that fits (110 s beside 200 s: 220 + 310 = 530 together, 510 after).
        let s = batch_scaling(64, 200.0, new_time, |_| (2.0, 2.0), BackToBack::RunningFirst).expect("fits");
        assert_eq!((s.share, s.sub_batch), (false, 32));
        // Nothing fits: no configuration.
        assert_eq!(batch_scaling(64, 200.0, |_| None, |_| (1.0, 1.0), BackToBack::RunningFirst), None);
    }

    proptest! {
        /// Time slicing slows each job by the other's share of the GPU
        /// (ξ_1 = 1 + c_2/c_1, ξ_2 = 1 + c_1/c_2 for per-iteration compute
        /// c): processor sharing, which never beats the shorter job first
        /// (SRPT is optimal on one server), but does beat waiting for a
        /// running job much longer than the newcomer.
        #[test]
        fn time_slicing_never_beats_shorter_first_but_beats_waiting_for_a_long_job(
            t1 in 1.0f64..10_000.0, t2 in 1.0f64..10_000.0, c_ratio in 0.1f64..10.0,
        ) {
            let (xi1, xi2) = (1.0 + c_ratio, 1.0 + 1.0 / c_ratio);
            let together = pair_jct_sum(t1, t2, xi1, xi2, 0.0);
            prop_assert!(together >= 2.0 * t1.min(t2) + t1.max(t2) - 1e-9 * (t1 + t2));
            prop_assert!(!pair_choice(t1, t2, xi1, xi2, BackToBack::ShorterFirst).0);
            // A newcomer a hundredth of the running job's time left, slowed by
            // at most 11 (c_ratio ≥ 0.1), ends long before it: sharing pays.
            let short = t1 / 100.0;
            prop_assert!(pair_choice(t1, short, xi1, 1.0 + 1.0 / c_ratio, BackToBack::RunningFirst).0);
        }

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
