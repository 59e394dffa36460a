//! Emulated workers (`orrery worker`) on real TCP: CASSINI's pair and
//! Metronome's S2, side by side.

use crate::harness::*;

/// CASSINI's pair and Metronome's S2, each on its own namespaces with
/// emulated workers, run side by side in one test, so that they overlap
/// whatever order the harness's two threads take the tests in: as two
/// tests, a thread waiting for the testbed alone (the throughput and DDP
/// tests) beside one of them left the other to run after it (100 s more
/// in one CI run). Each part asserts its own property; a failure names the
/// part. Each part is judged over starts, as the DDP and pipeline pairs
/// are: with no other test on the machine, the CASSINI part once measured
/// job a alone at a median of 412.6 ms, 1.16 times the model, and held in
/// the run right after (380 ms alone).
#[test]
fn cassini_and_metronome_pairs_on_real_tcp_side_by_side() {
    let Some(_turn) = turn_alone() else { return };
    let parts: [(&'static str, fn()); 2] = [
        ("CASSINI's pair", cassinis_pair_on_real_tcp_against_the_simulator),
        ("Metronome's paced pair", metronomes_paced_pair_stays_out_of_step_on_real_tcp),
    ];
    let running: Vec<_> = parts
        .into_iter()
        .map(|(name, part)| {
            let judged = move || judged_over_starts(name, caught(part));
            (name, std::thread::Builder::new().name(name.into()).spawn(judged).expect("a thread"))
        })
        .collect();
    let failed: Vec<&str> = running.into_iter().filter_map(|(name, t)| t.join().is_err().then_some(name)).collect();
    assert!(failed.is_empty(), "failed: {failed:?} (their panics are above)");
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

/// The median of a measured job's iterations, ms.
fn median_iteration_ms(job: &serde_json::Value) -> f64 {
    let mut ms: Vec<f64> =
        job["iteration_ms"].as_array().expect("iteration_ms").iter().filter_map(|v| v.as_f64()).collect();
    ms.sort_by(f64::total_cmp);
    ms[ms.len() / 2]
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
                // Each host's TCP headers, for the retransmissions (tcpdump).
                "--pcap",
            ],
        ]
        .concat(),
        180,
    );

    let rows = read_compare(&out.path().join("compare.csv"));
    let get = |policy: &str, job: &str| rows[&(policy.to_string(), job.to_string())];
    let measured_of = |policy: &str| -> serde_json::Value {
        let path = out.path().join(policy.replace('+', "_")).join("measured.json");
        json(&path)
    };
    let shifted = measured_of("pinned+cassini");
    let median_ms = |job: &str| {
        median_iteration_ms(
            shifted["jobs"].as_array().expect("jobs").iter().find(|j| j["id"] == job).expect("the job ran"),
        )
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
    // contended ~441 ms it would show if the two ran together: the median
    // of its six iterations alone. Not their mean (compare.csv's
    // `alone_testbed_ms`), which one stalled iteration moves: a fresh-clone
    // CI run on a slow machine (2026-12-03) failed at a mean of 409.8 ms,
    // 1.153 times the model, where runs alone here give 372-389 ms an
    // iteration. The mean is held within 1.25. Both policies gave the jobs
    // the same hosts, so they were measured once.
    let alone_runs = measured_of("pinned/alone");
    let text = std::fs::read_to_string(out.path().join("compare.csv")).expect("compare.csv");
    let header: Vec<&str> = text.lines().next().expect("header").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let num = |name: &str| f[col(name)].parse::<f64>().expect("number");
        let (mean, model) = (num("alone_testbed_ms"), num("isolated_ms"));
        assert!(
            (0.98..1.25).contains(&(mean / model)),
            "{line}: alone on the testbed {mean:.1} ms vs model {model:.1}"
        );
        let job = f[col("job")];
        let run = alone_runs["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .find(|j| j["id"].as_str().is_some_and(|id| id.starts_with(&format!("{job}-alone-"))))
            .expect("the job ran alone");
        assert!(run["iteration_ms"].as_array().is_some_and(|ms| ms.len() >= 5), "{job} alone: {run}");
        let median = median_iteration_ms(run);
        assert!(
            (0.98..1.15).contains(&(median / model)),
            "{job}: alone on the testbed, median {median:.1} ms (mean {mean:.1}) vs model {model:.1}: {}",
            run["iteration_ms"]
        );
    }
    assert!(!out.path().join("pinned_cassini/alone").exists(), "the pinned run's placements were reused");
    let summary = json(&out.path().join("summary.json"));
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
    let replayed = json(&out.path().join("summary.json"));
    for i in 0..2 {
        assert_eq!(replayed[i]["replay_mean_iter_ms"], summary[i]["replay_mean_iter_ms"], "policy {i}");
        assert_eq!(replayed[i]["run_mean_iter_ms"], summary[i]["run_mean_iter_ms"], "policy {i}");
    }
    // The figures and the per-run data are there.
    for f in ["compare.md", "pinned/iterations.svg", "pinned/links.svg", "pinned_cassini/measured.json"] {
        assert!(out.path().join(f).exists(), "{f} missing");
    }
    // The shaped uplink never carried more than its rate (tc holds it).
    let measured = json(&out.path().join("pinned/measured.json"));
    let links = measured["links"].as_array().expect("links");
    let uplink =
        links.iter().find(|l| l["from"] == "leaf0" && l["to"] == "spine0").expect("the uplink carried traffic");
    let peak =
        uplink["utilisation"].as_array().expect("series").iter().filter_map(|p| p[1].as_f64()).fold(0.0, f64::max);
    assert!(peak > 0.3 && peak < 1.05, "uplink peak utilisation {peak}");
    // The hosts' TCP counters were read at the run's end: started in step,
    // the two rings' first all-reduces overflow the uplink's 128 KiB FIFO,
    // so segments were sent again, and every timeout resends at least one.
    let tcp = &measured["tcp"];
    let (timeouts, resent) = (tcp["timeouts"].as_u64(), tcp["retransmitted_segments"].as_u64());
    assert!(
        resent.is_some_and(|r| r > 0 && timeouts.is_some_and(|t| r >= t)),
        "the unshifted pair's TCP counters: {tcp}"
    );
    // The packet captures (`--pcap`) find the retransmissions the counters
    // count: as many fired by the timer as the kernel's TCPTimeouts (each
    // after at least Linux's least timeout of silence on its connection),
    // and bytes sent again.
    let capture = &measured["retransmits"];
    let timed_out = capture["timed_out"].as_array().expect("the run's captures were read");
    assert_eq!(Some(timed_out.len() as u64), timeouts, "the capture's timeouts {capture} against the kernel's {tcp}");
    assert!(timed_out.iter().all(|t| t["silent_ms"].as_f64().is_some_and(|ms| ms >= 199.0)), "{capture}");
    assert!(capture["bytes_resent"].as_u64().is_some_and(|b| b > 0), "nothing sent again in the capture: {capture}");
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
    let measured = json(&out.path().join("metronome/measured.json"));
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
