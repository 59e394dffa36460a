//! The `orrery` binary end to end: outputs users rely on and exit codes.

use std::path::PathBuf;
use std::process::{Command, Output};

fn orrery(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_orrery"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("run orrery")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn trace_inspect_reports_82247_philly_jobs() {
    let o = orrery(&["trace", "inspect", "data/philly/philly_jobs_pollux.csv", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["summary"]["jobs"], 82_247);
    assert_eq!(v["format"], "philly");
    assert_eq!(v["summary"]["gpu_histogram"]["1"], 76_627);
    let text = orrery(&["trace", "inspect", "data/philly/philly_jobs_pollux.csv"]);
    assert!(stdout(&text).contains("jobs              82247"), "{}", stdout(&text));
}

#[test]
fn bad_rows_exit_non_zero_with_file_line_and_field() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let f = dir.join("bad.csv");
    std::fs::write(&f, "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-01 10:00:00,100,1,100,a\n2017-10-01 10:00:00,100,x,100,a\n")
        .expect("write");
    let o = orrery(&["trace", "inspect", f.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("bad.csv:3: field `num_gpus`: expected a positive integer, found \"x\""), "{err}");
    assert!(stdout(&o).contains("jobs              1"), "the good row is still summarised");
    let o = orrery(&["trace", "inspect", "/definitely/not/here.csv"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot read /definitely/not/here.csv"), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "no summary of nothing: {}", stdout(&o));
    // The wrong --format: every row fails, and the header's format is named.
    let muri = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/philly/muri_trace1.csv");
    let o = orrery(&["trace", "inspect", muri, "--format", "philly"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("every one of its 1494 rows failed as philly; its header looks like muri"), "{err}");
}

#[test]
fn zoo_derives_vgg16_shape() {
    let o = orrery(&["zoo", "vgg16", "--gpu", "v100", "--batch", "16", "--workers", "4", "--gbps", "50", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    // 68 ms of compute (Muri's measurement) + 1.5 · 553.6 MB at 50 Gbit/s = 132.864 ms.
    let ms = v[0]["iteration_ms"].as_f64().unwrap_or(0.0);
    assert!((ms - 200.864).abs() < 1e-6, "{ms}");
    let o = orrery(&["zoo", "vgg99"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no model \"vgg99\" in the zoo"));
}

#[test]
fn zoo_times_an_llm_mesh_and_names_a_count_that_cannot_hold_the_model() {
    let mesh = r#"{"tp": 8, "pp": 4, "dp": 8, "microbatches": 16}"#;
    let args = ["zoo", "llama3-70b", "--gpu", "h100", "--per-host", "8", "--gbps", "3200", "--parallelism", mesh];
    let o = orrery(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    for part in ["on 256 GPUs of h100", "TP all-reduces", "PP sends", "DP collectives", "MFU"] {
        assert!(out.contains(part), "{part}: {out}");
    }
    // The JSON shape's period is the one the simulator runs.
    let mut json = args.to_vec();
    json.push("--json");
    let v: serde_json::Value = serde_json::from_slice(&orrery(&json).stdout).expect("json");
    assert_eq!(v["circle"]["arcs"].as_array().map(Vec::len), Some(9), "8 chunks of pipeline sends and the DP ring");
    let o = orrery(&["zoo", "llama3-70b", "--parallelism", r#"{"tp": 3}"#]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("tp = 3 does not divide llama3-70b's 64 attention heads"), "{}", stderr(&o));
    let o = orrery(&["zoo", "vgg16", "--parallelism", r#"{"tp": 2}"#]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("needs an LLM"), "{}", stderr(&o));
}

#[test]
fn zoo_calibration_prints_the_median() {
    let o = orrery(&["zoo", "--calibration", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert!(v["median_rel_error"].as_f64().unwrap_or(1.0) <= 0.15);
}

#[test]
fn topo_show_builtin_and_file_errors() {
    let o = orrery(&["topo", "show", "cassini"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("hosts      24 (24 GPUs)") && out.contains("switches   13") && out.contains("cables     48"),
        "{out}"
    );
    assert!(out.contains("oversubscription 2.00:1"), "{out}");
    let o = orrery(&["topo", "show", "philly"]);
    assert!(stdout(&o).contains("hosts      552 (2490 GPUs)"), "{}", stdout(&o));
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let f = dir.join("t.toml");
    std::fs::write(&f, "[leaf_spine]\nracks = 2\nhosts_per_rack = 4\nspines = \"two\"\n").expect("write");
    let o = orrery(&["topo", "show", f.to_str().expect("utf-8 path")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("t.toml:4:"), "{}", stderr(&o));
}

#[test]
fn compat_reproduces_cassini_fig5_and_draws_it() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let svg = dir.join("fig5.svg");
    let o = orrery(&["compat", "experiments/compat/cassini-fig5.json", "--svg", svg.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["score"], 1.0);
    assert_eq!(v["perimeter_ms"], 120.0);
    // Fig. 5(d): a 30° rotation (10 ms of the 120 ms circle) interleaves j1 and j2.
    assert_eq!(v["jobs"][1]["rotation_deg"], 30.0);
    assert_eq!(v["jobs"][1]["shift_ms"], 10.0);
    let drawing = std::fs::read_to_string(&svg).expect("svg written");
    assert!(drawing.contains("after rotation: score 1.000"));
}

#[test]
fn compat_rejects_bad_phases_with_the_field() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let f = dir.join("bad.json");
    std::fs::write(&f, r#"{"link_gbps": 50, "jobs": [{"name": "x", "period_ms": 100, "phases": [{"start_ms": 120, "duration_ms": 5, "gbps": 10}]}]}"#)
        .expect("write");
    let o = orrery(&["compat", f.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("jobs[0] (x).phases[0].start_ms: expected a time in [0, 100) ms, found 120"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn run_default_writes_summary_jobs_and_links() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    // CI keeps the suite's reports for its browser checks instead of
    // running the suite a second time (ORRERY_SUITE_OUT, an absolute path).
    let dir = match std::env::var_os("ORRERY_SUITE_OUT") {
        Some(d) => PathBuf::from(d),
        None => dir_guard.path().to_path_buf(),
    };
    let o = orrery(&["run", "--quiet", "--out", dir.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The suite: one folder per experiment.
    for e in ["cassini-pair", "cassini-poisson", "metronome-snapshots"] {
        assert!(dir.join(e).join("summary.json").exists(), "{e}");
    }
    let dir = dir.join("default");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).expect("summary")).expect("json");
    assert_eq!(v["experiment"], "default");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(
        runs.iter().map(|r| r["policy"].as_str().unwrap_or("")).collect::<Vec<_>>(),
        ["fifo", "random", "ideal"]
    );
    for key in [
        "jobs",
        "finished",
        "avg_jct_s",
        "p99_jct_s",
        "makespan_s",
        "avg_queue_s",
        "avg_iter_s",
        "p90_iter_s",
        "p99_iter_s",
        "avg_slowdown",
        "avg_link_util",
        "bw_util_gamma",
        "congested_link_s",
        "excess_gbit",
        "gpu_util",
        "afr",
        "decision_ms_p50",
        "decision_ms_p99",
    ] {
        assert!(runs[0]["metrics"].get(key).is_some(), "missing {key}");
    }
    assert_eq!(runs[0]["metrics"]["jobs"], 60);
    // The ideal network never slows a job down relative to running alone.
    assert!((runs[2]["metrics"]["avg_slowdown"].as_f64().unwrap_or(0.0) - 1.0).abs() < 0.01);
    let jobs = std::fs::read_to_string(dir.join("jobs.csv")).expect("jobs.csv");
    assert_eq!(jobs.lines().count(), 1 + 3 * 60);
    assert!(
        std::fs::read_to_string(dir.join("links.csv")).expect("links.csv").starts_with("policy,seed,scenario,link,")
    );
    let cdf = std::fs::read_to_string(dir.join("iteration_cdf.svg")).expect("iteration_cdf.svg");
    for policy in ["fifo", "random", "ideal"] {
        assert!(cdf.contains(&format!("\n{policy}\n</text>")), "legend lacks {policy}");
    }
    // Every figure also as PNG (a real image: PNG signature), and one page with them all.
    for stem in ["jct_cdf", "iteration_cdf", "link_util", "gantt"] {
        let png = std::fs::read(dir.join(format!("{stem}.png"))).expect("png");
        assert!(png.starts_with(b"\x89PNG"), "{stem}.png");
    }
    let html = std::fs::read_to_string(dir.join("report.html")).expect("report.html");
    assert!(html.contains("<h2 id=\"comparison\">Comparison</h2>") && html.matches("<svg").count() >= 4, "report.html");
    // The page leads with what the experiment is, the headline and the key
    // figures; the long tables come after, folded.
    let at = |needle: &str| html.find(needle).unwrap_or_else(|| panic!("report.html lacks {needle}"));
    assert!(at("orrery's built-in default: 16 hosts") < at("<b>orrery:</b>"));
    assert!(at("<b>orrery:</b> random against fifo") < at("<figure"), "the headline names the best policy by mean JCT");
    assert!(at("<figure") < at("id=\"comparison\""));
    assert!(at("id=\"comparison\"") < at("<details><summary>Mean iteration time per job"));
}

#[test]
fn run_rejects_a_bad_experiment_with_its_line() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let f = dir.join("x.toml");
    std::fs::write(&f, "name = \"x\"\npolicies = [\"fifo\"]\n[topology]\nbuiltin = \"cassini\"\n[workload]\ngenerator = \"poisson\"\nload = \"high\"\n")
        .expect("write");
    let o = orrery(&["run", f.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("x.toml:7:"), "{}", stderr(&o));
}

#[test]
fn auction_scale_experiment_prints_and_plots() {
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let f = dir.join("s.toml");
    std::fs::write(&f, "kind = \"auction-scale\"\nname = \"s\"\nagents = [4, 32]\nworkers = 8\n").expect("write");
    let out = dir.join("out");
    let o = orrery(&["run", f.to_str().expect("utf-8"), "--out", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("U/greedy"), "{}", stdout(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary")).expect("json");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1]["agents"], 32);
    assert_eq!(rows[1]["agreed"], true);
    for stem in ["scale-time", "scale-messages"] {
        assert!(std::fs::read(out.join(format!("{stem}.png"))).expect("png").starts_with(b"\x89PNG"), "{stem}");
    }
    // A bad size is named.
    std::fs::write(&f, "kind = \"auction-scale\"\nname = \"s\"\nagents = [0]\n").expect("write");
    let o = orrery(&["run", f.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("agents"), "{}", stderr(&o));
}

#[test]
fn plebiscito_places_alibaba_shaped_jobs() {
    // Real rows of Alibaba's v2023 multi-GPU pod list (openb-pod-0000..0003, 0017).
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    std::fs::write(
        dir.join("pods.csv"),
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\nopenb-pod-0000,12000,16384,1,1000\nopenb-pod-0001,6000,12288,1,460\n\
         openb-pod-0002,12000,24576,1,1000\nopenb-pod-0003,6000,12288,1,460\nopenb-pod-0017,88000,327680,8,1000\n",
    )
    .expect("pods");
    std::fs::write(
        dir.join("p.toml"),
        "name = \"p\"\npolicies = [\"plebiscito:tetris\", \"plebiscito:tetris:unaware\"]\n[topology]\nbuiltin = \"plebiscito-25\"\n\
         [workload]\ngenerator = \"components\"\ntrace = \"pods.csv\"\njobs = 12\ninterarrival_s = 15\n\
         [workload.mix]\nmodels = [\"resnet50\", \"vgg16\"]\nworkers = [[2, 1.0], [4, 1.0]]\niterations = [20, 40]\n",
    )
    .expect("toml");
    let out = dir.join("out");
    let o =
        orrery(&["run", "--quiet", dir.join("p.toml").to_str().expect("utf-8"), "--out", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary")).expect("json");
    for run in v["runs"].as_array().expect("runs") {
        assert_eq!(run["metrics"]["finished"], 12, "{}", run["policy"]);
        let c = &run["counters"];
        assert_eq!(c["allocation_failure_rate"], 0.0, "{}", run["policy"]);
        assert!(c["auctions"].as_f64().unwrap_or(0.0) >= 12.0);
        assert!(c["bytes_per_message"].as_f64().unwrap_or(1e9) < 600.0);
    }
    // Policies in pairs P and P:unaware get a heatmap of P's gain.
    assert!(std::fs::read(out.join("variant_gain.png")).expect("png").starts_with(b"\x89PNG"));
}

#[test]
fn numeric_flags_refuse_nan_and_out_of_range_values_naming_the_flag() {
    // Issue 21: `--gbps NaN` printed NaN durations with exit 0, and a NaN
    // time-out reached `Duration::from_secs_f64`, which panics.
    for (args, flag) in [
        (&["zoo", "vgg16", "--gbps", "NaN"][..], "--gbps"),
        (&["trace", "generate", "--load=-1"][..], "--load"),
        (&["agent", "--node", "--exit-after-idle-s", "inf"][..], "--exit-after-idle-s"),
        (&["k8s", "run", "--group-timeout-s", "NaN"][..], "--group-timeout-s"),
    ] {
        let o = orrery(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(flag) && err.contains("expected a"), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn castor_policies_share_gpus_and_report_by_job_size() {
    // Pollux's Philly jobs on 4 servers of 8 A6000s (jobs of more than 32
    // GPUs are rejected): sharing, its ablations, and Castor's tables.
    let dir_guard = tempfile::tempdir().expect("temp dir");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(&dir).expect("tmp dir");
    std::fs::write(
        dir.join("c.toml"),
        "name = \"c\"\npolicies = [\"castor\", \"sjf-ffs\", \"lucid\", \"sjf\"]\nbaseline = \"sjf\"\n\
         [topology.leaf_spine]\nracks = 1\nhosts_per_rack = 4\nspines = 1\ngpus_per_host = 8\ngpu_type = \"a6000\"\n\
         host_gbps = 200.0\nuplink_gbps = 800.0\n\
         [workload]\ngenerator = \"pollux-sample\"\njobs = 40\n\
         [[scenario]]\nname = \"xi=true\"\n[[scenario]]\nname = \"xi=predicted\"\nxi = \"predicted\"\n\
         [[scenario]]\nname = \"sharing=temporal\"\nsharing = \"temporal\"\n",
    )
    .expect("toml");
    let out = dir.join("out");
    let o =
        orrery(&["run", "--quiet", dir.join("c.toml").to_str().expect("utf-8"), "--out", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).expect("summary")).expect("json");
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 12);
    let get = |p: &str, sc: &str| {
        runs.iter().find(|r| r["policy"] == p && r["scenario"] == sc).unwrap_or_else(|| panic!("{p} {sc}"))
    };
    for r in runs {
        let m = &r["metrics"];
        let rejected = (m["afr"].as_f64().expect("afr") * 40.0).round() as u64;
        assert_eq!(m["finished"].as_u64().expect("finished") + rejected, 40, "{} {}", r["policy"], r["scenario"]);
        assert_eq!(r["invalid_decisions"], 0, "{} {}", r["policy"], r["scenario"]);
        assert!(m["avg_jct_small_s"].as_f64().expect("small") > 0.0);
    }
    // First-fit sharing shares whenever GPUs are short; sjf never does.
    assert!(get("sjf-ffs", "xi=true")["metrics"]["gpu_shared"].as_f64().expect("shared") > 0.0);
    assert_eq!(get("sjf", "xi=true")["metrics"]["gpu_shared"], 0.0);
    let html = std::fs::read_to_string(out.join("report.html")).expect("report");
    assert!(html.contains("By job size") && html.contains("JCT large"));
    for stem in ["gpu_idle", "gpu_shared"] {
        assert!(std::fs::read(out.join(format!("{stem}.png"))).expect("png").starts_with(b"\x89PNG"), "{stem}");
    }
}

#[test]
fn shards_run_apart_merge_into_the_outputs_of_one_run() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let path = |p: &str| tmp.path().join(p).to_str().expect("utf-8").to_string();
    let file = "experiments/cassini-pair.toml";
    let whole = orrery(&["run", file, "--quiet", "--out", &path("whole")]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    for k in ["1/2", "0/2"] {
        let o = orrery(&["run", file, "--shard", k, "--out", &path("shards")]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(stderr(&o).contains("(1 of 2 runs)"), "{}", stderr(&o));
    }
    let missing = orrery(&["merge", &path("shards/shard-0-of-2.cbor"), "--out", &path("merged")]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("1 of 2 shards missing: shard-1-of-2.cbor"), "{}", stderr(&missing));
    let merged = orrery(&["--timings", "merge", &path("shards"), "--out", &path("merged")]);
    assert!(merged.status.success(), "{}", stderr(&merged));
    // The comparison table as one run prints it, and each output phase timed.
    assert!(stdout(&merged).contains("comparison against pinned"), "{}", stdout(&merged));
    for phase in ["merge", "summary.json", "jobs.csv", "links.csv", "figures", "report.html"] {
        assert!(stderr(&merged).contains(&format!("\n  {phase} ")), "no {phase} in {}", stderr(&merged));
    }
    for csv in ["jobs.csv", "links.csv"] {
        let read = |dir: &str| std::fs::read_to_string(tmp.path().join(dir).join(csv)).expect("csv");
        assert_eq!(read("merged"), read("whole"), "{csv}");
    }
    let summary = |dir: &str| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(tmp.path().join(dir).join("summary.json")).expect("summary"))
                .expect("json");
        for run in v["runs"].as_array_mut().expect("runs") {
            for key in ["/wall_s", "/decisions_s", "/metrics/decision_ms_p50", "/metrics/decision_ms_p99"] {
                *run.pointer_mut(key).expect(key) = serde_json::Value::Null;
            }
        }
        v
    };
    assert_eq!(summary("merged"), summary("whole"));
    assert!(tmp.path().join("merged/report.html").exists() && tmp.path().join("merged/gantt.svg").exists());
    let bad = orrery(&["run", file, "--shard", "2/2", "--out", &path("x")]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("expected K/N with 0 <= K < N (K counts from 0), found \"2/2\""), "{}", stderr(&bad));
}
