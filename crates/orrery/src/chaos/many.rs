//! Many seeded chaos runs and their summary (`orrery bench chaos --runs N
//! --parallel P`): issue 71's goal is counted in runs, as etcd's robustness
//! tests count theirs. Each run is a child `orrery bench chaos` of its own
//! seed, folder and control network (runs at once share nothing but the
//! machine); the summary reads every `seed-*/report.json` under the folder,
//! so a batch cut short, or run in pieces, is summarised the same way
//! (`--summarize DIR`).

use anyhow::{Context, Result, bail};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// One run, as its report.json says.
#[derive(Debug, Clone, Serialize)]
pub struct RunLine {
    /// Its seed.
    pub seed: u64,
    /// Faults injected.
    pub faults: usize,
    /// Kinds among them.
    pub kinds: usize,
    /// Invariants broken.
    pub violations: usize,
    /// Jobs acknowledged, and of them finished.
    pub acknowledged: usize,
    /// Finished.
    pub finished: usize,
    /// Acknowledged jobs stuck after the drain.
    pub unfinished: usize,
    /// Faults after which the jobs did not all run again in time.
    pub not_recovered: usize,
    /// Slowest recovery, s.
    pub slowest_recovery_s: f64,
    /// p99 of the agents' report round trips outside the faults, ms.
    pub report_p99_ms: f64,
}

/// Recovery of one fault kind over every run.
#[derive(Debug, Clone, Serialize)]
pub struct KindLine {
    /// Faults of the kind.
    pub faults: usize,
    /// Median recovery, s.
    pub median_s: f64,
    /// 95th percentile, s.
    pub p95_s: f64,
    /// Longest, s.
    pub max_s: f64,
    /// Not recovered in time.
    pub not_recovered: usize,
}

/// Every run of a folder.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Runs with a report, by seed.
    pub runs: Vec<RunLine>,
    /// Runs started whose report is missing (the run failed to finish:
    /// its `seed-N.out` says why).
    pub without_report: Vec<u64>,
    /// Recovery per kind over all runs.
    pub recovery: BTreeMap<String, KindLine>,
    /// Faults in all.
    pub faults: usize,
    /// Invariants broken in all.
    pub violations: usize,
    /// Jobs stuck in all.
    pub unfinished: usize,
}

/// The value at quantile `q` of sorted `xs` (nearest rank), 0 for none.
fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() { 0.0 } else { xs[((xs.len() - 1) as f64 * q).round() as usize] }
}

/// One report's line and its faults' (kind, recovery).
fn line_of(seed: u64, r: &Value) -> (RunLine, Vec<(String, Option<f64>)>) {
    let n = |v: &Value| v.as_array().map_or(0, Vec::len);
    let faults: Vec<(String, Option<f64>)> = r["faults"]
        .as_array()
        .map(|fs| {
            fs.iter().map(|f| (f["kind"].as_str().unwrap_or("?").to_string(), f["recovery_s"].as_f64())).collect()
        })
        .unwrap_or_default();
    let kinds: std::collections::BTreeSet<&str> = faults.iter().map(|f| f.0.as_str()).collect();
    let line = RunLine {
        seed,
        faults: faults.len(),
        kinds: kinds.len(),
        violations: n(&r["violations"]),
        acknowledged: r["acknowledged"].as_u64().unwrap_or(0) as usize,
        finished: r["finished"].as_u64().unwrap_or(0) as usize,
        unfinished: n(&r["unfinished"]),
        not_recovered: faults.iter().filter(|f| f.1.is_none()).count(),
        slowest_recovery_s: faults.iter().filter_map(|f| f.1).fold(0.0, f64::max),
        report_p99_ms: r["report_round_trips"]["p99_ms"].as_f64().unwrap_or(0.0),
    };
    (line, faults)
}

/// The seed of a folder named `seed-N`.
fn seed_of(path: &Path) -> Option<u64> {
    path.file_name()?.to_str()?.strip_prefix("seed-")?.parse().ok()
}

/// Reads every `seed-N/report.json` under `dir` (and notes each `seed-N`
/// folder without one). O(runs · faults).
pub fn summarize(dir: &Path) -> Result<Summary> {
    let mut seeds: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| Some((seed_of(&p)?, p)))
        .collect();
    seeds.sort();
    let (mut runs, mut without_report) = (Vec::new(), Vec::new());
    let mut by_kind: BTreeMap<String, Vec<Option<f64>>> = BTreeMap::new();
    for (seed, path) in seeds {
        let report = path.join("report.json");
        let Ok(text) = std::fs::read_to_string(&report) else {
            without_report.push(seed);
            continue;
        };
        let r: Value = serde_json::from_str(&text).with_context(|| format!("{}", report.display()))?;
        let (line, faults) = line_of(seed, &r);
        for (kind, rec) in faults {
            by_kind.entry(kind).or_default().push(rec);
        }
        runs.push(line);
    }
    let recovery = by_kind
        .into_iter()
        .map(|(k, v)| {
            let mut done: Vec<f64> = v.iter().flatten().copied().collect();
            done.sort_by(f64::total_cmp);
            let line = KindLine {
                faults: v.len(),
                median_s: quantile(&done, 0.5),
                p95_s: quantile(&done, 0.95),
                max_s: done.last().copied().unwrap_or(0.0),
                not_recovered: v.len() - done.len(),
            };
            (k, line)
        })
        .collect();
    Ok(Summary {
        faults: runs.iter().map(|r| r.faults).sum(),
        violations: runs.iter().map(|r| r.violations).sum(),
        unfinished: runs.iter().map(|r| r.unfinished).sum(),
        runs,
        without_report,
        recovery,
    })
}

/// Prints a summary as tables.
pub fn print(s: &Summary) {
    println!(
        "{} runs: {} faults, {} invariants broken, {} jobs stuck; {} without a report",
        s.runs.len(),
        s.faults,
        s.violations,
        s.unfinished,
        s.without_report.len()
    );
    println!(
        "{:>6} {:>6} {:>5} {:>10} {:>9} {:>13} {:>12} {:>14}",
        "seed", "faults", "kinds", "violations", "finished", "not recovered", "slowest (s)", "report p99 ms"
    );
    for r in &s.runs {
        println!(
            "{:>6} {:>6} {:>5} {:>10} {:>4}/{:<4} {:>13} {:>12.1} {:>14.1}",
            r.seed,
            r.faults,
            r.kinds,
            r.violations,
            r.finished,
            r.acknowledged,
            r.not_recovered,
            r.slowest_recovery_s,
            r.report_p99_ms
        );
    }
    println!(
        "{:<10} {:>6} {:>11} {:>8} {:>8} {:>14}",
        "fault", "count", "median (s)", "p95 (s)", "max (s)", "not recovered"
    );
    for (k, v) in &s.recovery {
        println!(
            "{k:<10} {:>6} {:>11.1} {:>8.1} {:>8.1} {:>14}",
            v.faults, v.median_s, v.p95_s, v.max_s, v.not_recovered
        );
    }
    for seed in &s.without_report {
        println!("seed {seed}: no report (see seed-{seed}.out)");
    }
}

/// Runs seeds `first .. first + runs`, `parallel` at a time, each a child
/// `orrery bench chaos` with `per_run` flags into `out/seed-N` (its output
/// in `out/seed-N.out`), with a progress bar; then summarises `out`.
pub fn run_many(first: u64, runs: u64, parallel: u64, per_run: &[String], out: &Path) -> Result<Summary> {
    std::fs::create_dir_all(out)?;
    let exe = std::env::current_exe()?;
    let bar = indicatif::ProgressBar::new(runs);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let mut going: Vec<(u64, Child)> = Vec::new();
    let (mut next, mut failed) = (first, 0);
    while next < first + runs || !going.is_empty() {
        if super::INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst) {
            // Each child cleans up its own cluster on SIGTERM.
            for (_, c) in &mut going {
                let pid = nix::unistd::Pid::from_raw(c.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
            for (_, c) in &mut going {
                let _ = c.wait();
            }
            bail!("interrupted; the runs done so far are in {}", out.display());
        }
        while going.len() < parallel as usize && next < first + runs {
            let dir = out.join(format!("seed-{next}"));
            let log = std::fs::File::create(out.join(format!("seed-{next}.out")))?;
            let child = Command::new(&exe)
                .args(["bench", "chaos", "--seed", &next.to_string(), "--out"])
                .arg(&dir)
                .args(per_run)
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()
                .context("starting a chaos run")?;
            going.push((next, child));
            next += 1;
            // Staggered: the runs' warm-ups (etcd elections) not all at once.
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        let mut k = 0;
        while k < going.len() {
            if let Some(status) = going[k].1.try_wait()? {
                let (seed, _) = going.swap_remove(k);
                if !status.success() {
                    failed += 1;
                    bar.set_message(format!("{failed} failed (last: seed {seed})"));
                }
                bar.inc(1);
            } else {
                k += 1;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    bar.finish();
    summarize(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_of_reports_is_summarised_per_run_and_per_kind() {
        let dir = tempfile::tempdir().expect("tempdir");
        let report = |recoveries: &[(&str, Option<f64>)], violations: usize, p99: f64| {
            let faults: Vec<Value> =
                recoveries.iter().map(|(k, r)| serde_json::json!({"kind": k, "recovery_s": r})).collect();
            serde_json::json!({
                "faults": faults, "violations": vec!["x"; violations], "acknowledged": 24, "finished": 24,
                "unfinished": [], "report_round_trips": {"p99_ms": p99}
            })
        };
        let write = |seed: u64, r: Value| {
            let d = dir.path().join(format!("seed-{seed}"));
            std::fs::create_dir_all(&d).expect("dir");
            std::fs::write(d.join("report.json"), r.to_string()).expect("write");
        };
        write(3, report(&[("kill", Some(0.3)), ("partition", Some(4.0)), ("kill", None)], 0, 5.0));
        write(1, report(&[("kill", Some(0.5)), ("delay", Some(1.0))], 1, 7.5));
        std::fs::create_dir_all(dir.path().join("seed-2")).expect("a run that left no report");
        std::fs::create_dir_all(dir.path().join("logs")).expect("not a run");
        let s = summarize(dir.path()).expect("summary");
        assert_eq!(s.runs.iter().map(|r| r.seed).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(s.without_report, vec![2]);
        assert_eq!((s.faults, s.violations, s.unfinished), (5, 1, 0));
        let r3 = &s.runs[1];
        assert_eq!((r3.faults, r3.kinds, r3.not_recovered, r3.slowest_recovery_s), (3, 2, 1, 4.0));
        let kill = &s.recovery["kill"];
        // Recovered kills: 0.3 and 0.5 s; one not recovered.
        assert_eq!((kill.faults, kill.not_recovered, kill.max_s), (3, 1, 0.5));
        assert_eq!(s.recovery["delay"].median_s, 1.0);
        assert!(summarize(&dir.path().join("none")).is_err());
    }
}
