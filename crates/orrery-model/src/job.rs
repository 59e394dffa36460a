//! Job specifications: what traces and generators produce and policies consume.

use serde::{Deserialize, Serialize};

/// Scheduling priority (Metronome §II: the high-priority job is the rotation
/// reference and is never paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Best effort.
    #[default]
    Low,
    /// Protected.
    High,
}

/// How much work a job does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// A number of training iterations.
    Iterations(u64),
    /// Seconds of run time when running alone on its requested GPUs (traces
    /// that record durations, not iterations).
    Seconds(f64),
}

/// One training job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    /// Unique id within a workload.
    pub id: String,
    /// Zoo model name (a label only, with an explicit `shape`).
    pub model: String,
    /// Per-worker batch size (0 when not given: an error for a zoo model,
    /// not read with an explicit `shape`).
    #[serde(default)]
    pub batch: u32,
    /// Number of workers.
    pub workers: u32,
    /// GPUs per worker.
    #[serde(default = "one")]
    pub gpus_per_worker: u32,
    /// Fraction of each GPU a worker needs (Alibaba v2023 `gpu_milli / 1000`);
    /// 1.0 is a whole GPU. Read by `trace inspect` (GPU hours); the
    /// simulator and the policies give each worker a whole GPU.
    #[serde(default = "whole", skip_serializing_if = "is_whole")]
    pub gpu_share: f64,
    /// Amount of work.
    pub work: Work,
    /// Arrival time, seconds from the start of the workload.
    pub arrival_s: f64,
    /// Priority.
    #[serde(default)]
    pub priority: Priority,
    /// Application group (Metronome's AppGroup CRD): a label, kept in
    /// outputs; the group's dependencies are `depends_on`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_group: Option<String>,
    /// Ids of jobs that must start before this one (AppGroup dependencies,
    /// Diktyo's TopologicalSort): the drivers offer it to the policy only
    /// then, and Metronome's PreFilter and Diktyo's NetworkOverhead count
    /// the latency to their pods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// Metronome's LowComm flag: communication is negligible, skip interleaving.
    #[serde(default)]
    pub low_comm: bool,
    /// Pod anti-affinity on the job's own label: at most one worker per host
    /// (how data-parallel HPO jobs are spread over nodes in Kubernetes).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub anti_affinity: bool,
    /// Whether the model came from the trace (`false`) or from the seeded mapping.
    #[serde(default)]
    pub model_inferred: bool,
    /// CPU cores per worker (Alibaba v2023 `cpu_milli / 1000`; 0 if unknown).
    /// Only placement policies that weigh several resources read it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cpus_per_worker: f64,
    /// Memory per worker, GiB (Alibaba v2023 `memory_mib / 1024`; 0 if unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memory_gib_per_worker: f64,
    /// A measured iteration instead of the zoo's: with it, `model` is only a
    /// label and `batch` is not read. It drives both the circle the policies
    /// see and what the simulator executes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<ShapeSpec>,
}

/// An iteration given explicitly (a job whose compute and communication were
/// measured, or one imported from another simulator): per iteration,
/// `compute_ms` of compute, and after it each collective in order. A
/// collective split into `layers` parts is sent layer by layer, each part
/// after its share of the compute (the compute is split evenly over all the
/// parts), as frameworks overlap gradient buckets with the backward pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShapeSpec {
    /// Compute per iteration on one worker, ms (on an unshared GPU).
    pub compute_ms: f64,
    /// The collectives of an iteration, in order.
    #[serde(default, rename = "collective", alias = "collectives")]
    pub collectives: Vec<CollectiveSpec>,
}

/// One collective of an explicit iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSpec {
    /// `ring_all_reduce`, `all_gather`, `point_to_point` or `all_to_all`.
    pub kind: crate::shape::Collective,
    /// Payload, bytes (for an all-reduce the gradient size; each worker puts
    /// `2(n−1)/n` of it on the wire).
    pub bytes: f64,
    /// Parts it is sent in (default 1).
    #[serde(default = "one")]
    pub layers: u32,
}

impl ShapeSpec {
    /// What is wrong with it, as (field, what was expected, what was found;
    /// for a collective, its index first).
    pub fn check(&self) -> Result<(), (&'static str, &'static str, String)> {
        if !(self.compute_ms.is_finite() && self.compute_ms >= 0.0) {
            return Err(("shape.compute_ms", "a time in ms, 0 or more", format!("{:?}", self.compute_ms)));
        }
        for (i, c) in self.collectives.iter().enumerate() {
            if !(c.bytes.is_finite() && c.bytes >= 0.0) {
                return Err((
                    "shape.collective.bytes",
                    "a size in bytes, 0 or more",
                    format!("collective[{i}]: {:?}", c.bytes),
                ));
            }
            if c.layers == 0 || c.layers > 10_000 {
                return Err(("shape.collective.layers", "1 to 10,000 parts", format!("collective[{i}]: {}", c.layers)));
            }
        }
        if self.compute_ms == 0.0 && self.collectives.iter().all(|c| c.bytes == 0.0) {
            return Err(("shape", "some compute or some bytes per iteration", "neither".into()));
        }
        Ok(())
    }

    /// The iteration among `workers` workers on `hosts` hosts, at `gbps`
    /// between hosts (the intra-host rate on one host). O(parts).
    pub fn iteration(&self, workers: u32, hosts: u32, gbps: f64) -> crate::shape::IterationShape {
        use crate::shape::{IterationShape, Segment};
        let rate = if hosts > 1 { gbps } else { crate::zoo::INTRA_HOST_GBPS };
        let parts: u32 = self.collectives.iter().map(|c| c.layers.max(1)).sum();
        let compute = self.compute_ms / f64::from(parts.max(1));
        let mut segments = Vec::new();
        for c in &self.collectives {
            let layers = c.layers.max(1);
            for _ in 0..layers {
                if compute > 0.0 {
                    segments.push(Segment::Compute { ms: compute });
                }
                segments.push(Segment::Comm {
                    collective: c.kind,
                    payload_bytes: c.bytes / f64::from(layers),
                    participants: workers,
                    hosts,
                    gbps: rate,
                });
            }
        }
        if self.collectives.is_empty() {
            segments.push(Segment::Compute { ms: self.compute_ms });
        }
        IterationShape { segments }
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

fn one() -> u32 {
    1
}

fn whole() -> f64 {
    1.0
}

fn is_whole(v: &f64) -> bool {
    *v == 1.0
}

impl JobSpec {
    /// A job with the defaults for everything a trace may not say.
    pub fn new(id: impl Into<String>, model: &str, batch: u32, workers: u32, work: Work, arrival_s: f64) -> Self {
        JobSpec {
            id: id.into(),
            model: model.to_string(),
            batch,
            workers,
            gpus_per_worker: 1,
            gpu_share: 1.0,
            work,
            arrival_s,
            priority: Priority::Low,
            app_group: None,
            depends_on: Vec::new(),
            low_comm: false,
            anti_affinity: false,
            model_inferred: false,
            cpus_per_worker: 0.0,
            memory_gib_per_worker: 0.0,
            shape: None,
        }
    }

    /// GPUs the job may take from a host with `free` free: all of them, or
    /// one worker's with anti-affinity.
    pub fn host_cap(&self, free: u32) -> u32 {
        if self.anti_affinity { free.min(self.gpus_per_worker.max(1)) } else { free }
    }

    /// Total GPUs requested.
    pub fn gpus(&self) -> u32 {
        self.workers.saturating_mul(self.gpus_per_worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::{Collective, Segment};

    #[test]
    fn an_explicit_shape_splits_its_compute_over_the_layers() {
        // 100 ms of compute, a 100 MB all-reduce in 2 layers, 4 workers on 4
        // hosts at 50 Gbit/s: compute 50, send 50 MB, compute 50, send 50 MB;
        // each send puts 2·3/4 · 50 MB = 75 MB = 0.6 Gbit on the wire, 12 ms.
        let s = ShapeSpec {
            compute_ms: 100.0,
            collectives: vec![CollectiveSpec { kind: Collective::RingAllReduce, bytes: 1e8, layers: 2 }],
        };
        assert_eq!(s.check(), Ok(()));
        let it = s.iteration(4, 4, 50.0);
        assert_eq!(it.segments.len(), 4);
        assert_eq!(it.segments[0], Segment::Compute { ms: 50.0 });
        assert!((it.segments[1].duration_ms() - 12.0).abs() < 1e-9);
        assert!((it.period_ms() - 124.0).abs() < 1e-9);
        // On one host the collective runs at the intra-host rate.
        assert!(s.iteration(4, 1, 50.0).period_ms() < 110.0);
        let none = ShapeSpec { compute_ms: 0.0, collectives: Vec::new() };
        assert_eq!(none.check().map_err(|e| e.0), Err("shape"));
    }
}
