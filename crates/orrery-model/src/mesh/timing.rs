//! How long one iteration of an LLM job takes on its mesh, alone: a
//! roofline of each layer's compute, the 1F1B bubble, and each dimension's
//! collectives at the rate of the link they run on.
//!
//! * **Matrix multiplies** run at `efficiency × peak` (the GPU's dense
//!   16-bit tensor-core peak). `efficiency` is the one fitted number: the
//!   share of the peak a GPU's matrix multiplies reach in a training step
//!   (see [`super::published`] for the row it is fitted on).
//! * **Memory-bound work** (normalisation, softmax, dropout, activation
//!   functions, residuals) moves the layer's activations through HBM: per
//!   layer and sequence `10·s·h + (24·s·h + 5·a·s²)/tp` bytes
//!   (Korthikanti et al., MLSys'23, Eq. 2, activations of one layer with
//!   tensor parallelism and no sequence parallelism), each byte touched
//!   [`TOUCHES`] times a pass.
//! * **Bubble**: the pipeline idles `(pp − 1)/(v·m)` of the compute with
//!   `m` micro-batches and `v` interleaved chunks per stage (Narayanan et
//!   al., SC'21, §2.2).
//! * **Collectives**: each dimension's bytes per GPU ([`Mesh::traffic`]) at
//!   the NVLink rate when its group fits in one NVLink domain, else at the
//!   GPU's NIC rate. TP and PP are on the critical path (Megatron does not
//!   overlap them); DP may hide up to `dp_overlap` of its time under the
//!   backward pass.
//!
//! Left out, and why it matters little for the published configurations:
//! the last stage's output layer (3% of a stage's FLOPs for GPT-3 at 8
//! stages), optimizer steps (under 1% of an iteration at these batch
//! sizes), latency of small messages.

use super::{LlmArch, Mesh};
use serde::{Deserialize, Serialize};

/// Times each activation byte passes through HBM in one pass over a layer:
/// read once and written once (the memory-bound kernels are element-wise).
/// An iteration makes two passes (forward, backward), three when it
/// recomputes the forward.
pub const TOUCHES: f64 = 2.0;

/// How the job's framework runs an iteration: the choices Megatron-LM's
/// command line exposes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Sequences per micro-batch `b`.
    pub micro_batch: u32,
    /// Full activation recomputation: the forward runs twice.
    pub recompute: bool,
    /// Interleaved chunks of layers per pipeline stage `v` (1: plain 1F1B).
    pub virtual_stages: u32,
    /// Share of the DP collectives' time that may hide under the backward
    /// pass (0: none, as in Megatron-LM SC'21).
    pub dp_overlap: f64,
}

impl Default for Recipe {
    fn default() -> Self {
        Recipe { micro_batch: 1, recompute: false, virtual_stages: 1, dp_overlap: 0.0 }
    }
}

/// The hardware a mesh runs on, as the iteration model needs it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Hardware {
    /// Dense 16-bit peak per GPU, TFLOP/s.
    pub peak_tflops: f64,
    /// Share of the peak matrix multiplies reach (fitted).
    pub efficiency: f64,
    /// HBM bandwidth per GPU, GB/s.
    pub hbm_gbytes_per_s: f64,
    /// NVLink rate per GPU and direction, Gbit/s.
    pub nvlink_gbps: f64,
    /// GPUs in one NVLink domain (8 in an HGX host, 72 in an NVL72 rack).
    pub nvlink_domain: u32,
    /// Network rate per GPU, Gbit/s (one rail NIC per GPU).
    pub nic_gbps: f64,
}

/// One iteration of a mesh, alone, per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct IterationTime {
    /// Matrix multiplies and memory-bound work of every micro-batch, ms.
    pub compute_ms: f64,
    /// The pipeline's idle time, ms.
    pub bubble_ms: f64,
    /// Tensor parallelism's all-reduces, ms.
    pub tp_ms: f64,
    /// Pipeline sends, ms.
    pub pp_ms: f64,
    /// Data parallelism's collectives not hidden under the backward, ms.
    pub dp_ms: f64,
    /// Expert parallelism's all-to-alls, ms.
    pub ep_ms: f64,
    /// Model FLOPs of one GPU per iteration (no recomputation).
    pub model_flops: f64,
    /// FLOPs the GPU executes (with recomputation, if any).
    pub hardware_flops: f64,
}

impl IterationTime {
    /// The iteration, ms.
    pub fn total_ms(&self) -> f64 {
        self.compute_ms + self.bubble_ms + self.tp_ms + self.pp_ms + self.dp_ms + self.ep_ms
    }

    /// Model FLOP/s per GPU, in TFLOP/s (what MFU is measured with).
    pub fn model_tflops(&self) -> f64 {
        self.model_flops / (self.total_ms() * 1e-3) / 1e12
    }

    /// Executed FLOP/s per GPU, in TFLOP/s (Megatron-LM SC'21 reports
    /// these: recomputation counted).
    pub fn hardware_tflops(&self) -> f64 {
        self.hardware_flops / (self.total_ms() * 1e-3) / 1e12
    }
}

/// Bytes an inner pipeline stage's GPU sends per micro-batch: its 1/tp of
/// the activations `b·s·h` forward and of their gradient back (one of the
/// two with two stages, none with one). O(1).
pub fn pipeline_send_bytes(arch: &LlmArch, mesh: &Mesh, recipe: &Recipe) -> f64 {
    let directions = f64::from(mesh.pp.saturating_sub(1).min(2));
    let act =
        f64::from(recipe.micro_batch.max(1)) * f64::from(arch.seq_len) * f64::from(arch.hidden) * super::WIRE_BYTES;
    directions * act / f64::from(mesh.tp.max(1))
}

/// Does a group of `size` ranks `stride` apart fit in one NVLink domain of
/// `domain` GPUs? Ranks are numbered tensor-parallel first, then data,
/// then pipeline (Megatron's order), so a group spans `stride · size`
/// consecutive ranks. O(1).
pub fn fits_domain(stride: u32, size: u32, domain: u32) -> bool {
    size <= 1 || u64::from(stride) * u64::from(size) <= u64::from(domain)
}

/// One iteration of `arch` on `mesh` run by `recipe` on `hw`, alone. The
/// caller has checked the mesh ([`Mesh::check`]). O(1).
pub fn iteration_time(arch: &LlmArch, mesh: &Mesh, recipe: &Recipe, hw: &Hardware) -> IterationTime {
    let (tp, pp) = (f64::from(mesh.tp), f64::from(mesh.pp));
    let b = f64::from(recipe.micro_batch.max(1));
    let m = f64::from(mesh.microbatches.max(1));
    let (s, h, a) = (f64::from(arch.seq_len), f64::from(arch.hidden), f64::from(arch.heads));
    let tokens = m * b * s;
    // FLOPs: one GPU holds 1/pp of the layers and 1/tp of each.
    let model_flops = arch.train_flops_per_token() * tokens / (tp * pp);
    let forward = model_flops / 3.0;
    let hardware_flops = if recipe.recompute { model_flops + forward } else { model_flops };
    let matmul_ms = hardware_flops / (hw.peak_tflops * 1e12 * hw.efficiency.max(1e-6)) * 1e3;
    // Memory-bound work: activation bytes of the GPU's layers, per pass.
    let layers_here = f64::from(arch.layers) / pp;
    let per_layer = b * (10.0 * s * h + (24.0 * s * h + 5.0 * a * s * s) / tp);
    let passes = if recipe.recompute { 3.0 } else { 2.0 };
    let memory_ms = m * layers_here * per_layer * TOUCHES * passes / (hw.hbm_gbytes_per_s * 1e9) * 1e3;
    let compute_ms = matmul_ms + memory_ms;
    let v = f64::from(recipe.virtual_stages.max(1));
    let bubble_ms = compute_ms * (pp - 1.0) / (v * m);
    let traffic = mesh.traffic(arch, recipe.micro_batch);
    let rate = |inside: bool| if inside { hw.nvlink_gbps } else { hw.nic_gbps };
    let ms = |bytes: f64, gbps: f64| if bytes <= 0.0 { 0.0 } else { bytes * 8.0 / (gbps * 1e9) * 1e3 };
    let d = hw.nvlink_domain;
    let tp_ms = ms(traffic.tp, rate(fits_domain(1, mesh.tp, d)));
    // Stage neighbours are tp·dp ranks apart; Megatron sends each of a TP
    // group's ranks 1/tp of the activations and gathers them on NVLink
    // (SC'21 §4.1, scatter/gather). The critical path is an inner stage's,
    // which sends activations forward and gradients back every micro-batch.
    let pp_ms = ms(pipeline_send_bytes(arch, mesh, recipe) * m, rate(fits_domain(mesh.tp * mesh.dp, mesh.pp, d)));
    // The dense gradients on the DP ring (ranks tp apart), the experts'
    // among the dp/ep ranks holding the same shard (tp·ep apart).
    let dp_full = ms(traffic.dp - traffic.dp_experts, rate(fits_domain(mesh.tp, mesh.dp, d)))
        + ms(traffic.dp_experts, rate(fits_domain(mesh.tp * mesh.ep, mesh.dp / mesh.ep.max(1), d)));
    let backward_ms = compute_ms * 2.0 / 3.0;
    let dp_ms = dp_full - (recipe.dp_overlap.clamp(0.0, 1.0) * dp_full).min(backward_ms);
    let ep_ms = ms(traffic.ep, rate(fits_domain(mesh.tp, mesh.ep, d)));
    IterationTime { compute_ms, bubble_ms, tp_ms, pp_ms, dp_ms, ep_ms, model_flops, hardware_flops }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::llm;

    fn h100() -> Hardware {
        Hardware {
            peak_tflops: 989.0,
            efficiency: 0.5,
            hbm_gbytes_per_s: 3350.0,
            nvlink_gbps: 3600.0,
            nvlink_domain: 8,
            nic_gbps: 400.0,
        }
    }

    #[test]
    fn tensor_parallelism_inside_a_host_runs_on_nvlink_and_outside_on_the_nic() {
        let arch = llm("llama3-70b").expect("in the zoo");
        let recipe = Recipe::default();
        let inside = iteration_time(arch, &Mesh { tp: 8, dp: 2, ..Mesh::default() }, &recipe, &h100());
        let across = iteration_time(arch, &Mesh { tp: 16, dp: 1, ..Mesh::default() }, &recipe, &h100());
        // Same bytes per layer within 2·(n−1)/n; 9x slower link across hosts.
        let bytes_in = Mesh { tp: 8, dp: 2, ..Mesh::default() }.traffic(arch, 1).tp;
        assert!((inside.tp_ms - bytes_in * 8.0 / 3600e9 * 1e3).abs() < 1e-9);
        let bytes_out = Mesh { tp: 16, ..Mesh::default() }.traffic(arch, 1).tp;
        assert!((across.tp_ms - bytes_out * 8.0 / 400e9 * 1e3).abs() < 1e-9);
        assert!(across.tp_ms > 8.0 * inside.tp_ms);
    }

    #[test]
    fn the_bubble_is_the_compute_times_pp_minus_one_over_v_m() {
        let arch = llm("llama3-70b").expect("in the zoo");
        let mesh = Mesh { tp: 8, pp: 4, dp: 1, microbatches: 12, ..Mesh::default() };
        let plain = iteration_time(arch, &mesh, &Recipe::default(), &h100());
        assert!((plain.bubble_ms / plain.compute_ms - 3.0 / 12.0).abs() < 1e-12);
        let interleaved = iteration_time(arch, &mesh, &Recipe { virtual_stages: 5, ..Recipe::default() }, &h100());
        assert!((interleaved.bubble_ms / interleaved.compute_ms - 3.0 / 60.0).abs() < 1e-12);
    }

    #[test]
    fn recomputation_runs_the_forward_twice() {
        let arch = llm("gpt3-175b").expect("in the zoo");
        let mesh = Mesh { tp: 8, pp: 8, dp: 1, microbatches: 8, ..Mesh::default() };
        let t = iteration_time(arch, &mesh, &Recipe { recompute: true, ..Recipe::default() }, &h100());
        assert!((t.hardware_flops / t.model_flops - 4.0 / 3.0).abs() < 1e-12);
        // MFU counts the model's FLOPs only.
        assert!(t.model_tflops() < t.hardware_tflops());
    }

    #[test]
    fn overlap_hides_data_parallel_time_up_to_the_backward_pass() {
        let arch = llm("llama3-8b").expect("in the zoo");
        let mesh = Mesh { dp: 64, microbatches: 1, ..Mesh::default() };
        let none = iteration_time(arch, &mesh, &Recipe::default(), &h100());
        let half = iteration_time(arch, &mesh, &Recipe { dp_overlap: 0.5, ..Recipe::default() }, &h100());
        let hidden = none.dp_ms - half.dp_ms;
        assert!((hidden - (0.5 * none.dp_ms).min(none.compute_ms * 2.0 / 3.0)).abs() < 1e-9, "{hidden}");
    }

    #[test]
    fn groups_fit_a_domain_by_their_span() {
        assert!(fits_domain(1, 8, 8));
        assert!(!fits_domain(1, 16, 8));
        assert!(!fits_domain(8, 2, 8)); // DP across hosts when TP fills them
        assert!(fits_domain(8, 9, 72)); // NVL72: 9 TP groups of 8
        assert!(fits_domain(1000, 1, 8)); // a group of one never leaves its GPU
    }
}
