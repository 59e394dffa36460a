//! Castor's simulation workloads (§9.1: "we randomly sample 240 jobs from
//! the busiest period ... the settings of GPU numbers and training
//! iterations follow those of Pollux and Lucid").
//!
//! - **Philly**: Pollux's eight evaluation workloads are each an independent
//!   160-job sample of the busiest 8 hours of Microsoft's Philly trace, with
//!   GPUs per job and a model per GPU-time bucket (Pollux §5.1). Their union
//!   (1,280 jobs, bundled) is the population; a workload of `n` jobs draws
//!   `n` of them without replacement and keeps their submission times, so
//!   `n = 240 · load` scales the intensity over the same 8 hours (Fig. 16).
//!   72% of those jobs use at most 8 GPUs (Castor: 66%).
//! - **Venus**: SenseTime's job-level Venus log is not public; its
//!   10-minute submission series is (Lucid's `cluster_throughput.csv`). The
//!   jobs are drawn as for Philly, and their arrivals are re-drawn from the
//!   series' busiest 8 hours: a bin with probability proportional to its GPU
//!   jobs submitted, a uniform time within the bin.

use crate::TraceError;
use crate::diag::Parsed;
use crate::formats::for_each_row;
use orrery_model::JobSpec;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Pollux's evaluation workloads, bundled.
pub const POLLUX_WORKLOADS: [&str; 8] = [
    include_str!("../../../data/profiles/pollux/workloads/workload-1.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-2.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-3.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-4.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-5.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-6.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-7.csv"),
    include_str!("../../../data/profiles/pollux/workloads/workload-8.csv"),
];

/// The 1,280 jobs of Pollux's workloads, ids prefixed by their workload.
pub fn pollux_population() -> Result<Vec<JobSpec>, TraceError> {
    let mut all = Vec::new();
    for (k, text) in POLLUX_WORKLOADS.iter().enumerate() {
        let file = format!("workload-{}.csv", k + 1);
        let parsed = crate::formats::pollux::parse(&file, text);
        if let Some(e) = parsed.errors.first() {
            return Err(TraceError::Bundled(e.to_string()));
        }
        all.extend(parsed.items.into_iter().map(|mut j| {
            j.id = format!("w{}-{}", k + 1, j.id);
            j
        }));
    }
    Ok(all)
}

/// `n` jobs drawn without replacement from `population` (seeded), sorted by
/// arrival. O(n log n).
pub fn sample_jobs(population: &[JobSpec], n: usize, seed: u64) -> Result<Vec<JobSpec>, TraceError> {
    if n == 0 || n > population.len() {
        return Err(TraceError::field(
            "jobs",
            format!("expected 1 to {} jobs from the population, found {n}", population.len()),
        ));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut jobs: Vec<JobSpec> =
        sample(&mut rng, population.len(), n).into_iter().map(|i| population[i].clone()).collect();
    jobs.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s).then_with(|| a.id.cmp(&b.id)));
    Ok(jobs)
}

/// Philly's recorded durations for a Pollux sample (`workload.durations`,
/// issue 38's Castor queueing): each job keeps its model, GPUs and arrival,
/// and runs, alone, a duration drawn (seeded) from Philly's jobs of its GPU
/// count submitted in the trace's busiest 8 hours (most submissions), kept as
/// Pollux's `workload.py` keeps them (at least 60 s, under 1,000 GPU-hours).
/// A GPU count absent from that window draws from the whole trace's jobs of
/// the smallest count at least as large (or the largest count). Castor's
/// Table 5 implies jobs that hold their GPUs 0.8–1.2 h on average (JCT minus
/// queueing); Pollux's iterations to converge at the zoo's speed give
/// 0.25 h. O(trace log trace + jobs).
pub fn philly_durations(jobs: &mut [JobSpec], philly: &[JobSpec], seed: u64) -> Result<(), TraceError> {
    use std::collections::BTreeMap;
    let kept: Vec<(f64, u32, f64)> = philly
        .iter()
        .filter_map(|j| match j.work {
            orrery_model::Work::Seconds(d) if d >= 60.0 && d * f64::from(j.gpus()) < 1000.0 * 3600.0 => {
                Some((j.arrival_s, j.gpus(), d))
            }
            _ => None,
        })
        .collect();
    if kept.is_empty() {
        return Err(TraceError::field("durations", "a Philly trace with jobs of at least 60 s".to_string()));
    }
    let mut by_arrival = kept.clone();
    by_arrival.sort_by(|a, b| a.0.total_cmp(&b.0));
    // The 8-hour window with the most submissions (two pointers).
    let (mut best, mut from, mut end) = (0, 0, 0);
    for start in 0..by_arrival.len() {
        while end < by_arrival.len() && by_arrival[end].0 < by_arrival[start].0 + 8.0 * 3600.0 {
            end += 1;
        }
        if end - start > best {
            (best, from) = (end - start, start);
        }
    }
    let pools = |rows: &[(f64, u32, f64)]| {
        let mut m: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
        for &(_, g, d) in rows {
            m.entry(g).or_default().push(d);
        }
        m
    };
    let window = pools(&by_arrival[from..from + best]);
    let all = pools(&kept);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5048_494C_4C59_4455);
    for j in jobs {
        let g = j.gpus();
        let pool = window
            .get(&g)
            .or_else(|| all.range(g..).next().map(|(_, v)| v))
            .or_else(|| all.values().next_back())
            .expect("the trace kept at least one job");
        j.work = orrery_model::Work::Seconds(pool[rng.random_range(0..pool.len())]);
    }
    Ok(())
}

/// Marks each job high priority with probability `fraction` (seeded), as
/// Metronome's traces mix priorities; the Philly sample has none of its own.
pub fn mark_high_priority(jobs: &mut [JobSpec], fraction: f64, seed: u64) -> Result<(), TraceError> {
    if !(0.0..=1.0).contains(&fraction) {
        return Err(TraceError::field("high_priority", format!("expected a fraction in [0, 1], found {fraction}")));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4849_4748_5052_494F);
    for j in jobs {
        if rng.random_bool(fraction) {
            j.priority = orrery_model::Priority::High;
        }
    }
    Ok(())
}

/// Width of a bin of the Venus series, s.
pub const VENUS_BIN_S: f64 = 600.0;

/// The Venus series: GPU jobs submitted per 10-minute bin, in file order.
pub fn venus_series(file: &str, text: &str) -> Parsed<f64> {
    let header = [
        "time",
        "submit_job_all",
        "start_job_all",
        "end_job_all",
        "submit_gpu_job",
        "start_gpu_job",
        "end_gpu_job",
        "submit_gpu_num",
        "start_gpu_num",
        "end_gpu_num",
    ];
    for_each_row(file, text, b',', true, &header, |row| Ok(Some(row.non_negative(4)?)))
}

/// The bins of the busiest `window_s` (most GPU jobs submitted), as
/// (offset of the bin from the window's start in s, jobs submitted). O(B).
pub fn busiest_window(series: &[f64], window_s: f64) -> Vec<(f64, f64)> {
    let w = ((window_s / VENUS_BIN_S).round() as usize).clamp(1, series.len().max(1));
    if series.len() < w {
        return series.iter().enumerate().map(|(i, &c)| (i as f64 * VENUS_BIN_S, c)).collect();
    }
    let (mut best, mut at, mut sum) = (f64::NEG_INFINITY, 0, series[..w].iter().sum::<f64>());
    for start in 0..=series.len() - w {
        if start > 0 {
            sum += series[start + w - 1] - series[start - 1];
        }
        if sum > best {
            (best, at) = (sum, start);
        }
    }
    series[at..at + w].iter().enumerate().map(|(i, &c)| (i as f64 * VENUS_BIN_S, c)).collect()
}

/// Re-draws the jobs' arrivals from `bins` (weighted by submissions,
/// uniform within a bin), keeping the jobs' order. O(n · B).
pub fn shape_arrivals(jobs: &mut [JobSpec], bins: &[(f64, f64)], seed: u64) -> Result<(), TraceError> {
    let total: f64 = bins.iter().map(|b| b.1).sum();
    if total <= 0.0 {
        return Err(TraceError::Data("the arrival series submits no jobs".into()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x7E4D5);
    let mut times: Vec<f64> = (0..jobs.len())
        .map(|_| {
            let mut x = rng.random_range(0.0..total);
            let bin = bins.iter().find(|b| {
                x -= b.1;
                x < 0.0
            });
            bin.map_or(0.0, |b| b.0) + rng.random_range(0.0..VENUS_BIN_S)
        })
        .collect();
    times.sort_by(f64::total_cmp);
    for (j, t) in jobs.iter_mut().zip(times) {
        j.arrival_s = t;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_population_is_pollux_s_1280_jobs_over_eight_hours() {
        let all = pollux_population().expect("bundled workloads parse");
        assert_eq!(all.len(), 1280);
        assert!(all.iter().all(|j| j.arrival_s < 8.0 * 3600.0));
        let small = all.iter().filter(|j| j.gpus() <= 8).count() as f64 / all.len() as f64;
        assert!((small - 0.72).abs() < 0.01, "{small}");
    }

    #[test]
    fn samples_are_distinct_sorted_and_seeded() {
        let all = pollux_population().expect("parses");
        let a = sample_jobs(&all, 240, 1).expect("fits");
        let mut ids: Vec<&str> = a.iter().map(|j| j.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 240);
        assert!(a.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
        assert_eq!(a, sample_jobs(&all, 240, 1).expect("fits"));
        assert_ne!(a, sample_jobs(&all, 240, 2).expect("fits"));
        assert!(sample_jobs(&all, 2000, 1).is_err());
    }

    #[test]
    fn the_busiest_window_and_arrivals_follow_the_series() {
        // Bins: a quiet hour, then 2 bins with 30 and 10 submissions.
        let series = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 30.0, 10.0, 0.0];
        let w = busiest_window(&series, 1200.0);
        assert_eq!(w, vec![(0.0, 30.0), (600.0, 10.0)]);
        let all = pollux_population().expect("parses");
        let mut jobs = sample_jobs(&all, 400, 3).expect("fits");
        shape_arrivals(&mut jobs, &w, 3).expect("non-empty");
        let first = jobs.iter().filter(|j| j.arrival_s < 600.0).count() as f64 / 400.0;
        assert!((first - 0.75).abs() < 0.07, "{first}");
        assert!(jobs.iter().all(|j| j.arrival_s < 1200.0));
        let text = "time,submit_job_all,start_job_all,end_job_all,submit_gpu_job,start_gpu_job,end_gpu_job,submit_gpu_num,start_gpu_num,end_gpu_num\n\
                    2020-04-01 00:00:00,6,6,4,3,3,2,3,3,2\n2020-04-01 00:10:00,4,4,4,x,3,2,3,3,2\n";
        let p = venus_series("v.csv", text);
        assert_eq!(p.items, vec![3.0]);
        let e = p.errors.first().expect("x is an error").to_string();
        assert!(e.contains("v.csv:3") && e.contains("submit_gpu_job"), "{e}");
    }
}
