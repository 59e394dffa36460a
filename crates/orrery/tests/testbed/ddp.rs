//! Two real PyTorch DDP jobs: CASSINI's shift holds and gains what in
//! step loses.

use crate::harness::*;

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

/// A job's series `key` of a run's measured.json (`start_ms`, `comm_ms`, ...).
fn numbers(job: &serde_json::Value, key: &str) -> Vec<f64> {
    job[key].as_array().expect(key).iter().filter_map(|v| v.as_f64()).collect()
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
    let windows: Vec<Vec<(f64, f64)>> = jobs
        .iter()
        .map(|job| {
            let (start, duration, comm) =
                (numbers(job, "start_ms"), numbers(job, "duration_ms"), numbers(job, "comm_ms"));
            start.iter().zip(&duration).zip(&comm).map(|((s, d), c)| (s + d - c, s + d)).collect()
        })
        .collect();
    jobs.iter()
        .enumerate()
        .map(|(j, job)| {
            let comm = numbers(job, "comm_ms");
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

/// The jobs' mean iteration, waits included, after each one's first
/// `skip` measured iterations, ms.
fn settled_mean_ms(measured: &serde_json::Value, skip: usize) -> f64 {
    let jobs = measured["jobs"].as_array().expect("jobs");
    let means: Vec<f64> = jobs
        .iter()
        .map(|job| {
            let it = numbers(job, "iteration_ms");
            let settled = it.get(skip..).filter(|s| !s.is_empty()).expect("iterations after the first ten");
            settled.iter().sum::<f64>() / settled.len() as f64
        })
        .collect();
    means.iter().sum::<f64>() / means.len() as f64
}

#[test]
fn two_real_ddp_jobs_keep_cassinis_shift_and_gain_what_in_step_loses() {
    let Some(_turn) = turn_alone() else { return };
    if torch_python().is_none() {
        eprintln!("skipped: no python3 here imports torch (.ci/run installs Debian's python3-torch)");
        return;
    }
    judged_over_starts("the DDP pair", caught(ddp_pair_start));
}

/// One start of the DDP pair: each job alone, the pair in step and
/// shifted, judged on the shift; a failed assertion is the start's miss.
fn ddp_pair_start() {
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
    let shape = json(&out.path().join("shape.json"));
    assert_eq!(shape["gradient_bytes"].as_f64(), Some(2.0 * (1024.0 * 1024.0 + 1024.0) * 4.0), "{shape}");
    assert!(shape["compute_ms"].as_f64().is_some_and(|c| c >= 0.9 * 250.0), "{shape}");
    let alone_comm = shape["comm_ms"].as_f64().expect("comm_ms");
    assert!(alone_comm > 50.0, "{shape}");
    let measured = json(&out.path().join("pinned_cassini/measured.json"));
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
    // converged from DDP's slow first iterations; docs/results.md), its
    // waits included, after the same first ten iterations as the
    // collisions: a job whose ranks come up in the other's all-reduce
    // collides until CASSINI's first re-alignment, which needs both jobs'
    // measured phases, and their first reports follow DDP's warm-up. With
    // a CPU-bound process beside the test (2026-12-06, 14 starts) one
    // start ran 1.085x its time alone over all 46 iterations, 1.026x after
    // the first ten, none of them collided; the two whose rings collided
    // after the first ten (a build was running too) 1.108x and 1.112x;
    // the other eleven 0.963-1.044x. Unshifted and
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
    let settled = settled_mean_ms(&measured, 10);
    assert!(
        settled < 1.08 * alone,
        "after the first ten iterations the shifted pair ran {settled:.1} ms an iteration (all {:.1} ms) against \
         {alone:.1} ms alone in the simulator ({}); alignments {}",
        pair("pinned+cassini") / 2.0,
        breakdown(&measured, &shape),
        alignments(&measured)
    );
    let in_step = json(&out.path().join("pinned_in-step/measured.json"));
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
    let (starts, delays) = (numbers(b, "start_ms"), numbers(b, "delay_ms"));
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
