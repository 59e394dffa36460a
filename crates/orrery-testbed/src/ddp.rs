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
use orrery_model::shape::Group;
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
            collectives: vec![CollectiveSpec {
                kind: Collective::RingAllReduce,
                bytes: self.model_bytes,
                layers: 1,
                group: Default::default(),
            }],
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

/// The first `"start"` event a DDP script logged (`ddp-*.jsonl` under
/// `logs`): its gradient, world and, for a pipeline, its mesh.
fn logged_start(logs: &Path) -> Result<(std::path::PathBuf, usize, serde_json::Value)> {
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
            return Ok((path.clone(), i + 1, v));
        }
    }
    bail!("{}: no start event", path.display())
}

/// The gradient size a DDP script logged (`"grad_bytes"` of its first
/// `"start"` event in `ddp-*.jsonl` under `logs`).
pub fn logged_gradient_bytes(logs: &Path) -> Result<f64> {
    let (path, line, v) = logged_start(logs)?;
    v["grad_bytes"]
        .as_f64()
        .filter(|b| *b > 0.0)
        .with_context(|| format!("{}: line {line}: grad_bytes: expected a positive number", path.display()))
}

/// A pipeline × data-parallel job's mesh as `python/examples/pp_dp_train.py`
/// logs it in its start event (`"pp" > 1`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PipelineMesh {
    /// Pipeline stages.
    pub pp: u32,
    /// Replicas of each stage.
    pub dp: u32,
    /// Micro-batches per iteration (1F1B).
    pub microbatches: u32,
    /// One micro-batch's activations (and their gradient), bytes.
    pub activation_bytes: f64,
    /// One stage's gradient, bytes.
    pub grad_bytes: f64,
    /// A micro-batch's forward on one stage, ms (the script holds it).
    pub forward_ms: f64,
    /// A micro-batch's backward on one stage, ms.
    pub backward_ms: f64,
}

/// The pipeline mesh a script logged, or None for a plain DDP script.
pub fn logged_pipeline(logs: &Path) -> Result<Option<PipelineMesh>> {
    let (path, line, v) = logged_start(logs)?;
    if v["pp"].as_u64().unwrap_or(1) <= 1 {
        return Ok(None);
    }
    let field = |name: &str| {
        v[name]
            .as_f64()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .with_context(|| format!("{}: line {line}: {name}: expected a number ≥ 0", path.display()))
    };
    let count = |name: &str| -> Result<u32> {
        let x = field(name)?;
        if x < 1.0 || x.fract() != 0.0 || x > f64::from(u32::MAX) {
            bail!("{}: line {line}: {name}: expected a whole number ≥ 1, found {x}", path.display());
        }
        Ok(x as u32)
    };
    Ok(Some(PipelineMesh {
        pp: count("pp")?,
        dp: count("dp")?,
        microbatches: count("microbatches")?,
        activation_bytes: field("activation_bytes")?,
        grad_bytes: field("grad_bytes")?,
        forward_ms: field("forward_ms")?,
        backward_ms: field("backward_ms")?,
    }))
}

impl PipelineMesh {
    /// The model of one iteration, from the mesh's structure alone (no
    /// measured time but the held forward and backward): 1F1B's
    /// `m + pp − 1` compute slots of a forward and a backward each (the
    /// `pp − 1` are the bubble, (pp − 1)/m of the compute: Narayanan et
    /// al., SC'21, §2.2), with an activation exchanged with the
    /// neighbouring stages after each (both directions at once, Megatron's
    /// paired send and receive); then each stage's gradient all-reduced on
    /// a ring of its `dp` replicas. Bytes are at full scale: the testbed's
    /// links run at `scale` of the modelled rates.
    pub fn spec(&self, scale: f64) -> ShapeSpec {
        let slots = self.microbatches + self.pp - 1;
        let mut collectives = vec![CollectiveSpec {
            kind: Collective::PointToPoint,
            bytes: self.activation_bytes * f64::from(slots) / scale,
            layers: slots,
            group: Group { stride: self.dp, size: self.pp },
        }];
        if self.dp > 1 {
            collectives.push(CollectiveSpec {
                kind: Collective::RingAllReduce,
                bytes: self.grad_bytes / scale,
                layers: 1,
                group: Group { stride: 1, size: self.dp },
            });
        }
        ShapeSpec { compute_ms: f64::from(slots) * (self.forward_ms + self.backward_ms), collectives }
    }
}

/// One rank's phases per iteration, medians over the iterations after the
/// warm-up (`phases-JOB-RANK.csv` of `pp_dp_train.py`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Iterations measured.
    pub iterations: usize,
    /// Forward and backward, ms.
    pub compute_ms: f64,
    /// Blocked on the pipeline's sends and receives (transfers and the
    /// bubble's waits), ms.
    pub p2p_ms: f64,
    /// The stage's all-reduce, ms.
    pub dp_ms: f64,
    /// The iteration, start to end, ms.
    pub duration_ms: f64,
}

/// The medians of `path` (a phases CSV) after `warmup` iterations.
pub fn phases(path: &Path, warmup: usize) -> Result<Phases> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut cols: [Vec<f64>; 4] = Default::default();
    for (i, line) in text.lines().enumerate().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 9 {
            bail!("{}: line {}: expected 9 fields (job … duration_ms), found {}", path.display(), i + 1, f.len());
        }
        for (k, col) in cols.iter_mut().enumerate() {
            let x: f64 =
                f[5 + k].trim().parse().ok().filter(|x: &f64| x.is_finite() && *x >= 0.0).with_context(|| {
                    format!(
                        "{}: line {}: field {}: expected a time ≥ 0 in ms, found {:?}",
                        path.display(),
                        i + 1,
                        6 + k,
                        f[5 + k]
                    )
                })?;
            col.push(x);
        }
    }
    let n = cols[0].len();
    if n <= warmup + 2 {
        bail!("{}: {n} iterations; more than {} are needed (warm-up {warmup})", path.display(), warmup + 2);
    }
    let med = |c: &Vec<f64>| median(&c[warmup..]);
    Ok(Phases {
        iterations: n - warmup,
        compute_ms: med(&cols[0]),
        p2p_ms: med(&cols[1]),
        dp_ms: med(&cols[2]),
        duration_ms: med(&cols[3]),
    })
}

/// A pipeline job's run alone against its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineShape {
    /// The mesh the script logged.
    pub mesh: PipelineMesh,
    /// The model's iteration (what the policies and the simulator see).
    pub spec: ShapeSpec,
    /// Rank 0's phases measured alone (the first stage's first replica).
    pub first_stage: Phases,
    /// The last stage's first replica's.
    pub last_stage: Phases,
    /// Median iteration alone (end to end, agent round trips included), ms.
    pub measured_ms: f64,
    /// The simulator's iteration alone with [`Self::spec`] on the same
    /// placement, ms.
    pub predicted_ms: f64,
}

impl PipelineShape {
    /// Measured over predicted, minus one.
    pub fn error(&self) -> f64 {
        self.measured_ms / self.predicted_ms - 1.0
    }
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

    #[test]
    fn a_pipeline_scripts_mesh_becomes_1f1b_slots_then_each_stages_ring() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("ddp-0.jsonl");
        std::fs::write(&path, "{\"event\":\"start\",\"grad_bytes\":16793600}\n").expect("write");
        assert_eq!(logged_pipeline(dir.path()).expect("plain DDP"), None);
        // pp_dp_train.py's defaults: pp 2 × dp 2, 8 micro-batches of 4 ×
        // 1024 fp32 activations, a stage of 2 × (1024² + 1024) parameters.
        std::fs::write(
            &path,
            "{\"event\":\"start\",\"grad_bytes\":8396800,\"pp\":2,\"dp\":2,\"microbatches\":8,\
             \"activation_bytes\":16384,\"forward_ms\":30,\"backward_ms\":60}\n",
        )
        .expect("write");
        let mesh = logged_pipeline(dir.path()).expect("read").expect("a pipeline");
        let spec = mesh.spec(0.01);
        // 1F1B: m + pp − 1 = 9 slots of 90 ms (the bubble is (pp − 1)/m of
        // the compute); an activation exchanged after each slot, at full scale.
        assert_eq!(spec.compute_ms, 9.0 * 90.0);
        assert_eq!(spec.collectives.len(), 2);
        let (p2p, ring) = (&spec.collectives[0], &spec.collectives[1]);
        assert_eq!((p2p.kind, p2p.layers, p2p.group), (Collective::PointToPoint, 9, Group { stride: 2, size: 2 }));
        assert!((p2p.bytes - 9.0 * 16384.0 / 0.01).abs() < 1e-3, "{p2p:?}");
        assert_eq!((ring.kind, ring.group), (Collective::RingAllReduce, Group { stride: 1, size: 2 }));
        assert!((ring.bytes - 8396800.0 / 0.01).abs() < 1e-3, "{ring:?}");
        std::fs::write(&path, "{\"event\":\"start\",\"grad_bytes\":1,\"pp\":2,\"dp\":0.5}\n").expect("write");
        let e = logged_pipeline(dir.path()).expect_err("dp 0.5").to_string();
        assert!(e.contains("line 1: dp: expected a whole number"), "{e}");
    }

    #[test]
    fn phases_are_medians_after_the_warm_up_and_a_bad_row_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("phases-0-0.csv");
        let mut text = String::from("job,rank,stage,replica,iteration,compute_ms,p2p_ms,dp_ms,duration_ms\n");
        text += "0,0,0,0,1,900,500,900,2300\n"; // the warm-up: left out
        for (i, dp) in [260.0, 250.0, 270.0, 400.0].iter().enumerate() {
            text += &format!("0,0,0,0,{},810,100,{dp},{}\n", i + 2, 910.0 + dp);
        }
        std::fs::write(&path, &text).expect("write");
        let p = phases(&path, 1).expect("phases");
        assert_eq!((p.iterations, p.compute_ms, p.p2p_ms), (4, 810.0, 100.0));
        assert_eq!((p.dp_ms, p.duration_ms), (265.0, 1175.0));
        assert!(phases(&path, 3).expect_err("too few").to_string().contains("more than 5 are needed"));
        std::fs::write(&path, text + "0,0,0,0,6,810,-1,250,1160\n").expect("write");
        let e = phases(&path, 1).expect_err("negative").to_string();
        assert!(e.contains("phases-0-0.csv: line 7: field 7"), "{e}");
    }
}
