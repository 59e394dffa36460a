//! `orrery run`.

use crate::Timings;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use orrery_sim::experiment::{self, DEFAULT};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML). Without one, the built-in default runs: 60
    /// Poisson jobs from CASSINI's model mix at load 0.8 on 16 hosts of 4 A100s
    /// (50 Gbit/s, 4 racks, 2:1), under FIFO, random placement and the ideal network.
    ///
    /// name = "x"; seeds = [1, 2]; policies = ["fifo", "random", "ideal"]
    /// [topology]  builtin = "cassini" | file = "t.toml" | [topology.leaf_spine] ...
    /// [workload]  generator = "poisson" | "snapshot", jobs = 60, load = 0.8
    ///             or trace = "data/philly/muri_trace1.csv", jobs = 200
    /// [sim]       jitter = 0.02, max_time_s = 86400
    file: Option<PathBuf>,
    /// Write summary.json, jobs.csv and links.csv here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar and no table, for scripts (the summary still goes to --out).
    #[arg(long)]
    quiet: bool,
    /// Simulate every iteration: do not fast-forward undisturbed jobs.
    #[arg(long)]
    no_skip: bool,
}

pub fn run(a: &Args, timings: &mut Timings) -> anyhow::Result<()> {
    let (name, text, base) = match &a.file {
        Some(p) => (
            p.display().to_string(),
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
            p.parent().map(PathBuf::from).unwrap_or_default(),
        ),
        None => ("<built-in default>".to_string(), DEFAULT.to_string(), PathBuf::from(".")),
    };
    let mut exp = experiment::parse(&name, &text).map_err(anyhow::Error::msg)?;
    if a.no_skip {
        exp.sim.skip = false;
    }
    let bar = if a.quiet { ProgressBar::hidden() } else { ProgressBar::new(1000) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} run {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let summary = timings
        .phase("simulate", || {
            exp.run(&base, |k, runs, sim_s, done, jobs| {
                bar.set_position(((k as f64 + done as f64 / jobs.max(1) as f64) / runs as f64 * 1000.0) as u64);
                bar.set_message(format!("{}/{runs}: {done}/{jobs} jobs done, {:.0} s simulated", k + 1, sim_s));
            })
        })
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    bar.finish_and_clear();
    if let Some(dir) = &a.out {
        timings.phase("write", || experiment::write(&summary, dir)).map_err(anyhow::Error::msg)?;
        if !a.quiet {
            eprintln!("wrote {}/summary.json, jobs.csv, links.csv, jct_cdf.svg, iteration_cdf.svg", dir.display());
        }
    }
    if !a.quiet {
        println!("experiment {} — {}", summary.experiment, summary.runs.first().map_or("", |r| r.setup.as_str()));
        println!(
            "{:<12} {:<16} {:>4} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8} {:>6} {:>6} {:>9} {:>8} {:>9}",
            "scenario",
            "policy",
            "seed",
            "finished",
            "avg JCT",
            "p99 JCT",
            "makespan",
            "avg it",
            "p99 it",
            "slow",
            "GPU",
            "excess",
            "Γ",
            "events/s"
        );
        for r in &summary.runs {
            let m = &r.metrics;
            println!(
                "{:<12} {:<16} {:>4} {:>4}/{:<4} {:>8.0}s {:>8.0}s {:>9.0}s {:>7.3}s {:>7.3}s {:>6.2} {:>5.0}% {:>7.0}Gb {:>8.3} {:>9.0}",
                r.scenario,
                r.policy,
                r.seed,
                m.finished,
                m.jobs,
                m.avg_jct_s,
                m.p99_jct_s,
                m.makespan_s,
                m.avg_iter_s,
                m.p99_iter_s,
                m.avg_slowdown,
                100.0 * m.gpu_util,
                m.excess_gbit,
                m.bw_util_gamma,
                r.events as f64 / r.wall_s.max(1e-9)
            );
        }
    }
    if !a.quiet {
        print_comparison(&summary);
    }
    if timings.enabled() {
        for r in &summary.runs {
            eprintln!(
                "  {:<16} seed {:<4} {:>10} events in {:>8.3} s = {:>10.0} events/s ({}, {} iterations fast-forwarded)",
                r.policy,
                r.seed,
                r.events,
                r.wall_s,
                r.events as f64 / r.wall_s.max(1e-9),
                r.fidelity,
                r.skipped_iterations
            );
        }
    }
    Ok(())
}

/// The comparison table: per scenario and policy, means over seeds and the
/// baseline's value over the policy's (× > 1 is better than the baseline).
fn print_comparison(summary: &experiment::Summary) {
    let prio = summary.comparison.iter().any(|c| c.high_iter_s.is_some());
    println!("\ncomparison against {} (baseline / policy; > 1 is better)", summary.baseline);
    print!(
        "{:<12} {:<22} {:>5} {:>9} {:>7} {:>9} {:>7} {:>9} {:>7}",
        "scenario", "policy", "seeds", "avg it", "x", "p99 it", "x", "avg JCT", "x"
    );
    if prio {
        print!(" {:>9} {:>7} {:>9}", "high it", "x", "low it");
    }
    println!();
    let opt = |v: Option<f64>, p: usize| v.map_or("-".to_string(), |v| format!("{v:.p$}"));
    for c in &summary.comparison {
        print!(
            "{:<12} {:<22} {:>5} {:>8.3}s {:>6.2}x {:>8.3}s {:>6.2}x {:>8.0}s {:>6.2}x",
            c.scenario,
            c.policy,
            c.seeds,
            c.avg_iter_s,
            c.gain_avg_iter,
            c.p99_iter_s,
            c.gain_p99_iter,
            c.avg_jct_s,
            c.gain_avg_jct
        );
        if prio {
            print!(" {:>8}s {:>6}x {:>8}s", opt(c.high_iter_s, 3), opt(c.gain_high_iter, 2), opt(c.low_iter_s, 3));
        }
        println!();
    }
}
