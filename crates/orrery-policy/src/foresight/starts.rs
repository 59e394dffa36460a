//! Every planned iteration's flows in order of start, produced as routing
//! asks for them (MergeRanges' input, FORESIGHT Alg. 1, line 24).
//!
//! A flow's key is (its start in the plan, its planned iteration, its index
//! in the profile) as one integer: flows that start together stay in plan
//! order, then profile order. Sorting every key of the horizon up front cost
//! O(F log F) for F flow intervals at each re-plan, most of them never
//! routed (the plan is re-made before its later ranges come up: a
//! 4,096-host LLM part holds some 650,000 in 20 s). Here each planned
//! iteration is a stream over its profile's flows sorted once, and a heap
//! of the streams' heads merges them: O(P + Σ f log f) to start (P planned
//! iterations, f flows of each distinct profile), O(log A) a flow taken
//! (A streams begun and not exhausted: about one a job, where a 20 s
//! horizon holds forty planned iterations of a 0.5 s job) and O(log P) a
//! stream begun. A stream joins the heap only when the merge reaches a
//! lower bound of its first key (its iteration's first start, index 0),
//! so every stream still waiting starts after the heap's least key.
//!
//! Adding the iteration's start to a flow's start is monotone, so a stream
//! in order of the flows' starts is in order of their plan starts. Two
//! different starts may round to one plan start; such a run is re-sorted by
//! index, so the keys come out exactly as a sort of all of them gives (a
//! test holds them equal).

use super::timing::Planned;
use crate::memo::FastMap;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What the merge reads of a profile (routing's `FlowProfile`).
pub trait Flows {
    /// Its flows.
    fn count(&self) -> usize;
    /// Flow i's start, ms from the iteration's start.
    fn start_ms(&self, i: usize) -> f64;
    /// One more than the highest leaf a flow touches (0 with no flows).
    fn leaves(&self) -> usize;
}

/// The flows of a plan in order of start (module docs).
#[derive(Debug, Default)]
pub struct Starts {
    /// Per distinct (job, profile) of the plan: its flows' indices in order
    /// of (start, index).
    orders: Vec<Vec<u32>>,
    /// Per planned iteration, where it is in its order.
    streams: Vec<Stream>,
    /// The next key of every stream begun and not exhausted, least first.
    heads: BinaryHeap<Reverse<u128>>,
    /// The streams not begun, by a lower bound of their first key (the
    /// key of their first start with flow index 0), least first.
    waiting: BinaryHeap<Reverse<u128>>,
}

/// One planned iteration's place in its profile's order.
#[derive(Debug, Default)]
struct Stream {
    /// Index into `orders`.
    order: u32,
    /// The next position of the order not taken.
    at: u32,
    /// The end of the run of equal plan starts `at` is in: positions before
    /// it are known to start together and in index order.
    run_end: u32,
    /// A run whose flows start at different times that round to one plan
    /// start, by index, last first (empty almost always).
    mixed: Vec<u32>,
}

impl Starts {
    /// Each distinct profile's flows sorted, every stream's first key in the
    /// heap; also returns the vertex count routing needs (one more than the
    /// highest leaf any planned flow touches). O(P + Σ f log f).
    pub fn new<'a, F: Flows + 'a>(plan: &[Planned], profile: impl Fn(usize) -> &'a F + Copy) -> (Self, usize) {
        let mut index: FastMap<(usize, usize), u32> = FastMap::default();
        let mut starts = Starts::default();
        let mut leaves = 0;
        for (k, x) in plan.iter().enumerate() {
            let order = *index.entry((x.job, x.profile)).or_insert_with(|| {
                let flows = profile(k);
                leaves = leaves.max(flows.leaves());
                let mut by_start: Vec<u32> = (0..flows.count() as u32).collect();
                by_start.sort_unstable_by_key(|&i| (total_order(flows.start_ms(i as usize)), i));
                starts.orders.push(by_start);
                starts.orders.len() as u32 - 1
            });
            starts.streams.push(Stream { order, ..Stream::default() });
        }
        let mut waiting = Vec::with_capacity(plan.len());
        for (k, x) in plan.iter().enumerate() {
            let order = &starts.orders[starts.streams[k].order as usize];
            if let Some(&first) = order.first() {
                let at = total_order(x.start_ms + profile(k).start_ms(first as usize));
                waiting.push(Reverse((u128::from(at) << 64) | ((k as u128) << 32)));
            }
        }
        starts.waiting = BinaryHeap::from(waiting);
        (starts, leaves)
    }

    /// Whether every key has been taken. O(1).
    pub fn is_empty(&self) -> bool {
        self.heads.is_empty() && self.waiting.is_empty()
    }

    /// The least key not taken. O(1), plus beginning the streams it reaches.
    pub fn peek<'a, F: Flows + 'a>(&mut self, plan: &[Planned], profile: impl Fn(usize) -> &'a F) -> Option<u128> {
        self.begin(plan, profile);
        self.heads.peek().map(|r| r.0)
    }

    /// Takes the least key. O(log A), plus O(run) when its stream enters a
    /// new run of equal plan starts, plus beginning the streams it reaches.
    pub fn pop<'a, F: Flows + 'a>(&mut self, plan: &[Planned], profile: impl Fn(usize) -> &'a F) -> Option<u128> {
        self.begin(plan, &profile);
        let Reverse(key) = self.heads.pop()?;
        let k = split(key).0;
        let s = &mut self.streams[k];
        if s.mixed.pop().is_none() {
            s.at += 1;
        }
        if let Some(next) = self.head(plan, profile, k) {
            self.heads.push(Reverse(next));
        }
        Some(key)
    }

    /// Moves into the heap every waiting stream whose first key may come
    /// before the heap's least: afterwards each stream still waiting has
    /// every key after it, so the heap's least is the least of all.
    /// O(log P) a stream begun.
    fn begin<'a, F: Flows + 'a>(&mut self, plan: &[Planned], profile: impl Fn(usize) -> &'a F) {
        while let Some(&Reverse(bound)) = self.waiting.peek() {
            if self.heads.peek().is_some_and(|&Reverse(least)| least < bound) {
                return;
            }
            self.waiting.pop();
            let k = split(bound).0;
            if let Some(first) = self.head(plan, &profile, k) {
                self.heads.push(Reverse(first));
            }
        }
    }

    /// Whether planned iteration k has flows not taken.
    pub fn pending(&self, k: usize) -> bool {
        self.streams
            .get(k)
            .is_some_and(|s| !s.mixed.is_empty() || (s.at as usize) < self.orders[s.order as usize].len())
    }

    /// Planned iteration k's next key, finding the run it starts when it
    /// has left the last one. O(1), or O(run) at a run's start.
    fn head<'a, F: Flows + 'a>(
        &mut self,
        plan: &[Planned],
        profile: impl Fn(usize) -> &'a F,
        k: usize,
    ) -> Option<u128> {
        let x = &plan[k];
        let flows = profile(k);
        let s = &mut self.streams[k];
        let order = &self.orders[s.order as usize];
        let at_plan = |i: u32| total_order(x.start_ms + flows.start_ms(i as usize));
        let key = |i: u32| (u128::from(at_plan(i)) << 64) | ((k as u128) << 32) | u128::from(i);
        if let Some(&i) = s.mixed.last() {
            return Some(key(i));
        }
        let (at, len) = (s.at as usize, order.len());
        if at >= len {
            return None;
        }
        if at >= s.run_end as usize {
            let t = at_plan(order[at]);
            let end = at + order[at..].iter().take_while(|&&i| at_plan(i) == t).count();
            let start = |p: usize| flows.start_ms(order[p] as usize).to_bits();
            if start(at) == start(end - 1) {
                s.run_end = end as u32;
            } else {
                // Different starts, one plan start: take them by index.
                s.mixed.extend_from_slice(&order[at..end]);
                s.mixed.sort_unstable_by(|a, b| b.cmp(a));
                s.at = end as u32;
                s.run_end = end as u32;
                return s.mixed.last().map(|&i| key(i));
            }
        }
        Some(key(order[at]))
    }
}

/// A key's (planned iteration, flow index).
pub fn split(key: u128) -> (usize, usize) {
    ((key >> 32) as u32 as usize, key as u32 as usize)
}

/// `x` as an integer in the order of [`f64::total_cmp`].
fn total_order(x: f64) -> u64 {
    let bits = x.to_bits();
    if bits >> 63 == 1 { !bits } else { bits | (1 << 63) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A profile as the merge sees it: its flows' starts.
    struct Offsets(Vec<f64>);

    impl Flows for Offsets {
        fn count(&self) -> usize {
            self.0.len()
        }
        fn start_ms(&self, i: usize) -> f64 {
            self.0[i]
        }
        fn leaves(&self) -> usize {
            0
        }
    }

    /// The keys as the router made them before: all of them, sorted.
    fn sorted(profiles: &[Vec<Offsets>], plan: &[Planned]) -> Vec<u128> {
        let mut keys = Vec::new();
        for (k, x) in plan.iter().enumerate() {
            for (i, s) in profiles[x.job][x.profile].0.iter().enumerate() {
                keys.push((u128::from(total_order(x.start_ms + s)) << 64) | ((k as u128) << 32) | i as u128);
            }
        }
        keys.sort_unstable();
        keys
    }

    /// The keys as the merge gives them; each peek is the pop after it.
    fn merged(profiles: &[Vec<Offsets>], plan: &[Planned]) -> Vec<u128> {
        let profile = |k: usize| &profiles[plan[k].job][plan[k].profile];
        let (mut starts, _) = Starts::new(plan, profile);
        let mut keys = Vec::new();
        while !starts.is_empty() {
            let next = starts.peek(plan, profile);
            assert_eq!(starts.pop(plan, profile), next);
            keys.extend(next);
        }
        assert_eq!(starts.pop(plan, profile), None);
        keys
    }

    #[test]
    fn starts_that_round_together_come_out_by_index() {
        // Doubles near 1e16 are 2 apart and a tie rounds to even: 1e16 + 1.0
        // is 1e16. Flow 0 (start 1.0) and flow 1 (start 0.0) start together
        // in the plan, so flow 0 comes first though its own start is later.
        let profiles = vec![vec![Offsets(vec![1.0, 0.0, 2.0])]];
        let plan = vec![Planned { job: 0, iteration: 0, start_ms: 1e16, delay_ms: 0.0, profile: 0 }];
        let order: Vec<usize> = merged(&profiles, &plan).into_iter().map(|k| split(k).1).collect();
        assert_eq!(order, sorted(&profiles, &plan).into_iter().map(|k| split(k).1).collect::<Vec<_>>());
        assert_eq!(order, vec![0, 1, 2]);
    }

    proptest::proptest! {
        /// The merge gives every key, in the order of a sort of all of
        /// them, for plans whose starts tie, round together and interleave.
        #[test]
        fn the_merge_is_the_sort(
            jobs in proptest::collection::vec(proptest::collection::vec(0u32..8, 1..12), 1..4),
            plan in proptest::collection::vec((0usize..4, 0u32..6, proptest::bool::ANY), 0..20),
        ) {
            // Starts in eighths of a ms (exact ties) or tenths (inexact sums);
            // plan starts near 2^53 ms make neighbouring sums round together.
            let profiles: Vec<Vec<Offsets>> = jobs
                .iter()
                .map(|s| {
                    let eighths: Vec<f64> = s.iter().map(|&x| f64::from(x) / 8.0).collect();
                    let tenths: Vec<f64> = s.iter().map(|&x| f64::from(x) / 10.0).collect();
                    vec![Offsets(eighths), Offsets(tenths)]
                })
                .collect();
            let plan: Vec<Planned> = plan
                .into_iter()
                .map(|(j, at, huge)| {
                    let job = j % profiles.len();
                    let base = if huge { 9.007_199_254_740_992e15 } else { 0.0 };
                    let start_ms = base + f64::from(at) * 0.3;
                    Planned { job, iteration: 0, start_ms, delay_ms: 0.0, profile: at as usize % 2 }
                })
                .collect();
            proptest::prop_assert_eq!(merged(&profiles, &plan), sorted(&profiles, &plan));
        }
    }
}
