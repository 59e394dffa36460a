//! Castor §3.1 (Eqs. 1-3): a job's iteration time for any sub-batch and
//! gradient-accumulation step, fitted per model by least squares to the
//! placements Pollux measured (`data/profiles/pollux/<app>/placements.csv`:
//! `placement, local_bsz, step_time, sync_time`; a placement such as `1124`
//! lists the GPUs on each node).
//!
//! - Eq. 1: `t_comp(b) = α_comp + β_comp·b` for a per-GPU (sub-)batch `b`.
//! - Eq. 2: `t_comm = α_comm + β_comm·M`. The message `M` of one model is
//!   fixed, so `M` here is the ring all-reduce volume in gradients,
//!   `2(K − 1)/K` for `K` GPUs, with one (α, β) pair inside a node and one
//!   across nodes, as the all-reduce algorithm changes with them [40].
//! - Eq. 3: `t_iter = (s − 1)·t_comp(B/s) + (t_comp(B/s)^δ + t_comm^δ)^(1/δ)`.

use crate::TraceError;
use crate::diag::Parsed;
use crate::formats::for_each_row;
use serde::Serialize;

/// One measured placement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// GPUs in all.
    pub gpus: u32,
    /// Nodes used.
    pub nodes: u32,
    /// Per-GPU batch.
    pub local_bsz: f64,
    /// Iteration time, s.
    pub step_s: f64,
    /// All-reduce time, s.
    pub sync_s: f64,
}

/// Parses a Pollux `placements.csv`.
pub fn parse_placements(file: &str, text: &str) -> Parsed<Measured> {
    let header = ["placement", "local_bsz", "step_time", "sync_time"];
    for_each_row(file, text, b',', true, &header, |row| {
        let p = row.text(0)?;
        let digits: Option<Vec<u32>> = p.chars().map(|c| c.to_digit(10).filter(|d| *d > 0)).collect();
        let Some(per_node) = digits.filter(|d| !d.is_empty()) else {
            return Err(row.at.field("placement", "GPUs per node as digits 1-9, e.g. 1124", p));
        };
        let local_bsz = f64::from(row.positive(1)?);
        let step_s = row.non_negative(2)?;
        let sync_s = row.non_negative(3)?;
        Ok(Some(Measured { gpus: per_node.iter().sum(), nodes: per_node.len() as u32, local_bsz, step_s, sync_s }))
    })
}

/// Castor's iteration-time model of one job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IterModel {
    /// Eq. 1 intercept, s.
    pub alpha_comp: f64,
    /// Eq. 1 slope, s per sample.
    pub beta_comp: f64,
    /// Eq. 2 within a node: intercept, s.
    pub alpha_comm_local: f64,
    /// Eq. 2 within a node: s per gradient of ring volume.
    pub beta_comm_local: f64,
    /// Eq. 2 across nodes: intercept, s.
    pub alpha_comm_net: f64,
    /// Eq. 2 across nodes: s per gradient of ring volume.
    pub beta_comm_net: f64,
    /// Eq. 3 overlap `δ` (1: no overlap, large: full overlap).
    pub delta: f64,
}

impl IterModel {
    /// Eq. 1: compute time of a per-GPU batch `b`, s.
    pub fn comp_s(&self, b: f64) -> f64 {
        (self.alpha_comp + self.beta_comp * b).max(0.0)
    }

    /// Eq. 2: all-reduce time among `gpus` GPUs on `nodes` nodes, s (0 alone).
    pub fn comm_s(&self, gpus: u32, nodes: u32) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let k = f64::from(gpus);
        let m = 2.0 * (k - 1.0) / k;
        let (a, b) = if nodes <= 1 {
            (self.alpha_comm_local, self.beta_comm_local)
        } else {
            (self.alpha_comm_net, self.beta_comm_net)
        };
        (a + b * m).max(0.0)
    }

    /// Eq. 3: iteration time for a per-GPU batch `batch` reached in `steps`
    /// accumulation steps of `batch / steps` samples, s.
    pub fn iter_s(&self, batch: f64, steps: u32, gpus: u32, nodes: u32) -> f64 {
        let s = f64::from(steps.max(1));
        let sub = self.comp_s(batch / s);
        let comm = self.comm_s(gpus, nodes);
        let overlapped =
            if comm <= 0.0 { sub } else { (sub.powf(self.delta) + comm.powf(self.delta)).powf(1.0 / self.delta) };
        (s - 1.0) * sub + overlapped
    }
}

/// How well a fit matches its measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FitError {
    /// Measurements used.
    pub rows: usize,
    /// Root mean square of the relative error of the iteration time.
    pub rms_rel: f64,
    /// Largest relative error.
    pub max_rel: f64,
}

/// Ordinary least squares `y = a + b·x`; `None` without two distinct x.
/// O(n).
fn line(points: impl Iterator<Item = (f64, f64)> + Clone) -> Option<(f64, f64)> {
    let n = points.clone().count() as f64;
    let (sx, sy) = points.clone().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    let (mx, my) = (sx / n.max(1.0), sy / n.max(1.0));
    let (sxx, sxy) = points.fold((0.0, 0.0), |(a, b), (x, y)| (a + (x - mx).powi(2), b + (x - mx) * (y - my)));
    (n >= 2.0 && sxx > 0.0).then(|| (my - sxy / sxx * mx, sxy / sxx))
}

/// Fits Eqs. 1-3 to a model's measurements: Eq. 1 on single-GPU rows, Eq. 2
/// on the multi-GPU rows' all-reduce times (one line within a node, one
/// across), then `δ` by a golden-section search on [1, 10] minimising the
/// squared relative error of Eq. 3 over the multi-GPU rows. O(n · 60).
pub fn fit(rows: &[Measured]) -> Result<(IterModel, FitError), TraceError> {
    let single = rows.iter().filter(|r| r.gpus == 1).map(|r| (r.local_bsz, r.step_s));
    let (alpha_comp, beta_comp) = line(single)
        .ok_or_else(|| TraceError::Data("Eq. 1 needs single-GPU rows at two batch sizes or more".into()))?;
    let volume = |r: &Measured| 2.0 * (f64::from(r.gpus) - 1.0) / f64::from(r.gpus);
    let local = line(rows.iter().filter(|r| r.gpus > 1 && r.nodes == 1).map(|r| (volume(r), r.sync_s)));
    let net = line(rows.iter().filter(|r| r.nodes > 1).map(|r| (volume(r), r.sync_s)));
    let ((alpha_comm_local, beta_comm_local), (alpha_comm_net, beta_comm_net)) = match (local, net) {
        (Some(l), Some(n)) => (l, n),
        (Some(l), None) => (l, l),
        (None, Some(n)) => (n, n),
        (None, None) => return Err(TraceError::Data("Eq. 2 needs multi-GPU rows at two GPU counts or more".into())),
    };
    let mut m = IterModel {
        alpha_comp,
        beta_comp,
        alpha_comm_local,
        beta_comm_local,
        alpha_comm_net,
        beta_comm_net,
        delta: 1.0,
    };
    let loss = |m: &IterModel| -> f64 {
        rows.iter()
            .filter(|r| r.gpus > 1 && r.step_s > 0.0)
            .map(|r| ((m.iter_s(r.local_bsz, 1, r.gpus, r.nodes) - r.step_s) / r.step_s).powi(2))
            .sum()
    };
    // Golden-section search for δ.
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let (mut lo, mut hi) = (1.0f64, 10.0f64);
    for _ in 0..60 {
        let (a, b) = (hi - phi * (hi - lo), lo + phi * (hi - lo));
        let la = loss(&IterModel { delta: a, ..m });
        let lb = loss(&IterModel { delta: b, ..m });
        if la <= lb { hi = b } else { lo = a }
    }
    m.delta = (lo + hi) / 2.0;
    let errors: Vec<f64> = rows
        .iter()
        .filter(|r| r.step_s > 0.0)
        .map(|r| (m.iter_s(r.local_bsz, 1, r.gpus, r.nodes) - r.step_s) / r.step_s)
        .collect();
    let n = errors.len();
    let rms_rel = (errors.iter().map(|e| e * e).sum::<f64>() / n.max(1) as f64).sqrt();
    let max_rel = errors.iter().fold(0.0f64, |a, e| a.max(e.abs()));
    Ok((m, FitError { rows: n, rms_rel, max_rel }))
}

/// GPU memory of a job as a line in its per-GPU batch: weights, optimiser
/// state and workspace, plus activations per sample (Castor §3.1.3: memory
/// is what forces gradient accumulation).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MemModel {
    /// Memory at batch 0, MiB.
    pub static_mib: f64,
    /// MiB per sample.
    pub per_sample_mib: f64,
}

impl MemModel {
    /// Fits `(batch, MiB)` measurements by least squares (e.g. Lucid's
    /// `single_data.csv`: `batchsize`, `gmem`, one model and AMP setting).
    pub fn fit(points: &[(f64, f64)]) -> Option<MemModel> {
        let (a, b) = line(points.iter().copied())?;
        Some(MemModel { static_mib: a.max(0.0), per_sample_mib: b.max(0.0) })
    }

    /// Memory at per-GPU (sub-)batch `b`, MiB.
    pub fn mib(&self, b: f64) -> f64 {
        self.static_mib + self.per_sample_mib * b
    }

    /// The largest power-of-two sub-batch of `batch` (`batch / 2^k`) that fits
    /// in `free_mib`, with its accumulation step; None if not even 1 fits.
    pub fn fitting_sub_batch(&self, batch: u32, free_mib: f64) -> Option<(u32, u32)> {
        let mut steps = 1u32;
        let mut b = batch.max(1);
        loop {
            if self.mib(f64::from(b)) <= free_mib {
                return Some((b, steps));
            }
            if b == 1 {
                return None;
            }
            b = b.div_ceil(2);
            steps *= 2;
        }
    }
}

/// Pollux's measured placements, bundled: (application, CSV text).
pub const POLLUX_PLACEMENTS: [(&str, &str); 6] = [
    ("bert", include_str!("../../../data/profiles/pollux/bert/placements.csv")),
    ("cifar10", include_str!("../../../data/profiles/pollux/cifar10/placements.csv")),
    ("deepspeech2", include_str!("../../../data/profiles/pollux/deepspeech2/placements.csv")),
    ("imagenet", include_str!("../../../data/profiles/pollux/imagenet/placements.csv")),
    ("ncf", include_str!("../../../data/profiles/pollux/ncf/placements.csv")),
    ("yolov3", include_str!("../../../data/profiles/pollux/yolov3/placements.csv")),
];

/// A fitted model and its error, or why it could not be fitted.
pub type Fit = Result<(IterModel, FitError), TraceError>;

/// Eqs. 1-3 fitted to each bundled Pollux application.
pub fn fitted() -> Vec<(&'static str, Fit)> {
    POLLUX_PLACEMENTS
        .iter()
        .map(|&(app, text)| {
            let parsed = parse_placements(app, text);
            let r = match parsed.errors.first() {
                Some(e) => Err(TraceError::Bundled(e.to_string())),
                None => fit(&parsed.items),
            };
            (app, r)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equation_three_by_hand() {
        let m = IterModel {
            alpha_comp: 0.01,
            beta_comp: 0.001,
            alpha_comm_local: 0.0,
            beta_comm_local: 0.05,
            alpha_comm_net: 0.02,
            beta_comm_net: 0.1,
            delta: 2.0,
        };
        // One GPU: compute only, 0.01 + 0.001·64.
        assert!((m.iter_s(64.0, 1, 1, 1) - 0.074).abs() < 1e-12);
        // 4 GPUs on 2 nodes: comm 0.02 + 0.1·1.5 = 0.17; (0.074² + 0.17²)^½.
        let one = (0.074f64.powi(2) + 0.17f64.powi(2)).sqrt();
        assert!((m.iter_s(64.0, 1, 4, 2) - one).abs() < 1e-12);
        // Two accumulation steps of 32: one bare sub-batch, then one overlapped.
        let sub = 0.01 + 0.001 * 32.0;
        let two = sub + (sub * sub + 0.17f64.powi(2)).sqrt();
        assert!((m.iter_s(64.0, 2, 4, 2) - two).abs() < 1e-12);
    }

    #[test]
    fn a_synthetic_model_is_recovered() {
        let truth = IterModel {
            alpha_comp: 0.02,
            beta_comp: 0.004,
            alpha_comm_local: 0.001,
            beta_comm_local: 0.01,
            alpha_comm_net: 0.01,
            beta_comm_net: 0.05,
            delta: 3.0,
        };
        let mut rows = Vec::new();
        for (gpus, nodes) in [(1, 1), (2, 1), (4, 1), (4, 2), (8, 2), (16, 4)] {
            for b in [8.0, 16.0, 32.0, 64.0] {
                let sync_s = truth.comm_s(gpus, nodes);
                rows.push(Measured { gpus, nodes, local_bsz: b, step_s: truth.iter_s(b, 1, gpus, nodes), sync_s });
            }
        }
        let (m, e) = fit(&rows).expect("fits");
        assert!((m.delta - 3.0).abs() < 1e-3, "{m:?}");
        assert!((m.beta_comp - 0.004).abs() < 1e-12 && (m.beta_comm_net - 0.05).abs() < 1e-12);
        assert!(e.rms_rel < 1e-6 && e.rows == 24);
    }

    #[test]
    fn pollux_placements_fit_every_model() {
        // docs/results.md "§3.1, Eqs. 1-3" (`orrery zoo --iteration-model`):
        // rows, relative RMS and max error (%), and δ per application.
        let table = [
            ("bert", 540, 12.2, 45.4, 1.10),
            ("cifar10", 1183, 14.5, 57.0, 1.00),
            ("deepspeech2", 754, 15.0, 43.5, 1.00),
            ("imagenet", 864, 14.0, 51.4, 1.00),
            ("ncf", 1661, 12.4, 46.9, 1.09),
            ("yolov3", 540, 12.1, 38.2, 1.07),
        ];
        let fits = fitted();
        assert_eq!(fits.len(), table.len());
        for ((app, r), (name, rows, rms, max, delta)) in fits.into_iter().zip(table) {
            let (m, e) = r.unwrap_or_else(|err| panic!("{app}: {err}"));
            assert_eq!((app, e.rows), (name, rows));
            assert!(m.beta_comp > 0.0, "{app}: compute grows with the batch: {m:?}");
            let pct = |x: f64| (1000.0 * x).round() / 10.0;
            assert_eq!((pct(e.rms_rel), pct(e.max_rel)), (rms, max), "{app}");
            assert!((m.delta - delta).abs() < 0.005, "{app}: δ {}", m.delta);
        }
    }

    #[test]
    fn memory_line_from_lucid_measurements() {
        // Lucid single_data.csv, ResNet50 on ImageNet without AMP: batch 32,
        // 64, 128 → 5,518, 8,570, 13,326 MiB.
        let m = MemModel::fit(&[(32.0, 5518.0), (64.0, 8570.0), (128.0, 13326.0)]).expect("fits");
        // Least squares by hand: mean batch 74.67, mean 9,138 MiB, Sxy =
        // 383,873, Sxx = 4,778.7, so 80.33 MiB per sample and 3,140 MiB at 0.
        assert!((m.per_sample_mib - 80.33).abs() < 0.01 && (m.static_mib - 3140.0).abs() < 1.0, "{m:?}");
        // A V100's 16 GiB beside a job holding 6 GiB leaves 10,240 MiB: batch
        // 128 needs 13,422 MiB; 64 needs 8,281 and fits, in 2 accumulation steps.
        assert_eq!(m.fitting_sub_batch(128, 10_240.0), Some((64, 2)));
        assert_eq!(m.fitting_sub_batch(128, 20_000.0), Some((128, 1)));
        assert_eq!(m.fitting_sub_batch(128, 1_000.0), None);
    }

    #[test]
    fn bad_placements_are_named() {
        let p = parse_placements("p.csv", "placement,local_bsz,step_time,sync_time\n1x2,8,0.1,0.01\n");
        let e = p.errors.first().expect("an error").to_string();
        assert!(e.contains("p.csv:2") && e.contains("placement"), "{e}");
    }
}
