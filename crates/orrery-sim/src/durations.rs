//! A job's iteration times in memory that does not grow with the number of
//! iterations: the full Philly trace runs billions of them.

use orrery_trace::inspect::Percentiles;
use std::collections::BTreeMap;

/// Relative width of a histogram bucket: a quantile read from the histogram
/// is within half of it (0.05%) of the exact one.
const BUCKET_WIDTH: f64 = 1e-3;

/// Widest run of buckets kept densely, from the lowest to the highest
/// (1,024 buckets: a factor of 2.8 in duration, 8 kB). A job's iterations
/// fall in a few hundred; the rest of the range goes to the sparse map.
const DENSE_SPAN: usize = 1024;

/// Durations (any unit): count, sum, minimum and maximum exact; quantiles
/// from a histogram of logarithmic buckets 0.1% wide, so memory is
/// O(buckets): a job without noise fills one or two, one with 2% noise
/// about a hundred.
///
/// The buckets where values fall are counted in one dense window (`add` is
/// O(1): an index, where a map of a hundred buckets walked two or three
/// tree nodes, each a cache miss when thousands of jobs' histograms are
/// written in turn: 10% of a 16,384-host run). Buckets the window cannot
/// reach within [`DENSE_SPAN`] of the ones it holds, and zeros, go to a
/// sparse map; the two never hold the same bucket (the window only grows,
/// so a bucket once too far stays too far).
#[derive(Debug, Clone, Default)]
pub struct Durations {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    /// Counts of buckets `lo`, `lo + 1`, …; bucket `k` holds values in
    /// [(1+w)^k, (1+w)^(k+1)).
    lo: i32,
    dense: Vec<u64>,
    /// Bucket → count outside the window; `i32::MIN` holds zeros.
    sparse: BTreeMap<i32, u64>,
}

/// Equal when they hold the same values in the same buckets, however the
/// buckets are stored.
impl PartialEq for Durations {
    fn eq(&self, other: &Self) -> bool {
        (self.count, self.sum, self.min, self.max) == (other.count, other.sum, other.min, other.max)
            && self.buckets().eq(other.buckets())
    }
}

/// The bucket of `v`: ⌊ln v / ln(1 + w)⌋, or `i32::MIN` for zero.
fn bucket(v: f64) -> i32 {
    if v > 0.0 { (v.ln() / BUCKET_WIDTH.ln_1p()).floor() as i32 } else { i32::MIN }
}

impl Durations {
    /// An empty sample.
    pub fn new() -> Self {
        Durations::default()
    }

    /// Adds one duration.
    pub fn add(&mut self, v: f64) {
        self.add_n(v, 1);
    }

    /// Adds `n` equal durations (a fast-forwarded stretch without noise). O(log buckets).
    pub fn add_n(&mut self, v: f64, n: u64) {
        if n == 0 || !v.is_finite() {
            return;
        }
        let v = v.max(0.0);
        if self.count == 0 {
            (self.min, self.max) = (v, v);
        } else {
            (self.min, self.max) = (self.min.min(v), self.max.max(v));
        }
        self.count += n;
        self.sum += v * n as f64;
        self.count_in(bucket(v), n);
    }

    /// Adds `n` to bucket `b`: in the window if it holds `b` or can grow to
    /// it within [`DENSE_SPAN`], else in the sparse map. O(1), or O(span)
    /// when the window grows downwards.
    fn count_in(&mut self, b: i32, n: u64) {
        if b == i32::MIN {
            *self.sparse.entry(b).or_insert(0) += n;
            return;
        }
        if self.dense.is_empty() {
            self.lo = b;
            self.dense.push(n);
            return;
        }
        let hi = i64::from(self.lo) + self.dense.len() as i64 - 1;
        let (b64, lo64) = (i64::from(b), i64::from(self.lo));
        if (lo64..=hi).contains(&b64) {
            self.dense[(b64 - lo64) as usize] += n;
        } else if b64 > hi && b64 - lo64 < DENSE_SPAN as i64 {
            self.dense.resize((b64 - lo64) as usize + 1, 0);
            self.dense[(b64 - lo64) as usize] += n;
        } else if b64 < lo64 && hi - b64 < DENSE_SPAN as i64 {
            let grow = (lo64 - b64) as usize;
            self.dense.splice(0..0, std::iter::repeat_n(0, grow));
            self.dense[0] += n;
            self.lo = b;
        } else {
            *self.sparse.entry(b).or_insert(0) += n;
        }
    }

    /// The buckets holding values, ascending, with their counts. The sparse
    /// map's buckets lie below or above the window, never inside it.
    /// (Buckets are within ±750,000: ln of any finite f64 over ln 1.001.)
    fn buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let (lo, end) =
            if self.dense.is_empty() { (i32::MAX, i32::MAX) } else { (self.lo, self.lo + self.dense.len() as i32) };
        let dense = self.dense.iter().zip(self.lo..).filter(|&(&c, _)| c > 0).map(|(&c, b)| (b, c));
        let below = self.sparse.range(..lo).map(|(&b, &c)| (b, c));
        let above = self.sparse.range(end..).map(|(&b, &c)| (b, c));
        below.chain(dense).chain(above)
    }

    /// Takes back one duration added before (the minimum and maximum stay
    /// as they were). O(1) in the window, O(log buckets) outside it.
    pub fn remove(&mut self, v: f64) {
        let v = v.max(0.0);
        let b = bucket(v);
        let slot = usize::try_from(i64::from(b) - i64::from(self.lo)).ok().filter(|&i| i < self.dense.len());
        let held = match slot {
            Some(i) if self.dense[i] > 0 => {
                self.dense[i] -= 1;
                true
            }
            Some(_) => false,
            None => match self.sparse.get_mut(&b) {
                Some(c) => {
                    *c -= 1;
                    if *c == 0 {
                        self.sparse.remove(&b);
                    }
                    true
                }
                None => false,
            },
        };
        if held {
            self.count -= 1;
            self.sum -= v;
        }
    }

    /// Number of durations.
    pub fn len(&self) -> u64 {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Their sum.
    pub fn sum(&self) -> f64 {
        self.sum
    }

    /// The longest (exact).
    pub fn max(&self) -> f64 {
        self.max
    }

    /// Adds another sample to this one. O(buckets of `other`), each O(1) in
    /// the window and O(log buckets) outside it.
    pub fn merge(&mut self, other: &Durations) {
        if other.count == 0 {
            return;
        }
        if self.count == 0 {
            (self.min, self.max) = (other.min, other.max);
        } else {
            (self.min, self.max) = (self.min.min(other.min), self.max.max(other.max));
        }
        self.count += other.count;
        self.sum += other.sum;
        for (b, c) in other.buckets() {
            self.count_in(b, c);
        }
    }

    /// The value of bucket `b` as reported: its geometric middle, kept
    /// within the sample's minimum and maximum (so a sample of one value
    /// reports it exactly).
    fn value(&self, b: i32) -> f64 {
        if b == i32::MIN {
            return 0.0;
        }
        let mid = BUCKET_WIDTH.ln_1p() * (f64::from(b) + 0.5);
        mid.exp().clamp(self.min, self.max)
    }

    /// The nearest-rank quantile `p` in [0, 1] (as [`Percentiles::of`]),
    /// within 0.05% of the exact one (the first and last exactly).
    /// O(buckets + the window's span).
    pub fn quantile(&self, p: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((p * self.count as f64).ceil() as u64).clamp(1, self.count);
        // The extremes are known exactly.
        if rank == 1 {
            return self.min;
        }
        if rank == self.count {
            return self.max;
        }
        let mut seen = 0;
        for (b, c) in self.buckets() {
            seen += c;
            if seen >= rank {
                return self.value(b);
            }
        }
        self.max
    }

    /// Mean (exact) and the 50th, 90th and 99th percentiles. O(buckets).
    pub fn percentiles(&self) -> Percentiles {
        if self.count == 0 {
            return Percentiles::default();
        }
        Percentiles {
            p50: self.quantile(0.5),
            p90: self.quantile(0.9),
            p99: self.quantile(0.99),
            mean: self.sum / self.count as f64,
        }
    }

    /// `k` values whose empirical distribution follows this one (the
    /// quantiles at 1/k, 2/k, …, 1), for plotting a CDF. O(k + buckets).
    pub fn sample(&self, k: usize) -> Vec<f64> {
        if self.count == 0 || k == 0 {
            return Vec::new();
        }
        let k = (k as u64).min(self.count);
        let mut out = Vec::with_capacity(k as usize);
        let mut it = self.buckets();
        let (mut seen, mut current) = (0u64, None);
        for i in 1..=k {
            let rank = (i * self.count).div_ceil(k);
            while seen < rank {
                match it.next() {
                    Some((b, c)) => {
                        seen += c;
                        current = Some(b);
                    }
                    None => break,
                }
            }
            out.push(current.map_or(self.max, |b| self.value(b)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_half_a_bucket_of_the_exact_ones() {
        // 10,000 values from 100 to 1,100 ms: exact nearest-rank percentiles by hand.
        let mut exact: Vec<f64> = (0..10_000).map(|i| 100.0 + f64::from(i) * 0.1).collect();
        let mut d = Durations::new();
        for &v in exact.iter().rev() {
            d.add(v);
        }
        let want = Percentiles::of(&mut exact);
        let got = d.percentiles();
        assert!((got.mean - want.mean).abs() < 1e-9, "mean is exact: {} vs {}", got.mean, want.mean);
        for (g, w) in [(got.p50, want.p50), (got.p90, want.p90), (got.p99, want.p99)] {
            assert!((g - w).abs() / w <= 5e-4 + 1e-12, "{g} vs {w}");
        }
        assert_eq!((d.len(), d.quantile(0.0), d.quantile(1.0)), (10_000, 100.0, 1099.9));
    }

    #[test]
    fn the_window_and_the_map_count_alike_whatever_the_order() {
        // 6,000 values from 0.5 to 33 (4,200 buckets: four windows wide) and
        // ten zeros, added ascending, descending and shuffled: which buckets
        // land in the window differs, the histogram does not.
        let mut values: Vec<f64> = (0..6_000).map(|i| 0.5 * 1.0007f64.powi(i)).chain([0.0; 10]).collect();
        let mut shuffled = values.clone();
        let mut state = 12_345u64;
        for i in (1..shuffled.len()).rev() {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            shuffled.swap(i, (state >> 33) as usize % (i + 1));
        }
        let of = |vs: &mut dyn Iterator<Item = f64>| {
            let mut d = Durations::new();
            vs.for_each(|v| d.add(v));
            d
        };
        let up = of(&mut values.iter().copied());
        let down = of(&mut values.iter().rev().copied());
        let mixed = of(&mut shuffled.iter().copied());
        assert!(!up.sparse.is_empty() && up.dense.len() <= DENSE_SPAN, "both parts are used");
        assert_eq!(up.buckets().collect::<Vec<_>>(), down.buckets().collect::<Vec<_>>());
        assert_eq!(up.buckets().collect::<Vec<_>>(), mixed.buckets().collect::<Vec<_>>());
        assert_eq!((up.sample(50), up.percentiles().p99), (mixed.sample(50), mixed.percentiles().p99));
        let buckets: Vec<i32> = up.buckets().map(|(b, _)| b).collect();
        assert!(buckets.windows(2).all(|w| w[0] < w[1]), "ascending, no bucket twice");
        let exact = Percentiles::of(&mut values);
        for (got, want) in [(mixed.quantile(0.5), exact.p50), (down.quantile(0.9), exact.p90)] {
            assert!((got - want).abs() / want <= 5e-4 + 1e-12, "{got} vs {want}");
        }
        let mut emptied = mixed.clone();
        for &v in &shuffled {
            emptied.remove(v);
        }
        assert_eq!((emptied.len(), emptied.buckets().count()), (0, 0));
    }

    #[test]
    fn a_billion_equal_iterations_take_one_bucket() {
        let mut d = Durations::new();
        d.add_n(351.059, 1_000_000_000);
        d.add(351.059);
        d.remove(351.059);
        assert_eq!(d.buckets().count(), 1);
        assert_eq!(d.len(), 1_000_000_000);
        let p = d.percentiles();
        assert_eq!((p.p50, p.p99), (351.059, 351.059));
        assert!((p.mean - 351.059).abs() < 1e-6);
    }

    #[test]
    fn merged_samples_and_their_cdf_follow_both() {
        let (mut a, mut b) = (Durations::new(), Durations::new());
        a.add_n(1.0, 300);
        b.add_n(2.0, 100);
        a.merge(&b);
        assert_eq!(a.len(), 400);
        assert!((a.quantile(0.75) - 1.0).abs() < 1e-3 && (a.quantile(0.76) - 2.0).abs() < 2e-3);
        let s = a.sample(4);
        assert_eq!(s.len(), 4);
        assert!(s[..3].iter().all(|v| (v - 1.0).abs() < 1e-3) && (s[3] - 2.0).abs() < 2e-3, "{s:?}");
    }
}
