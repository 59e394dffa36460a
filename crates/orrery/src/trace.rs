//! `orrery trace`.

use crate::Timings;
use orrery_trace::generate::ShapeContext;
use orrery_trace::{Format, inspect};
use std::path::PathBuf;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Read a trace, report bad rows, and summarise it: job count, GPU-demand
    /// histogram, arrival rate, duration percentiles, model mix.
    ///
    /// Formats (sniffed from the header when --format is not given): philly,
    /// gavel, muri, pollux, tiresias, alibaba-v2023, jsonl. Jobs without a model
    /// name get one from Pollux's GPU-time buckets, drawn with --seed.
    /// Iteration-based jobs are timed with the zoo on --gpu hosts of
    /// --gpus-per-host GPUs and --gbps links. Exits with 1 if any row was bad.
    Inspect {
        /// Trace file.
        file: PathBuf,
        /// Format (default: sniffed).
        #[arg(long)]
        format: Option<Format>,
        /// Seed of the model mapping.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// GPU type used to estimate durations of iteration-based jobs.
        #[arg(long, default_value = "v100")]
        gpu: String,
        /// GPUs per host used to estimate durations.
        #[arg(long, default_value_t = 8)]
        gpus_per_host: u32,
        /// Link rate (Gbit/s) used to estimate durations.
        #[arg(long, default_value_t = 100.0)]
        gbps: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Write the accepted jobs as orrery JSON lines to this file.
        #[arg(long)]
        to_jsonl: Option<PathBuf>,
    },
}

/// How many bad rows are printed before a count.
const SHOW_ERRORS: usize = 20;

pub fn run(cmd: &Command, timings: &mut Timings) -> anyhow::Result<()> {
    let Command::Inspect { file, format, seed, gpu, gpus_per_host, gbps, json, to_jsonl } = cmd;
    if orrery_model::gpu::gpu_type(gpu).is_none() {
        anyhow::bail!("unknown GPU type {gpu:?}; run `orrery zoo --help`");
    }
    let parsed = timings.phase("read", || orrery_trace::read_file(file, *format, *seed));
    let ctx = ShapeContext { gpu: gpu.clone(), gpus_per_host: *gpus_per_host, link_gbps: *gbps };
    let s = timings.phase("summarise", || inspect::summarize(&parsed.items, &ctx));
    for e in parsed.errors.iter().take(SHOW_ERRORS) {
        eprintln!("{e}");
    }
    if parsed.errors.len() > SHOW_ERRORS {
        eprintln!("... and {} more bad rows", parsed.errors.len() - SHOW_ERRORS);
    }
    let fmt = format.or_else(|| std::fs::read_to_string(file).ok().and_then(|t| Format::sniff(&t)));
    if *json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "file": file, "format": fmt.map(Format::name), "summary": s,
                "bad_rows": parsed.errors.len(), "skipped_rows": parsed.skipped.len(),
            }))?
        );
    } else {
        print_summary(file, fmt, &s, parsed.errors.len(), parsed.skipped.len());
    }
    if let Some(out) = to_jsonl {
        std::fs::write(out, orrery_trace::formats::jsonl::to_string(&parsed.items))?;
        eprintln!("wrote {} jobs to {}", parsed.items.len(), out.display());
    }
    if !parsed.errors.is_empty() {
        anyhow::bail!("{}: {} bad rows (the {} good ones are summarised above)", file.display(), parsed.errors.len(), s.jobs);
    }
    Ok(())
}

fn print_summary(file: &std::path::Path, fmt: Option<Format>, s: &inspect::Summary, bad: usize, skipped: usize) {
    println!("{} ({})", file.display(), fmt.map_or("unknown format", Format::name));
    println!("  jobs              {}", s.jobs);
    if bad > 0 || skipped > 0 {
        println!("  bad rows          {bad}   skipped rows {skipped}");
    }
    println!("  span              {:.1} days", s.span_s / 86400.0);
    println!("  arrival rate      {:.2} jobs/hour", s.arrivals_per_hour);
    println!(
        "  duration (s)      p50 {:.0}   p90 {:.0}   p99 {:.0}   mean {:.0}",
        s.duration_s.p50, s.duration_s.p90, s.duration_s.p99, s.duration_s.mean
    );
    println!("  GPU-hours         {:.0}", s.gpu_hours);
    println!("  high priority     {}", s.high_priority);
    println!("  GPUs per job:");
    let max = s.gpu_histogram.values().copied().max().unwrap_or(1).max(1);
    for (g, n) in &s.gpu_histogram {
        let bar = "#".repeat(((*n as f64 / max as f64) * 40.0).ceil() as usize);
        println!("    {g:>5} {n:>8}  {bar}");
    }
    println!(
        "  models{}:",
        if s.models_inferred > 0 { format!(" ({} assigned by the seeded mapping)", s.models_inferred) } else { String::new() }
    );
    let mut models: Vec<_> = s.models.iter().collect();
    models.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (m, n) in models {
        println!("    {m:<18} {n:>8}");
    }
}
