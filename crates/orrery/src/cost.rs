//! `orrery bench scale`: what a simulation costs as the cluster grows
//! (issue 69, item 4). One family of clusters, leaf-spines of 8-A100 hosts
//! in racks of 32 with 100 Gbit/s NICs and 400 Gbit/s uplinks (the shape
//! of experiments/decision-scale-4096 and -16384, which are two of its
//! points), with as many Poisson jobs from CASSINI's model mix as hosts at
//! load 0.9. Each (size, policy) runs in a process of its own, so its peak
//! memory is its own; the table gives wall time, events per second, peak
//! memory and decision median / p99, and the exponent of a least-squares
//! fit of log(cost) on log(hosts) per policy.

use anyhow::{Context, Result, anyhow, bail};
use orrery_lab::plot::{Figure, Series};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `orrery bench scale`.
#[derive(clap::Args, Debug)]
pub struct ScaleArgs {
    /// Cluster sizes, hosts (multiples of 32: whole racks).
    #[arg(long, value_delimiter = ',', default_values_t = [256usize, 1024, 4096, 16384])]
    pub hosts: Vec<usize>,
    /// Policies, comma-separated, each run on every size.
    #[arg(long, value_delimiter = ',', default_values_t = ["themis+cassini".to_string(), "metronome".to_string(), "orrery".to_string(), "fifo+foresight".to_string()])]
    pub policies: Vec<String>,
    /// A run still going after this many minutes is stopped and reported
    /// as such (issue 69's budget at 16,384 hosts is 10).
    #[arg(long, default_value_t = 10.0)]
    pub max_minutes: f64,
    /// Decide in rounds every this many seconds of simulated time
    /// (`[sim] schedule_period_s`; Volcano's session period is 1 s).
    /// Unset: a decision at each arrival and departure.
    #[arg(long, value_name = "SECONDS")]
    pub schedule_period: Option<f64>,
    /// Writes scale.json, scale.md, scale-wall.svg/png and
    /// scale-decisions.svg/png here, and each run's shard file below it.
    #[arg(long, default_value = "out/scale")]
    pub out: PathBuf,
}

/// One run's cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Point {
    /// Hosts (8 GPUs each).
    pub hosts: usize,
    /// Policy name.
    pub policy: String,
    /// The run's own wall time, s (without writing outputs).
    pub wall_s: f64,
    /// Of it, in the policy's scheduling decisions, s.
    pub deciding_s: f64,
    /// Events processed.
    pub events: u64,
    /// Peak resident memory of the whole process, MiB.
    pub peak_mib: f64,
    /// Policy decision time, median and p99, ms.
    pub decision_p50_ms: f64,
    /// p99, ms.
    pub decision_p99_ms: f64,
}

/// Racks of 32 hosts under √hosts / 8 spines (2 at 256 hosts, 16 at
/// 16,384: decision-scale-4096's 8 and -16384's 16); decisions in rounds
/// of `period` s where given.
pub fn experiment(hosts: usize, period: Option<f64>) -> String {
    let rounds = period.map_or(String::new(), |p| format!("schedule_period_s = {p}\n"));
    let racks = hosts / 32;
    let spines = (((hosts as f64).sqrt() / 8.0).round() as usize).max(2);
    format!(
        "# orrery bench scale: {hosts} hosts of 8 A100s, as many Poisson jobs (issue 69, item 4)\n\
         name = \"scale-{hosts}\"\n\
         seeds = [1]\n\
         policies = [\"fifo\"]\n\
         [topology.leaf_spine]\n\
         racks = {racks}\n\
         hosts_per_rack = 32\n\
         spines = {spines}\n\
         gpus_per_host = 8\n\
         gpu_type = \"a100\"\n\
         host_gbps = 100.0\n\
         uplink_gbps = 400.0\n\
         [workload]\n\
         generator = \"poisson\"\n\
         jobs = {hosts}\n\
         load = 0.9\n\
         [sim]\n\
         jitter = 0.02\n\
         {rounds}"
    )
}

/// Runs every size under every policy, smallest first.
pub fn run(args: &ScaleArgs) -> Result<()> {
    if let Some(&bad) = args.hosts.iter().find(|&&h| h < 32 || h % 32 != 0 || h > 65_536) {
        bail!("--hosts: {bad}: expected a multiple of 32 from 32 to 65,536 (whole racks of 32 hosts)");
    }
    if !(args.max_minutes > 0.0 && args.max_minutes <= 10_080.0) {
        bail!("--max-minutes: {}: expected a number from 0 to 10,080 (a week)", args.max_minutes);
    }
    if let Some(p) = args.schedule_period.filter(|p| !(p.is_finite() && (1e-3..=3600.0).contains(p))) {
        bail!("--schedule-period: {p}: expected seconds from 0.001 to 3,600");
    }
    if args.policies.is_empty() {
        bail!("--policies: expected at least one policy (`orrery policies` lists them)");
    }
    // Checked before any run, so a bad name fails once, not once per size.
    if let Some(bad) = args.policies.iter().find(|p| orrery_policy::with_pins(p, 0, &Default::default()).is_none()) {
        bail!("--policies: unknown policy {bad:?}: expected names separated by commas (`orrery policies` lists them)");
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("{}", args.out.display()))?;
    let exe = std::env::current_exe().context("the orrery binary")?;
    let mut hosts = args.hosts.clone();
    hosts.sort_unstable();
    hosts.dedup();
    let bar = indicatif::ProgressBar::new((hosts.len() * args.policies.len()) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut points = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for &h in &hosts {
        let file = args.out.join(format!("scale-{h}.toml"));
        orrery_model::files::write_atomic(&file, experiment(h, args.schedule_period))
            .with_context(|| format!("{}", file.display()))?;
        for policy in &args.policies {
            bar.set_message(format!("{h} hosts under {policy}"));
            // A run that fails (killed, out of memory) is reported and left
            // out; the sweep goes on.
            let limit = Duration::from_secs_f64(args.max_minutes * 60.0);
            match run_one(&exe, &file, h, policy, &args.out, limit) {
                Ok(p) => {
                    bar.suspend(|| {
                        eprintln!(
                            "{:>6} hosts  {:<16} {:>9.1} s ({:.1} s deciding)  {:>11.0} events/s  {:>7.0} MiB  decisions {:.2} / {:.2} ms",
                            p.hosts,
                            p.policy,
                            p.wall_s,
                            p.deciding_s,
                            p.events as f64 / p.wall_s.max(1e-9),
                            p.peak_mib,
                            p.decision_p50_ms,
                            p.decision_p99_ms
                        )
                    });
                    points.push(p);
                }
                Err(e) => {
                    bar.suspend(|| eprintln!("{h:>6} hosts  {policy:<16} failed: {e:#}"));
                    failed.push(format!("`{policy}` at {h} hosts: {e:#}"));
                }
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if points.is_empty() {
        bail!("no run finished");
    }
    let mut md = table(&points, &args.policies);
    if !failed.is_empty() {
        md += &format!("\nNot finished: {}.\n", failed.join("; "));
    }
    println!("\n{md}");
    write(&args.out, &points, &args.policies, &md)
}

/// One run in a child process: `orrery --timings run FILE --policies P
/// --shard 0/1` (the runs without the report's figures and replays), its
/// peak memory from `--timings`, the rest from its shard file. Stopped
/// (SIGKILL) after `limit`.
fn run_one(exe: &Path, file: &Path, hosts: usize, policy: &str, out: &Path, limit: Duration) -> Result<Point> {
    let dir = out.join(format!("{hosts}-{}", policy.replace(['+', ':'], "_")));
    // stderr to a file: the child's report is short, and a pipe read only
    // at the end could fill up.
    let log = dir.with_extension("stderr");
    let mut child = Command::new(exe)
        .arg("--timings")
        .arg("run")
        .arg(file)
        .args(["--policies", policy, "--quiet", "--shard", "0/1", "--out"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).with_context(|| format!("{}", log.display()))?)
        .spawn()
        .with_context(|| format!("running {}", exe.display()))?;
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if start.elapsed() > limit {
            child.kill()?;
            child.wait()?;
            bail!("stopped after {:.0} min (--max-minutes)", limit.as_secs_f64() / 60.0);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    if !status.success() {
        bail!("{hosts} hosts under {policy}: {}", stderr.trim());
    }
    let peak_mib = stderr
        .lines()
        .find(|l| l.contains("peak resident memory"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| anyhow!("{hosts} hosts under {policy}: no peak memory in --timings' report"))?;
    let summary = orrery_lab::shard::merge(&[dir.join("shard-0-of-1.cbor")])
        .map_err(|e| anyhow!("{hosts} hosts under {policy}: {e}"))?;
    let run = summary.runs.first().ok_or_else(|| anyhow!("{hosts} hosts under {policy}: no run"))?;
    Ok(Point {
        hosts,
        policy: policy.to_string(),
        wall_s: run.wall_s,
        deciding_s: run.decisions_s,
        events: run.events,
        peak_mib,
        decision_p50_ms: run.metrics.decision_ms_p50,
        decision_p99_ms: run.metrics.decision_ms_p99,
    })
}

/// Least-squares slope of log y on log x: cost ∝ hosts^slope. None with
/// fewer than two positive points. O(points).
pub fn exponent(points: &[(f64, f64)]) -> Option<f64> {
    let logs: Vec<(f64, f64)> =
        points.iter().filter(|p| p.0 > 0.0 && p.1 > 0.0).map(|p| (p.0.ln(), p.1.ln())).collect();
    if logs.len() < 2 {
        return None;
    }
    let n = logs.len() as f64;
    let (mx, my) = (logs.iter().map(|p| p.0).sum::<f64>() / n, logs.iter().map(|p| p.1).sum::<f64>() / n);
    let sxx: f64 = logs.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = logs.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// The slope of log y on log x between each two consecutive sizes (in
/// ascending x): where the growth speeds up, which one fit over every
/// size hides. O(points).
pub fn step_exponents(points: &[(f64, f64)]) -> Vec<f64> {
    let mut pts: Vec<(f64, f64)> = points.iter().copied().filter(|p| p.0 > 0.0 && p.1 > 0.0).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts.windows(2).filter(|w| w[1].0 > w[0].0).map(|w| (w[1].1 / w[0].1).ln() / (w[1].0 / w[0].0).ln()).collect()
}

fn series(points: &[Point], policy: &str, f: impl Fn(&Point) -> f64) -> Vec<(f64, f64)> {
    points.iter().filter(|p| p.policy == policy).map(|p| (p.hosts as f64, f(p))).collect()
}

/// The Markdown table: a row per (policy, size), then each policy's fitted
/// exponents.
pub fn table(points: &[Point], policies: &[String]) -> String {
    let mut s = String::from(
        "| policy | hosts | wall (s) | deciding (s) | events/s | peak memory (MiB) | decision median (ms) | decision p99 (ms) |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for policy in policies {
        for p in points.iter().filter(|p| &p.policy == policy) {
            s += &format!(
                "| `{}` | {} | {:.1} | {:.1} | {:.0} | {:.0} | {:.2} | {:.2} |\n",
                p.policy,
                p.hosts,
                p.wall_s,
                p.deciding_s,
                p.events as f64 / p.wall_s.max(1e-9),
                p.peak_mib,
                p.decision_p50_ms,
                p.decision_p99_ms
            );
        }
    }
    s += "\n| policy | exponent of wall time | of wall time, size to size | of peak memory | of decision median | of decision p99 |\n|---|---:|---:|---:|---:|---:|\n";
    let fmt = |e: Option<f64>| e.map_or("–".to_string(), |e| format!("{e:.2}"));
    for policy in policies {
        let steps: Vec<String> =
            step_exponents(&series(points, policy, |p| p.wall_s)).iter().map(|e| format!("{e:.2}")).collect();
        s += &format!(
            "| `{policy}` | {} | {} | {} | {} | {} |\n",
            fmt(exponent(&series(points, policy, |p| p.wall_s))),
            if steps.is_empty() { "–".to_string() } else { steps.join(" · ") },
            fmt(exponent(&series(points, policy, |p| p.peak_mib))),
            fmt(exponent(&series(points, policy, |p| p.decision_p50_ms))),
            fmt(exponent(&series(points, policy, |p| p.decision_p99_ms))),
        );
    }
    s
}

fn write(dir: &Path, points: &[Point], policies: &[String], md: &str) -> Result<()> {
    let json = dir.join("scale.json");
    orrery_model::files::write_atomic(&json, serde_json::to_vec_pretty(points)?)
        .with_context(|| format!("{}", json.display()))?;
    let md_file = dir.join("scale.md");
    orrery_model::files::write_atomic(&md_file, md).with_context(|| format!("{}", md_file.display()))?;
    let wall = Figure::LogLog {
        title: "Simulation wall time as the cluster grows (hosts of 8 A100s, as many jobs)".into(),
        x_label: "hosts".into(),
        y_label: "wall time (s)".into(),
        series: policies.iter().map(|p| Series::new(p.clone(), series(points, p, |x| x.wall_s))).collect(),
    };
    wall.save(dir, "scale-wall")?;
    let decisions = Figure::LogLog {
        title: "Policy decision time: median (left) and p99 (right)".into(),
        x_label: "hosts".into(),
        y_label: "ms".into(),
        series: policies
            .iter()
            .flat_map(|p| {
                [
                    Series::in_facet(p.clone(), "median", series(points, p, |x| x.decision_p50_ms)),
                    Series::in_facet(p.clone(), "p99", series(points, p, |x| x.decision_p99_ms)),
                ]
            })
            .collect(),
    };
    decisions.save(dir, "scale-decisions")?;
    println!("wrote {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exponent_of_a_power_law_is_its_power() {
        // y = 3 x^1.5 at four sizes: slope 1.5; n log n over 256..16,384
        // fits 1.17 (log n grows 1.75× over 64× the hosts).
        let pts: Vec<(f64, f64)> =
            [256.0, 1024.0, 4096.0, 16384.0_f64].iter().map(|&x| (x, 3.0 * x.powf(1.5))).collect();
        assert!((exponent(&pts).expect("fit") - 1.5).abs() < 1e-12);
        let nlogn: Vec<(f64, f64)> = [256.0, 1024.0, 4096.0, 16384.0_f64].iter().map(|&x| (x, x * x.ln())).collect();
        let e = exponent(&nlogn).expect("fit");
        assert!((1.13..1.15).contains(&e), "n log n: {e}");
        assert_eq!(exponent(&pts[..1]), None);
        // Size to size: 1.5 at every step of the power law; n log n's
        // steps fall (1 + log₄ of ln 1024 / ln 256 = 1.161, then 1.131,
        // 1.111), in ascending hosts whatever the order given.
        let steps = step_exponents(&pts);
        assert_eq!(steps.len(), 3);
        assert!(steps.iter().all(|e| (e - 1.5).abs() < 1e-12), "{steps:?}");
        let mut shuffled = nlogn.clone();
        shuffled.reverse();
        let steps = step_exponents(&shuffled);
        let want = [1.161, 1.131, 1.111];
        assert!(steps.iter().zip(want).all(|(e, w)| (e - w).abs() < 1e-3), "{steps:?}");
        assert!(step_exponents(&pts[..1]).is_empty());
    }

    #[test]
    fn an_unknown_policy_fails_once_before_any_run() {
        let out = std::env::temp_dir().join(format!("orrery-scale-bad-{}", std::process::id()));
        let args = |policies: &[&str]| ScaleArgs {
            hosts: vec![256],
            policies: policies.iter().map(|p| p.to_string()).collect(),
            max_minutes: 1.0,
            schedule_period: None,
            out: out.clone(),
        };
        // Spaces instead of commas: one name clap cannot split.
        let e = run(&args(&["themis+cassini orrery"])).expect_err("an unknown policy").to_string();
        assert!(e.contains(r#"unknown policy "themis+cassini orrery""#) && e.contains("commas"), "{e}");
        let e = run(&args(&["fifo", "magic"])).expect_err("an unknown policy").to_string();
        assert!(e.contains(r#""magic""#), "{e}");
        assert!(!out.exists(), "nothing is written before the names are checked");
    }

    #[test]
    fn the_family_keeps_decision_scale_4096s_shape() {
        let text = experiment(4096, None);
        let exp = orrery_lab::experiment::parse("scale-4096", &text).expect("valid experiment");
        assert_eq!(exp.name, "scale-4096");
        assert!(text.contains("racks = 128\n") && text.contains("spines = 8\n") && text.contains("jobs = 4096\n"));
        assert!(experiment(256, None).contains("spines = 2\n") && experiment(16384, None).contains("spines = 16\n"));
        let rounds = orrery_lab::experiment::parse("scale-256", &experiment(256, Some(1.0))).expect("valid experiment");
        assert_eq!(rounds.sim.schedule_period_s, Some(1.0));
    }
}
