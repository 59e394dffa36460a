//! Scores over the discretised unified circle.
//!
//! A rotation is a number of bins `k_j` by which job `j`'s demand is delayed:
//! after rotation, bin `b` carries `demand_j[(b − k_j) mod A]`.

use crate::unified::UnifiedCircle;

/// Total demand per angle with the given rotations (Metronome Eq. 4,
/// CASSINI Table 1 Eq. 3). O(jobs · A).
pub fn demand(u: &UnifiedCircle, rotations: &[usize]) -> Vec<f64> {
    let a = u.precision;
    let mut s = vec![0.0; a];
    for (j, &k) in u.jobs.iter().zip(rotations) {
        add_rotated(&mut s, &j.demand, k);
    }
    s
}

/// `s[b] += d[(b − k) mod A]`, as two straight runs (no division per bin:
/// this is on the rotation search's hot path). O(A).
pub fn add_rotated(s: &mut [f64], d: &[f64], k: usize) {
    let a = s.len();
    debug_assert_eq!(d.len(), a, "a demand has one value per bin");
    if a == 0 {
        return;
    }
    let k = k % a;
    let (head, tail) = d.split_at(a - k);
    s[k..].iter_mut().zip(head).for_each(|(x, &v)| *x += v);
    s[..k].iter_mut().zip(tail).for_each(|(x, &v)| *x += v);
}

/// Sum over angles of the demand above capacity (CASSINI Eq. 1), Gbit/s·bins.
pub fn excess(s: &[f64], capacity: f64) -> f64 {
    s.iter().map(|&x| over(x, capacity)).sum()
}

/// Demand above capacity at one angle; a rounding error (1e-9 of the
/// capacity) does not count.
pub fn over(x: f64, capacity: f64) -> f64 {
    let e = x - capacity;
    if e > capacity * 1e-9 { e } else { 0.0 }
}

/// CASSINI's compatibility score (Eq. 2): `1 − Σ excess / (|A| · C)`; 1 is
/// fully compatible and it may be negative.
pub fn compatibility(s: &[f64], capacity: f64) -> f64 {
    1.0 - excess(s, capacity) / (s.len() as f64 * capacity)
}

/// Metronome's node score (Eq. 18) on a 0–100 scale. As printed, Eq. 18
/// subtracts `Excess / (B · Di-Pre)` — a fraction in [0, 1] for any realistic
/// excess — from 100, which would keep every score in (99, 100]; we read it as
/// `100 · (1 − Excess / (B · Di-Pre))`, i.e. 100 × CASSINI's score, which keeps
/// 100 as the perfect score and lets contention lower it.
pub fn node_score(s: &[f64], capacity: f64) -> f64 {
    100.0 * compatibility(s, capacity)
}

/// Link utilisation ξ_l (Metronome Eq. 6): carried demand over capacity,
/// averaged over the circle.
pub fn link_utilisation(s: &[f64], capacity: f64) -> f64 {
    s.iter().map(|&x| x.min(capacity)).sum::<f64>() / (s.len() as f64 * capacity)
}

/// Average bandwidth utilisation Γ (Metronome Eq. 5) over links given as
/// (capacity B_l, utilisation ξ_l): `Σ_l B_l · ξ_l / B_max / |L|`.
pub fn gamma(links: &[(f64, f64)]) -> f64 {
    let b_max = links.iter().map(|l| l.0).fold(0.0, f64::max);
    if links.is_empty() || b_max <= 0.0 {
        return 0.0;
    }
    links.iter().map(|&(b, xi)| b * xi / b_max).sum::<f64>() / links.len() as f64
}

/// Two jobs contend on a link when their peak demands together reach its
/// capacity (Metronome §II-C, under Eq. 9).
pub fn contend(u: &UnifiedCircle, a: usize, b: usize, capacity: f64) -> bool {
    u.jobs[a].peak_gbps > 0.0 && u.jobs[b].peak_gbps > 0.0 && u.jobs[a].peak_gbps + u.jobs[b].peak_gbps >= capacity
}

/// For every bin, the circular distance (in bins) to the nearest bin where the
/// rotated demand `d` is non-zero; `usize::MAX` when `d` is all zero. O(A),
/// with no division per bin (the cushion search calls it at every node).
pub fn distance_field(d: &[f64], k: usize) -> Vec<usize> {
    let a = d.len();
    let mut out = vec![usize::MAX; a];
    if d.iter().all(|&v| v <= 0.0) {
        return out;
    }
    // Bin b of the circle carries d[(b − k) mod A]: walk the circle twice in
    // each direction (to wrap) with that index kept in step.
    let k = k % a;
    let src = |b: usize| if b >= k { b - k } else { b + a - k };
    let mut last: Option<usize> = None;
    for i in 0..2 * a {
        let b = if i >= a { i - a } else { i };
        if d[src(b)] > 0.0 {
            last = Some(i);
        }
        if let Some(l) = last {
            out[b] = out[b].min(i - l);
        }
    }
    last = None;
    for i in (0..2 * a).rev() {
        let b = if i >= a { i - a } else { i };
        if d[src(b)] > 0.0 {
            last = Some(i);
        }
        if let Some(l) = last {
            out[b] = out[b].min(l - i);
        }
    }
    out
}

/// The cushion Ψ (Metronome Eq. 9) in bins: the fewest empty bins between
/// bins where two contending jobs communicate (0 when they touch or share a
/// bin); `None` when no two jobs contend.
///
/// Eq. 9 as printed measures between arc midpoints; we measure the gap
/// between the arcs' edges, which is the "communication interval" the text
/// says the third stage maximises (midpoint distance would call two long
/// overlapping arcs well separated). O(pairs · A).
pub fn cushion(u: &UnifiedCircle, rotations: &[usize], capacity: f64) -> Option<usize> {
    let n = u.jobs.len();
    let mut best: Option<usize> = None;
    for s in 0..n {
        let field = distance_field(&u.jobs[s].demand, rotations[s]);
        for (t, &kt) in rotations.iter().enumerate().skip(s + 1) {
            if !contend(u, s, t, capacity) {
                continue;
            }
            let d = min_over_support(&field, &u.jobs[t].demand, kt).saturating_sub(1);
            best = Some(best.map_or(d, |b: usize| b.min(d)));
        }
    }
    best
}

/// The widest cushion any rotations could give, from bin counts alone: two
/// contending jobs `i`, `j` at cushion Ψ ≥ 1 occupy disjoint bins, and each
/// of the (at least two) places around the circle where one's communication
/// gives way to the other's has Ψ bins used by neither, so
/// `nnz_i + nnz_j + 2Ψ ≤ A`. The least of `⌊(A − nnz_i − nnz_j) / 2⌋` over
/// contending pairs (0 when it is negative); `None` when no two jobs contend.
/// O(jobs · A + jobs²).
pub fn cushion_ceiling(u: &UnifiedCircle, capacity: f64) -> Option<usize> {
    let nnz: Vec<usize> = u.jobs.iter().map(|j| j.demand.iter().filter(|&&v| v > 0.0).count()).collect();
    let mut ceiling: Option<usize> = None;
    for i in 0..u.jobs.len() {
        for j in i + 1..u.jobs.len() {
            if contend(u, i, j, capacity) {
                let c = u.precision.saturating_sub(nnz[i] + nnz[j]) / 2;
                ceiling = Some(ceiling.map_or(c, |x: usize| x.min(c)));
            }
        }
    }
    ceiling
}

/// min over bins where rotated `d` is non-zero of `field[bin]`.
pub fn min_over_support(field: &[usize], d: &[f64], k: usize) -> usize {
    let a = field.len();
    let k = k % a.max(1);
    d.iter()
        .enumerate()
        .filter(|(_, v)| **v > 0.0)
        .map(|(b, _)| field[if b + k >= a { b + k - a } else { b + k }])
        .min()
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excess_and_score_by_hand() {
        // 4 angles at capacity 10: demands 5, 15, 25, 0 → excess 0 + 5 + 15 + 0 = 20.
        let s = [5.0, 15.0, 25.0, 0.0];
        assert_eq!(excess(&s, 10.0), 20.0);
        assert_eq!(compatibility(&s, 10.0), 1.0 - 20.0 / 40.0);
        assert_eq!(node_score(&s, 10.0), 50.0);
        // ξ = (5 + 10 + 10 + 0) / 40.
        assert_eq!(link_utilisation(&s, 10.0), 25.0 / 40.0);
        // Score can go negative (CASSINI §3).
        assert!(compatibility(&[50.0, 50.0], 10.0) < 0.0);
    }

    #[test]
    fn gamma_weights_links_by_capacity() {
        // Metronome Eq. 5: (25·0.8/25 + 10·0.5/25) / 2 = (0.8 + 0.2) / 2.
        assert!((gamma(&[(25.0, 0.8), (10.0, 0.5)]) - 0.5).abs() < 1e-12);
        assert_eq!(gamma(&[]), 0.0);
    }

    #[test]
    fn cushion_ceiling_from_bin_counts() {
        use crate::unified::{CircleJob, Params, unify};
        use orrery_model::{Arc, Circle, Priority};
        let job = |ms: f64, gbps: f64| CircleJob {
            name: String::new(),
            priority: Priority::Low,
            circle: Circle { period_ms: 100.0, arcs: vec![Arc { start_ms: 0.0, duration_ms: ms, gbps }] },
        };
        let p = Params { precision: 100, ..Params::default() };
        // Two 30-bin jobs at 40 Gbit/s on 100 bins of a 50 Gbit/s link:
        // (100 − 60) / 2 = 20 bins, reached by the exact search (the second
        // starts 50 ms after the first). A 5 Gbit/s job contends with
        // neither (40 + 5 < 50), so its 90 bins do not count.
        let u = unify(&[job(30.0, 40.0), job(30.0, 40.0), job(90.0, 5.0)], &p).expect("unifies");
        assert_eq!(cushion_ceiling(&u, 50.0), Some(20));
        let sol = crate::solve(&u, 50.0, crate::Search::OptimalCushion);
        assert_eq!((sol.score, sol.cushion_bins), (1.0, Some(20)));
        // Two 60-bin jobs cannot avoid sharing bins: nothing beats 0.
        let u = unify(&[job(60.0, 50.0), job(60.0, 50.0)], &p).expect("unifies");
        assert_eq!(cushion_ceiling(&u, 50.0), Some(0));
        // No contending pair, no cushion.
        let u = unify(&[job(60.0, 20.0), job(60.0, 20.0)], &p).expect("unifies");
        assert_eq!(cushion_ceiling(&u, 50.0), None);
    }

    #[test]
    fn distance_field_wraps() {
        let d = [0.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        assert_eq!(distance_field(&d, 0), vec![1, 0, 1, 2, 3, 2]);
        assert_eq!(distance_field(&d, 2), vec![3, 2, 1, 0, 1, 2]);
        assert_eq!(distance_field(&[0.0; 3], 0), vec![usize::MAX; 3]);
    }
}
