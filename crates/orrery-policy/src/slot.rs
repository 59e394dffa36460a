//! When an iteration may start: the meaning of `Shift`, `Align` and `Pace`
//! in one function, so the simulator and the live node agents agree to the
//! nanosecond (one core, two drivers: ARCHITECTURE.md).
//!
//! Times are nanoseconds on the cluster's clock (0 = the driver's start);
//! offsets and periods come from the decisions in force.

/// How late past an `Align`'s instant, as a share of its period, an
/// iteration still takes that instant (and starts at once) rather than
/// waiting for the next one. An `Align` is decided on a prediction of the
/// job's next start; on real TCP that prediction is off by tens of ms (an
/// all-reduce's noise), and a job the policy saw a few ms early arrived a
/// few ms late and waited a whole period (on the testbed's DDP pair under a
/// busy CPU, 405-451 ms, three or four times a run: most of what the shift
/// lost). A start this late is inside CASSINI's 5% drift bar (§5.7), so the
/// phase it keeps is the slot's.
pub const ALIGN_GRACE: f64 = 0.05;

/// Nanoseconds from `now_ns` until the next iteration may start.
///
/// * `shift_ms`: time-shifts not yet applied (CASSINI's shift, FORESIGHT's
///   per-iteration delay); always waited in full.
/// * `align`: `(period_ns, offset_ns)` of a pending `Align` (applied once):
///   wait until `t ≡ offset (mod period)` (CASSINI §4.2, the agent aligning
///   a job to its time-shift on a common clock); one past that instant by
///   under [`ALIGN_GRACE`] of the period starts at once.
/// * `pace`: `(period_ns, offset_ns)` of the `Pace` in force (every
///   iteration; Metronome §III-B's TDM slot): an iteration due less than
///   half a period before its slot idles until it; one late by less than
///   half a period starts at once and catches up by idling less next time.
///
/// O(1).
pub fn start_delay_ns(now_ns: u64, shift_ms: f64, align: Option<(u64, u64)>, pace: Option<(u64, u64)>) -> u64 {
    let mut shift = if shift_ms.is_finite() { shift_ms.max(0.0) } else { 0.0 };
    if let Some((period, offset)) = align {
        let period = period.max(1) as i128;
        let wait = (offset as i128 - (now_ns + (shift * 1e6) as u64) as i128).rem_euclid(period);
        if (period - wait) as f64 > ALIGN_GRACE * period as f64 {
            shift += wait as f64 / 1e6;
        }
    }
    if let Some((period, offset)) = pace {
        let period = period.max(1) as i128;
        let wait = (offset as i128 - (now_ns + (shift * 1e6) as u64) as i128).rem_euclid(period);
        if wait <= period / 2 {
            shift += wait as f64 / 1e6;
        }
    }
    (shift * 1e6).round() as u64
}

/// The first instant at or after `t_s` that is `≡ offset_s (mod period_ms)`,
/// or the one before when `t_s` is past it by under [`ALIGN_GRACE`] of the
/// period, s: where a live driver starts the iteration an `Align` applies
/// to, from that iteration's predicted start. The simulator's
/// [`start_delay_ns`] rounds the same way from the iteration's actual
/// start. O(1).
pub fn aligned_start_s(t_s: f64, period_ms: f64, offset_s: f64) -> f64 {
    let period_s = period_ms / 1e3;
    if !(period_s > 0.0 && period_s.is_finite() && t_s.is_finite() && offset_s.is_finite()) {
        return t_s;
    }
    let wait = (offset_s - t_s).rem_euclid(period_s);
    // An instant in phase up to rounding (1 ns) is itself.
    if period_s - wait < 1e-9 {
        t_s
    } else if period_s - wait < ALIGN_GRACE * period_s {
        t_s + wait - period_s
    } else {
        t_s + wait
    }
}

/// Most entries a timetable may hold (a policy hands out the next few).
pub const MAX_TIMETABLE: usize = 4096;

/// Whether a `Decision::Timetable`'s starts are valid, in both drivers:
/// finite and at most [`MAX_TIMETABLE`] of them. O(entries).
pub fn timetable_is_valid(starts_s: &[f64]) -> bool {
    starts_s.len() <= MAX_TIMETABLE && starts_s.iter().all(|t| t.is_finite())
}

/// Nanoseconds from `now_ns` until the iteration begun with `done`
/// iterations done may start under a timetable (`Decision::Timetable`):
/// until its listed start, or 0 when it is not listed or already due. The
/// driver waits the longer of this and [`start_delay_ns`]. O(1).
pub fn timetable_wait_ns(now_ns: u64, done: u64, from_iteration: u64, starts_ns: &[u64]) -> u64 {
    done.checked_sub(from_iteration)
        .and_then(|i| starts_ns.get(usize::try_from(i).ok()?))
        .map_or(0, |&t| t.saturating_sub(now_ns))
}

#[cfg(test)]
mod tests {
    use super::{aligned_start_s, start_delay_ns, timetable_wait_ns};

    #[test]
    fn a_timetable_holds_each_listed_iteration_to_its_start() {
        // Iterations 10, 11, 12 (counted by iterations done) at 1.0, 1.5, 2.0 s.
        let starts = [1_000 * MS, 1_500 * MS, 2_000 * MS];
        // The 11th, due at 1.2 s, waits until 1.5 s.
        assert_eq!(timetable_wait_ns(1_200 * MS, 11, 10, &starts), 300 * MS);
        // Late: it starts at once.
        assert_eq!(timetable_wait_ns(1_600 * MS, 11, 10, &starts), 0);
        // Before or past the list: no wait.
        assert_eq!(timetable_wait_ns(0, 9, 10, &starts), 0);
        assert_eq!(timetable_wait_ns(0, 13, 10, &starts), 0);
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn shift_is_waited_in_full() {
        assert_eq!(start_delay_ns(5 * MS, 12.5, None, None), 12_500_000);
    }

    #[test]
    fn align_waits_for_the_phase() {
        // Period 100 ms, phase 30 ms; at t = 250 ms the next start is 330 ms.
        assert_eq!(start_delay_ns(250 * MS, 0.0, Some((100 * MS, 30 * MS)), None), 80 * MS);
        // After a 10 ms shift the phase is still 330 ms.
        assert_eq!(start_delay_ns(250 * MS, 10.0, Some((100 * MS, 30 * MS)), None), 80 * MS);
        // 4 ms past the 230 ms instant (under 5% of the period): at once,
        // not 96 ms later; 6 ms past it, the next instant.
        assert_eq!(start_delay_ns(234 * MS, 0.0, Some((100 * MS, 30 * MS)), None), 0);
        assert_eq!(start_delay_ns(236 * MS, 0.0, Some((100 * MS, 30 * MS)), None), 94 * MS);
    }

    #[test]
    fn an_aligned_start_is_the_next_instant_of_the_phase() {
        // Period 100 ms, phase 30 ms: from 250 ms the next is 330 ms, as
        // the simulator's wait above; at 330 ms itself, 330 ms (no wait).
        assert!((aligned_start_s(0.250, 100.0, 0.030) - 0.330).abs() < 1e-12);
        assert!((aligned_start_s(0.330, 100.0, 0.030) - 0.330).abs() < 1e-12);
        // An offset far in the past or the future names the same phase.
        assert!((aligned_start_s(0.250, 100.0, 7.030) - 0.330).abs() < 1e-9);
        // No period: the instant itself.
        assert_eq!(aligned_start_s(0.25, 0.0, 0.03), 0.25);
        // Predicted 4 ms past the 230 ms instant: that instant (the job
        // starts at once when it comes), as the simulator's wait above.
        assert!((aligned_start_s(0.234, 100.0, 0.030) - 0.230).abs() < 1e-12);
        assert!((aligned_start_s(0.236, 100.0, 0.030) - 0.330).abs() < 1e-12);
    }

    #[test]
    fn pace_idles_when_early_and_goes_when_late() {
        // Slot at 300 ms of period 100: 40 ms early idles 40 ms.
        assert_eq!(start_delay_ns(260 * MS, 0.0, None, Some((100 * MS, 0))), 40 * MS);
        // 10 ms late (next slot 90 ms away, more than half a period): go now.
        assert_eq!(start_delay_ns(310 * MS, 0.0, None, Some((100 * MS, 0))), 0);
    }
}
