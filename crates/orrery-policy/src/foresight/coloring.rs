//! Proper edge colouring of bipartite multigraphs with exactly Δ colours
//! (König's edge-colouring theorem), for FORESIGHT's SolveRouting (§III):
//! leaves are the vertices — sources on the left, destinations on the right —
//! every cross-rack flow (or subflow) is an edge, and a colour is a spine. No
//! two flows leaving one leaf or entering one leaf share a spine, so no uplink
//! or downlink carries two of them.
//!
//! Algorithm: the alternating-path (Kempe chain) method. For edge (u, v) take a
//! colour `a` free at u and `b` free at v. If `a` is free at v too, use it.
//! Otherwise walk the path from v whose edges alternate b, a, b, ... and swap
//! a ↔ b on it; in a bipartite graph that path never reaches u, so
//! afterwards `a` is free at both ends. Never fails with Δ colours.
//!
//! Cost: O(E · (V + Δ/64)) time — each edge walks at most one path (≤ V edges)
//! and finds free colours with a word scan of a bitset, which starts at the
//! first word that may have one — and O(V · Δ) memory, V the vertices the
//! edges touch.
//! Cole & Hopcroft's O(E log V) (FORESIGHT's [29]) is asymptotically better; this
//! one colours 100,000 flows over 64 leaves in milliseconds
//! (`cargo bench -p orrery-policy`).

/// A colouring: `colors[e]` for each edge, and the number of colours used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coloring {
    /// Colour of each edge, in input order.
    pub colors: Vec<u32>,
    /// Colours available (the maximum degree Δ, at least 1 if there are edges).
    pub used: u32,
}

/// Colours bipartite multigraphs one after another, reusing its buffers:
/// SolveRouting colours one small graph per time range, thousands a plan,
/// and allocating a bitset per leaf for each was a sixth of a 4,096-host
/// re-plan. Only the vertices a graph's edges touch get rows, so a range
/// over a few of hundreds of leaves costs O(its vertices · Δ), not O(V · Δ);
/// renaming vertices does not change the colours chosen.
#[derive(Debug, Default)]
pub struct Colorer {
    /// Each vertex's row, or `u32::MAX` while the graph does not touch it.
    row: Vec<u32>,
    /// The vertices with rows, to reset `row` after.
    touched: Vec<usize>,
    degree: Vec<usize>,
    /// at[row · Δ + c] = the edge of colour c at that vertex, if any.
    at: Vec<u32>,
    /// Colours in use per row, as a bitset of ⌈Δ / 64⌉ words (bit set = used).
    used: Vec<u64>,
    /// Per row, a word of `used` at or before its first with a free colour:
    /// the search starts there (`orrery`'s ranges of 400 Gbit/s subflows at
    /// 4,096 hosts have Δ about 950, fifteen words a row, scanned from the
    /// first twice an edge before).
    low: Vec<u32>,
    path: Vec<u32>,
    /// Each edge's rows.
    ends: Vec<(u32, u32)>,
}

impl Colorer {
    /// [`color_bipartite`] into `colors` (one per edge, in input order);
    /// returns Δ, or None if an edge names a vertex out of range (then
    /// `colors` is empty).
    pub fn color(&mut self, left: usize, right: usize, edges: &[(usize, usize)], colors: &mut Vec<u32>) -> Option<u32> {
        self.color_within(left, right, edges, u32::MAX, colors)
    }

    /// [`Colorer::color`] when Δ ≤ `most`; otherwise returns Δ, found in
    /// O(E), with `colors` empty: a range that needs more colours than there
    /// are is bad whatever the colouring, so SolveRouting's repair loop
    /// need not walk its alternating paths (Δ is exactly the colours
    /// [`Colorer::color`] uses).
    pub fn color_within(
        &mut self,
        left: usize,
        right: usize,
        edges: &[(usize, usize)],
        most: u32,
        colors: &mut Vec<u32>,
    ) -> Option<u32> {
        colors.clear();
        if edges.iter().any(|&(l, r)| l >= left || r >= right) {
            return None;
        }
        if self.row.len() < left + right {
            self.row.resize(left + right, u32::MAX);
        }
        // Rows in order of first touch: (l, r) becomes (row of l, row of left + r).
        let mut ends = std::mem::take(&mut self.ends);
        ends.clear();
        self.degree.clear();
        for &(l, r) in edges {
            let mut row_of = |v: usize| {
                if self.row[v] == u32::MAX {
                    self.row[v] = self.touched.len() as u32;
                    self.touched.push(v);
                    self.degree.push(0);
                }
                let x = self.row[v];
                self.degree[x as usize] += 1;
                x
            };
            ends.push((row_of(l), row_of(left + r)));
        }
        for v in self.touched.drain(..) {
            self.row[v] = u32::MAX;
        }
        let (n, delta) = (self.degree.len(), self.degree.iter().copied().max().unwrap_or(0));
        if delta > most as usize {
            self.ends = ends;
            return Some(delta as u32);
        }
        let words = delta.div_ceil(64);
        self.at.clear();
        self.at.resize(n * delta, u32::MAX);
        self.used.clear();
        self.used.resize(n * words, 0);
        self.low.clear();
        self.low.resize(n, 0);
        colors.resize(edges.len(), u32::MAX);
        let (at, used, low, path) = (&mut self.at, &mut self.used, &mut self.low, &mut self.path);
        // The least free colour at x, from the row's `low` word on (the
        // words before it are full). O(Δ/64) at worst, O(1) amortised while
        // colours are only taken.
        let first_free = |used: &[u64], low: &mut [u32], x: u32| -> u32 {
            let row = &used[x as usize * words..(x as usize + 1) * words];
            let from = low[x as usize] as usize;
            match row[from..].iter().position(|w| *w != u64::MAX) {
                Some(i) => {
                    low[x as usize] = (from + i) as u32;
                    ((from + i) * 64) as u32 + row[from + i].trailing_ones()
                }
                None => (words * 64) as u32,
            }
        };
        let set = |used: &mut [u64], low: &mut [u32], x: u32, c: u32, on: bool| {
            let (i, b) = (x as usize * words + (c / 64) as usize, c % 64);
            if on {
                used[i] |= 1 << b;
            } else {
                used[i] &= !(1 << b);
                low[x as usize] = low[x as usize].min(c / 64);
            }
        };
        let slot = |x: u32, c: u32| x as usize * delta + c as usize;
        for (e, &(u, v)) in ends.iter().enumerate() {
            let a = first_free(used, low, u);
            let b = first_free(used, low, v);
            if at[slot(v, a)] != u32::MAX {
                // `a` is taken at v: flip the a/b path starting at v with colour a.
                path.clear();
                let (mut x, mut c) = (v, a);
                while at[slot(x, c)] != u32::MAX {
                    let f = at[slot(x, c)];
                    path.push(f);
                    let (p, q) = ends[f as usize];
                    x = if p == x { q } else { p };
                    c = if c == a { b } else { a };
                }
                // Clear the path's colours, then set them swapped.
                for &f in path.iter() {
                    let (p, q) = ends[f as usize];
                    let c = colors[f as usize];
                    for w in [p, q] {
                        at[slot(w, c)] = u32::MAX;
                        set(used, low, w, c, false);
                    }
                }
                for &f in path.iter() {
                    let (p, q) = ends[f as usize];
                    let c = if colors[f as usize] == a { b } else { a };
                    colors[f as usize] = c;
                    for w in [p, q] {
                        at[slot(w, c)] = f;
                        set(used, low, w, c, true);
                    }
                }
            }
            colors[e] = a;
            for w in [u, v] {
                at[slot(w, a)] = e as u32;
                set(used, low, w, a, true);
            }
        }
        self.ends = ends;
        Some(delta as u32)
    }
}

/// Colours the bipartite multigraph with `left` + `right` vertices and edges
/// `(l, r)` (0 ≤ l < left, 0 ≤ r < right) using exactly Δ colours. Returns
/// None if an edge names a vertex out of range.
pub fn color_bipartite(left: usize, right: usize, edges: &[(usize, usize)]) -> Option<Coloring> {
    let mut colors = Vec::new();
    let used = Colorer::default().color(left, right, edges, &mut colors)?;
    Some(Coloring { colors, used })
}

/// Whether `colors` is a proper edge colouring (no two edges at a vertex share
/// a colour). O(E + V · colours).
pub fn is_proper(left: usize, edges: &[(usize, usize)], colors: &[u32]) -> bool {
    let mut seen: std::collections::HashSet<(usize, u32)> = std::collections::HashSet::new();
    edges.iter().zip(colors).all(|(&(l, r), &c)| seen.insert((l, c)) && seen.insert((left + r, c)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_ring_across_four_racks_needs_one_spine_per_flow_through_a_leaf() {
        // Leaves 0..4; a ring 0→1→2→3→0 plus a second ring 0→2→0: leaf 0
        // sends 2 flows and receives 2, so Δ = 2 colours (spines) suffice.
        let edges = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (2, 0)];
        let c = color_bipartite(4, 4, &edges).expect("in range");
        assert_eq!(c.used, 2);
        assert!(is_proper(4, &edges, &c.colors));
        // Parallel edges (two flows between the same leaves) get different spines.
        let c = color_bipartite(1, 1, &[(0, 0), (0, 0), (0, 0)]).expect("in range");
        let mut cs = c.colors.clone();
        cs.sort_unstable();
        assert_eq!(cs, vec![0, 1, 2]);
        assert!(color_bipartite(1, 1, &[(0, 1)]).is_none());
        assert_eq!(color_bipartite(3, 3, &[]).map(|c| c.used), Some(0));
    }

    #[test]
    fn the_kempe_chain_is_flipped_when_the_free_colours_differ() {
        // (0,0) gets 0, (1,1) gets 0, (1,0): free at left 1 is 1, at right 0 is 1 → 1.
        // Then (0,1): free at left 0 is 1, at right 1 is 1... and a case that
        // forces a flip: a path 0-0 (colour 0), then edge (1,0) with colour 0
        // taken at right 0.
        let edges = [(0, 0), (1, 1), (0, 1), (1, 0)];
        let c = color_bipartite(2, 2, &edges).expect("in range");
        assert_eq!(c.used, 2);
        assert!(is_proper(2, &edges, &c.colors));
    }

    /// The same alternating-path colouring written plainly, for comparison:
    /// each vertex's colours in a map, the least free one found by counting
    /// up from 0.
    fn plainly(left: usize, edges: &[(usize, usize)]) -> Vec<u32> {
        use std::collections::HashMap;
        let mut at: HashMap<(usize, u32), usize> = HashMap::new();
        let mut colors = vec![u32::MAX; edges.len()];
        let least_free =
            |at: &HashMap<(usize, u32), usize>, x: usize| (0..).find(|&c| !at.contains_key(&(x, c))).unwrap_or(0);
        for (e, &(l, r)) in edges.iter().enumerate() {
            let (u, v) = (l, left + r);
            let (a, b) = (least_free(&at, u), least_free(&at, v));
            if at.contains_key(&(v, a)) {
                let (mut x, mut c, mut path) = (v, a, Vec::new());
                while let Some(&f) = at.get(&(x, c)) {
                    path.push(f);
                    let (p, q) = (edges[f].0, left + edges[f].1);
                    x = if p == x { q } else { p };
                    c = if c == a { b } else { a };
                }
                for &f in &path {
                    for w in [edges[f].0, left + edges[f].1] {
                        at.remove(&(w, colors[f]));
                    }
                }
                for &f in &path {
                    colors[f] = if colors[f] == a { b } else { a };
                    for w in [edges[f].0, left + edges[f].1] {
                        at.insert((w, colors[f]), f);
                    }
                }
            }
            colors[e] = a;
            at.insert((u, a), e);
            at.insert((v, a), e);
        }
        colors
    }

    proptest! {
        /// König: any bipartite multigraph is properly coloured with Δ colours.
        #[test]
        fn every_bipartite_multigraph_is_properly_colored_with_max_degree_colors(
            left in 1usize..12,
            right in 1usize..12,
            raw in prop::collection::vec((0usize..12, 0usize..12), 0..200),
        ) {
            let edges: Vec<(usize, usize)> = raw.into_iter().map(|(l, r)| (l % left, r % right)).collect();
            let c = color_bipartite(left, right, &edges).expect("in range");
            let mut degree = vec![0u32; left + right];
            for &(l, r) in &edges {
                degree[l] += 1;
                degree[left + r] += 1;
            }
            prop_assert_eq!(c.used, degree.iter().copied().max().unwrap_or(0));
            prop_assert!(c.colors.iter().all(|&x| x < c.used.max(1)));
            prop_assert!(is_proper(left, &edges, &c.colors));
        }

        /// The colourer chooses what the plain version chooses, edge by
        /// edge, on graphs of a few vertices and degrees of hundreds (rows of
        /// several words, paths that free colours in words already full).
        #[test]
        fn the_colours_are_the_plain_algorithms(
            left in 1usize..4,
            right in 1usize..4,
            raw in prop::collection::vec((0usize..4, 0usize..4), 0..700),
        ) {
            let edges: Vec<(usize, usize)> = raw.into_iter().map(|(l, r)| (l % left, r % right)).collect();
            let c = color_bipartite(left, right, &edges).expect("in range");
            prop_assert_eq!(c.colors, plainly(left, &edges));
        }

        /// One colourer reused over graphs of any size colours each as a
        /// fresh one does, and refuses an edge out of range without
        /// spoiling the next graph. Given a most colours below Δ, it gives
        /// the Δ a fresh colouring uses and no colours, and the next graph
        /// is coloured as fresh too.
        #[test]
        fn a_reused_colorer_colors_each_graph_as_a_fresh_one(
            graphs in prop::collection::vec(
                (1usize..12, 1usize..12, prop::collection::vec((0usize..13, 0usize..13), 0..80), 0u32..24),
                1..6,
            ),
        ) {
            let mut colorer = Colorer::default();
            let mut colors = Vec::new();
            for (left, right, edges, most) in &graphs {
                let fresh = color_bipartite(*left, *right, edges);
                let reused = colorer.color_within(*left, *right, edges, *most, &mut colors);
                prop_assert_eq!(reused, fresh.as_ref().map(|c| c.used));
                if fresh.as_ref().is_some_and(|c| c.used > *most) {
                    prop_assert!(colors.is_empty());
                }
                let reused = colorer.color(*left, *right, edges, &mut colors);
                prop_assert_eq!(reused, fresh.as_ref().map(|c| c.used));
                prop_assert_eq!(&colors, &fresh.map(|c| c.colors).unwrap_or_default());
            }
        }
    }
}
