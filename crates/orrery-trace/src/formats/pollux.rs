//! Pollux evaluation workloads (`simulator/workloads/workload-N.csv`):
//! `name, time (s), application, num_replicas, batch_size`.
//!
//! The files give no duration: Pollux runs each job until its validation metric
//! reaches a target. orrery reproduces that from Pollux's own convergence
//! profiles ([`orrery_model::convergence`]). `batch_size` is the total batch,
//! split evenly over the replicas.

use super::for_each_job;
use crate::diag::Parsed;
use orrery_model::convergence::iterations_to_converge;
use orrery_model::{JobSpec, Work};

/// Zoo model of a Pollux application.
pub fn zoo_name(app: &str) -> Option<&'static str> {
    Some(match app {
        "cifar10" => "resnet18-cifar",
        "imagenet" => "resnet50",
        "bert" => "bert",
        "deepspeech2" => "deepspeech2",
        "ncf" => "ncf",
        "yolov3" => "yolov3",
        _ => return None,
    })
}

/// Parses a Pollux workload.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let header = ["name", "time", "application", "num_replicas", "batch_size"];
    for_each_job(file, text, b',', true, &header, |row| {
        let name = row.text(0)?;
        let time = row.non_negative(1)?;
        let app = row.text(2)?;
        let model = zoo_name(app).ok_or_else(|| {
            row.at.field("application", "one of cifar10, imagenet, bert, deepspeech2, ncf, yolov3", app)
        })?;
        let replicas = row.positive(3)?;
        let total_batch = row.positive(4)?;
        let iterations = iterations_to_converge(app, total_batch).unwrap_or(1);
        let per_worker = total_batch.div_ceil(replicas);
        Ok(Some(JobSpec::new(name, model, per_worker, replicas, Work::Iterations(iterations), time)))
    })
}
