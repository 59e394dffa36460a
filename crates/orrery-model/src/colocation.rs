//! GPU sharing (Castor §3.2, §8): what two jobs on the same GPUs cost each
//! other, and whether they fit in its memory.
//!
//! - **Interference ratio ξ**: a job's iteration time beside another over
//!   its time alone (≥ 1). Two modes:
//!   - *spatial* (MPS, both jobs' kernels run at once): ξ is measured, looked
//!     up in an [`XiTable`] keyed by measured model class (Gavel's packed
//!     throughputs; `orrery-trace` builds the table, true or predicted);
//!   - *temporal* (time slicing, no MPS): the GPU alternates between the
//!     two jobs' iterations, so job `a` waits for `b`'s compute each time:
//!     `ξ_a = 1 + c_b / c_a` with `c` the compute time of an iteration.
//! - **Memory**: a job's footprint per GPU at a (sub-)batch, a line
//!   `static + per_sample · b` ([`memory_mib`]); two jobs share a GPU only
//!   if both fit.
//! - **Gradient accumulation** (Castor §3.1.3, Eq. 3): a job run at sub-batch
//!   `b < B` takes `s = ⌈B/b⌉` steps per iteration, so its compute takes
//!   [`accumulation_factor`] times as long.

use crate::gpu::GpuType;
use crate::zoo::{Family, ModelSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How two jobs share a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SharingMode {
    /// Both run at once (CUDA MPS); ξ from measurements.
    #[default]
    Spatial,
    /// The GPU alternates between them (time slicing).
    Temporal,
}

/// The measured class a zoo model's interference is read from: Gavel's job
/// types. Models Gavel did not measure use a stand-in of the same kind,
/// listed here so a reader can see every substitution:
/// BERT and the other Transformers → `Transformer`; DeepSpeech2 (recurrent)
/// → `LM`; NCF and DLRM → `Recommendation`; YOLOv3 and other large vision
/// models → `ResNet-50`; small CIFAR-sized vision models → `ResNet-18`;
/// reinforcement learning → `A3C`. O(1).
pub fn measured_class(model: &ModelSpec) -> &'static str {
    match model.name {
        "resnet18" | "resnet18-cifar" | "resnet20" | "mobilenet-v2" | "shufflenet-v2" | "googlenet" => "ResNet-18",
        "lstm-lm" | "deepspeech2" => "LM",
        "cyclegan" => "CycleGAN",
        _ => match model.family {
            Family::Vision => "ResNet-50",
            Family::Language => "Transformer",
            Family::Recommendation => "Recommendation",
            Family::Other => "A3C",
        },
    }
}

/// ξ of one measured class beside another.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct XiTable {
    /// class → beside class → ξ of the first.
    pub xi: BTreeMap<String, BTreeMap<String, f64>>,
    /// Where the values come from (for reports): e.g. `gavel v100, measured`.
    pub source: String,
}

impl XiTable {
    /// ξ of a job of class `a` beside one of class `b`, if measured.
    /// O(log n), no allocation (the schedulers' hot path).
    pub fn get(&self, a: &str, b: &str) -> Option<f64> {
        self.xi.get(a)?.get(b).copied()
    }

    /// Sets ξ of class `a` beside class `b`.
    pub fn insert(&mut self, a: &str, b: &str, xi: f64) {
        self.xi.entry(a.to_string()).or_default().insert(b.to_string(), xi);
    }

    /// Every (class, beside class, ξ).
    pub fn pairs(&self) -> impl Iterator<Item = (&str, &str, f64)> {
        self.xi.iter().flat_map(|(a, m)| m.iter().map(move |(b, &x)| (a.as_str(), b.as_str(), x)))
    }
}

/// What a driver knows about GPU sharing: the mode and its ξ table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Colocation {
    /// Spatial or temporal.
    pub mode: SharingMode,
    /// Measured (or predicted) ξ for spatial sharing.
    pub table: XiTable,
}

impl Colocation {
    /// The interference ratios `(ξ_a, ξ_b)` of job `a` at per-GPU batch
    /// `batch_a` beside job `b` at `batch_b` on `gpu`. Spatial pairs the
    /// table does not hold fall back to temporal sharing (the conservative
    /// case: the two iterations serialise). O(log n).
    pub fn pair(&self, a: &ModelSpec, batch_a: u32, b: &ModelSpec, batch_b: u32, gpu: &GpuType) -> (f64, f64) {
        if self.mode == SharingMode::Spatial {
            let (ca, cb) = (measured_class(a), measured_class(b));
            if let (Some(xa), Some(xb)) = (self.table.get(ca, cb), self.table.get(cb, ca)) {
                return (xa.max(1.0), xb.max(1.0));
            }
        }
        temporal_pair(a, batch_a, b, batch_b, gpu)
    }
}

/// Time slicing: each job waits for the other's compute every iteration,
/// `ξ_a = 1 + c_b / c_a`. O(1).
pub fn temporal_pair(a: &ModelSpec, batch_a: u32, b: &ModelSpec, batch_b: u32, gpu: &GpuType) -> (f64, f64) {
    let (ca, cb) = (a.compute_ms(gpu, batch_a).max(1e-9), b.compute_ms(gpu, batch_b).max(1e-9));
    (1.0 + cb / ca, 1.0 + ca / cb)
}

/// MiB of a CUDA context and framework workspace, paid once per job per GPU.
pub const CONTEXT_MIB: f64 = 1536.0;
/// Bytes per parameter held on the GPU: fp32 weights, gradients and two
/// Adam moments.
pub const BYTES_PER_PARAM: f64 = 16.0;
/// Activation MiB per sample per forward GMAC. Checked against Lucid's
/// `single_data.csv` (fp32): ResNet-50 grows 81 MiB per sample (5,518 MiB
/// at 32, 13,326 at 128; 4.1 GMACs → 20 MiB/GMAC) and ResNet-18 on CIFAR
/// 7.4 MiB (0.56 GMACs → 13 MiB/GMAC); BERT at 32 needs 20,162 MiB.
pub const MIB_PER_SAMPLE_GMAC: f64 = 16.0;

/// GPU memory of `model` at per-GPU (sub-)batch `batch`, MiB: context,
/// weights with gradients and optimiser state, and activations. O(1).
pub fn memory_mib(model: &ModelSpec, batch: u32) -> f64 {
    CONTEXT_MIB
        + model.params_m * 1e6 * BYTES_PER_PARAM / (1024.0 * 1024.0)
        + MIB_PER_SAMPLE_GMAC * model.fwd_gmacs * f64::from(batch)
}

/// How much longer one iteration's compute takes at sub-batch `sub` than at
/// the user's batch `batch`: `⌈B/b⌉ · c(b) / c(B)` (Castor Eq. 3: the
/// gradient of the batch is accumulated over `s` sub-batches). O(1).
pub fn accumulation_factor(model: &ModelSpec, gpu: &GpuType, batch: u32, sub: u32) -> f64 {
    let (batch, sub) = (batch.max(1), sub.clamp(1, batch.max(1)));
    let steps = batch.div_ceil(sub);
    f64::from(steps) * model.compute_ms(gpu, sub) / model.compute_ms(gpu, batch).max(1e-12)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::gpu_type;
    use crate::zoo::model;

    #[test]
    fn temporal_sharing_serialises_compute() {
        let v100 = gpu_type("v100").expect("v100");
        let m = model("resnet50").expect("zoo");
        // Two identical jobs: each waits for the other, ξ = 2.
        assert_eq!(temporal_pair(m, 64, m, 64, v100), (2.0, 2.0));
        let small = model("resnet18-cifar").expect("zoo");
        let (xa, xb) = temporal_pair(m, 64, small, 64, v100);
        // The short job suffers more beside the long one.
        assert!(xb > xa && xa > 1.0);
        let (ca, cb) = (m.compute_ms(v100, 64), small.compute_ms(v100, 64));
        assert!((xa - (1.0 + cb / ca)).abs() < 1e-12);
    }

    #[test]
    fn spatial_reads_the_table_and_falls_back_to_temporal() {
        let v100 = gpu_type("v100").expect("v100");
        let (bert, r50) = (model("bert").expect("zoo"), model("resnet50").expect("zoo"));
        let mut c = Colocation::default();
        c.table.insert("Transformer", "ResNet-50", 1.3);
        c.table.insert("ResNet-50", "Transformer", 0.9);
        // ξ below 1 (noise in a measurement) is read as no slow-down.
        assert_eq!(c.pair(bert, 12, r50, 64, v100), (1.3, 1.0));
        let ncf = model("ncf").expect("zoo");
        assert_eq!(c.pair(bert, 12, ncf, 256, v100), temporal_pair(bert, 12, ncf, 256, v100));
        c.mode = SharingMode::Temporal;
        assert_eq!(c.pair(bert, 12, r50, 64, v100), temporal_pair(bert, 12, r50, 64, v100));
    }

    #[test]
    fn memory_grows_with_the_batch_like_lucids_measurements() {
        let r50 = model("resnet50").expect("zoo");
        // Lucid single_data.csv, ResNet-50 fp32: 5,518 MiB at 32, 13,326 at 128.
        let (m32, m128) = (memory_mib(r50, 32), memory_mib(r50, 128));
        assert!((m32 / 5518.0 - 1.0).abs() < 0.3, "{m32}");
        assert!((m128 / 13326.0 - 1.0).abs() < 0.3, "{m128}");
        let bert = model("bert").expect("zoo");
        assert!((memory_mib(bert, 32) / 20162.0 - 1.0).abs() < 0.3, "{}", memory_mib(bert, 32));
    }

    #[test]
    fn accumulation_costs_the_fixed_overhead_once_per_step() {
        let v100 = gpu_type("v100").expect("v100");
        let m = model("resnet50").expect("zoo");
        assert_eq!(accumulation_factor(m, v100, 64, 64), 1.0);
        let f = accumulation_factor(m, v100, 64, 16);
        // Four sub-batches of 16: the same samples, four overheads.
        let (sample, overhead) = m.v100_costs();
        let want = (4.0 * overhead + 64.0 * sample) / (overhead + 64.0 * sample);
        assert!((f - want).abs() < 1e-9 && f > 1.0);
    }
}
