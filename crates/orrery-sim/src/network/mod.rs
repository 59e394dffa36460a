//! Flow-level network: max-min fair rates by progressive filling, capped by
//! per-flow limits (NIC rate or throttle), recomputed only for the binding
//! components a change touches: flows joined through links whose flows ask
//! for more than the link carries ([`Network::recompute`]).
//!
//! Units: time in ns, sizes in bits, rates in Gbit/s — which is bits per ns.

use orrery_model::LinkId;
use std::sync::Arc;

mod maxmin;

/// Index of a flow in the network's slab.
pub type FlowId = usize;

/// A flow's directed links, shared: a simulator keeps one copy of each
/// path it routes on and every flow on it points there, so a flow's start
/// and end allocate nothing for its path.
pub type Path = Arc<[LinkId]>;

/// One flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Directed links crossed (empty for traffic inside a host).
    pub path: Path,
    /// Rate cap, Gbit/s.
    pub cap_gbps: f64,
    /// Bits still to send at `updated_ns`.
    pub remaining_bits: f64,
    /// Current rate, Gbit/s.
    pub rate_gbps: f64,
    /// When `remaining_bits` was last brought up to date.
    pub updated_ns: u64,
    /// Unique over the network's life (slots are reused, so a per-slot counter
    /// would let a stale completion event match a new flow); set anew on every
    /// rate change; completion events carry it.
    pub version: u64,
    /// Owner tag (the job), for the driver.
    pub owner: usize,
    /// Its switch queue under strict priority (higher is served first; 0
    /// unless a policy set its owner's, [`Network::set_priority`]).
    pub priority: u8,
    /// Its size when it started, bits.
    pub bits: f64,
    /// Unique over the network's life, fixed at insertion (a transport
    /// model tells a new flow in a reused slot by it).
    pub serial: u64,
}

/// Time integrals kept per directed link.
#[derive(Debug, Clone, Default)]
pub struct LinkStats {
    /// Current carried rate, Gbit/s.
    pub carried_gbps: f64,
    /// Current demand (sum of flow caps), Gbit/s.
    pub demand_gbps: f64,
    /// Last time the integrals were advanced.
    pub updated_ns: u64,
    /// ∫ carried dt, bits.
    pub bits: f64,
    /// ∫ max(0, demand − capacity) dt, bits: the stand-in for ECN marks.
    pub excess_bits: f64,
    /// Time with demand above capacity, ns.
    pub congested_ns: u64,
    /// Carried bits per time bucket (bucket width doubles to keep ≤ 512).
    pub series: Vec<f64>,
    /// Events that put another owner's traffic on the link: a flow of a
    /// different owner than the link's previous flow, or traffic credited by
    /// a fast-forward ([`Network::credit`]). A job whose iteration saw one
    /// cannot take the link's deltas for its own traffic, even if the other
    /// traffic never overlapped its flows in time.
    pub foreign: u64,
    /// Owner of the last flow added (None before any).
    pub last_owner: Option<usize>,
}

/// Buffers of the progressive filling, kept between calls to avoid allocating.
#[derive(Debug, Clone, Default)]
struct Scratch {
    remaining: Vec<f64>,
    saturated_below: Vec<f64>,
    count: Vec<usize>,
    path: Vec<usize>,
    offset: Vec<usize>,
    caps: Vec<f64>,
    /// Each flow's switch queue, and the component's queues.
    queue: Vec<u8>,
    queues: Vec<u8>,
    /// Local links with an unfrozen flow, and the unfrozen flows.
    active_links: Vec<usize>,
    active_flows: Vec<usize>,
    /// A queue's flows on each local link: those of link l are
    /// `on_link[link_at[l]..link_at[l + 1]]` (`cursor` fills them).
    link_at: Vec<usize>,
    on_link: Vec<usize>,
    cursor: Vec<usize>,
    /// A queue's flows with finite caps, least cap first, and the others.
    by_cap: Vec<usize>,
    uncapped: Vec<usize>,
    frozen: Vec<bool>,
    /// The binding components being re-rated, one after another, and the
    /// new rates of their flows.
    comp_flows: Vec<FlowId>,
    comp_links: Vec<LinkId>,
    new_rate: Vec<f64>,
    /// Each component's end in `comp_flows` and `comp_links`.
    ends: Vec<(usize, usize)>,
    /// The flows of `extra` whose search opened a component.
    openers: Vec<FlowId>,
    /// The flows a recomputation re-versions at any rate, sorted.
    forced: Vec<FlowId>,
    /// The depth-first search's stack.
    stack: Vec<FlowId>,
    /// Links whose totals a recomputation refreshes; a new flow's path.
    links: Vec<LinkId>,
    touched: Vec<LinkId>,
}

/// Width of the first utilisation bucket, ns (1 s).
pub const FIRST_BUCKET_NS: u64 = 1_000_000_000;
const MAX_BUCKETS: usize = 512;

/// The network state.
#[derive(Debug, Clone)]
pub struct Network {
    capacity: Vec<f64>,
    link_flows: Vec<Vec<FlowId>>,
    /// Whether each link binds (its flows' caps exceed its capacity).
    binds: Vec<bool>,
    flows: Vec<Option<Flow>>,
    free: Vec<FlowId>,
    /// Every flow gets its cap, whatever else shares its links (the "ideal" baseline).
    pub isolated: bool,
    /// Per-link integrals.
    pub stats: Vec<LinkStats>,
    /// Current bucket width of `LinkStats::series`, ns.
    pub bucket_ns: u64,
    /// Last version handed out.
    next_version: u64,
    /// Visit stamps for component searches (no hashing on the hot path):
    /// a link or flow is seen in the current search iff its stamp equals `stamp`.
    link_stamp: Vec<u64>,
    flow_stamp: Vec<u64>,
    stamp: u64,
    /// One bit per flow id, set only inside [`Network::remove_all`] for
    /// the flows it removes.
    gone: Vec<u64>,
    /// Index of each link within the component being filled.
    local: Vec<usize>,
    /// Buffers reused by every recomputation.
    /// Boxed, so that a recomputation takes it out and puts it back by
    /// moving a pointer: moving the struct itself (twenty vectors) in and
    /// out was 3% of a `metronome` run's instructions in `memcpy`.
    scratch: Option<Box<Scratch>>,
    /// Owners whose flows shared a max-min component with another owner's
    /// since the driver last drained this list.
    pub interacting: Vec<usize>,
    /// Exact rate trace of one link in a time window, for figures.
    pub probe: Option<Probe>,
    /// Each owner's switch queue (index: owner; absent: 0).
    priority_of: Vec<u8>,
    /// Last serial handed out.
    next_serial: u64,
    /// Rates come from a transport model ([`Network::set_rates`]), not from
    /// max-min: a change only refreshes the totals, and a new flow sends
    /// nothing until the model rates it.
    pub externally_rated: bool,
}

/// Every change of the rates on one link within [start, end], per flow owner.
#[derive(Debug, Clone, Default)]
pub struct Probe {
    /// The link.
    pub link: LinkId,
    /// Window start, ns.
    pub start_ns: u64,
    /// Window end, ns.
    pub end_ns: u64,
    /// (time ns, [(owner, Gbit/s)]) after each change.
    pub trace: Vec<(u64, Vec<(usize, f64)>)>,
}

impl Network {
    /// A network over links with these capacities (Gbit/s).
    pub fn new(capacity: Vec<f64>, isolated: bool) -> Self {
        let n = capacity.len();
        Network {
            capacity,
            link_flows: vec![Vec::new(); n],
            binds: vec![false; n],
            flows: Vec::new(),
            free: Vec::new(),
            isolated,
            stats: vec![LinkStats::default(); n],
            bucket_ns: FIRST_BUCKET_NS,
            next_version: 0,
            link_stamp: vec![0; n],
            flow_stamp: Vec::new(),
            gone: Vec::new(),
            stamp: 0,
            local: vec![0; n],
            scratch: Some(Box::default()),
            interacting: Vec::new(),
            probe: None,
            priority_of: Vec::new(),
            next_serial: 0,
            externally_rated: false,
        }
    }

    /// Live flows, in id order.
    pub fn flows(&self) -> impl Iterator<Item = (FlowId, &Flow)> {
        self.flows.iter().enumerate().filter_map(|(id, f)| f.as_ref().map(|f| (id, f)))
    }

    /// Link `l`'s capacity, Gbit/s.
    pub fn capacity(&self, l: LinkId) -> f64 {
        self.capacity[l]
    }

    /// Sets flows' rates as a transport model chose them (each link's
    /// demand is then what its flows send, `sending` per link), bringing
    /// what they sent so far up to `now` first; returns the flows whose rate
    /// changed, in the order given. O(Σ path lengths of the changed flows).
    pub fn set_rates(&mut self, now: u64, rates: &[(FlowId, f64)], sending: &[(LinkId, f64)]) -> Vec<FlowId> {
        let mut changed = Vec::new();
        self.stamp += 1;
        let stamp = self.stamp;
        let mut links = std::mem::take(&mut self.scratch().links);
        links.clear();
        for &(f, r) in rates {
            if let Some(flow) = self.flows.get(f).and_then(Option::as_ref)
                && flow.rate_gbps != r
            {
                changed.push((f, r));
                for &l in flow.path.iter() {
                    if self.link_stamp[l] != stamp {
                        self.link_stamp[l] = stamp;
                        links.push(l);
                    }
                }
            }
        }
        for &(l, _) in sending {
            if self.link_stamp[l] != stamp {
                self.link_stamp[l] = stamp;
                links.push(l);
            }
        }
        self.apply_rates(now, &links, &changed);
        for &l in &links {
            self.stats[l].carried_gbps =
                self.link_flows[l].iter().filter_map(|&f| self.flows[f].as_ref()).map(|f| f.rate_gbps).sum();
        }
        for &(l, x) in sending {
            self.stats[l].demand_gbps = x;
        }
        self.scratch().links = links;
        changed.into_iter().map(|(f, _)| f).collect()
    }

    /// The flow, if live.
    pub fn flow(&self, f: FlowId) -> Option<&Flow> {
        self.flows.get(f).and_then(Option::as_ref)
    }

    /// Whether any flow crosses link `l`.
    pub fn busy(&self, l: LinkId) -> bool {
        !self.link_flows[l].is_empty()
    }

    /// Whether a probe records the rates on its link at `now`. O(1).
    fn probing(&self, now: u64) -> bool {
        self.probe.as_ref().is_some_and(|p| (p.start_ns..=p.end_ns).contains(&now))
    }

    /// The recomputation's buffers. O(1).
    fn scratch(&mut self) -> &mut Scratch {
        self.scratch.get_or_insert_with(Box::default)
    }

    /// Number of live flows.
    pub fn live(&self) -> usize {
        self.flows.len() - self.free.len()
    }

    /// Adds a flow and recomputes the rates it affects; returns the flows whose
    /// rate changed (including the new one).
    pub fn add(
        &mut self,
        now: u64,
        path: impl Into<Path>,
        bits: f64,
        cap_gbps: f64,
        owner: usize,
    ) -> (FlowId, Vec<FlowId>) {
        let id = self.insert(now, path.into(), bits, cap_gbps, owner);
        self.refresh_paths(&[id]);
        let changed = self.recompute_new(now, id);
        (id, changed)
    }

    /// Adds flows that start at the same instant, (path, bits, cap, owner)
    /// each, and recomputes each max-min component they touch once: the
    /// rates are those of adding them one by one (a component's rates depend
    /// only on its flows), without re-rating a component once per flow. A
    /// collective's k flows cost O(components · recompute) instead of
    /// O(k · recompute). Returns the new flows, in order, and the flows whose
    /// rate changed (the new ones included).
    pub fn add_all(&mut self, now: u64, new: Vec<(Path, f64, f64, usize)>) -> (Vec<FlowId>, Vec<FlowId>) {
        let ids: Vec<FlowId> =
            new.into_iter().map(|(path, bits, cap, owner)| self.insert(now, path, bits, cap, owner)).collect();
        self.refresh_paths(&ids);
        let mut changed = if self.isolated || self.externally_rated || self.probing(now) {
            // Flow by flow: a flow re-rated with an earlier new flow's
            // component carries a stamp above the batch's first (stamps
            // only grow).
            let mut changed = Vec::new();
            let batch = self.stamp;
            for &id in &ids {
                if self.flow_stamp.get(id).is_some_and(|&s| s > batch) {
                    continue;
                }
                changed.extend(self.recompute_new(now, id));
            }
            changed
        } else {
            self.recompute_added(now, &ids)
        };
        // A new flow whose first rate is 0 is in no `changed`; it is new all
        // the same, and gets a version of its own as `add` gives it.
        let mut sorted = changed.clone();
        sorted.sort_unstable();
        for &id in &ids {
            if sorted.binary_search(&id).is_err()
                && let Some(f) = self.flows[id].as_mut()
            {
                self.next_version += 1;
                f.version = self.next_version;
                changed.push(id);
            }
        }
        (ids, changed)
    }

    /// Re-rates what a new flow touches: its path, without copying it.
    fn recompute_new(&mut self, now: u64, id: FlowId) -> Vec<FlowId> {
        let mut touched = std::mem::take(&mut self.scratch().touched);
        touched.clear();
        touched.extend_from_slice(self.flows[id].as_ref().map_or(&[][..], |f| &f.path));
        let changed = self.recompute(now, &touched, &[], &[id], false);
        self.scratch().touched = touched;
        changed
    }

    /// Puts an owner's flows, present and future, in switch queue
    /// `priority` (strict priority: a queue gets what the higher ones leave,
    /// shared max-min within it, as a switch's priority queues with fair
    /// queueing inside a class); re-rates the components of its live flows
    /// when that changes their queue. Returns the flows whose rate changed.
    /// O(F) to find the owner's flows, plus the recomputations.
    pub fn set_priority(&mut self, now: u64, owner: usize, priority: u8) -> Vec<FlowId> {
        if self.priority_of.len() <= owner {
            if priority == 0 {
                return Vec::new();
            }
            self.priority_of.resize(owner + 1, 0);
        }
        if self.priority_of[owner] == priority {
            return Vec::new();
        }
        self.priority_of[owner] = priority;
        let mut seeds = Vec::new();
        let mut own = Vec::new();
        for (id, f) in self.flows.iter_mut().enumerate() {
            if let Some(f) = f.as_mut().filter(|f| f.owner == owner) {
                f.priority = priority;
                seeds.extend_from_slice(&f.path);
                own.push(id);
            }
        }
        if own.is_empty() {
            return Vec::new();
        }
        seeds.sort_unstable();
        seeds.dedup();
        // A queue matters only where the flow binds; re-rating the owner's
        // flows takes in their binding components.
        self.recompute(now, &seeds, &[], &own, true)
    }

    /// Puts a flow in the slab and on its links, without re-rating anything.
    fn insert(&mut self, now: u64, path: Path, bits: f64, cap_gbps: f64, owner: usize) -> FlowId {
        let priority = self.priority_of.get(owner).copied().unwrap_or(0);
        self.next_serial += 1;
        let flow = Flow {
            path,
            cap_gbps,
            remaining_bits: bits,
            rate_gbps: 0.0,
            updated_ns: now,
            version: 0,
            owner,
            priority,
            bits,
            serial: self.next_serial,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.flows[id] = Some(flow);
                id
            }
            None => {
                self.flows.push(Some(flow));
                self.flows.len() - 1
            }
        };
        let hops = self.flows[id].as_ref().map_or(0, |f| f.path.len());
        for k in 0..hops {
            let l = self.flows[id].as_ref().map_or(0, |f| f.path[k]);
            let s = &mut self.stats[l];
            if s.last_owner != Some(owner) {
                s.foreign += 1;
                s.last_owner = Some(owner);
            }
            self.link_flows[l].push(id);
        }
        id
    }

    /// Refreshes whether each link on the paths of `ids` binds, once per
    /// link: after inserting a collective's k flows, O(Σ deg) instead of
    /// O(k · deg) per link when each insert refreshed its links (the
    /// answer, summed from scratch, is the same).
    fn refresh_paths(&mut self, ids: &[FlowId]) {
        // A fresh stamp marks the links refreshed (a component search takes
        // a fresh one of its own).
        self.stamp += 1;
        let stamp = self.stamp;
        for &id in ids {
            let hops = self.flows[id].as_ref().map_or(0, |f| f.path.len());
            for k in 0..hops {
                let l = self.flows[id].as_ref().map_or(0, |f| f.path[k]);
                if self.link_stamp[l] != stamp {
                    self.link_stamp[l] = stamp;
                    self.refresh_binding(l);
                }
            }
        }
    }

    /// Removes a flow; returns the flows whose rate changed.
    pub fn remove(&mut self, now: u64, id: FlowId) -> Vec<FlowId> {
        self.remove_all(now, &[id])
    }

    /// Removes flows that end at the same instant and re-rates what they
    /// leave behind in one recomputation instead of one per flow (a ring's
    /// flows end together). Returns the flows whose rate changed.
    pub fn remove_all(&mut self, now: u64, ids: &[FlowId]) -> Vec<FlowId> {
        let mut seeds = Vec::new();
        let mut removed = Vec::with_capacity(ids.len());
        // Each link once (marked with a fresh stamp), then sorted: a mesh's
        // collective ends thousands of flows over a few hundred links.
        self.stamp += 1;
        let stamp = self.stamp;
        for &id in ids {
            let Some(flow) = self.flows.get_mut(id).and_then(Option::take) else { continue };
            self.free.push(id);
            removed.push(id);
            for &l in flow.path.iter() {
                if self.link_stamp[l] != stamp {
                    self.link_stamp[l] = stamp;
                    seeds.push(l);
                }
            }
        }
        if seeds.is_empty() {
            return Vec::new();
        }
        seeds.sort_unstable();
        // Each link's list is filtered once for all the flows removed from
        // it (one pass a flow was O(flows removed · flows on the link): a
        // mesh's all-to-all ends thousands at once), each of its flows
        // checked against a bit per flow id, set for the removed ones and
        // cleared after: O(flows on the links + removed). A binary search
        // of the removed ids (O(log removed) a flow on the link) was 6.7%
        // of `orrery` on decision-scale-llm-4096, where a spine link
        // carries thousands of flows.
        let words = self.flows.len().div_ceil(64);
        if self.gone.len() < words {
            self.gone.resize(words, 0);
        }
        for &id in &removed {
            self.gone[id / 64] |= 1 << (id % 64);
        }
        let gone = &self.gone;
        for &l in &seeds {
            self.link_flows[l].retain(|&f| (gone[f / 64] >> (f % 64)) & 1 == 0);
        }
        for &id in &removed {
            self.gone[id / 64] &= !(1 << (id % 64));
        }
        let released = self.release(&seeds);
        self.recompute(now, &seeds, &released, &[], false)
    }

    /// Changes a flow's cap; returns the flows whose rate changed.
    pub fn set_cap(&mut self, now: u64, id: FlowId, cap_gbps: f64) -> Vec<FlowId> {
        let path = match self.flows.get_mut(id).and_then(Option::as_mut) {
            Some(f) => {
                f.cap_gbps = cap_gbps;
                f.path.clone()
            }
            None => return Vec::new(),
        };
        let released = self.release(&path);
        self.recompute(now, &path, &released, &[id], false)
    }

    /// Integrates `links` up to `now`, then gives each changed flow its new
    /// rate (its bits brought up to `now` first) and a new version.
    fn apply_rates(&mut self, now: u64, links: &[LinkId], changed: &[(FlowId, f64)]) {
        for &l in links {
            self.integrate(l, now);
        }
        for &(f, r) in changed {
            if let Some(flow) = self.flows[f].as_mut() {
                Self::advance(flow, now);
                flow.rate_gbps = r;
                self.next_version += 1;
                flow.version = self.next_version;
            }
        }
    }

    /// Brings a flow's remaining bits up to `now`.
    fn advance(f: &mut Flow, now: u64) {
        let dt = now.saturating_sub(f.updated_ns) as f64;
        f.remaining_bits = (f.remaining_bits - f.rate_gbps * dt).max(0.0);
        f.updated_ns = now;
    }

    /// Time at which the flow would finish at its current rate.
    pub fn finish_time(&self, id: FlowId) -> Option<u64> {
        let f = self.flow(id)?;
        if f.remaining_bits <= 0.0 {
            return Some(f.updated_ns);
        }
        if f.rate_gbps <= 0.0 {
            return None;
        }
        // A rate so small that the flow would not end in 30 years (a
        // transport model's starved flow): no event; it is re-rated first.
        let ns = (f.remaining_bits / f.rate_gbps).ceil();
        (ns < 1e18).then(|| f.updated_ns.saturating_add(ns as u64))
    }

    /// Integrates a link's statistics up to `now`.
    fn integrate(&mut self, l: LinkId, now: u64) {
        // Widen the buckets first: a link idle for days would otherwise
        // grow its series to one bucket per second of the gap.
        self.compact_series(now);
        let cap = self.capacity[l];
        let bucket_ns = self.bucket_ns;
        let s = &mut self.stats[l];
        let from = s.updated_ns;
        if now <= from {
            return;
        }
        let dt = (now - from) as f64;
        s.bits += s.carried_gbps * dt;
        let over = s.demand_gbps - cap;
        if over > cap * 1e-9 {
            s.excess_bits += over * dt;
            s.congested_ns += now - from;
        }
        if s.carried_gbps > 0.0 {
            // Spread carried bits over the buckets [from, now) touches.
            let mut t = from;
            while t < now {
                let b = (t / bucket_ns) as usize;
                let end = ((b as u64 + 1) * bucket_ns).min(now);
                if s.series.len() <= b {
                    s.series.resize(b + 1, 0.0);
                }
                s.series[b] += s.carried_gbps * (end - t) as f64;
                t = end;
            }
        }
        s.updated_ns = now;
    }

    /// Keeps at most 512 buckets by merging pairs and doubling the width:
    /// O(1) when nothing is to merge, O(links · buckets) per doubling, and at
    /// most 64 doublings in a run.
    pub fn compact_series(&mut self, now: u64) {
        while (now / self.bucket_ns) as usize >= MAX_BUCKETS {
            for s in &mut self.stats {
                let merged: Vec<f64> = s.series.chunks(2).map(|c| c.iter().sum()).collect();
                s.series = merged;
            }
            self.bucket_ns *= 2;
        }
    }

    /// Integrates every link up to `now` (call before reading the stats).
    pub fn close(&mut self, now: u64) {
        for l in 0..self.capacity.len() {
            self.integrate(l, now);
        }
    }

    /// Integrates the given links up to `now`.
    pub fn close_links(&mut self, links: &[LinkId], now: u64) {
        for &l in links {
            self.integrate(l, now);
        }
    }

    /// Credits a link with traffic that was not simulated flow by flow (a
    /// fast-forwarded job): `bits` spread evenly over [from, to) in the
    /// utilisation series, plus excess bits and congested time.
    pub fn credit(&mut self, l: LinkId, from: u64, to: u64, bits: f64, excess_bits: f64, congested_ns: u64) {
        self.compact_series(to);
        let bucket_ns = self.bucket_ns;
        let s = &mut self.stats[l];
        s.foreign += 1;
        s.bits += bits;
        s.excess_bits += excess_bits;
        s.congested_ns += congested_ns;
        if to <= from || bits <= 0.0 {
            return;
        }
        let per_ns = bits / (to - from) as f64;
        let mut t = from;
        while t < to {
            let b = (t / bucket_ns) as usize;
            let end = ((b as u64 + 1) * bucket_ns).min(to);
            if s.series.len() <= b {
                s.series.resize(b + 1, 0.0);
            }
            s.series[b] += per_ns * (end - t) as f64;
            t = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(n: &Network, ids: &[FlowId]) -> Vec<f64> {
        ids.iter().map(|&f| n.flow(f).map_or(-1.0, |f| f.rate_gbps)).collect()
    }

    #[test]
    fn one_flow_alone_gets_its_cap_and_finishes_at_bytes_over_rate() {
        let mut n = Network::new(vec![100.0], false);
        let (f, _) = n.add(0, vec![0], 8e9, 40.0, 0);
        assert_eq!(rates(&n, &[f]), vec![40.0]);
        // 8 Gbit at 40 Gbit/s = 0.2 s.
        assert_eq!(n.finish_time(f), Some(200_000_000));
    }

    #[test]
    fn two_flows_share_a_link_equally_and_the_survivor_speeds_up() {
        let mut n = Network::new(vec![50.0], false);
        let (a, _) = n.add(0, vec![0], 1e9, 50.0, 0);
        let (b, changed) = n.add(0, vec![0], 2e9, 50.0, 1);
        assert_eq!(rates(&n, &[a, b]), vec![25.0, 25.0]);
        assert_eq!(changed, vec![a, b]);
        // a finishes at 1e9 / 25 = 40 ms; then b has 1 Gbit left at 50 Gbit/s.
        assert_eq!(n.finish_time(a), Some(40_000_000));
        n.remove(40_000_000, a);
        assert_eq!(rates(&n, &[b]), vec![50.0]);
        assert_eq!(n.finish_time(b), Some(60_000_000));
    }

    #[test]
    fn a_higher_priority_queue_takes_what_it_can_use_and_the_lower_gets_the_rest() {
        // One 50 Gbit/s link. Job 1 in queue 1, job 0 in queue 0 (Crux's
        // priorities as switch queues).
        let mut n = Network::new(vec![50.0], false);
        n.set_priority(0, 1, 1);
        let (low, _) = n.add(0, vec![0], 1e9, 50.0, 0);
        let (high, _) = n.add(0, vec![0], 1e9, 50.0, 1);
        assert_eq!(rates(&n, &[low, high]), vec![0.0, 50.0]);
        // Capped at 30, the high queue leaves 20 to the low one.
        n.set_cap(0, high, 30.0);
        assert_eq!(rates(&n, &[low, high]), vec![20.0, 30.0]);
        // Two flows of one queue still share max-min: a second queue-1 flow
        // splits what queue 1 can use; queue 0 gets what is left (none).
        let (high2, _) = n.add(0, vec![0], 1e9, 50.0, 1);
        assert_eq!(rates(&n, &[low, high, high2]), vec![0.0, 25.0, 25.0]);
        // Back to one queue: plain max-min again.
        n.set_priority(0, 1, 0);
        assert_eq!(rates(&n, &[low, high, high2]), vec![50.0 / 3.0, 50.0 / 3.0, 50.0 / 3.0]);
    }

    #[test]
    fn textbook_three_flows_two_bottlenecks() {
        // Links 0 (capacity 10) and 1 (capacity 4). Flow A uses both, B only
        // link 0, C only link 1. Max-min: link 1 is the first bottleneck:
        // A = C = 2; then B gets the rest of link 0: 10 − 2 = 8.
        let mut n = Network::new(vec![10.0, 4.0], false);
        let (a, _) = n.add(0, vec![0, 1], 1e12, 100.0, 0);
        let (b, _) = n.add(0, vec![0], 1e12, 100.0, 1);
        let (c, _) = n.add(0, vec![1], 1e12, 100.0, 2);
        assert_eq!(rates(&n, &[a, b, c]), vec![2.0, 8.0, 2.0]);
        // A cap below its fair share frees bandwidth for the others.
        n.set_cap(0, a, 1.0);
        assert_eq!(rates(&n, &[a, b, c]), vec![1.0, 9.0, 3.0]);
    }

    #[test]
    fn flows_added_and_removed_together_get_the_rates_of_one_by_one() {
        use rand::{Rng, SeedableRng};
        // 12 links, 40 flows over 1 to 3 random links with random caps, in
        // 20 random layouts: adding a batch with `add_all` gives the rates
        // of adding its flows one by one (exactly: each component is rated
        // from scratch on the same flows), and `remove_all` those of
        // removing one by one (to rounding: the components left are rated
        // in one pass).
        for seed in 0..20 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let capacity: Vec<f64> = (0..12).map(|_| rng.random_range(10.0..100.0)).collect();
            let flows: Vec<(Path, f64, f64, usize)> = (0..40)
                .map(|k| {
                    let mut path: Vec<LinkId> = (0..rng.random_range(1..=3)).map(|_| rng.random_range(0..12)).collect();
                    path.sort_unstable();
                    path.dedup();
                    (path.into(), 1e9, rng.random_range(5.0..60.0), k % 7)
                })
                .collect();
            let (mut one, mut all) = (Network::new(capacity.clone(), false), Network::new(capacity, false));
            let first: Vec<FlowId> = flows[..25].iter().map(|f| one.add(0, f.0.clone(), f.1, f.2, f.3).0).collect();
            let (ids, _) = all.add_all(0, flows[..25].to_vec());
            assert_eq!(ids, first);
            let rest: Vec<FlowId> = flows[25..].iter().map(|f| one.add(5, f.0.clone(), f.1, f.2, f.3).0).collect();
            let (more, changed) = all.add_all(5, flows[25..].to_vec());
            assert_eq!(more, rest);
            assert!(rest.iter().all(|f| changed.contains(f)), "every new flow is reported");
            let every: Vec<FlowId> = first.iter().chain(&rest).copied().collect();
            assert_eq!(rates(&all, &every), rates(&one, &every), "seed {seed}");
            let gone: Vec<FlowId> = every.iter().copied().filter(|f| f % 3 == 0).collect();
            for &f in &gone {
                one.remove(9, f);
            }
            all.remove_all(9, &gone);
            for f in every.iter().filter(|f| *f % 3 != 0) {
                let (a, b) = (rates(&all, &[*f])[0], rates(&one, &[*f])[0]);
                assert!((a - b).abs() <= 1e-9 * b.abs(), "seed {seed} flow {f}: {a} against {b}");
            }
            assert!(gone.iter().all(|&f| all.flow(f).is_none()));
        }
    }

    #[test]
    fn flows_added_together_change_as_when_added_turn_by_turn() {
        use rand::{Rng, SeedableRng};
        // A probe over the whole run makes `add_all` re-rate flow by flow;
        // without one it re-rates the batch in one pass. Random batches on
        // 12 links, two owners in a low queue: the changed flows, their
        // order (the order of their completion events), their versions,
        // rates and every link's totals are the same both ways.
        for seed in 0..20 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let capacity: Vec<f64> = (0..12).map(|_| rng.random_range(10.0..100.0)).collect();
            let (mut one, mut all) = (Network::new(capacity.clone(), false), Network::new(capacity, false));
            one.probe = Some(Probe { link: 0, start_ns: 0, end_ns: u64::MAX, trace: Vec::new() });
            for net in [&mut one, &mut all] {
                net.set_priority(0, 5, 1);
                net.set_priority(0, 6, 1);
            }
            for t in 0..4 {
                let batch: Vec<(Path, f64, f64, usize)> = (0..rng.random_range(1..12))
                    .map(|k| {
                        let mut path: Vec<LinkId> =
                            (0..rng.random_range(1..=3)).map(|_| rng.random_range(0..12)).collect();
                        path.sort_unstable();
                        path.dedup();
                        (path.into(), 1e9, rng.random_range(5.0..60.0), (k + t) % 7)
                    })
                    .collect();
                let a = one.add_all(t as u64, batch.clone());
                let b = all.add_all(t as u64, batch);
                assert_eq!(a, b, "seed {seed}, batch {t}");
                let of = |n: &Network| -> Vec<(u64, u64)> {
                    (0..n.flows.len()).filter_map(|f| n.flow(f)).map(|f| (f.version, f.rate_gbps.to_bits())).collect()
                };
                assert_eq!(of(&one), of(&all), "seed {seed}, batch {t}");
                let totals = |n: &Network| -> Vec<(u64, u64)> {
                    n.stats.iter().map(|s| (s.carried_gbps.to_bits(), s.demand_gbps.to_bits())).collect()
                };
                assert_eq!(totals(&one), totals(&all), "seed {seed}, batch {t}");
            }
        }
    }

    #[test]
    fn untouched_components_keep_their_versions() {
        let mut n = Network::new(vec![10.0, 10.0], false);
        let (a, _) = n.add(0, vec![0], 1e9, 10.0, 0);
        let v = n.flow(a).map(|f| f.version);
        let (_, changed) = n.add(5, vec![1], 1e9, 10.0, 1);
        assert!(!changed.contains(&a));
        assert_eq!(n.flow(a).map(|f| f.version), v);
    }

    #[test]
    fn excess_over_capacity_is_integrated() {
        // Two 50 Gbit/s senders on a 50 Gbit/s link for 1 s: demand 100, so
        // 50 Gbit of excess and 1 s congested; 50 Gbit carried.
        let mut n = Network::new(vec![50.0], false);
        let (a, _) = n.add(0, vec![0], 1e12, 50.0, 0);
        let (b, _) = n.add(0, vec![0], 1e12, 50.0, 1);
        n.close(1_000_000_000);
        let s = &n.stats[0];
        assert!((s.excess_bits - 50e9).abs() < 1.0);
        assert_eq!(s.congested_ns, 1_000_000_000);
        assert!((s.bits - 50e9).abs() < 1.0);
        n.remove(1_000_000_000, a);
        n.remove(1_000_000_000, b);
        assert_eq!(n.live(), 0);
    }

    #[test]
    fn a_reused_slot_never_repeats_a_version() {
        // A completion event for a removed flow must not match the flow that
        // takes its slot.
        let mut n = Network::new(vec![10.0], false);
        let (a, _) = n.add(0, vec![0], 1e9, 10.0, 0);
        let old = n.flow(a).map(|f| f.version);
        n.remove(1, a);
        let (b, _) = n.add(2, vec![0], 1e9, 10.0, 1);
        assert_eq!(a, b, "the slot is reused");
        assert_ne!(n.flow(b).map(|f| f.version), old);
    }

    #[test]
    fn isolated_flows_ignore_each_other() {
        let mut n = Network::new(vec![50.0], true);
        let (a, _) = n.add(0, vec![0], 1e9, 50.0, 0);
        let (b, _) = n.add(0, vec![0], 1e9, 50.0, 1);
        assert_eq!(rates(&n, &[a, b]), vec![50.0, 50.0]);
        // Alone is not unbounded: a 50 Gbit/s flow over a 25 Gbit/s link gets 25.
        let mut n = Network::new(vec![50.0, 25.0], true);
        let (c, _) = n.add(0, vec![0, 1], 1e9, 50.0, 0);
        let (d, _) = n.add(0, vec![1], 1e9, 10.0, 1);
        assert_eq!(rates(&n, &[c, d]), vec![25.0, 10.0]);
    }
}
