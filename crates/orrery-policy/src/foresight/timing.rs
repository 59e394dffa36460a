//! SolveTiming (FORESIGHT Alg. 1, lines 1–21): schedule iterations one at a
//! time, the job with the least attained service first. For each of the job's
//! profiled throttle rates, find the least delay such that its demand fits on
//! every logical link it uses; keep the rate that finishes earliest. The
//! schedule covers a horizon (the LCM of iteration lengths, capped).
//!
//! Time is discretised in bins of `bin_ms` (1 ms by default). Link usage is a
//! dense array per logical link with the maximum of each block of
//! [`BLOCK`] bins beside it ([`LinkUsage`]). Checking a phase of n bins at
//! one delay skips the blocks whose maximum leaves room and scans the
//! others bin by bin: O(n / BLOCK) on a free link, O(n) at worst. Each try
//! moves the iteration to where its most delayed phase first fits on its
//! own, so the tries are bounded by the phases that move it, not by the
//! delay in bins; placing an iteration costs O(Σ phase bins). The whole solve is therefore O(iterations ·
//! (log jobs + tries · phases · steps · n + Σ phase bins)) at worst, a step
//! being one jump of a phase past the bin that blocks it.

use super::logical::LogicalLink;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

/// Demand of one phase of an iteration on one logical link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Phase {
    /// Start, ms from the iteration's start.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// Logical link.
    pub link: LogicalLink,
    /// Gbit/s.
    pub gbps: f64,
}

/// One iteration of a job alone at one throttle rate (profiled by simulating
/// it alone: throttling is not a uniform stretch).
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The throttle, Gbit/s per flow (None: unthrottled).
    pub rate_gbps: Option<f64>,
    /// Iteration length alone at this rate, ms.
    pub length_ms: f64,
    /// Demand on logical links.
    pub phases: Vec<Phase>,
}

/// A job to schedule: its profiles (at least one).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedJob {
    /// Profiles, the unthrottled one first.
    pub profiles: Vec<Profile>,
}

/// A time range routing could not colour, and how often it came back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BadRange {
    /// Start, ms.
    pub start_ms: f64,
    /// End, ms.
    pub end_ms: f64,
    /// Rounds it has been returned (1: inflate communication; more: also
    /// shrink the capacity assumed, by `shrink` per extra round).
    pub rounds: u32,
}

/// The decision for one iteration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Planned {
    /// Job index.
    pub job: usize,
    /// Iteration number within the horizon.
    pub iteration: usize,
    /// When it starts (after its delay), ms.
    pub start_ms: f64,
    /// Delay added before it, ms.
    pub delay_ms: f64,
    /// Index into the job's profiles.
    pub profile: usize,
}

/// Solver settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimingParams {
    /// Time bin, ms.
    pub bin_ms: f64,
    /// Length of the schedule, ms.
    pub horizon_ms: f64,
    /// Factor communication phases are stretched by inside a bad range
    /// (first round).
    pub inflate: f64,
    /// Capacity factor per further round of a bad range.
    pub shrink: f64,
    /// Delay or throttle an iteration only when that costs less than the
    /// overlap it avoids (orrery's addition to Alg. 1; false: always wait
    /// for a fit, as the paper).
    pub waits_only_if_cheaper: bool,
}

impl Default for TimingParams {
    fn default() -> Self {
        TimingParams { bin_ms: 1.0, horizon_ms: 10_000.0, inflate: 1.5, shrink: 0.75, waits_only_if_cheaper: false }
    }
}

/// Phase `p` as bins [from, to) for an iteration starting at bin `at`,
/// stretched by `inflate` about its start.
fn bins(p: &Phase, at: usize, bin_ms: f64, inflate: f64) -> (usize, usize) {
    let from = at + (p.start_ms / bin_ms).floor() as usize;
    let len = ((p.end_ms - p.start_ms) * inflate / bin_ms).ceil().max(1.0) as usize;
    (from, from + len)
}

/// A phase in bins, computed once per solve (the hot loop tries many
/// delays per phase and must not round floats each time).
#[derive(Debug, Clone, Copy)]
struct BinnedPhase {
    /// First bin after the iteration's start.
    offset: usize,
    /// Length in bins, plain and stretched by `inflate`.
    len: [usize; 2],
    link: LogicalLink,
    gbps: f64,
}

impl BinnedPhase {
    fn of(p: &Phase, bin_ms: f64, inflate: f64) -> Self {
        let at = |f: f64| bins(p, 0, bin_ms, f);
        let (plain, stretched) = (at(1.0), at(inflate));
        BinnedPhase { offset: plain.0, len: [plain.1 - plain.0, stretched.1 - stretched.0], link: p.link, gbps: p.gbps }
    }

    /// Bins [from, to) for an iteration starting at bin `at`.
    fn at(&self, at: usize, inflated: bool) -> (usize, usize) {
        let from = at + self.offset;
        (from, from + self.len[usize::from(inflated)])
    }
}

/// Bins per block of [`LinkUsage`]: long enough that a phase of thousands of
/// bins is checked in tens of steps, short enough that scanning the block
/// that holds a conflict stays cheap.
const BLOCK: usize = 64;

/// Demand on one logical link per bin, Gbit/s, and the maximum of each
/// block of [`BLOCK`] bins. The maxima are exact, so a block skipped by
/// its maximum holds no bin the dense scan would have stopped at: the plan
/// is the same as scanning every bin, bin for bin (floating-point addition
/// is monotone, so `max + g ≤ c` implies `u + g ≤ c` for every bin).
#[derive(Debug, Clone)]
struct LinkUsage {
    bins: Vec<f64>,
    block_max: Vec<f64>,
}

impl LinkUsage {
    fn new(span: usize) -> Self {
        LinkUsage { bins: vec![0.0; span], block_max: vec![0.0; span.div_ceil(BLOCK)] }
    }

    /// Adds `gbps` ≥ 0 to bins [from, to) (clipped to the span). O(to − from):
    /// a block's maximum can only rise, to the largest of its bins that did.
    fn add(&mut self, from: usize, to: usize, gbps: f64) {
        debug_assert!(gbps >= 0.0, "demand is never negative");
        let to = to.min(self.bins.len());
        let mut at = from;
        while at < to {
            let block = at / BLOCK;
            let end = ((block + 1) * BLOCK).min(to);
            for x in &mut self.bins[at..end] {
                *x += gbps;
            }
            self.block_max[block] = max_of(&self.bins[at..end], self.block_max[block]);
            at = end;
        }
    }

    /// The earliest start s ≥ `from` at which a phase of `len` bins fits:
    /// no bin of [s, s + len) in the span exceeds `limit` with `gbps` added
    /// (bins past the span are free). Each step moves past the last bin that
    /// blocks, one [`Self::last_over`] a step.
    fn first_fit(&self, from: usize, len: usize, gbps: f64, limit: f64) -> usize {
        let mut start = from;
        while let Some(last) = self.last_over(start, start + len, gbps, limit) {
            start = last + 1;
        }
        start
    }

    /// The last bin in [from, to) (clipped to the span) where adding `gbps`
    /// exceeds `limit`. Blocks with room are skipped whole, from the end;
    /// busy ones are scanned bin by bin: O((to − from) / BLOCK + BLOCK · busy
    /// blocks), O(to − from) at worst.
    fn last_over(&self, from: usize, to: usize, gbps: f64, limit: f64) -> Option<usize> {
        let mut end = to.min(self.bins.len());
        while end > from {
            let block = (end - 1) / BLOCK;
            let start = (block * BLOCK).max(from);
            if self.block_max[block] + gbps > limit
                && let Some(x) = self.bins[start..end].iter().rposition(|&u| u + gbps > limit)
            {
                return Some(start + x);
            }
            end = start;
        }
        None
    }
}

/// The largest of `xs` and `init`. Four running maxima, so the loop has no
/// chain of dependent compares (a running `f64::max`, which also checks for
/// NaN, was a fifth of SolveTiming under `perf`); no bin is NaN.
fn max_of(xs: &[f64], init: f64) -> f64 {
    let pick = |a: f64, b: f64| if b > a { b } else { a };
    let mut top = [init; 4];
    let chunks = xs.chunks_exact(4);
    let rest = chunks.remainder().iter().fold(init, |a, &b| pick(a, b));
    for c in chunks {
        for i in 0..4 {
            top[i] = pick(top[i], c[i]);
        }
    }
    pick(pick(top[0], top[1]), pick(pick(top[2], top[3]), rest))
}

/// Runs SolveTiming. `capacity[l]` is logical link l's Gbit/s. Iterations
/// that would start after the horizon are not scheduled. Demand beyond the
/// horizon is checked against an empty network.
pub fn solve_timing(jobs: &[TimedJob], capacity: &[f64], bad: &[BadRange], p: &TimingParams) -> Vec<Planned> {
    let horizon = (p.horizon_ms / p.bin_ms).ceil() as usize;
    let longest = jobs
        .iter()
        .flat_map(|j| j.profiles.iter())
        .map(|pr| (pr.length_ms * p.inflate / p.bin_ms).ceil() as usize)
        .max()
        .unwrap_or(0);
    // Room for the last iteration to run past the horizon, plus its delay.
    let span = horizon + 3 * longest + 1;
    // Bins only for the links the jobs use: a part of the plan uses a few
    // leaves' links of hundreds, and allocating every link's 20,000 bins
    // was most of a part's plan (O(links used · span), not O(links · span)).
    let used = links_used(jobs, capacity.len());
    let mut usage: Vec<LinkUsage> = used.iter().map(|&u| LinkUsage::new(if u { span } else { 0 })).collect();
    let mut next = vec![0usize; jobs.len()]; // earliest start bin of each job's next iteration
    let mut service = vec![0.0f64; jobs.len()];
    let mut count = vec![0usize; jobs.len()];
    let mut out = Vec::new();
    let binned: Vec<Vec<Vec<BinnedPhase>>> = jobs
        .iter()
        .map(|j| {
            j.profiles
                .iter()
                .map(|pr| pr.phases.iter().map(|ph| BinnedPhase::of(ph, p.bin_ms, p.inflate)).collect())
                .collect()
        })
        .collect();
    // Least attained service among jobs with an iteration left in the
    // horizon, the lower index on ties: a min-heap, O(log J) a pick (a scan
    // of every job per iteration made 2,049 jobs' plan 0.8 s at 4,096 hosts).
    let mut least_served: BinaryHeap<Reverse<Served>> = (0..jobs.len())
        .filter(|&j| next[j] < horizon && !jobs[j].profiles.is_empty())
        .map(|j| Reverse(Served(service[j], j)))
        .collect();
    while let Some(Reverse(Served(_, j))) = least_served.pop() {
        let start = next[j];
        let t0 = start as f64 * p.bin_ms;
        // Lines 5–9: a bad range the iteration overlaps changes its rules.
        let rounds = bad
            .iter()
            .filter(|b| b.start_ms < t0 + jobs[j].profiles[0].length_ms && b.end_ms > t0)
            .map(|b| b.rounds)
            .max()
            .unwrap_or(0);
        let inflated = rounds >= 1;
        let scale = if rounds >= 2 { p.shrink.powi(rounds as i32 - 1) } else { 1.0 };
        // Lines 11–17: per rate, the least delay that fits; the earliest finish wins.
        let mut best: Option<(usize, usize, usize)> = None; // (finish bin, delay bins, profile)
        for (k, pr) in jobs[j].profiles.iter().enumerate() {
            let len = (pr.length_ms / p.bin_ms).ceil() as usize;
            // How far to move the iteration so that each phase reaches the
            // first place it fits on its own (0: every phase fits at this
            // delay). No delay in between fits: that phase would not.
            let jump = |d: usize| -> Option<usize> {
                let mut need = 0;
                for ph in &binned[j][k] {
                    let (a, b) = ph.at(start + d, inflated);
                    let cap = capacity.get(ph.link).copied().unwrap_or(0.0) * scale;
                    if ph.gbps > cap + 1e-9 {
                        return None; // never fits
                    }
                    let fits_from = usage.get(ph.link)?.first_fit(a, b - a, ph.gbps, cap + 1e-9);
                    need = need.max(fits_from - a);
                }
                Some(need)
            };
            // Jump from fit to fit: O(phases that move the iteration) tries,
            // not O(delay) (a jump past only the blocking bin made a short
            // phase on a busy link take one try per bin).
            let mut d = 0;
            let found = loop {
                if start + d + len >= span {
                    break None;
                }
                match jump(d) {
                    None => break None,
                    Some(0) => break Some(d),
                    Some(n) => d += n,
                }
            };
            let Some(d) = found else { continue };
            let finish = start + d + len;
            if best.is_none_or(|b| finish < b.0) {
                best = Some((finish, d, k));
            }
        }
        // Nothing fits even after a full iteration's delay: run unthrottled
        // without delay (the baseline), and let routing report the range.
        let len0 = (jobs[j].profiles[0].length_ms / p.bin_ms).ceil() as usize;
        let share_now = (start + len0, 0, 0);
        let (finish, d, k) = match best {
            // Waiting must cost less than sharing now: the delay and the
            // throttle's stretch against the excess the overlap puts on the
            // links (work beyond capacity, in link time; everyone's delay).
            // Inside a range the repair loop is fixing, the paper's rule: fit.
            Some(b) if p.waits_only_if_cheaper && rounds == 0 => {
                // A throttled profile that ends sooner than the unthrottled
                // one at once costs no wait (it underflowed, and chose the
                // unthrottled one, where overflow checks are off).
                let wait_ms = b.0.saturating_sub(share_now.0) as f64 * p.bin_ms;
                let excess_ms = overlap_excess_ms(&binned[j][0], start, &usage, capacity, scale, inflated, p.bin_ms);
                if excess_ms < wait_ms { share_now } else { b }
            }
            Some(b) => b,
            None => share_now,
        };
        let pr = &jobs[j].profiles[k];
        for ph in &binned[j][k] {
            let (a, b) = ph.at(start + d, inflated);
            if let Some(u) = usage.get_mut(ph.link) {
                u.add(a, b, ph.gbps);
            }
        }
        out.push(Planned {
            job: j,
            iteration: count[j],
            start_ms: (start + d) as f64 * p.bin_ms,
            delay_ms: d as f64 * p.bin_ms,
            profile: k,
        });
        count[j] += 1;
        service[j] += pr.length_ms;
        next[j] = finish.max(start + 1);
        if next[j] < horizon {
            least_served.push(Reverse(Served(service[j], j)));
        }
    }
    out
}

/// A job's attained service (ms) and its index, ordered by service (total
/// order on f64) and then by index, for the least-attained-service heap.
#[derive(Debug, Clone, Copy)]
struct Served(f64, usize);

impl PartialEq for Served {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Served {}

impl PartialOrd for Served {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Served {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
    }
}

/// The baseline's timing: every iteration as soon as the previous one ends,
/// unthrottled, with no delays (the links unbounded), over the horizon.
/// SolveTiming on unbounded links: each phase fits at no delay, so each
/// iteration takes the profile that ends first (the lowest index on ties)
/// and starts when the previous one ends. O(iterations · (profiles + log
/// jobs)) from the lengths alone (solving it over links' bins was a tenth
/// of a 4,096-host part's re-plan; a test holds the two equal).
pub fn baseline_timing(jobs: &[TimedJob], p: &TimingParams) -> Vec<Planned> {
    let lengths: Vec<Vec<f64>> = jobs.iter().map(|j| j.profiles.iter().map(|pr| pr.length_ms).collect()).collect();
    back_to_back(&lengths, p)
}

/// [`baseline_timing`] from each job's profile lengths, ms (the
/// unthrottled one first).
pub fn back_to_back(lengths: &[Vec<f64>], p: &TimingParams) -> Vec<Planned> {
    let horizon = (p.horizon_ms / p.bin_ms).ceil() as usize;
    let (mut next, mut service, mut count) =
        (vec![0usize; lengths.len()], vec![0.0f64; lengths.len()], vec![0; lengths.len()]);
    let mut least_served: BinaryHeap<Reverse<Served>> = (0..lengths.len())
        .filter(|&j| !lengths[j].is_empty() && horizon > 0)
        .map(|j| Reverse(Served(0.0, j)))
        .collect();
    let mut out = Vec::new();
    while let Some(Reverse(Served(_, j))) = least_served.pop() {
        let start = next[j];
        let bins = |ms: f64| (ms / p.bin_ms).ceil() as usize;
        // The earliest finish; `min_by_key` keeps the first of equals.
        let (k, len) = lengths[j].iter().map(|&ms| bins(ms)).enumerate().min_by_key(|x| x.1).unwrap_or((0, 0));
        out.push(Planned { job: j, iteration: count[j], start_ms: start as f64 * p.bin_ms, delay_ms: 0.0, profile: k });
        count[j] += 1;
        service[j] += lengths[j][k];
        next[j] = (start + len).max(start + 1);
        if next[j] < horizon {
            least_served.push(Reverse(Served(service[j], j)));
        }
    }
    out
}

/// Work beyond capacity if `pr` starts at bin `at` on top of `usage`,
/// summed over its phases as link time, ms: Σ max(0, u + g − c) / c per bin.
/// O(phase bins).
fn overlap_excess_ms(
    phases: &[BinnedPhase],
    at: usize,
    usage: &[LinkUsage],
    capacity: &[f64],
    scale: f64,
    inflated: bool,
    bin_ms: f64,
) -> f64 {
    let mut excess = 0.0;
    for ph in phases {
        let cap = capacity.get(ph.link).copied().unwrap_or(0.0) * scale;
        let Some(u) = usage.get(ph.link).map(|u| &u.bins) else { continue };
        let (a, b) = ph.at(at, inflated);
        for x in &u[a.min(u.len())..b.min(u.len())] {
            excess += (x + ph.gbps - cap).max(0.0) / cap.max(1e-9) * bin_ms;
        }
    }
    excess
}

/// Which of `links` logical links some phase of some job's profile uses.
/// O(links + phases).
fn links_used(jobs: &[TimedJob], links: usize) -> Vec<bool> {
    let mut used = vec![false; links];
    for ph in jobs.iter().flat_map(|j| &j.profiles).flat_map(|pr| &pr.phases) {
        if let Some(u) = used.get_mut(ph.link) {
            *u = true;
        }
    }
    used
}

/// Demand of a plan on each logical link per bin, Gbit/s (no bins for a
/// link no job uses). O(links + Σ phase bins).
fn usage(jobs: &[TimedJob], capacity: &[f64], plan: &[Planned], bin_ms: f64) -> Vec<Vec<f64>> {
    let end = plan
        .iter()
        .map(|x| ((x.start_ms + jobs[x.job].profiles[x.profile].length_ms) / bin_ms).ceil() as usize + 1)
        .max()
        .unwrap_or(0);
    let mut usage: Vec<Vec<f64>> =
        links_used(jobs, capacity.len()).iter().map(|&u| vec![0.0f64; if u { end } else { 0 }]).collect();
    for x in plan {
        let at = (x.start_ms / bin_ms).round() as usize;
        for ph in &jobs[x.job].profiles[x.profile].phases {
            let (a, b) = bins(ph, at, bin_ms, 1.0);
            for u in &mut usage[ph.link][a.min(end)..b.min(end)] {
                *u += ph.gbps;
            }
        }
    }
    usage
}

/// Peak demand of a plan on each logical link relative to its capacity
/// (≤ 1 means no link is ever oversubscribed). O(Σ phase bins).
pub fn peak_load(jobs: &[TimedJob], capacity: &[f64], plan: &[Planned], bin_ms: f64) -> f64 {
    usage(jobs, capacity, plan, bin_ms)
        .iter()
        .zip(capacity)
        .map(|(u, &c)| u.iter().copied().fold(0.0, f64::max) / c.max(1e-12))
        .fold(0.0, f64::max)
}

/// What sharing the logical links costs a plan's iterations, ms. In a bin
/// where a link carries u > c, fair sharing slows every phase on it by u / c,
/// so the phase takes u / c − 1 of the bin longer; an iteration loses its
/// most stretched phase. Time-resolved: it counts the phases that meet, not
/// average loads, so it sees what a time shift can avoid (two jobs that
/// collide on a link at every iteration although it is mostly idle).
/// O(Σ phase bins).
pub fn sharing_cost(jobs: &[TimedJob], capacity: &[f64], plan: &[Planned], bin_ms: f64) -> f64 {
    let usage = usage(jobs, capacity, plan, bin_ms);
    plan.iter()
        .map(|x| {
            let at = (x.start_ms / bin_ms).round() as usize;
            jobs[x.job].profiles[x.profile]
                .phases
                .iter()
                .map(|ph| {
                    let (a, b) = bins(ph, at, bin_ms, 1.0);
                    let (u, c) = (&usage[ph.link], capacity[ph.link].max(1e-12));
                    u[a.min(u.len())..b.min(u.len())].iter().map(|&g| (g / c - 1.0).max(0.0) * bin_ms).sum::<f64>()
                })
                .fold(0.0, f64::max)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// 60 ms of compute, then `comm` ms sending `gbps` on logical link 0.
    fn job(comm: f64, gbps: f64) -> Profile {
        Profile {
            rate_gbps: None,
            length_ms: 60.0 + comm,
            phases: vec![Phase { start_ms: 60.0, end_ms: 60.0 + comm, link: 0, gbps }],
        }
    }

    #[test]
    fn a_short_transfer_shares_rather_than_waiting_for_a_long_one() {
        // Job 0 sends 900 ms at the full link; job 1 (60 ms compute) sends
        // 10 ms. The paper's rule delays job 1 until job 0's phase ends
        // (840 ms); waiting only when cheaper lets it overlap, which puts
        // 10 ms of excess on the link instead.
        let jobs = vec![
            TimedJob { profiles: vec![job(900.0, 100.0)] },
            TimedJob {
                profiles: vec![Profile {
                    rate_gbps: None,
                    length_ms: 70.0,
                    phases: vec![Phase { start_ms: 60.0, end_ms: 70.0, link: 0, gbps: 100.0 }],
                }],
            },
        ];
        let strict = TimingParams { horizon_ms: 100.0, ..TimingParams::default() };
        let plan = solve_timing(&jobs, &[100.0], &[], &strict);
        let first_of_1 = plan.iter().find(|x| x.job == 1).expect("planned");
        assert_eq!(first_of_1.delay_ms, 900.0);
        let lenient = TimingParams { waits_only_if_cheaper: true, ..strict };
        let plan = solve_timing(&jobs, &[100.0], &[], &lenient);
        assert!(plan.iter().filter(|x| x.job == 1).all(|x| x.delay_ms == 0.0));
        // Equal costs keep the paper's choice: two 40 ms phases at full rate
        // overlap for 40 ms of excess, the same as waiting 40 ms.
        let two = vec![TimedJob { profiles: vec![job(40.0, 100.0)] }; 2];
        let p = TimingParams { horizon_ms: 1000.0, waits_only_if_cheaper: true, ..TimingParams::default() };
        assert_eq!(solve_timing(&two, &[100.0], &[], &p)[1].delay_ms, 40.0);
    }

    #[test]
    fn a_second_job_is_delayed_just_enough_to_communicate_after_the_first() {
        // Two jobs, each 60 ms compute + 40 ms at the full 100 Gbit/s of link 0.
        let jobs = vec![TimedJob { profiles: vec![job(40.0, 100.0)] }; 2];
        let p = TimingParams { horizon_ms: 1000.0, ..TimingParams::default() };
        let plan = solve_timing(&jobs, &[100.0], &[], &p);
        // LAS alternates the jobs; job 1's first iteration waits 40 ms, so its
        // communication starts when job 0's ends.
        assert_eq!((plan[0].job, plan[0].delay_ms), (0, 0.0));
        assert_eq!((plan[1].job, plan[1].delay_ms), (1, 40.0));
        assert!(peak_load(&jobs, &[100.0], &plan, 1.0) <= 1.0 + 1e-9);
        // Both keep iterating every 100 ms (the link is busy 80% of the time).
        let later: Vec<f64> = plan.iter().filter(|x| x.job == 1 && x.iteration > 0).map(|x| x.delay_ms).collect();
        assert!(later.iter().all(|&d| d == 0.0), "{later:?}");
    }

    #[test]
    fn throttling_wins_when_half_the_link_is_free() {
        // Job 0 sends 50 Gbit/s for 40 ms. Job 1 can send at 100 Gbit/s for
        // 40 ms after waiting 40 ms (finish 140), or throttled at 50 for 80 ms
        // alongside job 0 without waiting (also finish 140).
        let j0 = TimedJob { profiles: vec![job(40.0, 50.0)] };
        let mut throttled = job(80.0, 50.0);
        throttled.rate_gbps = Some(50.0);
        let j1 = TimedJob { profiles: vec![job(40.0, 100.0), throttled] };
        let p = TimingParams { horizon_ms: 50.0, ..TimingParams::default() };
        let plan = solve_timing(&[j0, j1], &[100.0], &[], &p);
        let first1 = plan.iter().find(|x| x.job == 1).expect("job 1 planned");
        // Either way it finishes at 140 ms (ties keep the first profile).
        assert_eq!(first1.start_ms + if first1.profile == 0 { 100.0 } else { 140.0 }, 140.0);
        // With job 0 sending for 80 ms instead, throttling strictly wins.
        let j0 = TimedJob { profiles: vec![job(80.0, 50.0)] };
        let mut throttled = job(80.0, 50.0);
        throttled.rate_gbps = Some(50.0);
        let j1 = TimedJob { profiles: vec![job(40.0, 100.0), throttled] };
        let plan = solve_timing(&[j0, j1], &[100.0], &[], &p);
        let first1 = plan.iter().find(|x| x.job == 1).expect("job 1 planned");
        assert_eq!((first1.profile, first1.delay_ms), (1, 0.0));
    }

    #[test]
    fn sharing_costs_what_phases_that_meet_lose() {
        // Two jobs send 40 ms at the full 100 Gbit/s of link 0 after 60 ms of
        // compute. Together, each phase runs at half rate: 40 ms longer, so
        // 80 ms over the two iterations; 40 ms apart they do not meet.
        let jobs = vec![TimedJob { profiles: vec![job(40.0, 100.0)] }; 2];
        let at = |j: usize, start: f64| Planned { job: j, iteration: 0, start_ms: start, delay_ms: 0.0, profile: 0 };
        assert_eq!(sharing_cost(&jobs, &[100.0], &[at(0, 0.0), at(1, 0.0)], 1.0), 80.0);
        assert_eq!(sharing_cost(&jobs, &[100.0], &[at(0, 0.0), at(1, 40.0)], 1.0), 0.0);
        // Half overlapping: 20 ms at half rate each.
        assert_eq!(sharing_cost(&jobs, &[100.0], &[at(0, 0.0), at(1, 20.0)], 1.0), 40.0);
    }

    #[test]
    fn bad_ranges_inflate_then_shrink() {
        let jobs = vec![TimedJob { profiles: vec![job(40.0, 60.0)] }; 2];
        let p = TimingParams { horizon_ms: 100.0, ..TimingParams::default() };
        // Without a bad range the two 60 Gbit/s phases cannot share 100: delay 40.
        let plain = solve_timing(&jobs, &[100.0], &[], &p);
        assert_eq!(plain[1].delay_ms, 40.0);
        // First round: phases stretched 1.5×: job 1 waits for 60 ms of job 0.
        let once = solve_timing(&jobs, &[100.0], &[BadRange { start_ms: 0.0, end_ms: 100.0, rounds: 1 }], &p);
        assert_eq!(once[1].delay_ms, 60.0);
        // Later rounds also assume 75% capacity: 60 Gbit/s still fits alone.
        let twice = solve_timing(&jobs, &[100.0], &[BadRange { start_ms: 0.0, end_ms: 100.0, rounds: 2 }], &p);
        assert_eq!(twice[1].delay_ms, 60.0);
    }

    proptest! {
        /// The block maxima find the same bin as scanning every bin, for
        /// ranges that start and end inside blocks, span several or none;
        /// and the first fit is the first start whose bins are all free.
        #[test]
        fn block_maxima_find_the_bin_a_full_scan_finds(
            adds in prop::collection::vec((0usize..400, 0usize..200, 1.0f64..60.0), 0..40),
            queries in prop::collection::vec((0usize..450, 0usize..450, 1.0f64..60.0), 1..40),
        ) {
            let span = 5 * BLOCK + 17;
            let mut usage = LinkUsage::new(span);
            for &(from, len, gbps) in &adds {
                usage.add(from, from + len, gbps);
            }
            let busy = |x: usize, gbps: f64| x < span && usage.bins[x] + gbps > 100.0 + 1e-9;
            for &(from, to, gbps) in &queries {
                let scan = (from.min(span)..to.min(span)).rev().find(|&x| busy(x, gbps));
                prop_assert_eq!(usage.last_over(from, to, gbps, 100.0 + 1e-9), scan);
                // The first start from `from` whose `len` bins are all free.
                let len = to.saturating_sub(from).max(1);
                let fit = (from..).find(|&s| !(s..s + len).any(|x| busy(x, gbps))).expect("free past the span");
                prop_assert_eq!(usage.first_fit(from, len, gbps, 100.0 + 1e-9), fit);
            }
        }

        /// The baseline from lengths alone is SolveTiming on unbounded
        /// links, iteration for iteration: the same starts, profiles and
        /// order, throttled profiles and lengths that are not whole bins
        /// included.
        #[test]
        fn the_baseline_is_solve_timing_on_unbounded_links(
            specs in prop::collection::vec(
                (prop::collection::vec(0.5f64..300.0, 1..4), 0usize..3, 1.0f64..500.0),
                1..7,
            ),
            bin_ms in prop::sample::select(vec![1.0, 2.5]),
            cheaper in any::<bool>(),
        ) {
            let jobs: Vec<TimedJob> = specs
                .iter()
                .map(|(lengths, link, gbps)| TimedJob {
                    profiles: lengths
                        .iter()
                        .map(|&length_ms| Profile {
                            rate_gbps: None,
                            length_ms,
                            phases: vec![Phase { start_ms: 0.0, end_ms: length_ms / 2.0, link: *link, gbps: *gbps }],
                        })
                        .collect(),
                })
                .collect();
            let p = TimingParams { horizon_ms: 1500.0, bin_ms, waits_only_if_cheaper: cheaper, ..TimingParams::default() };
            let unbounded = solve_timing(&jobs, &[f64::INFINITY; 3], &[], &p);
            prop_assert_eq!(baseline_timing(&jobs, &p), unbounded);
        }

        /// Whatever the jobs, the plan never oversubscribes a logical link
        /// when every phase fits the link alone, and each job's iterations
        /// follow one another.
        #[test]
        fn plans_respect_capacity_and_order(
            specs in prop::collection::vec((20.0f64..200.0, 5.0f64..80.0, 10.0f64..100.0, 0usize..3), 1..6),
        ) {
            let jobs: Vec<TimedJob> = specs
                .iter()
                .map(|&(compute, comm, gbps, link)| TimedJob {
                    profiles: vec![Profile {
                        rate_gbps: None,
                        length_ms: compute + comm,
                        phases: vec![Phase { start_ms: compute, end_ms: compute + comm, link, gbps }],
                    }],
                })
                .collect();
            let capacity = [100.0, 100.0, 100.0];
            let p = TimingParams { horizon_ms: 2000.0, ..TimingParams::default() };
            let plan = solve_timing(&jobs, &capacity, &[], &p);
            prop_assert!(peak_load(&jobs, &capacity, &plan, 1.0) <= 1.0 + 1e-9);
            for (j, job) in jobs.iter().enumerate() {
                let mine: Vec<&Planned> = plan.iter().filter(|x| x.job == j).collect();
                prop_assert!(!mine.is_empty());
                for w in mine.windows(2) {
                    prop_assert!(w[1].start_ms >= w[0].start_ms + job.profiles[0].length_ms - 1.0);
                }
            }
        }
    }
}
