//! orrery on Kubernetes (Metronome §III-D, Fig. 3): the four custom resources
//! ([`crd`]), a kube-scheduler extender that gives kube-scheduler the policy's
//! placements and binds each job's pods all together or not at all
//! ([`extender`]), and a controller that keeps the service's view of jobs
//! current and writes its decisions back to the cluster ([`controller`]).
//!
//! One process (`orrery k8s run`, the Deployment in `deploy/`) holds the live
//! service's core ([`orrery_serve`]) with the chosen policy, its HTTP API for
//! the node agents, the extender and the controller. The node agents run as a
//! DaemonSet (`orrery agent --node $(NODE_NAME)`) and enforce shifts, paces and
//! throttles exactly as outside Kubernetes; training containers reach their
//! node's agent through a hostPath socket.
//!
//! ## How a training job is written
//!
//! A job is a gang of pods sharing the label `orrery.io/job` in one namespace,
//! one pod per worker. Its pods carry:
//!
//! | where | key | meaning |
//! |---|---|---|
//! | label | `orrery.io/job` | the job (gang) name |
//! | label | `orrery.io/priority` | `high` or `low` (Metronome's two priorities; default low) |
//! | label | `low_comm` | `"true"`: communication is negligible (Metronome's LowComm) |
//! | annotation | `orrery.io/model` | a model of orrery's zoo (`orrery zoo`) |
//! | annotation | `orrery.io/batch` | per-worker batch size |
//! | annotation | `orrery.io/workers` | pods in the gang |
//! | annotation | `orrery.io/iterations` | training iterations |
//! | resources | `nvidia.com/gpu` | GPUs per pod (at least 1 is counted) |
//!
//! On binding, orrery adds `orrery.io/job-id` (the service's job id),
//! `orrery.io/rank` (the pod's place in the ring), which the training
//! container reads through the downward API, and `orrery.io/epoch` (the
//! placement it was bound in, so a restarted controller knows it); it mirrors
//! the decisions in force into `orrery.io/decisions`.

pub mod controller;
pub mod crd;
pub mod extender;
pub mod fabric;
pub mod run;

use k8s_openapi::api::core::v1::Pod;
use orrery_model::{JobSpec, Priority, Work};

/// The gang label.
pub const JOB_LABEL: &str = "orrery.io/job";
/// Priority label.
pub const PRIORITY_LABEL: &str = "orrery.io/priority";
/// Metronome's LowComm label (`Pod.spec.labels.low_comm`, Table II).
pub const LOW_COMM_LABEL: &str = "low_comm";
/// Model annotation.
pub const MODEL_ANNOTATION: &str = "orrery.io/model";
/// Batch annotation.
pub const BATCH_ANNOTATION: &str = "orrery.io/batch";
/// Gang size annotation.
pub const WORKERS_ANNOTATION: &str = "orrery.io/workers";
/// Iterations annotation.
pub const ITERATIONS_ANNOTATION: &str = "orrery.io/iterations";
/// An LLM job's device mesh, JSON: `{"tp": 8, "pp": 4, "dp": 8,
/// "microbatches": 16}` (`orrery.io/model` one of `orrery zoo --llm`); the
/// job's pods together hold `tp·pp·dp` GPUs.
pub const PARALLELISM_ANNOTATION: &str = "orrery.io/parallelism";
/// Written on bind: the service's job id.
pub const JOB_ID_ANNOTATION: &str = "orrery.io/job-id";
/// Written on bind: the pod's rank.
pub const RANK_ANNOTATION: &str = "orrery.io/rank";
/// Written on bind: the placement epoch the pod was bound in.
pub const EPOCH_ANNOTATION: &str = "orrery.io/epoch";
/// Written by the controller: the decisions in force, as JSON.
pub const DECISIONS_ANNOTATION: &str = "orrery.io/decisions";

/// A pod's identity.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

/// Why a pod does not describe a job: the label or annotation and what it must be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("pod {pod}: {key}: expected {expected}, found {found}")]
pub struct BadPod {
    /// namespace/name.
    pub pod: String,
    /// Label or annotation key.
    pub key: String,
    /// What it must be.
    pub expected: String,
    /// What it was.
    pub found: String,
}

/// The pod's namespace and name.
pub fn pod_ref(pod: &Pod) -> PodRef {
    PodRef {
        namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// The job key (`namespace/job`) of an orrery pod; None for other pods.
pub fn job_key(pod: &Pod) -> Option<String> {
    let job = pod.metadata.labels.as_ref()?.get(JOB_LABEL)?;
    Some(format!("{}/{job}", pod.metadata.namespace.as_deref().unwrap_or("default")))
}

/// The job a pod belongs to, from its labels, annotations and GPU limits;
/// its id is the job key. `arrival_s` is left 0 (the service stamps it).
pub fn job_spec(pod: &Pod) -> Result<Option<JobSpec>, BadPod> {
    let Some(key) = job_key(pod) else { return Ok(None) };
    let r = pod_ref(pod);
    let bad = |key: &str, expected: &str, found: String| BadPod {
        pod: format!("{}/{}", r.namespace, r.name),
        key: key.into(),
        expected: expected.into(),
        found,
    };
    let empty = Default::default();
    let annotations = pod.metadata.annotations.as_ref().unwrap_or(&empty);
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let get = |k: &str| annotations.get(k).map(|v| v.trim().to_string());
    let model = get(MODEL_ANNOTATION).ok_or_else(|| bad(MODEL_ANNOTATION, "a model of the zoo", "nothing".into()))?;
    if orrery_model::zoo::model(&model).is_none() && orrery_model::mesh::llm(&model).is_none() {
        return Err(bad(
            MODEL_ANNOTATION,
            "a model of the zoo (see `orrery zoo` and `orrery zoo --llm`)",
            format!("{model:?}"),
        ));
    }
    let parallelism = match get(PARALLELISM_ANNOTATION) {
        None => None,
        Some(text) => Some(serde_json::from_str::<orrery_model::mesh::Mesh>(&text).map_err(|e| {
            bad(
                PARALLELISM_ANNOTATION,
                &format!("a mesh as JSON, {{\"tp\": 8, \"pp\": 4, \"dp\": 8}} ({e})"),
                text.clone(),
            )
        })?),
    };
    let number = |k: &str, max: u64| -> Result<u64, BadPod> {
        let v = get(k).ok_or_else(|| bad(k, &format!("an integer from 1 to {max}"), "nothing".into()))?;
        v.parse::<u64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| bad(k, &format!("an integer from 1 to {max}"), format!("{v:?}")))
    };
    let batch = number(BATCH_ANNOTATION, 1 << 20)? as u32;
    let workers = number(WORKERS_ANNOTATION, 1 << 16)? as u32;
    let iterations = number(ITERATIONS_ANNOTATION, 1 << 40)?;
    let priority = match labels.get(PRIORITY_LABEL).map(|s| s.trim().to_ascii_lowercase()) {
        None => Priority::Low,
        Some(p) if p == "low" => Priority::Low,
        Some(p) if p == "high" => Priority::High,
        Some(p) => return Err(bad(PRIORITY_LABEL, "high or low", format!("{p:?}"))),
    };
    let low_comm = match labels.get(LOW_COMM_LABEL).map(|s| s.trim().to_ascii_lowercase()) {
        None => false,
        Some(v) if v == "true" => true,
        Some(v) if v == "false" => false,
        Some(v) => return Err(bad(LOW_COMM_LABEL, "true or false", format!("{v:?}"))),
    };
    let gpus: u32 = pod
        .spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get(fabric::GPU_RESOURCE))
        .filter_map(|q| q.0.trim().parse::<u32>().ok())
        .sum();
    let mut spec = JobSpec::new(key, &model, batch, workers, Work::Iterations(iterations), 0.0);
    spec.gpus_per_worker = gpus.max(1);
    spec.parallelism = parallelism;
    if let Some(mesh) = parallelism {
        // The pods hold the mesh's ranks, `gpus` each.
        if u64::from(workers) * u64::from(spec.gpus_per_worker) != u64::from(mesh.gpus()) {
            return Err(bad(
                WORKERS_ANNOTATION,
                &format!("pods × GPUs per pod = tp·pp·dp = {}", mesh.gpus()),
                format!("{workers} pods of {} GPUs", spec.gpus_per_worker),
            ));
        }
    }
    spec.priority = priority;
    spec.low_comm = low_comm;
    Ok(Some(spec))
}

#[cfg(test)]
pub(crate) mod testing {
    use k8s_openapi::api::core::v1::Pod;

    /// A pod of job `job` as a training operator would write it.
    pub fn pod(name: &str, job: &str, workers: u32, gpus: u32) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": name, "namespace": "ml", "uid": format!("uid-{name}"),
                "labels": {"orrery.io/job": job, "orrery.io/priority": "high"},
                "annotations": {
                    "orrery.io/model": "vgg19", "orrery.io/batch": "32",
                    "orrery.io/workers": workers.to_string(), "orrery.io/iterations": "500"
                }
            },
            "spec": {"containers": [{"name": "train", "image": "trainer",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]}
        }))
        .expect("pod json")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_describes_its_job() {
        let p = testing::pod("vgg-0", "vgg", 4, 2);
        let spec = job_spec(&p).expect("valid").expect("orrery pod");
        assert_eq!(spec.id, "ml/vgg");
        assert_eq!((spec.workers, spec.gpus_per_worker, spec.batch), (4, 2, 32));
        assert_eq!(spec.work, Work::Iterations(500));
        assert_eq!(spec.priority, Priority::High);
    }

    #[test]
    fn a_pod_of_an_llm_job_gives_its_mesh() {
        let mut p = testing::pod("llama-0", "llama", 8, 8);
        let a = p.metadata.annotations.as_mut().expect("annotations");
        a.insert(MODEL_ANNOTATION.into(), "llama3-70b".into());
        a.insert(PARALLELISM_ANNOTATION.into(), r#"{"tp": 8, "pp": 4, "dp": 2, "microbatches": 16}"#.into());
        let spec = job_spec(&p).expect("valid").expect("orrery pod");
        assert_eq!(spec.parallelism.map(|m| m.gpus()), Some(64));
        assert_eq!(spec.check(), Ok(()));
        // Four pods of 8 GPUs cannot hold 64 ranks.
        p.metadata.annotations.as_mut().expect("annotations").insert(WORKERS_ANNOTATION.into(), "4".into());
        let err = job_spec(&p).expect_err("too few GPUs");
        assert_eq!(err.key, WORKERS_ANNOTATION);
        p.metadata.annotations.as_mut().expect("annotations").insert(PARALLELISM_ANNOTATION.into(), "{tp: 8}".into());
        assert_eq!(job_spec(&p).expect_err("not JSON").key, PARALLELISM_ANNOTATION);
    }

    #[test]
    fn a_bad_annotation_is_named() {
        let mut p = testing::pod("vgg-0", "vgg", 4, 1);
        p.metadata.annotations.as_mut().expect("annotations").insert(WORKERS_ANNOTATION.into(), "-2".into());
        let e = job_spec(&p).expect_err("negative workers");
        assert_eq!(e.to_string(), "pod ml/vgg-0: orrery.io/workers: expected an integer from 1 to 65536, found \"-2\"");
        p.metadata.annotations.as_mut().expect("annotations").insert(MODEL_ANNOTATION.into(), "gpt-9".into());
        assert_eq!(job_spec(&p).expect_err("unknown model").key, MODEL_ANNOTATION);
        p.metadata.labels = None;
        assert_eq!(job_spec(&p), Ok(None), "a pod without orrery.io/job is not orrery's");
    }
}
