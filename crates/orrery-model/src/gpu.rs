//! The GPU catalogue.
//!
//! Each type carries its memory and its training speed relative to a V100
//! (fp32 PyTorch training, the setting of the Gavel, Pollux and Muri
//! measurements). Speeds marked *fitted* come from a joint least-squares fit of
//! the zoo's compute model to `data/profiles` (see `zoo::calibration`); the others
//! are public vendor ratios and have not been checked against measurements here.

use serde::{Deserialize, Serialize};

/// One GPU model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuType {
    /// Canonical lower-case name, e.g. `v100`.
    pub name: &'static str,
    /// Device memory in GiB.
    pub memory_gib: f64,
    /// Training throughput relative to a V100 (a V100 is 1.0).
    pub speed_vs_v100: f64,
    /// Where `speed_vs_v100` comes from.
    pub speed_source: &'static str,
    /// Dense 16-bit (fp16/bf16) tensor-core peak, TFLOP/s, from the vendor's
    /// data sheet (SXM parts); `None` where orrery has no use for it. Model
    /// FLOPs utilisation (MFU) of LLM jobs is measured against it.
    pub peak_tflops_16bit: Option<f64>,
    /// Memory (HBM) bandwidth, GB/s, from the data sheet: the rate of the
    /// memory-bound parts of a transformer layer (normalisation, softmax,
    /// element-wise), `mesh::timing`'s roofline. `None` where unused.
    pub hbm_gbytes_per_s: Option<f64>,
    /// NVLink bandwidth per GPU and direction, Gbit/s (the NVSwitch
    /// domain's rate); 0 for GPUs that talk over PCIe only.
    pub nvlink_gbps: f64,
}

const FITTED: &str = "fitted on data/profiles (Gavel, Pollux, Muri)";
const VENDOR: &str = "vendor ratio, not calibrated here";

/// All known GPU types. Aliases are resolved by [`gpu_type`].
pub const GPU_TYPES: &[GpuType] = &[
    GpuType {
        name: "k80",
        memory_gib: 12.0,
        speed_vs_v100: 0.254,
        speed_source: FITTED,
        peak_tflops_16bit: None,
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "p100",
        memory_gib: 16.0,
        speed_vs_v100: 0.833,
        speed_source: FITTED,
        peak_tflops_16bit: None,
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "v100",
        memory_gib: 16.0,
        speed_vs_v100: 1.0,
        speed_source: "reference",
        peak_tflops_16bit: Some(125.0),
        hbm_gbytes_per_s: Some(900.0),
        nvlink_gbps: 1200.0,
    },
    GpuType {
        name: "v100-32gb",
        memory_gib: 32.0,
        speed_vs_v100: 1.0,
        speed_source: "same die as v100",
        peak_tflops_16bit: Some(125.0),
        hbm_gbytes_per_s: Some(900.0),
        nvlink_gbps: 1200.0,
    },
    GpuType {
        name: "t4",
        memory_gib: 16.0,
        speed_vs_v100: 0.735,
        speed_source: FITTED,
        peak_tflops_16bit: Some(65.0),
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "a100",
        memory_gib: 40.0,
        speed_vs_v100: 2.2,
        speed_source: VENDOR,
        peak_tflops_16bit: Some(312.0),
        hbm_gbytes_per_s: Some(1555.0),
        nvlink_gbps: 2400.0,
    },
    // The 80 GB A100 (SXM4) of NVIDIA's Selene, where Megatron-LM's SC'21
    // scaling runs were measured: the same die, faster HBM2e.
    GpuType {
        name: "a100-80gb",
        memory_gib: 80.0,
        speed_vs_v100: 2.2,
        speed_source: "same die as a100",
        peak_tflops_16bit: Some(312.0),
        hbm_gbytes_per_s: Some(2039.0),
        nvlink_gbps: 2400.0,
    },
    GpuType {
        name: "a30",
        memory_gib: 24.0,
        speed_vs_v100: 1.1,
        speed_source: VENDOR,
        peak_tflops_16bit: Some(165.0),
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    // One quarter of an A30 under Multi-Instance GPU (Metronome §IV-A).
    GpuType {
        name: "a30-mig-1g.6gb",
        memory_gib: 6.0,
        speed_vs_v100: 0.275,
        speed_source: "a30 / 4",
        peak_tflops_16bit: None,
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "a10",
        memory_gib: 24.0,
        speed_vs_v100: 0.9,
        speed_source: VENDOR,
        peak_tflops_16bit: Some(125.0),
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "a6000",
        memory_gib: 48.0,
        speed_vs_v100: 1.3,
        speed_source: VENDOR,
        peak_tflops_16bit: None,
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
    GpuType {
        name: "h100",
        memory_gib: 80.0,
        speed_vs_v100: 4.0,
        speed_source: VENDOR,
        peak_tflops_16bit: Some(989.0),
        hbm_gbytes_per_s: Some(3350.0),
        nvlink_gbps: 3600.0,
    },
    // One Blackwell GPU of a GB200 NVL72 rack (NVIDIA's NVL72 data sheet:
    // 180 PFLOP/s dense bf16 and 13.4 TB of HBM3e over 72 GPUs, NVLink 5 at
    // 1.8 TB/s per GPU both ways); its speed is the H100's times the ratio
    // of their dense peaks.
    GpuType {
        name: "gb200",
        memory_gib: 186.0,
        speed_vs_v100: 10.0,
        speed_source: VENDOR,
        peak_tflops_16bit: Some(2500.0),
        hbm_gbytes_per_s: Some(8000.0),
        nvlink_gbps: 7200.0,
    },
    // Philly's machine list gives only GPU memory; orrery assumes its 24 GB
    // cards are P40s and its 12 GB cards K80 dies (an assumption, see machines.rs).
    GpuType {
        name: "p40",
        memory_gib: 24.0,
        speed_vs_v100: 0.7,
        speed_source: VENDOR,
        peak_tflops_16bit: None,
        hbm_gbytes_per_s: None,
        nvlink_gbps: 0.0,
    },
];

/// The names of the known GPU types, for error messages.
pub fn names() -> Vec<&'static str> {
    GPU_TYPES.iter().map(|g| g.name).collect()
}

/// Looks up a GPU type by name, case-insensitively, accepting the spellings
/// used by the traces (`V100M32`, `Tesla T4`, `A100-SXM4-40GB`, ...).
pub fn gpu_type(name: &str) -> Option<&'static GpuType> {
    // A topology names its GPUs canonically: found without allocating (a
    // policy looks up every running job's GPU each round).
    if let Some(g) = GPU_TYPES.iter().find(|g| g.name == name) {
        return Some(g);
    }
    let lower = name.trim().to_ascii_lowercase();
    let canonical = match lower.as_str() {
        "v100m32" | "v100-32" | "v100_32gb" => "v100-32gb",
        "v100m16" | "v100-16gb" => "v100",
        "misc" => "p100",
        other => other
            .trim_start_matches("tesla ")
            .trim_start_matches("nvidia ")
            .split(['-', '_', ' '])
            .next()
            .unwrap_or(other),
    };
    GPU_TYPES.iter().find(|g| g.name == lower).or_else(|| GPU_TYPES.iter().find(|g| g.name == canonical))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve() {
        assert_eq!(gpu_type("V100M32").map(|g| g.name), Some("v100-32gb"));
        assert_eq!(gpu_type("Tesla T4").map(|g| g.name), Some("t4"));
        assert_eq!(gpu_type("A100-SXM4-40GB").map(|g| g.name), Some("a100"));
        assert_eq!(gpu_type("a30-mig-1g.6gb").map(|g| g.name), Some("a30-mig-1g.6gb"));
        assert!(gpu_type("tpu").is_none());
    }

    #[test]
    fn v100_is_the_reference() {
        assert_eq!(gpu_type("v100").map(|g| g.speed_vs_v100), Some(1.0));
    }
}
