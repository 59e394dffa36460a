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
    /// Zoo model name.
    pub model: String,
    /// Per-worker batch size.
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
