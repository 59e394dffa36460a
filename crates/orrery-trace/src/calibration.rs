//! The model zoo held against measurements.
//!
//! Every row pairs a measured value from `data/` (compiled in) with the value
//! orrery's zoo computes for the same model, GPU, batch and placement. Rows
//! have a role:
//!
//! * **anchor**: the only measurement of a model, which its constants were set
//!   from; reproduced exactly by construction and left out of the error medians;
//! * **fit**: used in the joint least-squares fit of the per-model constants,
//!   the GPU speeds and Pollux's effective network rate, but over-determined
//!   (many points per constant), so the error is informative;
//! * **check**: not used to set anything.
//!
//! The fit (log-error, soft-L1) was run once offline; its outputs are the
//! constants in `orrery_model::zoo::ZOO` and `orrery_model::gpu::GPU_TYPES`.

use crate::formats::for_each_row;
use crate::formats::gavel::{split_job_type, zoo_name as gavel_zoo};
use crate::formats::pollux::zoo_name as pollux_zoo;
use orrery_model::gpu::gpu_type;
use orrery_model::zoo::{Placement, model};
use serde::Serialize;
use std::collections::BTreeSet;

/// Effective per-worker all-reduce rate of Pollux's testbed (AWS g4dn.12xlarge,
/// nominally 50 Gbit/s; PyTorch DDP over TCP reaches far less), fitted on the
/// one-GPU-per-node placements of `placements.csv`.
pub const POLLUX_EFFECTIVE_GBPS: f64 = 12.5;

/// CASSINI's testbed NIC rate (§5.1).
pub const CASSINI_GBPS: f64 = 50.0;

/// How a row was used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Sets a constant exactly; excluded from medians.
    Anchor,
    /// Part of an over-determined fit.
    Fit,
    /// Not used to set anything.
    Check,
}

/// One measured value and orrery's value for it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    /// Data source.
    pub source: &'static str,
    /// What is measured (model, GPU, batch, placement, quantity).
    pub what: String,
    /// Measured value.
    pub measured: f64,
    /// orrery's value.
    pub orrery: f64,
    /// Unit of both values.
    pub unit: &'static str,
    /// Role.
    pub role: Role,
}

impl Point {
    /// |orrery − measured| / measured.
    pub fn rel_error(&self) -> f64 {
        (self.orrery - self.measured).abs() / self.measured.abs().max(f64::MIN_POSITIVE)
    }
}

const GAVEL_JSON: &str = crate::interference::GAVEL_THROUGHPUTS;
const MURI_CSV: &str = include_str!("../../../data/philly/muri_trace1.csv");
const TIRESIAS_TENSORS: &str = include_str!("../../../data/profiles/tiresias_model_tensors.csv");
/// Pollux's measured placements (shared with Castor's fits).
const POLLUX: &[(&str, &str)] = &crate::itermodel::POLLUX_PLACEMENTS;

/// The whole calibration table.
pub fn table() -> Vec<Point> {
    let mut t = Vec::new();
    gavel(&mut t);
    pollux(&mut t);
    muri(&mut t);
    tiresias(&mut t);
    cassini(&mut t);
    t
}

/// Median relative error over the rows whose role is in `roles`.
pub fn median_error(points: &[Point], roles: &[Role]) -> f64 {
    let mut e: Vec<f64> = points.iter().filter(|p| roles.contains(&p.role)).map(Point::rel_error).collect();
    crate::inspect::Percentiles::of(&mut e).p50
}

fn iteration_ms(name: &str, gpu: &str, batch: u32, placement: &Placement, gbps: f64) -> Option<f64> {
    Some(model(name)?.shape_on(gpu, batch, placement, gbps)?.period_ms())
}

/// Gavel `simulation_throughputs.json`: isolated steps/s at scale factor 1.
fn gavel(t: &mut Vec<Point>) {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(GAVEL_JSON) else { return };
    for gpu in ["k80", "p100", "v100"] {
        let Some(entries) = json.get(gpu).and_then(|v| v.as_object()) else { continue };
        for (key, v) in entries {
            // Keys look like "('ResNet-50 (batch size 64)', 1)".
            let inner = key.trim_start_matches("('").trim_end_matches(')');
            let Some((job_type, sf)) = inner.rsplit_once("', ") else { continue };
            let (name, batch) = split_job_type(job_type);
            let (Some(zoo), Some(batch), Some(tput)) = (gavel_zoo(name), batch, v.get("null").and_then(|x| x.as_f64()))
            else {
                continue;
            };
            if sf.trim() != "1" || tput <= 0.0 {
                continue;
            }
            if let Some(ms) = iteration_ms(zoo, gpu, batch, &Placement::spread(1), 0.0) {
                t.push(Point {
                    source: "Gavel",
                    what: format!("{zoo} b{batch} {gpu} iteration"),
                    measured: 1e3 / tput,
                    orrery: ms,
                    unit: "ms",
                    role: Role::Fit,
                });
            }
        }
    }
}

/// Pollux `placements.csv`: step time per placement on T4s.
fn pollux(t: &mut Vec<Point>) {
    for (app, text) in POLLUX {
        let Some(zoo) = pollux_zoo(app) else { continue };
        let header = ["placement", "local_bsz", "step_time", "sync_time"];
        let rows = for_each_row(app, text, b',', true, &header, |row| {
            Ok(Some((row.text(0)?.to_string(), row.positive(1)?, row.non_negative(2)?)))
        });
        let mut seen = BTreeSet::new();
        for (p, batch, step) in rows.items {
            if !seen.insert((p.clone(), batch)) {
                continue;
            }
            let Some(placement) = Placement::from_digits(&p) else { continue };
            let spread = placement.gpus_per_host.iter().all(|&g| g == 1);
            let role = match (placement.workers(), placement.hosts()) {
                (1, _) => Role::Fit,
                (_, 1) => Role::Check,
                _ if spread && placement.hosts() <= 4 => Role::Fit,
                _ => continue,
            };
            if let Some(ms) = iteration_ms(zoo, "t4", batch, &placement, POLLUX_EFFECTIVE_GBPS) {
                t.push(Point {
                    source: "Pollux",
                    what: format!("{zoo} b{batch} t4 placement {p} step"),
                    measured: step * 1e3,
                    orrery: ms,
                    unit: "ms",
                    role,
                });
            }
        }
    }
}

/// Muri trace1: per-iteration GPU time (`resource_time_1`), V100 assumed.
fn muri(t: &mut Vec<Point>) {
    let header = ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "batch_size"];
    let rows = for_each_row("muri_trace1.csv", MURI_CSV, b',', true, &header, |row| {
        Ok(Some((row.positive(1)?, row.text(4)?.to_string(), row.positive(5)?, row.non_negative(10)?)))
    });
    let mut seen = BTreeSet::new();
    for (gpus, name, batch, gpu_ms) in rows.items {
        // As the Muri reader maps it: only GPT-2 small fits Muri's set-up.
        let zoo = if name == "gpt2" { "gpt2-small" } else { name.as_str() };
        let Some(m) = model(zoo) else { continue };
        if !seen.insert((m.name, gpus, batch)) {
            continue;
        }
        let anchored =
            matches!(m.cost, orrery_model::zoo::Cost::Calibrated { source, .. } if source.starts_with("Muri"));
        let role = if gpus == 1 && anchored { Role::Anchor } else { Role::Check };
        if let Some(g) = gpu_type("v100") {
            t.push(Point {
                source: "Muri",
                what: format!("{} b{batch} v100 x{gpus} GPU time", m.name),
                measured: gpu_ms,
                orrery: m.compute_ms(g, batch),
                unit: "ms",
                role,
            });
        }
    }
}

/// Tiresias' gradient tensor sizes against 4 bytes per parameter.
fn tiresias(t: &mut Vec<Point>) {
    for line in TIRESIAS_TENSORS.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (Some(name), Some(Ok(mb))) = (f.first(), f.get(2).map(|s| s.parse::<f64>())) else { continue };
        if let Some(m) = model(name) {
            t.push(Point {
                source: "Tiresias",
                what: format!("{} gradient size", m.name),
                measured: mb,
                orrery: m.gradient_bytes() / (1u64 << 20) as f64,
                unit: "MiB",
                role: Role::Check,
            });
        }
    }
}

/// CASSINI Fig. 3: VGG16's Up (all-reduce) phase lasts 255 − 141 = 114 ms on
/// 50 Gbps NICs. The figure does not give the worker count; a 3-worker ring is assumed.
fn cassini(t: &mut Vec<Point>) {
    if let Some(s) = model("vgg16").and_then(|m| m.shape_on("a100", 64, &Placement::spread(3), CASSINI_GBPS)) {
        t.push(Point {
            source: "CASSINI Fig. 3",
            what: "vgg16 a100 x3 (assumed) all-reduce phase".into(),
            measured: 114.0,
            orrery: s.network_ms(),
            unit: "ms",
            role: Role::Check,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_median_error_is_within_15_percent() {
        let t = table();
        let fitted = median_error(&t, &[Role::Fit, Role::Check]);
        let checks = median_error(&t, &[Role::Fit, Role::Check]);
        let n = t.iter().filter(|p| p.role != Role::Anchor).count();
        assert!(n > 150, "only {n} points with measured data");
        assert!(fitted <= 0.15, "median error {fitted:.3} over {n} points");
        // Anchors reproduce their measurement exactly.
        for p in t.iter().filter(|p| p.role == Role::Anchor) {
            assert!(p.rel_error() < 1e-9, "{p:?}");
        }
        assert!(checks.is_finite());
    }

    #[test]
    fn every_source_contributes() {
        let t = table();
        for s in ["Gavel", "Pollux", "Muri", "Tiresias", "CASSINI Fig. 3"] {
            assert!(t.iter().any(|p| p.source == s), "{s}");
        }
    }

    #[test]
    fn vgg_gradients_match_tiresias_within_5_percent() {
        // Tiresias lists every VGG tensor, so 4 bytes per parameter must agree.
        for p in table().iter().filter(|p| p.source == "Tiresias" && p.what.starts_with("vgg")) {
            assert!(p.rel_error() < 0.05, "{p:?}");
        }
    }
}
