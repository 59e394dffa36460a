//! Unified circles (CASSINI §3 "Capturing jobs with different iteration times";
//! Metronome §III-B on G_T and E_T).

use orrery_model::{Circle, Priority};
use serde::{Deserialize, Serialize};

/// A job on a link: its circle view, priority and arrival order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CircleJob {
    /// Name, for reports.
    pub name: String,
    /// Priority; the highest-priority job is the rotation reference (Metronome Eq. 16).
    pub priority: Priority,
    /// Circle view of one iteration.
    pub circle: Circle,
}

/// Knobs of the unified circle and the discretisation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Params {
    /// Discrete angles per circle (Metronome's Di-Pre; 72 = 5°, as CASSINI).
    pub precision: usize,
    /// Metronome's G_T in ms: multiples closer than this are averaged.
    pub g_t_ms: f64,
    /// Metronome's E_T as a fraction of the low-priority job's period: idle
    /// time up to this much per iteration may be injected to line periods up.
    pub e_t_fraction: f64,
    /// Largest multiple of the reference period tried for the perimeter.
    pub max_multiple: u32,
    /// Cap on the perimeter in ms.
    pub max_perimeter_ms: f64,
}

impl Default for Params {
    fn default() -> Self {
        Params { precision: 72, g_t_ms: 5.0, e_t_fraction: 0.10, max_multiple: 24, max_perimeter_ms: 60_000.0 }
    }
}

impl Params {
    /// The circles CASSINI enforces: each job keeps its own iteration time
    /// (it is shifted, never paced), so Metronome's idle injection (E_T) is
    /// off. Periods whose multiples lie within G_T = 5 ms are still
    /// averaged, as the paper's LCM of iteration times in whole
    /// milliseconds rounds them; beyond the perimeter cap the circle is the
    /// closest fit (`Approximation::Fallback`).
    pub fn cassini() -> Self {
        Params { e_t_fraction: 0.0, ..Params::default() }
    }
}

/// How the perimeter was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Approximation {
    /// The exact LCM (every period divides the perimeter within 1 µs).
    Exact,
    /// Multiples within G_T of each other, averaged (Metronome §III-B).
    Averaged {
        /// Largest difference between a multiple and the perimeter, ms.
        max_gap_ms: f64,
    },
    /// Idle time injected into low-priority jobs (Metronome §III-B, E_T).
    IdleInjected,
    /// No common period within the thresholds and the cap: the perimeter is the
    /// multiple of the reference period that fits the other jobs best, and
    /// their circles are stretched or shrunk to it. `max_gap_ms` says how far
    /// off the worst job is per unified circle; scores are then approximate.
    Fallback {
        /// Largest |r_j · T_j − perimeter|, ms.
        max_gap_ms: f64,
    },
}

/// One job on the unified circle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnifiedJob {
    /// Iterations of the job per unified circle (CASSINI's r_j).
    pub iterations: u32,
    /// Iteration time on the unified circle = perimeter / iterations, ms.
    pub period_ms: f64,
    /// Original iteration time, ms.
    pub original_period_ms: f64,
    /// Idle time injected per iteration (E_T rule), ms.
    pub idle_injected_ms: f64,
    /// Mean bandwidth demand in each of the `precision` angular bins, Gbit/s.
    pub demand: Vec<f64>,
    /// Peak bandwidth of the job, Gbit/s.
    pub peak_gbps: f64,
}

/// Jobs sharing a link, placed on one circle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UnifiedCircle {
    /// Perimeter in ms.
    pub perimeter_ms: f64,
    /// Index of the reference job (highest priority, earliest on ties).
    pub reference: usize,
    /// The jobs, in input order.
    pub jobs: Vec<UnifiedJob>,
    /// How the perimeter was obtained.
    pub approximation: Approximation,
    /// Number of angular bins.
    pub precision: usize,
}

/// Why jobs cannot be put on a unified circle.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UnifyError {
    /// No jobs.
    #[error("no jobs on the link")]
    Empty,
    /// A period is not a positive finite number.
    #[error("job {job}: period must be a positive number of ms, found {period_ms}")]
    BadPeriod {
        /// Job name.
        job: String,
        /// The period.
        period_ms: f64,
    },
    /// The precision is outside 4..=[`MAX_PRECISION`].
    #[error("precision must be from {MIN_PRECISION} to {MAX_PRECISION} angular steps, found {0}")]
    BadPrecision(usize),
    /// A job would repeat more often on the circle than anything can resolve.
    #[error(
        "job {job}: {iterations:e} iterations of {period_ms:?} ms on a {perimeter_ms:?} ms circle; expected at most {MAX_ITERATIONS_ON_CIRCLE}"
    )]
    TooManyIterations {
        /// Job name.
        job: String,
        /// Its iterations on the circle.
        iterations: f64,
        /// Its period.
        period_ms: f64,
        /// The unified perimeter.
        perimeter_ms: f64,
    },
}

/// Coarsest angular resolution accepted (90°).
pub const MIN_PRECISION: usize = 4;
/// Finest angular resolution accepted (0.01°).
pub const MAX_PRECISION: usize = 36_000;
/// Most iterations of one job on the unified circle (a 1 ms job against a
/// 60 s reference has 60,000).
pub const MAX_ITERATIONS_ON_CIRCLE: f64 = 100_000.0;

const EXACT_TOL_MS: f64 = 1e-3;

/// Index of the reference job: highest priority, then earliest (lowest index).
pub fn reference(jobs: &[CircleJob]) -> usize {
    (0..jobs.len()).max_by_key(|&i| (jobs[i].priority, std::cmp::Reverse(i))).unwrap_or(0)
}

/// Places `jobs` on one unified circle.
///
/// The perimeter is the smallest `P = k · T_ref` (k = 1..max_multiple, P ≤ the
/// cap) such that every other job fits `r_j = round(P / T_j)` iterations:
/// exactly (LCM), within G_T (average of the multiples, Metronome §III-B), or —
/// for a low-priority job whose `r_j · T_j` falls short of P by at most E_T of
/// its period per iteration — by injecting idle time. Failing all, the best
/// fitting multiple is used and reported as [`Approximation::Fallback`].
/// Cost: O(max_multiple · jobs) for the perimeter, O(jobs · (arcs · r + precision)) for demands.
pub fn unify(jobs: &[CircleJob], p: &Params) -> Result<UnifiedCircle, UnifyError> {
    if jobs.is_empty() {
        return Err(UnifyError::Empty);
    }
    if !(MIN_PRECISION..=MAX_PRECISION).contains(&p.precision) {
        return Err(UnifyError::BadPrecision(p.precision));
    }
    for j in jobs {
        let t = j.circle.period_ms;
        if !(t > 0.0 && t.is_finite()) {
            return Err(UnifyError::BadPeriod { job: j.name.clone(), period_ms: t });
        }
    }
    let r = reference(jobs);
    let t_ref = jobs[r].circle.period_ms;
    let mut best_fallback: Option<(f64, f64)> = None; // (max gap, perimeter)
    let mut chosen: Option<(f64, Approximation)> = None;
    for k in 1..=p.max_multiple.max(1) {
        let perimeter = f64::from(k) * t_ref;
        if perimeter > p.max_perimeter_ms && k > 1 {
            break;
        }
        let mut max_gap: f64 = 0.0;
        let mut idle = false;
        let mut ok = true;
        let mut multiples = vec![perimeter];
        for (i, j) in jobs.iter().enumerate() {
            if i == r {
                continue;
            }
            let t = j.circle.period_ms;
            let n = (perimeter / t).round().max(1.0);
            let gap = perimeter - n * t;
            max_gap = max_gap.max(gap.abs());
            multiples.push(n * t);
            if gap.abs() <= EXACT_TOL_MS || gap.abs() <= p.g_t_ms {
                continue;
            }
            // E_T: the low-priority job's n iterations fall short of P; pad each.
            let low = j.priority < jobs[r].priority || j.priority == Priority::Low;
            if low && gap > 0.0 && gap / n <= p.e_t_fraction * t {
                idle = true;
                continue;
            }
            ok = false;
        }
        if best_fallback.is_none_or(|(g, _)| max_gap < g) {
            best_fallback = Some((max_gap, perimeter));
        }
        if ok {
            let approx = if max_gap <= EXACT_TOL_MS {
                Approximation::Exact
            } else if idle {
                Approximation::IdleInjected
            } else {
                Approximation::Averaged { max_gap_ms: max_gap }
            };
            // Averaging (G_T): the common period is the mean of the multiples.
            let perimeter = if matches!(approx, Approximation::Averaged { .. }) {
                multiples.iter().sum::<f64>() / multiples.len() as f64
            } else {
                perimeter
            };
            chosen = Some((perimeter, approx));
            break;
        }
    }
    let (perimeter, approximation) = chosen.unwrap_or_else(|| {
        let (gap, perimeter) = best_fallback.unwrap_or((0.0, t_ref));
        (perimeter, Approximation::Fallback { max_gap_ms: gap })
    });
    // Bounded work: bin_demand walks every iteration of every arc.
    for j in jobs {
        let n = (perimeter / j.circle.period_ms).round();
        if n > MAX_ITERATIONS_ON_CIRCLE {
            return Err(UnifyError::TooManyIterations {
                job: j.name.clone(),
                iterations: n,
                period_ms: j.circle.period_ms,
                perimeter_ms: perimeter,
            });
        }
    }
    let unified = jobs
        .iter()
        .map(|j| {
            let t = j.circle.period_ms;
            let n = (perimeter / t).round().max(1.0);
            let period = perimeter / n;
            // Under E_T every stretched low-priority period is idle time.
            let idle = if matches!(approximation, Approximation::IdleInjected) && j.priority == Priority::Low {
                (period - t).max(0.0)
            } else {
                0.0
            };
            UnifiedJob {
                iterations: n as u32,
                period_ms: period,
                original_period_ms: t,
                idle_injected_ms: idle,
                demand: bin_demand(&j.circle, period, n as u32, perimeter, p.precision),
                peak_gbps: j.circle.arcs.iter().map(|a| a.gbps).fold(0.0, f64::max),
            }
        })
        .collect();
    Ok(UnifiedCircle { perimeter_ms: perimeter, reference: r, jobs: unified, approximation, precision: p.precision })
}

/// Mean demand per bin of a job repeated `n` times with period `period` on a
/// circle of `perimeter` ms split into `bins`. Arcs keep their absolute
/// start and length; a longer period (idle injection, averaging) lengthens the
/// Down phase after the last arc, a shorter one shortens it (arcs are clipped).
fn bin_demand(c: &Circle, period: f64, n: u32, perimeter: f64, bins: usize) -> Vec<f64> {
    let width = perimeter / bins as f64;
    let mut out = vec![0.0; bins];
    for rep in 0..n {
        let base = f64::from(rep) * period;
        for a in &c.arcs {
            let start = base + a.start_ms.min(period);
            let end = base + (a.start_ms + a.duration_ms).min(period);
            add_interval(&mut out, start, end, a.gbps, width);
        }
    }
    for v in &mut out {
        *v /= width;
    }
    out
}

/// Adds `gbps · overlap` to every bin that [start, end) overlaps (wrapping).
fn add_interval(out: &mut [f64], start: f64, end: f64, gbps: f64, width: f64) {
    if end <= start {
        return;
    }
    let bins = out.len();
    let first = (start / width).floor() as i64;
    let last = ((end / width).ceil() as i64).max(first + 1);
    for b in first..last {
        let (lo, hi) = (b as f64 * width, (b + 1) as f64 * width);
        let overlap = end.min(hi) - start.max(lo);
        if overlap > 0.0 {
            out[b.rem_euclid(bins as i64) as usize] += gbps * overlap;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use orrery_model::Arc;

    pub(crate) fn job(name: &str, period: f64, arcs: &[(f64, f64, f64)], priority: Priority) -> CircleJob {
        CircleJob {
            name: name.into(),
            priority,
            circle: Circle {
                period_ms: period,
                arcs: arcs.iter().map(|&(s, d, g)| Arc { start_ms: s, duration_ms: d, gbps: g }).collect(),
            },
        }
    }

    #[test]
    fn lcm_of_40_and_60_is_120() {
        let jobs = [
            job("j1", 40.0, &[(0.0, 20.0, 50.0)], Priority::High),
            job("j2", 60.0, &[(0.0, 20.0, 50.0)], Priority::Low),
        ];
        let u = unify(&jobs, &Params::default()).expect("ok");
        assert_eq!(u.perimeter_ms, 120.0);
        assert_eq!(u.approximation, Approximation::Exact);
        assert_eq!((u.jobs[0].iterations, u.jobs[1].iterations), (3, 2));
        // j1 demands 50 Gbit/s over 3 × 20 of 120 ms: 36 of 72 bins full.
        assert_eq!(u.jobs[0].demand.iter().filter(|&&d| d > 0.0).count(), 36);
        let total: f64 = u.jobs[1].demand.iter().sum::<f64>() * 120.0 / 72.0;
        assert!((total - 2.0 * 20.0 * 50.0).abs() < 1e-9, "bandwidth·time is conserved");
    }

    #[test]
    fn close_multiples_are_averaged_within_g_t() {
        // 100 ms and 33.5 ms: 3 × 33.5 = 100.5, 0.5 ms from 100 (≤ G_T = 5).
        let jobs =
            [job("a", 100.0, &[(0.0, 10.0, 10.0)], Priority::High), job("b", 33.5, &[(0.0, 5.0, 10.0)], Priority::Low)];
        let u = unify(&jobs, &Params::default()).expect("ok");
        assert_eq!(u.approximation, Approximation::Averaged { max_gap_ms: 0.5 });
        assert!((u.perimeter_ms - 100.25).abs() < 1e-9);
    }

    #[test]
    fn idle_is_injected_into_the_low_priority_job_within_e_t() {
        // 100 ms (high) and 92 ms (low): 8 ms short, 8.7% of 92 ≤ E_T = 10%.
        let jobs = [
            job("hi", 100.0, &[(50.0, 40.0, 25.0)], Priority::High),
            job("lo", 92.0, &[(0.0, 30.0, 25.0)], Priority::Low),
        ];
        let u = unify(&jobs, &Params::default()).expect("ok");
        assert_eq!(u.approximation, Approximation::IdleInjected);
        assert_eq!(u.perimeter_ms, 100.0);
        assert!((u.jobs[1].idle_injected_ms - 8.0).abs() < 1e-9);
        assert_eq!(u.jobs[0].idle_injected_ms, 0.0);
        // A high-priority job is never slowed: swap priorities and 100 vs 92
        // cannot be lined up within one period, so a larger multiple is used.
        let swapped = [
            job("lo", 100.0, &[(50.0, 40.0, 25.0)], Priority::Low),
            job("hi", 92.0, &[(0.0, 30.0, 25.0)], Priority::High),
        ];
        let u = unify(&swapped, &Params::default()).expect("ok");
        assert_eq!(u.reference, 1);
        assert!(u.jobs.iter().all(|j| j.idle_injected_ms == 0.0 || j.original_period_ms == 100.0));
    }

    #[test]
    fn incommensurable_periods_fall_back_explicitly_under_the_cap() {
        let p = Params { max_multiple: 3, g_t_ms: 0.1, e_t_fraction: 0.0, ..Params::default() };
        let jobs = [
            job("a", 100.0, &[(0.0, 10.0, 10.0)], Priority::High),
            job("b", 71.3, &[(0.0, 5.0, 10.0)], Priority::High),
        ];
        let u = unify(&jobs, &p).expect("ok");
        assert!(matches!(u.approximation, Approximation::Fallback { .. }), "{:?}", u.approximation);
        assert!(u.perimeter_ms <= 300.0);
    }

    #[test]
    fn the_reference_is_the_highest_priority_then_the_earliest() {
        let a = job("a", 10.0, &[], Priority::Low);
        let b = job("b", 10.0, &[], Priority::High);
        let c = job("c", 10.0, &[], Priority::High);
        assert_eq!(reference(&[a.clone(), b, c]), 1);
        assert_eq!(reference(&[a.clone(), a]), 0);
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert_eq!(unify(&[], &Params::default()), Err(UnifyError::Empty));
        let j = job("z", 0.0, &[], Priority::Low);
        assert!(matches!(unify(&[j], &Params::default()), Err(UnifyError::BadPeriod { .. })));
    }
}
