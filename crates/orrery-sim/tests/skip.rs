//! The fast-forward of undisturbed jobs changes no reported metric by more
//! than 2% (issue 3's tolerance), on scenarios where jobs contend, where they
//! are time-shifted into interleaving, and with jitter.

use orrery_sim::experiment::{Run, parse};
use std::path::Path;

fn runs(toml: &str, skip: bool) -> Vec<Run> {
    let mut e = parse("test", toml).expect("valid experiment");
    e.sim.skip = skip;
    e.run(Path::new("."), |_, _, _, _, _| {}).expect("runs").runs
}

/// Every metric within 2% (relative), or within `floor` when both are tiny.
fn assert_close(a: &Run, b: &Run, scenario: &str) {
    let ja = serde_json::to_value(&a.metrics).expect("json");
    let jb = serde_json::to_value(&b.metrics).expect("json");
    for (k, va) in ja.as_object().expect("object") {
        if k.starts_with("decision_ms") {
            continue; // wall-clock, not simulated
        }
        let (x, y) = (va.as_f64().unwrap_or(0.0), jb[k].as_f64().unwrap_or(0.0));
        let floor = match k.as_str() {
            "excess_gbit" => 1.0,
            "congested_link_s" => 0.1,
            _ => 1e-9,
        };
        let ok = (x - y).abs() <= 0.02 * x.abs().max(y.abs()) || (x - y).abs() <= floor;
        assert!(ok, "{scenario} / {}: {k} {x} (skip) vs {y} (no skip)", a.policy);
    }
}

const TWO_RACKS: &str = r#"
[topology.leaf_spine]
racks = 2
hosts_per_rack = 4
spines = 1
gpus_per_host = 1
gpu_type = "a100"
host_gbps = 50.0
uplink_gbps = 50.0
"#;

#[test]
fn contended_random_placement() {
    // Random placement scatters rings over the racks so they share uplinks.
    let toml = format!(
        "name = \"contended\"\npolicies = [\"fifo\", \"random\"]\nseeds = [3]\n{TWO_RACKS}\n[workload]\ngenerator = \"poisson\"\njobs = 24\nload = 0.9\n[workload.mix]\nmodels = [\"vgg19\", \"resnet50\", \"bert\"]\nworkers = [[2, 1.0], [3, 1.0]]\niterations = [200, 400]\n"
    );
    let (with, without) = (runs(&toml, true), runs(&toml, false));
    for (a, b) in with.iter().zip(&without) {
        assert_close(a, b, "contended");
    }
    assert!(with.iter().any(|r| r.skipped_iterations > 0), "the fast-forward must have been used");
}

#[test]
fn time_shifted_snapshot_with_jitter() {
    // A snapshot: all jobs at t = 0 under FIFO, with 2% jitter so phases drift.
    let toml = format!(
        "name = \"snapshot\"\npolicies = [\"fifo\", \"ideal\"]\n{TWO_RACKS}\n[workload]\ngenerator = \"snapshot\"\njobs = 6\n[workload.mix]\nmodels = [\"vgg16\", \"vgg19\"]\nworkers = [[2, 1.0]]\niterations = [300, 600]\n[sim]\njitter = 0.02\n"
    );
    let (with, without) = (runs(&toml, true), runs(&toml, false));
    for (a, b) in with.iter().zip(&without) {
        assert_close(a, b, "snapshot");
    }
    assert!(with.iter().any(|r| r.skipped_iterations > 0));
}
