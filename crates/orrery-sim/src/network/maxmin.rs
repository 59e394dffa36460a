//! The max-min recomputation of [`Network`]: binding components found
//! from the links a change touched, then progressive filling inside each.

use super::{FlowId, Network, Scratch};
use orrery_model::LinkId;

/// Flows in a component from which the filling visits links' flows
/// ([`Network::fill`]).
const BY_LINKS_FROM: usize = 64;

/// Which re-rated flows count as changed whatever their new rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Forced {
    /// None: only a queue moved.
    None,
    /// Those given as `extra` (added or re-capped).
    Extra,
    /// Those of `extra` that opened a component of their own (flows added
    /// together, [`Network::recompute_added`]).
    Openers,
}

impl Network {
    /// Re-rates what a change can affect. `touched`: links whose flows or
    /// caps changed (their totals are refreshed); `released`: those among
    /// them that stopped binding; `extra`: flows added or re-capped (they
    /// count as changed, so their finish is recomputed, unless only their
    /// queue moved: `queue_only`).
    ///
    /// Only a binding link (Σ caps > capacity, [`Network::refresh_binding`])
    /// can be a flow's bottleneck: on any other link every flow can have its
    /// cap at once. So max-min rates decompose into *binding components*,
    /// flows joined through binding links, and a component's rates are a
    /// function of its flows alone (the filling below never looks outside
    /// it). A change re-rates only the components of `extra`, of the flows
    /// on touched links that bind, and of the flows on released links; the
    /// rest keep rates that a full recomputation would give them bit for
    /// bit (`tests/maxmin.rs` holds the two equal).
    ///
    /// Cost: O(F_c · d + Σ deg) to find the components (F_c flows on paths
    /// of d links, the degrees of their binding links), the filling's
    /// O(Σ over rounds of the links and flows still rising) ≤ O(R · (F_c +
    /// L_c)) with R ≤ F_c rounds (from [`BY_LINKS_FROM`] flows, O(F_c · d +
    /// F_c log F_c + Σ over rounds of the links still rising)), and O(deg)
    /// per link whose totals change.
    /// At 4,096 hosts under `metronome` a component holds 4–9 flows, where
    /// the flows joined through any shared link number 86–98.
    /// Returns the flows whose rate changed, in id order; the flows re-rated
    /// carry the search's stamp in `flow_stamp`.
    pub(super) fn recompute(
        &mut self,
        now: u64,
        touched: &[LinkId],
        released: &[LinkId],
        extra: &[FlowId],
        queue_only: bool,
    ) -> Vec<FlowId> {
        let forced = if queue_only { Forced::None } else { Forced::Extra };
        self.recompute_in(now, touched, released, extra, forced)
    }

    /// Re-rates the components of flows just added together (`ids`), in one
    /// pass: the same rates, versions and order of changes as re-rating
    /// each new flow's component in turn ([`Network::recompute`] with the
    /// flow as `extra`, skipping a flow an earlier one's component took in),
    /// which is what [`Network::add_all`] did flow by flow. The changed
    /// flows come component by component, in the order of the new flow
    /// that opened each, by id within one; a component's opening flow is
    /// changed whatever its rate. A link's totals are set once, after the
    /// last change of a flow on it, from the same rates, on the same links
    /// (the openers' paths and the changed flows'). Not for an
    /// isolated or externally rated network, nor while a probe records
    /// each change (its trace would lose the intermediate steps).
    /// O(Σ components) instead of one search, filling and link update per
    /// new flow (a collective's flows are mostly in components of their own).
    pub(super) fn recompute_added(&mut self, now: u64, ids: &[FlowId]) -> Vec<FlowId> {
        // Every flow on a binding link of a new flow's path is in that
        // flow's component, so the search needs no touched links; the
        // openers' paths are added to the links whose totals change.
        self.recompute_in(now, &[], &[], ids, Forced::Openers)
    }

    fn recompute_in(
        &mut self,
        now: u64,
        touched: &[LinkId],
        released: &[LinkId],
        extra: &[FlowId],
        forced: Forced,
    ) -> Vec<FlowId> {
        let mut sc = self.scratch.take().unwrap_or_default();
        if self.externally_rated {
            // Rates are the transport's: a change keeps every rate (a new
            // flow's is 0), re-versions the flows it adds or re-caps.
            sc.comp_flows.clear();
            sc.comp_flows.extend_from_slice(extra);
            sc.ends.clear();
            sc.new_rate.clear();
            sc.new_rate.extend(extra.iter().map(|&f| self.flows[f].as_ref().map_or(0.0, |f| f.rate_gbps)));
        } else {
            self.components(touched, released, extra, &mut sc);
        }
        // New rates, aligned with `sc.comp_flows`.
        sc.new_rate.clear();
        sc.new_rate.resize(sc.comp_flows.len(), 0.0);
        let (mut f0, mut l0) = (0, 0);
        for c in 0..sc.ends.len() {
            let (f1, l1) = sc.ends[c];
            if self.isolated {
                for i in f0..f1 {
                    sc.new_rate[i] = self.flows[sc.comp_flows[i]]
                        .as_ref()
                        .map_or(0.0, |f| f.path.iter().map(|&l| self.capacity[l]).fold(f.cap_gbps, f64::min));
                }
            } else {
                self.fill(&mut sc, (f0, f1), (l0, l1));
            }
            self.note_owners(&sc.comp_flows[f0..f1]);
            (f0, l0) = (f1, l1);
        }
        // The flows re-versioned even at an unchanged rate, sorted: a scan
        // of the list for each of the component's flows was O(C · E), a
        // quarter of the LLM workload's run at 4,096 hosts (a mesh's
        // collective adds thousands of flows at once); O((C + E) log E).
        let mut forced_ids = std::mem::take(&mut sc.forced);
        forced_ids.clear();
        match forced {
            Forced::None => {}
            Forced::Extra => forced_ids.extend_from_slice(extra),
            Forced::Openers => forced_ids.extend_from_slice(&sc.openers),
        }
        forced_ids.sort_unstable();
        // The flows whose rate changes, in id order (the order their
        // versions are handed out in).
        let mut changed: Vec<(FlowId, f64)> = sc
            .comp_flows
            .iter()
            .zip(&sc.new_rate)
            .filter(|&(&f, &r)| {
                self.flows[f].as_ref().is_some_and(|flow| flow.rate_gbps != r || forced_ids.binary_search(&f).is_ok())
            })
            .map(|(&f, &r)| (f, r))
            .collect();
        sc.forced = forced_ids;
        // By id; or, for flows added together, as turn by turn: component
        // by component (`comp_flows` is sorted within each).
        if forced != Forced::Openers {
            changed.sort_unstable_by_key(|&(f, _)| f);
        }
        // Links whose totals change: the touched ones and the changed flows'.
        self.stamp += 1;
        let stamp = self.stamp;
        let mut links = std::mem::take(&mut sc.links);
        links.clear();
        // Flows added together touched their openers' paths (turn by turn,
        // each opener's path was its turn's `touched`).
        let openers: &[FlowId] = if forced == Forced::Openers { &sc.openers } else { &[] };
        let paths = openers
            .iter()
            .map(|&f| (f, 0.0))
            .chain(changed.iter().copied())
            .filter_map(|(f, _)| self.flows[f].as_ref())
            .flat_map(|f| f.path.iter());
        for &l in touched.iter().chain(paths) {
            if self.link_stamp[l] != stamp {
                self.link_stamp[l] = stamp;
                links.push(l);
            }
        }
        self.apply_rates(now, &links, &changed);
        for &l in &links {
            let mut owners = self.link_flows[l].iter().filter_map(|&f| self.flows[f].as_ref()).map(|f| f.owner);
            if let Some(first) = owners.next()
                && owners.any(|o| o != first)
            {
                // Another owner's traffic on this link: neither job's link
                // totals are its own (the fast-forward reads them).
                self.interacting
                    .extend(self.link_flows[l].iter().filter_map(|&f| self.flows[f].as_ref()).map(|f| f.owner));
            }
            let (carried, demand) = self.link_flows[l]
                .iter()
                .filter_map(|&f| self.flows[f].as_ref())
                .fold((0.0, 0.0), |(c, d), f| (c + f.rate_gbps, d + f.cap_gbps));
            self.stats[l].carried_gbps = carried;
            if !self.externally_rated {
                self.stats[l].demand_gbps = demand;
            }
        }
        if self.probing(now)
            && let Some(p) = self.probe.as_mut()
            && links.contains(&p.link)
        {
            let mut per: Vec<(usize, f64)> = Vec::new();
            for f in self.link_flows[p.link].iter().filter_map(|&f| self.flows[f].as_ref()) {
                match per.iter_mut().find(|x| x.0 == f.owner) {
                    Some(x) => x.1 += f.rate_gbps,
                    None => per.push((f.owner, f.rate_gbps)),
                }
            }
            p.trace.push((now, per));
        }
        sc.links = links;
        self.scratch = Some(sc);
        changed.into_iter().map(|(f, _)| f).collect()
    }

    /// Owners whose flows share a binding component with another owner's.
    pub(super) fn note_owners(&mut self, flows: &[FlowId]) {
        let mut owners = flows.iter().filter_map(|&f| self.flows[f].as_ref().map(|f| f.owner));
        if let Some(first) = owners.next()
            && owners.any(|o| o != first)
        {
            self.interacting.extend(flows.iter().filter_map(|&f| self.flows[f].as_ref().map(|f| f.owner)));
        }
    }

    /// Whether link `l` binds: its flows' caps sum to more than its
    /// capacity (1e-12 relative, so caps that add up to the capacity in
    /// another order do not bind). Summed in the link's own order from
    /// scratch, so the answer depends on the flows on it and not on the
    /// history of adds and removes. Returns whether it bound before. O(deg).
    pub(super) fn refresh_binding(&mut self, l: LinkId) -> bool {
        let demand: f64 = self.link_flows[l].iter().filter_map(|&f| self.flows[f].as_ref()).map(|f| f.cap_gbps).sum();
        let before = self.binds[l];
        self.binds[l] = demand > self.capacity[l] * (1.0 + 1e-12);
        before
    }

    /// Refreshes whether each of `links` binds after flows left them or
    /// caps changed; returns those that stopped binding. O(Σ deg).
    pub(super) fn release(&mut self, links: &[LinkId]) -> Vec<LinkId> {
        links.iter().copied().filter(|&l| self.refresh_binding(l) && !self.binds[l]).collect()
    }

    /// The binding components to re-rate (see [`Network::recompute`]), in
    /// `sc.comp_flows` and `sc.comp_links`, each sorted within its
    /// component, and each component's end in the two in `sc.ends`. With an isolated
    /// network each of `extra` alone. O(F_c · d + Σ deg) with stamps.
    pub(super) fn components(&mut self, touched: &[LinkId], released: &[LinkId], extra: &[FlowId], sc: &mut Scratch) {
        self.stamp += 1;
        if self.flow_stamp.len() < self.flows.len() {
            self.flow_stamp.resize(self.flows.len(), 0);
        }
        sc.comp_flows.clear();
        sc.comp_links.clear();
        sc.ends.clear();
        sc.openers.clear();
        for &s in extra {
            if self.grow(s, sc) {
                sc.openers.push(s);
            }
        }
        if self.isolated {
            return;
        }
        // `released` is a part of `touched`.
        for &l in touched {
            // A touched link that does not bind couples none of its flows
            // (each is reached from `extra` or not affected); a released
            // one did until now.
            if !self.binds[l] && !released.contains(&l) {
                continue;
            }
            // `grow` changes no link's flows, so the indices stay valid.
            for k in 0..self.link_flows[l].len() {
                self.grow(self.link_flows[l][k], sc);
            }
        }
    }

    /// Appends the binding component of flow `s` to `sc` unless the current
    /// search has it already; returns whether it did. O(its flows · d +
    /// its links' degrees).
    pub(super) fn grow(&mut self, s: FlowId, sc: &mut Scratch) -> bool {
        let stamp = self.stamp;
        if self.flow_stamp[s] == stamp || self.flows[s].is_none() {
            return false;
        }
        let (f0, l0) = (sc.comp_flows.len(), sc.comp_links.len());
        self.flow_stamp[s] = stamp;
        sc.stack.push(s);
        while let Some(f) = sc.stack.pop() {
            sc.comp_flows.push(f);
            if self.isolated {
                continue;
            }
            let Some(flow) = self.flows[f].as_ref() else { continue };
            for &l in flow.path.iter() {
                if !self.binds[l] || self.link_stamp[l] == stamp {
                    continue;
                }
                self.link_stamp[l] = stamp;
                sc.comp_links.push(l);
                for &g in &self.link_flows[l] {
                    if self.flow_stamp[g] != stamp {
                        self.flow_stamp[g] = stamp;
                        sc.stack.push(g);
                    }
                }
            }
        }
        sc.comp_flows[f0..].sort_unstable();
        sc.comp_links[l0..].sort_unstable();
        sc.ends.push((sc.comp_flows.len(), sc.comp_links.len()));
        true
    }

    /// Max-min fair rates of one binding component (flows `sc.comp_flows[f0..f1]`,
    /// links `sc.comp_links[l0..l1]`) into `sc.new_rate[f0..f1]`, by
    /// progressive filling: all unfrozen flows rise together until a link
    /// saturates or a flow reaches its cap; those freeze. Links that do not
    /// bind are left out of the paths: they cannot saturate.
    pub(super) fn fill(&mut self, sc: &mut Scratch, flows: (usize, usize), links: (usize, usize)) {
        self.fill_with(sc, flows, links, flows.1 - flows.0 >= BY_LINKS_FROM);
    }

    /// [`Network::fill`], each round visiting every rising flow (cheaper
    /// for the small components most policies make) or only the links'
    /// flows that freeze (`by_links`: for components of hundreds of flows
    /// rising over many rounds, as LLM meshes' rings under `orrery`).
    fn fill_with(&mut self, sc: &mut Scratch, (f0, f1): (usize, usize), (l0, l1): (usize, usize), by_links: bool) {
        let flows = &sc.comp_flows[f0..f1];
        let links = &sc.comp_links[l0..l1];
        for (i, &l) in links.iter().enumerate() {
            self.local[l] = i;
        }
        sc.remaining.clear();
        sc.remaining.extend(links.iter().map(|&l| self.capacity[l]));
        sc.saturated_below.clear();
        sc.saturated_below.extend(links.iter().map(|&l| self.capacity[l] * 1e-12));
        sc.count.clear();
        sc.count.resize(links.len(), 0);
        // Paths in local link indices, flattened: flow i's are path[offset[i]..offset[i + 1]].
        sc.path.clear();
        sc.offset.clear();
        sc.caps.clear();
        sc.queue.clear();
        sc.queues.clear();
        for &f in flows {
            sc.offset.push(sc.path.len());
            let flow = self.flows[f].as_ref();
            sc.caps.push(flow.map_or(0.0, |f| f.cap_gbps));
            let q = flow.map_or(0, |f| f.priority);
            sc.queue.push(q);
            if !sc.queues.contains(&q) {
                sc.queues.push(q);
            }
            for &l in flow.map(|f| &*f.path).unwrap_or_default() {
                if self.binds[l] {
                    sc.path.push(self.local[l]);
                }
            }
        }
        sc.offset.push(sc.path.len());
        let rate = &mut sc.new_rate[f0..f1];
        let Scratch { remaining, saturated_below, count, path, offset, caps, queue, queues, .. } = sc;
        let Scratch { active_links, active_flows, link_at, on_link, cursor, by_cap, uncapped, frozen, .. } = sc;
        let path_of = |i: usize| &path[offset[i]..offset[i + 1]];
        frozen.clear();
        frozen.resize(flows.len(), false);
        let at_cap = |c: f64, level: f64| c - level <= c * 1e-12;
        // Strict priority: each queue, highest first, fills what the
        // ones above it left (one queue: plain max-min).
        queues.sort_unstable_by(|a, b| b.cmp(a));
        for &q in queues.iter() {
            active_flows.clear();
            active_flows.extend((0..flows.len()).filter(|&i| queue[i] == q));
            for &i in active_flows.iter() {
                for &l in path_of(i) {
                    count[l] += 1;
                }
            }
            // Each round visits only the links still carrying an unfrozen
            // flow and the unfrozen flows, so a component costs the sum of
            // what is still rising per round rather than R · (F_c + L_c). The
            // minimum and the freezes do not depend on visiting order, so the
            // rates are the same as visiting everything.
            active_links.clear();
            active_links.extend((0..links.len()).filter(|&l| count[l] > 0));
            let mut level = 0.0;
            if !by_links {
                while !active_flows.is_empty() {
                    let mut step = f64::INFINITY;
                    for &l in active_links.iter() {
                        step = step.min(remaining[l] / count[l] as f64);
                    }
                    for &i in active_flows.iter() {
                        step = step.min(caps[i] - level);
                    }
                    let step = step.max(0.0);
                    level += step;
                    for &l in active_links.iter() {
                        remaining[l] -= step * count[l] as f64;
                    }
                    // Saturation is judged on the remaining capacity before
                    // this round's freezes (they do not change `remaining`).
                    let mut k = 0;
                    while k < active_flows.len() {
                        let i = active_flows[k];
                        if at_cap(caps[i], level) || path_of(i).iter().any(|&l| remaining[l] <= saturated_below[l]) {
                            rate[i] = level;
                            for &l in path_of(i) {
                                count[l] -= 1;
                            }
                            active_flows.swap_remove(k);
                        } else {
                            k += 1;
                        }
                    }
                    active_links.retain(|&l| count[l] > 0);
                }
                continue;
            }
            // By links: each link's flows of the queue (`on_link`), and the
            // flows with finite caps least cap first (`by_cap`), so a round
            // visits the active links, the flows of the links that saturate
            // and the flows whose cap is about the level: O(active links +
            // freezes · path), not O(active flows · path). The same flows
            // freeze at the same levels.
            link_at.clear();
            link_at.resize(links.len() + 1, 0);
            for &i in active_flows.iter() {
                for &l in path_of(i) {
                    link_at[l + 1] += 1;
                }
            }
            for l in 0..links.len() {
                link_at[l + 1] += link_at[l];
            }
            cursor.clear();
            cursor.extend_from_slice(&link_at[..links.len()]);
            on_link.clear();
            on_link.resize(link_at[links.len()], 0);
            for &i in active_flows.iter() {
                for &l in path_of(i) {
                    on_link[cursor[l]] = i;
                    cursor[l] += 1;
                }
            }
            by_cap.clear();
            by_cap.extend(active_flows.iter().copied().filter(|&i| caps[i].is_finite()));
            by_cap.sort_unstable_by(|&a, &b| caps[a].total_cmp(&caps[b]));
            uncapped.clear();
            uncapped.extend(active_flows.iter().copied().filter(|&i| !caps[i].is_finite()));
            let mut rising = active_flows.len();
            let mut head = 0;
            while rising > 0 {
                let mut step = f64::INFINITY;
                for &l in active_links.iter() {
                    step = step.min(remaining[l] / count[l] as f64);
                }
                // caps[i] - level is monotone in caps[i]: the least cap
                // still rising gives the minimum, bit for bit.
                while head < by_cap.len() && frozen[by_cap[head]] {
                    head += 1;
                }
                if let Some(&i) = by_cap.get(head) {
                    step = step.min(caps[i] - level);
                }
                for &i in uncapped.iter().filter(|&&i| !frozen[i]) {
                    step = step.min(caps[i] - level);
                }
                let step = step.max(0.0);
                level += step;
                for &l in active_links.iter() {
                    remaining[l] -= step * count[l] as f64;
                }
                let mut freeze = |i: usize| {
                    if !frozen[i] {
                        frozen[i] = true;
                        rate[i] = level;
                        for &l in path_of(i) {
                            count[l] -= 1;
                        }
                        rising -= 1;
                    }
                };
                for &l in active_links.iter() {
                    if remaining[l] <= saturated_below[l] {
                        on_link[link_at[l]..link_at[l + 1]].iter().for_each(|&i| freeze(i));
                    }
                }
                // Caps above level · (1 + 1e-6) are not within 1e-12 of it.
                for &i in &by_cap[head..] {
                    let c = caps[i];
                    if c > 0.0 && c > level * (1.0 + 1e-6) {
                        break;
                    }
                    if at_cap(c, level) {
                        freeze(i);
                    }
                }
                for &i in uncapped.iter() {
                    if at_cap(caps[i], level) {
                        freeze(i);
                    }
                }
                active_links.retain(|&l| count[l] > 0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Network, Scratch};
    use proptest::prelude::*;

    proptest! {
        /// Filling by links' flows gives every flow the rate that visiting
        /// every rising flow gives, bit for bit, on whole networks with
        /// whole-number caps and capacities (ties: links saturating
        /// together, caps at a link's share), in up to three queues.
        #[test]
        fn filling_by_links_is_filling_by_flows_bit_for_bit(
            capacity in prop::collection::vec(1u32..60, 1..10),
            flows in prop::collection::vec(
                (prop::collection::btree_set(0usize..10, 1..=4), 1u32..80, 0usize..6),
                1..40,
            ),
            priority in prop::collection::vec(0u8..3, 6),
        ) {
            let n = capacity.len();
            let mut net = Network::new(capacity.iter().map(|&c| f64::from(c)).collect(), false);
            for (owner, &p) in priority.iter().enumerate() {
                net.set_priority(0, owner, p);
            }
            for (path, cap, owner) in &flows {
                let path: std::collections::BTreeSet<usize> = path.iter().map(|&l| l % n).collect();
                net.add(0, path.into_iter().collect::<Vec<_>>(), 1e12, f64::from(*cap), *owner);
            }
            let live: Vec<usize> = net.flows().map(|(f, _)| f).collect();
            let binding: Vec<usize> = (0..n).filter(|&l| net.binds[l]).collect();
            let mut rates = Vec::new();
            for by_links in [false, true] {
                let mut sc = Scratch { comp_flows: live.clone(), comp_links: binding.clone(), ..Scratch::default() };
                sc.new_rate.resize(live.len(), 0.0);
                net.fill_with(&mut sc, (0, live.len()), (0, binding.len()), by_links);
                rates.push(sc.new_rate.iter().map(|x| x.to_bits()).collect::<Vec<u64>>());
            }
            prop_assert_eq!(&rates[0], &rates[1]);
        }
    }
}
