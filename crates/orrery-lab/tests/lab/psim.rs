//! A psim scenario imported and run in orrery, next to psim's own numbers.
//!
//! `experiments/psim/manual-1` holds psim's hand-made placement
//! `generate_manual_1_placement_file` (FORESIGHT's `run/algo/placement.py`:
//! 16 machines in racks of 4, four 4-machine rings that each cross two rack
//! boundaries), run for 6 iterations with a timing file (delays before some
//! iterations, job 3 at half rate in iterations 2 and 3) and two routing
//! files: `apart` puts jobs 1 and 3 on spine 0 and jobs 2 and 4 on spine 1,
//! so no two jobs meet; `spine0` puts every cross-rack flow on spine 0.
//! `psim-iterations.json` holds psim's iteration end times for both, from
//! psim (commit 3dd90d5) built and run on this machine with step 0.01.

use orrery_lab::experiment::parse;
use orrery_lab::psim::{PsimError, PsimFiles, PsimNetwork, Units, import};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/psim/manual-1")
}

fn network() -> PsimNetwork {
    PsimNetwork { machine_count: 16, ft_server_per_rack: 4, ft_core_count: 2, ..PsimNetwork::default() }
}

/// Each job's iteration end times in orrery, in psim's time units.
fn orrery_ends(routing: &str) -> BTreeMap<String, Vec<f64>> {
    let files = PsimFiles {
        placement: dir().join("placement.json"),
        timing: Some(dir().join("timing.json")),
        routing: Some(dir().join(routing)),
    };
    let imported = import("manual-1", &files, &network(), Units::default()).expect("imports");
    assert!(imported.notes.iter().all(|n| !n.contains("not routed")), "{:?}", imported.notes);
    let mut e = parse("manual-1", &imported.toml).expect("the import is a valid experiment");
    e.iterations = true;
    let s = e.run(&dir(), |_, _, _, _, _| {}).expect("runs");
    assert_eq!(s.runs[0].invalid_decisions, 0);
    let mut ends: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in &s.runs[0].iterations {
        ends.entry(r.job.clone()).or_default().push(r.end_s * 1e3); // 1 unit = 1 ms
    }
    ends
}

fn psim_ends(variant: &str) -> BTreeMap<String, Vec<f64>> {
    let text = std::fs::read_to_string(dir().join("psim-iterations.json")).expect("psim's numbers");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    serde_json::from_value(v["iteration_end"][variant].clone()).expect("job -> ends")
}

/// Largest relative gap between the two, over every iteration of every job.
fn worst_gap(ours: &BTreeMap<String, Vec<f64>>, theirs: &BTreeMap<String, Vec<f64>>) -> f64 {
    assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>());
    let mut worst: f64 = 0.0;
    for (job, ends) in theirs {
        assert_eq!(ours[job].len(), ends.len(), "job {job}: iterations");
        for (a, b) in ours[job].iter().zip(ends) {
            worst = worst.max((a - b).abs() / b);
        }
    }
    worst
}

#[test]
fn jobs_routed_apart_run_as_psim_runs_them() {
    // No two jobs share a link, so each iteration is exact by hand: job 3's
    // is 2·75 of compute + 2·3·2,500/100 = 150 of all-reduce = 300, and 450
    // at half rate; job 2 waits 30 first: 30 + 550 + 150 = 730.
    let (ours, theirs) = (orrery_ends("routing-apart.json"), psim_ends("apart"));
    assert!((ours["3"][0] - 300.0).abs() < 1e-6 && (ours["3"][2] - ours["3"][1] - 450.0).abs() < 1e-6);
    assert!((ours["2"][0] - 730.0).abs() < 1e-6, "{:?}", ours["2"]);
    let gap = worst_gap(&ours, &theirs);
    assert!(gap < 1e-6, "worst gap {:.4}%\norrery {ours:?}\npsim {theirs:?}", gap * 100.0);
}

#[test]
fn jobs_crowded_on_one_spine_slow_down_as_in_psim() {
    let (ours, theirs) = (orrery_ends("routing-spine0.json"), psim_ends("spine0"));
    let apart = psim_ends("apart");
    // Crowding costs something in both simulators (psim: job 1 ends at 3,239 instead of 3,000).
    assert!(theirs["1"][5] > apart["1"][5] * 1.05);
    let gap = worst_gap(&ours, &theirs);
    eprintln!("spine0: worst gap {:.3}%\norrery {ours:?}\npsim {theirs:?}", gap * 100.0);
    assert!(gap < 0.02, "worst gap {:.3}%\norrery {ours:?}\npsim {theirs:?}", gap * 100.0);
}

#[test]
fn a_bad_file_is_named_with_its_entry_and_field() {
    let tmp_guard = tempfile::tempdir().expect("temp dir");
    let tmp = tmp_guard.path().to_path_buf();
    std::fs::create_dir_all(&tmp).expect("tmp");
    let placement = tmp.join("placement.json");
    let write = |text: &str| std::fs::write(&placement, text).expect("write");
    let files = PsimFiles { placement: placement.clone(), ..PsimFiles::default() };
    let job = |machines: &str| {
        format!(
            r#"{{"job_id": 7, "machine_count": 2, "comm_size": 100, "comp_size": 10, "layer_count": 1, "iter_count": 3, "machines": {machines}}}"#
        )
    };
    write(&format!("[{}]", job("[0, 99]")));
    let err = import("t", &files, &network(), Units::default()).expect_err("machine 99 of 16");
    assert!(matches!(&err, PsimError::Field { entry: 0, job_id: 7, field, .. } if field == "machines"), "{err}");
    assert!(err.to_string().contains("expected machine ids 0 to 15, found 99"), "{err}");
    // Numbers out of their declared ranges, named by their path (issue 71).
    write(&format!("[{}]", job("[0, 1]").replace("\"layer_count\": 1", "\"layer_count\": 0")));
    let err = import("t", &files, &network(), Units::default()).expect_err("no layers");
    assert!(
        err.to_string().ends_with("entry 0 (job_id 7): layer_count: expected an integer from 1 to 10000, found 0"),
        "{err}"
    );
    write(&format!("[{}]", job("[0, -1]")));
    let err = import("t", &files, &network(), Units::default()).expect_err("machine -1");
    assert!(
        err.to_string().ends_with("entry 0 (job_id 7): machines[1]: expected an integer from 0 to 16384, found -1"),
        "{err}"
    );
    write(&format!("[{}, {}]", job("[0, 1]"), job("[1, 2]").replace("\"job_id\": 7", "\"job_id\": 8")));
    let err = import("t", &files, &network(), Units::default()).expect_err("machine 1 twice");
    assert!(err.to_string().contains("entry 1 (job_id 8): machines: expected machines no other job uses"), "{err}");
    write("[{\"job_id\": 1,");
    let err = import("t", &files, &network(), Units::default()).expect_err("truncated");
    assert!(
        err.to_string().contains("placement.json: EOF while parsing") && err.to_string().contains("line 1"),
        "{err}"
    );
    let odd = PsimNetwork { machine_count: 18, ..network() };
    write(&format!("[{}]", job("[0, 1]")));
    let err = import("t", &files, &odd, Units::default()).expect_err("18 machines in racks of 4");
    assert!(err.to_string().starts_with("--machine-count: expected a multiple of"), "{err}");
    let missing = PsimFiles { placement: tmp.join("none.json"), ..PsimFiles::default() };
    let err = import("t", &missing, &network(), Units::default()).expect_err("no such file");
    assert!(err.to_string().ends_with("none.json: cannot read it"), "{err}");
    assert!(std::error::Error::source(&err).is_some(), "the I/O error is its source");
    std::fs::remove_dir_all(&tmp).ok();
}
