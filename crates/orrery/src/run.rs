//! `orrery run`.

use crate::Timings;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use orrery_lab::experiment::{self, DEFAULT, Experiment};
use std::path::{Path, PathBuf};

/// The built-in suite `orrery run` runs without a file, in under a minute:
/// the default experiment and short versions of the bundled paper
/// experiments (one seed, fewer jobs or scenarios). Each is (name, experiment).
fn suite() -> anyhow::Result<Vec<(String, Experiment)>> {
    let parse = |name: &str, text: &str| experiment::parse(name, text).map_err(anyhow::Error::msg);
    let default = parse("<built-in default>", DEFAULT)?;
    let pair = parse("experiments/cassini-pair.toml", include_str!("../../../experiments/cassini-pair.toml"))?;
    let mut poisson =
        parse("experiments/cassini-poisson.toml", include_str!("../../../experiments/cassini-poisson.toml"))?;
    poisson.seeds = vec![1];
    poisson.workload.jobs = Some(24);
    poisson.scenarios.retain(|s| s.name == "load=0.9");
    let mut snapshots =
        parse("experiments/metronome-snapshots.toml", include_str!("../../../experiments/metronome-snapshots.toml"))?;
    snapshots.seeds = vec![1];
    snapshots.scenarios.retain(|s| ["S2", "S4"].contains(&s.name.as_str()));
    Ok(vec![default, pair, poisson, snapshots].into_iter().map(|e| (e.name.clone(), e)).collect())
}

/// The example experiment at the end of `orrery run --help`, one key a line
/// (a test parses it).
pub const EXAMPLE: &str = r#"An experiment file (experiments/ holds the papers'; docs/guide/simulation.md lists every key):

  name = "x"
  seeds = [1, 2]
  policies = ["fifo", "random", "ideal"]   # `orrery policies` lists them
  baseline = "fifo"                        # the comparison's reference (default: the first)
  [topology]
  builtin = "cassini"                      # or file = "t.toml", or [topology.leaf_spine]
  [workload]
  generator = "poisson"                    # or "snapshot"; or trace = "data/philly/muri_trace1.csv"
  jobs = 60
  load = 0.8
  [sim]
  jitter = 0.02
  max_time_s = 86400"#;

/// A value by its name in experiment files (`reno`, `tail-drop`, ...).
fn by_name<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|e| e.to_string())
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Experiment file (TOML). Without one, a built-in suite runs in under a
    /// minute: the default experiment (60 Poisson jobs from CASSINI's model
    /// mix at load 0.8 on 16 hosts of 4 A100s, 50 Gbit/s, 4 racks, 2:1, under
    /// FIFO, random placement and the ideal network), then short versions of
    /// experiments/cassini-pair, cassini-poisson and metronome-snapshots.
    /// An example file is at the end of this help.
    file: Option<PathBuf>,
    /// Write summary.json, jobs.csv, links.csv, report.html and plots here
    /// (for the built-in suite, one folder per experiment).
    #[arg(long)]
    out: Option<PathBuf>,
    /// No progress bar and no table, for scripts (the summary still goes to --out).
    #[arg(long)]
    quiet: bool,
    /// Simulate every iteration: do not fast-forward undisturbed jobs.
    #[arg(long)]
    no_skip: bool,
    /// Model this transport instead of the file's `[network] transport`:
    /// fluid (max-min rates), reno, cubic, bbr, dcqcn or mltcp-reno.
    #[arg(long, requires = "file", value_parser = by_name::<orrery_lab::spec::TransportKind>)]
    transport: Option<orrery_lab::spec::TransportKind>,
    /// Queue links this way instead of the file's `[network] queueing`:
    /// tail-drop or fair.
    #[arg(long, requires = "file", value_parser = by_name::<orrery_lab::spec::QueueingKind>)]
    queueing: Option<orrery_lab::spec::QueueingKind>,
    /// Print one row per policy, scenario and seed under the comparison
    /// (without it, only when there are at most 16 such runs).
    #[arg(long)]
    runs: bool,
    /// Run these policies instead of the file's (comma-separated; the
    /// file's baseline if it is among them, else the first).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// Run these seeds instead of the file's: `4-6`, `1,3` or `4-6,9`
    /// (held-out seeds without a copy of the file).
    #[arg(long, requires = "file", value_parser = parse_seeds)]
    seeds: Option<Seeds>,
    /// With --out, also write iterations.csv: every iteration of every job
    /// (due, start, end, delay applied, rate cap, routes). Simulates every
    /// iteration (no fast-forward); for small runs.
    #[arg(long, requires = "out")]
    iterations: bool,
    /// Take the first N jobs of the workload's trace (or generate N),
    /// replacing the file's `jobs`: for scale curves.
    #[arg(long, requires = "file")]
    jobs: Option<usize>,
    /// Run only slice K of N of the experiment's runs (scenario × seed ×
    /// policy; K from 0, as Kubernetes' JOB_COMPLETION_INDEX) and write
    /// --out/shard-K-of-N.cbor; `orrery merge` combines the N files into the
    /// outputs of one unsharded run.
    #[arg(long, requires_all = ["file", "out"], value_name = "K/N")]
    shard: Option<experiment::Shard>,
}

/// The seeds of `--seeds`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seeds(Vec<u64>);

/// `4-6,9` → 4, 5, 6, 9: comma-separated seeds or inclusive ranges, at most
/// 10,000 in all.
fn parse_seeds(text: &str) -> Result<Seeds, String> {
    let mut seeds = Vec::new();
    for part in text.split(',') {
        let seed = |s: &str| {
            s.trim().parse::<u64>().map_err(|_| format!("`{s}`: expected a seed (a whole number), as in 4-6 or 1,3"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (seed(lo)?, seed(hi)?),
            None => (seed(part)?, seed(part)?),
        };
        if lo > hi || hi - lo >= 10_000 || seeds.len() as u64 + (hi - lo) >= 10_000 {
            return Err(format!("`{part}`: expected a range from low to high of at most 10,000 seeds"));
        }
        seeds.extend(lo..=hi);
    }
    Ok(Seeds(seeds))
}

/// `orrery merge`.
#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Shard files, or folders of them (`shard-K-of-N.cbor` from `orrery run --shard`).
    #[arg(required = true)]
    shards: Vec<PathBuf>,
    /// Write summary.json, jobs.csv, links.csv, report.html and plots here.
    #[arg(long)]
    out: PathBuf,
    /// No table.
    #[arg(long)]
    quiet: bool,
    /// Print one row per policy, scenario and seed.
    #[arg(long)]
    runs: bool,
}

/// Runs printed one row each without `--runs`.
const RUN_ROWS: usize = 16;

pub fn run(a: &Args, timings: &mut Timings) -> anyhow::Result<()> {
    let (experiments, base) = match &a.file {
        Some(p) => {
            let name = p.display().to_string();
            let text = std::fs::read_to_string(p).with_context(|| format!("reading {name}"))?;
            if crate::scale::is_scale(&text) {
                return timings.phase("auction", || crate::scale::run(&name, &text, a.out.as_deref()));
            }
            let mut exp = experiment::parse(&name, &text).map_err(anyhow::Error::msg)?;
            if !a.policies.is_empty() {
                exp = exp.with_policies(&name, a.policies.clone()).map_err(anyhow::Error::msg)?;
            }
            if let Some(Seeds(seeds)) = &a.seeds {
                exp = exp.with_seeds(&name, seeds.clone()).map_err(anyhow::Error::msg)?;
            }
            if let Some(n) = a.jobs {
                exp = exp.with_jobs(&name, n).map_err(anyhow::Error::msg)?;
            }
            // What a shard was run from: merged shards must agree on it.
            let source = format!(
                "{text}\n# orrery run options: policies {:?}, seeds {:?}, jobs {:?}, no_skip {}, iterations {}, transport {:?}, queueing {:?}",
                a.policies, a.seeds, a.jobs, a.no_skip, a.iterations, a.transport, a.queueing
            );
            (vec![(name, exp, source)], p.parent().map(PathBuf::from).unwrap_or_default())
        }
        None if !a.policies.is_empty() => anyhow::bail!("--policies needs an experiment file"),
        None => (suite()?.into_iter().map(|(n, e)| (n, e, String::new())).collect(), PathBuf::from(".")),
    };
    let several = experiments.len() > 1;
    for (name, mut exp, source) in experiments {
        if a.no_skip {
            exp.sim.skip = false;
        }
        if let Some(t) = a.transport {
            exp.network.transport = t;
        }
        if let Some(q) = a.queueing {
            exp.network.queueing = q;
        }
        exp.detail = a.out.is_some();
        exp.iterations = a.iterations;
        // With several experiments, each writes into its own folder.
        let out = a.out.as_ref().map(|d| if several { d.join(&exp.name) } else { d.clone() });
        match (a.shard, out) {
            (Some(shard), Some(dir)) => run_shard(a, &name, &exp, &base, shard, &source, &dir, timings)?,
            (_, out) => run_one(a, &name, &exp, &base, out.as_deref(), timings)?,
        }
    }
    Ok(())
}

/// Runs the runs of `shard`, with a progress bar unless `quiet`; the
/// summary and each run's index among all runs.
fn simulate(
    quiet: bool,
    name: &str,
    exp: &Experiment,
    base: &Path,
    shard: experiment::Shard,
    timings: &mut Timings,
) -> anyhow::Result<(experiment::Summary, Vec<usize>)> {
    let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(1000) };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {msg}, about {eta} left")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let out = timings
        .phase("simulate", || {
            // Runs go in parallel: the bar shows the jobs finished over all
            // of them, so it never moves back when another run reports.
            let mut finished: Vec<f64> = Vec::new();
            exp.run_shard(base, shard, |k, runs, _sim_s, done, jobs| {
                finished.resize(runs, 0.0);
                if let Some(f) = finished.get_mut(k) {
                    *f = done as f64 / jobs.max(1) as f64;
                }
                let whole: f64 = finished.iter().sum();
                bar.set_position((whole / runs.max(1) as f64 * 1000.0) as u64);
                let complete = finished.iter().filter(|&&f| f >= 1.0).count();
                bar.set_message(format!("{complete}/{runs} runs done"));
            })
        })
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    bar.finish_and_clear();
    Ok(out)
}

fn run_one(
    a: &Args,
    name: &str,
    exp: &Experiment,
    base: &Path,
    out: Option<&Path>,
    timings: &mut Timings,
) -> anyhow::Result<()> {
    let (summary, _) = simulate(a.quiet, name, exp, base, experiment::Shard::WHOLE, timings)?;
    if let Some(dir) = out {
        write_outputs(&summary, dir, a.quiet, timings)?;
    }
    print_summary(&summary, a.quiet, a.runs, timings);
    Ok(())
}

/// `orrery run FILE --shard K/N --out DIR`: the slice's runs into one shard file.
#[allow(clippy::too_many_arguments)]
fn run_shard(
    a: &Args,
    name: &str,
    exp: &Experiment,
    base: &Path,
    shard: experiment::Shard,
    source: &str,
    dir: &Path,
    timings: &mut Timings,
) -> anyhow::Result<()> {
    let total = exp.run_count();
    let (summary, indices) = simulate(a.quiet, name, exp, base, shard, timings)?;
    let runs = indices.len();
    let path = timings
        .phase("write shard", || orrery_lab::shard::write_shard(summary, &indices, shard, total, source, dir))
        .map_err(anyhow::Error::msg)?;
    if !a.quiet {
        eprintln!(
            "wrote {} ({runs} of {total} runs); when all {} shards are written: orrery merge {} --out OUT",
            path.display(),
            shard.count,
            dir.display()
        );
    }
    Ok(())
}

/// `orrery merge SHARDS... --out DIR`.
pub fn merge(a: &MergeArgs, timings: &mut Timings) -> anyhow::Result<()> {
    let summary = timings
        .phase("merge", || orrery_lab::shard::shard_files(&a.shards).and_then(|f| orrery_lab::shard::merge(&f)))
        .map_err(anyhow::Error::msg)?;
    write_outputs(&summary, &a.out, a.quiet, timings)?;
    print_summary(&summary, a.quiet, a.runs, timings);
    Ok(())
}

fn write_outputs(summary: &experiment::Summary, dir: &Path, quiet: bool, timings: &mut Timings) -> anyhow::Result<()> {
    experiment::write_timed(summary, dir, &mut |phase, s| timings.record(phase, s)).map_err(anyhow::Error::msg)?;
    if !quiet {
        eprintln!("wrote {}/summary.json, jobs.csv, links.csv, report.html and plots", dir.display());
    }
    Ok(())
}

/// The comparison, the runs (all with `runs`, else when few) and, with
/// `--timings`, each run's event rate.
fn print_summary(summary: &experiment::Summary, quiet: bool, runs: bool, timings: &Timings) {
    if !quiet {
        println!("\nexperiment {} — {}", summary.experiment, summary.runs.first().map_or("", |r| r.setup.as_str()));
        print_comparison(summary);
        if runs || summary.runs.len() <= RUN_ROWS {
            print_runs(summary);
        } else {
            println!(
                "\n{} runs: --runs prints one row each (all of them are in --out's summary.json)",
                summary.runs.len()
            );
        }
    }
    if timings.enabled() {
        let sw = summary.runs.iter().map(|r| r.scenario.chars().count()).max().unwrap_or(0);
        let pw = summary.runs.iter().map(|r| r.policy.chars().count()).max().unwrap_or(0);
        for r in &summary.runs {
            eprintln!(
                "  {:<sw$} {:<pw$} seed {:<4} {:>10} events in {:>8.3} s = {:>10.0} events/s, {:.3} s deciding ({}, {} iterations fast-forwarded)",
                r.scenario,
                r.policy,
                r.seed,
                r.events,
                r.wall_s,
                r.events as f64 / r.wall_s.max(1e-9),
                r.decisions_s,
                r.fidelity,
                r.skipped_iterations
            );
        }
    }
}

/// One row per run: the metrics of each policy, scenario and seed.
fn print_runs(summary: &experiment::Summary) {
    println!();
    // Columns as wide as the longest name, so rows stay aligned.
    let sw = summary.runs.iter().map(|r| r.scenario.chars().count()).max().unwrap_or(0).max(8);
    let pw = summary.runs.iter().map(|r| r.policy.chars().count()).max().unwrap_or(0).max(6);
    println!(
        "{:<sw$} {:<pw$} {:>4} {:>9} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8} {:>6} {:>6} {:>9} {:>8} {:>9}",
        "scenario",
        "policy",
        "seed",
        "finished",
        "avg JCT",
        "p99 JCT",
        "max wait",
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
            "{:<sw$} {:<pw$} {:>4} {:>4}/{:<4} {:>8.0}s {:>8.0}s {:>8.1}x {:>9.0}s {:>7.3}s {:>7.3}s {:>6.2} {:>5.0}% {:>9} {:>8.3} {:>9.0}",
            r.scenario,
            r.policy,
            r.seed,
            m.finished,
            m.jobs,
            m.avg_jct_s,
            m.p99_jct_s,
            m.max_wait_over_alone,
            m.makespan_s,
            m.avg_iter_s,
            m.p99_iter_s,
            m.avg_slowdown,
            100.0 * m.gpu_util,
            bits(m.excess_gbit),
            m.bw_util_gamma,
            r.events as f64 / r.wall_s.max(1e-9)
        );
    }
}

/// An amount of traffic in gigabits, in the unit that keeps it short:
/// `830 Gb`, `24.8 Tb`, `1.66 Pb`.
fn bits(gbit: f64) -> String {
    // Traffic is never negative; a sum of rounding errors may be (-0 Gb).
    let gbit = if gbit < 0.0 { 0.0 } else { gbit };
    let (value, unit) = match gbit.abs() {
        g if g >= 1e6 => (gbit / 1e6, "Pb"),
        g if g >= 1e3 => (gbit / 1e3, "Tb"),
        _ => (gbit, "Gb"),
    };
    let digits = if value.abs() >= 100.0 || unit == "Gb" {
        0
    } else if value.abs() >= 10.0 {
        1
    } else {
        2
    };
    format!("{value:.digits$} {unit}")
}

/// The comparison table: per scenario and policy, means over seeds and the
/// baseline's value over the policy's (× > 1 is better than the baseline).
fn print_comparison(summary: &experiment::Summary) {
    // Per-job tables when they are short enough to read (FORESIGHT Table I).
    for (scenario, rows) in experiment::job_tables(summary) {
        if rows.len() <= 13 {
            println!("\njobs in {scenario} (mean iteration time, first seed)");
            print_table(&rows);
        }
    }
    println!("\ncomparison against {} (baseline / policy; > 1 is better)", summary.baseline);
    print_table(&experiment::comparison_table(&summary.comparison));
    let tenants = orrery_lab::report::tenant_table(summary);
    if !tenants.is_empty() {
        println!("\ntenants (worst hour: GPUs held over min(demand, quota); max wait of jobs within quota)");
        print_table(&tenants);
    }
}

/// Prints rows of cells with aligned columns: the first two left, the rest right.
fn print_table(rows: &[Vec<String>]) {
    // Column widths from the contents; text left, numbers right.
    let Some(first) = rows.first() else { return };
    let widths: Vec<usize> = (0..first.len())
        .map(|k| rows.iter().map(|r| r.get(k).map_or(0, |c| c.chars().count())).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(k, (c, &w))| if k < 2 { format!("{c:<w$}") } else { format!("{c:>w$}") })
            .collect();
        println!("{}", cells.join("  "));
    }
}

#[cfg(test)]
mod tests {
    use super::{Seeds, bits, parse_seeds};

    #[test]
    fn seeds_are_lists_and_ranges() {
        assert_eq!(parse_seeds("4-6"), Ok(Seeds(vec![4, 5, 6])));
        assert_eq!(parse_seeds("1,3,7-8"), Ok(Seeds(vec![1, 3, 7, 8])));
        assert!(parse_seeds("6-4").expect_err("backwards").contains("`6-4`: expected a range"));
        assert!(parse_seeds("1,x").expect_err("not a number").contains("`x`: expected a seed"));
        assert!(parse_seeds("0-18446744073709551615").is_err(), "2^64 seeds");
    }

    #[test]
    fn traffic_prints_in_a_short_unit() {
        assert_eq!(bits(0.0), "0 Gb");
        assert_eq!(bits(-1e-9), "0 Gb");
        assert_eq!(bits(830.4), "830 Gb");
        assert_eq!(bits(24_831.0), "24.8 Tb");
        assert_eq!(bits(1_656_847.0), "1.66 Pb");
        assert_eq!(bits(10_535_901.0), "10.5 Pb");
    }

    #[test]
    fn the_help_example_is_a_valid_experiment() {
        let toml: String = super::EXAMPLE.lines().skip(2).map(|l| l.trim_start().to_string() + "\n").collect();
        let e = orrery_lab::experiment::parse("help", &toml).expect("the example parses");
        assert_eq!((e.policies.len(), e.workload.jobs), (3, Some(60)));
    }
}
