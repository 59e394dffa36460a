//! The agents' report round trips (`orrery agent --report-log`) outside
//! the fault windows: a soak's control-plane latency. A batch counts as
//! outside when neither its send nor its answer falls inside a fault's
//! window (so one sent just before a partition and answered after it is
//! not counted as quiet).

use serde::Serialize;
use std::path::Path;

/// One batch of reports, as an agent logged it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Batch {
    /// Sent, ms since the Unix epoch.
    pub sent_ms: f64,
    /// Round trip, ms.
    pub round_trip_ms: f64,
    /// Answered (`ok`): not `refused` or `failed`.
    pub ok: bool,
}

/// Reads an agent's report log; a line it cannot read is skipped (the
/// agent may have been killed mid-line). O(lines).
pub fn read(path: &Path) -> Vec<Batch> {
    let Ok(text) = std::fs::read_to_string(path) else { return Vec::new() };
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let (sent_ms, round_trip_ms) = (f.first()?.parse().ok()?, f.get(1)?.parse().ok()?);
            Some(Batch { sent_ms, round_trip_ms, ok: *f.get(3)? == "ok" })
        })
        .collect()
}

/// Round trips outside the faults.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoundTrips {
    /// Batches logged in all.
    pub batches: usize,
    /// Of them outside every fault window.
    pub outside_faults: usize,
    /// Of those, answered with an error or not at all.
    pub not_ok_outside_faults: usize,
    /// Median round trip of the answered ones outside the faults, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Longest, ms.
    pub max_ms: f64,
}

/// The round trips of `batches` outside `windows` ((start, end) in ms
/// since the Unix epoch). O(b log b + b · w).
pub fn outside(batches: &[Batch], windows: &[(f64, f64)]) -> RoundTrips {
    let quiet: Vec<&Batch> = batches
        .iter()
        .filter(|b| windows.iter().all(|&(s, e)| b.sent_ms + b.round_trip_ms < s || b.sent_ms > e))
        .collect();
    let mut ms: Vec<f64> = quiet.iter().filter(|b| b.ok).map(|b| b.round_trip_ms).collect();
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| if ms.is_empty() { 0.0 } else { ms[((ms.len() - 1) as f64 * q).round() as usize] };
    RoundTrips {
        batches: batches.len(),
        outside_faults: quiet.len(),
        not_ok_outside_faults: quiet.iter().filter(|b| !b.ok).count(),
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: ms.last().copied().unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_that_overlaps_a_fault_is_left_out() {
        let b = |sent_ms: f64, round_trip_ms: f64, ok: bool| Batch { sent_ms, round_trip_ms, ok };
        // A fault from 1000 to 2000 ms.
        let batches = [
            b(0.0, 5.0, true),
            b(900.0, 200.0, true), // answered inside the fault
            b(1500.0, 3.0, false), // sent inside it
            b(2500.0, 7.0, true),
            b(3000.0, 1.0, true),
            b(3100.0, 40.0, false), // refused outside: counted as not ok
        ];
        let r = outside(&batches, &[(1000.0, 2000.0)]);
        assert_eq!((r.batches, r.outside_faults, r.not_ok_outside_faults), (6, 4, 1));
        // Answered ones outside: 1, 5, 7 ms.
        assert_eq!((r.p50_ms, r.p99_ms, r.max_ms), (5.0, 7.0, 7.0));
        let none = outside(&[], &[]);
        assert_eq!((none.p99_ms, none.outside_faults), (0.0, 0));
    }

    #[test]
    fn the_agents_csv_is_read_and_a_torn_line_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h0.reports.csv");
        std::fs::write(&path, "unix_ms,round_trip_ms,reports,outcome\n1000,2.5,3,ok\n1050,9.0,1,failed\n1100,1.")
            .expect("write");
        assert_eq!(
            read(&path),
            vec![
                Batch { sent_ms: 1000.0, round_trip_ms: 2.5, ok: true },
                Batch { sent_ms: 1050.0, round_trip_ms: 9.0, ok: false }
            ]
        );
        assert!(read(&dir.path().join("none.csv")).is_empty());
    }
}
