//! Rotation search: which rotation of each job's circle minimises the excess
//! demand on a link (CASSINI Table 1), and among those, which leaves the widest
//! cushion between contending jobs (Metronome's third stage, Eq. 9).
//!
//! The reference job (highest priority, earliest on ties) stays at angle 0
//! (Metronome Eq. 16); job `j` rotates by `k_j ∈ [0, ⌈A / r_j⌉)` bins, one of
//! its iterations on the unified circle (CASSINI Eq. 4, Metronome Eq. 15).

use crate::score::{add_rotated, contend, cushion, cushion_ceiling, distance_field, excess, min_over_support, over};
use crate::unified::UnifiedCircle;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which search to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Search {
    /// Every combination (branch and bound on the excess, which only grows as
    /// jobs are added). Returns the first best rotation in search order
    /// (the reference, then the heaviest jobs first).
    /// Worst case O(Π_{free j except last} K_j · A · nnz), nnz = bins where the
    /// last job communicates; typically far less thanks to pruning.
    Exhaustive,
    /// Metronome's Score phase (§III-B): walk the combinations in order, stop at
    /// the first interval of perfect-score rotations of the last job and take
    /// its middle; if none is perfect, the best score found by [`Search::Exhaustive`].
    FastFeasible,
    /// Metronome's ablation without the third stage (§IV-C, Table VII): like
    /// [`Search::FastFeasible`] but the last job starts at the *start* of the
    /// first perfect interval (its communication right after the previous
    /// job's), leaving no cushion.
    Compact,
    /// Metronome's stop-and-wait controller (§III-C): the best score, and among
    /// the rotations that reach it the largest cushion Ψ. Exact: every
    /// best-score rotation of the last job is evaluated. Metronome's
    /// middle-of-interval reduction is [`optimal_cushion`] with `middles_only`;
    /// it is exact for two single-rate jobs but can miss the widest cushion
    /// when a job has arcs of several rates (see the property tests), and at
    /// O(nnz) per rotation the full scan costs no more than finding the runs.
    OptimalCushion,
    /// Coordinate descent from a beam-search start, then `restarts` more descents
    /// (seeded), alternating random starts and kicks of the best so far
    /// (iterated local search), then pair moves on the best: for 6–10 jobs
    /// where exhaustive search explodes. Restarts and pair moves stop once
    /// [`HEURISTIC_BUDGET`] rotations have been evaluated.
    /// O((1 + restarts) · rounds · jobs · K · nnz + rounds · jobs² · K² · nnz).
    Heuristic {
        /// Random restarts after the greedy start.
        restarts: u32,
        /// Seed of the restarts.
        seed: u64,
    },
}

/// Rotations and their quality.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Solution {
    /// Rotation of each job in bins (input order; the reference has 0).
    pub rotations: Vec<usize>,
    /// Σ excess over bins (CASSINI Eq. 1), Gbit/s·bins.
    pub excess: f64,
    /// CASSINI compatibility score (Eq. 2).
    pub score: f64,
    /// Cushion Ψ in bins (None when no two jobs contend).
    pub cushion_bins: Option<usize>,
    /// Leaves (complete combinations) evaluated.
    pub evaluated: u64,
}

impl Solution {
    /// Rotation of each job in degrees.
    pub fn rotations_deg(&self, u: &UnifiedCircle) -> Vec<f64> {
        self.rotations.iter().map(|&k| k as f64 * 360.0 / u.precision as f64).collect()
    }

    /// Time-shift of each job (CASSINI Eq. 5): `(Δ_j / 2π · p) mod iter_time_j`, ms.
    pub fn shifts_ms(&self, u: &UnifiedCircle) -> Vec<f64> {
        self.rotations
            .iter()
            .zip(&u.jobs)
            .map(|(&k, j)| (k as f64 / u.precision as f64 * u.perimeter_ms).rem_euclid(j.period_ms))
            .collect()
    }

    /// Cushion in degrees.
    pub fn cushion_deg(&self, u: &UnifiedCircle) -> Option<f64> {
        self.cushion_bins.map(|b| b as f64 * 360.0 / u.precision as f64)
    }
}

const EPS: f64 = 1e-9;

/// Rotation range of job `j`: ⌈A / r_j⌉ bins, 1 for the reference.
pub fn range(u: &UnifiedCircle, j: usize) -> usize {
    if j == u.reference { 1 } else { u.precision.div_ceil(u.jobs[j].iterations.max(1) as usize) }
}

/// Runs `search` for the jobs of `u` on a link of `capacity` Gbit/s.
pub fn solve(u: &UnifiedCircle, capacity: f64, search: Search) -> Solution {
    let mut sol = match search {
        Search::Exhaustive => best_score(u, capacity),
        Search::FastFeasible => fast_feasible(u, capacity, false),
        Search::Compact => fast_feasible(u, capacity, true),
        Search::OptimalCushion => optimal_cushion(u, capacity, false),
        Search::Heuristic { restarts, seed } => heuristic(u, capacity, restarts, seed),
    };
    sol.score = 1.0 - sol.excess / (u.precision as f64 * capacity);
    if sol.cushion_bins.is_none() {
        sol.cushion_bins = cushion(u, &sol.rotations, capacity);
    }
    sol
}

/// The best score and, among its rotations, the largest cushion. With
/// `middles_only`, the last job is tried only at the middle of each run of
/// best-score rotations (Metronome §III-C); without, at every one (exact).
pub fn optimal_cushion(u: &UnifiedCircle, capacity: f64, middles_only: bool) -> Solution {
    let least = best_score(u, capacity);
    let mut evaluated = least.evaluated;
    let mode = Mode::Cushion { target: least.excess, middles_only };
    if middles_only {
        // Metronome's reduction: a rotation at the best score may not be a
        // candidate, so there is no floor.
        let mut sol = Dfs::new(u, capacity, mode).run();
        sol.evaluated += evaluated;
        return sol;
    }
    // A rotation at the best score gives a floor for the widest cushion
    // Ψ*, and the bin counts a ceiling ([`cushion_ceiling`]). When they
    // meet, that rotation is the answer: it is the first at the best score
    // in search order. Otherwise two searches: Ψ*'s value, placing first
    // the jobs that contend with the most others (their cushion prunes
    // early) and stopping at the ceiling; then the first rotation in search
    // order at the best score and Ψ*, stopping there. On 4-job, one-period
    // cases, where Ψ* is often forced to 0 by the bin counts, this takes
    // p99 from 22 to under 5 ms against one search that proves along the
    // way that nothing is wider.
    let floor = cushion(u, &least.rotations, capacity);
    let (Some(floor), Some(ceiling)) = (floor, cushion_ceiling(u, capacity)) else {
        return Solution { cushion_bins: floor, evaluated, ..least };
    };
    if floor >= ceiling {
        return Solution { cushion_bins: Some(floor), evaluated, ..least };
    }
    let mut order: Vec<usize> = (0..u.jobs.len()).filter(|&j| j != u.reference).collect();
    let partners = |j: usize| (0..u.jobs.len()).filter(|&i| i != j && contend(u, i, j, capacity)).count();
    let nnz = |j: usize| u.jobs[j].demand.iter().filter(|&&v| v > 0.0).count();
    order.sort_by_key(|&j| (std::cmp::Reverse(partners(j)), std::cmp::Reverse(nnz(j)), j));
    order.insert(0, u.reference);
    let mut widest = Dfs::with_order(u, capacity, mode, order);
    widest.psi_floor = floor;
    widest.stop_at = ceiling;
    let found = widest.run();
    evaluated += found.evaluated;
    let psi = found.cushion_bins.map_or(floor, |psi| psi.max(floor));
    if psi == floor {
        return Solution { cushion_bins: Some(floor), evaluated, ..least };
    }
    let mut first = Dfs::new(u, capacity, mode);
    first.psi_floor = psi;
    first.stop_at = psi;
    let mut sol = first.run();
    sol.evaluated += evaluated;
    sol
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Minimise the excess.
    Score,
    /// Among rotations with excess ≤ target, maximise the cushion.
    Cushion { target: f64, middles_only: bool },
    /// Stop at the middle (or, when compact, the start) of the first perfect interval.
    FirstPerfect { compact: bool },
}

/// Depth-first search over the free jobs with per-level partial sums.
struct Dfs<'a> {
    u: &'a UnifiedCircle,
    cap: f64,
    mode: Mode,
    order: Vec<usize>,
    sums: Vec<Vec<f64>>,
    fields: Vec<Vec<usize>>,
    current: Vec<usize>,
    /// For a free job, an earlier free job in `order` that is identical to it;
    /// its rotation is then the lower bound of this one's (symmetry breaking:
    /// swapping identical jobs changes neither excess nor cushion).
    twin: Vec<Option<usize>>,
    best: Option<(f64, Option<usize>, Vec<usize>)>,
    evaluated: u64,
    done: bool,
    /// Demand volume (Σ over bins) of the jobs after each position of `order`.
    volume_after: Vec<f64>,
    /// Each job's bins with demand: (bin, Gbit/s).
    supports: Vec<Vec<(usize, f64)>>,
    /// The line of the last level, kept to reuse its buffers.
    line: Line,

    /// A cushion known to be reachable at the target excess: in cushion mode,
    /// branches whose cushion is already below it are pruned.
    psi_floor: usize,
    /// A cushion nothing can exceed (cushion mode): the search stops at the
    /// first leaf that reaches it.
    stop_at: usize,
    /// An excess known to be reachable (from a heuristic): branches whose
    /// bound exceeds it are pruned before the first leaf is found. Ties are
    /// not pruned, so the search still returns the first best rotation in
    /// search order.
    upper: f64,
}

impl<'a> Dfs<'a> {
    /// The search in its order, which decides which of several equally
    /// good rotations is returned: the reference, then
    /// * for Metronome's walk to the first perfect interval, the other jobs
    ///   in input order, as the paper walks them;
    /// * for the exact searches, the heaviest jobs first (most demand over
    ///   the circle; input order on ties). The partial excess, and with it
    ///   the bound, grows early, and the last job, whose every rotation is
    ///   scored at the leaves, is the lightest. On 4-job, one-period cases
    ///   this takes the best score's p99 from 7.7 to 4.7 ms against input
    ///   order (`examples/search_p99.rs`).
    fn new(u: &'a UnifiedCircle, cap: f64, mode: Mode) -> Self {
        let mut order: Vec<usize> = (0..u.jobs.len()).filter(|&j| j != u.reference).collect();
        if !matches!(mode, Mode::FirstPerfect { .. }) {
            let volume = |j: usize| u.jobs[j].demand.iter().sum::<f64>();
            order.sort_by(|&x, &y| volume(y).total_cmp(&volume(x)).then(x.cmp(&y)));
        }
        order.insert(0, u.reference);
        Self::with_order(u, cap, mode, order)
    }

    /// The search over jobs in `order`, a permutation with the reference
    /// first.
    fn with_order(u: &'a UnifiedCircle, cap: f64, mode: Mode, order: Vec<usize>) -> Self {
        let n = u.jobs.len();
        let mut twin = vec![None; n];
        for (x, &j) in order.iter().enumerate().skip(1) {
            twin[j] = order[1..x]
                .iter()
                .rev()
                .copied()
                .find(|&i| u.jobs[i].demand == u.jobs[j].demand && u.jobs[i].iterations == u.jobs[j].iterations);
        }
        let volume: Vec<f64> = order.iter().map(|&j| u.jobs[j].demand.iter().sum()).collect();
        let volume_after = (0..n).map(|x| volume[x + 1..].iter().sum()).collect();
        Dfs {
            u,
            cap,
            mode,
            volume_after,
            supports: u
                .jobs
                .iter()
                .map(|j| j.demand.iter().copied().enumerate().filter(|(_, v)| *v > 0.0).collect())
                .collect(),
            line: Line::new(&[], cap),
            upper: f64::INFINITY,
            psi_floor: 0,
            stop_at: usize::MAX,
            order,
            sums: vec![vec![0.0; u.precision]; n + 1],
            fields: vec![Vec::new(); n],
            current: vec![0; n],
            twin,
            best: None,
            evaluated: 0,
            done: false,
        }
    }

    fn run(&mut self) -> Solution {
        self.level(0, None);
        let (excess, cushion_bins, rotations) =
            self.best.clone().unwrap_or((f64::INFINITY, None, vec![0; self.u.jobs.len()]));
        let excess = if excess.is_finite() { excess } else { self.total_excess(&rotations) };
        Solution { rotations, excess, score: 0.0, cushion_bins, evaluated: self.evaluated }
    }

    fn total_excess(&self, rot: &[usize]) -> f64 {
        excess(&crate::score::demand(self.u, rot), self.cap)
    }

    fn cushion_target(&self) -> Option<(f64, bool)> {
        match self.mode {
            Mode::Cushion { target, middles_only } => Some((target, middles_only)),
            _ => None,
        }
    }

    /// Distance from job `j` at rotation `k` to every earlier contending job.
    fn psi_to_placed(&self, depth: usize, j: usize, k: usize) -> Option<usize> {
        let mut psi: Option<usize> = None;
        for &i in &self.order[..depth] {
            if contend(self.u, i, j, self.cap) {
                let d = min_over_support(&self.fields[i], &self.u.jobs[j].demand, k).saturating_sub(1);
                psi = Some(psi.map_or(d, |p: usize| p.min(d)));
            }
        }
        psi
    }

    /// The least cushion a branch must still reach to be kept (cushion
    /// mode): above the best found so far and at least the floor. `None` when
    /// nothing can be kept, because the best has no contending pair at all.
    fn cushion_needed(&self) -> Option<usize> {
        match &self.best {
            Some((_, None, _)) => None,
            Some((_, Some(b), _)) => b.checked_add(1).map(|n| n.max(self.psi_floor)),
            None => Some(self.psi_floor),
        }
    }

    /// For every bin, the distance to the nearest communication of a job
    /// placed at `order[..placed]` that contends with `r`; `None` when none
    /// does. O(placed · A).
    fn contending_field(&self, placed: usize, r: usize) -> Option<Vec<usize>> {
        let mut field: Option<Vec<usize>> = None;
        for &i in &self.order[..placed] {
            if contend(self.u, i, r, self.cap) {
                match &mut field {
                    None => field = Some(self.fields[i].clone()),
                    Some(f) => f.iter_mut().zip(&self.fields[i]).for_each(|(x, &y)| *x = (*x).min(y)),
                }
            }
        }
        field
    }

    /// The cushion job `r` at rotation `k` keeps from the jobs behind
    /// `field`, or `None` as soon as it is below `need`. O(nnz_r).
    fn cushion_at(&self, field: &[usize], r: usize, k: usize, need: usize) -> Option<usize> {
        let a = self.u.precision;
        // As `min_over_support(..).saturating_sub(1)`: a job with no bins of
        // demand is usize::MAX − 1 away.
        let mut least = usize::MAX - 1;
        for &(b, _) in &self.supports[r] {
            let i = b + k;
            let d = field[if i >= a { i - a } else { i }].saturating_sub(1);
            if d < need {
                return None;
            }
            least = least.min(d);
        }
        Some(least)
    }

    fn better(&self, excess: f64, psi: Option<usize>) -> bool {
        match &self.best {
            None => true,
            Some((e, p, _)) => match self.mode {
                Mode::Cushion { .. } => psi.unwrap_or(usize::MAX) > p.unwrap_or(usize::MAX),
                _ => excess < e - EPS,
            },
        }
    }

    fn level(&mut self, depth: usize, psi: Option<usize>) {
        if self.done {
            return;
        }
        let n = self.order.len();
        let j = self.order[depth];
        let k_range = range(self.u, j);
        let lo = self.twin[j].map_or(0, |t| self.current[t]);
        if depth + 1 == n {
            self.last(depth, j, lo, k_range, psi);
            return;
        }
        for k in lo..k_range {
            let (head, tail) = self.sums.split_at_mut(depth + 1);
            tail[0].copy_from_slice(&head[depth]);
            add_rotated(&mut tail[0], &self.u.jobs[j].demand, k);
            // A lower bound on the final excess, whatever the rotations of
            // the jobs still to place. Two, the larger counts:
            // * their demand volume beyond the spare capacity left (rotation
            //   moves demand, it does not shrink it), O(A);
            // * the sum over them of the least excess each adds alone to the
            //   partial sum at its best rotation: `over` is convex, so a
            //   job adds at least that much whatever else is added,
            //   O(Σ K_j · nnz_j).
            let (partial, spare) = excess_and_spare(&tail[0], self.cap);
            let slack = self.cap * 1e-9 * self.u.precision as f64;
            let limit = match (&self.best, self.mode) {
                (_, Mode::Cushion { target, .. }) => Some((target + EPS, false)),
                (Some((e, _, _)), Mode::Score) => Some((e - EPS, true)),
                (_, Mode::FirstPerfect { .. }) => Some((EPS, false)),
                (None, Mode::Score) => Some((self.upper + EPS, false)),
            };
            let prunes = |b: f64| limit.is_some_and(|(l, inclusive)| if inclusive { b >= l } else { b > l });
            let mut bound = partial + (self.volume_after[depth] - spare - slack).max(0.0);
            // (The last job alone is scored exactly by `last` at the same cost.)
            if depth + 2 < self.order.len() && !prunes(bound) && limit.is_some_and(|(l, _)| l.is_finite()) {
                let line = Line::new(&tail[0], self.cap);
                let alone: f64 = self.order[depth + 1..]
                    .iter()
                    .map(|&r| line.least_increment(&self.supports[r], range(self.u, r)))
                    .sum();
                bound = bound.max(partial + alone - slack);
            }
            let prune = prunes(bound);
            if prune {
                continue;
            }
            let mut p = psi;
            if self.cushion_target().is_some() {
                let d = self.psi_to_placed(depth, j, k);
                p = match (p, d) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                // The cushion only shrinks as jobs are added.
                if let Some((_, bp, _)) = &self.best
                    && p.unwrap_or(usize::MAX) <= bp.unwrap_or(usize::MAX)
                {
                    continue;
                }
                if p.unwrap_or(usize::MAX) < self.psi_floor {
                    continue;
                }
                self.fields[j] = distance_field(&self.u.jobs[j].demand, k);
                // A cushion bound: each job still to place must find a
                // rotation that keeps `need` bins from the placed jobs it
                // contends with, or no leaf below beats the best. The last
                // job alone is checked by `last` at the same cost.
                // O(Σ_r (depth · A + K_r · nnz_r)).
                if depth + 2 < n
                    && let Some(need) = self.cushion_needed()
                    && self.order[depth + 1..].iter().any(|&r| {
                        self.contending_field(depth + 1, r)
                            .is_some_and(|f| (0..range(self.u, r)).all(|kr| self.cushion_at(&f, r, kr, need).is_none()))
                    })
                {
                    continue;
                }
            }
            self.current[j] = k;
            self.level(depth + 1, p);
            if self.done {
                return;
            }
        }
    }

    /// The last job: excess for every rotation in O(nnz) each from the partial
    /// sum. A rotation whose excess already passes what the mode could accept
    /// (the best so far, the cushion target, zero) stops early and counts as
    /// infinite: its increment only grows with each bin, since `over` is
    /// non-decreasing.
    fn last(&mut self, depth: usize, j: usize, lo: usize, k_range: usize, psi: Option<usize>) {
        if let Mode::Cushion { target, middles_only: false } = self.mode {
            self.last_widest(depth, j, lo, k_range, psi, target);
            return;
        }
        let a = self.u.precision;
        let base = excess(&self.sums[depth], self.cap);
        let accept = match (&self.best, self.mode) {
            (_, Mode::Cushion { target, .. }) => target + EPS,
            (Some((e, _, _)), Mode::Score) => e - EPS,
            (None, Mode::Score) => self.upper + EPS,
            (_, Mode::FirstPerfect { .. }) => EPS,
        };
        if self.mode == Mode::Score {
            // Each rotation is measured against the best so far, which
            // tightens as the scan goes.
            self.line.fill(&self.sums[depth]);
            self.evaluated += (k_range - lo.min(k_range)) as u64;
            let mut accept = accept;
            for k in lo..k_range {
                if let Some(add) = self.line.increment(&self.supports[j], k, accept - base)
                    && self.better(base + add, None)
                {
                    self.current[j] = k;
                    self.best = Some((base + add, None, self.current.clone()));
                    accept = base + add - EPS;
                }
            }
            return;
        }
        let budget = accept - base;
        let mut ex = vec![f64::INFINITY; k_range];
        if budget >= 0.0 {
            let line = Line::new(&self.sums[depth], self.cap);
            for (k, e) in ex.iter_mut().enumerate().skip(lo) {
                if let Some(add) = line.increment(&self.supports[j], k, budget) {
                    *e = base + add;
                }
            }
        }
        self.evaluated += (k_range - lo.min(k_range)) as u64;
        match self.mode {
            // (Scored above, each rotation against the best so far.)
            Mode::Score => {}
            Mode::FirstPerfect { compact } => {
                let circular = k_range * self.u.jobs[j].iterations as usize == a;
                if let Some(k) = runs(&ex, 0.0, circular, compact).into_iter().next() {
                    self.current[j] = k;
                    self.best = Some((ex[k], None, self.current.clone()));
                    self.done = true;
                }
            }
            Mode::Cushion { target, middles_only } => {
                let candidates: Vec<usize> = if middles_only {
                    middles(&ex, target, k_range * self.u.jobs[j].iterations as usize == a)
                } else {
                    (0..k_range).filter(|&k| ex[k] <= target + EPS).collect()
                };
                for k in candidates {
                    let d = self.psi_to_placed(depth, j, k);
                    let p = match (psi, d) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                    if self.better(ex[k], p) {
                        self.current[j] = k;
                        self.best = Some((ex[k], p, self.current.clone()));
                    }
                }
            }
        }
    }

    /// The last job in exact cushion mode: each rotation in order is checked
    /// first for a cushion above the best so far, then for an excess within
    /// the target, both stopping at the first bin that fails. O(depth · A +
    /// K · nnz).
    fn last_widest(&mut self, depth: usize, j: usize, lo: usize, k_range: usize, psi: Option<usize>, target: f64) {
        let field = self.contending_field(depth, j);
        let line = Line::new(&self.sums[depth], self.cap);
        let base = excess(&self.sums[depth], self.cap);
        let budget = target + EPS - base;
        self.evaluated += (k_range - lo.min(k_range)) as u64;
        if budget < 0.0 {
            return;
        }
        for k in lo..k_range {
            let Some(need) = self.cushion_needed() else { return };
            if psi.unwrap_or(usize::MAX) < need {
                return;
            }
            let d = match &field {
                Some(f) => match self.cushion_at(f, j, k, need) {
                    Some(d) => Some(d),
                    None => continue,
                },
                None => None,
            };
            let Some(add) = line.increment(&self.supports[j], k, budget) else { continue };
            let p = match (psi, d) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            if self.better(base + add, p) {
                self.current[j] = k;
                self.best = Some((base + add, p, self.current.clone()));
                if p.unwrap_or(usize::MAX) >= self.stop_at {
                    self.done = true;
                    return;
                }
            }
        }
    }
}

/// A link's demand around the circle laid out twice, with its excess per
/// bin, so that the excess a rotated job adds is a straight scan. O(A) to build.
struct Line {
    demand: Vec<f64>,
    over: Vec<f64>,
    cap: f64,
}

impl Line {
    fn new(s: &[f64], cap: f64) -> Self {
        let mut line = Line { demand: Vec::with_capacity(2 * s.len()), over: Vec::with_capacity(2 * s.len()), cap };
        line.fill(s);
        line
    }

    /// Lays out `s` anew, reusing the buffers. O(A).
    fn fill(&mut self, s: &[f64]) {
        self.demand.clear();
        self.demand.extend(s.iter().chain(s));
        self.over.clear();
        let cap = self.cap;
        self.over.extend(self.demand.iter().map(|&x| over(x, cap)));
    }

    /// The excess a job with demand `support` adds at rotation `k`, or `None`
    /// once it passes `budget` (checked every 8 bins; the sum only grows, as
    /// `over` is non-decreasing). Summed bin by bin in support order, so the
    /// result is the same to the last bit as a plain scan. O(nnz).
    fn increment(&self, support: &[(usize, f64)], k: usize, budget: f64) -> Option<f64> {
        let mut add = 0.0;
        for chunk in support.chunks(8) {
            for &(b, v) in chunk {
                add += over(self.demand[b + k] + v, self.cap) - self.over[b + k];
            }
            if add > budget {
                return None;
            }
        }
        Some(add)
    }

    /// The least excess a job with demand `support` adds over its rotations
    /// `0..k_range`: each rotation stops once it passes the least so far.
    /// O(k_range · |support|).
    fn least_increment(&self, support: &[(usize, f64)], k_range: usize) -> f64 {
        let mut least = f64::INFINITY;
        for k in 0..k_range {
            if let Some(add) = self.increment(support, k, least) {
                least = least.min(add);
                if least <= 0.0 {
                    return 0.0;
                }
            }
        }
        least
    }
}

/// Excess over capacity (as [`excess`]) and spare capacity below it, summed
/// over bins, in one pass.
fn excess_and_spare(s: &[f64], cap: f64) -> (f64, f64) {
    s.iter().fold((0.0, 0.0), |(e, sp), &x| (e + over(x, cap), sp + (cap - x).max(0.0)))
}

/// Middles of the maximal runs of `ex[k] ≤ target`, in order of their start;
/// runs wrap around when `circular`.
fn middles(ex: &[f64], target: f64, circular: bool) -> Vec<usize> {
    runs(ex, target, circular, false)
}

/// The middle (or, with `starts`, the first) index of each run of indices with
/// `ex ≤ target`, in scan order. O(n).
fn runs(ex: &[f64], target: f64, circular: bool, starts: bool) -> Vec<usize> {
    let n = ex.len();
    let ok: Vec<bool> = ex.iter().map(|&e| e <= target + EPS).collect();
    if ok.iter().all(|&b| b) {
        return vec![if starts { 0 } else { n / 2 }];
    }
    let mut out = Vec::new();
    // Start scanning just after a non-ok index so wrapped runs are whole.
    let start = if circular { ok.iter().position(|&b| !b).map_or(0, |p| p + 1) } else { 0 };
    let mut i = 0;
    while i < n {
        let idx = (start + i) % n;
        if ok[idx] && (circular || idx >= start) {
            let mut len = 0;
            while i + len < n && ok[(start + i + len) % n] && (circular || start + i + len < n) {
                len += 1;
            }
            out.push((start + i + if starts { 0 } else { (len - 1) / 2 }) % n);
            i += len;
        } else {
            i += 1;
        }
    }
    out.sort_unstable_by_key(|&k| (k + n - start) % n);
    out
}

fn fast_feasible(u: &UnifiedCircle, capacity: f64, compact: bool) -> Solution {
    let mut d = Dfs::new(u, capacity, Mode::FirstPerfect { compact });
    let sol = d.run();
    if d.done {
        return sol;
    }
    let mut best = best_score(u, capacity);
    best.evaluated += sol.evaluated;
    best
}

fn best_score(u: &UnifiedCircle, capacity: f64) -> Solution {
    let mut evaluated = 0;
    let start = descend(u, capacity, vec![0; u.jobs.len()], &mut evaluated);
    let mut d = Dfs::new(u, capacity, Mode::Score);
    d.upper = start.1;
    let mut sol = d.run();
    sol.evaluated += evaluated;
    sol
}

/// Coordinate descent from `rot`: re-place one job at a time given the
/// others until nothing improves. Returns the rotations and their excess.
fn descend(u: &UnifiedCircle, capacity: f64, mut rot: Vec<usize>, evaluated: &mut u64) -> (Vec<usize>, f64) {
    let mut s = crate::score::demand(u, &rot);
    let mut current = excess(&s, capacity);
    for _round in 0..100 {
        let mut improved = false;
        for j in (0..u.jobs.len()).filter(|&j| j != u.reference) {
            sub_rotated(&mut s, &u.jobs[j].demand, rot[j]);
            let (k, e) = best_rotation(u, &s, j, capacity, evaluated);
            if e < current - EPS {
                rot[j] = k;
                current = e;
                improved = true;
            }
            add_rotated(&mut s, &u.jobs[j].demand, rot[j]);
        }
        if !improved {
            break;
        }
    }
    (rot, current)
}

fn heuristic(u: &UnifiedCircle, capacity: f64, restarts: u32, seed: u64) -> Solution {
    let n = u.jobs.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut best: Option<Solution> = None;
    let mut evaluated = 0u64;
    for attempt in 0..=restarts {
        // Bounded work: restarts stop once the budget is spent (the first
        // descent always runs).
        if attempt > 0 && evaluated >= HEURISTIC_BUDGET {
            break;
        }
        let mut rot = vec![0usize; n];
        if attempt == 0 {
            rot = beam(u, capacity, BEAM_WIDTH, &mut evaluated);
        } else if let (Some(b), true) = (&best, attempt % 2 == 0) {
            // Iterated local search: kick a third of the jobs of the best so far.
            rot.clone_from(&b.rotations);
            for _ in 0..n.div_ceil(3) {
                let j = rng.random_range(0..n);
                rot[j] = rng.random_range(0..range(u, j));
            }
        } else {
            for (j, r) in rot.iter_mut().enumerate() {
                *r = rng.random_range(0..range(u, j));
            }
        }
        // Coordinate descent: re-place one job at a time given the others.
        let (rot, current) = descend(u, capacity, rot, &mut evaluated);
        let psi = cushion(u, &rot, capacity);
        let better = best.as_ref().is_none_or(|b| {
            current < b.excess - EPS || (current <= b.excess + EPS && psi.unwrap_or(0) > b.cushion_bins.unwrap_or(0))
        });
        if better {
            best = Some(Solution { rotations: rot, excess: current, score: 0.0, cushion_bins: psi, evaluated: 0 });
        }
    }
    let mut sol =
        best.unwrap_or(Solution { rotations: vec![0; n], excess: 0.0, score: 0.0, cushion_bins: None, evaluated: 0 });
    pair_moves(u, capacity, &mut sol, &mut evaluated);
    sol.evaluated = evaluated;
    sol
}

/// Polishes a local optimum by moving two jobs at once (every pair of free
/// jobs, every pair of their rotations) until no pair move helps.
/// O(rounds · jobs² · K² · nnz).
fn pair_moves(u: &UnifiedCircle, capacity: f64, sol: &mut Solution, evaluated: &mut u64) {
    let free: Vec<usize> = (0..u.jobs.len()).filter(|&j| j != u.reference).collect();
    let mut s = crate::score::demand(u, &sol.rotations);
    'rounds: for _round in 0..20 {
        let mut improved = false;
        for (x, &i) in free.iter().enumerate() {
            for &j in &free[x + 1..] {
                if *evaluated >= HEURISTIC_BUDGET {
                    break 'rounds;
                }
                sub_rotated(&mut s, &u.jobs[i].demand, sol.rotations[i]);
                sub_rotated(&mut s, &u.jobs[j].demand, sol.rotations[j]);
                let mut best = (sol.rotations[i], sol.rotations[j], sol.excess);
                for ki in 0..range(u, i) {
                    add_rotated(&mut s, &u.jobs[i].demand, ki);
                    let (kj, e) = best_rotation(u, &s, j, capacity, evaluated);
                    if e < best.2 - EPS {
                        best = (ki, kj, e);
                    }
                    sub_rotated(&mut s, &u.jobs[i].demand, ki);
                }
                if best.2 < sol.excess - EPS {
                    sol.rotations[i] = best.0;
                    sol.rotations[j] = best.1;
                    sol.excess = best.2;
                    improved = true;
                }
                add_rotated(&mut s, &u.jobs[i].demand, sol.rotations[i]);
                add_rotated(&mut s, &u.jobs[j].demand, sol.rotations[j]);
            }
        }
        if !improved {
            break;
        }
    }
    sol.cushion_bins = cushion(u, &sol.rotations, capacity);
}

/// Rotations the heuristic evaluates at most (each O(nnz)) before it stops
/// restarting and polishing: about a second on this machine, whatever the
/// number of jobs or the precision.
pub const HEURISTIC_BUDGET: u64 = 20_000_000;

/// States kept per level by [`beam`].
const BEAM_WIDTH: usize = 256;

/// Beam search: place the free jobs one at a time (heaviest first), keeping
/// the `width` partial placements with the least excess. Width 1 is greedy.
/// O(jobs · width · (K · nnz + A)).
fn beam(u: &UnifiedCircle, capacity: f64, width: usize, evaluated: &mut u64) -> Vec<usize> {
    let a = u.precision;
    let n = u.jobs.len();
    let mut order: Vec<usize> = (0..n).filter(|&j| j != u.reference).collect();
    order.sort_by(|&x, &y| {
        let load = |j: usize| u.jobs[j].demand.iter().sum::<f64>();
        load(y).total_cmp(&load(x)).then(x.cmp(&y))
    });
    let mut start = vec![0.0; a];
    add_rotated(&mut start, &u.jobs[u.reference].demand, 0);
    let mut states: Vec<(Vec<usize>, Vec<f64>, f64)> = vec![(vec![0; n], start.clone(), excess(&start, capacity))];
    for &j in &order {
        let d = &u.jobs[j].demand;
        let mut candidates: Vec<(f64, usize, usize)> = Vec::new();
        for (si, (_, s, base)) in states.iter().enumerate() {
            for k in 0..range(u, j) {
                let e = base
                    + d.iter()
                        .enumerate()
                        .filter(|(_, v)| **v > 0.0)
                        .map(|(b, &v)| over(s[(b + k) % a] + v, capacity) - over(s[(b + k) % a], capacity))
                        .sum::<f64>();
                candidates.push((e, si, k));
                *evaluated += 1;
            }
        }
        candidates.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
        states = candidates
            .into_iter()
            .take(width.max(1))
            .map(|(e, si, k)| {
                let (mut rot, mut s, _) = states[si].clone();
                rot[j] = k;
                add_rotated(&mut s, d, k);
                (rot, s, e)
            })
            .collect();
    }
    states.into_iter().next().map_or_else(|| vec![0; n], |s| s.0)
}

/// `s[b] −= d[(b − k) mod A]`, the inverse of [`add_rotated`]. O(A).
fn sub_rotated(s: &mut [f64], d: &[f64], k: usize) {
    let a = s.len();
    if a == 0 {
        return;
    }
    let k = k % a;
    let (head, tail) = d.split_at(a - k);
    s[k..].iter_mut().zip(head).for_each(|(x, &v)| *x -= v);
    s[..k].iter_mut().zip(tail).for_each(|(x, &v)| *x -= v);
}

/// Best rotation of job `j` against the others' demand `s`; ties → smallest k.
fn best_rotation(u: &UnifiedCircle, s: &[f64], j: usize, cap: f64, evaluated: &mut u64) -> (usize, f64) {
    let a = u.precision;
    let base = excess(s, cap);
    let d = &u.jobs[j].demand;
    let mut best = (0, f64::INFINITY);
    for k in 0..range(u, j) {
        let e = base
            + d.iter()
                .enumerate()
                .filter(|(_, v)| **v > 0.0)
                .map(|(b, &v)| {
                    let x = s[(b + k) % a];
                    over(x + v, cap) - over(x, cap)
                })
                .sum::<f64>();
        *evaluated += 1;
        if e < best.1 - EPS {
            best = (k, e);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unified::{CircleJob, Params, unify};
    use orrery_model::{Arc, Circle, Priority};

    fn job(period: f64, arcs: &[(f64, f64, f64)], priority: Priority) -> CircleJob {
        CircleJob {
            name: String::new(),
            priority,
            circle: Circle {
                period_ms: period,
                arcs: arcs.iter().map(|&(s, d, g)| Arc { start_ms: s, duration_ms: d, gbps: g }).collect(),
            },
        }
    }

    #[test]
    fn two_half_duty_jobs_interleave_perfectly() {
        // Both communicate at 50 Gbit/s for the first half of a 100 ms
        // iteration on a 50 Gbit/s link: rotating one by 180° removes all excess.
        let jobs = [job(100.0, &[(0.0, 50.0, 50.0)], Priority::High), job(100.0, &[(0.0, 50.0, 50.0)], Priority::Low)];
        let u = unify(&jobs, &Params::default()).expect("ok");
        let before = 1.0 - excess(&crate::score::demand(&u, &[0, 0]), 50.0) / (72.0 * 50.0);
        assert!((before - 0.5).abs() < 1e-12);
        for search in [
            Search::Exhaustive,
            Search::FastFeasible,
            Search::OptimalCushion,
            Search::Heuristic { restarts: 2, seed: 1 },
        ] {
            let s = solve(&u, 50.0, search);
            assert!((s.score - 1.0).abs() < 1e-12, "{search:?}");
            assert_eq!(s.rotations[0], 0);
            assert_eq!(s.rotations[1], 36, "{search:?}: the only perfect rotation is 180°");
            assert_eq!(s.shifts_ms(&u)[1], 50.0);
        }
    }

    #[test]
    fn compact_starts_the_newcomer_right_after_the_reference_and_fast_feasible_centres_it() {
        // Two 100 ms jobs, each sending 30 ms at the full 50 Gbit/s: the second
        // fits anywhere in a shift of [30, 70] ms. Metronome's third stage takes
        // the middle (50 ms, a 20 ms cushion each side); the ablation the start.
        let jobs = [job(100.0, &[(0.0, 30.0, 50.0)], Priority::High), job(100.0, &[(0.0, 30.0, 50.0)], Priority::Low)];
        let u = unify(&jobs, &Params { precision: 100, ..Params::default() }).expect("ok");
        let fast = solve(&u, 50.0, Search::FastFeasible);
        let compact = solve(&u, 50.0, Search::Compact);
        assert_eq!((fast.score, compact.score), (1.0, 1.0));
        assert!((fast.shifts_ms(&u)[1] - 50.0).abs() < 1.0, "{:?}", fast.shifts_ms(&u));
        assert!((compact.shifts_ms(&u)[1] - 30.0).abs() < 1e-9, "{:?}", compact.shifts_ms(&u));
        assert!(compact.cushion_bins < fast.cushion_bins);
    }

    #[test]
    fn cassini_fig5_40_and_60_ms_are_fully_compatible() {
        // CASSINI §3, Fig. 5: j1 (40 ms) and j2 (60 ms) on a 120 ms unified circle.
        // Up phases of 10 ms each at the full link rate. j2's two Up phases, 60 ms
        // apart, fit between j1's three only when j2 starts 10 or 30 ms after
        // j1 (mod 40): the 30° rotation (= 10 ms of 120) of Fig. 5(d).
        let jobs = [job(40.0, &[(0.0, 10.0, 50.0)], Priority::High), job(60.0, &[(0.0, 10.0, 50.0)], Priority::Low)];
        let u = unify(&jobs, &Params::default()).expect("ok");
        assert_eq!(u.perimeter_ms, 120.0);
        let unrotated = 1.0 - excess(&crate::score::demand(&u, &[0, 0]), 50.0) / (72.0 * 50.0);
        assert!(unrotated < 1.0);
        for search in [Search::Exhaustive, Search::OptimalCushion] {
            let s = solve(&u, 50.0, search);
            assert!((s.score - 1.0).abs() < 1e-12, "{search:?}: {}", s.score);
            // j2 rotates within one of its iterations: 2π / r_2 = 180° = 36 bins.
            assert!(s.rotations[1] < 36);
            let shift = s.shifts_ms(&u)[1];
            assert!([10.0, 30.0, 50.0].iter().any(|t| (shift - t).abs() < 1e-9), "{shift}");
        }
    }

    #[test]
    fn middles_of_runs() {
        let ex = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        assert_eq!(middles(&ex, 0.0, false), vec![2, 5]);
        // Circular: run 7,0 wraps.
        let ex = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        assert_eq!(middles(&ex, 0.0, true), vec![4, 7]);
        assert_eq!(middles(&[0.0; 4], 0.0, true), vec![2]);
        assert!(middles(&[1.0; 4], 0.0, true).is_empty());
    }
}
