//! `orrery trace`.

use crate::Timings;
use anyhow::Context;
use orrery_trace::generate::{self, ShapeContext};
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
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=i64::from(orrery_model::topology::MAX_GPUS_PER_HOST)))]
        gpus_per_host: u32,
        /// Link rate (Gbit/s) used to estimate durations.
        #[arg(long, default_value_t = 100.0, value_parser = crate::numbers::positive)]
        gbps: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Write the accepted jobs as orrery JSON lines to this file.
        #[arg(long)]
        to_jsonl: Option<PathBuf>,
    },
    /// Generate a workload from the zoo as orrery JSON lines on stdout.
    ///
    /// The default mix is CASSINI §5.1: its 13 models with equal probability,
    /// 200-1,000 iterations, and worker counts weighted as Philly's multi-GPU jobs.
    Generate {
        /// Arrival process.
        #[arg(long, value_enum, default_value_t = Arrivals::Poisson)]
        arrivals: Arrivals,
        /// Number of jobs (for `dynamic`: the arrivals after the running set),
        /// at most 1,000,000 (Philly's whole trace is 117,325).
        #[arg(long, default_value_t = 100, value_parser = jobs_in_range)]
        jobs: usize,
        /// Jobs already running at t = 0 (`dynamic` only).
        #[arg(long, default_value_t = 10, value_parser = running_in_range)]
        running: usize,
        /// Target load: average fraction of the cluster's GPUs kept busy.
        #[arg(long, default_value_t = 0.8, value_parser = crate::numbers::positive)]
        load: f64,
        /// Cluster whose GPU count sets the arrival rate (see `orrery topo list`).
        #[arg(long, default_value = "leaf-spine")]
        topology: String,
        /// Fraction of jobs with high priority.
        #[arg(long, default_value_t = 0.0, value_parser = crate::numbers::fraction)]
        high_priority: f64,
        /// Seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
}

/// Arrival processes of `orrery trace generate`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Arrivals {
    /// Poisson arrivals at the target load.
    Poisson,
    /// All jobs at t = 0 (CASSINI's snapshot trace).
    Snapshot,
    /// `--running` jobs at t = 0, then Poisson arrivals (CASSINI's dynamic trace).
    Dynamic,
}

/// How many bad rows are printed before a count.
const SHOW_ERRORS: usize = 20;

/// The most jobs `trace generate` writes.
const MAX_GENERATED_JOBS: usize = 1_000_000;

fn job_count(s: &str, least: usize) -> Result<usize, String> {
    let n: usize = s.trim().parse().map_err(|_| format!("expected a whole number of jobs, got {s:?}"))?;
    if (least..=MAX_GENERATED_JOBS).contains(&n) {
        Ok(n)
    } else {
        Err(format!("expected {least} to {MAX_GENERATED_JOBS} jobs, got {n}"))
    }
}

fn jobs_in_range(s: &str) -> Result<usize, String> {
    job_count(s, 1)
}

fn running_in_range(s: &str) -> Result<usize, String> {
    job_count(s, 0)
}

pub fn run(cmd: &Command, timings: &mut Timings) -> anyhow::Result<()> {
    match cmd {
        Command::Inspect { .. } => inspect(cmd, timings),
        Command::Generate { arrivals, jobs, running, load, topology, high_priority, seed } => {
            let topo = crate::topo::load(topology)?;
            let mix = generate::Mix { high_priority_fraction: *high_priority, ..generate::Mix::default() };
            let h = topo.hosts.iter().max_by_key(|h| h.gpus).context("topology has no hosts")?;
            let ctx = ShapeContext { gpu: h.gpu_type.clone(), gpus_per_host: h.gpus, link_gbps: topo.host_nic_gbps(0) };
            let out = timings.phase("generate", || match arrivals {
                Arrivals::Poisson => generate::poisson(*jobs, *load, topo.gpu_count(), &mix, &ctx, *seed),
                Arrivals::Snapshot => generate::snapshot(*jobs, &mix, *seed),
                Arrivals::Dynamic => generate::dynamic(*running, *jobs, *load, topo.gpu_count(), &mix, &ctx, *seed),
            });
            print!("{}", orrery_trace::formats::jsonl::to_string(&out.map_err(anyhow::Error::msg)?));
            Ok(())
        }
    }
}

fn inspect(cmd: &Command, timings: &mut Timings) -> anyhow::Result<()> {
    let Command::Inspect { file, format, seed, gpu, gpus_per_host, gbps, json, to_jsonl } = cmd else {
        unreachable!("called with Inspect")
    };
    if orrery_model::gpu::gpu_type(gpu).is_none() {
        anyhow::bail!("unknown GPU type {gpu:?}; run `orrery zoo --help`");
    }
    // A file that cannot be read is one error, not a summary of nothing.
    let text = std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let fmt = format.or_else(|| Format::sniff(&text));
    let parsed = timings.phase("read", || orrery_trace::parse(&file.display().to_string(), &text, *format, *seed));
    let ctx = ShapeContext { gpu: gpu.clone(), gpus_per_host: *gpus_per_host, link_gbps: *gbps };
    let s = timings.phase("summarise", || inspect::summarize(&parsed.items, &ctx));
    for e in parsed.errors.iter().take(SHOW_ERRORS) {
        eprintln!("{e}");
    }
    if parsed.errors.len() > SHOW_ERRORS {
        eprintln!("... and {} more bad rows", parsed.errors.len() - SHOW_ERRORS);
    }
    let all_failed = !parsed.errors.is_empty() && parsed.items.is_empty();
    if all_failed {
        // Nothing to summarise; the error below says why.
    } else if *json {
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
        orrery_model::files::write_atomic(out, orrery_trace::formats::jsonl::to_string(&parsed.items))
            .with_context(|| format!("{}", out.display()))?;
        eprintln!("wrote {} jobs to {}", parsed.items.len(), out.display());
    }
    if all_failed {
        // Every row failed: most often the wrong --format.
        let sniffed = Format::sniff(&text).filter(|&f| Some(f) != fmt);
        let hint = match sniffed {
            Some(f) => {
                format!("; its header looks like {} (try --format {} or leave --format out)", f.name(), f.name())
            }
            None => String::new(),
        };
        anyhow::bail!(
            "{}: every one of its {} rows failed as {}{hint}",
            file.display(),
            parsed.errors.len(),
            fmt.map_or("an unknown format", Format::name)
        );
    }
    if !parsed.errors.is_empty() {
        anyhow::bail!(
            "{}: {} bad rows (the {} good ones are summarised above)",
            file.display(),
            parsed.errors.len(),
            s.jobs
        );
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
        if s.models_inferred > 0 {
            format!(" ({} assigned by the seeded mapping)", s.models_inferred)
        } else {
            String::new()
        }
    );
    let mut models: Vec<_> = s.models.iter().collect();
    models.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (m, n) in models {
        println!("    {m:<18} {n:>8}");
    }
}
