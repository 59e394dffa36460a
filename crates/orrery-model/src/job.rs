//! Job specifications: what traces and generators produce and policies consume.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Scheduling priority (Metronome §II: the high-priority job is the rotation
/// reference and is never paused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Best effort.
    #[default]
    Low,
    /// Protected.
    High,
}

/// How much work a job does.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Work {
    /// A number of training iterations.
    Iterations(#[schemars(range(min = 1, max = MAX_ITERATIONS))] u64),
    /// Seconds of run time when running alone on its requested GPUs (traces
    /// that record durations, not iterations); 0 for a pod list without
    /// times (Alibaba's), placed but not timed.
    Seconds(#[schemars(range(min = 0, max = MAX_TIME_S))] f64),
}

/// One training job.
///
/// Serde reads it through [`JobSpec::deserialize`] (derived, `remote =
/// "Self"`) and then fills `workers` from `parallelism` when the job left it
/// out: `{"model": "llama3-70b", "parallelism": {"tp": 8, "pp": 4, "dp": 8}}`
/// is a job of 256 workers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, remote = "Self")]
pub struct JobSpec {
    /// Unique id within a workload.
    pub id: String,
    /// Zoo model name (a label only, with an explicit `shape`).
    pub model: String,
    /// Per-worker batch size (0 when not given: an error for a zoo model,
    /// not read with an explicit `shape`).
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_BATCH))]
    pub batch: u32,
    /// Number of workers (GPUs of a mesh job: `tp · pp · dp`, filled in
    /// when left out).
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_WORKERS))]
    pub workers: u32,
    /// GPUs per worker.
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = crate::topology::MAX_GPUS_PER_HOST))]
    pub gpus_per_worker: u32,
    /// Fraction of each GPU a worker needs (Alibaba v2023 `gpu_milli / 1000`);
    /// 1.0 is a whole GPU. Read by `trace inspect` (GPU hours); the
    /// simulator and the policies give each worker a whole GPU.
    #[serde(default = "whole", skip_serializing_if = "is_whole")]
    #[schemars(range(min = MIN_GPU_SHARE, max = 1.0))]
    pub gpu_share: f64,
    /// Amount of work.
    pub work: Work,
    /// Arrival time, seconds from the start of the workload.
    #[schemars(range(min = 0, max = MAX_ARRIVAL_S))]
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
    #[schemars(range(min = 0, max = MAX_CPUS_PER_WORKER))]
    pub cpus_per_worker: f64,
    /// Memory per worker, GiB (Alibaba v2023 `memory_mib / 1024`; 0 if unknown).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = MAX_MEMORY_GIB_PER_WORKER))]
    pub memory_gib_per_worker: f64,
    /// A measured iteration instead of the zoo's: with it, `model` is only a
    /// label and `batch` is not read. It drives both the circle the policies
    /// see and what the simulator executes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<ShapeSpec>,
    /// An LLM job's device mesh (`model` one of `orrery zoo --llm`): its
    /// iteration is derived from the architecture and the mesh
    /// ([`crate::mesh::shape`]), `batch` is the micro-batch in sequences.
    /// An LLM named without it is data-parallel over its workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<crate::mesh::Mesh>,
    /// The tenant (team) the job belongs to. The live service sets it from
    /// the submitter's token (a tenant's token cannot name another); an
    /// untenanted job belongs to the cluster's administrators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// `TENANT/ID`, or `ID` without a tenant ([`JobSpec::qualified_id`]).
pub fn qualified(tenant: Option<&str>, id: &str) -> String {
    match tenant {
        Some(t) => format!("{t}/{id}"),
        None => id.to_string(),
    }
}

impl Serialize for JobSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        JobSpec::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for JobSpec {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut job = JobSpec::deserialize(deserializer)?;
        if job.workers == 0
            && let Some(mesh) = job.parallelism
        {
            job.workers = mesh.gpus();
        }
        Ok(job)
    }
}

/// An iteration given explicitly (a job whose compute and communication were
/// measured, or one imported from another simulator): per iteration,
/// `compute_ms` of compute, and after it each collective in order. A
/// collective split into `layers` parts is sent layer by layer, each part
/// after its share of the compute (the compute is split evenly over all the
/// parts), as frameworks overlap gradient buckets with the backward pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShapeSpec {
    /// Compute per iteration on one worker, ms (on an unshared GPU).
    #[schemars(range(min = 0, max = MAX_TIME_S * 1e3))]
    pub compute_ms: f64,
    /// The collectives of an iteration, in order.
    #[serde(default, rename = "collective", alias = "collectives")]
    pub collectives: Vec<CollectiveSpec>,
}

/// One collective of an explicit iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectiveSpec {
    /// `ring_all_reduce`, `all_gather`, `point_to_point` or `all_to_all`.
    pub kind: crate::shape::Collective,
    /// Payload, bytes (for an all-reduce the gradient size; each worker puts
    /// `2(n−1)/n` of it on the wire).
    #[schemars(range(min = 0, max = MAX_COLLECTIVE_BYTES))]
    pub bytes: f64,
    /// Parts it is sent in (default 1).
    #[serde(default = "one")]
    #[schemars(range(min = 1, max = 10_000))]
    pub layers: u32,
    /// The workers it runs among: groups of `size` workers `stride` apart
    /// in the placement's order, all at once (a pipeline × data-parallel
    /// job's sends between stages run in `{stride = dp, size = pp}`, its
    /// all-reduces in `{stride = 1, size = dp}`, as Megatron-LM numbers
    /// ranks). Left out: every worker in one group.
    #[serde(default, skip_serializing_if = "crate::shape::Group::is_all")]
    pub group: crate::shape::Group,
}

/// The largest job orrery accepts, in workers: as many as a mesh may have
/// GPUs ([`crate::mesh::MAX_GPUS`]).
pub const MAX_WORKERS: u32 = crate::mesh::MAX_GPUS;
/// The largest all-to-all job: its collective has n·(n − 1) flows, 16.8
/// million at 4,096 workers, the most the simulator holds in memory at once.
pub const MAX_ALL_TO_ALL_WORKERS: u32 = 4_096;
/// The largest per-worker batch, samples.
pub const MAX_BATCH: u32 = 1 << 20;
/// The longest run alone, s: ten years, far past any trace.
pub const MAX_TIME_S: f64 = 10.0 * 365.25 * 86_400.0;
/// The latest arrival, s: 4·10⁹, a Unix time in 2096 (traces such as
/// Philly's give Unix times before they are made relative), with room for
/// ten-year runs after it below the simulator's clock range (u64 ns:
/// 1.8·10¹⁰ s).
pub const MAX_ARRIVAL_S: f64 = 4.0e9;
/// The most iterations a job may ask for: 10¹⁰. Gavel's trace holds jobs of
/// 3.2·10⁸; the simulator fast-forwards an undisturbed job, so 10¹⁰ costs
/// about 10⁷ events.
pub const MAX_ITERATIONS: u64 = 10_000_000_000;
/// The most CPU cores and GiB of memory a worker may ask for.
pub const MAX_CPUS_PER_WORKER: f64 = 4_096.0;
/// See [`MAX_CPUS_PER_WORKER`].
pub const MAX_MEMORY_GIB_PER_WORKER: f64 = 65_536.0;
/// The smallest share of a GPU a worker may ask for: Alibaba v2023's unit,
/// a thousandth (`gpu_milli` 1).
pub const MIN_GPU_SHARE: f64 = 1e-3;
/// The largest collective payload, bytes: a petabyte, far past the
/// gradient of any model (GPT-3 175B's in fp32 is 0.7 TB).
pub const MAX_COLLECTIVE_BYTES: f64 = 1e15;

/// A field of a job outside what orrery accepts.
#[derive(Debug, Clone, PartialEq)]
pub struct BadField {
    /// The field's name or path (as in orrery's JSON job format:
    /// `parallelism.tp`, `shape.collective[0].bytes`).
    pub field: String,
    /// What it must be.
    pub expected: String,
    /// What it was (Rust debug formatting: strings quoted).
    pub found: String,
}

impl JobSpec {
    /// Checks the fields beyond their types, against the limits above: the
    /// model is in the zoo unless the job gives its `shape`; sizes, times and
    /// counts are positive, finite and bounded; ids are non-empty and a job
    /// does not depend on itself. Every reader of jobs (traces, experiment
    /// files, the live service) refuses a job that fails it. O(fields).
    pub fn check(&self) -> Result<(), BadField> {
        let bad = |field: &str, expected: String, found: String| Err(BadField { field: field.into(), expected, found });
        let all_to_all = match &self.shape {
            Some(s) => s.collectives.iter().any(|c| c.kind == crate::shape::Collective::AllToAll),
            None => crate::zoo::model(&self.model)
                .is_some_and(|m| matches!(m.parallelism, crate::zoo::Parallelism::EmbeddingAllToAll { .. })),
        };
        let llm = crate::mesh::llm(&self.model);
        if let Some(mesh) = self.parallelism {
            let Some(arch) = llm else {
                let names: Vec<&str> = crate::mesh::LLMS.iter().map(|m| m.name).collect();
                return bad(
                    "model",
                    format!("an LLM with `parallelism`: one of {}", names.join(", ")),
                    format!("{:?}", self.model),
                );
            };
            if let Some(why) = mesh.check(arch) {
                return bad("parallelism", why, format!("{mesh:?}"));
            }
            if self.shape.is_some() {
                return bad(
                    "shape",
                    "no explicit shape with `parallelism` (the mesh derives it)".into(),
                    "a shape".into(),
                );
            }
            if u64::from(mesh.tp) * u64::from(mesh.pp) * u64::from(mesh.dp) > u64::from(MAX_WORKERS) {
                return bad("parallelism", format!("at most {MAX_WORKERS} GPUs (tp·pp·dp)"), format!("{mesh:?}"));
            }
            if u64::from(self.workers) * u64::from(self.gpus_per_worker) != u64::from(mesh.gpus()) {
                return bad(
                    "workers",
                    format!(
                        "workers × gpus_per_worker = tp·pp·dp = {} GPUs (or leave `workers` out: one per GPU)",
                        mesh.gpus()
                    ),
                    format!("{} workers of {} GPUs", self.workers, self.gpus_per_worker),
                );
            }
        }
        if let Some(Err((field, expected, found))) = self.shape.as_ref().map(|s| s.check()) {
            bad(field, expected.into(), found)
        } else if let Some(Err((field, expected, found))) = self.shape.as_ref().map(|s| s.check_groups(self.workers)) {
            bad(field, expected, found)
        } else if self.shape.is_none() && llm.is_none() && crate::zoo::model(&self.model).is_none() {
            bad(
                "model",
                "a model of the zoo (see `orrery zoo`), or an explicit `shape`".into(),
                format!("{:?}", self.model),
            )
        } else if self.id.trim().is_empty() || self.id.len() > 256 || self.id.chars().any(char::is_control) {
            let shown: String = self.id.chars().take(40).collect();
            let more =
                if self.id.chars().count() > 40 { format!("… ({} bytes)", self.id.len()) } else { String::new() };
            bad("id", "a non-empty id of at most 256 bytes, no control characters".into(), format!("{shown:?}{more}"))
        } else if self.workers == 0 {
            bad("workers", format!("1 to {MAX_WORKERS} (left out only with an LLM's `parallelism`)"), "0".into())
        } else if all_to_all && self.workers > MAX_ALL_TO_ALL_WORKERS {
            bad("workers", format!("at most {MAX_ALL_TO_ALL_WORKERS} for an all-to-all job"), self.workers.to_string())
        } else if self.shape.is_none() && llm.is_none() && self.batch == 0 {
            bad("batch", format!("1 to {MAX_BATCH} samples per worker"), self.batch.to_string())
        } else if let Err(e) = crate::ranges::check(self) {
            // Every number against its declared range (the attributes on
            // the fields above).
            Err(BadField { field: e.path, expected: e.expected, found: e.found })
        } else {
            Ok(())
        }
    }
}

impl ShapeSpec {
    /// What is wrong with it beyond each number's range (those are
    /// [`crate::ranges`]'s, checked with the job), as (field, what was
    /// expected, what was found).
    pub fn check(&self) -> Result<(), (&'static str, &'static str, String)> {
        if self.compute_ms == 0.0 && self.collectives.iter().all(|c| c.bytes == 0.0) {
            return Err(("shape", "some compute or some bytes per iteration", "neither".into()));
        }
        if let Some(c) =
            self.collectives.iter().find(|c| !c.group.is_all() && (c.group.size < 2 || c.group.stride == 0))
        {
            let found = format!("{{stride = {}, size = {}}}", c.group.stride, c.group.size);
            return Err(("shape.collective.group", "a stride of at least 1 and a size of at least 2", found));
        }
        Ok(())
    }

    /// Its groups against `workers`: each group's block (`stride · size`
    /// workers) must tile them.
    pub fn check_groups(&self, workers: u32) -> Result<(), (&'static str, String, String)> {
        for c in self.collectives.iter().filter(|c| !c.group.is_all()) {
            let block = u64::from(c.group.stride) * u64::from(c.group.size);
            if block == 0 || u64::from(workers) % block != 0 {
                return Err((
                    "shape.collective.group",
                    format!("groups whose stride × size divides the job's {workers} workers"),
                    format!("{{stride = {}, size = {}}}", c.group.stride, c.group.size),
                ));
            }
        }
        Ok(())
    }

    /// The iteration among `workers` workers on `hosts` hosts, at `gbps`
    /// between hosts (the intra-host rate on one host). O(parts).
    pub fn iteration(&self, workers: u32, hosts: u32, gbps: f64) -> crate::shape::IterationShape {
        use crate::shape::{IterationShape, Segment};
        let per_host = workers.div_ceil(hosts.max(1));
        let parts: u32 = self.collectives.iter().map(|c| c.layers.max(1)).sum();
        let compute = self.compute_ms / f64::from(parts.max(1));
        let mut segments = Vec::new();
        for c in &self.collectives {
            let layers = c.layers.max(1);
            for _ in 0..layers {
                if compute > 0.0 {
                    segments.push(Segment::Compute { ms: compute });
                }
                let (participants, hosts, group) = if c.group.is_all() {
                    (workers, hosts, crate::shape::Group::ALL)
                } else {
                    let spanned = crate::mesh::shape::hosts_spanned(c.group.stride, c.group.size, per_host);
                    (c.group.size, spanned.min(hosts), c.group)
                };
                let rate = if hosts > 1 { gbps } else { crate::zoo::INTRA_HOST_GBPS };
                segments.push(Segment::Comm {
                    collective: c.kind,
                    payload_bytes: c.bytes / f64::from(layers),
                    participants,
                    hosts,
                    gbps: rate,
                    group,
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
            parallelism: None,
            tenant: None,
        }
    }

    /// The job's id as the live service keys it: `TENANT/ID` for a
    /// tenant's job (job ids are per tenant, as Kubernetes names are per
    /// namespace), `ID` for an untenanted one.
    pub fn qualified_id(&self) -> String {
        qualified(self.tenant.as_deref(), &self.id)
    }

    /// GPUs the job may take from a host with `free` free: all of them, or
    /// one worker's with anti-affinity; a mesh's in whole TP groups
    /// ([`Self::host_unit`]), so no TP group crosses an NVLink domain.
    pub fn host_cap(&self, free: u32) -> u32 {
        let cap = if self.anti_affinity { free.min(self.gpus_per_worker.max(1)) } else { free };
        let unit = self.host_unit();
        cap / unit * unit
    }

    /// The GPUs a host gives this job in multiples of: for a mesh, whole
    /// TP groups in whole workers (the least common multiple of `tp` and
    /// `gpus_per_worker`: its ranks are numbered TP first, so a host
    /// holding whole groups keeps each on its NVLink), else 1. A TP group wider than every host
    /// never fits; experiment files refuse it. O(1).
    pub fn host_unit(&self) -> u32 {
        let gcd = |mut a: u32, mut b: u32| {
            while b != 0 {
                (a, b) = (b, a % b);
            }
            a.max(1)
        };
        // Whole TP groups in whole workers (pods of several GPUs each).
        self.parallelism.map_or(1, |m| {
            let (tp, g) = (m.tp.max(1), self.gpus_per_worker.max(1));
            tp / gcd(tp, g) * g
        })
    }

    /// Total GPUs requested.
    pub fn gpus(&self) -> u32 {
        self.workers.saturating_mul(self.gpus_per_worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mesh_takes_hosts_in_whole_tp_groups_of_whole_workers() {
        let mut j = JobSpec::new("m", "llama3-8b", 1, 16, Work::Iterations(1), 0.0);
        assert_eq!((j.host_unit(), j.host_cap(7)), (1, 7));
        j.parallelism = Some(crate::mesh::Mesh { tp: 8, dp: 2, ..crate::mesh::Mesh::default() });
        assert_eq!((j.host_unit(), j.host_cap(7), j.host_cap(8), j.host_cap(17)), (8, 0, 8, 16));
        // Pods of 2 GPUs: still whole groups of 8. TP 4 in pods of 8: pods.
        j.gpus_per_worker = 2;
        assert_eq!(j.host_unit(), 8);
        j.parallelism = Some(crate::mesh::Mesh { tp: 4, dp: 4, ..crate::mesh::Mesh::default() });
        j.gpus_per_worker = 8;
        assert_eq!(j.host_unit(), 8);
        j.gpus_per_worker = 6;
        assert_eq!(j.host_unit(), 12);
    }
    use crate::shape::{Collective, Segment};

    #[test]
    fn an_explicit_shape_splits_its_compute_over_the_layers() {
        // 100 ms of compute, a 100 MB all-reduce in 2 layers, 4 workers on 4
        // hosts at 50 Gbit/s: compute 50, send 50 MB, compute 50, send 50 MB;
        // each send puts 2·3/4 · 50 MB = 75 MB = 0.6 Gbit on the wire, 12 ms.
        let s = ShapeSpec {
            compute_ms: 100.0,
            collectives: vec![CollectiveSpec {
                kind: Collective::RingAllReduce,
                bytes: 1e8,
                layers: 2,
                group: Default::default(),
            }],
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
