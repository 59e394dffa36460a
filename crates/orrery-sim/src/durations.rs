//! A job's iteration times in memory that does not grow with the number of
//! iterations: the full Philly trace runs billions of them.

use orrery_trace::inspect::Percentiles;
use std::collections::BTreeMap;

/// Relative width of a histogram bucket: a quantile read from the histogram
/// is within half of it (0.05%) of the exact one.
const BUCKET_WIDTH: f64 = 1e-3;

/// Durations (any unit): count, sum, minimum and maximum exact; quantiles
/// from a sparse histogram of logarithmic buckets 0.1% wide, so memory is
/// O(distinct buckets): a job without noise fills one or two, one with 2%
/// noise about a hundred. `add` is O(log buckets).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Durations {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    /// Bucket → count; bucket `k` holds values in [(1+w)^k, (1+w)^(k+1)),
    /// and `i32::MIN` holds zeros.
    buckets: BTreeMap<i32, u64>,
}

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
        *self.buckets.entry(bucket(v)).or_insert(0) += n;
    }

    /// Takes back one duration added before (the minimum and maximum stay
    /// as they were). O(log buckets).
    pub fn remove(&mut self, v: f64) {
        let v = v.max(0.0);
        let b = bucket(v);
        if let Some(c) = self.buckets.get_mut(&b) {
            *c -= 1;
            if *c == 0 {
                self.buckets.remove(&b);
            }
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

    /// Adds another sample to this one. O(buckets of `other` · log buckets).
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
        for (&b, &c) in &other.buckets {
            *self.buckets.entry(b).or_insert(0) += c;
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
    /// within 0.05% of the exact one (the first and last exactly). O(buckets).
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
        for (&b, &c) in &self.buckets {
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
        let mut it = self.buckets.iter();
        let (mut seen, mut current) = (0u64, None);
        for i in 1..=k {
            let rank = (i * self.count).div_ceil(k);
            while seen < rank {
                match it.next() {
                    Some((&b, &c)) => {
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
    fn a_billion_equal_iterations_take_one_bucket() {
        let mut d = Durations::new();
        d.add_n(351.059, 1_000_000_000);
        d.add(351.059);
        d.remove(351.059);
        assert_eq!(d.buckets.len(), 1);
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
