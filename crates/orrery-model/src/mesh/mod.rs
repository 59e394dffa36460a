//! LLM jobs as device meshes (issue 66, first part): a transformer's
//! published architecture ([`LlmArch`]), a mesh of tensor, pipeline, data
//! and expert parallelism ([`Mesh`]), and what one training iteration of
//! that job computes and sends on each dimension, from the closed forms of
//! the literature. Not yet wired into job specs or the simulator's shapes:
//! this is the arithmetic they will be derived from, checked by hand.
//!
//! Conventions (Megatron-LM, Narayanan et al., SC'21, §3 and Appendix):
//! `b` is the micro-batch in sequences, `s` the sequence length, `h` the
//! hidden size, `l` the layers, `V` the vocabulary; activations and
//! gradients travel in 16-bit (2 bytes a value). Each collective's bytes
//! per rank are [`Collective::wire_bytes_per_worker`]'s: `2(n−1)/n · M`
//! for a ring all-reduce, `(n−1)/n · M` for an all-gather or all-to-all.

pub mod published;
pub mod shape;
pub mod timing;

use crate::shape::Collective;
use serde::{Deserialize, Serialize};

/// Bytes per value of activations and gradients on the wire (bf16/fp16).
pub const WIRE_BYTES: f64 = 2.0;

/// A decoder-only transformer, as its paper or model card publishes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LlmArch {
    /// Name as the zoo knows it, e.g. `llama3-70b`.
    pub name: &'static str,
    /// Transformer layers `l`.
    pub layers: u32,
    /// Hidden size `h`.
    pub hidden: u32,
    /// Attention heads.
    pub heads: u32,
    /// Key/value heads (grouped-query attention; `heads` without it).
    pub kv_heads: u32,
    /// Hidden size of the feed-forward block (of each expert for MoE).
    pub ffn_hidden: u32,
    /// Whether the feed-forward block is gated (SwiGLU: three matrices, not two).
    pub gated_ffn: bool,
    /// Vocabulary `V`.
    pub vocab: u32,
    /// Whether the output projection shares the input embedding's weights.
    pub tied_embeddings: bool,
    /// Training sequence length `s`.
    pub seq_len: u32,
    /// Experts per MoE layer (1: a dense model).
    pub experts: u32,
    /// Experts each token is routed to.
    pub top_k: u32,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The LLMs of issue 66, with their published architectures.
pub const LLMS: &[LlmArch] = &[
    LlmArch {
        name: "gpt3-175b",
        layers: 96,
        hidden: 12288,
        heads: 96,
        kv_heads: 96,
        ffn_hidden: 4 * 12288,
        gated_ffn: false,
        vocab: 50257,
        tied_embeddings: true,
        seq_len: 2048,
        experts: 1,
        top_k: 1,
        source: "Brown et al. 2020, Table 2.1",
    },
    LlmArch {
        name: "llama3-8b",
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn_hidden: 14336,
        gated_ffn: true,
        vocab: 128256,
        tied_embeddings: false,
        seq_len: 8192,
        experts: 1,
        top_k: 1,
        source: "Llama 3 report (Dubey et al. 2024), Table 3",
    },
    LlmArch {
        name: "llama3-70b",
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        ffn_hidden: 28672,
        gated_ffn: true,
        vocab: 128256,
        tied_embeddings: false,
        seq_len: 8192,
        experts: 1,
        top_k: 1,
        source: "Llama 3 report (Dubey et al. 2024), Table 3",
    },
    LlmArch {
        name: "llama3-405b",
        layers: 126,
        hidden: 16384,
        heads: 128,
        kv_heads: 8,
        ffn_hidden: 53248,
        gated_ffn: true,
        vocab: 128256,
        tied_embeddings: false,
        seq_len: 8192,
        experts: 1,
        top_k: 1,
        source: "Llama 3 report (Dubey et al. 2024), Table 3",
    },
    LlmArch {
        name: "mixtral-8x7b",
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 8,
        ffn_hidden: 14336,
        gated_ffn: true,
        vocab: 32000,
        tied_embeddings: false,
        seq_len: 4096,
        experts: 8,
        top_k: 2,
        source: "Jiang et al. 2024 (Mixtral of Experts), Table 1",
    },
];

/// The architecture named `name` (case-insensitive), if the zoo has it.
pub fn llm(name: &str) -> Option<&'static LlmArch> {
    LLMS.iter().find(|m| m.name.eq_ignore_ascii_case(name))
}

impl LlmArch {
    /// Weights of one attention block: Q and O are `h × h`, K and V
    /// `h × h·kv_heads/heads` (grouped-query attention). O(1).
    fn attention_params(&self) -> f64 {
        let h = f64::from(self.hidden);
        let kv = h * f64::from(self.kv_heads) / f64::from(self.heads);
        2.0 * h * h + 2.0 * h * kv
    }

    /// Weights of one expert's feed-forward block: `2·h·f`, or `3·h·f`
    /// gated (SwiGLU). O(1).
    fn ffn_params(&self) -> f64 {
        let matrices = if self.gated_ffn { 3.0 } else { 2.0 };
        matrices * f64::from(self.hidden) * f64::from(self.ffn_hidden)
    }

    /// Weights of the input embedding and, untied, the output projection.
    fn embedding_params(&self) -> f64 {
        let one = f64::from(self.vocab) * f64::from(self.hidden);
        if self.tied_embeddings { one } else { 2.0 * one }
    }

    /// All weights (every expert counted; norms and biases left out, under
    /// 0.01% of these models). O(1).
    pub fn params(&self) -> f64 {
        let router = if self.experts > 1 { f64::from(self.hidden) * f64::from(self.experts) } else { 0.0 };
        let layer = self.attention_params() + f64::from(self.experts) * self.ffn_params() + router;
        f64::from(self.layers) * layer + self.embedding_params()
    }

    /// Weights a token passes through: `top_k` experts of each MoE layer.
    /// O(1).
    pub fn active_params(&self) -> f64 {
        let layer = self.attention_params() + f64::from(self.top_k.min(self.experts)) * self.ffn_params();
        f64::from(self.layers) * layer + self.embedding_params()
    }

    /// Training FLOPs per token, forward and backward, without activation
    /// recomputation: `6·N_active + 12·l·h·s` (the matrix multiplies of
    /// the weights, 2 FLOPs a multiply-add, ×3 for the backward pass; plus
    /// attention's scores and values, PaLM Appendix B). For GPT-3 this is
    /// Megatron's `72·b·s·l·h²·(1 + s/6h + V/12lh)` per sequence (SC'21
    /// Eq. 3 without the recomputed forward). O(1).
    pub fn train_flops_per_token(&self) -> f64 {
        6.0 * self.active_params() + 12.0 * f64::from(self.layers) * f64::from(self.hidden) * f64::from(self.seq_len)
    }

    /// Is it a mixture of experts? O(1).
    pub fn is_moe(&self) -> bool {
        self.experts > 1
    }
}

/// How the job's GPUs are arranged: `tp × pp × dp` GPUs, experts spread
/// over `ep` of the data-parallel ranks (Megatron's expert parallelism
/// inside the data-parallel group).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Mesh {
    /// Tensor-parallel ranks (one layer's matrices split across them).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_GPUS))]
    pub tp: u32,
    /// Pipeline stages.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_GPUS))]
    pub pp: u32,
    /// Data-parallel replicas.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_GPUS))]
    pub dp: u32,
    /// Expert-parallel ranks (divides `dp`); 1 for a dense model.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_GPUS))]
    pub ep: u32,
    /// Micro-batches per iteration per pipeline (1F1B).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = MAX_MICROBATCHES))]
    pub microbatches: u32,
    /// ZeRO stage (0: plain data parallelism; 1 and 2 shard optimizer
    /// state and gradients, the same traffic; 3 (FSDP) shards the weights
    /// too, gathered again in the backward pass).
    #[serde(default)]
    #[schemars(range(min = 0, max = 3))]
    pub zero: u8,
    /// The fewest data-parallel replicas the user lets the job run on
    /// (elastic data parallelism at a fixed global batch, as Varuna and
    /// Oobleck run it: on `dp'` replicas each pipeline takes
    /// `microbatches · dp / dp'` micro-batches, so an iteration processes
    /// the same samples). 0 (the default) or `dp`: rigid. A scheduler may
    /// run the job on any `dp'` of [`Mesh::allows_dp`], up to twice `dp`.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = MAX_GPUS))]
    pub dp_min: u32,
}

/// The most GPUs of a mesh, and so of any job ([`crate::job::MAX_WORKERS`]
/// is this): four times the largest published training runs (16,384
/// GPUs), and half of the 131,072 GPUs of the largest cluster a topology
/// may describe ([`crate::topology::MAX_HOSTS`] hosts of 8).
pub const MAX_GPUS: u32 = crate::shape::MAX_GROUP_WORKERS;

/// The most micro-batches per iteration a pipeline may run (Megatron runs
/// hundreds for its largest global batches).
pub const MAX_MICROBATCHES: u32 = 65_536;

fn is_zero(x: &u32) -> bool {
    *x == 0
}

fn one() -> u32 {
    1
}

impl Default for Mesh {
    fn default() -> Self {
        Mesh { tp: 1, pp: 1, dp: 1, ep: 1, microbatches: 1, zero: 0, dp_min: 0 }
    }
}

/// Bytes one GPU sends per iteration on each dimension of its mesh.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct MeshTraffic {
    /// Tensor parallelism's activation all-reduces.
    pub tp: f64,
    /// Pipeline parallelism's activations and their gradients to the
    /// neighbouring stages.
    pub pp: f64,
    /// Data parallelism's gradient all-reduce (or ZeRO's collectives).
    pub dp: f64,
    /// The part of `dp` that is experts' gradients: each expert's replicas
    /// are the `dp/ep` ranks that hold the same shard, so its all-reduce
    /// runs among them (Megatron's expert-data-parallel group), not on the
    /// dense DP ring.
    pub dp_experts: f64,
    /// Expert parallelism's all-to-alls.
    pub ep: f64,
}

impl Mesh {
    /// GPUs in all. O(1).
    pub fn gpus(&self) -> u32 {
        self.tp.saturating_mul(self.pp).saturating_mul(self.dp)
    }

    /// Why this mesh cannot hold `arch`, or None: every count at least 1,
    /// `tp` divides the heads, `pp` is at most the layers, `ep` both `dp` and the
    /// experts, a dense model has `ep` 1, ZeRO's stage is 0 to 3. O(1).
    pub fn check(&self, arch: &LlmArch) -> Option<String> {
        let Mesh { tp, pp, dp, ep, microbatches, zero, dp_min } = *self;
        if dp_min > dp {
            return Some(format!("dp_min = {dp_min} is more than dp = {dp}"));
        }
        if [tp, pp, dp, ep, microbatches].contains(&0) {
            return Some("tp, pp, dp, ep and microbatches must be at least 1".into());
        }
        if !arch.heads.is_multiple_of(tp) {
            return Some(format!("tp = {tp} does not divide {}'s {} attention heads", arch.name, arch.heads));
        }
        // Stages may hold unequal numbers of layers (Llama 3 405B's 126 on
        // 16 stages: the first and last hold one fewer), but each holds one.
        if pp > arch.layers {
            return Some(format!("pp = {pp} is more stages than {}'s {} layers", arch.name, arch.layers));
        }
        if !dp.is_multiple_of(ep) || !arch.experts.is_multiple_of(ep) {
            return Some(format!("ep = {ep} must divide dp = {dp} and {}'s {} experts", arch.name, arch.experts));
        }
        if zero > 3 {
            return Some(format!("zero = {zero}: the stages are 0 to 3"));
        }
        None
    }

    /// Whether the user lets the job run on `dp` replicas: between
    /// `dp_min` and twice the request, every pipeline at a whole number of
    /// micro-batches for the same global batch (`dp` divides
    /// `microbatches · dp` of the request), and `ep` dividing it. The
    /// request itself always. O(1).
    pub fn allows_dp(&self, dp: u32) -> bool {
        if dp == self.dp {
            return true;
        }
        let elastic = self.dp_min > 0 && self.dp_min < self.dp;
        let batch = u64::from(self.microbatches) * u64::from(self.dp);
        elastic
            && (self.dp_min..=2 * self.dp).contains(&dp)
            && batch.is_multiple_of(u64::from(dp))
            && dp.is_multiple_of(self.ep.max(1))
    }

    /// The mesh on `dp` replicas at the same global batch: micro-batches
    /// per pipeline scaled by `self.dp / dp` (at least 1). O(1).
    pub fn at_dp(&self, dp: u32) -> Mesh {
        let dp = dp.max(1);
        let batch = u64::from(self.microbatches) * u64::from(self.dp);
        Mesh { dp, microbatches: (batch / u64::from(dp)).max(1) as u32, ..*self }
    }

    /// 1F1B's pipeline bubble as a share of the ideal compute time:
    /// `(pp − 1) / microbatches` (Narayanan et al., SC'21, §2.2.1). O(1).
    pub fn bubble_fraction(&self) -> f64 {
        f64::from(self.pp.saturating_sub(1)) / f64::from(self.microbatches.max(1))
    }

    /// Bytes one GPU sends per iteration on each dimension, for `arch` at
    /// `micro_batch` sequences per micro-batch. O(1).
    ///
    /// * TP: per layer and micro-batch, two all-reduces of the activations
    ///   `b·s·h` forward and two of their gradients backward (Megatron's
    ///   f and g operators, SC'21 §2.3), each a ring over `tp` ranks.
    /// * PP: per micro-batch, the activations `b·s·h` to the next stage
    ///   and their gradient back; a stage at either end of the pipeline
    ///   sends one of the two, so per GPU `2·(pp − 1)/pp` of them on average.
    /// * DP: the gradient of the GPU's share of the weights, `N/(tp·pp)`
    ///   values: a ring all-reduce over `dp` replicas, which ZeRO 1-2 do as a
    ///   reduce-scatter plus an all-gather (the same bytes) and ZeRO 3 adds a
    ///   second all-gather of the weights to (1.5×). The expert weights of a
    ///   MoE layer are reduced over the `dp/ep` replicas of each expert.
    /// * EP: per MoE layer and micro-batch, an all-to-all to dispatch each
    ///   token's `top_k` copies to their experts and one to combine them,
    ///   forward and backward: 4 of `b·s·h·top_k` values, `(ep − 1)/ep` of
    ///   them leaving the GPU.
    pub fn traffic(&self, arch: &LlmArch, micro_batch: u32) -> MeshTraffic {
        let (tp, pp, ep) = (f64::from(self.tp), f64::from(self.pp), f64::from(self.ep));
        let m = f64::from(self.microbatches);
        let act = f64::from(micro_batch) * f64::from(arch.seq_len) * f64::from(arch.hidden) * WIRE_BYTES;
        let layers_here = f64::from(arch.layers) / pp;
        let all_reduce = |n: u32, bytes: f64| Collective::RingAllReduce.wire_bytes_per_worker(bytes, n);
        let tp_bytes = layers_here * m * 4.0 * all_reduce(self.tp, act);
        let pp_bytes = m * 2.0 * act * (pp - 1.0) / pp;
        // Gradients of this GPU's weights: dense weights replicated dp times,
        // each expert's dp/ep times.
        let expert_weights =
            if arch.is_moe() { f64::from(arch.layers) * f64::from(arch.experts) * arch.ffn_params() } else { 0.0 };
        let dense = (arch.params() - expert_weights) / (tp * pp);
        let experts_here = expert_weights / (tp * pp * ep);
        let zero_factor = if self.zero >= 3 { 1.5 } else { 1.0 };
        let dp_experts = zero_factor * all_reduce(self.dp / self.ep, experts_here * WIRE_BYTES);
        let dp_bytes = zero_factor * all_reduce(self.dp, dense * WIRE_BYTES) + dp_experts;
        let ep_bytes = if arch.is_moe() {
            layers_here * m * 4.0 * Collective::AllToAll.wire_bytes_per_worker(act * f64::from(arch.top_k), self.ep)
        } else {
            0.0
        };
        MeshTraffic { tp: tp_bytes, pp: pp_bytes, dp: dp_bytes, dp_experts, ep: ep_bytes }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn elastic_data_parallelism_keeps_the_global_batch() {
        let m = Mesh { tp: 8, dp: 4, ep: 1, microbatches: 6, dp_min: 2, ..Mesh::default() };
        // 24 micro-batches in all: widths 2, 3, 4, 6, 8 divide them; 1 is
        // below dp_min, 12 above twice the request.
        let allowed: Vec<u32> = (1..=12).filter(|&d| m.allows_dp(d)).collect();
        assert_eq!(allowed, vec![2, 3, 4, 6, 8]);
        assert_eq!(m.at_dp(2), Mesh { dp: 2, microbatches: 12, ..m });
        assert_eq!(m.at_dp(8), Mesh { dp: 8, microbatches: 3, ..m });
        // Rigid: only the request.
        let rigid = Mesh { dp_min: 0, ..m };
        assert_eq!((1..=12).filter(|&d| rigid.allows_dp(d)).collect::<Vec<_>>(), vec![4]);
        // EP must divide the width.
        let moe = Mesh { tp: 1, dp: 8, ep: 8, microbatches: 2, dp_min: 4, ..Mesh::default() };
        assert!(!moe.allows_dp(4) && moe.allows_dp(8) && moe.allows_dp(16));
        assert!(Mesh { dp_min: 5, ..m }.check(llm("llama3-8b").expect("zoo")).is_some_and(|e| e.contains("dp_min")));
    }

    use super::*;

    fn within(x: f64, target: f64, rel: f64) -> bool {
        (x / target - 1.0).abs() <= rel
    }

    #[test]
    fn parameter_counts_match_the_published_ones() {
        // Llama 3 report Table 3 / model cards: 8.03B, 70.6B, 405.9B;
        // GPT-3 175B (174.6B counted this way); Mixtral 8x7B: 46.7B in
        // all, 12.9B active (Jiang et al. 2024, §2).
        for (name, published, active) in [
            ("llama3-8b", 8.03e9, 8.03e9),
            ("llama3-70b", 70.6e9, 70.6e9),
            ("llama3-405b", 405.9e9, 405.9e9),
            ("gpt3-175b", 175.0e9, 175.0e9),
            ("mixtral-8x7b", 46.7e9, 12.9e9),
        ] {
            let m = llm(name).expect("in the zoo");
            assert!(within(m.params(), published, 0.01), "{name}: {:.4e} against {published:.4e}", m.params());
            assert!(within(m.active_params(), active, 0.01), "{name}: {:.4e} active", m.active_params());
        }
    }

    #[test]
    fn gpt3_flops_are_megatrons_closed_form() {
        // SC'21 Eq. 3 without recomputation, per sequence:
        // 72·s·l·h²·(1 + s/6h + V/12lh); per token divide by s.
        let m = llm("gpt3-175b").expect("in the zoo");
        let (s, l, h, v) = (2048.0, 96.0, 12288.0, 50257.0);
        let megatron = 72.0 * l * h * h * (1.0 + s / (6.0 * h) + v / (12.0 * l * h));
        // Ours counts the QKV/O and MLP matrices exactly (12·l·h²) and the
        // tied embedding once: the same sum.
        assert!(within(m.train_flops_per_token(), megatron, 1e-9), "{} vs {megatron}", m.train_flops_per_token());
    }

    #[test]
    fn the_1f1b_bubble_is_pp_minus_one_over_the_micro_batches() {
        let mesh = Mesh { pp: 8, microbatches: 32, ..Mesh::default() };
        assert!((mesh.bubble_fraction() - 7.0 / 32.0).abs() < 1e-12);
        assert_eq!(Mesh::default().bubble_fraction(), 0.0);
    }

    #[test]
    fn each_dimension_sends_its_closed_form() {
        // Llama 3 70B at TP 8, PP 4, DP 8, 16 micro-batches of one sequence.
        let m = llm("llama3-70b").expect("in the zoo");
        let mesh = Mesh { tp: 8, pp: 4, dp: 8, ep: 1, microbatches: 16, zero: 0, dp_min: 0 };
        assert_eq!(mesh.check(m), None);
        let t = mesh.traffic(m, 1);
        let act = 8192.0 * 8192.0 * 2.0; // b·s·h·2 bytes: 128 MiB
        // TP: 20 layers × 16 micro-batches × 4 all-reduces × 2·7/8 of act.
        assert!(within(t.tp, 20.0 * 16.0 * 4.0 * 1.75 * act, 1e-12), "{}", t.tp);
        // PP: 16 × 2 × act × 3/4.
        assert!(within(t.pp, 16.0 * 2.0 * 0.75 * act, 1e-12), "{}", t.pp);
        // DP: 2·7/8 × the GPU's 1/32 of the weights, 2 bytes each.
        assert!(within(t.dp, 1.75 * m.params() / 32.0 * 2.0, 1e-12), "{}", t.dp);
        assert_eq!(t.ep, 0.0);
        // ZeRO-3 gathers the weights a second time: 1.5x the DP bytes.
        let z3 = Mesh { zero: 3, ..mesh }.traffic(m, 1);
        assert!(within(z3.dp, 1.5 * t.dp, 1e-12));
    }

    #[test]
    fn an_all_to_all_moves_the_routed_tokens_that_leave_the_gpu() {
        // Mixtral 8x7B, EP 8 inside DP 8, one micro-batch of one sequence:
        // per layer 4 all-to-alls of b·s·h·top_k values, 7/8 leaving.
        let m = llm("mixtral-8x7b").expect("in the zoo");
        let mesh = Mesh { tp: 1, pp: 1, dp: 8, ep: 8, microbatches: 1, zero: 0, dp_min: 0 };
        assert_eq!(mesh.check(m), None);
        let t = mesh.traffic(m, 1);
        let routed = 4096.0 * 4096.0 * 2.0 * 2.0; // s·h·top_k·2 bytes
        assert!(within(t.ep, 32.0 * 4.0 * routed * 7.0 / 8.0, 1e-12), "{}", t.ep);
        // Each expert lives on one GPU of the 8: its gradient is not
        // all-reduced (dp/ep = 1); only the dense weights are.
        let experts = 32.0 * 8.0 * 3.0 * 4096.0 * 14336.0;
        assert!(within(t.dp, 1.75 * (m.params() - experts) * 2.0, 1e-12), "{}", t.dp);
    }

    #[test]
    fn a_mesh_that_cannot_hold_the_model_says_which_count_is_wrong() {
        let m = llm("llama3-70b").expect("in the zoo");
        let bad = |mesh: Mesh| mesh.check(m).expect("refused");
        assert!(bad(Mesh { tp: 3, ..Mesh::default() }).contains("64 attention heads"));
        assert!(bad(Mesh { pp: 81, ..Mesh::default() }).contains("80 layers"));
        assert_eq!(Mesh { pp: 3, ..Mesh::default() }.check(m), None, "unequal stages are allowed");
        assert!(bad(Mesh { ep: 2, dp: 2, ..Mesh::default() }).contains("1 experts"));
        assert!(bad(Mesh { microbatches: 0, ..Mesh::default() }).contains("at least 1"));
        assert!(bad(Mesh { zero: 4, ..Mesh::default() }).contains("0 to 3"));
    }
}
