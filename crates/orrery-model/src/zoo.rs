//! The model zoo: every model named in the five papers (and the traces), with
//! public facts and a calibrated compute cost, turned into iteration shapes.
//!
//! # How a shape is derived
//!
//! * **Compute** per iteration on GPU `g` at per-worker batch `b`
//!   (linear in the batch, the form Pollux §3.2 fits to its own profiles):
//!   `t = (overhead_ms + b · sample_ms_v100) / speed(g)`.
//!   `sample_ms_v100` and `overhead_ms` are *fitted* for models that have
//!   measurements in `data/profiles` (Gavel, Pollux, Muri; see
//!   `orrery_trace::calibration`). For the others, `sample_ms_v100 = 3 · fwd_gmacs /
//!   achieved` where `achieved` is the median over the fitted models of the same
//!   family (forward + backward ≈ 3× forward), and the overhead is the family median.
//! * **Communication** for data parallelism: one ring all-reduce of the fp32
//!   gradients (`4 · params` bytes) after the backward pass, as CASSINI Fig. 3
//!   and Metronome §II-B draw it (no overlap with compute).
//!   Pipeline models exchange fp16 activations (`batch · seq · hidden · 2` bytes)
//!   between consecutive stages in the forward and the backward pass; DLRM does an
//!   all-to-all of its embedding lookups forward and backward plus an all-reduce of
//!   the dense layers.

use crate::gpu::{GpuType, gpu_type};
use crate::shape::{Collective, IterationShape, Segment};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

pub use crate::shape::INTRA_HOST_GBPS;

/// Broad kind of model; uncalibrated models borrow their family's medians.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Image classification and detection CNNs.
    Vision,
    /// Transformers, LSTMs, speech.
    Language,
    /// Recommendation models.
    Recommendation,
    /// Reinforcement learning and GANs (small, compute-bound).
    Other,
}

/// How a model is split across workers by default.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Parallelism {
    /// Replicas with a ring all-reduce of the gradients.
    DataParallel,
    /// One pipeline stage per worker (GPipe without micro-batches).
    Pipeline {
        /// Hidden size: activations per token.
        hidden: u32,
        /// Tokens per sample.
        seq_len: u32,
    },
    /// Embedding tables sharded across workers (DLRM).
    EmbeddingAllToAll {
        /// Bytes of embedding lookups per sample that cross workers.
        lookup_bytes_per_sample: u32,
        /// Parameters of the dense (replicated) layers, in millions.
        dense_params_m: f64,
    },
}

/// Where a model's compute cost comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Cost {
    /// Fitted to measurements.
    Calibrated {
        /// Milliseconds per sample on a V100.
        sample_ms_v100: f64,
        /// Fixed milliseconds per iteration on a V100.
        overhead_ms: f64,
        /// Which measurements.
        source: &'static str,
    },
    /// Derived from FLOPs and the family's achieved rate.
    FromFlops,
}

/// One model of the zoo.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// Canonical name.
    pub name: &'static str,
    /// Other spellings used by papers and traces.
    pub aliases: &'static [&'static str],
    /// Family.
    pub family: Family,
    /// Parameters in millions (public).
    pub params_m: f64,
    /// Forward multiply-accumulates per sample, in billions (public; for
    /// transformers `params × tokens`).
    pub fwd_gmacs: f64,
    /// Model memory in MB (CASSINI Table 3 where it lists the model, else 4 · params).
    pub memory_mb: f64,
    /// A typical per-GPU batch size.
    pub default_batch: u32,
    /// Default parallelism.
    pub parallelism: Parallelism,
    /// Compute cost.
    pub cost: Cost,
    /// Papers or traces that use the model.
    pub used_by: &'static str,
}

/// GPUs per host used by a job, one entry per host (Pollux's `22` is `[2, 2]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// GPUs (= workers) on each host used.
    pub gpus_per_host: Vec<u32>,
}

impl Placement {
    /// `n` workers, each on its own host.
    pub fn spread(n: u32) -> Self {
        Placement { gpus_per_host: vec![1; n.max(1) as usize] }
    }

    /// `n` workers packed onto hosts of `per_host` GPUs.
    pub fn packed(n: u32, per_host: u32) -> Self {
        let per_host = per_host.max(1);
        let mut left = n.max(1);
        let mut v = Vec::new();
        while left > 0 {
            let k = left.min(per_host);
            v.push(k);
            left -= k;
        }
        Placement { gpus_per_host: v }
    }

    /// Parses Pollux's digit strings (`"1111"`, `"22"`, `"4"`).
    pub fn from_digits(s: &str) -> Option<Self> {
        let v: Option<Vec<u32>> = s.chars().map(|c| c.to_digit(10).filter(|&d| d > 0)).collect();
        v.filter(|v| !v.is_empty()).map(|gpus_per_host| Placement { gpus_per_host })
    }

    /// Total workers.
    pub fn workers(&self) -> u32 {
        self.gpus_per_host.iter().sum()
    }

    /// Hosts used.
    pub fn hosts(&self) -> u32 {
        self.gpus_per_host.len() as u32
    }
}

const MURI: &str = "Muri trace1 GPU time, 1 GPU (V100 assumed)";
const POLLUX: &str = "Pollux placements.csv, placement 1 (T4)";
const GAVEL_POLLUX: &str = "Gavel k80/p100/v100 + Pollux T4";
const GAVEL: &str = "Gavel k80/p100/v100, scale factor 1";

const fn cal(sample_ms_v100: f64, overhead_ms: f64, source: &'static str) -> Cost {
    Cost::Calibrated { sample_ms_v100, overhead_ms, source }
}

const DP: Parallelism = Parallelism::DataParallel;

macro_rules! model {
    ($name:expr, [$($alias:expr),*], $family:ident, $params:expr, $gmacs:expr, $mem:expr, $batch:expr, $par:expr, $cost:expr, $used:expr) => {
        ModelSpec {
            name: $name,
            aliases: &[$($alias),*],
            family: Family::$family,
            params_m: $params,
            fwd_gmacs: $gmacs,
            memory_mb: $mem,
            default_batch: $batch,
            parallelism: $par,
            cost: $cost,
            used_by: $used,
        }
    };
}

/// The zoo. Parameter and MAC counts are the published figures of each model
/// (torchvision / Hugging Face model cards / the original papers).
#[rustfmt::skip]
pub static ZOO: &[ModelSpec] = &[
    // ---- vision, data parallel ----
    model!("vgg11", [], Vision, 132.9, 7.6, 507.0, 64, DP, Cost::FromFlops, "CASSINI, Metronome"),
    model!("vgg16", [], Vision, 138.4, 15.5, 528.0, 64, DP, cal(3.625, 10.0, MURI), "CASSINI, Metronome, Muri, Tiresias"),
    model!("vgg19", [], Vision, 143.7, 19.6, 549.0, 64, DP, cal(4.375, 10.0, MURI), "CASSINI, Metronome, Muri, Tiresias"),
    model!("resnet18", [], Vision, 11.7, 1.82, 47.0, 128, DP, cal(0.78125, 10.0, MURI), "Metronome, Muri"),
    model!("resnet18-cifar", ["cifar10", "resnet-18"], Vision, 11.2, 0.56, 45.0, 128, DP, cal(0.4478, 17.07, GAVEL_POLLUX), "Pollux, Gavel"),
    model!("resnet20", [], Vision, 0.27, 0.041, 1.1, 128, DP, Cost::FromFlops, "Castor"),
    model!("resnet50", ["imagenet", "resnet-50"], Vision, 25.6, 4.1, 98.0, 64, DP, cal(3.4126, 45.26, GAVEL_POLLUX), "CASSINI, Metronome, Pollux, Gavel"),
    model!("resnet101", [], Vision, 44.5, 7.8, 178.0, 64, DP, Cost::FromFlops, "Chronus, Tiresias"),
    model!("resnet152", [], Vision, 60.2, 11.5, 241.0, 64, DP, Cost::FromFlops, "Metronome, Tiresias"),
    model!("wideresnet101", ["wide_resnet101_2", "wrn101"], Vision, 126.9, 22.8, 243.0, 64, DP, Cost::FromFlops, "CASSINI, Metronome"),
    model!("googlenet", [], Vision, 6.6, 1.5, 26.0, 128, DP, Cost::FromFlops, "Metronome"),
    model!("inception3", ["inception", "inception_v3", "inceptionv3"], Vision, 23.8, 5.7, 95.0, 64, DP, Cost::FromFlops, "Chronus, Tiresias"),
    model!("inception4", ["inception_v4"], Vision, 42.7, 12.3, 171.0, 64, DP, Cost::FromFlops, "Tiresias"),
    model!("densenet201", [], Vision, 20.0, 4.3, 80.0, 64, DP, Cost::FromFlops, "Metronome"),
    model!("alexnet", [], Vision, 61.1, 0.71, 244.0, 128, DP, Cost::FromFlops, "Metronome, Chronus, Tiresias"),
    model!("shufflenet-v2", ["shufflenet_v2_x1_0", "shufflenet"], Vision, 2.3, 0.146, 9.0, 128, DP, cal(0.3828125, 10.0, MURI), "Muri"),
    model!("mobilenet-v2", ["mobilenetv2"], Vision, 3.5, 0.3, 14.0, 128, DP, Cost::FromFlops, "Chronus, Lucid"),
    model!("yolov3", [], Vision, 61.9, 32.9, 248.0, 8, DP, cal(19.9483, 125.12, POLLUX), "Pollux"),
    // ---- language ----
    model!("bert", ["bert-base"], Language, 110.0, 42.2, 450.0, 12, DP, cal(42.8647, 154.02, POLLUX), "CASSINI, Metronome, Pollux, Muri"),
    model!("bert-large", [], Language, 340.0, 130.6, 1360.0, 8, DP, Cost::FromFlops, "Castor"),
    model!("roberta", ["roberta-base"], Language, 125.0, 16.0, 800.0, 16, DP, Cost::FromFlops, "CASSINI"),
    model!("camembert", ["camembert-base"], Language, 110.0, 14.1, 266.0, 16, DP, Cost::FromFlops, "CASSINI"),
    model!("xlm", ["xlm-roberta-base"], Language, 279.0, 35.7, 1116.0, 16, DP, Cost::FromFlops, "CASSINI"),
    model!("transformer", [], Language, 65.0, 3.25, 260.0, 64, DP, cal(1.7681, 40.72, GAVEL), "Gavel, FORESIGHT"),
    model!("lstm-lm", ["lm"], Language, 13.9, 0.26, 56.0, 20, DP, cal(0.3840, 7.37, GAVEL), "Gavel"),
    model!("deepspeech2", ["ds2"], Language, 38.0, 9.0, 152.0, 20, DP, cal(18.6793, 142.11, POLLUX), "Pollux"),
    model!("gpt1", ["gpt-1", "gpt"], Language, 117.0, 59.9, 650.0, 32, Parallelism::Pipeline { hidden: 768, seq_len: 512 }, Cost::FromFlops, "CASSINI, Metronome"),
    model!("gpt2-small", [], Language, 124.0, 127.0, 496.0, 4, DP, cal(100.0, 10.0, MURI), "Muri"),
    model!("gpt2", ["gpt-2"], Language, 1558.0, 1595.0, 1623.0, 32, Parallelism::Pipeline { hidden: 1600, seq_len: 1024 }, Cost::FromFlops, "CASSINI, Metronome"),
    // CASSINI Table 3 gives GPT-3 1,952-155,000 MB depending on the parallelisation;
    // the default is the 1.3 B "GPT-3 XL" (Brown et al. Table 2.1); the full model is gpt3-175b.
    model!("gpt3", ["gpt-3", "gpt3-xl"], Language, 1300.0, 2662.0, 5200.0, 16, Parallelism::Pipeline { hidden: 2048, seq_len: 2048 }, Cost::FromFlops, "CASSINI"),
    model!("gpt3-175b", [], Language, 175000.0, 358400.0, 155000.0, 1, Parallelism::Pipeline { hidden: 12288, seq_len: 2048 }, Cost::FromFlops, "CASSINI"),
    // ---- recommendation ----
    model!("dlrm", [], Recommendation, 540.0, 0.01, 1962.0, 1024, Parallelism::EmbeddingAllToAll { lookup_bytes_per_sample: 26 * 64 * 4, dense_params_m: 0.7 }, Cost::FromFlops, "CASSINI"),
    model!("ncf", ["neumf"], Recommendation, 0.6, 0.0006, 2.4, 256, DP, cal(0.0003, 5.31, POLLUX), "Pollux, Lucid"),
    model!("recommendation-ae", ["recommendation"], Recommendation, 20.0, 0.02, 80.0, 2048, DP, cal(0.0198, 7.14, GAVEL), "Gavel"),
    // ---- reinforcement learning and GANs ----
    model!("dqn", [], Other, 1.7, 0.01, 7.0, 128, DP, cal(0.03125, 4.0, MURI), "Muri"),
    model!("a2c", [], Other, 0.8, 0.01, 3.2, 64, DP, cal(0.109375, 7.0, MURI), "Muri"),
    model!("a3c", [], Other, 0.8, 0.01, 3.2, 20, DP, Cost::FromFlops, "Gavel"),
    model!("cyclegan", [], Other, 28.3, 56.0, 113.0, 1, DP, Cost::FromFlops, "Gavel"),
];

fn normalise(name: &str) -> String {
    name.trim().to_ascii_lowercase().replace(['_', ' '], "-")
}

/// Finds a model by name or alias, ignoring case, `_`/`-`/space differences;
/// a name wins over an alias, an earlier model over a later one. Policies
/// call it for every job at every decision, so the normalised names are
/// indexed once: O(|name|) per call.
pub fn model(name: &str) -> Option<&'static ModelSpec> {
    type Index = (HashMap<String, &'static ModelSpec>, HashMap<String, &'static ModelSpec>);
    static INDEX: std::sync::OnceLock<Index> = std::sync::OnceLock::new();
    let (names, aliases) = INDEX.get_or_init(|| {
        let (mut names, mut aliases) = (HashMap::new(), HashMap::new());
        for m in ZOO {
            names.entry(normalise(m.name)).or_insert(m);
            for a in m.aliases {
                aliases.entry(normalise(a)).or_insert(m);
            }
        }
        (names, aliases)
    });
    // A name already in normal form (a spec's usual spelling) is found
    // without allocating: normalising it would give it back unchanged.
    if let Some(&m) = names.get(name) {
        return Some(m);
    }
    let n = normalise(name);
    names.get(&n).or_else(|| aliases.get(&n)).copied()
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// Median achieved rate (forward+backward GMACs per ms) and median overhead of
/// the calibrated models of a family; the whole zoo when the family has none.
fn family_rates(family: Family) -> (f64, f64) {
    let pick = |f: Option<Family>| {
        let (mut rates, mut overheads) = (Vec::new(), Vec::new());
        for m in ZOO.iter().filter(|m| f.is_none_or(|f| m.family == f)) {
            if let Cost::Calibrated { sample_ms_v100, overhead_ms, .. } = m.cost {
                rates.push(3.0 * m.fwd_gmacs / sample_ms_v100);
                overheads.push(overhead_ms);
            }
        }
        (median(rates), median(overheads))
    };
    let (r, o) = pick(Some(family));
    if r.is_finite() { (r, o) } else { pick(None) }
}

impl ModelSpec {
    /// Milliseconds per sample and fixed milliseconds per iteration on a V100.
    pub fn v100_costs(&self) -> (f64, f64) {
        match self.cost {
            Cost::Calibrated { sample_ms_v100, overhead_ms, .. } => (sample_ms_v100, overhead_ms),
            Cost::FromFlops => {
                let (rate, overhead) = family_rates(self.family);
                (3.0 * self.fwd_gmacs / rate, overhead)
            }
        }
    }

    /// Gradient bytes exchanged by an all-reduce (fp32, 4 bytes per parameter).
    pub fn gradient_bytes(&self) -> f64 {
        let params = match self.parallelism {
            Parallelism::EmbeddingAllToAll { dense_params_m, .. } => dense_params_m,
            _ => self.params_m,
        };
        params * 1e6 * 4.0
    }

    /// Compute time of one iteration at per-worker batch `batch` on `gpu`, in ms.
    pub fn compute_ms(&self, gpu: &GpuType, batch: u32) -> f64 {
        let (sample, overhead) = self.v100_costs();
        (overhead + f64::from(batch) * sample) / gpu.speed_vs_v100
    }

    /// The iteration shape of this model with per-worker batch `batch` on GPUs of
    /// type `gpu`, placed as `placement`, with hosts sending at `link_gbps`.
    pub fn shape(&self, gpu: &GpuType, batch: u32, placement: &Placement, link_gbps: f64) -> IterationShape {
        let n = placement.workers();
        let hosts = placement.hosts();
        let rate = if hosts > 1 { link_gbps } else { INTRA_HOST_GBPS };
        let compute = self.compute_ms(gpu, batch);
        let comm = |collective, payload_bytes: f64| Segment::Comm {
            collective,
            payload_bytes,
            participants: n,
            hosts,
            gbps: rate,
            group: crate::shape::Group::ALL,
        };
        let mut segments = Vec::new();
        match self.parallelism {
            _ if n <= 1 => segments.push(Segment::Compute { ms: compute }),
            Parallelism::DataParallel => {
                segments.push(Segment::Compute { ms: compute });
                segments.push(comm(Collective::RingAllReduce, self.gradient_bytes()));
            }
            Parallelism::Pipeline { hidden, seq_len } => {
                // GPipe (Huang et al. 2019) with m = min(batch, 4n) micro-batches:
                // each pass takes m + n - 1 ticks of compute/(n·m); after every
                // tick, fp16 activations of one micro-batch cross the stage
                // boundaries. Forward ≈ 1/3 and backward ≈ 2/3 of the compute.
                let m = batch.min(n.saturating_mul(4)).max(1);
                let act = f64::from(batch) * f64::from(seq_len) * f64::from(hidden) * 2.0 / f64::from(m);
                let boundary = Segment::Comm {
                    collective: Collective::PointToPoint,
                    payload_bytes: act,
                    participants: 2,
                    hosts: hosts.min(2),
                    gbps: rate,
                    group: crate::shape::Group::ALL,
                };
                let per_tick = compute / (f64::from(n) * f64::from(m));
                for pass in [per_tick / 3.0, per_tick * 2.0 / 3.0] {
                    for _ in 0..(u64::from(m) + u64::from(n) - 1) {
                        segments.push(Segment::Compute { ms: pass });
                        segments.push(boundary.clone());
                    }
                }
            }
            Parallelism::EmbeddingAllToAll { lookup_bytes_per_sample, .. } => {
                // Each worker sends the lookups of the other workers' samples from its
                // shards: (n-1)/n of batch · lookup bytes.
                let lookups = f64::from(batch) * f64::from(lookup_bytes_per_sample);
                segments.push(Segment::Compute { ms: compute / 3.0 });
                segments.push(comm(Collective::AllToAll, lookups));
                segments.push(Segment::Compute { ms: compute * 2.0 / 3.0 });
                segments.push(comm(Collective::AllToAll, lookups));
                segments.push(comm(Collective::RingAllReduce, self.gradient_bytes()));
            }
        }
        IterationShape { segments }
    }

    /// [`ModelSpec::shape`] with a GPU type looked up by name.
    pub fn shape_on(&self, gpu: &str, batch: u32, placement: &Placement, link_gbps: f64) -> Option<IterationShape> {
        gpu_type(gpu).map(|g| self.shape(g, batch, placement, link_gbps))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v100() -> &'static GpuType {
        gpu_type("v100").expect("v100 is in the catalogue")
    }

    #[test]
    fn every_model_named_in_the_papers_is_in_the_zoo() {
        for name in [
            "VGG11",
            "VGG16",
            "VGG19",
            "ResNet18",
            "ResNet20",
            "ResNet50",
            "ResNet101",
            "ResNet152",
            "WideResNet101",
            "GoogLeNet",
            "DenseNet201",
            "AlexNet",
            "Inception",
            "BERT",
            "RoBERTa",
            "XLM",
            "CamemBERT",
            "GPT-1",
            "GPT-2",
            "GPT-3",
            "DLRM",
            "DeepSpeech2",
            "NeuMF",
            "NCF",
            "Transformer",
            "YOLOv3",
        ] {
            assert!(model(name).is_some(), "{name} missing from the zoo");
        }
    }

    #[test]
    fn names_are_unique() {
        let mut all: Vec<String> =
            ZOO.iter().flat_map(|m| std::iter::once(m.name).chain(m.aliases.iter().copied())).map(normalise).collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn all_costs_are_positive_and_finite() {
        for m in ZOO {
            let (s, o) = m.v100_costs();
            assert!(s > 0.0 && s.is_finite() && o >= 0.0 && o.is_finite(), "{}: {s} {o}", m.name);
        }
    }

    #[test]
    fn compute_is_linear_in_batch_and_scales_with_gpu_speed() {
        let m = model("resnet50").expect("in zoo");
        // 45.26 + 64 · 3.4126 = 263.67 ms on a V100; a T4 is 0.735× as fast.
        assert!((m.compute_ms(v100(), 64) - 263.666).abs() < 0.01);
        let t4 = gpu_type("t4").expect("t4");
        assert!((m.compute_ms(t4, 64) - 263.666 / 0.735).abs() < 0.01);
    }

    #[test]
    fn data_parallel_shape_is_compute_then_ring_allreduce() {
        let m = model("vgg16").expect("in zoo");
        let s = m.shape(v100(), 16, &Placement::spread(4), 50.0);
        assert_eq!(s.segments.len(), 2);
        // 138.4e6 · 4 B = 553.6 MB; ring of 4: 1.5 · 553.6e6 · 8 / 50e9 s = 132.864 ms.
        assert!((s.network_ms() - 132.864).abs() < 1e-6);
        assert!((s.compute_ms() - 68.0).abs() < 1e-9);
        // Packed on one host: the all-reduce never reaches the network.
        let packed = m.shape(v100(), 16, &Placement::packed(4, 8), 50.0);
        assert_eq!(packed.network_ms(), 0.0);
        assert!(packed.period_ms() > 68.0);
    }

    #[test]
    fn a_single_worker_does_not_communicate() {
        let s = model("gpt2").expect("in zoo").shape(v100(), 8, &Placement::spread(1), 50.0);
        assert_eq!(s.segments.len(), 1);
    }

    #[test]
    fn pipeline_shape_follows_gpipe_ticks() {
        let m = model("gpt1").expect("in zoo");
        let s = m.shape(v100(), 8, &Placement::spread(4), 100.0);
        // 4 stages, m = min(8, 16) = 8 micro-batches: 8 + 4 - 1 = 11 ticks per
        // pass, each a compute then a boundary transfer, forward and backward.
        assert_eq!(s.segments.len(), 2 * 11 * 2);
        let c = s.circle();
        assert_eq!(c.arcs.len(), 22);
        // One micro-batch: 1 · 512 · 768 · 2 B = 786 kB at 100 Gbit/s = 62.9 µs.
        assert!((c.arcs[0].duration_ms - 512.0 * 768.0 * 2.0 * 8.0 / 1e11 * 1e3).abs() < 1e-12);
        // Compute: (m + n - 1) / (n · m) of the single-GPU compute = 11/32.
        assert!((s.compute_ms() - m.compute_ms(v100(), 8) * 11.0 / 32.0).abs() < 1e-9);
    }

    #[test]
    fn dlrm_has_two_all_to_alls_and_an_allreduce() {
        let s = model("dlrm").expect("in zoo").shape(v100(), 1024, &Placement::spread(4), 25.0);
        let comms = s.segments.iter().filter(|s| matches!(s, Segment::Comm { .. })).count();
        assert_eq!(comms, 3);
        assert_eq!(s.circle().arcs.len(), 2, "the last two comm segments are adjacent and merge");
    }

    #[test]
    fn placement_digits() {
        assert_eq!(Placement::from_digits("22").map(|p| p.gpus_per_host), Some(vec![2, 2]));
        assert_eq!(Placement::from_digits("1111").map(|p| (p.workers(), p.hosts())), Some((4, 4)));
        assert!(Placement::from_digits("2x").is_none());
        assert!(Placement::from_digits("0").is_none());
        assert_eq!(Placement::packed(10, 4).gpus_per_host, vec![4, 4, 2]);
    }
}
