//! Time of the exact rotation search with cushion (`Search::OptimalCushion`)
//! over random 4-job cases on one 50 Gbit/s link, 72 steps: jobs of one
//! period (every rotation of every job is a candidate, the slow case) and of
//! mixed periods, each with 1–2 Up arcs of random length and rate, so some
//! cases fit perfectly and some cannot. Prints median, p99 and maximum per
//! family, and how the 8-job heuristic compares with the exact optimum.
//!
//! `cargo run --release -p orrery-interleave --example search_p99 [CASES] [--four-only]`
//! (the 8-job exact searches take minutes; `--four-only` skips them).

use orrery_interleave::unified::{CircleJob, Params, unify};
use orrery_interleave::{Search, solve};
use orrery_model::{Arc, Circle, Priority};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::time::Instant;

const CAP: f64 = 50.0;

fn job(rng: &mut ChaCha8Rng, period_ms: f64, i: usize) -> CircleJob {
    let mut arcs = Vec::new();
    let mut start = 0.0;
    for _ in 0..rng.random_range(1..=2) {
        let s = start + rng.random_range(0.0..0.25) * period_ms;
        let d = rng.random_range(0.05..0.35) * period_ms;
        if s + d <= period_ms {
            arcs.push(Arc { start_ms: s, duration_ms: d, gbps: rng.random_range(10.0f64..50.0).round() });
            start = s + d;
        }
    }
    CircleJob {
        name: format!("j{i}"),
        priority: if i == 0 { Priority::High } else { Priority::Low },
        circle: Circle { period_ms, arcs },
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize]
}

fn main() {
    let cases: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(400);
    let params = Params::default();
    for (family, mixed) in [("one period (100 ms)", false), ("mixed periods (40-200 ms)", true)] {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut ms = Vec::with_capacity(cases);
        let mut score_ms = Vec::with_capacity(cases);
        let mut contended = 0;
        for _ in 0..cases {
            let jobs: Vec<CircleJob> = (0..4)
                .map(|i| {
                    let p = if mixed { f64::from(rng.random_range(2u32..=10)) * 20.0 } else { 100.0 };
                    job(&mut rng, p, i)
                })
                .collect();
            let Ok(u) = unify(&jobs, &params) else { continue };
            let t = Instant::now();
            let sol = solve(&u, CAP, Search::OptimalCushion);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            solve(&u, CAP, Search::Exhaustive);
            score_ms.push(t.elapsed().as_secs_f64() * 1e3);
            if sol.excess > 1e-9 {
                contended += 1;
            }
        }
        ms.sort_by(f64::total_cmp);
        score_ms.sort_by(f64::total_cmp);
        println!(
            "  best score alone (exhaustive): median {:.3} ms, p99 {:.3} ms",
            percentile(&score_ms, 0.5),
            percentile(&score_ms, 0.99)
        );
        println!(
            "4 jobs, {family}: {} cases ({contended} with no perfect rotation): median {:.3} ms, p99 {:.3} ms, max {:.3} ms",
            ms.len(),
            percentile(&ms, 0.5),
            percentile(&ms, 0.99),
            ms[ms.len() - 1]
        );
    }
    if std::env::args().any(|a| a == "--four-only") {
        return;
    }
    // The 8-job heuristic against the exact optimum (exhaustive search).
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (mut optimal, mut worst, mut n) = (0, 1.0f64, 0);
    let (mut t_exact, mut t_heur) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        let jobs: Vec<CircleJob> = (0..8)
            .map(|i| {
                let p = f64::from(rng.random_range(2u32..=5)) * 40.0;
                job(&mut rng, p, i)
            })
            .collect();
        let Ok(u) = unify(&jobs, &params) else { continue };
        let t = Instant::now();
        let exact = solve(&u, CAP, Search::Exhaustive);
        t_exact.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let h = solve(&u, CAP, Search::Heuristic { restarts: 16, seed: 1 });
        t_heur.push(t.elapsed().as_secs_f64() * 1e3);
        n += 1;
        if h.score >= exact.score - 1e-9 {
            optimal += 1;
        }
        worst = worst.min(h.score / exact.score);
    }
    t_exact.sort_by(f64::total_cmp);
    t_heur.sort_by(f64::total_cmp);
    println!(
        "8 jobs, 40 random cases: heuristic optimal in {optimal} of {n}, worst {:.1}% of the optimum's score; \
         exact median {:.1} ms (max {:.1}), heuristic median {:.1} ms",
        worst * 100.0,
        percentile(&t_exact, 0.5),
        t_exact[t_exact.len() - 1],
        percentile(&t_heur, 0.5)
    );
}
