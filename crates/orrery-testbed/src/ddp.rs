//! Real PyTorch DDP jobs on the testbed (`orrery testbed compare --ddp`):
//! their shape is measured, not taken from the zoo. One job runs alone on
//! its placement first; its rank 0's log gives the compute per iteration
//! (start to end minus the all-reduce) and the all-reduce's time alone, and
//! the script's event log its gradient's size. Every job of the scenario
//! then carries that measured shape ([`ShapeSpec`]) into the policy and the
//! simulator, so both plan with what the real job does.

use crate::compare::median;
use crate::drive::MeasuredJob;
use anyhow::{Context, Result, bail};
use orrery_model::Collective;
use orrery_model::job::{CollectiveSpec, ShapeSpec};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What the run alone measured, and the shape made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DdpShape {
    /// Iterations measured (after the warm-up).
    pub iterations: usize,
    /// Median compute per iteration, ms: everything but the all-reduce and
    /// slot delays from one iteration's end to the next (forward,
    /// backward, optimiser, padding, and the report and wait round trips
    /// to the agent), so that compute and all-reduce add up to the
    /// iteration time alone the scheduler sees.
    pub compute_ms: f64,
    /// Median all-reduce time alone, ms (the union of its buckets').
    pub comm_ms: f64,
    /// Median iteration (end to end) alone, ms.
    pub alone_ms: f64,
    /// The model's gradient, bytes (what gloo all-reduces).
    pub gradient_bytes: f64,
    /// The all-reduce payload the model is given, bytes: what takes
    /// `comm_ms` on the job's slowest link at the modelled (full-scale,
    /// derated) rate. On an exact ring it is `gradient_bytes / scale`; the
    /// ratio is reported, not assumed.
    pub model_bytes: f64,
}

impl DdpShape {
    /// The explicit iteration of a job spec: compute, then one ring
    /// all-reduce of `model_bytes`.
    pub fn spec(&self) -> ShapeSpec {
        ShapeSpec {
            compute_ms: self.compute_ms,
            collectives: vec![CollectiveSpec { kind: Collective::RingAllReduce, bytes: self.model_bytes, layers: 1 }],
        }
    }
}

/// The shape of `job` (run alone over `workers` ranks whose slowest link
/// runs at `gbps` in the model) from its measured iterations.
pub fn measured_shape(job: &MeasuredJob, gradient_bytes: f64, workers: u32, gbps: f64) -> Result<DdpShape> {
    let n_it = job.iteration_ms.len();
    if n_it < 3 || job.comm_ms.len() != n_it || job.delay_ms.len() != n_it {
        bail!("job {}: {n_it} iterations measured alone; at least 3 are needed for its shape", job.id);
    }
    let compute: Vec<f64> =
        (0..n_it).map(|i| (job.iteration_ms[i] - job.delay_ms[i] - job.comm_ms[i]).max(0.0)).collect();
    let comm_ms = median(&job.comm_ms);
    // A ring all-reduce puts 2(n−1)/n of its payload on each worker's link
    // (CASSINI §2.1), so payload = time × rate × n / (2(n−1)).
    let n = f64::from(workers.max(1));
    let model_bytes =
        if workers > 1 { comm_ms / 1e3 * gbps * 1e9 / 8.0 * n / (2.0 * (n - 1.0)) } else { gradient_bytes };
    Ok(DdpShape {
        iterations: n_it,
        compute_ms: median(&compute),
        comm_ms,
        alone_ms: median(&job.iteration_ms),
        gradient_bytes,
        model_bytes,
    })
}

/// The gradient size a DDP script logged (`"grad_bytes"` of its first
/// `"start"` event in `ddp-*.jsonl` under `logs`).
pub fn logged_gradient_bytes(logs: &Path) -> Result<f64> {
    let mut files: Vec<_> = std::fs::read_dir(logs)
        .with_context(|| format!("reading {}", logs.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("ddp-")))
        .collect();
    files.sort();
    let Some(path) = files.first() else {
        bail!("{}: no ddp-JOB.jsonl: the DDP script wrote no events (did it start?)", logs.display());
    };
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("{}: line {}: expected a JSON event", path.display(), i + 1))?;
        if v["event"] == "start" {
            return v["grad_bytes"].as_f64().filter(|b| *b > 0.0).with_context(|| {
                format!("{}: line {}: grad_bytes: expected a positive number", path.display(), i + 1)
            });
        }
    }
    bail!("{}: no start event", path.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(delays: &[f64], comms: &[f64], cycles: &[f64]) -> MeasuredJob {
        MeasuredJob {
            id: "a".into(),
            status: "finished".into(),
            hosts: vec![],
            isolated_ms: 0.0,
            iteration_ms: cycles.to_vec(),
            comm_ms: comms.to_vec(),
            duration_ms: vec![],
            start_ms: vec![],
            ready_ms: None,
            delay_ms: delays.to_vec(),
            jct_s: None,
        }
    }

    #[test]
    fn the_shape_is_the_median_compute_and_the_payload_that_takes_the_measured_all_reduce() {
        // Iterations of 602 ms end to end: 322 ms of compute and round trips,
        // 280 ms of all-reduce (one outlier of 400, one that waited 10 ms for
        // its slot). Two ranks on a 47.8 Gbit/s modelled link: a ring
        // payload of 0.2805 s × 47.8e9 / 8 × 2 / 2 bytes.
        let j = job(&[0.0, 10.0, 0.0, 0.0], &[280.0, 281.0, 400.0, 279.0], &[602.0, 613.0, 722.0, 601.0]);
        let s = measured_shape(&j, 16.8e6, 2, 47.8).expect("shape");
        assert_eq!(s.iterations, 4);
        assert!((s.compute_ms - 322.0).abs() < 1e-9, "{s:?}");
        assert!((s.comm_ms - 280.5).abs() < 1e-9, "{s:?}");
        assert!((s.model_bytes - 0.2805 * 47.8e9 / 8.0).abs() < 1.0, "{s:?}");
        // Four ranks: each link carries 2·3/4 of the payload.
        let s4 = measured_shape(&j, 16.8e6, 4, 47.8).expect("shape");
        assert!((s4.model_bytes - 0.2805 * 47.8e9 / 8.0 * 4.0 / 6.0).abs() < 1.0, "{s4:?}");
        let spec = s.spec();
        assert_eq!(spec.collectives.len(), 1);
        assert_eq!(spec.collectives[0].kind, Collective::RingAllReduce);
        assert!(measured_shape(&job(&[0.0], &[0.5], &[1.0]), 1.0, 2, 1.0).is_err());
    }

    #[test]
    fn the_gradient_size_comes_from_the_start_event_and_a_bad_log_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(logged_gradient_bytes(dir.path()).expect_err("none").to_string().contains("no ddp-JOB.jsonl"));
        let path = dir.path().join("ddp-0.jsonl");
        std::fs::write(&path, "{\"event\":\"start\",\"grad_bytes\":16793600}\n").expect("write");
        assert_eq!(logged_gradient_bytes(dir.path()).expect("bytes"), 16_793_600.0);
        std::fs::write(&path, "not json\n").expect("write");
        let e = logged_gradient_bytes(dir.path()).expect_err("bad").to_string();
        assert!(e.contains("ddp-0.jsonl: line 1"), "{e}");
    }
}
