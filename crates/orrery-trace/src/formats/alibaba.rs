//! Alibaba PAI cluster-trace-gpu-v2023 pod list (`openb_pod_list_*.csv`):
//! `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase,
//! creation_time, deletion_time, scheduled_time` (times in s). The
//! `multigpu50` variant has only the first five columns and no times.
//!
//! CPU-only pods (`num_gpu = 0`) are skipped, not errors. Work is
//! `deletion_time − scheduled_time` seconds when present, else unknown (0 s).
//! `gpu_milli < 1000` becomes a fractional `gpu_share`. The trace names no
//! model; [`crate::mapping`] assigns one from the GPU-time.

use super::for_each_job;
use crate::diag::Parsed;
use crate::mapping::model_for;
use orrery_model::{JobSpec, Work};

/// Parses a v2023 pod list.
pub fn parse_pods(file: &str, text: &str, seed: u64) -> Parsed<JobSpec> {
    let header = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];
    let mut skipped = Vec::new();
    let mut index = 0u64;
    let mut out = for_each_job(file, text, b',', true, &header, |row| {
        let name = row.text(0)?;
        let cpu_milli = row.non_negative(1)?;
        let memory_mib = row.non_negative(2)?;
        let gpus: u32 = row.get(3, "a non-negative integer")?;
        let milli: u32 = row.get(4, "an integer 0..=1000")?;
        if milli > 1000 {
            return Err(row.at.field("gpu_milli", "an integer 0..=1000", milli));
        }
        if gpus == 0 {
            skipped.push((row.at.line, format!("{name}: CPU-only pod")));
            return Ok(None);
        }
        let times = |i: usize| -> Result<Option<f64>, crate::Diagnostic> {
            match row.text(i) {
                Ok("") | Err(_) => Ok(None),
                Ok(_) => row.non_negative(i).map(Some),
            }
        };
        let (created, deleted, scheduled) = (times(8)?, times(9)?, times(10)?);
        let duration = match (deleted, scheduled.or(created)) {
            (Some(d), Some(s)) if d >= s => d - s,
            (Some(d), Some(s)) => {
                return Err(row.at.field("deletion_time", format!("a time after scheduled_time ({s})"), d));
            }
            _ => 0.0,
        };
        let share = if milli == 0 { 1.0 } else { f64::from(milli) / 1000.0 };
        index += 1;
        let model = model_for(duration * f64::from(gpus) * share, index - 1, seed);
        let batch = orrery_model::zoo::model(model).map_or(32, |m| m.default_batch);
        let mut job = JobSpec::new(name, model, batch, gpus, Work::Seconds(duration), created.unwrap_or(0.0));
        job.gpu_share = share;
        // The pod's CPU and memory are for all its GPUs: per GPU here.
        job.cpus_per_worker = cpu_milli / 1000.0 / f64::from(gpus);
        job.memory_gib_per_worker = memory_mib / 1024.0 / f64::from(gpus);
        job.model_inferred = true;
        Ok(Some(job))
    });
    out.skipped = skipped;
    out
}
