//! A real pipeline × data-parallel pair: the job alone against its
//! model, and CASSINI's shift.

use crate::harness::*;

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
    let shape = json(&out.path().join("shape.json"));
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
        let measured = json(&path);
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
