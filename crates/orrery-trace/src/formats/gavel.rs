//! Gavel's trace format (tab-separated, no header, 7 fields, as read by the
//! Sep-2019 `parse_trace`): `job_type, command, num_steps_arg, needs_data_dir,
//! total_steps, arrival_time (s), scale_factor (GPUs)`.
//!
//! The job type names the model and batch (`ResNet-50 (batch size 64)`); work is
//! `total_steps` iterations; one worker per GPU.

use super::for_each_job;
use crate::diag::Parsed;
use orrery_model::{JobSpec, Work};

/// Zoo model for a Gavel job type (without the batch-size suffix).
pub fn zoo_name(job_type: &str) -> Option<&'static str> {
    Some(match job_type {
        "ResNet-18" => "resnet18-cifar",
        "ResNet-50" => "resnet50",
        "Transformer" => "transformer",
        "LM" => "lstm-lm",
        "Recommendation" => "recommendation-ae",
        "A3C" => "a3c",
        "CycleGAN" => "cyclegan",
        _ => return None,
    })
}

/// Splits `ResNet-50 (batch size 64)` into `("ResNet-50", Some(64))`.
pub fn split_job_type(s: &str) -> (&str, Option<u32>) {
    match s.split_once(" (batch size ") {
        Some((name, rest)) => (name.trim(), rest.trim_end_matches(')').trim().parse().ok().filter(|&b| b > 0)),
        None => (s.trim(), None),
    }
}

/// Parses a Gavel trace.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let header =
        ["job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"];
    let mut index = 0u64;
    for_each_job(file, text, b'\t', false, &header, |row| {
        let raw = row.text(0)?;
        let (name, batch) = split_job_type(raw);
        // A batch that is written must be read: "(batch size abc)" is an
        // error, not the model's default.
        if batch.is_none() && raw.contains(" (batch size ") {
            return Err(row.at.field(
                "job_type",
                "a batch size that is a positive integer, as in `ResNet-50 (batch size 64)`",
                raw,
            ));
        }
        let model = zoo_name(name).ok_or_else(|| {
            row.at.field(
                "job_type",
                "a Gavel job type (ResNet-18, ResNet-50, Transformer, LM, Recommendation, A3C, CycleGAN)",
                raw,
            )
        })?;
        let steps: u64 = row.get(4, "a positive integer number of steps")?;
        let arrival = row.non_negative(5)?;
        let gpus = row.positive(6)?;
        let batch = batch.or_else(|| orrery_model::zoo::model(model).map(|m| m.default_batch)).unwrap_or(1);
        index += 1;
        Ok(Some(JobSpec::new(format!("gavel-{}", index - 1), model, batch, gpus, Work::Iterations(steps), arrival)))
    })
}
