//! Statistics of a job list: what `orrery trace inspect` prints.

use crate::generate::ShapeContext;
use orrery_model::{JobSpec, Priority};
use serde::Serialize;
use std::collections::BTreeMap;

/// Summary statistics of a workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Number of jobs.
    pub jobs: usize,
    /// Jobs per requested GPU count.
    pub gpu_histogram: BTreeMap<u32, usize>,
    /// Seconds between the first and the last arrival.
    pub span_s: f64,
    /// Arrivals per hour over the span (0 when all jobs arrive together).
    pub arrivals_per_hour: f64,
    /// Isolated duration percentiles in seconds: p50, p90, p99 and the mean
    /// (iteration-based jobs are estimated with the shape context).
    pub duration_s: Percentiles,
    /// GPU-hours requested in total.
    pub gpu_hours: f64,
    /// Jobs per model.
    pub models: BTreeMap<String, usize>,
    /// Jobs whose model came from the seeded mapping.
    pub models_inferred: usize,
    /// High-priority jobs.
    pub high_priority: usize,
}

/// Percentiles of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Mean.
    pub mean: f64,
}

impl Percentiles {
    /// Nearest-rank percentiles of `v` (sorted in place). O(n log n).
    pub fn of(v: &mut [f64]) -> Self {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let rank = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Percentiles { p50: rank(0.5), p90: rank(0.9), p99: rank(0.99), mean: v.iter().sum::<f64>() / v.len() as f64 }
    }
}

/// Summarises `jobs`.
pub fn summarize(jobs: &[JobSpec], ctx: &ShapeContext) -> Summary {
    let mut gpu_histogram = BTreeMap::new();
    let mut models = BTreeMap::new();
    let mut durations = Vec::with_capacity(jobs.len());
    let mut gpu_hours = 0.0;
    for j in jobs {
        *gpu_histogram.entry(j.gpus()).or_insert(0) += 1;
        *models.entry(j.model.clone()).or_insert(0) += 1;
        if let Some(d) = ctx.duration_s(j) {
            durations.push(d);
            gpu_hours += d * f64::from(j.gpus()) * j.gpu_share / 3600.0;
        }
    }
    let first = jobs.iter().map(|j| j.arrival_s).fold(f64::INFINITY, f64::min);
    let last = jobs.iter().map(|j| j.arrival_s).fold(f64::NEG_INFINITY, f64::max);
    let span_s = if jobs.is_empty() { 0.0 } else { last - first };
    Summary {
        jobs: jobs.len(),
        gpu_histogram,
        span_s,
        arrivals_per_hour: if span_s > 0.0 { (jobs.len() - 1) as f64 / span_s * 3600.0 } else { 0.0 },
        duration_s: Percentiles::of(&mut durations),
        gpu_hours,
        models,
        models_inferred: jobs.iter().filter(|j| j.model_inferred).count(),
        high_priority: jobs.iter().filter(|j| j.priority == Priority::High).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = Percentiles::of(&mut v);
        assert_eq!((p.p50, p.p90, p.p99, p.mean), (50.0, 90.0, 99.0, 50.5));
        assert_eq!(Percentiles::of(&mut []), Percentiles::default());
    }
}
