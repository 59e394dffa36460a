//! The headline results of every paper's experiment, pinned. Each test runs
//! a short, deterministic version of an experiment file in `experiments/`
//! (fewer seeds, scenarios or jobs where the full one takes minutes) and
//! snapshots the table `orrery table` prints for it, with the cells
//! `docs/results.md` quotes. A change that moves a headline number fails
//! here, and its snapshot diff shows which; accept it with `cargo insta
//! review` and rerun the full experiment for the docs.

use orrery_lab::experiment::{Experiment, parse};
use orrery_lab::tables::{Cell, Layout, grid, job_table, table};
use std::path::{Path, PathBuf};

fn experiments() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments")
}

fn load(name: &str) -> Experiment {
    let file = experiments().join(format!("{name}.toml"));
    let text = std::fs::read_to_string(&file).expect("experiment file");
    parse(name, &text).expect("valid experiment")
}

/// Runs `e` and prints its table.
fn pinned(e: &Experiment, cells: &[&str], layout: Layout) -> String {
    let summary = e.run(&experiments(), |_, _, _, _, _| {}).expect("runs");
    assert!(summary.runs.iter().all(|r| r.invalid_decisions == 0), "every decision applies");
    let json = serde_json::to_value(&summary).expect("json");
    let cells: Vec<Cell> = cells.iter().map(|c| c.parse().expect("cell")).collect();
    table(&json, &cells, layout, &[]).expect("table")
}

fn cells(specs: &[&str]) -> Vec<Cell> {
    specs.iter().map(|c| c.parse().expect("cell")).collect()
}

fn keep_scenarios(e: &mut Experiment, names: &[&str]) {
    e.scenarios.retain(|s| names.contains(&s.name.as_str()));
    assert_eq!(e.scenarios.len(), names.len(), "scenarios {names:?} exist");
}

const H_L: [&str; 2] = ["H=by_priority.high.avg_iter_s", "L=by_priority.low.avg_iter_s"];

#[test]
fn metronome_table_iv() {
    // docs/results.md "Table IV snapshots S1–S5", whole (1 s in release).
    let e = load("metronome-snapshots");
    insta::assert_snapshot!(pinned(&e, &H_L, Layout::Wide));
}

#[test]
fn metronome_fig_10_trace() {
    // docs/results.md "Fig. 10: 4-hour trace", whole: the makespan, mean
    // queueing and mean iteration of each policy.
    let e = load("metronome-trace");
    insta::assert_snapshot!(pinned(
        &e,
        &["makespan (s)=metrics.makespan_s", "queue (s)=metrics.avg_queue_s", "iteration (s)=metrics.avg_iter_s"],
        Layout::Long
    ));
}

#[test]
fn cassini_pair_and_snapshots() {
    // docs/results.md "CASSINI": the pair of Fig. 2 and the snapshots of
    // Table 2, every seed (they take milliseconds).
    let cells = ["mean (ms)=metrics.avg_iter_s/0.001:1", "p99 (ms)=metrics.p99_iter_s/0.001:1"];
    let pair = pinned(&load("cassini-pair"), &cells, Layout::Long);
    let snapshots = pinned(&load("cassini-snapshots"), &cells, Layout::Long);
    insta::assert_snapshot!(format!("cassini-pair\n{pair}\ncassini-snapshots\n{snapshots}"));
}

#[test]
fn cassini_snapshots_with_ring_steps() {
    // docs/results.md "Ring all-reduce as NCCL runs it": Table 2's snapshots
    // with `[sim] all_reduce = "steps"`. Alone both take the same time;
    // here T2-2 under `pinned` takes 507.6 ms against 504.0 ms as flows.
    let mut e = load("cassini-snapshots");
    e.sim.all_reduce = orrery_lab::experiment::AllReduce::Steps;
    let cells = ["mean (ms)=metrics.avg_iter_s/0.001:1", "p99 (ms)=metrics.p99_iter_s/0.001:1"];
    insta::assert_snapshot!(pinned(&e, &cells, Layout::Long));
}

#[test]
fn castor_table_5_short() {
    // docs/results.md "Table 5" and the ablation, short: one seed, 120 of
    // Philly's sample at twice the load (at load 1 a short run never
    // queues, so every policy ties).
    let mut e = load("castor-philly");
    e.seeds.truncate(1);
    e.workload.jobs = Some(120);
    e.workload.load = Some(2.0);
    e.policies.retain(|p| ["castor", "castor:shorter-first", "sjf-ffs", "sjf", "tiresias"].contains(&p.as_str()));
    e.policies.insert(1, "castor:shorter-first".into());
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "JCT (h)=metrics.avg_jct_s/3600:3",
            "queue (h)=metrics.avg_queue_s/3600:3",
            "GPU idle=metrics.gpu_idle%",
            "GPU time shared=metrics.gpu_shared%"
        ],
        Layout::Long
    ));
}

#[test]
fn foresight_fig_5_at_two_to_one() {
    // docs/results.md "Fig. 5": 4 spines (2:1), the first two of its six
    // placements; ECMP's mean iteration over each policy's.
    let mut e = load("foresight-spines");
    keep_scenarios(&mut e, &["spines=4,frag=0.5"]);
    e.seeds.truncate(2);
    insta::assert_snapshot!(pinned(
        &e,
        &["gain=comparison.gain_avg_iter:3", "mean it (s)=metrics.avg_iter_s"],
        Layout::Long
    ));
}

#[test]
fn cassini_table_2_per_job() {
    // docs/results.md "Table 2": each job's time alone and its mean
    // iteration under each policy, as `orrery table jobs.csv` prints it.
    let e = load("cassini-snapshots");
    let summary = e.run(&experiments(), |_, _, _, _, _| {}).expect("runs");
    let rows: Vec<serde_json::Value> =
        summary.runs.iter().flat_map(|r| &r.jobs).map(|j| serde_json::to_value(j).expect("json")).collect();
    let t = job_table(&rows, &cells(&["alone (ms)=isolated_iter_ms:0", "ms=iter_mean_ms:0"]), &[]).expect("table");
    insta::assert_snapshot!(t);
}

#[test]
fn foresight_fig_6_short() {
    // docs/results.md "Fig. 6": per-placement gains over ECMP at
    // fragmentation 0.5, the first 5 of its 20 placements.
    let mut e = load("foresight-placements");
    keep_scenarios(&mut e, &["frag=0.5"]);
    e.seeds.truncate(5);
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "mean=comparison.gain_avg_iter:2",
            "min=gain.metrics.avg_iter_s@min:3",
            "median=gain.metrics.avg_iter_s@median:2",
            "max=gain.metrics.avg_iter_s@max:2",
            "worse than ECMP=gain.metrics.avg_iter_s@below1",
        ],
        Layout::Long
    ));
}

#[test]
fn foresight_fig_7_short() {
    // docs/results.md "Fig. 7" (left), a 2 x 2 corner of the grid, one seed.
    let mut e = load("foresight-heatmap");
    keep_scenarios(&mut e, &["frag=0.5,batch=4", "frag=0.5,batch=32", "frag=0.8,batch=4", "frag=0.8,batch=32"]);
    e.seeds.truncate(1);
    let summary = e.run(&experiments(), |_, _, _, _, _| {}).expect("runs");
    let json = serde_json::to_value(&summary).expect("json");
    let t = grid(&json, &cells(&["gain=comparison.gain_avg_iter:2"]), &["foresight".into(), "perfect".into()])
        .expect("grid");
    insta::assert_snapshot!(t);
}

#[test]
fn cassini_fig_11_short() {
    // docs/results.md "§5.2, Fig. 11", short: 24 jobs at load 0.9, one seed
    // (the built-in suite's version); Themis' mean over each policy's.
    let mut e = load("cassini-poisson");
    keep_scenarios(&mut e, &["load=0.9"]);
    e.seeds.truncate(1);
    e.workload.jobs = Some(24);
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "mean it=comparison.gain_avg_iter:2",
            "p99 it=comparison.gain_p99_iter:2",
            "mean JCT=comparison.gain_avg_jct:2"
        ],
        Layout::Wide
    ));
}

#[test]
fn benchmark_network_short() {
    // docs/results.md "The combined policy where the network matters",
    // short: seed 1, load 1.5, the first 50 jobs.
    let mut e = load("benchmark-network");
    keep_scenarios(&mut e, &["load=1.5"]);
    e.seeds.truncate(1);
    e.workload.jobs = Some(50);
    let keep = [
        "themis",
        "themis+cassini",
        "pollux",
        "srtf",
        "sjf+foresight",
        "orrery",
        "orrery-no-share",
        "orrery-no-size",
        "orrery-no-preempt",
    ];
    e.policies.retain(|p| keep.contains(&p.as_str()));
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "mean JCT (s)=metrics.avg_jct_s",
            "p99 JCT (s)=metrics.p99_jct_s",
            "high-priority slowdown=by_priority.high.avg_slowdown:3",
            "shrunk=counters.shrunk_starts:0",
            "priced=counters.priced_starts:0",
            "shared=counters.shared_starts:0",
            "preempted=counters.preemptions:0"
        ],
        Layout::Long
    ));
}

#[test]
fn benchmark_llm_short() {
    // docs/results.md "The LLM-cluster benchmark", short: seed 1, the H100
    // set-up at load 0.9, the first 40 jobs; the mean time alone is the
    // bound no policy running the requested meshes beats (the same for
    // every policy that finishes every job), and `tas-required:rack` turns
    // away the gangs no rack holds.
    let mut e = load("benchmark-llm");
    keep_scenarios(&mut e, &["h100 load=0.9"]);
    e.seeds.truncate(1);
    e.workload.jobs = Some(40);
    let keep = ["fifo", "srtf", "crux", "tas-required:rack", "slurm-block", "orrery"];
    e.policies.retain(|p| keep.contains(&p.as_str()));
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "finished=metrics.finished:0",
            "mean JCT (s)=metrics.avg_jct_s:0",
            "mean time alone (s)=metrics.avg_alone_s:0",
            "p99 JCT (s)=metrics.p99_jct_s:0",
            "longest wait / alone=metrics.max_wait_over_alone:2"
        ],
        Layout::Long
    ));
}

#[test]
fn benchmark_philly_short() {
    // docs/results.md "The combined policy on a shared benchmark", short:
    // seed 1, 120 of Philly's sample at twice the load (as Castor's short
    // table: in a short run at load 1 or 1.5 nothing queues and every
    // policy ties).
    let mut e = load("benchmark");
    keep_scenarios(&mut e, &["load=1.5"]);
    e.scenarios[0].name = "load=2".into();
    e.scenarios[0].load = Some(2.0);
    e.seeds.truncate(1);
    e.workload.jobs = Some(120);
    let keep = ["themis", "pollux", "srtf", "orrery", "orrery-no-size", "orrery-no-preempt"];
    e.policies.retain(|p| keep.contains(&p.as_str()));
    e.baseline = Some("themis".into());
    insta::assert_snapshot!(pinned(
        &e,
        &[
            "mean JCT (s)=metrics.avg_jct_s",
            "p99 JCT (s)=metrics.p99_jct_s",
            "high-priority slowdown=by_priority.high.avg_slowdown:3",
            "low-priority slowdown=by_priority.low.avg_slowdown:3"
        ],
        Layout::Long
    ));
}
