//! The price of a GPU-second (the combined policy's part `size`): what a
//! job's GPU time costs the jobs behind it and those still to arrive, by a
//! fluid view of a busy cluster; and the arrival rate it needs, measured.

use crate::ClusterView;
use std::collections::VecDeque;

/// The arrival rate behind [`gpu_second_price`] is measured over the
/// arrivals of this many seconds past.
pub const ARRIVAL_WINDOW_S: f64 = 3600.0;

/// The arrivals seen within [`ARRIVAL_WINDOW_S`], for their rate.
#[derive(Debug, Clone)]
pub struct Arrivals {
    /// Arrival times within the window, oldest first.
    arrivals: VecDeque<f64>,
    /// The first and latest arrival seen (a job arriving later is new).
    first_s: f64,
    latest_s: f64,
}

impl Default for Arrivals {
    fn default() -> Self {
        Arrivals { arrivals: VecDeque::new(), first_s: f64::INFINITY, latest_s: f64::NEG_INFINITY }
    }
}

impl Arrivals {
    /// Records the jobs that arrived since the last round and forgets
    /// those older than [`ARRIVAL_WINDOW_S`]. A job is new when it arrived
    /// after every job seen so far (preempted jobs come back with their
    /// old arrival time). O(Q) per round, amortised O(1) per arrival.
    pub fn note(&mut self, view: &ClusterView<'_>) {
        let mut new: Vec<f64> = view.queue.iter().map(|q| q.spec.arrival_s).filter(|&a| a > self.latest_s).collect();
        new.sort_by(f64::total_cmp);
        for a in new {
            self.first_s = self.first_s.min(a);
            self.latest_s = a;
            self.arrivals.push_back(a);
        }
        while self.arrivals.front().is_some_and(|&a| a < view.now_s - ARRIVAL_WINDOW_S) {
            self.arrivals.pop_front();
        }
    }

    /// Jobs per second arriving, by the maximum-likelihood estimate of a
    /// Poisson rate: the arrivals within [`ARRIVAL_WINDOW_S`] over the
    /// window, or, before a window has passed since the first arrival, the
    /// arrivals after the first over the time since it. 0 until two have
    /// been seen.
    pub fn rate(&self, now_s: f64) -> f64 {
        let n = self.arrivals.len() as f64;
        if now_s - self.first_s >= ARRIVAL_WINDOW_S {
            n / ARRIVAL_WINDOW_S
        } else if n >= 2.0 && now_s > self.first_s {
            (n - 1.0) / (now_s - self.first_s)
        } else {
            0.0
        }
    }
}

/// What a GPU-second is worth in delay to other jobs, per GPU: the jobs it
/// delays over the cluster's `gpus`. In a fluid view of a busy cluster,
/// every GPU-second a job takes delays each job still to be served by
/// 1/G s: the `behind` jobs waiting after it, and those that arrive (at
/// `arrival_rate` per second) before the work those jobs wait to run,
/// `backlog_gpu_s`, drains through G GPUs. A job on k GPUs for T s then
/// costs the others `T·k·price` s in all. O(1).
pub fn gpu_second_price(behind: usize, arrival_rate: f64, backlog_gpu_s: f64, gpus: u32) -> f64 {
    let g = f64::from(gpus.max(1));
    (behind as f64 + arrival_rate * backlog_gpu_s / g) / g
}
