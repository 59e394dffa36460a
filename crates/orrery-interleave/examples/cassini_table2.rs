//! CASSINI Table 2 from the model zoo: `cargo run -p orrery-interleave --example cassini_table2`.
//!
//! Each snapshot's jobs share one 50 Gbit/s link of CASSINI's testbed (A100s).
//! The table's batch sizes (800–1,700) are read as global batches split over
//! 8 workers, one per server; the paper does not give the worker counts.
use orrery_interleave::cassini::{TABLE2, snapshot};

fn main() {
    println!(
        "{:<4} {:<44} {:>7} {:>7} {:>9}  {:<24} {:<24} perimeter",
        "snap", "jobs (batch)", "paper", "orrery", "unrotated", "paper shifts (ms)", "orrery shifts (ms)"
    );
    for s in TABLE2 {
        let r = snapshot(s);
        let jobs: Vec<String> = s.jobs.iter().map(|(m, b)| format!("{m} ({b})")).collect();
        let shifts: Vec<String> = r.jobs.iter().map(|j| format!("{:.0}", j.shift_ms)).collect();
        let periods: Vec<String> = r.jobs.iter().map(|j| format!("{:.0}", j.period_ms)).collect();
        println!(
            "{:<4} {:<44} {:>7.2} {:>7.2} {:>9.2}  {:<24} {:<24} {:.0} ms (periods {} ms)",
            s.id,
            jobs.join(", "),
            s.paper_score,
            r.score,
            r.score_unrotated,
            format!("{:?}", s.paper_shifts_ms),
            shifts.join(", "),
            r.perimeter_ms,
            periods.join("/")
        );
    }
}
