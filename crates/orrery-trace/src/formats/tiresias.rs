//! Tiresias' example trace (`simulator/60_job.csv`): `job_id, num_gpu,
//! submit_time (s), iterations, model_name, duration (s), interval`.
//!
//! Tiresias has no `googlenet` gradient table and falls back to `inception3`;
//! orrery's zoo has GoogLeNet, so it is kept.

use super::{for_each_job, zoo_model};
use crate::diag::Parsed;
use orrery_model::{JobSpec, Work};

/// Parses a Tiresias trace.
pub fn parse(file: &str, text: &str) -> Parsed<JobSpec> {
    let header = ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"];
    for_each_job(file, text, b',', true, &header, |row| {
        let id = row.text(0)?;
        let gpus = row.positive(1)?;
        let submit = row.non_negative(2)?;
        let iterations: u64 = row.get(3, "a non-negative integer")?;
        let model = zoo_model(row, 4)?;
        row.non_negative(5)?;
        Ok(Some(JobSpec::new(
            format!("tiresias-{id}"),
            model.name,
            model.default_batch,
            gpus,
            Work::Iterations(iterations),
            submit,
        )))
    })
}
