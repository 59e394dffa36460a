//! Links that can never bind. Each running job's peak demand on a link is
//! the most its flows ask of it at once (the sum of their caps in any one of
//! its collectives: a job's collectives run one after another). A link whose
//! running jobs' peaks (and background flows) sum to no more than its
//! capacity never binds: whatever those jobs do and whenever they do it,
//! every flow on it gets its cap there. A job whose links all have that
//! headroom runs exactly as it would alone, so the fast-forward may count
//! it while other jobs share its links (docs/guide/simulation.md,
//! "Fast-forward").

use orrery_model::LinkId;

/// The running jobs' peak demands summed per link.
#[derive(Debug, Clone)]
pub(super) struct Headroom {
    capacity: Vec<f64>,
    /// Σ over running jobs of their peak demand on the link, and the caps of
    /// background flows, Gbit/s.
    potential: Vec<f64>,
    /// Times the link lost its headroom: a job that saw none of these in an
    /// iteration had headroom on that link all along.
    lost: Vec<u64>,
    /// Scratch for [`Headroom::raise`]: a collective's demand per link (zero
    /// between calls) and the links it touched, in first-touch order.
    demand: Vec<f64>,
    touched: Vec<LinkId>,
}

impl Headroom {
    pub(super) fn new(capacity: Vec<f64>) -> Self {
        let n = capacity.len();
        Headroom { capacity, potential: vec![0.0; n], lost: vec![0; n], demand: vec![0.0; n], touched: Vec::new() }
    }

    /// Whether link `l` can never bind now. The same test as the network's
    /// congestion (demand above capacity), on the demand it may reach. O(1).
    pub(super) fn clear(&self, l: LinkId) -> bool {
        self.potential[l] <= self.capacity[l]
    }

    /// How often link `l` has lost its headroom so far. O(1).
    pub(super) fn lost(&self, l: LinkId) -> u64 {
        self.lost[l]
    }

    /// Adds demand that never leaves (a background flow's cap). O(1).
    pub(super) fn add_permanent(&mut self, l: LinkId, gbps: f64) {
        self.raise_link(l, gbps);
    }

    /// Raises a job's peaks (`peaks`, sorted by link) to at least a
    /// collective's demand on each link: the caps of its flows (`flows`:
    /// (path, Gbit/s)) summed per link; [`Headroom::touched`] then lists
    /// the links it touches. O(Σ path lengths + links touched · log peaks),
    /// with no sort and no allocation once the scratch has grown.
    pub(super) fn raise<'p>(
        &mut self,
        peaks: &mut Vec<(LinkId, f64)>,
        flows: impl Iterator<Item = (&'p [LinkId], f64)>,
    ) {
        self.touched.clear();
        // A flow without a cap asks for nothing (and would leave its links
        // at zero, to be listed again).
        for (path, cap) in flows.filter(|&(_, cap)| cap > 0.0) {
            for &l in path {
                if self.demand[l] == 0.0 {
                    self.touched.push(l);
                }
                self.demand[l] += cap;
            }
        }
        for i in 0..self.touched.len() {
            let l = self.touched[i];
            let gbps = std::mem::take(&mut self.demand[l]);
            match peaks.binary_search_by_key(&l, |p| p.0) {
                Ok(k) if peaks[k].1 < gbps => {
                    self.raise_link(l, gbps - peaks[k].1);
                    peaks[k].1 = gbps;
                }
                Ok(_) => {}
                Err(k) => {
                    self.raise_link(l, gbps);
                    peaks.insert(k, (l, gbps));
                }
            }
        }
    }

    /// The links the last [`Headroom::raise`] touched, each once, in the
    /// order its flows reached them. O(1).
    pub(super) fn touched(&self) -> &[LinkId] {
        &self.touched
    }

    /// Takes a job's peaks away: it no longer runs here. O(peaks).
    pub(super) fn release(&mut self, peaks: &mut Vec<(LinkId, f64)>) {
        for (l, gbps) in peaks.drain(..) {
            self.potential[l] -= gbps;
        }
    }

    fn raise_link(&mut self, l: LinkId, gbps: f64) {
        let was_clear = self.clear(l);
        self.potential[l] += gbps;
        if was_clear && !self.clear(l) {
            self.lost[l] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Headroom;

    #[test]
    fn a_link_keeps_its_headroom_while_the_peaks_fit_and_counts_each_loss() {
        // One 400 Gbit/s uplink: jobs of 100 Gbit/s flows.
        let mut room = Headroom::new(vec![400.0, 100.0]);
        let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
        // a: two flows on link 0 in one collective, one on link 1.
        room.raise(&mut a, [(&[0usize, 1][..], 100.0), (&[0usize][..], 100.0)].into_iter());
        assert_eq!(room.touched(), [0, 1]);
        assert_eq!(a, vec![(0, 200.0), (1, 100.0)]);
        assert!(room.clear(0) && room.clear(1));
        // A smaller collective of a's does not lower its peak.
        room.raise(&mut a, [(&[0usize][..], 100.0)].into_iter());
        assert_eq!(a, vec![(0, 200.0), (1, 100.0)]);
        // b fills link 0 exactly: still clear (demand equal to capacity never congests).
        room.raise(&mut b, [(&[0usize][..], 200.0)].into_iter());
        assert!(room.clear(0));
        assert_eq!(room.lost(0), 0);
        // c would push it over: lost once.
        room.raise(&mut c, [(&[0usize][..], 50.0)].into_iter());
        assert!(!room.clear(0));
        assert_eq!(room.lost(0), 1);
        // b leaves: clear again, and the loss stays counted.
        room.release(&mut b);
        assert!(b.is_empty() && room.clear(0));
        assert_eq!(room.lost(0), 1);
        // A background flow on link 1 takes it with a: 100 + 1 > 100.
        room.add_permanent(1, 1.0);
        assert!(!room.clear(1));
        assert_eq!(room.lost(1), 1);
    }
}
