//! Muri's trace (`simulator/trace-data/trace1.csv`): `job_id, num_gpu,
//! submit_time (ms), iterations, model_name, batch_size, duration (ms),
//! interval (ms), iteration_time (ms), resource_time_0..2 (ms), priority`.
//!
//! Work is `iterations`; `priority` 1 is high. Muri's `gpt2` runs data parallel
//! on one 16–32 GB GPU with batch 4, which only the 124 M-parameter GPT-2 can
//! do, so it maps to `gpt2-small`.

use super::{for_each_job, zoo_model};
use crate::diag::Parsed;
use orrery_model::{JobSpec, Priority, Work};

/// Parses a Muri trace.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let header = [
        "job_id",
        "num_gpu",
        "submit_time",
        "iterations",
        "model_name",
        "batch_size",
        "duration",
        "interval",
        "iteration_time",
        "resource_time_0",
        "resource_time_1",
        "resource_time_2",
        "priority",
    ];
    for_each_job(file, text, b',', true, &header, |row| {
        let id = row.text(0)?;
        let gpus = row.positive(1)?;
        let submit_ms = row.non_negative(2)?;
        let iterations: u64 = row.get(3, "a non-negative integer")?;
        let model = if row.text(4)? == "gpt2" { orrery_model::zoo::model("gpt2-small") } else { None };
        let model = match model {
            Some(m) => m,
            None => zoo_model(row, 4)?,
        };
        let batch = row.positive(5)?;
        let priority = match row.text(12)? {
            "1" => Priority::High,
            "0" => Priority::Low,
            other => return Err(row.at.field("priority", "0 (low) or 1 (high)", other)),
        };
        let mut job =
            JobSpec::new(format!("muri-{id}"), model.name, batch, gpus, Work::Iterations(iterations), submit_ms / 1e3);
        job.priority = priority;
        Ok(Some(job))
    })
}
