//! Philly jobs as published in the Pollux artifact:
//! `timestamp,duration,num_gpus,gpu_time,cluster` (82,247 rows, not sorted).
//!
//! Arrival = timestamp − earliest timestamp; work = `duration` seconds; one
//! worker per GPU; the model comes from [`crate::mapping`]. Jobs are returned
//! sorted by arrival (ties in file order).

use super::for_each_job;
use crate::diag::Parsed;
use crate::mapping::model_for;
use chrono::NaiveDateTime;
use orrery_model::{JobSpec, Work};

/// Parses the Philly CSV.
pub fn parse(file: &str, text: &str, seed: u64) -> Parsed<JobSpec> {
    let header = ["timestamp", "duration", "num_gpus", "gpu_time", "cluster"];
    let mut index = 0u64;
    let mut out = for_each_job(file, text, b',', true, &header, |row| {
        let raw = row.text(0)?;
        let t = NaiveDateTime::parse_from_str(raw, "%Y-%m-%d %H:%M:%S")
            .map_err(|_| row.at.field("timestamp", "a time as YYYY-MM-DD HH:MM:SS", raw))?;
        let duration = row.non_negative(1)?;
        let gpus = row.positive(2)?;
        let cluster = row.text(4)?;
        index += 1;
        let model = model_for(duration * f64::from(gpus), index - 1, seed);
        let spec = orrery_model::zoo::model(model).map_or(32, |m| m.default_batch);
        let mut job = JobSpec::new(
            format!("philly-{}", index - 1),
            model,
            spec,
            gpus,
            Work::Seconds(duration),
            t.and_utc().timestamp() as f64,
        );
        job.model_inferred = true;
        job.app_group = (!cluster.is_empty()).then(|| cluster.to_string());
        Ok(Some(job))
    });
    let t0 = out.items.iter().map(|j| j.arrival_s).fold(f64::INFINITY, f64::min);
    for j in &mut out.items {
        j.arrival_s -= t0;
    }
    out.items.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
    out
}
