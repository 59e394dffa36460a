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
}

const FITTED: &str = "fitted on data/profiles (Gavel, Pollux, Muri)";
const VENDOR: &str = "vendor ratio, not calibrated here";

/// All known GPU types. Aliases are resolved by [`gpu_type`].
pub const GPU_TYPES: &[GpuType] = &[
    GpuType { name: "k80", memory_gib: 12.0, speed_vs_v100: 0.254, speed_source: FITTED },
    GpuType { name: "p100", memory_gib: 16.0, speed_vs_v100: 0.833, speed_source: FITTED },
    GpuType { name: "v100", memory_gib: 16.0, speed_vs_v100: 1.0, speed_source: "reference" },
    GpuType { name: "v100-32gb", memory_gib: 32.0, speed_vs_v100: 1.0, speed_source: "same die as v100" },
    GpuType { name: "t4", memory_gib: 16.0, speed_vs_v100: 0.735, speed_source: FITTED },
    GpuType { name: "a100", memory_gib: 40.0, speed_vs_v100: 2.2, speed_source: VENDOR },
    GpuType { name: "a30", memory_gib: 24.0, speed_vs_v100: 1.1, speed_source: VENDOR },
    // One quarter of an A30 under Multi-Instance GPU (Metronome §IV-A).
    GpuType { name: "a30-mig-1g.6gb", memory_gib: 6.0, speed_vs_v100: 0.275, speed_source: "a30 / 4" },
    GpuType { name: "a10", memory_gib: 24.0, speed_vs_v100: 0.9, speed_source: VENDOR },
    GpuType { name: "a6000", memory_gib: 48.0, speed_vs_v100: 1.3, speed_source: VENDOR },
    GpuType { name: "h100", memory_gib: 80.0, speed_vs_v100: 4.0, speed_source: VENDOR },
    // Philly's machine list gives only GPU memory; orrery assumes its 24 GB
    // cards are P40s and its 12 GB cards K80 dies (an assumption, see machines.rs).
    GpuType { name: "p40", memory_gib: 24.0, speed_vs_v100: 0.7, speed_source: VENDOR },
];

/// The names of the known GPU types, for error messages.
pub fn names() -> Vec<&'static str> {
    GPU_TYPES.iter().map(|g| g.name).collect()
}

/// Looks up a GPU type by name, case-insensitively, accepting the spellings
/// used by the traces (`V100M32`, `Tesla T4`, `A100-SXM4-40GB`, ...).
pub fn gpu_type(name: &str) -> Option<&'static GpuType> {
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
