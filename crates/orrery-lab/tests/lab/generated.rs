//! Every policy on generated workloads over generated leaf-spine fabrics.
//!
//! Issue 41 found FORESIGHT's policy (and so `orrery`) panicking with an
//! index out of bounds on an ordinary Poisson workload: it rebuilt a flow's
//! endpoints from the flow's index as if every collective were a ring
//! (`workers[flow]`, `workers[flow + 1]`), and DLRM's all-to-all has n·(n − 1)
//! flows. The class is "an index from one collection used in another"; this
//! test looks for it the way a user meets it: random clusters (racks, hosts
//! per rack, GPUs per host, spines, uplink speed) and random Poisson
//! workloads (the zoo's models including the all-to-all and pipeline ones,
//! Philly's job sizes up to 16 workers and beyond a host), under every
//! policy in the catalogue and every FORESIGHT mode. Each run must finish
//! without a panic, and every job must either finish or be reported as never
//! fitting.
//!
//! `ORRERY_FUZZ_CASES` sets the number of generated clusters (12 by default;
//! each runs about 45 policies). A failure names the case's TOML.

use orrery_lab::experiment::parse;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::path::Path;

/// Every concrete policy: the catalogue's plain names, each FORESIGHT mode
/// over SJF, CASSINI over Themis, Plebiscito's utilities and `orrery`'s
/// ablations.
fn policies() -> Vec<String> {
    let mut out: Vec<String> = orrery_policy::CATALOGUE
        .iter()
        .map(|c| c.0)
        .filter(|n| {
            !orrery_policy::compose::PINNED_NAMES.contains(n) && !n.contains(char::is_uppercase) && !n.contains('[')
        })
        .map(String::from)
        .collect();
    for mode in ["ts", "ro", "sub", "foresight", "foresight-paper", "routes", "perfect"] {
        out.push(format!("sjf+{mode}"));
    }
    out.push("themis+cassini+foresight".into());
    out.extend(
        [
            "themis+cassini",
            "themis+cassini:paper",
            "themis+cassini:measured",
            "tiresias/random+cassini",
            "plebiscito:sgf",
            "plebiscito:tetris:unaware",
        ]
        .map(String::from),
    );
    out.extend(
        [
            "orrery",
            "orrery-no-share",
            "orrery-no-bandwidth",
            "orrery-no-interleave",
            "orrery-no-routes",
            "orrery-no-size",
            "orrery-no-bandwidth-no-size",
        ]
        .map(String::from),
    );
    out.sort();
    out.dedup();
    out
}

/// A random leaf-spine cluster and Poisson workload, as an experiment file.
fn case(seed: u64, policies: &[String]) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let racks = rng.random_range(2..=5);
    let hosts_per_rack = rng.random_range(1..=6);
    let gpus_per_host = [1, 2, 4, 8][rng.random_range(0..4)];
    let spines = rng.random_range(1..=4);
    let host_gbps = [25.0, 50.0, 100.0][rng.random_range(0..3)];
    let uplink_gbps = [25.0, 50.0, 100.0][rng.random_range(0..3)];
    let gpus = racks * hosts_per_rack * gpus_per_host;
    // Philly's sizes and the 12-16 workers, as far as the cluster
    // holds them, and the whole cluster when that is smaller. Larger
    // pipelines (GPT-3 over 36 GPUs: 2·(4n + n − 1) boundary transfers an
    // iteration) take minutes under FORESIGHT's per-flow routes.
    let mut sizes: Vec<u32> = vec![1, 2, 4, 8, 12, 16, gpus.min(16)];
    sizes.retain(|&s| s <= gpus);
    sizes.sort_unstable();
    sizes.dedup();
    let workers: Vec<String> = sizes.iter().map(|s| format!("[{s}, 1.0]")).collect();
    let models = ["dlrm", "gpt3", "vgg19", "resnet50", "bert", "camembert"];
    let jobs = rng.random_range(6..=14);
    let load = [0.5, 1.0, 2.0][rng.random_range(0..3)];
    let quoted: Vec<String> = policies.iter().map(|p| format!("{p:?}")).collect();
    let models: Vec<String> = models.iter().map(|m| format!("{m:?}")).collect();
    format!(
        "name = \"generated-{seed}\"\nseeds = [{seed}]\npolicies = [{}]\n\
         [topology.leaf_spine]\nracks = {racks}\nhosts_per_rack = {hosts_per_rack}\nspines = {spines}\n\
         gpus_per_host = {gpus_per_host}\ngpu_type = \"v100\"\nhost_gbps = {host_gbps}\nuplink_gbps = {uplink_gbps}\n\
         [workload]\ngenerator = \"poisson\"\njobs = {jobs}\nload = {load}\n\
         [workload.mix]\nmodels = [{}]\nworkers = [{}]\niterations = [20, 60]\nhigh_priority_fraction = 0.25\n\
         [sim]\njitter = 0.02\nmax_time_s = 20000\n",
        quoted.join(", "),
        models.join(", "),
        workers.join(", "),
    )
}

#[test]
fn every_policy_survives_generated_poisson_workloads_on_leaf_spines() {
    let cases: u64 = std::env::var("ORRERY_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(12);
    let policies = policies();
    assert!(policies.len() > 30, "{policies:?}");
    for seed in 1..=cases {
        let text = case(seed, &policies);
        let experiment = parse("generated.toml", &text).unwrap_or_else(|e| panic!("case {seed}: {e}\n{text}"));
        let summary = experiment
            .run(Path::new("."), |_, _, _, _, _| {})
            .unwrap_or_else(|e| panic!("case {seed} failed: {e}\n{text}"));
        assert_eq!(summary.runs.len(), policies.len(), "case {seed}");
        for run in &summary.runs {
            // Every job fits the cluster, and the time limit is hours past
            // the last arrival: every job finishes. Except under a required
            // topology domain (TAS required, Volcano's HyperNodes): a gang
            // larger than every rack waits for ever there, as Kueue and
            // Volcano leave it unschedulable (the constraints are tested in
            // `orrery_policy::topology_aware`); it must not panic.
            let m = &run.metrics;
            if run.policy.starts_with("tas-required:") || run.policy.starts_with("hypernode:") {
                continue;
            }
            assert_eq!(
                m.finished, m.jobs,
                "case {seed}, {}: {} of {} jobs finished\n{text}",
                run.policy, m.finished, m.jobs
            );
        }
    }
}

/// Writes the generated cases as files, for `orrery run` (`cargo test --release
/// -p orrery-lab --test lab -- --ignored write_cases`).
#[test]
#[ignore = "writes files for inspection"]
fn write_cases() {
    let dir = std::env::temp_dir().join("orrery-generated");
    std::fs::create_dir_all(&dir).expect("temp dir");
    for seed in 1..=12 {
        std::fs::write(dir.join(format!("case-{seed}.toml")), case(seed, &policies())).expect("write");
    }
}

#[test]
fn every_transport_model_runs_generated_workloads_to_the_end() {
    // Each congestion control over each queueing (orrery_sim::transport) on
    // a generated case: every job finishes, no policy's decision is refused.
    let policies: Vec<String> = ["fifo", "themis+cassini:measured", "orrery"].map(String::from).to_vec();
    for transport in ["reno", "cubic", "bbr", "dcqcn", "mltcp-reno"] {
        for queueing in ["tail-drop", "fair"] {
            let text = format!(
                "{}[network]\ntransport = \"{transport}\"\nqueueing = \"{queueing}\"\nbase_rtt_us = 20\n",
                case(3, &policies)
            );
            let experiment = parse("generated.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"));
            let summary = experiment
                .run(Path::new("."), |_, _, _, _, _| {})
                .unwrap_or_else(|e| panic!("{transport}/{queueing} failed: {e}\n{text}"));
            for run in &summary.runs {
                let m = &run.metrics;
                assert_eq!(
                    m.finished, m.jobs,
                    "{transport}/{queueing}, {}: {} of {} jobs",
                    run.policy, m.finished, m.jobs
                );
                assert_eq!(run.invalid_decisions, 0, "{transport}/{queueing}, {}", run.policy);
            }
        }
    }
}
