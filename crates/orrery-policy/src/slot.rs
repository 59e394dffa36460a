//! When an iteration may start: the meaning of `Shift`, `Align` and `Pace`
//! in one function, so the simulator and the live node agents agree to the
//! nanosecond (one core, two drivers: ARCHITECTURE.md).
//!
//! Times are nanoseconds on the cluster's clock (0 = the driver's start);
//! offsets and periods come from the decisions in force.

/// Nanoseconds from `now_ns` until the next iteration may start.
///
/// * `shift_ms`: time-shifts not yet applied (CASSINI's shift, FORESIGHT's
///   per-iteration delay); always waited in full.
/// * `align`: `(period_ns, offset_ns)` of a pending `Align` (applied once):
///   wait until `t ≡ offset (mod period)` (CASSINI §4.2, the agent aligning
///   a job to its time-shift on a common clock).
/// * `pace`: `(period_ns, offset_ns)` of the `Pace` in force (every
///   iteration; Metronome §III-B's TDM slot): an iteration due less than
///   half a period before its slot idles until it; one late by less than
///   half a period starts at once and catches up by idling less next time.
///
/// O(1).
pub fn start_delay_ns(now_ns: u64, shift_ms: f64, align: Option<(u64, u64)>, pace: Option<(u64, u64)>) -> u64 {
    let mut shift = if shift_ms.is_finite() { shift_ms.max(0.0) } else { 0.0 };
    if let Some((period, offset)) = align {
        let wait = (offset as i128 - (now_ns + (shift * 1e6) as u64) as i128).rem_euclid(period.max(1) as i128);
        shift += wait as f64 / 1e6;
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

#[cfg(test)]
mod tests {
    use super::start_delay_ns;

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
    }

    #[test]
    fn pace_idles_when_early_and_goes_when_late() {
        // Slot at 300 ms of period 100: 40 ms early idles 40 ms.
        assert_eq!(start_delay_ns(260 * MS, 0.0, None, Some((100 * MS, 0))), 40 * MS);
        // 10 ms late (next slot 90 ms away, more than half a period): go now.
        assert_eq!(start_delay_ns(310 * MS, 0.0, None, Some((100 * MS, 0))), 0);
    }
}
