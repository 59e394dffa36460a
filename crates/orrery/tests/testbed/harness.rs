//! Helpers of the testbed tests: runs, namespaces, CSV readers, the
//! testbed lock and judging over starts.

pub(crate) use std::path::{Path, PathBuf};
pub(crate) use std::process::Command;

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_orrery");

pub(crate) fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub(crate) fn namespaces_with(prefix: &str) -> Vec<String> {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&format!("{prefix}-")))
        .map(String::from)
        .collect()
}

/// Runs `orrery testbed compare experiments/EXPERIMENT ARGS` on namespaces
/// named `PREFIX<pid>-*` into a temporary folder, returned, giving up on a
/// policy's run after `limit_s` (each test's measured run time on a 2-core
/// CI machine, with the other tests running, times about 2.3). Whatever
/// happened, no namespace is left behind; the run must succeed.
pub(crate) fn compare(prefix: &str, experiment: &str, args: &[&str], limit_s: u32) -> tempfile::TempDir {
    let prefix = format!("{prefix}{}", std::process::id() % 100_000);
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new(BIN)
        .args(["testbed", "compare"])
        .arg(repo().join("experiments").join(experiment))
        .args(args)
        .args(["--prefix", &prefix, "--time-limit-s", &limit_s.to_string(), "--out"])
        .arg(out.path())
        .status()
        .expect("orrery testbed compare");
    assert_none_left(&prefix);
    assert!(status.success(), "orrery testbed compare {experiment} {args:?} failed");
    out
}

/// Removes any namespace named `PREFIX-*` and fails if there was one: a
/// testbed command must remove what it made, whatever happened.
pub(crate) fn assert_none_left(prefix: &str) {
    let left = namespaces_with(prefix);
    for n in &left {
        let _ = Command::new("ip").args(["netns", "del", n]).status();
    }
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// The mean of `column` over the CSVs named `PREFIX*.csv` in a run's
/// `workers/` folder (`phases-*.csv` of a real pipeline's ranks,
/// `worker-*.csv` of every rank), after each rank's first four iterations.
pub(crate) fn mean_of(workers: &Path, prefix: &str, column: &str) -> f64 {
    let mut values = Vec::new();
    for entry in std::fs::read_dir(workers).expect("workers/").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !(name.starts_with(prefix) && name.ends_with(".csv")) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).expect("csv");
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().expect("header").split(',').collect();
        let col = |k: &str| header.iter().position(|h| *h == k).unwrap_or_else(|| panic!("{name}: no {k}"));
        let (iteration, wanted) = (col("iteration"), col(column));
        for line in lines {
            let f: Vec<&str> = line.split(',').collect();
            if f.get(iteration).and_then(|i| i.parse::<u64>().ok()).is_some_and(|i| i > 4) {
                values.extend(f.get(wanted).and_then(|c| c.parse::<f64>().ok()));
            }
        }
    }
    assert!(!values.is_empty(), "no {column} in {}/{prefix}*.csv", workers.display());
    values.iter().sum::<f64>() / values.len() as f64
}

/// Err(message) from the enclosing judge when `cond` does not hold.
macro_rules! ensure {
    ($cond:expr, $($msg:tt)+) => {
        let holds: bool = $cond;
        if !holds {
            return Err(format!($($msg)+));
        }
    };
}

/// Judges a measured property of real processes on a shared 2-core host,
/// from several starts as a testbed result is judged: a first start that
/// holds it stands; after a miss, two more starts must both hold it (two
/// of three). Every miss is printed with its numbers.
pub(crate) fn judged_over_starts(what: &str, mut start: impl FnMut() -> Result<(), String>) {
    let Err(first) = start() else { return };
    eprintln!("{what}, start 1 of 3 missed: {first}");
    for n in 2..=3 {
        if let Err(miss) = start() {
            panic!("{what} missed in starts 1 and {n} of 3: {first}; then {miss}");
        }
        eprintln!("{what}, start {n} of 3 held");
    }
}

/// A JSON file a run wrote, parsed; a missing or broken file fails the
/// test with its path.
pub(crate) fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A start written with assertions, as [`judged_over_starts`] takes one:
/// a panic is its miss (the panic's message is printed as it happens).
pub(crate) fn caught(start: fn()) -> impl FnMut() -> Result<(), String> {
    move || {
        std::panic::catch_unwind(start).map_err(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
    }
}

/// compare.csv as (policy, job) → (measured mean, simulated mean, alone).
pub(crate) fn read_compare(path: &Path) -> std::collections::BTreeMap<(String, String), (f64, f64, f64)> {
    let text = std::fs::read_to_string(path).expect("compare.csv");
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let (p, j, m, s, a) =
        (col("policy"), col("job"), col("measured_mean_ms"), col("simulated_mean_ms"), col("isolated_ms"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            let num = |i: usize| f[i].parse::<f64>().expect("number");
            ((f[p].to_string(), f[j].to_string()), (num(m), num(s), num(a)))
        })
        .collect()
}

/// The testbed's runs measure time on a 2-core machine. A run of emulated
/// workers (`orrery worker`: compute is a sleep, the ring a TCP transfer on
/// 500 Mbit/s links) uses little of it: Metronome's S2, 200 iterations, took
/// 11.5 CPU-seconds in 105 s, service and agents included, so the pairs
/// test runs two such runs at once, each on namespaces of its own. Real
/// PyTorch ranks compute, and the throughput tests measure the kernel's
/// rates. Each testbed test takes the testbed alone: a lock on a file.
///
/// The testbed to this test alone (held while the file is open), or None
/// after saying why it skips: network namespaces are unavailable here.
pub(crate) fn turn_alone() -> Option<std::fs::File> {
    let turn = crate::turns::take_turn("testbed.lock");
    available().then_some(turn)
}

/// Whether network namespaces can be made here; if not, says why.
pub(crate) fn available() -> bool {
    let why = orrery_testbed::fabric::unavailable();
    if let Some(why) = &why {
        eprintln!("skipped: network namespaces are unavailable here ({why})");
    }
    why.is_none()
}

/// The `align` and `shift` decisions of a run's measured.json and the
/// notes that say what called for each, to say why a shifted pair collided.
pub(crate) fn alignments(measured: &serde_json::Value) -> String {
    let decisions = measured["decisions"].as_array().map(Vec::as_slice).unwrap_or_default();
    decisions
        .iter()
        .filter(|d| ["align", "shift", "note"].iter().any(|k| d["entry"]["kind"] == *k))
        .map(|d| format!("{} ", d))
        .collect()
}

/// A Python that imports torch with gloo, as `orrery testbed compare --ddp` looks for it.
pub(crate) fn torch_python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import torch.distributed as d; assert d.is_gloo_available()"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Runs `orrery testbed SUBCOMMAND ARGS --prefix STEM+pid --out FILE`,
/// checks that it succeeded and left no namespace behind, and returns
/// the rows it wrote.
pub(crate) fn testbed_rows(stem: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let prefix = format!("{stem}{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let rows_file = dir.path().join("rows.json");
    let status = Command::new(BIN)
        .args(["testbed"])
        .args(args)
        .args(["--prefix", &prefix, "--out"])
        .arg(&rows_file)
        .status()
        .expect("orrery testbed");
    assert_none_left(&prefix);
    assert!(status.success(), "orrery testbed {args:?} failed");
    let serde_json::Value::Array(rows) = json(&rows_file) else {
        panic!("{}: not a list of rows", rows_file.display())
    };
    rows
}
